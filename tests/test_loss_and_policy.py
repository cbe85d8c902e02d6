"""The PPO loss against a hand computation; action heads against torch.distributions."""

import math

import torch

from parlightning.envs.base import ActionSpec
from parlightning.ppo.loss import ppo_loss
from parlightning.policies.actor_critic import ActorCritic


def test_ppo_loss_by_hand():
    new_lp = torch.tensor([0.0, math.log(1.5), math.log(0.5)])
    old_lp = torch.zeros(3)
    adv = torch.tensor([1.0, 1.0, -1.0])
    new_v, old_v, ret = torch.tensor([1.0, 0.0, 2.0]), torch.tensor([0.5, 0.0, 1.0]), torch.tensor([1.0, 1.0, 1.0])
    ent = torch.tensor([0.3, 0.6, 0.9])
    out = ppo_loss(new_lp, ent, new_v, old_lp, old_v, adv, ret, clip_coef=0.2, ent_coef=0.01, vf_coef=0.5, norm_adv=False)
    # ratios 1, 1.5, 0.5 -> per-sample max(-A r, -A clip(r)): -1, max(-1.5, -1.2) = -1.2, max(0.5, 0.8) = 0.8
    assert math.isclose(out.policy_loss.item(), (-1 - 1.2 + 0.8) / 3, rel_tol=1e-6)
    # value: unclipped (0, 1, 1); clipped v = old + clamp(new-old, ±0.2) = (0.7, 0, 1.2) -> (0.09, 1, 0.04)
    assert math.isclose(out.value_loss.item(), 0.5 * (0.09 + 1 + 1) / 3, rel_tol=1e-6)
    assert math.isclose(out.entropy.item(), 0.6, rel_tol=1e-6)
    assert math.isclose(out.loss.item(), out.policy_loss.item() - 0.01 * 0.6 + 0.5 * out.value_loss.item(), rel_tol=1e-6)
    assert math.isclose(out.clip_fraction.item(), 2 / 3, rel_tol=1e-6)
    logr = new_lp - old_lp
    assert math.isclose(out.approx_kl.item(), ((logr.exp() - 1) - logr).mean().item(), rel_tol=1e-6)


def test_ppo_loss_normalises_advantages_per_minibatch():
    lp = torch.log(torch.tensor([1.1, 0.9, 1.0, 1.05]))
    args = (lp, torch.zeros(4), torch.zeros(4), torch.zeros(4), torch.zeros(4))
    adv = torch.tensor([1.0, 2.0, 3.0, 4.0])
    a = ppo_loss(*args, adv, torch.zeros(4), norm_adv=True)
    b = ppo_loss(*args, (adv - adv.mean()) / (adv.std() + 1e-8), torch.zeros(4), norm_adv=False)
    torch.testing.assert_close(a.policy_loss, b.policy_loss)


def test_multi_discrete_head_matches_independent_categoricals():
    spec = ActionSpec("multi_discrete", nvec=(3, 5, 2))
    net = ActorCritic((4,), spec, (16,), "relu")
    obs = torch.randn(32, 4)
    action, logprob, value = net.act(obs, torch.Generator().manual_seed(0))
    assert action.shape == (32, 3) and value.shape == (32,)
    assert (action[:, 0] < 3).all() and (action[:, 1] < 5).all() and (action[:, 2] < 2).all()
    logits = net.actor(obs).split([3, 5, 2], -1)
    dists = [torch.distributions.Categorical(logits=z) for z in logits]
    ref_lp = sum(d.log_prob(action[:, i]) for i, d in enumerate(dists))
    ref_ent = sum(d.entropy() for d in dists)
    lp, ent, _ = net.evaluate(obs, action)
    torch.testing.assert_close(logprob, ref_lp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lp, ref_lp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent, ref_ent, atol=1e-5, rtol=1e-5)
    ent.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)


def test_sampling_follows_the_softmax():
    spec = ActionSpec("discrete", nvec=(3,))
    net = ActorCritic((2,), spec, (8,), "tanh")
    with torch.no_grad():
        net.actor[-1].bias.copy_(torch.tensor([0.0, 1.0, 2.0]))
        net.actor[-1].weight.zero_()
    action, _, _ = net.act(torch.zeros(20000, 2), torch.Generator().manual_seed(1))
    freq = torch.bincount(action, minlength=3).float() / 20000
    torch.testing.assert_close(freq, torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0), atol=0.015, rtol=0)


def test_gaussian_head_log_prob_and_entropy():
    spec = ActionSpec("continuous", shape=(2,))
    net = ActorCritic((3,), spec, (8,), "tanh")
    obs = torch.randn(5, 3)
    action, logprob, _ = net.act(obs, torch.Generator().manual_seed(0))
    mean = net.actor(obs)
    ref = torch.distributions.Normal(mean, net.head.log_std.exp())
    torch.testing.assert_close(logprob, ref.log_prob(action).sum(-1))
    _, ent, _ = net.evaluate(obs, action)
    torch.testing.assert_close(ent, ref.entropy().sum(-1))
