"""Round 9 of the bad-input corpus (scripts/bad_inputs_round9.py), the user-code cases: one test per
class of input that was not clean on the code before its fixes. A rollout callback's stat that is
not one number, or rollout.stats replaced; a rollout hook that is a generator function; a hook that
writes into the episode parts it was given; a process a hook forked that comes back into the
rollout; a subagent function's return that is no result form, or its own KeyboardInterrupt; an
external world whose close() raises; a switch_interval that can do nothing; a data.artifact_key of
the wrong shape; a bc / evaluate config file's misspelt key."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

from parlightning.callbacks import RolloutCallback
from parlightning.envs.base import EpisodeParts
from parlightning.errors import ConfigError, ReportedError
from parlightning.ppo.data import LightningHooks
from tests.test_external_env import CountWorld


def _hooks(*callbacks):
    return LightningHooks(SimpleNamespace(world_size=1, callbacks=list(callbacks), lightning_module=None))


def _rollout():
    return SimpleNamespace(stats={}, buffer=None)


class StatsVector(RolloutCallback):
    def on_rollout_end(self, trainer, pl_module, rollout):
        rollout.stats["user/vec"] = torch.ones(5)


class StatsString(RolloutCallback):
    def on_rollout_end(self, trainer, pl_module, rollout):
        rollout.stats["user/name"] = "fine"


class StatsSetNone(RolloutCallback):
    def on_rollout_end(self, trainer, pl_module, rollout):
        rollout.stats = None


class StatsNumber(RolloutCallback):
    def on_rollout_end(self, trainer, pl_module, rollout):
        rollout.stats["user/n"] = 3
        rollout.stats["user/t"] = torch.tensor([2.0])


def test_a_rollout_stat_that_is_not_one_number_names_the_callback_and_key() -> None:
    for cb, says in ((StatsVector(), r"StatsVector\.on_rollout_end set rollout\.stats\['user/vec'\] to a tensor of shape \[5\]"),
                     (StatsString(), r"StatsString\.on_rollout_end set rollout\.stats\['user/name'\] to str"),
                     (StatsSetNone(), r"StatsSetNone\.on_rollout_end set rollout\.stats to NoneType")):
        with pytest.raises(ReportedError, match=says):
            _hooks(cb).on_rollout_end(_rollout())
    rollout = _rollout()
    _hooks(StatsNumber()).on_rollout_end(rollout)  # a plain number is taken as a 0-dim tensor
    assert rollout.stats["user/n"].item() == 3.0 and rollout.stats["user/t"].numel() == 1


class HookIsGenerator(RolloutCallback):
    def on_rollout_end(self, trainer, pl_module, rollout):
        rollout.stats["user/never"] = torch.tensor(1.0)
        yield


def test_a_generator_function_hook_is_refused_like_async_def() -> None:
    from parlightning.cli.fit import check_callbacks

    with pytest.raises(ConfigError, match=r"HookIsGenerator\.on_rollout_end is a generator function"):
        check_callbacks([HookIsGenerator()])


class MutatesParts(RolloutCallback):
    def on_episodes_end(self, trainer, pl_module, task_ids, parts):
        parts.outcome.fill_(7.0)


class ReadsParts(RolloutCallback):
    def on_episodes_end(self, trainer, pl_module, task_ids, parts):
        self.mean = parts.outcome.clone().mul_(2).mean()


def _parts(n=3, shared=False):
    if shared:  # as the buffer hands them out: views of one storage
        table = torch.zeros(6, n)
        return EpisodeParts(torch.arange(n), *table)
    return EpisodeParts(torch.arange(n), *(torch.zeros(n) for _ in range(6)))


def test_a_hook_that_writes_into_the_episode_parts_is_named() -> None:
    parts = _parts()
    with pytest.raises(ReportedError, match=r"MutatesParts\.on_episodes_end wrote in place into outcome;"):
        _hooks(MutatesParts()).on_episodes_end(parts.task, parts)
    shared = _parts(shared=True)
    with pytest.raises(ReportedError, match=r"MutatesParts\.on_episodes_end wrote in place into one of outcome"):
        _hooks(MutatesParts()).on_episodes_end(shared.task, shared)
    _hooks(ReadsParts()).on_episodes_end(parts.task, parts)  # reading, or writing a copy, is fine


class HookForks(RolloutCallback):
    def __init__(self):
        self.children = []

    def on_rollout_start(self, trainer, pl_module, round_index):
        pid = os.fork()
        if pid == 0:
            raise RuntimeError("the forked child carried on in the hook")
        self.children.append(pid)


def test_a_process_a_hook_forked_never_runs_the_trainers_code_and_is_reported() -> None:
    cb = HookForks()
    hooks = _hooks(cb)
    hooks.on_rollout_start(0)
    assert len(cb.children) == 1  # the child came back into the rollout and ended there
    _, status = os.waitpid(cb.children[0], 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 1
    with pytest.raises(ReportedError, match=r"HookForks\.on_rollout_start forked a process \(pid \d+\) that came "
                                            r"back into the rollout"):
        hooks.on_rollout_end(_rollout())


def test_a_subagent_return_that_is_no_result_form_is_refused_naming_its_type() -> None:
    from parlightning.subagents.pool import normalize

    for value, says in ((b"\x00\x01", r"returned bytes b'\\x00\\x01'"), ("FAILED", "returned str 'FAILED'"),
                        ({"ok": True}, "returned a dict without a 'success' key"), (3.5, "returned float 3.5"),
                        (None, r"returned None \(a missing `return`\?\)")):
        with pytest.raises(TypeError, match=says):
            normalize(value, 0.1)
    assert normalize({"success": True, "steps": 2, "output": b"ok"}, 0.1).output == b"ok"
    assert normalize((False, 3), 0.1).steps == 3 and normalize(True, 0.1).success


def test_a_subagent_functions_own_keyboard_interrupt_is_its_failure() -> None:
    from parlightning.subagents import ProcessPool

    pool = ProcessPool("tests.subagent_fns:interrupt", workers=1, timeout=60, on_error="fail")
    try:
        with pytest.warns(RuntimeWarning, match="raised KeyboardInterrupt"):
            (result,) = pool.wait([pool.spawn({"prompt": "p"})], timeout=120)
        assert not result.success and result.error.endswith("tests.subagent_fns:interrupt raised KeyboardInterrupt")
    finally:
        pool.close()


class CloseRaises(CountWorld):
    def close(self):
        raise RuntimeError("close failed: socket already gone")


def test_an_external_world_whose_close_raises_is_warned_and_refused_by_the_preflight() -> None:
    from parlightning.envs.external import ExternalBatchedEnv
    from parlightning.errors import WorldCloseWarning
    from parlightning.ppo.data import RolloutDataModule
    from parlightning.runtime.preflight import check_datamodule

    env = ExternalBatchedEnv(2, world=CloseRaises)
    env.reset()
    with pytest.warns(WorldCloseWarning, match=r"CloseRaises\.close\(\) raised RuntimeError: close failed.*actor 0, 1"):
        env.close()
    dm = RolloutDataModule(env=lambda n, device, seed: ExternalBatchedEnv(n, device, seed, world=CloseRaises),
                           num_envs=2, num_steps=4, num_minibatches=1)
    with pytest.raises(ConfigError, match=r"CloseRaises\.close\(\) raised .*preflight's 2-actor probe env"):
        check_datamodule(dm)


def test_a_switch_interval_that_can_do_nothing_is_refused_with_the_range() -> None:
    from parlightning.envs.external import ExternalBatchedEnv

    for value in (1.0e30, 0.01, 1e-9):
        with pytest.raises(ConfigError, match=r"switch_interval: .* is outside \[1e-06, 0.005\] s"):
            ExternalBatchedEnv(2, world=CountWorld, switch_interval=value)
    ExternalBatchedEnv(2, world=CountWorld, switch_interval=0.001).close()


def test_an_artifact_key_of_the_wrong_shape_is_refused_at_construction() -> None:
    from parlightning.ppo.data import RolloutDataModule

    with pytest.raises(ConfigError, match=r"data\.artifact_key: .*getcwd does not take \(task_id\)"):
        RolloutDataModule(num_envs=2, num_steps=4, num_minibatches=1, artifact_key=os.getcwd)
    with pytest.raises(ConfigError, match=r"data\.artifact_key: 'family' is not callable"):
        RolloutDataModule(num_envs=2, num_steps=4, num_minibatches=1, artifact_key="family")
    RolloutDataModule(num_envs=2, num_steps=4, num_minibatches=1, artifact_key=lambda task_id: task_id)


def test_bc_and_evaluate_config_files_refuse_unknown_keys(tmp_path) -> None:
    from parlightning.cli.bc import model_config
    from parlightning.cli.evaluate import env_spec

    top, model, good = tmp_path / "top.yaml", tmp_path / "model.yaml", tmp_path / "good.yaml"
    top.write_text("modle:\n  lr: 0.1\n")
    model.write_text("model:\n  lrr: 0.1\n")
    good.write_text("seed: 3\nmodel:\n  lr: 0.1\n")
    for read in (model_config, env_spec):
        with pytest.raises(ConfigError, match=r"--config .*top\.yaml: unknown key 'modle'; did you mean 'model'\?"):
            read([str(good), str(top)])
        with pytest.raises(ConfigError, match=r"--config .*model\.yaml: unknown key model\.'lrr'; did you mean 'lr'\?"):
            read([str(model)])
    assert model_config([str(good)])["model"] == {"lr": 0.1}
