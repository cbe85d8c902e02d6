"""PARLAnnealing and CriticalStepsMonitor inside real fits: λ follows the schedule, the position
survives a checkpoint, the logged values equal a direct computation, and misuse is refused."""

import os
import socket
import time
import types
import warnings

import lightning.pytorch as pl
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from parlightning.callbacks import CriticalStepsMonitor, PARLAnnealing
from parlightning.ppo.data import RolloutDataModule
from parlightning.envs.base import EpisodeParts
from parlightning.envs.swarm import SwarmEnv
from parlightning.errors import ConfigError
from parlightning.cli.fit import main
from parlightning.ppo.module import PPOModule
from parlightning.parl.reward import CosineSchedule, LinearSchedule, PARLReward

CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "swarm.yaml")
N, T, MINIBATCHES = 16, 8, 2
STEPS = N * T  # env steps per rollout
KEYS = ("parl/lambda1", "parl/lambda2", "parl/r_parallel", "parl/r_finish", "parl/r_perf")


def small_env(num_envs, device, seed):
    return SwarmEnv(num_envs=num_envs, device=device, seed=seed, families=("solo", "fanout"), max_subagents=16)


def reward(horizon=3 * STEPS):
    # λ1 linear 0.1 -> 0 and λ2 cosine 0.2 -> 0.05 with a one-rollout warm-up, so the two differ
    return PARLReward(16, LinearSchedule(0.1, 0.0, horizon), CosineSchedule(0.2, 0.05, horizon, warmup=STEPS))


def datamodule(reward_=None):
    return RolloutDataModule(env=small_env, num_envs=N, num_steps=T, update_epochs=1, num_minibatches=MINIBATCHES,
                             reward=reward_, seed=0)


def trainer(tmp_path, epochs, callbacks, **kw):
    kw.setdefault("logger", False)
    kw.setdefault("enable_checkpointing", False)
    return pl.Trainer(max_epochs=epochs, enable_progress_bar=False, enable_model_summary=False,
                      callbacks=list(callbacks), default_root_dir=tmp_path, **kw)


class Record(pl.Callback):
    """Each rollout's stats (floats) and finished episodes, read when its epoch ends."""

    def __init__(self):
        self.stats, self.episodes = [], []

    def on_train_epoch_end(self, trainer, pl_module):
        rollout = trainer.datamodule.last_rollout
        self.stats.append({k: float(v) for k, v in rollout.stats.items()})
        self.episodes.append(rollout.episodes)


@pytest.mark.parametrize("unit, per_rollout", [("env_steps", STEPS), ("optimizer_steps", MINIBATCHES)])
def test_annealing_follows_the_schedule_and_logs_the_terms(tmp_path, unit, per_rollout):
    pl.seed_everything(0)
    dm, rec = datamodule(reward()), Record()
    fit_trainer = trainer(tmp_path, 5, [PARLAnnealing(unit=unit), rec])
    fit_trainer.fit(PPOModule(anneal_lr=False), datamodule=dm)
    lam1, lam2 = dm.reward.lambda1, dm.reward.lambda2
    for k, stats in enumerate(rec.stats):  # rollout k is collected at position k * per_rollout
        assert stats["parl/lambda1"] == pytest.approx(lam1.value(k * per_rollout))
        assert stats["parl/lambda2"] == pytest.approx(lam2.value(k * per_rollout))
    if unit == "env_steps":  # start, inside the warm-up, annealing, past the horizon
        assert [s["parl/lambda1"] for s in rec.stats] == pytest.approx([0.1, 0.1 * 2 / 3, 0.1 / 3, 0.0, 0.0])
        assert [s["parl/lambda2"] for s in rec.stats][:2] == pytest.approx([0.2, 0.2])
        assert rec.stats[-1]["parl/lambda2"] == pytest.approx(0.05)
    # the mean of each reward term over the rollout's finished episodes, computed directly
    for stats, ep in zip(rec.stats, rec.episodes):
        assert ep.outcome.numel() > 0
        assert stats["parl/r_parallel"] == pytest.approx(float((ep.n_subagents / 16).clamp(0, 1).mean()), abs=1e-6)
        ratio = torch.where(ep.assigned > 0, ep.completed / ep.assigned.clamp(min=1), torch.zeros(()))
        assert stats["parl/r_finish"] == pytest.approx(float(ratio.mean()), abs=1e-6)
        assert stats["parl/r_perf"] == pytest.approx(float(ep.outcome.mean()), abs=1e-6)
    # logged through the module like every rollout stat
    assert set(KEYS) <= set(fit_trainer.callback_metrics)


def test_without_the_callback_lambda_stays_at_its_initial_value(tmp_path):
    dm = datamodule(reward())
    trainer(tmp_path, 2, []).fit(PPOModule(anneal_lr=False), datamodule=dm)
    assert dm.env_steps == 2 * STEPS and dm.reward.position == 0
    assert dm.reward.lambdas() == pytest.approx((0.1, 0.2))


def test_annealing_position_survives_a_checkpoint_round_trip(tmp_path):
    pl.seed_everything(0)
    first = PARLAnnealing()
    trainer(tmp_path, 2, [first]).fit(PPOModule(anneal_lr=False), datamodule=(dm := datamodule(reward())))
    ckpt_path = tmp_path / "two.ckpt"
    first_trainer = dm.trainer
    first_trainer.save_checkpoint(ckpt_path)
    ckpt = torch.load(ckpt_path, weights_only=True)  # plain containers only
    state = ckpt["callbacks"][first.state_key]
    assert state == {"position": STEPS, "unit": "env_steps"}  # the second rollout was collected at 1 x STEPS

    restored = PARLAnnealing()
    restored.load_state_dict(state)
    assert restored.position == STEPS

    # resume in a fresh trainer: the position continues from the checkpoint, never from 0
    resumed, rec = PARLAnnealing(), Record()
    dm2 = datamodule(reward())
    trainer(tmp_path, 4, [resumed, rec]).fit(PPOModule(anneal_lr=False), datamodule=dm2, ckpt_path=ckpt_path)
    lam1 = dm2.reward.lambda1
    assert [s["parl/lambda1"] for s in rec.stats] == pytest.approx([lam1.value(2 * STEPS), lam1.value(3 * STEPS)])
    assert resumed.position == 3 * STEPS and dm2.reward.position == 3 * STEPS


def test_annealing_is_refused_without_a_parl_reward(tmp_cwd):
    with pytest.raises(ConfigError, match="data.reward"):
        trainer(tmp_cwd, 1, [PARLAnnealing()]).fit(PPOModule(anneal_lr=False), datamodule=datamodule(None))
    with pytest.raises(SystemExit, match=r"error: PARLAnnealing: .*data\.reward is null"):
        main(["--config", CONFIG, "--data.reward=null", "--trainer.max_epochs=1", "--data.num_envs=8",
              "--data.num_steps=4", "--trainer.enable_progress_bar=false"])
    with pytest.raises(ConfigError, match="unit"):
        PARLAnnealing(unit="episodes")


def test_critical_steps_monitor_logs_a_direct_computation(tmp_path):
    pl.seed_everything(0)
    rec, monitor = Record(), CriticalStepsMonitor()
    fit_trainer = trainer(tmp_path, 3, [monitor, rec])
    fit_trainer.fit(PPOModule(anneal_lr=False), datamodule=datamodule(None))
    for stats, ep in zip(rec.stats, rec.episodes):
        critical, serial = ep.critical_steps.double(), ep.serial_steps.double()
        assert stats["critical_steps/mean"] == pytest.approx(float(critical.mean()), rel=1e-6)
        assert stats["critical_steps/speedup"] == pytest.approx(float(serial.sum() / critical.sum()), rel=1e-6)
    assert {"critical_steps/mean", "critical_steps/speedup"} <= set(fit_trainer.callback_metrics)
    assert int(monitor.metric.episodes) == 0  # reset after every rollout


def fake_rollout():
    return types.SimpleNamespace(buffer=types.SimpleNamespace(rewards=torch.zeros(1)), stats={})


def parts(critical, serial):
    critical, serial = torch.tensor(critical), torch.tensor(serial)
    zeros = torch.zeros_like(critical)
    return EpisodeParts(zeros.long(), zeros, zeros, zeros, zeros, critical, serial)


def test_monitor_logs_zero_without_episodes_and_warns_nothing():
    monitor = CriticalStepsMonitor()
    rollout = fake_rollout()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torchmetrics warns on compute() before update()
        monitor.on_rollout_end(None, None, rollout)
    assert rollout.stats == {"critical_steps/mean": 0.0, "critical_steps/speedup": 0.0}
    monitor.on_episodes_end(None, None, torch.zeros(2), parts([4.0, 6.0], [8.0, 12.0]))
    monitor.on_rollout_end(None, None, rollout := fake_rollout())
    assert float(rollout.stats["critical_steps/mean"]) == 5.0 and float(rollout.stats["critical_steps/speedup"]) == 2.0


# -- DDP: every rank computes, a rank without episodes still joins (gloo, two processes) -------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        monitor, logged = CriticalStepsMonitor(), []
        # round 0: both ranks have episodes; round 1: only rank 0 does
        rounds = [parts([2.0, 4.0], [4.0, 8.0]) if rank == 0 else parts([6.0], [18.0]),
                  parts([3.0], [3.0]) if rank == 0 else None]
        for p in rounds:
            if p is not None:
                monitor.on_episodes_end(None, None, p.task, p)
            rollout = fake_rollout()
            monitor.on_rollout_end(None, None, rollout)
            logged.append({k: float(v) for k, v in rollout.stats.items()})
        torch.save(logged, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed unavailable")
def test_monitor_reduces_over_ranks(tmp_path):
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    ctx = mp.start_processes(_worker, args=(_free_port(), str(tmp_path)), nprocs=2, join=False, start_method=method)
    deadline = time.monotonic() + 120
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail("gloo ranks did not finish within 120 s (a rank skipped the collective?)")
    want = [{"critical_steps/mean": 4.0, "critical_steps/speedup": 30.0 / 12.0},
            {"critical_steps/mean": 3.0, "critical_steps/speedup": 1.0}]
    for rank in range(2):
        got = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        for g, w in zip(got, want):
            assert g == pytest.approx(w)
