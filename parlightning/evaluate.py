"""`python -m parlightning.evaluate`: score a trained policy (`--config --ckpt_path`) or a world's
scripted baseline (`--policy serial|oracle|random`) on held-out tasks, against the serial policy.

Every actor runs one episode of its task (actor i on task i mod K, `--episodes` per task) from
the same seed for every policy, so `speedup_vs_serial` compares the same tasks and draws.
Prints a per-family table; `--json` writes the numbers, `--gantt` one episode as a timeline.
Gymnasium worlds report the mean return (and `--video` where the env renders).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from parlightning.errors import ConfigError

FIELDS = ("outcome", "critical_steps", "serial_steps", "n_subagents", "assigned", "completed")


@dataclass
class Episodes:
    """One finished episode per actor: the task index and the EpisodeParts fields, all [E]."""

    task: Tensor
    parts: dict[str, Tensor]
    length: Tensor
    trace: Optional[list[dict[str, Tensor]]] = None  # per round of actor 0: what ran (see SwarmEnv.trace)


def run_episodes(env: Any, act: Callable[[Tensor], Tensor], seed: int, max_rounds: int = 10_000,
                 trace: bool = False) -> Episodes:
    """Reset `env` (actor i on task i mod K) with `seed`, step `act(obs)` until every actor has
    finished one episode, and keep that first episode of each (host reads are fine here: this is
    evaluation, not the training hot path)."""
    N = env.num_envs
    task = torch.arange(N, device=env.device) % len(env.task_ids)
    obs = env.reset(seed=seed, task_index=task)
    got = torch.zeros(N, dtype=torch.bool, device=env.device)
    out = {f: torch.zeros(N, device=env.device) for f in FIELDS}
    length = torch.zeros(N, device=env.device)
    rounds: list[dict[str, Tensor]] = []
    env.trace = trace
    try:
        for t in range(max_rounds):
            res = env.step(act(obs), task)
            if trace and not bool(got[0]):
                rounds.append(env.last_round)
            done = (res.terminated | res.truncated) & ~got
            for f in FIELDS:
                out[f] = torch.where(done, getattr(res.parts, f), out[f])
            length = torch.where(done, torch.full_like(length, t + 1.0), length)
            got |= done
            obs = res.obs
            if bool(got.all()):
                break
    finally:
        env.trace = False
    return Episodes(task, out, length, rounds if trace else None)


def summarise(ep: Episodes, serial: Optional[Episodes], threshold: float) -> dict[str, float]:
    """The headline numbers of a set of episodes (and the serial policy's on the same tasks)."""
    p = ep.parts
    n = max(p["outcome"].numel(), 1)
    row = {
        "episodes": float(p["outcome"].numel()),
        "success_rate": float((p["outcome"] >= threshold).float().sum()) / n,
        "mean_outcome": float(p["outcome"].sum()) / n,
        "critical_steps": float(p["critical_steps"].sum()) / n,
        "subagents_per_episode": float(p["n_subagents"].sum()) / n,
        "finish_rate": float(p["completed"].sum() / p["assigned"].sum().clamp(min=1.0)),
        "rounds_per_episode": float(ep.length.sum()) / n,
    }
    if serial is not None:
        row["serial_critical_steps"] = float(serial.parts["critical_steps"].sum()) / n
        row["serial_success_rate"] = float((serial.parts["outcome"] >= threshold).float().sum()) / n
        row["speedup_vs_serial"] = row["serial_critical_steps"] / max(row["critical_steps"], 1e-9)
    return row


def by_family(ep: Episodes, serial: Optional[Episodes], task_ids: list[str], threshold: float) -> dict[str, dict]:
    """`summarise` per family (the task id up to its last '-')."""
    fam = [t.rsplit("-", 1)[0] for t in task_ids]
    names = list(dict.fromkeys(fam))
    of_task = torch.tensor([names.index(f) for f in fam], device=ep.task.device)[ep.task]
    out = {}
    for i, name in enumerate(names):
        m = of_task == i
        pick = lambda e: Episodes(e.task[m], {k: v[m] for k, v in e.parts.items()}, e.length[m])  # noqa: E731
        out[name] = summarise(pick(ep), pick(serial) if serial is not None else None, threshold)
    return out
