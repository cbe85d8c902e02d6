"""The child side of `ProcessCollector` (`data.collect_in: process`): a process that owns the
rank's env, the behaviour policy and the rollout buffers, and runs `AsyncCollector`'s step loop.

The loop is AsyncCollector's own (`_loop`, `_collect_round`, `SyncCollector._step`); only its three
links to the learner change: tickets and weights arrive as messages on the control pipe (read
between env steps, so a state request is answered at a step boundary), finished rounds leave on
it, and the sampler's picks are asked of the learner over a second pipe (the learner owns the
sampler, its records and its checkpoint) — except for a reward-blind sampler (`reward_blind =
True`, e.g. RoundRobin), whose picks never read records: the learner sends it once, and it picks
here with the task stream, no round trip. Messages are pickled with the standard pickler (tensors
by value: a rollout is one message, no shared-memory handles to leak).
"""

from __future__ import annotations

import collections
import pickle
import threading
from multiprocessing.connection import Connection
from types import SimpleNamespace
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from parlightning.async_collector import AsyncCollector
from parlightning.collector import stream_seed
from parlightning.envs.base import task_ids_of
from parlightning.envs.world_processes import _watch_parent
from parlightning.errors import ConfigError

FACTS = ("max_subagents", "solved_threshold", "checkpoint_exact", "worker_pids")  # read by the learner


def send(conn: Connection, message: Any) -> None:
    conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


def receive(conn: Connection) -> Any:
    return pickle.loads(conn.recv_bytes())


def sendable_error(err: BaseException) -> BaseException:
    """`err` if it survives pickling (its type and message reach the learner), else a RuntimeError
    with its type, message and traceback."""
    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:
        import traceback

        text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
        return RuntimeError(f"collector process: {type(err).__name__}: {err}\n{text}")


class _Inbox:
    """The control pipe as `_loop` sees it: `get()` is the next ticket (or None: stop), answering
    every other message meanwhile; `drain()` answers what has arrived, between two env steps."""

    def __init__(self, worker: "CollectorWorker", conn: Connection) -> None:
        self.worker, self.conn = worker, conn
        self.tickets: collections.deque = collections.deque()
        self.stopped = False

    def get(self) -> Optional[tuple[int, Any]]:
        while not self.tickets and not self.stopped:
            if self.conn.poll(1.0):
                self._handle(receive(self.conn))
        if self.stopped:
            return None
        j, shard = self.tickets.popleft()  # shard: None where the learner answers the picks
        self.worker.dm.round_index = j
        return j, shard

    def drain(self) -> None:
        while not self.stopped and self.conn.poll(0):
            self._handle(receive(self.conn))

    def _handle(self, message: Any) -> None:
        w = self.worker
        kind = message[0] if isinstance(message, tuple) else None
        if kind == "ticket":
            self.tickets.append((message[1], message[2]))
        elif kind == "weights":
            w.behaviour.load_state_dict(message[2])
            w._behaviour_version = message[1]
        elif kind == "policy":
            w.behaviour, w.dm.key_row = message[1].requires_grad_(False), message[2]
        elif kind == "sampler":  # a reward-blind sampler: picked here, from now on
            w.sampler, w.task_generator = message[1], torch.Generator()
            w.task_generator.set_state(message[2])
            w.local_picks = True
        elif kind == "state":
            send(self.conn, ("state", w.collection_state()))
        elif kind == "load":
            w.load_collection_state(message[1])
            send(self.conn, ("loaded",))
        elif kind == "reset":
            w.obs = w.env.reset(seed=message[1], task_index=message[2])
            w.current_task = message[2]
            send(self.conn, ("reset", w.obs))
        else:  # None (or anything unknown): stop
            self.stopped = True
            w._closed = True


class _Outbox:
    """Finished rounds go to the learner with each actor's task at the round's end and, where the
    child picks, the sampler's signals then (or the loop's error)."""

    def __init__(self, worker: "CollectorWorker", conn: Connection) -> None:
        self.worker, self.conn = worker, conn

    def put(self, item: tuple) -> None:
        if item and item[0] == "error":
            send(self.conn, ("error", sendable_error(item[1])))
        else:
            w = self.worker
            task = w.current_task.clone() if w.current_task is not None else None
            signals = getattr(w.sampler, "signals", None) if w.local_picks else None
            send(self.conn, ("rollout", item, task, signals() if callable(signals) else None))


class CollectorWorker(AsyncCollector):
    """AsyncCollector's step loop in the collector process: env, behaviour policy, buffers,
    episode counters and the action stream live here; see the module docstring."""

    def __init__(self, factory: Callable, num_envs: int, num_steps: int, seed: int, max_lag: int,
                 control: Connection, picks: Connection) -> None:
        # Deliberately not AsyncCollector.__init__: that builds a learner's collector (data module,
        # sampler, task and minibatch streams), which stay in the learner process.
        self.device, self.num_envs, self.num_steps, self.max_lag = torch.device("cpu"), num_envs, num_steps, max_lag
        self.dm = SimpleNamespace(key_row=None, round_index=0)  # what the step loop reads of a data module
        self.env_seed = stream_seed(seed, "env")
        self.env = factory(num_envs, "cpu", self.env_seed)
        if getattr(self.env, "num_envs", num_envs) != num_envs:
            raise ConfigError(f"data.env: built {self.env.num_envs} actors, expected data.num_envs={num_envs}")
        self.action_generator = torch.Generator().manual_seed(stream_seed(seed, "action"))
        self.task_ids = task_ids_of(self.env)
        self.sampler: Any = True if self.task_ids is not None else None  # picks are asked of the learner ...
        self.local_picks, self.task_generator = False, None  # ... unless it sends a reward-blind sampler
        self._lock = threading.RLock()
        self.memory, self.obs, self.current_task, self.buffer = None, None, None, None
        self.episode_return = torch.zeros(num_envs)
        self.episode_length = torch.zeros(num_envs)
        self.behaviour: Optional[torch.nn.Module] = None
        self._behaviour_version = -1
        self._closed = False
        self._step_lock = threading.Lock()
        self._tickets, self._ready = _Inbox(self, control), _Outbox(self, control)
        self._picks = picks
        self._round = 0

    def facts(self) -> dict[str, Any]:
        """What the learner needs of the world without stepping it (spaces, bank, caps, signature)."""
        from parlightning.preflight import env_signature

        env = self.env
        return {
            "class": type(env).__name__, "num_envs": self.num_envs, "observation_shape": tuple(env.observation_shape),
            "action_spec": env.action_spec, "task_ids": list(self.task_ids) if self.task_ids is not None else None,
            "signature": env_signature(env), "attrs": {k: getattr(env, k) for k in FACTS if hasattr(env, k)},
        }

    def _refresh(self) -> None:
        """Before every env step: the messages that arrived (newer weights, a state request)."""
        self._tickets.drain()

    def collection_state(self) -> dict[str, Any]:
        state = super().collection_state()
        if self.local_picks:  # the sampler's pick-side state and the task stream are this process's now
            state["sampler"], state["task_generator"] = self.sampler.state_dict(), self.task_generator.get_state()
        return state

    def _pick(self, reset_mask: Tensor) -> Tensor:
        if self.local_picks:
            return AsyncCollector._pick(self, reset_mask)
        send(self._picks, (self._round, reset_mask.numpy()))  # numpy: pickled in C, no GIL hand-offs
        picked = torch.from_numpy(receive(self._picks))
        self.current_task = torch.where(reset_mask, picked, self.current_task)
        return picked


def serve(control: Connection, picks: Connection, owner: int, factory: Callable, num_envs: int, num_steps: int,
          seed: int, max_lag: int) -> None:
    """The collector process: build the worker, report its facts (or the error), run the loop."""
    threading.Thread(target=_watch_parent, args=(owner,), name="owner-watch", daemon=True).start()
    torch.set_num_threads(1)  # acting on a batch of N: one core; the learner keeps the others
    try:
        worker = CollectorWorker(factory, num_envs, num_steps, seed, max_lag, control, picks)
        send(control, ("ready", worker.facts()))
    except Exception as err:
        send(control, ("error", sendable_error(err)))
        return
    try:
        worker._loop()
    except (EOFError, OSError, BrokenPipeError):  # the learner went away
        pass
    finally:
        close = getattr(worker.env, "close", None)
        if callable(close):
            close()
