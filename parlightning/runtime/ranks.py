"""Per-rank state under DDP: `gather_ranks` collects one state per rank, in rank order (a collective:
every rank calls it, as they all do when Lightning dumps a checkpoint); `to_cpu` moves every tensor
of a state to the CPU first.

Torch only (no Lightning): the planner and the data module's state import it."""

from __future__ import annotations

from typing import Any

import torch


def to_cpu(obj: Any) -> Any:
    """`obj` with every tensor moved to the CPU (containers rebuilt)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


def gather_ranks(state: Any, world_size: int) -> list[Any]:
    """One `state` per rank, in rank order (a collective under DDP: every rank must call it,
    as they all do when Lightning dumps a checkpoint)."""
    state = to_cpu(state)
    if world_size <= 1 or not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return [state]
    out: list[Any] = [None] * world_size
    torch.distributed.all_gather_object(out, state)
    return out
