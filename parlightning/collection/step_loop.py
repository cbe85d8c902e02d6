"""`StepLoop`: the one copy of the step. It owns what stepping changes: the env, the current
observation, the episode counters, the action stream, each actor's current task (and, for a
recurrent policy, every actor's hidden state), and it computes the bootstrap values after the
last step. Every transport runs this same object: in the learner's thread (inline), in a
background thread, or in a child process (which builds its own from the env factory).

What it does not own: the sampler (it asks a `Picks` for the tasks actors start, so the same
loop picks from the learner's sampler, from a sampler copy in a child process, or over a pipe),
the schedule (a `before_step` hook stamps each step with the policy version acting in it and
may refresh the weights), and everything after the round (`finish.finish_round`).

Per step: one batched policy call, one buffer write of what the policy saw and did, one batched
env step, one buffer write of what the env answered, the episode counters; no host sync
(tests/test_hot_path.py counts them around `run_steps`, the loop's seam).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping
from typing import Any, Callable, Iterator, Optional

import numpy as np
import torch
from torch import Tensor

from parlightning.buffer import RolloutBuffer
from parlightning.collection.context import RoundContext, RoundResult, StepHook
from parlightning.envs.base import (
    EpisodeParts, action_mask_of, check_action_mask, task_ids_of, vouch_actions, world_label,
)
from parlightning.envs import contract
from parlightning.errors import ConfigError, NonFiniteError, ReportedError, error_text, is_stop_signal, named_by_package
from parlightning.method_args import OneOf, checked
from parlightning.policies.recurrent import RecurrentRollout

STREAMS = ("env", "action", "task", "minibatch")  # the consumers of randomness, one stream each


@checked(stream=OneOf(*STREAMS))
def stream_seed(seed: int, stream: str) -> int:
    """A 31-bit seed for one consumer (`STREAMS`) of a rank whose base seed is `seed` (= data.seed +
    rank): numpy's SeedSequence over (seed, consumer), so no two consumers share a stream (the env's
    success draws never reuse the numbers that chose the actions) and no consumer of one rank
    replays another's."""
    state = np.random.SeedSequence([seed % 2**64, STREAMS.index(stream)]).generate_state(1)
    return int(state[0]) & 0x7FFFFFFF


def value_of(policy: torch.nn.Module, obs: Tensor, key: Optional[Tensor]) -> Tensor:
    """V(obs), passing each row's key to a keyed policy."""
    return policy.value(obs) if key is None else policy.value(obs, key=key)


class SamplerLock:
    """The sampler's lock, shared by the learner (rollout hooks, sampler records, checkpoints) and
    whoever picks from it (a collector thread, a process transport's link). `learner()` also
    counts how deep the learner is inside it, so a state read from a hook knows that a collector
    thread may be waiting mid-step for this very lock."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.learner_depth = 0

    def acquire(self, timeout: float = -1) -> bool:
        return self._lock.acquire(timeout=timeout)

    def release(self) -> None:
        self._lock.release()

    def held(self) -> bool:
        """Whether the calling thread holds it."""
        return self._lock._is_owned()  # RLock's own ownership test (what Condition uses)

    def __enter__(self) -> "SamplerLock":
        self._lock.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()

    @contextlib.contextmanager
    def learner(self) -> Iterator[None]:
        with self._lock:
            self.learner_depth += 1
            try:
                yield
            finally:
                self.learner_depth -= 1


class Picks:
    """The tasks actors start: `pick(context, reset_mask) -> [N] bank indices` (for the actors in
    `reset_mask`), from the round's shard. `signals()`: the sampler's logged signals."""

    def pick(self, context: RoundContext, reset_mask: Tensor) -> Tensor:
        raise NotImplementedError

    def signals(self) -> Optional[dict[str, Tensor]]:
        return None


class SamplerPicks(Picks):
    """Picks from a batched sampler with its own random stream (`generator`), under `lock`."""

    def __init__(self, sampler: Any, generator: torch.Generator, lock: SamplerLock) -> None:
        self.sampler, self.generator, self.lock = sampler, generator, lock
        self.num_tasks: Optional[int] = None  # the bank's size (set by the step loop): picks must index it
        self.outside: Optional[Tensor] = None  # a device flag: some pick fell outside the bank (read off the step)

    @property
    def name(self) -> str:
        """The user's sampler's class name (an adapter says which sampler it wraps)."""
        return getattr(self.sampler, "display_name", None) or type(self.sampler).__name__

    def pick(self, context: RoundContext, reset_mask: Tensor) -> Tensor:
        with self.lock:  # the learner records episodes into the same sampler
            picked = self.sampler.pick_batch(context.shard, context.round_index, reset_mask, self.generator)
        self.check(picked, reset_mask)
        return picked

    def check(self, picked: Any, reset_mask: Tensor) -> None:
        """The one validator of what a sampler's `pick_batch` returns: a tensor of [N] integer bank
        indices on the actors' device, else one ReportedError naming the sampler and what is wrong
        (metadata only: no host sync per step). Indices outside the bank set a device flag that
        `outside_error` reads after the step (or when the world fails on them): never a host read here."""
        n = reset_mask.shape[0]
        name = f"data.sampler: {self.name}.pick_batch returned"
        if not isinstance(picked, Tensor):
            problem = f"{type(picked).__name__} {picked!r:.60}, not a tensor"
        elif tuple(picked.shape) != (n,):
            problem = f"a tensor of shape {list(picked.shape)}, not [num_envs] = [{n}]"
        elif picked.dtype.is_floating_point or picked.dtype.is_complex or picked.dtype == torch.bool:
            problem = f"a {picked.dtype} tensor, not integer bank indices (torch.long)"
        elif picked.device != reset_mask.device:
            problem = f"a tensor on {picked.device}, not on the actors' device {reset_mask.device}"
        else:
            if self.num_tasks is not None:
                bad = ((picked < 0) | (picked >= self.num_tasks)).any()
                self.outside = bad if self.outside is None else self.outside | bad
            return
        raise ReportedError(f"{name} {problem}; return one task bank index per actor (an [num_envs] long tensor on "
                            "the reset mask's device)")

    def outside_error(self) -> Optional[ReportedError]:
        """The error for picks outside the bank since the last call (one host read), or None."""
        flag, self.outside = self.outside, None
        if flag is None or not bool(flag):
            return None
        return ReportedError(f"data.sampler: {self.name}.pick_batch returned a task index outside the "
                             f"task bank (0..{self.num_tasks - 1}); return indices into the bank the sampler was "
                             "bound to (its shard's entries)")

    def signals(self) -> Optional[dict[str, Tensor]]:
        signals = getattr(self.sampler, "signals", None)
        if not callable(signals):
            return None
        with self.lock:
            return checked_signals(self.name, signals())


def checked_signals(name: str, signals: Any) -> dict[str, Tensor]:
    """A sampler's `signals()` as float 0-d tensors of its own (the round keeps them): a mapping of
    names to numbers or one-element tensors, read once per round; anything else is one line naming
    the sampler."""

    def refuse(what: str) -> ReportedError:
        return ReportedError(f"data.sampler: {name}.signals() returned {what}; it must return a dict of names to "
                             "numbers or one-element tensors (each is logged as sampler/<name>): fix signals()")

    if not isinstance(signals, Mapping):
        raise refuse(f"a {type(signals).__name__}, not a dict")
    out = {}
    for key, value in signals.items():
        if not isinstance(key, str) or not key:
            raise refuse(f"the key {key!r:.40}")
        if isinstance(value, bool) or not isinstance(value, (int, float, Tensor)):
            raise refuse(f"{key!r}: {value!r:.40} ({type(value).__name__})")
        if isinstance(value, Tensor) and (value.numel() != 1 or value.is_complex() or value.is_sparse
                                          or value.is_meta or value.dtype == torch.bool):
            raise refuse(f"{key!r}: a {str(value.dtype).removeprefix('torch.')} tensor {list(value.shape)}")
        out[key] = (value.detach().reshape(()).float().clone() if isinstance(value, Tensor)
                    else torch.tensor(float(value)))
    if out and not bool(torch.isfinite(torch.stack([v.cpu() for v in out.values()])).all()):  # once per round
        bad = next(k for k, v in out.items() if not bool(torch.isfinite(v)))
        raise refuse(f"{bad!r}: {float(out[bad])} (not a finite number: it would be logged as sampler/{bad})")
    return out


class StepLoop:
    """One rank's stepping state and its step; see the module docstring.

    Args:
        factory: `data.env`, called as `factory(num_envs, device, seed)` with the env stream's seed.
        num_envs, num_steps: actors N and steps per round T.
        seed: the rank's base seed (data.seed + rank): the env and action streams derive from it.
        device: where the env, buffers and counters live.
    """

    def __init__(self, factory: Callable[..., Any], num_envs: int, num_steps: int, seed: int,
                 device: torch.device) -> None:
        self.num_envs, self.num_steps, self.device = num_envs, num_steps, device
        self.env_seed = stream_seed(seed, "env")
        self.env = factory(num_envs, str(device), self.env_seed)
        if getattr(self.env, "num_envs", num_envs) != num_envs:
            raise ConfigError(f"data.env: built {self.env.num_envs} actors, expected data.num_envs={num_envs}")
        self.action_generator = torch.Generator(device=device).manual_seed(stream_seed(seed, "action"))
        self.task_ids = task_ids_of(self.env)
        self.spaces = (self.env.action_spec, tuple(self.env.observation_shape))  # the policy and buffer are built on these
        self.buffer = self.new_buffer()
        self.picks: Optional[Picks] = None  # where the tasks come from, for a world with a task bank
        self.key_row: Optional[Tensor] = None  # [K] task -> key-table row, once a keyed policy binds keys
        self.memory: Optional[RecurrentRollout] = None  # every actor's hidden state, for a recurrent policy
        self.obs: Optional[Tensor] = None
        self.current_task: Optional[Tensor] = None  # [N] bank index each actor is working on
        self.episode_return = torch.zeros(num_envs, device=device)
        self.episode_length = torch.zeros(num_envs, device=device)
        self.step_lock: Any = contextlib.nullcontext()  # a Lock where another thread reads the state mid-round
        self.restart_pending = False  # an inexact resume: every actor restarts on a fresh pick next round
        self.mask_width: Optional[int] = None  # the world's action-mask columns (its first mask's), None: unmasked
        self._picks_in_step = 0  # next_task calls during the current env step (the contract allows one)
        self._parts_seen = False  # the world has returned EpisodeParts: from then on it must at every step
        self.off_task: Optional[Tensor] = None  # [N] bool: an actor ended an episode on another task than its own
        self._next_task_called = False  # the world has called next_task at least once (for the off-task line)

    def new_buffer(self) -> RolloutBuffer:
        spec = self.env.action_spec
        return RolloutBuffer(self.num_steps, self.num_envs, tuple(self.env.observation_shape), spec.action_shape,
                             self.device, torch.long if spec.is_discrete else torch.float32)

    def bind_memory(self, policy: torch.nn.Module) -> None:
        self.memory = RecurrentRollout(policy, self.buffer)

    # ------------------------------------------------------------------ episodes
    def reset(self, first: Optional[Tensor]) -> None:
        """Start every actor (on `first` [N] bank indices for a world with tasks)."""
        self.current_task = first
        kwargs = {"seed": self.env_seed} if first is None else {"seed": self.env_seed, "task_index": first}
        try:
            self.obs = self.env.reset(**kwargs)
        except (Exception, SystemExit) as err:  # the first tasks are the sampler's picks: out of the bank, the
            fault = self._sampler_fault()  # sampler is named, not the world
            if fault is not None:
                raise fault from None
            if named_by_package(err):  # already one line naming the world
                raise
            raise self._world_error("reset", err, None) from err
        fault = self._sampler_fault()  # one host read per reset (rare), never per step
        if fault is not None:
            raise fault
        self._check_reset(self.obs)
        try:
            mask = action_mask_of(self.env)
        except (Exception, SystemExit) as err:  # the user's action_masks failing: one line
            raise self._world_error("action_masks", err, None) from err
        if mask is not None:  # a masked world: its mask checked once per reset, before any step
            try:
                check_action_mask(mask, self.env.action_spec, self.num_envs,
                                  f"{world_label(self.env)}.action_masks()", self.device)
            except ValueError as err:
                raise ReportedError(f"data.env: {err} (at the reset of its {self.num_envs} actors; the preflight "
                                    "probe's were right)") from None
        self.mask_width = None if mask is None else int(mask.shape[1])

    def _check_reset(self, obs: Any) -> None:
        """The observations of a reset of every actor (the run's first, or a restart): the probe saw
        only its 2 actors' (`contract`'s checks, then one host read for NaN / inf: a reset is rare)."""
        shape = (self.num_envs, *self.buffer.obs.shape[2:])
        note = f"num_envs {self.num_envs}, observation_shape is {list(shape[1:])}"
        problem = contract.tensor_problem(obs, shape, contract.OBS, self.device, note)
        if problem is not None:
            raise ReportedError(f"data.env: {world_label(self.env)}.reset returned observations {problem.says} at "
                                f"the reset of its {self.num_envs} actors (the preflight probe's 2-actor reset was "
                                f"right); return {contract.OBS.text}{problem.hint}")
        actor = contract.non_finite(obs)
        if actor is not None:
            raise ReportedError(f"data.env: {world_label(self.env)}.reset returned observations holding NaN or inf "
                                f"(actor {actor}) at the reset of its {self.num_envs} actors; return finite numbers")

    def _pick(self, context: RoundContext, reset_mask: Tensor) -> Tensor:
        self._picks_in_step += 1  # a Python count: no host sync
        problem = contract.tensor_problem(reset_mask, (self.num_envs,), contract.FLAG, self.device)  # metadata only
        if problem is not None:
            raise self._contract_error("step", "a done mask to next_task", problem.says, "next_task(done) with done a "
                                       "bool [num_envs] tensor (the episodes that ended this step)", None, passed=True)
        if getattr(self.picks, "num_tasks", 0) is None and self.task_ids is not None:
            self.picks.num_tasks = len(self.task_ids)  # the sampler seam's range (checked off the step)
        picked = self.picks.pick(context, reset_mask)
        self.current_task = torch.where(reset_mask, picked, self.current_task)  # the actors that reset start these
        return picked

    def pick_for(self, context: RoundContext, reset_mask: Tensor) -> Tensor:
        """The tasks the actors in `reset_mask` start next (from `context`'s shard); they become theirs."""
        return self._pick(context, reset_mask)

    def restart(self, context: RoundContext) -> None:
        """Every actor starts a new episode now (after an inexact resume, or per-actor collection's start)."""
        self._restart(context)

    def _restart(self, context: RoundContext) -> None:
        """After an inexact resume: every actor starts a new episode on a task its sampler picks from
        this round's shard (the world could not restore the episodes it was in)."""
        everyone = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self.reset(self.picks.pick(context, everyone))
        self.restart_pending = False

    # ------------------------------------------------------------------ the round
    def run(self, policy: torch.nn.Module, context: RoundContext, before_step: Optional[StepHook] = None,
            fresh_buffer: bool = False) -> RoundResult:
        """Collect round `context` with `policy` (the behaviour policy); `before_step(t)` returns
        the version acting in step t (stamped in the buffer) and may refresh the weights;
        `fresh_buffer`: a new buffer for this round (rounds in flight keep theirs)."""
        if fresh_buffer:
            self.buffer = self.new_buffer()
        buf = self.buffer
        start = time.perf_counter()
        if self.restart_pending:
            self._restart(context)
        pick = (lambda mask: self._pick(context, mask)) if self.picks is not None else None
        with torch.inference_mode():
            acting = self.memory.begin(policy) if self.memory is not None else policy
            versions = self.run_steps(acting, pick, before_step)
            next_value, truncated_values = self.bootstrap(acting, buf)
        rollout_time = self._elapsed(start)
        sampler = self._sampler_fault()
        if sampler is not None:
            raise sampler
        self.check_spaces(context.round_index)
        self.check_finite(buf, context.round_index)
        self.check_masks(buf, context.round_index)
        self.check_parts(buf, context.round_index)
        self.check_tasks(context.round_index)
        current = self.current_task.clone() if self.current_task is not None else None
        return RoundResult(context, buf, next_value, truncated_values, versions, rollout_time, current)

    def run_steps(self, policy: Any, pick: Optional[Callable[[Tensor], Tensor]],
                  before_step: Optional[StepHook] = None) -> list[int]:
        """The step loop: T steps of `step`. Returns the version that acted at each step."""
        versions: list[int] = []
        for t in range(self.num_steps):
            version = before_step(t) if before_step is not None else None
            versions.append(version if version is not None else -1)
            with self.step_lock:
                self.step(t, policy, pick, version)
        return versions

    def step(self, t: int, policy: Any, pick: Optional[Callable[[Tensor], Tensor]], version: Optional[int]) -> None:
        """Step t for all actors: act, write the buffer, step the env, count episode return and
        length (reset where an episode ended)."""
        buf, key_row, obs = self.buffer, self.key_row, self.obs
        try:
            mask = action_mask_of(self.env)  # the world's live actions for `obs` (None: unmasked)
        except (Exception, SystemExit) as err:  # the user's action_masks failing (or sys.exit) mid-run: one line
            raise self._world_error("action_masks", err, t) from err
        self._check_mask(mask, t)
        masked = {} if mask is None else {"mask": mask}  # (a user's policy without masks never sees one)
        if key_row is None:
            key = None
            action, logprob, value = policy.act(obs, self.action_generator, **masked)
        else:  # a keyed policy (TensorParallel): each actor's task's row of the key table
            key = key_row[self.current_task]
            action, logprob, value = policy.act(obs, self.action_generator, key=key, **masked)
        buf.write(t, obs=obs, actions=action, logprobs=logprob, values=value, keys=key, versions=version, masks=mask)
        if self.spaces[0].is_discrete:  # sampled over the world's categories: in range, the world's step reads none
            vouch_actions(action, self.spaces[0])
        self._picks_in_step = 0
        started_on = self.current_task  # each actor's task before this step (a pick replaces the tensor)
        try:
            res = self.env.step(action, pick)
        except (Exception, SystemExit) as err:  # the user's world failing (or calling sys.exit) mid-run: one line
            if named_by_package(err):  # already one line naming the world (e.g. ExternalWorldError)
                raise
            sampler = self._sampler_fault()  # the world may have failed on the sampler's bad picks: name it
            raise (sampler or self._world_error("step", err, t)) from err
        if self._picks_in_step > 1:  # each call draws the sampler's next tasks: a second one skips picks
            raise self._contract_error("step", f"after calling next_task {self._picks_in_step} times",
                                       "in one step", "after calling next_task(done) at most once per step", t)
        self._check_step(res, t)
        ended = res.terminated | res.truncated
        if started_on is not None and pick is not None and res.parts is not None:
            self._note_off_task(res.parts.task, started_on, ended)
        ep_return, ep_length = self.episode_return, self.episode_length
        ep_return += res.reward
        ep_length += 1
        buf.write(t, rewards=res.reward, terminated=res.terminated, truncated=res.truncated, final_obs=res.final_obs,
                  episode_return=ep_return, episode_length=ep_length, parts=res.parts)
        alive = ~ended
        ep_return *= alive
        ep_length *= alive
        self.obs = res.obs

    def _note_off_task(self, task: Tensor, started_on: Tensor, ended: Tensor) -> None:
        """Flag the actors whose episode ended on another task than the one the package started them
        on, or ended in a step without a next_task call (the world ignored next_task, or restarts them on
        tasks of its own): device ops only, read once per round by `check_tasks`."""
        called = self._picks_in_step > 0
        self._next_task_called = self._next_task_called or called
        off = ended & (task != started_on) if called else ended  # no next_task call: no finished actor got its task
        self.off_task = off if self.off_task is None else self.off_task.logical_or_(off)

    def check_tasks(self, round_index: int) -> None:
        """Once per round: the world's task bank is the one the sampler was bound to (Python strings,
        no host sync), and every episode that ended ran the task the package started its actor on
        (one host read of the flag)."""
        if self.task_ids is None:
            return
        name = world_label(self.env)
        now = task_ids_of(self.env)
        if now is None or tuple(now) != tuple(self.task_ids):
            was, now = list(self.task_ids), list(now or [])
            at = next((i for i, (a, b) in enumerate(zip(was, now)) if a != b), min(len(was), len(now)))
            change = (f"position {at}: {was[at]!r} is now {now[at]!r}" if at < min(len(was), len(now))
                      else f"{len(was)} ids, now {len(now)}")
            raise ReportedError(f"data.env: {name}.task_ids changed during rollout {round_index} ({change}); the task "
                                "bank is read once, when the run starts (the sampler, the plan and the checkpoint "
                                "index it): keep task_ids fixed for a run")
        off, self.off_task = self.off_task, None
        if off is None or not bool(off.any()):
            return
        actor = int(off.nonzero()[0])
        how = ("it never called next_task" if not self._next_task_called
               else "next_task was not called in that step, or the actor did not start on the task it returned")
        raise ReportedError(f"data.env: {name}.step ended an episode of actor {actor} without starting it on the "
                            f"sampler's next task, in rollout {round_index} ({how}); a world with task_ids "
                            "must call next_task(done) in every step where episodes end and start each finished "
                            "actor on the task it returns (pass next_task on, e.g. super().step(action, next_task))")

    def _sampler_fault(self) -> Optional[ReportedError]:
        """The sampler's picks outside the bank, if any since the last check (one host read: called on
        a world's failure and once per round, never per step)."""
        check = getattr(self.picks, "outside_error", None)
        return check() if check is not None else None

    def _world_error(self, method: str, err: BaseException, t: Optional[int]) -> ReportedError:
        if is_stop_signal(err):
            raise err  # a signal that arrived while the world ran (a rank's or the CLI's handler): not the world's fault
        text = error_text(err)[:300]
        where = f"at step {t} of a rollout" if t is not None else f"at the reset of its {self.num_envs} actors"
        return ReportedError(f"data.env: {world_label(self.env)}.{method} raised {type(err).__name__}"
                             f"{': ' + text if text else ''} {where}; fix the world (a checkpoint "
                             "written before is intact: resume it with --ckpt_path)")

    def _contract_error(self, method: str, what: str, problem: str, want: str, t: Optional[int],
                        passed: bool = False) -> ReportedError:
        """`passed`: the world handed `what` to the package (next_task's argument), not returned it."""
        where = f" at step {t} of a rollout" if t is not None else " during a rollout"
        problem = f" {problem}" if problem else ""
        return ReportedError(f"data.env: {world_label(self.env)}.{method} {'passed' if passed else 'returned'} "
                             f"{what}{problem}{where} (the preflight probe's first steps were right); "
                             f"{'call' if passed else 'return'} {want} at every step")

    def _check_step(self, res: Any, t: int) -> None:
        """Every step's answer keeps the contract the probe checked on the first (`contract`'s checks:
        type, layout, shape, dtype, device; metadata only, no host sync): a world that changes later is
        one line naming it, not a traceback from deep in the buffer."""
        problem = contract.result_problem(res)
        if problem is not None:
            raise self._contract_error("step", problem.says, "", contract.RESULT.text, t)
        wrong = next(contract.step_problems(res, self.num_envs, self.buffer.obs.shape[2:], self.device), None)
        if wrong is not None:
            field, problem, want = wrong
            raise self._contract_error("step", field, problem.says, want.text + problem.hint, t)
        parts = getattr(res, "parts", None)
        if parts is None and self._parts_seen:  # a task world must report parts at every step
            raise self._contract_error("step", "parts None", "after EpisodeParts at earlier steps",
                                       "EpisodeParts at every step (read only where an episode ends)", t)
        if parts is not None:
            self._parts_seen = True

    def _check_mask(self, mask: Any, t: int) -> None:
        """Every step's action mask keeps the first one's layout (bool, [N, width]); metadata only."""
        width = self.mask_width
        if mask is None and width is None:
            return
        if mask is None:
            raise self._contract_error("action_masks", "None", "where the first observation had a mask",
                                       "a mask for every observation", t)
        if width is None:  # restored without a reset: the first mask seen sets the layout
            width = self.mask_width = int(mask.shape[1]) if isinstance(mask, Tensor) and mask.dim() == 2 else -1
        problem = contract.tensor_problem(mask, (self.num_envs, width), contract.MASK, self.device)
        if problem is not None:
            raise self._contract_error("action_masks", "a mask", problem.says, f"a bool [num_envs, {width}] tensor "
                                       f"(the layout of the first mask){problem.hint}", t)

    def check_parts(self, buf: RolloutBuffer, round_index: int) -> None:
        """The episode parts the world reported where episodes ended: a task index into its bank,
        an outcome in [0, 1], counts and step totals finite and >= 0 (what the samplers, the PARL
        reward and critical steps assume). Once per rollout (one host sync), before any of them reads them."""
        if not getattr(buf, "has_parts", False) or buf.parts is None:
            return
        rows = buf.parts[buf.done]  # [E, fields]
        if not rows.numel():
            return
        bank = len(self.task_ids) if self.task_ids is not None else None
        bad = contract.parts_rows_problem(rows, bank)
        if bad is None:
            return
        field, row, need = bad
        names = EpisodeParts._fields
        shown = ", ".join(f"{k}={float(v):g}" for k, v in zip(names, rows[row].tolist()))
        raise ReportedError(f"data.env: {world_label(self.env)}.step returned episode parts with {field} not "
                            f"{need} in rollout {round_index} ({shown}); fix the parts the world reports where an "
                            "episode ends")

    def check_spaces(self, round_index: int) -> None:
        """The world's `action_spec` and `observation_shape` are the ones the policy and the buffer
        were built on (a world whose spaces change mid-run would be trained with the wrong heads).
        Python attributes, once per rollout: no host sync."""
        now = (self.env.action_spec, tuple(self.env.observation_shape))
        for name, was, is_ in zip(("action_spec", "observation_shape"), self.spaces, now):
            if is_ != was:
                raise ReportedError(f"data.env: {world_label(self.env)}.{name} changed during rollout {round_index} "
                                    f"(now {is_}, was {was} when the policy was built); a world's spaces are fixed "
                                    "for a run: keep them constant")

    def check_masks(self, buf: RolloutBuffer, round_index: int) -> None:
        """Every stored mask in the per-category layout leaves each action dimension a live category
        (checked on the first mask at reset, and here for the rest of the round: one host sync per
        rollout). A dimension with none would be sampled from an empty distribution."""
        spec, masks = self.env.action_spec, getattr(buf, "masks", None)
        if masks is None or not spec.is_discrete or masks.shape[-1] == len(spec.nvec) or \
                masks.shape[-1] != sum(spec.nvec):
            return
        live = torch.stack([m.any(-1) for m in masks.split(list(spec.nvec), -1)], -1)  # [T, N, D]
        if bool(live.all()):
            return
        t, actor, dim = (int(i) for i in (~live).nonzero()[0])
        raise ReportedError(f"data.env: {world_label(self.env)}.action_masks() left actor {actor}'s action "
                            f"dimension {dim} without a live category at step {t} of rollout {round_index}; every "
                            "dimension needs at least one (mask a whole dimension with a [N, D] mask instead)")

    def bootstrap(self, policy: Any, buf: RolloutBuffer) -> tuple[Tensor, Tensor]:
        """(V of the observation after step T-1, [T, N] V of each truncated episode's final
        observation), from the policy that acted; one host sync (rollout end)."""
        if self.memory is not None:  # recurrent: from every actor's hidden state
            return self.memory.end(self.obs), self.memory.truncated_values()
        keyed = self.key_row is not None
        next_value = value_of(policy, self.obs, self.key_row[self.current_task] if keyed else None)
        truncated_values = torch.zeros_like(buf.values)
        where = buf.truncated.nonzero(as_tuple=True)
        if where[0].numel():
            truncated_values[where] = value_of(policy, buf.final_obs[where], buf.keys[where] if keyed else None)
        return next_value, truncated_values

    def _elapsed(self, start: float) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - start

    def check_finite(self, buf: RolloutBuffer, round_index: int) -> None:
        """Stop on a NaN or inf reward or observation from the env: checked once per rollout (one
        host sync), before the sampler, GAE or the policy see it; the message says where."""
        # Extremes only (NaN propagates through aminmax): one pass and no [T, N, D] bool temporary,
        # ~10x faster than isfinite().all() (250 -> 25 ms per rollout at N=4096, T=128).
        extremes = [torch.stack(torch.aminmax(v)) for v in (buf.rewards, buf.obs, buf.final_obs) if v.numel()]
        if bool(torch.isfinite(torch.cat(extremes)).all()):
            return
        for name, values in (("reward (StepResult.reward)", buf.rewards), ("observation (StepResult.obs)", buf.obs),
                             ("final observation (StepResult.final_obs)", buf.final_obs)):
            bad = (~torch.isfinite(values.reshape(self.num_steps, self.num_envs, -1))).any(-1)
            if bool(bad.any()):
                t, actor = (int(i) for i in bad.nonzero()[0])
                world = getattr(self.env, "world_name", None)  # an external world: name the user's class
                source = f"external world {world} ({world_label(self.env)})" if world else world_label(self.env)
                raise NonFiniteError(
                    f"data.env: non-finite {name}: NaN or inf from {source}.step in rollout "
                    f"{round_index} (first at step {t} of {self.num_steps}, actor {actor}; "
                    f"{int(bad.sum())} entries): fix the env or its inputs. Stopped before any update, so the last "
                    "checkpoint is intact."
                )

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """What stepping owns: env, observations, episode counters, the action stream, each actor's
        task and hidden state (tensors and plain containers)."""
        return {
            "env": self._env_state(),
            "obs": self.obs.detach().as_subclass(Tensor).clone(),  # the world's own tensor may require grad or subclass
            "episode_return": self.episode_return.clone(),
            "episode_length": self.episode_length.clone(),
            "action_generator": self.action_generator.get_state(),
            "current_task": self.current_task.clone() if self.current_task is not None else None,
            **({"memory": self.memory.state_dict()} if self.memory is not None else {}),
        }

    def _env_state(self) -> dict[str, Any]:
        """The world's `state_dict()`; {} for a world without one (BatchedEnv's default: a world that does
        not inherit it need not define it)."""
        state = getattr(self.env, "state_dict", None)
        return state() if callable(state) else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume `state_dict()` (extra keys are ignored). A world that cannot restore its episodes
        (`checkpoint_exact = False`) restarts them: at once without a task bank, else at the start
        of the next round, every actor on a task its sampler picks from that round's shard."""
        load = getattr(self.env, "load_state_dict", None)  # optional for a world that does not inherit BatchedEnv
        if callable(load):
            load(state["env"])
        if getattr(self.env, "checkpoint_exact", True):
            # into a tensor of the loop's own: the world's (its reset's) may be an expanded view or its own state
            obs = torch.empty_like(self.obs.detach().as_subclass(Tensor), memory_format=torch.contiguous_format)
            obs.copy_(state["obs"])
            self.obs = obs
            self.episode_return.copy_(state["episode_return"])
            self.episode_length.copy_(state["episode_length"])
            if state.get("current_task") is not None:
                self.current_task = state["current_task"].to(self.device)
            if self.memory is not None and "memory" in state:
                self.memory.load_state_dict(state["memory"])
        else:
            self.episode_return.zero_()
            self.episode_length.zero_()
            if self.memory is not None:
                self.memory.restart()
            if self.task_ids is None:  # no task bank: a plain reset
                self.reset(None)
            else:
                self.restart_pending = True
        self.action_generator.set_state(state["action_generator"])
