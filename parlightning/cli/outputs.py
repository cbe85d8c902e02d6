"""Output files a command writes (`--json`, `--out`, `--csv`, ...), checked before it runs: one
`ConfigError` naming the flag, so a bad path costs nothing and leaves nothing half-written.
Plain Python (no torch, no Lightning): the light commands (plot) import it too."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterable, Iterator, NoReturn, Optional, Tuple

from parlightning.errors import ConfigError
from parlightning.runtime.checkpoint import dangling_link_error


def same_file(a: str, b: str) -> bool:
    """`a` and `b` name one file (through links and relative paths), whether or not it exists."""
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def is_virtual(path: str) -> bool:
    """Pseudo filesystems (procfs, sysfs) grant root W_OK yet refuse new files."""
    return any(path == p or path.startswith(p + os.sep) for p in ("/proc", "/sys"))


def check_output_file(flag: str, path: Optional[str], inputs: Iterable[Tuple[str, Optional[str]]] = ()) -> None:
    """A file a command will write (`--json`, `--out`, ...): not a folder, in an existing folder this
    process may write, and none of the command's `inputs` (`(flag, path)` pairs: the checkpoint or
    config it reads, another output); checked before anything runs, so a bad path costs nothing."""
    if path is None:
        return
    text = str(path)
    if not text.strip():
        raise ConfigError(f"{flag}: the path is empty; give a file path")
    for other, given in inputs:
        if given is not None and str(given).strip() and same_file(text, str(given)):
            raise ConfigError(f"{flag}: {text!r} is also {other} ({str(given)!r}); writing it would overwrite that "
                              "file: pick another path")
    if os.path.isdir(text):
        raise ConfigError(f"{flag}: {text!r} is a folder; give a file path (e.g. {os.path.join(text, 'out')})")
    if text.endswith(("/", os.sep)):  # a folder by its spelling, existing or not (pathlib would drop the slash)
        raise ConfigError(f"{flag}: {text!r} ends in '/', which names a folder; give a file path (e.g. "
                          f"{os.path.join(text, 'out')})")
    dangling = dangling_link_error(flag, text)  # open() would fail late with "No such file or directory"
    if dangling is not None:
        raise dangling
    if os.path.exists(text) and not os.path.isfile(text) and os.path.realpath(text) != os.devnull:
        raise ConfigError(f"{flag}: {text!r} is not a regular file (a device, pipe or socket): writing there would "
                          "block or fail; give a file path")
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        probe = folder
        while not os.path.exists(probe):
            probe = os.path.dirname(probe)
        what = "is a file, not a folder" if not os.path.isdir(probe) else "does not exist"
        shown = probe if what.startswith("is a file") else folder
        raise ConfigError(f"{flag}: the folder of {text!r} ({shown!r}) {what}; create it or pick another path")
    writable = os.access(text, os.W_OK) if os.path.exists(text) else os.access(folder, os.W_OK | os.X_OK)
    if not writable or is_virtual(folder):
        raise ConfigError(f"{flag}: cannot write {text!r} (no write permission in {folder!r}, or a read-only file "
                          "system); pick a writable path")


def write_error(err: BaseException, outputs: Iterable[Tuple[str, Optional[str]]]) -> Optional[str]:
    """One line for a write of one of a command's `outputs` (`(flag, path)`) that failed after the
    checks (a disk that filled, an I/O error): the flag, the file and why, with the free space;
    None when `err` is not such a failure (its traceback is kept)."""
    import errno
    import shutil

    outputs = [(flag, str(path)) for flag, path in outputs if path is not None]
    target = None
    if isinstance(err, OSError) and err.filename is not None:
        name = os.fsdecode(err.filename)
        target = next(((flag, path) for flag, path in outputs if same_file(name, path) or os.path.dirname(
            os.path.abspath(name)) == os.path.dirname(os.path.abspath(path)) and ".partial" in name), None)
    elif isinstance(err, RuntimeError) and "inline_container" in str(err) and len(outputs) == 1:
        target = outputs[0]  # torch's zip writer failing mid-file (its message names no file)
    if target is None:
        return None
    flag, path = target
    why = err.strerror if isinstance(err, OSError) and err.strerror else " ".join(str(err).split())[:120]
    try:
        free = shutil.disk_usage(os.path.dirname(os.path.abspath(path)) or ".").free
        room = f"; {free / 2**20:.0f} MiB free there"
    except OSError:
        room = ""
    full = isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    return (f"{flag}: writing {path!r} failed ({why}{room}); {'free some space' if full else 'check the disk'} or "
            "write it elsewhere")


def raise_write_error(err: BaseException, outputs: Iterable[Tuple[str, Optional[str]]]) -> NoReturn:
    """In a command's `except (OSError, RuntimeError)`: end with `write_error`'s one line when `err` is
    a failed write of one of `outputs`, or re-raise it (a bug: its traceback is kept)."""
    line = write_error(err, outputs)
    if line is None:
        raise err
    raise SystemExit(f"error: {line}") from None


@contextmanager
def written_whole(path: str) -> Iterator[str]:
    """Write an output whole or not at all: the block writes the path it is given (a hidden
    `.partial-<name>` beside `path`, same suffix, so writers that read the suffix pick the same
    format); it replaces `path` when the block ends, and is removed when the block fails (an error,
    a signal, Ctrl-C), so a file that was there is kept as it was. A failed write whose error names
    no file (`f.write`, `close` on a full disk: ENOSPC, EDQUOT, EFBIG, EIO) is given the partial
    file's name, so `write_error` names the output, its flag and the free space in one line."""
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".partial-{name}")
    try:
        try:
            yield tmp
            os.replace(tmp, path)
        except OSError as err:
            if err.filename is None:
                err.filename = tmp
            raise
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
