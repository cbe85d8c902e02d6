"""Checkpoints that never lose a run: atomic writes, checked reads, every RNG, per-rank state.

- `AtomicCheckpointIO` writes next to the target, fsyncs and renames, so a kill mid-write leaves
  the previous checkpoint in place (Lightning's own save goes through a temp file in /tmp and a
  copy when /tmp is another filesystem). Reads use `torch.load(weights_only=True)`.
- `check_resume` reads a `--ckpt_path` before anything is written and answers a corrupt,
  truncated, foreign or mismatched file with one `ConfigError` naming the path and the fix.
- Every save stores a SHA-256 of every tensor it holds (`CHECKSUM_KEY`); loads verify it and
  refuse non-finite weights, so flipped bytes or NaN weights never train on.
- Stale hidden `.<name>.<pid>.*.partial` files of killed saves are removed by the next save in
  that folder and at start (`clean_stale_partials`); `claim_version` gives concurrent runs in one
  folder distinct `version_N` folders (an atomic `mkdir`).
- `rng_state` / `set_rng_state` (the global generators) live in `parlightning.runtime.rng` and
  `gather_ranks` in `parlightning.runtime.ranks` (neither imports Lightning); imported here too.
"""

from __future__ import annotations

import collections
import errno
import hashlib
import functools
import inspect
import os
import re
import shutil
import tempfile
import zipfile
from typing import Any, Optional

import numpy as np
import torch
from fsspec.implementations.local import LocalFileSystem
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO
from lightning.pytorch.plugins.io import TorchCheckpointIO

from parlightning.errors import ConfigError, ReportedError, check_loaded_checkpoint, error_text
from parlightning.paths import dangling_link, dangling_link_error, not_a_file  # noqa: F401 (their old home)
from parlightning.runtime.waits import expected_wait
from parlightning.runtime.rng import rng_state, set_rng_state  # noqa: F401 (their old home)
from parlightning.runtime.ranks import gather_ranks, to_cpu  # noqa: F401 (their old home)

WRITE_BASE_S = 60.0  # a checkpoint write's declared bound: this much ...
WRITE_BYTES_PER_S = 10e6  # ... plus its tensors' bytes at this rate (a slow network disk)
ARCHITECTURE_HPARAMS = ("hidden_sizes", "activation", "policy", "rnn_hidden")  # a mismatch here cannot load the weights


# ---------------------------------------------------------------------------------- writing
class AtomicCheckpointIO(TorchCheckpointIO):
    """`TorchCheckpointIO` whose local saves are atomic (temp file in the same folder, fsync,
    `os.replace`) and whose loads default to `weights_only=True`.

    Args:
        fsync: flush file and folder to disk before and after the rename (survives a machine
            crash, not only a killed process; ~5-10 ms per save on a VM disk).
    """

    def __init__(self, fsync: bool = True) -> None:
        super().__init__()
        self.fsync = fsync

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Optional[Any] = None) -> None:
        path = str(path)
        if not isinstance(get_filesystem(path), LocalFileSystem) or storage_options is not None:
            return super().save_checkpoint(checkpoint, path, storage_options)
        with expected_wait(write_bound(checkpoint), f"writing the checkpoint {path}"):  # DDP's stall check
            self._save_local(checkpoint, path)

    def _save_local(self, checkpoint: dict[str, Any], path: str) -> None:
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        clean_stale_partials(folder)
        check_savable(checkpoint)  # before the temp file: a refused checkpoint writes nothing
        checkpoint = {**checkpoint, CHECKSUM_KEY: state_checksum(checkpoint)}
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.{os.getpid()}.", suffix=".partial")
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                if self.fsync:
                    os.fsync(f.fileno())
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it private; give it a normal file's mode
            os.replace(tmp, path)  # atomic on POSIX: readers see the old file or the new one
        except BaseException as err:
            if os.path.exists(tmp):
                os.remove(tmp)
            if _is_write_failure(err):
                raise ReportedError(_write_failure(path, folder, err)) from None
            raise
        if self.fsync:
            _fsync_dir(folder)

    def load_checkpoint(self, path: Any, map_location: Any = lambda storage, loc: storage,
                        weights_only: Optional[bool] = None) -> dict[str, Any]:
        checkpoint = super().load_checkpoint(path, map_location, True if weights_only is None else weights_only)
        verify_checkpoint(checkpoint, str(path))
        return checkpoint


def write_bound(checkpoint: dict[str, Any]) -> float:
    """Seconds a checkpoint's write may take before it is a hang: WRITE_BASE_S plus its tensors'
    bytes at WRITE_BYTES_PER_S (a slow network disk), for DDP's stall check."""
    size = sum(t.numel() * t.element_size() for _, t in _tensors(checkpoint, ""))
    return WRITE_BASE_S + size / WRITE_BYTES_PER_S


def _is_write_failure(err: BaseException) -> bool:
    """The disk refused the bytes: ENOSPC/EDQUOT/EIO, or torch's zip writer failing mid-file (it
    reports a full disk as `[enforce fail at inline_container.cc] unexpected pos`)."""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and ("inline_container" in text or "PytorchStreamWriter" in text
                                                or "No space left" in text)


def _write_failure(path: str, folder: str, err: BaseException) -> str:
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        free = -1
    why = "the disk is full" if free >= 0 and free < 64 * 2**20 or getattr(err, "errno", None) == errno.ENOSPC \
        or "No space left" in str(err) else f"the write failed ({' '.join(str(err).split())[:120]})"
    space = f"{_size(free)} free there" if free >= 0 else "free space unknown"
    kept = sorted(n for n in os.listdir(folder) if n.endswith(".ckpt")) if os.path.isdir(folder) else []
    previous = (f"the checkpoints already there are kept ({', '.join(kept[:3])})" if kept
                else "no checkpoint was written there yet")
    return (f"checkpoint: could not save {os.path.basename(path)} in {folder!r}: {why} ({space}); {previous}; free "
            "space or point trainer.default_root_dir (or ModelCheckpoint.dirpath) at a disk with room, then resume "
            "with --ckpt_path")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_PARTIAL = re.compile(r"^\..+?\.(?:(\d+)\.)?[^.]+\.partial$")  # .last.ckpt.<pid>.<random>.partial (pid: since v2)


def clean_stale_partials(folder: str) -> list[str]:
    """Remove the hidden temp files of saves that never finished (their writer was killed) from
    `folder`: those of processes no longer alive, and those without a pid (older writers).
    Returns the removed paths; another live process's save in progress is left alone."""
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        match = _PARTIAL.match(name)
        if match is None or (match.group(1) is not None and _alive(int(match.group(1)))):
            continue
        try:
            os.remove(os.path.join(folder, name))
            removed.append(os.path.join(folder, name))
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # our own leftovers: a save of ours that failed; the current one is not written yet
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


# ---------------------------------------------------------------------------------- integrity
CHECKSUM_KEY = "parlightning_checksum"  # {"sha256": hex over every tensor, "leaves": {path: digest} of every part}
UNCHECKED_ENV = "PARLIGHTNING_UNCHECKED_CHECKPOINTS"  # "1": load a checkpoint without a checksum (another writer's)
_PLAIN = (type(None), bool, int, float, complex, str, bytes)


def state_checksum(checkpoint: dict[str, Any], field: str = "checkpoint") -> dict[str, Any]:
    """SHA-256 over every tensor in `checkpoint` (its key path, dtype, shape and bytes), walking
    containers in order, and a short digest of every part by its key path (`leaves`): each tensor, and
    each plain value (a number, string, None), so a value edited, added or removed after the save is
    found and named, not only flipped tensor bytes. Objects of other types count by their type only
    (their repr may hold a memory address). A tensor whose bytes cannot be read (on the meta device,
    nested, quantized) is one `ConfigError` starting with `field`, naming its key path."""
    digest = hashlib.sha256()
    leaves: dict[str, str] = {}
    for where, value in _leaves(checkpoint, ""):
        if isinstance(value, torch.Tensor):
            head, data = _tensor_bytes(where, value, field)
            digest.update(head)
            digest.update(data)
            leaves[where] = "t" + hashlib.sha256(head + data).hexdigest()[:16]  # "t": a tensor's bytes
        else:
            leaves[where] = hashlib.sha256(_plain_text(value).encode()).hexdigest()[:16]
    return {"sha256": digest.hexdigest(), "leaves": leaves}


def _tensor_bytes(where: str, value: torch.Tensor, field: str) -> tuple[bytes, bytes]:
    """The checksum's header (key path, dtype, shape) and data bytes of one tensor (a sparse one: its
    dense values), or one `ConfigError` naming the tensor when it has no bytes to read."""
    name = where.lstrip("/").replace("/", ".")
    fix = ("a checkpoint's tensors hold data: replace it with a real tensor (a sparse, nested or quantized one as "
           ".to_dense() / .dequantize()), or use a checkpoint python -m parlightning.fit wrote")
    if value.is_meta:
        raise ConfigError(f"{field}: {name} is a tensor on the meta device (a shape without data), which no checksum "
                          f"can cover and no policy can load; {fix}")
    try:
        t = value.detach().to("cpu")
        t = (t if t.layout == torch.strided else t.to_dense()).contiguous()  # a sparse tensor: its values
        data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    except (RuntimeError, NotImplementedError, TypeError) as err:
        raise ConfigError(f"{field}: {name} is a {_kind(value)} tensor of {value.dtype} whose bytes cannot be read "
                          f"({error_text(err).splitlines()[0][:160]}); {fix}") from None
    return f"{where}|{t.dtype}|{tuple(t.shape)}|".encode(), data


def _kind(value: torch.Tensor) -> str:
    """What is odd about a tensor that is not a plain dense one, in a word or two."""
    if value.is_meta:
        return "meta-device (data-less)"
    if value.is_nested:
        return "nested"
    if value.is_quantized:
        return "quantized"
    return str(value.layout).replace("torch.", "")


def stamp_checkpoint(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """`checkpoint` with a fresh checksum over its current contents: for a checkpoint a program edits on
    purpose (a migration, a test), so the check at load time trusts the edit."""
    check_loaded_checkpoint("stamp_checkpoint", checkpoint)
    plain = {k: v for k, v in checkpoint.items() if k != CHECKSUM_KEY}
    return {**plain, CHECKSUM_KEY: state_checksum(plain, "stamp_checkpoint(checkpoint)")}


def _plain_text(value: Any) -> str:
    if isinstance(value, _PLAIN) or isinstance(value, (np.generic, torch.dtype, torch.device)):
        return f"{type(value).__qualname__}:{value!r}"
    if isinstance(value, np.ndarray):
        return f"ndarray:{value.dtype}:{value.shape}:{hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()}"
    if isinstance(value, (set, frozenset)):  # a set's order depends on the process's hash seed
        return f"{type(value).__qualname__}:{sorted(_plain_text(v) for v in value)}"
    return f"object:{type(value).__module__}.{type(value).__qualname__}"


def _leaves(obj: Any, where: str):
    """(key path, leaf) for every tensor and value of `obj`, containers walked in order; the stored
    checksum itself is left out. An empty container is a leaf of its own (removing its items shows)."""
    if isinstance(obj, dict):
        if not obj:
            yield where, type(obj)()
        for key, value in obj.items():
            if not where and key == CHECKSUM_KEY:
                continue
            yield from _leaves(value, f"{where}/{key}")
    elif isinstance(obj, (list, tuple)):
        if not obj:
            yield where, type(obj)()
        for i, value in enumerate(obj):
            yield from _leaves(value, f"{where}/{i}")
    else:
        yield where, obj


def _tensors(obj: Any, where: str):
    for path, value in _leaves(obj, where):
        if isinstance(value, torch.Tensor):
            yield path, value


def _changed_parts(stored: dict[str, str], now: dict[str, str]) -> str:
    """The parts of a checkpoint that differ from those its checksum recorded, first three by path."""
    def name(p: str) -> str:
        return p.lstrip("/").replace("/", ".")

    changed = [f"{name(p)} changed" for p in now if p in stored and stored[p] != now[p]]
    added = [f"{name(p)} was added" for p in now if p not in stored]
    removed = [f"{name(p)} was removed" for p in stored if p not in now]
    found = changed + removed + added
    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    return "; ".join(found[:3]) + more


def verify_checkpoint(checkpoint: dict[str, Any], path: str) -> None:
    """Refuse a checkpoint whose tensors changed since it was saved (a stored checksum that does not
    match) or whose weights are not finite (NaN or inf)."""
    stored = checkpoint.get(CHECKSUM_KEY)
    fix = "resume from an earlier checkpoint (e.g. an epoch=N.ckpt beside it) or start fresh without --ckpt_path"
    if stored is None and os.environ.get(UNCHECKED_ENV) != "1":
        raise ConfigError(f"--ckpt_path: {path!r} has no {CHECKSUM_KEY} (every save of python -m parlightning.fit "
                          "stores one), so its tensors cannot be trusted: it was written by another program or edited; "
                          f"{fix}, or set {UNCHECKED_ENV}=1 to load it unchecked")
    if stored is not None:
        now = state_checksum(checkpoint, f"--ckpt_path: {path!r}")
        if isinstance(stored, dict) and isinstance(stored.get("leaves"), dict) and stored["leaves"] != now["leaves"]:
            parts = _changed_parts(stored["leaves"], now["leaves"])
            if stored["leaves"].keys() == now["leaves"].keys() and all(
                    now["leaves"][p].startswith("t") for p in now["leaves"] if stored["leaves"][p] != now["leaves"][p]):
                raise ConfigError(f"--ckpt_path: {path!r} is corrupt: its tensors do not match the checksum stored when "
                                  f"it was saved (flipped or overwritten bytes: {parts}); {fix}")
            setting = next((p.split("/")[2] for p in sorted(set(stored["leaves"]) | set(now["leaves"]))
                            if p.startswith("/hyper_parameters/") and stored["leaves"].get(p) != now["leaves"].get(p)), None)
            how = (f"; a setting is changed by passing it, not by editing the file: load_from_checkpoint(path, {setting}=...) "
                   f"or --model.{setting} when resuming" if setting else "")
            raise ConfigError(f"--ckpt_path: {path!r} was changed after it was saved: {parts} (the checksum stored "
                              f"with it covers every tensor and value){how}; {fix}")
        if not isinstance(stored, dict) or stored.get("sha256") != now["sha256"]:
            raise ConfigError(f"--ckpt_path: {path!r} is corrupt: its tensors do not match the checksum stored when it "
                              f"was saved (flipped or overwritten bytes); {fix}")
    dense = "the policy's weights and optimizer state are dense tensors"
    for where, v in [*_tensors(checkpoint.get("state_dict") or {}, "state_dict"),
                     *_tensors(checkpoint.get("optimizer_states") or [], "optimizer_states")]:
        if v.layout != torch.strided or v.is_meta or v.is_nested or v.is_quantized:
            raise ConfigError(f"--ckpt_path: {path!r} holds a {_kind(v)} tensor at {where.replace('/', '.')}, which no save "
                              f"of python -m parlightning.fit writes ({dense}): it was edited; {fix}")
    bad = [k for k, v in (checkpoint.get("state_dict") or {}).items()
           if isinstance(v, torch.Tensor) and v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise ConfigError(f"--ckpt_path: {path!r} holds non-finite weights (NaN or inf in {len(bad)} tensors, first "
                          f"{bad[0]}); {fix}")
    moments = [where for where, v in _tensors(checkpoint.get("optimizer_states") or [], "optimizer_states")
               if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if moments:
        raise ConfigError(f"--ckpt_path: {path!r} holds non-finite optimizer state (NaN or inf in {len(moments)} "
                          f"tensors, first {moments[0]}: Adam's moments would turn every weight NaN); {fix}")
    negative = [where for where, v in _tensors(checkpoint.get("optimizer_states") or [], "optimizer_states")
                if where.rpartition("/")[2] in _NON_NEGATIVE_STATE and v.numel() and bool((v < 0).any())]
    if negative:
        what, why = _NON_NEGATIVE_STATE[negative[0].rpartition("/")[2]]
        raise ConfigError(f"--ckpt_path: {path!r} holds a negative {what} ({negative[0]}), which no optimizer step "
                          f"writes ({why}): it was edited or damaged; {fix}")


# Optimizer state that is >= 0 by construction: a count, or a running mean / sum of squares
_NON_NEGATIVE_STATE = {
    "step": ("optimizer step count", "Adam's bias correction divides by 1 - beta**step"),
    "exp_avg_sq": ("second moment", "a running mean of squared gradients, whose square root divides each step"),
    "max_exp_avg_sq": ("second moment", "AMSGrad's running maximum of squared gradients"),
    "square_avg": ("running mean of squared gradients", "RMSprop's"),
    "sum": ("sum of squared gradients", "Adagrad's")}


def use_atomic_checkpoints(trainer: Any, named: bool = False) -> Optional[str]:
    """Keep the package's checkpoint guarantees whatever `trainer.plugins` names: Lightning's plain
    `TorchCheckpointIO` (the default, or named as a plugin) becomes `AtomicCheckpointIO` (the same
    format, written atomically with a checksum); any other CheckpointIO plugin (a user's writer to
    remote storage, Lightning's AsyncCheckpointIO) is kept and wrapped in `CheckedCheckpointIO`, which
    checks each checkpoint before it hands it over and adds the checksum resume verifies. Returns a
    note for a plugin the config `named` (trainer.plugins) that was replaced or wrapped, else None."""
    io = trainer.strategy.checkpoint_io
    if isinstance(io, (AtomicCheckpointIO, CheckedCheckpointIO)):
        return None
    if type(io) is TorchCheckpointIO:
        trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        return ("trainer.plugins: Lightning's TorchCheckpointIO is written through parlightning's AtomicCheckpointIO (the "
                "same torch.save format, written atomically with a checksum that resume verifies)") if named else None
    trainer.strategy.checkpoint_io = CheckedCheckpointIO(io)
    return (f"trainer.plugins: {type(io).__name__} writes the checkpoints; parlightning checks each one before it is "
            "handed over and adds the checksum resume verifies (the write itself is the plugin's: atomic only if it is)")


class CheckedCheckpointIO(CheckpointIO):
    """A user's CheckpointIO plugin, composed: each checkpoint is checked (`check_savable`) and given
    its checksum before the plugin writes it; each one it reads is verified as `AtomicCheckpointIO`'s."""

    def __init__(self, inner: CheckpointIO) -> None:
        self.inner = inner

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Optional[Any] = None) -> None:
        check_savable(checkpoint)
        self.inner.save_checkpoint({**checkpoint, CHECKSUM_KEY: state_checksum(checkpoint)}, path, storage_options)

    def load_checkpoint(self, path: Any, map_location: Optional[Any] = None, **kwargs: Any) -> dict[str, Any]:
        checkpoint = self.inner.load_checkpoint(path, map_location, **kwargs) if map_location is not None else \
            self.inner.load_checkpoint(path, **kwargs)
        verify_checkpoint(checkpoint, str(path))
        return checkpoint

    def remove_checkpoint(self, path: Any) -> None:
        self.inner.remove_checkpoint(path)

    def teardown(self) -> None:
        self.inner.teardown()


_PLAIN = (type(None), bool, int, float, complex, str, bytes, bytearray, torch.dtype, torch.device, torch.Size)
_PLAIN_SET = frozenset(_PLAIN)
_CONTAINERS = (dict, list, tuple, set)
_SAFE_MAPPINGS = (collections.OrderedDict, collections.Counter)  # the safe loader's own


def unsavable(obj: Any, where: str = "checkpoint") -> Optional[str]:
    """Why `obj` (a checkpoint or a part of it, at `where`) cannot round-trip through a checkpoint
    (`torch.save`, then `torch.load(weights_only=True)` on resume), naming the first offending path
    (`checkpoint['saved_at'] is a datetime.datetime`); None when it can. Host-side type checks only,
    no tensor data is read: a tensor on the meta device (no data to write), an object of a class the
    safe loader refuses (anything but tensors, numbers, strings, bytes and plain containers, plus the
    classes added with torch.serialization.add_safe_globals)."""
    stack = [(obj, where)]
    safe: Optional[tuple] = None
    while stack:
        value, at = stack.pop()
        kind = type(value)
        if isinstance(value, torch.Tensor):
            if value.is_meta:
                return f"{at} is a tensor on the meta device (it has no data to save)"
            if kind not in (torch.Tensor, torch.nn.Parameter):
                if safe is None:
                    safe = _safe_globals()
                if kind not in safe:
                    return f"{at} is a {kind.__module__}.{kind.__qualname__} (a tensor subclass the safe loader refuses)"
            continue
        if kind in _PLAIN:
            continue
        if kind in _CONTAINERS or kind in _SAFE_MAPPINGS:
            if not isinstance(value, dict) and set(map(type, value)) <= _PLAIN_SET:
                continue  # a list of numbers (an RNG state): nothing inside to name
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(value, dict) and type(key) not in _PLAIN:
                    return f"{at} has a key of type {type(key).__module__}.{type(key).__qualname__} ({key!r:.40})"
                stack.append((item, f"{at}[{key!r:.40}]" if not isinstance(value, set) else f"{at} (an item)"))
            continue
        if safe is None:
            safe = _safe_globals()
        if kind in safe:
            continue
        return f"{at} is a {kind.__module__}.{kind.__qualname__} ({_shown(value)})"
    return None


def _shown(value: Any) -> str:
    try:
        return f"{value!r:.40}"
    except Exception:  # noqa: BLE001 (a user's object whose repr raises)
        return "its repr raised"


def _safe_globals() -> tuple:
    try:
        return tuple(g if isinstance(g, type) else g[0] for g in torch.serialization.get_safe_globals())
    except Exception:  # noqa: BLE001 (an older torch without the allowlist)
        return ()


def check_savable(checkpoint: Any) -> None:
    """The last check before a checkpoint is written (by any CheckpointIO of the run): one
    `ReportedError` naming the key a resume could not read back, before any byte is written (the
    component that put it there is named earlier, at its hook: `parlightning.cli.component_guard`)."""
    why = unsavable(checkpoint)
    if why is not None:
        raise ReportedError(f"checkpoint: {why}, which a resume (torch.load(weights_only=True)) could not read back; "
                            "keep only tensors, numbers, strings and plain containers in a checkpoint (nothing was "
                            "written)")


# ---------------------------------------------------------------------------------- reading
def check_checkpoint_path(path: Any, field: str, fix: str) -> None:
    """A checkpoint path that can be opened as a file, or one ConfigError naming `field` and why
    (`not_a_file`): the check `read_torch_file` starts with, for a flag checked before loading."""
    why = not_a_file(path)
    if why == "does not exist":
        raise ConfigError(f"{field}: no checkpoint file at {path!r}; {fix}")
    if why is not None:
        raise ConfigError(f"{field}: {path!r} {why}; {fix}")


def read_torch_file(path: Any, field: str, fix: str) -> Any:
    """The one checked `torch.load(path, weights_only=True)` (on the CPU, memory-mapped): a path that
    is missing, a folder, unreadable, truncated, damaged or not a torch file is one ConfigError
    `"{field}: {path!r} ...; {fix}"` naming the flag or field that gave the path."""
    check_checkpoint_path(path, field, fix)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # zip/pickle errors of every kind: corrupt, truncated, not a torch file
        text = str(err)
        damaged = _damaged_entry(path)
        if isinstance(err, OSError):  # the disk or the filesystem, not the file's bytes
            reason = f"reading it failed: {err.strerror or type(err).__name__}"
        elif damaged is not None:
            reason = f"corrupt: its entry {damaged} fails its CRC check (flipped or overwritten bytes)"
        elif "weights_only" in text or "Unsupported global" in text:
            reason = "it holds pickled objects other than tensors and plain containers, which are not loaded"
        elif "mmap can only be used" in text or "zip archive" in text or "central directory" in text:
            reason = "corrupt or truncated: not a complete torch.save zip archive"
        else:
            reason = (text.strip().splitlines() or [type(err).__name__])[0][:160]
        raise ConfigError(f"{field}: {path!r} is not a readable checkpoint ({reason}); {fix}") from None


def load_checkpoint_file(path: str) -> dict[str, Any]:
    """A Lightning training checkpoint (`read_torch_file`, then its structure and checksum), or one
    `ConfigError` naming the path and why."""
    fix = "pass a .ckpt written by `python -m parlightning.fit` (e.g. <log_dir>/checkpoints/last.ckpt) or drop the flag"
    checkpoint = read_torch_file(path, "--ckpt_path", fix)
    if isinstance(checkpoint, dict) and "bc" in checkpoint and "optimizer_states" not in checkpoint:
        raise ConfigError(f"--ckpt_path: {path!r} was written by `python -m parlightning.bc` (policy weights only, "
                          "nothing to resume); start PPO from it with --model.init_from "
                          f"{path} instead of --ckpt_path")
    if not isinstance(checkpoint, dict) or not {"state_dict", "loops", "optimizer_states"} <= checkpoint.keys():
        raise ConfigError(f"--ckpt_path: {path!r} is not a Lightning training checkpoint (no state_dict, loops and "
                          f"optimizer states); {fix}")
    _check_structure(checkpoint, path, fix)
    verify_checkpoint(checkpoint, path)
    return checkpoint


def _check_structure(checkpoint: dict[str, Any], path: str, fix: str) -> None:
    """The non-tensor parts as Lightning writes them, for a checkpoint whose checksum does not cover its
    values (an older version's, tensors only, or one loaded unchecked): a counter or a loop's state of
    another type or a negative count is refused before Lightning trips on it."""
    wrong = None
    for key in ("epoch", "global_step"):
        value = checkpoint.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            wrong = f"its {key} is {value!r:.40}, not a count >= 0"
    if not isinstance(checkpoint["state_dict"], dict):
        wrong = f"its state_dict is a {type(checkpoint['state_dict']).__name__}, not a mapping of tensors"
    elif not isinstance(checkpoint["loops"], dict) or not all(isinstance(v, dict) for v in checkpoint["loops"].values()):
        wrong = "its loops are not a mapping of each loop's state"
    elif not isinstance(checkpoint["optimizer_states"], list) or not all(
            isinstance(v, dict) for v in checkpoint["optimizer_states"]):
        wrong = "its optimizer_states are not a list of optimizer state mappings"
    elif not isinstance(checkpoint.get("callbacks", {}), dict):
        wrong = "its callbacks state is not a mapping"
    if wrong is not None:
        raise ConfigError(f"--ckpt_path: {path!r} is damaged or edited: {wrong}; {fix}")


def _damaged_entry(path: str) -> Optional[str]:
    """The first entry of a torch.save zip whose bytes fail their stored CRC-32, or None."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip()
    except (zipfile.BadZipFile, OSError, ValueError, RuntimeError, EOFError):
        return None
    except Exception:  # noqa: BLE001 (zlib errors on a damaged entry)
        return "(unreadable)"


def check_resume(path: str, module: Any, datamodule: Any, probe: Optional[dict[str, Any]] = None,
                 max_epochs: Optional[int] = None, max_steps: Optional[int] = None) -> dict[str, Any]:
    """Read `path` and check it can resume this module and data module (before anything is
    written); returns the checkpoint. Errors name the config field that differs. `probe` (from
    `RolloutDataModule.preflight`) adds the world and weight-shape checks; `max_epochs` the
    check that epochs are left to train."""
    checkpoint = load_checkpoint_file(path)
    _check_lightning_version(path, checkpoint)
    _check_counters(path, checkpoint)
    if max_epochs is not None and max_epochs >= 0:
        done = _epochs_done(checkpoint)
        if done >= max_epochs:
            raise ConfigError(f"trainer.max_epochs: the run in {path!r} already finished {done} of "
                              f"trainer.max_epochs={max_epochs} epochs, so nothing is left to train; pass "
                              f"--trainer.max_epochs N with N > {done} to extend it")
    steps = checkpoint.get("global_step")
    if max_steps is not None and max_steps >= 0 and isinstance(steps, int) and steps >= max_steps:
        raise ConfigError(f"trainer.max_steps: the run in {path!r} already took {steps} optimizer steps, so "
                          f"trainer.max_steps={max_steps} leaves nothing to train; raise it above {steps} or drop it "
                          "(-1: trainer.max_epochs decides)")
    key = type(datamodule).__qualname__
    if key not in checkpoint:
        raise ConfigError(
            f"--ckpt_path: {path!r} has no {key} state (env, sampler, RNG streams), so the run cannot resume exactly; "
            "resume from a checkpoint of the same kind of run, or start fresh without --ckpt_path"
        )
    if probe is not None:  # another world first: the model settings that differ follow from it
        check_env_signature(path, checkpoint[key].get("env_signature"), probe["env_signature"])
    saved = checkpoint.get("hyper_parameters") or {}
    ours = getattr(module, "hparams", {})
    fits = False  # the checkpoint's tensors have exactly this config's shapes
    if probe is not None:
        try:
            check_weight_shapes(path, checkpoint["state_dict"], module, probe)
            fits = getattr(module, "build_policy", None) is not None
        except ConfigError:
            fits = False
    for name in ARCHITECTURE_HPARAMS:
        if name in saved and name in ours and _plain(saved[name]) != _plain(ours[name]):
            if fits and name in ("hidden_sizes", "rnn_hidden"):  # shapes decide: the stored value was edited
                raise ConfigError(
                    f"--ckpt_path: {path!r} is inconsistent: its hyper_parameters say model.{name}="
                    f"{_plain(saved[name])!r}, but its weights have the shapes of {_plain(ours[name])!r} (this "
                    "config's); its hyper_parameters were edited: restore them or resume from an unedited checkpoint")
            raise ConfigError(
                f"model.{name}: the checkpoint {path!r} was trained with {_plain(saved[name])!r} but this config has "
                f"{_plain(ours[name])!r}; resume with the checkpoint's value"
            )
    check = getattr(datamodule, "check_state", None)
    if callable(check):  # `resuming`: RolloutDataModule's (a subclass's own check_state may not take it)
        takes = "resuming" in inspect.signature(check).parameters
        if takes:
            check(checkpoint[key], resuming=True)
        else:
            check(checkpoint[key])
    if probe is not None:
        policy = check_weight_shapes(path, checkpoint["state_dict"], module, probe)
        if policy is not None and {f"policy.{k}" for k in policy.state_dict()} == set(checkpoint["state_dict"]):
            # the policy built here is the one that was saved (not so for a keyed table, built with the trainer)
            check_optimizer_state(path, checkpoint.get("optimizer_states"), list(policy.parameters()))
    return checkpoint


def _check_lightning_version(path: str, checkpoint: dict[str, Any]) -> None:
    """Lightning migrates a checkpoint by the version it records; one that claims a version before
    2.0 (edited, or from another program) is migrated into loop keys this run lacks (a KeyError
    deep in the fit loop)."""
    version = checkpoint.get("pytorch-lightning_version")
    if version is None:
        return
    import lightning

    major = re.match(r"\s*(\d+)\.", str(version))
    ours = lightning.__version__
    if major is None or int(major.group(1)) < 2 or int(major.group(1)) > int(ours.split(".")[0]):
        raise ConfigError(f"--ckpt_path: {path!r} says it was written by Lightning {str(version)[:40]!r}, but this "
                          f"run uses Lightning {ours} and wrote its checkpoints with it; the version key was edited or "
                          "the file comes from another program: resume from a checkpoint this package wrote")


def _check_counters(path: str, checkpoint: dict[str, Any]) -> None:
    """`epoch` and `global_step` (outside the checksum: plain numbers) must agree with the fit loop's
    own progress, which Lightning restores from: an edited counter otherwise ends the resumed run at
    once with exit 0 (`max_epochs reached`) or trains from a wrong schedule position."""
    loops = checkpoint.get("loops")
    if not isinstance(loops, dict):
        return
    done = _epochs_done(checkpoint)
    epoch = checkpoint.get("epoch")
    try:  # Lightning's global_step: the optimizer steps of automatic plus manual optimisation
        fit = loops["fit_loop"]
        optimizer_steps = int(fit["epoch_loop.automatic_optimization.optim_progress"]["optimizer"]["step"]["total"][
            "completed"]) + int(fit["epoch_loop.manual_optimization.optim_step_progress"]["total"]["completed"])
    except (KeyError, TypeError, ValueError):
        optimizer_steps = None
    steps = checkpoint.get("global_step")
    bad = []
    if not isinstance(epoch, int) or isinstance(epoch, bool) or not (done - 1 <= epoch <= done):
        bad.append(f"epoch {epoch!r} (its fit loop finished {done} iterations)")
    if optimizer_steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps != optimizer_steps):
        bad.append(f"global_step {steps!r} (its fit loop took {optimizer_steps} optimizer steps)")
    if bad:
        raise ConfigError(f"--ckpt_path: {path!r} holds counters that disagree with its own fit loop: "
                          f"{' and '.join(bad)}; the checkpoint was edited: resume from the unedited file (or an "
                          "earlier checkpoint of the run)")
    wrong = next(_wrong_progress(loops, "loops"), None)
    if wrong is not None:
        raise ConfigError(f"--ckpt_path: {path!r} holds loop progress no run writes: {wrong}; the checkpoint was edited "
                          "or damaged: resume from the unedited file (or an earlier checkpoint of the run)")


_STAGES = ("ready", "started", "processed", "completed")  # Lightning's progress trackers count in this order


def _wrong_progress(node: Any, where: str):
    """Each of Lightning's progress counters in `node` (`loops`) that no run writes: a count that is not
    an int >= 0, stages out of order (ready >= started >= processed >= completed), or a `current`
    count above its `total`."""
    if not isinstance(node, dict):
        return
    if "ready" in node and "completed" in node:
        counts = [(k, node[k]) for k in _STAGES if k in node]
        for k, v in counts:
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                yield f"{where}.{k} = {v!r} (a count: an int >= 0)"
                return
        for (a, x), (b, y) in zip(counts, counts[1:]):
            if x < y:
                yield f"{where}.{a} = {x} is below {b} = {y} (each stage counts what the one before it let through)"
                return
        return
    for key, value in node.items():
        yield from _wrong_progress(value, f"{where}.{key}")
    total, current = node.get("total"), node.get("current")
    if isinstance(total, dict) and isinstance(current, dict):
        for k in _STAGES:
            x, y = total.get(k), current.get(k)
            if isinstance(x, int) and isinstance(y, int) and y > x:
                yield f"{where}.current.{k} = {y} is above {where}.total.{k} = {x} (the total counts every run's)"
                return


def _epochs_done(checkpoint: dict[str, Any]) -> int:
    """PPO iterations the checkpointed run completed (Lightning's fit loop counts an epoch whose
    end-of-epoch save this is as processed)."""
    try:
        return int(checkpoint["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"])
    except (KeyError, TypeError):
        return int(checkpoint.get("epoch", -1)) + 1


def check_env_signature(path: str, saved: Optional[dict[str, Any]], ours: dict[str, Any]) -> None:
    """The checkpoint's world (`preflight.env_signature`) must be this config's world."""
    if not saved:
        return  # written before signatures were stored: the weight-shape check still runs
    derived = ("observation_shape", "action_spec", "task_ids")  # follow from the settings: reported after them
    fix = "resume with the checkpoint's env settings or start fresh without --ckpt_path"
    if saved.get("class") != ours.get("class"):
        raise ConfigError(f"data.env.class: the checkpoint {path!r} was collected in a world {saved.get('class')!r} but "
                          f"this config builds {ours.get('class')!r}; {fix}")
    settings = sorted((set(saved) | set(ours)) - {"class", *derived})
    changed = [n for n in settings if saved.get(n) != ours.get(n)]
    consequences = [n for n in derived if saved.get(n) != ours.get(n)]
    if changed:  # the world's init args that differ, every one, with what they change as detail
        named = "; ".join(f"data.env.init_args.{n} is {saved.get(n)!r} in the checkpoint but {ours.get(n)!r} here"
                          for n in changed[:4]) + (f" (and {len(changed) - 4} more)" if len(changed) > 4 else "")
        detail = f" (so {', '.join(consequences)} differ{'s' if len(consequences) == 1 else ''})" if consequences else ""
        raise ConfigError(f"data.env.init_args.{changed[0]}: the checkpoint {path!r} was collected in another world: "
                          f"{named}{detail}; {fix}")
    for name in consequences:  # a world whose settings are not attributes: the derived fact is all there is
        raise ConfigError(
            f"data.env.{name}: the checkpoint {path!r} was collected in a world with {saved.get(name)!r} but "
            f"this config builds {ours.get(name)!r}; {fix}"
        )


def check_weight_shapes(path: str, saved: dict[str, Any], module: Any, probe: dict[str, Any]) -> Optional[Any]:
    """Every weight the policy of this config has must be in the checkpoint with the same shape
    (another env or architecture, or a damaged tensor, fails here, not in a size-mismatch traceback).
    Returns the policy it built to compare (None where it could not build one)."""
    build = getattr(module, "build_policy", None)
    if not callable(build):
        return None
    try:
        policy = build(probe["observation_shape"], probe["action_spec"])
    except ConfigError:
        raise
    except Exception:  # a policy that needs the trainer (e.g. a keyed table): Lightning's strict load decides
        return None
    fix = "resume with the config (env and model) that wrote it, or start fresh without --ckpt_path"
    for name, value in policy.state_dict().items():
        key = f"policy.{name}"
        if key not in saved:
            raise ConfigError(f"--ckpt_path: {path!r} does not fit this config: it has no {key} (another env or "
                              f"architecture?); {fix}")
        if tuple(saved[key].shape) != tuple(value.shape):
            raise ConfigError(f"--ckpt_path: {path!r} does not fit this config: {key} has shape "
                              f"{list(saved[key].shape)} in the checkpoint but {list(value.shape)} here (another env "
                              f"or architecture, or a damaged tensor); {fix}")
    return policy


def check_optimizer_state(path: str, states: Any, params: list) -> None:
    """The saved optimizer state must be one this policy's optimizer can load and step: settings its
    class accepts (betas, eps, weight decay, lr: torch's own checks), one entry per parameter, each
    moment of its parameter's shape and every entry the settings need (AMSGrad's maximum): tried on
    zero-filled copies of the parameters, so an edited state fails here, before anything is written,
    not in a traceback at the first update. A single torch optimizer only (a module's own
    `configure_optimizers` with several, or a class torch does not have, is left to Lightning)."""
    if not isinstance(states, list) or len(states) != 1 or not isinstance(states[0], dict):
        return
    groups = states[0].get("param_groups")
    fix = "it was edited or damaged; resume from an earlier checkpoint (e.g. an epoch=N.ckpt beside it) or start fresh"
    if not isinstance(groups, list) or not groups or not all(isinstance(g, dict) for g in groups):
        raise ConfigError(f"--ckpt_path: {path!r}: optimizer_states[0].param_groups is {groups!r:.60}, not the optimizer's "
                          f"parameter groups (a non-empty list, each a dict of settings and parameter indices); {fix}")
    counts = [len(g.get("params") or ()) for g in groups]
    if sum(counts) != len(params):
        raise ConfigError(f"--ckpt_path: {path!r} holds optimizer state for {sum(counts)} parameters, but this "
                          f"config's policy has {len(params)}; {fix}")
    cls = _optimizer_class(groups[0])
    if cls is None:
        return
    known = set(_optimizer_keys()[cls])
    settings = [{k: v for k, v in g.items() if k in known} for g in groups]
    for i, hp in enumerate(settings):
        for key, value in hp.items():  # one at a time: the line names the setting
            try:
                cls([torch.zeros(1, requires_grad=True)], **{key: value})
            except (ValueError, TypeError, RuntimeError) as err:
                raise ConfigError(f"--ckpt_path: {path!r} holds {cls.__name__} settings torch refuses: optimizer_states"
                                  f"[0].param_groups[{i}].{key} = {value!r} ({' '.join(str(err).split())[:120]}); "
                                  f"{fix}") from None
    copies = iter([torch.zeros(p.shape, dtype=p.dtype, requires_grad=True) for p in params])
    try:
        optimizer = cls([{"params": [next(copies) for _ in range(n)], **hp} for n, hp in zip(counts, settings)])
        optimizer.load_state_dict(states[0])
        for group in optimizer.param_groups:
            for p in group["params"]:
                p.grad = torch.zeros_like(p)
        optimizer.step()
    except Exception as err:  # noqa: BLE001 (whatever the state makes torch raise: named, not a traceback)
        why = (f"an entry its settings need is missing: {err}" if isinstance(err, KeyError)
               else f"{type(err).__name__}: {' '.join(str(err).split())[:160]}")
        raise ConfigError(f"--ckpt_path: {path!r} holds {cls.__name__} optimizer state (optimizer_states[0]) this "
                          f"policy's parameters cannot use ({why}); {fix}") from None


@functools.lru_cache(maxsize=1)
def _optimizer_keys() -> dict[type, tuple[str, ...]]:
    """torch's optimizer classes and the settings each stores in a parameter group."""
    out: dict[type, tuple[str, ...]] = {}
    for name in dir(torch.optim):
        cls = getattr(torch.optim, name)
        if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer) and cls is not torch.optim.Optimizer:
            try:
                out[cls] = tuple(cls([torch.zeros(1, requires_grad=True)]).defaults)
            except Exception:  # noqa: BLE001 (a class that needs more arguments)
                continue
    return out


def _optimizer_class(group: dict[str, Any]) -> Optional[type]:
    """The torch optimizer class whose parameter groups hold exactly `group`'s settings (Adam first)."""
    keys = set(group) - {"params", "initial_lr"}
    found = [cls for cls, names in _optimizer_keys().items() if set(names) == keys]
    return torch.optim.Adam if torch.optim.Adam in found else (found[0] if found else None)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, (list, tuple)) else value


# ---------------------------------------------------------------------------------- output dirs
def check_output_dirs(trainer: Any) -> None:
    """Every folder the run will write (root dir, loggers, checkpoint dirs) must be creatable and
    writable: checked without creating anything, so a bad path fails before any rollout."""
    places = [("trainer.default_root_dir", trainer.default_root_dir)]
    for logger in trainer.loggers:
        try:  # a user logger's properties are its code: one that raises is named, not a traceback
            save_dir, root = getattr(logger, "save_dir", None), getattr(logger, "root_dir", None)
        except Exception as err:  # noqa: BLE001
            text = " ".join(str(err).split())[:200]
            raise ConfigError(f"trainer.logger: reading {type(logger).__name__}'s save_dir / root_dir raised "
                              f"{type(err).__name__}: {text}; fix the logger (Lightning reads them to place the run's "
                              "logs and checkpoints)") from None
        places.append(("trainer.logger.save_dir", save_dir or root))  # save_dir/name (lightning_logs): a file there blocks every version_N
        if root is not None and os.path.exists(str(root)) and not os.path.isdir(str(root)):
            raise ConfigError(f"trainer.logger: {str(root)!r} is a file, but the logger keeps its runs in a folder of "
                              "that name; move the file or set trainer.default_root_dir / trainer.logger.save_dir")
        if root is not None:
            places.append(("trainer.logger", root))
    for cb in trainer.checkpoint_callbacks:
        places.append(("ModelCheckpoint.dirpath", getattr(cb, "dirpath", None)))
    profiler = getattr(trainer, "profiler", None)  # a profiler writes its report into dirpath at the end
    if getattr(profiler, "dirpath", None) is not None:
        places.append((f"trainer.profiler ({type(profiler).__name__}.dirpath)", profiler.dirpath))
    for field, folder in places:
        if folder is None or "://" in str(folder):
            continue
        _check_writable(field, str(folder))


def _check_writable(field: str, folder: str) -> None:
    path = os.path.abspath(folder)
    err = dangling_link_error(field, folder)  # makedirs would fail on it with "File exists"
    if err is not None:
        raise err
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    try:
        name_max = os.pathconf(probe, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    long = [part for part in path.split(os.sep) if len(part.encode()) > name_max]
    if long:
        raise ConfigError(f"{field}: the folder name {long[0][:40]!r}... has {len(long[0].encode())} bytes, more than "
                          f"the {name_max} a file name may have here; choose a shorter path")
    if not os.path.isdir(probe):
        raise ConfigError(f"{field}: cannot create {folder!r}: {probe!r} is a file, not a folder; choose another path")
    if not os.access(probe, os.W_OK | os.X_OK) or _is_virtual(probe):
        raise ConfigError(f"{field}: {folder!r} is not writable (no write permission in {probe!r}); choose a "
                          "writable folder")


def new_output_dirs(trainer: Any) -> list[tuple[str, bool]]:
    """The run's output folders that do not exist yet, deepest first, as (path, is_run_folder):
    the log version folder and checkpoint folder (the run's own), then missing parents. Taken
    before `fit` so `remove_new_outputs` can take back what a failed start wrote."""
    leaves = [trainer.log_dir] + [getattr(cb, "dirpath", None) for cb in trainer.checkpoint_callbacks]
    found: dict[str, bool] = {}
    for place in [*leaves, trainer.default_root_dir]:
        if place is None or "://" in str(place):
            continue
        path, own = os.path.abspath(place), place in leaves
        while not os.path.exists(path):
            found[path] = found.get(path, False) or own
            path, own = os.path.dirname(path), False
    return sorted(found.items(), key=lambda item: -len(item[0]))


def claim_version(trainer: Any) -> list[tuple[str, bool]]:
    """Give the trainer's TensorBoard/CSV logger a `version_N` folder no other run has: the first
    N whose folder this process creates itself (`os.mkdir` is atomic, so two runs started together
    in one folder never share one). Rank 0 only; a logger with a set version is left alone.
    Returns what it created as `new_output_dirs` does (the version folder, then new parents)."""
    logger = trainer.logger
    if trainer.global_rank != 0 or logger is None or getattr(logger, "_version", 0) is not None:
        return []
    root = getattr(logger, "root_dir", None)
    if root is None or "://" in str(root):
        return []
    created, parent = [], os.path.abspath(root)
    while not os.path.exists(parent):
        created.append((parent, False))
        parent = os.path.dirname(parent)
    os.makedirs(root, exist_ok=True)
    taken = [int(m.group(1)) for m in (re.match(r"version_(\d+)$", d) for d in os.listdir(root)) if m]
    version = max(taken, default=-1) + 1
    while True:
        folder = os.path.join(os.path.abspath(root), f"version_{version}")
        try:
            os.mkdir(folder)
        except FileExistsError:
            version += 1
            continue
        logger._version = version
        return [(folder, True), *created]


def remove_new_outputs(dirs: list[tuple[str, bool]]) -> None:
    """Delete what `new_output_dirs` listed: the run's own folders with their files, the parents
    only when empty (another run's files are never touched)."""
    import shutil

    for path, own in dirs:
        try:
            if own and os.path.isfile(path):  # a file the run wrote beside its folders (config.yaml with no logger)
                os.remove(path)
                continue
            shutil.rmtree(path) if own else os.rmdir(path)
        except OSError:
            pass


def _is_virtual(path: str) -> bool:
    """Pseudo filesystems (procfs, sysfs) grant root W_OK yet refuse new files."""
    return any(path == p or path.startswith(p + os.sep) for p in ("/proc", "/sys"))
