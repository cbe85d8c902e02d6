"""`ProcessPool`: every subagent is a call of a user's Python function (`package.module:name`)
in one of `workers` long-lived worker processes; a subagent past `timeout` or cancelled while
running has its worker killed and replaced, so a hung subagent never hangs training.

A worker says it is ready once it has imported the function (a spawned worker imports torch and
the user's module first: seconds on a loaded machine); a subagent is handed only to a ready
worker, and its `timeout` runs from then, so start-up time never counts against a call and a
replaced worker's cold start never times out the next call. A worker that dies while starting
(the function's module fails to import in it) fails every queued subagent with that reason. A
function that raises, returns what `normalize` refuses (NaN steps, a wrong type) or ends its
process (`os._exit`) fails that subagent with an error saying which.
"""

from __future__ import annotations

import collections
import importlib
import itertools
import multiprocessing as mp
import threading
import time
from typing import Any, Optional

from parlightning.subagents.pool import PoolBase, SubagentResult, normalize


def _load(path: str) -> Any:
    module, _, attr = path.partition(":") if ":" in path else path.rpartition(".")
    return getattr(importlib.import_module(module), attr)


MAX_WORKERS = 64  # worker processes per pool: each is a Python process with torch and the user's module loaded
READY = "ready"


def _worker_main(fn_path: str, conn: Any) -> None:
    """A worker process: say READY once `fn` is imported, then answer (handle, instruction) with
    (handle, result fields) until None."""
    fn = _load(fn_path)
    conn.send(READY)
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        handle, instruction = job
        start = time.perf_counter()
        try:
            value = fn(instruction)
        except Exception as err:  # the subagent failed; the worker lives on
            answer = (handle, False, 0, None, f"{fn_path} raised {type(err).__name__}: {err}")
        else:
            try:
                r = normalize(value, time.perf_counter() - start)
                answer = (handle, r.success, r.steps, r.output, r.error)
            except (TypeError, ValueError) as err:
                answer = (handle, False, 0, None, f"{fn_path} {err}")
        try:
            conn.send(answer)
        except Exception as err:  # an output that cannot be pickled
            conn.send((handle, False, 0, None, f"unpicklable output: {err}"))


class _Worker:
    def __init__(self, ctx: Any, fn_path: str) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(fn_path, child), daemon=True)
        self.process.start()
        child.close()
        self.ready = False  # until the worker has imported the function
        self.job: Optional[tuple[int, float]] = None  # (handle, start time) while busy

    def stop(self, grace: float = 1.0) -> None:
        try:
            self.conn.send(None)
        except (OSError, BrokenPipeError):
            pass
        self.process.join(grace)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()

    def kill(self) -> None:
        self.process.kill()
        self.process.join()
        self.conn.close()


class ProcessPool(PoolBase):
    """Subagents as calls of `fn(instruction)` in worker processes; see the module docstring.

    Args:
        fn: import path of the subagent function; it returns what `normalize` accepts (a mapping
            with `success` and `steps`, a bool, ...). A raise is a failed subagent, not a crash.
        workers: worker processes (concurrent subagents); more spawns queue.
        timeout: seconds one subagent may run before its worker is killed (None: no limit).
        start_method: multiprocessing start method (`spawn` is safe with threads and torch).
        start_timeout: seconds the constructor waits for every worker to import the function
            (so the first calls, and a world's `step_timeout`, never wait on start-up); a worker
            that dies or is not ready by then is an error naming the function.
    """

    def __init__(self, fn: str, workers: int = 2, timeout: Optional[float] = None,
                 start_method: str = "spawn", start_timeout: float = 300.0) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers <= 0:
            raise ValueError(f"ProcessPool: workers must be a positive integer, got {workers!r}")
        if workers > MAX_WORKERS:
            raise ValueError(f"ProcessPool: workers={workers} is above the cap of {MAX_WORKERS} worker processes per "
                             "pool (each one loads torch and the function); use at most that many (more spawns queue)")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"ProcessPool: timeout must be positive or None, got {timeout!r}")
        try:
            _load(fn)
        except (ImportError, AttributeError, ValueError) as err:
            raise ValueError(f"ProcessPool: fn {fn!r} is not importable ({err}); name it as 'package.module:function'") from None
        self.fn, self.timeout = fn, timeout
        self._ctx = mp.get_context(start_method)
        self._workers = [_Worker(self._ctx, fn) for _ in range(workers)]
        self._queue: collections.deque = collections.deque()
        self._results: dict[int, SubagentResult] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._closed = False
        self._broken: Optional[str] = None  # why workers cannot start (every queued subagent fails with it)
        self._wait_ready(start_timeout)

    def _wait_ready(self, start_timeout: float) -> None:
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
                raise RuntimeError("ProcessPool: spawn after close()")
            handle = next(self._ids)
            self._queue.append((handle, instruction))
            self._pump()
        return handle

    def poll(self, handle: int) -> Optional[SubagentResult]:
        with self._lock:
            self._pump()
            return self._results.pop(handle, None)

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

    def _replace(self, i: int, why: str) -> None:
        """Kill worker i (its subagent fails with `why`) and start a fresh one."""
        w = self._workers[i]
        handle, start = w.job
        w.kill()
        self._results[handle] = SubagentResult(False, 0, time.monotonic() - start, error=why)
        self._workers[i] = _Worker(self._ctx, self.fn)

    def _pump(self) -> None:
        """Collect answers, enforce timeouts, hand queued subagents to idle ready workers (lock held)."""
        now = time.monotonic()
        for i, w in enumerate(self._workers):
            if not w.ready:
                try:
                    w.ready = w.conn.poll() and w.conn.recv() == READY
                except (OSError, EOFError):
                    w.ready = False
                if not w.ready and not w.process.is_alive():
                    self._broken = (f"a worker for {self.fn} exited with code {w.process.exitcode} while starting "
                                    "(does the function's module import in a fresh process?)")
                continue
            if w.job is None:
                continue
            handle, start = w.job
            try:
                ready = w.conn.poll()
            except (OSError, EOFError):
                ready = False
            if ready:
                try:
                    got, success, steps, output, error = w.conn.recv()
                    self._results[got] = SubagentResult(success, steps, now - start, output, error)
                    w.job = None
                    continue
                except (EOFError, OSError):
                    pass
            if not w.process.is_alive():
                self._replace(i, f"{self.fn} ended its worker process (exit code {w.process.exitcode}; os._exit "
                                 "or a crash) while running this subagent")
            elif self.timeout is not None and now - start > self.timeout:
                self._replace(i, f"timed out after {self.timeout:g}s")
        if self._broken is not None:
            while self._queue:
                handle, _ = self._queue.popleft()
                self._results[handle] = SubagentResult(False, 0, 0.0, error=self._broken)
        for w in self._workers:
            if w.ready and w.job is None and self._queue:
                handle, instruction = self._queue.popleft()
                w.conn.send((handle, instruction))
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
                    w.stop()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
