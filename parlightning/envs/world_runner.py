"""`WorldRunner`: N external worlds built in this process and called concurrently (one daemon
thread per sync world, one event loop for `async def` worlds), with per-call timeouts and retries.

The concurrency half of `ExternalBatchedEnv`; `WorkerProcesses` runs one of these in each worker
process. A call that fails raises `WorldCallFailed` naming the actor and why; the env adds the
task and turns it into `ExternalWorldError`.
"""

from __future__ import annotations

import asyncio
import heapq
import importlib
import inspect
import queue
import threading
import time
import warnings
from typing import Any, Callable, Mapping, Optional, Sequence

from parlightning.config_types import check_args
from parlightning.envs.contract import shape_problem, task_ids_problem
from parlightning.errors import ConfigError, WorldCloseWarning, check_call_shape, error_text
from parlightning.method_args import checked
from parlightning.runtime.waits import expected_wait

TIMEOUT_HINT = "(raise data.env.init_args.step_timeout if it is just slow)"


LIFECYCLE_FLOOR_S = 10.0  # a world's constructor and close() may take max(step_timeout, this) seconds


class CloseTimeout(Exception):
    """A world's close() (or a worker process closing its worlds) did not return within its bound."""


def run_bounded(fn: Callable[[], Any], seconds: float, what: str) -> tuple[str, Any]:
    """Call `fn()` on a daemon thread and wait at most `seconds` (a declared wait): `("ok", value)`,
    `("raised", exc)` or `("hung", None)` (the thread is abandoned: a daemon never keeps the process)."""
    box: list = []

    def call() -> None:
        try:
            box.append(("ok", fn()))
        except BaseException as err:  # noqa: BLE001 (handed to the caller)
            box.append(("raised", err))

    thread = threading.Thread(target=call, name=f"external-world-{what}", daemon=True)
    thread.start()
    with expected_wait(seconds, what):
        thread.join(seconds)
    return box[0] if box else ("hung", None)


DEFAULT_RETRYABLE = (ConnectionError, TimeoutError)  # what `retries` repeats unless a world declares `retryable`


class WorldCallFailed(Exception):
    """World `actor`'s `method` raised or hung: `why` says which (the env names the task)."""

    def __init__(self, actor: int, method: str, why: str) -> None:
        super().__init__(actor, method, why)
        self.actor, self.method, self.why = actor, method, why


def resolve(path: str, field: str = "import path") -> Any:
    """The object at an import path, `package.module:attr` or `package.module.attr`."""
    if not isinstance(path, str) or not path:
        raise ConfigError(f"{field}: expected 'package.module:name', got {path!r}")
    module, _, attr = path.partition(":") if ":" in path else path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigError(f"{field}: {path!r} is not importable ({err}); name it as 'package.module:name'") from None


def close_all(resources: Sequence[Any]) -> None:
    """Call `close()` on each resource that has one; one resource's error never stops the rest."""
    for resource in resources:
        close = getattr(resource, "close", None)
        if callable(close):
            try:
                close()
            except Exception:
                pass


def warn_close_errors(runner: Any) -> None:
    """One `WorldCloseWarning` for the worlds whose `close()` raised (`runner.close_errors`, after
    `runner.close()`), naming the world, the first error and the actors; nothing when none did."""
    failed = list(getattr(runner, "close_errors", ()))
    if not failed:
        return
    actors = ", ".join(str(i) for i, _ in failed[:8]) + (", ..." if len(failed) > 8 else "")
    err = failed[0][1]
    if isinstance(err, CloseTimeout):
        warnings.warn(f"data.env.world: {getattr(runner, 'world_name', 'the world')}.close() (actor {actors}) "
                      f"{err}; abandoned, the rest was closed and anything already written (checkpoints) is kept; "
                      "make close() return promptly (or raise data.env.init_args.step_timeout if it is just slow)",
                      WorldCloseWarning, stacklevel=3)
        return
    warnings.warn(f"data.env.world: {getattr(runner, 'world_name', 'the world')}.close() raised {type(err).__name__}: "
                  f"{error_text(err)[:160]} (actor {actors}); the rest was closed; fix close() (make it idempotent "
                  "and let it not raise when its resource is already gone)", WorldCloseWarning, stacklevel=3)


@checked
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
                _check_plain_types(f"data.env.init_args.shared.{name}.init_args", cls, dict(spec.get("init_args") or {}))
                built[name] = cls(**dict(spec.get("init_args") or {}))
            except (TypeError, ValueError) as err:
                close_all(list(built.values()))  # the ones already built are not leaked
                raise ConfigError(f"data.env.init_args.shared.{name}: {err}") from None
        else:
            built[name] = spec
    return built


def _check_plain_types(prefix: str, cls: Any, kwargs: Mapping[str, Any]) -> None:
    """A `shared` resource's (or a world's) init_args against its constructor's annotations, with the
    package's one checker (`config_types.check_args`: plain int / float / str / bool and the constrained
    ranges): the YAML parser does not type what sits inside `shared` or `world_kwargs`, so a `seed: abc`
    would otherwise reach the class as a string. ConfigError `"{prefix}.{key}: must ..."`."""
    try:
        init = cls.__init__
        inspect.signature(init)
    except (TypeError, ValueError, AttributeError):  # no readable signature: the class checks its own arguments
        return
    check_args(prefix, init, dict(kwargs))


def accepts(fn: Callable, name: str) -> bool:
    """Whether `fn` takes a keyword argument `name` (by name or through **kwargs)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def factory_name(factory: Any) -> str:
    return getattr(factory, "__name__", type(factory).__name__)


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


class _StreamCall:
    """One call of the stream interface: its answer goes to the stream's queue with its ticket (a
    late answer of a call given up on is recognised by its stale ticket and ignored)."""

    __slots__ = ("sink", "ticket")

    def __init__(self, sink: queue.SimpleQueue, ticket: int) -> None:
        self.sink, self.ticket = sink, ticket

    def answer(self, i: int, ok: bool, value: Any) -> None:
        self.sink.put((i, self.ticket, ok, value, time.perf_counter()))


class StreamAnswer:
    """What `answers` returns per finished call (`WorldRunner`'s, or `WorkerProcesses'` from its
    workers' runners): actor `i`, `method`, `ok`, `value` (the world's answer, or the exception / a
    `WorldCallFailed` for a timeout), `seconds` it took, `attempts` (retries used), `busy`: the
    seconds the world says the call kept it waiting (the growth of its `busy_seconds`, where it
    keeps one: the calls it waited for as drawn, not when the host noticed), else `seconds`."""

    __slots__ = ("i", "method", "ok", "value", "seconds", "attempts", "busy")

    def __init__(self, i: int, method: str, ok: bool, value: Any, seconds: float, attempts: int,
                 busy: Optional[float] = None) -> None:
        self.i, self.method, self.ok, self.value, self.seconds, self.attempts = i, method, ok, value, seconds, attempts
        self.busy = seconds if busy is None else busy


def describe_raised(first: BaseException, attempts: int = 0, last: Optional[BaseException] = None,
                    retries: int = 0) -> str:
    """What a failed call's message says of its exception(s) (`retries`: the calls' retry budget)."""
    text = f"raised {type(first).__name__}: {error_text(first)[:300]}"
    if attempts:
        again = "" if last is None or last is first else f"; the last raised {type(last).__name__}: {error_text(last)[:300]}"
        text += f" (the first error; retried {attempts} times{again})"
    elif retries and last is not None:
        text += (f" (not retried: {type(first).__name__} is not in the world's `retryable`, default "
                 "(ConnectionError, TimeoutError))")
    return text


_POSTED = object()  # marks a message posted into a runner's answer queue (`WorldRunner.post`)


_DECLARED = ("observation_shape", "action_spec", "tasks")  # what every world of one env must declare alike


def _comparable(key: str, value: Any) -> Any:
    """A declared fact in a form `==` compares by value (None: not comparable, e.g. a user's spec
    object without `__eq__`)."""
    if key == "observation_shape":
        try:
            return tuple(int(d) for d in value)
        except Exception:  # noqa: BLE001 (the first world's own fact was checked; another's fails the comparison)
            return value
    if key == "tasks":
        return None if value is None else list(value) if isinstance(value, (list, tuple)) else value
    return value if isinstance(value, Mapping) or type(value).__eq__ is not object.__eq__ else None


def facts_disagreement(world: str, first_actor: int, first: Mapping[str, Any], actor: int,
                       other: Mapping[str, Any]) -> Optional[str]:
    """The one line when actor `actor`'s world declares an observation shape, action spec or task bank
    other than actor `first_actor`'s (the env reads them once, from the first world), else None."""
    for key in _DECLARED:
        a, b = _comparable(key, first.get(key)), _comparable(key, other.get(key))
        if key == "action_spec" and (a is None or b is None):
            continue
        try:
            differ = bool(a != b)
        except Exception:  # noqa: BLE001 (an array-like whose comparison has no single truth value)
            differ = True
        if differ:
            fix = "build them alike" + (", or give the bank as data.env.init_args.task_ids" if key == "tasks" else "")
            return (f"data.env.world: the {world} worlds disagree on `{key}`: actor {actor}'s is {b!r:.100} but actor "
                    f"{first_actor}'s is {a!r:.100}; every world of one env must declare the same {key} (the env "
                    f"reads it once, from actor {first_actor}'s world): {fix}")
    return None


class WorldRunner:
    """Worlds for actors `actors` (global indices: world i is built with `seed + i`, `actor=i`
    where its factory takes them), called concurrently by `run_all` (a batch: every answer or the
    first failure) or one actor at a time by `submit` / `answers` (the stream interface of
    per-actor asynchronous collection: each call has its own deadline, `replace` builds a fresh
    world for an actor whose call hung). `WorkerProcesses` offers the same two interfaces over
    worker processes, each running one of these (`streams = True` on both: a collector that steps
    each world on its own works with either and never asks which).

    Args:
        factory: the world class or factory; kwargs: its keyword arguments (shared resources included).
        step_timeout: seconds one call may take; retries: repeats of a call that raised.
    """

    streams = True  # submit_many / answers / in_flight / replace / raised

    def __init__(self, factory: Callable[..., Any], kwargs: Mapping[str, Any], actors: Sequence[int], seed: int,
                 step_timeout: float, retries: int) -> None:
        self.step_timeout, self.retries = step_timeout, retries
        self.world_name = factory_name(factory)
        self.close_errors: list[tuple[int, BaseException]] = []  # (actor, what its world's close() raised)
        self._factory, self._kwargs, self._seed = factory, kwargs, seed
        self._sink: queue.SimpleQueue = queue.SimpleQueue()  # the stream interface's answers
        self._calls: dict[int, tuple[int, str, tuple, float, int]] = {}  # actor -> (ticket, method, args, t0, tries)
        self._deadlines: list[tuple[float, int, int]] = []  # heap of (deadline, actor, ticket)
        self._tickets = 0
        self._busy_seen: dict[int, float] = {}  # actor -> its world's `busy_seconds` at its last answer
        self._posted: list[Any] = []  # messages `post`ed into the answer queue, for `take_posted`
        self.replaced = 0  # worlds rebuilt after a hung call
        self.retry_any = False  # on_error: retry repeats every exception, not only the world's `retryable`
        self.on_answer: Optional[Callable[[], None]] = None  # called in the event loop after each async answer
        self.worlds: dict[int, Any] = {}
        self._actors: dict[int, _ThreadActor] = {}
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        for i in actors:
            try:
                self.worlds[i] = self._build_bounded(i, seed + i)
            except ConfigError:
                self.close()
                raise
            except Exception as err:
                self.close()
                raise ConfigError(f"data.env.world: {self.world_name}(**world_kwargs) failed for actor {i}: "
                                  f"{type(err).__name__}: {error_text(err)}") from err
        self.first = self.worlds[actors[0]]
        self.is_async = inspect.iscoroutinefunction(self.first.step)
        if self.is_async:
            self._loop = asyncio.new_event_loop()
            self._loop_thread = threading.Thread(target=self._loop.run_forever, name="external-worlds-loop",
                                                 daemon=True)
            self._loop_thread.start()
        else:
            self._actors = {i: _ThreadActor(i, w) for i, w in self.worlds.items()}

    @property
    def lifecycle_timeout(self) -> float:
        """Seconds a world's constructor or close() may take: step_timeout, at least 10 s."""
        return max(self.step_timeout, LIFECYCLE_FLOOR_S)

    def _build_bounded(self, i: int, seed: int) -> Any:
        """`_build` on a daemon thread, bounded by `lifecycle_timeout`: a constructor that never
        returns (a login that never answers) is a ConfigError naming the world, the actor and the bound."""
        bound = self.lifecycle_timeout
        status, value = run_bounded(lambda: self._build(i, seed), bound, f"{self.world_name}'s constructor "
                                                                           f"(actor {i}, step_timeout)")
        if status == "ok":
            return value
        if status == "raised":
            raise value
        raise ConfigError(f"data.env.world: {self.world_name}(**world_kwargs) for actor {i}: its constructor did not "
                          f"return within {bound:g}s (a world's constructor and close() are bounded by step_timeout="
                          f"{self.step_timeout:g}s, at least {LIFECYCLE_FLOOR_S:g}s); it was abandoned; raise "
                          "data.env.init_args.step_timeout if it is just slow, else fix the constructor")

    def _build(self, i: int, seed: int) -> Any:
        factory = self._factory
        extra = {k: v for k, v in (("seed", seed), ("actor", i)) if accepts(factory, k)}
        world = factory(**self._kwargs, **extra)
        if world is None or isinstance(world, type) or not all(callable(getattr(world, m, None))
                                                               for m in ("reset", "step")):
            name = getattr(factory, "__qualname__", type(factory).__name__)
            raise ConfigError(f"data.env.world: {name}(...) returned {world!r:.60}, not a world; the world (a class or "
                              "a function returning one world) gives objects with reset(task) and step(action)")
        name = type(world).__qualname__  # a signature read per built world: construction only, never per step
        check_call_shape("data.env.world", name, "reset", world.reset, ("task",), caller="the env (per episode)")
        check_call_shape("data.env.world", name, "step", world.step, ("action",), caller="the env (per step)")
        return world

    def facts(self) -> dict[str, Any]:
        """What the env reads from the first world: shapes, spec, task bank, optional facts. A fact
        that raises when read (a property whose bank is not loaded) is one ConfigError naming the
        world's class and the attribute, not its constructor."""
        first = self.first
        missing = object()

        def read(attr: str) -> Any:
            try:
                return getattr(first, attr, missing)
            except Exception as err:  # noqa: BLE001 (the world's own property: named, whatever it raised)
                raise ConfigError(f"data.env.world: reading {self.world_name}.{attr} raised {type(err).__name__}: "
                                  f"{error_text(err)[:200]}; fix the world's `{attr}` (it must be readable "
                                  "once the world is constructed)") from None

        for attr in ("observation_shape", "action_spec"):
            if read(attr) is missing:
                raise ConfigError(f"data.env.world: {self.world_name} has no `{attr}`; an external world declares it")
        shape = read("observation_shape")
        problem = shape_problem(shape)
        if problem is not None:
            raise ConfigError(f"data.env.world: {self.world_name}.observation_shape {problem}")
        tasks = read("tasks")
        out = {"world_name": self.world_name, "observation_shape": tuple(int(d) for d in shape),
               "action_spec": read("action_spec"), "tasks": None if tasks is missing else tasks, "extras": {}}
        if out["tasks"] is not None:
            problem = task_ids_problem(out["tasks"])  # the tensor worlds' task_ids rule: a list of distinct strings
            if problem is not None:
                raise ConfigError(f"data.env.world: {self.world_name}.tasks {problem}")
            out["tasks"] = list(out["tasks"])
        for attr in ("solved_threshold", "max_subagents"):  # optional facts the data module checks
            value = read(attr)
            if value is not missing:
                out["extras"][attr] = value
        first_actor = next(iter(self.worlds))
        for actor, world in self.worlds.items():  # every world declares what the first one did
            if world is first:
                continue
            try:
                declared = {key: getattr(world, key, None) for key in _DECLARED}
            except Exception as err:  # noqa: BLE001 (the world's own property)
                raise ConfigError(f"data.env.world: reading actor {actor}'s {self.world_name} declared facts raised "
                                  f"{type(err).__name__}: {' '.join(str(err).split())[:200]}") from None
            why = facts_disagreement(self.world_name, first_actor, {**out, "tasks": None if tasks is missing else tasks},
                                     actor, declared)
            if why is not None:
                raise ConfigError(why)
        return out

    def run_all(self, method: str, args: Mapping[int, tuple]) -> dict[int, Any]:
        """Call `method(*args[i])` on every world i in `args` concurrently: every answer, or
        `WorldCallFailed` for the first call that raised (after `retries`) or hung."""
        if not args:
            return {}
        if self.is_async:
            return self._run_async(method, args)
        attempts = dict.fromkeys(args, 0)
        first: dict[int, BaseException] = {}
        batch = _Batch(len(args))
        actors = self._actors
        # the wait opens before the first call is handed over: a world thread may run its call before this
        # thread gets the CPU back, and the call is part of the bounded wait from its start
        with expected_wait(self.step_timeout, f"the external worlds' {method} (step_timeout)"):
            for i, a in args.items():
                actors[i].inbox.put((batch, method, a))
            deadline = time.monotonic() + self.step_timeout
            return self._collect(batch, method, args, attempts, first, deadline)

    def _collect(self, batch: "_Batch", method: str, args: Mapping[int, tuple], attempts: dict[int, int],
                 first: dict[int, BaseException], deadline: float) -> dict[int, Any]:
        actors = self._actors
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
                    raise WorldCallFailed(late, method, f"did not return within step_timeout={self.step_timeout:g}s "
                                                        + TIMEOUT_HINT)
            for i, value in errors:
                first.setdefault(i, value)
                if attempts[i] < self.retries and self._retryable(i, value):
                    attempts[i] += 1
                    actors[i].inbox.put((batch, method, args[i]))
                else:
                    raise WorldCallFailed(i, method, self._raised(first[i], attempts[i], value)) from first[i]

    def _retryable(self, i: int, err: BaseException) -> bool:
        """Only what world i declares retryable (`retryable`: exception classes; default
        ConnectionError and TimeoutError, calls that failed on the way out) is repeated: a world
        whose step raised half-way has moved on, and stepping it again would hide the real error."""
        if self.retry_any:  # on_error: retry (the world's calls are safe to repeat)
            return isinstance(err, Exception) and not isinstance(err, WorldCallFailed)
        kinds = getattr(self.worlds.get(i), "retryable", DEFAULT_RETRYABLE)
        try:
            return isinstance(err, tuple(kinds) if not isinstance(kinds, type) else kinds)
        except TypeError:
            return False

    def raised(self, first: BaseException, attempts: int = 0, last: Optional[BaseException] = None) -> str:
        """What a failed call's message says of its exception(s)."""
        return self._raised(first, attempts, last)

    def _raised(self, first: BaseException, attempts: int = 0, last: Optional[BaseException] = None) -> str:
        return describe_raised(first, attempts, last, self.retries)

    def _run_async(self, method: str, args: Mapping[int, tuple]) -> dict[int, Any]:
        async def one(i: int) -> Any:
            first: Optional[BaseException] = None
            for attempt in range(self.retries + 1):
                try:
                    return await asyncio.wait_for(getattr(self.worlds[i], method)(*args[i]), self.step_timeout)
                except asyncio.TimeoutError:
                    raise WorldCallFailed(i, method, f"did not return within step_timeout={self.step_timeout:g}s "
                                                     + TIMEOUT_HINT) from None
                except Exception as err:
                    first = first or err
                    if attempt == self.retries or not self._retryable(i, err):
                        raise WorldCallFailed(i, method, self._raised(first, attempt, err)) from first

        async def gather() -> list[Any]:
            return await asyncio.gather(*(one(i) for i in args))

        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(gather(), self._loop)
        bound = self.step_timeout * (self.retries + 1) + 5.0
        try:
            with expected_wait(bound, f"the external worlds' {method} (step_timeout x attempts)"):
                values = future.result(timeout=bound)
        except TimeoutError:
            future.cancel()
            raise WorldCallFailed(min(args), method, "and its event loop stopped answering") from None
        return dict(zip(args, values))

    # ------------------------------------------------------------------ the stream interface
    def submit(self, i: int, method: str, args: tuple, attempts: int = 0) -> None:
        """Start `method(*args)` on world i (which has no call in flight); its answer comes from `answers`."""
        self.submit_many([(i, method, args)], attempts)

    def submit_many(self, calls: Sequence[tuple[int, str, tuple]], attempts: int = 0) -> None:
        """Start every `(i, method, args)` in `calls` (worlds with no call in flight). `async def`
        worlds: one wake-up of the event loop for all of them (a wake-up is a write to the loop's
        socket, which cost more than the call's own bookkeeping when each call had its own)."""
        coros = []
        for i, method, args in calls:
            self._tickets += 1
            ticket = self._tickets
            now = time.perf_counter()
            self._calls[i] = (ticket, method, args, now, attempts)
            heapq.heappush(self._deadlines, (now + self.step_timeout, i, ticket))
            call = _StreamCall(self._sink, ticket)
            if self.is_async:
                coros.append(self._answer_async(self.worlds[i], i, method, args, call))
            else:
                self._actors[i].inbox.put((call, method, args))
        if coros:
            assert self._loop is not None
            if threading.get_ident() == self._loop_thread.ident:  # a worker process streaming on the loop
                self._start_tasks(coros)
            else:
                self._loop.call_soon_threadsafe(self._start_tasks, coros)

    def _start_tasks(self, coros: list) -> None:
        """(In the event loop) a task for each started call."""
        create = self._loop.create_task
        for coro in coros:
            create(coro)

    async def _answer_async(self, world: Any, i: int, method: str, args: tuple, call: _StreamCall) -> None:
        try:
            value = await getattr(world, method)(*args)
        except BaseException as err:
            call.answer(i, False, err)
        else:
            call.answer(i, True, value)
        if self.on_answer is not None:
            self.on_answer()

    @property
    def loop(self) -> Optional[asyncio.AbstractEventLoop]:
        """The event loop of `async def` worlds (None for sync worlds, each on its own thread)."""
        return self._loop

    def in_flight(self) -> int:
        return len(self._calls)

    def answers(self, timeout: float) -> list[StreamAnswer]:
        """The calls that finished (at least one, unless `timeout` seconds pass first): answers,
        errors after retries (a retryable error is resubmitted, `retries` times), and calls past
        their own deadline (`step_timeout` from their start, as a `WorldCallFailed`; the world is
        then hung: `replace` it before its next call)."""
        out: list[StreamAnswer] = []
        wait = timeout
        if self._deadlines:
            wait = max(min(timeout, self._deadlines[0][0] - time.perf_counter()), 0.0)
        try:
            if wait > 0:
                with expected_wait(wait, "the external worlds' answers (step_timeout)"):
                    item = self._sink.get(timeout=wait)
            else:
                item = self._sink.get_nowait()
        except queue.Empty:
            item = None
        while item is not None:
            self._settle(item, out)
            try:
                item = self._sink.get_nowait()
            except queue.Empty:
                item = None
        now = time.perf_counter()
        while self._deadlines and self._deadlines[0][0] <= now:
            _, i, ticket = heapq.heappop(self._deadlines)
            call = self._calls.get(i)
            if call is None or call[0] != ticket:
                continue  # answered (or resubmitted) in time
            del self._calls[i]
            why = WorldCallFailed(i, call[1], f"did not return within step_timeout={self.step_timeout:g}s "
                                              + TIMEOUT_HINT)
            out.append(StreamAnswer(i, call[1], False, why, now - call[3], call[4]))
        return out

    def _settle(self, item: tuple, out: list[StreamAnswer]) -> None:
        i, ticket, ok, value, done_at = item
        if ticket is _POSTED:
            self._posted.append(value)
            return
        call = self._calls.get(i)
        if call is None or call[0] != ticket:
            return  # the late answer of a call given up on
        _, method, args, t0, attempts = call
        if not ok and attempts < self.retries and self._retryable(i, value):
            self.submit(i, method, args, attempts + 1)
            return
        del self._calls[i]
        busy = None
        declared = getattr(self.worlds.get(i), "busy_seconds", None)
        if isinstance(declared, (int, float)):  # the world's own count of the seconds its calls waited for
            busy = float(declared) - self._busy_seen.get(i, 0.0)
            self._busy_seen[i] = declared
        out.append(StreamAnswer(i, method, ok, value, done_at - t0, attempts, busy))

    def post(self, message: Any) -> None:
        """(Any thread) wake `answers` with `message`, which `take_posted` returns: a worker process
        waits for its worlds' answers and its parent's messages on this one queue."""
        self._sink.put((-1, _POSTED, True, message, 0.0))

    def take_posted(self) -> list[Any]:
        """The messages `post`ed since the last call, oldest first."""
        posted, self._posted = self._posted, []
        return posted

    def replace(self, i: int) -> None:
        """A fresh world for actor i (its call hung: a thread world's thread is abandoned, daemon)."""
        self._calls.pop(i, None)
        self.replaced += 1
        world = self._build_bounded(i, self._seed + i + 7919 * self.replaced)
        self.worlds[i] = world
        self._busy_seen.pop(i, None)
        if not self.is_async:
            old = self._actors.get(i)
            if old is not None:
                old.inbox.put(None)  # ends it if it ever returns
            self._actors[i] = _ThreadActor(i, world)

    def close(self) -> None:
        """Stop the threads (a hung world stays behind as an abandoned daemon thread) and close the worlds."""
        for actor in self._actors.values():
            actor.inbox.put(None)
        for actor in self._actors.values():
            actor.thread.join(timeout=1.0)
        self._actors = {}
        loop = self._loop
        bound = self.lifecycle_timeout
        deadline = time.monotonic() + bound  # one bound for all the worlds' close(), each on a daemon thread
        for i, world in self.worlds.items():
            close = getattr(world, "close", None)
            if callable(close):
                def closing(close: Callable = close) -> None:
                    result = close()
                    if inspect.isawaitable(result) and loop is not None:
                        asyncio.run_coroutine_threadsafe(result, loop).result(timeout=bound)

                left = max(deadline - time.monotonic(), 0.5)
                status, err = run_bounded(closing, left, f"{self.world_name}.close() (actor {i}, step_timeout)")
                if status == "raised" and not isinstance(err, (Exception, SystemExit)):
                    raise err  # KeyboardInterrupt: as before
                if status == "raised":  # closing the rest matters more than one world's close error (a close()
                    # calling sys.exit too: a world's close never ends the trainer)
                    self.close_errors.append((i, err))  # the env reports them once all is closed
                elif status == "hung":  # named first (ahead of close() errors), in actor order
                    self.close_errors.insert(sum(isinstance(e, CloseTimeout) for _, e in self.close_errors), (i, CloseTimeout(
                        f"did not return within {bound:g}s (a world's constructor and close() are bounded by "
                        f"step_timeout={self.step_timeout:g}s, at least {LIFECYCLE_FLOOR_S:g}s)")))
        self.worlds = {}
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            self._loop_thread.join(timeout=1.0)
            self._loop = None
