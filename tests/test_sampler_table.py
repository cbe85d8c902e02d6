"""scripts/sampler_table.py: its measures are right and its clean rows match the published table."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)
_path = Path(__file__).resolve().parents[1] / "scripts" / "sampler_table.py"
_spec = importlib.util.spec_from_file_location("sampler_table", _path)
table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(table)


def test_share_and_coverage():
    even = torch.tensor([0, 1, 2, 3, 4, 5, 30, 31, 32, 33, 34, 35])
    assert table.share_and_coverage(even) == pytest.approx((50.0, 100.0))
    one = torch.tensor([2, 2, 2, 39])
    assert table.share_and_coverage(one) == pytest.approx((75.0, 0.0))
    assert table.share_and_coverage(torch.tensor([20, 21])) == (0.0, 0.0)


def test_workload_has_6_informative_17_pass_17_fail():
    rates = table.workload()
    assert rates.numel() == 40 and rates[:6].min() == pytest.approx(0.2) and rates[:6].max() == pytest.approx(0.8)
    assert (rates[6:23] == 1).all() and (rates[23:] == 0).all()


def test_round_robin_share_does_not_depend_on_noise():
    """Reward-blind: the same picks with and without flipped outcomes (why 14.5% -> 7.3% cannot be)."""
    clean, _ = table.simulate(table.RoundRobin, 0, 200, 0.0, 1, table.workload())
    noisy, _ = table.simulate(table.RoundRobin, 0, 200, 0.15, 1, table.workload())
    assert torch.equal(clean, noisy)


@pytest.mark.parametrize("name", ["c=1.4", "c=0.2", "c=0.1", "round-robin"])
def test_clean_rows_come_within_3_points_of_the_published_table(name):
    _, _, _, rows = table.cell((name, 0.0, 1, 10, (200,)))
    assert abs(rows[200][0] - table.PUBLISHED_CLEAN[name]) < 3.0, rows[200][0]
