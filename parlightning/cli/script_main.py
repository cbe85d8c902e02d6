"""The one boundary between a program's `main` and the shell (`if __name__ == "__main__": run_main(main)`).

The package's own errors (`ConfigError`, `ReportedError` and their subclasses), Ctrl-C, and a
failed sub-run (`subprocess.CalledProcessError`, reported by the sub-run's own `error:` line) become
one `error:` line on stderr and a non-zero exit, without a traceback. Anything else is a bug and
keeps its traceback."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, Callable, NoReturn, Optional

from parlightning.cli.entry import refuse_bad_environment
from parlightning.cli.stdout_guard import run_guarded

INTERRUPTED = 130  # the shell's code for a program ended by SIGINT


def _line(text: str) -> str:
    text = " ".join(text.split())
    return text if text.startswith("error:") else f"error: {text}"


def last_error_line(output: "str | bytes | None") -> Optional[str]:
    """The last `...error: ...` line a program printed (argparse's `prog: error: ...` too), or None."""
    if isinstance(output, bytes):
        output = output.decode("utf-8", "replace")
    lines = [ln.strip() for ln in (output or "").splitlines() if ln.strip().startswith("error:") or ": error: " in ln]
    return lines[-1][lines[-1].index("error:"):] if lines else None


def sub_run_failed(what: str, code: int, output: str) -> SystemExit:
    """The exit for a failed sub-run (`what`, e.g. "the gym run for seed 0"): one line with the sub-run's own
    `error:` line when it printed one; otherwise (a crash: a bug) its output's tail, then the line."""
    own = last_error_line(output)
    if own is not None:
        return SystemExit(f"error: {what} failed: {own.removeprefix('error:').strip()}")
    sys.stderr.write(output[-4000:])
    return SystemExit(f"error: {what} failed (exit code {code}); its output is above")


def sub_run_error(err: subprocess.CalledProcessError) -> str:
    """A failed sub-run as one line: its own last `error:` line when its output was captured, else its command and code."""
    own = last_error_line(err.stderr) or last_error_line(err.output)
    if own is not None:
        return own
    command = err.cmd if isinstance(err.cmd, str) else " ".join(map(str, err.cmd or ()))
    return f"error: a sub-run failed with exit code {err.returncode}: {command[:200]} (its own output above names why)"


def error_line(err: BaseException) -> Optional[str]:
    """The one line for an error the boundary reports, or None for a bug (it keeps its traceback)."""
    from parlightning.errors import ConfigError, ReportedError, error_text

    if isinstance(err, (ConfigError, ReportedError)):
        return _line(error_text(err))
    if isinstance(err, subprocess.CalledProcessError):
        return sub_run_error(err)
    return None


def run_main(main: Callable[..., Any], *args: Any) -> NoReturn:
    """Call `main(*args)` and exit: 0 (or the int it returns), 1 with one `error:` line for the package's
    errors and a failed sub-run, 130 for Ctrl-C; a bug's traceback is left as it is. A wrong distributed
    or package environment variable is one line before `main` runs (its sub-runs would die importing)."""
    refuse_bad_environment()
    try:
        result = run_guarded(lambda: main(*args))  # stdout failing on write: one line (EPIPE: quiet)
    except KeyboardInterrupt:
        print("error: interrupted (Ctrl-C); the run stopped before it finished", file=sys.stderr)
        sys.exit(INTERRUPTED)
    except Exception as err:
        line = error_line(err)
        if line is None:
            raise
        print(line, file=sys.stderr)
        sys.exit(1)
    sys.exit(result if isinstance(result, int) and not isinstance(result, bool) else 0)
