"""`RolloutBuffer`: preallocated [T, N, ...] rollout tensors, GAE and minibatch indices.

One write per step for all actors; per-actor trajectories stay in their own column, so GAE
never mixes actors. Termination cuts the return; truncation bootstraps from the value of
the observation the episode was cut on.
"""

from __future__ import annotations

from typing import Iterator, Optional

import torch
from torch import Tensor

from parlightning.envs.base import EpisodeParts

PART_FIELDS = EpisodeParts._fields


def compute_gae(
    rewards: Tensor,
    values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    truncated_values: Tensor,
    next_value: Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over [T, N] tensors; returns (advantages, returns).

    At step t an episode that terminated contributes no bootstrap; one that was truncated
    bootstraps from `truncated_values[t]` (V of its final observation) and does not carry the
    advantage of the next episode back; `next_value` is V of the observation after step T-1.
    """
    T = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(T)):
        following = next_value if t == T - 1 else values[t + 1]
        done = terminated[t] | truncated[t]
        bootstrap = torch.where(truncated[t], truncated_values[t], following) * (~terminated[t])
        delta = rewards[t] + gamma * bootstrap - values[t]
        last = delta + gamma * gae_lambda * (~done) * last
        advantages[t] = last
    return advantages, advantages + values


class RolloutBuffer:
    """Storage for one rollout of `num_steps` x `num_envs` on one device."""

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        observation_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        device: torch.device,
        action_dtype: torch.dtype = torch.long,
    ) -> None:
        T, N = num_steps, num_envs
        f = dict(device=device, dtype=torch.float32)
        self.num_steps, self.num_envs, self.device = T, N, device
        self.obs = torch.zeros(T, N, *observation_shape, **f)
        self.final_obs = torch.zeros(T, N, *observation_shape, **f)
        self.actions = torch.zeros(T, N, *action_shape, device=device, dtype=action_dtype)
        self.logprobs = torch.zeros(T, N, **f)
        self.values = torch.zeros(T, N, **f)
        self.rewards = torch.zeros(T, N, **f)
        self.terminated = torch.zeros(T, N, device=device, dtype=torch.bool)
        self.truncated = torch.zeros(T, N, device=device, dtype=torch.bool)
        self.episode_return = torch.zeros(T, N, **f)  # running return, read where an episode ended
        self.episode_length = torch.zeros(T, N, **f)
        self.parts = torch.zeros(T, N, len(PART_FIELDS), **f)  # EpisodeParts, read where an episode ended
        self.advantages = torch.zeros(T, N, **f)
        self.returns = torch.zeros(T, N, **f)
        self.has_parts = False  # set once the env reports EpisodeParts

    @property
    def done(self) -> Tensor:
        return self.terminated | self.truncated

    def write(self, t: int, obs: Tensor, action: Tensor, logprob: Tensor, value: Tensor) -> None:
        """Record what the policy saw and did at step t."""
        self.obs[t].copy_(obs)
        self.actions[t].copy_(action)
        self.logprobs[t].copy_(logprob)
        self.values[t].copy_(value)

    def write_outcome(
        self,
        t: int,
        reward: Tensor,
        terminated: Tensor,
        truncated: Tensor,
        final_obs: Tensor,
        episode_return: Tensor,
        episode_length: Tensor,
        parts: Optional[EpisodeParts],
    ) -> None:
        """Record what the env answered at step t."""
        self.rewards[t].copy_(reward)
        self.terminated[t].copy_(terminated)
        self.truncated[t].copy_(truncated)
        self.final_obs[t].copy_(final_obs)
        self.episode_return[t].copy_(episode_return)
        self.episode_length[t].copy_(episode_length)
        if parts is not None:
            self.has_parts = True
            torch.stack([p.float() for p in parts], -1, out=self.parts[t])

    def finished_parts(self) -> Optional[EpisodeParts]:
        """EpisodeParts of every episode that ended in this rollout ([E] each); one host sync."""
        if not self.has_parts:
            return None
        cols = self.parts[self.done].unbind(-1)
        return EpisodeParts(cols[0].long(), *cols[1:])

    def compute_advantages(
        self, next_value: Tensor, truncated_values: Tensor, gamma: float, gae_lambda: float
    ) -> None:
        adv, ret = compute_gae(
            self.rewards, self.values, self.terminated, self.truncated, truncated_values, next_value, gamma, gae_lambda
        )
        self.advantages.copy_(adv)
        self.returns.copy_(ret)

    def flat(self) -> dict[str, Tensor]:
        """The rollout flattened to [T*N, ...] views for minibatching."""
        B = self.num_steps * self.num_envs
        return {
            "obs": self.obs.reshape(B, *self.obs.shape[2:]),
            "actions": self.actions.reshape(B, *self.actions.shape[2:]),
            "logprobs": self.logprobs.reshape(B),
            "values": self.values.reshape(B),
            "advantages": self.advantages.reshape(B),
            "returns": self.returns.reshape(B),
        }

    def minibatch_indices(
        self, update_epochs: int, num_minibatches: int, generator: Optional[torch.Generator] = None
    ) -> Iterator[tuple[int, Tensor]]:
        """(epoch, indices) for update_epochs x num_minibatches minibatches; each epoch is a fresh
        permutation of the T*N rows, so every row is trained on once per epoch."""
        B = self.num_steps * self.num_envs
        size = B // num_minibatches
        for epoch in range(update_epochs):
            perm = torch.randperm(B, device=self.device, generator=generator)
            for m in range(num_minibatches):
                yield epoch, perm[m * size : (m + 1) * size]
