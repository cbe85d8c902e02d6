"""The progress bar the CLI adds when the config names none: Lightning's TQDM bar with the env-step
count shown as an integer (`env_steps=983040`, not tqdm's `9.83e+5`) and SPS rounded to whole steps."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.progress_bar import ProgressBar

INTEGER_METRICS = ("env_steps", "SPS")  # counts and rates of env steps: whole numbers read best


class EnvStepsProgressBar(TQDMProgressBar):
    """`TQDMProgressBar` that shows `env_steps` and `SPS` as integers."""

    def get_metrics(self, trainer, pl_module) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        for key in INTEGER_METRICS:
            if isinstance(items.get(key), float):
                items[key] = int(round(items[key]))
        return items


def with_progress_bar(trainer_config: dict[str, Any]) -> list[Any]:
    """The trainer's callbacks plus an `EnvStepsProgressBar`, unless the progress bar is switched off
    or the config already names one (Lightning refuses two, and a bar with `enable_progress_bar: false`)."""
    callbacks = trainer_config.get("callbacks") or []
    callbacks = list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
    if trainer_config.get("enable_progress_bar") is False or any(isinstance(c, ProgressBar) for c in callbacks):
        return callbacks
    return [*callbacks, EnvStepsProgressBar()]
