"""A user's subclass of one of the package's classes (a reward, a λ schedule, a sampler, a strategy, a
world, a rollout callback) whose own `__init__` never calls the base's: the base's attributes are then
missing and the first method that reads one fails far from the cause (`'MyReward' object has no
attribute 'max_subagents'`). `check_base_init(config)` reads every `class_path` of the parsed config
(nested ones too, e.g. a StrategyPlanner's `strategy` or a reward's `lambda1`) before any class is
built, and refuses such a class with one line naming its field, the class and the fix.

The check reads the class's own `__init__` code (its bytecode names): an `__init__` that names neither
`super` nor `__init__` cannot reach the base's. Only package bases whose `__init__` sets something
count (a base without its own `__init__`, e.g. `Schedule`, needs no call).

`check_subclasses(config)` also refuses a class that leaves undefined a method its package base leaves
to subclasses (a body that only raises NotImplementedError, e.g. `Schedule.value`), or such a base
named itself, instead of a bare NotImplementedError at its first call, mid-run."""

from __future__ import annotations

import importlib
import inspect
import types
from typing import Any, Iterator, Optional


def _package_class(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "parlightning"


def _user_init_skips_base(cls: type) -> Optional[type]:
    """The first class of `cls`'s own (non-package) classes whose `__init__` never calls the next one,
    when a package base with its own `__init__` comes after it; None when the chain reaches it."""
    mro = cls.__mro__
    bases = [c for c in mro if _package_class(c) and "__init__" in vars(c)]
    if not bases or _package_class(cls):
        return None
    base_at = mro.index(bases[0])
    for own in mro[:base_at]:
        init = vars(own).get("__init__")
        if init is None:
            continue
        init = inspect.unwrap(init) if callable(init) else init  # a decorated __init__: the user's own function
        if str(getattr(init, "__module__", "")).split(".")[0] == "parlightning":
            return None  # the package's own __init__ assigned in the subclass (`__init__ = Base.__init__`)
        code = getattr(init, "__code__", None)
        if not isinstance(code, types.CodeType):
            return None  # a builtin or wrapped __init__: nothing to read
        if "super" not in code.co_names and "__init__" not in code.co_names and "__class__" not in code.co_freevars:
            return own
    return None


def _resolve(path: str) -> Optional[type]:
    module, _, name = path.rpartition(".")
    if not module:
        return None
    try:
        obj: Any = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except Exception:  # noqa: BLE001 (an unimportable class: the parser's own error names it)
        return None
    return obj if isinstance(obj, type) else None


def _get(node: Any, key: str) -> Any:
    try:
        return node.get(key) if hasattr(node, "get") else None
    except Exception:  # noqa: BLE001
        return None


def _items(node: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        yield from node.items()
        return
    try:
        yield from vars(node).items()
    except TypeError:
        return


def class_paths(node: Any, field: str = "") -> Iterator[tuple[str, str]]:
    """(field, class_path) of every class spec under `node` (a parsed config), nested ones included;
    the field skips `init_args` (`trainer.callbacks[4].strategy`)."""
    if isinstance(node, (list, tuple)):
        for i, item in enumerate(node):
            yield from class_paths(item, f"{field}[{i}]")
        return
    if isinstance(node, (str, bytes, int, float, bool)) or node is None:
        return
    path = _get(node, "class_path")
    if isinstance(path, str):
        yield field, path
        args = _get(node, "init_args")
        if args is not None:
            yield from class_paths(args, field)
        return
    if not (isinstance(node, dict) or type(node).__name__ == "Namespace"):
        return
    for key, value in _items(node):
        if isinstance(key, str) and not key.startswith("_") and key != "__path__":
            yield from class_paths(value, f"{field}.{key}" if field else key)


def base_init_error(field: str, cls: type) -> Optional[str]:
    """The line for `cls` (named at `field`) when its `__init__` never reaches its package base's."""
    own = _user_init_skips_base(cls)
    if own is None:
        return None
    base = next(c for c in cls.__mro__ if _package_class(c) and "__init__" in vars(c))
    owner = f"{own.__module__}.{own.__qualname__}"
    return (f"{field}: {owner}.__init__ never calls super().__init__(...), so {base.__module__}."
            f"{base.__qualname__}'s attributes are never set (its methods would fail at their first use): call "
            f"super().__init__(...) in its __init__ with the base's arguments")


def check_base_init(config: Any) -> Optional[str]:
    """The first such line for the parsed `config`, or None."""
    for field, path in class_paths(config):
        cls = _resolve(path)
        if cls is not None:
            line = base_init_error(field, cls)
            if line is not None:
                return line
    return None


def _left_to_subclasses(fn: Any) -> bool:
    """`fn` is a package method whose body only raises NotImplementedError (`def value(...): raise
    NotImplementedError`, a docstring allowed): a method its subclasses must define."""
    fn = fn.__func__ if isinstance(fn, (staticmethod, classmethod)) else fn
    code = getattr(fn, "__code__", None)
    return (isinstance(code, types.CodeType) and code.co_names == ("NotImplementedError",)
            and str(getattr(fn, "__module__", "")).split(".")[0] == "parlightning")


def undefined_method_error(field: str, cls: type) -> Optional[str]:
    """The line for `cls` (named at `field`) when a method a package base leaves to its subclasses
    (its body only raises NotImplementedError: `Schedule.value`) is not defined by `cls` or a class
    between them: the run would fail with a bare NotImplementedError at the first call, mid-run."""
    for base in cls.__mro__:
        if not _package_class(base):
            continue
        for name, fn in vars(base).items():
            if not _left_to_subclasses(fn):
                continue
            owner = next(c for c in cls.__mro__ if name in vars(c))
            if owner is not base:
                continue  # defined (overridden) further down
            try:
                params = [p for p in inspect.signature(fn).parameters]
            except (TypeError, ValueError):
                params = ["self", "..."]
            define = f"{name}({', '.join(params)})"
            base_name = f"{base.__module__}.{base.__qualname__}"
            if _package_class(cls):
                return (f"{field}: {cls.__module__}.{cls.__qualname__} is a base class: its {name} is left to "
                        f"subclasses (it raises NotImplementedError); name a class that defines {define}")
            return (f"{field}: {cls.__module__}.{cls.__qualname__} never defines {name}, which its base {base_name} "
                    f"leaves to subclasses (it raises NotImplementedError): define {define} in it")
    return None


def check_subclasses(config: Any) -> Optional[str]:
    """The first line for the parsed `config`'s classes (every `class_path`, nested ones too) that
    skip their package base's `__init__` (`base_init_error`) or leave a method the base leaves to
    subclasses undefined (`undefined_method_error`), or None. Reads the classes, builds nothing."""
    for field, path in class_paths(config):
        cls = _resolve(path)
        if cls is not None:
            line = base_init_error(field, cls) or undefined_method_error(field, cls)
            if line is not None:
                return line
    return None


__all__ = ["base_init_error", "check_base_init", "check_subclasses", "class_paths", "undefined_method_error"]
