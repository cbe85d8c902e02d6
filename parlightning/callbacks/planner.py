"""`StrategyPlanner`: the callback that names the `ParallelStrategy` in the config and drives the
planner's Lightning-side duties. The planning itself is `parlightning.distribution.planning.
RoundPlanner`, a component the data module owns (`trainer.datamodule.planner`, built from the
strategy of the last `StrategyPlanner` in `trainer.callbacks`, so a later config can swap the
strategy with `callbacks+:`; earlier planners stand aside) and the collector calls with each
round's context. This callback calls it for what Lightning drives: TensorParallel's per-batch
update counters, the last sync at the end of training, checkpoints (under the `StrategyPlanner`
key) and the gradient mask's removal at teardown.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import lightning.pytorch as pl

from parlightning.callbacks.base import RolloutCallback
from parlightning.distribution.planning import RoundPlanner, checked_strategy
from parlightning.distribution.strategies import ParallelStrategy

CHECKPOINT_KEY = "StrategyPlanner"  # the checkpoint entry of the planner in force


def find_planner(trainer: Optional["pl.Trainer"]) -> Optional["RoundPlanner"]:
    """The planner in force: the data module's `RoundPlanner` (None without a StrategyPlanner)."""
    if trainer is None:
        return None
    return getattr(trainer.datamodule, "planner", None)


class StrategyPlanner(RolloutCallback):
    """Plans every round for `trainer.world_size` ranks and sets this rank's shard (through the
    data module's `RoundPlanner`; see the module docstring).

    Args:
        strategy: a `ParallelStrategy` (any class with `name` and `plan`), by `class_path` in
            YAML; default `DataParallel()`.

    `ClusterParallel` statistics and `TensorParallel` counters are all-reduced every round (and
    once more at the end of training); TP also masks the policy's key-table gradient to this
    rank's section (`PPOModule.on_fit_start`) and logs `parallel/updates_delivered` and
    `parallel/section_violations`: per trained minibatch row, the key-table rows the mask keeps
    and rejects. Episodes that end on a task outside their round's shard (started under the
    previous plan) are counted as `parallel/carried_episodes`. `find_planner(trainer).summary()`
    gives the run's totals, the same on every rank.
    """

    def __init__(self, strategy: Optional[ParallelStrategy] = None) -> None:
        self.strategy = checked_strategy(strategy)

    @staticmethod
    def strategy_in_force(callbacks: Sequence[Any]) -> Optional[ParallelStrategy]:
        """The strategy of the last StrategyPlanner in `callbacks` (None without one)."""
        planners = [cb for cb in callbacks if isinstance(cb, StrategyPlanner)]
        return planners[-1].strategy if planners else None

    def _planner(self, trainer: "pl.Trainer") -> Optional["RoundPlanner"]:
        """The data module's planner, if it plans with this callback's strategy (this one is in force)."""
        planner = find_planner(trainer)
        return planner if planner is not None and planner.strategy is self.strategy else None

    def on_train_batch_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", batch: Any,
                             batch_idx: int) -> None:
        """TensorParallel: count the minibatch's per-sample key-table rows that this rank's gradient
        mask keeps (`updates_delivered`) and rejects (`section_violations`); no host sync."""
        planner = self._planner(trainer)
        if planner is not None and isinstance(batch, dict) and "keys" in batch:
            planner.record_updates(batch["keys"], trainer.global_rank)

    def on_train_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        """A last sync (every rank): TP's counters of the final update, so `summary()` agrees."""
        planner = self._planner(trainer)
        if planner is not None:
            device = trainer.strategy.root_device
            planner.final_sync(lambda t: trainer.strategy.reduce(t.to(device), reduce_op="sum").to(t.device))

    def teardown(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        planner = self._planner(trainer)
        if planner is not None:
            planner.remove_mask()

    def on_save_checkpoint(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", checkpoint: dict) -> None:
        planner = self._planner(trainer)
        if planner is not None:  # under its own key: several planners may be listed, one is in force
            checkpoint[CHECKPOINT_KEY] = planner.state_dict()

    def on_load_checkpoint(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", checkpoint: dict) -> None:
        planner = self._planner(trainer)
        if planner is not None and CHECKPOINT_KEY in checkpoint:
            planner.load_state_dict(checkpoint[CHECKPOINT_KEY])

    def __repr__(self) -> str:
        return f"StrategyPlanner({self.strategy!r})"
