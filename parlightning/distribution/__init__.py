"""Distribution across ranks: strategies (DP / CP / TP), the round planner, task samplers and rank-agreed counters."""
