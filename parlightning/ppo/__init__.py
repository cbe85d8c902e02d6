"""The PPO algorithm on Lightning: the clipped loss, `PPOModule` and `RolloutDataModule`."""
