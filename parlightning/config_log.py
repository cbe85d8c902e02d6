"""`LoggedConfig`: LightningCLI's `SaveConfigCallback` that also hands the resolved config to every
logger (TensorBoard, CSV, MLflow, W&B) as flat `section.key` hyperparameters, so a run's settings
travel with its metrics and not only as `config.yaml` beside them."""

from __future__ import annotations

from typing import Any

import yaml
from lightning.pytorch.cli import SaveConfigCallback

_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's when PyYAML has it: the same result, faster


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """{"model": {"lr": 1e-3}} -> {"model.lr": 1e-3}; lists and None become their YAML text."""
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    key = prefix[:-1]
    if tree is None or isinstance(tree, (list, tuple)):
        return {key: yaml.safe_dump(tree, default_flow_style=True).strip().removesuffix("...").strip()}
    return {key: tree}


class LoggedConfig(SaveConfigCallback):
    """Writes `config.yaml` to the log dir (as LightningCLI does) and logs the config as hparams (rank 0)."""

    def save_config(self, trainer, pl_module, stage: str) -> None:
        if not trainer.loggers:  # `trainer.logger: false`: nobody to hand it to (config.yaml is still written)
            return
        config = yaml.load(self.parser.dump(self.config, skip_none=False), Loader=_SafeLoader)
        params = flatten({k: v for k, v in config.items() if k != "config"})
        for logger in trainer.loggers:
            logger.log_hyperparams(params)
