"""A standard output that fails on write: `> /dev/full` (ENOSPC), a disk or terminal gone (EIO), a
reader that closed its end (`| head -1`: EPIPE).

A program's `print` then raised an OSError traceback from wherever it printed (evaluate's table), or
Python's `Exception ignored ... BrokenPipeError` at exit. `run_guarded(main)` (used by
`parlightning.cli.entry.run_program` for every `python -m parlightning.<program>`, and by
`parlightning.cli.script_main.run_main` for the scripts) puts a standard output in front of file
descriptor 1 whose failure is told apart from any other file's (a full disk under `--json` stays
that program's own error) and ends the program:
- ENOSPC, EIO, EDQUOT, EFBIG: one `error: stdout: ...` line on stderr naming the cause, exit 1;
- EPIPE: quietly (the Unix convention for `prog | head -1`), exit 141 (128 + SIGPIPE, as a shell
  reports a program SIGPIPE ended).
Outputs already written whole are kept (nothing is removed); later writes to stdout are dropped, so
the interpreter's own flush at exit says nothing more."""

from __future__ import annotations

import errno
import io
import os
import sys
from typing import Any, Callable

PIPE_CLOSED = 141  # 128 + SIGPIPE
FAILURES = (errno.EPIPE, errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG)


class StdoutFailed(BaseException):
    """Writing to standard output failed (a BaseException: no program handler takes it for its own)."""

    def __init__(self, err: OSError) -> None:
        super().__init__(str(err))
        self.err = err


class _Raw(io.RawIOBase):
    """File descriptor 1, whose write failure raises StdoutFailed once, then drops what follows."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd = fd
        self.dead = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def isatty(self) -> bool:
        return os.isatty(self.fd)

    def write(self, data: Any) -> int:
        n = len(memoryview(data))
        if self.dead:
            return n
        try:
            return os.write(self.fd, data)
        except OSError as err:
            if err.errno not in FAILURES:
                raise
            self.dead = True
            raise StdoutFailed(err) from None

    def close(self) -> None:  # fd 1 stays open: it is the process's, not this wrapper's
        self.dead = True
        super().close()


def install() -> bool:
    """Put the guarded standard output in place (once); False when stdout is not the process's fd 1
    (a test capturing it, stdout closed), which is then left as it is."""
    out = sys.stdout
    if out is None or out is not sys.__stdout__ or isinstance(getattr(out, "buffer", None), io.BufferedWriter) and \
            isinstance(getattr(out.buffer, "raw", None), _Raw):
        return False
    try:
        fd = out.fileno()
        out.flush()
    except (OSError, ValueError, AttributeError):
        return False
    guarded = io.TextIOWrapper(io.BufferedWriter(_Raw(fd)), encoding=out.encoding, errors=out.errors,
                               line_buffering=out.line_buffering, write_through=getattr(out, "write_through", False))
    sys.stdout = guarded
    return True


def _flush() -> None:
    out = sys.stdout
    if out is not None:
        try:
            out.flush()
        except (OSError, ValueError):
            pass  # an unguarded stdout: the interpreter's own handling


def _ended(err: StdoutFailed) -> "SystemExit":
    cause = err.err
    if cause.errno == errno.EPIPE:
        return SystemExit(PIPE_CLOSED)
    name = errno.errorcode.get(cause.errno or 0, "")
    why = {errno.ENOSPC: "the device it goes to is full", errno.EDQUOT: "the disk quota is used up",
           errno.EIO: "an input/output error on the device", errno.EFBIG: "the file it goes to is too large"}
    try:
        print(f"error: stdout: cannot write the program's output ({why.get(cause.errno or 0, cause.strerror)}: "
              f"{name} {cause.strerror}); free space where stdout goes or redirect it elsewhere (e.g. > out.txt on "
              "another disk); files already written whole are kept", file=sys.stderr)
    except (OSError, ValueError):
        pass
    return SystemExit(1)


def run_guarded(main: Callable[[], Any]) -> Any:
    """`main()` with the guarded standard output: a failed write to it ends the process as above."""
    install()
    try:
        try:
            result = main()
        except SystemExit as done:
            if done.code in (0, None):
                sys.stdout.flush() if sys.stdout is not None else None
            else:
                try:
                    _flush()
                except StdoutFailed:
                    pass  # the program's own error stands
            raise
        if sys.stdout is not None:
            sys.stdout.flush()
        return result
    except StdoutFailed as err:
        raise _ended(err) from None
