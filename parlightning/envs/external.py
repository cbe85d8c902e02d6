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

Why threads, not processes, for the worlds: an external world spends its step *waiting* (on a
subagent, a socket, a subprocess), and waiting releases the GIL, so threads overlap N waits for
the price of none of the pickling, process start-up or copied task data of processes. Sync
worlds get one daemon thread each (a world is only ever touched by its own thread, so it need
not be thread-safe); `async def` worlds share one event loop in one daemon thread, which is how
thousands of concurrent HTTP worlds stay cheap. Work that burns CPU in Python or may hang for
good belongs in a `ProcessPool` (parlightning.subagents), whose workers can be killed: a hung
thread cannot. So a world that hangs ends the run with `ExternalWorldError` after
`step_timeout` seconds naming the actor and its task, and its thread is abandoned (daemon, it
never blocks interpreter exit); a world that raises is retried `retries` times, then ends the
run the same way. `close()` closes every world and every `shared` resource (pools), which ends
their worker processes.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import math
import queue
import sys
import threading
import time
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence

import numpy as np
import torch
from torch import Tensor

from parlightning.envs.base import ActionSpec, BatchedEnv, EpisodeParts, StepResult
from parlightning.errors import ConfigError

PART_NAMES = EpisodeParts._fields[1:]  # everything but `task`, which the adapter knows


class ExternalWorldError(RuntimeError):
    """An external world raised or hung; the message names the actor, its task and the call."""


class World(Protocol):
    """One episode at a time of a world that is not a tensor program (methods may be `async def`)."""

    observation_shape: Sequence[int]
    action_spec: ActionSpec

    def reset(self, task: Optional[str]) -> Any: ...

    def step(self, action: Any) -> tuple[Any, float, bool, bool, Optional[Mapping[str, float]]]: ...


def resolve(path: str, field: str = "import path") -> Any:
    """The object at an import path, `package.module:attr` or `package.module.attr`."""
    if not isinstance(path, str) or not path:
        raise ConfigError(f"{field}: expected 'package.module:name', got {path!r}")
    module, _, attr = path.partition(":") if ":" in path else path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigError(f"{field}: {path!r} is not importable ({err}); name it as 'package.module:name'") from None


def build_shared(specs: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """Instantiate each `{class_path, init_args}` spec once (e.g. one subagent pool for all worlds)."""
    built: dict[str, Any] = {}
    for name, spec in (specs or {}).items():
        if isinstance(spec, Mapping):
            unknown = sorted(set(spec) - {"class_path", "init_args"})
            if unknown or "class_path" not in spec:  # e.g. a dotted command-line override lands as a literal key
                raise ConfigError(
                    f"data.env.init_args.shared.{name}: needs class_path (and init_args), got keys {sorted(spec)} "
                    "(dotted overrides do not reach inside `shared`: pass the whole spec as JSON or in YAML)")
            cls = resolve(spec["class_path"], f"data.env.init_args.shared.{name}.class_path")
            try:
                built[name] = cls(**dict(spec.get("init_args") or {}))
            except (TypeError, ValueError) as err:
                for resource in built.values():  # the ones already built are not leaked
                    close = getattr(resource, "close", None)
                    if callable(close):
                        close()
                raise ConfigError(f"data.env.init_args.shared.{name}: {err}") from None
        else:
            built[name] = spec
    return built


def _action_spec(spec: Any) -> ActionSpec:
    if isinstance(spec, ActionSpec):
        return spec
    if isinstance(spec, Mapping):
        return ActionSpec(spec["kind"], nvec=tuple(spec.get("nvec", ())), shape=tuple(spec.get("shape", ())),
                          low=spec.get("low"), high=spec.get("high"))
    raise ConfigError(f"data.env.world: action_spec must be an ActionSpec or a mapping, got {spec!r}")


def _accepts(fn: Callable, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


class _Batch:
    """One batch of calls in flight: each actor files its answer here, and the caller is woken
    once, when the last answer is in or as soon as one call raised (a binary semaphore, `wake`),
    not once per answer: every wake-up is a thread switch and a GIL hand-over the learner pays for
    under `data.max_policy_lag`. An abandoned batch (timeout, error) takes late answers harmlessly."""

    __slots__ = ("results", "errors", "pending", "lock", "wake", "signalled")

    def __init__(self, pending: int) -> None:
        self.results: dict[int, Any] = {}
        self.errors: list[tuple[int, BaseException]] = []
        self.pending = pending
        self.lock = threading.Lock()
        self.wake = threading.Lock()
        self.wake.acquire()  # released (once) by the answer that completes the batch, or by an error
        self.signalled = False

    def answer(self, i: int, ok: bool, value: Any) -> None:
        with self.lock:
            if ok:
                self.results[i] = value
                self.pending -= 1
            else:
                self.errors.append((i, value))
            if (self.pending == 0 or not ok) and not self.signalled:
                self.signalled = True
                self.wake.release()


class _ThreadActor:
    """One sync world on its own daemon thread: calls arrive in `inbox` (a C-level SimpleQueue:
    no Python-level Condition per call), answers go to the call's `_Batch`."""

    def __init__(self, index: int, world: Any) -> None:
        self.index, self.world = index, world
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=f"external-world-{index}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        get, index, world = self.inbox.get, self.index, self.world
        while True:
            job = get()
            if job is None:
                return
            batch, method, args = job
            try:
                value = getattr(world, method)(*args)
            except BaseException as err:  # reported to the caller, never swallowed
                batch.answer(index, False, err)
            else:
                batch.answer(index, True, value)


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
        step_timeout: seconds a reset or step may take before the run ends with an error.
        retries: times a call that raised is repeated before the run ends with its error.
        switch_interval: the interpreter's GIL switch interval while the env is open (seconds;
            None leaves it). Python's default, 5 ms, lets a computing thread (the learner, under
            `data.max_policy_lag`) hold the GIL for up to 5 ms while a world thread whose wait just
            ended queues for it (0.5 ms gave about 1.6x -> 1.7x env steps/s at lag 1 and 5 ms latency in
            an ad-hoc trial). Only ever lowered, and restored by `close()`.
    """

    checkpoint_exact = False  # an external world's internals cannot be saved: episodes restart on resume

    def __init__(
        self,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        *,
        world: Any,
        world_kwargs: Optional[dict[str, Any]] = None,
        shared: Optional[dict[str, dict[str, Any]]] = None,
        task_ids: Optional[list[str]] = None,
        step_timeout: float = 60.0,
        retries: int = 0,
        switch_interval: Optional[float] = 0.0005,
    ) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs <= 0:
            raise ConfigError(f"data.env.num_envs: must be a positive integer, got {num_envs!r}")
        if not (isinstance(step_timeout, (int, float)) and step_timeout > 0 and math.isfinite(step_timeout)):
            raise ConfigError(f"data.env.step_timeout: must be a positive number of seconds, got {step_timeout!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ConfigError(f"data.env.retries: must be an integer >= 0, got {retries!r}")
        self.num_envs, self.device = num_envs, torch.device(device)
        self.step_timeout, self.retries = float(step_timeout), retries
        self._closed = False
        self._switch_interval = None
        if switch_interval is not None and switch_interval < sys.getswitchinterval():
            self._switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(switch_interval)
        self.shared = build_shared(shared)
        self._owned = [self.shared[k] for k, spec in (shared or {}).items()
                       if isinstance(spec, Mapping)]  # built here, so closed here
        factory = resolve(world, "data.env.world") if isinstance(world, str) else world
        self.world_name = getattr(factory, "__name__", type(factory).__name__)
        kwargs = {**(world_kwargs or {}), **self.shared}
        self.worlds = []
        try:
            for i in range(num_envs):
                extra = {k: v for k, v in (("seed", seed + i), ("actor", i)) if _accepts(factory, k)}
                self.worlds.append(factory(**kwargs, **extra))
        except ConfigError:
            self.close()
            raise
        except Exception as err:
            self.close()
            raise ConfigError(f"data.env.world: {self.world_name}(**world_kwargs) failed for actor "
                              f"{len(self.worlds)}: {type(err).__name__}: {err}") from err
        first = self.worlds[0]
        for attr in ("observation_shape", "action_spec"):
            if not hasattr(first, attr):
                self.close()
                raise ConfigError(f"data.env.world: {self.world_name} has no `{attr}`; an external world declares it")
        self.observation_shape = tuple(int(d) for d in first.observation_shape)
        self.action_spec = _action_spec(first.action_spec)
        bank = task_ids if task_ids is not None else getattr(first, "tasks", None)
        self.task_ids: Optional[list[str]] = list(bank) if bank is not None else None  # None: no tasks
        for attr in ("solved_threshold", "max_subagents"):  # optional facts the data module checks
            if hasattr(first, attr):
                setattr(self, attr, getattr(first, attr))
        self._tasks = [0] * num_envs  # bank index each actor works on
        self._async = inspect.iscoroutinefunction(first.step)
        if self._async:
            self._loop = asyncio.new_event_loop()
            self._loop_thread = threading.Thread(target=self._loop.run_forever, name="external-worlds-loop",
                                                 daemon=True)
            self._loop_thread.start()
        else:
            self._actors = [_ThreadActor(i, w) for i, w in enumerate(self.worlds)]

    # ------------------------------------------------------------------ concurrency
    def _task_name(self, i: int) -> str:
        bank = getattr(self, "task_ids", None)
        return repr(bank[self._tasks[i]]) if bank is not None else "(no task bank)"

    def _fail(self, i: int, method: str, why: str) -> ExternalWorldError:
        return ExternalWorldError(
            f"external world {self.world_name} actor {i} on task {self._task_name(i)}: {method} {why}"
        )

    def _run_all(self, method: str, args: dict[int, tuple]) -> dict[int, Any]:
        """Call `method(*args[i])` on every world i in `args` concurrently; every answer or an error."""
        if self._closed:
            raise RuntimeError(f"ExternalBatchedEnv: {method} after close()")
        if not args:
            return {}
        if self._async:
            return self._run_async(method, args)
        attempts = dict.fromkeys(args, 0)
        batch = _Batch(len(args))
        actors = self._actors
        for i, a in args.items():
            actors[i].inbox.put((batch, method, a))
        deadline = time.monotonic() + self.step_timeout
        while True:
            woke = batch.wake.acquire(timeout=max(deadline - time.monotonic(), 0.0))
            with batch.lock:
                errors, batch.errors = batch.errors, []
                if woke:
                    batch.signalled = False  # re-armed: the next completion or error releases it again
                if not errors and batch.pending == 0:
                    return batch.results
                if not woke and not errors:
                    late = min(set(args) - set(batch.results))
                    raise self._fail(late, method, f"did not return within step_timeout={self.step_timeout:g}s "
                                                   "(raise data.env.init_args.step_timeout if it is just slow)")
            for i, value in errors:
                if attempts[i] < self.retries:
                    attempts[i] += 1
                    actors[i].inbox.put((batch, method, args[i]))
                else:
                    raise self._fail(i, method, f"raised {type(value).__name__}: {value}"
                                                f"{f' (after {self.retries} retries)' if self.retries else ''}") from value

    def _run_async(self, method: str, args: dict[int, tuple]) -> dict[int, Any]:
        async def one(i: int) -> Any:
            for attempt in range(self.retries + 1):
                try:
                    return await asyncio.wait_for(getattr(self.worlds[i], method)(*args[i]), self.step_timeout)
                except asyncio.TimeoutError:
                    raise self._fail(i, method, f"did not return within step_timeout={self.step_timeout:g}s "
                                                "(raise data.env.init_args.step_timeout if it is just slow)") from None
                except Exception as err:
                    if attempt == self.retries:
                        raise self._fail(i, method, f"raised {type(err).__name__}: {err}"
                                                    f"{f' (after {self.retries} retries)' if self.retries else ''}"
                                         ) from err

        async def gather() -> list[Any]:
            return await asyncio.gather(*(one(i) for i in args))

        future = asyncio.run_coroutine_threadsafe(gather(), self._loop)
        try:
            values = future.result(timeout=self.step_timeout * (self.retries + 1) + 5.0)
        except TimeoutError:
            future.cancel()
            raise self._fail(min(args), method, "and its event loop stopped answering") from None
        return dict(zip(args, values))

    # ------------------------------------------------------------------ BatchedEnv
    def _obs_array(self, values: Sequence[Any]) -> np.ndarray:
        """[len(values), *observation_shape] float32 from the worlds' observations."""
        try:  # one conversion for the batch (flat lists or arrays of the same length: the common case)
            return np.asarray(values, dtype=np.float32).reshape(len(values), *self.observation_shape)
        except (ValueError, TypeError):  # ragged or nested differently: each world's value on its own
            return np.asarray([np.asarray(v, dtype=np.float32).reshape(self.observation_shape) for v in values])

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
            idx = task_index.tolist() if task_index is not None else [i % len(self.task_ids) for i in range(self.num_envs)]
            self._tasks = [int(k) for k in idx]
        results = self._run_all("reset", {i: (self._task_arg(i),) for i in range(self.num_envs)})
        return self._obs([results[i] for i in range(self.num_envs)])

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
            try:
                o, r, term, trunc, p = out[i]
            except (TypeError, ValueError):
                raise self._fail(i, "step", f"returned {out[i]!r:.200}; it must return "
                                            "(obs, reward, terminated, truncated, parts)") from None
            obs.append(o)
            reward.append(float(r))
            if term or trunc:
                flags[0, i], flags[1, i], flags[2, i] = bool(term), not bool(term), True
                done_list.append(i)
                p = dict(p or {})
                unknown = set(p) - set(PART_NAMES)
                if unknown:
                    raise self._fail(i, "step", f"returned parts with unknown fields {sorted(unknown)}; "
                                                f"use {list(PART_NAMES)}")
                p.setdefault("outcome", min(max(float(r), 0.0), 1.0))
                parts[:, i] = [float(p.get(name, 0.0)) for name in PART_NAMES]
        final = self._obs_array(obs)
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
            next_obs[done_list] = self._obs_array([fresh[i] for i in done_list])
        elif has_tasks and callable(next_task):
            next_task(done)  # the sampler is asked every step, as by a tensor env
        episode = None
        if has_tasks:
            episode = EpisodeParts(task_t, *self._tensor(parts).unbind(0))
        reward_t = self._tensor(np.array(reward, dtype=np.float32))
        return StepResult(self._tensor(next_obs), reward_t, term_t, trunc_t, self._tensor(final), episode)

    # ------------------------------------------------------------------ lifecycle
    def state_dict(self) -> dict[str, Any]:
        return {"tasks": torch.tensor(self._tasks, dtype=torch.long)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "tasks" in state:
            self._tasks = [int(k) for k in state["tasks"].tolist()]

    def close(self) -> None:
        """Close every world and shared resource (ending pool worker processes); idempotent."""
        if self._closed:
            return
        self._closed = True
        for actor in getattr(self, "_actors", ()):
            actor.inbox.put(None)
        for actor in getattr(self, "_actors", ()):
            actor.thread.join(timeout=1.0)  # a hung world stays behind as an abandoned daemon thread
        loop = getattr(self, "_loop", None)
        for world in getattr(self, "worlds", ()):
            close = getattr(world, "close", None)
            if callable(close):
                try:
                    result = close()
                    if inspect.isawaitable(result) and loop is not None:
                        asyncio.run_coroutine_threadsafe(result, loop).result(timeout=5.0)
                except Exception:  # closing the rest matters more than one world's close error
                    pass
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            self._loop_thread.join(timeout=1.0)
        if self._switch_interval is not None:
            sys.setswitchinterval(self._switch_interval)
        for resource in getattr(self, "_owned", ()):
            close = getattr(resource, "close", None)
            if callable(close):
                close()

    def __del__(self) -> None:  # a forgotten close() must not leave pool processes behind
        try:
            self.close()
        except Exception:
            pass
