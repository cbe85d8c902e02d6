"""`WorkerProcesses`: the N external worlds spread over P worker processes (contiguous blocks of
actors), each process running a `WorldRunner` (a thread per world), with `WorldRunner`'s interface.

Why processes as well as threads: a world's Python (parsing a reply, keeping its state) and its
threads waking together hold this process's GIL, and under `data.max_policy_lag` the learner
thread then waits for the GIL between its tensor ops. In worker processes the worlds have GILs of
their own; this process only sends actions and receives answers (one pickled message per worker
per call, the wait releasing the GIL). The price: a process start per worker, pickled worlds'
arguments, and `shared` resources built in each worker (a pool's limits apply per worker).

Two interfaces, as `WorldRunner`'s: `run_all` (lock-step: every world's answer or the first
failure; one message per worker per call) and the stream interface of per-actor collection
(`data.collect: trajectories`): `submit_many` sends each worker its actors' calls, each worker's
runner steps them concurrently and the worker sends back every answer that is ready each time it
wakes (one message per wake-up, not one per answer); `answers` returns what arrived from any
worker. The per-actor collector cannot tell this from worlds on threads here: the timeouts (each
call's own deadline, kept by the worker), retries and `replace` (a fresh world for one whose
call hung) run in the worker, and the answers carry the same fields.

Errors stay named: a world that raises or hangs is reported by its worker as the actor and why;
a worker that dies or stops answering ends the call (or the stream: under every `on_error`, a
dead worker's worlds are gone) with the worker, its actor block and pid. Every lock-step call
carries a sequence number, so answers of an abandoned call never reach a later one. `close()`
asks the workers to close their worlds, then terminates any that do not exit; a worker whose
parent has gone exits by itself. Start method, messages, the parent watch and stopping are
`parlightning.runtime.processes`'.
"""

from __future__ import annotations

import pickle
import queue
import sys
import threading
import time
import weakref
from multiprocessing.connection import Connection, wait
from typing import Any, Mapping, Optional, Sequence

from parlightning.envs.world_runner import (
    CloseTimeout, StreamAnswer, WorldCallFailed, WorldRunner, build_shared, close_all, describe_raised, facts_disagreement, resolve,
    warn_close_errors,
)
from parlightning.errors import ConfigError
from parlightning.runtime.processes import (
    Child, ProcessDied, ProcessStartError, exit_text, receive, send, sendable_error, start_method, stop, watch_parent,
)
from parlightning.runtime.waits import expected_wait

CLOSE_GRACE = 2.0  # seconds a worker may take to close its worlds and exit once asked, before it is terminated
READY_TIMEOUT = 120.0  # seconds a worker may take to import and build its worlds
IDLE_WAKE = 1.0  # seconds a streaming worker with nothing to do sleeps between looks at its deadlines
TICK = 0.05  # seconds between a streaming event loop's looks at its calls' deadlines


class WorkerLost(WorldCallFailed):
    """A worker process died or stopped answering while the stream had calls in it: `why` names the
    worker, its actors and pid (not one world's failure: `on_error` does not apply)."""


def _serve(conn: Connection, owner: int, world: Any, world_kwargs: dict, shared: Optional[dict],
           actors: Sequence[int], seed: int, step_timeout: float, retries: int, switch_interval: Optional[float],
           retry_any: bool = False) -> None:
    """A worker process: build the shared resources and the worlds of `actors`, then answer calls:
    lock-step `(seq, method, args)` messages one at a time, until the first `("submit", calls)`
    switches it to streaming (`_stream`)."""
    watch_parent(owner)
    if switch_interval is not None and switch_interval < sys.getswitchinterval():
        sys.setswitchinterval(switch_interval)
    resources: dict[str, Any] = {}
    runner = None
    try:
        factory = resolve(world, "data.env.world") if isinstance(world, str) else world
        resources = build_shared(shared)
        runner = WorldRunner(factory, {**world_kwargs, **resources}, actors, seed, step_timeout, retries)
        runner.retry_any = retry_any
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
            if message[0] == "submit":
                _stream(conn, runner, message)
                return
            _run_all(conn, runner, message)
    finally:
        runner.close()
        close_all(list(resources.values()))
        warn_close_errors(runner)  # on the worker's stderr (the run's): its parent reads nothing more from it


def _run_all(conn: Connection, runner: WorldRunner, message: tuple) -> None:
    seq, method, args = message
    try:
        reply = (seq, "ok", runner.run_all(method, args))
    except WorldCallFailed as failed:
        reply = (seq, "failed", (failed.actor, failed.method, failed.why))
    _reply(conn, reply, method)


def _reply(conn: Connection, reply: tuple, method: str) -> None:
    """Send a lock-step reply; an answer that cannot be pickled (a world returning a generator, a
    lock) becomes the failure of the first actor whose value does not pickle, named as such."""
    try:
        send(conn, reply)
    except Exception as err:  # noqa: BLE001 (send pickles before it writes: nothing half-sent)
        seq, status, value = reply
        actor = min(value) if status == "ok" and value else -1
        if status == "ok":
            for i in sorted(value):
                try:
                    pickle.dumps(value[i])
                except Exception:  # noqa: BLE001
                    actor = i
                    break
        shown = value.get(actor) if isinstance(value, dict) else value
        send(conn, (seq, "failed", (actor, method, f"returned a value that cannot be sent to the trainer process "
                                                   f"({type(err).__name__}: {err}): {shown!r:.80}; return plain "
                                                   "values (numbers, lists, numpy arrays)")))


def _read(conn: Connection, runner: WorldRunner) -> None:
    """(A streaming worker's reader thread) every message from the parent into the runner's answer
    queue, so the main thread waits on one queue for both; None once the parent has gone."""
    while True:
        try:
            message = receive(conn)
        except (EOFError, OSError):
            message = None
        runner.post(message)
        if message is None:
            return


def _pack(answer: StreamAnswer) -> tuple:
    value = answer.value if answer.ok else sendable_error(answer.value, "world")
    return answer.i, answer.method, answer.ok, value, answer.seconds, answer.attempts, answer.busy


def _send_answers(conn: Connection, done: list[StreamAnswer]) -> None:
    packed = [_pack(a) for a in done]
    try:
        send(conn, ("answers", packed))
    except (pickle.PicklingError, TypeError, AttributeError):  # one world's answer does not pickle
        send(conn, ("answers", [_sendable(p) for p in packed]))


def _stream(conn: Connection, runner: WorldRunner, first: tuple) -> None:
    """Per-actor collection in a worker: start the calls the parent sends (`("submit", [(i,
    method, args), ...])`, `("replace", i)`), and each time the worker wakes send every answer that
    is ready as one `("answers", [...])` message. The worlds' timeouts and retries are the runner's.
    `async def` worlds: all of it on their event loop (`_stream_on_loop`); sync worlds (a thread
    each): this thread waits on the runner's answer queue, into which a reader thread posts the
    parent's messages."""
    if runner.loop is not None:
        _stream_on_loop(conn, runner, first)
        return
    threading.Thread(target=_read, args=(conn, runner), name="external-worlds-reader", daemon=True).start()
    runner.submit_many(first[1])
    while True:
        done = runner.answers(IDLE_WAKE)
        for message in runner.take_posted():
            if message is None:
                return
            if message[0] == "submit":
                runner.submit_many(message[1])
            elif message[0] == "replace":
                runner.replace(message[1])
            else:  # a lock-step call (the env's reset while no stream call is in flight)
                _run_all(conn, runner, message)
        if done:
            _send_answers(conn, done)


def _stream_on_loop(conn: Connection, runner: WorldRunner, first: tuple) -> None:
    """`_stream` for `async def` worlds, with no thread between the pipe and the worlds: the event
    loop reads the parent's messages (a reader on the pipe), starts the calls, and once per pass
    in which calls answered sends them all (one message); a tick every `TICK` seconds applies the
    calls' deadlines. This thread only runs lock-step calls (which wait on the loop) and waits for
    the parent to close the stream."""
    loop = runner.loop
    assert loop is not None
    fd = conn.fileno()
    jobs: queue.SimpleQueue = queue.SimpleQueue()  # for this thread: lock-step calls, then None (stop)
    lock = threading.Lock()  # sends from the loop and from this thread, one message at a time
    flushing = [False]

    def flush() -> None:
        flushing[0] = False
        done = runner.answers(0.0)  # what answered since the last flush, and calls past their deadline
        if done:
            with lock:
                _send_answers(conn, done)

    def soon() -> None:  # after each answer: one flush per pass of the loop, however many answered in it
        if not flushing[0]:
            flushing[0] = True
            loop.call_soon(flush)

    def tick() -> None:
        flush()
        loop.call_later(TICK, tick)

    def readable() -> None:
        try:
            while conn.poll(0):
                message = receive(conn)
                if message is None:
                    raise EOFError
                if message[0] == "submit":
                    runner.submit_many(message[1])
                elif message[0] == "replace":
                    runner.replace(message[1])
                else:
                    jobs.put(message)
        except (EOFError, OSError):  # the parent closed the stream or has gone
            loop.remove_reader(fd)
            jobs.put(None)

    def start() -> None:
        runner.on_answer = soon
        loop.add_reader(fd, readable)
        runner.submit_many(first[1])
        loop.call_later(TICK, tick)

    loop.call_soon_threadsafe(start)
    while True:
        message = jobs.get()
        if message is None:
            return
        seq, method, args = message
        try:
            reply = (seq, "ok", runner.run_all(method, args))
        except WorldCallFailed as failed:
            reply = (seq, "failed", (failed.actor, failed.method, failed.why))
        with lock:
            _reply(conn, reply, method)


def _sendable(packed: tuple) -> tuple:
    """`packed`, or the same answer as a failure saying that its value cannot reach the trainer."""
    try:
        pickle.dumps(packed)
        return packed
    except Exception as err:
        i, method, _, value, seconds, attempts, busy = packed
        why = TypeError(f"returned a value that cannot be sent to the trainer process ({type(err).__name__}: "
                        f"{err}): {value!r:.80}")
        return i, method, False, why, seconds, attempts, busy


def _said(err: Any) -> str:
    """A worker's reported exception as text for the one line."""
    return f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"


def _picklable(name: str, value: Any, fix: str) -> None:
    try:
        pickle.dumps(value)
    except Exception as err:
        raise ConfigError(f"data.env.init_args.{name}: cannot be sent to worker processes "
                          f"({type(err).__name__}: {err}); {fix}") from None


class WorkerProcesses:
    """`WorldRunner`'s interfaces (`facts`, `run_all`, `close`; the stream interface `submit_many`,
    `answers`, `in_flight`, `replace`, `raised`) over `workers` processes (1 <= workers <=
    num_envs: `ExternalBatchedEnv` checks and caps it).

    `world`, `world_kwargs` and `shared` must pickle (name the world by import path or as a
    module-level class; give shared resources as `{class_path, init_args}` specs, built in each
    worker). `start`: the start method (`parlightning.runtime.processes.start_method`: forkserver
    where available, so workers fork from a clean server process, not from this threaded one;
    spawn elsewhere). `retry_any`: `on_error: retry` (every exception is repeated, in the worker)."""

    streams = True

    def __init__(self, world: Any, world_kwargs: Mapping[str, Any], shared: Optional[Mapping[str, Any]],
                 num_envs: int, workers: int, seed: int, step_timeout: float, retries: int,
                 switch_interval: Optional[float], start: Optional[str] = None, retry_any: bool = False) -> None:
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
        # the stream: calls in flight per worker, since when each has been silent with calls in flight,
        # answers that arrived while a lock-step call was being read
        self._pending = [0] * workers
        self._quiet_since = [0.0] * workers
        self._stash: list[StreamAnswer] = []
        self._worker_of: dict[Any, int] = {}
        self.replaced = 0  # worlds rebuilt after a hung call (in their workers)
        self._finalizer = weakref.finalize(self, stop, self._processes, self._connections, CLOSE_GRACE)
        self.close_errors: list[tuple[int, BaseException]] = []  # (first actor, why) of workers that hung closing
        self.world_name = getattr(world, "__name__", str(world).rpartition(":")[2].rpartition(".")[2])
        for w, block in enumerate(self.blocks):  # forkserver: the server imports this module once
            child = Child(_serve, (world, dict(world_kwargs), dict(shared or {}), block, seed, step_timeout, retries,
                                   switch_interval, retry_any), name=f"external-worlds-{w}",
                          what=f"worker process {w} (actors {block[0]}-{block[-1]})", method=method, preload=[__name__])
            self._children.append(child)
            self._processes.append(child.process)
            self._connections.append(child.conn)
            self._worker_of[child.conn] = w
        self._facts = None
        for w, child in enumerate(self._children):  # every worker reports ready (or its error)
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
                self.world_name = facts.get("world_name", self.world_name)
            why = facts_disagreement(self.world_name, self.blocks[0][0], self._facts, self.blocks[w][0], facts)
            if why is not None:  # (each worker compared its own worlds with its first)
                self.close()
                raise ConfigError(why)

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
            message = self._children[w].receive()
        except ProcessDied as err:
            raise WorldCallFailed(self.blocks[w][0], method, f"worker process {w} (actors {self._span(w)}) "
                                                            f"died ({exit_text(err.exitcode)})") from None
        if message[0] == "error":  # the worker failed (and exits): what it said, in the one line
            raise WorldCallFailed(self.blocks[w][0], method, f"worker process {w} (actors {self._span(w)}) failed: "
                                                            f"{_said(message[1])}")
        return message

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
                                                                f"died ({exit_text(err.exitcode)})") from None
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
                message = self._receive(w, method, 0.0)
                if message[0] == "answers":  # the stream's, read later by `answers`
                    self._stash += self._unpack(w, message[1])
                    continue
                answer_seq, status, value = message
                if answer_seq != seq:  # an answer to an abandoned call: dropped
                    continue
                del waiting[conn]
                if status == "failed":
                    raise WorldCallFailed(*value)
                results.update(value)
        return results

    # ------------------------------------------------------------------ the stream interface
    def _what(self, w: int) -> str:
        return f"worker process {w} (actors {self._span(w)}, pid {self._processes[w].pid})"

    def _lost(self, w: int, why: str) -> WorkerLost:
        calls = self._pending[w]
        return WorkerLost(self.blocks[w][0], "step", f"{self._what(w)} {why} with {calls} "
                                                     f"call{'s' if calls != 1 else ''} in flight")

    def submit_many(self, calls: Sequence[tuple[int, str, tuple]]) -> None:
        """Start every `(i, method, args)` in `calls` (worlds with no call in flight): one message per worker."""
        per_worker: dict[int, list] = {}
        for call in calls:
            per_worker.setdefault(self._owner[call[0]], []).append(call)
        now = time.monotonic()
        for w, mine in per_worker.items():
            try:
                self._children[w].send(("submit", mine))
            except ProcessDied as err:
                raise self._lost(w, f"died ({exit_text(err.exitcode)})") from None
            if not self._pending[w]:
                self._quiet_since[w] = now
            self._pending[w] += len(mine)

    def in_flight(self) -> int:
        return sum(self._pending)

    def _unpack(self, w: int, items: list) -> list[StreamAnswer]:
        self._pending[w] -= len(items)
        self._quiet_since[w] = time.monotonic()
        return [StreamAnswer(*item) for item in items]

    def answers(self, timeout: float) -> list[StreamAnswer]:
        """The calls that finished in any worker (at least one, unless `timeout` seconds pass
        first). A worker that died, or has had calls in flight and said nothing for longer than
        its calls' deadlines allow, raises `WorkerLost` naming it."""
        out, self._stash = self._stash, []
        with expected_wait(timeout, "the external worlds' answers (step_timeout)"):
            ready = wait(self._connections, timeout=0.0 if out else timeout)
        for conn in ready:
            w = self._worker_of[conn]
            child = self._children[w]
            while True:
                try:
                    message = child.receive()
                except ProcessDied as err:
                    raise self._lost(w, f"died ({exit_text(err.exitcode)})") from None
                except BaseException as err:  # what it reported before it went
                    raise self._lost(w, f"failed ({type(err).__name__}: {err})") from None
                if message[0] == "answers":
                    out += self._unpack(w, message[1])
                elif message[0] == "error":
                    raise self._lost(w, f"failed ({_said(message[1])})")
                if not conn.poll(0):
                    break
        now = time.monotonic()
        bound = self.step_timeout * (self.retries + 1) + 10.0  # the workers time each call out themselves
        for w, calls in enumerate(self._pending):
            if calls and now - self._quiet_since[w] > bound:
                raise self._lost(w, f"stopped answering for {bound:g}s")
        return out

    def replace(self, i: int) -> None:
        """A fresh world for actor i in its worker (its call hung; the worker abandons the old one)."""
        w = self._owner[i]
        self.replaced += 1
        try:
            self._children[w].send(("replace", i))
        except ProcessDied as err:
            raise self._lost(w, f"died ({exit_text(err.exitcode)})") from None

    def raised(self, first: BaseException, attempts: int = 0, last: Optional[BaseException] = None) -> str:
        return describe_raised(first, attempts, last, self.retries)

    def close(self) -> None:
        """Close every worker's worlds and shared resources and end the processes; idempotent. A
        worker still closing its worlds after the grace is terminated, and named in `close_errors`."""
        alive = self._finalizer.alive and [p.is_alive() for p in self._processes]
        self._finalizer()
        for w, was in enumerate(alive or ()):
            code = self._processes[w].exitcode
            if was and code is not None and code < 0:  # terminated or killed by `stop`, not ended by itself
                self.close_errors.append((self.blocks[w][0], CloseTimeout(
                    f"did not return: worker process {w} (actors {self._span(w)}) was still closing its worlds "
                    f"{CLOSE_GRACE:g}s after it was asked to, and was terminated")))
