"""Observation and reward normalisation (`NormalizeEnv`, SB3's VecNormalize semantics): the numbers
against an independent numpy implementation of VecNormalize, statistics in the checkpoint and
restored exactly on resume, frozen and applied identically by evaluate, `load_policy(...).predict`
and the exported program; off by default."""

import glob
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import yaml

from parlightning.envs import CartPoleEnv, NormalizeEnv
from parlightning.envs.normalize import ObsNormalizer, RunningMeanStd, normalizer_from_checkpoint
from parlightning.errors import ConfigError
from parlightning.cli.fit import main as fit_main

ROOT = os.path.join(os.path.dirname(__file__), "..")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_hot_path  # noqa: E402 (its host-sync counter and collection helper)
CARTPOLE = os.path.join(ROOT, "configs", "cartpole_tensor.yaml")

NORMALIZED = {  # CartPole (tensor world: exact checkpoints) inside NormalizeEnv, tiny and fast
    "seed_everything": 0,
    "trainer": {"max_epochs": 2, "accelerator": "cpu", "devices": 1, "logger": False, "enable_progress_bar": False,
                "enable_model_summary": False,
                "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                               "init_args": {"every_n_epochs": 1, "save_last": True, "save_top_k": -1}}]},
    "model": {"hidden_sizes": [16, 16], "anneal_lr": False, "lr": 0.003},
    "data": {"env": {"class_path": "parlightning.envs.NormalizeEnv",
                     "init_args": {"env": {"class_path": "parlightning.envs.CartPoleEnv",
                                           "init_args": {"max_episode_steps": 500}},
                                   "norm_reward": True, "clip_obs": 5.0}},
             "num_envs": 8, "num_steps": 16, "update_epochs": 2, "num_minibatches": 2, "reward": None},
}


class ReferenceVecNormalize:
    """SB3's VecNormalize (stable_baselines3/common/vec_env/vec_normalize.py and running_mean_std.py),
    rewritten in numpy float64: the semantics NormalizeEnv promises."""

    def __init__(self, n, shape, gamma=0.99, clip_obs=10.0, clip_reward=10.0, epsilon=1e-8):
        self.mean, self.var, self.count = np.zeros(shape), np.ones(shape), 1e-4
        self.rmean, self.rvar, self.rcount = 0.0, 1.0, 1e-4
        self.returns = np.zeros(n)
        self.gamma, self.clip_obs, self.clip_reward, self.epsilon = gamma, clip_obs, clip_reward, epsilon

    @staticmethod
    def _update(mean, var, count, x):
        bm, bv, bc = x.mean(0), x.var(0), x.shape[0]
        delta, tot = bm - mean, count + bc
        m2 = var * count + bv * bc + delta ** 2 * count * bc / tot
        return mean + delta * bc / tot, m2 / tot, tot

    def obs(self, obs):
        self.mean, self.var, self.count = self._update(self.mean, self.var, self.count, obs)
        return self.norm(obs)

    def norm(self, obs):
        return np.clip((obs - self.mean) / np.sqrt(self.var + self.epsilon), -self.clip_obs, self.clip_obs)

    def reward(self, reward, done):
        self.returns = self.returns * self.gamma + reward
        self.rmean, self.rvar, self.rcount = self._update(self.rmean, self.rvar, self.rcount, self.returns)
        out = np.clip(reward / np.sqrt(self.rvar + self.epsilon), -self.clip_reward, self.clip_reward)
        self.returns[done] = 0
        return out


def test_running_mean_std_equals_the_statistics_of_all_samples():
    rms = RunningMeanStd((3,), torch.device("cpu"), epsilon=0.0)
    batches = [torch.randn(n, 3, dtype=torch.float64) * 4 + 2 for n in (5, 17, 1, 40)]
    for b in batches:
        rms.update(b)
    every = torch.cat(batches)
    torch.testing.assert_close(rms.mean, every.mean(0), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(rms.var, every.var(0, unbiased=False), rtol=1e-12, atol=1e-12)
    assert float(rms.count) == 63


def test_normalize_env_follows_vecnormalize_step_by_step():
    env = NormalizeEnv(6, "cpu", 3, env=lambda n, d, s: CartPoleEnv(n, d, s, max_episode_steps=30), gamma=0.9,
                       clip_obs=2.0, clip_reward=3.0)
    raw = CartPoleEnv(6, "cpu", 3, max_episode_steps=30)  # the same world, unwrapped, same seed
    ref = ReferenceVecNormalize(6, (4,), gamma=0.9, clip_obs=2.0, clip_reward=3.0)
    np.testing.assert_allclose(env.reset().numpy(), ref.obs(raw.reset().double().numpy()), rtol=1e-5, atol=1e-6)
    gen = torch.Generator().manual_seed(0)
    ended = 0
    for _ in range(80):
        action = torch.randint(0, 2, (6,), generator=gen)
        got, want = env.step(action), raw.step(action)
        done = (want.terminated | want.truncated).numpy()
        ended += int(done.sum())
        np.testing.assert_allclose(got.obs.numpy(), ref.obs(want.obs.double().numpy()), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got.final_obs.numpy(), ref.norm(want.final_obs.double().numpy()), rtol=1e-5,
                                   atol=1e-6)
        np.testing.assert_allclose(got.reward.numpy(), ref.reward(want.reward.double().numpy(), done), rtol=1e-5)
        assert torch.equal(got.terminated, want.terminated) and torch.equal(got.truncated, want.truncated)
    assert ended >= 10 and float(got.reward.max()) < 1.0  # episodes ended; rewards were scaled (raw reward is 1)
    assert float(env.obs_rms.count) == pytest.approx(1e-4 + 81 * 6)


def test_frozen_world_and_inference_normalizer_apply_the_same_numbers():
    env = NormalizeEnv(8, "cpu", 0, env=CartPoleEnv, clip_obs=1.5)
    env.reset()
    for _ in range(30):
        env.step(torch.randint(0, 2, (8,)))
    env.training = False
    frozen = {k: v.clone() for k, v in env.obs_rms.state_dict().items()}
    inference = ObsNormalizer(env.obs_rms.mean, env.obs_rms.var, env.epsilon, env.clip_obs)
    obs = torch.randn(64, 4) * 3
    assert torch.equal(env.normalize(obs), inference(obs))
    assert (inference(obs).abs() <= 1.5).all() and (inference(obs).abs() == 1.5).any()  # the clip acts
    env.step(torch.zeros(8, dtype=torch.long))
    assert all(torch.equal(frozen[k], v) for k, v in env.obs_rms.state_dict().items())  # frozen: no update


counter = test_hot_path.counter  # the fixture, shared


def test_the_wrapped_step_loop_never_reads_a_tensor_on_the_host(counter):  # noqa: F811
    from collections import Counter

    from parlightning.envs.swarm import SwarmEnv
    from parlightning.distribution.samplers import RoundRobin

    test_hot_path._collect(lambda num_envs, device, seed: NormalizeEnv(num_envs, device, seed, env=SwarmEnv), RoundRobin(), 2)
    assert counter.loops == 2 and counter.env_steps == 2 * 8
    assert counter.calls == Counter(), f"host syncs inside the step loop: {dict(counter.calls)}"


def test_bad_settings_are_one_error_naming_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"^NormalizeEnv.clip_obs: must be positive"):
        NormalizeEnv(2, env=CartPoleEnv, clip_obs=-1)
    with pytest.raises(ConfigError, match=r"^NormalizeEnv.gamma: must lie in \[0, 1\]"):
        NormalizeEnv(2, env=CartPoleEnv, gamma=1.5)
    cfg = tmp_path / "bad.yaml"
    bad = yaml.safe_load(yaml.safe_dump(NORMALIZED))
    bad["data"]["env"]["init_args"]["clip_reward"] = 0
    cfg.write_text(yaml.safe_dump(bad))
    with pytest.raises(SystemExit, match=r"^error: data\.env\.init_args\.clip_reward: must be positive"):
        fit_main(["--config", str(cfg), "--trainer.default_root_dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()  # nothing written


def _fit(root, config, *args):
    fit_main(["--config", str(config), "--trainer.default_root_dir", str(root), *args])
    return sorted(glob.glob(str(root / "checkpoints" / "*.ckpt")))


def _same(a, b, where="checkpoint"):
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert set(a) == set(b), (where, set(a) ^ set(b))
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


@pytest.fixture(scope="module")
def normalized_run(tmp_path_factory):
    """A real 2-iteration fit inside NormalizeEnv, and the same run cut after 1 iteration and resumed."""
    root = tmp_path_factory.mktemp("norm")
    config = root / "normalized.yaml"
    config.write_text(yaml.safe_dump(NORMALIZED))
    full = _fit(root / "full", config)
    _fit(root / "cut", config, "--trainer.max_epochs", "1")
    resumed = _fit(root / "cut", config, "--ckpt_path", str(root / "cut" / "checkpoints" / "last.ckpt"))
    return config, root / "full" / "checkpoints" / "last.ckpt", root / "cut" / "checkpoints" / "last.ckpt", full, resumed


def test_statistics_are_checkpointed_and_resume_exactly(normalized_run):
    _, full, resumed, *_ = normalized_run
    a, b = (torch.load(p, weights_only=True) for p in (full, resumed))
    world = a["RolloutDataModule"]["ranks"][0]["env"]
    assert set(world) >= {"env", "obs_rms", "ret_rms", "returns"}
    assert float(world["obs_rms"]["count"]) == pytest.approx(1e-4 + 8 * (1 + 2 * 16))  # reset + every step
    assert float(world["ret_rms"]["var"]) != 1.0 and world["returns"].shape == (8,)
    _same(a["RolloutDataModule"], b["RolloutDataModule"], "RolloutDataModule")  # statistics bit-exact
    _same(a["state_dict"], b["state_dict"], "state_dict")  # and the policy trained on them
    (first,) = glob.glob(str(resumed.parent / "epoch=0-*.ckpt"))  # what the cut run stopped at
    cut = torch.load(first, weights_only=True)
    before = cut["RolloutDataModule"]["ranks"][0]["env"]["obs_rms"]
    assert not torch.equal(before["mean"], world["obs_rms"]["mean"])  # they moved in the resumed iteration


PREDICT_AND_EXPORT = textwrap.dedent("""
    import json, sys, torch
    import parlightning
    from parlightning.cli.evaluate import build_env, env_spec, run_returns
    ckpt, config, program, out = sys.argv[1:]
    policy = parlightning.load_policy(ckpt)
    assert policy.normalizer is not None
    before = {k: v.clone() for k, v in policy.normalizer.state_dict().items()}
    cls, init_args = env_spec([config])
    env = build_env(cls, init_args, 4, 0, None, "cpu")  # evaluate's world: 4 episodes, seed 0
    returns = run_returns(env, policy.predict, 0)
    obs = torch.randn(512, 4) * torch.tensor([1.0, 1.5, 0.1, 1.5])
    exported = torch.export.load(program).module()(obs)
    raw = parlightning.Policy(policy.network).predict(obs)  # the same network without the statistics
    assert all(torch.equal(v, policy.normalizer.state_dict()[k]) for k, v in before.items())  # frozen
    json.dump({"mean_return": float(returns.mean()), "agree": int((exported == policy.predict(obs)).sum()),
               "differ_unnormalised": int((raw != policy.predict(obs)).sum()), "world": cls.__name__}, open(out, "w"))
""")


def test_evaluate_predict_and_export_apply_the_frozen_statistics_identically(normalized_run, tmp_path, capsys):
    from parlightning.cli.evaluate import main as evaluate_main
    from parlightning.cli.export import main as export_main

    config, ckpt, *_ = normalized_run
    export_main(["--ckpt_path", str(ckpt), "--out", str(tmp_path / "p.pt2")])
    assert "observations normalised inside" in capsys.readouterr().err
    evaluate_main(["--config", str(config), "--ckpt_path", str(ckpt), "--json", str(tmp_path / "e.json")])
    env = {**os.environ, "PYTHONPATH": os.path.abspath(ROOT)}
    done = subprocess.run([sys.executable, "-c", PREDICT_AND_EXPORT, str(ckpt), str(config), "p.pt2", "p.json"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # a fresh process
    assert done.returncode == 0, done.stderr
    got, evaluated = json.loads((tmp_path / "p.json").read_text()), json.loads((tmp_path / "e.json").read_text())
    assert got["world"] == "CartPoleEnv"  # evaluation runs the raw world; the policy normalises
    assert got["mean_return"] == evaluated["mean_return"]
    assert got["agree"] == 512  # the exported program matches predict on every action
    assert got["differ_unnormalised"] > 0  # and the statistics matter


def test_off_by_default_nothing_is_normalised(tmp_path):
    from parlightning.cli.export import load_normalizer

    _fit(tmp_path, CARTPOLE, "--trainer.max_epochs", "1", "--data.num_envs", "4", "--data.num_steps", "8",
         "--trainer.logger", "false", "--trainer.enable_progress_bar", "false")
    (ckpt,) = glob.glob(str(tmp_path / "checkpoints" / "*.ckpt"))
    checkpoint = torch.load(ckpt, weights_only=True)
    assert "obs_rms" not in checkpoint["RolloutDataModule"]["ranks"][0]["env"]
    assert normalizer_from_checkpoint(checkpoint) is None and load_normalizer(ckpt) is None


def test_onnx_export_carries_the_statistics_too(normalized_run, tmp_path):
    onnx = pytest.importorskip("onnx", reason="the onnx extra: pip install parlightning[onnx]")
    pytest.importorskip("onnxscript", reason="the onnx extra: pip install parlightning[onnx]")
    from onnx.reference import ReferenceEvaluator

    import parlightning
    from parlightning.cli.export import main as export_main

    _, ckpt, *_ = normalized_run
    export_main(["--ckpt_path", str(ckpt), "--out", str(tmp_path / "p.onnx")])
    policy = parlightning.load_policy(ckpt)
    obs = torch.randn(256, 4) * torch.tensor([1.0, 1.5, 0.1, 1.5])
    (actions,) = ReferenceEvaluator(onnx.load(tmp_path / "p.onnx")).run(None, {"obs": obs.numpy()})
    assert torch.equal(torch.from_numpy(actions), policy.predict(obs))
    assert not torch.equal(parlightning.Policy(policy.network).predict(obs), policy.predict(obs))
