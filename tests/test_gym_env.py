"""`GymVectorEnv` against real Gymnasium envs: spaces, termination vs truncation, final_obs, stats."""

import io
import sys

import numpy as np
import pytest
import torch

from parlightning.envs.base import BatchedEnv
from parlightning.envs.gym import GymVectorEnv

torch.set_num_threads(1)
SKIP_REASON = "Gymnasium is an optional extra (pip install parlightning[gym]); CI installs it"


@pytest.fixture(scope="module")
def gymnasium():
    gymnasium = pytest.importorskip("gymnasium", reason=SKIP_REASON)
    from gymnasium import spaces

    class EchoEnv(gymnasium.Env):
        """Observes the action it was last given (as floats); terminates after 3 steps."""

        def __init__(self, action_space):
            self.action_space = action_space
            self.observation_space = spaces.Box(-10.0, 10.0, shape=action_space.shape, dtype=np.float32)
            self.t = 0

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return np.zeros(self.observation_space.shape, np.float32), {}

        def step(self, action):
            self.t += 1
            obs = np.asarray(action, dtype=np.float32)
            return obs, float(obs.sum()), self.t >= 3, False, {}

    for env_id, space in {
        "parl_test/EchoMultiDiscrete-v0": lambda: spaces.MultiDiscrete([3, 4], start=[1, -1]),
        "parl_test/EchoBox-v0": lambda: spaces.Box(np.array([-1, -2], np.float32), np.array([1, 2], np.float32)),
    }.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(env_id, entry_point=lambda space=space: EchoEnv(space()))
    return gymnasium


def _push_toward_lean(obs: torch.Tensor) -> torch.Tensor:
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).long()


def test_cartpole_matches_independent_gymnasium_envs_step_for_step(gymnasium):
    """The oracle: N plain `gymnasium.make` envs seeded seed + i, reset by hand when done."""
    n, seed, limit = 4, 3, 25
    env = GymVectorEnv(n, env_id="CartPole-v1", seed=seed, max_episode_steps=limit)
    assert isinstance(env, BatchedEnv)
    assert env.action_spec.kind == "discrete" and env.action_spec.nvec == (2,)
    assert env.observation_shape == (4,)
    refs = [gymnasium.make("CartPole-v1", max_episode_steps=limit) for _ in range(n)]
    obs = env.reset()
    ref_obs = np.stack([r.reset(seed=seed + i)[0] for i, r in enumerate(refs)])
    assert obs.dtype == torch.float32 and np.array_equal(obs.numpy(), ref_obs)

    lengths, returns = np.zeros(n, int), np.zeros(n)
    seen_term = seen_trunc = episodes = 0
    actions = torch.randint(0, 2, (150, n), generator=torch.Generator().manual_seed(0))
    for a in actions:
        result = env.step(a)
        for i, r in enumerate(refs):
            o, rew, term, trunc, _ = r.step(int(a[i]))
            lengths[i] += 1
            returns[i] += rew
            assert np.array_equal(result.final_obs[i].numpy(), o)
            ours = (result.reward[i].item(), bool(result.terminated[i]), bool(result.truncated[i]))
            assert ours == (rew, term, trunc)
            if term or trunc:
                assert env.last_episode_length[i].item() == lengths[i]
                assert env.last_episode_return[i].item() == returns[i]
                lengths[i], returns[i] = 0, 0.0
                o, _ = r.reset()
                seen_term += term
                seen_trunc += trunc
                episodes += 1
            assert np.array_equal(result.obs[i].numpy(), o)
    assert seen_term > 5 and seen_trunc > 5  # both ways of ending were exercised
    assert env.episode_count.sum().item() == episodes
    assert result.reward.dtype == torch.float32 and result.terminated.dtype == torch.bool


def test_truncation_and_termination_pass_through_with_final_obs(gymnasium):
    env = GymVectorEnv(3, env_id="CartPole-v1", env_kwargs={"max_episode_steps": 5})  # the YAML form
    obs = env.reset()
    for t in range(1, 6):
        result = env.step(_push_toward_lean(obs))
        obs = result.obs
        assert not result.terminated.any()
        assert bool(result.truncated.all()) == (t == 5)
    # The true last observation is beside the reset one.
    assert (result.final_obs - result.obs).abs().amax(dim=1).gt(1e-3).all()
    assert obs.abs().max() < 0.05
    assert env.last_episode_length.eq(5).all() and env.last_episode_return.eq(5.0).all()

    env = GymVectorEnv(3, env_id="CartPole-v1")  # push right until the pole falls: terminated, not truncated
    env.reset()
    for _ in range(100):
        result = env.step(torch.ones(3, dtype=torch.long))
        if result.terminated.any():
            break
    assert result.terminated.any() and not result.truncated.any()
    done = result.terminated
    assert (result.final_obs[done][:, 2].abs() > 0.2094).all()  # ended past the angle limit
    assert torch.equal(result.obs[~done], result.final_obs[~done])


def test_multi_discrete_actions_reach_the_env_with_their_start_offsets(gymnasium):
    env = GymVectorEnv(2, env_id="parl_test/EchoMultiDiscrete-v0")
    assert env.action_spec.kind == "multi_discrete" and env.action_spec.nvec == (3, 4)
    assert env.action_spec.action_shape == (2,)
    env.reset()
    action = torch.tensor([[0, 0], [2, 3]])
    for t in range(1, 4):
        result = env.step(action)
        assert torch.equal(result.final_obs, torch.tensor([[1.0, -1.0], [3.0, 2.0]]))  # action + start
        assert torch.equal(result.reward, torch.tensor([0.0, 5.0]))
        assert bool(result.terminated.all()) == (t == 3)
    assert torch.equal(result.obs, torch.zeros(2, 2))  # reset obs, beside the echoed final one
    assert torch.equal(env.last_episode_return, torch.tensor([0.0, 15.0]))


def test_pendulum_continuous_actions_are_clipped_to_the_box_and_truncate_at_200(gymnasium):
    env = GymVectorEnv(2, env_id="Pendulum-v1", seed=5)
    spec = env.action_spec
    assert (spec.kind, spec.shape, spec.low, spec.high) == ("continuous", (1,), -2.0, 2.0)
    assert env.observation_shape == (3,)
    ref = gymnasium.make("Pendulum-v1")
    obs = env.reset()
    assert np.array_equal(obs[0].numpy(), ref.reset(seed=5)[0])
    ref_return = 0.0
    for t in range(1, 201):
        result = env.step(torch.tensor([[10.0], [-0.5]]))  # 10 is clipped to the bound 2
        o, rew, term, trunc, _ = ref.step(np.array([2.0], np.float32))
        ref_return += rew
        np.testing.assert_allclose(result.final_obs[0].numpy(), o, rtol=1e-6)
        assert result.reward[0].item() == pytest.approx(rew, rel=1e-6)
        assert not result.terminated.any()
        assert bool(result.truncated.all()) == (t == 200) == trunc
    assert not torch.equal(result.obs, result.final_obs)
    assert env.last_episode_length.eq(200).all()
    assert env.last_episode_return[0].item() == pytest.approx(ref_return, rel=1e-5)


def test_per_dimension_box_bounds_clip_each_dimension(gymnasium):
    env = GymVectorEnv(2, env_id="parl_test/EchoBox-v0")
    assert env.action_spec.low is None and env.action_spec.high is None  # bounds differ per dimension
    assert torch.equal(env.action_high, torch.tensor([1.0, 2.0]))
    env.reset()
    result = env.step(torch.tensor([[5.0, 5.0], [-5.0, 0.5]]))
    assert torch.equal(result.obs, torch.tensor([[1.0, 2.0], [-1.0, 0.5]]))


def test_same_seed_same_rollout(gymnasium):
    a, b = GymVectorEnv(3, env_id="CartPole-v1", seed=9), GymVectorEnv(3, env_id="CartPole-v1", seed=9)
    assert torch.equal(a.reset(), b.reset())
    actions = torch.randint(0, 2, (40, 3), generator=torch.Generator().manual_seed(1))
    for act in actions:
        x, y = a.step(act), b.step(act)
        assert all(torch.equal(u, v) for u, v in zip(x[:5], y[:5]))
    assert not torch.equal(GymVectorEnv(3, env_id="CartPole-v1", seed=10).reset(), a.reset(seed=9))


def test_factory_order_num_envs_device_seed_with_env_id_by_keyword(gymnasium):
    """The data module builds envs as env(num_envs, device, seed) with env_id from the config."""
    a = GymVectorEnv(3, "cpu", 7, env_id="CartPole-v1")
    b = GymVectorEnv(num_envs=3, seed=7, env_id="CartPole-v1")
    assert a.seed == 7 and torch.equal(a.reset(), b.reset())
    with pytest.raises(TypeError, match="keyword-only"):
        GymVectorEnv("CartPole-v1", 3)


def test_async_vectorization_gives_the_same_steps_as_sync(gymnasium):
    sync = GymVectorEnv(2, env_id="CartPole-v1", seed=1, max_episode_steps=8)
    asyn = GymVectorEnv(2, env_id="CartPole-v1", seed=1, max_episode_steps=8, vectorization="async")
    try:
        assert torch.equal(sync.reset(), asyn.reset())
        for _ in range(10):  # crosses the truncation at 8
            act = torch.randint(0, 2, (2,))
            x, y = sync.step(act), asyn.step(act)
            assert all(torch.equal(u, v) for u, v in zip(x[:5], y[:5]))
    finally:
        asyn.close()


def test_state_dict_round_trip_keeps_counters_and_asks_for_a_reset(gymnasium):
    env = GymVectorEnv(2, env_id="CartPole-v1", seed=4, max_episode_steps=6)
    first = env.reset()
    for _ in range(13):
        env.step(torch.zeros(2, dtype=torch.long))
    buf = io.BytesIO()
    torch.save(env.state_dict(), buf)
    buf.seek(0)
    resumed = GymVectorEnv(2, env_id="CartPole-v1", seed=0, max_episode_steps=6)
    resumed.load_state_dict(torch.load(buf, weights_only=True))
    assert torch.equal(resumed.episode_count, env.episode_count) and env.episode_count.sum() >= 4
    assert torch.equal(resumed.last_episode_return, env.last_episode_return)
    with pytest.raises(RuntimeError, match="reset"):
        resumed.step(torch.zeros(2, dtype=torch.long))
    assert torch.equal(resumed.reset(), first)  # the checkpoint's seed
    with pytest.raises(ValueError, match="num_envs=2"):
        GymVectorEnv(3, env_id="CartPole-v1").load_state_dict(env.state_dict())


def test_bad_arguments_raise_clear_errors(gymnasium):
    with pytest.raises(ValueError, match="num_envs"):
        GymVectorEnv(0, env_id="CartPole-v1")
    with pytest.raises(ValueError, match="vectorization"):
        GymVectorEnv(2, env_id="CartPole-v1", vectorization="threads")
    with pytest.raises(ValueError, match="SAME_STEP"):
        GymVectorEnv(2, env_id="CartPole-v1", vector_kwargs={"autoreset_mode": gymnasium.vector.AutoresetMode.NEXT_STEP})
    with pytest.raises(ValueError, match="FlattenObservation"):
        GymVectorEnv(2, env_id="FrozenLake-v1")  # Discrete observations
    env = GymVectorEnv(2, env_id="CartPole-v1")
    with pytest.raises(RuntimeError, match="reset"):
        env.step(torch.zeros(2, dtype=torch.long))
    env.reset()
    with pytest.raises(ValueError, match=r"GymVectorEnv.step\(action\): .*shape \[num_envs, \*action_shape\] = \[2\]"):
        env.step(torch.zeros(3, dtype=torch.long))
    with pytest.raises(TypeError, match="integer"):
        env.step(torch.zeros(2))


def test_field_errors_are_config_errors_that_name_the_init_arg(gymnasium):
    from parlightning.errors import ConfigError

    with pytest.raises(ConfigError,
                       match=r"^vectorization: unknown 'threads'; choose one of sync, async, vector_entry_point$"):
        GymVectorEnv(2, env_id="CartPole-v1", vectorization="threads")
    with pytest.raises(ConfigError, match=r"^env_id: .*NoSuchEnv.* registered Gymnasium id"):
        GymVectorEnv(2, env_id="NoSuchEnv-v0")
    with pytest.raises(ConfigError, match=r"^wrappers: .*FrozenLake-v1 has Discrete\(16\).*FlattenObservation"):
        GymVectorEnv(2, env_id="FrozenLake-v1")
    with pytest.raises(ConfigError, match=r"^wrappers: cannot import 'gymnasium.wrappers.Nope'"):
        GymVectorEnv(2, env_id="FrozenLake-v1", wrappers=["gymnasium.wrappers.Nope"])


@pytest.mark.parametrize("wrapper", ["gymnasium.wrappers.FlattenObservation", "class"])
def test_wrappers_by_import_path_or_class_give_the_same_one_hot_observations(gymnasium, wrapper):
    from gymnasium.wrappers import FlattenObservation

    env = GymVectorEnv(2, seed=3, env_id="FrozenLake-v1",
                       wrappers=[FlattenObservation if wrapper == "class" else wrapper])
    obs = env.reset()
    assert env.observation_shape == (16,) and obs.shape == (2, 16)
    assert torch.equal(obs, torch.eye(16)[[0, 0]])  # both actors start on square 0, one-hot


def test_without_gymnasium_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "gymnasium", None)  # makes `import gymnasium` fail
    monkeypatch.setitem(sys.modules, "gymnasium.vector", None)
    with pytest.raises(ImportError, match=r"pip install parlightning\[gym\]"):
        GymVectorEnv(2, env_id="CartPole-v1")
