"""`ActorWorld`, the per-actor collection tests' world (tests/test_trajectories.py), in a module that
imports nothing heavy: worker processes (`workers: P`) import it by path to build their worlds."""

import threading

from parlightning.envs.base import ActionSpec

RELEASE = threading.Event()  # a blocked actor waits for it; every test sets it when it ends (in its own process)


class ActorWorld:
    """Task `t-k` lasts k + 2 steps. obs [actor, episode serial, step, calls so far]; reward 1 at the end.
    `block`: this actor's steps wait for RELEASE; `fail`: (actor, call) raises ConnectionError there;
    `hang`: (actor, call) waits for RELEASE (a call that never answers). In a worker process nothing
    sets RELEASE: a blocked or hung call lasts until the worker is closed."""

    tasks = ["t-0", "t-1", "t-2"]
    observation_shape = (4,)
    action_spec = ActionSpec("discrete", nvec=(2,))

    def __init__(self, seed=0, actor=0, block=None, fail=(), hang=(), always_fail=None):
        self.actor, self.calls, self.episode, self.seed = actor, 0, -1, seed
        self.block, self.fail, self.hang, self.always_fail = block, [tuple(f) for f in fail], \
            [tuple(h) for h in hang], always_fail

    def reset(self, task):
        self.episode += 1
        self.length, self.t = int(task.split("-")[1]) + 2, 0
        return [float(self.actor), float(self.episode), 0.0, float(self.calls)]

    def step(self, action):
        self.calls += 1
        if self.actor == self.block or (self.actor, self.calls) in self.hang and self.seed < 1000:
            RELEASE.wait()
        if (self.actor, self.calls) in self.fail or self.actor == self.always_fail:
            raise ConnectionError(f"simulated 503 on call {self.calls}")
        self.t += 1
        done = self.t >= self.length
        parts = {"outcome": 1.0, "n_subagents": 1.0, "assigned": 1.0, "completed": 1.0,
                 "critical_steps": float(self.t)} if done else None
        return [float(self.actor), float(self.episode), float(self.t), float(self.calls)], float(done), done, False, parts
