"""`RolloutDataModule`: the Lightning glue of rollout collection: configuration, the loader, the
checkpoint hooks. It owns one `Collector` per rank (`dm.collector`, built by
`parlightning.collection.make_collector`) and the `RoundPlanner` (`dm.planner`, from the
`StrategyPlanner` callback's strategy), and hands the collector its trainer-side hooks
(`LightningHooks`); it does not reach into either: the world, buffers and streams are the
collector's (`dm.collector.env`, `dm.collector.loop`, ...).

Lightning calls `iter()` on the train dataloader before `on_train_epoch_start`; the loader's
iterator is a generator, so the rollout is collected after `on_train_epoch_start`, when the first
minibatch is requested. The loader has a `__len__`, so Lightning never prefetches across a policy
update: every minibatch of an epoch comes from the rollout the current policy just collected.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Iterator, Optional, Sequence

import lightning.pytorch as pl
import torch
from torch import Tensor

from parlightning.buffer import UPDATE_EPOCH_END, gather_rows
from parlightning.callbacks.base import rollout_callbacks
from parlightning.callbacks.planner import StrategyPlanner
from parlightning.runtime.ranks import gather_ranks
from parlightning.collection import Collector, RoundHooks, make_collector
from parlightning.distribution.planning import RoundPlanner
from parlightning.config_types import ClosedUnitInterval, NonNegativeInt, PositiveInt, Seed, check_args, is_count
from parlightning.envs.base import BatchedEnv, task_ids_of
from parlightning.method_args import IndexArg, Is, Lifecycle, State, checked_methods, require
from parlightning.errors import ConfigError, ReportedError, check_call_shape, error_text
from parlightning.distribution.strategies import family_of
from parlightning.runtime.preflight import check_datamodule, env_signature
from parlightning.parl.reward import PARLReward, check_reward_overrides
from parlightning.rollout import Rollout
from parlightning.distribution.samplers import RoundRobin, TaskSampler, check_sampler_calls, pass_threshold_mismatch

# Lightning's hooks: Lightning calls them with its own objects (not wrapped)
DATA_HOOKS = ("setup", "teardown", "on_exception", "train_dataloader")

EnvFactory = Callable[[int, str, int], BatchedEnv]  # (num_envs, device, seed) -> env


def _default_env(num_envs: int, device: str, seed: int) -> BatchedEnv:
    from parlightning.envs.swarm import SwarmEnv

    return SwarmEnv(num_envs=num_envs, device=device, seed=seed)


class LightningHooks(RoundHooks):
    """The collector's trainer side: rollout callbacks, the learner's policy, DDP's sum."""

    def __init__(self, trainer: "pl.Trainer") -> None:
        self.trainer = trainer
        self.world_size = trainer.world_size
        self._fork_pipe: Optional[tuple[int, int]] = None  # (read, write): a forked hook's line, see _call

    def _module(self) -> Any:
        return self.trainer.lightning_module

    def _call(self, cb: Any, hook: str, *args: Any) -> None:
        """`cb.<hook>(trainer, module, *args)`. A process the hook forked that comes back into
        parlightning (returns or raises instead of ending with os._exit) must not run the run's
        error path or cleanup (it would delete or stop the parent's run): it hands its line to the
        parent through a pipe and ends; the parent raises it at its next hook or at the round's end."""
        self._check_forks()
        pid = os.getpid()
        if self._fork_pipe is None:
            self._fork_pipe = os.pipe()
            os.set_blocking(self._fork_pipe[0], False)
        try:
            getattr(cb, hook)(self.trainer, self._module(), *args)
        finally:
            if os.getpid() != pid:
                _end_forked_child(self._fork_pipe[1], f"trainer.callbacks: {_hook_owner(cb)}.{hook} forked a process "
                                  f"(pid {os.getpid()}) that came back into the rollout instead of ending; end a "
                                  "process forked in a hook with os._exit(code) (or use subprocess or "
                                  "multiprocessing), so it never runs the trainer's code")

    def _check_forks(self) -> None:
        if self._fork_pipe is None:
            return
        try:
            data = os.read(self._fork_pipe[0], 4096)
        except BlockingIOError:
            return
        if data:
            raise ReportedError(data.decode(errors="replace").splitlines()[0])

    def on_rollout_start(self, round_index: int) -> None:
        for cb in rollout_callbacks(self.trainer):
            self._call(cb, "on_rollout_start", round_index)

    def on_episodes_end(self, task_ids: Tensor, parts: Any) -> None:
        # The same tensors go on to the planner, the sampler and the PARL reward after the hooks, so
        # a hook must only read them: an in-place write bumps a tensor's version counter (a host-side
        # count, no device sync), which is compared after each hook.
        named = (("task_ids", task_ids), *(zip(parts._fields, parts) if hasattr(parts, "_fields") else ()))
        for cb in rollout_callbacks(self.trainer):
            before = [_version(t) for _, t in named]
            self._call(cb, "on_episodes_end", task_ids, parts)
            changed = [name for (name, t), v in zip(named, before) if v is not None and _version(t) != v]
            if changed:
                what = (changed[0] if len(changed) == 1 else
                        f"one of {', '.join(changed)} (views of one storage, so which one is not known)")
                raise ReportedError(f"trainer.callbacks: {_hook_owner(cb)}.on_episodes_end wrote in place into "
                                    f"{what}; the planner, the task sampler and the PARL "
                                    "reward read the same tensors after the rollout hooks, so a hook must only "
                                    "read them: work on a copy (parts.outcome.clone())")

    def on_rollout_end(self, rollout: Rollout) -> None:
        user = []
        for cb in rollout_callbacks(self.trainer):
            self._call(cb, "on_rollout_end", rollout)
            check_rollout_stats(rollout, cb)
            if type(cb).__module__.split(".")[0] != "parlightning":
                user.append(type(cb).__name__)
        self._check_forks()
        buf = getattr(rollout, "buffer", None)
        if user and buf is not None:  # the rollout was checked finite before the hooks: one host sync per rollout
            ok = torch.isfinite(buf.advantages).all() & torch.isfinite(buf.returns).all() & torch.isfinite(buf.rewards).all()
            if not bool(ok):
                raise ReportedError(f"trainer.callbacks: the rollout holds NaN or inf in its rewards, advantages or "
                                    f"returns after the on_rollout_end hooks of {', '.join(user)} (it was finite "
                                    "when collected); a rollout hook must not write non-finite values into the "
                                    "rollout: fix the hook")

    def reduce_sum(self, tensor: Tensor) -> Tensor:
        device = self.trainer.strategy.root_device
        return self.trainer.strategy.reduce(tensor.to(device), reduce_op="sum").to(tensor.device)

    def policy(self) -> Any:
        return self._module().policy


def check_artifact_key(fn: Any) -> None:
    """`data.artifact_key` is called as `artifact_key(task_id) -> str` (TensorParallel's key rows):
    a value that is not callable or takes another shape is refused at construction, even when no
    strategy reads it yet (it would fail only once one does)."""
    if not callable(fn):
        raise ConfigError(f"data.artifact_key: {fn!r:.60} is not callable; give a function task_id -> artifact key "
                          "(an import path, e.g. parlightning.distribution.strategies.family_of)")
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    owner, _, method = f"{getattr(fn, '__module__', None) or ''}.{name}".strip(".").rpartition(".")
    check_call_shape("data.artifact_key", owner or name, method or name, fn, ("task_id",),
                     caller="TensorParallel", define=f"a function of one task id, e.g. def {method or name}(task_id): "
                     "return task_id.rpartition('-')[0]")


def _version(t: Any) -> Optional[int]:
    """A tensor's in-place write count (host-side), or None where it has none (inference tensors)."""
    try:
        return t._version if isinstance(t, Tensor) else None
    except RuntimeError:
        return None


def _end_forked_child(fd: int, line: str) -> None:
    """In a process a rollout hook forked that came back into parlightning: hand `line` to the
    parent (or print it when the parent is gone) and end at once, running no cleanup or atexit."""
    try:
        os.write(fd, line.encode() + b"\n")
    except OSError:
        try:
            os.write(2, f"error: {line}\n".encode())
        except OSError:
            pass
    os._exit(1)


def _hook_owner(cb: Any) -> str:
    cls = type(cb)
    return f"{cls.__module__}.{cls.__qualname__}"


def check_rollout_stats(rollout: Rollout, cb: Any) -> None:
    """`rollout.stats` after `cb`'s on_rollout_end: a dict of metric names (str) to one-element
    tensors, which the module logs at the round's env step. A plain real number is taken as a 0-dim
    tensor; anything else (a vector, a string, None, the dict replaced) is one line naming the
    callback and the key, before Lightning's logger meets it. Host-side checks only (numel, type)."""
    import numbers

    where = f"trainer.callbacks: {_hook_owner(cb)}.on_rollout_end"
    stats = rollout.stats
    if not isinstance(stats, dict):
        raise ReportedError(f"{where} set rollout.stats to {type(stats).__name__} {stats!r:.60}; it must stay a dict "
                            "of metric names to 0-dim tensors: add entries (rollout.stats['user/x'] = "
                            "torch.tensor(1.0)) instead of replacing it")
    for key, value in list(stats.items()):
        if not isinstance(key, str) or not key:
            raise ReportedError(f"{where} added the key {key!r} to rollout.stats; metric names are non-empty "
                                "strings, e.g. 'user/x'")
        if isinstance(value, Tensor):
            if value.numel() == 1:
                continue
            what = f"a tensor of shape {list(value.shape)}"
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):
            stats[key] = torch.tensor(float(value))
            continue
        else:
            what = f"{type(value).__name__} {value!r:.40}"
        raise ReportedError(f"{where} set rollout.stats[{key!r}] to {what}; each stat is logged as one number "
                            "per round: make it a 0-dim tensor (reduce a vector with .mean() or .sum(); log text "
                            "elsewhere, e.g. print or the logger's experiment)")


class RolloutLoader:
    """The train 'dataloader': iterating it collects a rollout, then yields
    update_epochs x num_minibatches minibatch dicts from it. Sized, so Lightning never
    prefetches across a policy update. The loader owns the update-epoch boundary: the last
    minibatch of each update epoch carries `batch[UPDATE_EPOCH_END] = True` (False on the others;
    the same minibatch on every rank), and a target-KL stop ends it only at such a boundary."""

    def __init__(self, datamodule: "RolloutDataModule") -> None:
        self.dm = datamodule

    def __len__(self) -> int:
        return self.dm.update_epochs * self.dm.num_minibatches

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        dm = self.dm
        rollout = dm.collect()
        rows = None
        if dm.collector.memory is not None:  # recurrent: minibatches of whole per-actor chunks [B, L, ...] plus `state0`
            flat = rollout.buffer.sequences(dm.bptt_len)
            rows = flat["state0"].shape[0]
        else:
            flat = rollout.buffer.flat()
        round_tag = torch.tensor(rollout.round_index)
        indices = rollout.buffer.minibatch_indices(dm.update_epochs, dm.num_minibatches,
                                                     dm.collector.minibatch_generator, rows)
        for i, (epoch, idx) in enumerate(indices):
            if epoch > 0 and i % dm.num_minibatches == 0 and dm.stop_update:
                return  # target-KL stop: only between update epochs (CleanRL), decided identically on every rank
            batch = gather_rows(flat, idx)
            batch["round"] = round_tag
            batch[UPDATE_EPOCH_END] = (i + 1) % dm.num_minibatches == 0
            yield batch


# The collector: made by `build` (Lightning's `setup` calls it), closed by `teardown` / `on_exception`; a second
# fit's `setup` builds fresh worlds. After teardown a collector whose step loop runs here (lock-step, inline) still
# collects (the same worlds: one that teardown closed refuses its step by name); a thread or process collector has
# stopped. `collect` also needs the Trainer (its callbacks, DDP).
DATA_LIFECYCLE = Lifecycle({
    "built": State("called before build(device); setup() builds the collector: call dm.build(device) or "
                   "trainer.fit(model, datamodule=dm) first", holds=lambda dm: dm._built),
    "running": State("called after teardown() closed the collector (its thread or process has stopped); call "
                     "dm.build(device) or trainer.fit(model, datamodule=dm) first (fresh worlds)",
                     holds=lambda dm: not dm._closed or dm.collector.runs_after_close),
    "unbuilt": State("called twice: the collector is built and running; call teardown('fit') first (it closes the "
                     "worlds), or build a new RolloutDataModule", holds=lambda dm: not dm._built or dm._closed),
    "trainer": State("called without a Trainer (its callbacks and ranks run with every round); the Trainer calls it "
                     "during trainer.fit(model, datamodule=dm)", holds=lambda dm: dm.trainer is not None)},
    requires={"build": "unbuilt", **dict.fromkeys(("bind_keys", "bind_memory"), ("built", "running")),
              "collect": ("built", "running", "trainer")})


@checked_methods(skip=DATA_HOOKS, build={"rank": IndexArg()}, make_collector={"rank": IndexArg()},
                 preflight={"ranks_here": IndexArg(lo=1)},
                 bind_memory={"policy": Is(torch.nn.Module, "the policy network (torch.nn.Module)")},
                 lifecycle=DATA_LIFECYCLE)
class RolloutDataModule(pl.LightningDataModule):
    """Env + buffer + sampler; see the module docstring.

    Args:
        env: builds the world as `env(num_envs, device, seed)`; a `class_path` in YAML
            (default `SwarmEnv`). Each rank seeds its env with `seed + rank`.
        num_envs: actors per rank (N).
        num_steps: rollout length per actor (T); one rollout = one Lightning epoch.
        update_epochs, num_minibatches: PPO passes over each rollout and minibatches per pass.
        gamma, gae_lambda: discount and GAE lambda.
        sampler: `TaskSampler` that picks each actor's next task (default `RoundRobin`).
        reward: `PARLReward`; its λ1·r_parallel + λ2·r_finish is added to the env's reward
            (r_perf) at every finished episode. None trains on r_perf alone.
        seed: base seed of this rank's random streams (+ rank): the env, action sampling, task
            picks and minibatch shuffling each get their own stream derived from seed + rank
            (`parlightning.collection.stream_seed`), so no two consumers share numbers. None
            (default) follows the global seed (`seed_everything` / `--seed`, else 0).
        artifact_key: the artifact key of a task id (its row in a keyed policy's table, used
            with `TensorParallel`); default `parlightning.distribution.strategies.family_of`.
        bptt_len: for a recurrent policy, the length L of the per-actor chunks the update
            re-runs (truncated BPTT); must divide num_steps; None means num_steps.
        max_policy_lag: 0 (default) collects in lock-step with the learner
            (`parlightning.collection.LockStep`); k >= 1 collects while the learner updates, from
            policy versions at most k updates old, with a staleness correction (`LagBudget`).
        collect_in: where a lag-budget step loop runs: "thread" (default; shares memory and the
            GIL with the learner) or "process" (a child process that runs the step loop: its own
            interpreter, so the update is not slowed by collection; CPU only, data.env must pickle).
            See docs/guides/collection.md.
        collect: "rounds" (default: lock-step or the lag budget, every actor steps together) or
            "trajectories": per-actor asynchronous collection, each actor acts when its own world
            answers; a round is num_envs trajectory segments of num_steps steps, each sample at
            most max_policy_lag (>= 1) versions old or dropped from the loss (`Trajectories`).
        actors_in_flight: with collect: trajectories, the number of worlds (calls in flight),
            independent of the batch (num_envs segments); default num_envs.
    """

    def __init__(
        self,
        env: Optional[EnvFactory] = None,
        num_envs: PositiveInt = 256,
        num_steps: PositiveInt = 128,
        update_epochs: PositiveInt = 4,
        num_minibatches: PositiveInt = 4,
        gamma: ClosedUnitInterval = 0.99,
        gae_lambda: ClosedUnitInterval = 0.95,
        sampler: Optional[TaskSampler] = None,
        reward: Optional[PARLReward] = None,
        seed: Optional[Seed] = None,
        artifact_key: Optional[Callable[[str], str]] = None,
        bptt_len: Optional[PositiveInt] = None,
        max_policy_lag: NonNegativeInt = 0,
        collect_in: str = "thread",
        collect: str = "rounds",
        actors_in_flight: Optional[PositiveInt] = None,
    ) -> None:
        super().__init__()
        typed = check_args("data", RolloutDataModule.__init__, locals())  # the annotated ranges (config_types)
        num_envs, num_steps, update_epochs, num_minibatches = (typed[k] for k in (
            "num_envs", "num_steps", "update_epochs", "num_minibatches"))
        gamma, gae_lambda, bptt_len, max_policy_lag = (typed[k] for k in (
            "gamma", "gae_lambda", "bptt_len", "max_policy_lag"))
        actors_in_flight, seed = typed["actors_in_flight"], typed["seed"]
        if collect not in ("rounds", "trajectories"):
            raise ConfigError(f"data.collect: must be 'rounds' or 'trajectories' (per-actor), got {collect!r}")
        if collect == "trajectories" and max_policy_lag < 1:
            raise ConfigError("data.max_policy_lag: data.collect: trajectories bounds staleness per sample and needs "
                              "max_policy_lag >= 1 (e.g. 2)")
        if actors_in_flight is not None and collect != "trajectories":
            raise ConfigError("data.actors_in_flight: only per-actor collection has a capacity apart from the "
                              "batch; set data.collect: trajectories or leave it unset")
        self.collect_mode, self.actors_in_flight = collect, actors_in_flight
        self.max_policy_lag = max_policy_lag
        if collect_in not in ("thread", "process"):
            raise ConfigError(f"data.collect_in: must be 'thread' or 'process', got {collect_in!r}")
        if collect_in == "process" and max_policy_lag == 0 and collect == "rounds":
            raise ConfigError("data.collect_in: process collects without a barrier; set data.max_policy_lag >= 1 "
                              "(or leave collect_in at thread)")
        self.collect_in = collect_in
        if bptt_len is not None:
            if num_steps % bptt_len:
                raise ConfigError(f"data.bptt_len: {bptt_len} does not divide data.num_steps={num_steps}; pick a divisor")
        batch = num_envs * num_steps
        if batch % num_minibatches:
            raise ConfigError(
                f"data.num_minibatches: {num_minibatches} does not divide the rollout batch "
                f"num_envs x num_steps = {batch}; pick a divisor of {batch}"
            )
        if sampler is not None and not isinstance(sampler, TaskSampler):
            raise ConfigError(
                f"data.sampler: {type(sampler).__name__} is not a TaskSampler; it needs "
                "pick(keys, round_index) -> task_id and record(task_id, score)"
            )
        if sampler is not None:
            check_sampler_calls("data.sampler", sampler)
        if artifact_key is not None:
            check_artifact_key(artifact_key)
        if reward is not None:
            check_reward_overrides("data.reward", reward)
        if env is not None and (not callable(env) or isinstance(env, BatchedEnv)):  # an instance where a factory goes
            raise ConfigError(f"data.env: must be a world factory called as env(num_envs, device, seed) (a world class "
                              f"such as SwarmEnv, or a function returning one), got {type(env).__name__} "
                              f"{'instance' if isinstance(env, BatchedEnv) else repr(env)[:40]}; pass the class "
                              f"(env=SwarmEnv) or functools.partial(SwarmEnv, max_width=...) for its arguments")
        self.env_factory = env or _default_env
        self.num_envs, self.num_steps = num_envs, num_steps
        self.update_epochs, self.num_minibatches = update_epochs, num_minibatches
        self.minibatch_size = batch // num_minibatches
        self.gamma, self.gae_lambda = gamma, gae_lambda
        self.sampler = sampler if sampler is not None else RoundRobin()
        self.reward = reward
        self.seed = seed if seed is not None else int(os.environ.get("PL_GLOBAL_SEED", 0))  # set by seed_everything
        self.round_index = 0
        self.env_steps = 0  # global, all ranks
        self.stop_update = False  # set by the module when target-KL is exceeded
        self.artifact_key = artifact_key if artifact_key is not None else family_of
        self.bptt_len = bptt_len if bptt_len is not None else num_steps
        self.collector: Optional[Collector] = None  # this rank's, made by `build`
        self.planner: Optional[RoundPlanner] = None  # plans each round across ranks, with a StrategyPlanner
        self.last_rollout: Optional[Rollout] = None
        self._hooks: Optional[LightningHooks] = None
        self._built = False  # build ran (its collector's state is the checkpoint's)
        self._closed = False  # teardown closed that collector

    # ------------------------------------------------------------------ setup
    @property
    def rank(self) -> int:
        return self.trainer.global_rank if self.trainer is not None else 0

    @property
    def world_size(self) -> int:
        return self.trainer.world_size if self.trainer is not None else 1

    @property
    def device(self) -> torch.device:
        return self.trainer.strategy.root_device if self.trainer is not None else torch.device("cpu")

    def setup(self, stage: str) -> None:
        if self._built and not self._closed:  # once per fit; after teardown, fresh worlds
            return
        # Lightning sets the data module up before any callback; a callback that must see faults of this setup
        # (the ranks' watch: rank 1's sampler failing here must stop rank 0 with its line) starts first
        for callback in getattr(getattr(self, "trainer", None), "callbacks", None) or ():
            early = getattr(callback, "setup_before_data", None)
            if callable(early):
                early(self.trainer)
        self.build(self.device, self.rank)

    def build(self, device: torch.device, rank: int = 0) -> None:
        """Make this rank's collector (env, buffer, generators), bind the planner and reset every
        actor on round 0's plan (called by `setup`; public for scripts)."""
        self.collector = self.make_collector(device, rank)
        self._built, self._closed = True, False  # the collector exists: the planner binds the keys to it below
        try:
            collector, trainer = self.collector, self.trainer
            strategy = StrategyPlanner.strategy_in_force(trainer.callbacks) if trainer is not None else None
            if strategy is not None:  # the last StrategyPlanner listed is in force (a later config may swap it)
                self.planner = RoundPlanner(strategy)
                self.planner.prepare(collector.task_ids, device, self.world_size, self.rank, self.bind_keys,
                                     self.artifact_key, type(collector.env).__name__)
            if collector.task_ids is not None:
                self._check_thresholds(collector.env)
            elif type(self.sampler) is not RoundRobin:  # the default (swarm.yaml's too) is harmless; a chosen one
                raise ConfigError(  # would never be asked: the user believes tasks are being picked for them
                    f"data.sampler: {type(getattr(self.sampler, 'sampler', self.sampler)).__name__} picks each actor's "
                    f"next task from the world's task bank, and {type(collector.env).__name__} has none (no task_ids): "
                    "it would never be asked; drop data.sampler, or use a world with tasks (SwarmEnv, an external "
                    "world with a task bank)")
            collector.start(self.sampler, self.planner, round_index=0)
            self._check_reward_cap(collector.env)
        except BaseException:
            self.collector.close()  # a collector process or an env's workers never outlive a failed start
            self._built = False
            raise

    def make_collector(self, device: torch.device, rank: int) -> Collector:
        """The rank's `Collector` from data.max_policy_lag and data.collect_in (override to compose
        another schedule or transport, see `parlightning.collection`)."""
        return make_collector(self.env_factory, self.num_envs, self.num_steps, self.seed + rank, device,
                              max_policy_lag=self.max_policy_lag, collect_in=self.collect_in, sampler=self.sampler,
                              collect=self.collect_mode, actors_in_flight=self.actors_in_flight,
                              reward=self.reward, gamma=self.gamma, gae_lambda=self.gae_lambda, rank=rank)

    def _check_thresholds(self, env: Any) -> None:
        """Warn once when the sampler's pass threshold and the env's solved threshold disagree."""
        message = pass_threshold_mismatch(self.sampler, getattr(env, "solved_threshold", None))
        if message is not None:
            warnings.warn(f"data.sampler: {message}", stacklevel=2)

    def preflight(self, device: Optional[torch.device] = None, ranks_here: int = 1) -> dict[str, Any]:
        """Check the env's contract on a small CPU probe, the reward cap and the rollout's memory, so
        bad config fails before the trainer writes anything (see `parlightning.runtime.preflight`)."""
        return check_datamodule(self, device, ranks_here)

    def _check_reward_cap(self, env: BatchedEnv) -> None:
        if self.reward is not None and task_ids_of(env) is None:  # no tasks, no EpisodeParts: PARL would add 0
            raise ConfigError(
                f"data.reward: {type(self.reward).__name__} shapes episodes by their parts (subagents, outcome), but "
                f"{type(env).__name__} has no tasks and reports none; set data.reward: null (train on the env's reward)"
            )
        cap = getattr(env, "max_subagents", None)
        if self.reward is not None and cap is not None and self.reward.max_subagents != cap:
            raise ConfigError(
                f"data.reward.max_subagents={self.reward.max_subagents} differs from the env's max_subagents={cap}; "
                "r_parallel must be measured against the env's cap: set them equal"
            )

    def teardown(self, stage: str) -> None:
        """Close the collector (its worlds and their workers); a second fit's `setup` builds fresh worlds.
        Twice, or before setup: harmless."""
        if self.collector is not None:
            self.collector.close()
            self._closed = True

    def on_exception(self, exception: BaseException) -> None:
        """A failed fit skips `teardown`: still stop the collector and its env's worker processes."""
        self.teardown("fit")

    def bind_keys(self, keys: Sequence[str]) -> None:
        """Map every bank task to its row of a keyed policy's table through `artifact_key`
        (`key_row` [K]); from then on each step passes every actor's row to the policy."""
        row = {k: i for i, k in enumerate(keys)}
        rows = []
        for task in self.collector.task_ids or ():
            try:
                key = self.artifact_key(task)
            except ValueError as err:
                raise ConfigError(f"data.artifact_key: {err}") from None
            if key not in row:
                raise ConfigError(
                    f"data.artifact_key: task {task!r} has artifact key {key!r}, which is not a declared key "
                    f"{list(keys)[:8]}; add it to the strategy's keys= or map tasks to declared keys with data.artifact_key"
                )
            rows.append(row[key])
        self.collector.bind_keys(torch.tensor(rows, dtype=torch.long, device=self.collector.device))

    def bind_memory(self, policy: torch.nn.Module) -> None:
        """Carry a recurrent policy's hidden state for every actor from now on (fresh at the first
        step) and train it on whole per-actor chunks of `bptt_len` steps; once per fit."""
        if self.collector.memory is not None:
            return
        if self.collector.key_row is not None:
            raise ConfigError("model.policy: a recurrent policy has no per-key table; TensorParallel needs model.policy: mlp")
        sequences = (self.num_steps // self.bptt_len) * self.num_envs
        if sequences % self.num_minibatches:
            raise ConfigError(
                f"data.num_minibatches: {self.num_minibatches} does not divide the {sequences} sequences of a "
                f"recurrent policy (num_envs x num_steps / bptt_len = {self.num_envs} x {self.num_steps} / "
                f"{self.bptt_len}); pick a divisor of {sequences} or change data.bptt_len"
            )
        self.collector.bind_memory(policy)

    def train_dataloader(self) -> RolloutLoader:
        return RolloutLoader(self)

    # ------------------------------------------------------------------ collection
    def collect(self) -> Rollout:
        """One round from this rank's collector (also clears a target-KL stop of the last round)."""
        self.stop_update = False
        if self._hooks is None or self._hooks.trainer is not self.trainer:
            self._hooks = LightningHooks(self.trainer)
        rollout = self.collector.collect(self.round_index, self.env_steps, self._hooks)
        self.env_steps = rollout.env_steps
        self.last_rollout = rollout
        self.round_index = rollout.round_index + 1
        return rollout

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Everything to resume exactly: the shared counters and λ position, and per rank the env,
        observations, episode counters, generators, sampler and global RNG streams (gathered
        from every rank under DDP, a collective). Tensors and plain containers only."""
        state: dict[str, Any] = {"round_index": self.round_index, "env_steps": self.env_steps, "num_envs": self.num_envs}
        if self._built:  # resuming into another world is refused (parlightning.runtime.checkpoint.check_resume)
            state["env_signature"] = env_signature(self.collector.env)
        if self.reward is not None:
            state["reward"] = self.reward.state_dict()
        if self._built:
            state["ranks"] = gather_ranks(self.collector.state_dict(), self.world_size)
        return state

    def check_state(self, state: dict[str, Any], resuming: bool = False) -> None:
        """Refuse, with one `ConfigError` naming the field, a saved state this data module cannot
        resume (run by `--ckpt_path` before anything is written, and again on load). `resuming`: the
        state must also hold the worlds' (`ranks`; a fit's checkpoint always does, its data module was
        built), not only the counters of a data module never built."""
        missing = [k for k in ("round_index", "env_steps") if k not in state]
        if missing:
            raise ConfigError(f"--ckpt_path: the checkpoint's data module state lacks {missing}; resume from a "
                              "checkpoint written by RolloutDataModule")
        for key in ("round_index", "env_steps"):
            value = state[key]
            if not is_count(value):
                raise ConfigError(f"--ckpt_path: the checkpoint's RolloutDataModule.{key} is {value!r}, not a count "
                                  "(an integer >= 0): it was edited or damaged; resume from an unedited checkpoint, or "
                                  "start fresh without --ckpt_path")
        ranks = state.get("ranks")  # absent: the state of a data module not yet built (refused when resuming)
        if ("ranks" in state or resuming and "env" not in state) and (not isinstance(ranks, list) or not ranks):
            raise ConfigError(f"--ckpt_path: the checkpoint's RolloutDataModule.ranks is {str(ranks)[:40]!r}: it holds "
                              "no rank's worlds, observations or random streams, so the run cannot resume exactly; "
                              "resume from an unedited checkpoint, or start fresh without --ckpt_path")
        saved = state.get("num_envs", self.num_envs)
        if saved != self.num_envs:
            raise ConfigError(f"data.num_envs: the checkpoint has {saved} actors per rank but this config has "
                              f"{self.num_envs}; resume with data.num_envs: {saved}")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()`. A part that does not load (a key missing, a value of another type or
        range: an edited checkpoint, or one of another version) is one ConfigError naming the part."""
        self.check_state(state)
        part = "RolloutDataModule"
        try:
            self.round_index = int(state["round_index"])
            self.env_steps = int(state["env_steps"])
            part = "RolloutDataModule.reward"
            if "reward" in state and self.reward is not None:
                self.reward.load_state_dict(state["reward"])
            part = f"RolloutDataModule.ranks[{self.rank}]"
            self._load_ranks(state)
        except (ConfigError, ReportedError):  # named already (a lifecycle misuse, a state check's line)
            raise
        except (KeyError, ValueError, TypeError, RuntimeError, IndexError, AttributeError) as err:
            raise ConfigError(f"--ckpt_path: the checkpoint's {part} cannot be restored ({type(err).__name__}: "
                              f"{' '.join(error_text(err).split())[:200]}): it was edited, or written by another "
                              "version or config; resume from an unedited checkpoint of this config, or start fresh "
                              "without --ckpt_path") from None

    def _load_ranks(self, state: dict[str, Any]) -> None:
        ranks = state.get("ranks") or ([state] if "env" in state else [])
        if not ranks:
            return
        require(self, "load_state_dict", "built")  # the worlds' state needs the collector: never dropped silently
        if len(ranks) == self.world_size:
            self.collector.load_state_dict(ranks[self.rank])
            return
        warnings.warn(
            f"resuming on {self.world_size} ranks from a checkpoint of {len(ranks)}: counters, λ and sampler "
            "statistics are restored, env episodes and random streams start afresh (not an exact resume)",
            stacklevel=2,
        )
        self.collector.load_sampler_state(ranks[self.rank % len(ranks)])
