"""The folders a fit writes, by the config field that names them: checked before anything is built
(a remote URL whose filesystem package is missing), before anything is written (two loggers in one
folder), and named when a write fails (the disk that filled).

- `remote_path_error(config)`: a path field (`trainer.default_root_dir`, a logger's `save_dir`, a
  callback's `dirpath`, ...) given as a URL (`s3://bucket/runs`) whose fsspec filesystem is not
  installed, or whose protocol fsspec does not know: one line naming the field and the package to
  install (Lightning would fail building the Trainer with a bare ImportError naming no field).
- `check_logger_folders(trainer)`: loggers of one run that write into the same
  `save_dir/name/version` folder (each would overwrite the other's `metrics.csv` / `hparams.yaml`).
- `run_places(trainer)` and `full_disk_place(err, places)`: which field's folder a failed write (a
  full disk) was in, with the free space there.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any, Iterator, Optional

from parlightning.errors import ConfigError

# config keys that name a folder (Lightning's Trainer, its loggers and callbacks, and wandb's `dir`)
PATH_KEYS = ("default_root_dir", "save_dir", "root_dir", "log_dir", "dirpath", "dir")
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_LOCAL = ("file", "local")
_READ_ONLY = ("http", "https", "github", "git", "zip", "tar", "libarchive", "reference", "data")  # fsspec reads only


def _items(node: Any) -> Optional[list[tuple[str, Any]]]:
    """The (key, value) pairs of a config mapping (a jsonargparse Namespace or a dict), else None."""
    if isinstance(node, dict):
        return list(node.items())
    if type(node).__name__ == "Namespace":
        return list(vars(node).items())
    return None


def path_fields(node: Any, field: str) -> Iterator[tuple[str, str]]:
    """(field, value) of every string under `node` whose key is one of `PATH_KEYS`; `field` is the
    config key of `node` (a list's entries as `trainer.logger[1]`)."""
    pairs = _items(node)
    if pairs is not None:
        for key, value in pairs:
            if not isinstance(key, str):
                continue
            sub = f"{field}.{key}" if field else key
            if key in PATH_KEYS and isinstance(value, (str, os.PathLike)):
                yield sub, os.fspath(value)
            else:
                yield from path_fields(value, sub)
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from path_fields(value, f"{field}[{i}]")


def _package_of(protocol: str, err: BaseException) -> str:
    """The pip package a protocol's filesystem needs (fsspec's registry: `s3` -> s3fs)."""
    try:
        from fsspec.registry import known_implementations
    except ImportError:
        return "fsspec"
    known = known_implementations.get(protocol, {})
    root = str(known.get("class", "")).partition(".")[0]
    if root and root != "fsspec":
        return root
    missing = getattr(err.__cause__, "name", None) or getattr(err, "name", None)
    return missing or f"the package fsspec's {protocol!r} filesystem needs ({known.get('err', err)})"


def url_problem(field: str, value: str) -> Optional[str]:
    """Why the folder `value` of `field` cannot be written, when it is a URL (`s3://...`): its
    filesystem package is not installed, or fsspec knows no such protocol; None for a local path or a
    URL this process can open."""
    match = _URL.match(value)
    if match is None or match.group(1).lower() in _LOCAL:
        return None
    protocol = match.group(1).lower()
    local = f"or use a local folder (e.g. {field}: runs)"
    if protocol in _READ_ONLY:
        return (f"{field}: {value!r} is a {protocol}:// URL, a filesystem fsspec can only read, and the run writes its "
                f"logs and checkpoints there; use a local folder (e.g. {field}: runs) or a writable store (e.g. "
                "s3://bucket/runs with s3fs installed)")
    try:
        import fsspec

        fsspec.get_filesystem_class(protocol)
    except ImportError as err:
        cause = err.__cause__ if err.__cause__ is not None else err
        package = _package_of(protocol, err)
        return (f"{field}: {value!r} is a {protocol}:// URL, whose filesystem needs a package that is not installed "
                f"({' '.join(str(cause).split())[:120]}); pip install {package}, {local}")
    except ValueError:
        return (f"{field}: {value!r} names the filesystem protocol {protocol!r}, which fsspec does not know; use a "
                f"local folder or a URL of a known filesystem (e.g. s3://bucket/runs with s3fs installed)")
    return None


def remote_path_error(config: Any) -> Optional[str]:
    """The first path field of `config`'s `trainer` section (the Trainer's, its loggers' and callbacks')
    whose URL cannot be opened here (`url_problem`), as one line; None when every one can."""
    trainer = dict(_items(config) or []).get("trainer")
    for field, value in path_fields(trainer, "trainer"):
        problem = url_problem(field, value)
        if problem is not None:
            return problem
    return None


def _logger_field(i: int, n: int) -> str:
    return "trainer.logger" if n == 1 else f"trainer.logger[{i}]"


def check_logger_folders(trainer: Any) -> None:
    """Loggers of one run whose log folders (`save_dir/name/version`, plus TensorBoard's `sub_dir`)
    coincide would overwrite each other's files (metrics.csv, hparams.yaml, event files): one
    ConfigError naming both entries and the fix. Only loggers with a set version are compared (the
    folder of one with version None is the next free `version_N`, chosen when it first writes), and the
    folder is read without choosing a version."""
    loggers = list(getattr(trainer, "loggers", None) or [])
    seen: dict[str, tuple[int, Any]] = {}
    for i, logger in enumerate(loggers):
        try:
            version = getattr(logger, "_version", None)
            if version is None or getattr(logger, "root_dir", None) is None:
                continue
            folder = logger.log_dir
        except Exception:  # noqa: BLE001  a user logger's properties: its own checks name it
            continue
        if not isinstance(folder, (str, os.PathLike)) or "://" in os.fspath(folder):
            continue
        key = os.path.normcase(os.path.abspath(os.path.expanduser(os.fspath(folder))))
        if key not in seen:
            seen[key] = (i, logger)
            continue
        j, other = seen[key]
        n = len(loggers)
        first, second = _logger_field(j, n), _logger_field(i, n)
        name = getattr(logger, "name", None)
        raise ConfigError(
            f"trainer.logger: {first} ({type(other).__name__}) and {second} ({type(logger).__name__}) write into one "
            f"folder, {os.fspath(folder)!r} (save_dir {getattr(logger, 'save_dir', None)!r}, name {name!r}, version "
            f"{version!r}): each would overwrite the other's files (metrics.csv, hparams.yaml); give each its own name "
            f"or version (e.g. {second}.init_args.version: {_other_version(version)}), or drop one")


def _other_version(version: Any) -> str:
    return str(version + 1) if isinstance(version, int) and not isinstance(version, bool) else f"{version}_b"


def run_places(trainer: Any) -> list[tuple[str, str]]:
    """(field, folder) of every local folder the run writes: the Trainer's root, each logger's
    save_dir, each ModelCheckpoint's dirpath. Never raises (it serves an error's report)."""
    places: list[tuple[str, str]] = []

    def add(field: str, read: Any) -> None:
        try:
            folder = read()
        except Exception:  # noqa: BLE001  a user logger's property: nothing to name
            return
        if isinstance(folder, (str, os.PathLike)) and "://" not in os.fspath(folder):
            places.append((field, os.fspath(folder)))

    if trainer is None:
        return places
    add("trainer.default_root_dir", lambda: trainer.default_root_dir)
    try:
        loggers = list(trainer.loggers)
    except Exception:  # noqa: BLE001
        loggers = []
    for i, logger in enumerate(loggers):
        add(f"{_logger_field(i, len(loggers))}.init_args.save_dir",
            lambda logger=logger: getattr(logger, "save_dir", None) or getattr(logger, "root_dir", None))
    try:
        checkpoints = list(trainer.checkpoint_callbacks)
    except Exception:  # noqa: BLE001
        checkpoints = []
    for cb in checkpoints:
        add(f"trainer.callbacks {type(cb).__name__}.dirpath", lambda cb=cb: getattr(cb, "dirpath", None))
    return places


def _free(folder: str) -> Optional[int]:
    probe = os.path.abspath(folder)
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return None


def full_disk_place(err: OSError, places: list[tuple[str, str]]) -> Optional[tuple[str, str, Optional[int]]]:
    """(field, folder, free bytes) of the run's folder a failed write was in: the one holding the
    error's file when it names one (the deepest), else the one with the least free space (a write
    whose error names no file: a `close()` that flushed into a full disk)."""
    if not places:
        return None
    filename = getattr(err, "filename", None)
    if filename is not None:
        name = os.path.abspath(os.fsdecode(filename))
        holding = [(len(os.path.abspath(folder)), field, folder) for field, folder in places
                   if name == os.path.abspath(folder) or name.startswith(os.path.abspath(folder).rstrip(os.sep) + os.sep)]
        if not holding:
            return None
        _, field, folder = max(holding)
        return field, folder, _free(folder)
    measured = [(free, i, field, folder) for i, (field, folder) in enumerate(places)
                for free in [_free(folder)] if free is not None]
    if not measured:
        return None
    free, _, field, folder = min(measured)
    return field, folder, free
