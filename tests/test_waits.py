"""Declared waits (`parlightning.runtime.waits`): the registry itself, a child process's waits seen
by its parent, and the places where the package blocks for long on purpose declaring their bound
(so DDP's 30 s stall check does not call them hangs). No test sleeps to race a timeout."""

import os
import subprocess
import threading
import time

import pytest
import torch

from parlightning.envs.external import ExternalBatchedEnv
from parlightning.runtime import waits
from parlightning.runtime.waits import expected_wait
from test_external_env import CountWorld


@pytest.fixture(autouse=True)
def _only_this_tests_children(monkeypatch):
    """Waits are per process, and a worker object an earlier test in this xdist process left unclosed may
    still publish its dead child's last wait: each test here sees only the children it starts itself."""
    import weakref

    monkeypatch.setattr(waits, "_children", weakref.WeakSet())


def test_waits_nest_across_threads_and_close_even_on_an_error():
    assert waits.latest() is None
    before = waits.changes()
    with expected_wait(5.0, "outer") as outer:
        seen = []
        thread = threading.Thread(target=lambda: seen.append(waits.latest()))
        with expected_wait(50.0, "inner"):
            thread.start()
            thread.join()
        assert seen[0].what == "inner"  # any thread sees every open wait: the latest deadline wins
        assert waits.latest() is outer
        with pytest.raises(KeyError), expected_wait(1.0, "failing"):
            raise KeyError("x")
    assert waits.latest() is None and waits.changes() == before + 6
    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="positive finite"), expected_wait(bad, "unbounded"):
            pass


def _child_in_a_wait(conn, owner):
    from parlightning.runtime.processes import receive, send

    with expected_wait(600.0, "the child's slow call"):
        send(conn, ("ready", os.getpid()))
        receive(conn)  # until the parent says stop


def test_a_child_process_publishes_its_declared_waits_to_its_parent():
    from parlightning.runtime.processes import Child

    child = Child(_child_in_a_wait, (), name="waits-test", what="the test child", method="fork")
    try:
        child.wait_ready(120.0)
        seen = waits.latest()
        assert seen is not None and seen.what == "the test child: its own declared wait", seen
        assert 500.0 < seen.deadline - time.monotonic() <= 600.0  # the child's deadline, on this clock
    finally:
        child.close()
    assert waits.latest() is None  # a child that has gone holds nothing open


def _child_busy_then_parked(conn, owner):
    from parlightning.runtime.processes import receive, send

    send(conn, ("ready", os.getpid()))
    while receive(conn) == "work":  # each "work" message: a second of Python that moves between lines
        end, n = time.monotonic() + 1.5, 0
        while time.monotonic() < end:
            n = (n * 31 + 7) % 1000003
            n = n + 1 if n % 2 else n - 1
        send(conn, ("done", n))


def test_a_child_process_that_works_is_progress_for_its_parent_and_a_parked_one_is_not():
    from parlightning.runtime.processes import Child

    child = Child(_child_busy_then_parked, (), name="waits-test", what="the test child", method="fork")
    try:
        child.wait_ready(120.0)
        # Its first look may land before its main thread has settled in receive() (on a loaded
        # machine, while it is still sending "ready"): wait until three looks' worth of samples in a
        # row agree, however long that takes, rather than trusting the first look.
        deadline, seen = time.monotonic() + 120, []
        while len(seen) < 3 or seen[-1] < 1 or len(set(seen[-3:])) > 1:
            assert time.monotonic() < deadline, seen
            time.sleep(1.2 * waits.PROGRESS_S)
            seen.append(waits.children_progress())
        parked = seen[-1]
        time.sleep(2.5)  # two or more looks, while it is blocked in receive(): its stack does not move
        assert waits.children_progress() == parked
        start = waits.children_progress()
        for _ in range(3):  # 4.5 s of work: a look lands inside it, where the parked child never was
            child.send("work")
            assert child.receive()[0] == "done"
        assert waits.children_progress() > start
    finally:
        child.close()
    assert waits.children_progress() == 0  # a closed child counts no more


class RecordWaits(CountWorld):
    """Records the open wait with the latest deadline while it steps (on a world thread)."""

    seen: list = []

    def step(self, action):
        RecordWaits.seen.append(waits.latest())
        return super().step(action)


def test_an_external_worlds_step_on_threads_is_a_wait_bounded_by_its_step_timeout():
    RecordWaits.seen = []
    env = ExternalBatchedEnv(2, world=RecordWaits, step_timeout=45.0)
    try:
        env.reset(seed=0)
        env.step(torch.ones(2, dtype=torch.long))  # [num_envs]: a discrete world's actions
    finally:
        env.close()
    assert len(RecordWaits.seen) == 2, RecordWaits.seen
    for wait in RecordWaits.seen:
        assert wait is not None and "external worlds' step" in wait.what and wait.seconds == 45.0, wait
    assert waits.latest() is None


class GatedWorld(CountWorld):
    """A world whose step waits until the file `gate` exists (the test releases it)."""

    def __init__(self, gate="", **kwargs):
        super().__init__(**kwargs)
        self.gate = gate

    def step(self, action):
        while not os.path.exists(self.gate):
            time.sleep(0.01)
        return super().step(action)


def test_waiting_for_world_worker_processes_is_declared_by_the_parent_and_the_worker(tmp_path):
    gate = tmp_path / "go"
    env = ExternalBatchedEnv(1, world=GatedWorld, workers=1, step_timeout=40.0, world_kwargs={"gate": str(gate)})
    try:
        env.reset(seed=0)
        done = threading.Event()
        stepper = threading.Thread(target=lambda: (env.step(torch.ones(1, dtype=torch.long)), done.set()))
        stepper.start()
        deadline, names = time.monotonic() + 120, set()
        while not {"parent", "worker"} <= names:  # both appear while the world is held at the gate
            assert time.monotonic() < deadline, [w.what for w in waits.open_waits()]
            for w in waits.open_waits():
                if "world worker processes' step" in w.what:
                    names.add("parent")
                if w.what.startswith("worker process 0") and "its own declared wait" in w.what:
                    names.add("worker")
            time.sleep(0.05)
        gate.touch()
        stepper.join(120)
        assert done.is_set()
    finally:
        gate.touch()
        env.close()


def test_a_checkpoint_write_declares_a_bound_that_grows_with_its_size(tmp_path, monkeypatch):
    from parlightning.runtime import checkpoint

    seen = []
    real_save = torch.save
    writes = lambda: [w for w in waits.open_waits() if "writing the checkpoint" in w.what]  # noqa: E731
    # (only this test's own waits: a worker object an earlier test in this process left unclosed may still
    # publish a wait of its child's, and waits are per process)

    def save(obj, f):
        seen.extend(writes())
        real_save(obj, f)

    monkeypatch.setattr(checkpoint.torch, "save", save)
    io = checkpoint.AtomicCheckpointIO(fsync=False)
    io.save_checkpoint({"w": torch.zeros(10)}, str(tmp_path / "small.ckpt"))
    io.save_checkpoint({"w": torch.zeros(5_000_000)}, str(tmp_path / "large.ckpt"))
    small, large = seen  # one open write wait during each save
    assert small.what.endswith("small.ckpt") and large.what.endswith("large.ckpt")
    assert small.seconds >= checkpoint.WRITE_BASE_S and large.seconds > small.seconds + 1.0
    assert writes() == []  # both closed when their saves returned


def test_the_compiled_step_build_is_a_declared_and_enforced_wait(tmp_path, monkeypatch):
    from parlightning.envs import swarm_compiled
    from parlightning.errors import ConfigError

    calls = []

    def run(cmd, **kwargs):
        calls.append((waits.latest(), kwargs.get("timeout")))
        raise subprocess.TimeoutExpired(cmd, kwargs.get("timeout"))

    monkeypatch.setattr(swarm_compiled, "_cache_dir", lambda: tmp_path)
    monkeypatch.setattr(swarm_compiled, "cache_key", lambda cxx: "test")  # (it asks the compiler its version)
    monkeypatch.setattr(swarm_compiled.subprocess, "run", run)
    with pytest.raises(ConfigError, match="did not build its C\\+\\+ kernel within"):
        swarm_compiled._library.__wrapped__("c++")
    (wait, timeout), = calls
    assert "building SwarmEnv's C++ kernel" in wait.what and wait.seconds == timeout == swarm_compiled.BUILD_TIMEOUT_S
