"""Throughput of the Lightning training loop against a plain-torch loop doing the same work.

Side by side in one run, for each N (actors): (a) `python -m parlightning.fit` with
configs/swarm.yaml (a real LightningCLI + Trainer: logger, checkpointing and progress bar on,
as a user runs it) and (b) scripts/raw_ppo.py (same env, policy, buffer/GAE, loss and settings,
no Lightning). Every run is a fresh process; (a) and (b) alternate, repeated; the first
iteration of each run is warm-up and not counted. Printed per N and path, medians over runs
with [min-max] across runs:

  rollout SPS    env steps / s of the rollout phase (collection, truncation bootstrap, rewards, GAE)
  update SPS     env steps / s of the update phase (4 epochs x 4 minibatches of PPO, plus for
                 (a) everything Lightning does between one rollout and the next)
  iteration SPS  env steps / s of whole iterations (rollout start to next rollout start)
  a/b            iteration SPS of (a) over (b), paired per repeat
  peak MB        peak RSS growth of the process after imports (plus, on CUDA, peak allocated)

then the bytes per actor (least-squares slope of peak memory over N) and `SwarmEnv.step` alone
(random actions, the RoundRobin sampler picking for actors that reset) in actor-steps/s.

    python scripts/bench_throughput.py                  # N in {256, 1024, 4096}, T=128: ~10 min on 2 cores
    python scripts/bench_throughput.py --quick          # a smoke run (~1 min; T=32, where Lightning's fixed
                                                        # ~70 ms per iteration weighs more than at T=128)
    python scripts/bench_throughput.py --profile --num-envs 1024   # where (a)'s and (b)'s CPU time goes
    python scripts/bench_throughput.py --device cuda --num-envs 4096 16384 65536
    python scripts/bench_throughput.py --env-only --compile   # SwarmEnv(compile=True).step alone
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "scripts"))
CONFIG = ROOT / "configs" / "swarm.yaml"

from parlightning.cli.arg_types import (  # noqa: E402  (stdlib only: torch loads in the runs)
    ScriptParser,
    actor_count, device_name, existing_file, job_count, non_negative_int, output_file, positive_int, step_count,
)
from parlightning.cli.script_main import sub_run_failed  # noqa: E402


# ---------------------------------------------------------------------------------- children

def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _memory(base: int, device: str) -> dict[str, int]:
    import torch

    out = {"peak_rss_delta": _peak_rss_bytes() - base}
    if device.startswith("cuda"):
        out["cuda_peak"] = int(torch.cuda.max_memory_allocated())
    return out


def _phases(starts: list, ends: list, nexts: list, warmup: int) -> dict[str, list[float]]:
    """Seconds per measured iteration from `raw_ppo.now()` stamps (wall, CPU): rollout = end - start,
    update = next - end, iteration = next - start; `cpu_` keys use process CPU time."""
    keep = range(warmup, len(nexts))
    out: dict[str, list[float]] = {}
    for clock, prefix in ((0, ""), (1, "cpu_")):
        out[prefix + "rollout_s"] = [ends[i][clock] - starts[i][clock] for i in keep]
        out[prefix + "update_s"] = [nexts[i][clock] - ends[i][clock] for i in keep]
        out[prefix + "iteration_s"] = [nexts[i][clock] - starts[i][clock] for i in keep]
    return out


def _baseline() -> int:
    """RSS after importing everything both paths use (lazy imports, e.g. torch._dynamo on the
    first optimizer step, would otherwise count as peak memory of one path only)."""
    import torch
    import torch._dynamo  # noqa: F401

    import raw_ppo  # noqa: F401
    from parlightning import fit  # noqa: F401

    return _rss_bytes()


class _Enough(SystemExit):
    """Raised when the trailing rollout starts: its start stamp closes the last measured iteration. A
    SystemExit, so that `parlightning.fit` lets it through like an exit (it turns any other exception
    raised in code outside the package, such as this benchmark's wrappers, into one error line)."""


def child_lightning(a: argparse.Namespace) -> dict[str, Any]:
    """(a): parlightning.fit.main on configs/swarm.yaml, with RolloutDataModule.collect timed."""
    import torch

    from raw_ppo import now

    from parlightning.ppo.data import RolloutDataModule
    from parlightning.cli.fit import main

    base = _baseline()
    collect = RolloutDataModule.collect
    starts: list[float] = []
    ends: list[float] = []
    wanted = a.warmup + a.iterations

    def sync() -> None:
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()

    def timed(self):  # noqa: ANN001, ANN202
        sync()
        starts.append(now())
        if len(starts) > wanted:
            raise _Enough
        rollout = collect(self)
        sync()
        ends.append(now())
        return rollout

    RolloutDataModule.collect = timed
    accelerator = "gpu" if a.device.startswith("cuda") else "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "--config", str(CONFIG), "--torch_threads", str(a.threads),
            "--data.num_envs", str(a.n), "--data.num_steps", str(a.num_steps),
            "--data.update_epochs", str(a.update_epochs), "--data.num_minibatches", str(a.num_minibatches),
            "--trainer.max_epochs", str(wanted + 1), "--trainer.accelerator", accelerator,
            "--trainer.default_root_dir", tmp,
        ]
        try:
            main(args)
        except _Enough:
            pass
    result = _phases(starts, ends, starts[1:], a.warmup)
    result.update(_memory(base, a.device))
    return result


def child_raw(a: argparse.Namespace) -> dict[str, Any]:
    """(b): scripts/raw_ppo.py with the same settings."""
    import raw_ppo

    base = _baseline()
    args = raw_ppo.Args.from_config(
        num_envs=a.n, num_steps=a.num_steps, update_epochs=a.update_epochs, num_minibatches=a.num_minibatches,
        iterations=a.warmup + a.iterations, device=a.device, threads=a.threads,
    )
    t = raw_ppo.train(args)
    result = _phases(t.rollout_start, t.rollout_end, t.update_end, a.warmup)
    result.update(_memory(base, a.device))
    return result


def child_env(a: argparse.Namespace) -> dict[str, Any]:
    """`SwarmEnv.step` alone: actor-steps/s per block of steps, random actions, RoundRobin picks."""
    import torch

    from parlightning.envs.swarm import SwarmEnv
    from parlightning.distribution.samplers import RoundRobin

    torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    env = SwarmEnv(num_envs=a.n, device=device, seed=0, compile=a.compile)
    sampler = RoundRobin()
    sampler.bind(env.task_ids, device)
    shard = torch.arange(len(env.task_ids), device=device)
    env.reset(seed=0)
    nvec = torch.tensor(env.action_spec.nvec, device=device)
    g = torch.Generator(device=device).manual_seed(0)
    actions = [(torch.rand(a.n, nvec.numel(), generator=g, device=device) * nvec).long() for _ in range(64)]

    def pick(mask):  # noqa: ANN001, ANN202
        return sampler.pick_batch(shard, 0, mask, g)

    from raw_ppo import now

    rates: dict[str, list[float]] = {"wall": [], "cpu": []}
    for block in range(a.warmup + a.iterations):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = now()
        for act in actions:
            env.step(act, pick)
        if device.type == "cuda":
            torch.cuda.synchronize()
        end = now()
        if block >= a.warmup:
            rates["wall"].append(len(actions) * a.n / (end[0] - start[0]))
            rates["cpu"].append(len(actions) * a.n / (end[1] - start[1]))
    return rates


class Attribution:
    """Exclusive process-CPU time per label: a wrapped call's time minus that of wrapped calls inside it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.active = False
        self._stack: list[float] = []

    def wrap(self, label: str, fn):  # noqa: ANN001, ANN201
        def timed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            if not self.active:
                return fn(*args, **kwargs)
            start = time.process_time()
            self._stack.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.process_time() - start
                inner = self._stack.pop()
                self.seconds[label] = self.seconds.get(label, 0.0) + spent - inner
                if self._stack:
                    self._stack[-1] += spent

        return timed

    def patch(self, owner: Any, name: str, label: str) -> None:
        setattr(owner, name, self.wrap(label, getattr(owner, name)))


def _shared_targets() -> list[tuple[Any, str, str]]:
    """(owner, attribute, label) of the pieces both paths run: env, sampler, policy, buffer, GAE, update."""
    import torch

    import parlightning.buffer
    from parlightning.buffer import RolloutBuffer
    from parlightning.envs.swarm import SwarmEnv
    from parlightning.policies.actor_critic import ActorCritic
    from parlightning.distribution.samplers import RoundRobin

    return [
        (SwarmEnv, "step", "rollout: SwarmEnv.step"),
        (RoundRobin, "pick_batch", "rollout: task sampler"),
        (ActorCritic, "act", "rollout: policy act"),
        (ActorCritic, "value", "rollout: policy act"),
        (RolloutBuffer, "write", "rollout: buffer writes"),
        (parlightning.buffer, "compute_gae", "GAE"),
        (ActorCritic, "evaluate", "update: forward + loss"),
        (torch.Tensor, "backward", "update: backward"),
        (torch.optim.Adam, "step", "update: optimizer step"),
        (torch.optim.Optimizer, "zero_grad", "update: optimizer step"),
        (torch.nn.utils, "clip_grad_norm_", "update: grad clipping"),
    ]


def child_profile(a: argparse.Namespace) -> dict[str, Any]:
    """(a) with the CPU time of each piece of an iteration attributed, exclusive of the pieces inside it;
    what no piece claims is Lightning's loops and hooks (plus the minibatch shuffle)."""
    from lightning.pytorch import LightningModule, Trainer
    from lightning.pytorch.callbacks import TQDMProgressBar
    from lightning.pytorch.loops.optimization.automatic import Closure

    import parlightning.buffer
    import parlightning.ppo.data
    import parlightning.ppo.module
    import parlightning.collection.finish
    from parlightning.collection import StepLoop
    from parlightning.ppo.data import RolloutDataModule
    from parlightning.cli.fit import main

    at = Attribution()
    targets = _shared_targets() + [
        (parlightning.ppo.data, "gather_rows", "update: minibatch gather"),
        (parlightning.ppo.module, "ppo_loss", "update: forward + loss"),
        (parlightning.ppo.module.PPOModule, "training_step", "update: forward + loss"),
        (RolloutDataModule, "collect", "rollout: rest of collect (loop, bootstrap, rewards)"),
        (StepLoop, "check_finite", "rollout: non-finite check"),
        (StepLoop, "step", "rollout: step loop's own code"),
        (StepLoop, "bootstrap", "rollout: rest of collect (loop, bootstrap, rewards)"),
        (parlightning.collection.finish, "episode_stats", "rollout: rollout stats"),
        (parlightning.buffer.RolloutBuffer, "finished_parts", "rollout: episode read-out"),
        (LightningModule, "log", "lightning: self.log"),
        (LightningModule, "log_dict", "lightning: self.log"),
        (Trainer, "save_checkpoint", "lightning: checkpointing"),
        (TQDMProgressBar, "on_train_batch_end", "lightning: progress bar"),
        (TQDMProgressBar, "on_train_epoch_end", "lightning: progress bar"),
        (Closure, "__call__", "lightning: loops, hooks, rest"),  # its own code; training_step, backward are inside
    ]
    try:
        from parlightning.callbacks import parl

        for cls in (parl.PARLAnnealing, parl.CriticalStepsMonitor):
            targets += [(cls, name, "rollout: PARL callbacks") for name in vars(cls) if name.startswith("on_")]
    except (ImportError, AttributeError):
        pass
    for owner, name, label in targets:
        if hasattr(owner, name):
            at.patch(owner, name, label)

    collect = RolloutDataModule.collect  # already wrapped by `at`
    marks: list[float] = []
    wanted = a.warmup + a.iterations

    def marked(self):  # noqa: ANN001, ANN202
        marks.append(time.process_time())
        if len(marks) == a.warmup + 1:
            at.active, at.seconds = True, {}
        if len(marks) > wanted:
            at.active = False
            raise _Enough
        return collect(self)

    RolloutDataModule.collect = marked
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "--config", str(CONFIG), "--torch_threads", str(a.threads),
            "--data.num_envs", str(a.n), "--data.num_steps", str(a.num_steps),
            "--data.update_epochs", str(a.update_epochs), "--data.num_minibatches", str(a.num_minibatches),
            "--trainer.max_epochs", str(wanted + 1), "--trainer.default_root_dir", tmp,
        ]
        try:
            main(args)
        except _Enough:
            pass
    total = marks[-1] - marks[a.warmup]
    seconds = dict(at.seconds)
    seconds["lightning: loops, hooks, rest"] = seconds.get("lightning: loops, hooks, rest", 0.0) + total - sum(at.seconds.values())
    return {"seconds": seconds, "total": total, "iterations": a.iterations}


def child_profile_raw(a: argparse.Namespace) -> dict[str, Any]:
    """(b) attributed the same way; what no piece claims is the loop's own code."""
    import raw_ppo

    at = Attribution()
    for owner, name, label in _shared_targets() + [
        (raw_ppo, "gather_rows", "update: minibatch gather"),
        (raw_ppo, "ppo_loss", "update: forward + loss"),
        (raw_ppo.RolloutBuffer, "finished_parts", "rollout: episode read-out"),
    ]:
        if hasattr(owner, name):  # the same targets as (a); a piece the package no longer has is skipped
            at.patch(owner, name, label)
    marks: list[float] = []

    def mark(iteration: int) -> None:
        marks.append(time.process_time())
        if iteration == a.warmup:
            at.active, at.seconds = True, {}

    args = raw_ppo.Args.from_config(
        num_envs=a.n, num_steps=a.num_steps, update_epochs=a.update_epochs, num_minibatches=a.num_minibatches,
        iterations=a.warmup + a.iterations, device=a.device, threads=a.threads,
    )
    raw_ppo.train(args, on_iteration=mark)
    at.active = False
    total = time.process_time() - marks[a.warmup]
    seconds = dict(at.seconds)
    seconds["raw: the loop's own code"] = total - sum(at.seconds.values())
    return {"seconds": seconds, "total": total, "iterations": a.iterations}


GROUPS = ("rollout", "GAE", "update", "lightning", "raw")


def _median_profile(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-piece and total medians over runs (pieces missing from a run count as 0)."""
    labels = {lab for r in runs for lab in r["seconds"]}
    return {
        "seconds": {lab: statistics.median(r["seconds"].get(lab, 0.0) for r in runs) for lab in labels},
        "total": statistics.median(r["total"] for r in runs),
        "iterations": runs[0]["iterations"],
        "runs": len(runs),
    }


def profile_report(a: argparse.Namespace, n: int, la: dict[str, Any], rb: dict[str, Any]) -> str:
    """One table: CPU ms per iteration of each piece in (a) and (b), with (a)'s shares."""
    its = la["iterations"]
    ms = {k: {lab: sec / its * 1e3 for lab, sec in r["seconds"].items()} for k, r in (("a", la), ("b", rb))}
    total = {k: r["total"] / its * 1e3 for k, r in (("a", la), ("b", rb))}
    lines = [
        f"CPU time per iteration at N={n}, T={a.num_steps}, {a.update_epochs}x{a.num_minibatches} minibatches "
        f"(medians over {la['runs']} runs of {its} iterations after {a.warmup} warm-up; pieces exclusive of "
        f"the pieces they call): "
        f"(a) {total['a']:,.0f} ms, (b) {total['b']:,.0f} ms, a/b = {total['b'] / total['a']:.2f}",
        "",
        "| piece | (a) Lightning ms | share of (a) | (b) raw ms |",
        "|---|---:|---:|---:|",
    ]
    for group in GROUPS:
        labels = sorted({lab for side in ms.values() for lab in side if lab.split(":")[0] == group},
                        key=lambda lab: -ms["a"].get(lab, ms["b"].get(lab, 0.0)))
        if not labels:
            continue
        ga, gb = (sum(ms[k].get(lab, 0.0) for lab in labels) for k in ("a", "b"))
        cells = [f"**{ga:,.1f}**", f"**{ga / total['a']:.1%}**"] if group != "raw" else ["-", "-"]
        cells.append(f"**{gb:,.1f}**" if group != "lightning" else "-")
        lines.append(f"| **{group}** | {' | '.join(cells)} |")
        if len(labels) > 1 or labels[0] != group:
            for lab in labels:
                va, vb = ms["a"].get(lab), ms["b"].get(lab)
                cell_a = f"{va:,.1f}" if va is not None else "-"
                share = f"{va / total['a']:.1%}" if va is not None else "-"
                cell_b = f"{vb:,.1f}" if vb is not None else "-"
                lines.append(f"| &nbsp;&nbsp;{lab.split(': ', 1)[1]} | {cell_a} | {share} | {cell_b} |")
    lines.append(f"| **total** | **{total['a']:,.0f}** | 100% | **{total['b']:,.0f}** |")
    return "\n".join(lines)


CHILDREN = {
    "lightning": child_lightning, "raw": child_raw, "env": child_env,
    "profile": child_profile, "profile_raw": child_profile_raw,
}


# ---------------------------------------------------------------------------------- parent
def run_child(kind: str, n: int, a: argparse.Namespace) -> dict[str, Any]:
    """One fresh process; its result comes back through a JSON file."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [
        sys.executable, __file__, "--child", kind, "--n", str(n), "--out", out, "--device", a.device,
        "--num-steps", str(a.num_steps), "--update-epochs", str(a.update_epochs),
        "--num-minibatches", str(a.num_minibatches), "--iterations", str(a.iterations),
        "--warmup", str(a.warmup), "--threads", str(a.threads), *(["--compile"] if a.compile else []),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    try:
        if proc.returncode != 0:
            raise sub_run_failed(f"the {kind} run at N={n}", proc.returncode, proc.stdout[-4000:] + proc.stderr[-4000:])
        with open(out) as f:
            return json.load(f)
    finally:
        os.unlink(out)


def med_range(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def fmt(values: list[float], scale: float = 1.0, digits: int = 0) -> str:
    m, lo, hi = med_range([v * scale for v in values])
    return f"{m:,.{digits}f} [{lo:,.{digits}f}-{hi:,.{digits}f}]"


def slope(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares slope and intercept of ys over xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return b, my - b * mx


def report(a: argparse.Namespace, runs: dict[tuple[str, int], list[dict[str, Any]]], env: dict[str, list[float]]) -> str:
    steps = {n: n * a.num_steps for n in a.num_envs}
    lines = [
        f"device={a.device}  threads={a.threads}  T={a.num_steps}  {a.update_epochs} epochs x {a.num_minibatches} "
        f"minibatches  repeats={a.repeats}  iterations/run={a.iterations} (+{a.warmup} warm-up)",
        "wall-clock SPS; medians over runs (each run: median of its iterations), [min-max] across runs;",
        "a/b cpu: the same ratio on process CPU time (robust to other load on a shared machine); "
        "a/b cpu rollout, update: that ratio per phase",
        "",
        "| N | path | rollout SPS | update SPS | iteration SPS | a/b | a/b cpu | a/b cpu rollout | a/b cpu update "
        "| peak MB |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    per_run: dict[tuple[str, int], dict[str, list[float]]] = {}
    for (kind, n), results in runs.items():
        cols: dict[str, list[float]] = {}
        for r in results:
            for key in ("rollout", "update", "iteration", "cpu_iteration", "cpu_rollout", "cpu_update"):
                cols.setdefault(key, []).append(steps[n] / statistics.median(r[f"{key}_s"]))
            cols.setdefault("mem", []).append(r.get("cuda_peak", r["peak_rss_delta"]) / 2**20)
        per_run[(kind, n)] = cols
    for n in a.num_envs:
        la, rb = per_run[("lightning", n)], per_run[("raw", n)]
        ratio = [x / y for x, y in zip(la["iteration"], rb["iteration"])]  # paired per repeat
        ratio_cpu = [x / y for x, y in zip(la["cpu_iteration"], rb["cpu_iteration"])]
        phase_cpu = {ph: [x / y for x, y in zip(la[f"cpu_{ph}"], rb[f"cpu_{ph}"])] for ph in ("rollout", "update")}
        for kind, label in (("lightning", "(a) Lightning"), ("raw", "(b) raw torch")):
            c = per_run[(kind, n)]
            first = kind == "lightning"
            lines.append(
                f"| {n} | {label} | {fmt(c['rollout'])} | {fmt(c['update'])} | {fmt(c['iteration'])} | "
                f"{fmt(ratio, digits=2) if first else ''} | {fmt(ratio_cpu, digits=2) if first else ''} | "
                f"{fmt(phase_cpu['rollout'], digits=2) if first else ''} | "
                f"{fmt(phase_cpu['update'], digits=2) if first else ''} | {fmt(c['mem'])} |"
            )
    lines.append("")
    for n in a.num_envs:  # the paired ratios one by one, with the load each pair ran at where it was recorded
        la, rb = per_run[("lightning", n)], per_run[("raw", n)]
        loads = [r.get("load") for r in runs[("lightning", n)]]
        pairs = [f"{x / y:.2f} / {cx / cy:.2f}" + (f" (load {ld:.1f})" if ld is not None else "")
                 for x, y, cx, cy, ld in zip(la["iteration"], rb["iteration"], la["cpu_iteration"], rb["cpu_iteration"], loads)]
        lines.append(f"N={n} a/b per repeat, wall / cpu: " + ", ".join(pairs))
    lines.append("")
    if len(a.num_envs) > 1:
        mem_kind = "CUDA peak allocated" if a.device.startswith("cuda") else "peak RSS growth"
        for kind, label in (("lightning", "(a) Lightning"), ("raw", "(b) raw torch")):
            xs = [float(n) for n in a.num_envs]
            ys = [statistics.median(per_run[(kind, n)]["mem"]) * 2**20 for n in a.num_envs]
            b, c0 = slope(xs, ys)
            per = ", ".join(f"N={n}: {y / n / 1024:,.0f}" for n, y in zip(a.num_envs, ys))
            lines.append(f"{label}: {mem_kind} ~ {c0 / 2**20:,.0f} MiB + {b / 1024:,.1f} KiB x N "
                         f"(KiB per actor: {per})")
        lines.append("")
    if env.get("wall"):
        lines.append(env_line(a, env))
    return "\n".join(lines)


def env_line(a: argparse.Namespace, env: dict[str, list[float]]) -> str:
    w, c = med_range(env["wall"]), med_range(env["cpu"])
    step = "SwarmEnv(compile=True).step" if a.compile else "SwarmEnv.step"
    return (f"{step} alone at N={a.env_n}: {w[0] / 1e6:.2f}M actor-steps/s wall [{w[1] / 1e6:.2f}-{w[2] / 1e6:.2f}], "
            f"{c[0] / 1e6:.2f}M per CPU-second [{c[1] / 1e6:.2f}-{c[2] / 1e6:.2f}] (blocks of 64 steps)")


def build_parser() -> argparse.ArgumentParser:
    p = ScriptParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-envs", type=actor_count, nargs="+", default=[256, 1024, 4096], help="actors N to measure")
    p.add_argument("--num-steps", type=step_count, default=128, help="rollout length T")
    p.add_argument("--update-epochs", type=positive_int, default=4)
    p.add_argument("--num-minibatches", type=positive_int, default=4)
    p.add_argument("--repeats", type=positive_int, default=3, help="fresh runs per (N, path)")
    p.add_argument("--iterations", type=positive_int, default=3, help="measured iterations per run")
    p.add_argument("--warmup", type=non_negative_int, default=1, help="iterations per run not counted")
    p.add_argument("--device", type=device_name, default="cpu", help="cpu or cuda")
    p.add_argument("--threads", type=job_count, default=1, help="torch intra-op threads per process")
    p.add_argument("--env-n", type=actor_count, default=4096, help="actors for the SwarmEnv.step measurement")
    p.add_argument("--skip-env", action="store_true", help="do not measure SwarmEnv.step alone")
    p.add_argument("--compile", action="store_true",
                   help="measure SwarmEnv.step alone with compile=True (its C++ kernels; same trajectories)")
    p.add_argument("--env-only", action="store_true",
                   help="measure only SwarmEnv.step alone (--repeats fresh processes), not the training loops")
    p.add_argument("--quick", action="store_true", help="smoke run: N in {256, 1024}, T=32, one repeat")
    p.add_argument("--profile", action="store_true",
                   help="instead of the table: where the CPU time of (a) and (b) goes, by piece, for each N")
    p.add_argument("--json", type=output_file, default=None, help="also write every run's raw timings here")
    p.add_argument("--from-json", type=existing_file, default=None,
                   help="print the table of a run saved with --json (its settings, not these flags) and exit")
    p.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    p.add_argument("--n", type=actor_count, help=argparse.SUPPRESS)
    p.add_argument("--out", type=output_file, help=argparse.SUPPRESS)
    return p


# Flags that contradict each other: (flag, flag, why), refused as argparse refuses a conflict (one line,
# exit 2) before anything runs, not a run that fails half-way on what one flag left out.
CONFLICTS = (
    ("env_only", "skip_env", "--env-only measures SwarmEnv.step alone and --skip-env skips that measurement: drop one"),
    ("env_only", "profile", "--profile profiles the training loops, which --env-only does not run: drop one"),
    ("compile", "skip_env", "--compile applies to the SwarmEnv.step measurement, which --skip-env skips: drop one"),
)


def parse(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = build_parser()
    a = p.parse_args(argv)
    for first, second, why in CONFLICTS:
        if getattr(a, first) and getattr(a, second):
            p.error(f"argument --{second.replace('_', '-')}: not allowed with argument --{first.replace('_', '-')} ({why})")
    if a.device not in ("cpu",):  # before any run starts: one line, not a failed run per N
        import torch

        try:
            dev = torch.device(a.device)
        except (RuntimeError, ValueError):
            p.error(f"argument --device: {a.device!r} is not a torch device; use cpu or cuda")
        if dev.type == "cuda" and not torch.cuda.is_available():
            p.error(f"argument --device: {a.device!r} asked for, but this machine has no usable CUDA device; use cpu")
        if dev.type not in ("cpu", "cuda"):
            p.error(f"argument --device: {a.device!r}: the benchmark runs on cpu or cuda")
    if a.quick:
        a.num_envs, a.num_steps, a.repeats, a.iterations = [256, 1024], 32, 1, 2
    return a


def main(argv: Optional[list[str]] = None) -> None:
    a = parse(argv)
    if a.from_json:
        try:
            with open(a.from_json) as f:
                saved = json.load(f)
        except (OSError, ValueError) as err:
            raise SystemExit(f"error: --from-json: {a.from_json} cannot be read as JSON ({err})") from None
        if not (isinstance(saved, dict) and isinstance(saved.get("args"), dict) and isinstance(saved.get("runs"), dict)):
            raise SystemExit(f"error: --from-json: {a.from_json} is not a file this script wrote with --json (it has no "
                             "'args' and 'runs'); pass one written by bench_throughput.py --json")
        a = argparse.Namespace(**{**vars(a), **saved["args"], "from_json": a.from_json})
        runs = {(key.rsplit("-", 1)[0], int(key.rsplit("-", 1)[1])): v for key, v in saved["runs"].items()}
        print(report(a, runs, saved.get("env") or {}))
        return
    if a.child:
        result = CHILDREN[a.child](a)
        with open(a.out, "w") as f:
            json.dump(result, f)
        return
    if a.profile:
        for n in a.num_envs:
            runs_a, runs_b = [], []
            for rep in range(a.repeats):  # alternate, as for the table
                runs_a.append(run_child("profile", n, a))
                runs_b.append(run_child("profile_raw", n, a))
            print(profile_report(a, n, _median_profile(runs_a), _median_profile(runs_b)) + "\n")
        return
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    started = time.perf_counter()
    for rep in range(0 if a.env_only else a.repeats):
        for n in a.num_envs:
            order = ("lightning", "raw") if rep % 2 == 0 else ("raw", "lightning")  # alternate who goes first
            for kind in order:
                load = os.getloadavg()[0]  # the 1-minute load average as the run starts
                r = run_child(kind, n, a)
                r["load"] = load
                runs.setdefault((kind, n), []).append(r)
                print(f"  [{time.perf_counter() - started:6.0f}s] repeat {rep + 1}/{a.repeats} N={n} {kind}: "
                      f"{n * a.num_steps / statistics.median(r['iteration_s']):,.0f} SPS", file=sys.stderr)
    env_rates: dict[str, list[float]] = {}
    if not a.skip_env:
        for rep in range(a.repeats):
            for clock, rates in run_child("env", a.env_n, a).items():
                env_rates.setdefault(clock, []).extend(rates)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "runs": {f"{k}-{n}": v for (k, n), v in runs.items()}, "env": env_rates}, f)
    print(env_line(a, env_rates) if a.env_only else report(a, runs, env_rates))


if __name__ == "__main__":
    from parlightning.cli.script_main import run_main

    run_main(main)
