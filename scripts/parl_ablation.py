"""The PARL ablation on SwarmEnv: (a) r_perf only, (b) PARL annealed, (c) PARL never annealed.

Each arm trains through the real CLI (`python -m parlightning.fit --config configs/swarm.yaml
--config configs/arms/<arm>.yaml`) for the same env-step budget and several seeds, two runs at
a time. The final checkpoint of every run is then evaluated **greedily** (argmax of every
action dimension): one episode per actor, every task of the bank equally often. The table
gives mean ± std over seeds; the plot shows the training curves (stochastic rollouts) per arm.

    python scripts/parl_ablation.py                       # 3 seeds x 3 arms: 3-6 min on 2 busy cores
    python scripts/parl_ablation.py --quick               # smoke test: ~30 s
    python scripts/parl_ablation.py --out /tmp/parl.png --seeds 5 --epochs 120
    python scripts/parl_ablation.py --out docs/parl_ablation.png   # refresh the README's figure

By default everything (runs and the plot) goes to a fresh untracked folder runs/parl_ablation-<time>.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
from parlightning.envs.swarm import SwarmEnv  # noqa: E402
from parlightning.logs import read_scalars  # noqa: E402
from parlightning.policies import ActorCritic  # noqa: E402

ARMS = {
    "perf_only": "(a) r_perf only",
    "parl_annealed": "(b) PARL annealed",
    "parl_constant": "(c) PARL never annealed",
}
CURVES = {
    "rollout/success_rate": "success rate",
    "rollout/subagents_per_episode": "subagents / episode",
    "critical_steps/mean": "critical steps / episode",
}
COLUMNS = ("success", "critical_steps", "speedup", "subagents", "idle_subagents", "finish_rate")
HEADERS = ("success rate", "critical steps", "speed-up vs serial", "subagents / ep", "idle subagents / ep",
           "finish rate")


def train(arm: str, seed: int, root: Path, args: argparse.Namespace) -> tuple[subprocess.Popen, Path]:
    """Start one training run of `arm` in a subprocess; returns (process, run directory)."""
    run_dir = root / arm / f"seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "parlightning.fit",
        "--config", str(ROOT / "configs" / "swarm.yaml"), "--config", str(ROOT / "configs" / "arms" / f"{arm}.yaml"),
        f"--seed_everything={seed}", f"--data.seed={seed}", f"--trainer.default_root_dir={run_dir}",
        f"--trainer.max_epochs={args.epochs}", f"--data.num_envs={args.num_envs}",
        "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false", "--torch_threads=1",
    ]
    if args.horizon is not None and arm == "parl_annealed":
        for lam in ("lambda1", "lambda2"):
            cmd.append(f"--data.reward.init_args.{lam}.init_args.horizon={args.horizon}")
    log = open(run_dir / "fit.log", "w")
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env), run_dir


def run_all(args: argparse.Namespace, root: Path) -> dict[str, list[Path]]:
    """Train every (arm, seed), `args.jobs` at a time, seeds interleaved across arms."""
    queue = [(arm, seed) for seed in range(args.seeds) for arm in ARMS]
    running: list[tuple[subprocess.Popen, Path, str, int, float]] = []
    runs: dict[str, list[Path]] = {arm: [] for arm in ARMS}
    while queue or running:
        while queue and len(running) < args.jobs:
            arm, seed = queue.pop(0)
            proc, run_dir = train(arm, seed, root, args)
            running.append((proc, run_dir, arm, seed, time.perf_counter()))
        time.sleep(0.5)
        for item in list(running):
            proc, run_dir, arm, seed, start = item
            if proc.poll() is None:
                continue
            running.remove(item)
            if proc.returncode != 0:
                tail = (run_dir / "fit.log").read_text().splitlines()[-15:]
                raise SystemExit(f"error: {arm} seed {seed} failed (exit {proc.returncode}):\n" + "\n".join(tail))
            print(f"  trained {ARMS[arm]:26s} seed {seed}  {time.perf_counter() - start:6.1f} s", flush=True)
            runs[arm].append(run_dir)
    return runs


def log_dir(run_dir: Path) -> Path:
    versions = sorted((run_dir / "lightning_logs").glob("version_*"), key=lambda p: int(p.name.split("_")[1]))
    if not versions:
        raise SystemExit(f"error: no lightning_logs/version_* under {run_dir}")
    return versions[-1]


def load_policy(run_dir: Path) -> tuple[ActorCritic, dict]:
    """The trained policy of a run (last checkpoint, loaded with weights_only=True) and the env's init args."""
    logs = log_dir(run_dir)
    config = yaml.safe_load((logs / "config.yaml").read_text())
    env_args = dict(config["data"]["env"].get("init_args") or {})
    ckpt = torch.load(logs / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    hp = ckpt["hyper_parameters"]
    env = SwarmEnv(num_envs=1, **env_args)
    policy = ActorCritic(env.observation_shape, env.action_spec, hp["hidden_sizes"], hp["activation"])
    state = {k[len("policy."):]: v for k, v in ckpt["state_dict"].items() if k.startswith("policy.")}
    policy.load_state_dict(state)
    return policy.eval(), env_args


def greedy(policy: ActorCritic, obs: torch.Tensor) -> torch.Tensor:
    """Argmax of every action dimension (multi-discrete), read from the actor's logits."""
    logits = policy.actor(obs.flatten(1))
    return torch.stack([part.argmax(-1) for part in logits.split(list(policy.head.nvec), -1)], -1)


@torch.inference_mode()
def evaluate(policy: ActorCritic, env_args: dict, repeats: int, seed: int) -> dict[str, torch.Tensor]:
    """One greedy episode per actor, actor i on task i mod K (every task `repeats` times):
    per-episode EpisodeParts fields and the family of each episode's task."""
    probe = SwarmEnv(num_envs=1, **env_args)
    K = len(probe.task_ids)
    env = SwarmEnv(num_envs=K * repeats, seed=10_000 + seed, **env_args)
    tasks = torch.arange(env.num_envs) % K
    obs = env.reset(task_index=tasks)
    first = {name: torch.zeros(env.num_envs) for name in ("outcome", "n_subagents", "assigned", "completed",
                                                          "critical_steps", "serial_steps")}
    finished = torch.zeros(env.num_envs, dtype=torch.bool)
    for _ in range(env.max_episode_steps):  # every episode ends by then (truncation)
        res = env.step(greedy(policy, obs), tasks)
        new = (res.terminated | res.truncated) & ~finished
        for name in first:
            first[name] = torch.where(new, getattr(res.parts, name).float(), first[name])
        finished |= new
        obs = res.obs
    assert finished.all()
    first["family"] = env.bank.family[tasks]
    first["solved"] = (first["outcome"] >= env.solved_threshold).float()
    first["idle"] = first["n_subagents"] - first["assigned"]  # helpers: spawned, never assigned
    return first


def summarize(ep: dict[str, torch.Tensor]) -> dict[str, float]:
    return {
        "success": float(ep["solved"].mean()),
        "critical_steps": float(ep["critical_steps"].mean()),
        "speedup": float(ep["serial_steps"].sum() / ep["critical_steps"].sum()),
        "subagents": float(ep["n_subagents"].mean()),
        "idle_subagents": float(ep["idle"].mean()),
        "finish_rate": float(ep["completed"].sum() / ep["assigned"].sum().clamp(min=1)),
    }


def mean_std(values: list[float]) -> tuple[float, float]:
    t = torch.tensor(values, dtype=torch.float64)
    return float(t.mean()), float(t.std()) if len(values) > 1 else 0.0


def fmt(values: list[float], digits: int = 2) -> str:
    m, s = mean_std(values)
    return f"{m:.{digits}f} ± {s:.{digits}f}"


def curves(runs: dict[str, list[Path]]) -> dict[str, dict[str, list[list[tuple[int, float]]]]]:
    """arm -> tag -> one [(env_step, value)] list per seed, read back from TensorBoard."""
    out: dict[str, dict[str, list]] = {}
    for arm, dirs in runs.items():
        out[arm] = {tag: [] for tag in CURVES}
        for d in dirs:
            scalars = read_scalars(log_dir(d))
            for tag in CURVES:
                out[arm][tag].append(scalars.get(tag, []))
    return out


def plot(data: dict, path: Path) -> Optional[str]:
    """Mean ± std over seeds of each curve, one panel per metric, one line per arm."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot (pip install matplotlib)"
    fig, axes = plt.subplots(1, len(CURVES), figsize=(5 * len(CURVES), 3.8))
    for ax, (tag, label) in zip(axes, CURVES.items()):
        for arm, name in ARMS.items():
            series = [s for s in data[arm][tag] if s]
            if not series:
                continue
            n = min(len(s) for s in series)
            steps = torch.tensor([x for x, _ in series[0][:n]], dtype=torch.float64)
            values = torch.tensor([[v for _, v in s[:n]] for s in series], dtype=torch.float64)
            mean, std = values.mean(0), (values.std(0) if len(series) > 1 else torch.zeros(n))
            ax.plot(steps, mean, label=name)
            ax.fill_between(steps, mean - std, mean + std, alpha=0.2)
        ax.set_xlabel("env steps")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return None


def fresh_workdir(base: Optional[Path] = None) -> Path:
    """A new folder under `base` (default runs/, which git ignores): a default run never overwrites
    a tracked file or an earlier run."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for i in range(1000):
        folder = (base or ROOT / "runs") / (f"parl_ablation-{stamp}" + (f"-{i}" if i else ""))
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
    raise SystemExit("error: --workdir: could not create a fresh folder under runs/; pass --workdir")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=None, help="seeds per arm (default 3; 1 with --quick)")
    parser.add_argument("--epochs", type=int, default=None, help="PPO iterations per run (default: the config's 60)")
    parser.add_argument("--num-envs", dest="num_envs", type=int, default=512, help="actors per run")
    parser.add_argument("--jobs", type=int, default=2, help="training runs at a time (one CPU thread each)")
    parser.add_argument("--repeats", type=int, default=32, help="greedy evaluation episodes per task and run")
    parser.add_argument("--out", type=Path, default=None,
                        help="PNG plot path (default: parl_ablation.png in the fresh workdir; the README's figure "
                             "is refreshed only by passing --out docs/parl_ablation.png)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where the runs (logs, checkpoints) are written (default: a fresh "
                             "runs/parl_ablation-<time> folder, untracked)")
    parser.add_argument("--quick", action="store_true", help="smoke test: 1 seed, 4 iterations of 64 actors")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.epochs, args.num_envs, args.repeats = args.seeds or 1, args.epochs or 4, 64, 4
    args.seeds = args.seeds or 3
    config = yaml.safe_load((ROOT / "configs" / "swarm.yaml").read_text())
    default_epochs = int(config["trainer"]["max_epochs"])
    args.epochs = args.epochs or default_epochs
    steps_per_iter = args.num_envs * int(config["data"]["num_steps"])
    budget = args.epochs * steps_per_iter
    # The annealed arm's horizon is set in its config for the default budget; scale it with the budget.
    default_budget = default_epochs * int(config["data"]["num_envs"]) * int(config["data"]["num_steps"])
    args.horizon = None if budget == default_budget else max(1, round(600_000 * budget / default_budget))
    root = args.workdir or fresh_workdir()
    args.out = args.out or root / "parl_ablation.png"
    print(f"PARL ablation: {len(ARMS)} arms x {args.seeds} seeds, {budget:,} env steps each "
          f"({args.epochs} iterations of {args.num_envs} x {config['data']['num_steps']}), runs under {root}")

    start = time.perf_counter()
    runs = run_all(args, root)
    results: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    families: dict[str, list[list[tuple[float, float, float]]]] = {arm: [] for arm in ARMS}
    family_names: list[str] = []
    for arm, dirs in runs.items():
        for seed, d in enumerate(dirs):
            policy, env_args = load_policy(d)
            ep = evaluate(policy, env_args, args.repeats, seed)
            results[arm].append(summarize(ep))
            family_names = SwarmEnv(num_envs=1, **env_args).bank.families
            families[arm].append([
                tuple(float(ep[key][ep["family"] == f].mean()) for key in ("solved", "critical_steps", "idle"))
                for f in range(len(family_names))
            ])

    print(f"\n### Greedy evaluation of the final policy ({args.seeds} seeds, mean ± std, {budget:,} env steps)\n")
    print("| arm | " + " | ".join(HEADERS) + " |")
    print("|---" * (len(HEADERS) + 1) + "|")
    for arm, name in ARMS.items():
        cells = [fmt([r[c] for r in results[arm]]) for c in COLUMNS]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\n### Greedy evaluation per task family: success rate, critical steps, idle subagents per episode\n")
    print("| arm | " + " | ".join(family_names) + " |")
    print("|---" * (len(family_names) + 1) + "|")
    for arm, name in ARMS.items():
        cells = []
        for i in range(len(family_names)):
            success, critical, idle = zip(*(f[i] for f in families[arm]))
            cells.append(f"{fmt(list(success))} / {mean_std(list(critical))[0]:.1f} / {mean_std(list(idle))[0]:.1f}")
        print(f"| {name} | " + " | ".join(cells) + " |")

    data = curves(runs)
    print("\n### End of training (stochastic policy, mean of the last 3 rollouts)\n")
    print("| arm | " + " | ".join(CURVES.values()) + " |")
    print("|---" * (len(CURVES) + 1) + "|")
    for arm, name in ARMS.items():
        cells = []
        for tag in CURVES:
            per_seed = [sum(v for _, v in s[-3:]) / max(len(s[-3:]), 1) for s in data[arm][tag] if s]
            cells.append(fmt(per_seed) if per_seed else "n/a")
        print(f"| {name} | " + " | ".join(cells) + " |")
    problem = plot(data, args.out)
    print(f"\n{problem}" if problem else f"\nplot: {args.out}")
    print(f"total time {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
