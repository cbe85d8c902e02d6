"""Collection without a barrier (`data.max_policy_lag`): lag 0 is the synchronous loop exactly,
lag k never exceeds its budget, every sample's version stamp names the weights that acted, and
an external world that raises or hangs ends the run with its error and leaves no process behind."""

import os

import lightning.pytorch as pl
import pytest
import torch

from parlightning.callbacks import PARLAnnealing
from parlightning.collection import LagBudget, LockStep
from parlightning.collection.transports import InlineTransport, ThreadTransport
from parlightning.ppo.data import RolloutDataModule
from parlightning.envs.external import ExternalBatchedEnv, ExternalWorldError
from parlightning.envs.swarm import SwarmEnv
from parlightning.errors import ConfigError
from parlightning.ppo.module import PPOModule
from parlightning.parl.reward import LinearSchedule, PARLReward
from parlightning.distribution.samplers import DifficultyWeighted
from parlightning.subagents import PoolOrchestrationWorld
from tests.test_external_env import CountWorld, _alive


def swarm(num_envs, device, seed):
    return SwarmEnv(num_envs=num_envs, device=device, seed=seed, families=("solo", "fanout"), max_subagents=16)


def _fit(dm, epochs, callbacks=(), module=None):
    module = module or PPOModule(anneal_lr=False)
    pl.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False, callbacks=list(callbacks)).fit(module, datamodule=dm)
    return module


class Stamps(pl.Callback):
    """Per epoch: the learner's weights as the epoch began (version = epoch) and the rollout it trains on."""

    def __init__(self):
        self.weights, self.rollouts = {}, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == 0:
            self.weights[trainer.current_epoch] = {k: v.clone() for k, v in pl_module.policy.state_dict().items()}
            self.rollouts.append((trainer.current_epoch, trainer.datamodule.last_rollout))
            assert {"versions", "is_weights", "behaviour_logprobs"} <= set(batch)  # every sample carries them


def test_lag_zero_is_the_synchronous_loop_exactly(tmp_cwd):
    results = []
    for kwargs in ({}, {"max_policy_lag": 0}):
        pl.seed_everything(0)
        dm = RolloutDataModule(env=swarm, num_envs=16, num_steps=8, update_epochs=2, num_minibatches=2, **kwargs)
        module = _fit(dm, 3)
        assert type(dm.collector.schedule) is LockStep and type(dm.collector.transport) is InlineTransport
        results.append(([p.detach().clone() for p in module.policy.parameters()],
                        {k: float(v) for k, v in dm.last_rollout.stats.items() if not k.startswith("perf/") and not k.endswith("SPS")}))
    (params_a, stats_a), (params_b, stats_b) = results
    assert all(torch.equal(a, b) for a, b in zip(params_a, params_b))
    assert stats_a == stats_b


@pytest.mark.parametrize("lag", [1, 2])
def test_lag_stays_within_budget_and_stamps_name_the_weights_that_acted(tmp_cwd, lag):
    pl.seed_everything(0)
    reward = PARLReward(max_subagents=16, lambda1=LinearSchedule(0.1, 0.0, 2000), lambda2=LinearSchedule(0.1, 0.0, 2000))
    dm = RolloutDataModule(env=swarm, num_envs=16, num_steps=8, update_epochs=2, num_minibatches=2, max_policy_lag=lag,
                           reward=reward, sampler=DifficultyWeighted())
    stamps = Stamps()
    module = _fit(dm, 6, [stamps, PARLAnnealing()])
    assert isinstance(dm.collector.transport, ThreadTransport) and dm.collector.schedule.lag == lag
    assert dm.round_index == 6 and dm.env_steps == 6 * 16 * 8
    lags = []
    for epoch, rollout in stamps.rollouts:
        buf = rollout.buffer
        assert rollout.round_index == epoch
        versions = buf.versions
        lag_here = epoch - versions
        assert int(lag_here.min()) >= 0 and int(lag_here.max()) <= lag
        assert float(rollout.stats["perf/policy_lag_max"]) == float(lag_here.max())
        lags.append(int(lag_here.max()))
        for v in versions.unique().tolist():  # the stamped weights reproduce the behaviour log-probs
            rows = versions == v
            policy = module.build_policy(dm.collector.env.observation_shape, dm.collector.env.action_spec)
            policy.load_state_dict(stamps.weights[v])
            with torch.no_grad():
                logprob, _, _ = policy.evaluate(buf.obs[rows], buf.actions[rows], mask=buf.masks[rows])  # as stored
            torch.testing.assert_close(logprob, buf.logprobs[rows], atol=1e-5, rtol=1e-5)
        w = buf.is_weights
        assert float(w.max()) <= LagBudget(lag).weight_clip and float(w.min()) > 0
    assert max(lags) >= 1  # the collector really ran ahead of the learner
    assert dm.sampler.state_dict()  # the sampler saw the episodes
    assert 0.0 <= float(stamps.rollouts[-1][1].stats["perf/learner_wait_frac"]) <= 1.0
    assert 0.0 <= float(stamps.rollouts[-1][1].stats["perf/collector_wait_frac"]) <= 1.0


def test_checkpoints_written_while_collecting_resume_and_say_what_is_lost(tmp_cwd):
    def fit(epochs, ckpt_path=None):
        dm = RolloutDataModule(env=swarm, num_envs=8, num_steps=4, update_epochs=1, num_minibatches=1,
                               max_policy_lag=1)
        save = pl.callbacks.ModelCheckpoint(dirpath=tmp_cwd / "ckpt", save_last=True, every_n_epochs=1)
        pl.Trainer(max_epochs=epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
                   callbacks=[save]).fit(PPOModule(anneal_lr=False), datamodule=dm, ckpt_path=ckpt_path)
        return dm

    fit(2)  # every epoch's checkpoint is written while the collector runs a round ahead
    with pytest.warns(UserWarning, match="loses the rollouts that were in flight"):
        dm = fit(3, ckpt_path=str(tmp_cwd / "ckpt" / "last.ckpt"))
    assert dm.round_index == 3 and dm.env_steps == 3 * 8 * 4  # the in-flight round was not counted twice


def test_bad_lag_is_a_config_error():
    with pytest.raises(ConfigError, match="data.max_policy_lag"):
        RolloutDataModule(env=swarm, max_policy_lag=-1)


class FailingPoolWorld(PoolOrchestrationWorld):
    """Raises (or hangs) at its 10th step on actor 1."""

    mode = "raise"

    def __init__(self, *args, actor=0, **kwargs):
        super().__init__(*args, **kwargs)
        self.actor, self.calls = actor, 0

    def step(self, action):
        self.calls += 1
        if self.actor == 1 and self.calls == 10:
            if self.mode == "hang":
                import time
                time.sleep(60)
            raise ConnectionError("tool endpoint refused")
        return super().step(action)


@pytest.mark.parametrize("mode", ["raise", "hang"])
def test_an_external_world_that_fails_ends_the_run_with_its_error_and_no_process_outlives_it(tmp_cwd, mode,
                                                                                          monkeypatch):
    monkeypatch.setattr(FailingPoolWorld, "mode", mode)
    envs = []

    def factory(num_envs, device, seed):
        env = ExternalBatchedEnv(  # nothing hangs when raising: a timeout long enough for any load
            num_envs, device, seed, world=FailingPoolWorld, step_timeout=1.0 if mode == "hang" else 120.0,
            shared={"pool": {"class_path": "parlightning.subagents.ProcessPool",
                             "init_args": {"fn": "parlightning.subagents.examples:skill_matcher", "workers": 2}}})
        envs.append(env)
        return env

    dm = RolloutDataModule(env=factory, num_envs=4, num_steps=4, update_epochs=1, num_minibatches=1, max_policy_lag=1)
    # hang: whichever actor's step timeout fires first (on a loaded machine a slow actor may beat the hung one)
    actor, message = ("1", "step raised ConnectionError: tool endpoint refused") if mode == "raise" else (
        r"\d+", "step did not return within step_timeout=1s")
    with pytest.raises(ExternalWorldError, match=rf"actor {actor} on task '[a-z]+-\d+': {message}"):
        _fit(dm, 5)
    pids = envs[-1].shared["pool"].pids
    assert envs[-1]._closed and not any(_alive(p) for p in pids)


def test_count_world_runs_under_the_async_collector(tmp_cwd):
    dm = RolloutDataModule(env=lambda n, d, s: ExternalBatchedEnv(n, d, s, world=CountWorld), num_envs=4,
                           num_steps=6, update_epochs=1, num_minibatches=2, max_policy_lag=2)
    _fit(dm, 3)
    episodes = dm.last_rollout.episodes
    assert episodes is not None and episodes.task.numel() > 0
    assert set(episodes.critical_steps.tolist()) <= {1.0, 2.0, 3.0}  # task t-k lasts k + 1 steps


def test_rollout_hooks_never_wait_for_a_slow_env_step_and_may_read_the_state(tmp_cwd):
    """The learner's hooks and sampler records share only the sampler's lock with the thread, which
    holds it while picking, not over a whole (here 0.2 s) env step; a hook that reads the collection
    state (as a checkpoint written from a hook would) does not deadlock with a thread waiting to pick."""
    from parlightning.callbacks.base import RolloutCallback

    class Timed(RolloutCallback):
        def __init__(self):
            self.waits, self.states = [], 0

        def on_rollout_start(self, trainer, pl_module, round_index):
            trainer.datamodule.collector.state_dict()
            self.states += 1

        def on_episodes_end(self, trainer, pl_module, task_ids, parts):
            trainer.datamodule.collector.state_dict()
            self.states += 1

    timed = Timed()

    class Probe(pl.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            import time
            col = trainer.datamodule.collector
            start = time.perf_counter()
            with col.lock:  # what the learner's hooks take
                timed.waits.append(time.perf_counter() - start)

    dm = RolloutDataModule(env=lambda n, d, s: ExternalBatchedEnv(n, d, s, world=CountWorld,
                                                                   world_kwargs={"sleep": 0.2}),
                           num_envs=4, num_steps=3, update_epochs=1, num_minibatches=1, max_policy_lag=1)
    _fit(dm, 4, [timed, Probe()])
    assert timed.states >= 4 and dm.round_index == 4
    assert max(timed.waits) < 0.1  # the thread is mid-step (0.2 s) most of the time, yet the lock is free


@pytest.mark.skipif(os.environ.get("PARL_SLOW_TESTS") != "1", reason="three 2-rank DDP runs: PARL_SLOW_TESTS=1")
@pytest.mark.parametrize("config, extra", [("swarm.yaml", []), ("external.yaml", []),
                                           ("external.yaml", ["--data.env.init_args.workers", "2"]),
                                           ("external.yaml", ["--data.collect_in", "process"])])
def test_each_ddp_rank_runs_its_own_async_collector(tmp_cwd, config, extra):
    import subprocess
    import sys

    from parlightning.analysis.logs import read_scalars

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cmd = [sys.executable, "-m", "parlightning.fit", "--config", os.path.join(root, "configs", config),
           "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp",
           "--trainer.max_epochs", "4", "--data.num_envs", "16", "--data.num_steps", "8", "--data.max_policy_lag", "1",
           "--trainer.enable_progress_bar", "false", *extra]  # extra: worlds in 2 worker processes, or the
    # collector in a process of its own, per rank
    env = {**os.environ, "PYTHONPATH": root}
    done = subprocess.run(cmd, cwd=tmp_cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    scalars = read_scalars(tmp_cwd / "lightning_logs" / "version_0")
    lag_max = [v for _, v in scalars["perf/policy_lag_max"]]
    assert lag_max[0] == 0.0 and max(lag_max) == 1.0  # both ranks' means: each rank ran one round ahead
    assert [s for s, _ in scalars["rollout/episodes"]] == [256, 512, 768, 1024]  # 2 ranks x 16 x 8 per round


def test_importance_weights_scale_each_samples_clipped_surrogate():
    from parlightning.ppo.loss import ppo_loss

    new_lp = torch.log(torch.tensor([0.5, 0.9, 0.2]))
    old_lp = torch.log(torch.tensor([0.5, 0.5, 0.4]))  # ratios 1.0, 1.8 (clipped to 1.2), 0.5 (clipped to 0.8)
    adv = torch.tensor([1.0, 2.0, -1.0])
    args = (new_lp, torch.zeros(3), torch.zeros(3), old_lp, torch.zeros(3), adv, torch.zeros(3))
    plain = ppo_loss(*args, norm_adv=False)
    assert torch.equal(ppo_loss(*args, norm_adv=False, is_weight=torch.ones(3)).loss, plain.loss)
    weighted = ppo_loss(*args, norm_adv=False, is_weight=torch.tensor([1.0, 0.5, 0.25]))
    # per sample max(-A r, -A clip(r)): -1.0, -2.4, 0.8; weighted -1.0, -1.2, 0.2
    torch.testing.assert_close(plain.policy_loss, torch.tensor((-1.0 - 2.4 + 0.8) / 3))
    torch.testing.assert_close(weighted.policy_loss, torch.tensor((-1.0 - 1.2 + 0.2) / 3))
