"""parlightning.analysis.stats: mean ± std, the seeded bootstrap CI of a difference and curve flatness, pinned by value."""

import math

import numpy as np
import pytest

from parlightning.analysis.stats import bootstrap_diff_ci, mean_std, tail_share

A = [0.12, 0.41, 0.35, 0.83, 0.57]
B = [0.02, 0.23, 0.11, 0.34, 0.05]


def test_mean_std_uses_the_sample_std_and_zero_for_one_value():
    assert mean_std([1.0, 2.0, 3.0, 4.0]) == pytest.approx((2.5, 1.2909944487358056))
    assert mean_std([0.7]) == (0.7, 0.0)
    with pytest.raises(ValueError, match=r"mean_std\(values\): must hold at least one number"):
        mean_std([])


def test_bootstrap_ci_is_pinned_per_seed_and_reproducible():
    ci = bootstrap_diff_ci(A, B, n_boot=2000, seed=0)
    assert ci.diff == pytest.approx(0.306)
    assert (ci.low, ci.high) == pytest.approx((0.07995, 0.532))
    assert ci.significant and (ci.n_a, ci.n_b, ci.level) == (5, 5, 0.95)
    assert bootstrap_diff_ci(A, B, n_boot=2000, seed=0) == ci  # same seed, same digits
    other = bootstrap_diff_ci(A, B, n_boot=2000, seed=1)
    assert (other.low, other.high) == pytest.approx((0.078, 0.54205))
    assert ci.label() == "+0.31 [+0.08, +0.53]"


def test_an_interval_that_covers_zero_is_labelled_not_significant():
    ci = bootstrap_diff_ci([0.3, 0.1, 0.5], [0.2, 0.4, 0.0])
    assert ci.low < 0 < ci.high and not ci.significant
    assert ci.label() == "+0.10 [-0.17, +0.37] not significant"
    same = bootstrap_diff_ci([1.0, 1.0, 1.0], [1.0, 1.0])  # no spread, no difference: [0, 0] covers 0
    assert (same.diff, same.low, same.high, same.significant) == (0.0, 0.0, 0.0, False)
    assert bootstrap_diff_ci([1.0, 1.0], [0.0, 0.0]).label() == "+1.00 [+1.00, +1.00]"


def test_one_seed_per_arm_gives_no_interval_and_bad_input_is_refused():
    ci = bootstrap_diff_ci([0.5], [0.1, 0.2])
    assert math.isnan(ci.low) and not ci.significant and "n/a" in ci.label()
    with pytest.raises(ValueError, match="finite"):
        bootstrap_diff_ci([0.1, float("nan")], [0.2, 0.3])
    with pytest.raises(ValueError, match="level"):
        bootstrap_diff_ci(A, B, level=1.5)


def test_tail_share_measures_how_much_the_end_of_a_curve_still_moves():
    x = np.arange(101.0)
    assert tail_share(x, x / 100) == pytest.approx(0.2)  # a straight line moves 20% in its last 20%
    assert tail_share(x, np.minimum(x, 50.0)) == pytest.approx(0.0, abs=1e-12)  # flattened at step 50
    assert tail_share(x, np.where(x >= 80, 1.0, 0.0)) == pytest.approx(0.0, abs=1e-12)  # a step at 80, flat after
    assert tail_share(x, np.maximum(x - 80.0, 0.0)) == pytest.approx(1.0)  # all movement at the end
    assert tail_share([0.0, 1.0], [3.0, 3.0]) == 0.0
    with pytest.raises(ValueError, match="2 steps but 3 values"):
        tail_share([0.0, 1.0], [1.0, 2.0, 3.0])
