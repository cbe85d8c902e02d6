"""Old module paths keep working after the package layout moved modules into subpackages
(tools/relayout.py, issue 22): `import parlightning.sampling`, `from parlightning.parallel import
DataParallel` and `class_path: parlightning.sampling.PosteriorSignal` in a user's YAML resolve to
the module's new home (`parlightning.distribution.samplers`), the very same module object, so
classes are identical (`isinstance`, pickles, checkpoints' class paths).

A meta-path finder, installed by `parlightning/__init__.py`, answers only the names in MOVED; it
imports nothing until one of them is asked for. The `python -m parlightning.fit|evaluate|export|bc|plot`
entry points are real thin modules, not aliases; `parlightning.policies` is a package that re-exports
its old module's names.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from typing import Any, Optional, Sequence

# old module -> new module (the same table as tools/relayout.py's MOVES, less the entry modules and
# `parlightning.policies`, which still exist under their old names)
MOVED = {
    "parlightning.module": "parlightning.ppo.module",
    "parlightning.loss": "parlightning.ppo.loss",
    "parlightning.data": "parlightning.ppo.data",
    "parlightning.reward": "parlightning.parl.reward",
    "parlightning.metrics": "parlightning.parl.metrics",
    "parlightning.slots_policy": "parlightning.policies.slots",
    "parlightning.recurrent": "parlightning.policies.recurrent",
    "parlightning.sampling": "parlightning.distribution.samplers",
    "parlightning.parallel": "parlightning.distribution.strategies",
    "parlightning.counters": "parlightning.distribution.counters",
    "parlightning.collection.planning": "parlightning.distribution.planning",
    "parlightning.checkpoint": "parlightning.runtime.checkpoint",
    "parlightning.preflight": "parlightning.runtime.preflight",
    "parlightning.rank_watch": "parlightning.runtime.rank_watch",
    "parlightning.stats": "parlightning.analysis.stats",
    "parlightning.logs": "parlightning.analysis.logs",
    "parlightning.trace": "parlightning.analysis.trace",
    "parlightning.pipeline": "parlightning.analysis.pipeline",
    "parlightning.cli_defaults": "parlightning.cli.defaults",
    "parlightning.config_log": "parlightning.cli.config_log",
    "parlightning.packaged": "parlightning.cli.packaged",
    "parlightning.outputs": "parlightning.cli.outputs",
    "parlightning.cli_types": "parlightning.cli.arg_types",
}


class _Alias(importlib.abc.Loader):
    """Loads an old name as the new module itself (its own `__spec__` kept: it is still the new module)."""

    def __init__(self, new: str) -> None:
        self.new = new
        self._spec: Any = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        module = importlib.import_module(self.new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: Any) -> None:
        module.__spec__ = self._spec  # the import system set the alias's spec on it; it runs under its new name


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old names of moved modules (MOVED), and only those; it sits after the standard
    finders, so a module that exists under the old name is always found first."""

    def __init__(self, moved: dict[str, str]) -> None:
        self.moved = dict(moved)

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None, target: Any = None) -> Any:
        new = self.moved.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new), is_package=False)


def install() -> None:
    """Put the finder on sys.meta_path once (after the standard finders: a real module always wins)."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder(MOVED))
