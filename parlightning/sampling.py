"""Task samplers: which task an actor starts next.

The public protocol is two methods on strings (`pick`, `record`). The data module uses the
batched, tensor-native path (`bind`, `pick_batch`, `record_batch`) that the built-ins
implement without a Python loop per actor; `as_batched` wraps a user's two-method class.
"""

from __future__ import annotations

import threading
from typing import Any, Optional, Protocol, Sequence, runtime_checkable

import torch
from torch import Tensor


@runtime_checkable
class TaskSampler(Protocol):
    """Picks one task id from a shard (never mutating it) and learns from scored episodes."""

    def pick(self, keys: Sequence[str], round_index: int) -> str: ...

    def record(self, task_id: str, score: float) -> None: ...


@runtime_checkable
class BatchedTaskSampler(Protocol):
    """The tensor path. Task ids are bank indices (long tensors on the env's device).

    - `bind(task_ids, device)`: declare the task bank once, before the first pick.
    - `pick_batch(shard, round_index, reset_mask, generator)`: [N] bank indices, one per actor;
      only entries where `reset_mask` is True are used (those actors start a new episode).
    - `record_batch(task_index, score)`: E finished episodes, scores in 0..1.
    """

    def bind(self, task_ids: Sequence[str], device: torch.device) -> None: ...

    def pick_batch(
        self, shard: Tensor, round_index: int, reset_mask: Tensor, generator: Optional[torch.Generator] = None
    ) -> Tensor: ...

    def record_batch(self, task_index: Tensor, score: Tensor) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class RoundRobin:
    """Cycles through the shard in order: deterministic, reward-blind, the default."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cursor = 0  # the string path's position
        self._batch_cursor: Optional[Tensor] = None  # the tensor path's position, on device
        self._index: dict[str, int] = {}
        self.picks: Optional[Tensor] = None  # [K] picks per task (tensor path)

    # -- string protocol -------------------------------------------------------------------
    def pick(self, keys: Sequence[str], round_index: int) -> str:
        if len(keys) == 0:
            raise ValueError("RoundRobin.pick: the shard is empty; give the sampler at least one task id")
        with self._lock:
            key = keys[self._cursor % len(keys)]
            self._cursor += 1
        return key

    def record(self, task_id: str, score: float) -> None:  # reward-blind
        return None

    # -- tensor path -----------------------------------------------------------------------
    def bind(self, task_ids: Sequence[str], device: torch.device) -> None:
        self._index = {k: i for i, k in enumerate(task_ids)}
        self._batch_cursor = torch.zeros((), dtype=torch.long, device=device)
        self.picks = torch.zeros(len(task_ids), dtype=torch.long, device=device)

    def pick_batch(
        self, shard: Tensor, round_index: int, reset_mask: Tensor, generator: Optional[torch.Generator] = None
    ) -> Tensor:
        assert self._batch_cursor is not None and self.picks is not None, "call bind() first"
        order = torch.cumsum(reset_mask.long(), 0) - 1 + self._batch_cursor
        chosen = shard[order.remainder(shard.numel())]
        with self._lock:
            self._batch_cursor += reset_mask.sum()
            self.picks.index_add_(0, chosen, reset_mask.long())
        return chosen

    def record_batch(self, task_index: Tensor, score: Tensor) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {
            "cursor": self._cursor,
            "batch_cursor": None if self._batch_cursor is None else self._batch_cursor.clone(),
            "picks": None if self.picks is None else self.picks.clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._cursor = int(state["cursor"])
        if state.get("batch_cursor") is not None and self._batch_cursor is not None:
            self._batch_cursor.copy_(state["batch_cursor"])
            self.picks.copy_(state["picks"])


class _BatchedAdapter:
    """Gives a user's two-method sampler the tensor path: at each new round it asks `pick` for
    one task per actor (picks in flight ahead of time), hands them out in order as actors reset,
    and replays finished episodes into `record` at rollout end (off the step loop)."""

    def __init__(self, sampler: TaskSampler, queue_length: int) -> None:
        self.sampler = sampler
        self.queue_length = queue_length
        self._task_ids: list[str] = []
        self._index: dict[str, int] = {}
        self._queue: Optional[Tensor] = None
        self._queue_round: Optional[int] = None
        self._cursor: Optional[Tensor] = None

    def bind(self, task_ids: Sequence[str], device: torch.device) -> None:
        self._task_ids = list(task_ids)
        self._index = {k: i for i, k in enumerate(self._task_ids)}
        self._cursor = torch.zeros((), dtype=torch.long, device=device)
        self._device = device

    def _refill(self, shard: Tensor, round_index: int) -> None:
        keys = tuple(self._task_ids[i] for i in shard.tolist())
        picks = []
        for _ in range(self.queue_length):
            task_id = self.sampler.pick(keys, round_index)
            if task_id not in self._index:
                raise ValueError(
                    f"{type(self.sampler).__name__}.pick returned {task_id!r}, which is not in the shard "
                    f"it was given; pick must return one of `keys`"
                )
            picks.append(self._index[task_id])
        self._queue = torch.tensor(picks, dtype=torch.long, device=self._device)
        self._queue_round = round_index
        self._cursor.zero_()

    def pick_batch(
        self, shard: Tensor, round_index: int, reset_mask: Tensor, generator: Optional[torch.Generator] = None
    ) -> Tensor:
        if self._queue is None or self._queue_round != round_index:
            self._refill(shard, round_index)  # once per round, outside the per-step hot path
        order = torch.cumsum(reset_mask.long(), 0) - 1 + self._cursor
        self._cursor += reset_mask.sum()
        return self._queue[order.remainder(self._queue.numel())]

    def record_batch(self, task_index: Tensor, score: Tensor) -> None:
        for i, s in zip(task_index.tolist(), score.tolist()):
            self.sampler.record(self._task_ids[i], float(s))

    def state_dict(self) -> dict[str, Any]:
        inner = getattr(self.sampler, "state_dict", None)
        return {"sampler": inner() if callable(inner) else {}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        inner = getattr(self.sampler, "load_state_dict", None)
        if callable(inner):
            inner(state.get("sampler", {}))


def as_batched(sampler: Any, queue_length: int) -> BatchedTaskSampler:
    """The sampler itself when it has the tensor path, else a queue-based adapter."""
    if all(callable(getattr(sampler, m, None)) for m in ("bind", "pick_batch", "record_batch")):
        return sampler
    if not isinstance(sampler, TaskSampler):
        raise TypeError(
            f"sampler: {type(sampler).__name__} is not a TaskSampler; it needs "
            "pick(keys, round_index) -> task_id and record(task_id, score)"
        )
    return _BatchedAdapter(sampler, queue_length)
