"""Typed configuration (parlightning.config_types): a field's annotation is its range, checked by the
CLI's parser and, with the same words, by the class's own __init__ when it is built from Python; the
values that reach the object (and its checkpoint) are plain ints and floats."""

import math
import os

import pytest
import torch

from parlightning.config_types import NonNegativeFinite, PositiveFinite, PositiveInt, check_args, check_value
from parlightning.ppo.data import RolloutDataModule
from parlightning.envs.cartpole import CartPoleEnv
from parlightning.envs.swarm import SwarmEnv
from parlightning.errors import ConfigError, parser_error_line, requirement
from parlightning.cli.fit import main
from parlightning.ppo.module import PPOModule
from parlightning.distribution.strategies import ClusterParallel, TensorParallel
from parlightning.parl.reward import CosineSchedule, LinearSchedule, PARLReward
from parlightning.distribution.samplers import DifficultyWeighted, PosteriorSignal

CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "swarm.yaml")

PYTHON_CASES = [  # (build, the one line it must raise)
    (lambda: PPOModule(ent_coef=-0.01), "model.ent_coef: must be >= 0 (a finite number), got -0.01"),
    (lambda: PPOModule(vf_coef=-1), "model.vf_coef: must be >= 0 (a finite number), got -1"),
    (lambda: PPOModule(lr=math.nan), "model.lr: must be positive (a finite number), got nan"),
    (lambda: PPOModule(lr=math.inf), "model.lr: must be positive (a finite number), got inf"),
    (lambda: PPOModule(max_grad_norm=0), "model.max_grad_norm: must be positive (a finite number), or null, got 0"),
    (lambda: PPOModule(rnn_hidden=True), "model.rnn_hidden: must be a positive integer, got True"),
    (lambda: RolloutDataModule(num_envs=0), "data.num_envs: must be a positive integer, got 0"),
    (lambda: RolloutDataModule(gamma=1.5), "data.gamma: must lie in [0, 1], got 1.5"),
    (lambda: RolloutDataModule(max_policy_lag=-1), "data.max_policy_lag: must be an integer >= 0, got -1"),
    (lambda: RolloutDataModule(bptt_len=0), "data.bptt_len: must be a positive integer, or null, got 0"),
    (lambda: SwarmEnv(num_envs=4, max_cost=0), "SwarmEnv.max_cost: must be a positive integer, got 0"),
    (lambda: SwarmEnv(num_envs=4, subagent_reliability=1.5), "SwarmEnv.subagent_reliability: must lie in [0, 1], got 1.5"),
    (lambda: SwarmEnv(num_envs=4, late_credit=1.0), "SwarmEnv.late_credit: must lie in [0, 0.999], got 1.0"),
    (lambda: SwarmEnv(num_envs=4, splits=[1, 0]), "SwarmEnv.splits: must be a positive integer (each item), got [1, 0]"),
    (lambda: CartPoleEnv(0), "CartPoleEnv.num_envs: must be a positive integer, got 0"),
    (lambda: DifficultyWeighted(c=-1), "DifficultyWeighted.c: must be >= 0 (a finite number), got -1"),
    (lambda: DifficultyWeighted(pass_threshold=0), "DifficultyWeighted.pass_threshold: must lie in (0, 1], got 0"),
    (lambda: PosteriorSignal(flip_rate=0.5), "PosteriorSignal.flip_rate: must lie in [0, 0.5), or null, got 0.5"),
    (lambda: ClusterParallel(clusters_per_worker=0), "ClusterParallel.clusters_per_worker: must be a positive integer"),
    (lambda: TensorParallel(0), "TensorParallel.n_sections: must be a positive integer, got 0"),
    (lambda: PARLReward("4"), "PARLReward.max_subagents: must be a positive integer, got '4'"),
    (lambda: LinearSchedule(horizon=0), "LinearSchedule.horizon: must be positive (a finite number), got 0"),
    (lambda: CosineSchedule(warmup=-1), "CosineSchedule.warmup: must be >= 0 (a finite number), got -1"),
]


@pytest.mark.parametrize("build, line", PYTHON_CASES, ids=[c[1].split(":")[0] for c in PYTHON_CASES])
def test_python_construction_checks_the_annotation_with_one_line(build, line):
    with pytest.raises(ConfigError) as err:
        build()
    assert str(err.value).startswith(line) and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize("args, line", [
    (["--model.ent_coef", "-0.01"], "error: model.ent_coef: must be >= 0 (a finite number), got -0.01"),
    (["--model.lr", "inf"], "error: model.lr: must be positive (a finite number), got inf"),
    (["--model.lr", "abc"], "error: model.lr: must be positive (a finite number), got 'abc'"),
    (["--model.target_kl", "0"], "error: model.target_kl: must be positive (a finite number), or null, got 0"),
    (["--data.num_envs", "1.5"], "error: data.num_envs: must be a positive integer, got '1.5'"),
    (["--data.env.init_args.max_cost", "0"], "error: data.env.init_args.max_cost: must be a positive integer, got 0"),
    (["--data.env.init_args.subagent_budget", "0"],
     "error: data.env.init_args.subagent_budget: must be a positive integer, or null, got 0"),
    (["--data.reward.init_args.lambda1.init_args.horizon", "0"],  # two class_paths deep; the null is the outer one's
     "error: data.reward.init_args.lambda1.init_args.horizon: must be positive (a finite number), got 0"),
    (["--data.sampler", "parlightning.distribution.samplers.DifficultyWeighted", "--data.sampler.init_args.c", "-1"],
     "error: data.sampler.init_args.c: must be >= 0 (a finite number), got -1"),
])
def test_the_cli_refuses_with_the_same_words_before_building_anything(tmp_path, monkeypatch, capsys, args, line):
    monkeypatch.setattr(RolloutDataModule, "collect", lambda self: pytest.fail("a rollout started"))
    with pytest.raises(SystemExit) as exit_:
        main(["--config", CONFIG, "--trainer.default_root_dir", str(tmp_path), *args])
    assert exit_.value.code == line
    assert "Traceback" not in capsys.readouterr().err
    assert not list(tmp_path.rglob("*"))


def test_the_parsers_own_number_types_become_plain_values_in_hparams_and_checkpoints(tmp_path):
    module = PPOModule(lr=PositiveFinite(0.001), ent_coef=NonNegativeFinite(0.0), rnn_hidden=PositiveInt(8))
    assert [type(module.hparams[k]) for k in ("lr", "ent_coef", "rnn_hidden")] == [float, float, int]
    dm = RolloutDataModule(num_envs=PositiveInt(8), num_steps=PositiveInt(4), num_minibatches=PositiveInt(2))
    assert type(dm.num_envs) is int and type(dm.minibatch_size) is int
    path = tmp_path / "h.pt"
    torch.save(dict(module.hparams), path)
    assert torch.load(path, weights_only=True)["lr"] == 0.001  # a jsonargparse PositiveFinite would be refused


def test_check_args_reads_only_constrained_annotations():
    def world(num_envs: PositiveInt, name: str = "x", width: "PositiveInt" = 3, cost: float = -1.0):
        return check_args("", world, locals())

    assert world(2) == {"num_envs": 2, "width": 3}  # the string annotation resolves, plain ones are not checked
    with pytest.raises(ConfigError, match="^width: must be a positive integer, got 0$"):
        world(2, width=0)
    assert check_value("f", float, "anything") == "anything"


@pytest.mark.parametrize("expression, integer, text", [
    ("v>0", True, "must be a positive integer"), ("v>=2", True, "must be an integer >= 2"),
    ("v>0 and v<inf", False, "must be positive (a finite number)"), ("v>0", False, "must be positive"),
    ("v>=0 and v<=1", False, "must lie in [0, 1]"), ("v>0 and v<1", False, "must lie in (0, 1)"),
    ("v<0 or v>1", False, "must satisfy v<0 or v>1"),
])
def test_requirement_words(expression, integer, text):
    assert requirement(expression, integer) == text


def test_a_parser_message_for_a_plain_type_says_what_the_value_must_be():
    line = parser_error_line('Parser key "model.policy":\n  Expected a <class \'str\'>. Got value: 3')
    assert line == "model.policy: must be a string, got 3"
