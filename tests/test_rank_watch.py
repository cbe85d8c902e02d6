"""RankWatch's heartbeat and progress rules on their own (no processes, no clocks that race):
which rank is declared hung, from the beats every rank publishes."""

import json
import threading

import pytest
from torch.distributed import HashStore

from parlightning.runtime.rank_watch import BEAT_S, PAUSED_S, RankWatch, _Beats, _where


def _beats(rank=0, world_size=2, heartbeat=20.0, stall=300.0):
    watch = RankWatch({}, heartbeat_timeout=heartbeat, stall_timeout=stall)
    watch.rank, watch.world_size, watch.store = rank, world_size, HashStore()
    beats = _Beats(watch)
    beats.compared = True
    return watch, beats


def _beat(n, stalled=0.0, waiting=None, where="", pid=None):
    return {"n": n, "stalled": stalled, "waiting": waiting, "where": where, "pid": pid}


def test_a_peer_whose_beat_stops_is_declared_frozen_after_the_heartbeat_timeout_not_before():
    _, beats = _beats(heartbeat=20.0)
    beats.resumed = 0.0
    assert beats._judge({0: _beat(1), 1: _beat(5, pid=1)}, now=100.0) is None  # first sight: the clock starts
    assert beats._judge({0: _beat(2), 1: _beat(5, pid=1)}, now=119.0) is None  # 19 s silent: not yet
    found = beats._judge({0: _beat(3), 1: _beat(5, pid=1)}, now=121.0)
    assert found["rank"] == 1 and found["frozen"] and "no heartbeat for 21 s" in found["cause"]


def test_a_beating_peer_is_never_frozen_and_a_finished_one_is_not_expected_to_beat():
    _, beats = _beats(heartbeat=20.0)
    beats.resumed = 0.0
    for i, now in enumerate(range(100, 200, 10)):
        assert beats._judge({0: _beat(i), 1: _beat(i)}, now=float(now)) is None
    assert beats._judge({0: _beat(50), 1: {"n": -1, "done": True}}, now=500.0) is None


def test_a_rank_that_was_paused_itself_restarts_its_clocks_instead_of_blaming_a_peer():
    """Ctrl-Z then fg stops every rank for a while: on resume nobody is frozen."""
    _, beats = _beats(heartbeat=20.0)
    beats.resumed = 0.0
    assert beats._judge({0: _beat(1), 1: _beat(5)}, now=100.0) is None
    beats.loop_at = beats.store_ok = 100.0  # the watchdog and the store last ran before the pause
    import time

    real = time.monotonic
    try:
        time.monotonic = lambda: 160.0  # 60 s later: the watchdog had not run (> BEAT_S + PAUSED_S)
        assert beats.store_silent_for() == pytest.approx(0.0)  # and it says the store is fine
    finally:
        time.monotonic = real
    assert 60.0 > BEAT_S + PAUSED_S and beats.resumed == 160.0
    assert beats._judge({0: _beat(2), 1: _beat(5)}, now=161.0) is None  # the peer had no chance to beat yet


def test_a_rank_stuck_off_a_collective_names_itself_and_where():
    _, beats = _beats(rank=1, stall=10.0)
    stuck = _beat(7, stalled=11.0, waiting=None, where="tests/x.py:3 in hook")
    found = beats._judge({0: _beat(9, stalled=11.0, waiting="waiting in distributed_c10d.py:1 all_reduce"),
                          1: stuck}, now=1.0)
    assert found["rank"] == 1 and "made no progress for 10 s, stuck at tests/x.py:3 in hook" in found["cause"]


def test_a_rank_waiting_for_a_stuck_peer_never_blames_itself_nor_everyone():
    _, beats = _beats(rank=0, stall=10.0)
    assert beats._judge({0: _beat(9, stalled=50.0, waiting="waiting in distributed_c10d.py:1 all_reduce"),
                         1: _beat(7, stalled=50.0, waiting=None, where="x.py:3 in f")}, now=1.0) is None


def test_every_rank_waiting_in_a_collective_is_named_by_the_lowest_rank_only():
    beats_of = {0: _beat(9, stalled=11.0, waiting="waiting in a.py:1 all_reduce", where="a.py:1 in all_reduce"),
                1: _beat(9, stalled=11.0, waiting="waiting in b.py:2 broadcast", where="b.py:2 in broadcast")}
    _, rank0 = _beats(rank=0, stall=10.0)
    _, rank1 = _beats(rank=1, stall=10.0)
    found = rank0._judge(dict(beats_of), now=1.0)
    assert found["who"] == "every rank" and "rank 0 at a.py:1" in found["cause"] and "rank 1 at b.py:2" in found["cause"]
    assert rank1._judge(dict(beats_of), now=1.0) is None
    slow = {**beats_of, 1: dict(beats_of[1], stalled=9.0)}  # one rank still moving: no verdict
    assert rank0._judge(slow, now=1.0) is None


def test_stall_and_heartbeat_can_be_turned_off():
    _, beats = _beats(heartbeat=None, stall=None)
    beats.resumed = 0.0
    beats._judge({0: _beat(1), 1: _beat(5)}, now=1.0)
    assert beats._judge({0: _beat(1, stalled=1e6), 1: _beat(5)}, now=1e6) is None


def test_beat_publishes_progress_and_finds_a_main_thread_that_does_not_move():
    watch, beats = _beats(rank=0, stall=3.0)
    watch.store.set("beat/1", '{"n": 1}')
    release = threading.Event()
    done = threading.Event()

    def stuck():
        release.wait()
        done.set()

    thread = threading.Thread(target=stuck, name="collector-test", daemon=True)
    thread.start()
    watch._main_ident = thread.ident  # judge this thread as if it were the main thread
    try:
        beats.progress_at = beats.resumed = beats.loop_at = 0.0  # no progress since t=0
        beats.signature = ("anything",)
        import time

        beats.loop_at = time.monotonic()
        found = beats.beat()  # its stack is new: progress now
        assert found is None
        beats.progress_at -= 10.0  # ten seconds on the same line
        beats.loop_at = time.monotonic()
        found = beats.beat()
        assert found is not None and found["rank"] == 0 and "in stuck" in found["cause"], found
    finally:
        release.set()
        thread.join()


def test_where_names_the_innermost_frame_outside_the_standard_library():
    import sys

    frame = sys._getframe()
    assert _where(frame).endswith(f"in {test_where_names_the_innermost_frame_outside_the_standard_library.__name__}")


# ------------------------------------------------------------------ the default, and waits the code declares
def _stuck_thread(declare=None):
    """A thread parked on one line (inside `expected_wait(*declare)` when given); returns (thread,
    release, the Wait or None). The caller judges it as if it were the main thread."""
    from parlightning.runtime.waits import expected_wait

    release, entered, box = threading.Event(), threading.Event(), []

    def stuck():
        if declare is None:
            entered.set()
            release.wait()
            return
        with expected_wait(*declare) as wait:
            box.append(wait)
            entered.set()
            release.wait()

    thread = threading.Thread(target=stuck, name="collector-test", daemon=True)
    thread.start()
    assert entered.wait(30)
    return thread, release, (box[0] if box else None)


def _judge_after(watch, beats, thread, stalled_for, wait=None, opened_ago=0.0):
    """One real `beat()` once the thread has sat still for `stalled_for` seconds (its wait, if any,
    opened `opened_ago` seconds ago): the clocks are moved back, nobody sleeps."""
    import time

    watch._main_ident = thread.ident
    watch.store.set(f"beat/{1 - watch.rank}", '{"n": 1}')  # the peer's
    beats.loop_at = time.monotonic()
    assert beats.beat() is None  # first sight of this stack: progress now
    beats.progress_at -= stalled_for
    beats.resumed = 0.0  # (its clocks were not restarted by a pause meanwhile)
    if wait is not None:
        wait.started -= opened_ago
        wait.deadline -= opened_ago
    beats.loop_at = time.monotonic()
    return beats.beat()


def test_the_default_stall_timeout_is_at_most_30_seconds(tmp_path):
    from parlightning.cli.fit import build_cli
    from parlightning.runtime.rank_watch import STALL_TIMEOUT_S

    assert STALL_TIMEOUT_S <= 30 and RankWatch().stall_timeout <= 30
    cli = build_cli(["--config", "configs/swarm.yaml", "--trainer.default_root_dir", str(tmp_path)])
    assert cli.config.stall_timeout is not None and cli.config.stall_timeout <= 30  # the CLI's default


def test_an_undeclared_stuck_main_thread_is_flagged_at_the_default_stall_timeout():
    watch = RankWatch({})  # the default timeouts
    watch.rank, watch.world_size, watch.store = 0, 2, HashStore()
    beats = _Beats(watch)
    beats.compared = True
    thread, release, _ = _stuck_thread()
    try:
        found = _judge_after(watch, beats, thread, stalled_for=31.0)
        assert found is not None and found["rank"] == 0, found
        cause = found["cause"]
        assert "made no progress for 30 s" in cause and "test_rank_watch.py:" in cause and "in stuck" in cause, cause
        assert "--stall_timeout" in cause and "expected_wait" in cause, cause  # how to raise it
    finally:
        release.set()
        thread.join()


def test_a_declared_wait_longer_than_the_stall_timeout_is_not_flagged():
    watch, beats = _beats(rank=0, stall=30.0)
    thread, release, wait = _stuck_thread(declare=(120.0, "the external worlds' step (step_timeout)"))
    try:  # 100 s on one line, inside a wait declared for 120 s: not stuck (300 s before the default changed)
        assert _judge_after(watch, beats, thread, stalled_for=100.0, wait=wait, opened_ago=100.0) is None
        published = json.loads(watch.store.get("beat/0").decode())
        assert published["allowed"] == pytest.approx(130.0, abs=1.0) and "external worlds' step" in published["wait"]
    finally:
        release.set()
        thread.join()
    # once the wait has closed, the same stall is judged by the plain timeout again
    thread, release, _ = _stuck_thread()
    try:
        assert _judge_after(watch, beats, thread, stalled_for=31.0) is not None
    finally:
        release.set()
        thread.join()


def test_a_declared_wait_that_overruns_its_own_deadline_is_flagged_naming_it():
    from parlightning.runtime.waits import GRACE_S

    watch, beats = _beats(rank=1, stall=30.0)
    thread, release, wait = _stuck_thread(declare=(60.0, "worker process 0 to start"))
    try:
        # 65 s into a 60 s wait: within its grace, not yet a hang
        assert _judge_after(watch, beats, thread, stalled_for=65.0, wait=wait, opened_ago=65.0) is None
    finally:
        release.set()
        thread.join()
    thread, release, wait = _stuck_thread(declare=(60.0, "worker process 0 to start"))
    try:  # past its deadline and the grace: named, with the wait it overran
        found = _judge_after(watch, beats, thread, stalled_for=60.0 + GRACE_S + 2, wait=wait,
                             opened_ago=60.0 + GRACE_S + 2)
        assert found is not None and found["rank"] == 1, found
        cause = found["cause"]
        assert "past the end of its declared wait for worker process 0 to start (60 s + 10 s grace)" in cause, cause
        assert "test_rank_watch.py:" in cause and "in stuck" in cause and "--stall_timeout" in cause, cause
    finally:
        release.set()
        thread.join()


def test_the_collector_threads_of_every_transport_count_as_progress():
    """The main thread waits on one line for a round while a collector thread steps: the thread
    transport's `collector-rank*`, the process transport's `collector-link-rank*` and the per-actor
    asynchronous collector's `trajectories-rank*`. Their moving stacks are progress."""
    from parlightning.runtime.rank_watch import _stack_signature

    main_parked = threading.Event()
    main = threading.Thread(target=main_parked.wait, daemon=True)
    main.start()
    try:
        for name in ("collector-rank0", "collector-link-rank0", "trajectories-rank0"):
            first, second = threading.Event(), threading.Event()
            at_first, at_second = threading.Event(), threading.Event()

            def collect():
                at_first.set()
                first.wait()
                at_second.set()
                second.wait()

            worker = threading.Thread(target=collect, name=name, daemon=True)
            worker.start()
            assert at_first.wait(30)
            before = _stack_signature(main.ident)
            first.set()
            assert at_second.wait(30)  # its own frame is on another line now, wherever it is
            assert _stack_signature(main.ident) != before, name
            second.set()
            worker.join()
    finally:
        main_parked.set()
        main.join()


def test_a_child_process_that_moves_resets_the_stall_of_a_parent_waiting_for_it():
    """The learner's main thread waits on one line for a collector process's round; the child's
    published progress count (see parlightning.runtime.waits) moving is progress."""
    from parlightning.runtime import waits

    class FakeChild:  # what `Child` registers: two shared doubles [deadline, progress], closed, what
        def __init__(self):
            self.wait_slot, self.closed, self.what = [0.0, 0.0], False, "the collector process"

    child = FakeChild()
    waits.register_child(child)
    watch, beats = _beats(rank=0, stall=30.0)
    thread, release, _ = _stuck_thread()
    try:
        assert _judge_after(watch, beats, thread, stalled_for=31.0) is not None  # the child idle: stuck
        child.wait_slot[1] += 1  # the child moved
        beats.loop_at = __import__("time").monotonic()
        assert beats.beat() is None  # progress now: the stall starts again
        assert json.loads(watch.store.get("beat/0").decode())["stalled"] < 2.0
    finally:
        release.set()
        thread.join()
        child.closed = True


def test_stacks_are_read_only_once_the_progress_counters_stand_still(monkeypatch):
    """Reading another thread's stack makes CPython build frame objects for its running calls, and one
    that outlives its call keeps the call's locals (a minibatch's activations): read every second through
    training it cost ~700 MB of peak memory at N = 4096. While hooks run, no stack is read; once the
    counters stand still, the innermost frames first, and the whole stacks only when those stood still."""
    from parlightning.runtime import rank_watch

    depths = []
    real = rank_watch._stack_signature
    monkeypatch.setattr(rank_watch, "_stack_signature", lambda ident, depth=None: depths.append(depth) or real(ident, depth))
    watch, beats = _beats(rank=0, stall=30.0)
    watch.store.set("beat/1", '{"n": 1}')
    for _ in range(5):  # a hook ran between every two beats
        watch._events += 1
        beats.loop_at = __import__("time").monotonic()
        assert beats.beat() is None
    assert depths == []
    for _ in range(3):  # the counters stand still (this test's main thread sits in beat())
        beats.loop_at = __import__("time").monotonic()
        beats.beat()
    assert depths[0] == 1 and None in depths, depths
