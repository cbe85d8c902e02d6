"""The Lightning side: on-policy data, a short fit that learns, the CLI and its bad-input errors."""

import glob
import os

import lightning.pytorch as pl
import torch
import pytest
import yaml

from parlightning.ppo.data import RolloutDataModule
from parlightning.envs.swarm import SwarmEnv
from parlightning.cli.fit import main
from parlightning.analysis.logs import read_scalars
from parlightning.ppo.module import PPOModule

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
        # ... and that rollout was collected by the policy as it stood when the epoch began: the
        # version counts PPO iterations (policy updates), as under a lag budget
        assert rollout.policy_version == trainer.current_epoch
        if batch_idx == 0:
            assert trainer.global_step == trainer.current_epoch * len(trainer.train_dataloader)
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
    assert all(b["obs"].shape == (16, *dm.collector.env.observation_shape) for b in batches)


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


# --------------------------------------------------------------------------------------- lr, target KL
class LrAndBatches(pl.Callback):
    """Per epoch: the lr the optimizer steps with and the number of minibatches trained."""

    def __init__(self):
        self.lrs, self.batches = [], []

    def on_train_epoch_start(self, trainer, pl_module):
        self.batches.append(0)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == 0:
            self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])
        self.batches[-1] += 1


def test_lr_anneals_from_the_iteration_count_even_when_target_kl_cuts_every_update(tmp_path):
    """A tiny target_kl stops every rollout's update after its first update epoch, epoch 0 alike
    (CleanRL: checked after each update epoch); the lr still anneals 1, 2/3, 1/3 (it used to stay at
    its initial value: the epoch-interval scheduler never stepped on a cut-short epoch)."""
    dm = RolloutDataModule(env=small_env(), num_envs=8, num_steps=4, update_epochs=3, num_minibatches=2)
    rec = LrAndBatches()
    _trainer(tmp_path, 3, [rec]).fit(PPOModule(lr=1e-3, target_kl=1e-9), datamodule=dm)
    assert rec.batches == [2, 2, 2]  # one update epoch of 2 minibatches per rollout, never cut mid-epoch
    assert rec.lrs == pytest.approx([1e-3, 1e-3 * 2 / 3, 1e-3 / 3], rel=1e-12)


def test_a_resume_with_a_larger_max_epochs_continues_the_anneal_over_the_new_horizon(tmp_path):
    """The lr is a function of the iteration count and trainer.max_epochs alone: iterations 2 and 3
    of a run resumed with max_epochs 4 run at lr x (1 - 2/4) and lr x (1 - 3/4), not at 0, and
    the checkpoint holds no lr scheduler that could disagree."""
    def dm():
        return RolloutDataModule(env=small_env(), num_envs=8, num_steps=4, update_epochs=1, num_minibatches=1)

    first = LrAndBatches()
    trainer = _trainer(tmp_path, 2, [first])
    trainer.fit(PPOModule(lr=1e-3), datamodule=dm())
    assert first.lrs == pytest.approx([1e-3, 5e-4], rel=1e-12)
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    assert not torch.load(tmp_path / "last.ckpt", weights_only=True)["lr_schedulers"]
    resumed = LrAndBatches()
    _trainer(tmp_path, 4, [resumed]).fit(PPOModule(lr=1e-3), datamodule=dm(), ckpt_path=str(tmp_path / "last.ckpt"))
    assert resumed.lrs == pytest.approx([1e-3 * 2 / 4, 1e-3 * 1 / 4], rel=1e-12)


def test_target_kl_stop_takes_effect_only_between_update_epochs(tmp_path):
    """The loader honours a stop only at an update-epoch boundary, whichever epoch it came in."""
    dm = RolloutDataModule(env=small_env(), num_envs=8, num_steps=4, update_epochs=3, num_minibatches=4)
    _trainer(tmp_path, 1).fit(PPOModule(anneal_lr=False), datamodule=dm)
    yielded = {}
    for stop_after in (1, 5, 9):  # mid update-epoch 0, 1 and 2
        n = 0
        for n, _ in enumerate(dm.train_dataloader(), start=1):
            if n == stop_after:
                dm.stop_update = True  # what PPOModule sets when the KL is exceeded
        yielded[stop_after] = n
    assert yielded == {1: 4, 5: 8, 9: 12}


def test_a_finished_run_extended_with_ckpt_path_continues_the_anneal_not_at_lr_0(tmp_path):
    args = ["--config", CONFIG, "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
            "--data.num_envs", "8", "--data.num_steps", "4", "--data.update_epochs", "1", "--data.num_minibatches", "1",
            "--trainer.default_root_dir", str(tmp_path)]
    main([*args, "--trainer.max_epochs", "2"])
    ckpt = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    main([*args, "--trainer.max_epochs", "4", "--ckpt_path", str(ckpt)])
    lrs = [v for _, v in read_scalars(str(tmp_path / "lightning_logs" / "version_1"))["charts/learning_rate"]]
    assert lrs == pytest.approx([1e-3 * (1 - 2 / 4), 1e-3 * (1 - 3 / 4)])  # the anneal over the new max_epochs


# --------------------------------------------------------------------------------------- logging, seeding
def test_no_episodic_return_is_logged_when_no_episode_finished(tmp_path):
    from parlightning.envs.cartpole import CartPoleEnv

    env = lambda n, device, seed: CartPoleEnv(n, device, seed)  # noqa: E731  (no episode ends within 4 steps)
    dm = RolloutDataModule(env=env, num_envs=4, num_steps=4, update_epochs=1, num_minibatches=1)
    trainer = _trainer(tmp_path, 1)
    trainer.fit(PPOModule(anneal_lr=False), datamodule=dm)
    assert float(dm.last_rollout.stats["rollout/episodes"]) == 0
    assert "charts/episodic_return" not in dm.last_rollout.stats  # not a made-up 0
    assert "charts/episodic_return" not in trainer.logged_metrics and "rollout/episodes" in trainer.logged_metrics


def test_env_action_task_and_minibatch_streams_are_distinct_for_every_consumer_and_rank():
    seen = []

    def env(n, device, seed):
        seen.append(seed)
        return SwarmEnv(num_envs=n, device=device, seed=seed)

    streams = []
    for rank in (0, 1):
        dm = RolloutDataModule(env=env, num_envs=4, num_steps=2, update_epochs=1, num_minibatches=1, seed=3)
        dm.build(torch.device("cpu"), rank)
        c, loop = dm.collector, dm.collector.loop
        assert seen[-1] == loop.env_seed and c.env.generator.initial_seed() == loop.env_seed
        streams += [loop.env_seed] + [g.initial_seed() for g in (loop.action_generator, c.task_generator,
                                                                   c.minibatch_generator)]
        # the env's first draws are not the numbers that choose the actions
        env_draws = torch.rand(8, generator=torch.Generator().manual_seed(loop.env_seed))
        action_draws = torch.rand(8, generator=torch.Generator().manual_seed(loop.action_generator.initial_seed()))
        assert not torch.equal(env_draws, action_draws)
    assert len(set(streams)) == 8, streams


# --------------------------------------------------------------------------------------- action spaces
class BoxEnv:
    """A tiny continuous world: obs [N, 3], actions Box of shape (2, 2); reward -|a|^2, 5-step episodes."""

    def __init__(self, num_envs, device="cpu", seed=0):
        from parlightning.envs.base import ActionSpec

        self.num_envs, self.device = num_envs, torch.device(device)
        self.observation_shape, self.action_spec = (3,), ActionSpec("continuous", shape=(2, 2), low=-1.0, high=1.0)
        self.t = torch.zeros(num_envs)
        self.actions = []

    def reset(self, *, seed=None, task_index=None):
        self.t.zero_()
        return torch.zeros(self.num_envs, 3)

    def step(self, action, next_task=None):
        from parlightning.envs.base import StepResult

        assert action.shape == (self.num_envs, 2, 2)
        self.actions.append(action.clone())
        self.t += 1
        done = self.t >= 5
        obs = torch.stack([self.t / 5, action[:, 0, 0], action[:, 1, 1]], 1)
        self.t = torch.where(done, torch.zeros_like(self.t), self.t)
        return StepResult(obs, -(action ** 2).sum((1, 2)), done, torch.zeros_like(done), obs.clone())

    def state_dict(self):
        return {"t": self.t.clone()}

    def load_state_dict(self, state):
        self.t = state["t"].clone()


def test_a_continuous_box_with_several_dimensions_trains_end_to_end(tmp_path):
    envs = []

    def factory(n, device, seed):
        envs.append(BoxEnv(n, device, seed))
        return envs[-1]

    dm = RolloutDataModule(env=factory, num_envs=8, num_steps=5, update_epochs=2, num_minibatches=2)
    module = PPOModule(anneal_lr=False, lr=1e-2)
    _trainer(tmp_path, 3).fit(module, datamodule=dm)
    assert dm.collector.loop.buffer.actions.shape == (5, 8, 2, 2)
    torch.testing.assert_close(dm.collector.loop.buffer.actions[-1], envs[-1].actions[-1])  # stored as the env got them
    logprob, entropy, _ = module.policy.evaluate(dm.collector.loop.buffer.obs[-1], dm.collector.loop.buffer.actions[-1])
    assert logprob.shape == entropy.shape == (8,) and torch.isfinite(logprob).all()


def test_padded_multi_discrete_logits_stay_finite_in_half_precision():
    """-1e9 is -inf in fp16, and -inf * 0 is NaN in the entropy; the padding logit is dtype-aware."""
    from parlightning.envs.base import ActionSpec
    from parlightning.policies.actor_critic import CategoricalHead, padding_logit

    assert padding_logit(torch.float16) == torch.finfo(torch.float16).min / 2
    head = CategoricalHead(ActionSpec("multi_discrete", nvec=(3, 5, 2)).nvec)
    logits = (torch.randn(64, 10) * 4).half()
    logp = head._log_probs(logits)
    assert logp.dtype == torch.float16 and torch.isfinite(logp).all()
    action, chosen = head.sample(logits, torch.Generator().manual_seed(0))
    assert (action < torch.tensor([3, 5, 2])).all()  # never a padded category
    logprob, entropy = head.log_prob_entropy(logits, action)
    assert torch.isfinite(logprob).all() and torch.isfinite(entropy).all()
    reference, ref_entropy = head.log_prob_entropy(logits.float(), action)
    torch.testing.assert_close(entropy.float(), ref_entropy, atol=2e-2, rtol=2e-2)


# --------------------------------------------------------------------------------------- preemption
def test_sigterm_keeps_the_last_checkpoint_and_exits_143(tmp_path):
    """A real process gets SIGTERM mid-run: it stops with 143 (not 0, so SLURM requeues) and the
    checkpoint of the last finished iteration is intact and resumable."""
    import signal
    import subprocess
    import sys
    import time

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "parlightning.fit", "--config", CONFIG, "--trainer.max_epochs", "100000",
           "--trainer.enable_progress_bar", "false", "--data.num_envs", "8", "--data.num_steps", "4",
           "--data.update_epochs", "1", "--data.num_minibatches", "1", "--trainer.default_root_dir", str(tmp_path)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    last = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + 120
    while not last.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert last.exists(), proc.stderr.read() if proc.poll() is not None else "no checkpoint within 120 s"
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    assert "SIGTERM" in err and "--ckpt_path" in err
    ckpt = torch.load(last, weights_only=True)
    assert ckpt["epoch"] >= 0 and all(torch.isfinite(v).all() for v in ckpt["state_dict"].values())
    assert not list(tmp_path.rglob("*.partial"))
