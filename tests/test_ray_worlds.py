"""ExternalBatchedEnv(runner="ray"): the worlds (and their subagent pools) in Ray actors on a local
Ray instance (2 CPUs, no dashboard), stepping exactly as the threads here do; errors name the
actor and its task; close ends the actors. Skipped when ray is not installed (pip install .[ray])."""

import importlib.util
import os
import sys
import time

import pytest
import torch

from parlightning.envs.external import ExternalBatchedEnv, ExternalWorldError
from parlightning.errors import ConfigError

HAVE_RAY = importlib.util.find_spec("ray") is not None  # imported only by the tests that run (~1 s)
# ~30 s on 2 loaded cores (a local Ray start ~8 s, actor processes several s each): a slow test
needs_ray = pytest.mark.skipif(not HAVE_RAY, reason="ray not installed (pip install .[ray])")
slow = pytest.mark.skipif(os.environ.get("PARL_SLOW_TESTS") != "1",
                          reason="starts a local Ray instance (~30 s): PARL_SLOW_TESTS=1")
WORLD = "parlightning.subagents.world:PoolOrchestrationWorld"
KWARGS = {"families": ["solo", "fanout", "locked"], "tasks_per_family": 2, "max_width": 3, "n_skills": 3}
POOL = {"pool": {"class_path": "parlightning.subagents.SimulatedPool", "init_args": {"reliability": 1.0}}}


@pytest.fixture(scope="module")
def local_ray():
    import ray

    here = os.path.dirname(os.path.abspath(__file__))  # the actors import this suite's worlds by module name
    path = os.pathsep.join([here, os.path.dirname(here), os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield ray
    ray.shutdown()


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _rollout(env, steps=6):
    g = torch.Generator().manual_seed(0)
    obs = [env.reset(task_index=torch.arange(env.num_envs) % len(env.task_ids))]
    rewards, parts = [], []
    for _ in range(steps):
        action = torch.randint(0, 4, (env.num_envs, len(env.action_spec.nvec)), generator=g)
        r = env.step(action)
        obs.append(r.obs)
        rewards.append(r.reward)
        parts.append(torch.stack([r.terminated.float(), r.truncated.float(), r.parts.critical_steps]))
    return torch.stack(obs), torch.stack(rewards), torch.stack(parts)


@needs_ray
@slow
def test_worlds_in_ray_actors_step_like_threads_and_close_ends_the_actors(local_ray):
    here = ExternalBatchedEnv(6, world=WORLD, world_kwargs=KWARGS, shared=POOL)
    remote = ExternalBatchedEnv(6, world=WORLD, world_kwargs=KWARGS, shared=POOL, runner="ray", workers=2)
    try:
        pids = remote.worker_pids
        assert len(set(pids)) == 2 and os.getpid() not in pids  # two actors, each its own process
        assert remote.observation_shape == here.observation_shape and remote.task_ids == here.task_ids
        assert remote.max_subagents == here.max_subagents
        for a, b in zip(_rollout(here), _rollout(remote)):
            assert torch.equal(a, b)  # the same trajectories (a reliable pool: no randomness to order)
    finally:
        here.close()
        remote.close()
    deadline = time.monotonic() + 60
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)


@needs_ray
@slow
def test_a_failing_world_in_a_ray_actor_names_the_actor_and_its_task(local_ray):
    from test_external_env import CountWorld  # imported by module name in the actors (runtime_env's PYTHONPATH)

    with pytest.raises(ConfigError, match=r"data.env.init_args.shared.pool.class_path: 'no.such.Pool'"):
        ExternalBatchedEnv(2, world=WORLD, world_kwargs=KWARGS, shared={"pool": {"class_path": "no.such.Pool"}},
                           runner="ray", workers=1)
    env = ExternalBatchedEnv(4, world=CountWorld, world_kwargs={"fail_at": (2, 1)}, runner="ray", workers=2)
    try:
        env.reset(task_index=torch.tensor([2, 2, 1, 2]))
        with pytest.raises(ExternalWorldError, match=r"actor 2 on task 't-1': step raised ValueError: the tool call "
                                                     r"failed"):
            env.step(torch.zeros(4, dtype=torch.long))
    finally:
        env.close()


def test_without_ray_the_runner_is_one_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(ConfigError) as err:
        ExternalBatchedEnv(2, world=WORLD, world_kwargs=KWARGS, shared=POOL, runner="ray")
    assert str(err.value).startswith("data.env.init_args.runner: ray needs the ray package")
    assert "pip install .[ray]" in str(err.value)


def test_an_unknown_runner_is_one_error():
    with pytest.raises(ConfigError, match=r"data.env.init_args.runner: must be 'local' or 'ray', got 'dask'"):
        ExternalBatchedEnv(2, world=WORLD, world_kwargs=KWARGS, shared=POOL, runner="dask")
