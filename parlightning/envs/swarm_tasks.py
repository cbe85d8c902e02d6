"""SwarmEnv's procedural task generator: families, a task from a seed, train/held-out banks.

A task is a chain of stages; stage l holds `width` subtasks, each with a size (main-agent steps,
1..max_cost) and a kind: PLAIN (a subagent with a generic instruction can do it), HARD (needs a
briefed instruction) or LOCAL (needs the main agent's context; a subagent never finishes it).
Task `i` of a family is drawn from its own generator (bank seed, family, i), so a task is the
same whatever the bank size; the train split holds indices [0, n) and the held-out split
[n, 2n): disjoint ids (`family-index`) and draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from parlightning.errors import ArgumentError, ConfigError

PLAIN, HARD, LOCAL = 0, 1, 2
N_KINDS = 3


@dataclass(frozen=True)
class Family:
    """A cluster of tasks. Widths and depths are fractions of the world's max_width / max_levels
    (so a family means the same at width 8 and 64); `budget` places the step budget:
    `serial` = serial time + 1 (doing it yourself always succeeds), `gap` = the ideal time plus a
    per-task fraction in `slack` of (serial - ideal) (needs good delegation; sometimes solved),
    `locked` = one step below a lower bound on any policy's time (never solved)."""

    levels: tuple[float, float]
    width: tuple[float, float]
    hard_p: float
    local_p: float
    long: bool  # one subtask per stage at max_cost: it must be split to be fast
    budget: str
    slack: tuple[float, float] = (0.0, 0.0)


FAMILIES: dict[str, Family] = {
    "solo": Family((0.25, 0.75), (0.0, 0.25), 0.3, 0.1, False, "serial"),
    "fanout": Family((0.25, 0.5), (0.75, 1.0), 0.3, 0.05, False, "gap", (0.0, 0.3)),
    "pipeline": Family((0.5, 1.0), (0.5, 0.75), 0.5, 0.05, True, "gap", (0.0, 0.25)),
    "locked": Family((0.25, 0.5), (0.75, 1.0), 0.3, 0.05, False, "locked"),
}
SPLITS = ("train", "heldout")


def oracle_split_index(size: torch.Tensor, splits: torch.Tensor) -> torch.Tensor:
    """Index of the largest split granularity that leaves no shard empty (k <= size). `splits`: the
    world's split granularities, ascending, at least one (metadata checks only: no tensor read)."""
    if not isinstance(splits, torch.Tensor) or splits.dim() != 1 or splits.numel() == 0:
        raise ArgumentError(f"oracle_split_index(splits): must be a 1-D tensor of at least one split granularity "
                            f"(e.g. torch.tensor([1, 2, 4])), got "
                            f"{list(splits.shape) if isinstance(splits, torch.Tensor) else type(splits).__name__}")
    return ((splits <= size.unsqueeze(-1)).sum(-1) - 1).clamp(min=0)


@dataclass(frozen=True)
class Costs:
    """The world's timing constants, shared by the generator's budgets and the dynamics."""

    splits: tuple[int, ...]
    spawn: float
    merge: float
    brief: float


def stage_times(size: torch.Tensor, kind: torch.Tensor, present: torch.Tensor, c: Costs) -> tuple[torch.Tensor, ...]:
    """Per stage [..., L]: serial time (1 + sum of sizes), the scripted oracle's time without
    failures, and a lower bound on any policy's time (ignores merge and briefing costs)."""
    size = size * present
    local = (kind == LOCAL) & present
    deleg = present & ~local
    splits = torch.tensor(c.splits, dtype=size.dtype)
    k = splits[oracle_split_index(size, splits)] * deleg
    serial = 1.0 + size.sum(-1)
    longest = torch.where(deleg, c.spawn + torch.ceil(size / k.clamp(min=1)), torch.zeros_like(size)).amax(-1)
    hard = (kind == HARD) & deleg
    ideal = 1.0 + (size * local).sum(-1) + c.merge * k.sum(-1) + c.brief * hard.sum(-1) + longest
    fastest = torch.where(deleg, c.spawn + torch.ceil(size / max(c.splits)), torch.zeros_like(size)).amax(-1)
    biggest = (size * deleg).amax(-1)  # done by the main agent at some round, or by a subagent in one piece of k
    bound = 1.0 + (size * local).sum(-1) + torch.minimum(fastest, biggest)
    return serial, ideal, bound


class TaskBank:
    """One split's tasks as tensors resident once on the device, shared by all actors.

    size/kind/present: [K, L, W]; n_levels, budget, family: [K]; `task_ids[k]` is `family-index`;
    `serial_time`, `ideal_time` [K]: the serial policy's and the failure-free oracle's times.
    """

    def __init__(self, families: Sequence[str], tasks_per_family: int | Sequence[int], split: str, max_levels: int,
                 max_width: int, max_cost: int, costs: Costs, seed: int, device: torch.device) -> None:
        unknown = [f for f in families if f not in FAMILIES]
        if unknown:
            raise ConfigError(f"SwarmEnv: unknown `families` {unknown}; choose from {sorted(FAMILIES)}")
        if split not in SPLITS:
            raise ConfigError(f"SwarmEnv: `split` must be one of {list(SPLITS)}, got {split!r}")
        # one count for every family, or one per family (SwarmEnv's `family_tasks`): family f's train
        # tasks are its indices [0, n_f), its held-out ones [n_f, 2 n_f)
        counts = [tasks_per_family] * len(families) if isinstance(tasks_per_family, int) else list(tasks_per_family)
        if len(counts) != len(families):
            raise ConfigError(f"SwarmEnv: {len(counts)} task counts for {len(families)} families; give one per family")
        offsets = [sum(counts[:f]) for f in range(len(families))]
        K, L, W = sum(counts), max_levels, max_width
        size = torch.zeros(K, L, W)
        kind = torch.zeros(K, L, W, dtype=torch.long)
        present = torch.zeros(K, L, W, dtype=torch.bool)
        n_levels = torch.zeros(K, dtype=torch.long)
        slack = torch.zeros(K)
        family = torch.zeros(K, dtype=torch.long)
        self.task_ids: list[str] = []
        for f, name in enumerate(families):
            spec = FAMILIES[name]
            code = sorted(FAMILIES).index(name)
            first = 0 if split == "train" else counts[f]
            for i in range(counts[f]):
                k, index = offsets[f] + i, first + i
                g = torch.Generator().manual_seed(seed * 1_000_003 + code * 100_003 + index)
                lo, hi = (max(1, math.ceil(x * L)) for x in spec.levels)
                levels = int(torch.randint(lo, max(lo, hi) + 1, (), generator=g))
                wlo, whi = (max(1, math.ceil(x * W)) for x in spec.width)
                widths = torch.randint(wlo, max(wlo, whi) + 1, (L,), generator=g)
                size[k] = torch.randint(1, max_cost + 1, (L, W), generator=g).float()
                u = torch.rand(L, W, generator=g)
                kind[k] = torch.where(u < spec.local_p, LOCAL, torch.where(u < spec.local_p + spec.hard_p, HARD, PLAIN))
                present[k] = (torch.arange(W) < widths.unsqueeze(1)) & (torch.arange(L) < levels).unsqueeze(1)
                if spec.long:  # one long subtask per stage that needs a briefing: split it or wait
                    size[k, :, 0], kind[k, :, 0] = float(max_cost), HARD
                slack[k] = spec.slack[0] + (spec.slack[1] - spec.slack[0]) * float(torch.rand((), generator=g))
                n_levels[k], family[k] = levels, f
                self.task_ids.append(f"{name}-{index}")
        size = size * present
        live = present.any(-1)  # stages the task has
        serial, ideal, bound = ((t * live).sum(-1) for t in stage_times(size, kind, present, costs))
        profile = torch.tensor([["serial", "gap", "locked"].index(FAMILIES[families[int(f)]].budget) for f in family])
        gap_budget = torch.ceil(ideal + slack * (serial - ideal))
        budget = torch.where(profile == 0, serial + 1, torch.where(profile == 1, gap_budget, bound - 1))
        self.families, self.split = list(families), split
        self.size, self.kind, self.present = size.to(device), kind.to(device), present.to(device)
        self.n_levels, self.budget, self.family = n_levels.to(device), budget.to(device), family.to(device)
        self.serial_time, self.ideal_time, self.bound_time = serial.to(device), ideal.to(device), bound.to(device)

    def __len__(self) -> int:
        return len(self.task_ids)
