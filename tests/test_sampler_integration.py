"""Samplers inside the data module: custom classes from YAML, logged signals, DDP union, threshold warning."""

import glob
import os
import warnings

import pytest
import torch

from parlightning.ppo.data import RolloutDataModule
from parlightning.envs.swarm import SwarmEnv
from parlightning.cli.fit import main
from parlightning.analysis.logs import read_scalars
from parlightning.distribution.samplers import DifficultyWeighted, PosteriorSignal, SamplingForLearnability
from reliability_helpers import sync_as_ranks

CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "swarm.yaml")


def _cli(tmp_path, *extra):
    return main(["--config", CONFIG, "--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar",
                 "false", "--trainer.max_epochs", "2", "--data.num_envs", "32", "--data.num_steps", "8", *extra])


def test_a_users_two_method_sampler_by_class_path(tmp_cwd):
    cli = _cli(tmp_cwd, "--data.sampler", "callbacks.hardest_first.HardestFirst")
    sampler = cli.datamodule.sampler
    assert type(sampler).__name__ == "HardestFirst"
    # every finished episode was recorded, and every pick came from the bank
    last = cli.datamodule.last_rollout
    assert sum(sampler.count.values()) >= int(last.stats["rollout/episodes"]) > 0
    assert set(sampler.picked) <= set(cli.datamodule.collector.task_ids)
    assert sum(sampler.picked.values()) >= 32  # one queue of picks per round for the 32 actors


def test_sampler_signals_are_logged(tmp_cwd):
    _cli(tmp_cwd, "--data.sampler", "parlightning.distribution.samplers.DifficultyWeighted",
         "--data.sampler.init_args.pass_threshold", "1.0")
    run = glob.glob(str(tmp_cwd / "lightning_logs" / "version_*"))[0]
    tags = read_scalars(run)
    assert "sampler/informative_share" in tags and "sampler/pass_rate_spread" in tags


@pytest.mark.parametrize("cls", [DifficultyWeighted, PosteriorSignal, SamplingForLearnability])
def test_sync_gives_every_rank_the_union_of_all_ranks_counts(cls):
    ids = [f"t-{i}" for i in range(6)]
    ranks = [cls(pass_threshold=1.0, seed=0), cls(pass_threshold=1.0, seed=1)]
    for r in ranks:
        r.bind(ids, torch.device("cpu"))
    ranks[0].record_batch(torch.tensor([0, 1, 1]), torch.tensor([1.0, 0.0, 1.0]))
    ranks[1].record_batch(torch.tensor([1, 5]), torch.tensor([1.0, 0.0]))
    sync_as_ranks(ranks)
    for r in ranks:
        assert r.attempts.tolist() == [1, 3, 0, 0, 0, 1]
        assert r.passes.tolist() == [1, 2, 0, 0, 0, 0]
    ranks[1].record_batch(torch.tensor([2]), torch.tensor([1.0]))
    sync_as_ranks(ranks)
    for r in ranks:  # nothing counted twice across syncs
        assert r.attempts.tolist() == [1, 3, 1, 0, 0, 1]
    restored = cls(pass_threshold=1.0)
    restored.bind(ids, torch.device("cpu"))
    restored.load_state_dict(ranks[0].state_dict())
    other = cls(pass_threshold=1.0)
    other.bind(ids, torch.device("cpu"))
    other.load_state_dict(ranks[0].state_dict())
    sync_as_ranks([restored, other])  # resumed ranks add nothing new: counts stay the checkpoint's
    assert restored.attempts.tolist() == [1, 3, 1, 0, 0, 1]


def test_threshold_mismatch_warns_once_naming_both():
    dm = RolloutDataModule(env=lambda n, d, s: SwarmEnv(num_envs=n, device=d, seed=s), num_envs=8, num_steps=4,
                           sampler=DifficultyWeighted(pass_threshold=0.5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dm.build(torch.device("cpu"))
    messages = [str(w.message) for w in caught if "pass_threshold" in str(w.message)]
    assert len(messages) == 1 and "0.5" in messages[0] and str(SwarmEnv.solved_threshold) in messages[0]
