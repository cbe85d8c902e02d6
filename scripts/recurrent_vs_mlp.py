"""Does memory matter? Train the MLP and the recurrent policies on configs/memory.yaml (a cue shown
only on an episode's first step, asked for `delay` steps later) over several seeds and print a table
of the final return (mean episodic return of the last 5 rollouts; chance = 1/n_cues).

    python scripts/recurrent_vs_mlp.py                        # mlp, gru, lstm x seeds 0 1 2
    python scripts/recurrent_vs_mlp.py --policies mlp gru --seeds 0 --epochs 20
    python scripts/recurrent_vs_mlp.py --task swarm --policies mlp gru --epochs 40   # SwarmEnv: success rate
    python scripts/recurrent_vs_mlp.py --quick                # mlp and gru, 1 seed, 2 iterations: checks it runs

Every run goes through the CLI (`parlightning.fit.main`) with the shipped config, so the numbers
are what a user gets; logs land in a temporary folder.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from parlightning.cli.arg_types import (  # noqa: E402
    ALLOC_MAX, ScriptParser, actor_count, bounded_int, positive_int, random_seed, step_count)

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
# task -> (configs for the MLP, configs for a recurrent policy, the metric per rollout)
TASKS = {
    "memory": (["memory.yaml"], ["memory.yaml"], "charts/episodic_return"),
    "swarm": (["swarm.yaml"], ["swarm.yaml", "swarm_gru.yaml"], "rollout/success_rate"),
}


def run(task: str, policy: str, seed: int, root: str, extra: list[str]) -> tuple[list[float], float]:
    """One training run through the CLI; returns (the task's metric per rollout, wall seconds)."""
    mlp_configs, recurrent_configs, metric = TASKS[task]
    names = mlp_configs if policy == "mlp" else recurrent_configs
    configs = [arg for name in names for arg in ("--config", str(CONFIGS / name))]
    if policy == "mlp":
        configs += ["--data.bptt_len", "null"]  # the config's BPTT chunk is for the recurrent arms; an MLP trains on steps
    from parlightning.analysis.logs import read_scalars
    from parlightning.cli.fit import main  # torch and Lightning load here, after the arguments were checked

    start = time.perf_counter()
    main([*configs, "--model.policy", policy, "--seed_everything", str(seed), "--data.seed", str(seed),
          "--trainer.default_root_dir", root, "--trainer.enable_progress_bar", "false",
          "--trainer.enable_model_summary", "false", *extra])
    seconds = time.perf_counter() - start
    (run_dir,) = Path(root, "lightning_logs").glob("version_*")
    return [v for _, v in read_scalars(str(run_dir))[metric]], seconds


def solved_at(returns: list[float], level: float = 0.9) -> str:
    """The first PPO iteration whose rollout reached `level`, or '-'."""
    return next((str(i + 1) for i, r in enumerate(returns) if r >= level), "-")


def build_parser() -> argparse.ArgumentParser:
    parser = ScriptParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(TASKS), default="memory")
    parser.add_argument("--policies", nargs="+", choices=["mlp", "gru", "lstm"], default=["mlp", "gru", "lstm"])
    parser.add_argument("--seeds", nargs="+", type=random_seed, default=[0, 1, 2])
    parser.add_argument("--epochs", type=positive_int, default=None, help="trainer.max_epochs (default: the config's)")
    parser.add_argument("--num_envs", type=actor_count, default=None, help="data.num_envs (default: the config's)")
    parser.add_argument("--delay", type=step_count, default=None, help="memory: steps between cue and query")
    parser.add_argument("--n_cues", type=bounded_int(2, ALLOC_MAX), default=None,
                        help="memory: number of cues (2..1000000: each observation is a one-hot of them)")
    parser.add_argument("--quick", action="store_true", help="smoke run: mlp and gru, seed 0, 2 iterations of 32 actors")
    return parser


def main_(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.quick:
        args.policies, args.seeds, args.epochs, args.num_envs = args.policies[:2], args.seeds[:1], 2, 32
    extra = []
    for flag, value in (("--trainer.max_epochs", args.epochs), ("--data.num_envs", args.num_envs),
                        ("--data.env.init_args.delay", args.delay), ("--data.env.init_args.n_cues", args.n_cues)):
        if value is not None:
            extra += [flag, str(value)]

    rows = []
    for policy in args.policies:
        finals, solved, seconds = [], [], []
        for seed in args.seeds:
            with tempfile.TemporaryDirectory() as root:
                returns, wall = run(args.task, policy, seed, root, extra)
            finals.append(sum(returns[-5:]) / len(returns[-5:]))
            solved.append(solved_at(returns))
            seconds.append(wall)
            print(f"{policy} seed {seed}: final {finals[-1]:.3f}, first >= 0.9 at iteration {solved[-1]}, "
                  f"{wall:.0f} s", flush=True)
        sd = statistics.stdev(finals) if len(finals) > 1 else 0.0
        rows.append((policy, finals, solved, statistics.mean(finals), sd, statistics.median(seconds)))

    seeds = " | ".join(f"seed {s}" for s in args.seeds)
    metric = TASKS[args.task][2]
    print(f"\n{args.task}{' ' + ' '.join(extra) if extra else ''}: final = mean {metric} of the last 5 rollouts "
          "(first iteration >= 0.9 in brackets)\n")
    print(f"| policy | {seeds} | mean ± sd | median wall s |")
    print("|---|" + "---|" * len(args.seeds) + "---|---|")
    for policy, finals, solved, mean, sd, wall in rows:
        cells = " | ".join(f"{f:.3f} ({s})" for f, s in zip(finals, solved))
        print(f"| {policy} | {cells} | {mean:.3f} ± {sd:.3f} | {wall:.0f} |")


if __name__ == "__main__":
    from parlightning.cli.script_main import run_main

    run_main(main_)
