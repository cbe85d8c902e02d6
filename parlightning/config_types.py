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
import numbers
import os
import sys
import types
import typing
from collections.abc import Mapping as AbcMapping
from collections.abc import MutableMapping as AbcMutableMapping
from collections.abc import Sequence as AbcSequence
from typing import Any, Callable, Optional, Union

from jsonargparse.typing import (
    ClosedUnitInterval,
    NonNegativeInt,
    OpenUnitInterval,
    PositiveInt,
    restricted_number_type,
)

from parlightning import yaml_values
from parlightning.errors import ConfigError, requirement

yaml_values.register()  # the parser's int / float subclasses (PositiveInt(128)) dump as plain values

__all__ = [
    "ClosedUnitInterval", "NonNegativeFinite", "NonNegativeInt", "OpenUnitInterval", "PositiveFinite", "PositiveInt",
    "Seed", "available_memory", "check_allocation", "check_args", "check_container", "check_fields", "check_value",
    "constraint_of", "container_of",
    "restricted_number_type", "size_text",
]

PositiveFinite = restricted_number_type("PositiveFinite", float, [(">", 0.0), ("<", math.inf)],
                                        docstring="a finite number > 0")
NonNegativeFinite = restricted_number_type("NonNegativeFinite", float, [(">=", 0.0), ("<", math.inf)],
                                           docstring="a finite number >= 0")
SEED_MAX = 2**32 - 1  # numpy's (and Lightning's seed_everything's) seed range; torch takes it too
Seed = restricted_number_type("Seed", int, [(">=", 0), ("<=", SEED_MAX)],
                              docstring="a random seed, an integer in [0, 2**32 - 1] (numpy's range)")


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


def is_count(value: Any) -> bool:
    """Whether a restored value is a count: an integer >= 0 (an integral float such as 128.0 included), not a
    bool, NaN, inf, a fraction or a negative number."""
    return (not isinstance(value, bool) and isinstance(value, (int, float)) and value == value and 0 <= value < math.inf
            and value == int(value))


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
            plain = [tp._type(tp(_number(v, tp))) for v in value]
        else:
            plain = tp._type(tp(_number(value, tp)))
    except (ValueError, TypeError, OverflowError):
        raise ConfigError(f"{field}: {_requirement_of(tp, optional, sequence)}, got {value!r}") from None
    for v in plain if sequence else (plain,):
        _fits_64_bits(field, v)
    return type(value)(plain) if sequence and isinstance(value, tuple) else plain


_PLAIN = {  # a plain annotation's check: (accepts, what a value must be)
    int: (lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool), "must be an integer"),
    float: (lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool) and not _is_nan(v),
            "must be a number (not nan)"),
    bool: (lambda v: isinstance(v, bool) or type(v).__name__ == "bool_", "must be true or false"),
    str: (lambda v: isinstance(v, str), "must be a string"),
}


def _is_nan(value: Any) -> bool:
    try:
        return math.isnan(value)
    except (TypeError, ValueError, OverflowError):
        return False


def _split_optional(annotation: Any) -> Optional[tuple[Any, bool]]:
    """(the annotation inside `Optional[...]` / `X | None`, whether None is allowed); the annotation
    itself and False when it is no union; None for a union of several types."""
    if typing.get_origin(annotation) not in (Union, types.UnionType):
        return annotation, False
    args = typing.get_args(annotation)
    rest = [a for a in args if a is not type(None)]
    return (rest[0], len(rest) < len(args)) if len(rest) == 1 else None


def plain_of(annotation: Any) -> Optional[tuple[type, bool, bool]]:
    """(the plain type, optional, sequence) an annotation names when it is `int`, `float`, `bool`,
    `str`, a sequence of one (`Sequence[str]`, `list[float]`, `tuple[int, ...]`) or `Optional` of
    either; None for anything else (unions, mappings, classes)."""
    found = _split_optional(annotation)
    if found is None:
        return None
    annotation, optional = found
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (list, tuple, AbcSequence) and args and args[0] in _PLAIN \
            and (origin is not tuple or len(args) == 1 or args[1] is Ellipsis):
        return args[0], optional, True
    return (annotation, optional, False) if annotation in _PLAIN else None


def check_plain(field: str, annotation: Any, value: Any) -> Any:
    """`value` checked against a plain annotation (`plain_of`): a bool is not an int, a float not an
    int count, nan not a number, a number not a string, one string not a list of them, an integer
    beyond 64 bits not one torch can hold; a ConfigError naming `field` otherwise."""
    found = plain_of(annotation)
    if found is None:
        return value
    tp, optional, sequence = found
    if value is None and optional:
        return None
    accepts, need = _PLAIN[tp]
    if sequence:
        ok = not isinstance(value, (str, bytes)) and isinstance(value, AbcSequence) and all(map(accepts, value))
        need = f"must be a list, each item {need.removeprefix('must be ')}"
    else:
        ok = accepts(value)
    if not ok:
        raise ConfigError(f"{field}: {need}{', or null' if optional else ''}, got {value!r:.80}")
    for item in value if sequence else (value,):
        _fits_64_bits(field, item)
    return value


_MAPPING_ORIGINS = (dict, AbcMapping, AbcMutableMapping)
_SEQUENCE_ORIGINS = (list, tuple, AbcSequence)


def container_of(annotation: Any) -> Optional[tuple[str, bool, Any, Any]]:
    """(kind, optional, key or item annotation(s), value annotation) a container annotation names that
    `plain_of` / `constraint_of` leave out: `Mapping[K, V]` / `dict[K, V]` -> ("mapping", opt, K, V),
    `Sequence[T]` / `list[T]` / `tuple[T, ...]` -> ("sequence", opt, T, None), `tuple[A, B]` ->
    ("tuple", opt, (A, B), None), each also as `Optional[...]`; None for anything else."""
    found = _split_optional(annotation)
    if found is None:
        return None
    annotation, optional = found
    origin, args = typing.get_origin(annotation) or annotation, typing.get_args(annotation)
    if origin in _MAPPING_ORIGINS:
        return "mapping", optional, args[0] if args else Any, args[1] if len(args) > 1 else Any
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        return ("tuple", optional, args, None) if args != ((),) else ("tuple", optional, (), None)
    if origin in _SEQUENCE_ORIGINS:
        return "sequence", optional, args[0] if args else Any, None
    return None


def _simple_class(annotation: Any) -> Optional[type]:
    """The class an item annotation names when an isinstance check is cheap and exact (int, str, a
    plain class); None for Any, generics, protocols that are not runtime-checkable, constrained types."""
    if annotation is Any or not isinstance(annotation, type) or typing.get_origin(annotation) is not None:
        return None
    if is_constrained(annotation) or (getattr(annotation, "_is_protocol", False)
                                      and not getattr(annotation, "_is_runtime_protocol", False)):
        return None
    return annotation


def _item_ok(annotation: Any, value: Any) -> bool:
    if annotation in _PLAIN:
        return _PLAIN[annotation][0](value)
    found = constraint_of(annotation)
    if found is not None:
        try:
            check_value("", annotation, value)
        except ConfigError:
            return False
        return True
    cls = _simple_class(annotation)
    return cls is None or isinstance(value, cls)


def _item_name(annotation: Any) -> str:
    if annotation in _PLAIN:
        return _PLAIN[annotation][1].removeprefix("must be ")
    return getattr(annotation, "__name__", str(annotation))


def check_container(field: str, annotation: Any, value: Any) -> Any:
    """`value` checked against a container annotation (`container_of`): a mapping where a Mapping /
    dict is declared (its keys and values of the declared classes where that is a cheap isinstance),
    a list or tuple (not a string, not a mapping) where a Sequence / list / tuple is, with a fixed
    tuple's length; a ConfigError naming `field` otherwise."""
    found = container_of(annotation)
    if found is None or (value is None and found[1]):
        return value
    kind, optional, inner, vtype = found
    null = ", or null" if optional else ""
    if kind == "mapping":
        if not isinstance(value, AbcMapping):
            raise ConfigError(f"{field}: must be a mapping (a dict of name: value){null}, got "
                              f"{type(value).__name__} {value!r:.60}")
        for key, item in value.items():
            if not _item_ok(inner, key):
                raise ConfigError(f"{field}: each key must be {_item_name(inner)}, got {key!r:.40}")
            if not _item_ok(vtype, item):
                at = f"{field}.{key}" if isinstance(key, str) and key.isidentifier() else f"{field}[{key!r:.40}]"
                raise ConfigError(f"{at}: must be {_item_name(vtype)}, got "
                                  f"{type(item).__name__} {item!r:.40}")
        return value
    if isinstance(value, (str, bytes, AbcMapping)) or not isinstance(value, AbcSequence):
        raise ConfigError(f"{field}: must be a list{null}, got {type(value).__name__} {value!r:.60}")
    if kind == "tuple":
        if len(value) != len(inner):
            raise ConfigError(f"{field}: must be a list of {len(inner)} items, got {len(value)}: {value!r:.60}")
        pairs = list(zip(inner, value))
    else:
        pairs = [(inner, item) for item in value]
    for i, (tp, item) in enumerate(pairs):
        if not _item_ok(tp, item):
            raise ConfigError(f"{field}[{i}]: must be {_item_name(tp)}, got {type(item).__name__} {item!r:.40}")
    return value


def check_fields(owner: str, instance: Any) -> None:
    """A dataclass instance's fields checked against their annotations (constrained, plain and
    container ones), as `check_args` checks a constructor's: ConfigError `"{owner}.{field}: must ..."`.
    Call it first thing in `__post_init__` of a public dataclass users construct (`WorkUnit`)."""
    for name, annotation, kind in _field_params(type(instance)):
        value = getattr(instance, name)
        field = f"{owner}.{name}"
        if kind == "constrained":
            check_value(field, annotation, value)
        elif kind == "plain":
            check_plain(field, annotation, value)
        else:
            check_container(field, annotation, value)


@functools.lru_cache(maxsize=None)
def _field_params(cls: type) -> tuple[tuple[str, Any, str], ...]:
    import dataclasses

    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name], kind) for f in dataclasses.fields(cls)
                 if f.name in hints and (kind := _kind_of(hints[f.name])) is not None)


def _kind_of(annotation: Any) -> Optional[str]:
    if constraint_of(annotation) is not None:
        return "constrained"
    if plain_of(annotation) is not None:
        return "plain"
    if container_of(annotation) is not None:
        return "container"
    return None


def _fits_64_bits(field: str, value: Any) -> None:
    if isinstance(value, numbers.Integral) and not -2**63 <= value < 2**63:
        raise ConfigError(f"{field}: must fit a 64-bit integer (at most {2**63 - 1:,}), got {value}; give a "
                          "realistic value")


def _number(value: Any, tp: type) -> Any:
    """`value` if it is a number (the parser's strings are its own business): "4" is not 4 here, and
    2.0 is not an integer count."""
    if isinstance(value, (str, bytes)) or (tp._type is int and not isinstance(value, numbers.Integral)):
        raise ValueError(value)
    return value


@functools.lru_cache(maxsize=None)
def _constrained_params(function: Callable) -> tuple[tuple[str, Any, bool], ...]:
    """(name, annotation, kind) of `function`'s parameters annotated with a constrained type
    ("constrained"), a plain `int` / `float` / `bool` / `str` ("plain") or a container of anything
    (`Mapping`, `dict`, `Sequence`, `list`, `tuple`; "container")."""
    globalns = getattr(sys.modules.get(function.__module__), "__dict__", {})
    out = []
    for name, param in inspect.signature(function).parameters.items():
        annotation = param.annotation
        if isinstance(annotation, str):  # `from __future__ import annotations`
            try:
                annotation = eval(annotation, globalns)  # noqa: S307 - the module's own annotation text
            except Exception:  # a name only imported for type checkers: not a constrained type
                continue
        kind = _kind_of(annotation)
        if kind is not None:
            out.append((name, annotation, kind))
    return tuple(out)


def check_args(prefix: str, function: Callable, values: dict[str, Any]) -> dict[str, Any]:
    """Every argument of `function` annotated with a constrained type, checked (`check_value`) and
    plain-typed, in signature order: `{name: value}` for the names found in `values` (typically
    `locals()` at the top of `__init__`); an argument annotated plainly `int`, `float`, `bool` or `str`
    (or `Optional` of one) is type-checked too (`check_plain`), and one annotated with a container
    (`Mapping` / `dict` / `Sequence` / `list` / `tuple`, `Optional` of one) is checked for the container's
    kind and cheap item classes (`check_container`); neither is returned. A bad one raises
    ConfigError `"{prefix}.{name}: must ..."` (`"{name}: ..."` with an empty prefix). A world's prefix
    is its class name: `parlightning.runtime.preflight.build_env` names `SwarmEnv.max_width` as
    `data.env.init_args.max_width`. The one checker for constructor arguments: every public world,
    pool, sampler and the module call it first thing in `__init__`."""
    out = {}
    for name, annotation, kind in _constrained_params(function):
        if name in values:
            field = f"{prefix}.{name}" if prefix else name
            if kind == "constrained":
                out[name] = check_value(field, annotation, values[name])
            elif kind == "plain":
                check_plain(field, annotation, values[name])
            else:
                check_container(field, annotation, values[name])
    return out


def size_text(n: float) -> str:
    """A byte count as `1.5 GiB`."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def available_memory(device: Any = "cpu") -> tuple[int, str]:
    """(bytes free, where) on `device`: the GPU's free memory, or the host's MemAvailable."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.device(device).type == "cuda" and torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free), f"free on {device}"
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "available on this machine"
    except OSError:
        pass
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "on this machine"


def check_allocation(what: str, nbytes: float, device: Any = "cpu", fix: str = "") -> None:
    """Refuse a construction whose tables would take more than the memory free on `device`, before
    anything is allocated: ConfigError `"{what}: needs about X, more than the Y available ...; {fix}"`
    (`what` names the class and the size arguments, e.g. `CueMemoryEnv(num_envs=8, n_cues=10**9)`)."""
    free, where = available_memory(device)
    if nbytes > free:
        raise ConfigError(f"{what}: needs about {size_text(nbytes)}, more than the {size_text(free)} {where}"
                          + (f"; {fix}" if fix else ""))
