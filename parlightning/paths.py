"""Why a path cannot be read or written, in the words every one-line error uses: `not_a_file` (missing,
a folder, a pipe, unreadable) and `dangling_link` / `dangling_link_error` (a symbolic link to nothing on
the way). The standard library only: a script's argument types use these before anything heavy is
imported (checking `--out` must not import torch and Lightning)."""

from __future__ import annotations

import os
import stat
from typing import Any, Optional

from parlightning.errors import ConfigError


def not_a_file(path: Any) -> Optional[str]:
    """Why `path` cannot be opened as a file (None when it can): missing, a folder, a pipe or device,
    unreadable; the words follow the path in the caller's one line."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "does not exist" if not os.path.islink(path) else "is a link to nothing (its target does not exist)"
    except (OSError, ValueError, TypeError) as err:  # a link loop, a name too long, a NUL byte, not a path at all
        return f"cannot be opened ({getattr(err, 'strerror', None) or type(err).__name__})"
    if stat.S_ISDIR(st.st_mode):
        return "is a folder, not a file"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a pipe, device or socket: reading it could block forever)"
    if not os.access(path, os.R_OK):
        return "cannot be read (permission denied)"
    return None


def dangling_link(path: str) -> Optional[str]:
    """The part of `path` (itself or a folder above it) that is a symbolic link to nothing, or None.
    An output there would fail (makedirs: "File exists"; open: "No such file"), or, where a tool
    resolves the link first (Lightning's ModelCheckpoint), be written somewhere the user did not name."""
    probe = os.path.abspath(os.path.expanduser(str(path)))
    while not os.path.exists(probe):
        if os.path.islink(probe):
            return probe
        parent = os.path.dirname(probe)
        if parent == probe:
            return None
        probe = parent
    return None


def dangling_link_error(field: str, path: str) -> Optional[ConfigError]:
    """One ConfigError naming `field` when `path` runs through a dangling link (`dangling_link`), else None."""
    link = dangling_link(path)
    if link is None:
        return None
    target = os.readlink(link)
    return ConfigError(f"{field}: {str(path)!r} " + (f"is a link to {target!r}" if os.path.abspath(link) ==
                       os.path.abspath(os.path.expanduser(str(path))) else f"goes through {link!r}, a link to "
                       f"{target!r}") + ", which does not exist; remove the link, create its target, or choose "
                       "another path")
