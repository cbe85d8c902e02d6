"""`ProcessPool`: every subagent is a call of a user's Python function (`package.module:name`)
in one of `workers` long-lived worker processes; a subagent past `timeout` or cancelled while
running has its worker killed and replaced, so a hung subagent never hangs training.

A worker says it is ready once it has imported the function (a spawned worker imports torch and
the user's module first: seconds on a loaded machine); a subagent is handed only to a ready
worker, and its `timeout` runs from then, so start-up time never counts against a call and a
replaced worker's cold start never times out the next call. A worker that dies while starting
(the function's module fails to import in it) fails every queued subagent with that reason. A
function that raises, returns what `normalize` refuses (NaN steps, a wrong type) or ends its
process (`os._exit`) is the function's own failure: with `on_error: raise` (the default) the
pool raises a `SubagentError` naming the subagent (its handle and the instruction's `prompt`),
the function and what it did, which the external world reports with its world, actor and task;
with `on_error: fail` that subagent counts as failed and each distinct error is warned once. A
subagent past `timeout` (a hung function) or cancelled always counts as failed (and is warned).

Processes come from the shared toolkit (`parlightning.runtime.processes`): one `Child` per worker
(start method, the `("ready", facts)` handshake, one pickled message per call, the parent-death
watch, ask-then-terminate stop), so a killed trainer leaves no worker behind.
"""

from __future__ import annotations

import collections
import importlib
import itertools
import os
import signal
import threading
import time
import warnings
from typing import Any, Optional

from parlightning.config_types import PositiveFinite, PositiveInt, check_args
from parlightning.errors import ConfigError, check_call_shape
from parlightning.runtime.processes import Child, exit_text, receive, send, sendable_error, watch_parent
from parlightning.runtime.waits import expected_wait
from parlightning.method_args import AllOf, Serialisable, checked_methods
from parlightning.subagents.pool import POOL_SPECS, PoolBase, PoolClosedError, SubagentResult, normalize, sync_function_problem


def _load(path: str) -> Any:
    module, _, attr = path.partition(":") if ":" in path else path.rpartition(".")
    return getattr(importlib.import_module(module), attr)


MAX_WORKERS = 64  # worker processes per pool: each is a Python process with torch and the user's module loaded
ON_ERROR = ("raise", "fail")


class SubagentError(RuntimeError):
    """A subagent's function failed (raised, returned what `normalize` refuses, ended its process)."""


def _worker_main(conn: Any, owner: int, fn_path: str) -> None:
    """A worker process: `("ready", pid)` once `fn` is imported, then answer `(handle, instruction)`
    with `("result", (handle, success, steps, output, error, by_function))` until None."""
    watch_parent(owner)
    # Ctrl-C reaches the whole process group: the trainer reports it and stops the pool, so a worker
    # must not print a traceback of its own (a KeyboardInterrupt the function raises is its failure, below)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        fn = _load(fn_path)
    except BaseException as err:  # noqa: BLE001 (reported to the pool, which names the function)
        send(conn, ("error", sendable_error(err, f"a worker of {fn_path}")))
        return
    send(conn, ("ready", os.getpid()))
    while True:
        try:
            job = receive(conn)
        except (EOFError, OSError):
            return
        if job is None:
            return
        handle, instruction = job
        start = time.perf_counter()
        try:
            value = fn(instruction)
        except SystemExit:
            raise  # ends the worker: the pool names the function and its exit code
        except BaseException as err:  # noqa: BLE001 (KeyboardInterrupt too): the subagent failed; the worker lives on
            answer = (handle, False, 0, None, f"{fn_path} raised {type(err).__name__}" + (f": {err}" if str(err) else ""), True)
        else:
            try:
                r = normalize(value, time.perf_counter() - start)
                answer = (handle, r.success, r.steps, r.output, r.error, False)
            except (TypeError, ValueError) as err:
                answer = (handle, False, 0, None, f"{fn_path} {err}", True)
        try:
            send(conn, ("result", answer))
        except Exception as err:  # an output that cannot be pickled (send pickles before it writes)
            send(conn, ("result", (handle, False, 0, None, f"{fn_path} returned an output that cannot be pickled: "
                                                           f"{err}", True)))


class _Worker:
    """One worker: a toolkit `Child`, whether it has said ready, and its job (handle, start time)."""

    def __init__(self, fn_path: str, method: str) -> None:
        self.child = Child(_worker_main, (fn_path,), name="subagent-worker", what=f"a worker process of {fn_path}",
                           method=method, daemon=True)
        self.ready = False  # until the worker has imported the function
        self.job: Optional[tuple[int, float]] = None

    @property
    def process(self) -> Any:
        return self.child.process

    def message(self) -> Optional[tuple]:
        """The worker's next message if one is waiting (never blocks); None when none is, or it has gone."""
        try:
            if not self.child.conn.poll():
                return None
            return self.child.receive()
        except (OSError, EOFError, RuntimeError, ValueError):
            return None

    def kill(self) -> None:
        self.process.kill()
        self.process.join()
        self.child.closed = True
        self.child.conn.close()


@checked_methods(**{**POOL_SPECS, "spawn": {"instruction": AllOf(
    POOL_SPECS["spawn"]["instruction"], Serialisable("pickle", text="it is sent to a worker process"))}})
class ProcessPool(PoolBase):
    """Subagents as calls of `fn(instruction)` in worker processes; see the module docstring.

    Args:
        fn: import path of the subagent function; it returns what `normalize` accepts (a mapping
            with `success` and `steps`, a bool, ...).
        workers: worker processes (concurrent subagents); more spawns queue.
        timeout: seconds one subagent may run before its worker is killed (None: no limit).
        start_method: multiprocessing start method (`spawn` is safe with threads and torch).
        start_timeout: seconds the constructor waits for every worker to import the function
            (so the first calls, and a world's `step_timeout`, never wait on start-up); a worker
            that dies or is not ready by then is an error naming the function.
        on_error: what a failure of the function itself does (it raised, returned NaN or a wrong
            type, ended its process): "raise" (default) ends the run with a `SubagentError`
            naming the subagent, the function and the error; "fail" counts the subagent as failed
            and warns once per distinct error.
    """

    def __init__(self, fn: str, workers: PositiveInt = 2, timeout: Optional[PositiveFinite] = None,
                 start_method: str = "spawn", start_timeout: PositiveFinite = 300.0, on_error: str = "raise") -> None:
        workers, timeout, start_timeout = check_args("ProcessPool", ProcessPool.__init__, locals()).values()
        if workers > MAX_WORKERS:
            raise ValueError(f"ProcessPool: workers={workers} is above the cap of {MAX_WORKERS} worker processes per "
                             "pool (each one loads torch and the function); use at most that many (more spawns queue)")
        if on_error not in ON_ERROR:
            raise ValueError(f"ProcessPool: on_error must be one of {list(ON_ERROR)}, got {on_error!r}")
        if not isinstance(fn, str) or not fn.strip():
            raise ValueError(f"ProcessPool: fn must be an import path string 'package.module:function', got {fn!r:.60}")
        try:
            target = _load(fn)
        except (ImportError, AttributeError, ValueError) as err:
            raise ValueError(f"ProcessPool: fn {fn!r} is not importable ({err}); name it as 'package.module:function'") from None
        if not callable(target):
            raise ValueError(f"ProcessPool: fn {fn!r} is a {type(target).__name__}, not a function; name the function "
                             "a subagent calls ('package.module:function')")
        if sync_function_problem(target) is not None:  # the pool calls fn synchronously in its workers
            raise ConfigError(f"ProcessPool.fn: {fn!r} {sync_function_problem(target)}")
        module, _, attr = fn.partition(":") if ":" in fn else fn.rpartition(".")
        check_call_shape("ProcessPool.fn", module, attr, target, ("instruction",), caller="each subagent's worker")
        if start_method not in ("spawn", "forkserver", "fork"):
            raise ValueError(f"ProcessPool: start_method must be spawn, forkserver or fork, got {start_method!r}")
        self.fn, self.timeout, self.on_error, self._method = fn, timeout, on_error, start_method
        self._workers = [_Worker(fn, start_method) for _ in range(workers)]
        self._queue: collections.deque = collections.deque()
        self._results: dict[int, SubagentResult] = {}
        self._instructions: dict[int, Any] = {}
        self._failed_by_function: set[int] = set()
        self._warned: set[str] = set()
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._closed = False
        self._broken: Optional[str] = None  # why workers cannot start (every queued subagent fails with it)
        self._wait_ready(start_timeout)

    def _wait_ready(self, start_timeout: float) -> None:
        with expected_wait(start_timeout, f"ProcessPool's workers to import {self.fn} (start_timeout)"):
            self._wait_ready_loop(start_timeout)

    def _wait_ready_loop(self, start_timeout: float) -> None:
        deadline = time.monotonic() + start_timeout
        while True:
            with self._lock:
                self._pump()
                broken, ready = self._broken, all(w.ready for w in self._workers)
            if ready:
                return
            if broken is not None or time.monotonic() > deadline:
                self.close()
                why = broken or f"its workers were not ready within start_timeout={start_timeout:g}s"
                raise ValueError(f"ProcessPool: {why}; check that {self.fn} imports quickly in a fresh process "
                                 "or raise start_timeout")
            time.sleep(0.02)

    @property
    def pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]

    def spawn(self, instruction: Any) -> int:
        with self._lock:
            if self._closed:
                raise PoolClosedError("ProcessPool.spawn: the pool is closed (close() was called); build a new ProcessPool")
            handle = next(self._ids)
            self._queue.append((handle, instruction))
            self._instructions[handle] = instruction
            self._pump()
        return handle

    def poll(self, handle: int) -> Optional[SubagentResult]:
        with self._lock:
            if handle not in self._instructions and handle not in self._results:  # else poll would wait forever
                raise self._unknown(handle, "poll")
            self._pump()
            result = self._results.pop(handle, None)
            if result is None:
                return None
            instruction = self._instructions.pop(handle, None)
            by_function = handle in self._failed_by_function
            self._failed_by_function.discard(handle)
        if result.error is not None and result.error != "cancelled":
            self._report(handle, instruction, result.error, by_function)
        return result

    def _report(self, handle: int, instruction: Any, error: str, by_function: bool) -> None:
        """A failed subagent: raised (`on_error: raise`, the function's own failure) or warned once."""
        prompt = instruction.get("prompt") if isinstance(instruction, dict) else None
        what = f"subagent {handle}" + (f" ({prompt})" if prompt else f" (instruction {instruction!r:.80})")
        if by_function and self.on_error == "raise":
            raise SubagentError(f"ProcessPool {what}: {error}; fix the function, or set on_error: fail to count such "
                                "subagents as failed")
        kind = error.split(":")[0]
        if kind not in self._warned:
            self._warned.add(kind)
            warnings.warn(f"ProcessPool {what} failed: {error} (counted as a failed subagent; warned once)",
                          RuntimeWarning, stacklevel=3)

    def cancel(self, handle: int) -> None:
        with self._lock:
            for job in list(self._queue):
                if job[0] == handle:
                    self._queue.remove(job)
                    self._results[handle] = SubagentResult(False, 0, 0.0, error="cancelled")
                    return
            for i, w in enumerate(self._workers):
                if w.job is not None and w.job[0] == handle:
                    self._replace(i, "cancelled")
                    return

    def _replace(self, i: int, why: str, by_function: bool = False) -> None:
        """Kill worker i (its subagent fails with `why`) and start a fresh one."""
        w = self._workers[i]
        handle, start = w.job
        w.kill()
        self._results[handle] = SubagentResult(False, 0, time.monotonic() - start, error=why)
        if by_function:
            self._failed_by_function.add(handle)
        self._workers[i] = _Worker(self.fn, self._method)

    def _pump(self) -> None:
        """Collect answers, enforce timeouts, hand queued subagents to idle ready workers (lock held)."""
        now = time.monotonic()
        for i, w in enumerate(self._workers):
            if not w.ready:
                message = w.message()
                w.ready = message is not None and message[0] == "ready"
                if message is not None and message[0] == "error":
                    self._broken = (f"a worker for {self.fn} failed while starting: {type(message[1]).__name__}: "
                                    f"{message[1]}")
                elif not w.ready and not w.process.is_alive():
                    self._broken = (f"a worker for {self.fn} exited with code {w.process.exitcode} while starting "
                                    "(does the function's module import in a fresh process?)")
                continue
            if w.job is None:
                continue
            handle, start = w.job
            message = w.message()
            if message is not None and message[0] == "result":
                got, success, steps, output, error, by_function = message[1]
                self._results[got] = SubagentResult(success, steps, now - start, output, error)
                if by_function:
                    self._failed_by_function.add(got)
                w.job = None
                continue
            if not w.process.is_alive():
                self._replace(i, f"{self.fn} ended its worker process ({exit_text(w.process.exitcode)}; os._exit, "
                                 "a crash or a signal) while running this subagent", by_function=True)
            elif self.timeout is not None and now - start > self.timeout:
                self._replace(i, f"timed out after {self.timeout:g}s")
        if self._broken is not None:
            while self._queue:
                handle, _ = self._queue.popleft()
                self._results[handle] = SubagentResult(False, 0, 0.0, error=self._broken)
        for w in self._workers:
            if w.ready and w.job is None and self._queue:
                handle, instruction = self._queue.popleft()
                w.child.send((handle, instruction))
                w.job = (handle, time.monotonic())

    def close(self) -> None:
        """End every worker process (a busy one is killed); idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for w in self._workers:
                if w.job is not None:
                    w.kill()
                else:
                    w.child.close(grace=1.0)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
