"""PPO on CartPole: a short fit that learns, the standard-hyperparameter configs, and the
bookkeeping of scripts/cartpole_check.py (per-episode returns and the step 475 is reached)."""

import glob
import os
import sys

import lightning.pytorch as pl
import pytest
import torch
import yaml

from parlightning.ppo.data import RolloutDataModule
from parlightning.envs import CartPoleEnv
from parlightning.cli.fit import main
from parlightning.analysis.logs import read_scalars
from parlightning.ppo.module import PPOModule

ROOT = os.path.join(os.path.dirname(__file__), "..")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from cartpole_check import EpisodeLog, summarise  # noqa: E402

CONFIGS = {name: os.path.join(ROOT, "configs", f"{name}.yaml") for name in ("cartpole", "cartpole_tensor")}


def test_short_tensor_cartpole_fit_improves_return(tmp_path):
    pl.seed_everything(0)
    log = EpisodeLog()
    dm = RolloutDataModule(env=CartPoleEnv, num_envs=64, num_steps=32, num_minibatches=2, reward=None, seed=0)
    trainer = pl.Trainer(
        max_epochs=12, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[log], default_root_dir=tmp_path,
    )
    trainer.fit(PPOModule(lr=2.5e-3, activation="tanh"), datamodule=dm)
    returns, steps = torch.cat(log.returns), torch.cat(log.steps)
    first, last = returns[:100].mean(), returns[-100:].mean()  # measured: 16.9 -> 86.5
    assert first < 25 and last > 60 and last > 3.5 * first, (first, last)  # a random policy lasts ~22 steps

    # EpisodeLog's bookkeeping, checked against facts of CartPole (return == length, reward 1 a step)
    assert len(log.returns) == 12 and returns.numel() > 300
    assert steps.diff().min() >= 0 and int(steps.max()) <= dm.env_steps == 12 * 64 * 32
    assert bool((steps % 64 == 0).all())
    assert bool((steps >= 64 * returns).all())  # an episode cannot be longer than the time elapsed
    assert int(steps[0]) == 64 * int(returns[0])  # the first episode to end began at step 0
    assert log.seconds > 0


def test_summarise_finds_the_first_step_the_running_mean_reaches_475():
    returns = [10.0] * 150 + [500.0] * 100
    steps = [4 * (i + 1) for i in range(250)]
    out = summarise(returns, steps)
    # window of 100 ending at episode i holds (i - 149) scores of 500: mean >= 475 from 95 of them on
    assert out["reached"] == steps[150 + 94] and out["last100"] == 500.0 and out["episodes"] == 250
    assert summarise(returns[:200], steps[:200])["reached"] is None
    assert summarise([500.0] * 50, steps[:50])["reached"] is None  # fewer than 100 episodes: no running mean


def _printed(name, capsys, *extra):
    with pytest.raises(SystemExit) as exit_:
        main(["--config", CONFIGS[name], "--print_config", *extra])
    assert exit_.value.code in (0, None)
    return yaml.safe_load(capsys.readouterr().out)


@pytest.mark.parametrize("name", ["cartpole", "cartpole_tensor"])
def test_cartpole_configs_hold_the_standard_ppo_hyperparameters(name, tmp_cwd, capsys):
    cfg = _printed(name, capsys)
    model, data, trainer = cfg["model"], cfg["data"], cfg["trainer"]
    assert (data["num_envs"], data["num_steps"], data["update_epochs"], data["num_minibatches"]) == (4, 128, 4, 4)
    assert (data["gamma"], data["gae_lambda"], data["reward"]) == (0.99, 0.95, None)
    assert trainer["max_epochs"] == 500_000 // (4 * 128) == 976
    assert trainer["gradient_clip_val"] is None  # so model.max_grad_norm clips
    assert (model["lr"], model["anneal_lr"], model["adam_eps"]) == (2.5e-4, True, 1e-5)
    assert (model["clip_coef"], model["clip_vloss"], model["ent_coef"], model["vf_coef"]) == (0.2, True, 0.01, 0.5)
    assert (model["norm_adv"], model["max_grad_norm"], model["target_kl"]) == (True, 0.5, None)
    assert (model["hidden_sizes"], model["activation"]) == ([64, 64], "tanh")
    env = data["env"]
    if name == "cartpole":
        assert env["class_path"] == "parlightning.envs.GymVectorEnv"
        assert env["init_args"]["env_id"] == "CartPole-v1"
    else:
        assert env["class_path"] == "parlightning.envs.CartPoleEnv"
        assert env["init_args"]["max_episode_steps"] == 500
    assert not (tmp_cwd / "lightning_logs").exists()


def test_gym_cartpole_config_trains_through_the_cli(tmp_cwd):
    pytest.importorskip("gymnasium", reason="configs/cartpole.yaml needs the gym extra: pip install parlightning[gym]")
    main(["--config", CONFIGS["cartpole"], "--trainer.max_epochs", "2", "--trainer.enable_progress_bar", "false",
          "--trainer.enable_checkpointing", "false"])
    runs = glob.glob(str(tmp_cwd / "lightning_logs" / "version_*"))
    scalars = read_scalars(runs[0])
    assert [s for s, _ in scalars["charts/episodic_return"]] == [512, 1024]
    assert all(0 < v <= 500 for _, v in scalars["charts/episodic_return"])
    lrs = [v for _, v in scalars["charts/learning_rate"]]
    assert lrs == pytest.approx([2.5e-4, 2.5e-4 * (1 - 1 / 2)])  # annealed over trainer.max_epochs
