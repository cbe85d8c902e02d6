"""Output files a command writes (`--json`, `--out`, `--csv`, ...), checked before it runs: one
`ConfigError` naming the flag, so a bad path costs nothing and leaves nothing half-written.
Plain Python (no torch, no Lightning): the light commands (plot) import it too."""

from __future__ import annotations

import os
from typing import Iterable, Optional, Tuple

from parlightning.errors import ConfigError


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
