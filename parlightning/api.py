"""The Python API for scripts and notebooks: `from parlightning import fit; fit(config=..., overrides=[...])`
runs exactly what `python -m parlightning.fit` runs and returns the fitted `Trainer`."""

from __future__ import annotations

import os
import sys
import types
from typing import Optional, Sequence, Union

from parlightning.errors import ConfigError

Config = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]], None]


def cli_args(config: Config = None, overrides: Sequence[str] = ()) -> list[str]:
    """`--config` for each file, then the overrides: CLI tokens (`"--model.lr", "1e-3"`) or
    `key=value` items (`"model.lr=1e-3"`, `"trainer.max_epochs=2"`)."""
    files = [] if config is None else [config] if isinstance(config, (str, os.PathLike)) else list(config)
    args = [token for f in files for token in ("--config", os.fspath(f))]
    for item in overrides:
        if not isinstance(item, str):
            raise ConfigError(f"overrides: expected strings like 'model.lr=1e-3' or '--model.lr', got {item!r}")
        args.append(item if item.startswith("-") or "=" not in item else f"--{item}")
    return args


def fit(config: Config = None, overrides: Sequence[str] = ()):  # -> lightning.pytorch.Trainer
    """Train as `python -m parlightning.fit --config CONFIG OVERRIDES...` would, in this process.

    Returns the fitted `Trainer` (`trainer.callback_metrics` holds the last logged values,
    `trainer.lightning_module.policy` the trained policy, `trainer.datamodule` the rollout state),
    or None for `--print_config` / `--help`. A bad config raises `ConfigError` naming the field.
    """
    from parlightning.fit import main

    try:
        cli = main(cli_args(config, overrides))
    except SystemExit as exit_:
        message = exit_.code
        if message in (0, None):
            return None
        if isinstance(message, str) and message.startswith("error: "):
            raise ConfigError(message.removeprefix("error: ")) from None
        raise
    return cli.trainer


def fit_cli() -> None:
    """The `parlightning-fit` console script (its exit status is 0 after a finished fit)."""
    from parlightning.fit import main

    main(sys.argv[1:])


class CallableModule(types.ModuleType):
    """Lets `from parlightning import fit` be called: the `parlightning.fit` module forwards calls to `api.fit`."""

    def __call__(self, config: Config = None, overrides: Sequence[str] = ()) -> Optional[object]:
        return fit(config, overrides)


def make_callable(name: str) -> None:
    sys.modules[name].__class__ = CallableModule
