"""`python -m parlightning.<program>` from a folder holding a file named like a module it needs.

`python -m` puts the working folder first on `sys.path`, so a user's `yaml.py`, `torch.py`,
`random.py` or `numpy/` there is imported instead of the real module, and the program fails deep in
an import with a traceback that never says why. `import_program(name)` imports the program and, when
the import fails or succeeded with such a file loaded, ends it with one `error:` line naming the file,
the module it hides and the fix. A file shadows a module when a module of that name also exists
elsewhere on the path (or in the standard library); a user's own module (`my_world.py`) does not."""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
from types import ModuleType, TracebackType
from typing import Optional


def _folder() -> Optional[str]:
    """The folder `python -m` put first on the path (the working folder), or None."""
    if not sys.path:
        return None
    return os.path.abspath(sys.path[0] or os.getcwd())


def _top_level_file(path: str, folder: str) -> Optional[str]:
    """The top-level module name a file in `folder` defines (`yaml.py`, `numpy/__init__.py`), else None."""
    path = os.path.abspath(path)
    parent, base = os.path.split(path)
    if parent == folder and base.endswith(".py"):
        return base[:-3]
    if os.path.dirname(parent) == folder and base == "__init__.py":
        return os.path.basename(parent)
    return None


def _hides(name: str, path: str, folder: str) -> bool:
    """The file `path` in `folder` hides a module `name` that exists elsewhere (or is in the standard library)."""
    if name == "parlightning" or name == "__main__":
        return False
    if name in sys.stdlib_module_names:
        return True
    others = [p for p in sys.path[1:] if os.path.abspath(p or os.getcwd()) != folder]
    try:
        spec = importlib.machinery.PathFinder.find_spec(name, others)
    except (ImportError, ValueError):
        return False
    origin = getattr(spec, "origin", None) if spec is not None else None
    return origin is not None and os.path.abspath(origin) != os.path.abspath(path)


def shadowing_files(tb: Optional[TracebackType] = None) -> list[tuple[str, str]]:
    """(module name, file) for every file of the working folder that hides a real module: those
    imported (in `sys.modules`) and those in the frames of the traceback `tb`."""
    folder = _folder()
    if folder is None:
        return []
    found: dict[str, str] = {}
    candidates = [(n, getattr(m, "__file__", None)) for n, m in list(sys.modules.items()) if "." not in n]
    while tb is not None:
        candidates.append((None, tb.tb_frame.f_code.co_filename))
        tb = tb.tb_next
    for name, path in candidates:
        if not path:
            continue
        defined = _top_level_file(path, folder)
        if defined is None or (name is not None and name != defined) or defined in found:
            continue
        if _hides(defined, path, folder):
            found[defined] = os.path.abspath(path)
    return sorted(found.items())


def shadow_line(found: list[tuple[str, str]]) -> str:
    name, path = found[0]
    shown = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else path
    more = f" (and {', '.join(n for n, _ in found[1:])})" if len(found) > 1 else ""
    return (f"error: {shown} in the working folder hides the module {name!r}{more}: `python -m` imports the "
            f"working folder's files first, so parlightning gets that file instead of the real {name}; rename it "
            "(and its __pycache__ entry) or run from another folder")


def import_program(name: str) -> ModuleType:
    """Import the program `name` (e.g. `parlightning.cli.fit`) for `python -m`; a file of the working
    folder hiding a module it needs ends the process with one line instead of an import traceback."""
    try:
        module = importlib.import_module(name)
    except Exception as err:  # noqa: BLE001  the import failed: say why when a file of the folder is to blame
        found = shadowing_files(err.__traceback__)
        if found:
            raise SystemExit(shadow_line(found)) from None
        raise
    found = shadowing_files()
    if found:
        raise SystemExit(shadow_line(found))
    return module
