"""Every public world, wrapper, pool and sampler, and `PPOModule`, refuses a bad constructor
argument with one ValueError (`ConfigError`) naming the class and the argument, before anything is
built: the parameters are enumerated from the signatures (`config_types.check_args`' own table), so
an argument added later is covered without a new case. Plus three runs of `python -m parlightning.fit`
with a bad world argument: one `error:` line, nothing written."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from parlightning.config_types import _constrained_params, constraint_of, container_of, plain_of
from parlightning.distribution.samplers import DifficultyWeighted, PosteriorSignal, SamplingForLearnability
from parlightning.envs.cartpole import CartPoleEnv
from parlightning.envs.external import ExternalBatchedEnv
from parlightning.envs.gym import GymVectorEnv
from parlightning.envs.memory import CueMemoryEnv
from parlightning.envs.normalize import NormalizeEnv
from parlightning.envs.swarm import SwarmEnv
from parlightning.ppo.module import PPOModule
from parlightning.subagents.async_http import AsyncHTTPPool
from parlightning.subagents.http import HTTPPool
from parlightning.subagents.pool import SimulatedPool
from parlightning.subagents.process import ProcessPool
from parlightning.subagents.world import PoolOrchestrationWorld

ROOT = Path(__file__).parent.parent
POOL = SimulatedPool()
URL = "http://127.0.0.1:9"  # never contacted: probe=False, and every case is refused before a request
# class -> (the arguments a valid construction needs, the name its messages use)
CLASSES = {
    SwarmEnv: ({"num_envs": 2}, "SwarmEnv"),
    CueMemoryEnv: ({"num_envs": 2}, "CueMemoryEnv"),
    CartPoleEnv: ({"num_envs": 2}, "CartPoleEnv"),
    GymVectorEnv: ({"num_envs": 2, "env_id": "CartPole-v1"}, "GymVectorEnv"),
    NormalizeEnv: ({"num_envs": 2, "env": CartPoleEnv}, "NormalizeEnv"),
    ExternalBatchedEnv: ({"num_envs": 2, "world": "parlightning.subagents.PoolOrchestrationWorld",
                          "world_kwargs": {"pool": POOL}}, "ExternalBatchedEnv"),
    SimulatedPool: ({}, "SimulatedPool"),
    ProcessPool: ({"fn": "parlightning.subagents.examples:skill_matcher"}, "ProcessPool"),
    HTTPPool: ({"base_url": URL, "probe": False}, "HTTPPool"),
    AsyncHTTPPool: ({"base_url": URL, "probe": False}, "AsyncHTTPPool"),
    PoolOrchestrationWorld: ({"pool": POOL}, "PoolOrchestrationWorld"),
    DifficultyWeighted: ({}, "DifficultyWeighted"),
    PosteriorSignal: ({}, "PosteriorSignal"),
    SamplingForLearnability: ({}, "SamplingForLearnability"),
    PPOModule: ({}, "model"),
}
HUGE = [  # sizes whose tables would not fit any machine: refused before anything is allocated
    (SwarmEnv, "max_width", 10**6), (CueMemoryEnv, "n_cues", 10**12), (CueMemoryEnv, "delay", 10**9),
    (PoolOrchestrationWorld, "max_width", 10**9), (SwarmEnv, "seed", 2**64), (CartPoleEnv, "seed", -1),
    (SimulatedPool, "seed", 2**64), (DifficultyWeighted, "seed", -1), (CartPoleEnv, "num_envs", 10**12),
    (SwarmEnv, "tasks_per_family", 10**9), (PoolOrchestrationWorld, "n_skills", 10**12),
    # a device torch does not know, or one this machine does not have
    (SwarmEnv, "device", "tpu"), (CartPoleEnv, "device", "cuda:99"), (CueMemoryEnv, "device", "gpu"),
    (ExternalBatchedEnv, "device", 3),
]


def bad_values(annotation) -> list:
    """Values the annotation makes wrong: another type, a bool, nan, inf where the range is finite,
    -1 where it starts at 0 or above, a float where an integer is needed; for a container (Mapping,
    dict, Sequence, list, tuple) the wrong kind of container, a string, a number."""
    container = container_of(annotation)
    if container is not None:
        kind, optional, _inner, _value = container
        wrong = [[1], ("a", "b"), "abc", 3] if kind == "mapping" else [{"a": 1}, "abc", 3, {1, 2}]
        return wrong + ([] if optional else [None])
    plain = plain_of(annotation)
    if plain is not None:
        tp, optional, sequence = plain
        values = {int: ["3", True, 2.5, math.nan, 2**70], float: ["0.5", True, math.nan],
                  bool: ["yes", 1, None], str: [3, b"x", True]}[tp]
        if sequence:  # one string is not a list of them; each item is checked
            return ["abc", *([v] for v in values)] + ([] if optional else [None])
        return values + ([] if optional else [None] if tp is not bool else [])
    tp, _optional, sequence = constraint_of(annotation)
    restrictions = dict(tp._restrictions) if isinstance(tp._restrictions, dict) else {
        op: v for op, v in tp._restrictions}
    values = ["1", True, math.nan]
    if tp._type is int:
        values += [1.5, 2**70]  # not a count; beyond the 64 bits torch holds
    if any(op in ("<", "<=") and v != math.inf for op, v in restrictions.items()) or tp._type is float:
        values.append(math.inf)
    if any(op in (">", ">=") and v >= 0 for op, v in restrictions.items()):
        values.append(-1)
    return [[v] for v in values] if sequence else values


def cases():
    for cls, (needs, owner) in CLASSES.items():
        for name, annotation, _ in _constrained_params(cls.__init__):
            if name == "device" or name in needs and name != "num_envs":
                continue
            for value in bad_values(annotation):
                yield pytest.param(cls, name, value, id=f"{cls.__name__}-{name}-{value!r:.20}")


CASES = list(cases())


def test_every_class_has_checked_arguments() -> None:
    counted = {cls: sum(1 for c in CASES if c.values[0] is cls) for cls in CLASSES}
    assert all(counted.values()), counted
    assert len({(c.values[0], c.values[1]) for c in CASES}) >= 100  # the parameters the enumeration reaches


def _refused(cls, name, value) -> str:
    needs, owner = CLASSES[cls]
    with pytest.raises(ValueError) as err:
        obj = cls(**{**needs, name: value})
        getattr(obj, "close", lambda: None)()
    message = str(err.value)
    assert f"{owner}.{name}" in message and "\n" not in message, message
    return message


@pytest.mark.parametrize("cls, name, value", CASES)
def test_a_bad_argument_is_refused_naming_the_class_and_argument(cls, name, value) -> None:
    message = _refused(cls, name, value)
    assert "must" in message, message


@pytest.mark.parametrize("cls, name, value", HUGE, ids=[f"{c.__name__}-{n}" for c, n, _ in HUGE])
def test_sizes_and_seeds_beyond_what_can_be_built(cls, name, value) -> None:
    needs, owner = CLASSES[cls]
    with pytest.raises(ValueError) as err:
        cls(**{**needs, name: value})
    message = str(err.value)
    assert owner in message and name in message and any(s in message for s in (
        "must", "needs about", "device", "64-bit")), message


@pytest.mark.parametrize("args, says", [
    (["--data.seed", "-1"], "data.seed"),
    (["--data.env.init_args.max_width", "1000000"], "SwarmEnv(num_envs="),
    (["--data.env.init_args.bank_seed", "-1"], "data.env.init_args.bank_seed: must be an integer in [0, 4294967295]"),
    (["--data.env.init_args.compile", "maybe"], "data.env.init_args.compile"),
], ids=["data-seed", "max-width", "bank-seed", "compile"])
def test_through_the_cli_one_error_line_and_nothing_written(tmp_path, capsys, args, says) -> None:
    from parlightning.cli.fit import main

    with pytest.raises(SystemExit) as exit_:
        main(["--config", str(ROOT / "configs" / "swarm.yaml"), "--trainer.default_root_dir", str(tmp_path),
              "--trainer.enable_progress_bar", "false", "--data.num_envs", "8", "--data.num_steps", "4", *args])
    message = exit_.value.code
    assert isinstance(message, str) and message.startswith("error: ") and "\n" not in message, message
    assert says in message, message
    assert "Traceback" not in capsys.readouterr().err
    assert not list(tmp_path.rglob("version_*")) and not list(tmp_path.rglob("*"))


class RaisingSampler:  # a user's class whose own __init__ fails: named with its file and line, not as "'boom'"
    def __init__(self, k: int = 1) -> None:
        raise KeyError("boom")

    def pick(self, keys, round_index):
        return keys[0]

    def record(self, task_id, score):
        pass


def test_a_users_class_failing_in_its_own_init_is_named(tmp_path, capsys) -> None:
    from parlightning.cli.fit import main

    with pytest.raises(SystemExit) as exit_:
        main(["--config", str(ROOT / "configs" / "swarm.yaml"), "--trainer.default_root_dir", str(tmp_path),
              "--data.sampler", f"{__name__}.RaisingSampler", "--data.num_envs", "8", "--data.num_steps", "4"])
    message = exit_.value.code
    assert isinstance(message, str) and "\n" not in message, message
    assert message.startswith("error: data.sampler: RaisingSampler.__init__ (test_constructor_args_enumerated.py:") \
        and "raised KeyError: 'boom'" in message, message
    assert not list(tmp_path.rglob("*"))
