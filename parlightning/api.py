"""The Python API for scripts and notebooks: `from parlightning import fit; fit(config=..., overrides=[...])`
runs exactly what `python -m parlightning.fit` runs and returns the fitted `Trainer`. The functions
live in `parlightning.fit` (so that module can be called); this module names them for imports and
for the `parlightning-fit` console script."""

from parlightning.cli.fit import Config, cli_args, fit, fit_cli

__all__ = ["Config", "cli_args", "fit", "fit_cli"]
