"""The calls the package makes into a user's code are probed on their signatures once, before
anything is written, by one helper (`parlightning.errors.check_call_shape`): a world's `reset` /
`step` / `action_masks`, an external world's `reset` / `step`, a sampler's `pick` / `record` (or
its tensor path), a strategy's `plan` / `observe`, a rollout callback's hooks and a `ProcessPool`'s
function. Each mismatch is one ConfigError naming the field, the method, how it is defined and
what to define instead."""

from __future__ import annotations

import pytest

from parlightning.callbacks.base import RolloutCallback
from parlightning.envs.base import ActionSpec
from parlightning.envs.external import ExternalBatchedEnv
from parlightning.envs.swarm import SwarmEnv
from parlightning.errors import ConfigError, check_call_shape
from parlightning.ppo.data import RolloutDataModule
from parlightning.runtime.preflight import check_env
from parlightning.subagents.process import ProcessPool


class StepOneArg(SwarmEnv):
    def step(self, action):
        return super().step(action)


class ResetNoTask(SwarmEnv):
    def reset(self, seed=None):
        return super().reset(seed=seed)


class MasksNeedObs(SwarmEnv):
    def action_masks(self, obs):
        return None


@pytest.mark.parametrize("cls, says", [
    (StepOneArg, "data.env: StepOneArg.step does not take (action, next_task): it is defined as step(self, action); "
                 "the step loop calls it as step(action, next_task): define step(self, action, next_task=None)"),
    (ResetNoTask, "data.env: ResetNoTask.reset does not take (seed=..., task_index=...)"),
    (MasksNeedObs, "data.env: MasksNeedObs.action_masks does not take (): it is defined as action_masks(self, obs)"),
])
def test_a_world_method_of_the_wrong_shape_is_one_line(cls, says) -> None:
    with pytest.raises(ConfigError) as err:
        check_env(cls(2), 2, 0)
    assert str(err.value).startswith(says), str(err.value)


class TwoArgWorld:  # an external world whose step takes no action
    observation_shape = (2,)
    action_spec = ActionSpec("discrete", nvec=(2,))

    def reset(self, task=None):
        return [0.0, 0.0]

    def step(self):
        return [0.0, 0.0], 0.0, True, False, None


def test_an_external_world_of_the_wrong_shape_is_refused_when_built() -> None:
    with pytest.raises(ConfigError, match=r"^data\.env\.world: .*TwoArgWorld\.step does not take \(action\): it is "
                                          r"defined as step\(self\)"):
        ExternalBatchedEnv(2, world=TwoArgWorld)


class PickOneArg:
    def pick(self, keys):
        return keys[0]

    def record(self, task_id, score):
        pass


class RecordNoScore(PickOneArg):  # the tensor path is the one the collector calls: its pick is never probed
    def bind(self, task_ids, device):
        pass

    def pick_batch(self, shard, round_index, mask, generator):
        return None

    def record_batch(self, task_index):
        pass


@pytest.mark.parametrize("sampler, says", [
    (PickOneArg(), "data.sampler: PickOneArg.pick does not take (keys, round_index)"),
    (RecordNoScore(), "data.sampler: RecordNoScore.record_batch does not take (task_index, score)"),
])
def test_a_sampler_of_the_wrong_shape_is_refused_by_the_data_module(sampler, says) -> None:
    with pytest.raises(ConfigError) as err:
        RolloutDataModule(sampler=sampler)
    assert str(err.value).startswith(says), str(err.value)


def test_a_rollout_hook_of_the_wrong_shape() -> None:  # a strategy's: tests/test_bad_inputs_round8.py
    from parlightning.cli.fit import _check_hook_signatures

    class Hook(RolloutCallback):
        def on_rollout_start(self, trainer, pl_module):
            pass

    with pytest.raises(ConfigError, match=r"^trainer\.callbacks: .*Hook\.on_rollout_start does not take "
                                          r"\(trainer, pl_module, round_index\)"):
        _check_hook_signatures(Hook())

    class EpochEnd(RolloutCallback):  # a Lightning hook: Lightning calls on_train_epoch_end(trainer, pl_module)
        def on_train_epoch_end(self, trainer):
            pass

    class Setup(RolloutCallback):  # Lightning passes stage by keyword
        def setup(self, trainer, pl_module, when=None):
            pass

    with pytest.raises(ConfigError, match=r"EpochEnd\.on_train_epoch_end does not take \(trainer, pl_module\): it is "
                                          r"defined as on_train_epoch_end\(self, trainer\); Lightning calls it"):
        _check_hook_signatures(EpochEnd())
    with pytest.raises(ConfigError, match=r"Setup\.setup does not take \(trainer, pl_module, stage=\.\.\.\)"):
        _check_hook_signatures(Setup())

    class Fine(RolloutCallback):
        def on_train_epoch_end(self, trainer, pl_module):
            pass

        def setup(self, trainer, pl_module, stage):
            pass

    _check_hook_signatures(Fine())


def test_a_process_pool_function_that_takes_no_instruction() -> None:
    with pytest.raises(ConfigError, match=r"^ProcessPool\.fn: tests\.subagent_fns\.no_argument does not take "
                                          r"\(instruction\)"):
        ProcessPool("tests.subagent_fns:no_argument", workers=1)


def test_the_helper_lets_builtins_and_varargs_through() -> None:
    check_call_shape("f", "o", "m", print, ("a", "b"))  # no readable signature problem: print takes *args
    check_call_shape("f", "o", "m", lambda *a, **k: None, ("a",), ("b",))
    check_call_shape("f", "o", "m", {}.get, ("a",))  # a bound builtin
