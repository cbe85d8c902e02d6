"""Checkpoints that never lose a run: atomic writes, checked reads, every RNG, per-rank state.

- `AtomicCheckpointIO` writes next to the target, fsyncs and renames, so a kill mid-write leaves
  the previous checkpoint in place (Lightning's own save goes through a temp file in /tmp and a
  copy when /tmp is another filesystem). Reads use `torch.load(weights_only=True)`.
- `check_resume` reads a `--ckpt_path` before anything is written and answers a corrupt,
  truncated, foreign or mismatched file with one `ConfigError` naming the path and the fix.
- `rng_state` / `set_rng_state` capture the global torch, CUDA, numpy and Python generators as
  tensors and plain containers; `gather_ranks` collects one state per rank under DDP.
"""

from __future__ import annotations

import os
import random
import tempfile
from typing import Any, Optional

import numpy as np
import torch
from fsspec.implementations.local import LocalFileSystem
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.plugins.io import TorchCheckpointIO

from parlightning.errors import ConfigError

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
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".partial")
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                if self.fsync:
                    os.fsync(f.fileno())
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it private; give it a normal file's mode
            os.replace(tmp, path)  # atomic on POSIX: readers see the old file or the new one
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
        if self.fsync:
            _fsync_dir(folder)

    def load_checkpoint(self, path: Any, map_location: Any = lambda storage, loc: storage,
                        weights_only: Optional[bool] = None) -> dict[str, Any]:
        return super().load_checkpoint(path, map_location, True if weights_only is None else weights_only)


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


def use_atomic_checkpoints(trainer: Any) -> None:
    """Swap the trainer's plain `TorchCheckpointIO` for `AtomicCheckpointIO` (a user's own
    CheckpointIO plugin is left alone)."""
    if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
        trainer.strategy.checkpoint_io = AtomicCheckpointIO()


# ---------------------------------------------------------------------------------- reading
def load_checkpoint_file(path: str) -> dict[str, Any]:
    """`torch.load(path, weights_only=True)` on the CPU, or one `ConfigError` naming the path and why."""
    fix = "pass a .ckpt written by `python -m parlightning.fit` (e.g. <log_dir>/checkpoints/last.ckpt) or drop the flag"
    if not os.path.isfile(path):
        raise ConfigError(f"--ckpt_path: no checkpoint file at {path!r}; {fix}")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # zip/pickle errors of every kind: corrupt, truncated, not a torch file
        text = str(err)
        if "weights_only" in text or "Unsupported global" in text:
            reason = "it holds pickled objects other than tensors and plain containers, which are not loaded"
        elif "mmap can only be used" in text or "zip archive" in text or "central directory" in text:
            reason = "corrupt or truncated: not a complete torch.save zip archive"
        else:
            reason = (text.strip().splitlines() or [type(err).__name__])[0][:160]
        raise ConfigError(f"--ckpt_path: {path!r} is not a readable checkpoint ({reason}); {fix}") from None
    if not isinstance(checkpoint, dict) or not {"state_dict", "loops", "optimizer_states"} <= checkpoint.keys():
        raise ConfigError(f"--ckpt_path: {path!r} is not a Lightning training checkpoint (no state_dict, loops and "
                          f"optimizer states); {fix}")
    return checkpoint


def check_resume(path: str, module: Any, datamodule: Any) -> dict[str, Any]:
    """Read `path` and check it can resume this module and data module (before anything is
    written); returns the checkpoint. Errors name the config field that differs."""
    checkpoint = load_checkpoint_file(path)
    key = type(datamodule).__qualname__
    if key not in checkpoint:
        raise ConfigError(
            f"--ckpt_path: {path!r} has no {key} state (env, sampler, RNG streams), so the run cannot resume exactly; "
            "resume from a checkpoint of the same kind of run, or start fresh without --ckpt_path"
        )
    saved = checkpoint.get("hyper_parameters") or {}
    ours = getattr(module, "hparams", {})
    for name in ARCHITECTURE_HPARAMS:
        if name in saved and name in ours and _plain(saved[name]) != _plain(ours[name]):
            raise ConfigError(
                f"model.{name}: the checkpoint {path!r} was trained with {_plain(saved[name])!r} but this config has "
                f"{_plain(ours[name])!r}; resume with the checkpoint's value"
            )
    check = getattr(datamodule, "check_state", None)
    if callable(check):
        check(checkpoint[key])
    return checkpoint


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, (list, tuple)) else value


# ---------------------------------------------------------------------------------- output dirs
def check_output_dirs(trainer: Any) -> None:
    """Every folder the run will write (root dir, loggers, checkpoint dirs) must be creatable and
    writable: checked without creating anything, so a bad path fails before any rollout."""
    places = [("trainer.default_root_dir", trainer.default_root_dir)]
    for logger in trainer.loggers:
        places.append(("trainer.logger.save_dir", getattr(logger, "save_dir", None) or getattr(logger, "root_dir", None)))
    for cb in trainer.checkpoint_callbacks:
        places.append(("ModelCheckpoint.dirpath", getattr(cb, "dirpath", None)))
    for field, folder in places:
        if folder is None or "://" in str(folder):
            continue
        _check_writable(field, str(folder))


def _check_writable(field: str, folder: str) -> None:
    path = os.path.abspath(folder)
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
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


def remove_new_outputs(dirs: list[tuple[str, bool]]) -> None:
    """Delete what `new_output_dirs` listed: the run's own folders with their files, the parents
    only when empty (another run's files are never touched)."""
    import shutil

    for path, own in dirs:
        try:
            shutil.rmtree(path) if own else os.rmdir(path)
        except OSError:
            pass


def _is_virtual(path: str) -> bool:
    """Pseudo filesystems (procfs, sysfs) grant root W_OK yet refuse new files."""
    return any(path == p or path.startswith(p + os.sep) for p in ("/proc", "/sys"))


# ---------------------------------------------------------------------------------- RNG and ranks
def rng_state() -> dict[str, Any]:
    """The global generators (torch CPU and CUDA, numpy, Python `random`) as tensors and plain
    containers, so they load with `torch.load(weights_only=True)`."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {"kind": str(kind), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "python": {"version": int(version), "internal": list(internal), "gauss_next": gauss_next},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore `rng_state()`."""
    torch.set_rng_state(state["torch"])
    np_state = state["numpy"]
    np.random.set_state((np_state["kind"], np_state["keys"].numpy().astype(np.uint32), np_state["pos"],
                         np_state["has_gauss"], np_state["gauss"]))
    py = state["python"]
    random.setstate((py["version"], tuple(py["internal"]), py["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def to_cpu(obj: Any) -> Any:
    """`obj` with every tensor moved to the CPU (containers rebuilt)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


def gather_ranks(state: Any, world_size: int) -> list[Any]:
    """One `state` per rank, in rank order (a collective under DDP: every rank must call it,
    as they all do when Lightning dumps a checkpoint)."""
    state = to_cpu(state)
    if world_size <= 1 or not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return [state]
    out: list[Any] = [None] * world_size
    torch.distributed.all_gather_object(out, state)
    return out
