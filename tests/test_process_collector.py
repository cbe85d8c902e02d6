"""`data.collect_in: process`: the lag-budget schedule with the step loop in a child process.
Stamps and the budget hold as with the thread, the learner keeps the sampler, checkpoints carry
the child's state, errors of the world or of the process end the run by name, and no process
(the collector's, its worlds', its pool's) outlives the run, even a killed one."""

import functools
import os
import signal
import subprocess
import sys
import time

import lightning.pytorch as pl
import pytest
import torch

from parlightning.callbacks import PARLAnnealing
from parlightning.callbacks.base import RolloutCallback
from parlightning.ppo.data import RolloutDataModule
from parlightning.envs.external import ExternalBatchedEnv, ExternalWorldError
from parlightning.errors import ConfigError
from parlightning.ppo.module import PPOModule
from parlightning.collection.transports import ProcessTransport, RemoteEnv
from parlightning.parl.reward import LinearSchedule, PARLReward
from parlightning.distribution.samplers import DifficultyWeighted
from tests.test_async_collector import FailingPoolWorld, Stamps, _fit, swarm
from tests.test_collection import Picks
from tests.test_external_env import ROOT, CountWorld, _alive


def _gone(pids, within=10.0):
    deadline = time.monotonic() + within
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(_alive(p) for p in pids)


class Pids(pl.Callback):
    """The collector's processes while it runs (from the learner's side)."""

    def __init__(self):
        self.pids, self.alive = [], False

    def on_train_epoch_end(self, trainer, pl_module):
        self.pids = trainer.datamodule.collector.transport.worker_pids
        self.alive = self.alive or all(_alive(p) for p in self.pids)


@pytest.mark.parametrize("lag", [1, 2])
def test_lag_budget_and_stamps_hold_with_the_loop_in_a_child_process(tmp_cwd, lag):
    pl.seed_everything(0)
    reward = PARLReward(max_subagents=16, lambda1=LinearSchedule(0.1, 0.0, 2000), lambda2=LinearSchedule(0.1, 0.0, 2000))
    dm = RolloutDataModule(env=swarm, num_envs=16, num_steps=8, update_epochs=2, num_minibatches=2, max_policy_lag=lag,
                           reward=reward, sampler=DifficultyWeighted(), collect_in="process")
    stamps, pids = Stamps(), Pids()
    module = _fit(dm, 6, [stamps, PARLAnnealing(), pids])
    assert isinstance(dm.collector.transport, ProcessTransport) and isinstance(dm.collector.env, RemoteEnv)
    assert pids.alive and pids.pids[0] != os.getpid() and _gone(pids.pids)  # a child, and gone after the fit
    assert dm.round_index == 6 and dm.env_steps == 6 * 16 * 8
    lags = []
    for epoch, rollout in stamps.rollouts:
        buf = rollout.buffer
        lag_here = epoch - buf.versions
        assert rollout.round_index == epoch and int(lag_here.min()) >= 0 and int(lag_here.max()) <= lag
        lags.append(int(lag_here.max()))
        for v in buf.versions.unique().tolist():  # the weights the learner had at version v acted in the child
            rows = buf.versions == v
            policy = module.build_policy(dm.collector.env.observation_shape, dm.collector.env.action_spec)
            policy.load_state_dict(stamps.weights[v])
            with torch.no_grad():
                logprob, _, _ = policy.evaluate(buf.obs[rows], buf.actions[rows], mask=buf.masks[rows])  # as stored
            torch.testing.assert_close(logprob, buf.logprobs[rows], atol=1e-5, rtol=1e-5)
        # the learner's sampler picked every task the child's actors started (the bank's ids)
        assert set(rollout.episodes.task.tolist()) <= set(range(len(dm.collector.task_ids)))
    assert max(lags) >= 1
    assert dm.collector.current_task.shape == (16,) and int(dm.collector.current_task.max()) < len(dm.collector.task_ids)  # from the child
    picks = dm.sampler.state_dict()
    assert picks and float(stamps.rollouts[-1][1].stats["sampler/picks"]) > 0  # picks came from the learner
    assert float(stamps.rollouts[-1][1].stats["perf/policy_lag_max"]) == lags[-1]


def test_checkpoints_carry_the_childs_state_and_resume(tmp_cwd):
    def fit(epochs, ckpt_path=None):
        dm = RolloutDataModule(env=swarm, num_envs=8, num_steps=4, update_epochs=1, num_minibatches=1,
                               max_policy_lag=1, collect_in="process")
        save = pl.callbacks.ModelCheckpoint(dirpath=tmp_cwd / "ckpt", save_last=True, every_n_epochs=1)
        pl.Trainer(max_epochs=epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
                   callbacks=[save]).fit(PPOModule(anneal_lr=False), datamodule=dm, ckpt_path=ckpt_path)
        return dm

    fit(2)
    saved = torch.load(tmp_cwd / "ckpt" / "last.ckpt", weights_only=True)["RolloutDataModule"]["ranks"][0]
    assert {"env", "obs", "action_generator", "current_task", "task_generator", "sampler"} <= set(saved)
    assert saved["obs"].shape[0] == 8 and saved["current_task"].shape == (8,)
    assert int(saved["sampler"]["picks"].sum()) > 8  # RoundRobin picks in the child: its state, not the learner's
    with pytest.warns(UserWarning, match="loses the rollouts that were in flight"):
        dm = fit(3, ckpt_path=str(tmp_cwd / "ckpt" / "last.ckpt"))
    assert dm.round_index == 3 and dm.env_steps == 3 * 8 * 4


def test_a_reward_blind_sampler_picks_in_the_child_and_its_counts_are_exact(tmp_cwd):
    """RoundRobin never reads records, so the child picks from its own copy (no round trip per pick):
    the logged pick count is the N first picks plus one per episode that ended, round by round."""

    picks = Picks()
    dm = RolloutDataModule(env=swarm, num_envs=16, num_steps=8, update_epochs=1, num_minibatches=2, max_policy_lag=1,
                           collect_in="process")
    _fit(dm, 5, [picks])
    assert dm.collector.transport.local_picks
    ended = 0
    for logged, episodes in picks.rows:
        ended += episodes
        assert logged == 16 + ended  # the child's count at that round's end
    assert int(dm.sampler.picks.sum()) == 16  # the learner's copy made only the first reset's picks
    assert ended > 0


def test_rollout_hooks_may_read_the_state_while_the_child_waits_for_a_pick(tmp_cwd):
    """A hook holds the sampler's lock and asks the child for its state; the child may be waiting
    for a pick the link thread cannot answer then: the hook answers it while it waits."""

    class Reads(RolloutCallback):
        def __init__(self):
            self.states = 0

        def on_rollout_start(self, trainer, pl_module, round_index):
            assert "obs" in trainer.datamodule.collector.state_dict()
            self.states += 1

        def on_episodes_end(self, trainer, pl_module, task_ids, parts):
            assert "env" in trainer.datamodule.collector.state_dict()
            self.states += 1

    reads = Reads()
    env = functools.partial(ExternalBatchedEnv, world=CountWorld, world_kwargs={"sleep": 0.05})
    dm = RolloutDataModule(env=env, num_envs=4, num_steps=3, update_epochs=1, num_minibatches=1, max_policy_lag=1,
                           collect_in="process", sampler=DifficultyWeighted())  # a learning sampler: picks over the pipe
    _fit(dm, 4, [reads])
    assert reads.states >= 8 and dm.round_index == 4


def failing_pool_env(num_envs, device, seed, mode="raise"):
    """FailingPoolWorld on a ProcessPool, built in the collector process; the pool's pids go to a file."""
    world = FailingPoolWorld if mode == "raise" else HangingPoolWorld  # a monkeypatch would not reach the child
    env = ExternalBatchedEnv(
        num_envs, device, seed, world=world, step_timeout=1.0,
        shared={"pool": {"class_path": "parlightning.subagents.ProcessPool",
                         "init_args": {"fn": "parlightning.subagents.examples:skill_matcher", "workers": 2}}})
    with open("pool_pids.txt", "w") as f:
        f.write(" ".join(map(str, env.shared["pool"].pids)))
    return env


class HangingPoolWorld(FailingPoolWorld):
    mode = "hang"


@pytest.mark.parametrize("mode", ["raise", "hang"])
def test_a_failing_world_in_the_child_ends_the_run_by_name_and_no_process_outlives_it(tmp_cwd, mode):
    dm = RolloutDataModule(env=functools.partial(failing_pool_env, mode=mode), num_envs=4, num_steps=4,
                           update_epochs=1, num_minibatches=1, max_policy_lag=1, collect_in="process")
    message = "step raised ConnectionError: tool endpoint refused" if mode == "raise" else "step did not return within step_timeout=1s"
    with pytest.raises(ExternalWorldError, match=rf"actor 1 on task '[a-z]+-\d+': {message}"):
        _fit(dm, 5)
    pool = [int(p) for p in (tmp_cwd / "pool_pids.txt").read_text().split()]
    assert len(pool) == 2 and _gone([dm.collector.transport.pid, *pool])


def test_a_killed_collector_process_ends_the_run_with_a_clear_error(tmp_cwd):
    class Kill(pl.Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            if trainer.current_epoch == 1:
                os.kill(trainer.datamodule.collector.transport.pid, signal.SIGKILL)

    dm = RolloutDataModule(env=swarm, num_envs=8, num_steps=4, update_epochs=1, num_minibatches=1,
                           max_policy_lag=1, collect_in="process")
    with pytest.raises(RuntimeError, match=r"the collector process \(pid \d+\) died \(killed by SIGKILL, exit code -9\)"):
        _fit(dm, 6, [Kill()])
    assert dm.round_index <= 3


def test_a_killed_trainer_leaves_no_collector_process(tmp_path):
    script = tmp_path / "trainer.py"
    script.write_text(
        "import os, sys, time\n"
        f"sys.path.insert(0, {ROOT!r})\n"
        "import lightning.pytorch as pl\n"
        "from parlightning.ppo.data import RolloutDataModule\n"
        "from parlightning.ppo.module import PPOModule\n"
        "from tests.test_async_collector import swarm\n"
        "class Stall(pl.Callback):\n"
        "    def on_train_epoch_end(self, trainer, pl_module):\n"
        "        print(*trainer.datamodule.collector.transport.worker_pids, flush=True)\n"
        "        time.sleep(60)\n"
        "if __name__ == '__main__':\n"
        "    dm = RolloutDataModule(env=swarm, num_envs=4, num_steps=4, update_epochs=1, num_minibatches=1,\n"
        "                           max_policy_lag=1, collect_in='process')\n"
        "    pl.Trainer(max_epochs=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,\n"
        "               callbacks=[Stall()]).fit(PPOModule(), datamodule=dm)\n")
    trainer = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        pids = [int(p) for p in trainer.stdout.readline().split()]
        assert len(pids) == 1 and _alive(pids[0])
    finally:
        trainer.kill()
        trainer.wait()
    assert _gone(pids)  # the child watches its owner and exits


def test_bad_collect_in_settings_are_one_clear_error(tmp_cwd):
    with pytest.raises(ConfigError, match="data.collect_in: must be 'thread' or 'process'"):
        RolloutDataModule(env=swarm, max_policy_lag=1, collect_in="gpu")
    with pytest.raises(ConfigError, match="data.collect_in: process collects without a barrier"):
        RolloutDataModule(env=swarm, collect_in="process")
    dm = RolloutDataModule(env=lambda n, d, s: swarm(n, d, s), num_envs=4, num_steps=4, max_policy_lag=1,
                           collect_in="process")
    with pytest.raises(ConfigError, match=r"data.collect_in: process builds data.env in the collector process, but "
                                          r"the env factory does not pickle .*module-level function"):
        dm.build(torch.device("cpu"))
    broken = RolloutDataModule(env=functools.partial(ExternalBatchedEnv, world="no.such:World"), num_envs=4,
                               num_steps=4, max_policy_lag=1, collect_in="process")
    with pytest.raises(ConfigError, match="data.env.world: 'no.such:World' is not importable"):
        broken.build(torch.device("cpu"))  # the child's ConfigError, raised in the learner


@pytest.mark.parametrize("workers", [0, 2])
def test_the_external_config_trains_with_the_collector_in_a_process(tmp_cwd, workers):
    from parlightning.cli.fit import main

    cli = main(["--config", os.path.join(ROOT, "configs", "external.yaml"), "--trainer.max_epochs", "2",
                "--trainer.enable_progress_bar", "false", "--data.num_envs", "8", "--data.num_steps", "8",
                "--data.collect_in", "process", "--data.env.init_args.workers", str(workers)])
    dm = cli.datamodule
    pids = dm.collector.transport.worker_pids  # the collector process, then its env's world processes
    assert len(pids) == 1 + workers and _gone(pids)
    assert dm.round_index == 2 and dm.env_steps == 2 * 8 * 8
    assert float(dm.last_rollout.stats["rollout/episodes"]) > 0 and "perf/policy_lag" in dm.last_rollout.stats
