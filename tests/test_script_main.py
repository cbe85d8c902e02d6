"""`parlightning.cli.script_main.run_main`, the boundary of every script: the package's own errors, a
failed sub-run and Ctrl-C become one `error:` line and a non-zero exit; a bug keeps its traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from parlightning.cli.script_main import last_error_line, run_main, sub_run_failed
from parlightning.errors import ConfigError, ReportedError

ROOT = Path(__file__).resolve().parents[1]


def _exit(main, capsys) -> tuple[object, list[str]]:
    with pytest.raises(SystemExit) as exit_:
        run_main(main)
    return exit_.value.code, capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("err, line", [
    (ConfigError("--x: must be positive,\n  got 0"), "error: --x: must be positive, got 0"),
    (ReportedError("the world failed; fix it"), "error: the world failed; fix it"),
    (ConfigError("error: already prefixed"), "error: already prefixed"),
    (subprocess.CalledProcessError(1, ["python", "-m", "x"], stderr="noise\nprog: error: argument --n: bad\n"),
     "error: argument --n: bad"),
])
def test_package_errors_are_one_line_and_exit_1(err: BaseException, line: str, capsys) -> None:
    def main() -> None:
        raise err

    code, lines = _exit(main, capsys)
    assert code == 1 and lines == [line]


def test_interrupt_is_one_line(capsys) -> None:
    def main() -> None:
        raise KeyboardInterrupt

    code, lines = _exit(main, capsys)
    assert code == 130 and len(lines) == 1 and lines[0].startswith("error: interrupted")


def test_a_bug_keeps_its_traceback() -> None:
    def main() -> None:
        raise ZeroDivisionError("a bug")

    with pytest.raises(ZeroDivisionError):
        run_main(main)


@pytest.mark.parametrize("result, code", [(None, 0), ({"a": 1}, 0), (3, 3), (True, 0)])
def test_the_exit_code_is_mains_int(result, code) -> None:
    with pytest.raises(SystemExit) as exit_:
        run_main(lambda: result)
    assert exit_.value.code == code


def test_a_failed_sub_run_reports_its_own_line(capsys) -> None:
    exit_ = sub_run_failed("the gym run for seed 0", 2, "Traceback...\nfit.py: error: argument --x: must be >= 0\n")
    assert exit_.code == "error: the gym run for seed 0 failed: argument --x: must be >= 0"
    assert capsys.readouterr().err == ""
    crashed = sub_run_failed("the run", 1, "Traceback (most recent call last):\nZeroDivisionError\n")
    assert "exit code 1" in crashed.code and "ZeroDivisionError" in capsys.readouterr().err  # a bug: its output shown
    assert last_error_line(b"x\nerror: one\nerror: two\n") == "error: two" and last_error_line(None) is None


def test_a_script_prints_one_line_for_a_package_error(tmp_path: Path) -> None:
    """End to end: a script whose work raises ConfigError (a sub-run's bad --set) exits 1 with one line."""
    script = tmp_path / "s.py"
    script.write_text("from parlightning.errors import ConfigError\n"
                      "def main():\n    raise ConfigError('--thing: must be 1 (got 2)')\n"
                      "if __name__ == '__main__':\n    from parlightning.cli.script_main import run_main\n"
                      "    run_main(main)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 1 and done.stderr.splitlines() == ["error: --thing: must be 1 (got 2)"], done.stderr


def test_every_script_uses_the_boundary() -> None:
    for path in sorted((ROOT / "scripts").glob("*.py")):
        if path.stem.startswith("bad_inputs"):
            continue
        text = path.read_text()
        tail = text[text.index('if __name__ == "__main__":'):]
        assert "run_main(" in tail, f"{path.name}: its __main__ does not call run_main"
