"""Critical steps (Kimi K2.5): the latency of an orchestrated episode along its critical path.

CriticalSteps = Σ_t (S_main(t) + max_i S_sub,i(t)): a stage lasts as long as its longest
subagent. Ragged stages and empty stages go through explicit masks, never padding values.
Plain torch + torchmetrics; nothing from Lightning.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor
from torchmetrics import Metric

from parlightning.errors import ConfigError
from parlightning.method_args import TensorArg, checked, checked_methods

__all__ = ["stage_critical_steps", "CriticalSteps"]


@checked(main=TensorArg("number", device="same"), sub=TensorArg("number", device="same"),
         sub_mask=TensorArg("bool", device="same", text="True = a subagent that ran"))
def stage_critical_steps(main: Tensor, sub: Tensor, sub_mask: Tensor) -> Tensor:
    """Per-stage latency main + max over valid subagents (0 where a stage has none), shape `main.shape`.

    `sub` and `sub_mask` are [..., A]; entries where `sub_mask` is False are ignored whatever they
    hold (NaN included). Steps are counts (>= 0). One masked_fill + amax: cheap enough per env step.
    Shapes and dtypes are checked first (`sub` and `sub_mask` the same shape, `main` theirs without the
    last dimension, `sub_mask` bool): metadata only, no host sync; a mismatch is a ConfigError naming it.
    """
    if sub.dim() == 0 or tuple(sub_mask.shape) != tuple(sub.shape) or tuple(main.shape) != tuple(sub.shape[:-1]):
        raise ConfigError(f"stage_critical_steps: shapes disagree: main {list(main.shape)}, sub {list(sub.shape)}, "
                         f"sub_mask {list(sub_mask.shape)}; sub and sub_mask are [..., A] (A subagent slots) and main "
                         "is [...], the same shape without the last dimension")
    if sub_mask.dtype != torch.bool:
        raise ConfigError(f"stage_critical_steps: sub_mask must be a bool mask (got {sub_mask.dtype}); pass "
                         "sub_mask.bool() (True = a subagent that ran)")
    if sub.shape[-1] == 0:  # no subagent slots at all: static shape, no sync
        return main + sub.new_zeros(sub.shape[:-1])
    return main + sub.masked_fill(~sub_mask, 0).amax(dim=-1)


def _check(name: str, t: Any, shape: tuple[int, ...], bool_mask: bool) -> None:
    if not isinstance(t, Tensor):
        raise ValueError(f"CriticalSteps: {name} must be a tensor, got {type(t).__name__}")
    if tuple(t.shape) != shape:
        raise ValueError(f"CriticalSteps: {name} has shape {tuple(t.shape)}, expected {shape}")
    if bool_mask and t.dtype != torch.bool:
        raise ValueError(f"CriticalSteps: {name} must be a bool mask (got {t.dtype}); pass mask.bool()")


@checked_methods(
    update={n: TensorArg(dt, device="same", optional=True) for n, dt in (
        ("main_steps", "number"), ("sub_steps", "number"), ("stage_mask", "bool"), ("sub_mask", "bool"),
        ("critical", "number"), ("serial", "number"), ("mask", "bool"))},
    update_totals={"critical": TensorArg("number", ("E",), device="same"), "serial": TensorArg("number", ("E",), device="same"),
                   "mask": TensorArg("bool", ("E",), device="same", optional=True)})
class CriticalSteps(Metric):
    """Mean critical steps per episode and the speed-up over serial execution, DDP-correct.

    Per episode: critical = Σ_t (S_main(t) + max_i S_sub,i(t)) over valid stages; serial =
    Σ_t (S_main(t) + Σ_i S_sub,i(t)), every subtask step done one after another by the main agent.
    `compute()` returns `critical_steps` (mean critical), `serial_steps` (mean serial), `speedup`
    = Σ serial / Σ critical (the ratio of the means, so long episodes weigh more than with a mean
    of per-episode ratios; >= 1) and `episodes`. States are float64 sums and an int64 count,
    reduced with "sum", so the DDP value equals the single-process value on the union of the
    ranks' episodes. NaN values before any episode. Keep it out of modules cast with
    `.to(half dtype)` (Lightning's "*-true" precisions), which would cast the float64 sums too.
    """

    is_differentiable = False
    higher_is_better = None
    full_state_update = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("critical_sum", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("serial_sum", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("episodes", default=torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")

    def update(
        self,
        main_steps: Optional[Tensor] = None,
        sub_steps: Optional[Tensor] = None,
        stage_mask: Optional[Tensor] = None,
        sub_mask: Optional[Tensor] = None,
        *,
        critical: Optional[Tensor] = None,
        serial: Optional[Tensor] = None,
        mask: Optional[Tensor] = None,
    ) -> None:
        """Add E episodes from per-stage counts: main_steps [E, S], sub_steps [E, S, A],
        stage_mask [E, S] bool (stage t exists), sub_mask [E, S, A] bool (slot i ran in stage t).
        Or, keyword-only, from per-episode totals: see `update_totals`."""
        if critical is not None or serial is not None:
            if main_steps is not None or sub_steps is not None or stage_mask is not None or sub_mask is not None:
                raise ValueError("CriticalSteps.update: pass per-stage counts or critical=/serial= totals, not both")
            self._add_totals(critical, serial, mask)
            return
        if not isinstance(main_steps, Tensor) or main_steps.dim() != 2:
            raise ValueError("CriticalSteps: main_steps must be a [E, S] tensor of main-agent steps per stage")
        e, s = main_steps.shape
        _check("stage_mask", stage_mask, (e, s), bool_mask=True)
        if not isinstance(sub_steps, Tensor) or sub_steps.dim() != 3 or tuple(sub_steps.shape[:2]) != (e, s):
            got = tuple(getattr(sub_steps, "shape", ()))
            raise ValueError(f"CriticalSteps: sub_steps must be [E, S, A] = [{e}, {s}, A], got {got}")
        _check("sub_mask", sub_mask, tuple(sub_steps.shape), bool_mask=True)
        valid_sub = sub_mask & stage_mask.unsqueeze(-1)
        main = main_steps.masked_fill(~stage_mask, 0)
        critical = stage_critical_steps(main, sub_steps, valid_sub).sum(dim=-1)
        serial = main.sum(dim=-1) + sub_steps.masked_fill(~valid_sub, 0).sum(dim=(-2, -1))
        self._add_totals(critical, serial, None)

    def update_totals(self, critical: Tensor, serial: Tensor, mask: Optional[Tensor] = None) -> None:
        """Add episodes whose totals a world already computed (e.g. EpisodeParts.critical_steps and
        .serial_steps): critical [E], serial [E]; with `mask` [E] bool only entries where it is True
        count (pass the step's `done` mask: no boolean indexing, so no host sync per env step).
        Goes through `update`, so torchmetrics' bookkeeping (cached compute, update count) holds."""
        self.update(critical=critical, serial=serial, mask=mask)

    def _add_totals(self, critical: Any, serial: Any, mask: Optional[Tensor]) -> None:
        if not isinstance(critical, Tensor) or not isinstance(serial, Tensor) or critical.shape != serial.shape:
            raise ValueError("CriticalSteps.update_totals: critical and serial must be tensors of the same shape [E]")
        if mask is not None:
            _check("mask", mask, tuple(critical.shape), bool_mask=True)
        for name, t in (("critical", critical), ("serial", serial)):  # one host read per update (a rollout's end)
            t = t if mask is None else t[mask]  # entries the mask drops may hold anything
            if t.numel() and bool(((t < 0) | ~torch.isfinite(t)).any()):
                raise ValueError(f"CriticalSteps.update_totals({name}): must be step counts >= 0 (finite) per episode, "
                                 f"got {t.min().item() if bool(torch.isfinite(t).all()) else 'NaN or inf'}")
        if mask is None:
            self.critical_sum += critical.sum(dtype=torch.float64)
            self.serial_sum += serial.sum(dtype=torch.float64)
            self.episodes += critical.numel()
            return
        self.critical_sum += critical.masked_fill(~mask, 0).sum(dtype=torch.float64)
        self.serial_sum += serial.masked_fill(~mask, 0).sum(dtype=torch.float64)
        self.episodes += mask.sum()

    def compute(self) -> dict[str, Tensor]:
        n = self.episodes
        return {
            "critical_steps": self.critical_sum / n,
            "serial_steps": self.serial_sum / n,
            "speedup": self.serial_sum / self.critical_sum,
            "episodes": n,
        }
