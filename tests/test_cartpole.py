"""The tensor-native CartPole: Gymnasium's dynamics step by step, auto-reset, determinism, checkpoints."""

import io

import numpy as np
import pytest
import torch

from parlightning.envs.base import BatchedEnv
from parlightning.envs.cartpole import CartPoleEnv

torch.set_num_threads(1)


def _balancing_action(obs: torch.Tensor) -> torch.Tensor:
    """A PD controller that keeps the pole up for 500 steps: push toward the lean."""
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).long()


def _roll(env: CartPoleEnv, actions: torch.Tensor) -> list:
    return [env.step(a) for a in actions]


def test_is_a_batched_env_with_cartpole_specs():
    env = CartPoleEnv(3)
    assert isinstance(env, BatchedEnv)
    assert env.observation_shape == (4,)
    assert env.action_spec.kind == "discrete" and env.action_spec.nvec == (2,)
    obs = env.reset()
    assert obs.shape == (3, 4) and obs.dtype == torch.float32
    assert obs.abs().max() < 0.05


def test_matches_gymnasium_step_by_step_from_the_same_state():
    gym_cartpole = pytest.importorskip(
        "gymnasium.envs.classic_control.cartpole", reason="Gymnasium (the reference dynamics) is not installed"
    )
    n, steps = 32, 150
    env = CartPoleEnv(n, seed=3)
    env.reset()
    ref = gym_cartpole.CartPoleEnv()
    ref.reset(seed=0)
    actions = torch.randint(0, 2, (steps, n), generator=torch.Generator().manual_seed(1))
    terminations = 0
    for t in range(steps):
        before = env.state.double().numpy().copy()
        result = env.step(actions[t])
        for i in range(n):
            ref.state = before[i].copy()  # re-sync: the same state, then one step each
            ref.steps_beyond_terminated = None
            obs, reward, terminated, truncated, _ = ref.step(int(actions[t, i]))
            np.testing.assert_allclose(result.final_obs[i].numpy(), obs, rtol=1e-5, atol=1e-6)
            assert result.reward[i].item() == reward == 1.0
            assert bool(result.terminated[i]) == terminated
            assert not truncated and not bool(result.truncated[i])
            terminations += terminated
    assert terminations > 50  # random actions end many episodes: the thresholds were exercised


def test_whole_episode_matches_gymnasium_cartpole_v1_including_the_time_limit():
    """Free-running for 100 steps (float32 here vs float64 there: the upright pole is unstable, so
    the gap grows ~100x per 50 steps, 1e-5 at step 100), then re-synced each step to the limit."""
    gymnasium = pytest.importorskip("gymnasium", reason="Gymnasium (the reference dynamics) is not installed")
    env = CartPoleEnv(1)
    env.reset()
    ref = gymnasium.make("CartPole-v1")  # with its TimeLimit(500) wrapper
    ref.reset(seed=0)
    ref.unwrapped.state = env.state[0].double().numpy().copy()
    obs = env.state.clone()
    for t in range(1, 501):
        if t > 100:
            ref.unwrapped.state = env.state[0].double().numpy().copy()
        action = _balancing_action(obs)
        result = env.step(action)
        ref_obs, ref_reward, ref_term, ref_trunc, _ = ref.step(int(action[0]))
        np.testing.assert_allclose(result.final_obs[0].numpy(), ref_obs, atol=1e-4)
        assert (bool(result.terminated[0]), bool(result.truncated[0])) == (ref_term, ref_trunc)
        assert result.reward[0].item() == ref_reward
        obs = result.obs
        if ref_term or ref_trunc:
            break
    assert t == 500 and ref_trunc and not ref_term  # balanced to the time limit in both


def test_truncates_at_max_episode_steps_and_auto_resets():
    env = CartPoleEnv(4, max_episode_steps=500)
    obs = env.reset()
    for t in range(1, 501):
        result = env.step(_balancing_action(obs))
        assert not result.terminated.any()
        assert bool(result.truncated.all()) == (t == 500)
        obs = result.obs
    assert env.elapsed.eq(0).all()
    assert env.last_episode_length.eq(500).all() and env.last_episode_return.eq(500.0).all()
    # final_obs is where the 500-step episode ended; obs is a fresh start.
    assert obs.abs().max() < 0.05
    assert (result.final_obs - obs).abs().amax(dim=1).gt(1e-3).all()


def test_final_obs_is_the_pre_reset_observation_only_where_done():
    env = CartPoleEnv(256, seed=7)
    env.reset()
    gen = torch.Generator().manual_seed(0)
    done_seen = 0
    for _ in range(40):
        length_before = env.elapsed.clone()
        result = env.step(torch.randint(0, 2, (256,), generator=gen))
        done = result.terminated | result.truncated
        assert torch.equal(result.obs[~done], result.final_obs[~done])
        assert torch.equal(env.elapsed[done], torch.zeros_like(env.elapsed[done]))
        assert torch.equal(env.elapsed[~done], length_before[~done] + 1)
        assert torch.equal(env.last_episode_length[done], length_before[done] + 1)
        # Done actors ended outside the thresholds and restarted inside the reset box.
        ended = result.final_obs[done]
        assert ((ended[:, 0].abs() > 2.4) | (ended[:, 2].abs() > 0.2094)).all()
        assert (result.obs[done].abs() < 0.05).all()
        done_seen += int(done.sum())
    assert done_seen > 200


def test_same_seed_same_trajectories_and_reset_seed_reseeds():
    actions = torch.randint(0, 2, (60, 16), generator=torch.Generator().manual_seed(2))
    a, b, c = CartPoleEnv(16, seed=5), CartPoleEnv(16, seed=5), CartPoleEnv(16, seed=6)
    assert torch.equal(a.reset(), b.reset())
    assert not torch.equal(a.state, c.reset())
    for x, y in zip(_roll(a, actions), _roll(b, actions)):
        assert all(torch.equal(u, v) for u, v in zip(x[:5], y[:5]))
    assert torch.equal(a.reset(seed=11), CartPoleEnv(16, seed=11).reset())
    # The data module's factory order: env(num_envs, device, seed).
    assert torch.equal(CartPoleEnv(16, "cpu", 5).reset(), CartPoleEnv(16, seed=5).reset())


def test_state_dict_round_trip_resumes_identically():
    actions = torch.randint(0, 2, (80, 8), generator=torch.Generator().manual_seed(4))
    env = CartPoleEnv(8, seed=1)
    env.reset()
    _roll(env, actions[:30])
    buf = io.BytesIO()
    torch.save(env.state_dict(), buf)
    buf.seek(0)
    resumed = CartPoleEnv(8, seed=999)
    resumed.load_state_dict(torch.load(buf, weights_only=True))
    # Both continue through many resets (so the generator state was restored too).
    for x, y in zip(_roll(env, actions[30:]), _roll(resumed, actions[30:])):
        assert all(torch.equal(u, v) for u, v in zip(x[:5], y[:5]))
    assert torch.equal(env.last_episode_length, resumed.last_episode_length)


def test_steps_under_inference_mode_and_outside_it_mix():
    """The data module rolls out under torch.inference_mode; the env must keep working outside it."""
    env, ref = CartPoleEnv(4, seed=2), CartPoleEnv(4, seed=2)
    env.reset(), ref.reset()
    actions = torch.randint(0, 2, (30, 4), generator=torch.Generator().manual_seed(0))
    for t, a in enumerate(actions):
        if t % 2:
            with torch.inference_mode():
                x = env.step(a)
        else:
            x = env.step(a)
        y = ref.step(a)
        assert torch.equal(x.obs, y.obs) and torch.equal(x.final_obs, y.final_obs)
    env.reset()
    env.load_state_dict(ref.state_dict())


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="num_envs"):
        CartPoleEnv(0)
    with pytest.raises(ValueError, match="max_episode_steps"):
        CartPoleEnv(2, max_episode_steps=0)
    with pytest.raises(ValueError, match="seed"):
        CartPoleEnv(2, seed=1.5)
    env = CartPoleEnv(2)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(torch.zeros(2, dtype=torch.long))
    env.reset()
    with pytest.raises(ValueError, match=r"CartPoleEnv.step\(action\): .*shape \[num_envs, \*action_shape\] = \[2\]"):
        env.step(torch.zeros(2, 1, dtype=torch.long))
    with pytest.raises(TypeError, match="long"):
        env.step(torch.zeros(2))
    with pytest.raises(ValueError, match="num_envs=2"):
        CartPoleEnv(3).load_state_dict(env.state_dict())
    with pytest.raises(ValueError, match="device='cuda'"):
        CartPoleEnv(2).load_state_dict({**env.state_dict(), "generator_device": "cuda"})
