"""`model.policy: slots`: one network shared by every subtask slot, so its size does not grow with
the stage width and a policy trained at one width runs at another.

The observation is [W + 1, F]: W slot rows and one context row (SwarmEnv's layout). Each slot is
encoded with the context by a shared MLP; a pooled summary (masked mean and max over the pending
slots) carries what concerns the whole stage; a shared head turns (slot, pool) into that slot's
action logits, and the critic reads (pool, context). Permuting slots permutes the per-slot outputs.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
from torch import Tensor, nn

from parlightning.envs.base import ActionSpec
from parlightning.errors import ConfigError
from parlightning.method_args import IndexArg, checked
from parlightning.policies.actor_critic import (
    ACTIVATIONS, CategoricalHead, check_layers, check_observation_shape, checked_logits, mlp,
)


class SlotsActorCritic(nn.Module):
    """Slot-shared actor-critic; the `ActorCritic` interface (`act`, `evaluate`, `value`).

    Args:
        observation_shape: (W + 1, F): W slot rows, then the context row.
        action_spec: multi-discrete with W equal entries (one categorical per slot).
        hidden_sizes: widths of the slot encoder (the head and critic use the last width).
        activation: as for `ActorCritic`.
    """

    def __init__(self, observation_shape: Sequence[int], action_spec: ActionSpec,
                 hidden_sizes: Sequence[int] = (64, 64), activation: str = "relu") -> None:
        super().__init__()
        shape = check_observation_shape(f"{type(self).__name__}(observation_shape)", observation_shape)
        nvec = tuple(action_spec.nvec) if action_spec.is_discrete else ()
        if len(shape) != 2 or len(nvec) != shape[0] - 1 or len(set(nvec)) != 1:
            raise ConfigError(
                "model.policy: slots needs a world whose observation is [slots + 1, features] (slot rows, then a "
                f"context row) and one equal categorical per slot; got observation {shape} and actions {nvec or action_spec.kind}; "
                "use model.policy: mlp for this world")
        if not isinstance(activation, str) or activation not in ACTIVATIONS:
            raise ConfigError(f"model.activation: unknown {activation!r}; choose one of {sorted(ACTIVATIONS)}")
        self.width, self.features, self.choices = shape[0] - 1, shape[1], nvec[0]
        hidden = check_layers(type(self).__name__, hidden_sizes, activation, empty=False)
        H, F = hidden[-1], self.features
        self.encoder = nn.Sequential(mlp([2 * F, *hidden], activation, out_std=math.sqrt(2)), ACTIVATIONS[activation]())
        self.actor = mlp([3 * H, H, self.choices], activation, out_std=0.01)  # (slot, mean, max) -> logits
        self.critic = mlp([2 * H + F, H, 1], activation, out_std=1.0)  # (mean, max, context) -> value
        self.action_spec = action_spec
        self.head = CategoricalHead(nvec)

    @checked(owner="SlotsActorCritic", width=IndexArg(lo=1, text="the number of subtask slots of the world: a policy acts on one at least"))
    def at_width(self, width: int) -> "SlotsActorCritic":
        """The same weights for a world with `width` slots (a new head; no parameter changes)."""
        spec = ActionSpec("multi_discrete", nvec=(self.choices,) * width)
        other = SlotsActorCritic.__new__(SlotsActorCritic)
        nn.Module.__init__(other)
        other.width, other.features, other.choices = width, self.features, self.choices
        other.encoder, other.actor, other.critic, other.action_spec = self.encoder, self.actor, self.critic, spec
        other.head = CategoricalHead(spec.nvec).to(next(self.parameters()).device)
        return other

    def _features(self, obs: Tensor, mask: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
        """Per-slot logits [B, W * C] and the critic's input [B, 2H + F]. The pool reads the live slots:
        the action mask's live dimensions when given, else the pending ones (feature 0 > 0)."""
        W = obs.shape[1] - 1
        slots, context = obs[:, :W], obs[:, W]
        h = self.encoder(torch.cat([slots, context.unsqueeze(1).expand(-1, W, -1)], -1))  # [B, W, H]
        if mask is None:
            live = (slots[..., :1] > 0).to(h.dtype)  # pending slots (feature 0); others do not enter the pool
        else:
            live = self.head.dimension_live(mask).unsqueeze(-1).to(h.dtype)
        mean = (h * live).sum(1) / live.sum(1).clamp(min=1.0)
        top = (h * live - (1.0 - live) * 1e4).amax(1) * (live.sum(1) > 0)
        pool = torch.cat([mean, top], -1)  # [B, 2H]
        logits = checked_logits(self.actor, self.actor(torch.cat([h, pool.unsqueeze(1).expand(-1, W, -1)], -1)),
                                self.choices)  # [B, W, C]
        return logits.flatten(1), torch.cat([pool, context], -1)

    def _check_key(self, key: Optional[Tensor]) -> None:
        if key is not None:
            raise ValueError("key: the slots policy has no per-key table; TensorParallel needs model.policy: mlp")

    def value(self, obs: Tensor, key: Optional[Tensor] = None, mask: Optional[Tensor] = None) -> Tensor:
        self._check_key(key)
        return self.critic(self._features(obs, mask)[1]).squeeze(-1)

    def act(self, obs: Tensor, generator: Optional[torch.Generator] = None,
            key: Optional[Tensor] = None, mask: Optional[Tensor] = None) -> tuple[Tensor, Tensor, Tensor]:
        self._check_key(key)
        logits, crit = self._features(obs, mask)
        action, logprob = self.head.sample(logits, generator, mask)
        return action, logprob, self.critic(crit).squeeze(-1)

    def evaluate(self, obs: Tensor, action: Tensor, key: Optional[Tensor] = None,
                 mask: Optional[Tensor] = None) -> tuple[Tensor, Tensor, Tensor]:
        self._check_key(key)
        logits, crit = self._features(obs, mask)
        logprob, entropy = self.head.log_prob_entropy(logits, action, mask)
        return logprob, entropy, self.critic(crit).squeeze(-1)

    def prior_layer(self) -> nn.Linear:
        """The shared head's output layer: one bias per category, for every slot (see `set_action_prior`)."""
        return self.actor[-1]

    def prior_nvec(self) -> tuple[int, ...]:
        return (self.choices,)

    def action_logits(self, obs: Tensor, key: Optional[Tensor] = None, mask: Optional[Tensor] = None) -> Tensor:
        """The raw per-slot logits [B, W * C] (the pool over `mask`'s live slots when given)."""
        self._check_key(key)
        return self._features(obs, mask)[0]

    def logits(self, obs: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        """Per-slot action logits [B, W, C] (for tests and inspection)."""
        return self._features(obs, mask)[0].view(obs.shape[0], obs.shape[1] - 1, self.choices)
