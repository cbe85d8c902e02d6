"""`RolloutCallback`: Lightning callback with rollout-level hooks the data module calls.

The epoch hooks do not fit rollout work: Lightning calls `iter()` on the dataloader before
`on_train_epoch_start`, but the rollout is collected after it, inside the loader, when the first
minibatch is requested, and no epoch hook runs between collection and the first update. These
hooks run during collection, where planning, λ and episode bookkeeping belong. New paradigms
subclass this.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lightning.pytorch as pl
from torch import Tensor

from parlightning.envs.base import EpisodeParts

if TYPE_CHECKING:
    from parlightning.rollout import Rollout


class RolloutCallback(pl.Callback):
    """Hooks called by `RolloutDataModule` while it collects, in this order per round."""

    def on_rollout_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", round_index: int) -> None:
        """Before the first env step of a round: plan this rank's shard, set λ, ..."""

    def on_episodes_end(
        self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", task_ids: Tensor, parts: EpisodeParts
    ) -> None:
        """Once per round, batched over every episode that ended in it (`task_ids` are bank
        indices [E]): record samplers, observe strategies, update metrics."""

    def on_rollout_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", rollout: "Rollout") -> None:
        """After GAE: add 0-dim tensors to `rollout.stats` to have them logged at this env step."""


def rollout_callbacks(trainer: "pl.Trainer | None") -> list[RolloutCallback]:
    """The trainer's callbacks that take rollout hooks."""
    if trainer is None:
        return []
    return [cb for cb in trainer.callbacks if isinstance(cb, RolloutCallback)]
