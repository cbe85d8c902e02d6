"""Loading a trained policy the Lightning way (`PPOModule.load_from_checkpoint`) and acting with it
(`parlightning.load_policy(path).predict`), in a fresh process, on checkpoints real fits wrote: the
same numbers as `python -m parlightning.evaluate`."""

import glob
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from parlightning.runtime.checkpoint import CHECKSUM_KEY, stamp_checkpoint

import parlightning
from parlightning.errors import ConfigError
from parlightning.cli.evaluate import main as evaluate_main
from parlightning.cli.fit import main as fit_main
from parlightning.ppo.module import PPOModule

ROOT = Path(__file__).resolve().parents[1]
SWARM = str(ROOT / "configs" / "swarm.yaml")


@pytest.fixture(scope="module", params=["mlp", "slots"])
def swarm_ckpt(request, tmp_path_factory):
    """A real 1-iteration SwarmEnv fit (multi-discrete actions) with the given policy."""
    out = tmp_path_factory.mktemp(f"fit-{request.param}")
    fit_main(["--config", SWARM, "--trainer.default_root_dir", str(out), "--trainer.enable_progress_bar", "false",
              "--trainer.enable_model_summary", "false", "--trainer.max_epochs", "1", "--data.num_envs", "16",
              "--data.num_steps", "8", "--model.policy", request.param])
    return glob.glob(str(out / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"))[0]


def test_load_from_checkpoint_rebuilds_the_trained_policy(swarm_ckpt):
    module = PPOModule.load_from_checkpoint(swarm_ckpt)  # raised "Unexpected key(s) in state_dict" before
    saved = torch.load(swarm_ckpt, weights_only=True)["state_dict"]
    ours = module.state_dict()
    assert ours.keys() == saved.keys() and all(torch.equal(ours[k], saved[k]) for k in saved)
    assert module.policy.action_spec.kind == "multi_discrete"
    assert type(module.policy).__name__ == ("SlotsActorCritic" if module.hparams.policy == "slots" else "ActorCritic")


FRESH_PROCESS = textwrap.dedent("""
    import json, sys, torch
    import parlightning
    from parlightning.cli.evaluate import build_env, env_spec, run_episodes, summarise
    from parlightning.ppo.module import PPOModule
    ckpt, config, out = sys.argv[1:]
    policy = parlightning.load_policy(ckpt)
    cls, init_args = env_spec([config])
    probe = build_env(cls, init_args, 1, 0, "heldout", "cpu")
    n = len(probe.task_ids)  # evaluate --episodes 1: one episode per held-out task, seed 0
    env = build_env(cls, init_args, n, 0, "heldout", "cpu")
    serial = build_env(cls, init_args, n, 0, "heldout", "cpu")
    row = summarise(run_episodes(env, lambda o, m: policy.predict(o, mask=m), 0, masked=True),
                    run_episodes(serial, lambda o: serial.scripted_action("serial", o), 0), env.solved_threshold)
    # predict's actions, logits and values against the Lightning-loaded module, computed by hand
    net = PPOModule.load_from_checkpoint(ckpt).policy.eval()
    obs = env.reset(seed=1)
    actions, logits, value = policy.predict(obs, return_logits=True, return_value=True)
    dims = policy.action_spec.nvec
    with torch.no_grad():
        want = torch.stack([p.argmax(-1) for p in logits.split(list(dims), -1)], -1)
        same_value = bool(torch.equal(value, net.value(obs)))
    json.dump({**row, "actions_match": bool(torch.equal(actions, want)), "same_value": same_value,
               "distinct_actions": len(set(actions.flatten().tolist())), "rows": actions.shape[0]}, open(out, "w"))
""")


def test_predict_in_a_fresh_process_gives_evaluate_s_numbers(swarm_ckpt, tmp_path, monkeypatch):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = lambda *a: subprocess.run([sys.executable, *a], cwd=tmp_path, env=env, capture_output=True, text=True,  # noqa: E731
                                    timeout=300)
    evaluate_main(["--config", SWARM, "--ckpt_path", swarm_ckpt, "--episodes", "1", "--json", str(tmp_path / "e.json")])
    if "fit-mlp" in swarm_ckpt:  # a fresh process (one is enough: the slots policy runs the same code here)
        done = run("-c", FRESH_PROCESS, swarm_ckpt, SWARM, str(tmp_path / "p.json"))
        assert done.returncode == 0, done.stderr
    else:
        monkeypatch.setattr(sys, "argv", ["-c", swarm_ckpt, SWARM, str(tmp_path / "p.json")])
        exec(FRESH_PROCESS, {})
    evaluated, predicted = (json.loads((tmp_path / f).read_text()) for f in ("e.json", "p.json"))
    for key in ("episodes", "success_rate", "mean_outcome", "critical_steps", "subagents_per_episode",
                "finish_rate", "rounds_per_episode", "speedup_vs_serial"):
        assert predicted[key] == evaluated[key], key
    assert predicted["actions_match"] and predicted["same_value"]
    assert predicted["distinct_actions"] > 1 and predicted["rows"] == predicted["episodes"]  # a test with teeth


def test_predict_takes_numpy_one_observation_and_samples_with_a_generator(swarm_ckpt):
    policy = parlightning.load_policy(swarm_ckpt)
    obs = torch.rand(6, *policy.observation_shape)
    batch = policy.predict(obs)
    assert isinstance(policy.predict(obs.numpy()), np.ndarray)
    np.testing.assert_array_equal(policy.predict(obs.numpy()), batch.numpy())
    assert torch.equal(policy.predict(obs[2]), batch[2])  # one unbatched observation: one action
    draws = [policy.predict(obs, deterministic=False, generator=torch.Generator().manual_seed(s)) for s in (0, 0, 1)]
    assert torch.equal(draws[0], draws[1]) and draws[0].shape == batch.shape
    with pytest.raises(ValueError, match=r"Policy.predict\(obs\): must be \[B, "):
        policy.predict(torch.zeros(3, 2))


def test_load_policy_refuses_bad_checkpoints_with_one_error(swarm_ckpt, tmp_path):
    with pytest.raises(ConfigError, match="no checkpoint file"):
        parlightning.load_policy(tmp_path / "missing.ckpt")
    (tmp_path / "junk.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="not a readable checkpoint"):
        parlightning.load_policy(tmp_path / "junk.ckpt")
    ckpt = torch.load(swarm_ckpt, weights_only=True)
    ckpt["hyper_parameters"]["policy"] = "gru"
    torch.save(stamp_checkpoint(ckpt), tmp_path / "gru.ckpt")  # as a recurrent run would have saved it
    with pytest.raises(ConfigError, match="load_policy runs mlp and slots policies"):
        parlightning.load_policy(tmp_path / "gru.ckpt")
    del ckpt["policy_spaces"]
    ckpt["hyper_parameters"]["policy"] = "mlp"
    old = stamp_checkpoint(ckpt)
    old[CHECKSUM_KEY] = {"sha256": old[CHECKSUM_KEY]["sha256"]}  # an older version's checksum: tensors only
    torch.save(old, tmp_path / "old.ckpt")
    with pytest.raises(ConfigError, match="no policy_spaces"):
        PPOModule.load_from_checkpoint(tmp_path / "old.ckpt")
