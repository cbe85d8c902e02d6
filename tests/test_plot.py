"""`python -m parlightning.plot`: mean and 95% CI over seeds from the TensorBoard event files of two
real tiny fits, on the env-step axis; a PNG, the numbers as CSV, one error line for bad input."""

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from parlightning.cli.fit import main as fit_main
from parlightning.analysis.logs import read_scalars
from parlightning.cli.plot import main as plot_main

ROOT = Path(__file__).resolve().parents[1]
CARTPOLE = str(ROOT / "configs" / "cartpole_tensor.yaml")


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory):
    root = tmp_path_factory.mktemp("seeds")
    for seed in (0, 1):
        fit_main(["--config", CARTPOLE, "--seed_everything", str(seed), "--trainer.max_epochs", "3",
                  "--data.num_envs", "8", "--data.num_steps", "16", "--trainer.enable_checkpointing", "false",
                  "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
                  "--trainer.default_root_dir", str(root / f"seed_{seed}")])
    return root


def test_mean_and_ci_over_two_seeds_on_env_steps(two_seeds, tmp_path):
    runs = [two_seeds / f"seed_{s}" / "lightning_logs" / "version_0" for s in (0, 1)]
    logged = [dict(read_scalars(r)["charts/episodic_return"]) for r in runs]
    assert sorted(logged[0]) == [128, 256, 384]  # event steps are env steps
    (curve,) = plot_main([str(two_seeds / "seed_*"), "--out", str(tmp_path / "c.png"), "--csv", str(tmp_path / "c.csv")])
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (tmp_path / "c.png").stat().st_size > 5000
    assert list(curve.steps) == [128, 256, 384] and len(curve.runs) == 2
    for i, step in enumerate((128, 256, 384)):
        a, b = logged[0][step], logged[1][step]
        assert curve.mean[i] == pytest.approx((a + b) / 2)
        assert curve.high[i] - curve.mean[i] == pytest.approx(12.706 * abs(a - b) / 2)  # t(0.975, 1) * sd / sqrt(2)
    assert any(curve.high > curve.low)  # the seeds differ: a band with width
    rows = list(csv.DictReader(open(tmp_path / "c.csv")))
    assert [float(r["env_steps"]) for r in rows] == [128, 256, 384] and rows[0]["runs"] == "2"


def test_groups_from_the_command_line(two_seeds, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "parlightning.plot", "--group", f"s0={two_seeds}/seed_0",
                           "--group", f"both={two_seeds}/seed_0,{two_seeds}/seed_1", "--tag", "losses/value_loss",
                           "--band", "std", "--out", "g.png"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "s0: 1 runs" in done.stdout and "both: 2 runs" in done.stdout and (tmp_path / "g.png").exists()


def test_bad_input_is_one_error_line_and_writes_nothing(two_seeds, tmp_path, capsys):
    with pytest.raises(SystemExit, match=r"^error: runs: no TensorBoard event files"):
        plot_main([str(tmp_path / "nothing"), "--out", str(tmp_path / "x.png")])
    with pytest.raises(SystemExit, match=r"^error: --tag: .* has no scalar 'charts/nope'; it logs "):
        plot_main([str(two_seeds / "seed_0"), "--tag", "charts/nope", "--out", str(tmp_path / "x.png")])
    for group in ("justaname", "=x", "a=", "a=x,,y"):  # argparse's refusal (exit 2): one line naming --group
        with pytest.raises(SystemExit) as exit_:
            plot_main(["--group", group, "--out", str(tmp_path / "x.png")])
        errors = [ln for ln in capsys.readouterr().err.splitlines() if "error:" in ln]
        assert exit_.value.code == 2 and len(errors) == 1 and "argument --group: " in errors[0], errors
    assert "must be NAME=PATTERN" in errors[0] or "no empty item" in errors[0]
    assert os.listdir(tmp_path) == []
