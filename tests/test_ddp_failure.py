"""Rank failure under 2-rank DDP (gloo, CPU, real subprocess launch): a rank that raises or gets
stuck ends the whole run with its error within a bounded time, and no rank is left running."""

import os
import re
import signal
import socket
import time
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


def _run(tmp_path, fault, timeout, extra=()):
    """The CLI on 2 DDP ranks with `fault` injected; subprocess.run's timeout is the bound (it raises)."""
    # the repository first: `python -m parlightning.fit` from tmp_path must run this checkout, not an installed copy
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")]))
    env.pop("PL_DISABLE_FORK", None)
    cmd = [sys.executable, "-m", "parlightning.fit", "--config", CONFIG, "--trainer.default_root_dir", str(tmp_path),
           *TINY, *DDP, f"--trainer.callbacks+=reliability_helpers.{fault}", *extra]
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
    done, leftovers = _run(tmp_path, "FailOnRank", timeout=STARTUP_BOUND_S)
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


# ------------------------------------------------------------------ the README's 2-rank command, one rank signalled
README_DDP = ["--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp"]  # as users run it
# A bound on a hang, not a race: how long the ranks may take to start (or a short run to finish). On
# the 2-core machine under heavy load, start-up alone took more than 240 s (five of these tests failed
# there on that bound while nothing was wrong), so the bound is generous; it only decides how long a
# real hang takes to fail.
STARTUP_BOUND_S = 900
SIGNAL_BOUND_S = 120  # the process group's default timeout is 30 minutes: a hang cannot pass


def _start_and_signal(tmp_path, rank, signum, marker="MarkStarted", extra=()):
    """The README's 2-rank command (default progress bar, default DDP timeout), run until both ranks
    have started rolling out (their marker files), then `signum` sent to rank `rank`'s pid only
    (`signum` None: nothing sent). Returns (exit code, stderr, pids, seconds from the signal to the end)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")]))
    env.pop("PL_DISABLE_FORK", None)
    cmd = [sys.executable, "-m", "parlightning.fit", "--config", CONFIG, *README_DDP,
           "--trainer.default_root_dir", str(tmp_path), "--data.num_envs", "8", "--data.num_steps", "4",
           "--trainer.max_epochs", "100000",  # never finishes by itself
           f"--trainer.callbacks+=reliability_helpers.{marker}", f"--trainer.callbacks.init_args.directory={tmp_path}",
           *extra]
    with open(tmp_path / "stderr.txt", "w") as err:  # a file, not a pipe: a full pipe would stall the run
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        markers = [tmp_path / f"rank{r}.pid" for r in (0, 1)]
        deadline = time.monotonic() + STARTUP_BOUND_S
        while not all(m.exists() for m in markers):
            assert proc.poll() is None, (tmp_path / "stderr.txt").read_text()[-3000:]
            assert time.monotonic() < deadline, "the ranks never started rolling out"
            time.sleep(0.2)
        pids = [int(m.read_text()) for m in markers]
        if signum is not None:
            os.kill(pids[rank], signum)
        sent = time.monotonic()
        try:
            code = proc.wait(timeout=SIGNAL_BOUND_S)
        except subprocess.TimeoutExpired:
            what = signal.Signals(signum).name if signum is not None else "stuck main thread"
            pytest.fail(f"one rank's {what} left the job running (a gloo wait)")
        took = time.monotonic() - sent
        time.sleep(0.5)  # the ranks' own processes: give a SIGKILLed rank's reaping a moment
        return code, (tmp_path / "stderr.txt").read_text(), pids, took
    finally:
        for pid in _processes_mentioning(str(tmp_path)):
            os.kill(pid, 9)


def _error_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find leftover ranks")
@pytest.mark.parametrize("rank", [1, 0])
def test_sigterm_to_one_rank_of_the_readme_command_stops_every_rank_with_one_line(tmp_path, rank):
    code, stderr, pids, _ = _start_and_signal(tmp_path, rank, signal.SIGTERM)
    assert code == 128 + signal.SIGTERM, stderr[-3000:]  # "killed by SIGTERM": a scheduler requeues it
    lines = _error_lines(stderr)
    assert len(lines) == 1, stderr[-3000:]
    assert f"rank {rank} (pid {pids[rank]})" in lines[0] and "SIGTERM" in lines[0], lines[0]
    assert "--ckpt_path" in lines[0]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert not _processes_mentioning(str(tmp_path))
    for ckpt in tmp_path.rglob("last.ckpt"):  # what was saved before the signal still loads
        torch.load(ckpt, weights_only=True)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find leftover ranks")
def test_a_rank_killed_without_a_word_is_named_by_its_exit_status(tmp_path):
    code, stderr, pids, _ = _start_and_signal(tmp_path, 1, signal.SIGKILL)
    assert code == 1, stderr[-3000:]
    lines = _error_lines(stderr)
    assert len(lines) == 1 and f"rank 1 (pid {pids[1]})" in lines[0] and "SIGKILL" in lines[0], stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find leftover ranks")
def test_a_non_finite_loss_under_ddp_is_one_line_from_rank_0(tmp_path):
    done, leftovers = _run(tmp_path, "PoisonWeights", timeout=STARTUP_BOUND_S, extra=[
        "--trainer.callbacks.init_args.iteration=1", "--trainer.callbacks.init_args.batch_idx=0"])
    assert done.returncode == 1, done.stderr[-3000:]
    lines = _error_lines(done.stderr)
    # the hook that wrote NaN into the weights is named at its boundary (component_guard), before the loss sees it;
    # it runs on every rank, so the line names whichever rank reported first (the store keeps the first record)
    assert len(lines) == 1 and re.match(r"error: rank [01] \(pid \d+\) stopped the 2-rank run: ", lines[0]), \
        done.stderr[-3000:]
    assert lines[0].endswith("every rank stopped"), lines[0]
    assert "PoisonWeights.on_train_batch_start left NaN or inf in the module's parameters" in lines[0], lines[0]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert not leftovers


# ------------------------------------------------------------------ a rank that hangs without stopping
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find leftover ranks")
@pytest.mark.parametrize("rank", [1, 0])
def test_a_frozen_rank_sigstop_ends_every_rank_with_one_line_naming_it(tmp_path, rank):
    """SIGSTOP: the rank is alive but runs nothing (its own watcher is frozen too). The heartbeat
    (10 s here, 20 s by default) finds it; rank 0 frozen also freezes the store it hosts, which rank 1 sees."""
    code, stderr, pids, took = _start_and_signal(tmp_path, rank, signal.SIGSTOP, extra=["--heartbeat_timeout", "10"])
    assert code != 0, stderr[-3000:]
    lines = _error_lines(stderr)
    assert len(lines) == 1, stderr[-3000:]
    assert f"rank {rank} (pid {pids[rank]})" in lines[0] and "stopped" in lines[0], lines[0]
    assert ("no heartbeat for" if rank == 1 else "has not answered for") in lines[0], lines[0]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert took < SIGNAL_BOUND_S and not _processes_mentioning(str(tmp_path))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find leftover ranks")
def test_a_deadlocked_main_thread_ends_every_rank_at_the_stall_timeout_naming_where(tmp_path):
    """Rank 1's main thread first sits 8 s in a call declared (`expected_wait`) to take up to 12 s:
    twice the stall timeout, not a hang. Then it waits for a lock it holds: alive (its heartbeat goes
    on), never progressing, named at the deadlock's line."""
    code, stderr, pids, took = _start_and_signal(
        tmp_path, 1, None, marker="DeadlockOnRank",
        extra=["--stall_timeout", "4", "--trainer.callbacks.init_args.declared=12",
               "--trainer.callbacks.init_args.slow=8"])
    assert code == 1, stderr[-3000:]
    lines = _error_lines(stderr)
    assert len(lines) == 1, stderr[-3000:]
    assert (tmp_path / "slow_call_done").exists(), lines  # the declared wait ran to its end
    assert f"rank 1 (pid {pids[1]})" in lines[0] and "made no progress for 4 s" in lines[0], lines[0]
    assert "reliability_helpers.py" in lines[0] and "in DeadlockOnRank.on_rollout_start" in lines[0], lines[0]  # Class.method
    assert "declared_slow_call" not in lines[0] and "--stall_timeout" in lines[0], lines[0]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert took < SIGNAL_BOUND_S and not _processes_mentioning(str(tmp_path))


# ------------------------------------------------------------------ ranks launched with different configs
def _launch_ranks(tmp_path, per_rank_args, timeout=STARTUP_BOUND_S):
    """Two ranks started torchrun-style (LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT), each with its own
    extra arguments; returns (exit codes, stderr of each)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    path = os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")])
    procs, files = [], []
    for rank, extra in enumerate(per_rank_args):
        env = dict(os.environ, LOCAL_RANK=str(rank), NODE_RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port, PYTHONPATH=path)
        files.append(tmp_path / f"stderr{rank}.txt")
        with open(files[-1], "w") as err:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "parlightning.fit", "--config", CONFIG, "--trainer.default_root_dir",
                 str(tmp_path), *TINY, *README_DDP, *extra], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                stderr=err))
    try:
        codes = [p.wait(timeout=timeout) for p in procs]
    except subprocess.TimeoutExpired:
        pytest.fail("ranks with different configs hung")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return codes, [f.read_text() for f in files]


def test_ranks_launched_with_different_configs_are_refused_before_the_first_rollout(tmp_path):
    """One launch, two keys that differ (a step count that would hang, an env size that would skew the
    env-step axis): both are named with their values per rank (one launch: it is the start-up that costs)."""
    codes, errs = _launch_ranks(tmp_path, [[], ["--trainer.max_epochs", "5", "--data.num_envs", "12"]])
    assert codes[0] != 0 and codes[1] != 0, errs
    lines = _error_lines(errs[0])
    assert len(lines) == 1 and "different configs" in lines[0], errs[0][-3000:]
    for key in ("trainer.max_epochs: 3 on rank 0 vs 5 on rank 1", "data.num_envs: 8 on rank 0 vs 12 on rank 1"):
        assert key in lines[0], lines[0]
    assert len(_error_lines(errs[1])) <= 1 and "Traceback" not in errs[0] + errs[1], errs[1][-3000:]  # own stderr
    assert not list(tmp_path.rglob("*.ckpt")) and not list(tmp_path.rglob("events.out*"))


# ------------------------------------------------------------------ Lightning's child observer on rank 0
_OBSERVER_SCRIPT = r'''
import json, os, signal, subprocess, sys
from lightning.fabric.strategies.launchers.subprocess_script import _ChildProcessObserver
from parlightning.cli.fit import _end_cleanly_when_a_rank_fails
from parlightning.runtime.rank_watch import KEY, RankWatch

how, store, record = sys.argv[1:4]
watch = RankWatch()
if store == "store":  # the ranks' watch is running (a TCPStore of the job), as after setup
    from torch.distributed import TCPStore
    watch.store, watch.rank, watch.world_size = TCPStore("127.0.0.1", 0, 1, True), 0, 2
    if record == "record":  # rank 1 reported its own cause before it ended
        watch.store.set(KEY, json.dumps({"rank": 1, "pid": 4242, "host": "h", "cause": "received SIGTERM", "code": 143}))
child = subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(60) if sys.argv[1] == 'kill' else sys.exit(1)", how])
_end_cleanly_when_a_rank_fails(lambda: print("cleaned up", file=sys.stderr), watch)
if how == "kill":
    os.kill(child.pid, signal.SIGKILL)
child.wait()
print(f"child {child.pid}", file=sys.stderr)
_ChildProcessObserver(os.getpid(), [child], sleep_period=0)._run()
print("the observer returned", file=sys.stderr)
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGKILL")
@pytest.mark.parametrize("how, store, record, code, cause", [
    ("kill", "none", "none", 1, "was killed by SIGKILL (the OOM killer or a scheduler sends this) without a word"),
    ("kill", "store", "none", 1, "was killed by SIGKILL (the OOM killer or a scheduler sends this) without a word"),
    ("kill", "store", "record", 143, "received SIGTERM"),
    ("exit", "none", "none", 1, None),  # failed in its own start-up: it printed its own line
])
def test_the_child_observer_ends_the_job_with_the_line_naming_the_rank(tmp_path, how, store, record, code, cause):
    """Lightning's observer polls the launched ranks every few seconds, so it can see a rank's end
    before rank 0's main thread meets it in a collective (a real DDP run decides which by timing):
    whichever sees it, the job ends with the same one line and status. Driven here without timing."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS.parent), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", _OBSERVER_SCRIPT, how, store, record], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == code, done.stderr[-3000:]
    assert "cleaned up" in done.stderr and "the observer returned" not in done.stderr, done.stderr[-3000:]
    lines = _error_lines(done.stderr)
    if cause is None:
        assert lines == [], done.stderr[-3000:]
        return
    pid = 4242 if record == "record" else int(done.stderr.split("child ")[1].split()[0])
    assert lines == [f"error: rank 1 (pid {pid}) stopped the 2-rank run: {cause}; every rank stopped"
                     + ("; the last checkpoint (the end of the last finished iteration) is intact: resume with "
                        "--ckpt_path <log_dir>/checkpoints/last.ckpt" if code > 128 else "")], done.stderr[-3000:]
