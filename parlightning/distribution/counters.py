"""`AgreedCounters`: counts that every rank agrees on, the one mechanism behind the statistics
that feed a plan or a pick (samplers, `ClusterParallel`, `TensorParallel`, the planner's episode
counts).

A counter is two tensors of one shape: `agreed`, the union of every rank's increments as of the
last sync (identical on every rank), and `pending`, this rank's increments since. A sync is one
all-reduce (SUM) of the pending part: `handout()` snapshots it, the caller reduces it across ranks
(in one packed collective with other counters, if it likes), and `merge(reduced)` adds the union
to `agreed` and retires what was handed out; increments made between the two (another thread
observing) stay pending. `sync(reduce_sum)` does the three in a row.

Checkpoints keep both parts (`state_dict`), so a rank's increments since the last sync survive a
resume: each rank reloads its own state (exact), and on another number of ranks `combine` folds
every saved rank's pending part into `agreed` (nothing counted twice, nothing lost).

Plain torch; the caller holds whatever lock guards the counter (none is taken here).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch
from torch import Tensor

from parlightning.errors import ArgumentError

__all__ = ["AgreedCounters"]


class AgreedCounters:
    """`agreed` + `pending` (see the module docstring); `total()` is what this rank knows."""

    def __init__(self, agreed: Tensor, pending: Optional[Tensor] = None) -> None:
        for name, value in (("agreed", agreed), ("pending", pending)):
            if value is not None and (not isinstance(value, Tensor) or value.is_complex() or value.dtype == torch.bool
                                      or value.layout != torch.strided or value.is_meta):
                raise ArgumentError(f"AgreedCounters({name}): must be a dense real tensor of counts (e.g. "
                                    f"torch.zeros(n, dtype=torch.long)), got {type(value).__name__}"
                                    f"{'' if not isinstance(value, Tensor) else f' ({value.dtype}, {value.layout})'}")
        self.agreed = agreed
        self.pending = torch.zeros_like(agreed) if pending is None else pending
        if self.pending.shape != agreed.shape:
            raise ValueError(f"AgreedCounters: pending {tuple(self.pending.shape)} and agreed "
                             f"{tuple(agreed.shape)} must have one shape")
        self._inflight: Optional[Tensor] = None

    @classmethod
    def zeros(cls, *shape: int, dtype: torch.dtype = torch.float64,
              device: Optional[torch.device] = None) -> "AgreedCounters":
        from parlightning.method_args import check_dtype

        check_dtype("AgreedCounters.zeros(dtype)", dtype, example="torch.float64 or torch.long")
        return cls(torch.zeros(*shape, dtype=dtype, device=device))

    @classmethod
    def from_total(cls, total: Tensor, agreed: Optional[Tensor]) -> "AgreedCounters":
        """A counter whose `total()` is `total`, of which `agreed` (None: nothing) was agreed."""
        if agreed is None or agreed.shape != total.shape:
            agreed = torch.zeros_like(total)
        agreed = agreed.to(total.device, total.dtype)
        return cls(agreed.clone(), total - agreed)

    # ------------------------------------------------------------------ values
    def total(self) -> Tensor:
        return self.agreed + self.pending

    @property
    def device(self) -> torch.device:
        return self.agreed.device

    def to(self, device: torch.device) -> "AgreedCounters":
        """Move both parts (in place; returns self)."""
        self.agreed, self.pending = self.agreed.to(device), self.pending.to(device)
        if self._inflight is not None:
            self._inflight = self._inflight.to(device)
        return self

    def grow(self, rows: int) -> None:
        """Append `rows` zero rows on dim 0 (new tasks registered on every rank alike)."""
        if rows > 0:
            extra = torch.zeros(rows, *self.agreed.shape[1:], dtype=self.agreed.dtype, device=self.agreed.device)
            self.agreed = torch.cat([self.agreed, extra])
            self.pending = torch.cat([self.pending, extra.clone()])

    # ------------------------------------------------------------------ agreement
    def handout(self) -> Tensor:
        """This rank's increments since the last sync (a copy): all-reduce SUM it, then `merge`."""
        self._inflight = self.pending.clone()
        return self._inflight.clone()

    def merge(self, reduced: Tensor) -> None:
        """Add the all-reduced increments to `agreed` and retire what `handout` gave out. `reduced`
        may cover fewer rows than the counter (rows registered since the hand-out: none yet)."""
        reduced = reduced.to(self.agreed.device, self.agreed.dtype)
        if reduced.dim() != self.agreed.dim() or reduced.shape[1:] != self.agreed.shape[1:] \
                or (reduced.dim() and reduced.shape[0] > self.agreed.shape[0]):
            raise ValueError(f"AgreedCounters.merge: got shape {tuple(reduced.shape)}, expected "
                             f"{tuple(self.agreed.shape)}; every rank must register the same rows before syncing")
        rows = reduced.shape[0] if reduced.dim() else None
        if rows is None:
            self.agreed += reduced
        else:
            self.agreed[:rows] += reduced
        if self._inflight is not None:
            if rows is None:
                self.pending -= self._inflight
            else:
                self.pending[: self._inflight.shape[0]] -= self._inflight
            self._inflight = None

    def sync(self, reduce_sum: Optional[Callable[[Tensor], Tensor]] = None) -> None:
        """One round of agreement: `merge(reduce_sum(handout()))` (identity on one rank)."""
        out = self.handout()
        self.merge(out if reduce_sum is None else reduce_sum(out))

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Tensor]:
        return {"agreed": self.agreed.detach().cpu().clone(), "pending": self.pending.detach().cpu().clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """This rank's own saved state (exact). A plain tensor is read as an agreed total (the
        form older checkpoints saved)."""
        if isinstance(state, Tensor):
            state = {"agreed": state}
        device, dtype = self.agreed.device, self.agreed.dtype
        self.agreed = state["agreed"].to(device, dtype).clone()
        pending = state.get("pending")
        self.pending = torch.zeros_like(self.agreed) if pending is None else pending.to(device, dtype).clone()
        self._inflight = None

    @staticmethod
    def combine(states: Sequence[dict[str, Any]]) -> dict[str, Tensor]:
        """One state for any rank from every saved rank's (resuming on another number of ranks):
        the agreed part (the same on all) plus every rank's pending part, all agreed."""
        first = states[0] if isinstance(states[0], dict) else {"agreed": states[0]}
        agreed = first["agreed"].clone()
        for state in states:
            pending = state.get("pending") if isinstance(state, dict) else None
            if pending is not None:
                agreed = agreed + pending.to(agreed.dtype)
        return {"agreed": agreed, "pending": torch.zeros_like(agreed)}
