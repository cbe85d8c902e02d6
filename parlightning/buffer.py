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
    # Everything but the recursion over t is elementwise, so it runs on all T steps at once (the
    # same ops in the same order as step by step: bit-identical); the loop keeps 2 ops per step.
    following = torch.cat((values[1:], next_value.unsqueeze(0)))
    bootstrap = torch.where(truncated, truncated_values, following) * (~terminated)
    delta = rewards + gamma * bootstrap - values
    carry = gamma * gae_lambda * (~(terminated | truncated))
    advantages = torch.empty_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(rewards.shape[0])):
        last = delta[t] + carry[t] * last
        advantages[t] = last
    return advantages, advantages + values


def gather_rows(fields: dict[str, Tensor], idx: Tensor) -> dict[str, Tensor]:
    """A minibatch: rows `idx` (dim 0) of every field. `index_select` is ~4x faster than `v[idx]`
    on CPU (measured: 3 ms vs 12 ms for 32k of 131k rows)."""
    return {k: v.index_select(0, idx) for k, v in fields.items()}


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
        self.keys: Optional[Tensor] = None  # [T, N] key-table rows, for a keyed policy (TensorParallel)
        self.states: Optional[Tensor] = None  # [T, N, *state] hidden state each step starts from (recurrent policy)
        self.episode_start: Optional[Tensor] = None  # [T, N] bool: obs at t is its episode's first (recurrent policy)
        self.masks: Optional[Tensor] = None  # [T, N, M] bool: the world's action mask at each step (masked worlds)

    def allocate_memory(self, state_shape: tuple[int, ...]) -> None:
        """Add per-step storage for a recurrent policy: its hidden state ([N, *state_shape] per step)
        and the episode-start flags."""
        T, N = self.num_steps, self.num_envs
        self.states = torch.zeros(T, N, *state_shape, device=self.device)
        self.episode_start = torch.zeros(T, N, device=self.device, dtype=torch.bool)

    def write_memory(self, t: int, state: Tensor, episode_start: Tensor) -> None:
        """Record the hidden state step t starts from (before its reset) and where an episode starts."""
        self.states[t].copy_(state)
        self.episode_start[t].copy_(episode_start)

    @property
    def done(self) -> Tensor:
        return self.terminated | self.truncated

    def write(
        self, t: int, obs: Tensor, action: Tensor, logprob: Tensor, value: Tensor, key: Optional[Tensor] = None,
        mask: Optional[Tensor] = None,
    ) -> None:
        """Record what the policy saw and did at step t (and, for a keyed policy, each actor's key row;
        for a masked world, the action mask it acted under)."""
        if mask is not None:
            if self.masks is None:  # allocated once, by the first masked write
                with torch.inference_mode(False):
                    self.masks = torch.zeros(self.num_steps, self.num_envs, mask.shape[-1], device=self.device,
                                             dtype=torch.bool)
            self.masks[t].copy_(mask)
        self.obs[t].copy_(obs)
        self.actions[t].copy_(action)
        self.logprobs[t].copy_(logprob)
        self.values[t].copy_(value)
        if key is not None:
            if self.keys is None:  # allocated once, by the first keyed write; a normal tensor like the rest
                with torch.inference_mode(False):
                    self.keys = torch.zeros(self.num_steps, self.num_envs, device=self.device, dtype=torch.long)
            self.keys[t].copy_(key)

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
            torch.stack(tuple(parts), -1, out=self.parts[t])  # promoted and cast to float in one call

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
        """The rollout flattened to [T*N, ...] views for minibatching (`keys` too when keyed)."""
        B = self.num_steps * self.num_envs
        flat = {
            "obs": self.obs.reshape(B, *self.obs.shape[2:]),
            "actions": self.actions.reshape(B, *self.actions.shape[2:]),
            "logprobs": self.logprobs.reshape(B),
            "values": self.values.reshape(B),
            "advantages": self.advantages.reshape(B),
            "returns": self.returns.reshape(B),
        }
        if self.keys is not None:
            flat["keys"] = self.keys.reshape(B)
        if self.masks is not None:
            flat["masks"] = self.masks.reshape(B, -1)
        return flat

    def sequences(self, bptt_len: int) -> dict[str, Tensor]:
        """The rollout cut into per-actor chunks of `bptt_len` steps for a recurrent policy: each field
        [C*N, L, ...] (sequence c*N + n is steps c*L .. c*L+L-1 of actor n, in time order), plus
        `state0` [C*N, *state], the hidden state each chunk starts from (truncated BPTT)."""
        T, N, L = self.num_steps, self.num_envs, bptt_len
        C = T // L

        def chunks(x: Tensor) -> Tensor:  # [T, N, ...] -> [C*N, L, ...]
            return x.reshape(C, L, N, *x.shape[2:]).transpose(1, 2).reshape(C * N, L, *x.shape[2:])

        fields = ("obs", "actions", "logprobs", "values", "advantages", "returns", "episode_start")
        seq = {name: chunks(getattr(self, name)) for name in fields}
        if self.masks is not None:
            seq["masks"] = chunks(self.masks)
        seq["state0"] = self.states[::L].reshape(C * N, *self.states.shape[2:])
        return seq

    def minibatch_indices(
        self, update_epochs: int, num_minibatches: int, generator: Optional[torch.Generator] = None,
        rows: Optional[int] = None,
    ) -> Iterator[tuple[int, Tensor]]:
        """(epoch, indices) for update_epochs x num_minibatches minibatches; each epoch is a fresh
        permutation of the T*N rows (or of `rows`, e.g. the sequences of a recurrent policy), so
        every row is trained on once per epoch."""
        B = self.num_steps * self.num_envs if rows is None else rows
        size = B // num_minibatches
        for epoch in range(update_epochs):
            perm = torch.randperm(B, device=self.device, generator=generator)
            for m in range(num_minibatches):
                yield epoch, perm[m * size : (m + 1) * size]
