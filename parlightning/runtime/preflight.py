"""Preflight: every check that can refuse a run before anything is written or allocated.

Argument and YAML checks (`check_arguments`), parsed-config cross-checks (`check_config`), the
user env's contract on one reset and one step of a small probe (`check_env`), and a memory
estimate of the rollout against the machine (`check_memory`). Each failure is one `ConfigError`
naming the field and the fix.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import math
import numbers
import os
import re
import sys
import time
import unicodedata
import warnings
from typing import Any, Callable, Optional, Sequence

import torch
import yaml
from torch import Tensor

from parlightning.config_types import available_memory, size_text
from parlightning.runtime.checkpoint import dangling_link_error, not_a_file
from parlightning.runtime.launch_env import distributed_environment_error
from parlightning.runtime.torch_state import global_state, state_change
from parlightning.errors import (
    ConfigError, ReportedError, WorldCloseWarning, check_call_shape, error_text, named_by_package,
    package_environment_error,
)
from parlightning.envs import contract
from parlightning.envs.contract import same_device
from parlightning.envs.base import env_signature, world_label  # noqa: F401 (env_signature: its old home)
from parlightning.method_args import check_real_tensors

SEED_RANGE = (0, 2**32 - 1)  # numpy's (and Lightning's seed_everything's) seed range
PROBE_ACTORS = 2  # actors of the env built to check its contract and measure its shapes

REMOVED_OPTIONS = {  # LightningCLI options this CLI does not offer, and why
    "optimizer": "PPOModule builds its own Adam (model.lr, model.adam_eps) and anneals lr itself (model.anneal_lr)",
    "lr_scheduler": "PPOModule anneals lr linearly to 0 over trainer.max_epochs itself (model.anneal_lr)",
}
_SCIENTIFIC_NEGATIVE = re.compile(r"^-(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")  # argparse reads these as options


# ---------------------------------------------------------------------------------- arguments
def check_arguments(args: Sequence[str]) -> None:
    """Raw command-line checks jsonargparse gets wrong or words badly: a negative number in
    scientific notation after a flag, the removed --optimizer / --lr_scheduler, and --config files."""
    args = list(args)
    for i, arg in enumerate(args):
        flag = arg.split("=", 1)[0]
        name = flag[2:].split(".", 1)[0] if flag.startswith("--") else ""
        if name in REMOVED_OPTIONS:
            raise ConfigError(_removed(f"--{name}"))
        nxt = args[i + 1] if i + 1 < len(args) else ""
        if arg.startswith("--") and "=" not in arg and _SCIENTIFIC_NEGATIVE.match(nxt):
            raise ConfigError(f"{arg}: the value {nxt} reads as an option, not a number; write {arg}={nxt}")
        if arg == "--config" and nxt:
            check_config_file(nxt)
        elif arg.startswith("--config="):
            check_config_file(arg.split("=", 1)[1])


def _removed(option: str) -> str:
    why = REMOVED_OPTIONS[option.lstrip("-")]
    return (f"{option}: not supported: {why}; drop {option} (to use another optimizer or schedule, subclass "
            "PPOModule and override configure_optimizers)")


class _StrictLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses a key given twice in one mapping (PyYAML keeps the last), a
    key holding an invisible character, and names the line of a value its tag cannot read."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except ConfigError:
            raise
        except (ValueError, TypeError, OverflowError) as err:  # `!!int 3e-4`, `!!float abc`: the tag's reader
            tag = node.tag.rsplit(":", 1)[-1]
            raise ConfigError(f"line {node.start_mark.line + 1}: {node.value!r:.40} cannot be read as !!{tag} "
                              f"({' '.join(str(err).split())[:120]}); drop the tag or write a value of its type "
                              "(e.g. lr: 3.0e-4)") from None


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _strict_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    """The mapping after the key checks (`_check_keys`); a YAML merge key (`<<: *base` or `<<: {...}`)
    is merged as SafeLoader merges it (the mapping's own keys win), so a merged typo is named by the
    config's validation like any other key."""
    _check_keys(loader, node)
    return loader.construct_mapping(node, deep=deep)


def _check_keys(loader: _StrictLoader, node: yaml.MappingNode, merging: tuple = ()) -> None:
    seen: dict[Any, int] = {}
    for key_node, value_node in node.value:
        if key_node.tag == _MERGE_TAG:  # `<<:` merges a mapping or a list of them: check their keys too
            merged = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for sub in merged:
                if sub is node or any(sub is m for m in merging):
                    raise ConfigError(f"line {key_node.start_mark.line + 1}: the merge key << merges a mapping into "
                                      "itself (through its own alias); merge another mapping or drop the <<")
                if isinstance(sub, yaml.MappingNode):
                    _check_keys(loader, sub, merging + (node,))
            continue  # (SafeLoader's flatten_mapping refuses a merge of anything but mappings, with its line)
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            hash(key)
        except TypeError:  # `? [a, b]` / `? {a: 1}`: a complex key no setting is named by
            raise ConfigError(f"line {line}: a mapping key is a {type(key).__name__} ({key!r:.60}); every key is a "
                              "name (e.g. model: or lr:); write the key as plain text") from None
        hidden = next((c for c in key if unicodedata.category(c) in ("Cf", "Cc")), None) if isinstance(key, str) \
            else None
        if hidden is not None:  # a byte-order mark from concatenated files, a zero-width space from a web page
            raise ConfigError(f"line {line}: the key {key!r} holds an invisible character (U+{ord(hidden):04X}, "
                              f"{unicodedata.name(hidden, 'a control character')}); delete it (retype the key)")
        if value_node.tag.rsplit(":", 1)[-1] in ("set", "omap", "pairs") and value_node.tag.startswith("tag:yaml.org"):
            raise ConfigError(f"line {line}: {key}: a YAML !!{value_node.tag.rsplit(':', 1)[-1]} is not a value any "
                              "setting takes (a set has no order; every list setting is a plain list); write a list, "
                              f"e.g. {key}: [a, b]")
        if key in seen:
            raise ConfigError(f"key {key!r} appears twice (lines {seen[key]} and {line}); keep one and merge the two")
        seen[key] = line


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _strict_mapping)


def _no_setting_takes(loader: _StrictLoader, node: yaml.Node) -> Any:
    """`!!set`, `!!omap`, `!!pairs`: YAML collections no setting is typed as (a set has no order: as a
    list, `hidden_sizes: !!set {32, 16}` trained layers in hash order)."""
    kind = node.tag.rsplit(":", 1)[-1]
    raise ConfigError(f"line {node.start_mark.line + 1}: a YAML !!{kind} is not a value any setting takes (a set has no "
                      "order; every list setting is a plain list); write a plain list, e.g. [a, b]")


for _tag in ("set", "omap", "pairs"):
    _StrictLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _no_setting_takes)


def read_yaml_file(path: Any, field: str = "--config", fix: str = "pass a YAML file") -> Any:
    """The one checked YAML reader: the file's document with the strict loader (a key twice is an
    error) and the alias-expansion bound. A path that is missing, a folder, a pipe or unreadable is
    one ConfigError `"{field}: {path!r} ...; {fix}"` (the words of `read_torch_file`); bytes that are
    not UTF-8 or not YAML are `"{field} {path}: ..."` naming the byte or the line."""
    why = not_a_file(path)
    if why is not None:
        raise ConfigError(f"{field}: {path!r} {why}; {fix}")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as err:
        raise ConfigError(f"{field}: {path!r} cannot be read ({err.strerror or type(err).__name__}); {fix}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        raise ConfigError(f"{field} {path}: not UTF-8 text (byte {raw[err.start]:#04x} at line {line}); save the "
                          "file as UTF-8 (a YAML config is text)") from None
    try:
        _check_expansion(path, yaml.compose(text, Loader=_StrictLoader))  # noqa: S506 (a SafeLoader subclass)
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except ConfigError as err:
        raise ConfigError(f"{field} {path}: {err}") from None
    except RecursionError:
        raise ConfigError(f"{field} {path}: nested too deeply to read (thousands of [ or {{ levels); a config is a "
                          "few levels of mappings") from None
    except yaml.YAMLError as err:  # name the file (of several --config) and the line
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(err, "problem", None) or err).split())
        raise ConfigError(f"{field} {path}: not valid YAML{where} ({problem}); {field} needs a YAML file: fix it "
                          "(indent with spaces, close every [ and quote)") from None


def check_config_file(path: str) -> dict:
    """A --config file (`read_yaml_file`) must be one YAML mapping of sections with no duplicated
    key; returns it."""
    config = read_yaml_file(path, "--config", "pass an existing YAML file or a packaged config's name (e.g. --config swarm)")
    if config is None:
        raise ConfigError(f"--config {path}: the file is empty; a config is a YAML mapping of sections "
                          "(trainer:, model:, data:), e.g. configs/swarm.yaml, or drop --config")
    if not isinstance(config, dict):
        raise ConfigError(f"--config {path}: the top level is a {type(config).__name__}, not a mapping; write "
                          "sections as keys (trainer:, model:, data:), e.g. configs/swarm.yaml")
    for name in REMOVED_OPTIONS:
        if name in config:
            raise ConfigError(f"--config {path}: " + _removed(name))
    for section in SECTIONS:
        value = config.get(section, {})
        if not isinstance(value, dict):
            kind = type(value).__name__
            shown = "null" if value is None else f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} ({str(value)[:40]})"
            raise ConfigError(f"--config {path}: {section}: is {shown}, not a mapping of {section} options; write "
                              f"them indented under it (e.g. {SECTIONS[section]}) or drop the {section}: key")
    return config


SECTIONS = {"trainer": "trainer:\\n  max_epochs: 50", "model": "model:\\n  lr: 0.00025",
            "data": "data:\\n  num_envs: 256"}
MAX_YAML_NODES = 200_000  # a config is a few hundred values; anchors/aliases expanding past this are a "YAML bomb"


def _check_expansion(path: str, root: Optional[yaml.Node]) -> None:
    """Refuse YAML whose aliases expand to more than MAX_YAML_NODES values (each alias counted as
    a copy, as every later reader expands it): a few lines can otherwise grow to gigabytes."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        sizes[id(node)] = 1  # a recursive alias counts once
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        if total > MAX_YAML_NODES:
            raise ConfigError(f"its anchors and aliases (&name / *name) expand to more than {MAX_YAML_NODES:,} "
                              "values (a YAML bomb?); write the values out or drop the aliases")
        sizes[id(node)] = total
        return total

    if root is not None:
        size(root)


# ---------------------------------------------------------------------------------- parsed config
def check_config(config: Any) -> None:
    """Cross-field checks on the parsed config, before any class is built or seeded."""
    for field in ("seed_everything", "seed"):  # `seed`: a top-level alias of seed_everything, where one exists
        seed = config.get(field)
        if not isinstance(seed, bool) and isinstance(seed, int):
            _check_seed(field, seed)
    data, model = config.get("data") or {}, config.get("model") or {}
    if isinstance(data.get("seed"), int):
        _check_seed("data.seed", data.get("seed"))
    if data.get("bptt_len") is not None and model.get("policy", "mlp") == "mlp":
        raise ConfigError(f"data.bptt_len: {data.get('bptt_len')} is the chunk length of a recurrent policy, but "
                          "model.policy is mlp (trained on single steps); drop data.bptt_len or set model.policy: gru")
    _check_env_class_path(data.get("env"))
    trainer = config.get("trainer") or {}
    _check_trainer(trainer)
    check_output_links(trainer)
    check_environment(trainer)
    _check_finite(config)
    clip = trainer.get("gradient_clip_val")
    if isinstance(clip, (int, float)) and not isinstance(clip, bool) and not clip >= 0:
        raise ConfigError(f"trainer.gradient_clip_val: must be >= 0 (0 or null: no clipping), got {clip}; PPOModule "
                          "clips by model.max_grad_norm already")
    accelerator = str(trainer.get("accelerator", "auto"))
    if data.get("collect_in") == "process" and accelerator in ("gpu", "cuda", "mps"):
        raise ConfigError(f"data.collect_in: process collects on the CPU, but trainer.accelerator is {accelerator}; "
                          "use data.collect_in: thread with a GPU")


def _get(obj: Any, key: str) -> Any:
    try:
        return obj.get(key) if hasattr(obj, "get") else getattr(obj, key, None)
    except Exception:  # noqa: BLE001 - a config value of another shape: the parser names it
        return None


def check_output_links(trainer: Any) -> None:
    """The output folders as the config names them (`trainer.default_root_dir`, each logger's `save_dir`,
    each callback's `dirpath`): a dangling symbolic link is refused, naming the field, before any class
    is built (Lightning's ModelCheckpoint resolves the link and would write to its missing target)."""
    places = [("trainer.default_root_dir", _get(trainer, "default_root_dir"))]
    loggers = _get(trainer, "logger")
    for logger in loggers if isinstance(loggers, list) else [loggers]:
        args = _get(logger, "init_args")
        places.append(("trainer.logger.save_dir", _get(args, "save_dir") if args is not None else None))
    callbacks = _get(trainer, "callbacks")
    for i, cb in enumerate(callbacks if isinstance(callbacks, list) else []):
        args = _get(cb, "init_args")
        name = str(_get(cb, "class_path") or "").rpartition(".")[2] or f"trainer.callbacks[{i}]"
        places.append((f"{name}.dirpath (trainer.callbacks[{i}])", _get(args, "dirpath") if args is not None else None))
    for field, path in places:
        if isinstance(path, (str, os.PathLike)) and "://" not in str(path) and str(path).strip():
            err = dangling_link_error(field, str(path))
            if err is not None:
                raise err


def _check_env_class_path(env: Any) -> None:
    """`data.env: {class_path: pkg.mod.make_env}` naming a function: the parser would call it with
    None for num_envs, device and seed; a factory is named as the value instead."""
    path = env.get("class_path") if hasattr(env, "get") else None
    if not isinstance(path, str) or "." not in path:
        return
    import importlib

    module, _, name = path.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module), name)
    except Exception:  # the parser names an unimportable path
        return
    if inspect.isfunction(obj):
        raise ConfigError(f"data.env: {path} is a function: name it as the value (data.env: {path}), not as "
                          "class_path (class_path builds a class from init_args), and annotate it "
                          f"`def {name}(num_envs: int, device: str, seed: int) -> BatchedEnv:`")


POSITIVE_INT_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
NON_NEGATIVE_INT_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "PL_GLOBAL_SEED")


def check_environment(trainer: Any, environ: Optional[dict] = None) -> None:
    """Environment variables that torch, OpenMP or Lightning read and misread: thread counts and
    ranks that are not numbers, a MASTER_PORT out of range, and a torchrun's WORLD_SIZE left in the
    environment of a one-process run (that process would take itself for rank RANK of several and
    could skip its logs and checkpoints)."""
    env = os.environ if environ is None else environ
    wrong = distributed_environment_error(env)  # the ranks, sizes and ports (also asked before a program's import)
    if wrong is not None:
        raise ConfigError(wrong)
    for name in POSITIVE_INT_VARIABLES + NON_NEGATIVE_INT_VARIABLES:
        value = env.get(name)
        if value is None:
            continue
        low = 1 if name in POSITIVE_INT_VARIABLES else 0
        if not value.strip().isdigit() or int(value) < low:
            raise ConfigError(f"{name}={value!r} in the environment: must be an integer >= {low}; unset it "
                              f"(`unset {name}`) or give a number")
    wrong = package_environment_error(env)  # PARLIGHTNING_TRACEBACK, PARLIGHTNING_UNCHECKED_CHECKPOINTS
    if wrong is not None:
        raise ConfigError(wrong)
    port = env.get("MASTER_PORT")
    if port is not None and (not port.strip().isdigit() or not 1 <= int(port) <= 65535):
        raise ConfigError(f"MASTER_PORT={port!r} in the environment: must be a port number 1..65535; unset it or give "
                          "a free port (e.g. 29500)")
    world = int(env.get("WORLD_SIZE", "1") or 1)
    devices, nodes = trainer.get("devices"), _int(trainer.get("num_nodes")) or 1
    count = devices if _int(devices) is not None else len(devices) if isinstance(devices, (list, tuple)) else (
        int(devices) if isinstance(devices, str) and devices.strip().isdigit() else None)
    if world > 1 and count is not None and count * nodes == 1:
        raise ConfigError(f"WORLD_SIZE={world} in the environment (left by torchrun or a parent job), but this run "
                          "is one process (trainer.devices 1, trainer.num_nodes 1); unset WORLD_SIZE, RANK and "
                          "LOCAL_RANK, or launch it with matching trainer.devices / num_nodes")
    ranked = [f"{v}={env.get(v)}" for v in ("RANK", "LOCAL_RANK", "NODE_RANK") if int(env.get(v) or 0) > 0]
    if ranked and world <= 1 and count is not None and count * nodes == 1:  # Lightning would take itself for rank > 0
        raise ConfigError(f"{', '.join(ranked)} in the environment (left by torchrun or a parent job), but this run is "
                          "one process (trainer.devices 1, trainer.num_nodes 1): it would run as a rank other than 0, "
                          "which writes no logs; unset " + " and ".join(v.split("=")[0] for v in ranked))


TRAINER_AT_LEAST_ONE = ("log_every_n_steps", "accumulate_grad_batches", "check_val_every_n_epoch",
                        "reload_dataloaders_every_n_epochs")  # Lightning accepts 0 or negative for some and misbehaves


def _check_trainer(trainer: Any) -> None:
    """Trainer values Lightning takes without a word (or fails on with a ZeroDivisionError)."""
    for key in TRAINER_AT_LEAST_ONE:
        value = trainer.get(key)
        low = 0 if key == "reload_dataloaders_every_n_epochs" else 1
        if isinstance(value, int) and not isinstance(value, bool) and value < low:
            raise ConfigError(f"trainer.{key}: must be an integer >= {low}, got {value}")
    max_time = trainer.get("max_time")
    if isinstance(max_time, str):
        parts = max_time.split(":")
        if len(parts) != 4 or not all(p.strip().isdigit() for p in parts):
            raise ConfigError(f"trainer.max_time: {max_time!r} is not a duration; write DD:HH:MM:SS (e.g. "
                              "00:12:00:00 for 12 hours) or a mapping such as {hours: 12}")
    if isinstance(max_time, dict) and max_time:
        import datetime

        try:
            span = datetime.timedelta(**max_time).total_seconds()
        except (TypeError, ValueError, OverflowError) as err:
            raise ConfigError(f"trainer.max_time: {max_time!r} is not a duration ({err}); use keys days, hours, "
                              "minutes, seconds (e.g. {hours: 12}) or write DD:HH:MM:SS") from None
        if span < 0:
            raise ConfigError(f"trainer.max_time: {max_time!r} is a negative duration; give a positive one (e.g. "
                              "{hours: 12}) or drop trainer.max_time")
    if (isinstance(max_time, str) and not any(int(p) for p in max_time.split(":"))) or (
            isinstance(max_time, dict) and max_time and not any(_int(v) for v in max_time.values())):
        raise ConfigError(f"trainer.max_time: {max_time!r} is no time at all: the run would stop before its first "
                          "iteration; give a positive duration (e.g. 00:12:00:00) or drop trainer.max_time")
    _check_precision(trainer.get("precision"))
    overfit = trainer.get("overfit_batches")
    if isinstance(overfit, (int, float)) and not isinstance(overfit, bool) and overfit != 0:
        raise ConfigError(f"trainer.overfit_batches: {overfit} would train every iteration on the first minibatches "
                          "of its rollout only (a supervised-learning debugging aid); PPO trains on each fresh "
                          "rollout: drop trainer.overfit_batches")
    for key in ("min_epochs", "min_steps"):
        value = _int(trainer.get(key))
        if value is not None and value < 0:
            raise ConfigError(f"trainer.{key}: must be >= 0 (or null: no minimum), got {value}")
    _check_trainer_bounds(trainer)


FULL_LOW_OR_HIGH_PRECISION = ("64", "64-true", "16-true", "bf16-true")


def _check_precision(precision: Any) -> None:
    """A `*-true` precision other than 32 casts the policy's weights (float64, float16, bfloat16),
    while every world returns float32 observations: the first policy call would fail on the dtype."""
    text = str(precision) if precision is not None else ""
    if text in FULL_LOW_OR_HIGH_PRECISION or text.startswith("transformer-engine"):
        raise ConfigError(f"trainer.precision: {text} casts the policy's weights away from float32, but worlds return "
                          "float32 observations and the rollout buffer keeps them; use 32-true (the default), or "
                          "16-mixed / bf16-mixed for mixed precision")


def _duration_seconds(value: Any) -> Optional[float]:
    """A duration as seconds: a timedelta, a number, or "H:MM:SS" / "D:HH:MM:SS" text; None otherwise."""
    if hasattr(value, "total_seconds"):
        return float(value.total_seconds())
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value.strip():
        try:
            parts = [float(p) for p in value.strip().split(":")]
        except ValueError:
            return None
        seconds = 0.0
        for part, scale in zip(reversed(parts), (1, 60, 3600, 86400)):
            seconds += part * scale
        return seconds
    return None


def _int(value: Any) -> Optional[int]:
    """`value` as an int when it is one (not a bool)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# Processes per node are named by these (torchrun, SLURM, LSF, MPI, Lightning's own NODE_RANK); without any,
# a trainer.num_nodes > 1 run waits in its first collective for nodes that never come
CLUSTER_VARIABLES = ("NODE_RANK", "GROUP_RANK", "TORCHELASTIC_RUN_ID", "SLURM_NTASKS", "LSB_JOBID",
                     "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "JSM_NAMESPACE_SIZE")


def _strategy_parts(strategy: Any) -> tuple[str, dict]:
    """A trainer.strategy value as (its name or class name, lowercase; its init_args)."""
    if isinstance(strategy, str):
        return strategy.lower(), {}
    get = getattr(strategy, "get", None)
    if callable(get) and get("class_path"):
        args = get("init_args") or {}
        return str(get("class_path")).rsplit(".", 1)[-1].lower(), dict(args.items()) if hasattr(args, "items") else {}
    return type(strategy).__name__.lower(), dict(vars(strategy)) if hasattr(strategy, "__dict__") else {}


def _check_strategy_devices(trainer: Any) -> None:
    """A strategy that cannot run on the devices asked for: one device's strategy given several (Lightning
    trains on one, silently), NCCL without CUDA (a traceback from the first collective)."""
    strategy = trainer.get("strategy")
    if strategy is None:
        return
    name, args = _strategy_parts(strategy)
    devices = trainer.get("devices")
    if isinstance(devices, str) and devices.strip().lstrip("-").isdigit():  # the command line's "2"
        devices = int(devices)
    elif isinstance(devices, str) and "," in devices:  # "0,1": a list of device indices
        devices = [d for d in devices.split(",") if d.strip()]
    count = _int(devices) if not isinstance(devices, (list, tuple)) else len(devices)
    if name in ("single_device", "singledevicestrategy") and count is not None and count > 1:
        raise ConfigError(f"trainer.strategy: single_device runs on one device, but trainer.devices asks for {count}; "
                          "use trainer.strategy: ddp for several devices, or trainer.devices: 1")
    backend = args.get("process_group_backend") or args.get("_process_group_backend")
    if isinstance(backend, str) and backend.lower() == "nccl":
        import torch.distributed as dist

        accelerator = str(trainer.get("accelerator") or "auto").lower()
        if accelerator == "cpu" or not torch.cuda.is_available() or not dist.is_nccl_available():
            raise ConfigError("trainer.strategy.init_args.process_group_backend: nccl needs CUDA GPUs, and this run is "
                              "on the CPU; use gloo (or drop it: Lightning picks gloo on the CPU, nccl on GPUs)")
    if isinstance(backend, str):
        import torch.distributed as dist

        for part in backend.lower().replace(" ", "").split(","):  # "gloo", or "cpu:gloo,cuda:nccl"
            name_ = part.rpartition(":")[2]
            available = getattr(dist, f"is_{name_}_available", None)
            if name_ and (not callable(available) or not available()):
                built = [b for b in ("gloo", "nccl", "mpi", "ucc", "xccl")
                         if callable(getattr(dist, f"is_{b}_available", None)) and getattr(dist, f"is_{b}_available")()]
                raise ConfigError(f"trainer.strategy.init_args.process_group_backend: {name_!r} is not built into this "
                                  f"torch (it has {', '.join(built) or 'none'}); use gloo on the CPU (or drop it: "
                                  "Lightning picks gloo on the CPU, nccl on GPUs)")
    timeout = args.get("timeout", args.get("_timeout"))
    seconds = _duration_seconds(timeout)
    if seconds is not None and not seconds > 0:
        raise ConfigError(f"trainer.strategy.init_args.timeout: must be a positive duration (how long a collective "
                          f"waits for the other ranks, e.g. 0:30:00), got {timeout!r}: with it every rendezvous and "
                          "collective fails at once; drop it (30 minutes) or give a positive one")


def _check_trainer_bounds(trainer: Any) -> None:
    """Trainer values that would train nothing, contradict each other, or wait forever."""
    max_epochs, min_epochs = _int(trainer.get("max_epochs")), _int(trainer.get("min_epochs"))
    if max_epochs is not None and max_epochs != -1 and max_epochs < 1:
        raise ConfigError(f"trainer.max_epochs: must be >= 1 (PPO iterations; -1: no limit), got {max_epochs}")
    if min_epochs is not None and max_epochs is not None and max_epochs != -1 and min_epochs > max_epochs:
        raise ConfigError(f"trainer.min_epochs: {min_epochs} is more than trainer.max_epochs={max_epochs}; the two "
                          "contradict each other: lower min_epochs or raise max_epochs")
    max_steps = _int(trainer.get("max_steps"))
    if max_steps is not None and max_steps != -1 and max_steps < 1:
        raise ConfigError(f"trainer.max_steps: {max_steps} optimizer steps trains nothing; give a positive number "
                          "or -1 (no limit: trainer.max_epochs decides)")
    min_steps = _int(trainer.get("min_steps"))
    if min_steps is not None and max_steps is not None and max_steps != -1 and min_steps > max_steps:
        raise ConfigError(f"trainer.min_steps: {min_steps} is more than trainer.max_steps={max_steps}; the two "
                          "contradict each other (Lightning stops at max_steps): lower min_steps or raise max_steps")
    _check_strategy_devices(trainer)
    limit = trainer.get("limit_train_batches")
    if isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit <= 0:
        raise ConfigError(f"trainer.limit_train_batches: {limit} trains on no minibatch; drop it (PPO trains on every "
                          "minibatch of the rollout) or give a positive value")
    sanity = _int(trainer.get("num_sanity_val_steps"))
    if sanity is not None and sanity < -1:
        raise ConfigError(f"trainer.num_sanity_val_steps: must be >= -1 (-1: all, 0: none), got {sanity}; PPO has "
                          "no validation loop, so drop it")
    interval = trainer.get("val_check_interval")
    if isinstance(interval, (int, float)) and not isinstance(interval, bool) and not interval > 0:
        raise ConfigError(f"trainer.val_check_interval: must be positive, got {interval}; PPO has no validation loop, "
                          "so drop it")
    for entry in trainer.get("callbacks") or []:
        _check_callback_args(entry)
    loggers = trainer.get("logger")
    for entry in loggers if isinstance(loggers, list) else [loggers]:
        _check_callback_args(entry, "trainer.logger")
    nodes = _int(trainer.get("num_nodes"))
    if nodes is not None and nodes < 1:
        raise ConfigError(f"trainer.num_nodes: must be >= 1, got {nodes}")
    if nodes is not None and nodes > 1 and not any(os.environ.get(v) for v in CLUSTER_VARIABLES):
        raise ConfigError(f"trainer.num_nodes: {nodes} nodes, but nothing launched this process as one node of "
                          "several (no torchrun, SLURM or NODE_RANK in the environment), so it would wait for the "
                          "other nodes for good; launch it on every node with torchrun or srun (docs/guides/"
                          "scale-out.md) or set trainer.num_nodes: 1")
    strategy = trainer.get("strategy")
    if isinstance(strategy, str) and "spawn" in strategy:
        raise ConfigError(f"trainer.strategy: {strategy} starts each rank by pickling the module and the data module, "
                          "whose env and collector hold threads and locks that cannot be pickled; use "
                          "trainer.strategy: ddp (it launches the ranks as new processes)")


INT64_MAX = 2**63 - 1

# Lightning callbacks and loggers whose numbers it does not check itself: (class name, argument, least
# value, whether the least value itself is refused)
_CALLBACK_LEAST = (("EarlyStopping", "patience", 0, False), ("ModelCheckpoint", "every_n_epochs", 0, False),
                   ("ModelCheckpoint", "every_n_train_steps", 0, False), ("TQDMProgressBar", "refresh_rate", 0, False),
                   ("RichProgressBar", "refresh_rate", 0, False), ("EnvStepsProgressBar", "refresh_rate", 0, False),
                   ("TensorBoardLogger", "flush_secs", 0, True), ("TensorBoardLogger", "max_queue", 1, False),
                   ("CSVLogger", "flush_logs_every_n_steps", 1, False))


def _check_callback_args(entry: Any, field: str = "trainer.callbacks") -> None:
    """A Lightning callback's or logger's number below what it means (EarlyStopping `patience: -1`
    stops at the first check; TensorBoardLogger `flush_secs: -5`), named before anything is built."""
    get = getattr(entry, "get", None)
    if not callable(get) or not isinstance(get("class_path"), str):
        return
    name = get("class_path").rsplit(".", 1)[-1]
    args = get("init_args") or {}
    if not callable(getattr(args, "get", None)):
        return
    for cls, arg, least, strict in _CALLBACK_LEAST:
        value = args.get(arg)
        if name == cls and isinstance(value, (int, float)) and not isinstance(value, bool) and (
                not value > least if strict else not value >= least):
            raise ConfigError(f"{field}: {cls} {arg}: must be {'>' if strict else '>='} {least}, got {value}")


def _check_finite(node: Any, key: str = "") -> None:
    """A NaN anywhere in the config is a mistake (it passes every range check: nan < x is False)."""
    if isinstance(node, float) and node != node:
        raise ConfigError(f"{key}: is nan; give a number")
    if isinstance(node, int) and not isinstance(node, bool) and not -INT64_MAX - 1 <= node <= INT64_MAX:
        raise ConfigError(f"{key}: {node} does not fit a 64-bit integer (at most {INT64_MAX:,}); give a "
                          "realistic value")
    items = node.items() if isinstance(node, dict) else (
        vars(node).items() if type(node).__name__ == "Namespace" else enumerate(node) if isinstance(node, list) else ())
    for k, v in items:
        _check_finite(v, f"{key}.{k}" if key else str(k))


def _check_seed(field: str, seed: int) -> None:
    low, high = SEED_RANGE
    if not low <= seed <= high:
        raise ConfigError(f"{field}: {seed} is outside numpy's seed range {low}..{high}; pick a seed in that range")


# ---------------------------------------------------------------------------------- the env
def _constructed(factory: Callable[..., Any], args: tuple, said: io.StringIO) -> Any:
    """`factory(*args)` with what it writes to sys.stderr held in `said`: written out after it returns
    or raises, kept back when it exits (argparse's own error line becomes part of build_env's)."""
    try:
        with contextlib.redirect_stderr(said):
            return factory(*args)
    finally:
        if said.getvalue() and not isinstance(sys.exc_info()[1], SystemExit):
            sys.stderr.write(said.getvalue())


def build_env(factory: Callable[..., Any], num_envs: int, device: str, seed: int) -> Any:
    """`factory(num_envs, device, seed)`; a ValueError/TypeError it raises becomes a ConfigError on
    `data.env.init_args.<name>` when its message starts with one of the factory's parameters."""
    _check_required(factory)
    said = io.StringIO()  # what the constructor writes to sys.stderr: replayed, or folded into its SystemExit's line
    try:
        env = _constructed(factory, (num_envs, device, seed), said)
    except ConfigError as err:
        line = _env_field(factory, str(err))
        name = _factory_name(factory)
        if line.startswith("data.env: ActionSpec") and name not in line:  # the spec the world builds: name the world
            line = f"data.env: {name}(num_envs={num_envs}) built an invalid {line.removeprefix('data.env: ')}"
        raise ConfigError(line) from None
    except (ValueError, TypeError) as err:
        line = _env_field(factory, f"{type(err).__name__}: {err}")
        name = _factory_name(factory)
        if line.startswith("data.env: ") and name not in line:  # e.g. ActionSpec's own check inside the world: whose
            line = f"data.env: {name}(num_envs={num_envs}) raised {line.removeprefix('data.env: ')}"
        raise ConfigError(line) from None
    except (RuntimeError, MemoryError) as err:  # the allocator: a world too large to build at all
        text = str(err)
        if isinstance(err, ReportedError):
            raise
        if not isinstance(err, MemoryError) and "allocate" not in text and "out of memory" not in text:
            raise ConfigError(f"data.env: {_factory_name(factory)}(num_envs={num_envs}) raised {_raised(err)}; fix "
                              "the world's constructor or its data.env.init_args") from None
        asked = re.search(r"allocate (\d+) bytes", text)
        size = f" ({_size(int(asked.group(1)))} in one tensor)" if asked else ""
        raise ConfigError(f"data.env: building the world with {num_envs} actors ran out of memory{size}; lower its "
                          "size settings (e.g. data.env.init_args.max_width, max_subagents) or data.num_envs") from None
    except (Exception, SystemExit) as err:  # the user's own constructor failing: name it, without a traceback
        if isinstance(err, OSError) and "AF_UNIX path too long" in str(err):  # worker processes' sockets live there
            import tempfile

            raise ConfigError(f"TMPDIR: the temporary folder {tempfile.gettempdir()!r} is too long a path for the "
                              f"sockets of {_factory_name(factory)}'s worker processes (AF_UNIX path too long: at "
                              "most ~100 characters); point TMPDIR at a short folder (e.g. TMPDIR=/tmp)") from None
        printed = [line.strip() for line in said.getvalue().splitlines() if line.strip()]
        if isinstance(err, SystemExit) and printed:  # argparse in the constructor: it read the trainer's command line
            raise ConfigError(f"data.env: {_factory_name(factory)}(num_envs={num_envs}) exited ({_raised(err)}) after "
                              f"printing {printed[-1]!r:.200}; a world that parses sys.argv reads the trainer's "
                              "command line: take its options as constructor arguments (data.env.init_args)") from None
        raise ConfigError(f"data.env: {_factory_name(factory)}(num_envs={num_envs}) raised {_raised(err)}; fix the "
                          "world's constructor or its data.env.init_args") from None
    if isinstance(env, type) or not all(callable(getattr(env, m, None)) for m in ("reset", "step")):
        what = f"the class {env.__qualname__}" if isinstance(env, type) else f"{type(env).__name__} {env!r:.40}"
        fix = (f"return {env.__qualname__}(num_envs, device, seed)" if isinstance(env, type)
               else "return a BatchedEnv (reset and step)")
        raise ConfigError(f"data.env: {_factory_name(factory)}(num_envs, device, seed) returned {what}, not a world; "
                          f"{fix}")
    return env


def _check_required(factory: Callable[..., Any]) -> None:
    """A required constructor argument (no default) that the config does not give: the parser fills
    an un-annotated one with None instead of refusing it, and the world then runs with None."""
    if not isinstance(factory, functools.partial):
        return
    cls = next((a for a in reversed(factory.args) if isinstance(a, type)), None)
    if cls is None:
        return
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return
    given = factory.keywords or {}
    for name, param in params.items():
        if name in ("num_envs", "device", "seed") or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.default is inspect.Parameter.empty and given.get(name) is None:
            raise ConfigError(f"data.env.init_args.{name}: {cls.__qualname__} requires it (no default) and the config "
                              f"does not give it; add `{name}: ...` under data.env.init_args")


def _factory_name(factory: Callable[..., Any]) -> str:
    if isinstance(factory, functools.partial):
        factory = next((a for a in reversed(factory.args) if isinstance(a, type)), factory.func)
    return getattr(factory, "__qualname__", type(factory).__name__)


def _raised(err: BaseException) -> str:
    text = error_text(err)
    return f"{type(err).__name__}: {text[:300]}" if text else type(err).__name__


def _call_world(name: str, method: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """One call of the user's world in the probe; anything it raises (SystemExit too) is one line."""
    before = global_state()
    try:
        out = fn(*args, **kwargs)
    except BaseException as err:  # a BaseException subclass of the user's (not an interrupt) too
        if isinstance(err, (KeyboardInterrupt, GeneratorExit)) or named_by_package(err) or any(
                c.__name__ == "SIGTERMException" for c in type(err).__mro__):
            raise  # an interrupt or a signal; or already one line naming the world (e.g. ExternalWorldError)
        raise ConfigError(f"data.env: {name}.{method} raised {_raised(err)} in the preflight probe "
                          f"({PROBE_ACTORS} actors, before anything ran); fix the world's {method}") from None
    changed = state_change(before)  # a world that turns autograd off (or sets a default dtype) for the whole process
    if changed is not None:
        raise ConfigError(f"data.env: {name}.{method} {changed} (in the preflight probe, before anything ran)")
    return out


def _check_spaces(name: str, env: Any) -> None:
    """observation_shape a tuple of positive ints, action_spec an ActionSpec with at least one action."""
    from parlightning.envs.base import ActionSpec

    problem = contract.shape_problem(env.observation_shape)
    if problem is not None:
        raise ConfigError(f"data.env: {name}.observation_shape {problem}")
    spec = env.action_spec
    if not isinstance(spec, ActionSpec):
        raise ConfigError(f"data.env: {name}.action_spec is {type(spec).__name__} {spec!r:.60}, not an ActionSpec; "
                          "use parlightning.envs.ActionSpec('discrete', nvec=(n,)) (or multi_discrete / continuous)")
    if spec.kind not in ("discrete", "multi_discrete", "continuous"):
        raise ConfigError(f"data.env: {name}.action_spec.kind is {spec.kind!r}; use discrete, multi_discrete or "
                          "continuous")
    if spec.is_discrete and (not spec.nvec or not all(isinstance(n, numbers.Integral) and n >= 1 for n in spec.nvec)):
        raise ConfigError(f"data.env: {name}.action_spec.nvec is {spec.nvec!r}; every action dimension needs at "
                          "least one category (e.g. nvec=(2,))")
    if spec.kind == "discrete" and len(spec.nvec) != 1:
        raise ConfigError(f"data.env: {name}.action_spec is discrete with nvec={tuple(spec.nvec)!r}; a discrete "
                          "action is one category (nvec=(n,)): for one category per dimension use "
                          f"ActionSpec('multi_discrete', nvec={tuple(spec.nvec)!r})")
    if not spec.is_discrete:
        if not spec.shape or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d > 0
                                     for d in spec.shape):
            raise ConfigError(f"data.env: {name}.action_spec.shape is {spec.shape!r}; continuous actions need a "
                              "non-empty tuple of positive ints (e.g. shape=(2,))")
        bounds = {k: getattr(spec, k) for k in ("low", "high")}
        for k, v in bounds.items():
            if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Real) or v != v):
                raise ConfigError(f"data.env: {name}.action_spec.{k} is {v!r}; a bound is a number or None (unbounded)")
        if None not in bounds.values() and not bounds["low"] < bounds["high"]:
            raise ConfigError(f"data.env: {name}.action_spec has low={bounds['low']} >= high={bounds['high']}; "
                              "actions are clipped to [low, high], so low must be below high")


WORLD_FACTS = {  # optional world attributes the package reads: (accepts, what it must be)
    "solved_threshold": (lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
                         and 0.0 <= v <= 1.0,
                         "a number in [0, 1], the task outcome (r_perf, in [0, 1]) at or above which an episode counts "
                         "as solved (1.0: only a full success)"),
    "max_subagents": (lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1,
                      "an integer >= 1, the most subagents an episode may spawn (the PARL reward's cap)"),
}


def check_world_facts(name: str, env: Any) -> None:
    """The optional attributes the package reads from a world (`WORLD_FACTS`: `solved_threshold`,
    `max_subagents`), checked once when the world is probed: type, finite, in range; one ConfigError
    `data.env: {name}.{attr}: must be ...` otherwise (read later, they would be a bare float() error or
    a threshold no outcome reaches)."""
    world = getattr(env, "world_name", None)  # an external world's own class, whose attribute it is
    where = f"data.env.world: {world}" if isinstance(world, str) else f"data.env: {name}"
    for attr, (accepts, need) in WORLD_FACTS.items():
        try:
            value = getattr(env, attr, None)
        except Exception as err:  # a property raising
            raise ConfigError(f"data.env: reading {name}.{attr} raised {_raised(err)}; it must be {need}") from None
        if value is not None and not accepts(value):
            raise ConfigError(f"{where}.{attr}: must be {need}, got {type(value).__name__} {value!r:.40}")


def _env_field(factory: Callable[..., Any], message: str) -> str:
    message = " ".join(line.strip() for line in message.splitlines() if line.strip())
    head = message.split(":", 1)[0].strip()
    if head == "data.env" or head.startswith(("data.env.", "data.env ")):  # already names its field (no "data.env: data.env.world")
        return message
    if isinstance(factory, functools.partial):  # jsonargparse's class_path + init_args: the class is an argument
        factory = next((a for a in reversed(factory.args) if isinstance(a, type)), factory.func)
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    given = [name for name in params if name not in ("num_envs", "device", "seed")]  # the config's init_args
    owner = f"{getattr(factory, '__name__', '')}."
    if head.startswith(owner) and head[len(owner):] in given:  # the class's own check: `SwarmEnv.max_width: ...`
        message, head = message[len(owner):], head[len(owner):]
    if head in given:
        return f"data.env.init_args.{message}"
    return f"data.env: {message}"


def probe_action(spec: Any, n: int) -> Tensor:
    """A valid action for `n` actors: index 0 of every discrete dimension, the middle of a Box."""
    if spec.kind == "discrete":
        return torch.zeros(n, dtype=torch.long)
    if spec.kind == "multi_discrete":
        return torch.zeros(n, len(spec.nvec), dtype=torch.long)
    low, high = spec.low, spec.high
    mid = 0.0 if low is None or high is None else (low + high) / 2
    mid = max(mid, low) if low is not None else mid
    mid = min(mid, high) if high is not None else mid
    return torch.full((n, *spec.shape), float(mid))


def check_env(env: Any, num_envs: int, seed: int) -> None:
    """The BatchedEnv contract on one reset and one step of `env` (built with `num_envs` actors on
    the CPU): attributes, and every value it returns (`parlightning.envs.contract`, the checks the
    step loop runs at every step): type, layout, shape, dtype, device, then the values (observations
    and rewards finite, the parts of an episode that ended in range) and the action masks."""
    name = world_label(env)  # a wrapper's or an external world's own class inside: NormalizeEnv(MyWorld)
    sets = {"num_envs": "self.num_envs = num_envs", "device": "self.device = torch.device(device)",
            "observation_shape": "self.observation_shape = (d,)",
            "action_spec": "self.action_spec = ActionSpec('discrete', nvec=(n,))"}
    for attr in ("num_envs", "device", "observation_shape", "action_spec"):
        try:
            getattr(env, attr)
        except AttributeError:
            raise ConfigError(f"data.env: {name} has no `{attr}`; a BatchedEnv needs it: set it in __init__ "
                              f"({sets[attr]})") from None
        except Exception as err:  # a property of the user's world raising
            raise ConfigError(f"data.env: reading {name}.{attr} raised {_raised(err)}; fix the world's "
                              f"{attr}") from None
    _check_spaces(name, env)
    check_world_facts(name, env)
    try:
        declared = torch.device(env.device)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError(f"data.env: {name}.device is {env.device!r}, not a torch device; set it from the device "
                          "argument (self.device = torch.device(device): cpu, cuda, cuda:N)") from None
    try:
        masks = getattr(env, "action_masks", None)
    except Exception as err:  # a property raising
        raise ConfigError(f"data.env: reading {name}.action_masks raised {_raised(err)}; define action_masks() as a "
                          "method returning the mask") from None
    if masks is not None and not callable(masks):  # read as "no masks" by the step loop: say so instead
        raise ConfigError(f"data.env: {name}.action_masks is a {type(masks).__name__}, not a method; the step loop "
                          "calls env.action_masks() for the mask of the last observation: define it as a method "
                          "(def action_masks(self): return ...)")
    built = env.num_envs
    if isinstance(built, bool) or not isinstance(built, numbers.Integral):
        raise ConfigError(f"data.env: {name}.num_envs is {type(built).__name__} {built!r:.40}, not an int; set it "
                          "from the num_envs argument (self.num_envs = num_envs)")
    if built != num_envs:
        raise ConfigError(f"data.env: asked for {num_envs} actors, {name} built {built}; the env must "
                          "build num_envs actors (data.num_envs)")
    obs_shape = tuple(env.observation_shape)
    try:
        tasks = getattr(env, "task_ids", None)
    except Exception as err:  # a property of the user's world raising
        raise ConfigError(f"data.env: reading {name}.task_ids raised {_raised(err)}; fix the world's task_ids (a list "
                          "of task id strings, or absent for a world without tasks)") from None
    if tasks is not None:
        _check_task_ids(name, tasks)
    _check_world_calls(name, env, tasks)
    cpu = torch.device("cpu")  # the probe is built on the CPU (device="cpu"): its tensors belong there
    first = torch.zeros(num_envs, dtype=torch.long)
    reset_kwargs = {"seed": seed, "task_index": first} if tasks is not None else {"seed": seed}
    obs = _call_world(name, "reset", env.reset, **reset_kwargs)
    if isinstance(obs, torch.Tensor) and obs.layout == torch.strided and not same_device(obs.device, declared) \
            and obs.device.type != "meta":
        raise ConfigError(f"data.env: {name}.device says {declared} but its reset returned tensors on {obs.device}; "
                          "the step loop puts actions and buffers on env.device: set self.device to the device its "
                          "tensors are on (self.device = torch.device(device))")
    _refuse(name, "reset", "observations", contract.tensor_problem(
        obs, (num_envs, *obs_shape), contract.OBS, cpu, f"num_envs {num_envs}, observation_shape is {list(obs_shape)}"),
        contract.OBS, num_envs)
    _check_probe_finite(name, "reset", "observations", obs)
    _check_probe_mask(name, env, num_envs)
    res = _call_world(name, "step", env.step, probe_action(env.action_spec, num_envs),
                      first if tasks is not None else None)
    _refuse(name, "step", "", contract.result_problem(res), contract.RESULT, num_envs)
    for field, problem, want in contract.step_problems(res, num_envs, obs_shape, cpu):
        _refuse(name, "step", field, problem, want, num_envs)
    for field in ("obs", "final_obs", "reward"):
        _check_probe_finite(name, "step", f"StepResult.{field}", getattr(res, field))
    if tasks is None and getattr(res, "parts", None) is not None:
        raise ConfigError(f"data.env: {name}.step returned EpisodeParts but {name} has no task_ids; the samplers, the "
                          "PARL reward and critical steps index parts.task into the world's task bank: give the world "
                          "a task_ids list (e.g. ['easy-0', 'hard-0']), or return parts=None")
    parts = getattr(res, "parts", None)
    done = res.terminated | res.truncated
    if parts is not None and bool(done.any()):  # read where an episode ended, as the samplers and the reward do
        rows = torch.stack([getattr(parts, f).detach().float() for f in contract.PART_FIELDS], -1)[done]
        bad = contract.parts_rows_problem(rows, len(tasks) if tasks is not None else None)
        if bad is not None:
            field, row, need = bad
            shown = ", ".join(f"{k}={float(v):g}" for k, v in zip(contract.PART_FIELDS, rows[row].tolist()))
            raise ConfigError(f"data.env: {name}.step returned episode parts with {field} not {need} in the preflight "
                              f"probe ({shown}); fix the parts the world reports where an episode ends")
    _check_probe_mask(name, env, num_envs)


def _refuse(name: str, method: str, what: str, problem: Optional[contract.Problem], want: contract.Want,
            actors: int) -> None:
    """One ConfigError for a value the probe's world returned (`contract`'s words), or nothing."""
    if problem is not None:
        what = f" {what}" if what else ""
        raise ConfigError(f"data.env: {name}.{method} returned{what} {problem.says} in the preflight probe "
                          f"({actors} actors, before anything ran); return {want.text}{problem.hint}")


def _check_probe_finite(name: str, method: str, what: str, value: Tensor) -> None:
    """NaN or inf in a value the probe's world returned (a host read: the probe is small)."""
    actor = contract.non_finite(value)
    if actor is not None:
        raise ConfigError(f"data.env: {name}.{method} returned {what} holding NaN or inf (actor {actor}) in the "
                          "preflight probe (before anything ran); return finite numbers")


def _check_probe_mask(name: str, env: Any, num_envs: int) -> None:
    """The probe world's action mask for its last observation, as the step loop checks the first one."""
    from parlightning.envs.base import check_action_mask

    masks = getattr(env, "action_masks", None)
    if not callable(masks):
        return
    mask = _call_world(name, "action_masks", masks)
    if mask is None:
        return
    try:
        check_action_mask(mask, env.action_spec, num_envs, f"{name}.action_masks()", torch.device("cpu"))
    except ValueError as err:
        raise ConfigError(f"data.env: {err} (in the preflight probe, before anything ran)") from None


def _check_world_calls(name: str, env: Any, tasks: Any) -> None:
    """The calls the step loop makes into the world, probed on their signatures (`check_call_shape`):
    `reset(seed=, task_index=)` (task_index only for a world with tasks), `step(action, next_task)`
    (positionally; next_task is None for a world without tasks) and `action_masks()`."""
    loop = "the step loop"
    check_call_shape("data.env", name, "reset", env.reset, kwargs=("seed", "task_index") if tasks is not None
                     else ("seed",), caller=loop)
    check_call_shape("data.env", name, "step", env.step, ("action", "next_task"), caller=loop,
                     define="step(self, action, next_task=None) (next_task is None for a world without tasks)")
    masks = getattr(env, "action_masks", None)
    if callable(masks):
        check_call_shape("data.env", name, "action_masks", masks, caller=loop)


_MISSING = object()


def check_state(field: str, name: str, obj: Any, load_back: bool = False) -> None:
    """`obj.state_dict()` (a world's, a sampler's), which every checkpoint saves: a dict that a
    checkpoint holds and loads back with `torch.load(weights_only=True)` (tensors and plain values).
    Checked on the probe, so a run never trains an iteration only to fail at its first save or
    to write a checkpoint it cannot resume. `load_back` (the probe's own world, a throwaway): its
    `load_state_dict` is called with what came back, as every resume does."""
    method = getattr(obj, "state_dict", None)
    for attr in ("state_dict", "load_state_dict"):  # optional (BatchedEnv's defaults); set but not a method: refused
        value = getattr(obj, attr, _MISSING)
        if value is not _MISSING and not callable(value):
            args = "self, state" if attr == "load_state_dict" else "self"
            raise ConfigError(f"{field}: {name}.{attr} is a {type(value).__name__}, not a method; every checkpoint "
                              f"calls it: define it as a method (def {attr}({args}): ...) or drop it")
    if not callable(method):
        return
    fix = "return a dict of tensors and plain values (numbers, strings, lists, dicts; {} for no state)"
    try:
        state = method()
    except (Exception, SystemExit) as err:
        raise ConfigError(f"{field}: {name}.state_dict raised {_raised(err)} in the preflight probe; every checkpoint "
                          f"calls it: fix it ({fix})") from None
    if not isinstance(state, dict):
        raise ConfigError(f"{field}: {name}.state_dict returned a {type(state).__name__}, not a dict; {fix}")
    check_real_tensors(field, name, state)  # a meta tensor saves and loads back, but no checkpoint copies it out
    buffer = io.BytesIO()
    try:
        torch.save(state, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=True)
    except Exception as err:
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(err))
        what = f"a {found.group(1)} object" if found else "a value"
        plain = re.sub(r"\x1b\[[0-9;]*m", "", _raised(err))[:160]  # torch's message carries terminal colours
        why = "" if found else f" ({plain})"
        raise ConfigError(f"{field}: {name}.state_dict holds {what}, which a checkpoint cannot load back with "
                          f"torch.load(weights_only=True){why}; {fix}") from None
    if getattr(obj, "load_state_dict", _MISSING) is _MISSING:  # saved by every checkpoint, restored by no resume
        raise ConfigError(f"{field}: {name} defines state_dict but no load_state_dict, so a resume would silently "
                          "start it from scratch; add def load_state_dict(self, state): ... (or drop state_dict)")
    if not load_back or not callable(getattr(obj, "load_state_dict", None)):
        return
    try:
        obj.load_state_dict(loaded)
    except (Exception, SystemExit) as err:
        raise ConfigError(f"{field}: {name}.load_state_dict(its own state_dict()) raised {_raised(err)} in the "
                          "preflight probe; every resume calls it with what state_dict() returned: fix it") from None


def _check_task_ids(name: str, tasks: Any) -> None:
    """A world's task bank (`contract.task_ids_problem`): a non-empty list of distinct, non-empty strings."""
    problem = contract.task_ids_problem(tasks)
    if problem is not None:
        raise ConfigError(f"data.env: {name}.task_ids {problem}")


# ---------------------------------------------------------------------------------- memory
def rollout_bytes(num_steps: int, num_envs: int, observation_shape: Sequence[int], action_spec: Any,
                  num_minibatches: int) -> int:
    """Bytes of one rank's rollout: the RolloutBuffer (measured on the meta device, nothing is
    allocated) plus one gathered minibatch of it."""
    from parlightning.buffer import RolloutBuffer

    dtype = torch.long if action_spec.is_discrete else torch.float32
    buf = RolloutBuffer(num_steps, num_envs, tuple(observation_shape), action_spec.action_shape,
                        torch.device("meta"), dtype)
    total = sum(v.numel() * v.element_size() for v in vars(buf).values() if isinstance(v, Tensor))
    return total + total // max(num_minibatches, 1)


def env_bytes(env: Any, probe_actors: int, num_envs: int) -> int:
    """The probe env's per-actor tensors (leading dim == its actor count), scaled to `num_envs`."""
    per_actor = sum(v.numel() * v.element_size() for v in vars(env).values()
                    if isinstance(v, Tensor) and v.dim() and v.shape[0] == probe_actors) // probe_actors
    return per_actor * num_envs


def check_memory(need: int, field_values: str, obs_shape: Sequence[int], device: torch.device,
                 ranks_here: int = 1) -> None:
    """Refuse a rollout whose estimate (x ranks sharing this machine's memory) exceeds what is free."""
    free, where = available_memory(device)
    total = need * ranks_here
    if total > free:
        amount = f"{_size(need)} per rank x {ranks_here} ranks = {_size(total)}" if ranks_here > 1 else _size(total)
        raise ConfigError(f"data.num_envs: {field_values} need about {amount} for the rollout "
                          f"(observation shape {list(obs_shape)}), more than the {_size(free)} {where}; lower "
                          "data.num_envs or data.num_steps")


_size = size_text


def check_sync_methods(field: str, obj: Any) -> None:
    """A user's object whose methods the package calls synchronously (a sampler, a strategy, a
    callback): an `async def` (or async generator) method would return a coroutine that never runs,
    silently. One line naming the field, the class and the method."""
    cls = type(obj)
    if cls.__module__.split(".")[0] in ("parlightning", "lightning", "pytorch_lightning"):
        return
    for name in dir(cls):
        if name.startswith("_"):
            continue
        attr = inspect.getattr_static(cls, name, None)
        fn = getattr(attr, "__func__", attr)
        if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
            raise ConfigError(f"{field}: {cls.__qualname__}.{name} is `async def`, but parlightning calls it as a plain "
                              "method (its coroutine would never run); make it a plain `def` (run any async work "
                              "inside it, e.g. with asyncio.run)")


def check_datamodule(dm: Any, device: Optional[torch.device] = None, ranks_here: int = 1) -> dict[str, Any]:
    """Build a probe of the env (PROBE_ACTORS actors, CPU), check its contract and the data
    module's checks that need it, and the rollout's memory; returns facts for the resume checks
    (`observation_shape`, `action_spec`, `env_signature`)."""
    check_sync_methods("data.sampler", getattr(dm, "sampler", None))
    n = min(dm.num_envs, PROBE_ACTORS)
    env = build_env(dm.env_factory, n, "cpu", dm.seed)
    checked = False
    try:
        facts = _probe_env(dm, env, n, device, ranks_here)
        checked = True
        return facts
    finally:
        close = getattr(env, "close", None)
        if callable(close):
            with warnings.catch_warnings():
                if checked:  # a world whose close() raises: refused now, not warned after a whole run
                    warnings.simplefilter("error", WorldCloseWarning)
                try:
                    close()
                except WorldCloseWarning as warned:
                    raise ConfigError(f"{warned} (closing the preflight's {n}-actor probe env)") from None
                except Exception as err:  # noqa: BLE001  the world's own close: named, not a traceback
                    if checked and not named_by_package(err):
                        raise ConfigError(f"data.env: {world_label(env)}.close raised {_raised(err)} when the "
                                          f"preflight closed its {n}-actor probe env (close also runs when every run "
                                          "ends); fix the world's close") from None
                    if checked:
                        raise


def _probe_env(dm: Any, env: Any, n: int, device: Optional[torch.device], ranks_here: int) -> dict[str, Any]:
    """`check_datamodule`'s checks on its probe env."""
    check_env(env, n, dm.seed)
    step_seconds = time_env_step(env, n)  # for estimate_iteration
    check_state("data.env", world_label(env), env, load_back=True)  # every checkpoint saves it, every resume loads it
    check_state("data.sampler", type(dm.sampler).__name__, dm.sampler)
    if getattr(dm, "reward", None) is not None:  # saved with every checkpoint, loaded back by every resume
        check_state("data.reward", type(dm.reward).__name__, dm.reward, load_back=True)
    dm._check_reward_cap(env)
    need = rollout_bytes(dm.num_steps, dm.num_envs, env.observation_shape, env.action_spec, dm.num_minibatches)
    need += env_bytes(env, n, dm.num_envs)
    check_memory(need, f"{dm.num_envs} actors x {dm.num_steps} steps", env.observation_shape,
                 device or torch.device("cpu"), ranks_here)
    return {"observation_shape": tuple(env.observation_shape), "action_spec": env.action_spec,
            "env_signature": env_signature(env), "env_step_seconds": step_seconds, "probe_actors": n}


def check_policy_memory(module: Any, probe: dict[str, Any], device: torch.device, ranks_here: int = 1) -> None:
    """Refuse a policy whose weights, gradients and Adam moments (4 copies of every parameter)
    exceed the free memory: the policy is built on the meta device, so nothing is allocated."""
    build = getattr(module, "build_policy", None)
    if not callable(build) or probe is None:
        return
    try:
        with torch.device("meta"):
            policy = build(probe["observation_shape"], probe["action_spec"])
    except ConfigError:
        raise
    except Exception:  # a policy that needs the trainer (a keyed table) or cannot be built on meta: not estimated
        return
    params = sum(p.numel() for p in policy.parameters())
    need = params * 4 * 4  # float32 weights, gradients and Adam's two moments
    free, where = available_memory(device)
    if need * ranks_here > free:
        hparams = getattr(getattr(module, "hparams", {}), "get", lambda *_: None)
        hidden = list(hparams("hidden_sizes") or [])
        per = f" per rank x {ranks_here} ranks" if ranks_here > 1 else ""
        size = (f"a policy of {params:,} parameters, about {_size(need)}{per} for weights, gradients and Adam's "
                f"moments, more than the {_size(free)} {where}")
        name, largest = max(((n, p.numel()) for n, p in policy.named_parameters()), key=lambda item: item[1])
        spec = probe["action_spec"]
        categories = sum(int(n) for n in spec.nvec) if getattr(spec, "is_discrete", False) else 0
        if largest * 2 >= params and name.startswith("rnn."):  # most of it is the recurrent core
            raise ConfigError(f"model.rnn_hidden: {hparams('rnn_hidden')} (model.policy: {hparams('policy')}) makes "
                              f"{size}; use a smaller rnn_hidden (64-512 is usual)")
        if largest * 2 >= params and name.startswith("actor.") and categories > 10_000:  # one output per action category
            raise ConfigError(f"data.env: the world's action_spec has {categories:,} action categories "
                              f"(nvec={tuple(spec.nvec)!r:.60}), one policy output each, which makes {size}; use fewer "
                              "categories (factor a large choice into several dimensions: multi_discrete)")
        raise ConfigError(f"model.hidden_sizes: {hidden} with observations of shape {list(probe['observation_shape'])} "
                          f"make {size}; use smaller hidden_sizes (or a smaller observation: e.g. "
                          "data.env.init_args.max_width)")


# ---------------------------------------------------------------------------------- the first iteration's cost
LONG_ITERATION_S = 120.0  # a first iteration estimated longer than this is announced before it starts


def time_env_step(env: Any, n: int) -> float:
    """Seconds of one step of the probe env (its second step: the first one warmed it up)."""
    with torch.random.fork_rng(devices=[]):  # a world drawing from the global generator keeps the run's seed
        start = time.perf_counter()
        _call_world(world_label(env), "step", env.step, probe_action(env.action_spec, n),
                    None if getattr(env, "task_ids", None) is None else torch.zeros(n, dtype=torch.long))
        return time.perf_counter() - start


def _activation_bytes_per_row(policy: torch.nn.Module, obs_shape: Sequence[int], spec: Any) -> int:
    """Bytes the outputs of the policy's leaf modules take per observation row in one `evaluate`
    (what backward keeps): measured on the meta device, nothing allocated."""
    total = [0]

    def count(module: Any, inputs: Any, output: Any) -> None:
        for t in output if isinstance(output, (tuple, list)) else (output,):
            if isinstance(t, Tensor):
                total[0] += t.numel() * t.element_size()

    leaves = [m for m in policy.modules() if not list(m.children())]
    hooks = [m.register_forward_hook(count) for m in leaves]
    try:
        rows = 2
        obs = torch.empty((rows, *obs_shape), device="meta")
        policy.evaluate(obs, probe_action(spec, rows).to("meta"))
    finally:
        for h in hooks:
            h.remove()
    return total[0] // rows


def _time_policy(policy: torch.nn.Module, obs_shape: Sequence[int], spec: Any, rows: int) -> tuple[float, float]:
    """(seconds of one inference forward, of one forward + backward) on `rows` rows (best of 2)."""
    obs = torch.zeros((rows, *obs_shape))
    action = probe_action(spec, rows)
    forward = train = float("inf")
    for _ in range(2):
        start = time.perf_counter()
        with torch.inference_mode():
            policy.evaluate(obs, action)
        forward = min(forward, time.perf_counter() - start)
        start = time.perf_counter()
        logprob, entropy, value = policy.evaluate(obs, action)
        (logprob.sum() + entropy.sum() + value.sum()).backward()
        train = min(train, time.perf_counter() - start)
    return forward, train


def estimate_iteration(module: Any, dm: Any, probe: dict[str, Any], device: torch.device,
                       ranks_here: int = 1) -> Optional[dict[str, Any]]:
    """The first iteration's memory for the policy's activations and, on the CPU, its time.

    Memory: the activations one update minibatch keeps for backward (`data.num_envs x
    data.num_steps / data.num_minibatches` rows, measured per row on the meta device, x2 for
    their gradients) and one rollout forward (`data.num_envs` rows); more than the free memory is
    one `ConfigError` naming the field, the estimate and the fix. Time (CPU only): the policy's
    forward and forward + backward timed at two small batch sizes (a per-call cost plus a per-row
    cost, extrapolated to the iteration's calls and rows) and the probe env's step scaled to
    `data.num_envs` actors (linearly: an upper bound for a world with per-step overhead).
    Returns {"seconds", "rollout_seconds", "update_seconds", "longest_call_seconds", "line"}
    (`line`: one sentence when the iteration would take longer than LONG_ITERATION_S, else None),
    or None when the policy cannot be estimated (built only with the trainer, recurrent)."""
    build = getattr(module, "build_policy", None)
    if not callable(build) or probe is None or getattr(module, "hparams", {}).get("policy", "mlp") not in ("mlp", "slots"):
        return None
    obs_shape, spec = probe["observation_shape"], probe["action_spec"]
    try:
        with torch.device("meta"):
            policy = build(obs_shape, spec)
        per_row = _activation_bytes_per_row(policy, obs_shape, spec)
    except ConfigError:
        raise
    except Exception:  # a policy that needs the trainer (a keyed table) or cannot run on meta: not estimated
        return None
    n, t, epochs, m = dm.num_envs, dm.num_steps, dm.update_epochs, dm.num_minibatches
    rows = max(n * t // max(m, 1), 1)
    need = per_row * max(2 * rows, n)
    free, where = available_memory(device)
    if need * ranks_here > free:
        per = f" per rank x {ranks_here} ranks" if ranks_here > 1 else ""
        fits = max(int(free // ranks_here // max(2 * per_row, 1)), 1)
        raise ConfigError(
            f"data.num_minibatches: {n} actors x {t} steps in {m} minibatches make {rows:,}-row minibatches; with "
            f"observations of shape {list(obs_shape)} the policy's activations need about {_size(need)}{per} for one "
            f"update, more than the {_size(free)} {where}; raise data.num_minibatches (at most ~{fits:,} rows per "
            "minibatch fit) or make the observation smaller (e.g. data.env.init_args.max_width)")
    if device.type != "cpu":
        return None
    small = max(1, min(16, int((64 << 20) // max(2 * per_row, 1))))  # time on batches of at most ~64 MiB
    try:
        with torch.random.fork_rng(devices=[]):  # the timing policy's init must not move the run's seed
            real = build(obs_shape, spec)
            f1, b1 = _time_policy(real, obs_shape, spec, small)
            f2, b2 = _time_policy(real, obs_shape, spec, 4 * small)
    except Exception:  # noqa: BLE001 (an estimate only: a policy that cannot run this way is not timed)
        return None
    f_row, b_row = max(f2 - f1, 0.0) / (3 * small), max(b2 - b1, 0.0) / (3 * small)
    f_call, b_call = max(f1 - f_row * small, 0.0), max(b1 - b_row * small, 0.0)
    env_step = probe.get("env_step_seconds", 0.0) * max(1.0, n / probe.get("probe_actors", PROBE_ACTORS))
    rollout = t * (env_step + f_call + f_row * n)
    update_call = b_call + b_row * rows
    update = epochs * m * update_call
    seconds = (rollout + update) * max(1.0, ranks_here / (os.cpu_count() or 1))  # CPU ranks share the cores
    line = None
    if seconds > LONG_ITERATION_S:
        line = (f"note: the first iteration will take about {_duration(seconds)} on this CPU before anything is "
                f"printed (rollout {_duration(rollout)}: {n} actors x {t} steps; update {_duration(update)}: "
                f"{epochs} epochs x {m} minibatches of {rows:,} rows, observations {list(obs_shape)}); for a quicker "
                "start lower data.num_envs, data.num_steps or data.update_epochs, or the world's size (e.g. "
                "data.env.init_args.max_width), or train on a GPU")
    return {"seconds": seconds, "rollout_seconds": rollout, "update_seconds": update,
            "longest_call_seconds": max(update_call, env_step + f_call + f_row * n), "line": line}


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
