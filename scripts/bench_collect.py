"""Collection throughput per schedule and transport, through a real Trainer: lock-step (inline),
lag 1 in a thread, lag 1 in a process, on SwarmEnv (tensor ops, CPU) with a small update.

Per mode: `rollout/SPS` (env steps/s of the step loop, wherever it runs) and `charts/SPS` (env
steps/s of whole iterations), medians over the iterations after `--warmup`, one fresh Trainer
per mode, printed with the load average (a shared machine: read ratios, not absolutes). It uses
only `RolloutDataModule`'s config keys and the logged stats, so it measures any checkout: run it
with `PYTHONPATH=<checkout>` to compare two side by side.

    python scripts/bench_collect.py                              # N=256, T=32, 30 iterations per mode (~30 s)
    python scripts/bench_collect.py --quick                      # smoke run
    PYTHONPATH=/path/to/old python scripts/bench_collect.py --json old.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from parlightning.cli.arg_types import ScriptParser, actor_count, non_negative_int, output_file, positive_int, step_count  # noqa: E402  (light: no torch)

MODES = {"sync": {}, "thread": {"max_policy_lag": 1}, "process": {"max_policy_lag": 1, "collect_in": "process"}}


def swarm(num_envs: int, device: str, seed: int):  # module level: a collector process builds it
    from parlightning.envs.swarm import SwarmEnv

    return SwarmEnv(num_envs=num_envs, device=device, seed=seed)


def run(mode: str, a: argparse.Namespace) -> dict[str, float]:
    import lightning.pytorch as pl
    import torch

    from parlightning.callbacks import RolloutCallback
    from parlightning.ppo.data import RolloutDataModule
    from parlightning.ppo.module import PPOModule

    class Record(RolloutCallback):
        def __init__(self) -> None:
            self.rows: list[tuple[float, float]] = []

        def on_rollout_end(self, trainer, pl_module, rollout) -> None:  # noqa: ANN001
            stats = rollout.stats
            self.rows.append((float(stats["rollout/SPS"]), float(stats.get("charts/SPS", torch.tensor(0.0)))))

    torch.set_num_threads(1)
    pl.seed_everything(0, verbose=False)
    record = Record()
    dm = RolloutDataModule(env=swarm, num_envs=a.num_envs, num_steps=a.num_steps, update_epochs=a.update_epochs,
                           num_minibatches=a.num_minibatches, **MODES[mode])
    pl.Trainer(max_epochs=a.epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False, callbacks=[record]).fit(PPOModule(), datamodule=dm)
    rows = record.rows[a.warmup:]
    return {"rollout_sps": statistics.median(r for r, _ in rows), "iteration_sps": statistics.median(i for _, i in rows)}


def build_parser() -> argparse.ArgumentParser:
    p = ScriptParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    p.add_argument("--num-envs", type=actor_count, default=256)
    p.add_argument("--num-steps", type=step_count, default=32)
    p.add_argument("--update-epochs", type=positive_int, default=1)
    p.add_argument("--num-minibatches", type=positive_int, default=2)
    p.add_argument("--epochs", type=positive_int, default=30, help="PPO iterations per mode")
    p.add_argument("--warmup", type=non_negative_int, default=3, help="iterations not counted")
    p.add_argument("--json", type=output_file, default=None, help="also write the results here")
    p.add_argument("--quick", action="store_true", help="smoke run: N=64, 6 iterations per mode")
    return p


def main(argv: list[str] | None = None) -> None:
    p = build_parser()
    a = p.parse_args(argv)
    if a.quick:
        a.num_envs, a.epochs, a.warmup = 64, 6, 2
    if a.warmup >= a.epochs:
        p.error(f"argument --warmup: {a.warmup} iterations not counted of --epochs {a.epochs} leaves none to measure; "
                "give --warmup below --epochs")
    import parlightning

    print(f"parlightning from {Path(parlightning.__file__).parent}; load average {os.getloadavg()}", flush=True)
    out = {}
    for mode in a.modes:
        start = time.perf_counter()
        out[mode] = run(mode, a)
        print(f"{mode:8s} rollout {out[mode]['rollout_sps']:10,.0f} steps/s  iteration {out[mode]['iteration_sps']:9,.0f}"
              f" steps/s  ({time.perf_counter() - start:.0f} s; load average {os.getloadavg()[0]:.2f})", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(out))


if __name__ == "__main__":
    from parlightning.cli.script_main import run_main

    run_main(main)
