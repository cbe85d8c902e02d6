"""`Rollout`: what one round of collection produced, handed to callbacks and the learner."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from torch import Tensor

from parlightning.buffer import RolloutBuffer
from parlightning.envs.base import EpisodeParts


@dataclass
class Rollout:
    """One round: the filled buffer, every episode that ended in it, and stats to log.

    `stats` maps metric names to 0-dim tensors; the module logs them on the env-step axis.
    `context` is the round's `parlightning.collection.RoundContext`.
    """

    round_index: int
    buffer: RolloutBuffer
    episode_return: Tensor  # [E]
    episode_length: Tensor  # [E]
    episodes: Optional[EpisodeParts]  # [E] each, None for worlds without tasks
    env_steps: int  # global env steps after this rollout (all ranks)
    # The policy version that collected it, in PPO iterations (policy updates) of the oldest weights
    # that acted in it, whatever the schedule: lock-step round v is collected by version v; under a
    # lag budget k, by versions v-k .. v (`buffer.versions` has each step's).
    policy_version: int
    stats: dict[str, Tensor] = field(default_factory=dict)
    context: Any = None  # the `RoundContext` it was issued with (round, shard, plan and unit, λ position)
