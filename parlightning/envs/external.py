"""`ExternalBatchedEnv`: N per-episode worlds that are not tensor programs (subprocesses, tool
calls, model calls, subagent pools), run concurrently and presented as one `BatchedEnv`.

The world contract (sync or `async def`, duck-typed; see `World`):

    world.reset(task)  -> obs                                   (task: a task id string, or None)
    world.step(action) -> obs, reward, terminated, truncated, parts
    world.observation_shape, world.action_spec                  (read from the first world)
    world.tasks        (optional) the task bank ids; world.close() (optional)
    world.solved_threshold, world.max_subagents (optional) passed on, as a tensor world has them

`parts` is None or a mapping with any of `EpisodeParts`' fields except `task` (read where the
episode ended; missing fields are 0, a missing `outcome` is the step's reward clipped to [0, 1]),
so samplers, the PARL reward and critical steps work unchanged.

Threads by default, processes when asked (`workers: P`). An external world spends its step
*waiting* (on a subagent, a socket, a subprocess), and waiting releases the GIL, so threads
overlap N waits for the price of none of the pickling, process start-up or copied task data of
processes: sync worlds get one daemon thread each (a world is only ever touched by its own
thread, so it need not be thread-safe) and `async def` worlds share one event loop in one daemon
thread, which is how thousands of concurrent HTTP worlds stay cheap (`WorldRunner`). But the
worlds' own Python and their wake-ups still take turns on this process's GIL with the learner:
under `data.max_policy_lag` that slows the update, and under per-actor collection
(`data.collect: trajectories`) one event loop serving thousands of worlds saturates this process.
`workers: P` moves the worlds into P worker processes (`WorkerProcesses`, each a `WorldRunner`),
leaving this process one message per worker per call (lock-step) or per worker wake-up (per-actor
collection: `send` / `receive` stream each answer back as soon as it is ready, the same interface
as threads here). Work that burns CPU in Python or may hang for good belongs in a `ProcessPool`
(parlightning.subagents) or in worker processes, which can be killed: a hung thread cannot. So a
world that hangs ends the run with `ExternalWorldError` after `step_timeout` seconds naming the
actor and its task (its thread is abandoned: daemon, it never blocks interpreter exit; a worker
process is terminated by `close()`); a world that raises ends the run the same way with the
first error it raised. `retries` repeats only calls whose exception the world declares
retryable (`world.retryable`, a tuple of exception classes; default `(ConnectionError,
TimeoutError)`): a step that raised half-way has moved the world on, and a retry would report a
different error. A malformed value (an observation of the wrong size or type, a reward or part
that is None, a string, NaN or inf, a flag that is not a bool) ends the run with an
`ExternalWorldError` naming the world, actor, task and field. A world on a thread that calls
`os._exit` (or crashes the interpreter) takes the trainer down with it: threads cannot be isolated;
run such worlds with `workers: P`, where a dead worker process is reported by name. `close()` closes every world and every `shared` resource (pools), which
ends their worker processes.
"""

from __future__ import annotations

import math
import numbers
import sys
from typing import Any, Callable, Mapping, NamedTuple, Optional, Protocol, Sequence

import numpy as np
import torch
from torch import Tensor

from parlightning.config_types import (
    ClosedUnitInterval, NonNegativeInt, PositiveFinite, PositiveInt, Seed, check_allocation, check_args,
)
from parlightning.envs.base import (ActionArg, ActionSpec, BatchedEnv, EpisodeParts, StepResult, checked_device,
                                    checked_task_index, world_lifecycle, world_specs)
from parlightning.method_args import ItemsArg, TensorArg, check_state, checked_methods
from parlightning.envs.world_processes import WorkerLost, WorkerProcesses
from parlightning.envs.world_runner import (WorldCallFailed, WorldRunner, _check_plain_types, build_shared, close_all,
                                            warn_close_errors,
                                             resolve)
from parlightning.errors import ConfigError, ReportedError

__all__ = ["Arrivals", "ExternalBatchedEnv", "ExternalWorldError", "World", "build_shared", "resolve"]

ON_ERROR = ("fail", "retry", "drop")
SWITCH_INTERVAL = (1e-6, 0.005)  # seconds: the interpreter rounds below 1 us up; above its default it is never raised
# The least memory one actor takes in this process (its world object, its thread or task, the runner's
# and the adapter's bookkeeping): measured 2.5 KiB per actor for the smallest async world after its first
# reset, 15 KiB for a sync world (one thread each). A num_envs whose actors cannot fit even at this size
# is refused before any world is built (2**31 actors would otherwise be built until the OOM killer came).
ACTOR_BYTES = 2048


class Arrivals(NamedTuple):
    """The actors whose world answered, from `ExternalBatchedEnv.receive` (per-actor collection).

    actors [M] long: who; obs [M, *obs]: what each sees next (after an auto-reset where its episode
    ended, or after a dropped trajectory); reward, terminated, truncated [M]: its step's answer;
    final_obs [M, *obs]: the observation its step ended on; parts: `EpisodeParts` [M] (read where
    terminated | truncated; None for a world without tasks); dropped [M] bool: its trajectory was
    dropped (its world failed: nothing of it is to be trained on; obs is a fresh episode's);
    failures: why, one line per drop; retries: calls repeated; busy: seconds the answered calls kept
    their worlds waiting (`StreamAnswer.busy`: the world's own `busy_seconds` where it keeps one).
    part_rows [M, len(EpisodeParts._fields)] float: `parts` as one tensor (task first), for a collector
    that writes them in one go; any_done, any_dropped: whether any actor's episode ended / was dropped
    (known on the host, so a collector skips work without reading a tensor).
    """

    actors: Tensor
    obs: Tensor
    reward: Tensor
    terminated: Tensor
    truncated: Tensor
    final_obs: Tensor
    parts: Optional[EpisodeParts]
    dropped: Tensor
    failures: list[str]
    retries: int
    busy: float
    part_rows: Optional[Tensor] = None
    any_done: bool = False
    any_dropped: bool = False

FLOAT32_MAX = float(np.finfo(np.float32).max)
PART_NAMES = EpisodeParts._fields[1:]  # everything but `task`, which the adapter knows


def _shown(value: Any, width: int = 80) -> str:
    """`repr(value)` on one line, at most `width` characters (a sparse tensor's or a 2-D array's repr
    spans lines; an error is one line)."""
    try:
        text = " ".join(repr(value).split())
    except Exception:  # noqa: BLE001 - a user's object whose __repr__ fails
        text = f"<{type(value).__name__}>"
    return text if len(text) <= width else text[:width - 3] + "..."


def _scalar(value: Any) -> tuple[Optional[float], str]:
    """(the real number `value` holds, "") or (None, why): a Python or numpy real (not a bool), or a
    0-d numpy array or dense torch tensor of a real dtype (Decimal and Fraction too); not a bool, a
    complex number, a string, None, or an array or tensor with a dimension."""
    if isinstance(value, (bool, np.bool_)):
        return None, ", not a bool (float(...) it)"
    if isinstance(value, torch.Tensor):
        if value.is_meta or value.layout != torch.strided or value.dim() != 0 or value.dtype == torch.bool \
                or value.is_complex():
            return None, " (one number: a Python float, or a 0-d real tensor)"
        value = value.detach().item()
    elif isinstance(value, np.ndarray):
        if value.ndim != 0 or value.dtype.kind not in "iuf":
            return None, " (one number, not an array)" if value.ndim else ""
        value = value.item()
    elif isinstance(value, np.generic) and value.dtype.kind not in "iuf":  # numpy complex, strings, datetimes
        return None, ""
    if not isinstance(value, numbers.Number) or (isinstance(value, numbers.Complex) and
                                                 not isinstance(value, numbers.Real)):
        return None, ""  # strings, None, lists, dicts, complex
    try:
        return float(value), ""
    except (TypeError, ValueError, OverflowError, ArithmeticError):  # an int beyond float, a Decimal NaN signal
        return None, ""


class ExternalWorldError(ReportedError):
    """An external world raised, hung or returned a malformed value; the message names the world,
    the actor, its task, the call and the field (the CLI prints it as one `error:` line)."""


class World(Protocol):
    """One episode at a time of a world that is not a tensor program (methods may be `async def`)."""

    observation_shape: Sequence[int]
    action_spec: ActionSpec

    def reset(self, task: Optional[str]) -> Any: ...

    def step(self, action: Any) -> tuple[Any, float, bool, bool, Optional[Mapping[str, float]]]: ...


def _action_spec(spec: Any, world: str = "the world") -> ActionSpec:
    """The world's `action_spec`: an ActionSpec, or a mapping of its fields (`kind`, `nvec`, `shape`, `low`,
    `high`); anything else, or a mapping ActionSpec refuses, is one ConfigError naming the world."""
    if isinstance(spec, ActionSpec):
        return spec
    field = f"data.env.world: {world}.action_spec"
    if isinstance(spec, Mapping):
        unknown = sorted(map(str, set(spec) - {"kind", "nvec", "shape", "low", "high"}))
        if "kind" not in spec or unknown:
            why = f"has unknown keys {unknown}" if unknown else "has no `kind`"
            raise ConfigError(f"{field}: the mapping {dict(spec)!r:.80} {why}; give kind (discrete, multi_discrete or "
                              "continuous) and nvec or shape, e.g. {'kind': 'discrete', 'nvec': [4]}, or an ActionSpec")
        try:
            return ActionSpec(spec["kind"], nvec=tuple(spec.get("nvec") or ()), shape=tuple(spec.get("shape") or ()),
                              low=spec.get("low"), high=spec.get("high"))
        except (TypeError, ValueError) as err:  # ActionSpec's own check (a ConfigError is a ValueError)
            raise ConfigError(f"{field}: {' '.join(str(err).split())}") from None
    raise ConfigError(f"{field} must be an ActionSpec or a mapping of its fields (e.g. ActionSpec('discrete', "
                      f"nvec=(4,))), got {type(spec).__name__} {spec!r:.60}")


START_METHODS = ("fork", "spawn", "forkserver")


@checked_methods(**world_specs(ActionArg(same_device=False),
                                send={"actors": ItemsArg(int, hi="num_envs", unique=True, min_len=1,
                                                         text="actor indices, one call each"), "action": TensorArg()}),
                 lifecycle=world_lifecycle(exact=False, closes=True, requires={"send": "reset", "receive": "reset"}))
class ExternalBatchedEnv(BatchedEnv):
    """N external worlds as one `BatchedEnv` with auto-reset; see the module docstring.

    Args:
        num_envs, device, seed: the data module's env factory order; world i gets `seed + i`
            (passed as `seed=` when its factory accepts it, with `actor=i` likewise).
        world: the world class or factory, or its import path (`package.module:Class`).
        world_kwargs: keyword arguments for every world.
        shared: resources built once and passed to every world by name, as `{name: {class_path,
            init_args}}` (e.g. `pool:` a subagent pool), closed by `close()`; objects passed
            ready-made are shared as they are and left to their owner to close.
        task_ids: the task bank; default the first world's `tasks` (None: a world without tasks).
        step_timeout: seconds a reset or step may take before the run ends with an error. It also
            bounds each world's constructor and the worlds' close(), at least 10 s each
            (`world_runner.LIFECYCLE_FLOOR_S`): a constructor that never returns is one error naming
            the world and the actor; a close() that never returns is abandoned (its daemon thread;
            a worker process still closing 2 s after it was asked is terminated) with one
            `WorldCloseWarning` naming it, refused by the preflight's probe like a close() that raises.
        retries: times a call that raised a retryable exception (the world's `retryable`, default
            ConnectionError / TimeoutError) is repeated before the run ends with its first error.
        on_error: what a world call that still fails (raised after `retries`, hung past
            `step_timeout`, returned a malformed value) does: `fail` (default) ends the run with an
            `ExternalWorldError` naming world, actor, task, call and field; `retry` repeats every
            exception (not only `retryable`; the world's calls must be safe to repeat) `retries`
            times, then fails; `drop` (per-actor collection, `data.collect: trajectories`) drops
            the actor's trajectory (never trained on, counted in `collect/dropped_trajectories`),
            rebuilds a hung world, and starts a new episode. The same with `workers: P` (the
            timeouts and retries run in the workers). A worker process that dies or stops
            answering ends the run with one error naming it, its actors and pid, whatever
            `on_error` says: its worlds are gone.
        drop_budget: under `on_error: drop`, the share of a round's trajectories that may be dropped;
            more ends the run with one error naming the worlds that failed and why.
        switch_interval: the interpreter's GIL switch interval while the env is open (seconds;
            None leaves it). Python's default, 5 ms, lets a computing thread (the learner, under
            `data.max_policy_lag`) hold the GIL for up to 5 ms while a world thread whose wait just
            ended queues for it (0.5 ms gave about 1.6x -> 1.7x env steps/s at lag 1 and 5 ms latency in
            an ad-hoc trial). Only ever lowered, and restored by `close()`; so a value outside
            [1e-6, 0.005] s (Python's default 5 ms) is refused: above it does nothing, below 1 us rounds up.
        workers: 0 (default) runs the worlds on threads in this process; P >= 1 spreads them over
            min(P, num_envs) worker processes (contiguous blocks of actors, threads within each), so that the worlds'
            Python and wake-ups do not take this process's GIL from the learner
            (`data.max_policy_lag`, `data.collect: trajectories`). Then `world` must be an import
            path or a module-level class, `world_kwargs` and the worlds' answers must pickle, and
            `shared` resources are specs built in each worker.
        start_method: the workers' multiprocessing start method (default `forkserver` where
            available, else `spawn`).
        runner: `local` (default: threads here, or `workers` processes) or `ray`: the worlds run in
            max(workers, 1) Ray actors, on a Ray cluster (`RAY_ADDRESS`) or a local one
            (`parlightning.envs.world_ray`; `pip install .[ray]`); pickling rules as for `workers`.
            Lock-step and the round lag budget only: Ray actors do not stream answers per world
            (`data.collect: trajectories` refuses them).
    """

    checkpoint_exact = False  # an external world's internals cannot be saved: episodes restart on resume

    def __init__(
        self,
        num_envs: PositiveInt,
        device: str | torch.device = "cpu",
        seed: Seed = 0,
        *,
        world: Any,
        world_kwargs: Optional[dict[str, Any]] = None,
        shared: Optional[dict[str, dict[str, Any]]] = None,
        task_ids: Optional[list[str]] = None,
        step_timeout: PositiveFinite = 60.0,
        retries: NonNegativeInt = 0,
        switch_interval: Optional[PositiveFinite] = 0.0005,
        workers: NonNegativeInt = 0,
        start_method: Optional[str] = None,
        runner: str = "local",
        on_error: str = "fail",
        drop_budget: ClosedUnitInterval = 0.1,
    ) -> None:
        typed = check_args("ExternalBatchedEnv", ExternalBatchedEnv.__init__, locals())  # the annotated ranges
        num_envs, seed, step_timeout, retries, switch_interval, workers, drop_budget = (typed[k] for k in (
            "num_envs", "seed", "step_timeout", "retries", "switch_interval", "workers", "drop_budget"))
        if on_error not in ON_ERROR:
            raise ConfigError(f"data.env.init_args.on_error: must be one of {list(ON_ERROR)}, got {on_error!r}")
        self.on_error, self.drop_budget = on_error, float(drop_budget)
        if runner != "ray":  # before anything is built or set (Ray's actors live on its cluster's machines)
            check_allocation(f"ExternalBatchedEnv(num_envs={num_envs})", num_envs * ACTOR_BYTES, "cpu",
                             f"every actor is a Python world object (at least {ACTOR_BYTES // 1024} KiB each); "
                             "lower num_envs")
        self.num_envs, self.device = num_envs, checked_device("ExternalBatchedEnv.device", device)
        self.step_timeout, self.retries = float(step_timeout), retries
        self._closed = False
        self._switch_interval = None
        if task_ids is not None and (isinstance(task_ids, (str, bytes)) or not isinstance(task_ids, Sequence) or not
                                     task_ids or not all(isinstance(t, str) and t for t in task_ids)):
            raise ConfigError(f"data.env.init_args.task_ids: must be a non-empty list of task id strings "
                              f"(e.g. [easy-0, hard-0]) or null (the world's own tasks), got {task_ids!r:.80}")
        if switch_interval is not None and not SWITCH_INTERVAL[0] <= switch_interval <= SWITCH_INTERVAL[1]:
            raise ConfigError(f"data.env.init_args.switch_interval: {switch_interval!r} s is outside "
                              f"[{SWITCH_INTERVAL[0]:g}, {SWITCH_INTERVAL[1]:g}] s: it only ever lowers the "
                              "interpreter's GIL switch interval (Python's default is 0.005 s, so a larger value "
                              "does nothing) and below 1 microsecond the interpreter rounds it up; use e.g. "
                              "0.0005, or null to leave it")
        if switch_interval is not None and switch_interval < sys.getswitchinterval():
            self._switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(switch_interval)
        if runner not in ("local", "ray"):
            raise ConfigError(f"data.env.init_args.runner: must be 'local' or 'ray', got {runner!r}")
        if start_method is not None and start_method not in START_METHODS:  # checked with or without workers
            raise ConfigError(f"data.env.init_args.start_method: must be one of {list(START_METHODS)} or null (the "
                              f"default: forkserver where available), got {start_method!r}")
        clash = sorted(set(world_kwargs or {}) & set(shared or {}))
        if clash:
            raise ConfigError(f"data.env.init_args.world_kwargs: {', '.join(clash)} is also a `shared` resource, which "
                              f"every world receives as that keyword; drop {', '.join(clash)} from world_kwargs (or "
                              "rename the shared resource)")
        if world_kwargs and isinstance(world_kwargs, Mapping) and runner == "local":  # the YAML parser does not type
            world_cls = resolve(world, "data.env.world") if isinstance(world, str) else world  # what is inside them
            if isinstance(world_cls, type):
                _check_plain_types("data.env.init_args.world_kwargs", world_cls, world_kwargs)
        workers = min(workers, num_envs)  # never an empty worker (e.g. the data module's 2-actor probe)
        self.workers = workers
        self.shared: dict[str, Any] = {}
        self._owned: list[Any] = []
        try:
            if runner == "ray":  # Ray actors build their own worlds and shared resources
                from parlightning.envs.world_ray import RayWorlds

                self._runner: Any = RayWorlds(world, world_kwargs or {}, shared, num_envs, workers, seed,
                                              self.step_timeout, retries)
            elif workers:  # worker processes build their own worlds and shared resources
                self._runner = WorkerProcesses(world, world_kwargs or {}, shared, num_envs, workers, seed,
                                               self.step_timeout, retries, switch_interval, start_method,
                                               retry_any=on_error == "retry")
            else:
                self.shared = build_shared(shared)
                self._owned = [self.shared[k] for k, spec in (shared or {}).items()
                               if isinstance(spec, Mapping)]  # built here, so closed here
                factory = resolve(world, "data.env.world") if isinstance(world, str) else world
                self._runner = WorldRunner(factory, {**(world_kwargs or {}), **self.shared}, list(range(num_envs)),
                                           seed, self.step_timeout, retries)
            facts = self._runner.facts()
            spec = _action_spec(facts["action_spec"], facts["world_name"])
            if on_error == "retry":
                if isinstance(self._runner, WorldRunner):
                    self._runner.retry_any = True
                elif not isinstance(self._runner, WorkerProcesses):  # (worker processes were told when started)
                    raise ConfigError("data.env.init_args.on_error: retry needs runner: local (threads here, or "
                                      "worker processes with workers: P); with runner: ray use fail with "
                                      "`retries` and `retryable`")
        except ConfigError:
            self.close()
            raise
        self.world_name = facts["world_name"]
        self.observation_shape = facts["observation_shape"]
        self.action_spec = spec
        bank = task_ids if task_ids is not None else facts["tasks"]
        self.task_ids: Optional[list[str]] = list(bank) if bank is not None else None  # None: no tasks
        for attr, value in facts["extras"].items():  # optional facts the data module checks
            setattr(self, attr, value)
        self._tasks = [0] * num_envs  # bank index each actor works on
        self._held: dict[int, tuple] = {}  # per-actor collection: a finished step waiting for its world's reset
        self._dropping: dict[int, str] = {}  # actor -> why its trajectory was dropped (its reset is in flight)
        self._held_task: dict[int, int] = {}  # actor -> the task of the episode its held step finished

    @property
    def worker_pids(self) -> list[int]:
        """The world worker processes' (or Ray actors') pids (empty when the worlds run on threads here)."""
        return list(getattr(getattr(self, "_runner", None), "pids", []))

    @property
    def worlds(self) -> list[Any]:
        """The world objects (in this process; empty with worker processes)."""
        runner = getattr(self, "_runner", None)
        return list(runner.worlds.values()) if isinstance(runner, WorldRunner) else []

    # ------------------------------------------------------------------ concurrency
    def _task_name(self, i: int) -> str:
        bank = getattr(self, "task_ids", None)
        return repr(bank[self._tasks[i]]) if bank is not None else "(no task bank)"

    def _fail(self, i: int, method: str, why: str) -> ExternalWorldError:
        return ExternalWorldError(
            f"external world {self.world_name} actor {i} on task {self._task_name(i)}: {method} {why}"
        )

    def _run_all(self, method: str, args: dict[int, tuple]) -> dict[int, Any]:
        """Call `method(*args[i])` on every world i in `args` concurrently; every answer or an error (after
        close(), reset and step are refused at entry: the lifecycle)."""
        try:
            return self._runner.run_all(method, args)
        except WorldCallFailed as failed:
            raise self._fail(failed.actor, failed.method, failed.why) from failed.__cause__

    # ------------------------------------------------------------------ BatchedEnv
    def _obs_array(self, values: Sequence[Any], method: str = "step", actors: Optional[Sequence[int]] = None) -> np.ndarray:
        """[len(values), *observation_shape] float32 from the worlds' observations (`actors`: whose
        they are, for the error naming a malformed one). Each is real numbers (Python, numpy or a
        dense torch tensor of any real dtype; bools read as 0 / 1), flat or of the declared shape, and
        finite once cast to float32; anything else is the ExternalWorldError naming the actor."""
        shape = tuple(self.observation_shape)
        flat = (int(np.prod(shape)),)
        fits = (shape, flat, ()) if flat == (1,) else (shape, flat)  # a one-number observation may be a scalar
        out = None
        try:  # one conversion for the batch (flat lists or arrays of the same length: the common case)
            batch = np.asarray(values)
            if batch.dtype.kind in "biuf" and batch.shape[1:] in fits:  # numbers, the declared shape or flat
                with np.errstate(over="ignore", invalid="ignore"):  # beyond float32: inf, refused below by name
                    out = batch.astype(np.float32, copy=False).reshape(len(values), *shape)
        except (ValueError, TypeError, RuntimeError, OverflowError):
            pass
        if out is None:  # ragged, nested differently, not plain numbers or tensors: each world's value on its own
            rows = [self._obs_row(actors[k] if actors is not None else k, method, v, shape, fits)
                    for k, v in enumerate(values)]
            out = np.asarray(rows, dtype=np.float32).reshape(len(values), *shape)
        finite = np.isfinite(out.reshape(len(values), -1)).all(1)  # on the host already: no device read
        if not finite.all():
            k = int(np.argmin(finite))
            i = actors[k] if actors is not None else k
            raise self._fail(i, method, f"returned observation {_shown(values[k])} ({type(values[k]).__name__}) "
                                        "holding NaN or inf (as float32); field obs must be finite numbers")
        return out

    def _obs_row(self, i: int, method: str, v: Any, shape: tuple, fits: tuple) -> np.ndarray:
        """One world's observation as float32 of `shape`, or the ExternalWorldError naming it."""
        why = ""
        try:
            if isinstance(v, torch.Tensor):
                if v.is_meta or v.layout != torch.strided or v.is_complex():
                    why = (" (a meta tensor holds no data)" if v.is_meta else " (a complex tensor)" if
                           v.layout == torch.strided else " (a sparse tensor: call .to_dense() on it)")
                    raise ValueError(why)
                v_ = v.detach().cpu()
                row = (v_.float() if v_.is_floating_point() else v_).numpy()  # bfloat16 has no numpy dtype
            else:
                row = np.asarray(v)
            if row.dtype.kind not in "biuf" or row.shape not in fits:  # complex, strings, [[...]]
                raise ValueError(f"shape {row.shape}, dtype {row.dtype}")
            with np.errstate(over="ignore", invalid="ignore"):
                return row.astype(np.float32).reshape(shape)
        except (ValueError, TypeError, RuntimeError, OverflowError):
            want = int(np.prod(self.observation_shape))
            raise self._fail(i, method, f"returned observation {_shown(v)} ({type(v).__name__}); field obs "
                                        f"must be {want} numbers (observation_shape {list(self.observation_shape)}: "
                                        f"real, flat or of that shape){why}") from None

    def _number(self, i: int, field: str, value: Any) -> float:
        """A finite float from world i's `field` (`_scalar`: one real number, not a bool), or the
        ExternalWorldError naming it."""
        number, why = _scalar(value)
        if number is not None and math.isfinite(number) and abs(number) > FLOAT32_MAX:
            number, why = None, " (within float32's range, |x| <= 3.4e38: the rollout keeps float32)"
        if number is None or not math.isfinite(number):
            if field == "reward" and isinstance(value, (bool, np.bool_)):
                why = " (is the answer in the order (obs, reward, terminated, truncated, parts)?)"
            raise self._fail(i, "step", f"returned {field} {_shown(value)} ({type(value).__name__}); field {field} "
                                        f"must be a finite number{why}")
        return number

    def _flag(self, i: int, field: str, value: Any) -> bool:
        """World i's `terminated` / `truncated`: a bool (Python or numpy), an integer 0 or 1, or a 0-d
        array or tensor of either; anything else is the ExternalWorldError naming it."""
        v = value
        if isinstance(v, torch.Tensor) and not v.is_meta and v.layout == torch.strided and v.dim() == 0 \
                and not v.is_floating_point() and not v.is_complex():
            v = v.item()
        elif isinstance(v, np.ndarray) and v.ndim == 0 and v.dtype.kind in "biu":
            v = v.item()
        if isinstance(v, (bool, np.bool_)) or isinstance(v, (int, np.integer)) and v in (0, 1):
            return bool(v)
        raise self._fail(i, "step", f"returned {field} {_shown(value)} ({type(value).__name__}); field {field} must "
                                    "be a bool (or 0 / 1)")

    def _answer(self, i: int, answer: Any) -> tuple:
        """World i's step answer as its five values: a tuple (or list) of exactly five."""
        if not isinstance(answer, (tuple, list)) or len(answer) != 5:
            raise self._fail(i, "step", f"returned {_shown(answer, 200)} ({type(answer).__name__}); it must return "
                                        "(obs, reward, terminated, truncated, parts): a tuple of five")
        return tuple(answer)

    def _tensor(self, array: np.ndarray) -> Tensor:
        # Built in numpy, one tensor per field: every torch call releases and retakes the GIL, a
        # thread switch whenever the learner is waiting for it (data.max_policy_lag > 0).
        t = torch.from_numpy(array)
        return t if self.device.type == "cpu" else t.to(self.device)

    def _obs(self, values: Sequence[Any]) -> Tensor:
        return self._tensor(self._obs_array(values))

    def reset(self, *, seed: Optional[int] = None, task_index: Optional[Tensor] = None) -> Tensor:
        """Start every world (on `task_index` [N] bank indices where the world has tasks)."""
        if getattr(self, "task_ids", None) is not None:
            if task_index is not None:
                task_index = checked_task_index("ExternalBatchedEnv.reset(task_index)", task_index, self.num_envs,
                                                len(self.task_ids), torch.device("cpu"))
            idx = task_index.tolist() if task_index is not None else [i % len(self.task_ids) for i in range(self.num_envs)]
            self._tasks = [int(k) for k in idx]
        results = self._run_all("reset", {i: (self._task_arg(i),) for i in range(self.num_envs)})
        return self._tensor(self._obs_array([results[i] for i in range(self.num_envs)], "reset"))

    def _task_arg(self, i: int) -> Optional[str]:
        bank = getattr(self, "task_ids", None)
        return bank[self._tasks[i]] if bank is not None else None

    def _action_args(self, action: Tensor) -> list[Any]:
        values = action.detach()
        return (values if values.device.type == "cpu" else values.cpu()).tolist()

    def step(self, action: Tensor, next_task: Optional[Tensor | Callable[[Tensor], Tensor]] = None) -> StepResult:
        """Step every world concurrently; worlds whose episode ended are reset (concurrently) to
        `next_task` where given, else to the same task."""
        N = self.num_envs
        actions = self._action_args(action)
        out = self._run_all("step", {i: (actions[i],) for i in range(N)})
        obs, reward = [], []
        flags = np.zeros((3, N), dtype=np.bool_)  # terminated, truncated, done
        parts = np.zeros((len(PART_NAMES), N), dtype=np.float32)
        done_list = []
        for i in range(N):
            o, r, term, trunc, p = self._answer(i, out[i])
            obs.append(o)
            r = self._number(i, "reward", r)
            reward.append(r)
            term, trunc = self._flag(i, "terminated", term), self._flag(i, "truncated", trunc)
            if term or trunc:
                flags[0, i], flags[1, i], flags[2, i] = term, not term, True
                done_list.append(i)
                parts[:, i] = self._parts_row(i, r, p)
        final = self._obs_array(obs, "step")
        task_t = self._tensor(np.array(self._tasks, dtype=np.int64))
        term_t, trunc_t, done = self._tensor(flags).unbind(0)
        has_tasks = getattr(self, "task_ids", None) is not None
        next_obs = final.copy()
        if done_list:
            if has_tasks and next_task is not None:
                picked = next_task(done) if callable(next_task) else next_task
                picked = picked.tolist()
                for i in done_list:
                    self._tasks[i] = int(picked[i])
            fresh = self._run_all("reset", {i: (self._task_arg(i),) for i in done_list})
            next_obs[done_list] = self._obs_array([fresh[i] for i in done_list], "reset", done_list)
        elif has_tasks and callable(next_task):
            next_task(done)  # the sampler is asked every step, as by a tensor env
        episode = None
        if has_tasks:
            episode = EpisodeParts(task_t, *self._tensor(parts).unbind(0))
        reward_t = self._tensor(np.array(reward, dtype=np.float32))
        return StepResult(self._tensor(next_obs), reward_t, term_t, trunc_t, self._tensor(final), episode)

    # ------------------------------------------------------------------ per-actor collection
    @property
    def streams(self) -> bool:
        """Whether `send` / `receive` work: the worlds run on threads (or an event loop) here, or in
        worker processes (`workers: P`) that stream each answer back; not with `runner: ray`."""
        return bool(getattr(getattr(self, "_runner", None), "streams", False))

    def _lost(self, failed: WorldCallFailed) -> ExternalWorldError:
        """A worker process that died or went silent: one error naming it (its worlds are gone)."""
        return ExternalWorldError(f"external world {self.world_name}: {failed.why}")

    def send(self, actors: Sequence[int], action: Tensor) -> None:
        """Start a step of each world in `actors` ([M] ints, none with a call in flight) with its row of `action`."""
        try:
            self._runner.submit_many([(i, "step", (a,)) for i, a in zip(actors, self._action_args(action))])
        except WorkerLost as failed:
            raise self._lost(failed) from None

    def in_flight(self) -> int:
        """Calls started by `send` (or the resets they led to) whose answer has not been received."""
        return self._runner.in_flight()

    @property
    def replaced_worlds(self) -> int:
        """Worlds rebuilt after a call hung (`on_error: drop`)."""
        return int(getattr(self._runner, "replaced", 0))

    def _parse_step(self, i: int, answer: Any) -> tuple:
        """(obs, reward, terminated, truncated, parts row or None) of world i's step answer, or the error."""
        o, r, term, trunc, p = self._answer(i, answer)
        obs = self._obs_array([o], "step", [i])[0]
        r = self._number(i, "reward", r)
        term, trunc = self._flag(i, "terminated", term), self._flag(i, "truncated", trunc)
        row = None
        if term or trunc:
            row = self._parts_row(i, r, p)
        return obs, r, term, trunc and not term, row

    def _parts_row(self, i: int, r: float, p: Any) -> list[float]:
        if p is not None and not isinstance(p, Mapping):
            raise self._fail(i, "step", f"returned parts {_shown(p)} ({type(p).__name__}); field parts must be "
                                        f"None or a mapping of {list(PART_NAMES)}")
        p = dict(p or {})
        unknown = set(p) - set(PART_NAMES)
        if unknown:
            task = " (the task is the env's: it knows which task each actor works on)" if "task" in unknown else ""
            raise self._fail(i, "step", f"returned parts with unknown fields {sorted(unknown, key=repr)}; use "
                                        f"{list(PART_NAMES)}{task}")
        p.setdefault("outcome", min(max(r, 0.0), 1.0))
        row = [self._number(i, f"parts[{name!r}]", p.get(name, 0.0)) for name in PART_NAMES]
        for name, value in zip(PART_NAMES, row):  # the ranges the PARL reward, samplers and critical steps assume
            low, high = (0.0, 1.0) if name == "outcome" else (0.0, math.inf)
            if not low <= value <= high:
                need = "in [0, 1] (the task's outcome, r_perf)" if name == "outcome" else ">= 0 (a count or a time)"
                raise self._fail(i, "step", f"returned parts[{name!r}] {value:g}; field parts[{name!r}] must be {need}")
        return row

    def receive(self, next_task: Optional[Callable[[Tensor], Tensor]], timeout: float) -> Optional[Arrivals]:
        """The actors whose world answered (waiting up to `timeout` seconds for the first; None if
        none did). An actor whose episode ended is reset (to `next_task(reset_mask)`'s pick where the
        world has tasks) and arrives when its reset answers, with its step's reward, flags, final
        observation and parts. A call that fails follows `on_error` (see the class docstring)."""
        runner = self._runner  # (before reset, after close: refused at entry, the lifecycle)
        ready: list[tuple] = []  # (actor, obs, reward, term, trunc, final_obs, parts_row, task, dropped)
        resets: list[int] = []
        failures: list[str] = []
        retries, busy = 0, 0.0
        try:
            answers = runner.answers(timeout)
        except WorkerLost as failed:  # not one world's failure: `on_error` does not apply
            raise self._lost(failed) from None
        for ans in answers:
            i = ans.i
            retries += ans.attempts
            busy += ans.busy
            try:
                if not ans.ok:
                    why = ans.value.why if isinstance(ans.value, WorldCallFailed) else runner.raised(
                        ans.value, ans.attempts, ans.value)
                    raise self._fail(i, ans.method, why)
                if ans.method == "step":
                    parsed = self._parse_step(i, ans.value)
                    if parsed[2] or parsed[3]:
                        self._held[i] = parsed
                        resets.append(i)
                    else:
                        ready.append((i, parsed[0], parsed[1], False, False, parsed[0], None, self._tasks[i], False))
                else:  # reset
                    obs = self._obs_array([ans.value], "reset", [i])[0]
                    if i in self._dropping:
                        self._dropping.pop(i)
                        self._held.pop(i, None)
                        ready.append((i, obs, 0.0, False, False, obs, None, self._tasks[i], True))
                    else:
                        o, r, term, trunc, row = self._held.pop(i)
                        ready.append((i, obs, r, term, trunc, o, row, self._held_task.pop(i, self._tasks[i]), False))
            except ExternalWorldError as err:
                if self.on_error != "drop":
                    raise
                failures.append(str(err))
                if isinstance(ans.value, WorldCallFailed) and not ans.ok:
                    try:  # hung: its thread is abandoned, a fresh world takes its place
                        runner.replace(i)
                    except WorkerLost as failed:
                        raise self._lost(failed) from None
                self._held.pop(i, None)
                self._held_task.pop(i, None)
                self._dropping[i] = str(err)
                resets.append(i)
        if resets:
            fresh = list(dict.fromkeys(resets))
            if getattr(self, "task_ids", None) is not None and next_task is not None:
                mask = np.zeros(self.num_envs, dtype=np.bool_)  # numpy: no torch call (each may hand off the GIL)
                mask[fresh] = True
                picked = next_task(self._tensor(mask)).tolist()
                for i in fresh:
                    if i in self._held:
                        self._held_task[i] = self._tasks[i]  # the finished episode's task, for its parts
                    self._tasks[i] = int(picked[i])
            try:
                runner.submit_many([(i, "reset", (self._task_arg(i),)) for i in fresh])
            except WorkerLost as failed:
                raise self._lost(failed) from None
        if not ready:
            return None if not failures else Arrivals(*self._empty(), failures, retries, busy)
        return self._arrivals(ready, failures, retries, busy)

    def _empty(self) -> tuple:
        e = torch.zeros(0, device=self.device)
        obs = torch.zeros(0, *self.observation_shape, device=self.device)
        parts = None
        if getattr(self, "task_ids", None) is not None:
            parts = EpisodeParts(torch.zeros(0, dtype=torch.long, device=self.device),
                                 *(e for _ in PART_NAMES))
        return (torch.zeros(0, dtype=torch.long, device=self.device), obs, e, e.bool(), e.bool(), obs, parts,
                e.bool())

    def _arrivals(self, ready: list[tuple], failures: list[str], retries: int, busy: float) -> Arrivals:
        M = len(ready)
        actors = np.array([r[0] for r in ready], dtype=np.int64)
        obs = np.stack([r[1] for r in ready])
        final = np.stack([r[5] for r in ready])
        reward = np.array([r[2] for r in ready], dtype=np.float32)
        flags = np.array([[r[3] for r in ready], [r[4] for r in ready], [r[8] for r in ready]], dtype=np.bool_)
        parts = part_rows = None
        if getattr(self, "task_ids", None) is not None:
            rows = np.zeros((1 + len(PART_NAMES), M), dtype=np.float32)  # task, then the parts
            rows[0] = [r[7] for r in ready]
            for k, r in enumerate(ready):
                if r[6] is not None:
                    rows[1:, k] = r[6]
            tasks = self._tensor(rows[0].astype(np.int64))
            part_rows = self._tensor(np.ascontiguousarray(rows.T))
            parts = EpisodeParts(tasks, *part_rows[:, 1:].unbind(1))
        term, trunc, dropped = self._tensor(flags).unbind(0)
        return Arrivals(self._tensor(actors), self._tensor(obs), self._tensor(reward), term, trunc, self._tensor(final),
                        parts, dropped, failures, retries, busy, part_rows, bool(flags[0].any() or flags[1].any()),
                        bool(flags[2].any()))

    # ------------------------------------------------------------------ lifecycle
    def state_dict(self) -> dict[str, Any]:
        return {"tasks": torch.tensor(self._tasks, dtype=torch.long)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state("ExternalBatchedEnv", state, self.state_dict(), optional=("tasks",))  # the shared state check
        if "tasks" in state:
            self._tasks = [int(k) for k in state["tasks"].tolist()]

    def close(self) -> None:
        """Close every world and shared resource (ending pool and world worker processes); idempotent."""
        if self._closed:
            return
        self._closed = True
        runner = getattr(self, "_runner", None)
        if runner is not None:
            runner.close()
        if self._switch_interval is not None:
            sys.setswitchinterval(self._switch_interval)
        close_all(getattr(self, "_owned", ()))
        warn_close_errors(runner)  # warned, not raised: everything else is closed, and a finished run is complete

    def __del__(self) -> None:  # a forgotten close() must not leave pool processes behind
        try:
            self.close()
        except Exception:
            pass
