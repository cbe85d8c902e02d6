"""Read TensorBoard scalars back (for scripts, tests and the README's measured numbers)."""

from __future__ import annotations

from pathlib import Path

from parlightning.method_args import PathArg, checked


@checked(logdir=PathArg("dir", text="one run's version folder, e.g. lightning_logs/version_0"))
def read_scalars(logdir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag under `logdir` (one run's version folder) as [(step, value), ...]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
