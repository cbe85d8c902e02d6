"""`LoggedConfig`: LightningCLI's `SaveConfigCallback` that also hands the resolved config to every
logger (TensorBoard, CSV, MLflow, W&B) as flat `section.key` hyperparameters, so a run's settings
travel with its metrics and not only as `config.yaml` beside them.

Where `config.yaml` goes: into each logger's own run folder. TensorBoard and CSV have one
(`<save_dir>/<name>/version_N/`); MLflow's run gets it as an artifact (`<run>/artifacts/config.yaml`),
never the store root that every run shares (Lightning writes it to `trainer.log_dir`, which for
MLflow is the store root, and each run overwrote the last). A logger with neither (W&B) keeps the
config as its hyperparameters only. With no logger it goes to `trainer.log_dir`, as in Lightning."""

from __future__ import annotations

import os
import tempfile
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


def run_folder(logger: Any) -> str | None:
    """The logger's own per-run folder (TensorBoard, CSV: `version_N`), or None (MLflow, W&B)."""
    return getattr(logger, "log_dir", None)


def logs_artifacts(logger: Any) -> bool:
    """MLflow: a run id and a client that stores files with the run."""
    return getattr(logger, "run_id", None) is not None and callable(getattr(logger.experiment, "log_artifact", None))


class LoggedConfig(SaveConfigCallback):
    """Writes `config.yaml` into every logger's run (rank 0) and logs the config as hparams."""

    def setup(self, trainer, pl_module, stage: str) -> None:
        if trainer.logger is None or run_folder(trainer.logger) is not None:
            super().setup(trainer, pl_module, stage)  # Lightning's: config.yaml in trainer.log_dir (the run folder)
            return
        if self.already_saved:  # the first logger has no run folder: trainer.log_dir is shared by every run
            return
        if trainer.is_global_zero:
            self.save_config(trainer, pl_module, stage)
            self.already_saved = True
        self.already_saved = trainer.strategy.broadcast(self.already_saved)  # every rank, as Lightning does

    def save_config(self, trainer, pl_module, stage: str) -> None:
        if not trainer.loggers:  # `trainer.logger: false`: nobody to hand it to (config.yaml is still written)
            return
        text = self.parser.dump(self.config, skip_none=False)
        config = yaml.load(text, Loader=_SafeLoader)
        params = flatten({k: v for k, v in config.items() if k != "config"})
        first = run_folder(trainer.logger)  # where setup() wrote it (trainer.log_dir; not read here: it broadcasts)
        written = os.path.abspath(first) if first is not None else None
        for logger in trainer.loggers:
            logger.log_hyperparams(params)
            self._save_with_run(logger, text, written)

    def _save_with_run(self, logger: Any, text: str, written: str | None) -> None:
        folder = run_folder(logger)
        if folder is not None:
            if os.path.abspath(folder) != written:  # a second logger with its own folder (TensorBoard + CSV)
                os.makedirs(folder, exist_ok=True)
                with open(os.path.join(folder, self.config_filename), "w") as f:
                    f.write(text)
        elif logs_artifacts(logger):
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, self.config_filename)
                with open(path, "w") as f:
                    f.write(text)
                logger.experiment.log_artifact(logger.run_id, path)
