"""The serial prior (`model.prior`, behaviour cloning via `model.init_from`), `rollout/delegation_share`
and the round-optimal scripted oracle."""

import lightning.pytorch as pl
import pytest
import torch

from parlightning.ppo.data import RolloutDataModule
from parlightning.envs.swarm import SwarmEnv
from parlightning.errors import ConfigError
from parlightning.cli.evaluate import run_episodes, summarise
from parlightning.ppo.module import PPOModule, delegation_share


def _env(num_envs, device, seed):
    return SwarmEnv(num_envs=num_envs, device=device, seed=seed)


def _fit(tmp_path, module, epochs=1, **dm):
    pl.seed_everything(0)
    data = RolloutDataModule(env=_env, num_envs=16, num_steps=8, update_epochs=1, num_minibatches=2, **dm)
    pl.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False, default_root_dir=tmp_path).fit(module, datamodule=data)
    return data


def _built(policy, prior):
    module = PPOModule(policy=policy, prior=prior)
    env = SwarmEnv(num_envs=4)
    pl.seed_everything(0)
    net = module.build_policy(env.observation_shape, env.action_spec)
    if prior is not None:
        from parlightning.ppo.module import apply_prior

        apply_prior(net, prior)
    return net, env


@pytest.mark.parametrize("policy", ["mlp", "slots", "gru"])
def test_no_prior_gives_bit_identical_weights_and_a_prior_sets_the_initial_probability(policy):
    plain, _ = _built(policy, None)
    pl.seed_everything(0)
    env = SwarmEnv(num_envs=4)
    again = PPOModule(policy=policy).build_policy(env.observation_shape, env.action_spec)
    for (k, a), (_, b) in zip(plain.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), k
    net, env = _built(policy, {"action": 0, "probability": 0.998})
    obs = env.reset(seed=0)
    with torch.no_grad():
        if policy == "gru":
            feats, _ = net.unroll(obs.unsqueeze(1), net.initial_state(4), torch.ones(4, 1, dtype=torch.bool))
            logits = net.actor(feats[:, 0])
        else:
            logits = net.action_logits(obs)
        p0 = net.head.probabilities(logits)[..., 0]
    assert torch.allclose(p0, torch.full_like(p0, 0.998), atol=2e-4)
    # an ordinary trainable bias: the only parameter that differs from the plain init
    changed = [k for k, v in net.state_dict().items() if not torch.equal(v, plain.state_dict()[k])]
    assert len(changed) == 1 and changed[0].endswith("bias") and net.prior_layer().bias.requires_grad


def test_delegation_share_is_the_share_of_live_decisions_that_delegate(tmp_path):
    dm = _fit(tmp_path, PPOModule(anneal_lr=False))
    buf = dm.collector.loop.buffer
    live = buf.masks
    want = float(((buf.actions > 0) & live).sum()) / float(live.sum())
    assert float(delegation_share(buf)) == pytest.approx(want)
    assert 0.75 < want < 0.95  # a fresh policy delegates ~6/7 of the time
    serial = _fit(tmp_path, PPOModule(anneal_lr=False, prior=0.998))
    assert float(delegation_share(serial.collector.loop.buffer)) < 0.02


def test_delegation_share_reaches_tensorboard(tmp_path):
    from parlightning.cli.fit import main
    from parlightning.analysis.logs import read_scalars
    import glob
    import os

    cfg = os.path.join(os.path.dirname(__file__), "..", "configs", "swarm.yaml")
    main(["--config", cfg, "--trainer.max_epochs", "2", "--data.num_envs", "16", "--data.num_steps", "8",
          "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
          "--trainer.default_root_dir", str(tmp_path), "--model.prior", "0.9"])
    (events,) = glob.glob(str(tmp_path / "lightning_logs" / "version_0"))
    scalars = read_scalars(events)
    share = scalars["rollout/delegation_share"]
    assert len(share) == 2 and all(0.0 < v < 0.3 for _, v in share)


@pytest.mark.parametrize("prior, match", [
    (1.0, "strictly between 0 and 1"), (0.0, "strictly between 0 and 1"), ("x", "strictly between"),
    ({"probability": 0.9, "bias": 1}, "unknown or missing keys"), ({"action": -1, "probability": 0.9}, "action index"),
])
def test_bad_priors_are_one_config_error(prior, match):
    with pytest.raises(ConfigError, match=match):
        PPOModule(prior=prior)


def test_a_prior_action_outside_the_world_and_a_prior_with_init_from_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="not an action of every dimension"):
        _fit(tmp_path, PPOModule(prior={"action": 7, "probability": 0.9}))
    ckpt = tmp_path / "w.ckpt"
    torch.save({"state_dict": {}}, ckpt)
    with pytest.raises(ConfigError, match="give one"):
        PPOModule(prior=0.9, init_from=str(ckpt))
    with pytest.raises(ConfigError, match="no checkpoint file"):
        PPOModule(init_from=str(tmp_path / "missing.ckpt"))
    with pytest.raises(ConfigError, match="holds no policy weights"):
        _fit(tmp_path, PPOModule(init_from=str(ckpt)))


def _scripted(name, seed=0, split="heldout", bank_seed=1234):
    env = SwarmEnv(num_envs=64 * 2, seed=seed, split=split, bank_seed=bank_seed)
    return run_episodes(env, lambda o: env.scripted_action(name, o), seed), env


@pytest.mark.parametrize("split, bank_seed", [("heldout", 1234), ("train", 1234), ("heldout", 2234)])
def test_round_optimal_oracle_beats_the_built_in_oracle(split, bank_seed):
    serial, env = _scripted("serial", split=split, bank_seed=bank_seed)
    oracle = summarise(_scripted("oracle", split=split, bank_seed=bank_seed)[0], serial, 1.0)
    best = summarise(_scripted("optimal", split=split, bank_seed=bank_seed)[0], serial, 1.0)
    assert best["speedup_vs_serial"] > oracle["speedup_vs_serial"] + 0.05
    assert best["success_rate"] >= oracle["success_rate"]
    assert best["speedup_vs_serial"] > 3.0


def test_round_optimal_oracle_never_delegates_local_work_and_briefs_exactly_hard_work():
    env = SwarmEnv(num_envs=256, seed=1)
    obs = env.reset(seed=1)
    for _ in range(4):
        a = env.scripted_action("optimal", obs)
        W, S = env.max_width, len(env.splits)
        kind = obs[:, :W, 2:5].argmax(-1)
        pending = obs[:, :W, 0] > 0
        assert (a[~pending] == 0).all()
        assert (a[kind == 2] == 0).all()  # LOCAL
        delegated = a > 0
        assert ((a[delegated] > S) == (kind[delegated] == 1)).all()  # briefed iff HARD
        obs = env.step(a).obs


CONFIG = __import__("os").path.join(__import__("os").path.dirname(__file__), "..", "configs", "swarm.yaml")


def test_behaviour_cloning_on_serial_writes_a_checkpoint_ppo_starts_from(tmp_path, capsys):
    from parlightning.cli.bc import main as bc_main

    out = tmp_path / "bc.ckpt"
    report = bc_main(["--config", CONFIG, "--teacher", "serial", "--out", str(out), "--rounds", "4", "--num_envs",
                      "64", "--epochs", "40", "--label_smoothing", "0.002", "--minibatch", "256", "--lr", "0.003"])
    printed = capsys.readouterr().out
    assert "BC loss" in printed and "action distribution" in printed
    assert report["bc_loss"] < 0.5 * report["bc_loss_first_epoch"]
    assert report["greedy_agreement"] == 1.0 and report["mean_action_probability"][0] > 0.99
    assert report["teacher_action_share"][0] == 1.0
    ckpt = torch.load(out, weights_only=True)
    assert ckpt["bc"]["bc_loss"] == report["bc_loss"] and ckpt["policy_spaces"]["action_mask_width"] == 12
    module = PPOModule(anneal_lr=False, init_from=str(out))
    dm = _fit(tmp_path, module)
    weights = {k[len("policy."):]: v for k, v in ckpt["state_dict"].items()}
    fresh = PPOModule(anneal_lr=False).build_policy(dm.collector.env.observation_shape, dm.collector.env.action_spec)
    fresh.load_state_dict(weights)
    assert float(delegation_share(dm.collector.loop.buffer)) < 0.1  # the first rollout acts with the cloned prior (fresh: ~0.87)
    with torch.no_grad():  # ... and the run started from exactly those weights (one update since)
        obs = dm.collector.loop.buffer.obs[0]
        lp_clone = fresh.evaluate(obs, dm.collector.loop.buffer.actions[0], mask=dm.collector.loop.buffer.masks[0])[0]
        torch.testing.assert_close(lp_clone, dm.collector.loop.buffer.logprobs[0])


@pytest.mark.parametrize("args, match", [
    (["--teacher", "nobody"], "argument --teacher: must be one of serial, oracle, optimal, random or a .ckpt file"),
    (["--label_smoothing", "1.0"], "argument --label_smoothing: must be a number in [0, 1)"),
    (["--epochs", "0"], "argument --epochs: must be a positive integer"),
    (["--out", "/nonexistent/dir/x.ckpt"], "argument --out: the folder of '/nonexistent/dir/x.ckpt'"),
])
def test_behaviour_cloning_bad_arguments_are_one_error_line(tmp_path, capsys, args, match):
    from parlightning.cli.bc import main as bc_main

    base = {"--out": str(tmp_path / "x.ckpt"), "--teacher": "serial"}
    argv = ["--config", CONFIG]
    given = dict(zip(args[::2], args[1::2]))
    for k, v in {**base, **given}.items():
        argv += [k, v]
    with pytest.raises(SystemExit) as stop:
        bc_main(argv + ["--rounds", "1", "--num_envs", "8"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and lines[-1].startswith(f"python -m parlightning.bc: error: {match}"), lines
    assert not any(line.startswith("Traceback") for line in lines)
    assert not (tmp_path / "x.ckpt").exists()
