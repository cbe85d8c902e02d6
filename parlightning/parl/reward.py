"""The PARL reward (Kimi K2.5): r = λ1·r_parallel + λ2·r_finish + r_perf, with annealed λ.

`r_parallel` pays for spawning subagents (against serial collapse), `r_finish` for subtasks
they actually finish (against spurious parallelism), `r_perf` is the task outcome. λ1 and λ2
follow schedules over a position counted in the annealing unit (env steps or optimizer
steps: the caller decides and calls `advance_to`). Plain torch; nothing from Lightning.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Optional

import torch
from torch import Tensor

from parlightning.config_types import NonNegativeFinite, PositiveFinite, PositiveInt, check_args
from parlightning.errors import ArgumentError, ConfigError, ReportedError
from parlightning.method_args import IndexArg, TensorArg, checked_methods

_POSITION = {"position": IndexArg(text="a non-negative count in the annealing unit")}
_COUNT = TensorArg("number", shape="broadcast", device="same", meta=True)  # any device (meta: shapes only)

__all__ = ["Schedule", "LinearSchedule", "CosineSchedule", "ConstantSchedule", "PARLReward", "RewardValueError",
           "check_reward_output", "schedule_value"]


def _check_real(name: str, value: Any, owner: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{owner}: {name}={value!r} must be a finite number, e.g. {name}=0.1")
    return float(value)


def _check_position(position: Any, owner: str) -> int:
    if isinstance(position, bool) or not isinstance(position, numbers.Integral) or position < 0:
        raise ValueError(
            f"{owner}: position={position!r} must be a non-negative int (a count of env or optimizer steps)"
        )
    return int(position)


class Schedule:
    """A λ schedule: `value(position) -> float`, position a non-negative count in the annealing unit.

    Subclass and override `value` for a new shape; name it by `class_path` in the YAML config.
    """

    def value(self, position: int) -> float:
        raise NotImplementedError

    def __call__(self, position: int) -> float:
        return self.value(position)


@checked_methods(value=_POSITION)
class _Annealed(Schedule):
    """Shared logic of start -> end schedules: hold `start` for `warmup` units, anneal over the
    next `horizon` units, then hold `end` (exactly) forever after."""

    def __init__(self, start: float = 0.1, end: float = 0.0, horizon: PositiveFinite = 1_000_000,
                 warmup: NonNegativeFinite = 0) -> None:
        owner = type(self).__name__
        self.start = _check_real("start", start, owner)
        self.end = _check_real("end", end, owner)
        # horizon: annealing units (env or optimizer steps), e.g. 1000000 (ConstantSchedule for a fixed λ)
        typed = check_args(owner, _Annealed.__init__, locals())
        self.horizon = horizon if isinstance(horizon, int) and not isinstance(horizon, bool) else typed["horizon"]
        self.warmup = warmup if isinstance(warmup, int) and not isinstance(warmup, bool) else typed["warmup"]

    def _shape(self, t: float) -> float:
        """Fraction of the way from start to end at progress t in (0, 1)."""
        raise NotImplementedError

    def value(self, position: int) -> float:
        position = _check_position(position, type(self).__name__)
        if position <= self.warmup:
            return self.start
        t = (position - self.warmup) / self.horizon
        if t >= 1.0:
            return self.end
        return self.start + (self.end - self.start) * self._shape(t)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(start={self.start}, end={self.end}, "
            f"horizon={self.horizon}, warmup={self.warmup})"
        )


class LinearSchedule(_Annealed):
    """Linear from `start` to `end` over `horizon` units after `warmup` units held at `start`.

    value(p) = start for p <= warmup; end for p >= warmup + horizon; linear in between.
    """

    def __init__(self, start: float = 0.1, end: float = 0.0, horizon: PositiveFinite = 1_000_000,
                 warmup: NonNegativeFinite = 0) -> None:
        super().__init__(start=start, end=end, horizon=horizon, warmup=warmup)

    def _shape(self, t: float) -> float:
        return t


class CosineSchedule(_Annealed):
    """Half-cosine from `start` to `end` over `horizon` units after `warmup` units held at `start`:
    slow at both ends, (start + end) / 2 halfway."""

    def __init__(self, start: float = 0.1, end: float = 0.0, horizon: PositiveFinite = 1_000_000,
                 warmup: NonNegativeFinite = 0) -> None:
        super().__init__(start=start, end=end, horizon=horizon, warmup=warmup)

    def _shape(self, t: float) -> float:
        return 0.5 * (1.0 - math.cos(math.pi * t))


@checked_methods(value=_POSITION)
class ConstantSchedule(Schedule):
    """A fixed λ at every position (e.g. the never-annealed ablation arm, or 0 to switch a term off)."""

    def __init__(self, value: float = 0.1) -> None:
        self.constant = _check_real("value", value, "ConstantSchedule")

    def value(self, position: int) -> float:
        _check_position(position, "ConstantSchedule")
        return self.constant

    def __repr__(self) -> str:
        return f"ConstantSchedule(value={self.constant})"


class RewardValueError(ReportedError):
    """A user's reward or λ schedule returned a value the rollout cannot use (non-finite, the wrong
    type, dtype, shape or device); the message names the component, the method and the field."""


def _a(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def schedule_value(name: str, schedule: Any, position: int) -> float:
    """`schedule.value(position)` as a finite Python float, or one line naming `data.reward.<name>`,
    the schedule's class and what it returned (a one-element tensor is read once: one value per round)."""
    value = schedule.value(position)
    if isinstance(value, Tensor) and value.numel() == 1 and not value.dtype.is_complex and value.dtype != torch.bool:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        shown = _a(type(value).__name__) if not isinstance(value, (numbers.Real, str)) else repr(value)
        raise RewardValueError(
            f"data.reward.{name}: {type(schedule).__qualname__}.value(position={position}) returned {shown:.80}; a λ "
            "schedule returns a finite real number (the weight of its reward term, e.g. 0.1): fix its value(), or use "
            "LinearSchedule / CosineSchedule / ConstantSchedule")
    return float(value)


def check_reward_overrides(field: str, reward: Any) -> None:
    """A PARLReward subclass that overrides `__call__` but not `bonus` would be silently ignored:
    training adds `bonus(n_subagents, assigned, completed)` to the world's own reward (r_perf) and never
    calls `__call__` (the full reward, for API users)."""
    cls = type(reward)
    if isinstance(reward, PARLReward) and cls.__call__ is not PARLReward.__call__ and cls.bonus is PARLReward.bonus:
        raise ConfigError(f"{field}: {cls.__qualname__} overrides __call__, which training never calls: the rollout adds "
                          "bonus(n_subagents, assigned, completed) to the world's own reward (r_perf); override bonus "
                          "(and terms, which PARLAnnealing logs) instead")


def check_reward_output(reward: Any, method: str, value: Any, like: Tensor, device: torch.device,
                        finite: bool) -> None:
    """What `reward.<method>` returned where the rollout consumes it: a floating tensor of `like`'s
    shape on `device` (metadata only); with `finite` (a user's reward class), its values finite: one
    host read per round."""
    where = f"data.reward: {type(reward).__qualname__}.{method}"
    wanted = f"a floating tensor of shape {list(like.shape)} on {device} (one value per finished episode)"
    if not isinstance(value, Tensor):
        raise RewardValueError(f"{where} returned {_a(type(value).__name__)}; it must return {wanted}")
    if not value.dtype.is_floating_point:
        raise RewardValueError(
            f"{where} returned {_a(str(value.dtype).replace('torch.', ''))} tensor; it must return {wanted}: an integer "
            "bonus truncates the fractional shaping (λ·r) to 0, a bool one is not a reward")
    if value.shape != like.shape:
        raise RewardValueError(f"{where} returned shape {list(value.shape)}; it must return {wanted}")
    if value.device != device:
        raise RewardValueError(f"{where} returned a tensor on {value.device}; it must return {wanted}")
    if finite and not bool(torch.isfinite(value).all()):
        raise RewardValueError(f"{where} returned NaN or inf for a finished episode; the bonus is added to its "
                               "reward and PPO would train on it: return finite values")


def _float_dtype(*tensors: Tensor) -> torch.dtype:
    """The promoted floating dtype of the inputs (the default dtype when all are integer)."""
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype if dtype.is_floating_point else torch.get_default_dtype()


@checked_methods(advance_to=_POSITION, terms={n: _COUNT for n in ("n_subagents", "assigned", "completed", "outcome")},
                 bonus={n: _COUNT for n in ("n_subagents", "assigned", "completed")},
                 __call__={n: _COUNT for n in ("n_subagents", "assigned", "completed", "outcome")})
class PARLReward:
    """Per finished episode r = λ1·r_parallel + λ2·r_finish + r_perf, batched, tensor in / tensor out.

    r_parallel = clamp(n_subagents / max_subagents, 0, 1); r_finish = clamp(completed / assigned, 0, 1),
    0 where assigned == 0; r_perf = outcome. λ1, λ2 are read from their schedules at `position`.

    Inputs are tensors of any shape that broadcast together, on any device; the result has their
    promoted floating dtype (the default dtype if all are integer) on their device.

    Negative counts are errors. Checking them needs the values on the host, so it happens only
    where `validate=True` (the default, for API users and tests): on CUDA that is one device sync
    per call. The rollout's per-step hot path passes `validate=False`: nothing is checked and
    nothing syncs, and negative counts are harmless there anyway (both terms are clamped to [0, 1]).
    """

    def __init__(
        self,
        max_subagents: PositiveInt,
        lambda1: Optional[Schedule] = None,
        lambda2: Optional[Schedule] = None,
    ) -> None:
        # max_subagents: the most subagents an episode may spawn (r_parallel = n_subagents / max_subagents)
        max_subagents = check_args("PARLReward", PARLReward.__init__, locals())["max_subagents"]
        for name, schedule in (("lambda1", lambda1), ("lambda2", lambda2)):
            if schedule is not None and not callable(getattr(schedule, "value", None)):
                raise ValueError(
                    f"PARLReward: {name}={schedule!r} must be a Schedule with value(position), "
                    "e.g. LinearSchedule(start=0.1, end=0.0, horizon=1000000)"
                )
        self.max_subagents = int(max_subagents)
        self.lambda1: Schedule = lambda1 if lambda1 is not None else LinearSchedule()
        self.lambda2: Schedule = lambda2 if lambda2 is not None else LinearSchedule()
        self.position: int = 0

    # -- annealing -------------------------------------------------------------------------
    def advance_to(self, position: int) -> None:
        """Set the annealing position (a count of env or optimizer steps; the caller picks the unit)."""
        self.position = _check_position(position, "PARLReward.advance_to")

    def lambdas(self) -> tuple[float, float]:
        """(λ1, λ2) as Python floats at the current position (host-side; no device sync). A schedule
        whose value is not a finite real number (NaN, inf, a string, a tensor of several values) is one
        `ReportedError` naming it: the bonus would carry it into every reward."""
        return (schedule_value("lambda1", self.lambda1, self.position),
                schedule_value("lambda2", self.lambda2, self.position))

    # -- the reward ------------------------------------------------------------------------
    @staticmethod
    def _validate(n_subagents: Tensor, assigned: Tensor, completed: Tensor) -> None:
        for name, t in (("n_subagents", n_subagents), ("assigned", assigned), ("completed", completed)):
            if not isinstance(t, Tensor):
                raise ArgumentError(f"PARLReward: {name} must be a tensor (got {type(t).__name__}); wrap it in torch.as_tensor")
            if bool((t < 0).any()):  # host sync: only on the validate=True path
                raise ArgumentError(
                    f"PARLReward: {name} has negative entries; counts of subagents and subtasks must be >= 0"
                )

    def terms(
        self, n_subagents: Tensor, assigned: Tensor, completed: Tensor, outcome: Tensor, *, validate: bool = True
    ) -> tuple[Tensor, Tensor, Tensor]:
        """(r_parallel, r_finish, r_perf), each broadcast to the common shape, in the float dtype."""
        if validate:
            self._validate(n_subagents, assigned, completed)
        dtype = _float_dtype(n_subagents, assigned, completed, outcome)
        n_subagents, assigned, completed, outcome = torch.broadcast_tensors(
            n_subagents.to(dtype), assigned.to(dtype), completed.to(dtype), outcome.to(dtype)
        )
        r_parallel = (n_subagents / self.max_subagents).clamp(0.0, 1.0)
        has_work = assigned > 0
        r_finish = torch.where(has_work, completed / assigned.clamp_min(1e-12), 0.0).clamp(0.0, 1.0)
        return r_parallel, r_finish, outcome

    def bonus(self, n_subagents: Tensor, assigned: Tensor, completed: Tensor, *, validate: bool = True) -> Tensor:
        """λ1·r_parallel + λ2·r_finish: the shaping added to the env's own reward r_perf per finished episode."""
        if validate:
            self._validate(n_subagents, assigned, completed)
        dtype = _float_dtype(n_subagents, assigned, completed)
        zero = torch.zeros((), dtype=dtype, device=n_subagents.device)
        r_parallel, r_finish, _ = self.terms(n_subagents, assigned, completed, zero, validate=False)
        lam1, lam2 = self.lambdas()
        return lam1 * r_parallel + lam2 * r_finish

    def __call__(
        self, n_subagents: Tensor, assigned: Tensor, completed: Tensor, outcome: Tensor, *, validate: bool = True
    ) -> Tensor:
        """The full PARL reward λ1·r_parallel + λ2·r_finish + r_perf."""
        r_parallel, r_finish, r_perf = self.terms(n_subagents, assigned, completed, outcome, validate=validate)
        lam1, lam2 = self.lambdas()
        return lam1 * r_parallel + lam2 * r_finish + r_perf

    # -- checkpointing ---------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Plain ints only (loads under torch.load(weights_only=True)); schedules are config, not state."""
        return {"position": int(self.position)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or "position" not in state:
            raise ValueError("PARLReward.load_state_dict: missing 'position'; pass a dict from PARLReward.state_dict()")
        self.advance_to(state["position"])  # an integer >= 0 (a word, NaN or a fraction: named there)

    def __repr__(self) -> str:
        return (
            f"PARLReward(max_subagents={self.max_subagents}, lambda1={self.lambda1!r}, "
            f"lambda2={self.lambda2!r}, position={self.position})"
        )
