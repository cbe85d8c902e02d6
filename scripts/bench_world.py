"""`SwarmEnv.step` alone: actor-steps per second (wall and process CPU) on the default config and
slot-steps per second (actor-steps x width) on the wide one, random actions, RoundRobin picks;
on CPU the eager step and `SwarmEnv(compile=True)` (its C++ kernels, the same trajectories) side
by side.

    python scripts/bench_world.py                  # default N=4096, wide N=1024, CPU, 1 thread
    python scripts/bench_world.py --device cuda    # the same code on a GPU
    python scripts/bench_world.py --quick
Prints one line per config and step (median of blocks [min-max]); writes nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from parlightning.cli.arg_types import actor_count, device_name, job_count, positive_int, step_count  # noqa: E402  (torch loads in bench(), after the arguments are checked)


def bench(configs: list[str], n: int, device: str, blocks: int, steps: int, compiled: bool = False) -> dict:
    import torch

    from parlightning.cli.evaluate import build_env, env_spec
    from parlightning.distribution.samplers import RoundRobin

    cls, init_args = env_spec(configs)
    env = build_env(cls, {**init_args, "compile": compiled}, n, 0, "train", device)
    sampler = RoundRobin()
    sampler.bind(env.task_ids, env.device)
    shard = torch.arange(len(env.task_ids), device=env.device)
    g = torch.Generator(device=env.device).manual_seed(0)
    obs = env.reset(seed=0)
    actions = [env.scripted_action("random", obs, g) for _ in range(steps)]
    pick = lambda mask: sampler.pick_batch(shard, 0, mask, g)  # noqa: E731
    sync = torch.cuda.synchronize if env.device.type == "cuda" else (lambda: None)
    wall, cpu = [], []
    for b in range(blocks + 1):
        sync()
        w0, c0 = time.perf_counter(), time.process_time()
        for act in actions:
            env.step(act, pick)
        sync()
        if b:  # the first block warms up
            wall.append(steps * n / (time.perf_counter() - w0))
            cpu.append(steps * n / max(time.process_time() - c0, 1e-9))
    peak = None
    if env.device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(env.device) / 2**20
    return {"n": n, "width": env.max_width, "wall": wall, "cpu": cpu, "peak_mib": peak}


def line(name: str, r: dict) -> str:
    def fmt(xs, scale=1.0):
        return f"{statistics.median(xs) * scale / 1e6:.2f}M [{min(xs) * scale / 1e6:.2f}-{max(xs) * scale / 1e6:.2f}]"

    text = (f"{name}: N={r['n']} width={r['width']}: actor-steps/s wall {fmt(r['wall'])}, per CPU-second {fmt(r['cpu'])}; "
            f"slot-steps/s wall {fmt(r['wall'], r['width'])}, per CPU-second {fmt(r['cpu'], r['width'])}")
    return text + (f"; peak GPU memory {r['peak_mib']:.0f} MiB" if r["peak_mib"] is not None else "")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", type=device_name, default="cpu")
    p.add_argument("--threads", type=job_count, default=1)
    p.add_argument("--n", type=actor_count, default=4096, help="actors on the default config")
    p.add_argument("--wide-n", type=actor_count, default=1024, help="actors on the wide config")
    p.add_argument("--blocks", type=positive_int, default=5)
    p.add_argument("--steps", type=step_count, default=32, help="env steps per block")
    p.add_argument("--quick", action="store_true", help="2 blocks of 8 steps")
    p.add_argument("--step", choices=["both", "eager", "compiled"], default=None,
                   help="which step to measure: eager, compiled (SwarmEnv(compile=True), CPU only) or both side by "
                        "side (default: both on CPU, eager elsewhere)")
    return p


def main(argv=None) -> None:
    a = build_parser().parse_args(argv)
    if a.quick:
        a.blocks, a.steps = 2, 8
    import torch

    torch.set_num_threads(a.threads)
    cfg = ROOT / "configs"
    print(f"torch {torch.__version__}, device {a.device}, {a.threads} thread(s), {a.blocks} blocks x {a.steps} steps")
    step = a.step or ("both" if a.device == "cpu" else "eager")
    modes = {"both": [False, True], "eager": [False], "compiled": [True]}[step]
    for name, configs, n in (("default", [str(cfg / "swarm.yaml")], a.n),
                             ("wide", [str(cfg / "swarm.yaml"), str(cfg / "swarm_wide.yaml")], a.wide_n)):
        for compiled in modes:
            label = f"{name}, {'compiled' if compiled else 'eager'} step"
            print(line(label, bench(configs, n, a.device, a.blocks, a.steps, compiled)), flush=True)


if __name__ == "__main__":
    from parlightning.cli.script_main import run_main

    run_main(main)
