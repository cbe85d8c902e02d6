"""`python -m parlightning.<program>` from a folder holding a file named like a module the program
needs (a user's `yaml.py`, a `numpy/` folder) ends with one line naming the file and the fix, not an
import traceback, and a signal while the program is still importing ends it with one line
(`parlightning/cli/entry.py`); a user's own module there is no shadow."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", *args], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("files", [{"yaml.py": "raise ImportError('a stub')\n"},  # fails while importing
                                   {"numpy/__init__.py": ""}])  # imports, and would break later
def test_a_file_hiding_a_module_the_program_needs_is_one_line(tmp_path, files):
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    before = sorted(p.name for p in tmp_path.iterdir())
    run = _run(tmp_path, "parlightning.fit", "--config", "swarm", "--trainer.max_epochs", "1")
    name = next(iter(files)).split("/")[0].removesuffix(".py")
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert lines == [f"error: {next(iter(files))} in the working folder hides the module {name!r}: `python -m` "
                     f"imports the working folder's files first, so parlightning gets that file instead of the real "
                     f"{name}; rename it (and its __pycache__ entry) or run from another folder"], lines
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == before  # nothing written


def test_a_users_own_module_in_the_folder_is_not_a_shadow(tmp_path):
    (tmp_path / "my_world_for_shadow_test.py").write_text("X = 1\n")
    run = _run(tmp_path, "parlightning.export", "--help")
    assert run.returncode == 0 and "usage:" in run.stdout, run.stderr


def test_a_signal_while_the_program_imports_is_one_line(tmp_path):
    """The program module signals itself at import (a deterministic stand-in for a scheduler's SIGTERM
    during the seconds torch and Lightning take to import)."""
    (tmp_path / "signalled_program_for_entry_test.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n\ndef main():\n    print('ran')\n")
    code = "from parlightning.cli.entry import run_program; run_program('signalled_program_for_entry_test')"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 128 + 15 and run.stdout == "" and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.strip().splitlines() == [
        "error: SIGTERM: stopped by a signal (from a scheduler, a shell, or user code such as a world); it was "
        "still starting: nothing was written"]
