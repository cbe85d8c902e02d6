"""Recurrent policies (GRU/LSTM) with per-actor BPTT: hidden state reset exactly at episode starts,
sequences that line up (the update's recomputed log-probs equal the rollout's), chunks never
shuffled across time, a fit on a memory task, exact resume of the hidden state, clear config errors."""

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from test_hot_path import counter  # noqa: F401  (the host-sync counter fixture)

from parlightning.buffer import RolloutBuffer
from parlightning.ppo.data import RolloutDataModule
from parlightning.envs.base import ActionSpec
from parlightning.envs.memory import CueMemoryEnv
from parlightning.envs.swarm import SwarmEnv
from parlightning.cli.fit import main
from parlightning.ppo.module import PPOModule
from parlightning.policies.recurrent import RecurrentActorCritic

TESTS = Path(__file__).parent
MEMORY_CONFIG = str(TESTS.parent / "configs" / "memory.yaml")
CELLS = ["gru", "lstm"]


def _trainer(epochs, callbacks=()):
    return pl.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, callbacks=list(callbacks))


def _swarm(num_envs, device, seed):
    return SwarmEnv(num_envs=num_envs, device=device, seed=seed, families=("solo", "fanout"))


def _sharpen(policy):
    """Large head weights, so a wrong hidden state moves log-probs and values far above float noise."""
    with torch.no_grad():
        torch.nn.init.normal_(policy.actor.weight, std=2.0)
        torch.nn.init.normal_(policy.critic.weight, std=2.0)


# ------------------------------------------------------------------ the policy on its own
@pytest.mark.parametrize("cell", CELLS)
def test_state_is_reset_exactly_where_an_episode_starts_and_actors_never_mix(cell):
    torch.manual_seed(0)
    policy = RecurrentActorCritic((5,), ActionSpec("discrete", nvec=(3,)), (8,), 6, cell)
    assert policy.initial_state(4).shape == (4, 2 if cell == "lstm" else 1, 6)
    obs, state = torch.randn(4, 5), torch.randn(4, policy.state_layers, 6)
    start = torch.tensor([False, True, False, True])
    gen = torch.Generator().manual_seed(1)
    _, logprob, value, new = policy.act(obs, gen, state, start)
    for i in range(4):  # each actor alone: a reset row equals a fresh state, the others keep theirs
        own = policy.initial_state(1) if start[i] else state[i : i + 1]
        _, _, v, s = policy.act(obs[i : i + 1], None, own, torch.tensor([False]))
        torch.testing.assert_close(s, new[i : i + 1], rtol=0, atol=1e-6)
        torch.testing.assert_close(v, value[i : i + 1], rtol=0, atol=1e-6)
    kept = policy.act(obs, None, state, torch.zeros(4, dtype=torch.bool))[3]
    assert not torch.allclose(kept[1], new[1], atol=1e-3)  # the reset did change the started rows


@pytest.mark.parametrize("cell", CELLS)
def test_a_sequence_unrolled_at_once_equals_step_by_step_with_resets(cell):
    torch.manual_seed(0)
    policy = RecurrentActorCritic((3,), ActionSpec("continuous", shape=(2,)), (8,), 5, cell)
    B, L = 3, 6
    obs, actions = torch.randn(B, L, 3), torch.randn(B, L, 2)
    start = torch.rand(B, L) < 0.3
    state0 = torch.randn(B, policy.state_layers, 5)
    logprob, entropy, value = policy.evaluate_sequences(obs, actions, start, state0)
    assert logprob.shape == entropy.shape == value.shape == (B, L)
    state = state0
    for t in range(L):
        v = policy.value(obs[:, t], state, start[:, t])
        torch.testing.assert_close(v, value[:, t], rtol=0, atol=1e-5)
        state = policy.act(obs[:, t], None, state, start[:, t])[3]


# ------------------------------------------------------------------ the buffer's sequences
def test_sequences_are_whole_per_actor_chunks_in_time_order_and_each_is_trained_once_per_epoch():
    T, N, L = 8, 3, 4
    buf = RolloutBuffer(T, N, (2,), (), torch.device("cpu"))
    buf.allocate_memory((1, 5))
    t, n = torch.meshgrid(torch.arange(T), torch.arange(N), indexing="ij")
    buf.obs.copy_(torch.stack((t, n), -1).float())
    buf.logprobs.copy_(t * 10.0 + n)
    buf.states.copy_((t * 10.0 + n)[:, :, None, None].expand(T, N, 1, 5))
    seq = buf.sequences(L)
    assert seq["obs"].shape == (T // L * N, L, 2) and seq["state0"].shape == (T // L * N, 1, 5)
    for j in range(T // L * N):
        c, actor = divmod(j, N)
        assert seq["obs"][j, :, 0].tolist() == list(range(c * L, c * L + L))  # consecutive steps, in order
        assert set(seq["obs"][j, :, 1].tolist()) == {actor}  # one actor
        assert seq["logprobs"][j].tolist() == [10.0 * s + actor for s in range(c * L, c * L + L)]
        assert torch.all(seq["state0"][j] == 10.0 * c * L + actor)  # the state its first step started from
    gen = torch.Generator().manual_seed(0)
    epochs = Counter()
    for epoch, idx in buf.minibatch_indices(2, 3, gen, rows=T // L * N):
        assert idx.numel() == 2
        epochs.update((epoch, int(i)) for i in idx)
    assert epochs == Counter({(e, j): 1 for e in range(2) for j in range(T // L * N)})


# ------------------------------------------------------------------ rollout <-> update agreement
@pytest.mark.parametrize("cell", CELLS)
def test_the_update_recomputes_the_rollouts_logprobs_and_values_exactly(tmp_path, cell):
    pl.seed_everything(0)
    dm = RolloutDataModule(env=_swarm, num_envs=12, num_steps=12, update_epochs=2, num_minibatches=3, bptt_len=4)
    module = PPOModule(anneal_lr=False, policy=cell, hidden_sizes=(16,), rnn_hidden=8)
    _trainer(2).fit(module, datamodule=dm)  # two rollouts in: the carried state is no longer fresh
    policy = module.policy
    _sharpen(policy)
    batches = list(dm.train_dataloader())  # a fresh rollout by this policy; no gradient step since
    buf = dm.collector.loop.buffer
    assert len(batches) == 2 * 3 and batches[0]["obs"].shape[:2] == (12, 4)
    inside = torch.ones(12, dtype=torch.bool)
    inside[::4] = False
    assert buf.episode_start[inside].any() and buf.episode_start[::4].any()  # resets inside and at chunk starts
    assert batches[0]["state0"].abs().sum() > 0  # chunks start from carried, non-zero states
    mismatch = 0.0
    with torch.no_grad():
        for b in batches:
            mask = b["masks"]  # SwarmEnv's action masks, stored per step: the log-probs were taken under them
            logprob, _, value = policy.evaluate_sequences(b["obs"], b["actions"], b["episode_start"], b["state0"], mask)
            torch.testing.assert_close(logprob, b["logprobs"], rtol=0, atol=1e-4)
            torch.testing.assert_close(value, b["values"], rtol=0, atol=1e-4)
            # the check has teeth: a wrong initial state or forgotten resets move the numbers a lot
            obs, actions, start, state0 = b["obs"], b["actions"], b["episode_start"], b["state0"]
            wrong0 = policy.evaluate_sequences(obs, actions, start, torch.zeros_like(state0), mask)
            no_reset = policy.evaluate_sequences(obs, actions, torch.zeros_like(start), state0, mask)
            mismatch = max(mismatch, (wrong0[0] - b["logprobs"]).abs().max(), (no_reset[0] - b["logprobs"]).abs().max())
    assert mismatch > 0.1


def test_episode_start_is_the_previous_steps_done_and_every_actor_starts_at_the_first_step(tmp_path):
    pl.seed_everything(0)
    dm = RolloutDataModule(env=_swarm, num_envs=8, num_steps=6, update_epochs=1, num_minibatches=2)
    rounds = []

    class Keep(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if batch_idx == 0:  # this epoch's rollout has been collected
                buf = trainer.datamodule.collector.loop.buffer
                rounds.append((buf.episode_start.clone(), buf.done.clone()))

    _trainer(2, [Keep()]).fit(PPOModule(anneal_lr=False, policy="gru", hidden_sizes=(16,), rnn_hidden=8), datamodule=dm)
    (start0, done0), (start1, done1) = rounds
    assert start0[0].all()
    assert torch.equal(start0[1:], done0[:-1]) and torch.equal(start1[1:], done1[:-1])
    assert torch.equal(start1[0], done0[-1])  # carried across rollouts
    assert done0.any() and not done0.all()


def _truncating_swarm(num_envs, device, seed):
    """A two-step limit: many episodes end truncated."""
    return SwarmEnv(num_envs=num_envs, device=device, seed=seed, families=("pipeline",), max_episode_steps=2,
                    round_cap="truncation")  # the cap as a truncation (the default ends capped episodes)


def test_truncated_episodes_bootstrap_from_the_state_after_their_last_step(tmp_path):
    pl.seed_everything(0)
    dm = RolloutDataModule(env=_truncating_swarm, num_envs=16, num_steps=16, update_epochs=1, num_minibatches=1)
    module = PPOModule(anneal_lr=False, policy="lstm", hidden_sizes=(16,), rnn_hidden=8)
    _trainer(1).fit(module, datamodule=dm)
    policy, buf = module.policy, dm.collector.loop.buffer
    _sharpen(policy)
    next(iter(dm.train_dataloader()))  # a fresh rollout by this very policy
    with torch.inference_mode():
        values = dm.collector.memory.truncated_values()
        where = buf.truncated.nonzero().tolist()
        assert where, "the test needs truncated episodes"
        for t, n in where:
            row = slice(n, n + 1)
            after = policy.act(buf.obs[t, row], None, buf.states[t, row], buf.episode_start[t, row])[3]
            expected = policy.value(buf.final_obs[t, row], after, torch.tensor([False]))
            torch.testing.assert_close(values[t, row], expected, rtol=0, atol=1e-5)


def test_the_recurrent_step_loop_never_reads_a_tensor_on_the_host(counter):  # noqa: F811
    dm = RolloutDataModule(env=lambda n, d, s: SwarmEnv(num_envs=n, device=d, seed=s), num_envs=16, num_steps=8,
                           update_epochs=1, num_minibatches=2, bptt_len=4)
    _trainer(2).fit(PPOModule(anneal_lr=False, policy="gru", hidden_sizes=(16,), rnn_hidden=8), datamodule=dm)
    assert counter.loops == 2 and counter.env_steps == 2 * 8
    assert counter.calls == Counter(), f"host syncs inside the recurrent step loop: {dict(counter.calls)}"


# ------------------------------------------------------------------ learning
def test_a_short_recurrent_fit_solves_the_memory_task_an_mlp_cannot(tmp_path):
    returns = []

    class Returns(pl.Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            returns.append(float(trainer.datamodule.last_rollout.stats["charts/episodic_return"]))

    pl.seed_everything(0)
    env = lambda n, d, s: CueMemoryEnv(n, d, s, n_cues=2, delay=3)  # noqa: E731
    dm = RolloutDataModule(env=env, num_envs=64, num_steps=16, update_epochs=4, num_minibatches=4, bptt_len=8)
    module = PPOModule(lr=3e-3, anneal_lr=False, policy="gru", hidden_sizes=(32,), rnn_hidden=32, activation="relu")
    _trainer(12, [Returns()]).fit(module, datamodule=dm)
    assert returns[0] < 0.65  # chance: the cue is gone by the query step
    assert sum(returns[-3:]) / 3 > 0.9, returns


# ------------------------------------------------------------------ checkpoints and config
def _cli(root, *extra):
    return main(["--config", MEMORY_CONFIG, "--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar",
                 "false", "--trainer.enable_model_summary", "false", "--data.num_envs", "8", "--data.num_steps", "8",
                 "--data.bptt_len", "4", "--data.update_epochs", "1", "--data.num_minibatches", "2", *extra])


def _last(root):
    return torch.load(Path(root) / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)


def test_a_resumed_recurrent_run_keeps_every_actors_hidden_state_and_equals_an_uninterrupted_one(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    full = _cli(tmp_path / "full", "--trainer.max_epochs", "3")
    _cli(tmp_path / "cut", "--trainer.max_epochs", "3", "--trainer.callbacks+=reliability_helpers.StopAfter")
    cut = _last(tmp_path / "cut")
    saved = cut["RolloutDataModule"]["ranks"][0]["memory"]
    assert saved["state"].shape == (8, 1, 64) and saved["state"].abs().sum() > 0
    resumed = _cli(tmp_path / "cut", "--trainer.max_epochs", "3", "--ckpt_path",
                   str(tmp_path / "cut" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"))
    assert resumed.datamodule.round_index == full.datamodule.round_index == 3
    torch.testing.assert_close(resumed.datamodule.collector.memory.state, full.datamodule.collector.memory.state, rtol=0, atol=0)
    for (name, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name


@pytest.mark.parametrize(
    "args, field",
    [
        (["--model.policy", "transformer"], "model.policy"),
        (["--model.rnn_hidden", "0"], "model.rnn_hidden"),
        (["--data.bptt_len", "3"], "data.bptt_len"),  # does not divide num_steps = 8
        (["--data.num_envs", "6", "--data.num_minibatches", "8"], "data.num_minibatches"),  # 12 sequences
    ],
)
def test_bad_recurrent_config_is_one_clear_error_and_nothing_is_written(tmp_cwd, capsys, args, field):
    with pytest.raises(SystemExit) as exit_:
        _cli(tmp_cwd, "--trainer.max_epochs", "1", *args)
    message = str(exit_.value.code) + capsys.readouterr().err
    assert field in message and "Traceback" not in message
    assert not (tmp_cwd / "lightning_logs").exists()


def test_two_rank_ddp_fit_checkpoints_each_ranks_hidden_states(tmp_path):
    env = dict(os.environ)
    env.pop("PL_DISABLE_FORK", None)
    cmd = [sys.executable, "-m", "parlightning.fit", "--config", MEMORY_CONFIG, "--trainer.default_root_dir",
           str(tmp_path), "--trainer.devices", "2", "--trainer.strategy", "ddp", "--trainer.max_epochs", "2",
           "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false", "--data.num_envs", "8",
           "--data.num_steps", "8", "--data.bptt_len", "4", "--data.update_epochs", "1", "--data.num_minibatches", "2"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ckpt = _last(tmp_path)
    ranks = ckpt["RolloutDataModule"]["ranks"]
    assert ckpt["RolloutDataModule"]["env_steps"] == 2 * 2 * 8 * 8
    assert len(ranks) == 2 and all(r["memory"]["state"].shape == (8, 1, 64) for r in ranks)
    assert not torch.equal(ranks[0]["memory"]["state"], ranks[1]["memory"]["state"])  # each rank's own actors
