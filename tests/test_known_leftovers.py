"""Faults the earlier rounds noticed and left: the behaviour-cloning checkpoint on a full disk, and
the collection schedules' and agreed counters' constructor arguments."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest
import torch

from parlightning.collection.schedules import LagBudget, Trajectories
from parlightning.distribution.counters import AgreedCounters
from parlightning.errors import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _file_size_limit() -> None:  # stands in for a full disk: writes past 8 KiB fail with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_FSIZE")
def test_bc_on_a_full_disk_is_one_line_naming_out_and_leaves_nothing(tmp_path):
    out = tmp_path / "bc.ckpt"
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-m", "parlightning.bc", "--config", os.path.join(ROOT, "configs", "swarm.yaml"),
                           "--out", str(out), "--rounds", "2", "--num_envs", "8", "--epochs", "1"],
                          preexec_fn=_file_size_limit, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        f"error: --out: writing {str(out)!r} failed (File too large; "
        + done.stderr.split("File too large; ")[1].split(" MiB")[0] + " MiB free there); free some space or write it "
        "elsewhere"], done.stderr[-2000:]  # the OS's reason, not torch's "enforce fail at inline_container.cc"
    assert os.listdir(tmp_path) == []  # no partial file


@pytest.mark.parametrize("schedule", [LagBudget, Trajectories])
@pytest.mark.parametrize("clip", [float("nan"), float("inf"), 0.0, -1.0])
def test_a_weight_clip_that_is_not_a_positive_number_is_refused(schedule, clip):
    with pytest.raises(ConfigError, match=rf"^{schedule.__name__}\(weight_clip\): must be positive"):
        schedule(2, clip)
    assert schedule(2, 0.5).weight_clip == 0.5


@pytest.mark.parametrize("agreed, pending, named", [
    ([1, 2], None, "agreed"), (torch.zeros(2, dtype=torch.bool), None, "agreed"),
    (torch.zeros(2), "x", "pending"), (torch.zeros(2, dtype=torch.complex64), None, "agreed")])
def test_agreed_counters_of_something_other_than_a_real_tensor_are_refused(agreed, pending, named):
    with pytest.raises(ConfigError, match=rf"^AgreedCounters\({named}\): must be a dense real tensor"):
        AgreedCounters(agreed, pending)
    assert AgreedCounters(torch.tensor([1, 2])).total().tolist() == [1, 2]


def test_every_script_refuses_a_wrong_local_rank_with_one_line_before_importing_lightning():
    """`LOCAL_RANK=abc python scripts/X.py ...`: one line naming LOCAL_RANK from every script. The
    scripts that import Lightning at the top (torchmetrics reads LOCAL_RANK as it is imported) ask
    before it; the others in `run_main`, before their sub-runs (which died importing, under a
    forkserver's EOFError). Each ends before Lightning or torchmetrics is imported."""
    scripts = sorted(name for name in os.listdir(os.path.join(ROOT, "scripts"))
                     if name.endswith(".py") and not name.startswith(("bad_inputs", "experiment")))
    assert len(scripts) >= 18
    env = {**os.environ, "LOCAL_RANK": "abc", "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PYTHONWARNINGS": "error::RuntimeWarning"}
    probe = ("import runpy, sys\nsys.argv = [sys.argv[1], '--help']\n"
             "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
             "finally:\n    print(sorted({'lightning', 'torchmetrics'} & set(sys.modules)), file=sys.stderr)")
    for name in scripts:
        done = subprocess.run([sys.executable, "-c", probe, os.path.join(ROOT, "scripts", name)], capture_output=True,
                              text=True, env=env, timeout=120, cwd=ROOT)
        lines = done.stderr.strip().splitlines()  # the probe's line (its `finally`), then the exit's
        assert done.returncode == 1 and lines[0] == "[]", (name, done.stderr[-1500:])
        assert len(lines) == 2 and lines[1].startswith("error: LOCAL_RANK='abc' in the environment"), (name, done.stderr[-1500:])


@pytest.mark.parametrize("monitor, ends", [("rollout/succes_rate", True), ("rollout/success_rate", False)])
def test_a_model_checkpoint_monitoring_a_metric_never_logged_is_one_line_after_the_first_iteration(tmp_path, monkeypatch,
                                                                                                     monitor, ends):
    """Lightning only warns (every iteration, choosing no best checkpoint) when a ModelCheckpoint's monitor is
    not logged, as a validation loop might log it later; a PPO run has none: fit makes it the config's error,
    named like EarlyStopping's. A logged monitor trains and keeps its best checkpoint."""
    from parlightning import fit

    monkeypatch.chdir(tmp_path)
    args = ["--data.num_envs", "8", "--data.num_steps", "8", "--trainer.max_epochs", "2",
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
            "--trainer.callbacks+", "lightning.pytorch.callbacks.ModelCheckpoint", "--trainer.callbacks.monitor", monitor,
            "--trainer.callbacks.mode", "max"]
    if not ends:
        trainer = fit(os.path.join(ROOT, "configs", "swarm.yaml"), args)
        assert trainer.current_epoch == 2 and trainer.checkpoint_callback.best_model_path.endswith(".ckpt")
        return
    with pytest.raises(ConfigError) as err:
        fit(os.path.join(ROOT, "configs", "swarm.yaml"), args)
    assert str(err.value) == (
        "trainer.callbacks: ModelCheckpoint monitors 'rollout/succes_rate', which this run never logs (it could never "
        "pick a best checkpoint); monitor a logged metric (e.g. charts/episodic_return, rollout/success_rate, "
        "losses/approx_kl; the tags: docs/guides/logging.md), or drop monitor to keep the latest checkpoints")
