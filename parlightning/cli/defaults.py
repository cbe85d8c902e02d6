"""Callbacks the CLI adds when the config names none of their kind:
- a progress bar: Lightning's TQDM bar with the env-step count as an integer (`env_steps=983040`, not
  tqdm's `9.83e+5`) and SPS rounded to whole steps;
- a checkpoint callback that writes `<log_dir>/checkpoints/last.ckpt` every iteration (Lightning's
  default writes `epoch=N-step=M.ckpt`, a name that changes every iteration), so `--ckpt_path .../last.ckpt`, evaluate and export work
  after any config that checkpoints."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar
from lightning.pytorch.callbacks.progress.progress_bar import ProgressBar

INTEGER_METRICS = ("env_steps", "SPS")  # counts and rates of env steps: whole numbers read best


class LastCheckpoint(ModelCheckpoint):
    """`ModelCheckpoint(save_last=True, save_top_k=0)` that writes `last.ckpt` at the end of every
    iteration. Lightning (2.6) writes `last` at an epoch's end only after a top-k save there, so with
    `save_top_k=0` it wrote nothing until fit ended: a run stopped by SIGTERM or a kill had no
    checkpoint to resume."""

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        # skipped when the parent saved this step already (a Lightning that writes `last` itself)
        if not self._should_skip_saving_checkpoint(trainer) and self._should_save_on_train_epoch_end(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))


class EnvStepsProgressBar(TQDMProgressBar):
    """`TQDMProgressBar` that shows `env_steps` and `SPS` as integers."""

    def get_metrics(self, trainer, pl_module) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        for key in INTEGER_METRICS:
            if isinstance(items.get(key), float):
                items[key] = int(round(items[key]))
        return items


def default_callbacks(trainer_config: dict[str, Any]) -> list[Any]:
    """The trainer's callbacks plus an `EnvStepsProgressBar` and a `LastCheckpoint(save_last=True, save_top_k=0)`,
    each unless switched off (`enable_progress_bar` / `enable_checkpointing: false`: Lightning refuses
    the callback then) or already named in the config (Lightning refuses two progress bars)."""
    callbacks = trainer_config.get("callbacks") or []
    callbacks = list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
    extra = []
    if trainer_config.get("enable_progress_bar") is not False and not any(isinstance(c, ProgressBar) for c in callbacks):
        extra.append(EnvStepsProgressBar())
    if trainer_config.get("enable_checkpointing") is not False and not any(
            isinstance(c, ModelCheckpoint) for c in callbacks):
        extra.append(LastCheckpoint(save_last=True, save_top_k=0))  # last.ckpt only: one file, every iteration
    return [*callbacks, *extra]
