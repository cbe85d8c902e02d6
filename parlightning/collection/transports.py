"""Transports: where the step loop runs. Each runs the same `StepLoop` and hands back the same
`RoundResult`; none knows the schedule beyond the `before_step` hook it is given.

- `InlineTransport`: in the caller, when the result is asked for (lock-step's natural home).
- `ThreadTransport` (`data.collect_in: thread`): a background thread with its own copy of the
  policy (the behaviour policy, weights loaded before every step); the env and buffers share
  memory with the learner, an external world's waits release the GIL, but the loop's many small
  torch calls still take the learner's GIL.
- `ProcessTransport` (`data.collect_in: process`): a child process that builds its own env from
  `data.env` (which must pickle) and runs the step loop itself (`serve`); collection and the
  update stop sharing one interpreter. CPU only.

Process protocol (one duplex pipe, `parlightning.runtime.processes` messages, in order both ways):
learner -> child: `("policy", module, key_row, lag)` once, `("sampler", sampler, stream)` once for
a reward-blind sampler (its picks never read records, so the child picks from its own copy),
`("weights", version, state)` per update, `("ticket", context)` per released round, `("state",)`
/ `("load", state)` / `("reset", first)` requests, `("picked", tasks)` answers, `None` to stop.
child -> learner: `("ready", facts)`, `("pick", round, reset_mask)` (the learner's sampler
answers, from that round's context), `("rollout", result)`, replies, `("error", exc)`.
The child reads its pipe at every step boundary (weights, state requests) and while it waits for
a pick; the learner's link thread reads it all the time and answers picks under the sampler's
lock. A learner thread holding that lock (a rollout hook asking for the state) processes the
link's messages itself, in order, while it waits: so a state request is answered at a step
boundary with every pick before it answered and none after it (the checkpoint is consistent:
`consistent()`). After an error the child keeps reading until it is told to stop, so the learner
never meets a broken pipe, and the error it raises is the child's own (e.g. the
`ExternalWorldError` naming actor and task).
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import pickle
import queue
import sys
import threading
import time
import weakref
from typing import Any, Callable, Iterator, Optional

import torch
from torch import Tensor

from parlightning.collection.context import RoundContext, RoundResult
from parlightning.collection.step_loop import Picks, SamplerLock, SamplerPicks, StepLoop
from parlightning.errors import ConfigError
from parlightning.runtime.processes import Child, receive, send, sendable_error, watch_parent

READY_TIMEOUT = 300.0  # seconds the collector process may take to import and build the env
FACTS = ("max_subagents", "solved_threshold", "checkpoint_exact", "worker_pids")  # the world's, for the learner


class _LoopHere:
    """What a transport whose step loop runs in this process answers from the loop itself."""

    def __init__(self, loop: StepLoop) -> None:
        self.loop, self.env = loop, loop.env

    def reset(self, first: Optional[Tensor]) -> None:
        self.loop.reset(first)

    def state_dict(self) -> dict[str, Any]:
        return self.loop.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loop.load_state_dict(state)

    @property
    def current_task(self) -> Optional[Tensor]:
        return self.loop.current_task

    def _close_env(self) -> None:
        close = getattr(self.env, "close", None)
        if callable(close):
            close()  # worker processes of async Gymnasium envs, external worlds


class InlineTransport(_LoopHere):
    """The step loop in the caller: `result()` collects the oldest issued round with the newest
    published policy (lock-step: the learner's own)."""

    runs_after_close = True  # close() closes the world only: the loop runs in the caller (`Collector.runs_after_close`)

    def __init__(self, loop: StepLoop) -> None:
        super().__init__(loop)
        self._issued: collections.deque = collections.deque()
        self._policy: Any = None

    def start(self, policy: torch.nn.Module, key_row: Optional[Tensor], local_sampler: Any = None) -> None:
        pass

    def publish(self, policy: torch.nn.Module, version: int) -> None:
        self._policy = policy

    def issue(self, context: RoundContext) -> None:
        self._issued.append(context)

    def result(self) -> RoundResult:
        return self.loop.run(self._policy, self._issued.popleft())

    def consistent(self) -> Any:
        return contextlib.nullcontext()

    def close(self) -> None:
        self._close_env()


class ThreadTransport(_LoopHere):
    """The step loop in a background thread; see the module docstring. `join_timeout`: seconds
    `close` waits for the thread (it may be inside a slow env step)."""

    join_timeout = 10.0

    def __init__(self, loop: StepLoop, lock: SamplerLock, lag: int, rank: int = 0) -> None:
        super().__init__(loop)
        self.lock, self.lag, self.rank = lock, lag, rank
        loop.step_lock = threading.Lock()  # env, observations and counters: held over each whole env step
        self.behaviour: Optional[torch.nn.Module] = None
        self._weights_lock = threading.Lock()
        self._published: Optional[dict[str, Tensor]] = None
        self._published_version = -1
        self._behaviour_version = -1
        self._tickets: queue.Queue = queue.Queue()  # released contexts; None stops
        self._ready: queue.Queue = queue.Queue()  # results, or an exception
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    def start(self, policy: torch.nn.Module, key_row: Optional[Tensor], local_sampler: Any = None) -> None:
        self.behaviour = copy.deepcopy(policy).requires_grad_(False)
        self._thread = threading.Thread(target=self._run, name=f"collector-rank{self.rank}", daemon=True)
        self._thread.start()

    def publish(self, policy: torch.nn.Module, version: int) -> None:
        snapshot = {k: v.detach().clone() for k, v in policy.state_dict().items()}
        with self._weights_lock:
            self._published, self._published_version = snapshot, version

    def issue(self, context: RoundContext) -> None:
        self._tickets.put(context)

    def result(self) -> RoundResult:
        while True:
            try:
                item = self._ready.get(timeout=0.5)
            except queue.Empty:
                if self._thread is None or not self._thread.is_alive():
                    self.close()
                    raise RuntimeError("ThreadTransport: the collector thread stopped without a rollout") from None
                continue
            if isinstance(item, BaseException):
                self.close()  # end the env's worker processes before the error ends the run
                raise item
            return item

    def _before_step(self, context: RoundContext) -> Callable[[int], int]:
        def refresh(t: int) -> int:
            if self._closed:
                raise RuntimeError("ThreadTransport: closed while collecting")
            if self._published_version != self._behaviour_version:  # a Python int compare when nothing is new
                with self._weights_lock:
                    weights, version = self._published, self._published_version
                with torch.inference_mode(False):
                    self.behaviour.load_state_dict(weights)
                self._behaviour_version = version
            if self._behaviour_version < context.round_index - self.lag:
                raise RuntimeError(f"ThreadTransport: round {context.round_index} released before weights of version "
                                   f"{context.round_index - self.lag}")
            return self._behaviour_version

        return refresh

    def _run(self) -> None:
        try:
            last_end = time.perf_counter()
            while True:
                t0 = time.perf_counter()
                context = self._tickets.get()
                waited = time.perf_counter() - t0
                if context is None or self._closed:
                    return
                result = self.loop.run(self.behaviour, context, self._before_step(context), fresh_buffer=True)
                if self.loop.picks is not None:  # the sampler's signals at the round's end, by the side that picks
                    result.signals = self.loop.picks.signals()
                end = time.perf_counter()
                result.wait_frac = waited / max(end - last_end, 1e-9)
                self._ready.put(result)
                last_end = end
        except BaseException as err:  # handed to the learner, which raises it
            self._ready.put(err)

    def consistent(self) -> Any:
        """Between two env steps of the thread (it touches the sampler only inside a step); from a
        rollout hook (the learner holds the sampler's lock, the thread may wait mid-step for it) as is."""
        return contextlib.nullcontext() if self.lock.learner_depth else self.loop.step_lock

    def close(self) -> None:
        """Stop the thread (after its current env step) and close the env (ending its worker processes)."""
        if self._closed:
            return
        self._closed = True
        self._tickets.put(None)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.join_timeout)  # a hung world: give up on it; closing the env ends its processes
        self._close_env()


# ---------------------------------------------------------------------------------- the process
def sendable_factory(factory: Callable) -> Callable:
    """`data.env` in a form that pickles: as given, or a LightningCLI-built factory (a partial over
    jsonargparse's instantiator, which holds a lock) as the plain class with its init_args."""
    fix = ("name the env by class_path in YAML, or pass a module-level function or functools.partial "
           "(not a lambda or closure); or use data.collect_in: thread")
    try:
        pickle.dumps(factory)
        return factory
    except Exception as err:
        why = f"{type(err).__name__}: {err}"
    if (isinstance(factory, functools.partial) and len(factory.args) == 2 and isinstance(factory.args[1], type)
            and getattr(factory.func, "__module__", "").startswith("jsonargparse")):
        plain = functools.partial(factory.args[1], **factory.keywords)
        try:
            pickle.dumps(plain)
            return plain
        except Exception as err:
            why = f"{type(err).__name__}: {err}"
    raise ConfigError(f"data.collect_in: process builds data.env in the collector process, but the env factory "
                      f"does not pickle ({why}); {fix}")


class RemoteEnv:
    """The learner's view of a world that steps in the collector process: its facts (spaces, task
    bank, caps, checkpoint signature); stepping it here is an error."""

    def __init__(self, facts: dict[str, Any]) -> None:
        self.num_envs = facts["num_envs"]
        self.observation_shape = facts["observation_shape"]
        self.action_spec = facts["action_spec"]
        if facts["task_ids"] is not None:
            self.task_ids = facts["task_ids"]
        for name, value in facts["attrs"].items():
            setattr(self, name, value)
        self.remote_class = facts["class"]
        self.remote_signature = facts["signature"]  # preflight.env_signature of the real world

    def step(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self.remote_class} steps in the collector process (data.collect_in: process)")

    def close(self) -> None:
        pass  # the transport ends its process, which closes the world


class _RemotePicks(Picks):
    """In the child: the learner's sampler answers each pick over the pipe; other messages that
    arrive meanwhile wait in the child's inbox for the next step boundary."""

    def __init__(self, child: "_ChildLoop") -> None:
        self.child = child

    def pick(self, context: RoundContext, reset_mask: Tensor) -> Tensor:
        c = self.child
        send(c.conn, ("pick", context.round_index, reset_mask.numpy()))  # numpy: pickled in C, no GIL hand-offs
        while True:
            message = receive(c.conn)
            if isinstance(message, tuple) and message[0] == "picked":
                return torch.from_numpy(message[1])
            if message is None:
                c.stopped = True
                raise EOFError("stopped while waiting for a pick")
            c.inbox.append(message)


class _ChildLoop:
    """The collector process's side: the step loop, the behaviour policy, and the pipe."""

    def __init__(self, loop: StepLoop, conn: Any) -> None:
        self.loop, self.conn = loop, conn
        self.inbox: collections.deque = collections.deque()
        self.tickets: collections.deque = collections.deque()
        self.behaviour: Optional[torch.nn.Module] = None
        self.version, self.lag = -1, 1
        self.local = False  # a reward-blind sampler picks here
        self.stopped = False
        if loop.task_ids is not None:
            loop.picks = _RemotePicks(self)

    def facts(self) -> dict[str, Any]:
        """What the learner needs of the world without stepping it (spaces, bank, caps, signature)."""
        from parlightning.envs.base import env_signature

        env = self.loop.env
        return {
            "class": type(env).__name__, "num_envs": self.loop.num_envs,
            "observation_shape": tuple(env.observation_shape), "action_spec": env.action_spec,
            "task_ids": list(self.loop.task_ids) if self.loop.task_ids is not None else None,
            "signature": env_signature(env), "attrs": {k: getattr(env, k) for k in FACTS if hasattr(env, k)},
        }

    def _next(self, block: bool) -> Any:
        if self.inbox:
            return self.inbox.popleft()
        if not block and not self.conn.poll(0):
            return ()
        return receive(self.conn)

    def drain(self) -> None:
        """Handle every message that has arrived (between two env steps)."""
        while not self.stopped:
            message = self._next(block=False)
            if message == ():
                return
            self.handle(message)

    def handle(self, message: Any) -> None:
        kind = message[0] if isinstance(message, tuple) else None
        loop = self.loop
        if kind == "ticket":
            self.tickets.append(message[1])
        elif kind == "weights":
            with torch.inference_mode(False):
                self.behaviour.load_state_dict(message[2])
            self.version = message[1]
        elif kind == "policy":
            self.behaviour, loop.key_row, self.lag = message[1].requires_grad_(False), message[2], message[3]
        elif kind == "sampler":  # a reward-blind sampler: picked here, from now on
            generator = torch.Generator()
            generator.set_state(message[2])
            loop.picks = SamplerPicks(message[1], generator, SamplerLock())
            self.local = True
        elif kind == "state":
            state = loop.state_dict()
            if self.local:  # the sampler's pick-side state and the task stream are this process's now
                state["sampler"] = loop.picks.sampler.state_dict()
                state["task_generator"] = loop.picks.generator.get_state()
            send(self.conn, ("state", state))
        elif kind == "load":
            loop.load_state_dict(message[1])
            send(self.conn, ("loaded",))
        elif kind == "reset":
            loop.reset(message[1])
            send(self.conn, ("reset",))
        else:  # None (or anything unknown): stop
            self.stopped = True

    def before_step(self, context: RoundContext) -> Callable[[int], int]:
        def refresh(t: int) -> int:
            self.drain()  # newer weights, a state request
            if self.stopped:
                raise EOFError("stopped while collecting")
            if self.version < context.round_index - self.lag:
                raise RuntimeError(f"collector process: round {context.round_index} released before weights of "
                                   f"version {context.round_index - self.lag}")
            return self.version

        return refresh

    def run(self) -> None:
        last_end = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            while not self.tickets and not self.stopped:
                self.handle(self._next(block=True))
            if self.stopped:
                return
            waited = time.perf_counter() - t0
            context = self.tickets.popleft()
            result = self.loop.run(self.behaviour, context, self.before_step(context), fresh_buffer=True)
            if self.local:  # the sampler's signals at the round's end, by the side that picks
                result.signals = self.loop.picks.signals()
            end = time.perf_counter()
            result.wait_frac = waited / max(end - last_end, 1e-9)
            last_end = end
            send(self.conn, ("rollout", result))

    def wait_for_stop(self) -> None:
        """After an error: keep reading (so the learner's sends never meet a closed pipe) until stopped."""
        while not self.stopped:
            message = self._next(block=True)
            if message is None:
                return


def serve(conn: Any, owner: int, factory: Callable, num_envs: int, num_steps: int, seed: int) -> None:
    """The collector process: build the step loop, report its facts (or the error), run rounds."""
    watch_parent(owner)
    torch.set_num_threads(1)  # acting on a batch of N: one core; the learner keeps the others
    try:
        child = _ChildLoop(StepLoop(factory, num_envs, num_steps, seed, torch.device("cpu")), conn)
        send(conn, ("ready", child.facts()))
    except Exception as err:
        send(conn, ("error", sendable_error(err, "collector process")))
        return
    try:
        child.run()
    except (EOFError, OSError):  # the learner went away or told us to stop
        pass
    except BaseException as err:  # the world's error, named: the learner raises it
        try:
            send(conn, ("error", sendable_error(err, "collector process")))
            child.wait_for_stop()
        except (EOFError, OSError):
            pass
    finally:
        close = getattr(child.loop.env, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # noqa: BLE001 (the child prints nothing: its run already ended or failed)
                pass


class ProcessTransport:
    """The step loop in a child process; see the module docstring. `switch_interval`: the learner's
    GIL switch interval while collecting, so the link thread answers a pick within ~0.5 ms of a
    busy update instead of Python's 5 ms (restored on close)."""

    switch_interval = 0.0005
    join_timeout = 10.0

    def __init__(self, factory: Callable, num_envs: int, num_steps: int, seed: int, device: torch.device,
                 lock: SamplerLock, lag: int, rank: int = 0, start_method: Optional[str] = None) -> None:
        if device.type != "cpu":
            raise ConfigError(f"data.collect_in: process collects on the CPU, but this rank runs on {device}; "
                              "use data.collect_in: thread with a GPU")
        self.lock, self.lag, self.rank, self.loop = lock, lag, rank, None
        self.picks: Optional[SamplerPicks] = None  # the learner's sampler, answering the child's picks
        self.local_picks = False  # a reward-blind sampler went to the child, which picks from it
        self._contexts: dict[int, RoundContext] = {}  # issued rounds whose picks the learner answers
        self._incoming: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._ready: queue.Queue = queue.Queue()
        self._failed: Optional[BaseException] = None
        self._closed = False
        self._current_task: Optional[Tensor] = None
        self._restore_switch: Optional[float] = None
        self.child = Child(serve, (sendable_factory(factory), num_envs, num_steps, seed), name=f"collector-rank{rank}",
                           what="the collector process", method=start_method, preload=[__name__])
        self._finalizer = weakref.finalize(self, self.child.close)
        self.env = RemoteEnv(self.child.wait_ready(READY_TIMEOUT))
        self._link = threading.Thread(target=self._serve_link, name=f"collector-link-rank{rank}", daemon=True)
        self.child.reader = self._link
        self._link.start()

    @property
    def pid(self) -> Optional[int]:
        return self.child.pid

    @property
    def worker_pids(self) -> list[int]:
        """The collector process and the env's own worker processes (if any)."""
        return [p for p in [self.pid, *getattr(self.env, "worker_pids", [])] if p is not None]

    @property
    def current_task(self) -> Optional[Tensor]:
        """Each actor's task as of the newest round's end (or the first reset)."""
        return self._current_task

    # ------------------------------------------------------------------ the link
    def _fail(self, err: BaseException) -> None:
        with self._cond:
            if self._failed is None:
                self._failed = err
                self._ready.put(err)
            self._cond.notify_all()

    def _serve_link(self) -> None:
        """Reads the child's messages in order; processes them under the sampler's lock when it can
        take it (never blocking on it: a lock holder waiting for a reply processes them itself)."""
        conn = self.child.conn
        while not self._closed:
            try:
                if conn.poll(0.002 if self._incoming else 0.5):
                    message = self.child.receive()
                    with self._cond:
                        self._incoming.append(message)
                        self._cond.notify_all()
            except BaseException as err:  # the child's reported error, or ProcessDied
                if not self._closed:
                    self._fail(err)
                return
            if self._incoming and self.lock.acquire(timeout=0.002):
                try:
                    while True:
                        with self._cond:
                            if not self._incoming:
                                break
                            message = self._incoming.popleft()
                        self._handle(message)
                except BaseException as err:
                    self._fail(err)
                    return
                finally:
                    self.lock.release()

    def _handle(self, message: Any) -> Optional[tuple]:
        """One message from the child (the sampler's lock held); returns it if it is a reply."""
        kind = message[0] if isinstance(message, tuple) else None
        if kind == "pick":
            round_j, reset_mask = message[1], message[2]
            context = self._contexts[round_j]
            picked = self.picks.pick(context, torch.from_numpy(reset_mask))
            self.child.send(("picked", picked.numpy()))
            for j in [j for j in self._contexts if j < round_j]:  # rounds the child has finished
                del self._contexts[j]
            return None
        if kind == "rollout":
            result: RoundResult = message[1]
            if result.signals is None and self.picks is not None:  # at the round's end: every pick of it answered
                result.signals = self.picks.signals()
            self._current_task = result.current_task
            self._ready.put(result)
            return None
        if kind == "error":
            self._fail(message[1])
            return None
        return message

    def _send(self, message: Any) -> None:
        if self._failed is not None:
            self.close()
            raise self._failed
        try:
            self.child.send(message)
        except BaseException as err:  # what the child reported before it went, else ProcessDied
            self._fail(err)
            self.close()
            raise self._failed from None

    def _request(self, message: tuple) -> tuple:
        """Send `message` and wait for the child's reply, processing the link's messages meanwhile."""
        if self._closed:
            raise RuntimeError("ProcessTransport: closed")
        with self.lock:
            self._send(message)
            while True:
                with self._cond:
                    while not self._incoming and self._failed is None:
                        self._cond.wait(0.05)
                        if not self._link.is_alive() and not self._incoming and self._failed is None:
                            self._fail(self.child.died())
                    if not self._incoming:
                        self.close()
                        raise self._failed
                    message = self._incoming.popleft()
                reply = self._handle(message)
                if reply is not None:
                    return reply

    # ------------------------------------------------------------------ the learner's side
    def start(self, policy: torch.nn.Module, key_row: Optional[Tensor], local_sampler: Any = None) -> None:
        """The behaviour policy (a copy of the learner's) and, for a reward-blind sampler, the sampler
        with its task stream (`local_sampler`: a `SamplerPicks`, or None)."""
        behaviour = copy.deepcopy(policy).requires_grad_(False)
        try:
            pickle.dumps(behaviour)
        except Exception as err:
            raise ConfigError(f"model: the policy cannot be sent to the collector process ({err}); "
                              "use data.collect_in: thread") from None
        self._send(("policy", behaviour, key_row, self.lag))
        if local_sampler is not None:
            with self.lock:
                self._send(("sampler", local_sampler.sampler, local_sampler.generator.get_state()))
                self.local_picks = True
        if self.switch_interval < sys.getswitchinterval():
            self._restore_switch = sys.getswitchinterval()
            sys.setswitchinterval(self.switch_interval)

    def publish(self, policy: torch.nn.Module, version: int) -> None:
        self._send(("weights", version, {k: v.detach() for k, v in policy.state_dict().items()}))

    def issue(self, context: RoundContext) -> None:
        with self.lock:  # the link thread reads the contexts while it answers picks
            if not self.local_picks:
                self._contexts[context.round_index] = context
            self._send(("ticket", context))

    def result(self) -> RoundResult:
        while True:
            try:
                item = self._ready.get(timeout=0.5)
            except queue.Empty:
                if not self._link.is_alive() and self._failed is None:
                    self._fail(self.child.died())
                continue
            if isinstance(item, BaseException):
                self.close()
                raise item
            return item

    def reset(self, first: Optional[Tensor]) -> None:
        self._request(("reset", first))
        self._current_task = first

    @contextlib.contextmanager
    def consistent(self) -> Iterator[None]:
        """The sampler's lock: no pick is answered between the child's state and the learner's."""
        with self.lock:
            yield

    def state_dict(self) -> dict[str, Any]:
        return self._request(("state",))[1]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._request(("load", state))
        if state.get("current_task") is not None:
            self._current_task = state["current_task"].clone()

    def close(self) -> None:
        """Stop the collector process (it closes the env first), then the link thread."""
        if self._closed:
            return
        self._closed = True
        self.child.close(self.join_timeout)  # asks it to stop, waits for it to close the env, terminates if not
        if self._restore_switch is not None:
            sys.setswitchinterval(self._restore_switch)
            self._restore_switch = None
        if self._link is not threading.current_thread():
            self._link.join(self.join_timeout)
