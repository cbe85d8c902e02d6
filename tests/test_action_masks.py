"""Action masks (MaskablePPO semantics): a masked dimension takes action 0 and adds nothing to the
log-prob, entropy, ratio, KL or clip fraction; a category mask samples and scores only live
categories; SwarmEnv masks its non-pending slots; the slots policy's pool ignores them; the buffer,
the PPO step, evaluate and export use the stored mask."""

import lightning.pytorch as pl
import pytest
import torch

from parlightning.ppo.data import RolloutDataModule
from parlightning.envs.base import ActionSpec, check_action_mask
from parlightning.envs.swarm import SwarmEnv
from parlightning.errors import ConfigError
from parlightning.cli.export import GreedyPolicy, export_policy
from parlightning.ppo.loss import ppo_loss
from parlightning.ppo.module import PPOModule
from parlightning.policies.actor_critic import ActorCritic, CategoricalHead
from parlightning.policies.recurrent import RecurrentActorCritic
from parlightning.policies.slots import SlotsActorCritic


def _masked_dims(B, D, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(B, D, generator=g) < 0.5
    mask[0] = False  # a row with nothing live
    mask[1] = True
    return mask


def _perturb_masked(logits, mask, nvec):
    """The logits with every masked dimension's columns replaced by large random values."""
    cols = torch.repeat_interleave(torch.arange(len(nvec)), torch.tensor(nvec))
    dead = ~mask[:, cols]
    return torch.where(dead, torch.randn_like(logits) * 50, logits)


def test_a_masked_dimension_takes_action_0_and_adds_nothing_to_logprob_entropy_or_gradient():
    nvec = (3, 5, 2, 5)
    head = CategoricalHead(nvec)
    B = 64
    logits = torch.randn(B, sum(nvec), requires_grad=True)
    mask = _masked_dims(B, len(nvec))
    g = torch.Generator().manual_seed(1)
    action, logp = head.sample(logits, g, mask)
    assert (action[~mask] == 0).all() and (action[mask] > 0).any()
    lp, ent = head.log_prob_entropy(logits, action, mask)
    torch.testing.assert_close(lp, logp)
    # the same as scoring the live dimensions alone
    per_dim = head.dimension_entropy(logits, mask)
    assert (per_dim[~mask] == 0).all() and (per_dim[mask] > 0).all()
    torch.testing.assert_close(ent, per_dim.sum(1))
    live_lp = torch.zeros(B)
    for d, n in enumerate(nvec):
        off = sum(nvec[:d])
        ld = logits[:, off:off + n].log_softmax(-1).gather(1, action[:, d:d + 1]).squeeze(1)
        live_lp = live_lp + torch.where(mask[:, d], ld, torch.zeros_like(ld))
    torch.testing.assert_close(lp, live_lp)
    assert float(ent[0].detach()) == 0.0 and float(lp[0].detach()) == 0.0  # nothing live: log-prob and entropy exactly 0
    # changing the masked dimensions' logits changes nothing, bit for bit; their gradient is 0
    other = _perturb_masked(logits.detach(), mask, nvec)
    lp2, ent2 = head.log_prob_entropy(other, action, mask)
    assert torch.equal(lp2, lp) and torch.equal(ent2, ent)
    (lp.sum() + ent.sum()).backward()
    cols = torch.repeat_interleave(torch.arange(len(nvec)), torch.tensor(nvec))
    assert (logits.grad[~mask[:, cols]] == 0).all() and (logits.grad[mask[:, cols]] != 0).any()


def test_a_category_mask_samples_and_scores_only_live_categories_as_maskable_ppo():
    nvec = (3, 4)
    head = CategoricalHead(nvec)
    B = 4000
    logits = torch.randn(1, 7).expand(B, 7).contiguous()
    mask = torch.tensor([[True, False, True, False, True, True, False]]).expand(B, 7)
    action, logp = head.sample(logits, torch.Generator().manual_seed(0), mask)
    assert set(action[:, 0].tolist()) == {0, 2} and set(action[:, 1].tolist()) == {1, 2}
    lp, ent = head.log_prob_entropy(logits, action, mask)
    torch.testing.assert_close(lp, logp)
    want_lp, want_ent = torch.zeros(B), torch.zeros(B)
    for d, (lo, hi) in enumerate(((0, 3), (3, 7))):
        dist = torch.distributions.Categorical(logits=logits[:, lo:hi].masked_fill(~mask[:, lo:hi], -1e8))
        want_lp += dist.log_prob(action[:, d])
        want_ent += dist.entropy()
    torch.testing.assert_close(lp, want_lp)
    torch.testing.assert_close(ent, want_ent)
    # empirical frequencies follow the renormalised live probabilities
    p = logits[0, 0:3].masked_fill(~mask[0, 0:3], float("-inf")).softmax(0)
    assert abs(float((action[:, 0] == 2).float().mean()) - float(p[2])) < 0.03


def test_ppo_loss_kl_and_clip_fraction_ignore_masked_dimensions_logits():
    nvec = (5,) * 6
    head = CategoricalHead(nvec)
    B = 128
    old_logits, new_logits = torch.randn(B, 30), torch.randn(B, 30)
    mask = _masked_dims(B, 6, seed=3)
    action, old_lp = head.sample(old_logits, torch.Generator().manual_seed(2), mask)
    adv, ret, oldv, newv = torch.randn(B), torch.randn(B), torch.randn(B), torch.randn(B)

    def loss(logits):
        lp, ent = head.log_prob_entropy(logits, action, mask)
        return ppo_loss(lp, ent, newv, old_lp, oldv, adv, ret)

    a, b = loss(new_logits), loss(_perturb_masked(new_logits, mask, nvec))
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    unmasked = ppo_loss(*head.log_prob_entropy(new_logits, action), newv, head.log_prob_entropy(old_logits, action)[0],
                        oldv, adv, ret)
    assert not torch.equal(unmasked.approx_kl, a.approx_kl)  # the mask is what makes the difference


def _swarm_batch(env_kwargs=None, steps=6):
    env = SwarmEnv(num_envs=32, seed=3, **(env_kwargs or {}))
    obs = env.reset(seed=3)
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(steps):
        mask = env.action_masks()
        out.append((obs.clone(), mask.clone()))
        obs = env.step(env.scripted_action("random", obs, g)).obs
    return env, torch.cat([o for o, _ in out]), torch.cat([m for _, m in out])


def test_swarm_env_masks_exactly_its_non_pending_slots_eager_and_compiled():
    for compile in (False, True):
        try:
            env = SwarmEnv(num_envs=48, seed=5, compile=compile)
        except ConfigError:  # no C++ compiler here: the eager step alone
            assert compile
            continue
        obs = env.reset(seed=5)
        g = torch.Generator().manual_seed(0)
        seen_dead = False
        for _ in range(30):
            mask = env.action_masks()
            check_action_mask(mask, env.action_spec, 48)
            assert torch.equal(mask, obs[:, :env.max_width, 0] > 0)
            seen_dead |= bool((~mask).any())
            obs = env.step(env.scripted_action("random", obs, g)).obs
        assert seen_dead


def test_slots_policy_value_and_live_logits_ignore_non_pending_slots_features():
    torch.manual_seed(0)
    env, obs, mask = _swarm_batch()
    policy = SlotsActorCritic(env.observation_shape, env.action_spec)
    for p in policy.parameters():  # away from init, so every weight matters
        p.data.normal_(0, 0.3)
    W = env.max_width
    moved = obs.clone()
    dead = ~mask
    moved[:, :W][dead] = torch.randn(int(dead.sum()), obs.shape[-1]) * 3 + 1  # feature 0 too: looks pending
    action = env.scripted_action("random", obs, torch.Generator().manual_seed(1))
    with torch.no_grad():
        v, v2 = policy.value(obs, mask=mask), policy.value(moved, mask=mask)
        torch.testing.assert_close(v2, v, rtol=0, atol=1e-6)
        live, live2 = policy.logits(obs, mask), policy.logits(moved, mask)
        torch.testing.assert_close(live2[mask], live[mask], rtol=0, atol=1e-6)
        assert not torch.allclose(live2[dead], live[dead])  # the dead slots' own logits did move ...
        lp, ent, val = policy.evaluate(obs, action, mask=mask)
        lp2, ent2, val2 = policy.evaluate(moved, action, mask=mask)  # ... and enter nothing
        torch.testing.assert_close(lp2, lp, rtol=0, atol=1e-5)
        torch.testing.assert_close(ent2, ent, rtol=0, atol=1e-5)
        assert not torch.allclose(policy.value(moved), v)  # without the mask the pool would read them


def test_mlp_and_recurrent_policies_score_what_they_sampled_under_the_mask():
    env, obs, mask = _swarm_batch()
    mlp = ActorCritic(env.observation_shape, env.action_spec)
    a, lp, v = mlp.act(obs, torch.Generator().manual_seed(0), mask=mask)
    assert (a[~mask] == 0).all()
    lp2, ent, v2 = mlp.evaluate(obs, a, mask=mask)
    torch.testing.assert_close(lp2, lp)
    assert (mlp.head.dimension_entropy(mlp.action_logits(obs), mask)[~mask] == 0).all()
    rnn = RecurrentActorCritic(env.observation_shape, env.action_spec, (32,), 16, "gru")
    B = obs.shape[0]
    state, start = rnn.initial_state(B), torch.ones(B, dtype=torch.bool)
    a, lp, _, _ = rnn.act(obs, torch.Generator().manual_seed(0), state, start, mask)
    assert (a[~mask] == 0).all()
    lp2, _, _ = rnn.evaluate_sequences(obs.unsqueeze(1), a.unsqueeze(1), start.unsqueeze(1), state, mask.unsqueeze(1))
    torch.testing.assert_close(lp2[:, 0], lp)


class Keep(pl.Callback):
    def __init__(self):
        self.batches = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batches.append({k: v.clone() for k, v in batch.items() if torch.is_tensor(v)})


@pytest.mark.parametrize("policy", ["mlp", "slots", "gru"])
def test_a_fit_stores_the_mask_per_step_and_trains_on_it(tmp_path, policy):
    pl.seed_everything(0)
    env = lambda num_envs, device, seed: SwarmEnv(num_envs=num_envs, device=device, seed=seed)  # noqa: E731
    dm = RolloutDataModule(env=env, num_envs=16, num_steps=8, update_epochs=1, num_minibatches=2,
                           **({"bptt_len": 4} if policy == "gru" else {}))
    keep = Keep()
    module = PPOModule(anneal_lr=False, policy=policy)
    pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False, callbacks=[keep], default_root_dir=tmp_path).fit(module, datamodule=dm)
    buf = dm.collector.loop.buffer
    assert buf.masks is not None and buf.masks.shape == (8, 16, 12)
    torch.testing.assert_close(buf.masks, buf.obs[:, :, :12, 0] > 0)
    assert (buf.actions[~buf.masks] == 0).all() and (~buf.masks).any()
    batch = keep.batches[0]
    assert "masks" in batch
    with torch.no_grad():  # the stored log-probs are the masked ones: scoring without the mask differs
        if policy == "gru":
            assert batch["masks"].shape[1:] == (4, 12)
            args = (batch["obs"], batch["actions"], batch["episode_start"], batch["state0"])
            lp = module.policy.evaluate_sequences(*args, mask=batch["masks"])[0]
            unmasked = module.policy.evaluate_sequences(*args)[0]
        else:
            lp, _, _ = module.policy.evaluate(batch["obs"], batch["actions"], mask=batch["masks"])
            unmasked, _, _ = module.policy.evaluate(batch["obs"], batch["actions"])
        assert not torch.allclose(lp, unmasked)
        assert torch.isfinite(lp).all()


def test_a_bad_world_mask_is_one_error_naming_the_fix():
    spec = ActionSpec("multi_discrete", nvec=(3, 3))
    with pytest.raises(ValueError, match="bool tensor"):
        check_action_mask(torch.ones(4, 2), spec, 4)
    with pytest.raises(ValueError, match=r"neither layout .* \[N, 2\] .* \[N, 6\]"):
        check_action_mask(torch.ones(4, 5, dtype=torch.bool), spec, 4)
    with pytest.raises(ValueError, match="num_envs = 4"):
        check_action_mask(torch.ones(3, 2, dtype=torch.bool), spec, 4)
    bad = torch.ones(4, 6, dtype=torch.bool)
    bad[2, 3:] = False
    with pytest.raises(ValueError, match="actor 2's action dimension 1 has no live category"):
        check_action_mask(bad, spec, 4)
    with pytest.raises(ValueError, match="discrete actions only"):
        check_action_mask(torch.ones(4, 2, dtype=torch.bool), ActionSpec("continuous", shape=(2,)), 4)


def test_greedy_evaluation_and_export_apply_the_mask(tmp_path):
    from parlightning.cli.evaluate import greedy_action

    env, obs, mask = _swarm_batch()
    policy = ActorCritic(env.observation_shape, env.action_spec)
    for p in policy.parameters():
        p.data.normal_(0, 0.5)
    with torch.no_grad():
        want = greedy_action(policy, obs, mask)
        assert (want[~mask] == 0).all() and not (greedy_action(policy, obs)[~mask] == 0).all()
        assert torch.equal(GreedyPolicy(policy)(obs, mask), want)
    export_policy(policy, env.observation_shape, tmp_path / "p.pt2", mask_width=mask.shape[1])
    program = torch.export.load(str(tmp_path / "p.pt2")).module()
    assert torch.equal(program(obs, mask), want)
    assert torch.equal(program(obs[:1], mask[:1]), want[:1])
