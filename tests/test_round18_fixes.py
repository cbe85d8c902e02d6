"""Round 18's classes (`scripts/bad_inputs_round18.py`, measured before these fixes): a re-stamped
checkpoint whose optimizer settings torch refuses, whose optimizer state does not fit the policy's
parameters, whose PARLAnnealing counts in another unit or holds no count, whose planner or data-module
state holds no per-rank part or a count of another task bank; and a user's callback that changes what
the run built: sets a hyper-parameter the module does not accept, converts, moves or removes the
policy's parameters, replaces the trainer's optimizers, removes what a resume needs from a checkpoint,
changes a data-module setting the run was built from (or a per-iteration one to a refused value, or
during an update), or widens the actor's output with a forward hook."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from parlightning.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SWARM = str(ROOT / "configs" / "swarm.yaml")
TINY = ["--data.num_envs", "8", "--data.num_steps", "8", "--trainer.max_epochs", "1",
        "--trainer.enable_model_summary", "false", "--trainer.enable_progress_bar", "false"]


def _group(ck: dict) -> dict:
    return ck["optimizer_states"][0]["param_groups"][0]


def _shift_state(ck: dict) -> None:
    state = ck["optimizer_states"][0]["state"]
    state[0], state[1] = state[1], state[0]


def _amsgrad(ck: dict) -> None:
    _group(ck)["amsgrad"] = True


def _annealing(ck: dict) -> dict:
    return ck["callbacks"]["PARLAnnealing"]


@pytest.mark.parametrize("edit, says", [
    (lambda ck: _group(ck).__setitem__("betas", (1.5, 0.999)),
     "holds Adam settings torch refuses: optimizer_states[0].param_groups[0].betas = (1.5, 0.999) (Invalid beta"),
    (lambda ck: _group(ck).__setitem__("eps", -1e-5),
     "optimizer_states[0].param_groups[0].eps = -1e-05 (Invalid epsilon value"),
    (lambda ck: _group(ck).__setitem__("weight_decay", -0.5),
     "optimizer_states[0].param_groups[0].weight_decay = -0.5"),
    (_shift_state, "holds Adam optimizer state (optimizer_states[0]) this policy's parameters cannot use (RuntimeError: "
                   "The size of tensor"),
    (_amsgrad, "cannot use (an entry its settings need is missing: 'max_exp_avg_sq')"),
    (lambda ck: _group(ck)["params"].pop(),
     "holds optimizer state for 11 parameters, but this config's policy has 12"),
    (lambda ck: _annealing(ck).__setitem__("unit", "optimizer_steps"),
     "the checkpoint's PARLAnnealing counted its position in 'optimizer_steps', but this config's PARLAnnealing.unit "
     "is 'env_steps'"),
    (lambda ck: _annealing(ck).__setitem__("position", float("nan")),
     "the checkpoint's PARLAnnealing position is nan, not a count of env_steps"),
    (lambda ck: ck["StrategyPlanner"].pop("ranks"), "the checkpoint's StrategyPlanner ranks is 'None'"),
    (lambda ck: ck["StrategyPlanner"].__setitem__("episodes", ck["StrategyPlanner"]["episodes"][:3]),
     "the checkpoint's StrategyPlanner episodes has shape [3], but this run's task bank has"),
    (lambda ck: ck["StrategyPlanner"].__setitem__("rounds", -2), "the checkpoint's StrategyPlanner rounds is -2"),
    (lambda ck: ck["RolloutDataModule"].__setitem__("ranks", []), "the checkpoint's RolloutDataModule.ranks is '[]'"),
    (lambda ck: ck["RolloutDataModule"].pop("ranks"), "the checkpoint's RolloutDataModule.ranks is 'None'"),
    (lambda ck: ck["RolloutDataModule"].__setitem__("env_steps", 128.5),
     "the checkpoint's RolloutDataModule.env_steps is 128.5, not a count"),
])
def test_a_restamped_checkpoint_whose_state_cannot_resume_is_one_line(ckpt, tmp_path, monkeypatch, edit, says):
    from parlightning import fit
    from parlightning.runtime.checkpoint import stamp_checkpoint

    ck = torch.load(ckpt, weights_only=True)
    edit(ck)
    torch.save(stamp_checkpoint(ck), tmp_path / "c.ckpt")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        fit(SWARM, [*TINY, "--trainer.max_epochs", "2", "--ckpt_path", str(tmp_path / "c.ckpt")])
    assert says in str(err.value), str(err.value)
    assert str(err.value).startswith("--ckpt_path: "), str(err.value)


def test_the_unedited_checkpoint_still_resumes(ckpt, tmp_path, monkeypatch):
    from parlightning import fit

    monkeypatch.chdir(tmp_path)
    fit(SWARM, [*TINY, "--trainer.max_epochs", "2", "--ckpt_path", ckpt])
    assert list(tmp_path.glob("lightning_logs/version_*/checkpoints/last.ckpt"))


CALLBACKS = '''
import lightning
import torch


class HparamsLrWord(lightning.Callback):
    def on_train_epoch_start(self, trainer, pl_module):
        pl_module.hparams.lr = "fast"


class ClipCoefNegative(lightning.Callback):
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        pl_module.hparams.clip_coef = -1.0


class ToFloat64(lightning.Callback):
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        pl_module.policy.double()


class ToMeta(lightning.Callback):
    def on_train_start(self, trainer, pl_module):
        pl_module.to("meta")


class DeletesCritic(lightning.Callback):
    def on_train_start(self, trainer, pl_module):
        del pl_module.policy.critic


class ReplacesActorLayer(lightning.Callback):
    def on_train_epoch_start(self, trainer, pl_module):
        old = pl_module.policy.actor[0]
        pl_module.policy.actor[0] = torch.nn.Linear(old.in_features, old.out_features)


class EmptiesOptimizers(lightning.Callback):
    def on_train_epoch_end(self, trainer, pl_module):
        trainer.optimizers = []


class DropsOptimizerStates(lightning.Callback):
    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        checkpoint.pop("optimizer_states", None)


class DoublesActorOutput(lightning.Callback):
    def on_train_start(self, trainer, pl_module):
        pl_module.policy.actor.register_forward_hook(lambda m, i, o: torch.cat([o, o], dim=-1))


class GammaMidRun(lightning.Callback):
    def on_train_epoch_start(self, trainer, pl_module):
        trainer.datamodule.gamma = 1.5


class NoMinibatches(lightning.Callback):
    def on_train_epoch_start(self, trainer, pl_module):
        trainer.datamodule.num_minibatches = 0


class MinibatchesDuringTheUpdate(lightning.Callback):
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        trainer.datamodule.num_minibatches = 2


class FineChanges(lightning.Callback):
    """Correct: a valid hyper-parameter schedule, a forward hook that scales the actor's output, an in-place
    weight change and an added parameter group's learning rate change."""

    def on_train_start(self, trainer, pl_module):
        pl_module.policy.actor.register_forward_hook(lambda m, i, o: o * 0.5)

    def on_train_epoch_start(self, trainer, pl_module):
        pl_module.hparams.ent_coef = 0.005
        trainer.datamodule.num_minibatches = 2  # read at each iteration's start
        trainer.optimizers[0].param_groups[0]["lr"] = 3e-4
        with torch.no_grad():
            pl_module.policy.critic[0].weight.mul_(1.0)
'''


@pytest.fixture
def callbacks(tmp_path):
    (tmp_path / "r18cb.py").write_text(CALLBACKS)
    sys.path.insert(0, str(tmp_path))
    sys.modules.pop("r18cb", None)
    yield tmp_path
    sys.path.remove(str(tmp_path))
    sys.modules.pop("r18cb", None)


@pytest.mark.parametrize("cls, says", [
    ("HparamsLrWord", "HparamsLrWord.on_train_epoch_start set pl_module.hparams.lr to 'fast', which the module does not "
                      "accept (must be positive"),
    ("ClipCoefNegative", "ClipCoefNegative.on_train_batch_start set pl_module.hparams.clip_coef to -1.0"),
    ("ToFloat64", "ToFloat64.on_train_batch_start converted the module's parameters to torch.float64 (they were "
                  "torch.float32"),
    ("ToMeta", "ToMeta.on_train_start moved the module's parameters to meta (they were on cpu"),
    ("DeletesCritic", "DeletesCritic.on_train_start removed 6 of the module's parameters (first policy.critic.0.weight)"),
    ("ReplacesActorLayer", "ReplacesActorLayer.on_train_epoch_start replaced the parameter policy.actor.0.weight with a "
                           "new tensor (the optimizer still steps the old one)"),
    ("EmptiesOptimizers", "EmptiesOptimizers.on_train_epoch_end replaced trainer.optimizers (1 optimizers before, 0 "
                          "now"),
    ("DropsOptimizerStates", "DropsOptimizerStates.on_save_checkpoint removed checkpoint['optimizer_states']"),
    ("GammaMidRun", "GammaMidRun.on_train_epoch_start set trainer.datamodule.gamma to 1.5 (it was 0.99); the data "
                    "module reads it once, when the run builds"),
    ("NoMinibatches", "NoMinibatches.on_train_epoch_start set trainer.datamodule.num_minibatches to 0 (it was 4), "
                      "which the data module does not accept"),
    ("MinibatchesDuringTheUpdate", "MinibatchesDuringTheUpdate.on_train_batch_start set trainer.datamodule."
                                   "num_minibatches to 2 (it was 4); the data module reads it during an update"),
    ("DoublesActorOutput", "policy.actor: its output has 168 columns per sample (forward hooks on it: "
                           "DoublesActorOutput.on_train_start.<locals>.<lambda>), but the action head reads 84"),
])
def test_a_callback_that_changes_what_the_run_built_is_named(callbacks, monkeypatch, cls, says):
    from parlightning import fit

    monkeypatch.chdir(callbacks)
    with pytest.raises(Exception) as err:
        fit(SWARM, [*TINY, "--trainer.callbacks+", f"r18cb.{cls}"])
    assert says in str(err.value), str(err.value)


def test_a_callback_changing_settings_values_and_weights_in_place_trains(callbacks, monkeypatch):
    from parlightning import fit

    monkeypatch.chdir(callbacks)
    fit(SWARM, [*TINY, "--trainer.max_epochs", "2", "--trainer.callbacks+", "r18cb.FineChanges"])
    assert list(callbacks.glob("lightning_logs/version_0/checkpoints/last.ckpt"))
