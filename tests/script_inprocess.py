"""Run a script's `main` in the test's own process, through the same boundary its `__main__` uses
(`run_main`), and return what the shell would see: (exit code, stderr text). For refusals of bad
arguments, which each cost a fresh interpreter's `import torch, lightning` when run as a command; every
script's test keeps one real command-line run of a refusal beside these."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path
from typing import Any, Callable

from parlightning.cli.script_main import run_main


def run_in_process(main: Callable[..., Any], script: Path, args: list[str]) -> tuple[int, str]:
    """`python script *args` as `run_main(main, args)` with argv[0] = script (argparse's `prog`); a
    SystemExit carrying a message is printed to stderr as the interpreter would print it.
    Returns (exit code, stderr)."""
    code, _out, err = run_in_process_full(main, script, args)
    return code, err


def run_in_process_full(main: Callable[..., Any], script: Path, args: list[str]) -> tuple[int, str, str]:
    """As `run_in_process`, returning (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = [str(script), *args]
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                run_main(main, list(args))
            except SystemExit as exit_:
                code = exit_.code
    finally:
        sys.argv = argv
    if code is None:
        return 0, out.getvalue(), err.getvalue()
    if isinstance(code, int):
        return code, out.getvalue(), err.getvalue()
    return 1, out.getvalue(), err.getvalue() + f"{code}\n"
