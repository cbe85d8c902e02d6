"""The subagent pool seam: `spawn(instruction) -> handle`, `poll(handle)`, `cancel(handle)`,
`close()`; each finished subagent gives a `SubagentResult` (success, steps and seconds used).

An orchestration world hands subtasks to a pool and waits for them; the pool decides what a
subagent is (a simulated coin flip, a user's Python callable in a worker process, a model call
over HTTP). Plain Python (no torch), so worker processes start fast.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import inspect
import itertools
import math
import numbers
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Protocol, runtime_checkable

from parlightning.config_types import ClosedUnitInterval, NonNegativeFinite, NonNegativeInt, Seed, check_args
from parlightning.errors import ConfigError, LifecycleError
from parlightning.method_args import Arg, Lifecycle, MappingArg, Passed, State, checked_methods


MAX_STEPS = 2**31 - 1  # one subagent's steps: more than any subagent takes; a larger count (10**30 tokens) is a bug
# in the function or the endpoint, and would overflow the int64 step counters and tensors built on it


@dataclass(frozen=True)
class SubagentResult:
    """What one subagent did: `success`, the `steps` it used (its share of critical steps), wall
    `seconds`, its `output`, and `error` when it failed by raising, timing out or being cancelled."""

    success: bool
    steps: int
    seconds: float
    output: Any = None
    error: Optional[str] = None

    def __post_init__(self) -> None:
        """Refuse what would corrupt the step counts and timings built on it (a user's function may
        return one): `success` a bool, `steps` an int >= 0, `seconds` a finite number >= 0, `error`
        None or a string."""
        s = self.success
        if not (isinstance(s, bool) or type(s).__name__ == "bool_" or (isinstance(s, numbers.Integral) and s in (0, 1))):
            raise TypeError(f"SubagentResult.success: must be a bool, got {type(s).__name__} {s!r:.40}")
        if (isinstance(self.steps, bool) or not isinstance(self.steps, numbers.Integral) or self.steps < 0
                or self.steps > MAX_STEPS):
            raise TypeError(f"SubagentResult.steps: must be an int >= 0 and <= {MAX_STEPS} (the subagent's steps), got "
                            f"{type(self.steps).__name__} {self.steps!r:.40}")
        t = self.seconds
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not math.isfinite(t) or t < 0:
            raise TypeError(f"SubagentResult.seconds: must be a finite number >= 0 (wall seconds the subagent took), "
                            f"got {type(t).__name__} {t!r:.40}")
        if self.error is not None and not isinstance(self.error, str):
            raise TypeError(f"SubagentResult.error: must be None or a string, got {type(self.error).__name__}")


@runtime_checkable
class SubagentPool(Protocol):
    """Where subagents run. Handles are opaque; `poll` is None while the subagent runs:
    `spawn(instruction) -> handle`, `poll(handle) -> Optional[SubagentResult]`, `cancel(handle)`, `close()`.

    Annotated `Any` on purpose: the config parser matches a class_path against the protocol's
    annotations exactly, so a user's pool with other (or no) annotations would be refused."""

    def spawn(self, instruction: Any) -> Any: ...

    def poll(self, handle: Any) -> Any: ...

    def cancel(self, handle: Any) -> Any: ...

    def close(self) -> Any: ...


def normalize(value: Any, seconds: float) -> SubagentResult:
    """A user's return value as a result: a `SubagentResult`, a mapping with `success` (and
    optional `steps`, `output`), a bool, or a `(success, steps)` pair. Anything else is refused as
    a class, naming its type: None (a function that forgot to `return`), a string or bytes (an
    output that would have counted as a success whatever it said), a mapping without `success`, a
    number; so is a `success` that is not a bool or 0/1 (`"no"` would read as True). An output
    goes under the mapping's `output` key."""
    if isinstance(value, SubagentResult):
        return value
    lazy = _lazy_kind(value)
    if lazy is not None:
        getattr(value, "close", lambda: None)()  # never run: no "was never awaited" warning
        raise TypeError(f"returned {lazy}, not an answer; a sync pool calls the function and takes what it returns: "
                        "make it a plain `def` that returns the answer (run a coroutine inside it with "
                        "asyncio.run), or serve it over HTTP for AsyncHTTPPool")
    if isinstance(value, Mapping) and "success" in value:
        flag = value["success"]
        if not (isinstance(flag, bool) or (isinstance(flag, int) and flag in (0, 1))):
            raise TypeError(f"returned success={flag!r}; success must be a bool (True / False)")
        return SubagentResult(bool(flag), _steps(value.get("steps", 1)), seconds, value.get("output"))
    if isinstance(value, bool):
        return SubagentResult(value, 1, seconds)
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], bool):
        return SubagentResult(value[0], _steps(value[1]), seconds)
    what = ("None (a missing `return`?)" if value is None else
            f"a {type(value).__name__} without a 'success' key" if isinstance(value, Mapping) else
            f"{type(value).__name__} {value!r:.40}")
    raise TypeError(f"returned {what}; return a mapping {{'success': bool, 'steps': int, 'output': ...}} (an output "
                    "goes under 'output'), a bool, or a (bool, steps) pair")


def _lazy_kind(value: Any) -> Optional[str]:
    """What a deferred value is (a coroutine, an awaitable, a generator), or None for an answer."""
    if inspect.iscoroutine(value):
        return "a coroutine (is the function `async def`?)"
    if inspect.isgenerator(value) or inspect.isasyncgen(value):
        return "a generator (does the function `yield`?)"
    if inspect.isawaitable(value):
        return f"an awaitable ({type(value).__name__})"
    return None


def sync_function_problem(fn: Any) -> Optional[str]:
    """Why `fn` cannot be a sync pool's subagent function (it is `async def`, an async generator or a
    generator function: calling it returns a coroutine or generator, not an answer), or None."""
    target = getattr(fn, "__func__", fn)
    for test, what in ((inspect.iscoroutinefunction, "an async function (`async def`)"),
                       (inspect.isasyncgenfunction, "an async generator function"),
                       (inspect.isgeneratorfunction, "a generator function (it `yield`s)")):
        if test(target) or test(getattr(target, "__call__", None)):
            return (f"is {what}: calling it returns a {'generator' if 'generator' in what else 'coroutine'}, not an "
                    "answer; make it a plain `def` that returns the answer (run a coroutine inside it with "
                    "asyncio.run), or serve it over HTTP for AsyncHTTPPool")
    return None


def _steps(value: Any, what: str = "returned steps") -> int:
    """A subagent's step count: a whole number from 0 to MAX_STEPS (NaN, inf, strings, negatives,
    fractions such as 2.5 and counts no step counter can hold are refused; 3.0 is 3)."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0
            or value > MAX_STEPS or value != int(value)):
        raise TypeError(f"{what}={value!r:.40}; steps must be a whole number >= 0 and <= {MAX_STEPS} (a count of "
                        "the subagent's steps)")
    return int(value)


def chat_reply(reply: Any) -> tuple[str, int]:
    """An OpenAI-style chat completion's text (`choices[0].message.content`: a string, or null for
    none) and steps (`usage.completion_tokens`, 1 when absent: a count from 0 to MAX_STEPS).
    Anything else is a ValueError naming the field (the HTTP pools fail that call with it)."""
    try:
        text = reply["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as err:
        raise ValueError(f"the reply has no choices[0].message.content ({type(err).__name__}: {err})") from None
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise ValueError(f"the reply's choices[0].message.content is {type(text).__name__} {text!r:.40}, not text")
    usage = reply.get("usage") or {}
    if not isinstance(usage, Mapping):
        raise ValueError(f"the reply's usage is {type(usage).__name__} {usage!r:.40}, not a mapping")
    try:
        return text, _steps(usage.get("completion_tokens", 1), "usage.completion_tokens")
    except TypeError as err:
        raise ValueError(f"the reply's {err}") from None


def checked_results(pool: Any, method: str, values: Any, count: int) -> list[SubagentResult]:
    """What a pool's `wait` (a list, one per handle) or `poll` (`count` 1: one result) gave, checked:
    SubagentResults, as many as handles; anything else (a user's pool returning dicts) is a TypeError
    naming the pool's class and method, before the step counts are built on it."""
    where = f"{type(pool).__name__}.{method}"
    fix = ("a pool's poll returns None (still running) or a parlightning.subagents.SubagentResult(success, steps, "
           "seconds, output); wait returns a list of them, one per handle, in order")
    items = [values] if method == "poll" else values
    if method != "poll":
        if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
            raise TypeError(f"{where} returned {type(values).__name__} {values!r:.60}, not a list of SubagentResult; {fix}")
        items = list(values)
        if len(items) != count:
            raise TypeError(f"{where} returned {len(items)} results for {count} handles; {fix}")
    bad = next((v for v in items if not isinstance(v, SubagentResult)), None)
    if bad is not None:
        raise TypeError(f"{where} returned {type(bad).__name__} {bad!r:.60}, not a SubagentResult; {fix}")
    return items


class PoolClosedError(LifecycleError):
    """A pool used (any method but `close`) after its `close()`: build a new pool. A RuntimeError."""


class UnknownHandleError(LifecycleError, KeyError):
    """`poll` / `wait` given a handle this pool never returned from `spawn`, or one whose result was
    already taken (a finished subagent's result is handed out once): a LifecycleError naming
    `Pool.method`, and a KeyError (what the pools raised before), printed as its message (not quoted,
    as KeyError prints its key)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def checked_timeout(owner: str, timeout: Any) -> Optional[float]:
    """`wait`'s `timeout`: None (no limit) or a number of seconds, as a float >= 0. A negative one does
    not wait (Python's wait convention, as `threading.Event.wait`; round 8 judged it valid), so it is 0;
    NaN (a deadline never reached: the wait never ended), a bool or a non-number is a ConfigError."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or math.isnan(timeout):
        raise ConfigError(f"{owner}.wait(timeout): must be None (no limit) or a number of seconds (a negative one "
                          f"does not wait), got {timeout!r:.60}")
    return max(float(timeout), 0.0)


class TimeoutArg(Arg):
    """`wait(timeout)`: `checked_timeout` at entry."""

    optional = True

    def check(self, field: str, value: Any, obj: Any, call: dict) -> None:
        checked_timeout(field.partition(".wait")[0], value)


INSTRUCTION = Passed("the instruction is the subagent's own payload: the pool hands it to its function or endpoint")
MAX_REPLY_BYTES = 16 << 20  # an HTTP pool's reply larger than this is a failed subagent, not a process out of memory


POOL_SPECS = {"spawn": {"instruction": INSTRUCTION}, "wait": {"timeout": TimeoutArg()}}  # handles: int / Iterable


# A pool's lifecycle: after `close()` every method but `close` is one PoolClosedError naming the pool (read off
# the pool's own `_closed` flag, which its threads see too); subclasses inherit it.
POOL_LIFECYCLE = Lifecycle(closes="close", closed=State("the pool is closed (close() was called); build a new {cls}",
                                                        holds=lambda pool: not pool._closed, error=PoolClosedError))


@checked_methods(**{k: v for k, v in POOL_SPECS.items() if k == "wait"}, lifecycle=POOL_LIFECYCLE)
class PoolBase:
    """Shared `wait`: poll every handle until all finished, or give up after `timeout` seconds
    (then the unfinished ones are cancelled and reported as failures)."""

    poll_interval = 0.0005
    _closed = False

    def _unknown(self, handle: Any, method: str) -> UnknownHandleError:
        return UnknownHandleError(f"{type(self).__name__}.{method}: handle {handle!r:.60} is not a running subagent of this "
                                  "pool (never returned by its spawn, or its result was already taken by poll/wait); "
                                  "poll each handle spawn returned until it gives a result, once")

    def wait(self, handles: Iterable[int], timeout: Optional[float] = None) -> list[SubagentResult]:
        timeout = checked_timeout(type(self).__name__, timeout)
        handles = list(handles)
        results: dict[int, SubagentResult] = {}
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(results) < len(handles):
            for h in handles:
                if h not in results:
                    r = self.poll(h)
                    if r is not None:
                        results[h] = r
            if len(results) == len(handles):
                break
            if deadline is not None and time.monotonic() > deadline:
                for h in handles:
                    if h not in results:
                        self.cancel(h)
                        results[h] = SubagentResult(False, 0, timeout, error=f"no result within {timeout:g}s")
                break
            time.sleep(self.poll_interval)
        return [results[h] for h in handles]

    def __enter__(self) -> "PoolBase":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        return None


def _count(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _label(value: Any) -> bool:
    return isinstance(value, Hashable) and not isinstance(value, bool)


SIMULATED_INSTRUCTION = MappingArg(
    {"skill": (_label, "the skill the subtask needs (an int or a name)"),
     "instruction": (_label, "the instruction given (an int or a name; it succeeds when it equals skill)"),
     "cost": (_count, "the subtask's cost in steps, a finite number >= 0")},
    "{'cost': 2, 'skill': 0, 'instruction': 0}")


@checked_methods(spawn={"instruction": SIMULATED_INSTRUCTION},
                 wait=POOL_SPECS["wait"])
class SimulatedPool(PoolBase):
    """Subagents as SwarmEnv models them, in process, for tests and benchmarks.

    An instruction is a mapping with `skill`, `instruction` and `cost`: the subagent succeeds
    with probability `reliability` when `instruction == skill`, uses `cost + spawn_steps` steps,
    and its result appears `steps x seconds_per_step` seconds after `spawn` (real latency
    without a thread: `poll` answers None until then). Thread-safe (worlds share one pool).
    """

    def __init__(self, reliability: ClosedUnitInterval = 0.9, spawn_steps: NonNegativeInt = 1,
                 seconds_per_step: NonNegativeFinite = 0.0, seed: Seed = 0) -> None:
        reliability, spawn_steps, seconds_per_step, seed = check_args(
            "SimulatedPool", SimulatedPool.__init__, locals()).values()
        self.reliability, self.spawn_steps, self.seconds_per_step = reliability, spawn_steps, seconds_per_step
        self._rng = random.Random(seed)
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._pending: dict[int, tuple[float, SubagentResult]] = {}
        self.spawned = 0
        self._closed = False

    def spawn(self, instruction: Any) -> int:
        """`instruction`: a mapping such as {'cost': 2, 'skill': 0, 'instruction': 0} (a subtask's cost, the
        skill it needs and the instruction given), every key required; checked at entry, as the pool being open."""
        steps = int(instruction["cost"]) + self.spawn_steps
        right = instruction.get("instruction") == instruction.get("skill")
        seconds = steps * self.seconds_per_step
        with self._lock:
            lucky = self._rng.random() < self.reliability
            handle = next(self._ids)
            self.spawned += 1
            self._pending[handle] = (time.monotonic() + seconds, SubagentResult(bool(right and lucky), steps, seconds))
        return handle

    def poll(self, handle: int) -> Optional[SubagentResult]:
        with self._lock:
            if handle not in self._pending:
                raise self._unknown(handle, "poll")
            ready_at, result = self._pending[handle]
            if time.monotonic() < ready_at:
                return None
            del self._pending[handle]
            return result

    def wait(self, handles: Iterable[int], timeout: Optional[float] = None) -> list[SubagentResult]:
        timeout = checked_timeout("SimulatedPool", timeout)
        handles = list(handles)
        with self._lock:
            unknown = [h for h in handles if h not in self._pending]
            if unknown:
                raise self._unknown(unknown[0], "wait")
            last = max((self._pending[h][0] for h in handles), default=0.0)
        delay = last - time.monotonic()
        if delay > 0:
            time.sleep(delay if timeout is None else min(delay, timeout))  # one sleep, not a polling loop
        return super().wait(handles, timeout=0.0 if timeout is None else max(timeout - max(delay, 0.0), 0.0))

    def cancel(self, handle: int) -> None:
        with self._lock:
            self._pending.pop(handle, None)

    def close(self) -> None:
        """Drop what is pending; a later spawn, poll or wait raises PoolClosedError. Idempotent."""
        with self._lock:
            self._closed = True
            self._pending.clear()
