"""Gymnasium's native vector envs (`gymnasium.make_vec(..., vectorization_mode="vector_entry_point")`):
CartPole's `CartPoleVectorEnv` behind `GymVectorEnv`, its next-step autoreset adapted, and a short fit
through it that learns."""

import os
import sys

import lightning.pytorch as pl
import pytest
import torch

from parlightning.ppo.data import RolloutDataModule
from parlightning.envs import GymVectorEnv
from parlightning.errors import ConfigError
from parlightning.ppo.module import PPOModule

gymnasium = pytest.importorskip("gymnasium", reason="the gym extra: pip install parlightning[gym]")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
from cartpole_check import EpisodeLog  # noqa: E402


def test_vector_entry_point_builds_the_native_vector_env():
    from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

    env = GymVectorEnv(4, env_id="CartPole-v1", vectorization="vector_entry_point", seed=1)
    assert type(env.env) is CartPoleVectorEnv and env.vector_mode == "vector_entry_point"
    assert isinstance(GymVectorEnv(4, env_id="CartPole-v1").env, gymnasium.vector.SyncVectorEnv)  # default: sync
    assert env.observation_shape == (4,) and env.action_spec.nvec == (2,)


def test_next_step_autoreset_is_adapted_episode_by_episode():
    """CartPoleVectorEnv resets a finished actor on the following step (reward 0, action ignored):
    the actor's obs and final_obs are its last observation, the reset step counts in no episode."""
    env = GymVectorEnv(4, env_id="CartPole-v1", vectorization="vector_entry_point", seed=3, max_episode_steps=12)
    obs = env.reset()
    rewarded = torch.zeros(4)
    pending = torch.zeros(4, dtype=torch.bool)  # finished last step: this step resets them
    ended = 0
    for _ in range(120):
        res = env.step(torch.ones(4, dtype=torch.long))  # always push right: falls in ~10 steps or truncates
        done = res.terminated | res.truncated
        assert torch.equal(res.reward[pending], torch.zeros(int(pending.sum())))  # the reset step pays nothing
        assert not done[pending].any()
        assert (res.obs[pending].abs() <= 0.05).all()  # a fresh start state
        rewarded += res.reward
        if done.any():
            assert torch.equal(res.obs[done], res.final_obs[done])  # the last observation, twice
            assert torch.equal(env.last_episode_length[done], rewarded[done].long())  # reward 1 per counted step
            rewarded[done] = 0
            ended += int(done.sum())
        pending = done
        obs = res.obs
    assert ended >= 20 and obs.shape == (4, 4)
    assert (env.last_episode_length <= 12).all()


def test_vector_entry_point_refuses_what_it_cannot_take():
    with pytest.raises(ConfigError, match="registers no vector_entry_point"):
        GymVectorEnv(2, env_id="MountainCar-v0", vectorization="vector_entry_point")
    with pytest.raises(ConfigError, match="drop wrappers and vector_kwargs"):
        GymVectorEnv(2, env_id="CartPole-v1", vectorization="vector_entry_point",
                     wrappers=["gymnasium.wrappers.FlattenObservation"])


def test_short_fit_through_the_native_vector_env_learns(tmp_path):
    pl.seed_everything(0)
    log = EpisodeLog()
    made = []

    def env(num_envs, device, seed):
        made.append(GymVectorEnv(num_envs, device, seed, env_id="CartPole-v1", vectorization="vector_entry_point"))
        return made[-1]

    dm = RolloutDataModule(env=env, num_envs=64, num_steps=32, num_minibatches=2, reward=None, seed=0)
    trainer = pl.Trainer(max_epochs=12, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[log], default_root_dir=tmp_path)
    trainer.fit(PPOModule(lr=2.5e-3, activation="tanh"), datamodule=dm)
    assert type(dm.collector.env.env).__name__ == "CartPoleVectorEnv" and dm.collector.env is made[-1]  # the native env stepped
    returns = torch.cat(log.returns)
    first, last = returns[:100].mean(), returns[-100:].mean()  # measured: 19.0 -> 89.7
    assert first < 25 and last > 60 and last > 2.5 * first, (first, last)  # a random policy lasts ~22 steps
