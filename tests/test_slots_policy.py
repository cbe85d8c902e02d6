"""The slots policy: per-slot equivariance, a size independent of the width, and a real fit."""

import pytest
import torch

from parlightning.envs.swarm import SwarmEnv
from parlightning.errors import ConfigError
from parlightning.policies.actor_critic import ActorCritic
from parlightning.policies.slots import SlotsActorCritic


def _policy(width, seed=0):
    env = SwarmEnv(num_envs=6, max_width=width)
    torch.manual_seed(seed)
    return env, SlotsActorCritic(env.observation_shape, env.action_spec, (32, 32), "relu")


def _obs(env, steps=3):
    obs = env.reset()
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        obs = env.step(env.scripted_action("random", obs, g)).obs
    return obs


def test_permuting_slots_permutes_the_per_slot_outputs_and_keeps_the_value():
    env, net = _policy(12)
    obs = _obs(env)
    with torch.no_grad():
        perm = torch.randperm(12, generator=torch.Generator().manual_seed(3))
        permuted = torch.cat([obs[:, :12][:, perm], obs[:, 12:]], 1)
        torch.testing.assert_close(net.logits(permuted), net.logits(obs)[:, perm], rtol=0, atol=1e-5)
        torch.testing.assert_close(net.value(permuted), net.value(obs), rtol=0, atol=1e-5)
        action = env.scripted_action("random", obs, torch.Generator().manual_seed(1))
        lp, ent, _ = net.evaluate(obs, action)
        lp2, ent2, _ = net.evaluate(permuted, action[:, perm])
        torch.testing.assert_close(lp2, lp, rtol=0, atol=1e-4)
        torch.testing.assert_close(ent2, ent, rtol=0, atol=1e-4)
    # an MLP over the flattened observation is not equivariant
    mlp = ActorCritic(env.observation_shape, env.action_spec, (32, 32), "relu")
    with torch.no_grad():
        flat = mlp.actor(obs.flatten(1)).view(6, 12, 7)
        flat_p = mlp.actor(permuted.flatten(1)).view(6, 12, 7)
        assert not torch.allclose(flat_p, flat[:, perm], atol=1e-5)


def test_parameters_do_not_grow_with_the_width_and_a_policy_runs_at_another_width():
    (env8, net8), (env64, net64) = _policy(8), _policy(64)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(net8) == count(net64)
    mlp8 = ActorCritic(env8.observation_shape, env8.action_spec, (32, 32), "relu")
    mlp64 = ActorCritic(env64.observation_shape, env64.action_spec, (32, 32), "relu")
    assert count(mlp64) > 5 * count(mlp8)
    wide = net8.at_width(64)  # trained at 8, run at 64: the same weights
    assert all(a is b for a, b in zip(wide.parameters(), net8.parameters()))
    obs = _obs(env64)
    with torch.no_grad():
        action, logprob, value = wide.act(obs, torch.Generator().manual_seed(0))
    assert action.shape == (6, 64) and torch.isfinite(logprob).all() and torch.isfinite(value).all()
    # a checkpoint of the width-8 policy loads into a width-64 one (same keys and shapes)
    net64.load_state_dict(net8.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(net64.logits(obs), wide.logits(obs))


def test_a_world_without_slots_is_refused():
    from parlightning.envs.base import ActionSpec

    with pytest.raises(ConfigError, match="slots"):
        SlotsActorCritic((4,), ActionSpec("discrete", nvec=(2,)))


def test_model_policy_slots_trains_through_the_trainer(tmp_path):
    import lightning.pytorch as pl

    from parlightning.ppo.data import RolloutDataModule
    from parlightning.ppo.module import PPOModule

    pl.seed_everything(0)
    dm = RolloutDataModule(env=lambda n, d, s: SwarmEnv(num_envs=n, device=d, seed=s, max_width=8), num_envs=16,
                           num_steps=8, update_epochs=1, num_minibatches=2)
    module = PPOModule(policy="slots", hidden_sizes=(16, 16), activation="relu", anneal_lr=False)
    trainer = pl.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=tmp_path)
    before = None

    class Snap(pl.Callback):
        def on_train_start(self, trainer, pl_module):
            nonlocal before
            before = [p.detach().clone() for p in pl_module.policy.parameters()]

    trainer.callbacks.append(Snap())
    trainer.fit(module, datamodule=dm)
    assert isinstance(module.policy, SlotsActorCritic) and trainer.global_step == 4
    assert any(not torch.equal(a, b) for a, b in zip(before, module.policy.parameters()))  # it learned something
    assert "rollout/success_rate" in dm.last_rollout.stats
