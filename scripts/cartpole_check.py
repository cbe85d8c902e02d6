"""PPO on CartPole-v1 held against published results, with throughput side by side.

For each seed, and interleaved so machine load falls on every path alike, the same budget runs
through (a) `python -m parlightning.fit --config configs/cartpole.yaml` (the Gymnasium adapter),
(b) `configs/cartpole_tensor.yaml` (the tensor-native `CartPoleEnv`) and (c), when installed,
Stable-Baselines3's PPO with the same settings (4 envs x 128 steps, 4 epochs x 4 minibatches,
lr 2.5e-4 annealed, clip 0.2 on policy and value, ent 0.01, vf 0.5, grad clip 0.5, 64x64 tanh).

Per seed: the mean return of the last 100 episodes, and the env steps at which the running mean
of 100 episodes first reaches 475. The target is every Gymnasium-adapter seed at or above 475 at
the end (CleanRL's ppo.py reaches 490 ± 6). Throughput is env steps per second of training (first
rollout to the end of fit; for SB3, `learn()`), per wall second and per CPU second of the process,
one torch thread each, as medians over seeds and as ratios to the Gymnasium adapter, paired per seed.

    python scripts/cartpole_check.py                   # 3 seeds x 500k steps x 3 paths: 25-80 min on 2 cores
    python scripts/cartpole_check.py --quick           # 1 seed x 25k steps: a smoke run, about a minute
    python scripts/cartpole_check.py --paths gym --seeds 0 1 2   # the published check alone
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
from parlightning.cli.entry import refuse_bad_environment  # noqa: E402  stdlib only

refuse_bad_environment()  # before torch and Lightning: torchmetrics reads LOCAL_RANK as it is imported

import torch  # noqa: E402
from parlightning.callbacks.base import RolloutCallback  # noqa: E402
from parlightning.cli.arg_types import ScriptParser, as_path, output_file, output_folder, positive_int, random_seed  # noqa: E402

CONFIGS = {"gym": ROOT / "configs" / "cartpole.yaml", "tensor": ROOT / "configs" / "cartpole_tensor.yaml"}
LABELS = {"gym": "parlightning, GymVectorEnv", "tensor": "parlightning, CartPoleEnv (tensor)", "sb3": "Stable-Baselines3 PPO"}
NUM_ENVS, NUM_STEPS, TARGET, WINDOW = 4, 128, 475.0, 100


class EpisodeLog(RolloutCallback):
    """Keeps every finished episode's return and the env step it ended at (the data module logs
    only per-rollout means), and times training (wall and process CPU) from the first rollout to
    the end of fit."""

    def __init__(self) -> None:
        self.returns: list[torch.Tensor] = []
        self.steps: list[torch.Tensor] = []
        self.start: Optional[tuple[float, float]] = None
        self.seconds = self.cpu_seconds = 0.0

    def on_rollout_start(self, trainer, pl_module, round_index) -> None:  # noqa: ANN001
        if self.start is None:
            self.start = (time.perf_counter(), time.process_time())

    def on_rollout_end(self, trainer, pl_module, rollout) -> None:  # noqa: ANN001
        buf = rollout.buffer
        per_step = buf.num_envs * trainer.world_size  # env steps per vector step, all ranks
        first = rollout.env_steps - buf.num_steps * per_step
        t = buf.done.nonzero(as_tuple=True)[0]  # time-major, the same order as rollout.episode_return
        self.steps.append((first + (t + 1) * per_step).cpu())
        self.returns.append(rollout.episode_return.cpu())

    def on_train_end(self, trainer, pl_module) -> None:  # noqa: ANN001
        self.seconds = time.perf_counter() - self.start[0]
        self.cpu_seconds = time.process_time() - self.start[1]


def summarise(returns: list[float], steps: list[int]) -> dict[str, Any]:
    """Mean of the last 100 returns, and the env step at which the 100-episode running mean first reaches 475."""
    r = torch.tensor(returns, dtype=torch.float64)
    reached = None
    if r.numel() >= WINDOW:
        running = r.unfold(0, WINDOW, 1).mean(-1)  # running[i] ends at episode i + WINDOW - 1
        hit = (running >= TARGET).nonzero()
        if hit.numel():
            reached = int(steps[int(hit[0]) + WINDOW - 1])
    return {"last100": float(r[-WINDOW:].mean()) if r.numel() else float("nan"), "episodes": r.numel(), "reached": reached}


def run_parlightning(path: str, seed: int, total: int, logdir: Path) -> dict[str, Any]:
    """One seed through the real LightningCLI (Trainer, PPOModule, RolloutDataModule) and the path's config."""
    from parlightning.cli.fit import main

    cli = main([
        "--config", str(CONFIGS[path]), "--seed", str(seed),
        "--trainer.max_epochs", str(total // (NUM_ENVS * NUM_STEPS)),
        "--trainer.default_root_dir", str(logdir / path / f"seed{seed}"),
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        "--trainer.enable_checkpointing", "false",
        "--trainer.callbacks+", f"{EpisodeLog.__module__}.{EpisodeLog.__qualname__}",
    ])
    log = next(cb for cb in cli.trainer.callbacks if isinstance(cb, EpisodeLog))
    steps = cli.datamodule.env_steps
    out = summarise(torch.cat(log.returns).tolist(), torch.cat(log.steps).tolist())
    out.update(env_steps=steps, seconds=log.seconds, sps=steps / log.seconds, cpu_sps=steps / log.cpu_seconds)
    return out


def sb3_available() -> bool:
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        return False
    return True


def run_sb3(seed: int, total: int) -> dict[str, Any]:
    """The same problem and settings through Stable-Baselines3's PPO (DummyVecEnv of 4 CartPole-v1)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    class Episodes(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.returns: list[float] = []
            self.steps: list[int] = []

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:  # written by SB3's Monitor wrapper
                    self.returns.append(float(info["episode"]["r"]))
                    self.steps.append(self.num_timesteps)
            return True

    env = make_vec_env("CartPole-v1", n_envs=NUM_ENVS, seed=seed)
    model = PPO(
        "MlpPolicy", env, learning_rate=lambda remaining: 2.5e-4 * remaining, n_steps=NUM_STEPS,
        batch_size=NUM_ENVS * NUM_STEPS // 4, n_epochs=4, gamma=0.99, gae_lambda=0.95, clip_range=0.2,
        clip_range_vf=0.2, normalize_advantage=True, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
        policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]}, "activation_fn": torch.nn.Tanh},
        seed=seed, device="cpu", verbose=0,
    )
    episodes = Episodes()
    start, cpu_start = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=total, callback=episodes)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    env.close()
    out = summarise(episodes.returns, episodes.steps)
    n = model.num_timesteps
    out.update(env_steps=n, seconds=seconds, sps=n / seconds, cpu_sps=n / cpu_seconds)
    return out


def markdown(results: dict[str, dict[int, dict[str, Any]]], total: int) -> str:
    """Per-seed table, then a per-path summary with throughput ratios to the Gymnasium adapter."""
    lines = [
        f"Per seed ({total:,} env steps; target: last-100 mean >= {TARGET:g}):", "",
        "| path | seed | last-100 mean return | env steps to running mean 475 | episodes | wall s | env steps/s "
        "| per CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for path, seeds in results.items():
        for seed, r in seeds.items():
            reached = f"{r['reached']:,}" if r["reached"] is not None else "not reached"
            lines.append(f"| {LABELS[path]} | {seed} | {r['last100']:.1f} | {reached} | {r['episodes']} "
                         f"| {r['seconds']:.0f} | {r['sps']:,.0f} | {r['cpu_sps']:,.0f} |")
    lines += [
        "", "Summary (returns: mean ± std over seeds; throughput: median over seeds, ratios to the Gymnasium",
        "adapter paired per seed; 'per CPU s' divides by the process's CPU time, steadier on a shared machine):", "",
        "| path | last-100 mean return | seeds >= 475 | median env steps to 475 | env steps/s | x GymVectorEnv "
        "| per CPU s | x GymVectorEnv (CPU) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = results.get("gym", {})
    for path, seeds in results.items():
        finals = [r["last100"] for r in seeds.values()]
        spread = f" ± {statistics.stdev(finals):.1f}" if len(finals) > 1 else ""
        passed = sum(f >= TARGET for f in finals)
        reached = [r["reached"] for r in seeds.values() if r["reached"] is not None]
        median_reached = f"{statistics.median(reached):,.0f}" if reached else "not reached"
        cells = []
        for key in ("sps", "cpu_sps"):
            ratios = [r[key] / base[s][key] for s, r in seeds.items() if s in base]
            cells += [f"{statistics.median(r[key] for r in seeds.values()):,.0f}",
                      f"{statistics.median(ratios):.2f}" if ratios else "-"]
        lines.append(f"| {LABELS[path]} | {statistics.mean(finals):.1f}{spread} | {passed}/{len(finals)} "
                     f"| {median_reached} | {' | '.join(cells)} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = ScriptParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=random_seed, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=positive_int, default=499_712, help="env steps per run (a multiple of 512)")
    parser.add_argument("--paths", nargs="+", choices=["gym", "tensor", "sb3"], default=["gym", "tensor", "sb3"])
    parser.add_argument("--quick", action="store_true", help="1 seed x 25,600 steps: checks the script runs")
    parser.add_argument("--logdir", type=as_path(output_folder), default=Path("runs") / "cartpole_check",
                        help="untracked scratch folder")
    parser.add_argument("--json", type=output_file, default=None, help="also write the raw results here")
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    if a.steps % 512:
        parser.error(f"argument --steps: {a.steps} is not a multiple of 512 (each iteration is 4 envs x 128 steps): "
                     f"use {max(512, a.steps // 512 * 512)}")
    if a.quick:
        a.seeds, a.steps = a.seeds[:1], 25_600
    paths = list(a.paths)
    if paths == ["sb3"] and not sb3_available():  # asked for it alone: nothing would run
        parser.error("argument --paths: sb3 needs Stable-Baselines3, which is not installed (pip install "
                     "stable-baselines3), or pick gym / tensor")
    if "sb3" in paths and not sb3_available():
        print("Stable-Baselines3 is not installed (pip install stable-baselines3): its rows are skipped.")
        paths.remove("sb3")
    torch.set_num_threads(1)  # every path alike; configs/cartpole*.yaml set torch_threads: 1 too
    warnings.filterwarnings("ignore", message=".*LightningCLI's args parameter.*")  # we pass args on purpose

    results: dict[str, dict[int, dict[str, Any]]] = {p: {} for p in paths}
    for seed in a.seeds:
        for path in paths:
            r = run_sb3(seed, a.steps) if path == "sb3" else run_parlightning(path, seed, a.steps, a.logdir)
            results[path][seed] = r
            print(f"[{path} seed {seed}] last-100 mean {r['last100']:.1f}, 475 reached at {r['reached']}, "
                  f"{r['sps']:,.0f} env steps/s", flush=True)
    print()
    print(markdown(results, a.steps))
    if a.json is not None:
        Path(a.json).write_text(json.dumps(results, indent=1))
    if "gym" in results and a.steps >= 500_000:  # the published budget; shorter runs only measure
        ok = all(r["last100"] >= TARGET for r in results["gym"].values())
        print(f"\n{'PASS' if ok else 'FAIL'}: every GymVectorEnv seed {'at or above' if ok else 'NOT all at or above'} {TARGET:g}")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    from parlightning.cli.script_main import run_main

    run_main(main)
