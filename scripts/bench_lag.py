"""What the lag budget buys: env steps/s and learning with `data.max_policy_lag` 0 vs 1 vs 2.

Part 1, a world that waits on real latency: `PoolOrchestrationWorld` behind `ExternalBatchedEnv`
(one thread per actor), on a `SimulatedPool` whose subagents sleep. Every env step waits L
seconds (the orchestrator's own call, `main_seconds=L`, while its subagents sleep up to
(cost + 1) x L / 4 <= L beside it), for L over `--latencies`. Throughput is env steps per
second of the whole loop (rollout + update), epochs 2..E, one seed, all lags side by side; the
sync run's share of time spent collecting, c, says where collection and update are comparable,
and 1 / max(c, 1 - c) is what a perfect overlap of the two could give.
Learning: final success rate (mean of the last 3 rollouts, stochastic policy) at equal env
steps, lags 0/1/2 x `--seeds` seeds at `--learn-latency`, mean ± std and Welch's t-test vs lag 0.

Part 2, SwarmEnv (pure tensor ops, CPU): the same throughput and learning comparison.

    python scripts/bench_lag.py            # ~10 min on 2 busy cores
    python scripts/bench_lag.py --quick    # smoke test, ~1 min
Writes the table to runs/bench_lag-<time>/table.md (a fresh untracked folder) and prints it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

import lightning.pytorch as pl  # noqa: E402
import torch  # noqa: E402

from parlightning.data import RolloutDataModule  # noqa: E402
from parlightning.envs.external import ExternalBatchedEnv  # noqa: E402
from parlightning.envs.swarm import SwarmEnv  # noqa: E402
from parlightning.module import PPOModule  # noqa: E402
from parlightning.subagents import PoolOrchestrationWorld, SimulatedPool  # noqa: E402


class Clock(pl.Callback):
    """Wall time at every epoch end, and each rollout's stats."""

    def __init__(self) -> None:
        self.ends: list[float] = []
        self.stats: list[dict[str, float]] = []

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.ends.append(time.perf_counter())
        self.stats.append({k: float(v) for k, v in trainer.datamodule.last_rollout.stats.items()})


def pool_world(latency: float):
    def factory(num_envs: int, device: str, seed: int) -> ExternalBatchedEnv:
        pool = SimulatedPool(reliability=0.9, seconds_per_step=latency / 4, seed=seed)
        return ExternalBatchedEnv(num_envs, device, seed, world=PoolOrchestrationWorld,
                                  world_kwargs={"pool": pool, "main_seconds": latency}, step_timeout=30)
    return factory


def swarm(num_envs: int, device: str, seed: int) -> SwarmEnv:
    return SwarmEnv(num_envs=num_envs, device=device, seed=seed)


def run(env, lag: int, seed: int, epochs: int, num_envs: int, num_steps: int, update_epochs: int,
        minibatches: int) -> dict[str, float]:
    pl.seed_everything(seed, verbose=False)
    dm = RolloutDataModule(env=env, num_envs=num_envs, num_steps=num_steps, update_epochs=update_epochs,
                           num_minibatches=minibatches, seed=seed, max_policy_lag=lag)
    clock = Clock()
    trainer = pl.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[clock], accelerator="cpu", devices=1)
    trainer.fit(PPOModule(lr=1e-3, activation="relu", anneal_lr=False), datamodule=dm)
    steps = num_envs * num_steps * (epochs - 1)
    sps = steps / (clock.ends[-1] - clock.ends[0])
    tail = clock.stats[1:]
    collect_share = statistics.mean(  # sync: rollout time / iteration time
        (num_envs * num_steps / s["rollout/SPS"]) / (num_envs * num_steps / s["charts/SPS"])
        for s in tail if "charts/SPS" in s)
    last = clock.stats[-3:]
    return {
        "sps": sps, "collect_share": collect_share,
        "success": statistics.mean(s["rollout/success_rate"] for s in last),
        "lag": statistics.mean(s.get("perf/policy_lag", 0.0) for s in tail),
        "learner_wait": statistics.mean(s.get("perf/learner_wait_frac", 1.0) for s in tail[1:] or tail),
    }


def mean_std(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def welch(a: list[float], b: list[float]) -> str:
    if len(a) < 2 or len(b) < 2:
        return "n/a (1 seed)"
    from scipy.stats import ttest_ind

    p = float(ttest_ind(a, b, equal_var=False).pvalue)
    return f"p = {p:.2f}" + ("" if p < 0.05 else " (not significant)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke test: 2 latencies, 1 seed, few epochs")
    parser.add_argument("--latencies", type=float, nargs="+", default=[0.001, 0.005, 0.01, 0.02, 0.05],
                        help="seconds each env step waits")
    parser.add_argument("--lags", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--learn-latency", type=float, default=0.005, help="latency of the learning comparison")
    parser.add_argument("--epochs", type=int, default=10, help="PPO iterations per throughput run")
    parser.add_argument("--learn-epochs", type=int, default=40, help="PPO iterations per learning run")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--num-steps", type=int, default=16)
    parser.add_argument("--update-epochs", type=int, default=4)
    parser.add_argument("--minibatches", type=int, default=4)
    parser.add_argument("--swarm-envs", type=int, default=256)
    parser.add_argument("--swarm-epochs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None, help="output folder (default runs/bench_lag-<time>)")
    args = parser.parse_args()
    if args.quick:
        args.latencies, args.seeds, args.epochs, args.learn_epochs = [0.001, 0.01], 1, 4, 4
        args.swarm_envs, args.swarm_epochs = 64, 4
    torch.set_num_threads(1)
    out = args.out or ROOT / "runs" / f"bench_lag-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=False)
    shape = dict(num_envs=args.num_envs, num_steps=args.num_steps, update_epochs=args.update_epochs,
                 minibatches=args.minibatches)
    lines = [f"PoolOrchestrationWorld, N={args.num_envs} actors (threads), T={args.num_steps}, update "
             f"{args.update_epochs} epochs x {args.minibatches} minibatches; env steps/s over epochs 2..{args.epochs}, "
             "seed 0", "",
             "| latency / step | collecting share (lag 0) | ideal overlap | " + " | ".join(f"lag {k} steps/s" for k in args.lags)
             + " | " + " | ".join(f"lag {k} / lag 0" for k in args.lags if k) + " | mean lag (" + ", ".join(f"lag {k}" for k in args.lags if k) + ") |",
             "|---" * (3 + len(args.lags) + sum(1 for k in args.lags if k) + 1) + "|"]
    for latency in args.latencies:
        res = {k: run(pool_world(latency), k, 0, args.epochs, **shape) for k in args.lags}
        base = res[args.lags[0]]["sps"]
        lags = ", ".join(f"{res[k]['lag']:.2f}" for k in args.lags if k)
        share = res[args.lags[0]]["collect_share"]
        lines.append(f"| {latency * 1000:g} ms | {share:.2f} | {1 / max(share, 1 - share):.2f}x | "
                     + " | ".join(f"{res[k]['sps']:.0f}" for k in args.lags) + " | "
                     + " | ".join(f"{res[k]['sps'] / base:.2f}x" for k in args.lags if k) + f" | {lags} |")
        print(lines[-1], flush=True)

    def learning(title: str, env, epochs: int, **kw) -> None:
        finals = {k: [] for k in args.lags}
        speeds = {k: [] for k in args.lags}
        for seed in range(args.seeds):
            for k in args.lags:
                r = run(env, k, seed, epochs, **kw)
                finals[k].append(r["success"])
                speeds[k].append(r["sps"])
        lines.extend(["", title, "", "| lag | env steps/s | final success rate | vs lag 0 |", "|---|---|---|---|"])
        for k in args.lags:
            lines.append(f"| {k} | {mean_std(speeds[k])} | {mean_std(finals[k])} | "
                         f"{'—' if k == args.lags[0] else welch(finals[k], finals[args.lags[0]])} |")
            print(lines[-1], flush=True)

    learning(f"Learning at equal env steps, PoolOrchestrationWorld at {args.learn_latency * 1000:g} ms/step: "
             f"{args.learn_epochs} iterations x {args.num_envs * args.num_steps} env steps, {args.seeds} seeds "
             "(mean ± std over seeds; Welch's t-test vs lag 0)", pool_world(args.learn_latency), args.learn_epochs,
             **shape)
    learning(f"SwarmEnv (tensor ops, CPU): N={args.swarm_envs}, T=32, update 4 x 4; {args.swarm_epochs} iterations, "
             f"{args.seeds} seeds", swarm, args.swarm_epochs, num_envs=args.swarm_envs, num_steps=32, update_epochs=4,
             minibatches=4)
    table = "\n".join(lines)
    (out / "table.md").write_text(table + "\n")
    print(f"\n{table}\n\nwritten to {out / 'table.md'}")


if __name__ == "__main__":
    main()
