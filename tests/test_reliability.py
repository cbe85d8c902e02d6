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

from parlightning.ppo.data import RolloutDataModule
from parlightning.cli.fit import main
from parlightning.ppo.module import PPOModule
from parlightning.policies.actor_critic import ActorCritic
from parlightning.distribution.samplers import DifficultyWeighted, PosteriorSignal, RoundRobin

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))
from reliability_helpers import NaNSwarm, PoisonWeights  # noqa: E402

sys.path.insert(0, str(TESTS.parent))
from callbacks.hardest_first import HardestFirst  # noqa: E402

CONFIGS = TESTS.parent / "configs"
CONFIG = str(CONFIGS / "swarm.yaml")
BASES = {"@gym": str(CONFIGS / "cartpole.yaml"), "@tensor": str(CONFIGS / "cartpole_tensor.yaml")}  # a row's own base


def _cli(root, *extra, config=CONFIG):
    return main(["--config", config, "--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar",
                 "false", "--trainer.max_epochs", "2", "--data.num_envs", "32", "--data.num_steps", "8", *extra])


# ---------------------------------------------------------------------------------- bad input
def _resave(checkpoint, path, **changes):
    """`checkpoint` with `changes` to its state_dict, saved with a valid checksum (so the check
    that fires is the one about the change, not the checksum)."""
    from parlightning.runtime.checkpoint import CHECKSUM_KEY, state_checksum

    checkpoint = {**checkpoint, "state_dict": {**checkpoint["state_dict"], **changes}}
    checkpoint[CHECKSUM_KEY] = state_checksum({k: v for k, v in checkpoint.items() if k != CHECKSUM_KEY})
    torch.save(checkpoint, path)


def _flip_bytes_inside_a_weight(data: bytes, weight: torch.Tensor, count: int = 16) -> bytes:
    raw = weight.contiguous().numpy().tobytes()
    start = data.find(raw)
    assert start > 0 and data.find(raw, start + 1) < 0  # found the weight's bytes, once
    middle = start + len(raw) // 2
    return data[:middle] + bytes(b ^ 0xFF for b in data[middle:middle + count]) + data[middle + count:]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Real checkpoints (this config; CartPole) and bad ones: random bytes, truncated, foreign,
    pickled object, one tensor of the wrong shape, 16 flipped bytes in a weight, NaN weights;
    and bad config files."""
    folder = tmp_path_factory.mktemp("ckpts")
    _cli(folder / "run", "--trainer.max_epochs", "1")
    main(["--config", BASES["@tensor"], "--trainer.default_root_dir", str(folder / "cartpole"),
          "--trainer.enable_progress_bar", "false", "--trainer.max_epochs", "1", "--data.num_steps", "8",
          "--model.activation", "relu"])
    real = next((folder / "run").rglob("last.ckpt"))
    data = real.read_bytes()
    (folder / "random.ckpt").write_bytes(os.urandom(4096))
    (folder / "truncated.ckpt").write_bytes(data[: len(data) // 2])
    torch.save({"weights": torch.zeros(3), "note": "not a training run"}, folder / "foreign.ckpt")
    torch.save({"state_dict": {}, "loops": {}, "optimizer_states": [], "x": types.SimpleNamespace(a=1)},
               folder / "pickled.ckpt")
    saved = torch.load(real, weights_only=True)
    weights = {k: v for k, v in saved["state_dict"].items() if v.dim() == 2}
    name, biggest = max(weights.items(), key=lambda kv: kv[1].numel())
    _resave(saved, folder / "wrong_shape.ckpt", **{name: torch.zeros(biggest.shape[0], biggest.shape[1] + 1)})
    (folder / "flipped.ckpt").write_bytes(_flip_bytes_inside_a_weight(data, biggest))
    _resave(saved, folder / "nan.ckpt", **{k: torch.full_like(v, float("nan")) for k, v in saved["state_dict"].items()})
    (folder / "not_yaml.txt").write_bytes(b"\x00\x01 binary {{{ not: [yaml")
    (folder / "a_file").write_text("a file where a folder should be")
    (folder / "dup.yaml").write_text("model:\n  lr: 0.001\ndata:\n  num_steps: 8\nmodel:\n  lr: 0.002\n")
    (folder / "empty.yaml").write_text("")
    (folder / "list.yaml").write_text("- trainer\n- model\n")
    (folder / "optimizer.yaml").write_text("optimizer:\n  class_path: torch.optim.SGD\n")
    files = {"cartpole": str(next((folder / "cartpole").rglob("*.ckpt"))), "weight": name}
    for f in ("random.ckpt", "truncated.ckpt", "foreign.ckpt", "pickled.ckpt", "wrong_shape.ckpt", "flipped.ckpt",
              "nan.ckpt", "not_yaml.txt", "a_file", "dup.yaml", "empty.yaml", "list.yaml", "optimizer.yaml"):
        files[f.split(".")[0]] = str(folder / f)
    return {"real": str(real), **files}


PLANNER = ["--trainer.callbacks+=parlightning.callbacks.StrategyPlanner", "--trainer.callbacks.init_args.strategy"]
STRATEGY = "--trainer.callbacks.init_args.strategy.init_args"
HELPERS = "reliability_helpers"
BAD_INPUT = [  # (arguments, the field the message names, a piece of the fix it gives); "@gym"/"@tensor": base config
    (["--data.bogus", "1"], "data.bogus", "--help lists them"),
    (["--data.num_envs", "0"], "data.num_envs", "positive integer"),
    (["--data.num_envs", "many"], "data.num_envs", "must be a positive integer, got 'many'"),
    (["--data.num_steps", "-4"], "data.num_steps", "positive integer"),
    (["--data.num_minibatches", "7"], "data.num_minibatches", "pick a divisor of 256"),
    (["--data.gamma", "1.5"], "data.gamma", "[0, 1]"),
    (["--model.lr", "0"], "model.lr", "must be positive"),
    (["--model.activation", "swish"], "model.activation", "choose one of"),
    (["--model.hidden_sizes", "[64, 0]"], "model.hidden_sizes", "positive integer"),
    (["--torch_threads", "0"], "--torch_threads", "positive integer"),
    (["--stall_timeout", "1"], "--stall_timeout", "at least 3 seconds or null"),
    (["--heartbeat_timeout", "-5"], "--heartbeat_timeout", "at least 3 seconds or null"),
    (["--data.env.init_args.max_subagents", "4"], "max_subagents", "set them equal"),
    (["--data.collect_in", "fork"], "data.collect_in", "'thread' or 'process'"),
    (["--data.collect_in", "process"], "data.collect_in", "set data.max_policy_lag >= 1"),
    (["--data.collect_in", "process", "--data.max_policy_lag", "1", "--trainer.accelerator", "gpu"], "data.collect_in",
     "use data.collect_in: thread with a GPU"),
    (["--data.env.init_args.max_cost", "0"], "max_cost", "positive integer"),
    (["--data.sampler", "parlightning.distribution.samplers.NoSuchSampler"], "data.sampler", "importable class"),
    (["--data.env.class_path", "parlightning.envs.nowhere.World"], "data.env", "importable class"),
    (["--trainer.callbacks+=parlightning.callbacks.NoSuchMonitor"], "trainer.callbacks", "importable class"),
    ([*PLANNER, "parlightning.distribution.strategies.PipelineParallel"], "PipelineParallel is refused", "Use DataParallel()"),
    ([*PLANNER, "parlightning.distribution.strategies.TensorParallel", f"{STRATEGY}.n_sections", "2"],  # raised in setup
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
    # issue 12, section 3: model hyperparameters
    (["--model.vf_coef", "-1"], "model.vf_coef", "must be >= 0"),
    (["--model.max_grad_norm", "0"], "model.max_grad_norm", "or null, got 0"),
    (["--model.max_grad_norm", "-0.5"], "model.max_grad_norm", "or null, got -0.5"),
    (["--model.lr", "-1e-3"], "--model.lr", "write --model.lr=-1e-3"),
    (["--model.lr=-1e-3"], "model.lr", "must be positive"),
    (["--model.adam_eps", "0"], "model.adam_eps", "must be positive"),
    # --optimizer / --lr_scheduler are not offered (PPOModule owns its optimizer and lr annealing)
    (["--optimizer", "Adam"], "--optimizer", "override configure_optimizers"),
    (["--optimizer=torch.optim.SGD", "--optimizer.lr", "0.1"], "--optimizer", "drop --optimizer"),
    (["--lr_scheduler", "StepLR", "--lr_scheduler.step_size", "1"], "--lr_scheduler", "drop --lr_scheduler"),
    (["--config", "{optimizer}"], "optimizer", "not supported"),
    # config files and cross-field config
    (["--config", "{dup}"], "--config", "key 'model' appears twice (lines 1 and 5)"),
    (["--config", "{empty}"], "--config", "the file is empty"),
    (["--config", "{list}"], "--config", "the top level is a list, not a mapping"),
    (["--data.bptt_len", "4"], "data.bptt_len", "model.policy: gru"),
    (["--seed_everything", "99999999999"], "seed_everything", "outside numpy's seed range 0..4294967295"),
    (["--data.seed", "4294967296"], "data.seed", "must be an integer in [0, 4294967295]"),
    (["--data.num_envs", "50000000", "--data.num_steps", "32"], "data.num_envs",  # ~940 GiB: refused, not allocated
     "more than the"),  # "needs about 1.1 TiB, more than the N GiB available ...; lower data.num_steps or data.num_envs"
    # Gymnasium adapter
    (["@gym", "--data.env.init_args.vectorization", "threads"], "data.env.init_args.vectorization",
     "choose one of sync, async"),
    (["@gym", "--data.env.init_args.env_id", "NoSuchEnv-v0"], "data.env.init_args.env_id", "registered Gymnasium id"),
    (["@gym", "--data.env.init_args.env_id", "Blackjack-v1"], "data.env.init_args.wrappers",
     "wrappers: [gymnasium.wrappers.FlattenObservation]"),
    (["@gym", "--data.env.init_args.wrappers", "[gymnasium.wrappers.NoSuchWrapper]"], "data.env.init_args.wrappers",
     "by its import path"),
    (["@tensor", "--data.env", f"{HELPERS}.make_tiny_env"], "data.env", "-> BatchedEnv"),
    # a user's env that breaks its own declarations (one reset and one step in preflight)
    (["@tensor", "--data.env", f"{HELPERS}.WrongObsShapeEnv"], "data.env", "observation_shape is [3]"),
    (["@tensor", "--data.env", f"{HELPERS}.WrongObsDtypeEnv"], "data.env", "dtype torch.float64"),
    (["@tensor", "--data.env", f"{HELPERS}.WrongRewardShapeEnv"], "data.env", "StepResult.reward of shape [2, 1]"),
    (["@tensor", "--data.env", f"{HELPERS}.NumpyResetEnv"], "data.env", "numpy.ndarray, not a torch.Tensor"),
    # checkpoints: another env, another architecture, a damaged tensor, another world, nothing left, corruption
    (["--ckpt_path", "{cartpole}", "--data.num_envs", "4"], "data.env.class", "resume with the checkpoint's env"),
    (["--ckpt_path", "{real}", "--model.policy", "gru"], "model.policy", "resume with the checkpoint's value"),
    (["--ckpt_path", "{wrong_shape}"], "--ckpt_path", "{weight} has shape"),
    (["--ckpt_path", "{real}", "--data.env.init_args.max_subagents", "8", "--data.reward.init_args.max_subagents", "8"],
     "data.env.init_args.max_subagents", "max_subagents is 128 in the checkpoint but 8 here"),
    (["--ckpt_path", "{real}", "--trainer.max_epochs", "1"], "trainer.max_epochs",
     "pass --trainer.max_epochs N with N > 1"),
    (["--ckpt_path", "{flipped}"], "--ckpt_path", "do not match the checksum"),
    (["--ckpt_path", "{nan}"], "--ckpt_path", "non-finite weights"),
]


@pytest.mark.parametrize("args, field, fix", BAD_INPUT, ids=[" ".join(a)[:60] for a, _, _ in BAD_INPUT])
def test_bad_input_is_one_clear_error_before_any_rollout_and_nothing_is_written(
    tmp_cwd, capsys, monkeypatch, checkpoints, args, field, fix
):
    monkeypatch.setattr(RolloutDataModule, "collect", lambda self: pytest.fail("a rollout started"))
    monkeypatch.syspath_prepend(str(TESTS))
    config = BASES[args[0]] if args[0] in BASES else CONFIG
    args = [a.format(**checkpoints) for a in (args[1:] if args[0] in BASES else args)]
    fix = fix.format(**checkpoints)
    before = set(tmp_cwd.rglob("*"))
    with pytest.raises(SystemExit) as exit_:
        _cli(tmp_cwd, *args, config=config)
    message = exit_.value.code  # a str: Python prints it to stderr and exits with status 1
    assert isinstance(message, str) and message.startswith("error: ") and "\n" not in message, message
    assert field in message and fix in message, message
    stderr = capsys.readouterr().err + message + "\n"
    assert "Traceback" not in stderr
    assert [line for line in stderr.splitlines() if "error:" in line] == [message]  # exactly one error line
    assert set(tmp_cwd.rglob("*")) == before  # no lightning_logs, config.yaml or checkpoint left behind


def test_help_no_longer_lists_optimizer_or_lr_scheduler(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert "--model.adam_eps" in text and "--model.anneal_lr" in text  # the module's own optimizer settings
    import re

    options = re.findall(r"^\s+(--[\w.]+)", text, re.M)
    assert "--model.adam_eps" in options and "--data.num_envs" in options
    assert not [o for o in options if o.startswith(("--optimizer", "--lr_scheduler"))]


def test_the_suggested_wrapper_fix_works_from_yaml(tmp_cwd, monkeypatch):
    """The non-Box error's fix, given as an import path, is accepted and trains (one iteration)."""
    cli = _cli(tmp_cwd, "--data.env.init_args.env_id", "Blackjack-v1", "--data.env.init_args.wrappers",
               "[gymnasium.wrappers.FlattenObservation]", "--trainer.max_epochs", "1", config=BASES["@gym"])
    assert cli.datamodule.collector.env.observation_shape == (45,)  # one-hot 32 + 11 + 2
    assert cli.trainer.current_epoch == 1


def test_mismatched_pass_and_solved_thresholds_warn_once_naming_both(tmp_path):
    dm = RolloutDataModule(num_envs=8, num_steps=4, sampler=DifficultyWeighted(pass_threshold=0.5, seed=0))
    with pytest.warns(UserWarning) as record:
        dm.build(torch.device("cpu"))
    messages = [str(w.message) for w in record if "pass_threshold" in str(w.message)]
    assert len(messages) == 1 and "0.5" in messages[0] and "1.0" in messages[0]
    assert "solved" in messages[0]


def test_the_memory_estimate_is_the_buffer_it_would_allocate_and_refuses_what_does_not_fit(monkeypatch):
    from parlightning.runtime import preflight
    from parlightning.buffer import RolloutBuffer
    from parlightning.envs.base import ActionSpec
    from parlightning.errors import ConfigError

    spec = ActionSpec("multi_discrete", nvec=(3, 3))
    real = RolloutBuffer(16, 8, (5,), spec.action_shape, torch.device("cpu"), torch.long)
    allocated = sum(v.numel() * v.element_size() for v in vars(real).values() if isinstance(v, torch.Tensor))
    assert preflight.rollout_bytes(16, 8, (5,), spec, num_minibatches=4) == allocated + allocated // 4
    monkeypatch.setattr(preflight, "available_memory", lambda device: (3 * 2**30, "available on this machine"))
    preflight.check_memory(2 * 2**30, "N actors x T steps", (5,), torch.device("cpu"))  # fits: no error
    with pytest.raises(ConfigError, match=r"^data.num_envs: N actors x T steps need about 2.0 GiB per rank x 2 "
                                          r"ranks = 4.0 GiB .*observation shape \[5\]\), more than the 3.0 GiB available"):
        preflight.check_memory(2 * 2**30, "N actors x T steps", (5,), torch.device("cpu"), ranks_here=2)


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
    policy = ActorCritic(dm.collector.env.observation_shape, dm.collector.env.action_spec, (16,), "relu")
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
    from parlightning.distribution.strategies import ClusterParallel, TensorParallel

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
            stats = cp.state_dict()["task_stats"]
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
