"""Bad input, non-finite values and shared samplers: every failure is one clear message, early,
and nothing good is lost (no half-written output, the last good checkpoint kept)."""

import os
import sys
import threading
import types
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from parlightning.data import RolloutDataModule
from parlightning.fit import main
from parlightning.module import PPOModule
from parlightning.policies import ActorCritic
from parlightning.sampling import DifficultyWeighted, PosteriorSignal, RoundRobin

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))
from reliability_helpers import NaNSwarm, PoisonWeights  # noqa: E402

sys.path.insert(0, str(TESTS.parent))
from callbacks.hardest_first import HardestFirst  # noqa: E402

CONFIG = str(TESTS.parent / "configs" / "swarm.yaml")


def _cli(root, *extra):
    return main(["--config", CONFIG, "--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar",
                 "false", "--trainer.max_epochs", "2", "--data.num_envs", "32", "--data.num_steps", "8", *extra])


# ---------------------------------------------------------------------------------- bad input
@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A real checkpoint of this config and four bad ones: random bytes, truncated, foreign, pickled object."""
    folder = tmp_path_factory.mktemp("ckpts")
    _cli(folder / "run", "--trainer.max_epochs", "1")
    real = next((folder / "run").rglob("last.ckpt"))
    data = real.read_bytes()
    (folder / "random.ckpt").write_bytes(os.urandom(4096))
    (folder / "truncated.ckpt").write_bytes(data[: len(data) // 2])
    torch.save({"weights": torch.zeros(3), "note": "not a training run"}, folder / "foreign.ckpt")
    torch.save({"state_dict": {}, "loops": {}, "optimizer_states": [], "x": types.SimpleNamespace(a=1)},
               folder / "pickled.ckpt")
    (folder / "not_yaml.txt").write_bytes(b"\x00\x01 binary {{{ not: [yaml")
    (folder / "a_file").write_text("a file where a folder should be")
    return {"real": str(real), **{name: str(folder / f) for name, f in [
        ("random", "random.ckpt"), ("truncated", "truncated.ckpt"), ("foreign", "foreign.ckpt"),
        ("pickled", "pickled.ckpt"), ("not_yaml", "not_yaml.txt"), ("a_file", "a_file")]}}


PLANNER = ["--trainer.callbacks+=parlightning.callbacks.StrategyPlanner", "--trainer.callbacks.init_args.strategy"]
STRATEGY = "--trainer.callbacks.init_args.strategy.init_args"
BAD_INPUT = [  # (arguments, the field the message names, a piece of the fix it gives)
    (["--data.bogus", "1"], "data.bogus", "--help lists them"),
    (["--data.num_envs", "0"], "data.num_envs", "positive integer"),
    (["--data.num_envs", "many"], "data.num_envs", "Expected a <class 'int'>"),
    (["--data.num_steps", "-4"], "data.num_steps", "positive integer"),
    (["--data.num_minibatches", "7"], "data.num_minibatches", "pick a divisor of 256"),
    (["--data.gamma", "1.5"], "data.gamma", "[0, 1]"),
    (["--model.lr", "0"], "model.lr", "must be positive"),
    (["--model.activation", "swish"], "model.activation", "choose one of"),
    (["--model.hidden_sizes", "[64, 0]"], "model.hidden_sizes", "positive integer widths"),
    (["--torch_threads", "0"], "--torch_threads", "positive integer"),
    (["--data.env.init_args.max_subagents", "4"], "max_subagents", "set them equal"),
    (["--data.env.init_args.max_cost", "0"], "max_cost", "positive"),
    (["--data.sampler", "parlightning.sampling.NoSuchSampler"], "data.sampler", "importable class"),
    (["--data.env.class_path", "parlightning.envs.nowhere.World"], "data.env", "importable class"),
    (["--trainer.callbacks+=parlightning.callbacks.NoSuchMonitor"], "trainer.callbacks", "importable class"),
    ([*PLANNER, "parlightning.parallel.PipelineParallel"], "PipelineParallel is refused", "Use DataParallel()"),
    ([*PLANNER, "parlightning.parallel.TensorParallel", f"{STRATEGY}.n_sections", "2"],  # raised in setup
     "StrategyPlanner.strategy", "pass keys="),
    (["--trainer.max_epochs", "-1"], "model.anneal_lr", "set it or anneal_lr: false"),  # raised in setup
    (["--data.reward", "null"], "PARLAnnealing", "drop PARLAnnealing"),  # raised in a callback's setup
    (["--config", "{not_yaml}"], "--config", "needs a YAML file"),
    (["--config", "missing.yaml"], "config", "existing YAML file"),
    (["--trainer.default_root_dir", "{a_file}/logs"], "trainer.default_root_dir", "choose another path"),
    (["--trainer.default_root_dir", "/proc/parl_logs"], "trainer.default_root_dir", "choose a writable folder"),
    (["--ckpt_path", "does/not/exist.ckpt"], "ckpt_path", "pass an existing .ckpt"),
    (["--ckpt_path", "{random}"], "--ckpt_path", "not a readable checkpoint"),
    (["--ckpt_path", "{truncated}"], "--ckpt_path", "not a readable checkpoint"),
    (["--ckpt_path", "{foreign}"], "--ckpt_path", "not a Lightning training checkpoint"),
    (["--ckpt_path", "{pickled}"], "--ckpt_path", "other than tensors and plain containers"),
    (["--ckpt_path", "{real}", "--data.num_envs", "16"], "data.num_envs", "resume with data.num_envs: 32"),
    (["--ckpt_path", "{real}", "--model.hidden_sizes", "[32]"], "model.hidden_sizes", "resume with the checkpoint's"),
]


@pytest.mark.parametrize("args, field, fix", BAD_INPUT, ids=[" ".join(a)[:60] for a, _, _ in BAD_INPUT])
def test_bad_input_is_one_clear_error_before_any_rollout_and_nothing_is_written(
    tmp_cwd, capsys, monkeypatch, checkpoints, args, field, fix
):
    monkeypatch.setattr(RolloutDataModule, "collect", lambda self: pytest.fail("a rollout started"))
    args = [a.format(**checkpoints) for a in args]
    before = set(tmp_cwd.rglob("*"))
    with pytest.raises(SystemExit) as exit_:
        _cli(tmp_cwd, *args)
    message = exit_.value.code
    assert isinstance(message, str) and message.startswith("error: ") and "\n" not in message, message
    assert field in message and fix in message, message
    assert "Traceback" not in capsys.readouterr().err
    assert set(tmp_cwd.rglob("*")) == before  # no lightning_logs, config.yaml or checkpoint left behind


def test_mismatched_pass_and_solved_thresholds_warn_once_naming_both(tmp_path):
    dm = RolloutDataModule(num_envs=8, num_steps=4, sampler=DifficultyWeighted(pass_threshold=0.5, seed=0))
    with pytest.warns(UserWarning) as record:
        dm.build(torch.device("cpu"))
    messages = [str(w.message) for w in record if "pass_threshold" in str(w.message)]
    assert len(messages) == 1 and "0.5" in messages[0] and "1.0" in messages[0]
    assert "solved" in messages[0]


# ---------------------------------------------------------------------------------- non-finite
NUM_ENVS, NUM_STEPS = 8, 8


def _fit_with_checkpoints(root, env=None, callbacks=(), **checkpoint):
    pl.seed_everything(0)
    dm = RolloutDataModule(env=env, num_envs=NUM_ENVS, num_steps=NUM_STEPS, update_epochs=2, num_minibatches=2)
    saver = ModelCheckpoint(dirpath=root, save_last=True, **(checkpoint or {"every_n_epochs": 1}))
    trainer = pl.Trainer(max_epochs=5, logger=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[saver, *callbacks], default_root_dir=root)
    trainer.fit(PPOModule(), datamodule=dm)


def _assert_last_good(root, epoch=None, global_step=None):
    ckpt = torch.load(Path(root) / "last.ckpt", weights_only=True)
    if epoch is not None:
        assert ckpt["epoch"] == epoch
    if global_step is not None:
        assert ckpt["global_step"] == global_step
    assert all(torch.isfinite(v).all() for v in ckpt["state_dict"].values())
    assert all(torch.isfinite(s["exp_avg"]).all() for s in ckpt["optimizer_states"][0]["state"].values())


@pytest.mark.parametrize("where, name, step", [("reward", "non-finite reward", 3),
                                               ("obs", "non-finite observation", 4)])  # obs of step 3 is input at 4
def test_nan_from_the_env_stops_the_run_naming_where_and_keeps_the_last_checkpoint(tmp_path, where, name, step):
    at = 2 * NUM_STEPS + 3  # the env's step call 3 of rollout 2
    env = lambda n, device, seed: NaNSwarm(n, device, seed, at_step=at, where=where, actor=5)  # noqa: E731
    with pytest.raises(FloatingPointError) as err:
        _fit_with_checkpoints(tmp_path, env=env)
    message = str(err.value)
    assert name in message and "NaNSwarm.step" in message, message
    assert "rollout 2" in message and f"step {step} of 8" in message and "actor 5" in message, message
    _assert_last_good(tmp_path, epoch=1)  # rollouts 0 and 1 were trained and saved; 2 never reached the policy


def test_nan_loss_stops_before_the_epoch_checkpoint_naming_the_step(tmp_path):
    with pytest.raises(FloatingPointError, match=r"non-finite PPO loss first at optimizer step 9 .*checkpoint is intact"):
        _fit_with_checkpoints(tmp_path, callbacks=[PoisonWeights(iteration=2, batch_idx=1)])
    _assert_last_good(tmp_path, epoch=1, global_step=8)  # 4 optimizer steps per iteration


def test_nan_loss_is_never_saved_by_a_step_checkpoint_either(tmp_path):
    with pytest.raises(FloatingPointError, match="optimizer step 9"):
        _fit_with_checkpoints(tmp_path, callbacks=[PoisonWeights(iteration=2, batch_idx=1)], every_n_train_steps=1)
    _assert_last_good(tmp_path, global_step=9)  # saved after step 8; the save after the NaN step refused


def test_the_loss_guard_reads_nothing_on_the_host_per_optimizer_step(monkeypatch):
    """The guard keeps its flag on the device: training_step makes no host sync (it used to make
    one per minibatch); the flag is read once per epoch and before each checkpoint."""
    from test_hot_path import TENSOR_SYNCS, TORCH_SYNCS, SyncCounter

    counter, step = SyncCounter(), PPOModule.training_step
    for name in TENSOR_SYNCS:
        monkeypatch.setattr(torch.Tensor, name, counter.wrap(f"Tensor.{name}", getattr(torch.Tensor, name)))
    for name in TORCH_SYNCS:
        monkeypatch.setattr(torch, name, counter.wrap(f"torch.{name}", getattr(torch, name)))

    def counted(self, *args, **kwargs):
        counter.active, counter.loops = True, counter.loops + 1
        try:
            return step(self, *args, **kwargs)
        finally:
            counter.active = False

    monkeypatch.setattr(PPOModule, "training_step", counted)
    dm = RolloutDataModule(num_envs=NUM_ENVS, num_steps=NUM_STEPS, update_epochs=2, num_minibatches=2)
    pl.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False).fit(PPOModule(), datamodule=dm)
    assert counter.loops == 2 * 4 and not counter.calls, dict(counter.calls)


# ---------------------------------------------------------------------------------- threads
def _standalone(sampler, seed):
    """A data module collecting without a Trainer (one actor group of a threaded setup)."""
    dm = RolloutDataModule(num_envs=16, num_steps=8, sampler=sampler, seed=seed)
    dm.build(torch.device("cpu"))
    policy = ActorCritic(dm.env.observation_shape, dm.env.action_spec, (16,), "relu")
    dm.trainer = types.SimpleNamespace(  # just what collect() reads
        lightning_module=types.SimpleNamespace(policy=policy), callbacks=[], global_step=0, global_rank=0,
        world_size=1, strategy=types.SimpleNamespace(root_device=torch.device("cpu")),
    )
    return dm


def _counts(sampler):
    if isinstance(sampler, HardestFirst):
        return sum(sampler.count.values()), sum(sampler.picked.values())
    attempts = getattr(sampler, "attempts", None)
    return (None if attempts is None else int(attempts.sum())), int(sampler.picks.sum())


@pytest.mark.parametrize("make", [RoundRobin, lambda: DifficultyWeighted(pass_threshold=1.0, seed=0),
                                  lambda: PosteriorSignal(pass_threshold=1.0, seed=0), HardestFirst],
                         ids=["RoundRobin", "DifficultyWeighted", "PosteriorSignal", "HardestFirst"])
def test_one_sampler_shared_by_threaded_data_modules_loses_no_statistics(make):
    sampler, n_threads, rounds = make(), 8, 3
    modules = [_standalone(sampler, seed) for seed in range(n_threads)]
    recorded_before, picked_before = _counts(sampler)  # after every module bound it and picked its first tasks
    episodes = [0] * n_threads
    errors = []

    def work(i):
        try:
            for _ in range(rounds):
                episodes[i] += int(modules[i].collect().episode_return.numel())
        except Exception as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    recorded, picked = _counts(sampler)
    total = sum(episodes)
    assert total > n_threads * rounds  # the stress is real: many episodes ended in every module
    if recorded is not None:
        assert recorded - recorded_before == total  # every finished episode reached the statistics once
    if isinstance(sampler, HardestFirst):  # the adapter asks for one queue per module per later round
        assert picked - picked_before == n_threads * 16 * (rounds - 1)
    else:  # tensor path: a pick for every actor that reset
        assert picked - picked_before == total


STRESS_BATCH = 200_000


def _stress_objects():
    from parlightning.parallel import ClusterParallel, TensorParallel

    ids = [f"{fam}-{i}" for fam in ("solo", "fanout", "pipeline", "locked") for i in range(8)]
    cpu = torch.device("cpu")
    idx_size = STRESS_BATCH

    def sampler(make):
        s = make()
        s.bind(ids, cpu)
        shard = torch.arange(len(ids))

        learns = hasattr(s, "attempts")
        few = torch.ones(64, dtype=torch.bool)

        def op(i, r, idx, ones):
            if learns:
                s.record_batch(idx, ones)
            s.pick_batch(shard, r, few if learns else ones.bool())  # the reward-blind one: big pick batches
            s.state_dict()  # a checkpoint taken while other threads write

        def count():
            if not learns:
                return {"picks": int(s.picks.sum())}
            return {"attempts": int(s.attempts.sum()), "passes": int(s.passes.sum()), "picks": int(s.picks.sum())}

        def expected(total):
            if not learns:
                return {"picks": total}
            return {"attempts": total, "passes": total, "picks": 64 * total // idx_size}

        return op, count, expected

    def cluster():
        cp = ClusterParallel()
        cp.bind(ids, cpu)

        def op(i, r, idx, ones):
            cp.observe_batch(idx, 1.0 - ones)  # failed episodes: room 1 each
            if i == 0:
                cp.sync()  # one coordinator per rank merges while the others observe

        def count():
            stats = cp._merged + cp._pending
            return {"episodes": int(stats[:, 0].sum()), "room": int(stats[:, 1].sum())}

        return op, count, lambda total: {"episodes": total, "room": total}

    def tensor():
        tp = TensorParallel(2, keys=ids)

        def op(i, r, idx, ones):
            tp.record_updates(idx, section=i % 2)

        return op, lambda: {"updates": tp.updates_delivered + tp.section_violations}, lambda total: {"updates": total}

    return {
        "RoundRobin": lambda: sampler(RoundRobin),
        "DifficultyWeighted": lambda: sampler(lambda: DifficultyWeighted(pass_threshold=1.0, seed=0)),
        "PosteriorSignal": lambda: sampler(lambda: PosteriorSignal(pass_threshold=1.0, seed=0)),
        "ClusterParallel": cluster,
        "TensorParallel": tensor,
    }


@pytest.mark.parametrize("name", list(_stress_objects()))
def test_samplers_and_strategies_hammered_by_threads_lose_no_counts(name):
    """Big batches, so the tensor ops overlap on both cores: without the locks this loses counts
    (measured: ~1% of DifficultyWeighted.record_batch increments with 8 threads)."""
    op, count, expected = _stress_objects()[name]()
    n_threads, iterations, batch = 8, 10, STRESS_BATCH
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 32, (batch,), generator=gen)
    ones = torch.ones(batch)
    errors = []

    def work(i):
        try:
            for r in range(iterations):
                op(i, r, idx, ones)
        except Exception as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert count() == expected(n_threads * iterations * batch)
