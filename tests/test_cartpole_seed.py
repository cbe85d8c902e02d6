"""One seed: `--seed N` (alias of `--seed_everything`) drives init, env, actions and minibatches;
a component's own seed (`data.seed`) overrides it only when set."""

import os

import lightning.pytorch as pl
import pytest
import torch

from parlightning.collection import stream_seed
from parlightning.ppo.data import RolloutDataModule
from parlightning.envs import CartPoleEnv
from parlightning.cli.fit import main
from parlightning.analysis.logs import read_scalars

ROOT = os.path.join(os.path.dirname(__file__), "..")
TINY = ["--config", os.path.join(ROOT, "configs", "cartpole_tensor.yaml"), "--trainer.max_epochs", "2",
        "--data.num_envs", "8", "--data.num_steps", "16", "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false", "--trainer.enable_checkpointing", "false"]
TIMING = ("charts/SPS", "rollout/SPS")


def _run(tmp_path, name, *args):
    cli = main([*TINY, "--trainer.default_root_dir", str(tmp_path / name), *args])
    scalars = read_scalars(tmp_path / name / "lightning_logs" / "version_0")
    weights = torch.cat([p.detach().flatten() for p in cli.model.parameters()])
    return cli.datamodule.seed, {k: v for k, v in scalars.items() if k not in TIMING}, weights


def test_one_seed_makes_runs_identical_and_different_seeds_differ(tmp_path):
    seed_a, metrics_a, w_a = _run(tmp_path, "a", "--seed", "3")
    seed_b, metrics_b, w_b = _run(tmp_path, "b", "--seed_everything", "3")  # the long name, same meaning
    seed_c, metrics_c, w_c = _run(tmp_path, "c", "--seed", "4")
    assert (seed_a, seed_b, seed_c) == (3, 3, 4)  # data.seed unset: follows the global seed
    assert metrics_a == metrics_b and torch.equal(w_a, w_b)  # every logged value, bit for bit
    assert metrics_a["charts/episodic_return"] != metrics_c["charts/episodic_return"]
    assert not torch.equal(w_a, w_c)


def test_an_explicit_data_seed_overrides_the_global_seed():
    pl.seed_everything(4)
    follows, own = (RolloutDataModule(env=CartPoleEnv, num_envs=8, num_steps=4, seed=s) for s in (None, 3))
    for dm in (follows, own):
        dm.build(torch.device("cpu"))
    assert (follows.seed, own.seed) == (4, 3)
    # every stream derives from data.seed (+ rank) through stream_seed: env resets, action sampling
    env_seed = {dm: stream_seed(dm.seed, "env") for dm in (follows, own)}
    assert torch.equal(follows.collector.loop.obs, CartPoleEnv(8, seed=env_seed[follows]).reset())
    assert torch.equal(own.collector.loop.obs, CartPoleEnv(8, seed=env_seed[own]).reset())
    g = torch.Generator().manual_seed(stream_seed(3, "action"))
    assert torch.equal(own.collector.loop.action_generator.get_state(), g.get_state())


@pytest.mark.parametrize("flag", ["--seed", "--seed_everything"])
def test_seed_flag_rejects_a_non_integer(flag, tmp_cwd, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*TINY, flag, "abc"])
    assert "error:" in str(exit_.value) and "seed_everything" in str(exit_.value)
