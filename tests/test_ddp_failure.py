"""Rank failure under 2-rank DDP (gloo, CPU, real subprocess launch): a rank that raises or gets
stuck ends the whole run with its error within a bounded time, and no rank is left running."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

TESTS = Path(__file__).parent
CONFIG = str(TESTS.parent / "configs" / "swarm.yaml")
DDP = ["--trainer.accelerator", "cpu", "--trainer.devices", "2",
       "--trainer.strategy", "lightning.pytorch.strategies.DDPStrategy", "--trainer.strategy.timeout", "0:01:00"]  # covers the ranks' start-up on a loaded machine
TINY = ["--trainer.enable_model_summary", "false", "--data.num_envs", "8",  # the default progress bar stays on
        "--data.num_steps", "4", "--data.update_epochs", "1", "--data.num_minibatches", "1", "--trainer.max_epochs", "3"]


def _run(tmp_path, fault, timeout):
    """The CLI on 2 DDP ranks with `fault` injected; subprocess.run's timeout is the bound (it raises)."""
    # the repository first: `python -m parlightning.fit` from tmp_path must run this checkout, not an installed copy
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")]))
    env.pop("PL_DISABLE_FORK", None)
    cmd = [sys.executable, "-m", "parlightning.fit", "--config", CONFIG, "--trainer.default_root_dir", str(tmp_path),
           *TINY, *DDP, f"--trainer.callbacks+=reliability_helpers.{fault}"]
    try:
        done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        leftovers = _processes_mentioning(str(tmp_path))
        for pid in leftovers:  # never leak a hung rank into the rest of the suite
            os.kill(pid, 9)
    return done, leftovers


def _processes_mentioning(text):
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and int(pid) != os.getpid():
            pids.append(int(pid))
    return pids


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find leftover ranks")
def test_an_exception_on_one_rank_ends_the_whole_run_with_that_error(tmp_path):
    done, leftovers = _run(tmp_path, "FailOnRank", timeout=240)
    assert done.returncode != 0
    assert "RuntimeError: injected failure on rank 1" in done.stderr, done.stderr[-3000:]
    assert not leftovers
    # the checkpoint of the iteration before the failure is intact and holds each rank's own streams
    ckpt = torch.load(next(tmp_path.rglob("last.ckpt")), weights_only=True)
    assert ckpt["epoch"] == 0
    ranks = ckpt["RolloutDataModule"]["ranks"]
    assert len(ranks) == 2
    for stream in ("action_generator", "task_generator", "minibatch_generator"):
        assert not torch.equal(ranks[0][stream], ranks[1][stream]), stream
    assert not torch.equal(ranks[0]["obs"], ranks[1]["obs"])


@pytest.mark.skipif(os.environ.get("PARL_SLOW_TESTS") != "1", reason="waits out a 60 s DDP timeout: PARL_SLOW_TESTS=1")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find leftover ranks")
def test_a_stuck_rank_ends_the_run_at_the_ddp_timeout_and_is_not_left_behind(tmp_path):
    done, leftovers = _run(tmp_path, "HangOnRank", timeout=300)  # ends by itself: not killed by us
    assert done.returncode != 0, done.stderr[-3000:]
    assert not leftovers  # rank 0 took its stuck child down with it
