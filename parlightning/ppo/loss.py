"""The clipped PPO loss for one minibatch, as a plain function (tested against a hand computation)."""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor

from parlightning.config_types import NonNegativeFinite, PositiveFinite
from parlightning.errors import ArgumentError
from parlightning.method_args import TensorArg, checked, vouched

_SAMPLE = TensorArg("float", "same", device="same", text="one entry per sample")


class PPOLoss(NamedTuple):
    loss: Tensor
    policy_loss: Tensor
    value_loss: Tensor
    entropy: Tensor
    approx_kl: Tensor  # (r - 1) - log r estimator
    old_approx_kl: Tensor  # -log r estimator
    clip_fraction: Tensor


WEIGHTS = "importance weights >= 0"  # the claim the module vouches its lag-corrected weights with


@checked(new_logprob=_SAMPLE, entropy=_SAMPLE, new_value=_SAMPLE, old_logprob=_SAMPLE, old_value=_SAMPLE,
         advantages=_SAMPLE, returns=_SAMPLE, clip_coef=PositiveFinite, ent_coef=NonNegativeFinite,
         vf_coef=NonNegativeFinite, is_weight=TensorArg("float", "same", device="same", optional=True),
         sample_mask=TensorArg("bool", "same", device="same", optional=True))
def ppo_loss(
    new_logprob: Tensor,
    entropy: Tensor,
    new_value: Tensor,
    old_logprob: Tensor,
    old_value: Tensor,
    advantages: Tensor,
    returns: Tensor,
    clip_coef: float = 0.2,
    ent_coef: float = 0.01,
    vf_coef: float = 0.5,
    norm_adv: bool = True,
    clip_vloss: bool = True,
    is_weight: Optional[Tensor] = None,
    sample_mask: Optional[Tensor] = None,
) -> PPOLoss:
    """Clipped surrogate + (optionally clipped) value loss - entropy bonus, CleanRL's formulation:
    advantages normalised per minibatch, value loss 0.5 * max(unclipped, clipped).

    `is_weight` (stale rollouts, `parlightning.collection.schedules.LagBudget`): per-sample truncated
    importance weights pi_prox / mu multiplying the clipped surrogate, with `old_logprob` the proximal
    policy's (decoupled PPO); None is plain PPO. `sample_mask` (per-actor collection,
    `parlightning.collection.schedules.Trajectories`): bool per sample, False for samples outside the
    staleness bound; they take no part in any term (means over the kept samples); None keeps all.

    Checked at entry (`checked`: metadata and Python numbers only, no host sync): every tensor float
    (`sample_mask` bool) with `new_logprob`'s shape and device (one entry per sample: nothing
    broadcasts), clip_coef > 0, ent_coef and vf_coef >= 0 (finite); an ArgumentError names the argument."""
    if is_weight is not None and vouched(is_weight) != WEIGHTS and is_weight.numel() and bool(
            ((is_weight < 0) | ~torch.isfinite(is_weight)).any()):  # the package's own weights are vouched: no read
        raise ArgumentError("ppo_loss(is_weight): must be importance weights >= 0 (finite), one per sample (a lagged "
                            "sample's truncated ratio pi/mu), got a negative, NaN or inf weight")
    if sample_mask is not None:
        return _masked_loss(new_logprob, entropy, new_value, old_logprob, old_value, advantages, returns, clip_coef,
                            ent_coef, vf_coef, norm_adv, clip_vloss, is_weight, sample_mask)
    logratio = new_logprob - old_logprob
    ratio = logratio.exp()
    with torch.no_grad():
        old_approx_kl = (-logratio).mean()
        approx_kl = ((ratio - 1) - logratio).mean()
        clip_fraction = ((ratio - 1.0).abs() > clip_coef).float().mean()
    if norm_adv and advantages.numel() > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    pg = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip_coef, 1 + clip_coef))
    pg_loss = (pg if is_weight is None else pg * is_weight).mean()
    v_unclipped = (new_value - returns) ** 2
    if clip_vloss:
        v_clipped = old_value + (new_value - old_value).clamp(-clip_coef, clip_coef)
        v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - returns) ** 2).mean()
    else:
        v_loss = 0.5 * v_unclipped.mean()
    entropy_mean = entropy.mean()
    loss = pg_loss - ent_coef * entropy_mean + vf_coef * v_loss
    return PPOLoss(loss, pg_loss, v_loss, entropy_mean, approx_kl, old_approx_kl, clip_fraction)


def _masked_loss(new_logprob: Tensor, entropy: Tensor, new_value: Tensor, old_logprob: Tensor, old_value: Tensor,
                 advantages: Tensor, returns: Tensor, clip_coef: float, ent_coef: float, vf_coef: float,
                 norm_adv: bool, clip_vloss: bool, is_weight: Optional[Tensor], sample_mask: Tensor) -> PPOLoss:
    """`ppo_loss` over the samples in `sample_mask` only (every mean, the advantage normalisation too)."""
    m = sample_mask.to(new_logprob.dtype)
    n = m.sum().clamp(min=1.0)

    def mean(x: Tensor) -> Tensor:
        return (x * m).sum() / n

    logratio = (new_logprob - old_logprob) * m
    ratio = logratio.exp()
    with torch.no_grad():
        old_approx_kl = mean(-logratio)
        approx_kl = mean((ratio - 1) - logratio)
        clip_fraction = mean(((ratio - 1.0).abs() > clip_coef).float())
    if norm_adv and advantages.numel() > 1:
        mu = mean(advantages)
        std = (((advantages - mu) ** 2 * m).sum() / (n - 1).clamp(min=1.0)).sqrt()
        advantages = (advantages - mu) / (std + 1e-8)
    pg = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip_coef, 1 + clip_coef))
    pg_loss = mean(pg if is_weight is None else pg * is_weight)
    v_unclipped = (new_value - returns) ** 2
    if clip_vloss:
        v_clipped = old_value + (new_value - old_value).clamp(-clip_coef, clip_coef)
        v_loss = 0.5 * mean(torch.max(v_unclipped, (v_clipped - returns) ** 2))
    else:
        v_loss = 0.5 * mean(v_unclipped)
    entropy_mean = mean(entropy)
    loss = pg_loss - ent_coef * entropy_mean + vf_coef * v_loss
    return PPOLoss(loss, pg_loss, v_loss, entropy_mean, approx_kl, old_approx_kl, clip_fraction)
