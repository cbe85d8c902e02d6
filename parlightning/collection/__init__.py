"""Rollout collection as three independent choices composed (never a class per combination):

- `step_loop.StepLoop`: env, observation, episode counters, action stream, current tasks; the only
  copy of the step and of the bootstrap values;
- a schedule (`schedules.LockStep`, `schedules.LagBudget(k)`, `schedules.Trajectories(k)`): which
  rounds may be collected with which policy version, the staleness check and correction;
- a transport (`transports.InlineTransport`, `ThreadTransport`, `ProcessTransport`): where the
  step loop runs (the caller, a thread, a child process that runs the step loop itself);
  per-actor collection's own is `trajectories.TrajectoryTransport` (each actor acts when its
  world answers; rounds are assembled from trajectory segments).

`finish.finish_round` turns one collected round into a `Rollout` (hooks, sampler records, PARL
bonus, GAE, stats); `context.RoundContext` is created when a round is issued and travels with it
to its result, so nothing reads "the latest" plan; `collector.Collector` composes them per rank.
See docs/guides/collection.md.
"""

from parlightning.collection.collector import Collector, make_collector
from parlightning.collection.context import RoundContext, RoundHooks, RoundResult
from parlightning.collection.schedules import LagBudget, LockStep, Trajectories
from parlightning.collection.step_loop import STREAMS, StepLoop, stream_seed

__all__ = ["Collector", "LagBudget", "LockStep", "RoundContext", "RoundHooks", "RoundResult", "STREAMS", "StepLoop",
           "Trajectories", "make_collector", "stream_seed"]
