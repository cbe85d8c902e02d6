"""Signals whose default action kills a program without a word (SIGTERM, SIGHUP, SIGUSR1, SIGUSR2,
SIGALRM, SIGQUIT and the others in `KILLING`, and SIGINT's KeyboardInterrupt) end it with one line
instead: `stop_on_signals(...)` installs a handler that raises `Signalled` in the main thread, where
the program's own error handling (and its atomic outputs) take over; handlers someone else installed
are kept, and the old ones come back after."""

from __future__ import annotations

import signal
import sys
from contextlib import contextmanager
from typing import Iterator, NoReturn, Sequence

from parlightning.errors import ReportedError

# Every signal whose default action ends the program without a word (or with a core dump) and that
# arrives from outside: from a scheduler, a shell (Ctrl-\ sends SIGQUIT), a timer (SIGALRM, SIGVTALRM,
# SIGPROF: `timeout --signal`, setitimer), the kernel (SIGXCPU: the soft CPU-time limit, `ulimit -t`,
# reached; the hard one kills next; SIGIO, SIGPWR) or a user's `kill`. Not the faults a process raises
# in itself (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGSYS, SIGTRAP: Python cannot go on after one),
# nor SIGPIPE and SIGXFSZ, which Python ignores (a write then fails with its own error).
KILLING = tuple(getattr(signal, name) for name in (
    "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGXCPU", "SIGALRM", "SIGVTALRM", "SIGPROF", "SIGQUIT", "SIGIO",
    "SIGPWR", "SIGSTKFLT") if hasattr(signal, name))


class Signalled(ReportedError):
    """The program received a signal whose default action would kill it without a word."""

    def __init__(self, signum: int, after: str = "") -> None:
        self.signum = signum
        self.code = 128 + signum  # the shell's code for a process ended by this signal
        if signum == signal.SIGXCPU:
            super().__init__(f"SIGXCPU: the process used up its CPU-time limit (`ulimit -t`, RLIMIT_CPU: the soft limit "
                             f"sends this signal, the hard one kills){after}; raise the limit or train for less time")
            return
        super().__init__(f"{signal.Signals(signum).name}: stopped by a signal (from a scheduler, a shell, or user code "
                         f"such as a world){after}")


@contextmanager
def stop_on_signals(signals: Sequence[int] = KILLING, after: str = "") -> Iterator[None]:
    """Within the block, each of `signals` still at its default action raises `Signalled(signum, after)`
    (`after`: what the line adds, e.g. what was kept); outside the main thread nothing is installed.
    Nested blocks replace an outer block's handler for their signals (their `after` is the one that
    holds there) and put it back after. A handler someone else installed over this one and that calls
    it as the previous handler (Lightning's SIGTERM handler, composed with the one it found) is left
    to act alone: this one then does nothing."""
    def stop(signum: int, _frame: object) -> None:
        if signal.getsignal(signum) is not stop:  # called by the handler that replaced this one (it handles it)
            return
        raise Signalled(signum, after)

    stop._parl_stop = True  # type: ignore[attr-defined]
    installed = {}
    for signum in signals:
        try:
            previous = signal.getsignal(signum)
            if previous == signal.SIG_DFL or getattr(previous, "_parl_stop", False):
                signal.signal(signum, stop)
                installed[signum] = previous
        except ValueError:  # not the main thread (a program called from a thread): keep the default
            pass
    try:
        yield
    finally:
        for signum, previous in installed.items():
            if signal.getsignal(signum) is stop:
                signal.signal(signum, previous)


@contextmanager
def holding_signals(err: BaseException) -> Iterator[None]:
    """While a run stopped by a signal or Ctrl-C (`err`) ends (its children stop, its outputs are sorted,
    its one line is written), a second Ctrl-C or SIGTERM is ignored instead of cutting that short with
    a traceback or a death by the signal (Lightning puts the default handlers back in its teardown);
    the previous handlers return afterwards. Other errors, and threads other than the main one, are
    left as they are."""
    held = {}
    if isinstance(err, Signalled) and err.signum == signal.SIGXCPU:  # sent again each CPU second past the limit:
        try:  # ignored for the rest of the process's (short) life, whose end it stops
            signal.signal(signal.SIGXCPU, signal.SIG_IGN)
        except ValueError:
            pass
    if isinstance(err, (KeyboardInterrupt, Signalled)) or type(err).__name__ == "SIGTERMException":
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                held[signum] = signal.signal(signum, signal.SIG_IGN)
            except ValueError:  # not the main thread
                break
    try:
        yield
    finally:
        for signum, previous in held.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)


UNWRITTEN = "; an output is written whole or not at all: none was left half-written"


def stopped(err: BaseException, after: str) -> NoReturn:
    """End a program stopped by `Signalled` or Ctrl-C (KeyboardInterrupt) with its one line and the
    shell's code for that signal (130 for Ctrl-C)."""
    if isinstance(err, Signalled):
        print(f"error: {err}", file=sys.stderr)
        sys.exit(err.code)
    print(f"error: interrupted (Ctrl-C, or KeyboardInterrupt raised by user code){after}", file=sys.stderr)
    sys.exit(128 + signal.SIGINT)
