"""Wall-clock time to solve CartPole-v1: seconds from process start until the mean return of the
last 100 finished episodes first reaches 475, side by side in one run for

  fast   `python -m parlightning.fit --config configs/cartpole_fast.yaml` (tensor CartPole, many actors)
  gym    `configs/cartpole.yaml` (CleanRL's settings through the Gymnasium adapter)
  sb3    Stable-Baselines3's PPO with rl-baselines3-zoo's tuned CartPole-v1 hyperparameters
         (hyperparams/ppo.yml: 8 envs x 32 steps, 20 epochs, batch 256, gamma 0.98, GAE 0.8,
         ent 0, lr lin_1e-3, clip lin_0.2, 1e5 steps)

Each run is a fresh `python` process (interpreter start, imports, env and model construction all
count), one torch thread; the paths take turns per seed so machine load falls on each alike. It
stops at the solve. Printed per run: process seconds to solve, in-loop seconds (first rollout or
`learn()` to the solve) and the env steps used; then medians over seeds and the speed-up of `fast`
over each other path (paired per seed). A run that does not solve within its budget is reported
as such and has no time.

    python scripts/time_to_solve.py                 # 3 seeds x 3 paths (a few minutes on 2 cores)
    python scripts/time_to_solve.py --quick         # 1 seed, fast path only, 8k steps: a smoke run
    python scripts/time_to_solve.py --seeds 0 1 2 3 4 --paths fast sb3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, Optional

from parlightning.cli.arg_types import ScriptParser, as_path, output_file, output_folder, positive_int, random_seed  # stdlib only: a cheap import

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {"fast": ROOT / "configs" / "cartpole_fast.yaml", "gym": ROOT / "configs" / "cartpole.yaml"}
LABELS = {"fast": "parlightning, configs/cartpole_fast.yaml", "gym": "parlightning, configs/cartpole.yaml (Gymnasium)",
          "sb3": "Stable-Baselines3 PPO, rl-zoo tuned"}
BUDGET = {"fast": None, "gym": None, "sb3": 100_000}  # env steps; None: the config's trainer.max_epochs; sb3: rl-zoo's
TARGET, WINDOW = 475.0, 100
# What each path imports that the package does not require: checked before the first run starts (one
# line naming the install or the --paths to drop), not a sub-run's ImportError traceback half-way.
NEEDS = {"gym": (("gymnasium", "gymnasium"),), "sb3": (("stable_baselines3", "stable-baselines3"), ("gymnasium", "gymnasium"))}


class Solved:
    """The last 100 finished episodes' returns; `add` answers whether their mean reached 475."""

    def __init__(self) -> None:
        self.window: deque[float] = deque(maxlen=WINDOW)

    def add(self, returns: list[float]) -> bool:
        for r in returns:
            self.window.append(r)
            if len(self.window) == WINDOW and sum(self.window) / WINDOW >= TARGET:
                return True
        return False


def child_parlightning(path: str, seed: int, budget: Optional[int], logdir: str) -> dict[str, Any]:
    """In the child process: fit through the real LightningCLI; a rollout callback stops at the solve."""
    import yaml

    from parlightning.callbacks.base import RolloutCallback
    from parlightning.cli.fit import main

    class StopAtSolve(RolloutCallback):
        """Feeds every finished episode's return to `Solved` at rollout end (one host read per
        rollout, none per step) and stops the fit at the end of the epoch that solved."""

        def __init__(self) -> None:
            self.solved, self.start, self.out = Solved(), None, {}

        def on_rollout_start(self, trainer, pl_module, round_index) -> None:  # noqa: ANN001
            if self.start is None:
                self.start = time.perf_counter()

        def on_rollout_end(self, trainer, pl_module, rollout) -> None:  # noqa: ANN001
            if self.out:
                return
            buf = rollout.buffer
            per_step = buf.num_envs * trainer.world_size
            t = buf.done.nonzero(as_tuple=True)[0]  # time-major, the order of rollout.episode_return
            steps = (rollout.env_steps - buf.num_steps * per_step + (t + 1) * per_step).tolist()
            for r, step in zip(rollout.episode_return.tolist(), steps):
                if self.solved.add([r]):
                    self.out = {"wall_end": time.time(), "loop_s": time.perf_counter() - self.start, "env_steps": step}
                    trainer.should_stop = True
                    return

    StopAtSolve.__module__ = "__main__"  # importable by class_path from this script
    setattr(sys.modules["__main__"], "StopAtSolve", StopAtSolve)
    data = yaml.safe_load(CONFIGS[path].read_text())["data"]
    per_iteration = data["num_envs"] * data["num_steps"]
    epochs = [] if budget is None else ["--trainer.max_epochs", str(max(1, budget // per_iteration))]
    cli = main([
        "--config", str(CONFIGS[path]), "--seed", str(seed), *epochs,
        "--trainer.default_root_dir", logdir, "--trainer.logger", "false",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        "--trainer.enable_checkpointing", "false", "--trainer.callbacks+", "__main__.StopAtSolve",
    ])
    stop = next(cb for cb in cli.trainer.callbacks if isinstance(cb, StopAtSolve))
    return stop.out or {"env_steps": int(cli.datamodule.env_steps)}


def child_sb3(seed: int, budget: int) -> dict[str, Any]:
    """In the child process: rl-zoo's tuned PPO for CartPole-v1; a callback stops `learn()` at the solve."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)

    def linear(start: float):
        return lambda remaining: start * remaining  # rl-zoo's lin_<x>

    class StopAtSolve(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.solved, self.out = Solved(), {}

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info and self.solved.add([float(info["episode"]["r"])]):
                    self.out = {"wall_end": time.time(), "loop_s": time.perf_counter() - start,
                                "env_steps": int(self.num_timesteps)}
                    return False
            return True

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
                learning_rate=linear(1e-3), clip_range=linear(0.2), seed=seed, device="cpu", verbose=0)
    callback = StopAtSolve()
    start = time.perf_counter()
    model.learn(total_timesteps=budget, callback=callback)
    return callback.out or {"env_steps": int(model.num_timesteps)}


def run(path: str, seed: int, budget: Optional[int], logdir: Path) -> dict[str, Any]:
    """One fresh process; seconds are counted from just before it is started."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", path, "--seeds", str(seed),
           *([] if budget is None else ["--budget", str(budget)]), "--logdir", str(logdir / path / f"seed{seed}")]
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        from parlightning.cli.script_main import sub_run_failed

        raise sub_run_failed(f"the {path} run for seed {seed}", proc.returncode, proc.stderr)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_s"] = out["wall_end"] - start if "wall_end" in out else None
    out["cpu_s"] = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)  # the whole process (to exit)
    return out


def fmt(x: Optional[float], spec: str = ".1f") -> str:
    return "not solved" if x is None else format(x, spec)


def markdown(results: dict[str, dict[int, dict[str, Any]]]) -> str:
    lines = ["| path | seed | process s to solve | in-loop s | env steps to solve | process CPU s (to exit) |",
             "|---|---:|---:|---:|---:|---:|"]
    for path, seeds in results.items():
        for seed, r in seeds.items():
            lines.append(f"| {LABELS[path]} | {seed} | {fmt(r['process_s'])} | {fmt(r.get('loop_s'))} | "
                         f"{r['env_steps']:,}{'' if r['process_s'] is not None else ' (budget)'} | {r['cpu_s']:.1f} |")
    lines += ["", "| path | solved | median process s | median in-loop s | median env steps | fast speed-up "
              "(process s, paired per seed) |", "|---|---:|---:|---:|---:|---:|"]
    fast = results.get("fast", {})
    for path, seeds in results.items():
        ok = [r for r in seeds.values() if r["process_s"] is not None]
        med = (lambda k: statistics.median(r[k] for r in ok)) if ok else (lambda k: None)
        speed = "—"
        if path != "fast" and fast:
            pairs = [seeds[s]["process_s"] / fast[s]["process_s"] for s in seeds
                     if s in fast and fast[s]["process_s"] and seeds[s]["process_s"]]
            unsolved = sum(1 for s in seeds if s in fast and fast[s]["process_s"] and seeds[s]["process_s"] is None)
            speed = (f"{statistics.median(pairs):.1f}x (min {min(pairs):.1f}x)" if pairs else "") + \
                    (f"{' + ' if pairs else ''}{unsolved} unsolved" if unsolved else "")
        lines.append(f"| {LABELS[path]} | {len(ok)}/{len(seeds)} | {fmt(med('process_s'))} | {fmt(med('loop_s'))} | "
                     f"{fmt(med('env_steps'), ',.0f')} | {speed} |")
    return "\n".join(lines)


# Where start-up goes: the modules `python -X importtime -c "import lightning.pytorch"` reports, by
# cumulative import time (the largest row of each name: a module counts where it was first imported).
STARTUP_MODULES = ("torch", "torch._dynamo", "sympy", "torchmetrics.functional", "scipy.signal", "matplotlib",
                   "torch.distributed")
STARTUP_IMPORTS = {  # what each path imports before its first env step
    "torch": "import torch",
    "lightning.pytorch": "import lightning.pytorch",
    "parlightning.fit (and its imports)": "import parlightning.fit",
    "SB3 path: torch, stable_baselines3, gymnasium": "import torch, stable_baselines3, gymnasium",
}


def startup(repeats: int = 3) -> str:
    """A table of start-up costs: wall seconds of each path's imports in fresh processes (median of
    `repeats`), and the cumulative import time of the heavy modules under `import lightning.pytorch`."""
    lines = ["| fresh `python -c` | wall s (median of %d) |" % repeats, "|---|---:|"]
    for label, code in STARTUP_IMPORTS.items():
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            times.append(time.perf_counter() - t0 if done.returncode == 0 else float("nan"))
        lines.append(f"| `{code}` ({label}) | {statistics.median(times):.2f} |")
    trace = subprocess.run([sys.executable, "-X", "importtime", "-c", "import lightning.pytorch"], capture_output=True,
                           text=True).stderr
    seen: dict[str, float] = {}
    for row in trace.splitlines():
        parts = row.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            name = parts[2].strip()
            if name in STARTUP_MODULES:
                seen[name] = max(seen.get(name, 0.0), int(parts[1]) / 1e6)
    lines += ["", "| module, under `import lightning.pytorch` (rows nest: a module's time includes what it "
              "imports first) | cumulative import s |", "|---|---:|"]
    lines += [f"| `{m}` | {seen[m]:.2f} |" for m in STARTUP_MODULES if m in seen]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = ScriptParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=random_seed, nargs="+", default=[0, 1, 2])
    parser.add_argument("--paths", nargs="+", choices=list(LABELS), default=list(LABELS))
    parser.add_argument("--quick", action="store_true",
                        help="1 seed, the fast path only, 8,192 env steps: checks the script runs (does not solve)")
    parser.add_argument("--budget", type=positive_int, default=None,
                        help="env steps per run (default: the configs' trainer.max_epochs; SB3 rl-zoo's 100,000)")
    parser.add_argument("--logdir", type=as_path(output_folder), default=Path("runs") / "time_to_solve",
                        help="untracked scratch folder")
    parser.add_argument("--json", type=as_path(output_file), default=None, help="also write the raw results here")
    parser.add_argument("--startup", action="store_true",
                        help="only the start-up table: each path's imports in fresh processes, and where "
                             "`import lightning.pytorch` spends its time (it also ends a full run)")
    parser.add_argument("--child", choices=list(LABELS), default=None, help=argparse.SUPPRESS)
    return parser


def missing_imports(paths: list[str]) -> Optional[str]:
    """The first path whose imports are absent here, as argparse's error text; None when all import."""
    import importlib.util

    for path in paths:
        for module, package in NEEDS.get(path, ()):
            if importlib.util.find_spec(module) is None:
                rest = [p for p in paths if p != path]
                return (f"argument --paths: the {path} path needs {module}, which is not installed here: "
                        f"pip install {package}, or drop {path} from --paths"
                        + (f" (e.g. --paths {' '.join(rest)})" if rest else ""))
    return None


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    if a.startup:
        print(startup())
        return 0
    if a.child is not None:  # inside one timed process
        import torch

        torch.set_num_threads(1)
        budget = a.budget or BUDGET[a.child]
        out = child_sb3(a.seeds[0], budget) if a.child == "sb3" else child_parlightning(a.child, a.seeds[0], budget, str(a.logdir))
        print(json.dumps(out))
        return 0
    if a.quick:  # checks the machinery, not the result: too few steps to solve
        a.seeds, a.paths, a.budget = a.seeds[:1], ["fast"], a.budget or 8192
    missing = missing_imports(a.paths)
    if missing is not None:
        parser.error(missing)
    results: dict[str, dict[int, dict[str, Any]]] = {p: {} for p in a.paths}
    for seed in a.seeds:
        for path in a.paths:
            r = run(path, seed, a.budget or BUDGET[path], a.logdir)
            results[path][seed] = r
            print(f"[{path} seed {seed}] process {fmt(r['process_s'])} s, in-loop {fmt(r.get('loop_s'))} s, "
                  f"{r['env_steps']:,} env steps, {r['cpu_s']:.1f} CPU s", flush=True)
    print()
    print(markdown(results))
    if not a.quick:
        print()
        print(startup())
    if a.json is not None:
        a.json.write_text(json.dumps({p: {str(s): r for s, r in v.items()} for p, v in results.items()}, indent=1))
    return 0


if __name__ == "__main__":
    from parlightning.cli.script_main import run_main

    run_main(main)
