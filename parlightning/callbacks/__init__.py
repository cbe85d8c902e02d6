"""Lightning callbacks: rollout-level hooks and the built-in PARL callbacks."""

from parlightning.callbacks.base import RolloutCallback, rollout_callbacks

__all__ = ["RolloutCallback", "rollout_callbacks"]
