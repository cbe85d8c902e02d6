"""Per-actor asynchronous collection (`data.collect: trajectories`): the transport of the
`schedules.Trajectories` schedule.

A background thread keeps every actor busy: as soon as an actor's world answers, the actor acts
again with the newest published weights (one batched policy call for all the actors that answered
since the last call), each step stamped with the version that acted. Each actor writes its own
column of an in-flight [T, N] store; when it has T steps and acts again, that column is closed
into a *segment* (its bootstrap value is the value its next action was taken with) and queued.
The learner's round v is the B = data.num_envs oldest queued segments, assembled into an ordinary
`RolloutBuffer` [T, B] and finished by `finish_round` like any round: episodes, sampler records,
PARL bonuses and critical steps come from the steps where an episode ended, so each belongs to the
episode (and the task) that produced it, whenever it was trained on.

- N (the worlds, `data.actors_in_flight`, default data.num_envs) is the capacity: how many calls
  are in flight; B is the batch. The queue holds at most B x max(k - 1, 1) segments: beyond that
  the actors wait for the learner (their samples would be too stale to train on anyway).
- A world with the stream interface (`ExternalBatchedEnv`: `send`, `receive`) is stepped per actor,
  whether its worlds run on threads here or in worker processes (`workers: P`, each streaming its
  answers back as they come): this transport never asks which; a tensor world (SwarmEnv) steps every actor at once through the
  step loop (`StepLoop.run`: the one copy of the batched step, no host sync), and its round is
  queued as N segments.
- A world call that fails under `on_error: drop` drops the actor's in-flight segment (it never
  reaches a batch; earlier segments of its episode were complete and stay), and the actor starts a
  new episode; `collect/dropped_trajectories`, `collect/retries` count them per round. More than
  `drop_budget` of a round's trajectories dropped ends the run with one error naming the worlds.
- What the thread counted while the data of round v was collected (drops, retries, busy time)
  travels with that round's result (`RoundResult.stats`), never read from a shared object.

The env-step axis (`env_steps`, TensorBoard's `step`) counts trained steps: B x T per round and
rank (stale-masked samples included, dropped trajectories and segments still queued not).
"""

from __future__ import annotations

import collections
import contextlib
import copy
import threading
import time
from typing import Any, Optional

import torch
from torch import Tensor

from parlightning.buffer import PART_FIELDS, STEP_FIELDS, RolloutBuffer
from parlightning.collection.context import RoundContext, RoundResult
from parlightning.collection.step_loop import SamplerLock, StepLoop, value_of
from parlightning.envs.base import action_mask_of
from parlightning.errors import ConfigError, ReportedError

ACT_FIELDS = ("obs", "actions", "logprobs", "values", "versions", "keys", "masks")  # written when an actor acts
ANSWER_FIELDS = ("rewards", "terminated", "truncated", "final_obs", "episode_return", "episode_length", "parts")
RECEIVE_TIMEOUT = 0.05  # seconds the thread waits for an answer before it looks at its flags again


class DropBudgetExceeded(ReportedError):
    """More than `drop_budget` of a round's trajectories were dropped; names the worlds and why."""


class _Queue:
    """Closed segments, oldest first, as column batches: `put(fields, next_value)`, `take(B)`."""

    def __init__(self) -> None:
        self.parts: collections.deque = collections.deque()
        self.count = 0

    def put(self, fields: dict[str, Tensor], next_value: Tensor) -> None:
        self.parts.append((fields, next_value))
        self.count += int(next_value.shape[0])

    def take(self, B: int) -> tuple[dict[str, Tensor], Tensor]:
        got: list[tuple[dict[str, Tensor], Tensor]] = []
        n = 0
        while n < B:
            fields, nv = self.parts.popleft()
            need = B - n
            if nv.shape[0] > need:  # split: the rest stays queued, oldest first
                self.parts.appendleft(({k: v[:, need:] for k, v in fields.items()}, nv[need:]))
                fields, nv = {k: v[:, :need] for k, v in fields.items()}, nv[:need]
            got.append((fields, nv))
            n += nv.shape[0]
        self.count -= B
        names = got[0][0].keys()
        return {k: torch.cat([g[0][k] for g in got], dim=1) for k in names}, torch.cat([g[1] for g in got])


class TrajectoryTransport:
    """The per-actor collector thread and the assembly of rounds; see the module docstring.

    Args:
        loop: the step loop (its env, observation, counters, action stream, picks, tasks).
        lock: the sampler's lock; lag: the schedule's k; batch: B segments per round.
    """

    join_timeout = 10.0

    def __init__(self, loop: StepLoop, lock: SamplerLock, lag: int, batch: int, rank: int = 0) -> None:
        self.loop, self.env, self.lock, self.lag, self.batch, self.rank = loop, loop.env, lock, lag, batch, rank
        self.streams = bool(getattr(self.env, "streams", False))
        if hasattr(self.env, "send") and not self.streams:
            raise ConfigError("data.collect: trajectories steps each external world on its own, which Ray actors do "
                              "not stream yet: set data.env.init_args.runner: local (the worlds on threads here with "
                              "workers: 0, or in P worker processes with workers: P)")
        self.capacity = batch * max(lag - 1, 1)  # queued segments beyond this would only be dropped as stale
        self.behaviour: Optional[torch.nn.Module] = None
        self._weights_lock = threading.Lock()
        self._published: Optional[dict[str, Tensor]] = None
        self._published_version = -1
        self._version = -1
        self._context: Optional[RoundContext] = None
        self._contexts: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._queue = _Queue()
        self._error: Optional[BaseException] = None
        self._window = self._new_window()
        self.step_lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._closed = False
        self._policy: Any = None
        self._store: dict[str, Optional[Tensor]] = {}
        self._shapes: dict[str, tuple] = {}
        self._action_dtype = torch.long
        self._fill: Optional[Tensor] = None  # [N] steps in each actor's in-flight column (external worlds)
        self._resumed_discarded = 0.0  # steps a checkpoint had in flight, logged with the first round after resume
        self.busy_total = 0.0  # seconds the answered calls kept their worlds busy, since the start (benchmarks read it)

    # ------------------------------------------------------------------ transport interface
    @property
    def current_task(self) -> Optional[Tensor]:
        return self.loop.current_task

    def reset(self, first: Optional[Tensor]) -> None:
        self.loop.reset(first)

    def start(self, policy: torch.nn.Module, key_row: Optional[Tensor], local_sampler: Any = None) -> None:
        self.behaviour = copy.deepcopy(policy).requires_grad_(False)

    def publish(self, policy: torch.nn.Module, version: int) -> None:
        snapshot = {k: v.detach().clone() for k, v in policy.state_dict().items()}
        with self._weights_lock:
            self._published, self._published_version = snapshot, version
        self._policy = policy

    def issue(self, context: RoundContext) -> None:
        self._contexts.append(context)
        if self._thread is None:  # the first round's context: the actors start now
            self._context = self._contexts.popleft()
            self._thread = threading.Thread(target=self._run, name=f"trajectories-rank{self.rank}", daemon=True)
            self._thread.start()

    def result(self) -> RoundResult:
        """Round `context` from the B oldest segments (waiting for them), stamped and bootstrapped."""
        start = time.perf_counter()
        context = self._contexts.popleft() if self._contexts else self._context
        with self._cond:
            while self._queue.count < self.batch:
                if self._error is not None:
                    break
                if self._thread is None or not self._thread.is_alive():
                    self._error = RuntimeError("TrajectoryTransport: the collector thread stopped without a rollout")
                    break
                self._cond.wait(0.5)
            if self._error is not None:
                err = self._error
                self.close()
                raise err
            fields, next_value = self._queue.take(self.batch)
            window, self._window = self._window, self._new_window()
            self._context = context  # picks from now on draw from this round's shard
            self._cond.notify_all()
        waited = time.perf_counter() - start
        buf = self._assemble(fields)
        next_value = next_value.clone()
        truncated_values = self._truncated_values(buf)
        versions = buf.versions
        span = max(time.perf_counter() - window["start"], 1e-9)
        stats = {
            "collect/dropped_trajectories": torch.tensor(float(window["dropped"])),
            "collect/retries": torch.tensor(float(window["retries"])),
            "collect/segments": torch.tensor(float(window["closed"])),
            "collect/resumed_discarded_steps": torch.tensor(self._resumed_discarded),
        }
        self._resumed_discarded = 0.0
        if self.streams:  # the schedule pools them over ranks into collect/utilisation
            stats["collect/busy_seconds"] = torch.tensor(float(window["busy"]))
            stats["collect/capacity_seconds"] = torch.tensor(span * self.env.num_envs)
        return RoundResult(context, buf, next_value, truncated_values,
                           [int(versions.min()), int(versions.max())], span, self.loop.current_task, None,
                           waited / span, stats)

    def consistent(self) -> Any:
        """Between two writes of the thread (`step_lock`) and outside its picks (the sampler's lock,
        which the thread takes while an answer's reset picks a task); from a rollout hook (the
        learner holds the sampler's lock) between two writes only."""
        if self.lock.learner_depth:
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        stack.enter_context(self.step_lock)  # first: the tensor world's step loop takes them in this order
        stack.enter_context(self.lock)
        return stack

    def in_flight_steps(self) -> int:
        """Steps collected but not trained yet: the queued segments' and the actors' open columns'
        (read under `consistent()`)."""
        with self._cond:
            queued = self._queue.count * self.loop.num_steps
        return int(queued + (int(self._fill.sum()) if self._fill is not None else 0))

    def state_dict(self) -> dict[str, Any]:
        """The step loop's state and the steps in flight. Those steps cannot be resumed (the queue
        and the open columns are not saved): a resumed run discards them and logs their number
        (`collect/resumed_discarded_steps`) with its first round."""
        return {**self.loop.state_dict(), "in_flight_steps": torch.tensor(self.in_flight_steps())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The step loop's state (a world that cannot restore its episodes restarts every actor on a
        task its sampler picks from the resumed round's shard, when the actors start)."""
        self.loop.load_state_dict(state)
        self._resumed_discarded = float(state.get("in_flight_steps", torch.tensor(0)))

    def resume_note(self) -> str:
        """What resuming this transport loses (the collector warns with it)."""
        restart = ("every actor starts a new episode on a task its sampler picks from the resumed round's shard "
                   "(the worlds cannot restore the episodes they were in)"
                   if not getattr(self.env, "checkpoint_exact", True) else "the world continues its episodes")
        return (f"data.collect: trajectories: resuming discards the {self._resumed_discarded:.0f} steps that were "
                f"collected but not yet trained when the checkpoint was written (logged as "
                f"collect/resumed_discarded_steps); {restart}")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.join_timeout)
        close = getattr(self.env, "close", None)
        if callable(close):
            close()

    # ------------------------------------------------------------------ assembly (learner thread)
    def _assemble(self, fields: dict[str, Tensor]) -> RolloutBuffer:
        loop = self.loop
        spec = self.env.action_spec
        buf = RolloutBuffer(loop.num_steps, self.batch, tuple(self.env.observation_shape), spec.action_shape,
                            loop.device, torch.long if spec.is_discrete else torch.float32)
        for name, value in fields.items():
            setattr(buf, name, value.clone())  # a normal tensor (the thread's are inference tensors)
        buf.has_parts = "parts" in fields
        return buf

    def _truncated_values(self, buf: RolloutBuffer) -> Tensor:
        """V of each truncated episode's final observation, from the learner's policy (one call)."""
        out = torch.zeros_like(buf.values)
        where = buf.truncated.nonzero(as_tuple=True)
        if where[0].numel():
            with torch.inference_mode():
                keys = buf.keys[where] if buf.keys is not None else None
                out[where] = value_of(self._policy, buf.final_obs[where], keys)
        return out

    @staticmethod
    def _new_window() -> dict[str, Any]:
        return {"start": time.perf_counter(), "dropped": 0, "retries": 0, "closed": 0, "busy": 0.0,
                "failures": collections.Counter()}

    # ------------------------------------------------------------------ the thread
    def _refresh(self) -> int:
        if self._published_version != self._version:
            with self._weights_lock:
                weights, version = self._published, self._published_version
            with torch.inference_mode(False):
                self.behaviour.load_state_dict(weights)
            self._version = version
        return self._version

    def _full(self) -> bool:
        return self._queue.count >= self.capacity

    def _wait_room(self) -> bool:
        """Block while the queue is full (the learner is behind); False once closed."""
        with self._cond:
            while self._full() and not self._closed:
                self._cond.wait(RECEIVE_TIMEOUT)
        return not self._closed

    def _put(self, fields: dict[str, Tensor], next_value: Tensor) -> None:
        with self._cond:
            self._queue.put(fields, next_value)
            self._window["closed"] += int(next_value.shape[0])
            self._cond.notify_all()

    def _run(self) -> None:
        try:
            with torch.inference_mode():
                if self.streams:
                    self._run_streams()
                else:
                    self._run_rounds()
        except BaseException as err:  # handed to the learner, which raises it
            with self._cond:
                self._error = err
                self._cond.notify_all()

    def _run_rounds(self) -> None:
        """A tensor world: every actor steps at once (the step loop's batched step); each round of
        the step loop is queued as N segments."""
        loop = self.loop
        while not self._closed:
            if not self._wait_room():
                return
            context = self._context
            with self.step_lock:  # the round and its queueing at once: a checkpoint counts it queued or not at all
                result = loop.run(self.behaviour, context, lambda t: self._refresh(), fresh_buffer=True)
                buf = result.buffer
                fields = {name: getattr(buf, name) for name in STEP_FIELDS if getattr(buf, name) is not None}
                self._put(fields, result.next_value)

    def _run_streams(self) -> None:
        """An external world: each actor acts when its own world answers."""
        loop, env = self.loop, self.env
        N, device = loop.num_envs, loop.device
        if loop.restart_pending:
            loop.restart(self._context)
        self._store = {name: None for name in STEP_FIELDS}
        self._shapes = {"": (), "obs": tuple(env.observation_shape), "action": tuple(env.action_spec.action_shape),
                        "parts": (len(PART_FIELDS),)}
        self._action_dtype = torch.long if env.action_spec.is_discrete else torch.float32
        column = self._column
        fill = self._fill = torch.zeros(N, dtype=torch.long, device=device)
        ready = torch.arange(N, device=device)  # every actor starts on its reset observation
        ep_return, ep_length = loop.episode_return, loop.episode_length

        def pick(mask: Tensor) -> Tensor:
            return loop.pick_for(self._context, mask)

        picks = pick if loop.picks is not None else None
        while not self._closed:
            if ready.numel() and not self._full():
                with self.step_lock:
                    self._act(ready, fill, column)
                ready = ready[:0]
            elif ready.numel() and env.in_flight() == 0:
                if not self._wait_room():
                    return
                continue
            arrivals = env.receive(picks, RECEIVE_TIMEOUT)
            if arrivals is None:
                continue
            with self.step_lock:
                ready = self._answer(arrivals, fill, column, ep_return, ep_length, ready)

    def _act(self, ready: Tensor, fill: Tensor, column: Any) -> None:
        """One batched policy call for the actors in `ready`: close the segments that are full
        (bootstrapped with the value they act with now), write the step, send the actions."""
        loop, env = self.loop, self.env
        version = self._refresh()
        obs = loop.obs[ready]
        kwargs: dict[str, Tensor] = {}
        mask = action_mask_of(env)
        if mask is not None:
            kwargs["mask"] = mask[ready]
        key = None
        if loop.key_row is not None:
            key = loop.key_row[loop.current_task[ready]]
            kwargs["key"] = key
        action, logprob, value = self.behaviour.act(obs, loop.action_generator, **kwargs)
        rows = fill[ready]
        full = None
        if ready.device.type == "cpu":  # numpy's test on the same memory: no torch call, no GIL hand-off
            any_full = bool((fill.numpy()[ready.numpy()] >= loop.num_steps).any())
        else:
            full = rows >= loop.num_steps
            any_full = bool(full.any())
        if any_full:
            full = rows >= loop.num_steps if full is None else full
            cols = ready[full]
            fields = {name: t[:, cols] for name, t in self._store.items() if t is not None}
            self._put(fields, value[full].clone())
            fill[cols] = 0
            rows = fill[ready]
        column("obs")[rows, ready] = obs
        column("actions")[rows, ready] = action.to(column("actions").dtype)
        column("logprobs")[rows, ready] = logprob
        column("values")[rows, ready] = value
        column("versions")[rows, ready] = version
        if key is not None:
            column("keys")[rows, ready] = key
        if mask is not None:
            column("masks", mask)[rows, ready] = mask[ready]
        env.send(ready.tolist(), action)

    def _column(self, name: str, like: Optional[Tensor] = None) -> Tensor:
        """The in-flight [T, N, ...] store of field `name` (allocated by its first write)."""
        store = self._store[name]
        if store is None:
            spec = STEP_FIELDS[name]
            trailing = tuple(like.shape[1:]) if spec.shape == "written" else self._shapes[spec.shape]
            dtype = spec.dtype if spec.dtype is not None else self._action_dtype
            with torch.inference_mode(False):
                store = torch.zeros(self.loop.num_steps, self.loop.num_envs, *trailing, device=self.loop.device,
                                    dtype=dtype)
            self._store[name] = store
        return store

    def _answer(self, arr: Any, fill: Tensor, column: Any, ep_return: Tensor, ep_length: Tensor,
                ready: Tensor) -> Tensor:
        """Write what the worlds answered into each actor's column; drop the trajectories of worlds
        that failed; returns the actors ready to act."""
        loop, w = self.loop, self._window
        w["retries"] += arr.retries
        w["busy"] += arr.busy
        self.busy_total += arr.busy
        if arr.failures:
            w["dropped"] += len(arr.failures)
            for line in arr.failures:
                w["failures"][line] += 1
        idx = arr.actors
        if idx.numel():  # (few torch calls: each may hand the GIL to the learner or the event loop)
            if arr.any_dropped:
                keep = ~arr.dropped
                a, reward, term, trunc, final = (idx[keep], arr.reward[keep], arr.terminated[keep],
                                                 arr.truncated[keep], arr.final_obs[keep])
            else:
                keep, a, reward, term, trunc, final = None, idx, arr.reward, arr.terminated, arr.truncated, arr.final_obs
            rows = fill[a]
            ep_return[a] += reward
            ep_length[a] += 1
            column("rewards")[rows, a] = reward
            column("terminated")[rows, a] = term
            column("truncated")[rows, a] = trunc
            column("final_obs")[rows, a] = final
            column("episode_return")[rows, a] = ep_return[a]
            column("episode_length")[rows, a] = ep_length[a]
            if arr.parts is not None:
                parts = arr.part_rows if arr.part_rows is not None else torch.stack([p.float() for p in arr.parts], -1)
                column("parts")[rows, a] = parts if keep is None else parts[keep]
            fill[a] += 1
            if arr.any_done or arr.any_dropped:
                gone = idx[arr.terminated | arr.truncated | arr.dropped]
                ep_return[gone] = 0.0
                ep_length[gone] = 0.0
            if arr.any_dropped:
                fill[idx[arr.dropped]] = 0  # the dropped trajectory's steps are overwritten, never queued
            loop.obs[idx] = arr.obs
            ready = torch.cat((ready, idx))
        self._check_budget()
        return ready

    def _check_budget(self) -> None:
        w = self._window
        total = w["dropped"] + w["closed"]
        budget = getattr(self.env, "drop_budget", 1.0)
        if w["dropped"] and total >= self.batch and w["dropped"] > budget * total:
            worlds = "; ".join(f"{line}{f' (x{n})' if n > 1 else ''}" for line, n in w["failures"].most_common(3))
            more = len(w["failures"]) - 3
            raise DropBudgetExceeded(
                f"external world {getattr(self.env, 'world_name', type(self.env).__name__)}: {w['dropped']} of "
                f"{total} trajectories dropped in one round, more than data.env.init_args.drop_budget={budget:g}: "
                f"{worlds}{f' (and {more} more)' if more > 0 else ''}; fix the worlds or raise drop_budget")
