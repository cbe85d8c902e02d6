"""argparse types for counts, shared by the commands and the scripts: a bad count is argparse's
one `error: argument --x: ...` line (exit 2) instead of a run that does nothing or loops forever."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An integer >= 1 (seeds per cell, trials, actors, steps, threads, jobs)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0 (warm-up iterations, extra banks, a delay)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {value}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (seconds, latencies)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def bank_seed(text: str) -> int:
    """A task bank's seed: an integer in 0..2**63 - 1 (stored as int64)."""
    return _int_in(text, 0, 2**63 - 1, "a bank seed")


def _int_in(text: str, low: int, high: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} is an integer in {low}..{high}, got {text!r}") from None
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"{what} is an integer in {low}..{high}, got {value}")
    return value


def device_name(text: str) -> str:
    """A torch device this program can run on: cpu, cuda, cuda:N or mps (checked without importing torch)."""
    import re

    if not re.fullmatch(r"cpu|cuda(:\d+)?|mps", text):
        raise argparse.ArgumentTypeError(f"must be cpu, cuda, cuda:N or mps, got {text!r}")
    return text


def output_folder(text: str) -> str:
    """A folder the program will write into: an existing folder, or one it can create (no part of
    the path is a file or a device such as /dev/null, and not under /proc or /sys)."""
    import os

    path = os.path.abspath(os.path.expanduser(text))
    if os.path.isdir(path):
        return text
    if os.path.exists(path):
        raise argparse.ArgumentTypeError(f"{text!r} is a file, not a folder; name a folder (it is created if missing)")
    parent = path
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or parent.split(os.sep)[1:2] in (["proc"], ["sys"]):
        raise argparse.ArgumentTypeError(f"{text!r} cannot be created: {parent!r} is not a folder it can write into; "
                                         "name a folder under an existing writable one")
    return text


def output_file(text: str) -> str:
    """A file the program will write: not a folder, in an existing writable folder (checked before it runs)."""
    from parlightning.cli.outputs import check_output_file
    from parlightning.errors import ConfigError

    try:
        check_output_file("", text)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err).lstrip(": ")) from None
    return text
