"""Output files a command writes (`--json`, `--out`, `--csv`, ...), checked before it runs: one
`ConfigError` naming the flag, so a bad path costs nothing and leaves nothing half-written.
Plain Python (no torch, no Lightning): the light commands (plot) import it too."""

from __future__ import annotations

import contextvars
import glob
import os
from contextlib import contextmanager
from typing import Iterable, Iterator, NoReturn, Optional, Tuple

from parlightning.errors import ConfigError
from parlightning.paths import dangling_link_error


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


def _partial_of(name: str, path: str) -> bool:
    """`name` is `written_whole`'s partial file of `path` (`.partial-<name>` beside it, a suffix its
    writer appended too), not another output's in the same folder."""
    return (os.path.dirname(os.path.abspath(name)) == os.path.dirname(os.path.abspath(path))
            and os.path.basename(name).startswith(f".partial-{os.path.basename(path)}"))


def write_error(err: BaseException, outputs: Iterable[Tuple[str, Optional[str]]]) -> Optional[str]:
    """One line for a write of one of a command's `outputs` (`(flag, path)`) that failed after the
    checks (a disk that filled, an I/O error): the flag, the file and why, with the free space (and,
    for several outputs, written together by `outputs_together`, that none was written); None when
    `err` is not such a failure (its traceback is kept)."""
    import errno
    import shutil

    outputs = [(flag, str(path)) for flag, path in outputs if path is not None]
    target = None
    if isinstance(err, OSError) and err.filename is not None:
        name = os.fsdecode(err.filename)
        target = next(((flag, path) for flag, path in outputs if _partial_of(name, path)), None) or next(
            ((flag, path) for flag, path in outputs if same_file(name, path)), None)
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
    flags = list(dict.fromkeys(f for f, _ in outputs))
    none = f"; nothing was written ({' and '.join(flags)}: all or none)" if len(flags) > 1 else ""
    return (f"{flag}: writing {path!r} failed ({why}{room}); {'free some space' if full else 'check the disk'} or "
            f"write it elsewhere{none}")


def raise_write_error(err: BaseException, outputs: Iterable[Tuple[str, Optional[str]]]) -> NoReturn:
    """In a command's `except (OSError, RuntimeError)`: end with `write_error`'s one line when `err` is
    a failed write of one of `outputs`, or re-raise it (a bug: its traceback is kept)."""
    line = write_error(err, outputs)
    if line is None:
        raise err
    raise SystemExit(f"error: {line}") from None


class OutputGroup:
    """A command's outputs written together (`outputs_together`): each `written_whole` in it leaves its
    finished partial file here; `commit` puts them all in place at the end, `discard` removes them."""

    def __init__(self) -> None:
        self.pending: dict[str, str] = {}  # path -> its finished partial file (a path written twice: the last)

    def discard(self) -> None:
        """Remove every finished partial file: no output of the group is written."""
        while self.pending:
            _path, tmp = self.pending.popitem()
            if os.path.lexists(tmp):
                os.unlink(tmp)

    def commit(self) -> None:
        """Replace each output by its partial file, in the order they were written (renames in their
        own folders: no data is written, so a full disk cannot fail one half-way)."""
        try:
            while self.pending:
                path, tmp = next(iter(self.pending.items()))
                try:
                    os.replace(tmp, path)
                except OSError as err:
                    if err.filename is None:
                        err.filename = tmp
                    raise
                del self.pending[path]
        finally:
            self.discard()


_GROUP: contextvars.ContextVar[Optional[OutputGroup]] = contextvars.ContextVar("parlightning_output_group",
                                                                              default=None)


@contextmanager
def outputs_together() -> Iterator[OutputGroup]:
    """A command with several outputs (bc's --out and --json, plot's --out and --csv, evaluate's
    --json / --trace / --gantt / --video) writes all of them or none: every `written_whole` in the
    block keeps its finished partial file until the block ends, then all replace their paths; a
    block that fails (a full disk under the second output, an error, a signal, Ctrl-C) removes
    every partial file, so no output of this run is left and files that were there are unchanged.
    Give `group.discard` to a watch that may end the process (`stall_watched(cleanup=...)`)."""
    group = OutputGroup()
    token = _GROUP.set(group)
    try:
        yield group
    except BaseException:
        group.discard()
        raise
    finally:
        _GROUP.reset(token)
    group.commit()


@contextmanager
def written_whole(path: str) -> Iterator[str]:
    """Write an output whole or not at all: the block writes the path it is given (a hidden
    `.partial-<name>` beside `path`, same suffix, so writers that read the suffix pick the same
    format); it replaces `path` when the block ends (inside `outputs_together`: when that block
    ends, with the command's other outputs), and is removed when the block fails (an error, a
    signal, Ctrl-C), so a file that was there is kept as it was; a file the writer made by
    appending a suffix to the partial name is removed too. A failed write whose error names no
    file (`f.write`, `close` on a full disk: ENOSPC, EDQUOT, EFBIG, EIO) is given the partial
    file's name, so `write_error` names the output, its flag and the free space in one line."""
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".partial-{name}")
    suffixed = set(glob.glob(glob.escape(tmp) + ".*"))  # a writer that appends a suffix (savefig: NAME.png)
    group = _GROUP.get()
    try:
        try:
            yield tmp
            if group is None:
                os.replace(tmp, path)
            else:
                if not os.path.lexists(tmp):  # nothing written under the name given: as os.replace would say
                    raise FileNotFoundError(2, "No such file or directory", tmp)
                group.pending.pop(path, None)  # written twice (evaluate's --trace per run): the last write
                group.pending[path] = tmp
                tmp = ""  # the group's now
        except OSError as err:
            if err.filename is None:
                err.filename = tmp
            raise
    finally:
        partial = os.path.join(folder, f".partial-{name}")
        for left in [tmp, *(set(glob.glob(glob.escape(partial) + ".*")) - suffixed)]:  # none is ever left behind
            if left and os.path.lexists(left):
                os.unlink(left)
