"""Train on SwarmEnv's training tasks and score on held-out tasks against the serial policy and the
ceiling (the round-optimal oracle), on the shared experiment runner (scripts/experiment.py).

Each (policy, seed) run is `python -m parlightning.fit` with the shipped configs in its own
process; the learning curve is read back from TensorBoard and the last checkpoint is evaluated
greedily with `python -m parlightning.evaluate` over --banks held-out banks (default 3) and
--eval-seeds evaluation seeds, where the serial policy and the ceiling play the same tasks. The
table gives mean ± std over seeds, a 95% t-interval, and a Welch t-test between the first two
policies. A finished run is never rerun: the same --out resumes.

    python scripts/world_fit.py                                  # the default run: mlp, seed 0, 60 iterations
    python scripts/world_fit.py --policies mlp slots --seeds 0 1 2 --epochs 20
    python scripts/world_fit.py --wide --policies mlp slots --seeds 0 1 2 --epochs 8
    python scripts/world_fit.py --wide --policies mlp slots --seeds 0 1 2 --epochs 32 --threads 2 --compile
    python scripts/world_fit.py --quick                          # 2 iterations, a smoke test
Logs and checkpoints go to a fresh folder under runs/ (or --out).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/: the shared experiment runner

from experiment import (  # noqa: E402
    ROOT, bank_seeds, default_launch, grid_plan, mean_std_ci, run_grid, welch_p,
)
from parlightning.cli.arg_types import ScriptParser, job_count, output_folder, positive_int, random_seed  # noqa: E402

CURVE = ("success_rate", "critical_steps", "subagents", "finish_rate", "delegation_share")
KEYS = ("success_rate", "serial_success_rate", "ceiling_success_rate", "critical_steps", "speedup_vs_serial",
        "ceiling_speedup_vs_serial", "subagents_per_episode", "finish_rate")


def build_parser() -> argparse.ArgumentParser:
    p = ScriptParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policies", nargs="+", default=["mlp"], choices=["mlp", "slots"])
    p.add_argument("--seeds", nargs="+", type=random_seed, default=[0])
    p.add_argument("--epochs", type=positive_int, default=None, help="PPO iterations (default: the config's)")
    p.add_argument("--wide", action="store_true", help="add configs/swarm_wide.yaml")
    p.add_argument("--quick", action="store_true", help="2 iterations of 32 actors x 8 steps, 1 episode per task")
    p.add_argument("--out", type=output_folder, default=None, help="folder for logs and checkpoints (default: a fresh runs/world_fit_*); "
                   "an existing one resumes")
    p.add_argument("--every", type=positive_int, default=5, help="print the learning curve every N iterations")
    p.add_argument("--banks", type=positive_int, default=3, help="held-out task banks (default 3)")
    p.add_argument("--eval-seeds", dest="eval_seeds", type=positive_int, default=1, help="evaluation seeds per bank")
    p.add_argument("--jobs", type=job_count, default=1, help="runs in parallel processes")
    p.add_argument("--threads", type=job_count, default=None, help="torch intra-op threads per run (default 1)")
    p.add_argument("--compile", action="store_true",
                   help="SwarmEnv(compile=True): the env step as C++ kernels (the same trajectories, faster)")
    return p


def main(argv=None) -> dict:
    a = build_parser().parse_args(argv)
    for name, v in (("--banks", a.banks), ("--eval-seeds", a.eval_seeds), ("--jobs", a.jobs), ("--every", a.every)):
        if v <= 0:
            raise SystemExit(f"error: {name}: must be positive, got {v}")
    out = Path(a.out or ROOT / "runs" / f"world_fit_{time.strftime('%Y%m%d_%H%M%S')}")
    configs = [str(ROOT / "configs" / "swarm.yaml")] + ([str(ROOT / "configs" / "swarm_wide.yaml")] if a.wide else [])
    extra = [f"--trainer.max_epochs={a.epochs}"] if a.epochs else []
    if a.quick:
        extra = ["--trainer.max_epochs=2", "--data.num_envs=32", "--data.num_steps=8"]
    if a.threads:
        extra.append(f"--torch_threads={a.threads}")
    if a.compile:
        extra.append("--data.env.init_args.compile=true")
    plan = grid_plan(configs, {"model.policy": list(a.policies)}, a.seeds, extra, bank_seeds(a.banks),
                     range(a.eval_seeds), 1 if a.quick else 4, default_launch(a.quick))
    results = {(r["overrides"]["model.policy"], r["seed"]): r for r in run_grid(plan, out, a.jobs)}
    for (policy, seed), r in results.items():
        print(f"\n== {policy} seed {seed}: {r['wall_s']:.0f} s wall; learning curve (training tasks, per rollout)")
        names = [k for k in CURVE if k in r["curves"]]
        print(f"{'env steps':>10}" + "".join(f"{k:>20}" for k in names))
        steps = [s for s, _ in r["curves"][names[0]]] if names else []
        for i in range(0, len(steps), a.every):
            print(f"{int(steps[i]):>10}" + "".join(f"{r['curves'][k][i][1]:>20.3f}" for k in names))
    print(f"\nheld-out evaluation (greedy, banks {plan['banks']} x evaluation seeds {plan['eval_seeds']}, "
          f"{plan['episodes']} episodes per task; seeds {a.seeds}; mean ± std [95% CI] over seeds)")
    for policy in a.policies:
        print(f"-- {policy}")
        for k in KEYS:
            print(f"   {k:<28}{mean_std_ci([results[(policy, s)]['eval'][k] for s in a.seeds])}")
    if len(a.policies) >= 2 and len(a.seeds) >= 2:
        x, y = a.policies[:2]
        for k in ("success_rate", "speedup_vs_serial"):
            pv = welch_p([results[(x, s)]["eval"][k] for s in a.seeds], [results[(y, s)]["eval"][k] for s in a.seeds])
            print(f"{x} vs {y} on {k}: Welch p = {pv:.3f}{' (not significant)' if pv >= 0.05 else ''}")
    print(f"\nlogs: {out}")
    return results


if __name__ == "__main__":
    from parlightning.cli.script_main import run_main

    run_main(main)
