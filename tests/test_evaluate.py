"""`python -m parlightning.evaluate` through the real CLI: scripted baselines, a checkpoint, bad input."""

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from parlightning.cli.evaluate import main as evaluate_main
from parlightning.cli.fit import main as fit

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "swarm.yaml")


def _cli(*args, cwd):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "parlightning.evaluate", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("fit")
    fit(["--config", CONFIG, "--trainer.default_root_dir", str(out), "--trainer.enable_progress_bar", "false",
         "--trainer.max_epochs", "1", "--data.num_envs", "16", "--data.num_steps", "8"])
    return glob.glob(str(out / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"))[0]


def test_scripted_baselines_with_json_and_gantt(tmp_path):
    run = _cli("--config", CONFIG, "--policy", "oracle", "--episodes", "2", "--json", "o.json", "--gantt", "g.png",
               cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "family" in run.stdout and "fanout" in run.stdout and "all" in run.stdout
    res = json.loads((tmp_path / "o.json").read_text())
    assert res["split"] == "heldout" and res["episodes"] == 2 * 64
    assert res["speedup_vs_serial"] == pytest.approx(res["serial_critical_steps"] / res["critical_steps"])
    assert res["speedup_vs_serial"] >= 3.0 and res["success_rate"] > res["serial_success_rate"] == 0.25
    assert set(res["families"]) == {"solo", "fanout", "pipeline", "locked"}
    assert res["families"]["locked"]["success_rate"] == 0.0 and res["families"]["solo"]["serial_success_rate"] == 1.0
    assert 0.9 < res["finish_rate"] <= 1.0 and res["subagents_per_episode"] > 10
    assert (tmp_path / "g.png").stat().st_size > 10_000
    serial = _cli("--policy", "serial", "--episodes", "2", "--split", "train", "--json", "s.json", cwd=tmp_path)
    s = json.loads((tmp_path / "s.json").read_text())
    assert serial.returncode == 0 and s["split"] == "train" and s["speedup_vs_serial"] == 1.0
    assert s["subagents_per_episode"] == 0.0 and s["success_rate"] == 0.25


def _error_line(run, capsys) -> str:
    """The one `error:` line of a refused command line: argparse's (exit 2, on stderr) or the program's (exit 1)."""
    with pytest.raises(SystemExit) as exit_:
        run()
    if exit_.value.code == 2:
        lines = [ln for ln in capsys.readouterr().err.splitlines() if "error:" in ln]
        assert len(lines) == 1, lines
        return lines[0][lines[0].index("error:"):]
    return str(exit_.value.code)


def test_a_trained_checkpoint_and_bad_input(tmp_path, checkpoint, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run = _cli("--config", CONFIG, "--ckpt_path", checkpoint, "--episodes", "1", "--sample", "--json", "p.json",
               cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    res = json.loads((tmp_path / "p.json").read_text())
    assert res["episodes"] == 64 and "sampled" in res["policy"] and 0.0 <= res["success_rate"] <= 1.0
    assert res["serial_critical_steps"] == pytest.approx(69.109375)  # the serial policy on the same held-out tasks
    cases = [
        (("--config", CONFIG, "--ckpt_path", str(tmp_path / "missing.ckpt")), "argument --ckpt_path: no file at"),
        (("--config", str(ROOT / "configs" / "cartpole_tensor.yaml"), "--ckpt_path", checkpoint), "another world"),
        (("--config", str(ROOT / "configs" / "cartpole_tensor.yaml"), "--policy", "serial", "--split", "heldout"),
         "--split: CartPoleEnv has no task splits"),
        (("--config", CONFIG, "--policy", "oracle", "--split", "test"), "split"),
        (("--config", CONFIG), "give exactly one"),
    ]
    # the same main() the CLI runs, in-process (a subprocess per case is slow)
    for args, message in cases:
        line = _error_line(lambda: evaluate_main([*args, "--json", "bad.json"]), capsys)  # noqa: B023
        assert line.startswith("error:") and "\n" not in line and message in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json"]  # errors write nothing


def test_several_banks_and_evaluation_seeds_report_the_mean_and_the_spread(tmp_path, checkpoint, capsys):
    res = evaluate_main(["--config", CONFIG, "--ckpt_path", checkpoint, "--episodes", "1", "--bank_seeds", "1234",
                         "2234", "3234", "--seeds", "0", "1", "--json", str(tmp_path / "m.json")])
    out = capsys.readouterr().out
    assert "3 bank(s) x 2 evaluation seed(s)" in out and "std(banks)" in out
    runs = res["runs"]
    assert [(r["bank_seed"], r["seed"]) for r in runs] == [(b, s) for b in (1234, 2234, 3234) for s in (0, 1)]
    succ = [r["success_rate"] for r in runs]
    assert res["summary"]["success_rate"]["mean"] == pytest.approx(sum(succ) / 6)
    assert len({r["serial_critical_steps"] for r in runs[::2]}) == 3  # the banks really differ
    assert all(r["ceiling_success_rate"] >= 0.6 for r in runs)  # the round-optimal oracle on the same tasks
    assert json.loads((tmp_path / "m.json").read_text())["summary"]["success_rate"]["std"] > 0
    single = evaluate_main(["--config", CONFIG, "--policy", "serial", "--episodes", "1"])  # the single form stays
    assert single["success_rate"] == 0.25 and "runs" not in single and single["ceiling_speedup_vs_serial"] > 3.0
    for args, message in ((["--bank_seeds", "1", "1"], "--bank_seeds: needs distinct"),
                          (["--seeds", "-2"], "argument --seeds: must be a seed in 0..4294967295"),
                          (["--bank_seeds", "1", "--gantt", "x.png"], "--gantt / --video")):
        line = _error_line(lambda: evaluate_main(["--config", CONFIG, "--policy", "serial", *args]), capsys)  # noqa: B023
        assert line.startswith(f"error: {message}"), line
    with pytest.raises(SystemExit, match="^error: --bank_seeds: CartPoleEnv has no task banks"):
        evaluate_main(["--config", str(ROOT / "configs" / "cartpole_tensor.yaml"), "--policy", "serial",
                       "--bank_seeds", "1"])
