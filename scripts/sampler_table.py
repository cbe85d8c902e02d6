"""Rebuild the published sampler targeting table beside the package's samplers.

Workload: 40 tasks, 6 informative (pass rates 0.2..0.8), 17 always pass, 17 always fail; a
variant flips 15% of outcomes. Sequential: each rollout draws a fresh random shard of 8 tasks
(what a data-parallel rank sees), the sampler picks one, the outcome is recorded before the
next pick. In flight: 8 picks drawn at once from one shard (8 actors resetting together), the
8 results recorded afterwards. Reported per budget: share (% of rollouts on the informative
tasks) and coverage (normalised entropy of the picks over the 6 informative tasks: 100 = even,
0 = all on one), means over seeds. A last table tests explanations of the published noisy row.

    python scripts/sampler_table.py            # under a minute on 2 cores
    python scripts/sampler_table.py --quick    # a few seconds
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from parlightning.cli.entry import refuse_bad_environment  # noqa: E402  stdlib only

refuse_bad_environment()  # before torch and Lightning: torchmetrics reads LOCAL_RANK as it is imported

import torch  # noqa: E402
from parlightning.distribution.samplers import DifficultyWeighted, PosteriorSignal, RoundRobin  # noqa: E402
from parlightning.cli.arg_types import job_count, positive_int  # noqa: E402

PUBLISHED_CLEAN = {"c=1.4": 15.5, "c=0.7": 19.3, "c=0.4": 21.0, "c=0.2": 23.4, "c=0.1": 27.4, "round-robin": 14.5}
PUBLISHED_NOISY = {"c=0.4": 11.5, "c=0.2": 16.3, "c=0.1": 18.1, "round-robin": 7.3}
SHARD_SIZE, IN_FLIGHT, NOISE = 8, 8, 0.15


def workload(n_informative: int = 6, n_pass: int = 17, n_fail: int = 17) -> torch.Tensor:
    """True pass rates, informative tasks first (spread over 0.2..0.8), then always-pass, always-fail."""
    return torch.cat([torch.linspace(0.2, 0.8, n_informative), torch.ones(n_pass), torch.zeros(n_fail)])


class ArgmaxDW(DifficultyWeighted):
    """DifficultyWeighted taking the best score (ties at random) instead of sampling in
    proportion; shown only to document the package's choice."""

    def _sample(self, weights: torch.Tensor, n: int, generator: Optional[torch.Generator]) -> torch.Tensor:
        tie = torch.rand((n, weights.numel()), generator=generator, device=weights.device) * 1e-6
        return (weights + tie).argmax(1)


SAMPLERS: dict[str, Callable[[], object]] = {
    **{f"c={c}": (lambda c=c: DifficultyWeighted(c=c)) for c in (1.4, 0.7, 0.4, 0.2, 0.1)},
    "argmax c=0.2": lambda: ArgmaxDW(c=0.2),
    "round-robin": RoundRobin,
    "PosteriorSignal": PosteriorSignal,
}


def simulate(
    make: Callable[[], object], seed: int, budget: int, noise: float, in_flight: int, rates: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run one sampler for `budget` rollouts: (bank index, recorded pass) of every rollout, in order."""
    sampler = make()
    sampler.bind([f"task-{i}" for i in range(rates.numel())], torch.device("cpu"))
    world = torch.Generator().manual_seed(10_000 + seed)  # shards and outcomes, drawn up front
    rounds = math.ceil(budget / in_flight)
    shards = torch.rand(rounds, rates.numel(), generator=world).argsort(1)[:, :SHARD_SIZE]
    luck = torch.rand(rounds, in_flight, generator=world)
    flips = torch.rand(rounds, in_flight, generator=world) < noise
    picker = torch.Generator().manual_seed(seed)  # the sampler's draws
    picked, passed = [], []
    mask = torch.ones(in_flight, dtype=torch.bool)
    for r in range(rounds):
        task = sampler.pick_batch(shards[r], r, mask, generator=picker)
        outcome = (luck[r] < rates[task]) ^ flips[r]
        sampler.record_batch(task, outcome.float())
        picked.append(task)
        passed.append(outcome)
    return torch.cat(picked)[:budget], torch.cat(passed)[:budget]


def share_and_coverage(picked: torch.Tensor, n_informative: int = 6) -> tuple[float, float]:
    """% of rollouts on informative tasks; normalised entropy (%) of the picks over them."""
    on = picked[picked < n_informative]
    share = 100.0 * on.numel() / picked.numel()
    if on.numel() == 0:
        return share, 0.0
    p = torch.bincount(on, minlength=n_informative).double() / on.numel()
    entropy = -(p[p > 0] * p[p > 0].log()).sum().item()
    return share, 100.0 * entropy / math.log(n_informative)


def cell(job: tuple[str, float, int, int, tuple[int, ...]]) -> tuple[str, float, int, dict[int, tuple[float, float]]]:
    """Mean (share, coverage) per budget for one sampler and regime (runs in a worker process)."""
    torch.set_num_threads(1)
    name, noise, in_flight, seeds, budgets = job
    sums = {b: [0.0, 0.0] for b in budgets}
    for seed in range(seeds):
        picked, _ = simulate(SAMPLERS[name], seed, max(budgets), noise, in_flight, workload())
        for b in budgets:
            s, c = share_and_coverage(picked[:b])
            sums[b][0] += s / seeds
            sums[b][1] += c / seeds
    return name, noise, in_flight, {b: (v[0], v[1]) for b, v in sums.items()}


def hypothesis(job: tuple[str, str, int]) -> tuple[str, str, float]:
    """Share at 200 rollouts with 15% flips under one explanation of the published noisy row."""
    torch.set_num_threads(1)
    name, which, seeds = job
    total = 0.0
    for seed in range(seeds):
        if which == "3 informative tasks of 40":
            picked, _ = simulate(SAMPLERS[name], seed, 200, NOISE, 1, workload(3, 18, 19))
            total += share_and_coverage(picked, 3)[0] / seeds
        else:  # same workload, counting only rollouts on informative tasks that recorded a pass
            picked, passed = simulate(SAMPLERS[name], seed, 200, NOISE, 1, workload())
            total += 100.0 * ((picked < 6) & passed).float().mean().item() / seeds
    return name, which, total


Rows = dict[str, dict[int, tuple[float, float]]]  # sampler -> budget -> (share, coverage)


def print_table(title: str, rows: Rows, budgets: list[int], published: Optional[dict[str, float]]) -> None:
    print(f"\n### {title}\n")
    pub_head = "published | " if published is not None else ""
    columns = [f"share @{b}" for b in budgets] + [f"coverage @{b}" for b in budgets]
    print("| sampler | " + pub_head + " | ".join(columns) + " |")
    print("|---|" + ("---|" if published is not None else "") + "---|" * (2 * len(budgets)))
    for name in SAMPLERS:
        by_budget = rows[name]
        pub = "" if published is None else ("— | " if name not in published else f"{published[name]:.1f} | ")
        cells = [f"{by_budget[b][0]:.1f}" for b in budgets] + [f"{by_budget[b][1]:.0f}" for b in budgets]
        print(f"| {name} | {pub}" + " | ".join(cells) + " |")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds, budget 200, no hypotheses: a few seconds")
    parser.add_argument("--seeds", type=positive_int, default=None, help="seeds per cell (default 10, --quick 3)")
    parser.add_argument("--workers", type=job_count, default=min(2, os.cpu_count() or 1), help="processes (default 2)")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    seeds = args.seeds or (3 if args.quick else 10)
    budgets = [200] if args.quick else [200, 400, 1000]
    regimes = [(0.0, 1), (0.0, IN_FLIGHT), (NOISE, 1), (NOISE, IN_FLIGHT)]
    jobs = [(name, noise, fl, seeds, tuple(budgets)) for noise, fl in regimes for name in SAMPLERS]
    explanations = ("3 informative tasks of 40", "only passing rollouts counted")
    noisy_rows = ("c=0.4", "c=0.2", "c=0.1", "round-robin")
    hyp_jobs = [] if args.quick else [(n, w, seeds) for w in explanations for n in noisy_rows]
    start = time.perf_counter()
    torch.set_num_threads(1)
    if args.workers == 1:
        results, hyps = [cell(j) for j in jobs], [hypothesis(j) for j in hyp_jobs]
    else:
        with ProcessPoolExecutor(args.workers) as pool:
            results, hyps = list(pool.map(cell, jobs)), list(pool.map(hypothesis, hyp_jobs))
    table = {(noise, fl): {} for noise, fl in regimes}
    for name, noise, fl, rows in results:
        table[(noise, fl)][name] = rows

    print("share = % of rollouts on the 6 informative tasks of 40 (higher is better); coverage = normalised")
    print(f"entropy of the picks over those 6 (100 = even, 0 = all on one). Random shard of {SHARD_SIZE} tasks per")
    print(f"round, mean over {seeds} seeds. 'published' is the source document's table (about 200 rollouts).")
    print_table("clean, sequential", table[(0.0, 1)], budgets, PUBLISHED_CLEAN)
    print_table(f"clean, {IN_FLIGHT} picks in flight", table[(0.0, IN_FLIGHT)], budgets, None)
    print_table("15% of outcomes flipped, sequential", table[(NOISE, 1)], budgets, PUBLISHED_NOISY)
    print_table(f"15% of outcomes flipped, {IN_FLIGHT} picks in flight", table[(NOISE, IN_FLIGHT)], budgets, None)
    if hyps:
        print("\n### the published noisy row (share @200, 15% flipped) under two explanations\n")
        whys = list(dict.fromkeys(w for _, w, _ in hyps))
        print("| sampler | published | same workload | " + " | ".join(whys) + " |")
        print("|---|---|---|" + "---|" * len(whys))
        got = {(n, w): v for n, w, v in hyps}
        for name in noisy_rows:
            cells = [PUBLISHED_NOISY[name], table[(NOISE, 1)][name][200][0]] + [got[(name, w)] for w in whys]
            print(f"| {name} | " + " | ".join(f"{v:.1f}" for v in cells) + " |")
    print(f"\n({time.perf_counter() - start:.1f} s, {args.workers} worker(s))")


if __name__ == "__main__":
    from parlightning.cli.script_main import run_main

    run_main(main)
