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
