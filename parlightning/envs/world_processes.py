"""`WorkerProcesses`: the N external worlds spread over P worker processes (contiguous blocks of
actors), each process running a `WorldRunner` (a thread per world), with `WorldRunner`'s interface.

Why processes as well as threads: a world's Python (parsing a reply, keeping its state) and its
threads waking together hold this process's GIL, and under `data.max_policy_lag` the learner
thread then waits for the GIL between its tensor ops. In worker processes the worlds have GILs of
their own; this process only sends actions and receives answers (one pickled message per worker
per call, the wait releasing the GIL). The price: a process start per worker, pickled worlds'
arguments, and `shared` resources built in each worker (a pool's limits apply per worker).

Errors stay named: a world that raises or hangs is reported by its worker as the actor and why;
a worker that dies or stops answering ends the call with the actor block it ran. Every call
carries a sequence number, so answers of an abandoned call never reach a later one. `close()`
asks the workers to close their worlds, then terminates any that do not exit; a worker whose
parent has gone exits by itself. Start method, messages, the parent watch and stopping are
`parlightning.runtime.processes`'.
"""

from __future__ import annotations

import pickle
import sys
import time
import weakref
from multiprocessing.connection import Connection, wait
from typing import Any, Mapping, Optional, Sequence

from parlightning.envs.world_runner import WorldCallFailed, WorldRunner, build_shared, close_all, resolve
from parlightning.errors import ConfigError
from parlightning.runtime.processes import (
    Child, ProcessDied, ProcessStartError, receive, send, start_method, stop, watch_parent,
)
from parlightning.runtime.waits import expected_wait

READY_TIMEOUT = 120.0  # seconds a worker may take to import and build its worlds


def _serve(conn: Connection, owner: int, world: Any, world_kwargs: dict, shared: Optional[dict],
           actors: Sequence[int], seed: int, step_timeout: float, retries: int, switch_interval: Optional[float]
           ) -> None:
    """A worker process: build the shared resources and the worlds of `actors`, then answer calls."""
    watch_parent(owner)
    if switch_interval is not None and switch_interval < sys.getswitchinterval():
        sys.setswitchinterval(switch_interval)
    resources: dict[str, Any] = {}
    runner = None
    try:
        factory = resolve(world, "data.env.world") if isinstance(world, str) else world
        resources = build_shared(shared)
        runner = WorldRunner(factory, {**world_kwargs, **resources}, actors, seed, step_timeout, retries)
        send(conn, ("ready", runner.facts()))
    except Exception as err:  # ConfigError or a world's own: reported, then this worker ends
        close_all(list(resources.values()))
        why = f"{err}" if isinstance(err, ConfigError) else f"{type(err).__name__}: {err}"
        send(conn, ("error", ConfigError(why)))
        return
    try:
        while True:
            try:
                message = receive(conn)
            except (EOFError, OSError):  # the parent closed its end or died
                return
            if message is None:
                return
            seq, method, args = message
            try:
                send(conn, (seq, "ok", runner.run_all(method, args)))
            except WorldCallFailed as failed:
                send(conn, (seq, "failed", (failed.actor, failed.method, failed.why)))
    finally:
        runner.close()
        close_all(list(resources.values()))


def _picklable(name: str, value: Any, fix: str) -> None:
    try:
        pickle.dumps(value)
    except Exception as err:
        raise ConfigError(f"data.env.init_args.{name}: cannot be sent to worker processes "
                          f"({type(err).__name__}: {err}); {fix}") from None


class WorkerProcesses:
    """`WorldRunner`'s interface (`facts`, `run_all`, `close`) over `workers` processes
    (1 <= workers <= num_envs: `ExternalBatchedEnv` checks and caps it).

    `world`, `world_kwargs` and `shared` must pickle (name the world by import path or as a
    module-level class; give shared resources as `{class_path, init_args}` specs, built in each
    worker). `start`: the start method (`parlightning.runtime.processes.start_method`: forkserver
    where available, so workers fork from a clean server process, not from this threaded one;
    spawn elsewhere)."""

    def __init__(self, world: Any, world_kwargs: Mapping[str, Any], shared: Optional[Mapping[str, Any]],
                 num_envs: int, workers: int, seed: int, step_timeout: float, retries: int,
                 switch_interval: Optional[float], start: Optional[str] = None) -> None:
        _picklable("world", world, "name it by import path ('package.module:Class') or as a module-level class")
        _picklable("world_kwargs", dict(world_kwargs), "pass plain values, or build resources in `shared`")
        for name, spec in (shared or {}).items():
            if not isinstance(spec, Mapping):
                raise ConfigError(f"data.env.init_args.shared.{name}: with workers > 0 a shared resource is "
                                  "built in each worker: give it as {class_path, init_args}, not ready-made")
        method = start_method(start, "data.env.init_args.start_method")
        self.step_timeout, self.retries = step_timeout, retries
        bounds = [num_envs * w // workers for w in range(workers + 1)]
        self.blocks = [list(range(bounds[w], bounds[w + 1])) for w in range(workers)]
        self._owner = {i: w for w, block in enumerate(self.blocks) for i in block}
        self._children: list[Child] = []
        self._processes: list = []
        self._connections: list[Connection] = []
        self._seq = 0
        self._finalizer = weakref.finalize(self, stop, self._processes, self._connections)
        for w, block in enumerate(self.blocks):  # forkserver: the server imports this module once
            child = Child(_serve, (world, dict(world_kwargs), dict(shared or {}), block, seed, step_timeout, retries,
                                   switch_interval), name=f"external-worlds-{w}",
                          what=f"worker process {w} (actors {block[0]}-{block[-1]})", method=method, preload=[__name__])
            self._children.append(child)
            self._processes.append(child.process)
            self._connections.append(child.conn)
        self._facts = None
        for child in self._children:  # every worker reports ready (or its error)
            try:
                facts = child.wait_ready(READY_TIMEOUT)
            except ProcessStartError as err:
                self.close()
                raise ConfigError(f"data.env.init_args.workers: {err} (start_method: spawn needs the main module "
                                  "importable)") from None
            except BaseException:
                self.close()
                raise
            if self._facts is None:
                self._facts = facts

    def facts(self) -> dict[str, Any]:
        return dict(self._facts)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._processes]

    def _receive(self, w: int, method: str, timeout: float) -> Any:
        conn = self._connections[w]
        if not conn.poll(timeout):
            raise WorldCallFailed(self.blocks[w][0], method, f"worker process {w} (actors {self._span(w)}) "
                                                            f"stopped answering for {timeout:g}s")
        try:
            return self._children[w].receive()
        except ProcessDied as err:
            raise WorldCallFailed(self.blocks[w][0], method, f"worker process {w} (actors {self._span(w)}) "
                                                            f"died (exit code {err.exitcode})") from None

    def _span(self, w: int) -> str:
        block = self.blocks[w]
        return f"{block[0]}-{block[-1]}"

    def run_all(self, method: str, args: Mapping[int, tuple]) -> dict[int, Any]:
        """Send each worker its actors' calls, then collect every answer (or the first failure)."""
        if not args:
            return {}
        self._seq += 1
        seq = self._seq
        per_worker: dict[int, dict[int, tuple]] = {}
        for i, a in args.items():
            per_worker.setdefault(self._owner[i], {})[i] = a
        for w, calls in per_worker.items():
            try:
                self._children[w].send((seq, method, calls))
            except ProcessDied as err:
                raise WorldCallFailed(self.blocks[w][0], method, f"worker process {w} (actors {self._span(w)}) "
                                                                f"died (exit code {err.exitcode})") from None
        # the workers time each call out themselves; this is the backstop for a worker that hangs or dies
        timeout = self.step_timeout * (self.retries + 1) + 10.0
        deadline = time.monotonic() + timeout
        results: dict[int, Any] = {}
        waiting = {self._connections[w]: w for w in per_worker}
        while waiting:
            with expected_wait(max(deadline - time.monotonic(), 1e-3), f"the world worker processes' {method}"):
                ready = wait(list(waiting), timeout=max(deadline - time.monotonic(), 0.0))
            if not ready:
                w = min(waiting.values())
                raise WorldCallFailed(self.blocks[w][0], method, f"worker process {w} (actors {self._span(w)}) "
                                                                f"stopped answering for {timeout:g}s")
            for conn in ready:
                w = waiting[conn]
                answer_seq, status, value = self._receive(w, method, 0.0)
                if answer_seq != seq:  # an answer to an abandoned call: dropped
                    continue
                del waiting[conn]
                if status == "failed":
                    raise WorldCallFailed(*value)
                results.update(value)
        return results

    def close(self) -> None:
        """Close every worker's worlds and shared resources and end the processes; idempotent."""
        self._finalizer()
