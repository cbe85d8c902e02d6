"""Plain values in a YAML dump: the parser's own subclasses of int, float and str, and numpy scalars.

jsonargparse hands a constrained field its own subclass of int or float (`PositiveInt(128)`); when a
second `--config` (or `--data.env`) replaces a class by a subclass whose annotation is a plain `int`,
the value is kept as it was parsed, and dumping the config (Lightning's config.yaml, `--print_config`)
failed with `('cannot represent an object', 128)`: `yaml.safe_dump` knows `int`, not its subclasses.
`register()` (called once, when `parlightning.config_types` is imported) teaches `yaml.SafeDumper`
to write any subclass of int, float or str, and a numpy scalar, as the plain value it is."""

from __future__ import annotations

from typing import Any

_DONE = False


def _int(dumper: Any, data: Any) -> Any:
    return dumper.represent_int(int(data))


def _float(dumper: Any, data: Any) -> Any:
    return dumper.represent_float(float(data))


def _str(dumper: Any, data: Any) -> Any:
    return dumper.represent_str(str.__str__(data))


def _other(dumper: Any, data: Any) -> Any:
    """A numpy scalar (`np.float32(0.5)`, whether numpy is imported yet or not) as its value; anything
    else stays unrepresentable (yaml's own RepresenterError)."""
    if type(data).__module__ == "numpy" and getattr(data, "ndim", None) == 0 and hasattr(data, "item"):
        value = data.item()
        if isinstance(value, (bool, int, float, str)):
            return dumper.represent_data(value)
    return dumper.represent_undefined(data)


def register() -> None:
    """Let `yaml.SafeDumper` (and every dumper built on it) write the subclasses and scalars above."""
    global _DONE
    if _DONE:
        return
    import yaml

    for dumper in (yaml.SafeDumper, getattr(yaml, "CSafeDumper", None)):
        if dumper is None:
            continue
        dumper.add_multi_representer(int, _int)  # bool keeps its own (exact-type) representer
        dumper.add_multi_representer(float, _float)
        dumper.add_multi_representer(str, _str)
        dumper.add_multi_representer(object, _other)  # last in every MRO: only types with no representer
    _DONE = True
