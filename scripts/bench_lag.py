"""What the lag budget buys: env steps/s and learning with `data.max_policy_lag` 0 vs 1 vs 2.

The world waits on real latency: `PoolOrchestrationWorld` behind `ExternalBatchedEnv` (one
thread per actor, in the collector's process or in worker processes), on a `SimulatedPool`
whose subagents sleep. Every env step waits L seconds
(the orchestrator's own call, `main_seconds=L`, while its subagents sleep up to
(cost + 1) x L / 4 <= L beside it), for L over `--latencies`. Throughput is env steps per
second of the whole loop (rollout + update) over iterations 2..`--epochs`. c is the share of a
synchronous (lag 0) iteration spent collecting, and 1 / max(c, 1 - c) is what a perfect overlap
of collection and update could give: overlap can only pay where c is near 0.5.

Part 0, overhead: ms per batched env step of the 16 actors (`ExternalBatchedEnv` alone: wall and
CPU, also beside a thread that trains a small MLP as the learner does), worlds on threads and in
worker processes, including a world that burns 1 ms of Python per step (what threads serialise).

Part 1, balanced (the headline table), per latency and mode (`--modes collector:workers`: the
collector in a thread of the trainer or in its own process, `data.collect_in`; the worlds on
threads or in P worker processes): the update work is calibrated per latency so that the
synchronous iteration spends about half its time collecting. How: the minibatch shape stays
(`--minibatches` per epoch); a short lag-0 probe at `--probe-epochs` update epochs measures the
collect time C and the update time U of an iteration (iterations 2..`--probe-iters`); a second
probe at E1 = round(probe_epochs x C / U) measures again, U(E) = b E is fitted through both
(least squares through the origin), and the update runs E = round(C / b) epochs (C: the probes'
mean; clamped to 1..`--max-update-epochs`). The table prints E and the c the lag-0 runs then
measured (the load moves between probe and run, so c lands near, not at, 0.5; at 1 ms even
E = 1 is about as long as collecting). Per worlds setting, each repeat runs lag 0 once and then
every mode's lags 1 and 2 (`--repeats` times, interleaved), so the modes with the same worlds
share one lag-0 baseline measured beside them; steps/s is the mean over repeats, the ratio is of
those means, with the per-repeat ratios' range beside it. A second table splits each iteration
into the collector's round C, the learner's update U (the iteration less its wait for a
rollout) and the iteration: lag 0 takes C + U, a perfect overlap max(C, U) of lag 0, and the
growth of C and U under lag is what sharing the cores and the GIL costs.

Part 2, fixed: the same worlds with a fixed update (`--update-epochs` x `--minibatches`) at
every latency, one run per lag: c then drifts with latency (0.46-0.90 here).

Part 3, learning at equal env steps: final success rate (mean of the last 3 rollouts,
stochastic policy), lags 0/1/2 x `--seeds` seeds at `--learn-latency` with that latency's
balanced E (from Part 1 when it is in `--latencies`, else probed), mean ± std and Welch's
t-test vs lag 0. Lagged runs collect in a thread and in a process (`--learn-collect-in`). Then SwarmEnv (pure
tensor ops, CPU, fixed 4 x 4): the same comparison.

    python scripts/bench_lag.py            # ~45 min on 2 quiet cores
    python scripts/bench_lag.py --quick    # smoke test, ~3 min
Writes the tables to runs/bench_lag-<time>/table.md (a fresh untracked folder) and prints them,
with the load average (`os.getloadavg`) before and after each part: wall-clock ratios on a
shared machine are noisy (the other jobs take cores and the GIL competition changes with them).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from parlightning.cli.entry import refuse_bad_environment  # noqa: E402  stdlib only

refuse_bad_environment()  # before Lightning: torchmetrics reads LOCAL_RANK as it is imported
import lightning.pytorch as pl  # noqa: E402
import torch  # noqa: E402

from parlightning.cli.arg_types import (  # noqa: E402
    ScriptParser,
    MAX_PROCESSES, actor_count, as_path, non_negative_int, output_folder, positive_float, positive_int, step_count,
    worker_count,
)

from parlightning.ppo.data import RolloutDataModule  # noqa: E402
from parlightning.envs.external import ExternalBatchedEnv  # noqa: E402
from parlightning.envs.swarm import SwarmEnv  # noqa: E402
from parlightning.ppo.module import PPOModule  # noqa: E402
from parlightning.subagents import PoolOrchestrationWorld  # noqa: E402


class Clock(pl.Callback):
    """Wall time at every epoch end, and each rollout's stats."""

    def __init__(self) -> None:
        self.ends: list[float] = []
        self.stats: list[dict[str, float]] = []

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.ends.append(time.perf_counter())
        self.stats.append({k: float(v) for k, v in trainer.datamodule.last_rollout.stats.items()})


def pool_env(latency: float, workers: int, cpu: float, num_envs: int, device: str, seed: int) -> ExternalBatchedEnv:
    """The latency world: worlds on threads (workers 0) or in `workers` processes (each with its own
    pool: a pool spec is built in each worker); `cpu`: seconds of Python per world step."""
    pool = {"class_path": "parlightning.subagents.SimulatedPool",
            "init_args": {"reliability": 0.9, "seconds_per_step": latency / 4, "seed": seed}}
    return ExternalBatchedEnv(num_envs, device, seed, world=PoolOrchestrationWorld,
                              world_kwargs={"main_seconds": latency, "main_cpu_seconds": cpu},
                              shared={"pool": pool}, step_timeout=30, workers=workers)


def pool_world(latency: float, workers: int = 0, cpu: float = 0.0) -> functools.partial:
    """`pool_env`'s factory (a partial: it pickles, so a collector process can build it)."""
    return functools.partial(pool_env, latency, workers, cpu)


def worlds_name(workers: int) -> str:
    return "threads" if workers == 0 else f"{workers} processes"


def parse_mode(text: str) -> tuple[str, int]:
    """`--modes` entry `collector:workers` (e.g. thread:0, thread:2, process:0) -> (collect_in, workers)."""
    where, _, workers = text.partition(":")
    if where not in ("thread", "process") or not workers.isdigit() or int(workers) > MAX_PROCESSES:
        raise argparse.ArgumentTypeError(f"must be collector:workers, collector thread or process and workers "
                                         f"0..{MAX_PROCESSES}, e.g. thread:0, thread:2, process:0 (got {text!r})")
    return where, int(workers)


def mode_spec(text: str) -> str:
    """--modes: an entry `parse_mode` reads, kept as text."""
    parse_mode(text)
    return text


def mode_name(mode: tuple[str, int]) -> str:
    """How a mode reads in the tables: where the collector runs, where the worlds run."""
    where, workers = mode
    worlds = "worlds on threads" if workers == 0 else f"worlds in {workers} processes"
    return f"collector {where}, {worlds}" + (" (in it)" if where == "process" and workers == 0 else "")


def swarm(num_envs: int, device: str, seed: int) -> SwarmEnv:
    return SwarmEnv(num_envs=num_envs, device=device, seed=seed)


def run(env, lag: int, seed: int, epochs: int, num_envs: int, num_steps: int, update_epochs: int,
        minibatches: int, collect_in: str = "thread") -> dict[str, float]:
    pl.seed_everything(seed, verbose=False)
    dm = RolloutDataModule(env=env, num_envs=num_envs, num_steps=num_steps, update_epochs=update_epochs,
                           num_minibatches=minibatches, seed=seed, max_policy_lag=lag,
                           collect_in=collect_in if lag else "thread")
    clock = Clock()
    trainer = pl.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[clock], accelerator="cpu", devices=1)
    trainer.fit(PPOModule(lr=1e-3, activation="relu", anneal_lr=False), datamodule=dm)
    steps = num_envs * num_steps * (epochs - 1)
    sps = steps / (clock.ends[-1] - clock.ends[0])
    tail = [s for s in clock.stats[1:] if "charts/SPS" in s]
    batch = num_envs * num_steps
    collect = statistics.mean(batch / s["rollout/SPS"] for s in tail)  # seconds collecting per iteration
    iteration = statistics.mean(batch / s["charts/SPS"] for s in tail)  # seconds per iteration (sync: C + U)
    waits = [s["perf/learner_wait_frac"] for s in tail if "perf/learner_wait_frac" in s]
    # seconds the learner worked per iteration: all of it but the wait for a rollout (sync: iteration - collect)
    busy = iteration * (1 - statistics.mean(waits)) if waits else iteration - collect
    last = clock.stats[-3:]
    return {
        "sps": sps, "collect": collect, "iteration": iteration, "collect_share": collect / iteration, "busy": busy,
        "success": statistics.mean(s["rollout/success_rate"] for s in last),
        "lag": statistics.mean(s.get("perf/policy_lag", 0.0) for s in tail),
    }


def calibrate(env, args) -> tuple[int, list[str]]:
    """Update epochs E for which a lag-0 iteration collects about half the time (see the docstring)."""
    shape = dict(num_envs=args.num_envs, num_steps=args.num_steps, minibatches=args.minibatches)
    e0 = args.probe_epochs
    p0 = run(env, 0, 0, args.probe_iters, update_epochs=e0, **shape)
    u0 = p0["iteration"] - p0["collect"]
    e1 = max(1, min(args.max_update_epochs, round(e0 * p0["collect"] / max(u0, 1e-9))))
    notes = [f"probe E={e0}: C={p0['collect'] * 1e3:.0f} ms, U={u0 * 1e3:.0f} ms"]
    if e1 == e0:
        return e0, notes
    p1 = run(env, 0, 0, args.probe_iters, update_epochs=e1, **shape)
    u1 = p1["iteration"] - p1["collect"]
    notes.append(f"probe E={e1}: C={p1['collect'] * 1e3:.0f} ms, U={u1 * 1e3:.0f} ms")
    # U(E) = b E, least squares through both probes (a secant through two noisy points extrapolates badly)
    b = (e0 * u0 + e1 * u1) / (e0 ** 2 + e1 ** 2)
    target = statistics.mean([p0["collect"], p1["collect"]])
    return max(1, min(args.max_update_epochs, round(target / max(b, 1e-9)))), notes


def overhead(cases: list[tuple[float, float]], workers: list[int], num_envs: int, steps: int = 100,
             repeats: int = 3) -> list[str]:
    """ms per batched env step of `ExternalBatchedEnv` (N worlds) alone, and beside a learner thread
    (how much of its own speed that thread keeps while the env steps), per (latency, CPU seconds of
    Python per world step) case and per worlds mode (threads, worker processes)."""
    g = torch.Generator().manual_seed(0)
    actions = [torch.randint(0, 4, (num_envs, 3), generator=g) for _ in range(steps)]

    def next_task(done):
        return torch.randint(0, 12, (num_envs,), generator=g)

    def once(latency: Optional[float], learner: bool, cpu_s: float = 0.0, w: int = 0) -> tuple[float, float, float]:
        """(wall s, process CPU s) per step and the learner's it/s; latency None: the learner alone for 1 s."""
        stop, count = threading.Event(), [0]

        def learn() -> None:  # forward/backward/Adam on a small MLP in a loop, as PPO's update does
            net = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                      torch.nn.ReLU(), torch.nn.Linear(64, 10))
            opt, x = torch.optim.Adam(net.parameters()), torch.randn(64, 20)
            while not stop.is_set():
                opt.zero_grad()
                net(x).square().mean().backward()
                opt.step()
                count[0] += 1

        thread = threading.Thread(target=learn) if learner else None
        if thread is not None:
            thread.start()
            while count[0] < 3:  # the thread's first backward pass starts slowly
                time.sleep(0.01)
        env = None
        if latency is not None:
            env = pool_world(latency, w, cpu_s)(num_envs, "cpu", 0)
            env.reset(task_index=torch.zeros(num_envs, dtype=torch.long))
            procs = env.worker_pids
            for a in actions[:10]:
                env.step(a, next_task)
        c0, t0, n0 = time.process_time() + workers_cpu(procs if env else []), time.perf_counter(), count[0]
        if env is None:
            time.sleep(1.0)
        else:
            for a in actions:
                env.step(a, next_task)
        wall = time.perf_counter() - t0
        cpu = time.process_time() + workers_cpu(procs if env else []) - c0
        rate = (count[0] - n0) / wall
        stop.set()
        if thread is not None:
            thread.join()
        if env is not None:
            env.close()
        return wall / steps, cpu / steps, rate

    lines = [f"Overhead: ExternalBatchedEnv, N={num_envs} PoolOrchestrationWorld actors, ms per batched env step, "
             f"median of {repeats} x {steps} steps. Worlds on threads in this process, or in worker processes. "
             "CPU: this process's and its worker processes' together. Beside a learner: a thread trains a 64-64 MLP "
             "(forward, backward, Adam) meanwhile; its speed is given as a share of its speed alone, measured just "
             "before", "",
             "| latency / step | Python per world step | worlds | wall, alone | CPU, alone | wall, beside the learner "
             "| learner speed kept |", "|---|---|---|---|---|---|---|"]
    for latency, cpu_s in cases:
        for w in workers:
            alone = [once(latency, False, cpu_s, w) for _ in range(repeats)]
            kept, beside = [], []
            for _ in range(repeats):
                solo = once(None, True)[2]
                beside.append(once(latency, True, cpu_s, w))
                kept.append(beside[-1][2] / max(solo, 1e-9))
            med = lambda rows, j: statistics.median(r[j] for r in rows)  # noqa: E731
            lines.append(f"| {latency * 1000:g} ms | {cpu_s * 1000:g} ms | {worlds_name(w)} | "
                         f"{med(alone, 0) * 1e3:.2f} | {med(alone, 1) * 1e3:.2f} | {med(beside, 0) * 1e3:.2f} | "
                         f"{statistics.median(kept):.0%} |")
            print(lines[-1], flush=True)
    return lines


def workers_cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) the worker processes `pids` used so far (Linux /proc)."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


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


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def build_parser() -> argparse.ArgumentParser:
    parser = ScriptParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke test: 2 latencies, 1 seed, few epochs")
    parser.add_argument("--parts", nargs="+", default=["overhead", "balanced", "fixed", "learn", "swarm"],
                        choices=["overhead", "balanced", "fixed", "learn", "swarm"])
    parser.add_argument("--latencies", type=positive_float, nargs="+", default=[0.001, 0.005, 0.01, 0.02, 0.05],
                        help="seconds each env step waits")
    parser.add_argument("--lags", type=non_negative_int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--repeats", type=positive_int, default=3, help="interleaved repeats of each lag (balanced table)")
    parser.add_argument("--seeds", type=positive_int, default=3)
    parser.add_argument("--learn-latency", type=positive_float, default=0.01, help="latency of the learning comparison")
    parser.add_argument("--epochs", type=positive_int, default=10, help="PPO iterations per throughput run")
    parser.add_argument("--learn-epochs", type=positive_int, default=40, help="PPO iterations per learning run")
    parser.add_argument("--workers", type=worker_count, nargs="+", default=[0, 2],
                        help="worlds modes of the overhead table: 0 threads, P worker processes")
    parser.add_argument("--modes", nargs="+", type=mode_spec, default=["thread:0", "thread:2", "process:0"],
                        help="balanced table: collector:workers, the collector in a thread or a process (data.collect_in) "
                             "and the worlds on threads (0) or in P worker processes")
    parser.add_argument("--learn-collect-in", nargs="+", default=["thread", "process"], choices=["thread", "process"],
                        help="where the lagged runs of the learning comparisons collect")
    parser.add_argument("--num-envs", type=actor_count, default=16)
    parser.add_argument("--num-steps", type=step_count, default=16)
    parser.add_argument("--update-epochs", type=positive_int, default=4, help="the fixed table's update epochs")
    parser.add_argument("--minibatches", type=positive_int, default=4)
    parser.add_argument("--probe-epochs", type=positive_int, default=4, help="update epochs of the first calibration probe")
    parser.add_argument("--probe-iters", type=positive_int, default=5, help="PPO iterations per calibration probe")
    parser.add_argument("--max-update-epochs", type=positive_int, default=200)
    parser.add_argument("--swarm-envs", type=actor_count, default=256)
    parser.add_argument("--swarm-epochs", type=positive_int, default=20)
    parser.add_argument("--out", type=as_path(output_folder), default=None, help="output folder (default runs/bench_lag-<time>)")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    if args.quick:
        args.latencies, args.seeds, args.epochs, args.learn_epochs = [0.001, 0.01], 1, 4, 4
        args.repeats, args.probe_iters, args.swarm_envs, args.swarm_epochs = 1, 3, 64, 4
    torch.set_num_threads(1)
    out = args.out or ROOT / "runs" / f"bench_lag-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=False)
    started = time.perf_counter()
    lines: list[str] = [f"torch {torch.__version__}, {os.cpu_count()} CPUs, 1 intra-op thread; start: {load()}"]
    print(lines[0], flush=True)
    nonzero = [k for k in args.lags if k]

    def header(*first: str) -> list[str]:
        cols = [*first, "c (lag 0)", "ideal overlap", *(f"lag {k} steps/s" for k in args.lags),
                *(f"lag {k} / lag 0" for k in nonzero), "mean lag (" + ", ".join(f"lag {k}" for k in nonzero) + ")"]
        return ["| " + " | ".join(cols) + " |", "|---" * len(cols) + "|"]

    def section(title: str, body: list[str]) -> None:
        lines.extend(["", title, *body, f"({load()})"])
        print(lines[-1], flush=True)

    if "overhead" in args.parts:
        cases = [(0.0, 0.0), (0.001, 0.0), (0.01, 0.0), (0.01, 0.001)]  # (latency, Python seconds per world step)
        body = overhead(cases, args.workers, args.num_envs, steps=50 if args.quick else 100,
                        repeats=1 if args.quick else 3)
        section("", body)

    shape = dict(num_envs=args.num_envs, num_steps=args.num_steps, minibatches=args.minibatches)
    balanced_epochs: dict[float, int] = {}
    if "balanced" in args.parts or "learn" in args.parts:
        latencies = args.latencies if "balanced" in args.parts else [args.learn_latency]
        body = [f"Balanced: PoolOrchestrationWorld, N={args.num_envs} actors, T={args.num_steps}, "
                f"update E epochs x {args.minibatches} minibatches with E calibrated per latency (c ~ 0.5); env "
                f"steps/s over iterations 2..{args.epochs}, seed 0, lags interleaved x {args.repeats} repeats "
                "(ratio of means; per-repeat range in brackets). Modes: the collector in a thread of the trainer or "
                "in its own process (data.collect_in), the worlds on threads (of the collector's process) or in "
                "worker processes. Lag 0 is the synchronous loop with the mode's worlds: one lag-0 run per repeat, shared "
                "by the modes with the same worlds (so their rows show the same lag-0 steps/s)", "",
                *header("latency / step", "mode", "update epochs E")]
        calibration = []
        split = ["", "Where the time goes (balanced runs, ms per iteration, mean over repeats): the collector's round "
                 "(C), the learner's update, i.e. the iteration less its wait for a rollout (U), and the iteration; "
                 "lag 0 iterates in C + U, a perfect overlap in max(C, U) of lag 0; contention shows as C and U "
                 "growing under lag", "", "| latency / step | mode | " + " | ".join(f"lag {k}: C / U / iteration"
                                                                                   for k in args.lags) + " |",
                 "|---" * (2 + len(args.lags)) + "|"]
        modes = [parse_mode(m) for m in args.modes]
        modes = modes if "balanced" in args.parts else modes[:1]
        worlds = list(dict.fromkeys(w for _, w in modes))  # lag 0 is the same loop whatever the collector
        for latency, w in [(latency, w) for latency in latencies for w in worlds]:
            E, notes = calibrate(pool_world(latency, w), args)
            calibration.append(f"- {latency * 1000:g} ms, {worlds_name(w)}: " + "; ".join(notes) + f" -> E={E}")
            balanced_epochs.setdefault(latency, E)  # the learning comparison uses the first worlds mode's
            if "balanced" not in args.parts:
                continue
            mine = [mode for mode in modes if mode[1] == w]
            base: list[dict[str, float]] = []  # one lag-0 run per repeat, shared by every collector mode
            res = {(mode, k): [] for mode in mine for k in nonzero}
            for _ in range(args.repeats):  # interleaved: lag 0, then each mode's lags, repeated
                base.append(run(pool_world(latency, w), args.lags[0], 0, args.epochs, update_epochs=E, **shape))
                for mode in mine:
                    for k in nonzero:
                        res[mode, k].append(run(pool_world(latency, w), k, 0, args.epochs, update_epochs=E,
                                                collect_in=mode[0], **shape))
            share = statistics.mean(r["collect_share"] for r in base)
            for mode in mine:
                rows = {args.lags[0]: base, **{k: res[mode, k] for k in nonzero}}
                mean = {k: statistics.mean(r["sps"] for r in rows[k]) for k in args.lags}

                def ratio(k: int) -> str:
                    per = [a["sps"] / b["sps"] for a, b in zip(rows[k], base)]
                    spread = f" [{min(per):.2f}-{max(per):.2f}]" if len(per) > 1 else ""
                    return f"{mean[k] / mean[args.lags[0]]:.2f}x{spread}"

                ms = lambda k, key: statistics.mean(r[key] for r in rows[k]) * 1e3  # noqa: E731
                split.append(f"| {latency * 1000:g} ms | {mode_name(mode)} | " + " | ".join(
                    f"{ms(k, 'collect'):.0f} / {ms(k, 'busy'):.0f} / {ms(k, 'iteration'):.0f}" for k in args.lags)
                    + " |")
                body.append(f"| {latency * 1000:g} ms | {mode_name(mode)} | {E} | {share:.2f} | "
                            f"{1 / max(share, 1 - share):.2f}x | "
                            + " | ".join(f"{mean[k]:.0f}" for k in args.lags) + " | "
                            + " | ".join(ratio(k) for k in nonzero) + " | "
                            + ", ".join(f"{statistics.mean(r['lag'] for r in rows[k]):.2f}" for k in nonzero) + " |")
                print(body[-1], flush=True)
        if "balanced" in args.parts:
            section("", body + split + ["", "Calibration (lag 0, C = collect and U = update time per iteration):",
                                        *calibration])
        else:
            lines.extend(["", "Calibration for the learning comparison:", *calibration])

    if "fixed" in args.parts:
        body = [f"Fixed update: PoolOrchestrationWorld, N={args.num_envs} actors on threads, T={args.num_steps}, "
                f"update {args.update_epochs} epochs x {args.minibatches} minibatches at every latency; env steps/s "
                f"over iterations 2..{args.epochs}, seed 0, one run per lag", "", *header("latency / step")]
        for latency in args.latencies:
            res = {k: run(pool_world(latency), k, 0, args.epochs, update_epochs=args.update_epochs, **shape)
                   for k in args.lags}
            base = res[args.lags[0]]["sps"]
            share = res[args.lags[0]]["collect_share"]
            body.append(f"| {latency * 1000:g} ms | {share:.2f} | {1 / max(share, 1 - share):.2f}x | "
                        + " | ".join(f"{res[k]['sps']:.0f}" for k in args.lags) + " | "
                        + " | ".join(f"{res[k]['sps'] / base:.2f}x" for k in nonzero) + " | "
                        + ", ".join(f"{res[k]['lag']:.2f}" for k in nonzero) + " |")
            print(body[-1], flush=True)
        section("", body)

    def learning(title: str, env, epochs: int, **kw) -> None:
        """Lag 0 and every nonzero lag per `--learn-collect-in`, interleaved per seed."""
        arms = [(args.lags[0], "thread")] + [(k, where) for where in args.learn_collect_in for k in nonzero]
        finals: dict[tuple[int, str], list[float]] = {arm: [] for arm in arms}
        speeds: dict[tuple[int, str], list[float]] = {arm: [] for arm in arms}
        for seed in range(args.seeds):
            for k, where in arms:  # interleaved: seed 0 at every arm, then seed 1, ...
                r = run(env, k, seed, epochs, collect_in=where, **kw)
                finals[k, where].append(r["success"])
                speeds[k, where].append(r["sps"])
        base = arms[0]
        body = ["| lag | collector | env steps/s | final success rate | vs lag 0 |", "|---|---|---|---|---|"]
        for arm in arms:
            body.append(f"| {arm[0]} | {'—' if arm == base else arm[1]} | {mean_std(speeds[arm])} | "
                        f"{mean_std(finals[arm])} | {'—' if arm == base else welch(finals[arm], finals[base])} |")
            print(body[-1], flush=True)
        section(title, [""] + body)

    if "learn" in args.parts:
        E = balanced_epochs.get(args.learn_latency)
        if E is None:
            E, notes = calibrate(pool_world(args.learn_latency), args)
            lines.extend(["", f"Calibration at {args.learn_latency * 1000:g} ms: " + "; ".join(notes) + f" -> E={E}"])
        learning(f"Learning at equal env steps, PoolOrchestrationWorld at {args.learn_latency * 1000:g} ms/step, "
                 f"balanced update ({E} epochs x {args.minibatches} minibatches): {args.learn_epochs} iterations x "
                 f"{args.num_envs * args.num_steps} env steps, {args.seeds} seeds (mean ± std over seeds; Welch's "
                 "t-test vs lag 0)", pool_world(args.learn_latency), args.learn_epochs, update_epochs=E, **shape)
    if "swarm" in args.parts:
        learning(f"SwarmEnv (tensor ops, CPU): N={args.swarm_envs}, T=32, update 4 x 4; {args.swarm_epochs} "
                 f"iterations, {args.seeds} seeds", swarm, args.swarm_epochs, num_envs=args.swarm_envs, num_steps=32,
                 update_epochs=4, minibatches=4)
    lines.append(f"\nTotal {(time.perf_counter() - started) / 60:.1f} min; end: {load()}")
    table = "\n".join(lines)
    (out / "table.md").write_text(table + "\n")
    print(f"\n{table}\n\nwritten to {out / 'table.md'}")


if __name__ == "__main__":
    from parlightning.cli.script_main import run_main

    run_main(main)
