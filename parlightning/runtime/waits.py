"""Declared waits: code that blocks for long on purpose says so, with a bound.

Under DDP the rank watch (`parlightning.runtime.rank_watch`) declares a rank stuck when its main
thread stays on one line for `--stall_timeout` seconds (default 30 s) while not waiting for its
peers. Some waits are legitimate and longer: an external world's step (up to its `step_timeout`),
a child process starting, a compiler building a kernel, a large checkpoint being written. Such
code declares the wait and its bound:

    from parlightning.runtime.waits import expected_wait

    with expected_wait(step_timeout, "the external worlds' step"):
        answers = pool.wait_for_answers(timeout=step_timeout)

While it is open the stall judge allows `max(stall_timeout, deadline + GRACE_S)` (the deadline
counted from when the wait opened). A wait that overruns its own deadline by more than the grace
is a hang like any other and is named with the wait it overran. Declaring costs a lock and a
clock read (no host sync, no allocation on the device); any thread may declare, and waits nest.

A child process started through `parlightning.runtime.processes.Child` shares two numbers with
its parent: the latest deadline of its own open waits, and a progress count that a thread of the
child bumps whenever the stack of the child's main thread has changed since its last look (once a
second). A parent waiting for a collector or world process that is inside a declared wait, or
visibly working (a long round of a tensor world in the collector process), is not flagged; a
child blocked on one line (waiting for its parent, or stuck) adds nothing.

This module imports only the standard library: the worlds (`parlightning.envs`), collection and
runtime all import it without a cycle.
"""

from __future__ import annotations

import math
import numbers
import os
import sys
import threading
import time
import weakref
from contextlib import contextmanager
from typing import Any, Iterator, Optional

GRACE_S = 10.0  # beyond a wait's own deadline: the time its caller needs to notice and report the timeout


class Wait:
    """One open wait: `what` is waited for, for at most `seconds` from `started` (monotonic)."""

    __slots__ = ("what", "seconds", "started", "deadline", "__weakref__")

    def __init__(self, what: str, seconds: float, started: float) -> None:
        self.what, self.seconds, self.started = what, seconds, started
        self.deadline = started + seconds

    def __repr__(self) -> str:
        return f"Wait({self.what!r}, {self.seconds:g} s)"


_lock = threading.Lock()
_open: dict[int, Wait] = {}
_changes = 0  # waits opened and closed in this process: the stall judge counts them as progress
_export: Any = None  # in a child process: the shared [deadline, progress] its parent reads (see `Child`)
PROGRESS_S = 1.0  # how often a child looks at its main thread's stack
_children: "weakref.WeakSet[Any]" = weakref.WeakSet()  # objects with .wait_slot, .what and .closed


@contextmanager
def expected_wait(seconds: float, what: str) -> Iterator[Wait]:
    """Declare that the code inside may block for up to `seconds` seconds waiting for `what`
    (a short phrase: "the external worlds' step", "worker process 0 to start"). A non-positive
    or infinite bound is an error: an unbounded wait cannot be told from a hang."""
    global _changes
    from parlightning.errors import ArgumentError  # (the standard library and errors only: no method_args here)

    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or not (seconds > 0 and math.isfinite(seconds)):
        raise ArgumentError(f"expected_wait(seconds): must be a positive finite number of seconds, got {seconds!r:.40} "
                            f"({what!r:.60})")
    if not isinstance(what, str) or not what:
        raise ArgumentError(f"expected_wait(what): must be a short phrase naming what is waited for (a str), got "
                            f"{what!r:.40}")
    seconds = float(seconds)
    wait = Wait(what, seconds, time.monotonic())
    key = id(wait)
    with _lock:
        _open[key] = wait
        _changes += 1
        _publish()
    try:
        yield wait
    finally:
        with _lock:
            _open.pop(key, None)  # (gone in a child forked while it was open)
            _changes += 1
            _publish()


def _publish() -> None:
    """(lock held) In a child process: the latest deadline of its open waits, 0 when none."""
    if _export is not None:
        _export[0] = max((w.deadline for w in _open.values()), default=0.0)


def changes() -> int:
    """How many waits were opened and closed in this process so far."""
    return _changes


def open_waits() -> list[Wait]:
    """The waits open now in this process and those its children published (monotonic clocks are
    system-wide, so a child's deadline compares with this process's clock)."""
    with _lock:
        waits = list(_open.values())
    for child in list(_children):
        try:  # (no is_alive(): it may reap the child under its owner's feet; a dead child's wait is still bounded)
            deadline = float(child.wait_slot[0])
        except (AttributeError, ValueError, OSError):
            continue
        if deadline > 0 and not getattr(child, "closed", False):
            waits.append(Wait(f"{child.what}: its own declared wait", 0.0, deadline))
    return waits


def children_progress() -> int:
    """The sum of the progress counts this process's live children published (see the module
    docstring): it moves while a child's main thread moves."""
    total = 0
    for child in list(_children):
        try:
            if not getattr(child, "closed", False):
                total += int(child.wait_slot[1])
        except (AttributeError, ValueError, OSError, IndexError):
            continue
    return total


def latest() -> Optional[Wait]:
    """The open wait (own or a child's) whose deadline comes last, or None."""
    return max(open_waits(), key=lambda w: w.deadline, default=None)


def register_child(child: Any) -> None:
    """A child whose `wait_slot` (two shared doubles) carries its open waits' latest deadline and its
    progress count."""
    _children.add(child)


def _after_fork() -> None:
    """A forked child starts with no waits, no children and a fresh lock (another thread may have
    held the parent's at the fork)."""
    global _lock, _open, _export, _children
    _lock, _open, _export, _children = threading.Lock(), {}, None, weakref.WeakSet()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def serve_in_child(slot: Any) -> None:
    """In a child process: publish this process's waits to `slot[0]` and its main thread's progress
    to `slot[1]` from now on."""
    global _export
    with _lock:
        _export = slot
        _publish()
    main = threading.main_thread().ident
    threading.Thread(target=_count_progress, args=(slot, main), name="parlightning-child-progress",
                     daemon=True).start()


def _count_progress(slot: Any, ident: Optional[int]) -> None:
    last = None
    while True:
        time.sleep(PROGRESS_S)
        frame = sys._current_frames().get(ident)
        if frame is None:
            return
        where = []
        while frame is not None:
            where.append((id(frame.f_code), frame.f_lineno))
            frame = frame.f_back
        if tuple(where) != last:
            last = tuple(where)
            slot[1] += 1
