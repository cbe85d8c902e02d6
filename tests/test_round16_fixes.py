"""Round 16's classes (`scripts/bad_inputs_round16.py`, measured before these fixes): a child process a
signal ended is named by the signal; a world is named after the user's class inside a wrapper or an
external world; the preflight probe names a world raising a BaseException subclass, a world whose
close() raises and a world that changes torch's process-wide settings; a logger whose save_dir raises;
a re-stamped checkpoint whose RNG state, optimizer step count, rollout state or world split does not
fit the run; an exception whose own `__str__` raises."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from parlightning.envs.cartpole import CartPoleEnv
from parlightning.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SWARM = str(ROOT / "configs" / "swarm.yaml")
TINY = ["--data.num_envs", "8", "--data.num_steps", "8", "--trainer.max_epochs", "1",
        "--trainer.enable_model_summary", "false", "--trainer.enable_progress_bar", "false"]


def test_a_signal_that_ended_a_child_is_named():
    from parlightning.runtime.processes import ProcessDied, exit_text

    assert exit_text(-10) == "killed by SIGUSR1, exit code -10" and exit_text(3) == "exit code 3"
    assert str(ProcessDied("the collector process", 7, -15)) == (
        "the collector process (pid 7) died (killed by SIGTERM, exit code -15)")


def test_a_world_is_named_after_the_users_class_inside_a_wrapper():
    from types import SimpleNamespace

    from parlightning.envs.base import world_label
    from parlightning.envs.normalize import NormalizeEnv

    class MyWorld(CartPoleEnv):
        pass

    assert world_label(NormalizeEnv(2, env=MyWorld)) == "NormalizeEnv(MyWorld)"
    assert world_label(SimpleNamespace(world_name="MySim")) == "SimpleNamespace(MySim)"
    assert world_label(CartPoleEnv(num_envs=2)) == "CartPoleEnv"


class _Abort(BaseException):
    """A user's BaseException subclass (not an interrupt)."""


class AbortsStep(CartPoleEnv):
    def step(self, action, next_task=None):
        raise _Abort("abort the simulation")


class CloseRaises(CartPoleEnv):
    def close(self):
        raise RuntimeError("the licence server is gone")


class TurnsGradOff(CartPoleEnv):
    def step(self, action, next_task=None):
        torch.set_grad_enabled(False)
        return super().step(action, next_task)


@pytest.mark.parametrize("world, says", [
    (AbortsStep, "data.env: AbortsStep.step raised _Abort: abort the simulation in the preflight probe"),
    (CloseRaises, "data.env: CloseRaises.close raised RuntimeError: the licence server is gone when the preflight"),
    (TurnsGradOff, "data.env: TurnsGradOff.step changed torch's"),
])
def test_the_probe_names_a_world_that_fails_in_a_new_way(world, says):
    from parlightning.ppo.data import RolloutDataModule
    from parlightning.runtime.preflight import check_datamodule

    grad = torch.is_grad_enabled()
    with pytest.raises(ConfigError) as err:
        check_datamodule(RolloutDataModule(env=world, num_envs=4, num_steps=4))
    assert str(err.value).startswith(says), str(err.value)
    assert torch.is_grad_enabled() == grad  # the probe put the setting back


def test_a_logger_whose_save_dir_raises_is_named(tmp_path, monkeypatch):
    from lightning.pytorch.loggers import CSVLogger

    from parlightning.runtime.checkpoint import check_output_dirs

    class SaveDirRaises(CSVLogger):
        @property
        def save_dir(self):
            raise RuntimeError("no save_dir configured")

    trainer = type("T", (), {"default_root_dir": str(tmp_path), "loggers": [SaveDirRaises(str(tmp_path))],
                             "checkpoint_callbacks": [], "profiler": None})()
    with pytest.raises(ConfigError, match=r"trainer.logger: reading SaveDirRaises's save_dir / root_dir raised "
                                          r"RuntimeError: no save_dir configured"):
        check_output_dirs(trainer)


def test_rng_state_that_does_not_fit_is_one_line_and_changes_nothing():
    from parlightning.runtime.checkpoint import rng_state, set_rng_state

    state = rng_state()
    state["python"]["internal"] = state["python"]["internal"][:10]
    before = random.getstate()
    torch_before = torch.get_rng_state()
    with pytest.raises(ConfigError, match=r"the checkpoint's python RNG state \(rng.python\) cannot be restored"):
        set_rng_state(state)
    assert random.getstate() == before and torch.equal(torch.get_rng_state(), torch_before)


def test_a_negative_optimizer_step_is_refused_at_load():
    from parlightning.runtime.checkpoint import verify_checkpoint

    checkpoint = {"state_dict": {}, "optimizer_states": [{"state": {0: {"step": torch.tensor(-5.0)}}}]}
    with pytest.raises(ConfigError, match=r"negative optimizer step count \(optimizer_states/0/state/0/step\)"):
        _verify_unchecked(verify_checkpoint, checkpoint)


def _verify_unchecked(verify, checkpoint):
    import os

    old = os.environ.get("PARLIGHTNING_UNCHECKED_CHECKPOINTS")
    os.environ["PARLIGHTNING_UNCHECKED_CHECKPOINTS"] = "1"
    try:
        verify(checkpoint, "c.ckpt")
    finally:
        if old is None:
            del os.environ["PARLIGHTNING_UNCHECKED_CHECKPOINTS"]
        else:
            os.environ["PARLIGHTNING_UNCHECKED_CHECKPOINTS"] = old


@pytest.mark.parametrize("edit, says", [
    (lambda r: r.__setitem__("obs", torch.zeros(*r["obs"].shape[:-1], r["obs"].shape[-1] + 1)), "state['obs'] is"),
    (lambda r: r["episode_return"].fill_(float("nan")), "state['episode_return'] holds NaN or inf"),
    (lambda r: r["env"].__setitem__("split", "heldout"), "state['split'] is 'heldout', this SwarmEnv's split is"),
])
def test_a_restamped_rollout_state_that_does_not_fit_is_one_line(ckpt, tmp_path, monkeypatch, edit, says):
    from parlightning import fit
    from parlightning.runtime.checkpoint import stamp_checkpoint

    ck = torch.load(ckpt, weights_only=True)
    edit(ck["RolloutDataModule"]["ranks"][0])
    torch.save(stamp_checkpoint(ck), tmp_path / "c.ckpt")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        fit(SWARM, [*TINY, "--trainer.max_epochs", "2", "--ckpt_path", str(tmp_path / "c.ckpt")])
    assert says in str(err.value), str(err.value)


def test_an_exception_whose_str_raises_is_still_described():
    from parlightning.envs.world_runner import describe_raised

    class Unprintable(ValueError):
        def __str__(self):
            raise ValueError("this error cannot be printed")

    text = describe_raised(Unprintable())
    assert text.startswith("raised Unprintable: <its message cannot be printed"), text


def test_the_probe_still_passes_a_correct_world():
    from parlightning.ppo.data import RolloutDataModule
    from parlightning.runtime.preflight import check_datamodule

    facts = check_datamodule(RolloutDataModule(env=CartPoleEnv, num_envs=4, num_steps=4))
    assert facts["action_spec"] == CartPoleEnv(num_envs=1).action_spec
