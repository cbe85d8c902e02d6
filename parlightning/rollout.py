"""`Rollout`: what one round of collection produced, handed to callbacks and the learner."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from torch import Tensor

from parlightning.buffer import RolloutBuffer
from parlightning.envs.base import EpisodeParts


@dataclass
class Rollout:
    """One round: the filled buffer, every episode that ended in it, and stats to log.

    `stats` maps metric names to 0-dim tensors; the module logs them on the env-step axis.
    """

    round_index: int
    buffer: RolloutBuffer
    episode_return: Tensor  # [E]
    episode_length: Tensor  # [E]
    episodes: Optional[EpisodeParts]  # [E] each, None for worlds without tasks
    env_steps: int  # global env steps after this rollout (all ranks)
    policy_version: int  # optimizer steps taken when it was collected
    stats: dict[str, Tensor] = field(default_factory=dict)
