"""Small, seeded statistics for experiment scripts: mean ± std over seeds, a percentile bootstrap
CI of a difference of means (labelled "not significant" when it covers 0), and curve flatness.

Seeded so that a study's summary is reproducible to the digit from its per-run results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from parlightning.config_types import OpenUnitInterval, Seed
from parlightning.errors import ArgumentError
from parlightning.method_args import IndexArg, Passed, checked

_VALUES = Passed("read by _finite: a list or an array of finite numbers (its own ArgumentError names the argument)")


def _finite(name: str, values: Sequence[float]) -> np.ndarray:
    try:
        if isinstance(values, (str, bytes)):
            raise TypeError(values)
        arr = np.asarray(list(values), dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise ArgumentError(f"{name}: must be a list or an array of numbers, got {values!r:.80}") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ArgumentError(f"{name}: must hold at least one number (a flat list or array), got {values!r:.80}")
    if not np.isfinite(arr).all():
        raise ArgumentError(f"{name}: must be finite numbers, got {arr.tolist()!r:.80}")
    return arr


@checked(values=_VALUES)
def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1); the std of a single value is 0."""
    arr = _finite("mean_std(values)", values)
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0


@dataclass(frozen=True)
class DiffCI:
    """mean(a) - mean(b) with its bootstrap interval [low, high] at `level`."""

    diff: float
    low: float
    high: float
    level: float
    n_a: int
    n_b: int

    @property
    def significant(self) -> bool:
        """True when the interval excludes 0 (NaN bounds, too few seeds, are never significant)."""
        return bool(self.low > 0.0 or self.high < 0.0)

    def label(self, digits: int = 2) -> str:
        """`+0.12 [+0.05, +0.20]`, with ` not significant` appended when the interval covers 0."""
        if math.isnan(self.low):
            return f"{self.diff:+.{digits}f} (n/a: needs >= 2 seeds per arm)"
        text = f"{self.diff:+.{digits}f} [{self.low:+.{digits}f}, {self.high:+.{digits}f}]"
        return text if self.significant else text + " not significant"

    def as_dict(self) -> dict[str, float | int | bool]:
        return {"diff": self.diff, "low": self.low, "high": self.high, "level": self.level,
                "n_a": self.n_a, "n_b": self.n_b, "significant": self.significant}


@checked(a=_VALUES, b=_VALUES, n_boot=IndexArg(lo=1), level=OpenUnitInterval, seed=Seed)
def bootstrap_diff_ci(
    a: Sequence[float], b: Sequence[float], *, n_boot: int = 10_000, level: float = 0.95, seed: int = 0
) -> DiffCI:
    """Percentile bootstrap CI of mean(a) - mean(b) for two independent samples (e.g. one value per
    seed and arm): each group is resampled with replacement on its own, `n_boot` times, from a
    NumPy generator seeded with `seed`. Needs >= 2 values per group, else the bounds are NaN."""
    xa, xb = _finite("bootstrap_diff_ci(a)", a), _finite("bootstrap_diff_ci(b)", b)
    if n_boot <= 0:
        raise ValueError(f"bootstrap_diff_ci: n_boot must be positive, got {n_boot}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"bootstrap_diff_ci: level must lie in (0, 1), got {level}")
    diff = float(xa.mean() - xb.mean())
    if xa.size < 2 or xb.size < 2:
        return DiffCI(diff, math.nan, math.nan, level, int(xa.size), int(xb.size))
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, xa.size, size=(n_boot, xa.size))
    ib = rng.integers(0, xb.size, size=(n_boot, xb.size))
    boot = xa[ia].mean(1) - xb[ib].mean(1)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(boot, [alpha, 1.0 - alpha])
    return DiffCI(diff, float(low), float(high), level, int(xa.size), int(xb.size))


@checked(steps=_VALUES, values=_VALUES)
def tail_share(steps: Sequence[float], values: Sequence[float], frac: float = 0.2) -> float:
    """How much a learning curve still moves at the end: the change over its last `frac` of the
    x-range (least-squares line through those points) as a share of the curve's whole range
    (max - min). 0 for a flat curve; about `frac` for a straight line; near 1 when all the
    movement happens at the end. Fewer than 2 points in the tail, or a constant curve, give 0."""
    x, y = _finite("tail_share(steps)", steps), _finite("tail_share(values)", values)
    if x.size != y.size:
        raise ArgumentError(f"tail_share(values): must have one value per step, got {x.size} steps but {y.size} values")
    if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not 0.0 < frac <= 1.0:
        raise ArgumentError(f"tail_share(frac): must lie in (0, 1], got {frac!r:.40}")
    span = float(y.max() - y.min())
    start = x.max() - frac * (x.max() - x.min())
    tx, ty = x[x >= start], y[x >= start]
    if span == 0.0 or tx.size < 2 or float(tx.max() - tx.min()) == 0.0:
        return 0.0
    slope = np.polyfit(tx, ty, 1)[0]
    return float(abs(slope) * (tx.max() - tx.min()) / span)
