"""Train on SwarmEnv's training tasks and score on its held-out tasks against the serial policy.

Each (policy, seed) run goes through the CLI (`parlightning.fit.main`) with the shipped configs;
the learning curve is read back from TensorBoard and the last checkpoint is evaluated greedily on
the held-out bank (`parlightning.evaluate`, 4 episodes per task), where the serial policy plays
the same tasks and seeds. With 2+ seeds per policy the table gives mean ± std, a 95% t-interval,
and a Welch t-test between the first two policies.

    python scripts/world_fit.py                                  # the default run: mlp, seed 0, 60 iterations
    python scripts/world_fit.py --policies mlp slots --seeds 0 1 2 --epochs 20
    python scripts/world_fit.py --wide --policies mlp slots --seeds 0 1 2 --epochs 8
    python scripts/world_fit.py --wide --policies mlp slots --seeds 0 1 2 --epochs 32 --threads 2 --compile
    python scripts/world_fit.py --quick                          # 2 iterations, a smoke test
Logs and checkpoints go to a fresh folder under runs/ (or --out).
"""

from __future__ import annotations

import argparse
import glob
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from parlightning.evaluate import evaluate, parse_args  # noqa: E402
from parlightning.fit import main as fit  # noqa: E402
from parlightning.logs import read_scalars  # noqa: E402

T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}
CURVE = ("rollout/success_rate", "rollout/critical_steps", "rollout/subagents_per_episode", "rollout/finish_rate")



def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (argparse prints `error: argument --x: ...` and exits 2)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value

def welch_p(a: list[float], b: list[float]) -> float:
    """Two-sided Welch t-test p-value (normal approximation of the t tail for small samples is
    avoided: the t CDF is integrated numerically)."""
    va, vb = statistics.variance(a), statistics.variance(b)
    se = math.sqrt(va / len(a) + vb / len(b))
    if se == 0:
        return 1.0 if statistics.fmean(a) == statistics.fmean(b) else 0.0
    t = abs(statistics.fmean(a) - statistics.fmean(b)) / se
    df = (va / len(a) + vb / len(b)) ** 2 / ((va / len(a)) ** 2 / (len(a) - 1) + (vb / len(b)) ** 2 / (len(b) - 1))
    # P(|T| > t) for Student's t with df degrees of freedom, by Simpson's rule on the density
    dens = lambda x: (1 + x * x / df) ** (-(df + 1) / 2)  # noqa: E731
    n, hi = 2000, t
    h = hi / n
    area = dens(0) + dens(hi) + sum((4 if i % 2 else 2) * dens(i * h) for i in range(1, n))
    norm = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
    return max(0.0, 1.0 - 2 * norm * area * h / 3)


def mean_std_ci(xs: list[float]) -> str:
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return f"{m:.3f}"
    s = statistics.stdev(xs)
    h = T95.get(len(xs) - 1, 1.96) * s / math.sqrt(len(xs))
    return f"{m:.3f} ± {s:.3f} [{m - h:.3f}, {m + h:.3f}]"


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policies", nargs="+", default=["mlp"], choices=["mlp", "slots"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--epochs", type=positive_int, default=None, help="PPO iterations (default: the config's)")
    p.add_argument("--wide", action="store_true", help="add configs/swarm_wide.yaml")
    p.add_argument("--quick", action="store_true", help="2 iterations of 32 actors x 8 steps")
    p.add_argument("--out", default=None, help="folder for logs and checkpoints (default: a fresh runs/world_fit_*)")
    p.add_argument("--every", type=positive_int, default=5, help="print the learning curve every N iterations")
    p.add_argument("--reuse", action="store_true", help="evaluate runs already under --out instead of training")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: the config's, 1)")
    p.add_argument("--compile", action="store_true",
                   help="SwarmEnv(compile=True): the env step as C++ kernels (the same trajectories, faster)")
    a = p.parse_args(argv)
    out = Path(a.out or ROOT / "runs" / f"world_fit_{time.strftime('%Y%m%d_%H%M%S')}")
    configs = ["--config", str(ROOT / "configs" / "swarm.yaml")]
    if a.wide:
        configs += ["--config", str(ROOT / "configs" / "swarm_wide.yaml")]
    extra = ["--trainer.max_epochs", str(a.epochs)] if a.epochs else []
    if a.quick:
        extra = ["--trainer.max_epochs", "2", "--data.num_envs", "32", "--data.num_steps", "8"]
    if a.threads:
        extra += ["--torch_threads", str(a.threads)]
    if a.compile:
        extra += ["--data.env.init_args.compile", "true"]
    results: dict = {}
    for policy in a.policies:
        for seed in a.seeds:
            root = out / f"{policy}_seed{seed}"
            start = time.perf_counter()
            if not a.reuse:
                fit([*configs, "--model.policy", policy, "--seed_everything", str(seed), "--data.seed", str(seed),
                     "--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false",
                     "--trainer.enable_model_summary", "false", *extra])
            wall = time.perf_counter() - start
            run = sorted(glob.glob(str(root / "lightning_logs" / "version_*")))[-1]
            tags = read_scalars(run)
            ckpt = str(Path(run) / "checkpoints" / "last.ckpt")
            ev = evaluate(parse_args([*configs[:2], *configs[2:], "--ckpt_path", ckpt, "--episodes", "4",
                                      "--seed", "0"]))
            results[(policy, seed)] = {"curve": {k: [v for _, v in tags.get(k, [])] for k in CURVE},
                                       "steps": [s for s, _ in tags.get(CURVE[0], [])], "eval": ev, "wall": wall}
            print(f"\n== {policy} seed {seed}: {wall:.0f} s wall; learning curve (training tasks, per rollout)")
            r = results[(policy, seed)]
            print(f"{'env steps':>10}" + "".join(f"{k.split('/')[1]:>24}" for k in CURVE))
            for i in range(0, len(r["steps"]), a.every):
                print(f"{r['steps'][i]:>10}" + "".join(f"{r['curve'][k][i]:>24.3f}" for k in CURVE))
    keys = ("success_rate", "serial_success_rate", "critical_steps", "serial_critical_steps", "speedup_vs_serial",
            "subagents_per_episode", "finish_rate")
    print(f"\nheld-out evaluation (greedy, 4 episodes per task; seeds {a.seeds}; mean ± std [95% CI])")
    for policy in a.policies:
        print(f"-- {policy}")
        for k in keys:
            print(f"   {k:<24}{mean_std_ci([results[(policy, s)]['eval'][k] for s in a.seeds])}")
        fams = results[(policy, a.seeds[0])]["eval"]["families"]
        for f in fams:
            sr = statistics.fmean(results[(policy, s)]["eval"]["families"][f]["success_rate"] for s in a.seeds)
            sp = statistics.fmean(results[(policy, s)]["eval"]["families"][f]["speedup_vs_serial"] for s in a.seeds)
            print(f"   family {f:<10} success {sr:.3f}  speed-up vs serial {sp:.2f}")
    if len(a.policies) >= 2 and len(a.seeds) >= 2:
        x, y = a.policies[:2]
        for k in ("success_rate", "speedup_vs_serial"):
            pv = welch_p([results[(x, s)]["eval"][k] for s in a.seeds], [results[(y, s)]["eval"][k] for s in a.seeds])
            print(f"{x} vs {y} on {k}: Welch p = {pv:.3f}{' (not significant)' if pv >= 0.05 else ''}")
    print(f"\nlogs: {out}")
    return results


if __name__ == "__main__":
    main()
