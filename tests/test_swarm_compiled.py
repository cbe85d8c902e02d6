"""SwarmEnv(compile=True): its C++ kernels give bitwise the eager step's trajectories."""

import copy

import pytest
import torch

from parlightning.envs import swarm_compiled
from parlightning.envs.base import vouch_actions
from parlightning.envs.swarm import SwarmEnv
from parlightning.errors import ConfigError

NO_COMPILER = swarm_compiled.compiler_problem(torch.device("cpu"))
needs_compiler = pytest.mark.skipif(NO_COMPILER is not None, reason=f"compile=True unavailable: {NO_COMPILER}")

CONFIGS = {
    "default": dict(n=64, steps=200),  # configs/swarm.yaml's world: no cap binds
    "wide": dict(n=8, steps=150, max_width=64, max_levels=32, max_subagents=100, max_episode_steps=128),
    "caps": dict(n=32, steps=200, max_subagents=10, subagent_budget=30),  # both caps bind
    "odd": dict(n=37, steps=200, max_width=7, max_levels=3, max_cost=9, splits=(1, 3, 5), spawn_steps=0.7,
                merge_cost=0.13, brief_cost=0.31, subagent_reliability=0.83, late_credit=0.3, late_window=1.7,
                max_subagents=9, subagent_budget=40, families=("fanout", "pipeline")),
}


def _bits(x):
    """A tensor as its raw bits (float -0.0 and +0.0 differ; equal NaNs compare equal)."""
    return x.view(torch.int32) if x.dtype == torch.float32 else x


def _trajectory(compile, n, steps, next_task="callable", seed=3, extreme=False, **kw):
    env = SwarmEnv(num_envs=n, seed=seed, tasks_per_family=4, compile=compile, **kw)
    g = torch.Generator().manual_seed(5)
    obs = env.reset(seed=7)
    out = [obs.clone()]
    K = len(env.task_ids)
    for t in range(steps):
        if t % 3 == 0:
            action = env.scripted_action("oracle", obs, g)
        else:  # random entries, some outside the action space (negative, too large)
            action = torch.randint(-2, 2 * len(env.splits) + 3, (n, env.max_width), generator=g)
            if t % 5 == 0:  # a float action is refused before the step touches any state, eager or compiled
                with pytest.raises(ValueError, match=r"SwarmEnv.step\(action\): must be an integer \(torch.long\) tensor"):
                    env.step(action.float(), None)
            if extreme and t % 3 == 1:  # huge, negative and fractional entries
                big = torch.tensor([-2**40, -7, 2**31 - 1, 2**40, 10**9], dtype=torch.long)
                action = big[torch.randint(0, 5, (n, env.max_width), generator=g)]
            elif extreme and t % 3 == 2:
                action = torch.empty(n, env.max_width).uniform_(-3.0, 2 * len(env.splits) + 3.0, generator=g).floor().long()
        if next_task == "callable":
            pick = lambda done: torch.randint(0, K, done.shape, generator=g)  # noqa: E731
        elif next_task == "tensor":
            pick = torch.randint(0, K, (n,), generator=g)
        else:
            pick = None
        if bool(((action < 0) | (action > 2 * len(env.splits))).any()):  # outside the action space: refused at
            with pytest.raises(ValueError, match=r"SwarmEnv.step\(action\): every entry must lie in 0\.\."):  # entry
                env.step(action, pick)  # (before the step touches any state); the kernels' own clamp is still
            vouch_actions(action, env.action_spec)  # compared, eager vs compiled, on the vouched (unread) path
        r = env.step(action, pick)
        obs = r.obs
        out.append([x.clone() for x in (r.obs, r.reward, r.terminated, r.truncated, r.final_obs, *r.parts)])
    out.append([env.generator.get_state()] + [v for k, v in env.state_dict().items() if torch.is_tensor(v)])
    return out


def _assert_same(a, b):
    assert len(a) == len(b)
    assert torch.equal(_bits(a[0]), _bits(b[0]))
    for t, (xs, ys) in enumerate(zip(a[1:], b[1:])):
        for i, (x, y) in enumerate(zip(xs, ys)):
            assert x.dtype == y.dtype and x.shape == y.shape, (t, i)
            assert torch.equal(_bits(x), _bits(y)), f"step {t}, field {i} differs"


@needs_compiler
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_compiled_step_is_bitwise_the_eager_step(name):
    kw = dict(CONFIGS[name])
    _assert_same(_trajectory(False, **kw), _trajectory(True, **kw))


def _random_worlds(count, seed=2026):
    """World parameterizations drawn at random: actor counts around the kernels' block size, widths,
    caps that bind or not, reliabilities 0 and 1, odd costs and splits."""
    import random

    rng = random.Random(seed)
    block = swarm_compiled.BLOCK
    worlds = []
    for i in range(count):
        splits = sorted(rng.sample([1, 2, 3, 4, 5, 8], rng.randint(1, 3)))
        worlds.append(dict(
            n=rng.choice([1, 2, block - 1, block, block + 1, 2 * block + 1]),
            steps=rng.randint(20, 40),
            max_width=rng.choice([1, 2, 5, 12, 17]),
            max_levels=rng.randint(1, 5),
            max_cost=rng.randint(1, 12),
            splits=tuple(splits),
            max_subagents=rng.choice([1, 3, 10, 128]),
            subagent_budget=rng.choice([None, 1, 7, 50]),
            subagent_reliability=rng.choice([0.0, 1.0, 0.5, 0.99]),
            spawn_steps=rng.choice([0.0, 0.3, 1.0, 2.5]),
            merge_cost=rng.choice([0.0, 0.05, 0.37]),
            brief_cost=rng.choice([0.0, 0.5, 1.3]),
            late_credit=rng.choice([0.0, 0.1, 0.9]),
            late_window=rng.choice([1.0, 2.0, 3.7]),
            max_episode_steps=rng.choice([1, 4, 16]),
            seed=rng.randint(0, 10**6),
            extreme=True,
        ))
    return worlds


@needs_compiler
@pytest.mark.parametrize("kw", _random_worlds(12), ids=lambda kw: f"n{kw['n']}-w{kw['max_width']}-r{kw['subagent_reliability']}")
def test_compiled_step_is_bitwise_the_eager_step_on_random_worlds(kw):
    """Sizes around the block size, caps, reliabilities 0 and 1, extreme and fractional actions."""
    _assert_same(_trajectory(False, **kw), _trajectory(True, **kw))


@pytest.mark.parametrize("compile", [False, pytest.param(True, marks=needs_compiler)])
def test_an_action_of_any_shape_but_actors_by_slots_is_refused(compile):
    """A [W] action with W == N used to broadcast over the actor axis; [N, W] is the only shape."""
    env = SwarmEnv(num_envs=12, seed=0, tasks_per_family=2, compile=compile)  # N == W == 12
    env.reset(seed=0)
    for bad in (torch.zeros(12, dtype=torch.long), torch.zeros(1, 12, dtype=torch.long),
                torch.zeros(12, 12, 1, dtype=torch.long), torch.zeros(12, 1, dtype=torch.long)):
        with pytest.raises(ValueError, match=r"SwarmEnv.step\(action\): .*shape \[num_envs, \*action_shape\] = \[12, 12\]"):
            env.step(bad)
    env.step(torch.zeros(12, 12, dtype=torch.long))  # the right shape steps


@needs_compiler
def test_the_kernels_check_every_buffer_they_are_handed():
    env = SwarmEnv(num_envs=4, seed=0, tasks_per_family=2, compile=True)
    env.reset(seed=0)
    env._compiled.scratch = torch.empty(3)  # too small: the kernels would write past it
    with pytest.raises(TypeError, match="buffer `scratch` must be a contiguous cpu torch.float32 tensor"):
        env.step(torch.zeros(4, 12, dtype=torch.long))
    with pytest.raises(TypeError, match="buffer `x` .* not contiguous"):
        swarm_compiled._checked("x", torch.zeros(4, 4).t(), torch.float32, 16)
    with pytest.raises(TypeError, match="buffer `x` .* torch.int64"):
        swarm_compiled._checked("x", torch.zeros(16), torch.int64, 16)


def test_the_kernel_source_ships_as_package_data_and_keys_the_cache_with_the_compiler_version(monkeypatch):
    import tomllib
    from pathlib import Path

    assert swarm_compiled.SOURCE_FILE.name == "swarm_step.cpp" and "swarm_step_a" in swarm_compiled.source()
    data = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "envs/*.cpp" in data["package-data"]["parlightning"]
    monkeypatch.setattr(swarm_compiled, "_compiler_version", lambda cxx: "g++ 12.2.0")
    old = swarm_compiled.cache_key("/usr/bin/g++")
    monkeypatch.setattr(swarm_compiled, "_compiler_version", lambda cxx: "g++ 13.1.0")
    assert swarm_compiled.cache_key("/usr/bin/g++") != old


@needs_compiler
@pytest.mark.parametrize("next_task", ["tensor", None])
def test_compiled_step_takes_every_kind_of_next_task(next_task):
    kw = dict(CONFIGS["caps"], steps=80, next_task=next_task)
    _assert_same(_trajectory(False, **kw), _trajectory(True, **kw))


@needs_compiler
@pytest.mark.parametrize("kw, expected", [
    (dict(n=64, steps=60), "2d391da5f158cead"),
    (dict(n=8, steps=40, max_width=64, max_levels=32, max_subagents=100, max_episode_steps=128),
     "ebf6207282844385"),
    (dict(n=32, steps=40, max_subagents=10, subagent_budget=30), "d219e375e0b1f236"),
])
def test_compiled_step_reproduces_the_reference_digests(kw, expected):
    from test_swarm_env import _trajectory_digest

    assert _trajectory_digest(compile=True, **kw) == expected


@needs_compiler
def test_checkpoints_copies_and_trace_cross_between_the_two_steps():
    kw = dict(num_envs=24, seed=1, tasks_per_family=4, max_subagents=10, subagent_budget=30)
    eager, compiled = SwarmEnv(**kw), SwarmEnv(compile=True, **kw)
    g = torch.Generator().manual_seed(0)
    obs = eager.reset(seed=2)
    for _ in range(7):  # eager state, resumed by the compiled env
        eager.step(eager.scripted_action("random", obs, g))
    compiled.load_state_dict(copy.deepcopy(eager.state_dict()))
    twin = copy.deepcopy(compiled)  # a copy's kernel points at its own tables
    for t in range(30):
        action = torch.randint(0, 7, (24, 12), generator=g)
        compiled.trace = t % 4 == 0  # evaluate's --gantt: the eager step, on the same state
        results = [env.step(action) for env in (eager, compiled, twin)]
        for other in results[1:]:
            for x, y in zip(results[0][:5], other[:5]):
                assert torch.equal(_bits(x), _bits(y)), t


@needs_compiler
def test_compile_is_not_part_of_the_world_a_checkpoint_records():
    from parlightning.runtime.preflight import env_signature

    assert env_signature(SwarmEnv(num_envs=2, compile=True)) == env_signature(SwarmEnv(num_envs=2))


@needs_compiler
def test_a_next_task_outside_the_bank_is_refused():
    env = SwarmEnv(num_envs=4, seed=0, tasks_per_family=1, max_episode_steps=1, compile=True)
    env.reset(seed=0)
    with pytest.raises(ConfigError, match="next_task\\): actor 0 has task index 99, outside the task bank"):
        env.step(torch.zeros(4, 12, dtype=torch.long), torch.full((4,), 99))  # a caller's tensor: checked up front
    with pytest.raises(IndexError, match="outside the task bank"):  # a callable's picks: by the kernel
        env.step(torch.zeros(4, 12, dtype=torch.long), lambda done: torch.full((4,), 99))


def test_compile_needs_a_cpu_and_a_working_compiler(tmp_path, monkeypatch):
    assert "cpu only" in swarm_compiled.compiler_problem(torch.device("cuda"))
    with pytest.raises(ConfigError, match="SwarmEnv.compile: must be true or false"):
        SwarmEnv(num_envs=1, compile="yes")
    monkeypatch.setenv("PARLIGHTNING_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(swarm_compiled.shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match="no C.. compiler was found"):
        SwarmEnv(num_envs=1, compile=True)
    monkeypatch.undo()
    monkeypatch.setenv("PARLIGHTNING_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", "false")  # found, but every build fails
    with pytest.raises(ConfigError, match="could not build its C.. kernel"):
        SwarmEnv(num_envs=1, compile=True)


_HEAP_PROBE = """
import ctypes, sys, torch
from parlightning.envs import swarm_compiled
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
retained = swarm_compiled.retain_heap() if sys.argv[1] == "retain" else None
x = torch.empty(3 << 18)  # 3 MiB, about the step's observation block at N = 4096
x.fill_(1.0)
del x
print(retained, libc.mallinfo2().fordblks)
"""


def _heap_probe(mode):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _HEAP_PROBE, mode], capture_output=True, text=True, check=True)
    retained, free = out.stdout.split()
    return retained, int(free)


def test_retain_heap_keeps_a_freed_observation_block_for_the_next_step():
    """compile=True sets glibc's thresholds so that the step's per-call observation block is reused
    from the heap instead of being unmapped and page-faulted in again (a fresh process each)."""
    try:
        import ctypes

        ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        pytest.skip("not glibc >= 2.33 (no mallinfo2)")
    _, free_default = _heap_probe("default")
    if free_default >= 3 << 20:
        pytest.skip("this C library keeps the block already")
    retained, free = _heap_probe("retain")
    assert retained == "True" and free >= 3 << 20
