"""The Lightning side: on-policy data, a short fit that learns, the CLI and its bad-input errors."""

import glob
import os

import lightning.pytorch as pl
import pytest
import yaml

from parlightning.data import RolloutDataModule
from parlightning.envs.swarm import SwarmEnv
from parlightning.fit import main
from parlightning.logs import read_scalars
from parlightning.module import PPOModule

CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "swarm.yaml")


def small_env(families=("solo", "fanout")):
    return lambda num_envs, device, seed: SwarmEnv(num_envs=num_envs, device=device, seed=seed, families=families)


def _trainer(tmp_path, epochs, callbacks=(), **kw):
    return pl.Trainer(
        max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=list(callbacks), default_root_dir=tmp_path, **kw,
    )


class RecordStats(pl.Callback):
    """Keeps each rollout's stats and checks every minibatch is from this epoch's fresh rollout."""

    def __init__(self):
        self.stats, self.checked = [], 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        rollout = trainer.datamodule.last_rollout
        # the batch comes from the rollout collected for this epoch ...
        assert int(batch["round"]) == trainer.current_epoch == rollout.round_index
        # ... and that rollout was collected by the policy as it stood when the epoch began
        expected_version = trainer.current_epoch * len(trainer.train_dataloader)
        assert rollout.policy_version == expected_version
        if batch_idx == 0:
            assert trainer.global_step == expected_version
            self.stats.append({k: float(v) for k, v in rollout.stats.items()})
        self.checked += 1


def test_every_minibatch_comes_from_the_rollout_of_its_epochs_policy(tmp_path):
    pl.seed_everything(0)
    dm = RolloutDataModule(env=small_env(), num_envs=32, num_steps=8, update_epochs=2, num_minibatches=2)
    rec = RecordStats()
    _trainer(tmp_path, 3, [rec]).fit(PPOModule(anneal_lr=False), datamodule=dm)
    assert rec.checked == 3 * 2 * 2
    assert dm.round_index == 3 and dm.env_steps == 3 * 32 * 8


def test_collection_happens_when_the_loader_is_iterated_and_len_is_exact(tmp_path):
    dm = RolloutDataModule(env=small_env(), num_envs=8, num_steps=4, update_epochs=3, num_minibatches=2)
    module = PPOModule(anneal_lr=False)
    trainer = _trainer(tmp_path, 1)
    trainer.fit(module, datamodule=dm)
    loader = dm.train_dataloader()
    assert len(loader) == 6
    before = dm.round_index
    batches = list(loader)
    assert dm.round_index == before + 1 and len(batches) == 6
    assert all(b["obs"].shape == (16, *dm.env.observation_shape) for b in batches)


def test_short_fit_improves_success(tmp_path):
    pl.seed_everything(0)
    dm = RolloutDataModule(env=small_env(), num_envs=128, num_steps=16, update_epochs=4, num_minibatches=4, seed=0)
    rec = RecordStats()
    module = PPOModule(lr=2e-3, hidden_sizes=(64, 64), activation="relu")
    _trainer(tmp_path, 25, [rec]).fit(module, datamodule=dm)
    first = sum(s["rollout/success_rate"] for s in rec.stats[:3]) / 3
    last = sum(s["rollout/success_rate"] for s in rec.stats[-3:]) / 3
    assert last > first + 0.15, (first, last)
    assert rec.stats[-1]["charts/episodic_return"] > rec.stats[0]["charts/episodic_return"]


def _cli(tmp_path, *extra):
    return main(["--config", CONFIG, "--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar",
                 "false", "--trainer.max_epochs", "2", "--data.num_envs", "32", "--data.num_steps", "8", *extra])


def test_cli_writes_tensorboard_scalars_on_the_env_step_axis_and_the_config(tmp_cwd):
    _cli(tmp_cwd)
    runs = glob.glob(str(tmp_cwd / "lightning_logs" / "version_*"))
    assert len(runs) == 1
    scalars = read_scalars(runs[0])
    for tag in ("charts/episodic_return", "rollout/success_rate", "charts/SPS", "losses/policy_loss",
                "losses/value_loss", "losses/entropy", "losses/approx_kl", "losses/clipfrac",
                "losses/explained_variance", "rollout/subagents_per_episode", "rollout/critical_steps"):
        assert tag in scalars, tag
    steps = [s for s, _ in scalars["charts/episodic_return"]]
    assert steps == [32 * 8, 2 * 32 * 8]  # x-axis: env steps, not optimizer steps
    saved = yaml.safe_load(open(os.path.join(runs[0], "config.yaml")))
    assert saved["data"]["num_envs"] == 32 and saved["model"]["activation"] == "relu"
    assert glob.glob(os.path.join(runs[0], "checkpoints", "*.ckpt"))


def test_print_config(tmp_cwd, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--config", CONFIG, "--model.lr", "0.003", "--print_config"])
    assert exit_.value.code in (0, None)
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["lr"] == 0.003 and printed["data"]["reward"]["class_path"].endswith("PARLReward")
    assert not (tmp_cwd / "lightning_logs").exists()


# The CLI's bad-input table (these cases and more) lives in tests/test_reliability.py.
