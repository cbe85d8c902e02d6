"""Every script in scripts/ answers `--help` and has `--quick`; the cheap quick modes run and write
nothing into tracked files (the others' quick modes are run by their own tests or cost minutes)."""

import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (ROOT / "scripts").glob("*.py"))
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}


def _run(args, cwd, timeout=300):
    return subprocess.run([sys.executable, *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)


def _tracked_changes():
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                         text=True)
    return out.stdout if out.returncode == 0 else None  # None: not a git checkout (an sdist)


def test_the_script_list_is_what_this_test_knows():
    assert {"time_to_solve.py", "cartpole_check.py", "raw_ppo.py", "recurrent_vs_mlp.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_has_help_and_quick(script, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [script, "--help"])
    monkeypatch.setattr(sys, "path", list(sys.path))  # scripts put the checkout on sys.path
    with pytest.raises(SystemExit) as exit_:  # in this process: one torch import for all scripts
        runpy.run_path(str(ROOT / "scripts" / script), run_name="__main__")
    assert exit_.value.code in (0, None)
    out = capsys.readouterr().out
    assert "--quick" in out and "usage:" in out
    assert os.listdir(tmp_path) == []  # --help writes nothing


@pytest.mark.parametrize("args", [
    ["time_to_solve.py", "--quick"],
    ["raw_ppo.py", "--quick"],
], ids=lambda a: a[0])
def test_cheap_quick_modes_run_and_leave_tracked_files_alone(args, tmp_path):
    before = _tracked_changes()
    proc = _run([str(ROOT / "scripts" / args[0]), *args[1:]], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _tracked_changes() == before
    if args[0] == "time_to_solve.py":  # one fast-path process, 8,192 env steps: reported, too few to solve
        assert "| parlightning, configs/cartpole_fast.yaml | 0 | not solved |" in proc.stdout
        assert "| 8,192 (budget) |" in proc.stdout
        assert set(os.listdir(tmp_path)) <= {"runs"}  # scratch output only under runs/
    if args[0] == "raw_ppo.py":
        assert proc.stdout.count("iter ") == 2


def test_time_to_solve_window_and_speedup_table():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import time_to_solve as tts
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    s = tts.Solved()
    assert not s.add([500.0] * 99)  # fewer than 100 finished episodes: no verdict
    assert s.add([500.0])
    s = tts.Solved()
    assert not s.add([10.0] * 6 + [500.0] * 94)  # mean (6 x 10 + 94 x 500) / 100 = 470.6
    assert s.add([500.0])  # the oldest 10 leaves: (5 x 10 + 95 x 500) / 100 = 475.5
    fast = {0: {"process_s": 10.0, "loop_s": 6.0, "env_steps": 200_000, "cpu_s": 12.0}}
    slow = {0: {"process_s": 55.0, "loop_s": 50.0, "env_steps": 100_000, "cpu_s": 56.0}}
    table = tts.markdown({"fast": fast, "sb3": slow})
    assert "| Stable-Baselines3 PPO, rl-zoo tuned | 1/1 | 55.0 | 50.0 | 100,000 | 5.5x (min 5.5x) |" in table
