"""Focused checks of round 6's fixes (scripts/bad_inputs_round6.py): each names the field and the fix
in one ConfigError / ValueError, before anything runs."""

from __future__ import annotations

import pytest
import torch

from parlightning.errors import ConfigError
from parlightning.envs.base import ActionSpec, EpisodeParts, StepResult
from parlightning.runtime.preflight import check_env


class _World:
    def __init__(self, n: int = 2, spec: ActionSpec = ActionSpec("discrete", nvec=(2,)), parts: bool = False):
        self.num_envs, self.device = n, torch.device("cpu")
        self.observation_shape, self.action_spec, self.parts = (3,), spec, parts

    def reset(self, *, seed=None, task_index=None):
        return torch.zeros(self.num_envs, 3)

    def step(self, action, next_task=None):
        n = self.num_envs
        done = torch.zeros(n, dtype=torch.bool)
        one = torch.ones(n)
        parts = EpisodeParts(torch.zeros(n, dtype=torch.long), one, one, one, one, one, one) if self.parts else None
        return StepResult(torch.zeros(n, 3), torch.zeros(n), done, done, torch.zeros(n, 3), parts)


class _NoNextTask(_World):
    def step(self, action):  # type: ignore[override]
        return super().step(action)


def test_action_spec_kind_is_checked() -> None:
    with pytest.raises(ValueError, match="ActionSpec.kind"):
        ActionSpec("categorical", nvec=(3,))


def test_discrete_with_two_dimensions_names_multi_discrete() -> None:
    with pytest.raises(ConfigError, match="multi_discrete"):
        check_env(_World(spec=ActionSpec("discrete", nvec=(2, 3))), 2, 0)


def test_step_without_next_task_is_named() -> None:
    with pytest.raises(ConfigError, match="next_task"):
        check_env(_NoNextTask(), 2, 0)


def test_parts_without_a_task_bank_are_refused() -> None:
    with pytest.raises(ConfigError, match="task_ids"):
        check_env(_World(parts=True), 2, 0)
    check_env(_World(), 2, 0)  # the control passes


def test_work_unit_worker_is_a_rank() -> None:
    from parlightning.distribution.strategies import WorkUnit

    with pytest.raises(ValueError, match="WorkUnit.worker"):
        WorkUnit(worker=-1, keys=("a-0",))


def test_rollout_hooks_on_a_plain_callback_are_refused() -> None:
    import lightning

    from parlightning.callbacks import CriticalStepsMonitor
    from parlightning.cli.fit import check_callbacks

    class Plain(lightning.Callback):
        def on_rollout_end(self, trainer, pl_module, rollout):
            pass

    check_callbacks([CriticalStepsMonitor(), lightning.pytorch.callbacks.ModelCheckpoint()])
    with pytest.raises(ConfigError, match="RolloutCallback"):
        check_callbacks([Plain()])


def test_shared_resource_arguments_are_typed() -> None:
    from parlightning.envs.world_runner import build_shared

    with pytest.raises(ConfigError, match=r"shared\.pool\.init_args\.seed"):
        build_shared({"pool": {"class_path": "parlightning.subagents.SimulatedPool", "init_args": {"seed": "abc"}}})
    pool = build_shared({"pool": {"class_path": "parlightning.subagents.SimulatedPool", "init_args": {"reliability": 1}}})
    pool["pool"].close()


def test_external_start_method_and_world_kwargs_clash() -> None:
    from parlightning.envs.external import ExternalBatchedEnv

    world = "parlightning.subagents.world:PoolOrchestrationWorld"
    shared = {"pool": {"class_path": "parlightning.subagents.SimulatedPool"}}
    with pytest.raises(ConfigError, match="start_method"):
        ExternalBatchedEnv(2, world=world, shared=shared, start_method="spawn-ish")
    with pytest.raises(ConfigError, match="world_kwargs: pool"):
        ExternalBatchedEnv(2, world=world, shared=shared, world_kwargs={"pool": "simulated"})
