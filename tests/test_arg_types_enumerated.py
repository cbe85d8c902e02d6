"""Every command-line option of every script (scripts/*.py, not the bad-input corpora) and of the tool
CLIs (evaluate, export, bc, plot) has a checked type or choices, and every numeric one refuses nan,
inf, -1 and a huge value with argparse's one `prog: error: argument --x: ...` line (exit 2) naming the
option and what it accepts. The parsers are found automatically (each program's `build_parser()`) and
only parsed: no program's work runs."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.stem for p in (ROOT / "scripts").glob("*.py") if not p.stem.startswith("bad_inputs"))
CLIS = ["parlightning.cli.evaluate", "parlightning.cli.export", "parlightning.cli.bc", "parlightning.cli.plot"]

# Options whose value is free text, checked where it is used (each with the reason it has no type).
FREE_TEXT = {
    ("parlightning.cli.plot", "runs"): "run folders or glob patterns (find_runs names those matching nothing)",
    ("parlightning.cli.plot", "--tag"): "a TensorBoard scalar's name (any text; a missing one is named)",
    ("parlightning.cli.plot", "--title"): "the figure's title (any text; _check_title draws it once first)",
}
UNTYPED = (None, str, Path)  # str and Path accept anything: not a check
HUGE_INT, HUGE_FLOAT = str(10**30), "1e400"


def _parser(name: str) -> argparse.ArgumentParser:
    if name.startswith("parlightning."):
        return importlib.import_module(name).build_parser()
    for path in (str(ROOT), str(ROOT / "scripts")):
        if path not in sys.path:
            sys.path.insert(0, path)
    return importlib.import_module(name).build_parser()


def _value_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.nargs != 0 and not isinstance(a, argparse._HelpAction)]


def _numeric(action: argparse.Action) -> type | None:
    """int or float when the option's type reads "1", "2" or "0.5" as a number (or a list of numbers), else None."""
    for probe in ("1", "2", "0.5"):
        try:
            value = action.type(probe)
        except Exception:  # noqa: BLE001 (a path or name type refusing it, or a number out of the range)
            continue
        value = value[0] if isinstance(value, list) and value else value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return type(value)
    return None


@pytest.mark.parametrize("name", CLIS + SCRIPTS)
def test_every_option_is_typed_and_refuses_bad_numbers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = _parser(name)
    untyped = [a.option_strings or [a.dest] for a in _value_actions(parser)
               if a.type in UNTYPED and a.choices is None
               and (name, (a.option_strings or [a.dest])[0]) not in FREE_TEXT]
    assert untyped == [], f"{name}: options without a checked type or choices: {untyped}"
    for action in _value_actions(parser):
        kind = _numeric(action) if action.type not in UNTYPED else None
        if kind is None or not action.option_strings:
            continue
        flag = action.option_strings[0]
        for bad in ("nan", "inf", "-1", HUGE_FLOAT if kind is float else HUGE_INT):
            with pytest.raises(SystemExit) as exit_:
                parser.parse_args([f"{flag}={bad}"])
            err = capsys.readouterr().err
            lines = [ln for ln in err.splitlines() if "error:" in ln]
            assert exit_.value.code == 2, f"{name} {flag}={bad}: exit {exit_.value.code}"
            assert len(lines) == 1 and f"argument {'/'.join(action.option_strings)}:" in lines[0], \
                f"{name} {flag}={bad}: {err}"
            assert "must be" in lines[0] or "invalid choice" in lines[0], f"{name} {flag}={bad}: {lines[0]}"


def test_the_allow_list_names_real_options() -> None:
    for name, option in FREE_TEXT:
        names = {s for a in _parser(name)._actions for s in (a.option_strings or [a.dest])}
        assert option in names, (name, option)
