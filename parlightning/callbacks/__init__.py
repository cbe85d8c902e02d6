"""Lightning callbacks: rollout-level hooks and the built-in PARL callbacks."""

from parlightning.callbacks.base import RolloutCallback, rollout_callbacks
from parlightning.callbacks.parl import CriticalStepsMonitor, PARLAnnealing
from parlightning.callbacks.planner import StrategyPlanner, find_planner

__all__ = [
    "CriticalStepsMonitor", "PARLAnnealing", "RolloutCallback", "StrategyPlanner", "find_planner", "rollout_callbacks",
]
