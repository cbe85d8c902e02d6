"""Issue 22 bug 3, forced: the process transport's link thread answers a child's pick and walks the
issued rounds while the learner issues a new one. The walk is paused half-way and the learner's
`issue` runs right then; the test resumes the walk only once the insert has happened or the learner
is seen blocked on the sampler's lock, so the interleaving is forced, not hoped for (no sleeps).

With the walk under the sampler's lock (today's `ProcessTransport._serve_link`), the learner waits
and the pick is answered. With the walk outside it (the old `ProcessCollector._serve_pick`), the
insert lands mid-walk and 'dictionary changed size during iteration' kills the link: this test fails
on that pattern (checked by moving `_handle` out of the lock in `_serve_link`)."""

import collections
import queue
import threading

import numpy as np
import torch

from parlightning.collection.step_loop import SamplerLock
from parlightning.collection.transports import ProcessTransport

TIMEOUT = 60.0  # a bound for a broken run only: every wait below ends on an event


class WatchedLock(SamplerLock):
    """The sampler's lock; records when the learner's thread finds it taken and must wait."""

    def __init__(self):
        super().__init__()
        self.learner_thread = None
        self.learner_blocked = threading.Event()

    def __enter__(self):
        if threading.current_thread() is self.learner_thread and not self._lock.acquire(blocking=False):
            self.learner_blocked.set()
            self._lock.acquire()
        elif threading.current_thread() is not self.learner_thread:
            self._lock.acquire()
        return self


class PausingRounds(dict):
    """The issued rounds; the first walk over them stops after one key until the learner's insert
    has landed or the learner is blocked on the lock."""

    def __init__(self, items, lock):
        super().__init__(items)
        self.lock, self.walk_paused, self.inserted, self.walks = lock, threading.Event(), threading.Event(), 0

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self.inserted.set()

    def __iter__(self):
        inner = super().__iter__()
        self.walks += 1
        if self.walks > 1:
            return inner

        def paused():
            yield next(inner)
            self.walk_paused.set()
            for _ in range(int(TIMEOUT / 0.01)):  # ends on an event: the insert, or the learner waiting for the lock
                if self.inserted.is_set() or self.lock.learner_blocked.is_set():
                    break
                self.inserted.wait(0.01)
            yield from inner

        return paused()


class Conn:
    def __init__(self, messages):
        self.messages, self.idle = collections.deque(messages), threading.Event()

    def poll(self, timeout):
        if not self.messages:
            self.idle.wait(min(timeout, 0.01))  # nothing more will come; just don't spin
        return bool(self.messages)


class Child:
    """The collector process's end of the pipe, in-process: one pick request, and what was sent back."""

    def __init__(self, messages):
        self.conn, self.sent = Conn(messages), []

    def receive(self):
        return self.conn.messages.popleft()

    def send(self, message):
        self.sent.append(message)


class Sampler:
    def pick(self, context, reset_mask):
        return torch.full((int(reset_mask.sum()),), context.round_index, dtype=torch.long)


class Context:
    def __init__(self, round_index):
        self.round_index = round_index


def _transport(lock, rounds, child):
    """A ProcessTransport's learner side (its link and `issue`) over an in-process child."""
    t = object.__new__(ProcessTransport)
    t.lock, t._contexts, t.child, t.picks, t.local_picks = lock, rounds, child, Sampler(), False
    t._incoming, t._cond, t._ready = collections.deque(), threading.Condition(), queue.Queue()
    t._failed, t._closed, t._current_task = None, False, None
    t._link = threading.Thread(target=t._serve_link, daemon=True)
    return t


def test_a_pick_is_answered_while_the_learner_issues_a_round_mid_walk():
    lock = WatchedLock()
    rounds = PausingRounds({0: Context(0), 1: Context(1)}, lock)
    child = Child([("pick", 1, np.array([True, False, True]))])
    transport = _transport(lock, rounds, child)
    transport._link.start()
    try:
        assert rounds.walk_paused.wait(TIMEOUT), "the link never walked the issued rounds"
        errors = []

        def learner():
            try:
                transport.issue(Context(2))
            except BaseException as err:  # the link's failure, re-raised by issue's send
                errors.append(err)

        thread = threading.Thread(target=learner)
        lock.learner_thread = thread
        thread.start()
        thread.join(TIMEOUT)
        assert not thread.is_alive()
        assert transport._failed is None and not errors, f"the link died: {transport._failed!r} {errors!r}"
        kinds = [m[0] for m in child.sent]
        assert kinds == ["picked", "ticket"], kinds  # the pick answered first, then the new round's ticket
        assert child.sent[0][1].tolist() == [1, 1]  # from round 1's context
        assert sorted(rounds) == [1, 2]  # round 0 dropped by the walk, round 2 inserted after it
        assert lock.learner_blocked.is_set() and rounds.inserted.is_set()  # the learner really had to wait
    finally:
        transport._closed = True
        transport._link.join(TIMEOUT)
