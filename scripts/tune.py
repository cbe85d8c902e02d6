"""Hyperparameter search with Optuna over `parlightning.fit(config, overrides)` (RL-Zoo's `--optimize`).

Each trial is one real fit of `--config` with the trial's suggestions as overrides; its score is the
mean of `charts/episodic_return` over the fit's last `--last` iterations (read from its TensorBoard
events); every trial keeps its own run folder (`--out`/trial_N: config.yaml, events, checkpoints),
so `python -m parlightning.plot runs/tune/trial_*` can draw them. The search space below is CleanRL's usual PPO knobs;
edit `suggest` for yours.

    pip install '.[tune]'
    python scripts/tune.py --config configs/cartpole_tensor.yaml --trials 20 --iterations 40
    python scripts/tune.py --quick      # 2 trials x 2 tiny iterations on CartPole (seconds), for tests

Writes `--out`/study.json (every trial's parameters and score, the best one). Scores of single short
runs are noisy: rerun the best few settings with several `--seed_everything` values and compare their
curves (`python -m parlightning.plot`) before believing an ordering.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from parlightning.cli.arg_types import config_file, output_folder, positive_int, random_seed  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def suggest(trial: Any) -> dict[str, Any]:
    """The search space: one override per suggested hyperparameter (names are config keys)."""
    return {
        "model.lr": trial.suggest_float("model.lr", 1e-4, 3e-3, log=True),
        "model.ent_coef": trial.suggest_float("model.ent_coef", 0.0, 0.03),
        "model.clip_coef": trial.suggest_categorical("model.clip_coef", [0.1, 0.2, 0.3]),
        "data.gae_lambda": trial.suggest_categorical("data.gae_lambda", [0.9, 0.95, 0.98]),
    }


def score(run_dir: Path, last: int) -> float:
    """Mean `charts/episodic_return` over the run's last `last` logged iterations."""
    from parlightning.analysis.logs import read_scalars

    (events,) = [p for p in run_dir.glob("lightning_logs/version_*")] or [run_dir]
    series = read_scalars(events).get("charts/episodic_return", [])
    if not series:
        return float("-inf")  # no episode finished: the worst score, not a made-up one
    values = [v for _, v in series[-last:]]
    return sum(values) / len(values)


def _check_overrides(fit: Any, config: str, overrides: list[str]) -> None:
    """Parse the config with the overrides once (`--print_config`, its output dropped): an unknown key
    or a bad value is one `error:` line here, not a failed trial per suggestion."""
    import contextlib
    import io

    from parlightning.errors import ConfigError

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            fit(config, [*overrides, "--print_config"])
    except ConfigError as err:
        raise SystemExit(f"error: --override: {err}") from None
    except SystemExit as exit_:
        if exit_.code in (0, None):
            return
        text = str(exit_.code).strip()
        raise SystemExit(text if text.startswith("error:") else f"error: --override: {text}") from None


def override_item(item: str) -> str:
    """--override: one fit override `key=value` (e.g. model.ent_coef=0.0)."""
    if "=" not in item or item.startswith("=") or item.startswith("-"):
        raise argparse.ArgumentTypeError(f"must be key=value (e.g. model.ent_coef=0.0), got {item!r}")
    return item


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=config_file, default=str(ROOT / "configs" / "cartpole_tensor.yaml"), help="the fit config to tune")
    p.add_argument("--trials", type=positive_int, default=20)
    p.add_argument("--iterations", type=positive_int, default=40, help="PPO iterations (trainer.max_epochs) per trial")
    p.add_argument("--last", type=positive_int, default=5, help="score: mean episodic return of the last N iterations")
    p.add_argument("--seed", type=random_seed, default=0, help="the sampler's seed and every trial's fit seed")
    p.add_argument("--out", type=output_folder, default="runs/tune", help="study folder: one run folder per trial, study.json")
    p.add_argument("--override", action="append", type=override_item, default=[], help="extra fit override for every trial (key=value)")
    p.add_argument("--quick", action="store_true", help="2 trials of 2 tiny iterations (seconds)")
    return p


def main(argv: list[str] | None = None) -> dict[str, Any]:
    a = build_parser().parse_args(argv)
    try:
        import optuna
    except ImportError:
        raise SystemExit("error: scripts/tune.py needs Optuna: pip install '.[tune]' (or pip install optuna)") from None
    from parlightning import fit

    overrides = list(a.override)
    if a.quick:
        a.trials, a.iterations, a.last = 2, 2, 1
        overrides += ["data.num_envs=8", "data.num_steps=16", "data.num_minibatches=2"]
    from parlightning.cli.packaged import config_path

    config = config_path(a.config) or a.config  # a packaged name (cartpole_tensor) or a path
    if not os.path.isfile(config):
        raise SystemExit(f"error: --config: no config file at {a.config!r}; pass a YAML path or a packaged config's name "
                         "(e.g. cartpole_tensor)")
    _check_overrides(fit, config, overrides)  # one line for a bad --override, before any trial or folder
    out = Path(a.out)
    if out.exists() and not out.is_dir():
        raise SystemExit(f"error: --out: {a.out!r} is a file; the study needs a folder (one run folder per trial and "
                         "study.json): pass a new or existing folder")
    out.mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def objective(trial: Any) -> float:
        params = suggest(trial)
        run_dir = out / f"trial_{trial.number}"
        fit(a.config, [*overrides, *(f"{k}={v}" for k, v in params.items()), f"trainer.max_epochs={a.iterations}",
                       f"seed_everything={a.seed}", f"trainer.default_root_dir={run_dir}",
                       "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false"])
        value = score(run_dir, a.last)
        print(f"trial {trial.number}: {value:.2f}  " + "  ".join(f"{k}={v:.4g}" for k, v in params.items()), flush=True)
        return value

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=a.seed))
    from parlightning.errors import ConfigError

    try:
        study.optimize(objective, n_trials=a.trials)
    except ConfigError as err:  # a bad --config / --override: fit's own one-line message
        raise SystemExit(f"error: {err}") from None
    result = {
        "config": a.config, "iterations": a.iterations, "score": f"mean charts/episodic_return, last {a.last}",
        "trials": [{"number": t.number, "params": t.params, "value": t.value} for t in study.trials],
        "best": {"number": study.best_trial.number, "params": study.best_params, "value": study.best_value},
    }
    (out / "study.json").write_text(json.dumps(result, indent=2))
    print(f"best trial {study.best_trial.number}: {study.best_value:.2f} with {study.best_params} "
          f"(study in {out / 'study.json'})")
    return result


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    from parlightning.cli.script_main import run_main

    run_main(main)
