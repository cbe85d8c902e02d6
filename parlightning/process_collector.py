"""`ProcessCollector` (`data.collect_in: process`): `AsyncCollector`'s schedule with the step loop
in a child process, so that collection and the update stop sharing one GIL.

Why. In a thread, every torch call of the step loop (the behaviour policy, buffer writes, episode
counters: ~80 small calls per step) and every wake-up of an external world hands the learner's
GIL back and forth; on 2 cores the update then runs 27-102% slower while the collector works
(README, "Where the time goes"). A process has its own interpreter: the learner's update runs
undisturbed and the two overlap as the lag budget intends.

What stays with the learner: the schedule (releases, version stamps, the lag check), every
rollout hook, the sampler (the child asks for each pick over a pipe; a learner thread answers
under the sampler's lock; a reward-blind sampler such as RoundRobin, whose picks never read
records, is sent to the child instead, which picks locally and reports its state), PARL bonus, GAE, scoring, logging and DDP collectives. What moves:
the env (built from `data.env` in the child, which must therefore pickle), the behaviour policy
(weights sent once per update), the buffers and episode counters, the action stream. A rollout
returns as one pickled message. `dm.env` is then a `RemoteEnv`: the world's facts, no stepping.

Costs: a process start per fit (the first one in a process also starts the forkserver, which
imports torch and Lightning: several seconds), a pickled rollout per round, and a pipe round trip
per step in which an episode ends (the picks). Throughput: `scripts/bench_lag.py`. CPU only;
recurrent policies are refused as with the thread.
"""

from __future__ import annotations

import copy
import functools
import multiprocessing as mp
import os
import pickle
import queue
import sys
import threading
import weakref
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any, Callable, Optional

import torch
from torch import Tensor

from parlightning.async_collector import AsyncCollector
from parlightning.collector_process import receive, send, serve
from parlightning.envs.world_processes import _stop
from parlightning.errors import ConfigError

if TYPE_CHECKING:
    from parlightning.data import RolloutDataModule

READY_TIMEOUT = 300.0  # seconds the collector process may take to import and build the env
COLLECTION_KEYS = ("env", "obs", "episode_return", "episode_length", "action_generator", "current_task")


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
    bank, caps, checkpoint signature) and `reset`, which the child runs."""

    def __init__(self, facts: dict[str, Any], request: Callable[[tuple], tuple]) -> None:
        self.num_envs = facts["num_envs"]
        self.observation_shape = facts["observation_shape"]
        self.action_spec = facts["action_spec"]
        if facts["task_ids"] is not None:
            self.task_ids = facts["task_ids"]
        for name, value in facts["attrs"].items():
            setattr(self, name, value)
        self.remote_class = facts["class"]
        self.remote_signature = facts["signature"]  # preflight.env_signature of the real world
        self._request = request

    def reset(self, seed: Optional[int] = None, task_index: Optional[Tensor] = None) -> Tensor:
        return self._request(("reset", seed, task_index))[1]

    def step(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self.remote_class} steps in the collector process (data.collect_in: process)")

    def close(self) -> None:
        pass  # the collector ends its process, which closes the world


class ProcessCollector(AsyncCollector):
    """Collects in a child process under a lag budget of `max_lag` updates; see the module docstring.
    `start_method`: multiprocessing's (forkserver where available, else spawn). `switch_interval`:
    the learner's GIL switch interval while collecting, so the link thread answers a pick within
    ~0.5 ms of a busy update instead of Python's 5 ms (restored on close)."""

    switch_interval = 0.0005

    def __init__(self, dm: "RolloutDataModule", device: torch.device, rank: int = 0, max_lag: int = 1,
                 start_method: Optional[str] = None) -> None:
        if device.type != "cpu":
            raise ConfigError(f"data.collect_in: process collects on the CPU, but this rank runs on {device}; "
                              "use data.collect_in: thread with a GPU")
        self._start_method = start_method
        self._replies: queue.Queue = queue.Queue()
        self._shards: dict[int, Optional[Tensor]] = {}
        self._policy_sent = False
        self._local_picks = False  # a reward-blind sampler went to the child, which picks from it
        self._child_signals: dict[int, dict[str, Tensor]] = {}  # its signals at each round's end
        self._restore_switch: Optional[float] = None
        self._process: Any = None
        self.max_lag = max_lag  # the child needs it before AsyncCollector.__init__ (which checks it) sets it
        super().__init__(dm, device, rank, max_lag)

    # ------------------------------------------------------------------ the child
    def _make_env(self) -> RemoteEnv:
        """Start the collector process (it builds the env) and return the world's facts."""
        factory = sendable_factory(self.dm.env_factory)
        method = self._start_method or ("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
        ctx = mp.get_context(method)
        if method == "forkserver":
            ctx.set_forkserver_preload(["parlightning.collector_process"])
        self._control, child_control = ctx.Pipe(duplex=True)
        self._picks, child_picks = ctx.Pipe(duplex=True)
        self._process = ctx.Process(
            target=serve, name=f"collector-rank{self.rank}", daemon=False,
            args=(child_control, child_picks, os.getpid(), factory, self.num_envs, self.num_steps,
                  self.dm.seed + self.rank, self.max_lag))
        self._process.start()
        child_control.close()
        child_picks.close()
        self._finalizer = weakref.finalize(self, _stop, [self._process], [self._control, self._picks])
        if not self._control.poll(READY_TIMEOUT):
            self._finalizer()
            raise ConfigError(f"data.collect_in: the collector process did not start within {READY_TIMEOUT:g}s")
        try:
            message = receive(self._control)
        except (EOFError, OSError):
            self._process.join(timeout=5.0)
            self._finalizer()
            raise ConfigError(f"data.collect_in: the collector process exited while starting (exit code "
                              f"{self._process.exitcode}; its output above says why)") from None
        if message[0] == "error":
            self._finalizer()
            raise message[1]
        return RemoteEnv(message[1], self._request)

    @property
    def pid(self) -> Optional[int]:
        """The collector process's pid."""
        return self._process.pid if self._process is not None else None

    def _died(self) -> RuntimeError:
        """The error a run ends with when the collector process has gone."""
        self._process.join(timeout=2.0)
        return RuntimeError(f"ProcessCollector: the collector process (pid {self._process.pid}) died "
                            f"(exit code {self._process.exitcode})")

    def _send(self, message: Any) -> None:
        """A message to the child; a child that has died ends the run with its exit code."""
        try:
            send(self._control, message)
        except (BrokenPipeError, ConnectionResetError, EOFError):
            err = self._died()
            self.close()
            raise err from None

    def _request(self, message: tuple) -> tuple:
        """Send `message` and wait for the child's answer (answering its picks meanwhile)."""
        if self._closed:
            raise RuntimeError("ProcessCollector: closed")
        self._send(message)
        if self._thread is None:  # before the first rollout nothing else reads the pipe
            try:
                answer = receive(self._control)
            except (EOFError, OSError):
                err = self._died()
                self.close()
                raise err from None
        else:
            while True:
                try:
                    answer = self._replies.get(timeout=0.02)
                    break
                except queue.Empty:
                    self._serve_pick()  # the caller may hold the sampler's lock (a rollout hook)
                    if not self._thread.is_alive():
                        raise RuntimeError("ProcessCollector: the collector process stopped answering") from None
        if answer[0] == "error":
            self.close()
            raise answer[1]
        return answer

    # ------------------------------------------------------------------ the learner's links
    def _publish(self, policy: torch.nn.Module, version: int) -> None:
        if not self._policy_sent:
            behaviour = copy.deepcopy(policy).requires_grad_(False)
            try:
                pickle.dumps(behaviour)
            except Exception as err:
                raise ConfigError(f"model: the policy cannot be sent to the collector process ({err}); "
                                  "use data.collect_in: thread") from None
            self._send(("policy", behaviour, self.dm.key_row))
            self._policy_sent = True
            self._hand_over_sampler()
        self._send(("weights", version, {k: v.detach() for k, v in policy.state_dict().items()}))

    def _hand_over_sampler(self) -> None:
        """A reward-blind sampler (its picks never read records) picks in the child from now on,
        with the task stream: no pipe round trip per pick. Others stay here and answer over the pipe."""
        if self.sampler is None or not getattr(self.sampler, "reward_blind", False):
            return
        try:
            pickle.dumps(self.sampler)
        except Exception:
            return  # not sendable: picks stay with the learner
        with self._lock:
            self._send(("sampler", self.sampler, self.task_generator.get_state()))
            self._local_picks = True

    def _issue(self, round_j: int, shard: Optional[Tensor]) -> None:
        if self._local_picks:  # the child picks: the shard travels with the ticket
            self._send(("ticket", round_j, shard))
            return
        self._shards[round_j] = shard  # answered here, dropped once the child picks for a later round
        self._send(("ticket", round_j, None))

    def _start_collecting(self, policy: torch.nn.Module) -> None:
        if self.switch_interval < sys.getswitchinterval():
            self._restore_switch = sys.getswitchinterval()
            sys.setswitchinterval(self.switch_interval)
        self._thread = threading.Thread(target=self._serve, name=f"collector-link-rank{self.rank}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        """The learner's link thread: routes rollouts and replies from the child, answers picks.
        It never blocks on the sampler's lock: a thread holding it (a rollout hook asking for the
        state) answers the picks itself while it waits, and needs this thread to route the reply."""
        conns = [self._control, self._picks]
        while not self._closed:
            try:
                ready = wait(conns, timeout=0.5)
                if self._control in ready:
                    message = receive(self._control)
                    if message[0] == "rollout":
                        if message[3] is not None:
                            self._child_signals[message[1][0]] = message[3]
                        self._ready.put(message[1])
                        self.current_task = message[2]  # dm.current_task: as of the newest round's end
                    elif message[0] == "error":
                        self._ready.put(message)
                        self._replies.put(message)
                    else:
                        self._replies.put(message)
                if self._picks in ready:
                    self._serve_pick(timeout=0.002)
            except (EOFError, OSError, ValueError):
                if self._closed:
                    return
                err = self._died()
                self._ready.put(("error", err))
                self._replies.put(("error", err))
                return

    def _serve_pick(self, timeout: float = -1) -> None:
        """Answer the child's pending pick, if any, from the sampler (under its lock, waiting at most
        `timeout` seconds for it; -1: as long as it takes)."""
        if not self._lock.acquire(timeout=timeout):
            return
        try:
            if self._closed or not self._picks.poll(0):
                return
            round_j, reset_mask = receive(self._picks)
            picked = self.sampler.pick_batch(self._shards[round_j], round_j, torch.from_numpy(reset_mask),
                                             self.task_generator)
            send(self._picks, picked.numpy())
        finally:
            self._lock.release()
        for j in [j for j in self._shards if j < round_j]:  # rounds the child has finished
            self._shards.pop(j, None)

    # ------------------------------------------------------------------ state and shutdown
    def collection_state(self) -> dict[str, Any]:
        return self._request(("state",))[1]

    def load_collection_state(self, state: dict[str, Any]) -> None:
        self._request(("load", {k: state[k] for k in COLLECTION_KEYS if k in state}))
        if state.get("current_task") is not None:
            self.current_task = state["current_task"].clone()

    def state_dict(self) -> dict[str, Any]:
        collection = self.collection_state()  # with the sampler and task stream where the child picks
        with self._lock:  # the link thread picks from the same sampler
            return {**self._learner_state(), **collection}

    def _stats(self, rollout: Any, steps: int, rollout_time: float, iteration_time: Optional[float]
               ) -> dict[str, Tensor]:
        stats = super()._stats(rollout, steps, rollout_time, iteration_time)
        signals = self._child_signals.pop(rollout.round_index, None)  # the child's sampler, at that round's end
        if signals is not None:
            stats.update({f"sampler/{k}": v.detach().float() for k, v in signals.items()})
        return stats

    @property
    def worker_pids(self) -> list[int]:
        """The collector process and the env's own worker processes (if any)."""
        return [p for p in [self.pid, *getattr(self.env, "worker_pids", [])] if p is not None]

    def close(self) -> None:
        """Stop the collector process (it closes the env first), then the link thread."""
        if self._closed or self._process is None:
            self._closed = True
            return
        self._closed = True
        self._picks.close()  # a child waiting for a pick gets EOF and ends its round
        try:
            send(self._control, None)  # an idle child closes the env and exits
        except (OSError, ValueError):
            pass
        self._process.join(self.join_timeout)  # closing the env may take a moment (a pool's processes)
        self._finalizer()  # terminates a child that did not exit, closes the pipes
        if self._restore_switch is not None:
            sys.setswitchinterval(self._restore_switch)
            self._restore_switch = None
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.join_timeout)
