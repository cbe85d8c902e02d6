"""`RolloutDataModule`: owns the env, the rollout buffer and the task sampler, and collects a
rollout each time Lightning iterates its dataloader.

Lightning calls `iter()` on the train dataloader (and prefetches a batch) before
`on_train_epoch_start`; collecting inside `iter()` and giving the loader a `__len__` means
every minibatch of an epoch comes from the rollout the current policy just collected.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any, Callable, Iterator, Optional

import lightning.pytorch as pl
import torch
from torch import Tensor

from parlightning.buffer import RolloutBuffer
from parlightning.callbacks.base import rollout_callbacks
from parlightning.envs.base import BatchedEnv, EpisodeParts, task_ids_of
from parlightning.errors import ConfigError
from parlightning.reward import PARLReward
from parlightning.rollout import Rollout
from parlightning.sampling import RoundRobin, TaskSampler, as_batched

EnvFactory = Callable[[int, str, int], BatchedEnv]  # (num_envs, device, seed) -> env


def _default_env(num_envs: int, device: str, seed: int) -> BatchedEnv:
    from parlightning.envs.swarm import SwarmEnv

    return SwarmEnv(num_envs=num_envs, device=device, seed=seed)


def _positive(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"data.{name}: must be a positive integer, got {value!r}")


class RolloutLoader:
    """The train 'dataloader': iterating it collects a rollout, then yields
    update_epochs x num_minibatches minibatch dicts from it. Sized, so Lightning never
    prefetches across a policy update."""

    def __init__(self, datamodule: "RolloutDataModule") -> None:
        self.dm = datamodule

    def __len__(self) -> int:
        return self.dm.update_epochs * self.dm.num_minibatches

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        dm = self.dm
        rollout = dm.collect()
        flat = rollout.buffer.flat()
        round_tag = torch.tensor(rollout.round_index)
        indices = rollout.buffer.minibatch_indices(dm.update_epochs, dm.num_minibatches, dm.minibatch_generator)
        for epoch, idx in indices:
            if epoch > 0 and dm.stop_update:
                return  # target-KL stop, decided identically on every rank
            batch = {k: v[idx] for k, v in flat.items()}
            batch["round"] = round_tag
            yield batch


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
        seed: base seed for env resets, action sampling and minibatch shuffling (+ rank).
    """

    def __init__(
        self,
        env: Optional[EnvFactory] = None,
        num_envs: int = 256,
        num_steps: int = 128,
        update_epochs: int = 4,
        num_minibatches: int = 4,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        sampler: Optional[TaskSampler] = None,
        reward: Optional[PARLReward] = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        for name in ("num_envs", "num_steps", "update_epochs", "num_minibatches"):
            _positive(name, locals()[name])
        batch = num_envs * num_steps
        if batch % num_minibatches:
            raise ConfigError(
                f"data.num_minibatches: {num_minibatches} does not divide the rollout batch "
                f"num_envs x num_steps = {batch}; pick a divisor of {batch}"
            )
        if not 0.0 <= gamma <= 1.0:
            raise ConfigError(f"data.gamma: must lie in [0, 1], got {gamma!r}")
        if not 0.0 <= gae_lambda <= 1.0:
            raise ConfigError(f"data.gae_lambda: must lie in [0, 1], got {gae_lambda!r}")
        if sampler is not None and not isinstance(sampler, TaskSampler):
            raise ConfigError(
                f"data.sampler: {type(sampler).__name__} is not a TaskSampler; it needs "
                "pick(keys, round_index) -> task_id and record(task_id, score)"
            )
        self.env_factory = env or _default_env
        self.num_envs, self.num_steps = num_envs, num_steps
        self.update_epochs, self.num_minibatches = update_epochs, num_minibatches
        self.minibatch_size = batch // num_minibatches
        self.gamma, self.gae_lambda = gamma, gae_lambda
        self.sampler = sampler if sampler is not None else RoundRobin()
        self.reward = reward
        self.seed = seed
        self.round_index = 0
        self.env_steps = 0  # global, all ranks
        self.stop_update = False  # set by the module when target-KL is exceeded
        self.shard: Optional[Tensor] = None  # bank indices this rank samples from this round
        self.last_rollout: Optional[Rollout] = None
        self._built = False

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
        if self._built:
            return
        self.build(self.device, self.rank)

    def build(self, device: torch.device, rank: int = 0) -> None:
        """Make env, buffer and generators on `device` (called by `setup`; public for scripts)."""
        seed = self.seed + rank
        self.env = self.env_factory(self.num_envs, str(device), seed)
        if getattr(self.env, "num_envs", self.num_envs) != self.num_envs:
            raise ConfigError(f"data.env: built {self.env.num_envs} actors, expected data.num_envs={self.num_envs}")
        spec = self.env.action_spec
        self.buffer = RolloutBuffer(
            self.num_steps, self.num_envs, tuple(self.env.observation_shape), spec.action_shape, device,
            torch.long if spec.is_discrete else torch.float32,
        )
        self.action_generator = torch.Generator(device=device).manual_seed(seed)
        self.minibatch_generator = torch.Generator(device=device).manual_seed(seed + 7919)
        self.task_ids = task_ids_of(self.env)
        if self.task_ids is not None:
            self._sampler = as_batched(self.sampler, queue_length=self.num_envs)
            self._sampler.bind(self.task_ids, device)
            self.shard = torch.arange(len(self.task_ids), device=device)
            self._check_thresholds()
            first = self._sampler.pick_batch(
                self.shard, 0, torch.ones(self.num_envs, dtype=torch.bool, device=device), self.action_generator
            )
            self.obs = self.env.reset(seed=seed, task_index=first)
        else:
            self._sampler = None
            self.obs = self.env.reset(seed=seed)
        self.episode_return = torch.zeros(self.num_envs, device=device)
        self.episode_length = torch.zeros(self.num_envs, device=device)
        self._check_reward_cap(self.env)
        self._built = True
        self._last_collect_start: Optional[float] = None

    def _check_thresholds(self) -> None:
        """Warn once when the sampler's pass threshold and the env's solved threshold disagree."""
        ours = getattr(self.sampler, "pass_threshold", None)
        theirs = getattr(self.env, "solved_threshold", None)
        if ours is not None and theirs is not None and not math.isclose(float(ours), float(theirs)):
            warnings.warn(
                f"data.sampler.pass_threshold={ours} differs from the env's solved_threshold={theirs}: "
                "the sampler will count passes differently from the env's success; set them equal",
                stacklevel=2,
            )

    def preflight(self) -> None:
        """Build the env once on the CPU and run every check that needs it (reward cap, sampler
        threshold, spaces), so bad config fails before the trainer writes anything."""
        env = self.env_factory(self.num_envs, "cpu", self.seed)
        for attr in ("observation_shape", "action_spec"):
            if not hasattr(env, attr):
                raise ConfigError(f"data.env: {type(env).__name__} has no `{attr}`; a BatchedEnv needs it")
        if getattr(env, "num_envs", self.num_envs) != self.num_envs:
            raise ConfigError(f"data.env: built {env.num_envs} actors, expected data.num_envs={self.num_envs}")
        self._check_reward_cap(env)
        del env

    def _check_reward_cap(self, env: BatchedEnv) -> None:
        cap = getattr(env, "max_subagents", None)
        if self.reward is not None and cap is not None and self.reward.max_subagents != cap:
            raise ConfigError(
                f"data.reward.max_subagents={self.reward.max_subagents} differs from the env's max_subagents={cap}; "
                "r_parallel must be measured against the env's cap: set them equal"
            )

    def train_dataloader(self) -> RolloutLoader:
        return RolloutLoader(self)

    # ------------------------------------------------------------------ collection
    def _pick(self, reset_mask: Tensor) -> Tensor:
        return self._sampler.pick_batch(self.shard, self.round_index, reset_mask, self.action_generator)

    def collect(self) -> Rollout:
        """Run one round: N actors x T steps under inference mode, then rewards, GAE, hooks."""
        trainer = self.trainer
        module = trainer.lightning_module if trainer is not None else None
        policy = module.policy
        callbacks = rollout_callbacks(trainer)
        self.stop_update = False
        for cb in callbacks:
            cb.on_rollout_start(trainer, module, self.round_index)
        start = time.perf_counter()
        iteration_time = None if self._last_collect_start is None else start - self._last_collect_start
        self._last_collect_start = start

        buf, env, obs = self.buffer, self.env, self.obs
        ep_return, ep_length = self.episode_return, self.episode_length
        picker = self._pick if self._sampler is not None else None
        with torch.inference_mode():
            for t in range(self.num_steps):
                action, logprob, value = policy.act(obs, self.action_generator)
                buf.write(t, obs, action, logprob, value)
                res = env.step(action, picker)
                ep_return += res.reward
                ep_length += 1
                buf.write_outcome(t, res.reward, res.terminated, res.truncated, res.final_obs, ep_return, ep_length,
                                  res.parts)
                alive = ~(res.terminated | res.truncated)
                ep_return *= alive
                ep_length *= alive
                obs = res.obs
            self.obs = obs
            next_value = policy.value(obs)
            truncated_values = torch.zeros_like(buf.values)
            where = buf.truncated.nonzero(as_tuple=True)  # rollout end: one host sync is fine here
            if where[0].numel():
                truncated_values[where] = policy.value(buf.final_obs[where])
        rollout_time = self._elapsed(start)

        done = buf.done
        episodes = buf.finished_parts()
        if episodes is not None and episodes.task.numel():  # numel of a masked select: known on the host
            for cb in callbacks:
                cb.on_episodes_end(trainer, module, episodes.task, episodes)
            self._sampler.record_batch(episodes.task, episodes.outcome)
            if self.reward is not None:
                bonus = self.reward.bonus(episodes.n_subagents, episodes.assigned, episodes.completed, validate=False)
                buf.rewards[done] += bonus
        buf.compute_advantages(next_value, truncated_values, self.gamma, self.gae_lambda)

        steps = self.num_envs * self.num_steps * self.world_size
        self.env_steps += steps
        rollout = Rollout(
            round_index=self.round_index,
            buffer=buf,
            episode_return=buf.episode_return[done],
            episode_length=buf.episode_length[done],
            episodes=episodes,
            env_steps=self.env_steps,
            policy_version=trainer.global_step if trainer is not None else 0,
        )
        rollout.stats.update(self._stats(rollout, steps, rollout_time, iteration_time))
        for cb in callbacks:
            cb.on_rollout_end(trainer, module, rollout)
        self.last_rollout = rollout
        self.round_index += 1
        return rollout

    def _elapsed(self, start: float) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - start

    def _stats(
        self, rollout: Rollout, steps: int, rollout_time: float, iteration_time: Optional[float]
    ) -> dict[str, Tensor]:
        """0-dim tensors to log at this rollout's env step (read at rollout end, never per step)."""
        buf = rollout.buffer
        stats: dict[str, Tensor] = {}
        local_steps = self.num_envs * self.num_steps
        stats["perf/rollout_SPS"] = torch.tensor(local_steps / max(rollout_time, 1e-9))
        if iteration_time is not None:
            stats["perf/SPS"] = torch.tensor(steps / max(iteration_time, 1e-9))
        var_returns = buf.returns.var()
        stats["losses/explained_variance"] = torch.where(
            var_returns > 0, 1 - (buf.returns - buf.values).var() / var_returns, torch.zeros_like(var_returns)
        )
        # Same keys on every rank whatever finished (DDP reduces them); means over no episodes read 0.
        n = torch.tensor(float(rollout.episode_return.numel()), device=buf.rewards.device)
        per = n.clamp(min=1.0)
        stats["rollout/episodes"] = n
        stats["rollout/episodic_return"] = rollout.episode_return.sum() / per
        stats["rollout/episodic_length"] = rollout.episode_length.sum() / per
        ep = rollout.episodes
        if ep is not None:
            threshold = float(getattr(self.env, "solved_threshold", 1.0))
            stats["rollout/success_rate"] = (ep.outcome >= threshold).float().sum() / per
            stats["rollout/subagents_per_episode"] = ep.n_subagents.sum() / per
            stats["rollout/finish_rate"] = ep.completed.sum() / ep.assigned.sum().clamp(min=1.0)
            stats["rollout/critical_steps"] = ep.critical_steps.sum() / per
        return stats

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"round_index": self.round_index, "env_steps": self.env_steps}
        if self._built:
            state.update(
                env=self.env.state_dict(),
                obs=self.obs.clone(),
                episode_return=self.episode_return.clone(),
                episode_length=self.episode_length.clone(),
                action_generator=self.action_generator.get_state(),
                minibatch_generator=self.minibatch_generator.get_state(),
                sampler=self._sampler.state_dict() if self._sampler is not None else {},
            )
        if self.reward is not None:
            state["reward"] = self.reward.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.round_index = int(state["round_index"])
        self.env_steps = int(state["env_steps"])
        if "reward" in state and self.reward is not None:
            self.reward.load_state_dict(state["reward"])
        if "env" in state and self._built:
            self.env.load_state_dict(state["env"])
            self.obs.copy_(state["obs"])
            self.episode_return.copy_(state["episode_return"])
            self.episode_length.copy_(state["episode_length"])
            self.action_generator.set_state(state["action_generator"])
            self.minibatch_generator.set_state(state["minibatch_generator"])
            if self._sampler is not None:
                self._sampler.load_state_dict(state["sampler"])
