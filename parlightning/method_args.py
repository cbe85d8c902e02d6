"""Checked public methods: the arguments of every public method and function users are pointed to
are checked at entry by one mechanism, and a bad one is one `ArgumentError` (a `ConfigError`, and a
`TypeError` for callers that caught the old raw one) naming `Class.method(arg)` and what it must be:

    SwarmEnv.step(action): must be an integer (torch.long) tensor of shape [num_envs, max_width] =
    [8, 6], got a float32 tensor [8, 6]

`checked_methods` (a class decorator) wraps a class's public methods, `checked` one function. What
is checked comes from the annotations (`int`, `float`, `bool`, `str`, the constrained types of
`parlightning.config_types`, `Tensor`, `Mapping`, `Callable`, `torch.dtype` (`check_dtype`: a dtype's name as
a string is told the torch.dtype to pass), `torch.Generator` (on the object's device, `generator_fault`),
`Optional` / `Sequence` of them) and
from specs given by name for what an annotation cannot say: `TensorArg` (dtype kind, shape against
the object's sizes or the call's other tensors, device, finite values, a value range), `IndexArg`
(an int in a range the object knows), `OneOf`, `Passed` (accepted as is, with the reason: the
user's own payload), `ItemsArg` (a list of ints or strings: length, range, none twice), `PathArg` (an
existing folder or file, a file to write in an existing folder), `Serialisable` (JSON lines, or
picklable for another process), `AllOf`; a spec for `**kwargs` checks each extra keyword. Every
tensor argument is dense and holds data (`layout_fault`: not sparse, nested, or meta on an object
that is not on meta).

The lifecycle: `checked_methods(lifecycle=Lifecycle(...))` declares which state each method needs
(`requires`: a world's `step` needs `reset`, a sampler's `pick_batch` needs `bind`), which methods
make a state hold or end it (`enters` / `leaves`), and `closes` (after `close()` every other public
method is refused; `close()` again is harmless). A call in the wrong state is one `LifecycleError`
naming `Class.method` and what to call first, raised at entry before the arguments are checked:

    SwarmEnv.step: called before reset(); call env.reset() first

A state is kept by the mechanism (a frozenset of names on the object, `_lifecycle_state`) or read
off the object (`State(holds=...)`: a Trainer attached, keys declared). Subclasses inherit the
declaration. `mark` / `holds` / `require` serve the few cases that depend on an argument (a loaded
state saved before any reset, a data module state that holds the worlds').

Cost: the checks read metadata only (isinstance, shape, dtype, device, layout: O(1) Python, no host
read), except the ones a spec asks for (`finite=True`, `values=`), which are never used on a per-step
path unless `once=True` with a tensor whose range is known (`vouch_values`: the package's shards);
a lifecycle requirement is one frozenset comparison (a derived state: one call of its `holds`).
Torch is imported lazily: pools import this module without it.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import sys
import threading
import typing
from collections.abc import Iterable as AbcIterable
from collections.abc import Mapping
from typing import Any, Iterable, Optional, Union

from parlightning.config_types import check_plain, check_value, constraint_of, plain_of
from parlightning.errors import ArgumentError, ConfigError, LifecycleError

__all__ = ["AllOf", "Arg", "ArgumentError", "IndexArg", "Is", "ItemsArg", "Lifecycle", "LifecycleError", "MappingArg",
           "PathArg", "Serialisable", "State", "check_dtype", "check_real_device", "check_real_tensors", "check_state",
           "OneOf", "Passed", "TensorArg", "checked", "checked_methods", "generator_fault", "holds", "layout_fault",
           "lifecycle_of", "mark", "one_at_a_time", "require", "specs_of", "vouch_values"]

_DTYPE_TEXT = {"int": "an integer (torch.long)", "float": "a float", "bool": "a bool", "number": "a numeric"}


def _torch() -> Any:
    import torch

    return torch


def _got(value: Any) -> str:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        if value.is_nested:
            return f"a nested {str(value.dtype).removeprefix('torch.')} tensor on {value.device}"
        layout = "" if value.layout == torch.strided else f" {str(value.layout).removeprefix('torch.')}"
        dtype = str(value.dtype).removeprefix('torch.')
        return f"{'an' if dtype[0] in 'aeiou' else 'a'} {dtype}{layout} tensor {list(value.shape)} on {value.device}"
    text = repr(value) if not isinstance(value, (list, tuple, dict)) else f"{type(value).__name__} {value!r}"
    return f"{' '.join(text[:400].split()):.80}"  # one line: a container of tensors prints over several


def _size(obj: Any, name: Any) -> Any:
    """A dimension or bound a spec names: an int, an attribute of the object (`num_envs`), or a
    function of it."""
    if callable(name):
        return name(obj)
    if isinstance(name, str):
        value = getattr(obj, name)
        return len(value) if isinstance(value, (list, tuple)) and not name.startswith("*") else value
    return name


def layout_fault(value: Any, obj: Any = None, meta: bool = False) -> Optional[str]:
    """Why a tensor argument cannot be computed with, or None: a sparse or other non-strided layout, a
    nested tensor, a meta tensor (no data) passed to an object not itself on meta, unless `meta` (a
    device-agnostic computation: shapes only on meta). A pure function whose tensors are all on meta
    computes shapes only, which is valid; a call mixing meta with real tensors is refused by
    `device="same"`. Metadata only (O(1))."""
    torch = _torch()
    if value.is_nested:
        return "a dense tensor (a nested tensor has no single shape; pad it, or pass one tensor per call)"
    if value.layout != torch.strided:
        return (f"a dense (strided) tensor, not a {str(value.layout).removeprefix('torch.')} one "
                "(call .to_dense() first)")
    if value.is_meta and not meta and obj is not None and getattr(getattr(obj, "device", None), "type", None) != "meta":
        return "a tensor holding data (a meta tensor has a shape and no values)"
    return None


class Arg:
    """What one argument must be; `check` raises ArgumentError naming `field` (`Class.method(arg)`)."""

    optional = False

    def check(self, field: str, value: Any, obj: Any, call: dict) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def fail(self, field: str, need: str, value: Any) -> None:
        raise ArgumentError(f"{field}: must be {need}{', or None' if self.optional else ''}, got {_got(value)}")


class Passed(Arg):
    """Accepted as is: the user's own payload, passed through (`reason` says why it is not checked)."""

    optional = True

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def check(self, field: str, value: Any, obj: Any, call: dict) -> None:
        return None


class TensorArg(Arg):
    """A tensor argument. `dtype`: "int" (an integer dtype, not bool), "float", "bool" or "number"
    (not bool), or a tuple of them. `shape`: a tuple of dims, each an int, None (any size), the name
    of an attribute of the object (`"num_envs"`), `"*name"` (the attribute's tuple spliced in, e.g.
    `"*observation_shape"`) or a capital letter shared by the call's tensors (`"B"`: every tensor
    with it agrees); a leading `...` allows any leading dims. `ndim`: the number of dims when the
    shape is not fixed. `device`: "self" (the object's `device`) or "same" (every "same" tensor of
    the call on one device). `finite` / `values=(lo, hi)` (hi exclusive, an int, attribute or
    function) read the values on the host: for calls off the per-step path only, or with `once`
    (per-step methods given the same tensor every call, such as a round's shard): a tensor whose
    values are known to lie in the range (`vouch_values`: the package's own index tensors, in range by
    construction; or checked by an earlier call) is not read again (a tensor attribute and its
    version: O(1)); another is read once, then known. `shape="broadcast"`: the call's "broadcast"
    tensors broadcast together (`torch.broadcast_shapes` on their shapes: metadata only). Every
    tensor argument is dense and holds data (`layout_fault`: not sparse, nested or meta; `meta=True`:
    meta accepted, for a device-agnostic computation that also runs on shapes alone)."""

    def __init__(self, dtype: Any = None, shape: Any = None, ndim: Any = None, device: Optional[str] = None,
                 optional: bool = False, finite: bool = False, values: Optional[tuple] = None, text: str = "",
                 once: bool = False, meta: bool = False) -> None:
        self.dtype = (dtype,) if isinstance(dtype, str) else dtype
        self.shape, self.ndim, self.device = shape, ndim, device
        self.optional, self.finite, self.values, self.text, self.once = optional, finite, values, text, once
        self.meta = meta

    def _dims(self, obj: Any) -> Optional[list]:
        """The wanted dims with `*attr` expanded from `obj`; None when such an attribute is unknown
        (None: e.g. a Policy built without its observation shape), so the shape is not checked."""
        dims = []
        for d in self.shape or ():
            if isinstance(d, str) and d.startswith("*"):
                known = getattr(obj, d[1:], None)
                if known is None:
                    return None
                dims += list(known)
            else:
                dims.append(d)
        return dims

    def need(self, obj: Any, call: dict) -> str:
        kind = " or ".join(_DTYPE_TEXT[d] for d in self.dtype) if self.dtype else "a"
        text = f"{kind} tensor"
        if self.shape == "same":
            text += " of the call's per-sample shape"
        elif self.shape == "broadcast":
            text += " whose shape broadcasts with the call's other tensors"
        elif self.shape is not None:
            names = [("..." if d is Ellipsis else "any" if d is None else str(d)) for d in self.shape]
            sizes = [("..." if d is Ellipsis else "any" if d is None else d if isinstance(d, str) and d.isupper() else str(_size(obj, d)) if isinstance(d, str) and not d.startswith("*")
                      else ", ".join(map(str, getattr(obj, d[1:], None) or ("?",))) if isinstance(d, str) else str(d))
                     for d in self.shape]
            text += f" of shape [{', '.join(names)}]" + (f" = [{', '.join(sizes)}]" if sizes != names else "")
        elif self.ndim is not None:
            text += f" with {self.ndim} dims"
        if self.device == "self":
            text += f" on {obj.device}"
        return text + (f" ({self.text})" if self.text else "")

    def check(self, field: str, value: Any, obj: Any, call: dict) -> None:
        torch = _torch()
        if value is None:
            if self.optional:
                return
            self.fail(field, self.need(obj, call), value)
        if not isinstance(value, torch.Tensor):
            self.fail(field, self.need(obj, call), value)
        why = layout_fault(value, obj, self.meta)
        if why is not None:
            raise ArgumentError(f"{field}: must be {why}, got {_got(value)}")
        if self.dtype is not None:
            dt = value.dtype
            kind = ("bool" if dt == torch.bool else "float" if dt.is_floating_point
                    else "complex" if dt.is_complex else "int")
            if kind not in self.dtype and not (kind in ("int", "float") and "number" in self.dtype):
                self.fail(field, self.need(obj, call), value)
        if self.shape == "same":  # every "same" tensor of the call has the first one's shape (nothing broadcasts)
            first = call.setdefault("shape", (field, tuple(value.shape)))
            if first[1] != tuple(value.shape):
                raise ArgumentError(f"{field}: must have the shape of {_arg(first[0])} ({list(first[1])}: one entry per "
                                    f"sample, nothing broadcasts), got {_got(value)}")
        elif self.shape == "broadcast":  # every "broadcast" tensor of the call broadcasts with the ones before it
            first = call.get("broadcast")
            if first is None:
                call["broadcast"] = (field, tuple(value.shape))
            else:
                try:
                    call["broadcast"] = (first[0], tuple(torch.broadcast_shapes(first[1], tuple(value.shape))))
                except RuntimeError:
                    raise ArgumentError(f"{field}: must have a shape that broadcasts with {_arg(first[0])}'s "
                                        f"({list(first[1])} so far), got {_got(value)}") from None
        elif self.shape is not None:
            why = self._shape_fault(field, tuple(value.shape), obj, call)
            if why is not None:
                self.fail(field, self.need(obj, call) + why, value)
        if self.ndim is not None and value.dim() not in ((self.ndim,) if isinstance(self.ndim, int) else self.ndim):
            self.fail(field, self.need(obj, call), value)
        if self.device == "self" and not _same_device(value.device, obj.device):
            self.fail(field, self.need(obj, call), value)
        if self.device == "same":
            first = call.setdefault("device", (field, value.device))
            if not _same_device(value.device, first[1]):
                raise ArgumentError(f"{field}: must be on the device of {_arg(first[0])} ({first[1]}), got {_got(value)}")
        if self.finite and value.is_floating_point() and value.numel() and not bool(torch.isfinite(value).all()):
            raise ArgumentError(f"{field}: must hold finite values, got NaN or inf in {_got(value)}")
        if self.values is not None and value.numel():
            lo, hi = self.values
            hi = _size(obj, hi)
            if self.once and _values_known(value, lo, hi):  # vouched for or checked before, unchanged since
                return
            outside = (value < lo) | (value >= hi) if hi is not None else value < lo
            if bool(outside.any()):
                bad = value.reshape(-1)[outside.reshape(-1).long().argmax()]
                raise ArgumentError(f"{field}: every entry must {f'be >= {lo}' if hi is None else f'lie in {lo}..{hi - 1}'}"
                                    f"{f' ({self.text})' if self.text else ''}, got {bad.item()} in {_got(value)}")
            if self.once:
                vouch_values(value, lo, hi)

    def _shape_fault(self, field: str, shape: tuple, obj: Any, call: dict) -> Optional[str]:
        """None when `shape` fits; else what to add to the requirement ("" or which argument set a
        shared dim)."""
        dims = self._dims(obj)
        if dims is None:
            return None
        if dims and dims[0] is Ellipsis:
            dims = dims[1:]
            if len(shape) < len(dims):
                return ""
            shape = shape[len(shape) - len(dims):]
        if len(shape) != len(dims):
            return ""
        for got, want in zip(shape, dims):
            if want is None:
                continue
            if isinstance(want, str):
                if want.isupper():
                    size, where = call.setdefault(want, (got, field))
                    if size != got:
                        return f" with {want} = {size} as in {_arg(where)} (the call's tensors agree)"
                    continue
                want = _size(obj, want)
            if got != want:
                return ""
        return None


def vouch(tensor: Any, claim: Any) -> Any:
    """Stamp `tensor` with `claim` (what the package knows of its values, e.g. their range) and its
    current version: `vouched(tensor)` returns the claim until the tensor is changed in place. Returns
    the tensor."""
    tensor._parl_vouched = (claim, None if tensor.is_inference() else tensor._version)  # an inference tensor keeps no count
    return tensor


def vouched(tensor: Any) -> Any:
    """The claim `vouch` stamped on `tensor`, or None (none, or the tensor changed since)."""
    known = getattr(tensor, "_parl_vouched", None)
    if known is None or known[1] != (None if tensor.is_inference() else tensor._version):
        return None
    return known[0]


def vouch_values(tensor: Any, lo: int, hi: Optional[int]) -> Any:
    """Record that `tensor`'s values lie in `lo`..`hi - 1` (an index tensor the package built from checked
    ints, a round's shard; or one a `once` check read): a later `TensorArg(values=..., once=True)` check of
    it is O(1) until it is changed in place. Returns the tensor."""
    return vouch(tensor, ("values", lo, hi))


def _values_known(tensor: Any, lo: int, hi: Optional[int]) -> bool:
    known = vouched(tensor)
    return (isinstance(known, tuple) and len(known) == 3 and known[0] == "values" and known[1] >= lo
            and (hi is None or (known[2] is not None and known[2] <= hi)))


def _arg(field: str) -> str:
    """The argument a field names (`ppo_loss(new_logprob)` -> `new_logprob`)."""
    return field.rpartition("(")[2].rstrip(")")


def _same_device(a: Any, b: Any) -> bool:
    if a == b:
        return True
    torch = _torch()
    a, b = torch.device(a), torch.device(b)
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


class IndexArg(Arg):
    """An int (not a bool, not a float) in `lo`..`hi - 1`; `hi` an int, an attribute of the object
    (a sequence's length) or a function of it; None: no upper bound."""

    def __init__(self, hi: Any = None, lo: int = 0, optional: bool = False, text: str = "") -> None:
        self.hi, self.lo, self.optional, self.text = hi, lo, optional, text

    def check(self, field: str, value: Any, obj: Any, call: dict) -> None:
        if value is None and self.optional:
            return
        hi = _size(obj, self.hi)
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_floating_point() \
                and value.dtype != torch.bool:
            value = int(value)
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= self.lo and (
            value < (2**63 if hi is None else min(hi, 2**63)))  # beyond 64 bits: no count torch can hold
        if not ok:
            span = f"an integer >= {self.lo}" if hi is None else f"an integer in {self.lo}..{hi - 1}"
            if hi is not None and hi <= self.lo:
                span = f"an integer in {self.lo}..{hi - 1} (there is none: the range is empty)"
            self.fail(field, span + (f" ({self.text})" if self.text else ""), value)


class Is(Arg):
    """An instance of `types` (a class or a tuple of them); `need` says what it must be."""

    def __init__(self, types: Any, need: str, optional: bool = False) -> None:
        self.types, self.need, self.optional = types, need, optional

    def check(self, field: str, value: Any, obj: Any, call: dict) -> None:
        if not (value is None and self.optional) and not isinstance(value, self.types):
            self.fail(field, self.need, value)
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(value, torch.Tensor):
            why = layout_fault(value, obj)
            if why is not None:
                raise ArgumentError(f"{field}: must be {why}, got {_got(value)}")


class MappingArg(Arg):
    """A mapping with the declared `required` keys, each value passing its check: `required` maps a
    key to (accepts(value) -> bool, what the value must be); `example` is a valid mapping, quoted in
    the line. A missing key is named with the keys given; a wrong value with the key."""

    def __init__(self, required: dict, example: str, optional: bool = False) -> None:
        self.required, self.example, self.optional = required, example, optional

    def check(self, field: str, value: Any, obj: Any, call: dict) -> None:
        if value is None and self.optional:
            return
        if not isinstance(value, Mapping):
            self.fail(field, f"a mapping such as {self.example}", value)
        missing = [k for k in self.required if k not in value]
        if missing:
            raise ArgumentError(f"{field}: must have the key{'s' if len(missing) > 1 else ''} "
                                f"{', '.join(map(repr, missing))} (it has {sorted(map(str, value))!r:.80}); every "
                                f"one of {', '.join(map(repr, self.required))} is required, e.g. {self.example}")
        for key, (accepts, need) in self.required.items():
            if not accepts(value[key]):
                raise ArgumentError(f"{field}[{key!r}]: must be {need}, got {_got(value[key])}")


class ItemsArg(Arg):
    """A sequence (list, tuple, range, or a 1-D integer tensor / array read on the host) of `kind` items
    (int: not bool, not float; str): `length` (an int, an attribute of the object, a function of it;
    None: any, at least `min_len`), each int in `lo`..`hi - 1` (`hi` as IndexArg's), or each str in
    `among` (a function of the object giving the allowed names), and with `unique` no item twice. O(len)
    Python: for calls whose own work is per item already (an external world's send, a world's step)."""

    def __init__(self, kind: type = int, length: Any = None, lo: int = 0, hi: Any = None, unique: bool = False,
                 min_len: int = 0, among: Any = None, optional: bool = False, text: str = "") -> None:
        self.kind, self.length, self.lo, self.hi, self.unique = kind, length, lo, hi, unique
        self.min_len, self.among, self.optional, self.text = min_len, among, optional, text

    def need(self, obj: Any) -> str:
        n = None if self.length is None else _size(obj, self.length)
        hi = None if self.hi is None else _size(obj, self.hi)
        what = {int: "ints", str: "strings", dict: "dicts"}.get(self.kind, self.kind.__name__)
        text = f"a list of {n} {what}" if n is not None else f"a list of {what}" + (
            f" (at least {self.min_len})" if self.min_len else "")
        if self.kind is int:
            text += f", each in {self.lo}..{hi - 1}" if hi is not None else f", each >= {self.lo}"
        if self.unique:
            text += ", none twice"
        return text + (f" ({self.text})" if self.text else "")

    def check(self, field: str, value: Any, obj: Any, call: dict) -> None:
        if value is None and self.optional:
            return
        torch = sys.modules.get("torch")
        items = value
        if torch is not None and isinstance(value, torch.Tensor):
            if layout_fault(value, obj) is not None or value.dim() != 1 or value.dtype.is_floating_point \
                    or value.dtype.is_complex or value.dtype == torch.bool:
                self.fail(field, self.need(obj), value)
            items = value.tolist()
        elif type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 1 and value.dtype.kind in "iu":
            items = value.tolist()
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, (list, tuple, range)):
            self.fail(field, self.need(obj), value)
        n = None if self.length is None else _size(obj, self.length)
        if (n is not None and len(items) != n) or len(items) < self.min_len:
            self.fail(field, self.need(obj) + f" (it has {len(items)})", value)
        hi = None if self.hi is None else _size(obj, self.hi)
        allowed = None if self.among is None else self.among(obj)
        for i, item in enumerate(items):
            if self.kind is int:
                numpy_int = type(item).__module__ == "numpy" and hasattr(item, "dtype") and item.dtype.kind in "iu"
                ok = (isinstance(item, int) or numpy_int) and not isinstance(item, bool) and item >= self.lo and (
                    hi is None or item < hi)
            else:
                ok = isinstance(item, self.kind) and (allowed is None or item in allowed)
            if not ok:
                raise ArgumentError(f"{field}[{i}]: must be "
                                    + (f"an int in {self.lo}..{hi - 1}" if self.kind is int and hi is not None
                                       else f"an int >= {self.lo}" if self.kind is int
                                       else f"a {self.kind.__name__}" if allowed is None
                                       else f"one of {_shown(allowed)}")
                                    + f" ({self.need(obj)}), got {_got(item)}")
        if self.unique and len(set(items)) != len(items):
            seen: set = set()
            twice = next(x for x in items if x in seen or seen.add(x))
            self.fail(field, self.need(obj) + f" ({twice!r} is there twice)", value)


def _shown(names: Any) -> str:
    names = list(names)
    return ", ".join(map(repr, names[:4])) + (f", ... ({len(names)} in all)" if len(names) > 4 else "")


class PathArg(Arg):
    """A filesystem path (str or PathLike): `must` "dir" (an existing folder), "file" (an existing file)
    or "new_file" (a file to write: its folder exists and the path is not a folder)."""

    def __init__(self, must: str, optional: bool = False, text: str = "") -> None:
        self.must, self.optional, self.text = must, optional, text

    def check(self, field: str, value: Any, obj: Any, call: dict) -> None:
        import os

        if value is None and self.optional:
            return
        what = {"dir": "an existing folder", "file": "an existing file",
                "new_file": "a file path in an existing folder"}[self.must] + (f" ({self.text})" if self.text else "")
        if not isinstance(value, (str, os.PathLike)) or (isinstance(value, str) and not value):
            self.fail(field, f"{what}: a str or PathLike", value)
        path = os.fspath(value)
        if self.must == "dir" and not os.path.isdir(path):
            raise ArgumentError(f"{field}: must be {what}; {path!r} "
                                f"{'is a file' if os.path.exists(path) else 'does not exist'}")
        if self.must == "file" and not os.path.isfile(path):
            raise ArgumentError(f"{field}: must be {what}; {path!r} "
                                f"{'is a folder' if os.path.isdir(path) else 'does not exist'}")
        if self.must == "new_file":
            folder = os.path.dirname(os.path.abspath(path))
            if os.path.isdir(path) or not os.path.isdir(folder):
                raise ArgumentError(f"{field}: must be {what}; "
                                    + (f"{path!r} is a folder" if os.path.isdir(path) else f"its folder {folder!r} "
                                       "does not exist (create it first)"))


class Serialisable(Arg):
    """A payload that must survive `how`: "json" (one json.dumps line: plain numbers, strings, bools,
    None, lists and dicts with str keys) or "pickle" (sent to another process). `each`: the value is a
    list whose items are checked one by one (named `field[i]`). Reads the whole payload (json.dumps /
    pickle.dumps): for calls that serialise it anyway."""

    def __init__(self, how: str, each: bool = False, optional: bool = True, text: str = "") -> None:
        self.how, self.each, self.optional, self.text = how, each, optional, text

    def check(self, field: str, value: Any, obj: Any, call: dict) -> None:
        items = list(enumerate(value)) if self.each and isinstance(value, (list, tuple)) else [(None, value)]
        for i, item in items:
            where = field if i is None else f"{field}[{i}]"
            problem = _unserialisable(item, self.how)
            if problem is not None:
                need = ("JSON-serialisable (numbers, strings, bools, None, lists, dicts with string keys; "
                        "e.g. tensor.tolist() for a tensor)" if self.how == "json"
                        else "picklable to reach another process (module-level functions and classes, plain "
                        "data; not a lambda, a local function or an open resource)")
                raise ArgumentError(f"{where}: must be {need}{f' ({self.text})' if self.text else ''}; {problem}")


def _unserialisable(value: Any, how: str) -> Optional[str]:
    """What in `value` cannot be serialised `how`, or None."""
    if how == "json":
        import json

        try:
            json.dumps(value, allow_nan=True)
        except (TypeError, ValueError, OverflowError, RecursionError) as err:
            return " ".join(str(err).split())[:160]
        return None
    import pickle

    try:
        pickle.dumps(value)
    except Exception as err:  # noqa: BLE001 - pickling a user's object can raise anything
        return f"{type(err).__name__}: {' '.join(str(err).split())[:160]}"
    return None


class AllOf(Arg):
    """Every one of `specs`, in order (a kind, then what the value holds)."""

    def __init__(self, *specs: Arg) -> None:
        self.specs, self.optional = specs, all(s.optional for s in specs)

    def check(self, field: str, value: Any, obj: Any, call: dict) -> None:
        for spec in self.specs:
            spec.check(field, value, obj, call)


class OneOf(Arg):
    def __init__(self, *choices: Any, optional: bool = False) -> None:
        self.choices, self.optional = choices, optional

    def check(self, field: str, value: Any, obj: Any, call: dict) -> None:
        if value is None and self.optional:
            return
        try:
            ok = value in self.choices and not isinstance(value, bool)
        except TypeError:
            ok = False
        if not ok:
            self.fail(field, "one of " + ", ".join(map(repr, self.choices)), value)


class Annotated(Arg):
    """The check an annotation implies (`_from_annotation`)."""

    def __init__(self, kind: str, annotation: Any, optional: bool) -> None:
        self.kind, self.annotation, self.optional = kind, annotation, optional

    def check(self, field: str, value: Any, obj: Any, call: dict) -> None:
        kind = self.kind
        if value is None and self.optional:
            return
        if kind == "constrained":
            check_value(field, self.annotation, value)
        elif kind == "plain":
            check_plain(field, self.annotation, value)
        elif kind == "mapping":
            if not isinstance(value, Mapping):
                self.fail(field, "a dict", value)
        elif kind == "callable":
            if not callable(value):
                self.fail(field, "a callable", value)
        elif kind == "iterable":
            if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, AbcIterable):
                self.fail(field, "a list", value)
        elif kind == "generator":
            if not isinstance(value, _torch().Generator):
                self.fail(field, "a torch.Generator (e.g. torch.Generator().manual_seed(0))", value)
        elif kind == "tensor_or_callable":
            if not callable(value) and not isinstance(value, _torch().Tensor):
                self.fail(field, "a tensor or a callable", value)
        elif kind == "device":
            try:
                _torch().device(value)
            except (RuntimeError, TypeError, ValueError):
                self.fail(field, "a torch device (cpu, cuda, cuda:N or a torch.device)", value)
        elif kind == "dtype":
            check_dtype(field, value, kinds=None, optional=self.optional)
        if kind == "generator":  # on the object's device (a policy's, a buffer's): torch's own error is raw
            generator_fault(field, value, obj)


_DTYPE_KINDS = {"int": "an integer", "float": "a floating-point"}


def _is_integer_dtype(dtype: Any) -> bool:
    torch = _torch()
    if dtype == torch.bool or dtype.is_floating_point or dtype.is_complex:
        return False
    try:
        torch.iinfo(dtype)  # quantized and other special dtypes have none
    except (TypeError, ValueError, RuntimeError):
        return False
    return True


def _torch_dtype_named(value: Any) -> Any:
    """The torch.dtype a string ('int64', 'torch.float32'), a numpy dtype or a Python type (int, float,
    bool) names, or None."""
    torch = _torch()
    if isinstance(value, str):
        found = getattr(torch, value.strip().removeprefix("torch."), None)
        return found if isinstance(found, torch.dtype) else None
    if value in (int, float, bool):
        return {int: torch.long, float: torch.float32, bool: torch.bool}[value]
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        try:
            if isinstance(value, numpy.dtype) or (isinstance(value, type) and issubclass(value, numpy.generic)):
                return torch.from_numpy(numpy.zeros(0, dtype=value)).dtype
        except (TypeError, ValueError):
            return None
    return None


def check_dtype(field: str, value: Any, kinds: Optional[tuple[str, ...]] = ("int", "float"), example: str = "torch.long",
                optional: bool = False) -> None:
    """A `torch.dtype` argument (`RolloutBuffer(action_dtype)`): one ArgumentError naming `field`
    otherwise. A name of one given as a string (`'int64'`), a numpy dtype or a Python type is told the
    torch.dtype to pass (torch's own factories refuse them with a raw TypeError). `kinds`: the dtype's
    kinds accepted ("int": an integer dtype, not bool; "float"), None for any."""
    torch = _torch()
    if value is None and optional:
        return
    tail = ", or None" if optional else ""
    if not isinstance(value, torch.dtype):
        named = _torch_dtype_named(value)
        given = f"the string {value!r}" if isinstance(value, str) else _got(value)
        fix = f": pass {str(named)}" if named is not None else ""
        raise ArgumentError(f"{field}: must be a torch.dtype (e.g. {example}){tail}, got {given}{fix}")
    if kinds is None:
        return
    ok = ("int" in kinds and _is_integer_dtype(value)) or ("float" in kinds and value.is_floating_point)
    if not ok:
        need = " or ".join(_DTYPE_KINDS[k] for k in kinds)
        raise ArgumentError(f"{field}: must be {need} torch.dtype (e.g. {example}){tail}, got {value}")


def generator_fault(field: str, generator: Any, obj: Any) -> None:
    """A torch.Generator for an object with a `device` (a policy, a buffer, a world) must be on that
    device: torch's samplers refuse another one with a raw RuntimeError (a meta generator: 'META device
    type not an accelerator'). O(1): the generator's and the object's device."""
    torch = sys.modules.get("torch")
    if torch is None or obj is None or not isinstance(generator, torch.Generator):
        return
    try:
        device = getattr(obj, "device", None)  # a user world's property: whatever it raises is its own business
    except Exception:  # noqa: BLE001
        return
    if not isinstance(device, (torch.device, str)):
        return
    try:
        where = generator.device
    except RuntimeError:  # a generator on a device that cannot draw numbers (meta)
        where = None
    try:
        if where is not None and _same_device(where, device):
            return
    except (RuntimeError, TypeError, ValueError):  # the object's device is no device name: not this check's to say
        return
    owner = type(obj).__name__
    shown = "a device that cannot draw random numbers (meta)" if where is None else str(where)
    example = "" if str(device) == "meta" else f" (e.g. torch.Generator(device={str(device)!r}).manual_seed(0))"
    raise ArgumentError(f"{field}: must be a torch.Generator on the {owner}'s device {str(device)}{example}, or None, "
                        f"got a generator on {shown}")


def _from_annotation(annotation: Any) -> Optional[Arg]:
    """The check an annotation implies, or None (Any, a class of the package, a protocol)."""
    if constraint_of(annotation) is not None:
        return Annotated("constrained", annotation, constraint_of(annotation)[1])
    if plain_of(annotation) is not None:
        return Annotated("plain", annotation, plain_of(annotation)[1])
    optional, args = False, (annotation,)
    if typing.get_origin(annotation) in (Union, getattr(__import__("types"), "UnionType", Union)):
        args = tuple(a for a in typing.get_args(annotation) if a is not type(None))
        optional = len(args) < len(typing.get_args(annotation))
    names = {getattr(typing.get_origin(a) or a, "__name__", "") for a in args}
    torch = sys.modules.get("torch")
    if names == {"Tensor"}:
        return TensorArg(optional=optional)
    if names <= {"Tensor", "Callable"} and "Callable" in names:
        return Annotated("tensor_or_callable", annotation, optional)
    if names <= {"dict", "Mapping", "MutableMapping"}:
        return Annotated("mapping", annotation, optional)
    if names == {"Callable"}:
        return Annotated("callable", annotation, optional)
    if names <= {"Iterable", "Sequence", "list", "tuple"}:
        return Annotated("iterable", annotation, optional)
    if names == {"Generator"} and torch is not None and args[0] is torch.Generator:
        return Annotated("generator", annotation, optional)
    if names <= {"str", "device"} and "device" in names:
        return Annotated("device", annotation, optional)
    if names == {"dtype"} and torch is not None and args[0] is torch.dtype:
        return Annotated("dtype", annotation, optional)
    return None


def _resolve(annotation: Any, function: Any) -> Any:
    if not isinstance(annotation, str):
        return annotation
    namespace = dict(vars(typing))
    namespace.update(getattr(sys.modules.get(function.__module__), "__dict__", {}))
    try:
        return eval(annotation, namespace)  # noqa: S307 - the module's own annotation text
    except Exception:  # a name only imported for type checkers: nothing to check
        return None


class _Plan:
    """One function's checks: (position, name, spec) per checked parameter."""

    def __init__(self, function: Any, specs: dict[str, Arg]) -> None:
        params = list(inspect.signature(function).parameters.values())
        self.checks: list[tuple[int, str, Arg]] = []
        self.unchecked: list[str] = []
        self.var_keyword: Optional[tuple[str, Arg]] = None  # a spec for **kwargs: each extra keyword's value
        self.named = frozenset(p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
        unknown = set(specs) - {p.name for p in params}
        if unknown:
            raise TypeError(f"checked({function.__qualname__}): no parameter {sorted(unknown)}")
        for i, p in enumerate(params):
            if p.kind == p.VAR_KEYWORD and isinstance(specs.get(p.name), Arg):
                self.var_keyword = (p.name, specs[p.name])
                continue
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or (i == 0 and p.name in ("self", "cls")):
                continue
            spec = specs.get(p.name)
            if spec is not None and not isinstance(spec, Arg):  # an annotation: the check it implies
                spec = _from_annotation(spec)
                if spec is not None and p.default is None:
                    spec.optional = True
            if spec is None and p.annotation is not p.empty:
                spec = _from_annotation(_resolve(p.annotation, function))
                if spec is not None and p.default is None:
                    spec.optional = True
            if spec is None:
                self.unchecked.append(p.name)
                continue
            position = i if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) else -1
            self.checks.append((position, p.name, spec))
        self.specs = {name: spec for _, name, spec in self.checks}
        if self.var_keyword is not None:
            self.specs[self.var_keyword[0]] = self.var_keyword[1]


def _wrap(function: Any, method: str, specs: dict[str, Arg], owner: Optional[str], bound: bool) -> Any:
    plan: list[Optional[_Plan]] = [None]

    def checks(args: tuple, kwargs: dict) -> Optional["_Rule"]:
        """The lifecycle (for a method of an object whose class declares one), then the arguments;
        returns the method's rule when the call, once it returned, enters or leaves a state."""
        p = plan[0]
        if p is None:
            p = plan[0] = _Plan(function, specs)
        obj = args[0] if bound and args else None
        rule = None
        if obj is not None and not isinstance(obj, type):
            rule = getattr(type(obj), "_lifecycle_rules", _NO_RULES).get(method)
            if rule is not None and (rule.derived or not rule.marked <= obj._lifecycle_state):
                rule.check(obj, method)
        name = owner or (type(obj).__name__ if bound else "")
        call: dict = {}
        n = len(args)
        for position, arg, spec in p.checks:
            if 0 <= position < n:
                value = args[position]
            elif arg in kwargs:
                value = kwargs[arg]
            else:
                continue
            try:
                spec.check(f"{name}.{method}({arg})" if name else f"{method}({arg})", value, obj, call)
            except ConfigError as err:  # a shared check's (check_value's): the method's kind, in Python's words
                if isinstance(err, ArgumentError):
                    raise
                raise ArgumentError(str(err).replace(", or null", ", or None")) from None
        if p.var_keyword is not None:
            _check_var_keyword(p, name, method, kwargs, obj, call)
        return rule if rule is not None and rule.changes else None

    if inspect.iscoroutinefunction(function):  # still a coroutine function: checked when awaited

        @functools.wraps(function)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            rule = checks(args, kwargs)
            result = await function(*args, **kwargs)
            if rule is not None:
                rule.apply(args[0])
            return result
    else:  # the same as `checks`, inline: the per-step path (SwarmEnv.step) pays no extra call

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            p = plan[0]
            if p is None:
                p = plan[0] = _Plan(function, specs)
            obj = args[0] if bound and args else None
            rule = None
            if obj is not None and not isinstance(obj, type):
                rule = getattr(type(obj), "_lifecycle_rules", _NO_RULES).get(method)
                if rule is not None and (rule.derived or not rule.marked <= obj._lifecycle_state):
                    rule.check(obj, method)
            if p.checks:
                name = owner or (type(obj).__name__ if bound else "")
                call: dict = {}
                n = len(args)
                for position, arg, spec in p.checks:
                    if 0 <= position < n:
                        value = args[position]
                    elif arg in kwargs:
                        value = kwargs[arg]
                    else:
                        continue
                    try:
                        spec.check(f"{name}.{method}({arg})" if name else f"{method}({arg})", value, obj, call)
                    except ConfigError as err:  # a shared check's (check_value's): the method's kind
                        if isinstance(err, ArgumentError):
                            raise
                        raise ArgumentError(str(err).replace(", or null", ", or None")) from None
                if p.var_keyword is not None:
                    _check_var_keyword(p, name, method, kwargs, obj, call)
            elif p.var_keyword is not None:
                _check_var_keyword(p, owner or (type(obj).__name__ if bound else ""), method, kwargs, obj, {})
            result = function(*args, **kwargs)
            if rule is not None and rule.changes:
                rule.apply(obj)
            return result

    wrapper.__checked__ = (function, specs)
    return wrapper


_NO_RULES: dict = {}


def _check_var_keyword(plan: "_Plan", name: str, method: str, kwargs: dict, obj: Any, call: dict) -> None:
    """The `**kwargs` spec on each keyword argument that is not a named parameter (`f(key)`)."""
    spec = plan.var_keyword[1]
    for key, value in kwargs.items():
        if key not in plan.named:
            spec.check(f"{name}.{method}({key})" if name else f"{method}({key})", value, obj, call)


def checked(function: Any = None, *, owner: str = "", **specs: Arg) -> Any:
    """Decorator: `function`'s arguments checked at entry (annotations, and `specs` by name); a
    module function's errors name `function(arg)` (or `owner.function(arg)`)."""
    if function is None:
        return lambda f: checked(f, owner=owner, **specs)
    return _wrap(function, function.__name__, specs, owner, bound=False)


def checked_methods(cls: Any = None, *, skip: tuple[str, ...] = (), lifecycle: Optional["Lifecycle"] = None,
                    **specs: dict[str, Arg]) -> Any:
    """Class decorator: every public method the class defines (not those in `skip`, not
    properties) checked at entry; `specs` maps a method's name to its argument specs. Errors name
    the object's own class (`ProcessPool.wait(timeout)` for a method inherited from `PoolBase`).
    `lifecycle`: the states the methods need (`Lifecycle`); a subclass inherits its base's."""
    if cls is None:
        return lambda c: checked_methods(c, skip=skip, lifecycle=lifecycle, **specs)
    unknown = set(specs) - set(dir(cls))
    if unknown:
        raise TypeError(f"checked_methods({cls.__name__}): no method {sorted(unknown)}")
    members = dict(vars(cls))
    for name in dir(cls):  # a static method inherited from a private base: named after this class
        static = inspect.getattr_static(cls, name)
        if name not in members and isinstance(static, staticmethod) and hasattr(static.__func__, "__checked__"):
            function, base_specs = static.__func__.__checked__
            members[name] = staticmethod(function)
            specs.setdefault(name, base_specs)
    for name, member in members.items():
        if (name.startswith("_") and not (name == "__call__" and name in specs)) or name in skip:
            continue
        if isinstance(member, staticmethod):
            setattr(cls, name, staticmethod(_wrap(member.__func__, name, specs.get(name, {}), cls.__name__, False)))
        elif isinstance(member, classmethod):
            setattr(cls, name, classmethod(_wrap(member.__func__, name, specs.get(name, {}), cls.__name__, True)))
        elif inspect.isfunction(member) and not hasattr(member, "__checked__"):
            setattr(cls, name, _wrap(member, name, specs.get(name, {}), None, True))
    declared = lifecycle if lifecycle is not None else getattr(cls, "__lifecycle__", None)
    if declared is not None:
        declared.install(cls)
    return cls


# ---------------------------------------------------------------------- the lifecycle
class State:
    """A state methods may need (`Lifecycle`). `text` completes the refusal `Class.method: {text}`
    ("called before reset(); call env.reset() first"; `{cls}` is the object's class name). `holds`:
    read off the object (a derived state: a Trainer attached, keys declared); None: kept by the
    mechanism, made to hold by the methods that `enter` it (and `mark`), ended by those that `leave`
    it. `error`: the LifecycleError class raised (a subclass keeps what a method raised before, e.g.
    a ValueError too)."""

    def __init__(self, text: str, holds: Any = None, error: Optional[type] = None) -> None:
        self.text, self.holds, self.error = text, holds, error or LifecycleError


CLOSED = State("called after close(); build a new {cls}")


def _names(states: Any) -> tuple[str, ...]:
    return (states,) if isinstance(states, str) else tuple(states)


class _Rule:
    """One method's lifecycle: the marked states it needs (a frozenset: one comparison per call), the
    derived ones (name, State), the order its requirements are reported in, and what it enters/leaves."""

    def __init__(self, owner: "Lifecycle", need: tuple[str, ...], enters: tuple[str, ...], leaves: tuple[str, ...]):
        self.owner, self.need = owner, need
        self.marked = frozenset(n for n in need if owner.states[n].holds is None)
        self.derived = tuple((n, owner.states[n]) for n in need if owner.states[n].holds is not None)
        self.enters, self.leaves = frozenset(enters), frozenset(leaves)
        self.changes = bool(enters or leaves)

    def check(self, obj: Any, method: str) -> None:
        have = obj._lifecycle_state
        for name in self.need:  # the first requirement that does not hold, in the declared order
            state = self.owner.states[name]
            if not (name in have if state.holds is None else state.holds(obj)):
                raise self.owner.refusal(obj, method, name)

    def apply(self, obj: Any) -> None:
        obj._lifecycle_state = (obj._lifecycle_state - self.leaves) | self.enters


class Lifecycle:
    """What a class's methods need (see the module docstring). `states`: name -> `State`;
    `requires`: method -> the state names it needs, checked in that order; `enters` / `leaves`:
    method -> the states a successful call makes hold / ends; `closes`: the method after which every
    other public method is refused (`closed`: that refusal's `State`, whose `holds` may read the
    object's own flag instead of the mechanism's); `initial`: the marked states a new object has."""

    def __init__(self, states: Optional[Mapping[str, State]] = None, requires: Optional[Mapping[str, Any]] = None,
                 enters: Optional[Mapping[str, Any]] = None, leaves: Optional[Mapping[str, Any]] = None,
                 closes: Optional[str] = None, closed: State = CLOSED, initial: Iterable[str] = ()) -> None:
        self.states = dict(states or {})
        self.requires = {m: _names(v) for m, v in (requires or {}).items()}
        self.enters = {m: _names(v) for m, v in (enters or {}).items()}
        self.leaves = {m: _names(v) for m, v in (leaves or {}).items()}
        self.closes, self.initial = closes, frozenset(initial)
        if closes is not None:  # "open": every public method but `closes` needs it
            self.states["open"] = closed
            if closed.holds is None:
                self.initial |= {"open"}
                self.leaves[closes] = (*self.leaves.get(closes, ()), "open")
        unknown = {n for names in (*self.requires.values(), *self.enters.values(), *self.leaves.values())
                   for n in names} - set(self.states)
        if unknown:
            raise TypeError(f"Lifecycle: no State declared for {sorted(unknown)}")

    def refusal(self, obj: Any, method: str, name: str) -> LifecycleError:
        state = self.states[name]
        cls = type(obj).__name__
        return state.error(f"{cls}.{method}: {state.text.format(cls=cls)}")

    def install(self, cls: type) -> None:
        """Compile one rule per public method of `cls` (its own and inherited) onto the class."""
        public = [n for n in dir(cls) if not n.startswith("_") and callable(inspect.getattr_static(cls, n, None))
                  and not isinstance(inspect.getattr_static(cls, n), (staticmethod, classmethod, type))]
        unknown = (set(self.requires) | set(self.enters) | set(self.leaves)) - set(public)
        if unknown:
            raise TypeError(f"Lifecycle({cls.__name__}): no public method {sorted(unknown)}")
        rules = {}
        for name in public:
            need = self.requires.get(name, ())
            if self.closes is not None and name != self.closes:
                need = ("open", *need)
            if need or name in self.enters or name in self.leaves:
                rules[name] = _Rule(self, need, self.enters.get(name, ()), self.leaves.get(name, ()))
        cls.__lifecycle__ = self
        cls._lifecycle_rules = rules
        cls._lifecycle_state = self.initial

    def needs(self, method: str) -> tuple[str, ...]:
        """The states `method` needs ("open" first for a closable class's methods but `closes`)."""
        return (("open",) if self.closes is not None and method != self.closes else ()) + self.requires.get(method, ())


def one_at_a_time(name: str, what: str, fix: str) -> Any:
    """Decorator: a function that must not run twice at once in this process (`what` it holds is per
    process: signal handlers, output folders): a call while it runs (re-entered from a callback, or from
    another thread) is one LifecycleError `"{name}: called while {what} is running in this process ...;
    {fix}"`, raised at once (no wait, no hang); the running call goes on."""

    def decorate(function: Any) -> Any:
        running = threading.Lock()

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not running.acquire(blocking=False):
                raise LifecycleError(f"{name}: called while {what} is running in this process (from one of its "
                                     f"callbacks, or another thread); {fix}")
            try:
                return function(*args, **kwargs)
            finally:
                running.release()

        return wrapper

    return decorate


def lifecycle_of(cls: type) -> Optional[Lifecycle]:
    """The lifecycle a class declares (or inherits), or None."""
    return getattr(cls, "__lifecycle__", None)


def holds(obj: Any, name: str) -> bool:
    """Whether state `name` of `obj`'s lifecycle holds."""
    state = obj.__lifecycle__.states[name]
    return name in obj._lifecycle_state if state.holds is None else bool(state.holds(obj))


def mark(obj: Any, name: str, on: bool = True) -> None:
    """Make a kept state hold (or end) from inside a method, where it depends on an argument (a loaded
    state saved before any reset)."""
    obj._lifecycle_state = obj._lifecycle_state | {name} if on else obj._lifecycle_state - {name}


def require(obj: Any, method: str, *names: str) -> None:
    """Refuse `Class.method` unless each state holds, where the need depends on an argument (bank
    indices rather than task ids; a state that holds the worlds'), with the refusal the lifecycle
    declares for the state."""
    for name in names:
        if not holds(obj, name):
            raise obj.__lifecycle__.refusal(obj, method, name)


def specs_of(function: Any) -> Optional[tuple[dict[str, Arg], list[str]]]:
    """({argument: its check}, [unchecked arguments]) of a checked function or method, or None when it
    is not checked (the enumerated tests read it)."""
    function = getattr(function, "__func__", function)
    found = getattr(function, "__checked__", None)
    if found is None:
        return None
    plan = _Plan(*found)
    return plan.specs, plan.unchecked


def _state_text(value: Any) -> str:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)} and dtype {str(value.dtype).removeprefix('torch.')}"
    return f"{type(value).__name__} {value!r:.40}"


def check_state(owner: str, state: Any, own: Mapping, *, optional: Iterable[str] = (), free_shape: Iterable[str] = (),
                skip: Iterable[str] = (), hint: str = "", _path: str = "state") -> None:
    """The one check of a world's or sampler's `load_state_dict(state)` before anything is loaded:
    `state` is a mapping with `own`'s keys (`own` is this object's `state_dict()`; keys in `optional`
    may be absent on either side), and each tensor in `own` has its counterpart as a tensor of the same
    dtype and shape (`free_shape`: keys whose length follows a bank or a binding; `skip`: keys a nested
    object checks itself). Nested mappings are checked the same way. A mismatch is one ConfigError
    `"{owner}.load_state_dict(state): ..."` naming the missing / unexpected keys or the key and both
    shapes, with `hint` (e.g. "; load it into a SwarmEnv built with the num_envs it was saved from")."""
    from parlightning.errors import ConfigError

    torch = _torch()
    where = f"{owner}.load_state_dict(state)"
    if not isinstance(state, Mapping):
        raise ArgumentError(f"{where}: {_path} must be a mapping (a {owner}'s state_dict()), got {_got(state)}")
    optional, free_shape, skip = set(optional), set(free_shape), set(skip)
    missing = [k for k in own if k not in state and k not in optional]
    unexpected = [k for k in state if k not in own and k not in optional]
    if missing or unexpected:
        parts = ([f"missing keys {missing}"] if missing else []) + ([f"unexpected keys {unexpected}"] if unexpected else [])
        raise ConfigError(f"{where}: {_path} has {' and '.join(parts)}; pass what {owner}.state_dict() returns (its keys: "
                          f"{list(own)}){hint}")
    for key, mine in own.items():
        if key not in state or key in skip or mine is None:
            continue
        value, at = state[key], f"{_path}[{key!r}]"
        if isinstance(mine, torch.Tensor):
            if not isinstance(value, torch.Tensor) or value.dtype != mine.dtype or (
                    key not in free_shape and value.shape != mine.shape):
                raise ConfigError(f"{where}: {at} is {_state_text(value)}, this {owner}'s is {_state_text(mine)}"
                                  f"{hint or f'; pass what {owner}.state_dict() returns on one built like this one'}")
        elif isinstance(mine, Mapping) and isinstance(value, Mapping) and key not in free_shape:
            check_state(owner, value, mine, hint=hint, _path=at)


def _meta_tensor_at(value: Any, path: str, depth: int = 0) -> Optional[str]:
    torch = _torch()
    if isinstance(value, torch.Tensor):
        return path if value.is_meta else None
    if depth > 16:
        return None
    if isinstance(value, Mapping):
        items: Iterable = ((f"{path}[{k!r}]", v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for at, v in items:
        found = _meta_tensor_at(v, at, depth + 1)
        if found is not None:
            return found
    return None


def check_real_tensors(field: str, owner: str, state: Any) -> None:
    """A user component's `state_dict()` (a world's, a sampler's) holds only tensors with data: one on
    the meta device (no storage) is one ConfigError naming `field` (`data.env`), the component and the
    key (`MyWorld.state_dict()['t']`) instead of torch's "Cannot copy out of meta tensor" at the save.
    A walk over the state's containers, once per save (metadata only)."""
    from parlightning.errors import ConfigError

    found = _meta_tensor_at(state, f"{owner}.state_dict()")
    if found is not None:
        raise ConfigError(f"{field}: {found} is a tensor on the meta device (it holds no data), which a checkpoint "
                          "cannot save; return real tensors on the component's device (e.g. self.t.clone())")


def check_real_device(where: str, tensor: Any, device: Any = None) -> None:
    """A tensor a user component hands back (a mask, a pick) is on a real device, and on `device` where
    given (the world's): metadata only, no host sync. ValueError `"{where}: returned a tensor on meta ..."`."""
    torch = _torch()
    if not isinstance(tensor, torch.Tensor):
        return
    if tensor.is_meta:
        raise ValueError(f"{where}: returned a tensor on the meta device (it holds no data); return it on the "
                         f"world's device{f' ({device})' if device is not None else ''}")
    if device is not None:
        device = torch.device(device)
        if tensor.device.type != device.type or (device.index is not None and tensor.device.index not in (None, device.index)):
            raise ValueError(f"{where}: returned a tensor on {tensor.device}, not on the world's device {device}; "
                             "return it on self.device")
