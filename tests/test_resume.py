"""Exact resume, a SIGKILLed run resumed with `--ckpt_path`, atomic checkpoint writes and safe
(weights_only) loading: a run is never lost or silently changed by an interruption."""

import multiprocessing
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch

from parlightning.runtime.checkpoint import AtomicCheckpointIO
from parlightning.cli.fit import main
from parlightning.analysis.logs import read_scalars

TESTS = Path(__file__).parent
ROOT = TESTS.parent
CONFIG = str(ROOT / "configs" / "swarm.yaml")
TINY = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        "--data.num_envs", "16", "--data.num_steps", "8", "--data.update_epochs", "2", "--data.num_minibatches", "2"]
# A learning sampler (own statistics and RNG) and λ annealing (PARLAnnealing in the config) both join the state.
SAMPLER = ["--data.sampler", "parlightning.distribution.samplers.DifficultyWeighted", "--data.sampler.pass_threshold", "1.0",
           "--data.sampler.seed", "0"]
TIMING = ("charts/SPS", "rollout/SPS")  # wall-clock metrics: the only ones allowed to differ


def fit(root, *args):
    return main(["--config", CONFIG, "--trainer.default_root_dir", str(root), *TINY, *SAMPLER, *args])


def last_ckpt(root, version=0):
    return Path(root) / "lightning_logs" / f"version_{version}" / "checkpoints" / "last.ckpt"


def assert_same(a, b, where="checkpoint"):
    """Deep equality of checkpoint contents: tensors bit-exact, containers key by key."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert set(a) == set(b), (where, set(a) ^ set(b))
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def scalars(run_dir):
    return {k: v for k, v in read_scalars(run_dir).items() if not k.startswith(TIMING)}


def test_two_plus_two_iterations_resumed_equal_four_uninterrupted(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    full = fit(tmp_path / "full", "--trainer.max_epochs", "4")
    fit(tmp_path / "cut", "--trainer.max_epochs", "4", "--trainer.callbacks+=reliability_helpers.StopAfter")
    cut_ckpt = last_ckpt(tmp_path / "cut")
    assert torch.load(cut_ckpt, weights_only=True)["epoch"] == 1  # stopped after 2 iterations
    resumed = fit(tmp_path / "cut", "--trainer.max_epochs", "4", "--ckpt_path", str(cut_ckpt))

    # identical parameters ...
    ours, theirs = full.model.state_dict(), resumed.model.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    # ... and identical everything else a further resume would need
    a = torch.load(last_ckpt(tmp_path / "full"), weights_only=True)
    b = torch.load(last_ckpt(tmp_path / "cut", version=1), weights_only=True)
    for key in ("epoch", "global_step", "state_dict", "optimizer_states", "RolloutDataModule"):
        assert_same(a[key], b[key], key)
    for name, state in a["callbacks"].items():
        if not name.startswith("ModelCheckpoint"):  # its state holds this run's paths
            assert_same(state, b["callbacks"][name], name)
    assert a["RolloutDataModule"]["round_index"] == 4
    assert not a["lr_schedulers"]  # the lr comes from the iteration count alone (PPOModule.annealed_lr)

    # identical logged metrics for the overlapping iterations 3 and 4, on the same env-step axis
    logged_full = scalars(tmp_path / "full" / "lightning_logs" / "version_0")
    logged_resumed = scalars(tmp_path / "cut" / "lightning_logs" / "version_1")
    assert logged_full.keys() - {"hp_metric"} == logged_resumed.keys() - {"hp_metric"}
    assert [s for s, _ in logged_resumed["charts/episodic_return"]] == [3 * 16 * 8, 4 * 16 * 8]
    for tag, series in logged_resumed.items():
        if tag != "hp_metric":
            assert series == logged_full[tag][-len(series):], tag
    assert "parl/lambda1" in logged_resumed  # the λ schedule position joined the state
    # the first two iterations of the cut run are the full run's first two (same seeding)
    logged_cut = scalars(tmp_path / "cut" / "lightning_logs" / "version_0")
    assert logged_cut["losses/value_loss"] == logged_full["losses/value_loss"][:2]


def test_checkpoint_loads_weights_only_and_holds_the_whole_run_state(tmp_cwd):
    fit(tmp_cwd, "--trainer.max_epochs", "1")
    ckpt = torch.load(last_ckpt(tmp_cwd), weights_only=True)  # tensors and plain containers only
    dm = ckpt["RolloutDataModule"]
    assert dm["round_index"] == 1 and dm["env_steps"] == 16 * 8 and dm["num_envs"] == 16
    assert dm["reward"]["position"] == 0 and len(dm["ranks"]) == 1
    rank = dm["ranks"][0]
    assert {"env", "obs", "episode_return", "episode_length", "action_generator", "minibatch_generator",
            "sampler", "rng"} <= rank.keys()
    assert rank["sampler"]["attempts"].sum() > 0  # the sampler's statistics, not an empty shell
    assert {"torch", "numpy", "python"} <= rank["rng"].keys()
    assert ckpt["optimizer_states"][0]["state"] and not ckpt["lr_schedulers"]
    assert any(k.startswith("PARLAnnealing") for k in ckpt["callbacks"])
    assert not list(tmp_cwd.rglob("*.partial"))


# ---------------------------------------------------------------------------------- kill -9
def _env():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("PL_DISABLE_FORK", None)
    return env


def _wait_for(predicate, timeout, proc=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        if proc is not None and proc.poll() is not None:
            return predicate()
        time.sleep(0.05)
    return False


def _epoch_of(path):
    try:
        return torch.load(path, weights_only=True)["epoch"]
    except Exception:
        return -1


def test_sigkilled_run_resumes_from_its_last_checkpoint_and_completes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cmd = [sys.executable, "-m", "parlightning.fit", "--config", CONFIG, "--trainer.default_root_dir", str(tmp_path),
           *TINY, *SAMPLER, "--trainer.max_epochs", "4",
           "--trainer.callbacks+=reliability_helpers.SlowRollouts", "--trainer.callbacks.init_args.seconds", "0.3"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    last = last_ckpt(tmp_path)
    try:
        reached = _wait_for(lambda: last.exists() and _epoch_of(last) >= 1, timeout=120, proc=proc)
        assert reached, proc.stderr.read().decode()[-3000:] if proc.poll() is not None else "no checkpoint in time"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL  # killed mid-run, not finished
    saved = torch.load(last, weights_only=True)  # never half-written: it loads
    kept = saved["epoch"]
    assert 1 <= kept < 3 and saved["RolloutDataModule"]["round_index"] == kept + 1

    fit(tmp_path, "--trainer.max_epochs", "4", "--ckpt_path", str(last))  # the same CLI, resumed
    final = torch.load(last_ckpt(tmp_path, version=1), weights_only=True)
    assert final["epoch"] == 3 and final["RolloutDataModule"]["round_index"] == 4
    steps = [s for s, _ in read_scalars(tmp_path / "lightning_logs" / "version_1")["charts/episodic_return"]]
    # picks up right after the kept checkpoint: at most the interrupted iteration is redone
    assert steps == [r * 16 * 8 for r in range(kept + 2, 5)]


def _save_forever(path, ready):
    torch.set_num_threads(1)  # a forked child must not touch the parent's OpenMP pool
    io, i = AtomicCheckpointIO(), 0
    while True:
        i += 1
        io.save_checkpoint({"i": i, "payload": torch.full((4_000_000,), float(i))}, path)
        ready.set()


def test_a_kill_during_a_save_never_leaves_a_half_written_checkpoint(tmp_path):
    ctx = multiprocessing.get_context("fork")  # no interpreter start-up: the child inherits the imports
    path, ready = tmp_path / "last.ckpt", ctx.Event()
    proc = ctx.Process(target=_save_forever, args=(str(path), ready), daemon=True)
    proc.start()
    try:
        assert ready.wait(timeout=60)
        time.sleep(0.3)  # a few saves later, most likely inside one (each writes 16 MB and fsyncs)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.join()
    state = torch.load(path, weights_only=True)
    assert state["i"] >= 1 and bool((state["payload"] == float(state["i"])).all())
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".ckpt")] == ["last.ckpt"]
    # what the killed save left (when the kill landed inside one) is removed by the next save in the
    # folder, with older leftovers; a live process's save in progress (pid 1 here) is not touched
    stale = [tmp_path / f".last.ckpt.{proc.pid}.planted.partial", tmp_path / ".last.ckpt.oldstyle.partial"]
    live = tmp_path / ".last.ckpt.1.inflight.partial"
    for p in (*stale, live):
        p.write_bytes(b"PK half")
    AtomicCheckpointIO().save_checkpoint({"i": -1}, tmp_path / "epoch=0.ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name, "epoch=0.ckpt", "last.ckpt"]


def _claim(root, barrier, out):
    from lightning.pytorch.loggers import TensorBoardLogger

    from parlightning.runtime.checkpoint import claim_version

    trainer = types.SimpleNamespace(global_rank=0, logger=TensorBoardLogger(save_dir=root))
    barrier.wait()  # every process lists the folder at the same moment
    out.put((claim_version(trainer)[0][0], trainer.logger.version, trainer.logger.log_dir))


def test_runs_started_together_in_one_folder_get_their_own_version(tmp_path):
    """Without the atomic claim every process computes version_0 from the same listing."""
    ctx = multiprocessing.get_context("fork")
    n, barrier, out = 4, ctx.Barrier(4), ctx.Queue()
    (tmp_path / "lightning_logs" / "version_0").mkdir(parents=True)  # an earlier run
    procs = [ctx.Process(target=_claim, args=(str(tmp_path), barrier, out)) for _ in range(n)]
    for p in procs:
        p.start()
    got = [out.get(timeout=60) for _ in range(n)]
    for p in procs:
        p.join()
    assert sorted(version for _, version, _ in got) == [1, 2, 3, 4]
    assert all(folder == log_dir == str(tmp_path / "lightning_logs" / f"version_{v}") for folder, v, log_dir in got)


def test_resuming_removes_the_killed_saves_left_beside_the_checkpoint(tmp_path):
    fit(tmp_path, "--trainer.max_epochs", "1")
    ckpt = last_ckpt(tmp_path)
    stale = ckpt.parent / ".last.ckpt.999999999.x1y2z3.partial"  # a pid that cannot exist
    stale.write_bytes(b"PK half")
    fit(tmp_path, "--trainer.max_epochs", "2", "--ckpt_path", str(ckpt))
    assert not list(tmp_path.rglob("*.partial"))
    assert torch.load(last_ckpt(tmp_path, version=1), weights_only=True)["epoch"] == 1


def test_a_checkpoint_holds_a_checksum_that_its_load_verifies(tmp_path):
    from parlightning.runtime.checkpoint import CHECKSUM_KEY, state_checksum
    from parlightning.errors import ConfigError

    io, path = AtomicCheckpointIO(), tmp_path / "last.ckpt"
    weight = torch.arange(64, dtype=torch.float32)
    io.save_checkpoint({"state_dict": {"policy.w": weight}, "epoch": 3}, path)
    saved = torch.load(path, weights_only=True)
    assert saved[CHECKSUM_KEY] == state_checksum({"state_dict": {"policy.w": weight}, "epoch": 3})
    assert io.load_checkpoint(path)["epoch"] == 3
    data = path.read_bytes()
    at = data.find(weight.numpy().tobytes()) + 100
    path.write_bytes(data[:at] + bytes(b ^ 0xFF for b in data[at:at + 16]) + data[at + 16:])
    with pytest.raises(ConfigError, match="do not match the checksum"):
        io.load_checkpoint(path)


def test_a_failing_save_keeps_the_previous_checkpoint_and_no_temp_file(tmp_path, monkeypatch):
    io, path = AtomicCheckpointIO(), tmp_path / "last.ckpt"
    io.save_checkpoint({"i": 1}, path)

    def dies_half_way(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a zip")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", dies_half_way)
    with pytest.raises(OSError, match="disk full"):
        io.save_checkpoint({"i": 2}, path)
    monkeypatch.undo()
    assert torch.load(path, weights_only=True)["i"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


@pytest.mark.skipif(os.environ.get("PARL_SLOW_TESTS") != "1", reason="three 2-rank DDP runs: PARL_SLOW_TESTS=1")
def test_ddp_two_ranks_resume_exactly_each_rank_from_its_own_state(tmp_path):
    ddp = ["--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp"]

    def run(root, *args):
        cmd = [sys.executable, "-m", "parlightning.fit", "--config", CONFIG, "--trainer.default_root_dir", str(root),
               *TINY, *SAMPLER, *ddp, "--trainer.max_epochs", "3", *args]
        done = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]

    run(tmp_path / "full")
    run(tmp_path / "cut", "--trainer.callbacks+=reliability_helpers.StopAfter")
    run(tmp_path / "cut", "--ckpt_path", str(last_ckpt(tmp_path / "cut")))
    a = torch.load(last_ckpt(tmp_path / "full"), weights_only=True)
    b = torch.load(last_ckpt(tmp_path / "cut", version=1), weights_only=True)
    for key in ("state_dict", "optimizer_states", "RolloutDataModule"):
        assert_same(a[key], b[key], key)
    ranks = a["RolloutDataModule"]["ranks"]
    assert len(ranks) == 2 and not torch.equal(ranks[0]["env"]["generator"], ranks[1]["env"]["generator"])
    logged_full = scalars(tmp_path / "full" / "lightning_logs" / "version_0")
    logged_resumed = scalars(tmp_path / "cut" / "lightning_logs" / "version_1")
    for tag, series in logged_resumed.items():
        if tag != "hp_metric":
            assert series == logged_full[tag][-len(series):], tag
