"""Per-actor asynchronous collection (`data.collect: trajectories`) against lock-step and the round
lag budget, on `PoolOrchestrationWorld` with a lognormal model-call latency (median 20 ms, sigma
0.8 by default), in one run:

1. utilisation and throughput at each N: subagent utilisation = the seconds of calls the worlds
   waited for (as drawn: `PoolOrchestrationWorld.busy_seconds`), summed over worlds, / (N x wall
   seconds); learner throughput = trained env steps / wall seconds; both from the end of the
   first PPO iteration to the end of the last (start-up excluded). Same N, T, model and PPO
   epochs per schedule. Per-actor collection runs twice or more: the worlds on one event loop in
   the trainer's process, and in P worker processes (`workers: P`, `--workers`). Where the time
   goes: CPU microseconds per trained step in the trainer's process (all its threads) and in the
   worker processes, over the same window; and the machine's 1-minute load average.
2. learning: configs/external.yaml's world and PPO settings (no latency: seconds_per_step as
   shipped) at equal trained env steps, lock-step vs per-actor, over seeds; held-out success on
   three task banks the run never trained on (bank_seed 2234, 3234, 4234), greedy, mean +- std
   and a 95% t CI per schedule, and the difference's 95% bootstrap CI (seeds and banks
   resampled); subagents per held-out episode; the share of samples dropped for staleness.
3. faults: 5% of calls raise, 1% hang (step_timeout short); on_error: drop completes and logs the
   dropped share; on_error: fail ends with one error naming world, actor, task and call.

    python scripts/bench_async.py                  # the README's table (writes docs/results/async.md)
    python scripts/bench_async.py --quick          # seconds: small N, few epochs (a test runs it)
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))  # the shared experiment helpers (held-out banks, intervals)

from parlightning.cli.entry import refuse_bad_environment  # noqa: E402  stdlib only

refuse_bad_environment()  # before Lightning: torchmetrics reads LOCAL_RANK as it is imported
import lightning.pytorch as pl  # noqa: E402
import torch  # noqa: E402

from parlightning.ppo.data import RolloutDataModule  # noqa: E402
from parlightning.envs.external import ExternalBatchedEnv  # noqa: E402
from parlightning.cli.evaluate import greedy_action, run_episodes  # noqa: E402
from parlightning.ppo.module import PPOModule  # noqa: E402
from parlightning.cli.arg_types import ScriptParser, actor_count, output_file, positive_int, worker_count  # noqa: E402
from parlightning.parl.reward import LinearSchedule, PARLReward  # noqa: E402
from parlightning.subagents.world import AsyncPoolOrchestrationWorld, PoolOrchestrationWorld  # noqa: E402
from experiment import mean_ci, nested_diff_ci  # noqa: E402

T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}
WORLD = {"families": ["solo", "fanout", "locked"], "tasks_per_family": 4, "max_width": 3, "n_skills": 3}
SCHEDULES = {  # name -> data module keys
    "lock-step": {"max_policy_lag": 0},
    "round lag 1": {"max_policy_lag": 1},
    "per-actor": {"collect": "trajectories", "max_policy_lag": 2},
}
WORKERS = (1,)  # the per-actor workers rows' world processes (--workers): 1 on a 2-core machine shared with other jobs


def schedules(workers: int | tuple = ()) -> dict:
    """name -> (data module keys, env keys): the schedules above (worlds on threads / one event loop
    in the trainer's process), and per-actor collection with the worlds in P worker processes, one
    row per P in `workers`."""
    rows = {name: (keys, {}) for name, keys in SCHEDULES.items()}
    for p in (workers,) if isinstance(workers, int) else workers:
        if p:
            rows[f"per-actor, {p} worker{'s' if p > 1 else ''}"] = (SCHEDULES["per-actor"], {"workers": p})
    return rows


class WorldEnv:
    """`data.env` for the benchmark: ExternalBatchedEnv on PoolOrchestrationWorld (a picklable factory)."""

    def __init__(self, world_kwargs: dict, seconds_per_step: float = 0.0, world: type = PoolOrchestrationWorld,
                 **env_kwargs) -> None:
        self.world_kwargs, self.seconds_per_step, self.env_kwargs = world_kwargs, seconds_per_step, env_kwargs
        self.world = world
        self.worlds: list = []  # the worlds of the largest env built (closing the env forgets them)

    def __call__(self, num_envs: int, device: str, seed: int) -> ExternalBatchedEnv:
        env = self._build(num_envs, device, seed)
        if len(env.worlds) >= len(self.worlds):
            self.worlds = env.worlds
        return env

    def _build(self, num_envs: int, device: str, seed: int) -> ExternalBatchedEnv:
        return ExternalBatchedEnv(num_envs, device, seed, world=self.world,
                                  world_kwargs={**WORLD, **self.world_kwargs},
                                  shared={"pool": {"class_path": "parlightning.subagents.SimulatedPool",
                                                   "init_args": {"reliability": 0.9,
                                                                 "seconds_per_step": self.seconds_per_step}}},
                                  **self.env_kwargs)


def fit(dm: RolloutDataModule, epochs: int, seed: int, module: PPOModule | None = None) -> tuple[PPOModule, float]:
    module = module or PPOModule(lr=0.001, hidden_sizes=[64, 64], activation="relu", anneal_lr=False)
    trainer = pl.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu", devices=1)
    start = time.perf_counter()
    trainer.fit(module, datamodule=dm)
    return module, time.perf_counter() - start


def throughput_row(n: int, steps: int, epochs: int, latency: tuple[float, float], name: str, world: type,
                   rows: dict | None = None) -> dict:
    pl.seed_everything(0, verbose=False)
    keys, env_keys = (rows or schedules(0))[name]
    env = WorldEnv({"call_latency": list(latency)}, world=world, step_timeout=60.0, **env_keys)
    dm = RolloutDataModule(env=env, num_envs=n, num_steps=steps, update_epochs=1, num_minibatches=1, **keys)
    marks = []  # (time, busy seconds, env steps, stale share) at each iteration's end: the steady state

    def busy() -> float:
        """The seconds of calls the worlds waited for, as drawn (`busy_seconds`): read from the worlds
        here, or (per-actor collection, wherever the worlds run) summed by the collector from what
        each answered call added to its world's count: the same numbers."""
        transport = dm.collector.transport
        if hasattr(transport, "busy_total"):
            return transport.busy_total
        return sum(w.busy_seconds for w in env.worlds)

    def worker_cpu() -> float:
        """CPU seconds the world worker processes have used (Linux /proc; 0 without workers)."""
        total = 0.0
        for pid in dm.collector.env.worker_pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            except (OSError, ValueError, IndexError):
                pass
        return total

    class Mark(pl.Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            stale = float(dm.last_rollout.stats.get("collect/stale_share", torch.tensor(0.0)))
            marks.append((time.perf_counter(), busy(), dm.env_steps, stale, time.process_time(), worker_cpu()))

    try:
        trainer = pl.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, accelerator="cpu", devices=1, callbacks=[Mark()])
        trainer.fit(PPOModule(lr=0.001, hidden_sizes=[64, 64], activation="relu", anneal_lr=False), datamodule=dm)
    finally:
        dm.teardown("fit")
    (t0, b0, s0, _, c0, w0), (t1, b1, s1, _, c1, w1) = marks[0], marks[-1]  # start-up excluded
    wall, steps = t1 - t0, s1 - s0
    return {"schedule": name, "N": n, "utilisation": (b1 - b0) / (n * wall), "samples_per_s": steps / wall,
            "stale_share": statistics.mean(m[3] for m in marks[1:]), "wall_s": wall, "env_steps": steps,
            "trainer_cpu_us": 1e6 * (c1 - c0) / steps, "worker_cpu_us": 1e6 * (w1 - w0) / steps}


HELD_OUT_BANKS = (2234, 3234, 4234)  # the world trains on bank 1234 (its default)


def held_out(policy: torch.nn.Module, seed: int, episodes: int) -> list[dict]:
    """Greedy success and subagents per episode on each held-out bank (12 tasks x `episodes`
    episodes per bank)."""
    rows = []
    for bank in HELD_OUT_BANKS:
        env = WorldEnv({"bank_seed": bank}, seconds_per_step=0.0)(12 * episodes, "cpu", 10_000 + seed)
        try:
            ep = run_episodes(env, lambda obs: greedy_action(policy, obs), seed=10_000 + seed)
        finally:
            env.close()
        rows.append({"bank": bank, "success": float((ep.parts["outcome"] >= 1.0).float().mean()),
                     "subagents": float(ep.parts["n_subagents"].float().mean())})
    return rows


def learning_run(name: str, seed: int, epochs: int, episodes: int) -> dict:
    """configs/external.yaml's world and PPO settings (N=32, T=16, 4x4 minibatches, PARL shaping)."""
    pl.seed_everything(seed, verbose=False)
    reward = PARLReward(max_subagents=6, lambda1=LinearSchedule(0.1, 0.0, 15000),
                        lambda2=LinearSchedule(0.1, 0.0, 15000))
    dm = RolloutDataModule(env=WorldEnv({}, seconds_per_step=0.001, step_timeout=30), num_envs=32, num_steps=16,
                           update_epochs=4, num_minibatches=4, reward=reward, **SCHEDULES[name])
    stale = []
    try:
        module = PPOModule(lr=0.001, hidden_sizes=[64, 64], activation="relu", anneal_lr=True)

        class Stale(pl.Callback):
            def on_train_epoch_end(self, trainer, pl_module):
                stale.append(float(dm.last_rollout.stats.get("collect/stale_share", torch.tensor(0.0))))

        trainer = pl.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, accelerator="cpu", devices=1, callbacks=[Stale()])
        trainer.fit(module, datamodule=dm)
    finally:
        dm.teardown("fit")
    banks = held_out(module.policy.eval(), seed, episodes)
    return {"schedule": name, "seed": seed, "env_steps": dm.env_steps, "banks": banks,
            "held_out_success": statistics.mean(b["success"] for b in banks),
            "subagents": statistics.mean(b["subagents"] for b in banks),
            "stale_share": statistics.mean(stale) if stale else 0.0}


def fault_runs(n: int, epochs: int, workers: int = 0) -> dict:
    """on_error: drop (the worlds here, and in `workers` worker processes) and on_error: fail."""
    out = {}
    faults = {"call_latency": [0.002, 0.8], "fail_rate": 0.05, "hang_rate": 0.01, "hang_seconds": 30.0}
    dropped: list = []
    segments: list = []

    class Count(pl.Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            s = dm.last_rollout.stats
            dropped.append(float(s["collect/dropped_trajectories"]))
            segments.append(float(s["collect/segments"]))

    for key, extra in (("drop", {}), ("drop_workers", {"workers": workers} if workers else None)):
        if extra is None:
            continue
        pl.seed_everything(0, verbose=False)
        dropped, segments = [], []
        dm = RolloutDataModule(env=WorldEnv(faults, on_error="drop", drop_budget=0.75, step_timeout=0.5, **extra),
                               num_envs=n, num_steps=4, update_epochs=1, num_minibatches=1, collect="trajectories",
                               max_policy_lag=2)
        try:
            trainer = pl.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False,
                                 enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
                                 callbacks=[Count()])
            trainer.fit(PPOModule(anneal_lr=False), datamodule=dm)
            out[key] = {"completed": trainer.current_epoch == epochs, "epochs": trainer.current_epoch,
                        "dropped": sum(dropped), "segments": sum(segments),
                        "dropped_share": sum(dropped) / max(sum(dropped) + sum(segments), 1.0)}
        finally:
            dm.teardown("fit")
    pl.seed_everything(0, verbose=False)
    dm = RolloutDataModule(env=WorldEnv({**faults, "hang_rate": 0.0}, on_error="fail", step_timeout=0.5),
                           num_envs=n, num_steps=8, update_epochs=1, num_minibatches=1, collect="trajectories",
                           max_policy_lag=2)
    try:
        fit(dm, epochs, 0)
        out["fail"] = "(no error)"
    except Exception as err:  # the CLI prints it as `error: ...`
        out["fail"] = f"error: {err}"
    finally:
        dm.teardown("fit")
    return out


def mean_std(xs: list[float]) -> tuple[float, float]:
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def build_parser() -> argparse.ArgumentParser:
    p = ScriptParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small N and budgets (seconds; a test runs it)")
    p.add_argument("--sizes", type=actor_count, nargs="+", default=None, help="N values for the utilisation table")
    p.add_argument("--seeds", type=positive_int, default=None, help="seeds of the learning check")
    p.add_argument("--learn_epochs", type=positive_int, default=None, help="PPO iterations per learning run")
    p.add_argument("--world", choices=("async", "thread"), default="async",
                   help="the utilisation table's worlds: async def on one event loop (default) or a thread each")
    p.add_argument("--workers", type=worker_count, nargs="+", default=list(WORKERS),
                   help="world processes of the 'per-actor, P workers' rows, one row per P (0: none)")
    p.add_argument("--epochs", type=positive_int, default=None,
                   help="PPO iterations per utilisation row (default 20, 8 at N >= 1000; the first is start-up)")
    p.add_argument("--parts", type=positive_int, nargs="+", default=[1, 2, 3], choices=(1, 2, 3),
                   help="which sections to run (1 2 3)")
    p.add_argument("--write", type=output_file, default=None,
                   help="results page to write (default docs/results/async.md, not with --quick)")
    return p


def main(argv: list[str] | None = None) -> dict:
    a = build_parser().parse_args(argv)
    torch.set_num_threads(1)
    sizes = a.sizes or ([16] if a.quick else [160, 1600])
    latency = (0.005, 0.8) if a.quick else (0.02, 0.8)
    seeds = a.seeds or (2 if a.quick else 5)
    learn_epochs = a.learn_epochs or (2 if a.quick else 40)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()
    lines = [f"# bench_async: {started}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
             f"{os.cpu_count()} CPUs, {platform.python_version()}",
             f"command: python scripts/bench_async.py {' '.join(argv if argv is not None else sys.argv[1:])}".rstrip()]
    rows: list[dict] = []
    world = AsyncPoolOrchestrationWorld if a.world == "async" else PoolOrchestrationWorld
    table = schedules(tuple(a.workers))
    for n in sizes if 1 in a.parts else []:
        steps, epochs = (4, 8) if n >= 1000 else (8, 20)
        if a.quick:
            epochs = 5
        for name in table:
            row = throughput_row(n, steps, a.epochs or epochs, latency, name, world, table)
            row["load"] = os.getloadavg()[0]  # the 1-minute load as the row ended (the machine is shared)
            rows.append(row)
    lines += [] if not rows else ["", f"## 1. Utilisation and throughput (lognormal call latency: median {latency[0] * 1000:g} ms, "
                  f"sigma {latency[1]:g}; {world.__name__}; B = N segments, T = 8 (4 at N >= 1000), 1 PPO epoch; "
                  "the per-actor rows' worlds on one event loop in the trainer's process, or in P worker processes)",
                  "",
              "| N | schedule | subagent utilisation | trained samples/s | vs round lag | stale share | "
              "CPU µs per trained step: trainer / workers | timed | load (1 min) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lag = next(x for x in rows if x["N"] == r["N"] and x["schedule"] == "round lag 1")
        lines.append(f"| {r['N']} | {r['schedule']} | {r['utilisation']:.0%} | {r['samples_per_s']:,.0f} | "
                     f"{r['samples_per_s'] / lag['samples_per_s']:.2f}x | {r['stale_share']:.1%} | "
                     f"{r['trainer_cpu_us']:.0f} / {r['worker_cpu_us']:.0f} | "
                     f"{r['env_steps']:,} steps, {r['wall_s']:.1f} s | {r['load']:.2f} |")
    episodes = 1 if a.quick else 8  # x 12 tasks per held-out bank
    learn = [learning_run(name, seed, learn_epochs, episodes)
             for name in ("lock-step", "per-actor") for seed in range(seeds)] if 2 in a.parts else []
    summary: dict = {}
    inside = None
    if learn:
        lines += ["", f"## 2. Learning at equal trained env steps (configs/external.yaml's world, {learn_epochs} "
                      f"iterations of 32 x 16 = {learn[0]['env_steps']:,} env steps, {seeds} seeds (0-{seeds - 1}); "
                      f"held out on banks {', '.join(map(str, HELD_OUT_BANKS))} (the run trains on 1234), "
                      f"{12 * episodes} greedy episodes per bank)", "",
                  "| schedule | held-out success mean ± std over seeds | 95% CI | subagents / episode | stale share |",
                  "|---|---|---|---|---|"]
        summary = {}
        for name in ("lock-step", "per-actor"):
            runs = [r for r in learn if r["schedule"] == name]
            m, s, h = mean_ci([r["held_out_success"] for r in runs])
            summary[name] = (m, s, m - h, m + h)
            subagents = statistics.mean(r["subagents"] for r in runs)
            stale = statistics.mean(r["stale_share"] for r in runs)
            lines.append(f"| {name} | {m:.3f} ± {s:.3f} | [{m - h:.3f}, {m + h:.3f}] | {subagents:.1f} | {stale:.1%} |")
        lo, hi = summary["lock-step"][2], summary["lock-step"][3]
        inside = lo <= summary["per-actor"][0] <= hi
        diff = nested_diff_ci(*([[b["success"] for b in r["banks"]] for r in learn if r["schedule"] == name]
                                for name in ("per-actor", "lock-step")))
        summary["diff"] = (diff.diff, diff.low, diff.high)
        significant = diff.low > 0 or diff.high < 0
        lines.append(f"\nper-actor mean {'inside' if inside else 'OUTSIDE'} lock-step's 95% CI; per-actor - lock-step "
                     f"{diff.diff:+.3f} [{diff.low:+.3f}, {diff.high:+.3f}] (95% bootstrap over seeds and banks)"
                     f"{'' if significant else ': not significant'}")
    faults = fault_runs(sizes[0] if a.quick else 64, 3 if a.quick else 6,
                        max(a.workers)) if 3 in a.parts else {}
    if faults:
        lines += ["", "## 3. Faults (5% of calls raise ConnectionError, 1% hang; step_timeout 0.5 s)", ""]
        for key, where in (("drop", ""), ("drop_workers", f" (worlds in {max(a.workers)} worker processes)")):
            if key in faults:
                d = faults[key]
                lines.append(f"on_error: drop{where}: completed {d['epochs']} iterations: {d['completed']}; dropped "
                             f"trajectories {d['dropped']:.0f} of {d['dropped'] + d['segments']:.0f} "
                             f"({d['dropped_share']:.1%})")
        lines.append(f"on_error: fail: {faults['fail']}")
    text = "\n".join(lines)
    print(text)
    target = a.write or (None if a.quick else str(ROOT / "docs" / "results" / "async.md"))
    if target:
        Path(target).write_text(text + "\n")
    return {"rows": rows, "learn": learn, "faults": faults, "inside_ci": inside, "learn_summary": summary}


if __name__ == "__main__":
    from parlightning.cli.script_main import run_main

    run_main(main)
