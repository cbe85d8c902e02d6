"""Constrained types for configuration fields: a field's annotation is its range, in one place.

The config parser (jsonargparse, under `python -m parlightning.fit`) checks these annotations while
it parses, and `parlightning.errors.parser_error_line` turns its complaint into one line
(`model.ent_coef: must be >= 0 (a finite number), got -0.01`). A class built from Python checks the
same annotations in its `__init__` with `check_args`, which raises the same line as a `ConfigError`
and hands back plain `int` / `float` values (jsonargparse passes its own subclasses of int and float,
which must not reach a checkpoint: `torch.load(weights_only=True)` refuses unknown classes).

    from parlightning.config_types import PositiveFinite, check_args

    class MyWorld(BatchedEnv):
        def __init__(self, num_envs: PositiveInt = 8, cost: PositiveFinite = 1.0) -> None:
            num_envs, cost = check_args("", MyWorld.__init__, locals()).values()

Types: the integer ones are jsonargparse's (`PositiveInt`, `NonNegativeInt`); the float ones here
also refuse inf (`PositiveFinite`, `NonNegativeFinite`) and every one refuses NaN and booleans. For
another range, `jsonargparse.typing.restricted_number_type(name, float, [(">=", a), ("<=", b)])`.
"""

from __future__ import annotations

import functools
import inspect
import math
import sys
import typing
from collections.abc import Sequence as AbcSequence
from typing import Any, Callable, Optional, Union

from jsonargparse.typing import (
    ClosedUnitInterval,
    NonNegativeInt,
    OpenUnitInterval,
    PositiveInt,
    restricted_number_type,
)

from parlightning.errors import ConfigError, requirement

__all__ = [
    "ClosedUnitInterval", "NonNegativeFinite", "NonNegativeInt", "OpenUnitInterval", "PositiveFinite", "PositiveInt",
    "check_args", "check_value", "constraint_of", "restricted_number_type",
]

PositiveFinite = restricted_number_type("PositiveFinite", float, [(">", 0.0), ("<", math.inf)],
                                        docstring="a finite number > 0")
NonNegativeFinite = restricted_number_type("NonNegativeFinite", float, [(">=", 0.0), ("<", math.inf)],
                                           docstring="a finite number >= 0")


def is_constrained(tp: Any) -> bool:
    """A jsonargparse restricted number type (int or float with comparisons)."""
    return isinstance(tp, type) and hasattr(tp, "_expression") and hasattr(tp, "_restrictions")


def constraint_of(annotation: Any) -> Optional[tuple[type, bool, bool]]:
    """(the constrained type, optional (None allowed), sequence (each item checked)) an annotation
    names, or None when it names no constrained type: `T`, `Optional[T]`, `Sequence[T]`,
    `list[T]`, `tuple[T, ...]`, `Optional[Sequence[T]]`."""
    optional = False
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Union:
        rest = [a for a in args if a is not type(None)]
        optional = len(rest) < len(args)
        if len(rest) != 1:
            return None
        annotation = rest[0]
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if is_constrained(annotation):
        return annotation, optional, False
    if origin in (list, tuple, AbcSequence) and args and is_constrained(args[0]) \
            and (origin is not tuple or len(args) == 1 or args[1] is Ellipsis):
        return args[0], optional, True
    return None


def _requirement_of(tp: type, optional: bool, sequence: bool) -> str:
    text = requirement(tp._expression, integer=tp._type is int) + (" (each item)" if sequence else "")
    return f"{text}, or null" if optional else text


def check_value(field: str, annotation: Any, value: Any) -> Any:
    """`value` checked against the constrained type `annotation` names (see `constraint_of`), as a
    plain int / float (or a list of them); a value out of range is a ConfigError naming `field`."""
    found = constraint_of(annotation)
    if found is None:
        return value
    tp, optional, sequence = found
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{field}: {_requirement_of(tp, optional, sequence)}, got None")
    try:
        if sequence:
            if isinstance(value, (str, bytes)) or not isinstance(value, AbcSequence):
                raise ValueError(value)
            plain = [tp._type(tp(_number(v))) for v in value]
            return type(value)(plain) if isinstance(value, tuple) else plain
        return tp._type(tp(_number(value)))
    except (ValueError, TypeError, OverflowError):
        raise ConfigError(f"{field}: {_requirement_of(tp, optional, sequence)}, got {value!r}") from None


def _number(value: Any) -> Any:
    """`value` if it is a number (the parser's strings are its own business): "4" is not 4 here."""
    if isinstance(value, (str, bytes)):
        raise ValueError(value)
    return value


@functools.lru_cache(maxsize=None)
def _constrained_params(function: Callable) -> tuple[tuple[str, Any], ...]:
    """(name, annotation) of `function`'s parameters annotated with a constrained type."""
    globalns = getattr(sys.modules.get(function.__module__), "__dict__", {})
    out = []
    for name, param in inspect.signature(function).parameters.items():
        annotation = param.annotation
        if isinstance(annotation, str):  # `from __future__ import annotations`
            try:
                annotation = eval(annotation, globalns)  # noqa: S307 - the module's own annotation text
            except Exception:  # a name only imported for type checkers: not a constrained type
                continue
        if constraint_of(annotation) is not None:
            out.append((name, annotation))
    return tuple(out)


def check_args(prefix: str, function: Callable, values: dict[str, Any]) -> dict[str, Any]:
    """Every argument of `function` annotated with a constrained type, checked (`check_value`) and
    plain-typed, in signature order: `{name: value}` for the names found in `values` (typically
    `locals()` at the top of `__init__`). A bad one raises ConfigError `"{prefix}.{name}: must ..."`
    (`"{name}: ..."` with an empty prefix: a world's factory, which `parlightning.runtime.preflight.build_env`
    names as `data.env.init_args.{name}`)."""
    out = {}
    for name, annotation in _constrained_params(function):
        if name in values:
            out[name] = check_value(f"{prefix}.{name}" if prefix else name, annotation, values[name])
    return out
