"""The first iteration's cost, estimated before anything is written: the policy's activations for
one update minibatch (refused beyond the free memory, naming the field and the fix) and, on the
CPU, its time (announced in one line when long)."""

import pytest

from parlightning.runtime import preflight
from parlightning.ppo.data import RolloutDataModule
from parlightning.cli.fit import main
from parlightning.ppo.module import PPOModule
from parlightning.runtime.preflight import PROBE_ACTORS, estimate_iteration

WIDE = ["--config", "configs/swarm_wide.yaml", "--data.env.init_args.max_width", "4096", "--data.num_envs", "16",
        "--data.num_steps", "4", "--data.update_epochs", "1", "--data.num_minibatches", "1", "--trainer.max_epochs", "1",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


@pytest.fixture
def repo_cwd(tmp_path, monkeypatch):
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    monkeypatch.chdir(root)
    return tmp_path


def test_a_wide_world_whose_minibatch_activations_exceed_memory_is_one_line_before_anything_is_written(
        repo_cwd, capsys, monkeypatch):
    """swarm_wide at max_width 4096: 4097 slots x 64 rows; 256 MiB free is far too little (on the
    code before this check it trained, or on the shipped sizes ran for minutes with no output)."""
    monkeypatch.setattr(preflight, "available_memory", lambda device: (256 << 20, "available on this machine"))
    monkeypatch.setattr(RolloutDataModule, "collect", lambda self: pytest.fail("a rollout started"))
    with pytest.raises(SystemExit) as exc:
        main([*WIDE, "--trainer.default_root_dir", str(repo_cwd)])
    message = str(exc.value.code)
    assert message.startswith("error: data.num_minibatches:"), message
    assert "[4097, 6]" in message and "activations need about" in message and "raise data.num_minibatches" in message
    assert "max_width" in message and "\n" not in message
    assert not list(repo_cwd.rglob("*"))


class _DM:
    num_envs, num_steps, update_epochs, num_minibatches = 64, 8, 2, 4


def _probe(width):
    from parlightning.envs.swarm import SwarmEnv

    env = SwarmEnv(num_envs=PROBE_ACTORS, seed=0, max_width=width)
    return {"observation_shape": tuple(env.observation_shape), "action_spec": env.action_spec,
            "env_step_seconds": 0.0, "probe_actors": PROBE_ACTORS}


def test_the_activation_estimate_grows_with_the_slot_count_for_the_slots_policy(monkeypatch):
    """The slots policy runs one network per slot: activations per row are proportional to the width."""
    import torch

    seen = []
    monkeypatch.setattr(preflight, "available_memory", lambda device: (seen.append(1) or 1, "available"))
    module = PPOModule(policy="slots", hidden_sizes=[64, 64])
    needs = []
    for width in (16, 64):
        with pytest.raises(Exception) as exc:
            estimate_iteration(module, _DM(), _probe(width), torch.device("cpu"))
        text = str(exc.value)
        needs.append(text)
        assert "128-row minibatches" in text  # 64 x 8 / 4
    per_row = [float(t.split("need about ")[1].split(" ")[0]) * {"KiB": 1, "MiB": 1024}[t.split("need about ")[1].split(" ")[1]]
               for t in needs]
    assert 3.0 < per_row[1] / per_row[0] < 4.5  # 65 vs 17 slots


def test_a_long_first_iteration_is_announced_in_one_line(monkeypatch):
    import torch

    monkeypatch.setattr(preflight, "LONG_ITERATION_S", 0.0)
    module = PPOModule(policy="slots", hidden_sizes=[64, 64])
    found = estimate_iteration(module, _DM(), _probe(16), torch.device("cpu"))
    assert found["seconds"] > 0 and found["update_seconds"] > 0 and found["longest_call_seconds"] > 0
    line = found["line"]
    assert line.startswith("note: the first iteration will take about") and "\n" not in line
    assert "2 epochs x 4 minibatches of 128 rows" in line and "64 actors x 8 steps" in line
    monkeypatch.setattr(preflight, "LONG_ITERATION_S", 1e9)
    assert estimate_iteration(module, _DM(), _probe(16), torch.device("cpu"))["line"] is None


def test_the_preflight_probe_and_estimate_leave_the_runs_seed_alone():
    """The estimate builds and times a real policy and the probe steps the world: neither may draw
    from the global generator the run's weights and rollouts come from (before this, a seeded run
    after the estimate had other weights than the same seed on the release before it)."""
    import torch

    from parlightning.envs.swarm import SwarmEnv
    from parlightning.runtime.preflight import time_env_step

    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    module = PPOModule(hidden_sizes=[64, 64])
    estimate = estimate_iteration(module, _DM(), _probe(12), torch.device("cpu"))
    assert estimate is not None and estimate["seconds"] > 0  # the policy was built and timed
    env = SwarmEnv(num_envs=PROBE_ACTORS, seed=0)
    env.reset(seed=0)
    time_env_step(env, PROBE_ACTORS)
    assert torch.equal(torch.random.get_rng_state(), before)
