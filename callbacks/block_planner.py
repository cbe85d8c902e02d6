"""An example custom parallelism strategy: contiguous blocks of the sorted task list.

A plain class with `name` and `plan` is a `ParallelStrategy` structurally; name it by
`class_path: parlightning.examples.block_planner.BlockPlanner` in the YAML config.
"""

from __future__ import annotations

from typing import Sequence

from parlightning.distribution.strategies import WorkUnit


class BlockPlanner:
    """Worker w always gets the w-th contiguous block of the sorted task ids (good locality,
    no rotation); block sizes differ by at most one, so no worker is left empty."""

    name = "block"

    def plan(self, n_workers: int, round_index: int, keys: Sequence[str]) -> list[WorkUnit]:
        keys = sorted(keys)
        if len(keys) < n_workers:  # every rank must roll out something: spare workers repeat a task
            return [WorkUnit(worker=w, keys=(keys[w % len(keys)],)) for w in range(n_workers)]
        base, extra = divmod(len(keys), n_workers)
        units, start = [], 0
        for w in range(n_workers):
            size = base + (1 if w < extra else 0)
            units.append(WorkUnit(worker=w, keys=tuple(keys[start : start + size])))
            start += size
        return units

    def __repr__(self) -> str:
        return "BlockPlanner()"
