"""Reading results: statistics, TensorBoard scalars, episode traces, stage blame."""
