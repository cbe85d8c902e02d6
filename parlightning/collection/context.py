"""What travels with one round: its `RoundContext` (made when the round is issued), its
`RoundResult` (what the step loop hands back), and `RoundHooks` (what finishing a round calls
on the trainer side).

Why a context object: with a lag budget k, round v is finished while rounds v+1 .. v+k are
already issued, so any "current" plan, shard, unit or λ on a shared object belongs to another
round by the time round v is finished. Everything a round's finish needs of its issue (the
shard its picks drew from, the plan and this rank's unit, the λ position its bonus uses, the
learner's version when it was released) is frozen into its context at issue and comes back
with its result; a child process receives it with the ticket (it pickles: tensors and tuples).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from torch import Tensor

from parlightning.buffer import RolloutBuffer


@dataclass(frozen=True)
class RoundContext:
    """One round as it was issued.

    round_index: the round (one rollout, one PPO iteration).
    shard: bank indices this rank's picks draw from in this round (None: a world without tasks).
    plan: every rank's `WorkUnit` for this round (empty without a planner); unit: this rank's.
    reward_position: the PARL λ schedules' position when it was issued (None without a reward).
    release_version: the learner's policy version (PPO iterations done) when it was released.
    """

    round_index: int
    shard: Optional[Tensor] = None
    plan: tuple[Any, ...] = ()
    unit: Any = None
    reward_position: Optional[int] = None
    release_version: int = 0


@dataclass
class RoundResult:
    """One collected round, as the step loop returns it (from any transport).

    step_versions: the policy version that acted at each step (PPO iterations).
    next_value, truncated_values: the bootstrap values, from the policy that acted last.
    current_task: each actor's task at the round's end. signals: the sampler's signals at the
    round's end, read by whoever picked (None: read at finish, after the round's records).
    rollout_time: seconds in the step loop; wait_frac: the share of the transport's time it
    waited for this round to be released. stats: what the transport counted while collecting this
    round's data (per-actor collection: dropped trajectories, retries, utilisation), logged with it.
    """

    context: RoundContext
    buffer: RolloutBuffer
    next_value: Tensor
    truncated_values: Tensor
    step_versions: list[int]
    rollout_time: float
    current_task: Optional[Tensor] = None
    signals: Optional[dict[str, Tensor]] = None
    wait_frac: float = 0.0
    stats: dict[str, Tensor] = field(default_factory=dict)  # the collector's own, logged with this round


class RoundHooks:
    """What collection calls on the training side (the data module implements it with its trainer's
    rollout callbacks and strategy); the defaults do nothing, for scripts without a trainer."""

    world_size = 1

    def on_rollout_start(self, round_index: int) -> None:
        """A round is issued (before its context is made: hooks may plan or set λ)."""

    def on_episodes_end(self, task_ids: Tensor, parts: Any) -> None:
        """The episodes that ended in a round being finished."""

    def on_rollout_end(self, rollout: Any) -> None:
        """A round finished into a `Rollout`."""

    def reduce_sum(self, tensor: Tensor) -> Tensor:
        """Sum over ranks (a collective under DDP)."""
        return tensor

    def policy(self) -> Any:
        """The learner's current policy."""
        raise NotImplementedError


StepHook = Callable[[int], Optional[int]]  # before step t: the policy version acting in it (None: unstamped)
