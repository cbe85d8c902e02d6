"""`Collector`: one rank's collection, composed of a step loop (inside its transport), a schedule,
a transport and the planner, finishing every round with `finish_round`. `make_collector` picks
the parts from the two user-facing choices (`data.max_policy_lag`, `data.collect_in`).

Per call of `collect(round_index, env_steps)`: publish the learner's weights as version
`round_index`, release every round up to the schedule's horizon (each release runs the
`on_rollout_start` hooks, plans the round and freezes a `RoundContext`: round, shard, plan and
unit, λ position, release version), take the transport's next result (always the oldest round in
flight: `round_index`), and finish it into a `Rollout`.

Learner-side state (kept here, never in the child): the sampler (batched view) and its task
stream, the minibatch stream, the global RNGs. Step-side state is the step loop's, wherever it
runs; `state_dict` reads both at one consistent moment (`transport.consistent()`).
"""

from __future__ import annotations

import pickle
import time
import warnings
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from parlightning.runtime.rng import rng_state, set_rng_state
from parlightning.collection.context import RoundContext, RoundHooks
from parlightning.collection.finish import finish_round
from parlightning.collection.schedules import LagBudget, LockStep, Trajectories
from parlightning.collection.step_loop import SamplerLock, SamplerPicks, StepLoop, stream_seed
from parlightning.collection.trajectories import TrajectoryTransport
from parlightning.collection.transports import InlineTransport, ProcessTransport, ThreadTransport
from parlightning.envs.base import solved_threshold_of
from parlightning.errors import ConfigError
from parlightning.method_args import check_real_tensors, check_state, vouch_values
from parlightning.rollout import Rollout
from parlightning.distribution.samplers import as_batched


class Collector:
    """One rank's collection; see the module docstring.

    Args:
        transport: where the step loop runs (`InlineTransport`, `ThreadTransport`, `ProcessTransport`).
        schedule: `LockStep()` or `LagBudget(k)`.
        sampler: the data module's `TaskSampler` (batched here); reward: its `PARLReward` or None.
        seed: the rank's base seed (data.seed + rank), for the task and minibatch streams.
        gamma, gae_lambda: GAE's.
    """

    def __init__(self, transport: Any, schedule: Any, sampler: Any, reward: Any, seed: int, device: torch.device,
                 gamma: float, gae_lambda: float, lock: Optional[SamplerLock] = None) -> None:
        self.transport, self.schedule, self.reward = transport, schedule, reward
        self.device, self.gamma, self.gae_lambda = device, gamma, gae_lambda
        self.lock = lock if lock is not None else SamplerLock()
        self.env = transport.env  # the world (a `RemoteEnv` of facts where it steps in a child process)
        self.num_envs = int(self.env.num_envs)
        self.task_ids = getattr(self.env, "task_ids", None)
        self.task_ids = list(self.task_ids) if self.task_ids is not None else None
        self.task_generator = torch.Generator(device=device).manual_seed(stream_seed(seed, "task"))  # sampler picks
        self.minibatch_generator = torch.Generator(device=device).manual_seed(stream_seed(seed, "minibatch"))
        self.sampler: Any = None  # the batched view of the data module's sampler, once bound
        self.picks: Optional[SamplerPicks] = None
        self.planner: Any = None
        self.hooks: RoundHooks = RoundHooks()
        self.key_row: Optional[Tensor] = None
        self._released = 0  # next round to release
        self._version = 0  # the learner's policy version (PPO iterations) as of the last collect
        self._started_collecting = False
        self._last_collect_start: Optional[float] = None
        self._learner_wait = 0.0

    @property
    def loop(self) -> Optional[StepLoop]:
        """The step loop, where it runs in this process (None for a process transport)."""
        return self.transport.loop

    @property
    def current_task(self) -> Optional[Tensor]:
        """[N] bank index each actor is working on (as of the newest round's end in a child process)."""
        return self.transport.current_task

    def start(self, sampler: Any, planner: Any = None, round_index: int = 0) -> None:
        """Bind the sampler (and planner), plan round `round_index` and reset every actor on the
        sampler's picks from its shard."""
        self.planner = planner
        if self.task_ids is None:
            self.transport.reset(None)
            return
        self.sampler = as_batched(sampler, queue_length=self.num_envs)
        self.sampler.bind(self.task_ids, self.device)
        self.picks = SamplerPicks(self.sampler, self.task_generator, self.lock)
        self.picks.num_tasks = len(self.task_ids)  # every pick checked against the bank, the first reset's too
        if self.loop is not None:
            self.loop.picks = self.picks
        else:
            self.transport.picks = self.picks
        context = self._context(round_index, issue=False)  # round 0's plan holds from the first step
        everyone = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self.transport.reset(self.picks.pick(context, everyone))

    def bind_keys(self, key_row: Tensor) -> None:
        """Every bank task's row of a keyed policy's table (TensorParallel)."""
        self.key_row = key_row
        if self.loop is not None:
            self.loop.key_row = key_row

    def bind_memory(self, policy: torch.nn.Module) -> None:
        """Carry a recurrent policy's hidden state for every actor from now on."""
        self.schedule.check_recurrent()
        self.loop.bind_memory(policy)

    @property
    def memory(self) -> Any:
        return self.loop.memory if self.loop is not None else None

    # ------------------------------------------------------------------ rounds
    def _context(self, round_index: int, issue: bool = True) -> RoundContext:
        plan, unit, shard = (), None, None
        if self.planner is not None:
            plan, unit, shard = self.planner.plan_round(round_index)
            if issue:
                self.planner.issued(round_index)
        if shard is None and self.task_ids is not None:
            shard = vouch_values(torch.arange(len(self.task_ids), device=self.device), 0, len(self.task_ids))
        return RoundContext(round_index, shard, plan, unit, getattr(self.reward, "position", None),
                            self._version)

    def _release(self, upto: int) -> None:
        """Issue rounds up to `upto`: their `on_rollout_start` hooks, plan and context, in this thread."""
        while self._released <= upto:
            j = self._released
            with self.lock.learner():
                self.hooks.on_rollout_start(j)
                context = self._context(j)
            self.transport.issue(context)
            self._released += 1

    def collect(self, round_index: int, env_steps: int, hooks: Optional[RoundHooks] = None) -> Rollout:
        """Round `round_index`, finished (`env_steps`: global env steps before it); `hooks`: the
        trainer side (rollout callbacks, the learner's policy, the cross-rank sum)."""
        if hooks is not None:
            self.hooks = hooks
        policy = self.hooks.policy()
        self._version = round_index  # updates the learner's policy has had
        call_start = time.perf_counter()
        if not self._started_collecting:
            self._released = round_index
            local = None
            if self.picks is not None and getattr(self.sampler, "reward_blind", False) and self._sendable(self.sampler):
                local = self.picks
            self.transport.start(policy, self.key_row, local)
            self._started_collecting = True
        self.transport.publish(policy, round_index)
        self._release(self.schedule.horizon(round_index))
        iteration_time = None if self._last_collect_start is None else call_start - self._last_collect_start
        self._last_collect_start = call_start
        result = self.transport.result()
        wait = time.perf_counter() - call_start
        if result.context.round_index != round_index:
            raise RuntimeError(f"Collector: got round {result.context.round_index}, expected {round_index}")
        waits: dict[str, Tensor] = {}
        if self.schedule.lag:  # how much each side waited for the other
            if iteration_time is not None:
                waits["perf/learner_wait_frac"] = torch.tensor(min(self._learner_wait / iteration_time, 1.0))
            waits["perf/collector_wait_frac"] = torch.tensor(result.wait_frac)
        steps = result.buffer.num_envs * result.buffer.num_steps * self.hooks.world_size  # trained steps
        rollout = finish_round(
            result, hooks=self.hooks, sampler=self.sampler, picks=self.picks, lock=self.lock, reward=self.reward,
            planner=self.planner, schedule=self.schedule, policy=policy, gamma=self.gamma,
            gae_lambda=self.gae_lambda, env_steps=env_steps + steps,
            solved_threshold=solved_threshold_of(self.env), iteration_time=iteration_time,
            extra_stats={**waits, **result.stats})
        self._learner_wait = wait  # counted against the iteration it starts
        return rollout

    @staticmethod
    def _sendable(sampler: Any) -> bool:
        try:
            pickle.dumps(sampler)
            return True
        except Exception:
            return False

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """This rank's step-side state (the step loop's, wherever it runs) and learner-side state
        (task and minibatch streams, the sampler, global RNGs), read at one consistent moment."""
        with self.transport.consistent():
            step_side = self.transport.state_dict()
            learner = {
                "task_generator": self.task_generator.get_state(),
                "minibatch_generator": self.minibatch_generator.get_state(),
                "sampler": self.sampler.state_dict() if self.sampler is not None else {},
                "rng": rng_state(),
            }
        # the user components' own states, walked once per save: a tensor without data named with its key
        check_real_tensors("data.env", type(self.env).__name__, step_side.get("env"))
        sampler = step_side.get("sampler", learner["sampler"])
        check_real_tensors("data.sampler", type(getattr(self.sampler, "sampler", self.sampler)).__name__, sampler)
        return {**learner, **step_side}  # where the child picks, its sampler and task stream are the real ones

    def load_state_dict(self, state: dict[str, Any]) -> None:
        own = {"task_generator": self.task_generator.get_state(), "minibatch_generator": self.minibatch_generator.get_state()}
        with self.transport.consistent():  # the step loop's own tensors (observations, episode counters): same
            own.update({k: v for k, v in self.transport.state_dict().items() if isinstance(v, torch.Tensor)})
        check_state("RolloutDataModule", {k: state[k] for k in own if isinstance(state, dict) and k in state}, own,
                    optional=tuple(own), hint="; the checkpoint's rollout state does not fit this run (edited, or "
                    "saved with other data settings): resume from an unedited checkpoint of this config")
        bad = next((k for k in own if isinstance(state, dict) and isinstance(state.get(k), torch.Tensor)
                    and state[k].is_floating_point() and not bool(torch.isfinite(state[k]).all())), None)
        if bad is not None:  # a NaN carried into the next rollout's returns and observations
            raise ConfigError(f"RolloutDataModule.load_state_dict(state): state[{bad!r}] holds NaN or inf; the rollout "
                              "state of a run is finite (a world's values are checked at every step): resume from an "
                              "unedited checkpoint")
        self.transport.load_state_dict(state)
        if "task_generator" in state:  # checkpoints before separate streams picked tasks with the action stream
            self.task_generator.set_state(state["task_generator"])
        self.minibatch_generator.set_state(state["minibatch_generator"])
        self.load_sampler_state(state)
        if "rng" in state:
            set_rng_state(state["rng"])
        note = getattr(self.transport, "resume_note", None)
        if callable(note):
            warnings.warn(note(), stacklevel=2)
        elif self.schedule.lag:
            warnings.warn(
                f"data.max_policy_lag={self.schedule.lag}: resuming from a checkpoint loses the rollouts that were in "
                f"flight when it was written (at most {self.schedule.lag}, collected but not trained on); they are "
                "collected afresh",
                stacklevel=2,
            )

    def load_sampler_state(self, state: dict[str, Any]) -> None:
        """Only the sampler's statistics (resuming on another number of ranks)."""
        if self.sampler is None:
            return
        try:
            self.sampler.load_state_dict(state["sampler"])
        except ConfigError as err:
            if ".load_state_dict(state)" not in str(err):  # not the state check's (method_args.check_state)
                raise
            name = type(getattr(self.sampler, "sampler", self.sampler)).__name__
            raise ConfigError(f"data.sampler: the checkpoint's sampler state does not fit this config's {name} "
                              f"({str(err)[:240]}); resume with the sampler that wrote it, or start fresh without "
                              "--ckpt_path") from None
        except (KeyError, ValueError, TypeError, AttributeError) as err:  # another sampler's state (or none)
            name = type(getattr(self.sampler, "sampler", self.sampler)).__name__
            raise ConfigError(f"data.sampler: the checkpoint's sampler state does not fit this config's {name} "
                              f"({type(err).__name__}: {' '.join(str(err).split())[:160]}); resume with the sampler "
                              "that wrote it, or start fresh without --ckpt_path") from None

    def close(self) -> None:
        self.transport.close()

    @property
    def runs_after_close(self) -> bool:
        """Whether `collect` still works after `close()`: the step loop runs in the caller (inline), so
        the same worlds go on (a world that close() closed refuses its step by name); a thread or process
        collector has stopped."""
        return bool(getattr(self.transport, "runs_after_close", False))


def make_collector(factory: Callable, num_envs: int, num_steps: int, seed: int, device: torch.device, *,
                   max_policy_lag: int = 0, collect_in: str = "thread", sampler: Any = None, reward: Any = None,
                   gamma: float = 0.99, gae_lambda: float = 0.95, rank: int = 0,
                   start_method: Optional[str] = None, collect: str = "rounds",
                   actors_in_flight: Optional[int] = None) -> Collector:
    """The collector for `data.collect`, `data.max_policy_lag` and `data.collect_in`: rounds with lag
    0 is lock-step inline; k >= 1 a lag budget in a thread or in a child process; `trajectories` is
    per-actor asynchronous collection (`actors_in_flight` worlds, batches of `num_envs` segments)."""
    if collect_in not in ("thread", "process"):
        raise ConfigError(f"data.collect_in: must be 'thread' or 'process', got {collect_in!r}")
    if collect not in ("rounds", "trajectories"):
        raise ConfigError(f"data.collect: must be 'rounds' or 'trajectories', got {collect!r}")
    lock = SamplerLock()
    if collect == "trajectories":
        schedule: Any = Trajectories(max_policy_lag)
        if collect_in == "process":
            raise ConfigError("data.collect_in: process is not supported with data.collect: trajectories (its actors "
                              "run on one thread here); use collect_in: thread, or workers for the worlds")
        loop = StepLoop(factory, actors_in_flight or num_envs, num_steps, seed, device)
        try:
            traj = TrajectoryTransport(loop, lock, schedule.lag, num_envs, rank)
            return Collector(traj, schedule, sampler, reward, seed, device, gamma, gae_lambda, lock)
        except BaseException:
            close = getattr(loop.env, "close", None)
            if callable(close):
                close()
            raise
    schedule = LockStep() if max_policy_lag == 0 else LagBudget(max_policy_lag)
    if collect_in == "process" and schedule.lag:
        transport: Any = ProcessTransport(factory, num_envs, num_steps, seed, device, lock, schedule.lag, rank,
                                          start_method)
    else:
        loop = StepLoop(factory, num_envs, num_steps, seed, device)
        if getattr(loop.env, "on_error", "fail") == "drop":
            close = getattr(loop.env, "close", None)
            if callable(close):
                close()
            raise ConfigError("data.env.init_args.on_error: drop needs data.collect: trajectories (a round of "
                              "lock-step actors cannot lose one actor's trajectory); use fail or retry")
        transport = ThreadTransport(loop, lock, schedule.lag, rank) if schedule.lag else InlineTransport(loop)
    try:
        return Collector(transport, schedule, sampler, reward, seed, device, gamma, gae_lambda, lock)
    except BaseException:
        transport.close()
        raise
