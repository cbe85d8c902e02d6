"""Round 12's Python-API and script bad inputs (scripts/bad_inputs_round12.py), closed by class: each
class of bad input is one exception of the package (an `ArgumentError` / `ConfigError` /
`LifecycleError`; for a script, argparse's one error line) naming the argument and what it must be,
tested on every public place the class applies to. Every case failed before (a raw torch/Python
error, or silently taken)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch

from parlightning.distribution.samplers import DifficultyWeighted, PosteriorSignal, RoundRobin, SamplingForLearnability
from parlightning.distribution.strategies import ClusterParallel, DataParallel, TensorParallel
from parlightning.envs.base import ActionSpec, scripted_action
from parlightning.envs.normalize import ObsNormalizer
from parlightning.envs.swarm import SwarmEnv
from parlightning.errors import ArgumentError, ConfigError, LifecycleError
from parlightning.inference import Policy
from parlightning.policies.actor_critic import ActorCritic, observation_fault, prior_bias, set_action_prior
from parlightning.policies.slots import SlotsActorCritic
from parlightning.ppo.module import PPOModule

ROOT = Path(__file__).resolve().parents[1]
SWARM_SPEC = ActionSpec("multi_discrete", nvec=(7,) * 12)
DISCRETE = ActionSpec("discrete", nvec=(3,))
CONTINUOUS = ActionSpec("continuous", shape=(2,), low=-1.0, high=1.0)


def _refused(call, exc, match):
    """`call` raises `exc` (a class of the package) with a message matching `match`."""
    assert exc.__module__.startswith("parlightning")
    with pytest.raises(exc, match=match) as info:
        call()
    assert "\n" not in str(info.value)
    return info.value


# ------------------------------------------------------------------ an empty collection where one item is needed
@pytest.mark.parametrize("strategy", [DataParallel(), ClusterParallel(), TensorParallel(2, keys=["a", "b"])],
                         ids=["dp", "cp", "tp"])
def test_a_plan_of_no_keys_is_refused_naming_keys(strategy):
    _refused(lambda: strategy.plan(1, 0, []), ArgumentError, r"\.plan\(keys\): must be a list of strings \(at least 1\)")


@pytest.mark.parametrize("sampler", [RoundRobin, DifficultyWeighted, PosteriorSignal, SamplingForLearnability])
def test_binding_an_empty_bank_is_refused_naming_task_ids(sampler):
    _refused(lambda: sampler().bind([], torch.device("cpu")), ArgumentError,
             rf"{sampler.__name__}\.bind\(task_ids\): must be a list of strings \(at least 1\)")


def test_a_bank_of_one_task_still_binds_and_plans():
    RoundRobin().bind(["solo-0"], torch.device("cpu"))
    assert len(DataParallel().plan(2, 0, ["solo-0"])) == 2


# ------------------------------------------------------------------ a probability at (or past) the boundary
@pytest.mark.parametrize("p", [0.0, 1.0, 1.5, -0.1, math.nan, math.inf])
def test_set_action_prior_refuses_a_probability_outside_the_open_interval(p):
    pol = ActorCritic((4,), DISCRETE)
    _refused(lambda: set_action_prior(pol, 0, p), ArgumentError, r"set_action_prior\(probability\)")


@pytest.mark.parametrize("p, n, match", [(1.0, 3, r"prior_bias\(probability\)"), (0.0, 3, r"prior_bias\(probability\)"),
                                         (0.5, 1, r"prior_bias\(n\): must be an integer >= 2")])
def test_prior_bias_refuses_its_boundaries(p, n, match):
    _refused(lambda: prior_bias(p, n), ArgumentError, match)


def test_set_action_prior_refuses_an_action_outside_a_dimension():
    pol = ActorCritic((4,), ActionSpec("multi_discrete", nvec=(3, 2)))
    _refused(lambda: set_action_prior(pol, 2, 0.9), ArgumentError, r"set_action_prior\(action\): .* 0\.\.1")
    _refused(lambda: set_action_prior(pol, -1, 0.9), ArgumentError, r"set_action_prior\(action\)")


# ------------------------------------------------------------------ an option that does not apply to the actions' kind
def test_a_prior_on_continuous_actions_is_refused_by_the_python_builder():
    _refused(lambda: PPOModule(prior=0.9).build_policy((3,), CONTINUOUS), ConfigError, r"model\.prior: .*continuous")
    _refused(lambda: set_action_prior(ActorCritic((3,), CONTINUOUS), 0, 0.9), ArgumentError,
             r"set_action_prior\(policy\): must be a policy of discrete actions")
    PPOModule(prior=0.9).build_policy((3,), DISCRETE)  # a discrete world takes it


# ------------------------------------------------------------------ an object used before its setup
def test_configure_optimizers_before_the_policy_is_built_names_the_setup():
    _refused(lambda: PPOModule().configure_optimizers(), LifecycleError,
             r"PPOModule\.configure_optimizers: called before the policy is built")


# ------------------------------------------------------------------ a mapping without the keys a method reads
@pytest.mark.parametrize("batch, match", [
    ({"obs": torch.zeros(8, 4)}, r"must have the keys 'actions', 'logprobs'"),
    ({k: torch.zeros(8) for k in ("obs", "actions", "logprobs", "values", "advantages")}, r"must have the key 'returns'"),
    ({**{k: torch.zeros(8) for k in ("obs", "actions", "logprobs", "values", "advantages")}, "returns": [0.0] * 8},
     r"\['returns'\]: must be a tensor"),
    ([torch.zeros(8, 4)], r"must be a mapping"),
])
def test_training_step_names_the_batch_keys_it_reads(batch, match):
    m = PPOModule()
    m.policy = m.build_policy((4,), DISCRETE)
    _refused(lambda: m.training_step(batch, 0), ArgumentError, r"PPOModule\.training_step\(batch\)" + ".*" + match)


# ------------------------------------------------------------------ a user callable's return of the wrong kind
def _swarm(compile=False):
    env = SwarmEnv(num_envs=4, compile=compile)
    env.reset(seed=0)
    return env


@pytest.mark.parametrize("picked, match", [
    (lambda done: torch.zeros(4), r"must be an integer \(torch\.long\) tensor"),
    (lambda done: torch.zeros(4, dtype=torch.bool), r"must be an integer \(torch\.long\) tensor"),
    (lambda done: [0, 0, 0, 0], r"must be an integer \(torch\.long\) tensor"),
    (lambda done: torch.zeros(3, dtype=torch.long), r"must have shape \[num_envs\] = \[4\]"),
])
def test_swarm_step_refuses_a_next_task_callable_returning_other_than_indices(picked, match):
    env, a = _swarm(), torch.zeros(4, 12, dtype=torch.long)
    with pytest.raises(ArgumentError, match=r"SwarmEnv\.step\(next_task\)'s return: " + match):
        for _ in range(40):  # until an episode ends and the callable is asked
            env.step(a, next_task=picked)


def test_swarm_step_takes_a_next_task_callable_returning_long_indices():
    env, a = _swarm(), torch.zeros(4, 12, dtype=torch.long)
    for _ in range(40):
        env.step(a, next_task=lambda done: torch.zeros(4, dtype=torch.long))
    for _ in range(40):
        env.step(a, next_task=lambda done: torch.zeros((), dtype=torch.long))


class _World:
    """A user world with a scripted policy that returns `action`."""

    num_envs, device = 4, torch.device("cpu")

    def __init__(self, spec, action):
        self.action_spec, self.action = spec, action

    def scripted_action(self, name, obs, generator=None):
        return self.action


@pytest.mark.parametrize("spec, action, match", [
    (DISCRETE, torch.zeros(4, 2, dtype=torch.long), r".*of shape \[num_envs, \*action_shape\] = \[4\], got an int64 tensor \[4, 2\]"),
    (DISCRETE, torch.zeros(4), r"must be an integer \(torch\.long\) tensor of action indices"),
    (CONTINUOUS, torch.zeros(4, 2, dtype=torch.long), r"must be a float tensor"),
    (DISCRETE, [0, 0, 0, 0], r"must be an integer"),
])
def test_a_scripted_action_return_is_checked_as_the_worlds_action(spec, action, match):
    _refused(lambda: scripted_action(_World(spec, action), "serial", torch.zeros(4, 3)), ArgumentError,
             r"_World\.scripted_action\('serial'\)'s return: " + match)
    good = torch.zeros(4, dtype=torch.long) if spec.is_discrete else torch.zeros(4, 2)
    assert scripted_action(_World(spec, good), "serial", torch.zeros(4, 3)) is good


# ------------------------------------------------------------------ a device torch names and cannot compute on here
@pytest.mark.parametrize("world", ["SwarmEnv", "CartPoleEnv", "CueMemoryEnv"])
def test_a_world_on_the_meta_device_is_refused_naming_device(world):
    import importlib

    cls = getattr(importlib.import_module("parlightning.envs"), world, None) or getattr(
        importlib.import_module("parlightning.envs.memory"), world)
    _refused(lambda: cls(num_envs=2, device="meta"), ConfigError, rf"{world}\.device: 'meta' tensors have shapes and no values")


@pytest.mark.skipif(getattr(torch, "xpu", None) is None or torch.xpu.is_available(), reason="needs a torch without XPU")
def test_a_world_on_an_absent_accelerator_is_refused_naming_device():
    _refused(lambda: SwarmEnv(num_envs=2, device="xpu"), ConfigError, r"SwarmEnv\.device: 'xpu' asked for, but this torch has no")


# ------------------------------------------------------------------ a size the caller declares against the network's own
def test_policy_refuses_an_observation_shape_the_network_was_not_built_for():
    net = ActorCritic((4,), DISCRETE)
    _refused(lambda: Policy(net, observation_shape=(5,)), ArgumentError,
             r"Policy\(observation_shape\): must be an observation of 4 numbers")
    Policy(net, observation_shape=(2, 2)).predict(torch.zeros(3, 2, 2))  # 4 numbers, as the network flattens them
    slots = SlotsActorCritic((13, 6), SWARM_SPEC)
    _refused(lambda: Policy(slots, observation_shape=(13, 5)), ArgumentError, r"\[slots \+ 1, features\] = \[13, 6\]")


def test_policy_refuses_a_normalizer_of_another_world():
    net = ActorCritic((4,), DISCRETE)
    _refused(lambda: Policy(net, normalizer=ObsNormalizer(torch.zeros(5), torch.ones(5))), ArgumentError,
             r"Policy\(normalizer\): its statistics must be an observation of 4 numbers")
    _refused(lambda: Policy(net, normalizer=ObsNormalizer(torch.zeros(4), torch.ones(4)), observation_shape=(2, 2)),
             ArgumentError, r"Policy\(normalizer\): its statistics must be of observation_shape \(2, 2\)")
    _refused(lambda: Policy(net, normalizer="stats.pt"), ArgumentError, r"Policy\(normalizer\): must be an ObsNormalizer")


def test_predict_without_a_declared_shape_checks_the_network_width():
    _refused(lambda: Policy(ActorCritic((4,), DISCRETE)).predict(torch.zeros(2, 5)), ArgumentError,
             r"Policy\.predict\(obs\): must be \[B, \.\.\.\] with each observation an observation of 4 numbers")


def test_observation_fault_is_none_for_what_fits_and_for_unknown_networks():
    assert observation_fault(ActorCritic((13, 6), SWARM_SPEC), (78,)) is None
    assert observation_fault(torch.nn.Linear(3, 3), (5,)) is None  # a user's module says nothing


def test_the_normalizer_refuses_observations_of_another_width_naming_obs():
    norm = ObsNormalizer(torch.zeros(5), torch.ones(5))
    _refused(lambda: norm(torch.zeros(2, 4)), ArgumentError, r"ObsNormalizer\(obs\): must be a tensor \[\.\.\., 5\]")
    assert norm(torch.zeros(2, 5)).shape == (2, 5)


@pytest.mark.parametrize("width", [0, -1, 2.0, True])
def test_slots_at_width_refuses_no_slots(width):
    net = SlotsActorCritic((13, 6), SWARM_SPEC)
    _refused(lambda: net.at_width(width), ArgumentError, r"SlotsActorCritic\.at_width\(width\): must be an integer >= 1")


# ------------------------------------------------------------------ statistics outside their domain
@pytest.mark.parametrize("mean, var, match", [
    (torch.zeros(4), -torch.ones(4), r"ObsNormalizer\(var\): every entry must be >= 0"),
    (torch.zeros(4), torch.full((4,), math.nan), r"ObsNormalizer\(var\): must hold finite values"),
    (torch.full((4,), math.inf), torch.ones(4), r"ObsNormalizer\(mean\): must hold finite values"),
    (torch.zeros(4), torch.ones(5), r"ObsNormalizer\(var\): must have the shape of mean"),
    ([0.0] * 4, torch.ones(4), r"ObsNormalizer\(mean\): must be a numeric tensor"),
])
def test_obs_normalizer_refuses_statistics_outside_their_domain(mean, var, match):
    _refused(lambda: ObsNormalizer(mean, var), ArgumentError, match)


def test_obs_normalizer_refuses_a_non_positive_clip_or_epsilon():
    _refused(lambda: ObsNormalizer(torch.zeros(2), torch.ones(2), clip=0.0), ConfigError, r"ObsNormalizer\(clip\)")
    _refused(lambda: ObsNormalizer(torch.zeros(2), torch.ones(2), epsilon=-1.0), ConfigError, r"ObsNormalizer\(epsilon\)")


# ------------------------------------------------------------------ a mask that leaves an action dimension no choice
def test_predict_refuses_a_category_mask_with_a_dead_dimension():
    pol = Policy(ActorCritic((13, 6), SWARM_SPEC), observation_shape=(13, 6))
    mask = torch.ones(2, 84, dtype=torch.bool)
    mask[1, 7:14] = False
    _refused(lambda: pol.predict(torch.zeros(2, 13, 6), mask=mask), ArgumentError,
             r"Policy\.predict\(mask\): row 1's action dimension 1 has no live category")
    _refused(lambda: pol.predict(torch.zeros(2, 13, 6), mask=torch.ones(2, 5, dtype=torch.bool)), ArgumentError,
             r"Policy\.predict\(mask\): 5 columns fit neither layout")
    assert pol.predict(torch.zeros(2, 13, 6), mask=torch.ones(2, 84, dtype=torch.bool)).shape == (2, 12)
    assert pol.predict(torch.zeros(2, 13, 6), mask=torch.zeros(2, 12, dtype=torch.bool)).eq(0).all()  # dimension mask


# ------------------------------------------------------------------ scripts: contradictory flags, an absent dependency
def _script(name):
    spec = importlib.util.spec_from_file_location(f"_r12_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("flags, match", [
    (["--env-only", "--skip-env"], r"argument --skip-env: not allowed with argument --env-only"),
    (["--profile", "--env-only"], r"argument --profile: not allowed with argument --env-only"),
    (["--compile", "--skip-env"], r"argument --skip-env: not allowed with argument --compile"),
])
def test_bench_throughput_refuses_contradictory_flags_as_one_argparse_line(flags, match, capsys):
    bench = _script("bench_throughput")
    with pytest.raises(SystemExit) as info:
        bench.parse(["--quick", *flags])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert ": error: " in err and __import__("re").search(match, err), err


def test_time_to_solve_names_an_absent_dependency_before_any_run(monkeypatch, capsys):
    tts = _script("time_to_solve")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "stable_baselines3" else real(name, *a))
    monkeypatch.setattr(tts, "run", lambda *a, **k: pytest.fail("a sub-run started"))
    with pytest.raises(SystemExit) as info:
        tts.main(["--paths", "fast", "sb3", "--seeds", "0"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --paths: the sb3 path needs stable_baselines3" in err and "pip install stable-baselines3" in err
    assert "--paths fast" in err


def test_export_policy_refuses_an_observation_shape_its_network_does_not_take(tmp_path):
    from parlightning.cli.export import export_policy
    from parlightning.envs.base import ActionSpec
    from parlightning.errors import ArgumentError
    from parlightning.ppo.module import PPOModule

    policy = PPOModule().build_policy((13, 6), ActionSpec("multi_discrete", nvec=(7,) * 6))
    with pytest.raises(ArgumentError, match=r"^export_policy\(observation_shape\): must be .*, got \(4,\)"):
        export_policy(policy, (4,), tmp_path / "p.pt2")
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_local_chat_server_on_a_taken_port_is_one_error_at_once():
    import socket

    from parlightning.errors import ConfigError
    from parlightning.subagents.chat_server import LocalChatServer

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        with pytest.raises(ConfigError, match=rf"^LocalChatServer\(port\): cannot listen on 127.0.0.1:{port} \(.*\); "
                                              "pass port=0 for a free port"):
            LocalChatServer(port=port).start()  # told when the bind fails (no thread traceback, no 10 s wait)
    finally:
        holder.close()
    with LocalChatServer() as server:  # port 0: a free one
        assert server.port > 0
