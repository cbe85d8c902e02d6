#!/usr/bin/env python
"""Round 8 of the bad-input corpus: a fresh set of bad inputs and faults, written from the README,
`docs/guides/`, `configs/`, the CLIs' and scripts' `--help` and the public classes the guides tell
users to write (tensor worlds, external worlds, samplers, strategies, rollout callbacks, subagent
functions, pools) only; its author read neither `tests/` nor the earlier corpora's cases (the case
names of rounds 5-7 were listed to avoid repeats), and wrote the cases before reading the package's
source. New kinds of input were the point: values YAML reads as another type (`true` for a count,
`.nan`, `1e400`), Lightning callback settings that Lightning itself refuses, exceptions that cannot
be printed or pickled, user code that recurses or exhausts memory, checkpoints edited in ways a user
edits them, runs whose ranks build different worlds, and one DDP rank killed, stopped, hung, exiting
0 or diverging.

    python scripts/bad_inputs_round8.py                # every case; writes docs/results/data/bad_inputs_round8-<tag>.txt
    python scripts/bad_inputs_round8.py --tag after    # the same, into ...-after.txt
    python scripts/bad_inputs_round8.py --quick        # one case per class fixed after the first run
    python scripts/bad_inputs_round8.py --only NAME... # the cases whose name contains any NAME
    python scripts/bad_inputs_round8.py --list         # the cases, one per line

The harness is round 5's (`scripts/bad_inputs_round5.py`: `Case`, `run_case`, `run_corpus`),
imported, not copied: a case per forked process and folder (the scripts and the multi-process DDP
cases as `cmd`, a fresh interpreter); outcome classes clean / traceback / misleading / messy /
accepted / hang / crash. A case is **clean** when it exits non-zero with exactly one `error:` line
containing the case's keywords (the field or the failing component), no traceback and nothing left
behind (no new file, no `lightning_logs/version_*`, given files unchanged, no process of the case
alive). For the Python API a case is clean when it raises an exception of the package whose message
contains the keywords. Controls (user code written by the book) must train; they are not counted.
Whether a line also gives the fix is judged by hand (docs/guides/reliability.md).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import bad_inputs_round5 as r5  # noqa: E402  the harness: Case, run_case, the outcome classes

PY = sys.executable
Case = r5.Case
run_case = r5.run_case

# ------------------------------------------------------------------------------------ user code
# Tensor worlds written from docs/guides/bring-your-own-env.md and the BatchedEnv docstring, each
# wrong in one way (its docstring says how); W8, W8Tasks and make_w8 are the controls.
WORLDS = r'''
import os
import signal
import sys
import time

import torch
from parlightning.envs.base import ActionSpec, BatchedEnv, EpisodeParts, StepResult


class W8(BatchedEnv):
    """Control: 4 features, 3 actions, 5-step episodes, reward 1 for action 2."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.observation_shape = (4,)
        self.action_spec = ActionSpec("discrete", nvec=(3,))
        self.t = torch.zeros(num_envs, dtype=torch.long)
        self.steps = 0

    def _obs(self):
        n = self.num_envs
        return torch.stack([self.t.float(), torch.ones(n), torch.zeros(n), (self.t % 2).float()], 1)

    def reset(self, *, seed=None, task_index=None):
        self.t.zero_()
        return self._obs()

    def _post(self, result):
        return result

    def step(self, action, next_task=None):
        self.steps += 1
        a = action.reshape(self.num_envs, -1)[:, 0]
        reward = (a == 2).float()
        self.t += 1
        term = self.t >= 5
        final = self._obs()
        self.t[term] = 0
        return self._post(StepResult(self._obs(), reward, term, torch.zeros_like(term), final, None))

    def state_dict(self):
        return {"t": self.t.clone(), "steps": self.steps}

    def load_state_dict(self, state):
        self.t.copy_(state["t"])
        self.steps = int(state["steps"])


class W8Tasks(W8):
    """Control: W8 with a task bank and episode parts."""

    task_ids = ["easy-0", "easy-1", "hard-0"]

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.task = torch.zeros(num_envs, dtype=torch.long)

    def reset(self, *, seed=None, task_index=None):
        if task_index is not None:
            self.task = task_index.clone().long()
        return super().reset(seed=seed)

    def _parts(self, term):
        n = self.num_envs
        return EpisodeParts(task=self.task.clone(), outcome=(self.task == 0).float(), n_subagents=torch.zeros(n),
                            assigned=torch.zeros(n), completed=torch.zeros(n), critical_steps=torch.full((n,), 5.0),
                            serial_steps=torch.full((n,), 5.0))

    def step(self, action, next_task=None):
        result = super().step(action)
        term = result.terminated
        parts = self._parts(term)
        if next_task is not None:
            nxt = next_task(term) if callable(next_task) else next_task
            self.task = torch.where(term, nxt.long(), self.task)
        return self._post(result._replace(parts=parts))

    def _post(self, result):
        return result


def make_w8(num_envs: int, device: str, seed: int) -> BatchedEnv:
    """Control: a factory as the guide writes it."""
    return W8(num_envs, device, seed)


def make_rank_dependent(num_envs: int, device: str, seed: int) -> BatchedEnv:
    """Rank 1 builds a world with 5 features, rank 0 one with 4 (a per-host data file differing)."""
    env = W8(num_envs, device, seed)
    if os.environ.get("LOCAL_RANK", "0") == "1":
        env.observation_shape = (5,)
        env._obs = lambda: torch.zeros(env.num_envs, 5)
    return env


class Later(W8):
    """Base of the worlds that go wrong at their 3rd step."""

    def _post(self, result):
        return self._bad(result) if self.steps >= 3 else result

    def _bad(self, result):
        return result


class ObsHalfLater(Later):
    """Observations turn float16 at the 3rd step."""

    def _bad(self, r):
        return r._replace(obs=r.obs.half())


class ObsBoolLater(Later):
    """Observations turn bool."""

    def _bad(self, r):
        return r._replace(obs=r.obs > 0)


class RewardFloatLater(Later):
    """The reward is a Python float, not a tensor."""

    def _bad(self, r):
        return r._replace(reward=1.0)


class RewardDoubleLater(Later):
    """The reward turns float64."""

    def _bad(self, r):
        return r._replace(reward=r.reward.double())


class TruncatedLongLater(Later):
    """`truncated` turns int64 0/1."""

    def _bad(self, r):
        return r._replace(truncated=r.truncated.long())


class FinalObsIntLater(Later):
    """`final_obs` turns int64."""

    def _bad(self, r):
        return r._replace(final_obs=r.final_obs.long())


class ObsMetaLater(Later):
    """Observations on the meta device."""

    def _bad(self, r):
        return r._replace(obs=torch.empty_like(r.obs, device="meta"))


class StepRecursion(W8):
    """`step` recurses without end at its 3rd call."""

    def step(self, action, next_task=None):
        if self.steps >= 2:
            return self.step(action, next_task)
        return super().step(action, next_task)


class StepMemoryError(W8):
    """`step` raises MemoryError at its 3rd call."""

    def step(self, action, next_task=None):
        if self.steps >= 2:
            raise MemoryError("cannot allocate the frame buffer")
        return super().step(action, next_task)


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("the exception's own __str__ fails")


class StepUnprintableError(W8):
    """`step` raises an exception whose str() raises."""

    def step(self, action, next_task=None):
        if self.steps >= 2:
            raise Unprintable()
        return super().step(action, next_task)


class StepMultilineError(W8):
    """`step` raises with a message of several lines, one starting with 'error:'."""

    def step(self, action, next_task=None):
        if self.steps >= 2:
            raise ValueError("bad frame\nerror: not really\nmore detail")
        return super().step(action, next_task)


class StepEmptyError(W8):
    """`step` raises RuntimeError() with no message."""

    def step(self, action, next_task=None):
        if self.steps >= 2:
            raise RuntimeError()
        return super().step(action, next_task)


class StepStopIteration(W8):
    """`step` raises StopIteration (a generator it read ran out)."""

    def step(self, action, next_task=None):
        if self.steps >= 2:
            raise StopIteration
        return super().step(action, next_task)


class StepKeyboardInterrupt(W8):
    """`step` raises KeyboardInterrupt (the user's code swallows Ctrl-C badly)."""

    def step(self, action, next_task=None):
        if self.steps >= 3:
            raise KeyboardInterrupt
        return super().step(action, next_task)


class StepSigterm(W8):
    """The world's process gets SIGTERM at the 3rd step (a scheduler preempting it)."""

    def step(self, action, next_task=None):
        if self.steps == 2:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(2)
        return super().step(action, next_task)


class StepNotImplemented(W8):
    """A copy of the protocol with `step` left as NotImplementedError."""

    def step(self, action, next_task=None):
        raise NotImplementedError


class InitHugeAlloc(W8):
    """The constructor allocates a 4 TB buffer."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.buf = torch.empty(10**12, dtype=torch.float32)


class NvecHuge(W8):
    """One discrete dimension with 10^9 categories (a vocabulary-sized action)."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.action_spec = ActionSpec("discrete", nvec=(10**9,))


class ObsShapeHuge(W8):
    """Declares (and returns) 10^5 x 10^4 features per actor."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.observation_shape = (100000, 10000)

    def _obs(self):
        return torch.zeros(self.num_envs, 1, 1).expand(self.num_envs, 100000, 10000)


class ObsShapeString(W8):
    """observation_shape is the string '4'."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.observation_shape = "4"


class ObsShapeNegative(W8):
    """observation_shape is (-4,)."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.observation_shape = (-4,)


class ActionSpecIsClass(W8):
    """action_spec is the ActionSpec class, not an instance."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.action_spec = ActionSpec


class ActionSpecTuple(W8):
    """action_spec is a plain tuple ('discrete', (3,))."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.action_spec = ("discrete", (3,))


class ContinuousNaNBounds(W8):
    """A continuous action with low = NaN."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.action_spec = ActionSpec("continuous", shape=(2,), low=float("nan"), high=1.0)

    def step(self, action, next_task=None):
        return super().step(torch.zeros(self.num_envs, dtype=torch.long), next_task)


class ContinuousShapeNegative(W8):
    """A continuous action with shape (-2,)."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.action_spec = ActionSpec("continuous", shape=(-2,), low=-1.0, high=1.0)


class NumEnvsFloat(W8):
    """num_envs is stored as a float (8.0)."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.num_envs = float(num_envs)


class DeviceCuda(W8):
    """Declares device cuda:0 (copied from a GPU machine) on a CPU-only machine."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.device = torch.device("cuda:0")


class DeviceString(W8):
    """device is the string 'cpu' rather than a torch.device (fine) -- but 'gpu'."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.device = "gpu"


class InitKwOnlyRequired(W8):
    """The constructor needs a keyword-only `level` with no default."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0, *, level: int):
        super().__init__(num_envs, device, seed)


class ResetReturnsDict(W8):
    """`reset` returns {'obs': tensor} (a dict-observation habit)."""

    def reset(self, *, seed=None, task_index=None):
        return {"obs": super().reset(seed=seed)}


class ResetWrongRows(W8):
    """`reset` returns one row fewer than num_envs."""

    def reset(self, *, seed=None, task_index=None):
        return super().reset(seed=seed)[1:]


class StateDictLambda(W8):
    """`state_dict` holds a lambda (cannot be checkpointed)."""

    def state_dict(self):
        return {"t": self.t.clone(), "fn": lambda x: x}


class StateDictHugeList(W8):
    """`state_dict` holds a set (not loadable with weights_only)."""

    def state_dict(self):
        return {"t": self.t.clone(), "seen": {1, 2, 3}}


class MaskAllFalseLater(W8):
    """`action_masks` says no action is live for actor 0 from the 3rd step."""

    def action_masks(self):
        m = torch.ones(self.num_envs, 3, dtype=torch.bool)
        if self.steps >= 3:
            m[0] = False
        return m


class MaskWrongRows(W8):
    """`action_masks` has num_envs + 1 rows."""

    def action_masks(self):
        return torch.ones(self.num_envs + 1, 3, dtype=torch.bool)


class MaskReturnsNone(W8):
    """`action_masks` returns None from the 3rd step."""

    def action_masks(self):
        return None if self.steps >= 3 else torch.ones(self.num_envs, 3, dtype=torch.bool)


class TasksLater(W8Tasks):
    """Base of the task worlds that go wrong at their 3rd step."""

    def _post(self, result):
        return self._bad(result) if self.steps >= 3 else result

    def _bad(self, result):
        return result


class PartsWrongLength(TasksLater):
    """Episode parts with num_envs - 1 rows."""

    def _bad(self, r):
        p = r.parts
        return r._replace(parts=EpisodeParts(*(getattr(p, f)[1:] for f in ("task", "outcome", "n_subagents", "assigned",
                                                                          "completed", "critical_steps", "serial_steps"))))


class PartsNone(TasksLater):
    """A task world that stops returning parts (None) at its 3rd step."""

    def _bad(self, r):
        return r._replace(parts=None)


class PartsOutcomeInf(TasksLater):
    """outcome = +inf where an episode ends."""

    def _bad(self, r):
        p = r.parts
        return r._replace(parts=EpisodeParts(p.task, torch.full_like(p.outcome, float("inf")), p.n_subagents, p.assigned,
                                             p.completed, p.critical_steps, p.serial_steps))


class PartsOutcomeNegative(TasksLater):
    """outcome = -3 where an episode ends."""

    def _bad(self, r):
        p = r.parts
        return r._replace(parts=EpisodeParts(p.task, torch.full_like(p.outcome, -3.0), p.n_subagents, p.assigned,
                                             p.completed, p.critical_steps, p.serial_steps))


class PartsCompletedAboveAssigned(TasksLater):
    """completed = 5 subtasks of assigned = 1."""

    def _bad(self, r):
        p = r.parts
        return r._replace(parts=EpisodeParts(p.task, p.outcome, p.n_subagents, torch.ones_like(p.assigned),
                                             torch.full_like(p.completed, 5.0), p.critical_steps, p.serial_steps))


class TaskIdsNoFamily(W8Tasks):
    """task ids without the `family-index` form ('alpha', 'beta')."""

    task_ids = ["alpha", "beta"]


class TaskIdsNone(W8Tasks):
    """task_ids = None on a world that returns parts."""

    task_ids = None


class TaskIdsHuge(W8Tasks):
    """A task bank of 3 million ids."""

    task_ids = [f"t-{i}" for i in range(3_000_000)]


class NextTaskIgnored(W8Tasks):
    """Reads next_task but calls it twice per step (a sampler pick consumed twice)."""

    def step(self, action, next_task=None):
        if callable(next_task):
            first = next_task
            next_task = lambda done: (first(done), first(done))[1]  # noqa: E731
        return super().step(action, next_task)


class NextTaskWrongIndex(W8Tasks):
    """Resets to task index 7 of a 3-task bank, whatever the sampler picked."""

    def step(self, action, next_task=None):
        result = super().step(action, None)
        self.task = torch.where(result.terminated, torch.full_like(self.task, 7), self.task)
        return result
'''

# External worlds written from docs/guides/external-worlds.md, each wrong in one way. Good is the
# control.
EXT = r'''
import asyncio
import ctypes
import os
import signal
import time

import numpy as np
import torch
from parlightning.envs.base import ActionSpec


class Good:
    """Control: 3 features, 2 actions, 3-step episodes."""

    observation_shape = (3,)
    action_spec = ActionSpec("discrete", nvec=(2,))
    tasks = ["easy-0", "hard-0"]

    def __init__(self, seed: int = 0, length: int = 3):
        self.length = length
        self.t = 0
        self.calls = 0

    def reset(self, task):
        self.t = 0
        self.task = task
        return np.zeros(3, dtype=np.float32)

    def step(self, action):
        self.t += 1
        self.calls += 1
        done = self.t >= self.length
        a = int(np.asarray(action).reshape(-1)[0])
        return np.full(3, self.t, dtype=np.float32), float(a == 1), done, False, ({"outcome": 1.0} if done else {})


class Later(Good):
    """Base: goes wrong at the 4th call of step."""

    def step(self, action):
        out = super().step(action)
        return self.bad(out) if self.calls >= 4 else out

    def bad(self, out):
        return out


class ObsTensorGrad(Later):
    """Observation is a torch tensor that requires grad."""

    def bad(self, out):
        return (torch.ones(3, requires_grad=True),) + out[1:]


class ObsNestedList(Later):
    """Observation is [[1, 2, 3]] (one extra nesting)."""

    def bad(self, out):
        return ([[1.0, 2.0, 3.0]],) + out[1:]


class ObsComplex(Later):
    """Observation is complex-valued."""

    def bad(self, out):
        return (np.ones(3, dtype=np.complex64),) + out[1:]


class RewardBoolNp(Later):
    """Reward is a numpy bool array of shape (2,)."""

    def bad(self, out):
        return (out[0], np.array([True, False])) + out[2:]


class RewardHuge(Later):
    """Reward is 1e39 (overflows float32)."""

    def bad(self, out):
        return (out[0], 1e39) + out[2:]


class PartsOutcomeArray(Later):
    """parts['outcome'] is an array of 3 numbers."""

    def bad(self, out):
        return out[:4] + ({"outcome": np.ones(3)} if out[2] else {},)


class PartsNotDictAtEnd(Later):
    """parts is a list at the episode's end."""

    def bad(self, out):
        return out[:4] + ([1.0] if out[2] else {},)


class StepReturnsCoroutine(Later):
    """A sync step that returns a coroutine object (forgot async def)."""

    def bad(self, out):
        async def later():
            return out
        return later()


class MixedAsync(Good):
    """reset is sync, step is async def (one of the two forgotten)."""

    async def step(self, action):
        return Good.step(self, action)


class StepSysExit(Later):
    """step calls sys.exit(2) at the 4th call."""

    def bad(self, out):
        raise SystemExit(2)


class StepUnpicklableError(Later):
    """step raises an exception that cannot be re-created from its args (workers: pickling)."""

    def bad(self, out):
        class Weird(Exception):
            def __init__(self, a, b):
                super().__init__(f"{a}/{b}")
        raise Weird(1, 2)


class StepRecursion(Later):
    """step recurses without end at the 4th call."""

    def bad(self, out):
        return self.bad(out)


class Segfault(Later):
    """step segfaults (a C extension bug) at the 4th call; run with workers: 1."""

    def bad(self, out):
        ctypes.string_at(0)


class AlwaysRaises(Good):
    """step always raises."""

    def step(self, action):
        raise RuntimeError("backend unavailable")


class SlowStep(Good):
    """step takes 3 s."""

    def step(self, action):
        time.sleep(3)
        return super().step(action)


class ObsShapeList(Good):
    """observation_shape is a list [3] (fine) but action_spec nvec a list of strings (set in __init__)."""

    def __init__(self, seed: int = 0, length: int = 3):
        super().__init__(seed, length)
        self.action_spec = ActionSpec("discrete", nvec=("2",))


class NoActionSpec:
    """A world with observation_shape, reset and step but no action_spec."""

    observation_shape = (3,)

    def __init__(self, seed: int = 0):
        pass

    def reset(self, task):
        return np.zeros(3, dtype=np.float32)

    def step(self, action):
        return np.zeros(3, dtype=np.float32), 0.0, True, False, {}


class InitTakesNothing(Good):
    """The constructor takes no arguments at all."""

    def __init__(self):
        super().__init__()


def factory_returns_string(seed=0):
    return "not a world"
'''

# Samplers, strategies, callbacks and subagent functions a user might write, each wrong in one way.
USER = r'''
import os
import signal
import threading
import time

import lightning
import torch
from parlightning.callbacks import RolloutCallback
from parlightning.distribution.strategies import WorkUnit


class GoodSampler:
    """Control: the first key."""

    def pick(self, keys, round_index):
        return keys[round_index % len(keys)]

    def record(self, task_id, score):
        pass


class PickNoRound(GoodSampler):
    """pick(self, keys): the round index argument left out."""

    def pick(self, keys):
        return keys[0]


class PickBool(GoodSampler):
    """pick returns True."""

    def pick(self, keys, round_index):
        return True


class PickTrailingSpace(GoodSampler):
    """pick returns the key with a trailing space."""

    def pick(self, keys, round_index):
        return keys[0] + " "


class PickSleepsForever(GoodSampler):
    """pick blocks for good (waits on a lock it already holds)."""

    def __init__(self):
        self.lock = threading.Lock()

    def pick(self, keys, round_index):
        if round_index >= 1:
            self.lock.acquire()
            self.lock.acquire()
        return keys[0]


class RecordNaNScoreCheck(GoodSampler):
    """record divides by 1 - score and raises ZeroDivisionError on a score of 1."""

    def record(self, task_id, score):
        1.0 / (1.0 - float(score))


class StateNotLoadable(GoodSampler):
    """state_dict holds a generator."""

    def state_dict(self):
        return {"gen": (i for i in range(3))}

    def load_state_dict(self, state):
        pass


class GoodStrategy:
    name = "mine"

    def plan(self, n_workers, round_index, keys):
        return [WorkUnit(worker=w, keys=tuple(keys)) for w in range(n_workers)]


class PlanGenerator(GoodStrategy):
    """plan returns a generator of WorkUnits (not a list)."""

    def plan(self, n_workers, round_index, keys):
        return (WorkUnit(worker=w, keys=tuple(keys)) for w in range(n_workers))


class PlanDuplicateWorker(GoodStrategy):
    """plan gives worker 0 two units."""

    def plan(self, n_workers, round_index, keys):
        return [WorkUnit(worker=0, keys=tuple(keys[:1])), WorkUnit(worker=0, keys=tuple(keys[1:]))]


class PlanNoKeysArg(GoodStrategy):
    """plan(self, n_workers, round_index): keys left out."""

    def plan(self, n_workers, round_index):
        return []


class PlanRaisesRoundTwo(GoodStrategy):
    """plan raises at round 1 (the second rollout)."""

    def plan(self, n_workers, round_index, keys):
        if round_index >= 1:
            raise LookupError("no plan for this round")
        return super().plan(n_workers, round_index, keys)


class ObserveWrongArity(GoodStrategy):
    """observe(self, unit) takes one argument."""

    def observe(self, unit):
        pass


class GoodCallback(RolloutCallback):
    def on_rollout_end(self, trainer, pl_module, rollout):
        pass


class CorruptsRollout(RolloutCallback):
    """on_rollout_end writes NaN into the rollout's rewards."""

    def on_rollout_end(self, trainer, pl_module, rollout):
        for holder in (rollout, getattr(rollout, "buffer", None)):
            for name in ("rewards", "advantages", "returns"):
                t = getattr(holder, name, None)
                if isinstance(t, torch.Tensor) and t.is_floating_point():
                    t.fill_(float("nan"))


class SaveRaises(lightning.Callback):
    """on_save_checkpoint raises (a disk quota check of the user's)."""

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        raise OSError("quota check failed")


class StateLambda(lightning.Callback):
    """A callback whose state_dict holds a lambda."""

    def state_dict(self):
        return {"f": lambda: 1}


class EpisodesEndRaisesLater(RolloutCallback):
    """on_episodes_end raises at its 2nd call (the second rollout's episodes)."""

    def __init__(self):
        self.n = 0

    def on_episodes_end(self, trainer, pl_module, task_ids, parts):
        self.n += 1
        if self.n >= 2:
            raise ValueError("bad task id")


class RolloutStartRecursion(RolloutCallback):
    """on_rollout_start recurses without end."""

    def on_rollout_start(self, trainer, pl_module, round_index):
        return self.on_rollout_start(trainer, pl_module, round_index)


class RankCallback(RolloutCallback):
    """Base of the DDP faults: does `act` on rank `RANK` from the second rollout."""

    RANK = 1

    def on_rollout_start(self, trainer, pl_module, round_index):
        if round_index >= 1 and trainer.global_rank == self.RANK:
            self.act()

    def act(self):
        pass


class KillRank1(RankCallback):
    def act(self):
        os.kill(os.getpid(), signal.SIGKILL)


class StopRank1(RankCallback):
    def act(self):
        os.kill(os.getpid(), signal.SIGSTOP)


class ExitZeroRank1(RankCallback):
    def act(self):
        os._exit(0)


class HangRank1(RankCallback):
    def act(self):
        threading.Event().wait()


class RaiseRank0(RankCallback):
    RANK = 0

    def act(self):
        raise RuntimeError("boom on rank 0")


class SigtermRank0(RankCallback):
    RANK = 0

    def act(self):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)


class NaNRank1(RolloutCallback):
    """Rank 1's rollout rewards become NaN (a diverging rank)."""

    def on_rollout_end(self, trainer, pl_module, rollout):
        if trainer.global_rank == 1:
            CorruptsRollout().on_rollout_end(trainer, pl_module, rollout)


def good_fn(instruction):
    return {"success": True, "steps": 2}


def fn_returns_generator(instruction):
    yield {"success": True, "steps": 1}


def fn_success_yes(instruction):
    return {"success": "yes", "steps": 1}


def fn_steps_huge(instruction):
    return {"success": True, "steps": 10**15}


def fn_unpicklable_result(instruction):
    return {"success": True, "steps": 1, "output": lambda: 1}


class _Weird(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a}-{b}")


def fn_unpicklable_error(instruction):
    raise _Weird(1, 2)


def fn_sleeps_forever(instruction):
    threading.Event().wait()


def fn_sigkill_self(instruction):
    os.kill(os.getpid(), signal.SIGKILL)


def fn_recursion(instruction):
    return fn_recursion(instruction)


def fn_returns_tuple(instruction):
    return (True, 1)
'''

# ------------------------------------------------------------------------------------ configs
Q, TINY, CART, UW, EXTC, POOLC = r5.Q, r5.TINY, r5.CART, r5.UW, r5.EXTC, r5.POOLC
TW = ["--config", "{fx}/user.yaml", "--data.env", "r8worlds.W8Tasks"]

USER_YAML = r5.user_yaml("r8worlds.W8", num_steps=10)
EXT_YAML = r5.ext_yaml("r8ext:Good", num_steps=6)
POOL_YAML = r5.pool_yaml(world_kwargs="{families: [solo, fanout], tasks_per_family: 2, max_width: 2, n_skills: 2}")

BOOK = r5.CaseBook(worlds="r8worlds")  # case / fit / yaml_case / world / ext append to CASES
CASES: list[Case] = BOOK.cases
case, fit, yaml_case, world, ext = BOOK.case, BOOK.fit, BOOK.yaml_case, BOOK.world, BOOK.ext


def pool(name: str, pool_spec: str, expect: Any, extra_init: str = "", **kw: Any) -> None:
    body = ("data:\n  env:\n    class_path: parlightning.envs.external.ExternalBatchedEnv\n    init_args:\n"
            "      world: parlightning.subagents.world:PoolOrchestrationWorld\n"
            "      world_kwargs: {families: [solo, fanout], tasks_per_family: 2, max_width: 2, n_skills: 2}\n"
            f"      shared:\n        pool: {pool_spec}\n      step_timeout: 30\n{extra_init}")
    yaml_case(name, "pools", body, expect, base=POOLC, **kw)


def script(name: str, argv: list[str], expect: Any, timeout: float = 60) -> None:
    case(name, "scripts", "cmd", [PY, "{root}/" + argv[0]] + argv[1:], expect, timeout=timeout)


def api(name: str, code: str, expect: Any, **kw: Any) -> None:
    case(name, "api", "py", code, expect, **kw)


def callbacks_yaml(*paths: str) -> str:
    return "trainer:\n  callbacks:\n" + "".join(f"    - class_path: {p}\n" for p in paths)


# ------------------------------------------------------------------------------------ controls
world("control-w8", "W8", (), control=True)
world("control-w8-tasks", "W8Tasks", (), control=True)
fit("control-w8-factory", "world", UW + ["--data.env", "r8worlds.make_w8"], (), control=True)
fit("control-ext-good", "external", EXTC, (), control=True)
fit("control-sampler", "sampler", TW + ["--data.sampler", "r8user.GoodSampler"], (), control=True)
fit("control-strategy", "strategy", TINY + ["--config", "c.yaml"], (), control=True,
    files={"c.yaml": "trainer:\n  callbacks:\n    - class_path: parlightning.callbacks.StrategyPlanner\n"
                     "      init_args: {strategy: {class_path: r8user.GoodStrategy}}\n"})
yaml_case("control-callback", "callback", callbacks_yaml("r8user.GoodCallback"), (), base=UW, control=True)
pool("control-process-fn", "{class_path: parlightning.subagents.ProcessPool, init_args: {fn: 'r8user:good_fn', workers: 1}}",
     (), control=True, timeout=120)

# ------------------------------------------------------------------------------------ YAML: values of another type
yaml_case("yaml-num-envs-true", "yaml", "data: {num_envs: true}", "num_envs")
yaml_case("yaml-hidden-sizes-bool-entry", "yaml", "model: {hidden_sizes: [true, 64]}", "hidden_sizes")
yaml_case("yaml-max-epochs-true", "yaml", "trainer: {max_epochs: true}", "max_epochs")
yaml_case("yaml-lr-nan", "yaml", "model: {lr: .nan}", "lr")
yaml_case("yaml-lr-overflow", "yaml", "model: {lr: 1e400}", "lr")
yaml_case("yaml-hidden-sizes-inf", "yaml", "model: {hidden_sizes: [64, .inf]}", "hidden_sizes")
yaml_case("yaml-num-steps-float-text", "yaml", "data: {num_steps: 1e1}", "num_steps")
yaml_case("yaml-seed-everything-true", "yaml", "seed_everything: true", "seed")
yaml_case("yaml-gamma-string-percent", "yaml", "data: {gamma: 99%}", "gamma")
yaml_case("yaml-python-object-tag", "yaml", "model: !!python/object/apply:os.system ['echo pwned > pwned.txt']", "model|tag|yaml")
yaml_case("yaml-heartbeat-negative", "yaml", "heartbeat_timeout: -1", "heartbeat_timeout")
yaml_case("yaml-stall-timeout-nan", "yaml", "stall_timeout: .nan", "stall_timeout")
yaml_case("yaml-callbacks-mapping", "yaml", "trainer: {callbacks: {class_path: parlightning.callbacks.PARLAnnealing}}", "callbacks")
yaml_case("yaml-callbacks-number", "yaml", "trainer: {callbacks: [42]}", "callbacks")
yaml_case("yaml-callback-init-arg-typo", "yaml",
          "trainer:\n  callbacks:\n    - class_path: parlightning.callbacks.PARLAnnealing\n      init_args: {unit: env_steps, horizon: 5}\n",
          "horizon")
yaml_case("yaml-two-strategy-planners", "yaml",
          "trainer:\n  callbacks:\n    - class_path: parlightning.callbacks.StrategyPlanner\n"
          "      init_args: {strategy: {class_path: parlightning.distribution.strategies.DataParallel}}\n"
          "    - class_path: parlightning.callbacks.StrategyPlanner\n"
          "      init_args: {strategy: {class_path: parlightning.distribution.strategies.ClusterParallel}}\n",
          "StrategyPlanner")
yaml_case("yaml-bom-and-tab", "yaml", "\ufeffmodel:\n\tlr: 0.001\n", "c.yaml|tab")
yaml_case("yaml-two-documents", "yaml", "model: {lr: 0.001}\n---\nmodel: {lr: 0.01}\n", "c.yaml|document")
yaml_case("yaml-env-class-path-with-spaces", "yaml", "data:\n  env: {class_path: ' parlightning.envs.SwarmEnv'}\n", "class_path|env")
yaml_case("yaml-reward-schedule-start-nan", "yaml",
          "data:\n  reward:\n    init_args:\n      lambda1:\n        class_path: parlightning.parl.reward.CosineSchedule\n"
          "        init_args: {start: .nan, end: 0.0, horizon: 1000}\n", "start")
yaml_case("yaml-reward-horizon-inf", "yaml",
          "data:\n  reward:\n    init_args:\n      lambda2:\n        class_path: parlightning.parl.reward.LinearSchedule\n"
          "        init_args: {start: 0.1, end: 0.0, horizon: .inf}\n", "horizon")
yaml_case("yaml-sampler-seed-negative", "yaml",
          "data:\n  sampler:\n    class_path: parlightning.distribution.samplers.DifficultyWeighted\n    init_args: {c: .inf}\n", "c")
yaml_case("yaml-swarm-max-width-fraction", "yaml", "data:\n  env:\n    init_args: {max_width: 12.5}\n", "max_width")
yaml_case("yaml-swarm-split-wider-than-width", "yaml", "data:\n  env:\n    init_args: {splits: [1, 2, 1000]}\n", "splits")
yaml_case("yaml-swarm-reliability-nan", "yaml", "data:\n  env:\n    init_args: {subagent_reliability: .nan}\n", "subagent_reliability")
yaml_case("yaml-swarm-spawn-steps-inf", "yaml", "data:\n  env:\n    init_args: {spawn_steps: .inf}\n", "spawn_steps")
yaml_case("yaml-swarm-merge-cost-negative", "yaml", "data:\n  env:\n    init_args: {merge_cost: -1}\n", "merge_cost")
yaml_case("yaml-swarm-round-cap-typo", "yaml", "data:\n  env:\n    init_args: {round_cap: terminall}\n", "round_cap")
yaml_case("yaml-swarm-family-capitalised", "yaml", "data:\n  env:\n    init_args: {families: [Solo, fanout]}\n", "Solo|families")
yaml_case("yaml-swarm-bank-seed-fraction", "yaml", "data:\n  env:\n    init_args: {bank_seed: 1.5}\n", "bank_seed")
yaml_case("yaml-swarm-family-tasks-zero", "yaml", "data:\n  env:\n    init_args: {family_tasks: {solo: 0}}\n", "family_tasks|solo")
yaml_case("yaml-actors-in-flight-above-envs", "yaml", "data: {collect: trajectories, max_policy_lag: 1, actors_in_flight: 1000}",
          "actors_in_flight", base=EXTC)
yaml_case("yaml-rnn-hidden-huge", "yaml", "model: {policy: gru, rnn_hidden: 200000}", "rnn_hidden|memory")
yaml_case("yaml-init-from-url", "yaml", "model: {init_from: 'https://example.com/policy.ckpt'}", "init_from")
yaml_case("yaml-policy-slots-on-flat-world", "yaml", "model: {policy: slots}", "slots|policy", base=UW)
yaml_case("yaml-num-minibatches-above-rows", "yaml", "data: {num_minibatches: 1000}", "num_minibatches")

# ------------------------------------------------------------------------------------ Lightning settings it refuses itself
yaml_case("ckptcb-every-n-steps-and-epochs", "trainer",
          "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
          "      init_args: {every_n_train_steps: 1, every_n_epochs: 1}\n", "every_n", base=UW)
yaml_case("ckptcb-top-k-without-monitor", "trainer",
          "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
          "      init_args: {save_top_k: 3}\n", "save_top_k|monitor", base=UW)
yaml_case("ckptcb-dirpath-dev-null", "trainer",
          "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
          "      init_args: {dirpath: /dev/null}\n", "dirpath", base=UW)
yaml_case("lr-monitor-without-logger", "trainer",
          "trainer:\n  logger: false\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.LearningRateMonitor\n",
          "LearningRateMonitor|logger", base=UW)
yaml_case("early-stopping-patience-negative", "trainer",
          "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.EarlyStopping\n"
          "      init_args: {monitor: charts/episodic_return, patience: -1}\n", "patience", base=UW)
fit("trainer-precision-16-mixed-cpu", "trainer", UW + ["--trainer.precision", "16-mixed"], "precision")
fit("trainer-limit-train-batches-above-one", "trainer", UW + ["--trainer.limit_train_batches", "1.5"], "limit_train_batches")
fit("trainer-num-sanity-negative", "trainer", UW + ["--trainer.num_sanity_val_steps", "-2"], "num_sanity_val_steps")
fit("trainer-reload-dataloaders-negative", "trainer", UW + ["--trainer.reload_dataloaders_every_n_epochs", "-1"],
    "reload_dataloaders_every_n_epochs")
fit("trainer-detect-anomaly-maybe", "trainer", UW + ["--trainer.detect_anomaly", "maybe"], "detect_anomaly")
fit("trainer-max-time-dict-typo", "trainer", UW + ["--trainer.max_time", "{minutes: 1, secs: 3}"], "max_time")
fit("trainer-val-check-interval-zero", "trainer", UW + ["--trainer.val_check_interval", "0"], "val_check_interval")
fit("trainer-max-epochs-beyond-int64", "trainer", UW + ["--trainer.max_epochs", "99999999999999999999"], "max_epochs")
fit("trainer-callbacks-append-unknown", "trainer", UW + ["--trainer.callbacks+=r8user.NoSuchCallback"], "NoSuchCallback|callbacks")
fit("trainer-logger-tensorboard-version-negative", "trainer",
    UW + ["--trainer.logger", "lightning.pytorch.loggers.TensorBoardLogger", "--trainer.logger.save_dir", ".",
          "--trainer.logger.version", "-3"], "version")

# ------------------------------------------------------------------------------------ fit flags
fit("fit-em-dash-flag", "fit", UW + ["\u2014trainer.max_epochs", "1"], "trainer.max_epochs")
fit("fit-flag-with-trailing-space", "fit", UW + ["--data.num_envs ", "8"], "num_envs")
fit("fit-flag-double-equals", "fit", UW + ["--data.num_envs=8=9"], "num_envs")
fit("fit-max-epochs-empty-string", "fit", UW + ["--trainer.max_epochs", ""], "max_epochs")
fit("fit-hidden-sizes-unclosed", "fit", UW + ["--model.hidden_sizes", "[64,"], "hidden_sizes")
fit("fit-hidden-sizes-empty-list", "fit", UW + ["--model.hidden_sizes", "[]"], "hidden_sizes")
fit("fit-heartbeat-negative-flag", "fit", UW + ["--heartbeat_timeout", "-3"], "heartbeat_timeout")
fit("fit-stall-timeout-nan-flag", "fit", UW + ["--stall_timeout", "nan"], "stall_timeout")
fit("fit-torch-threads-huge", "fit", UW + ["--torch_threads", "100000"], "torch_threads")
fit("fit-config-url", "fit", ["--config", "https://example.com/swarm.yaml"], "config")
fit("fit-config-binary-png", "fit", ["--config", "image.png"], "config|image.png",
    files={"image.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"})
fit("fit-config-symlink-loop", "fit", ["--config", "loop.yaml"], "loop.yaml|config", files={"loop.yaml": "link:loop.yaml"})
fit("fit-config-json-wrong", "fit", UW + ["--config", "c.json"], "lr", files={"c.json": '{"model": {"lr": "fast"}}'})
fit("fit-env-arg-for-previous-world", "fit", TINY + ["--data.env", "parlightning.envs.CartPoleEnv",
                                                     "--data.env.init_args.max_width", "4"], "max_width")
fit("fit-ckpt-path-dev-urandom", "fit", UW + ["--ckpt_path", "/dev/urandom"], "ckpt_path", timeout=60)
fit("fit-ckpt-path-newline-name", "fit", UW + ["--ckpt_path", "last\n.ckpt"], "ckpt_path")
fit("fit-data-seed-huge", "fit", UW + ["--data.seed", "100000000000000000000"], "seed")
fit("fit-model-init-from-tilde-missing", "fit", UW + ["--model.init_from", "~/no/such/policy.ckpt"], "init_from")
fit("fit-print-config-and-ckpt-missing", "fit", UW + ["--ckpt_path", "missing.ckpt", "--print_config"], "ckpt_path")
fit("collect-process-world-memory-error", "fit",
    UW + ["--data.env", "r8worlds.StepMemoryError", "--data.max_policy_lag", "1", "--data.collect_in", "process"],
    ("StepMemoryError", "MemoryError|memory"), timeout=90)

# ------------------------------------------------------------------------------------ tensor worlds
for name, cls, expect in [
    ("world-obs-half-later", "ObsHalfLater", ("ObsHalfLater", "dtype|float16|half")),
    ("world-obs-bool-later", "ObsBoolLater", ("ObsBoolLater", "dtype|bool")),
    ("world-reward-python-float-later", "RewardFloatLater", ("RewardFloatLater", "reward")),
    ("world-reward-double-later", "RewardDoubleLater", ("RewardDoubleLater", "reward")),
    ("world-truncated-long-later", "TruncatedLongLater", ("TruncatedLongLater", "truncated")),
    ("world-final-obs-int-later", "FinalObsIntLater", ("FinalObsIntLater", "final_obs|final observation")),
    ("world-obs-meta-later", "ObsMetaLater", ("ObsMetaLater", "device|meta")),
    ("world-step-recursion", "StepRecursion", ("StepRecursion", "recursion")),
    ("world-step-memory-error", "StepMemoryError", ("StepMemoryError", "memory")),
    ("world-step-unprintable-error", "StepUnprintableError", ("StepUnprintableError",)),
    ("world-step-multiline-error", "StepMultilineError", ("StepMultilineError", "bad frame")),
    ("world-step-empty-error", "StepEmptyError", ("StepEmptyError", "RuntimeError")),
    ("world-step-stop-iteration", "StepStopIteration", ("StepStopIteration", "StopIteration")),
    ("world-step-not-implemented", "StepNotImplemented", ("StepNotImplemented", "step")),
    ("world-init-huge-alloc", "InitHugeAlloc", ("data.env|InitHugeAlloc", "memory|alloc")),
    ("world-nvec-huge", "NvecHuge", ("nvec|memory|action",)),
    ("world-obs-shape-huge", "ObsShapeHuge", ("observation|memory",)),
    ("world-obs-shape-string", "ObsShapeString", ("observation_shape",)),
    ("world-obs-shape-negative", "ObsShapeNegative", ("observation_shape",)),
    ("world-action-spec-is-class", "ActionSpecIsClass", ("action_spec",)),
    ("world-action-spec-tuple", "ActionSpecTuple", ("action_spec",)),
    ("world-continuous-nan-bounds", "ContinuousNaNBounds", ("low|bound",)),
    ("world-continuous-shape-negative", "ContinuousShapeNegative", ("shape",)),
    ("world-num-envs-float", "NumEnvsFloat", ("NumEnvsFloat|num_envs",)),
    ("world-device-cuda-absent", "DeviceCuda", ("device|cuda",)),
    ("world-device-gpu-string", "DeviceString", ("device",)),
    ("world-init-kw-only-required", "InitKwOnlyRequired", ("level",)),
    ("world-reset-returns-dict", "ResetReturnsDict", ("reset",)),
    ("world-reset-wrong-rows", "ResetWrongRows", ("reset", "rows|shape|num_envs")),
    ("world-state-dict-lambda", "StateDictLambda", ("state_dict",)),
    ("world-state-dict-set", "StateDictHugeList", ("state_dict",)),
    ("world-mask-all-false-later", "MaskAllFalseLater", ("action_masks|mask",)),
    ("world-mask-wrong-rows", "MaskWrongRows", ("action_masks|mask",)),
    ("world-mask-none-later", "MaskReturnsNone", ("action_masks|mask",)),
    ("world-parts-wrong-length", "PartsWrongLength", ("PartsWrongLength", "parts|task")),
    ("world-parts-none-later", "PartsNone", ("PartsNone", "parts")),
    ("world-parts-outcome-inf", "PartsOutcomeInf", ("PartsOutcomeInf", "outcome")),
    ("world-parts-outcome-negative", "PartsOutcomeNegative", ("PartsOutcomeNegative", "outcome")),
    ("world-parts-completed-above-assigned", "PartsCompletedAboveAssigned", ("completed",)),
    ("world-task-ids-no-family", "TaskIdsNoFamily", ("task_ids", "family")),
    ("world-task-ids-none-with-parts", "TaskIdsNone", ("task_ids",)),
    ("world-next-task-called-twice", "NextTaskIgnored", ("next_task",)),
    ("world-next-task-index-out-of-bank", "NextTaskWrongIndex", ("NextTaskWrongIndex", "task")),
]:
    world(name, cls, expect, base=TW if cls in ("PartsWrongLength", "PartsNone", "PartsOutcomeInf", "PartsOutcomeNegative",
                                                 "PartsCompletedAboveAssigned", "TaskIdsNoFamily", "TaskIdsNone",
                                                 "NextTaskIgnored", "NextTaskWrongIndex") else None)
world("world-task-ids-three-million", "TaskIdsHuge", ("task_ids",), base=TW, timeout=90)
world("world-step-keyboard-interrupt", "StepKeyboardInterrupt", ("interrupt",))
world("world-step-sigterm", "StepSigterm", ("SIGTERM",), allow=(r5.RUN_META,))
fit("world-factory-rank-dependent-single", "world", UW + ["--data.env", "r8worlds.make_rank_dependent",
                                                           "--data.env.init_args.num_envs", "3"], "num_envs")

# ------------------------------------------------------------------------------------ external worlds
for name, cls, expect in [
    ("ext-obs-tensor-grad", "ObsTensorGrad", ("ObsTensorGrad", "observation")),
    ("ext-obs-nested-list", "ObsNestedList", ("ObsNestedList", "observation")),
    ("ext-obs-complex", "ObsComplex", ("ObsComplex", "observation")),
    ("ext-reward-bool-array", "RewardBoolNp", ("RewardBoolNp", "reward")),
    ("ext-reward-overflows-float32", "RewardHuge", ("RewardHuge", "reward")),
    ("ext-parts-outcome-array", "PartsOutcomeArray", ("PartsOutcomeArray", "outcome")),
    ("ext-parts-list-at-end", "PartsNotDictAtEnd", ("PartsNotDictAtEnd", "parts")),
    ("ext-step-returns-coroutine", "StepReturnsCoroutine", ("StepReturnsCoroutine", "coroutine|async")),
    ("ext-mixed-async", "MixedAsync", ("MixedAsync", "async")),
    ("ext-step-sys-exit", "StepSysExit", ("StepSysExit", "exit")),
    ("ext-step-recursion", "StepRecursion", ("StepRecursion", "recursion")),
    ("ext-nvec-strings", "ObsShapeList", ("nvec|action_spec",)),
    ("ext-no-action-spec", "NoActionSpec", ("action_spec",)),
    ("ext-init-takes-nothing", "InitTakesNothing", ("InitTakesNothing", "seed|argument")),
]:
    ext(name, f'{{world: "r8ext:{cls}", step_timeout: 20}}', expect)
ext("ext-unpicklable-error-in-worker", '{world: "r8ext:StepUnpicklableError", step_timeout: 20, workers: 1}',
    ("StepUnpicklableError",), timeout=90)
ext("ext-segfault-in-worker", '{world: "r8ext:Segfault", step_timeout: 20, workers: 1}', ("worker", "died|signal|-11"), timeout=90)
ext("ext-sys-exit-in-worker", '{world: "r8ext:StepSysExit", step_timeout: 20, workers: 1}', ("StepSysExit", "exit"), timeout=90)
ext("ext-step-timeout-tiny", '{world: "r8ext:SlowStep", step_timeout: 0.5}', ("step_timeout",))
ext("ext-drop-everything", '{world: "r8ext:AlwaysRaises", on_error: drop, drop_budget: 0.5}', ("drop|AlwaysRaises",))
ext("ext-switch-interval-ten-seconds", '{world: "r8ext:Good", switch_interval: 10}', ("switch_interval",))
ext("ext-world-trailing-space", '{world: "r8ext:Good "}', ("world",))
ext("ext-world-three-colons", '{world: "r8ext:Good:Extra"}', ("world",))
ext("ext-world-is-os-getcwd", '{world: "os:getcwd"}', ("world|getcwd",))
ext("ext-world-is-builtin-dict", '{world: "builtins:dict"}', ("world|dict",))
ext("ext-factory-returns-string", '{world: "r8ext:factory_returns_string"}', ("world|factory_returns_string",))
ext("ext-retries-on-always-raises", '{world: "r8ext:AlwaysRaises", retries: 3}', ("AlwaysRaises", "backend unavailable"))
ext("ext-workers-more-than-actors-trajectories", '{world: "r8ext:Good", workers: 9}', ("workers",),
    extra=["--data.collect", "trajectories", "--data.max_policy_lag", "1"])

# ------------------------------------------------------------------------------------ pools and subagent functions
PP = "parlightning.subagents.ProcessPool"
for name, fn, expect in [
    ("process-fn-returns-generator", "fn_returns_generator", ("fn_returns_generator",)),
    ("process-fn-success-yes", "fn_success_yes", ("fn_success_yes", "success")),
    ("process-fn-steps-huge", "fn_steps_huge", ("fn_steps_huge", "steps")),
    ("process-fn-unpicklable-result", "fn_unpicklable_result", ("fn_unpicklable_result",)),
    ("process-fn-unpicklable-error", "fn_unpicklable_error", ("fn_unpicklable_error",)),
    ("process-fn-sigkill-self", "fn_sigkill_self", ("fn_sigkill_self", "died|killed|signal|-9")),
    ("process-fn-recursion", "fn_recursion", ("fn_recursion", "recursion")),
    ("process-fn-returns-tuple", "fn_returns_tuple", ("fn_returns_tuple",)),
]:
    pool(name, f"{{class_path: {PP}, init_args: {{fn: 'r8user:{fn}', workers: 1}}}}", expect, timeout=120)
pool("process-fn-sleeps-no-timeout", f"{{class_path: {PP}, init_args: {{fn: 'r8user:fn_sleeps_forever', workers: 1}}}}",
     ("step_timeout|timeout",), extra_init="      step_timeout: 5\n", timeout=120)
pool("process-workers-sixty-five", f"{{class_path: {PP}, init_args: {{fn: 'r8user:good_fn', workers: 65}}}}", ("workers",), timeout=90)
pool("process-fn-with-spaces", f"{{class_path: {PP}, init_args: {{fn: 'r8user : good_fn', workers: 1}}}}", ("fn",), timeout=90)
pool("process-start-timeout-nan", f"{{class_path: {PP}, init_args: {{fn: 'r8user:good_fn', start_timeout: .nan}}}}",
     ("start_timeout",), timeout=90)
pool("simulated-seconds-per-step-huge", "{class_path: parlightning.subagents.SimulatedPool, init_args: {seconds_per_step: 1000}}",
     ("step_timeout|timeout",), extra_init="      step_timeout: 3\n", timeout=90)
pool("http-timeout-nan", "{class_path: parlightning.subagents.HTTPPool, init_args: {base_url: 'http://127.0.0.1:9/v1', timeout: .nan}}",
     ("timeout",))
pool("http-workers-negative", "{class_path: parlightning.subagents.HTTPPool, init_args: {base_url: 'http://127.0.0.1:9/v1', workers: -2}}",
     ("workers",))
pool("http-base-url-with-spaces", "{class_path: parlightning.subagents.HTTPPool, init_args: {base_url: 'http://local host:8000/v1'}}",
     ("base_url",))
pool("async-http-timeout-zero", "{class_path: parlightning.subagents.AsyncHTTPPool, init_args: {base_url: 'http://127.0.0.1:9/v1', timeout: 0}}",
     ("timeout",))
pool("pool-class-path-is-sampler", "{class_path: parlightning.distribution.samplers.RoundRobin}", ("pool",))
pool("pool-spec-missing-class-path", "{init_args: {reliability: 0.5}}", ("pool|class_path",))

# ------------------------------------------------------------------------------------ samplers, strategies, callbacks
for name, cls, expect in [
    ("sampler-pick-no-round", "PickNoRound", ("PickNoRound", "pick")),
    ("sampler-pick-bool", "PickBool", ("PickBool", "pick")),
    ("sampler-pick-trailing-space", "PickTrailingSpace", ("PickTrailingSpace",)),
    ("sampler-record-zero-division", "RecordNaNScoreCheck", ("RecordNaNScoreCheck", "record")),
    ("sampler-state-generator", "StateNotLoadable", ("StateNotLoadable", "state_dict")),
]:
    fit(name, "sampler", TW + ["--data.sampler", f"r8user.{cls}"], expect)
fit("sampler-pick-deadlocks", "sampler", TW + ["--data.sampler", "r8user.PickSleepsForever", "--trainer.max_epochs", "3"],
    ("PickSleepsForever|pick|stuck|stall",), timeout=90, allow=(r5.RUN_META,))
fit("sampler-builtin-seed-word", "sampler", TW + ["--data.sampler", "parlightning.distribution.samplers.RoundRobin",
                                                   "--data.sampler.init_args.seed", "abc"], ("seed",))

for name, cls, expect in [
    ("strategy-plan-generator", "PlanGenerator", ("PlanGenerator", "plan")),
    ("strategy-plan-duplicate-worker", "PlanDuplicateWorker", ("PlanDuplicateWorker", "worker")),
    ("strategy-plan-no-keys-arg", "PlanNoKeysArg", ("PlanNoKeysArg", "plan")),
    ("strategy-plan-raises-round-two", "PlanRaisesRoundTwo", ("PlanRaisesRoundTwo", "no plan")),
    ("strategy-observe-wrong-arity", "ObserveWrongArity", ("ObserveWrongArity", "observe")),
]:
    yaml_case(name, "strategy", "trainer:\n  callbacks:\n    - class_path: parlightning.callbacks.StrategyPlanner\n"
              f"      init_args: {{strategy: {{class_path: r8user.{cls}}}}}\n", expect,
              extra=["--trainer.max_epochs", "2"], allow=(r5.RUN_META,))
yaml_case("strategy-builtin-unknown-arg", "strategy",
          "trainer:\n  callbacks:\n    - class_path: parlightning.callbacks.StrategyPlanner\n"
          "      init_args: {strategy: {class_path: parlightning.distribution.strategies.DataParallel, init_args: {foo: 1}}}\n",
          ("foo",))

for name, cls, expect, base, kw in [
    ("callback-corrupts-rollout-nan", "CorruptsRollout", ("nan|non-finite",), UW, {}),
    ("callback-save-checkpoint-raises", "SaveRaises", ("SaveRaises|checkpoint", "quota"), UW, {"allow": (r5.RUN_META,)}),
    ("callback-state-dict-lambda", "StateLambda", ("StateLambda|callback|state",), UW, {}),
    ("callback-episodes-end-raises-later", "EpisodesEndRaisesLater", ("EpisodesEndRaisesLater", "bad task id"), TW, {}),
    ("callback-rollout-start-recursion", "RolloutStartRecursion", ("RolloutStartRecursion", "recursion"), UW, {}),
]:
    kw.setdefault("allow", (r5.RUN_META,))  # a fault in the second rollout may leave the run's folder and whole checkpoints
    yaml_case(name, "callback", callbacks_yaml(f"r8user.{cls}"), expect, base=base, extra=["--trainer.max_epochs", "2"], **kw)

# ------------------------------------------------------------------------------------ checkpoints
fit("ckpt-resume-other-sampler", "checkpoint", TINY + ["--trainer.max_epochs", "2", "--ckpt_path", "{fx}/swarm.ckpt",
                                                       "--data.sampler", "parlightning.distribution.samplers.DifficultyWeighted"],
    ("sampler",))
fit("ckpt-optimizer-states-emptied", "checkpoint", TINY + ["--trainer.max_epochs", "2", "--ckpt_path", "{fx}/swarm-noopt.ckpt"],
    ("optimizer|checkpoint",))
fit("ckpt-lightning-version-ancient", "checkpoint", TINY + ["--trainer.max_epochs", "2", "--ckpt_path", "{fx}/swarm-oldver.ckpt"],
    ("checkpoint|version",))
fit("ckpt-state-dict-prefix-renamed", "checkpoint", TINY + ["--trainer.max_epochs", "2", "--ckpt_path", "{fx}/swarm-prefix.ckpt"],
    ("state_dict|checkpoint",))
fit("ckpt-weight-int64", "checkpoint", TINY + ["--trainer.max_epochs", "2", "--ckpt_path", "{fx}/swarm-int.ckpt"],
    ("checkpoint|dtype",))
fit("ckpt-hparams-extra-key", "checkpoint", TINY + ["--trainer.max_epochs", "2", "--ckpt_path", "{fx}/swarm-hpextra.ckpt"],
    ("hyper_parameters|checkpoint|foo",))
fit("ckpt-is-exported-pt2", "checkpoint", TINY + ["--ckpt_path", "{fx}/policy.pt2"], ("ckpt_path|pt2|export",))
fit("ckpt-init-from-pt2", "checkpoint", TINY + ["--model.init_from", "{fx}/policy.pt2"], ("init_from",))
fit("ckpt-init-from-nan-weights", "checkpoint", TINY + ["--model.init_from", "{fx}/swarm-nan.ckpt"], ("init_from", "nan|non-finite|checkpoint"))
fit("ckpt-resume-user-world-other-class", "checkpoint", UW + ["--data.env", "r8worlds.W8Tasks", "--trainer.max_epochs", "3",
                                                              "--ckpt_path", "{fx}/w8.ckpt"], ("W8|env|task",))
case("eval-nan-weights", "evaluate", "evaluate", ["--config", "swarm", "--ckpt_path", "{fx}/swarm-nan.ckpt", "--episodes", "1"],
     ("nan|non-finite|checkpoint",))
case("export-nan-weights", "export", "export", ["--ckpt_path", "{fx}/swarm-nan.ckpt", "--out", "p.pt2"],
     ("nan|non-finite|checkpoint",))
api("api-load-policy-nan-weights", "import parlightning\nparlightning.load_policy('{fx}/swarm-nan.ckpt')",
    ("nan|non-finite|checkpoint",))
api("api-load-policy-pt2", "import parlightning\nparlightning.load_policy('{fx}/policy.pt2')", ("pt2|checkpoint|export",))

# ------------------------------------------------------------------------------------ evaluate
EV = ["--config", "swarm", "--ckpt_path", "{fx}/swarm.ckpt", "--episodes", "1"]
case("eval-ckpt-is-pt2", "evaluate", "evaluate", ["--config", "swarm", "--ckpt_path", "{fx}/policy.pt2", "--episodes", "1"],
     ("ckpt_path|pt2",))
case("eval-config-is-the-ckpt", "evaluate", "evaluate", ["--config", "{fx}/swarm.ckpt", "--policy", "serial", "--episodes", "1"],
     ("config",))
case("eval-seed-negative", "evaluate", "evaluate", EV + ["--seed", "-1"], ("seed",))
case("eval-device-cpu-index", "evaluate", "evaluate", EV + ["--device", "cpu:5"], ("device",))
case("eval-device-meta", "evaluate", "evaluate", EV + ["--device", "meta"], ("device",))
case("eval-bank-seeds-beyond-int64", "evaluate", "evaluate", EV + ["--bank_seeds", "99999999999999999999"], ("bank_seeds",))
case("eval-json-is-the-ckpt", "evaluate", "evaluate", ["--config", "swarm", "--ckpt_path", "c.ckpt", "--episodes", "1", "--json", "c.ckpt"],
     ("json",), files={"c.ckpt": "fixture:swarm.ckpt"}, guard=("c.ckpt",))
case("eval-gantt-and-trace-same-file", "evaluate", "evaluate", EV + ["--gantt", "x.png", "--trace", "x.png"], ("gantt|trace",))
case("eval-policy-random-on-user-world", "evaluate", "evaluate", ["--config", "{fx}/user.yaml", "--policy", "random", "--episodes", "1"],
     ("policy|random",))
case("eval-split-heldout-on-cartpole-ckpt", "evaluate", "evaluate", ["--config", "cartpole_fast", "--ckpt_path", "{fx}/cart.ckpt",
                                                                     "--split", "test"], ("split",))
case("eval-episodes-huge", "evaluate", "evaluate", EV + ["--episodes", "1000000000"], ("episodes",), timeout=60)
case("eval-video-on-cartpole-tensor", "evaluate", "evaluate", ["--config", "cartpole_fast", "--ckpt_path", "{fx}/cart.ckpt",
                                                               "--episodes", "1", "--video", "v.mp4"], ("video",))

# ------------------------------------------------------------------------------------ export
case("export-out-uppercase-suffix", "export", "export", ["--ckpt_path", "{fx}/swarm.ckpt", "--out", "policy.PT2"], ("out|suffix|PT2",))
case("export-out-onnx-format-pt2", "export", "export", ["--ckpt_path", "{fx}/swarm.ckpt", "--out", "policy.onnx", "--format", "pt2"],
     ("format|onnx",))
case("export-ckpt-is-pt2", "export", "export", ["--ckpt_path", "{fx}/policy.pt2", "--out", "p2.pt2"], ("ckpt_path|pt2",))
case("export-ckpt-is-run-folder", "export", "export", ["--ckpt_path", "run0", "--out", "p.pt2"], ("ckpt_path",),
     files={"run0": "fixture:run0"})
case("export-format-capitalised", "export", "export", ["--ckpt_path", "{fx}/swarm.ckpt", "--out", "p.onnx", "--format", "ONNX"],
     ("format",))
case("export-out-is-dash", "export", "export", ["--ckpt_path", "{fx}/swarm.ckpt", "--out", "-"], ("out",))
case("export-ckpt-edited-hparams-policy-gru", "export", "export", ["--ckpt_path", "{fx}/swarm-hpgru.ckpt", "--out", "p.pt2"],
     ("checkpoint|policy|hyper",))

# ------------------------------------------------------------------------------------ bc
BC = ["--config", "swarm", "--out", "bc.ckpt", "--rounds", "2", "--num_envs", "8", "--epochs", "1"]
case("bc-teacher-cartpole-ckpt", "bc", "bc", ["--config", "swarm", "--teacher", "{fx}/cart.ckpt", "--out", "bc.ckpt", "--rounds", "2",
                                              "--num_envs", "8", "--epochs", "1"], ("teacher",))
case("bc-rounds-float-text", "bc", "bc", ["--config", "swarm", "--out", "bc.ckpt", "--rounds", "1e3", "--num_envs", "8"], ("rounds",))
case("bc-lr-inf", "bc", "bc", BC + ["--lr", "inf"], ("lr",))
case("bc-seed-negative", "bc", "bc", BC + ["--seed", "-5"], ("seed",))
case("bc-label-smoothing-one", "bc", "bc", BC + ["--label_smoothing", "1"], ("label_smoothing",))
case("bc-json-is-the-config", "bc", "bc", ["--config", "my.yaml", "--out", "bc.ckpt", "--rounds", "2", "--num_envs", "8",
                                           "--epochs", "1", "--json", "my.yaml"], ("json",),
     files={"my.yaml": r5.user_yaml("r8worlds.W8")}, guard=("my.yaml",))
case("bc-num-envs-huge", "bc", "bc", ["--config", "swarm", "--out", "bc.ckpt", "--rounds", "2", "--num_envs", "2000000000"],
     ("num_envs|memory",))
case("bc-teacher-pt2", "bc", "bc", ["--config", "swarm", "--teacher", "{fx}/policy.pt2", "--out", "bc.ckpt", "--rounds", "2",
                                    "--num_envs", "8"], ("teacher",))
case("bc-out-is-teacher", "bc", "bc", ["--config", "swarm", "--teacher", "t.ckpt", "--out", "t.ckpt", "--rounds", "2",
                                       "--num_envs", "8", "--epochs", "1"], ("out|teacher",),
     files={"t.ckpt": "fixture:swarm.ckpt"}, guard=("t.ckpt",))
case("bc-user-world-without-teacher", "bc", "bc", ["--config", "{fx}/user.yaml", "--out", "bc.ckpt", "--rounds", "2",
                                                   "--num_envs", "8"], ("teacher",))

# ------------------------------------------------------------------------------------ plot
RUN = {"run0": "fixture:run0"}
case("plot-title-unbalanced-mathtext", "plot", "plot", ["--group", "a=run0", "--out", "o.png", "--title", "cost in $ per run"],
     ("title",), files=RUN)
case("plot-tag-empty", "plot", "plot", ["--group", "a=run0", "--out", "o.png", "--tag", ""], ("tag",), files=RUN)
case("plot-smooth-huge", "plot", "plot", ["--group", "a=run0", "--out", "o.png", "--smooth", "1000000000"], ("smooth",), files=RUN)
case("plot-points-huge", "plot", "plot", ["--group", "a=run0", "--out", "o.png", "--points", "1000000000000"], ("points",), files=RUN)
case("plot-out-without-suffix", "plot", "plot", ["--group", "a=run0", "--out", "figure"], ("out",), files=RUN)
case("plot-csv-dev-full", "plot", "plot", ["--group", "a=run0", "--out", "o.png", "--csv", "/dev/full"], ("csv",), files=RUN)
case("plot-events-file-empty", "plot", "plot", ["--group", "a=runx", "--out", "o.png"], ("runx|events|no",),
     files={"runx/events.out.tfevents.1.host": b""})
case("plot-events-name-is-directory", "plot", "plot", ["--group", "a=runx", "--out", "o.png"], ("runx|events|no",),
     files={"runx/events.out.tfevents.1.host": "dir"})
case("plot-group-glob-everything", "plot", "plot", ["--group", "a=/*", "--out", "o.png"], ("a|group|runs",), timeout=60)
case("plot-title-newline-only", "plot", "plot", ["--group", "a=run0", "--out", "o.svg", "--title", "$\\frac{1}{$"], ("title",), files=RUN)

# ------------------------------------------------------------------------------------ the Python API
api("api-fit-overrides-bytes", "from parlightning import fit\nfit(config='swarm', overrides=[b'trainer.max_epochs=1'])", ("overrides",))
api("api-fit-config-dict", "from parlightning import fit\nfit(config={'model': {'lr': 0.1}}, overrides=['trainer.max_epochs=1'])",
    ("config",))
api("api-predict-int-obs", "import torch, parlightning\np = parlightning.load_policy('{fx}/swarm.ckpt')\n"
    "p.predict(torch.zeros(2, 13, 6, dtype=torch.long))", ("obs|dtype",))
api("api-predict-meta-obs", "import torch, parlightning\np = parlightning.load_policy('{fx}/swarm.ckpt')\n"
    "p.predict(torch.zeros(2, 13, 6, device='meta'))", ("obs|device",))
api("api-predict-obs-inf", "import torch, parlightning\np = parlightning.load_policy('{fx}/swarm.ckpt')\n"
    "p.predict(torch.full((2, 13, 6), float('inf')))", ("obs|inf|finite",))
api("api-swarm-tasks-per-family-zero", "from parlightning.envs.swarm import SwarmEnv\nSwarmEnv(num_envs=4, tasks_per_family=0)",
    ("tasks_per_family",))
api("api-external-num-envs-zero", "from parlightning.envs.external import ExternalBatchedEnv\n"
    "ExternalBatchedEnv(num_envs=0, world='r8ext:Good')", ("num_envs",))
api("api-action-spec-multi-discrete-nvec-negative", "from parlightning.envs.base import ActionSpec\n"
    "ActionSpec('multi_discrete', nvec=(3, -1))", ("nvec",))
api("api-workunit-keys-string", "from parlightning.distribution.strategies import WorkUnit\nWorkUnit(worker=0, keys='easy-0')",
    ("keys",))
api("api-simulated-pool-wait-negative-timeout", "from parlightning.subagents import SimulatedPool\n"
    "p = SimulatedPool()\nh = p.spawn({'instruction': 1, 'skill': 1, 'cost': 1})\np.wait([h], timeout=-5)", ("timeout",))
api("api-process-pool-fn-lambda-string", "from parlightning.subagents import ProcessPool\nProcessPool(fn='lambda x: x', workers=1)",
    ("fn",), timeout=90)
api("api-ppo-module-activation-callable", "import torch\nfrom parlightning.ppo.module import PPOModule\nPPOModule(activation=torch.relu)",
    ("activation",))

# ------------------------------------------------------------------------------------ environment variables
fit("env-unchecked-checkpoints-word", "env", UW + ["--ckpt_path", "{fx}/w8.ckpt", "--trainer.max_epochs", "3"], ("PARLIGHTNING_UNCHECKED_CHECKPOINTS",),
    env={"PARLIGHTNING_UNCHECKED_CHECKPOINTS": "maybe"})
case("env-master-port-word-ddp", "env", "cmd", [PY, "-m", "parlightning.fit", "--config", "{fx}/user.yaml", "--trainer.accelerator", "cpu",
                                                "--trainer.devices", "2", "--trainer.strategy", "ddp"] + Q,
     ("MASTER_PORT",), env={"MASTER_PORT": "abc"}, timeout=120)

# ------------------------------------------------------------------------------------ scripts
script("script-parl-study-axis-without-equals", ["scripts/parl_study.py", "--axis", "model.lr", "--quick"], "axis")
script("script-parl-study-arm-unknown", ["scripts/parl_study.py", "--arms", "no_such_arm", "--quick"], "no_such_arm|arms")
script("script-parl-study-anneal-frac-two", ["scripts/parl_study.py", "--anneal-frac", "2", "--quick"], "anneal")
script("script-parl-study-jobs-negative", ["scripts/parl_study.py", "--jobs", "-1", "--quick"], "jobs")
script("script-collapse-study-lams-word", ["scripts/collapse_study.py", "--lams", "0.1,abc", "--quick"], "lams")
script("script-collapse-study-budgets-zero", ["scripts/collapse_study.py", "--budgets", "0", "--quick"], "budgets")
script("script-collapse-study-horizons-negative", ["scripts/collapse_study.py", "--horizons", "-1", "--quick"], "horizons")
script("script-experiment-axis-unknown-key", ["scripts/experiment.py", "--axis", "model.lrr=1,2", "--quick"], "lrr|axis")
script("script-experiment-set-typo", ["scripts/experiment.py", "--set=--trainer.max_epochz=2", "--quick"], "max_epochz|set")
script("script-experiment-out-under-file", ["scripts/experiment.py", "--out", "/dev/null/x", "--quick"], "out")
script("script-raw-ppo-config-missing", ["scripts/raw_ppo.py", "--config", "no_such.yaml", "--quick"], "config")
script("script-raw-ppo-clip-negative", ["scripts/raw_ppo.py", "--clip-coef", "-1", "--quick"], "clip")
script("script-raw-ppo-iterations-zero", ["scripts/raw_ppo.py", "--iterations", "0", "--quick"], "iterations")
script("script-time-to-solve-seeds-negative", ["scripts/time_to_solve.py", "--seeds", "-1", "--quick"], "seeds")
script("script-time-to-solve-logdir-proc", ["scripts/time_to_solve.py", "--logdir", "/proc/x", "--quick"], "logdir")
script("script-cartpole-check-steps-zero", ["scripts/cartpole_check.py", "--steps", "0", "--quick"], "steps")
script("script-cartpole-check-sb3-absent", ["scripts/cartpole_check.py", "--paths", "sb3", "--quick"], "sb3|stable")
script("script-bench-collect-minibatches-zero", ["scripts/bench_collect.py", "--num-minibatches", "0", "--quick"], "minibatches")
script("script-bench-throughput-iterations-zero", ["scripts/bench_throughput.py", "--iterations", "0"], "iterations")
script("script-bench-throughput-cuda-absent", ["scripts/bench_throughput.py", "--device", "cuda"], "cuda|device")
script("script-bench-throughput-env-n-zero", ["scripts/bench_throughput.py", "--env-n", "0", "--env-only"], "env-n|env_n")
script("script-world-fit-every-zero", ["scripts/world_fit.py", "--every", "0", "--quick"], "every")
script("script-world-fit-out-is-file", ["scripts/world_fit.py", "--out", "/etc/hostname", "--quick"], "out")
script("script-parallelism-timeout-zero", ["scripts/parallelism.py", "--timeout", "0", "--quick"], "timeout")
script("script-mask-entropy-positional", ["scripts/mask_entropy.py", "extra"], "extra|unrecognized")
script("script-sampler-table-workers-negative", ["scripts/sampler_table.py", "--workers", "-2", "--quick"], "workers")

# ------------------------------------------------------------------------------------ multi-process faults (2 gloo ranks, as the README runs them)
DDP = [PY, "-m", "parlightning.fit", "--config", "{fx}/user.yaml", "--trainer.max_epochs", "4", "--data.num_steps", "10",
       "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp"] + Q


def ddp(name: str, extra: list, expect: Any, files: Optional[dict] = None, timeout: float = 150) -> None:
    case(name, "ddp", "cmd", DDP + extra, expect, files=files or {}, timeout=timeout, allow=(r5.RUN_META,))


def ddp_cb(name: str, cls: str, expect: Any, extra: Optional[list] = None, timeout: float = 150) -> None:
    ddp(name, ["--config", "c.yaml"] + (extra or []), expect, files={"c.yaml": callbacks_yaml(f"r8user.{cls}")}, timeout=timeout)


ddp_cb("ddp-rank1-sigkill-self", "KillRank1", ("rank 1",))
ddp_cb("ddp-rank1-sigstop-self", "StopRank1", ("rank 1",), extra=["--heartbeat_timeout", "8"])
ddp_cb("ddp-rank1-exits-zero-mid-run", "ExitZeroRank1", ("rank 1",))
ddp_cb("ddp-rank1-hangs-in-callback", "HangRank1", ("rank 1",), extra=["--stall_timeout", "8"])
ddp_cb("ddp-rank0-raises", "RaiseRank0", ("rank 0", "boom"))
ddp_cb("ddp-rank0-sigterm", "SigtermRank0", ("rank 0", "SIGTERM"))
ddp_cb("ddp-rank1-nan-rollout", "NaNRank1", ("rank 1", "nan|non-finite"))
ddp("ddp-ranks-build-different-worlds", ["--data.env", "r8worlds.make_rank_dependent"], ("observation|signature|differ",))
case("ddp-collector-process-killed", "multiproc", "cmd",
     [PY, "-m", "parlightning.fit", "--config", "{fx}/user.yaml", "--data.env", "r8worlds.StepSigkillLater",
      "--data.max_policy_lag", "1", "--data.collect_in", "process", "--trainer.max_epochs", "3"] + Q,
     ("collector|process", "died|killed|-9"), timeout=120, allow=(r5.RUN_META,))

# a world for the collector-process case: kills its own process at its 12th step (in the child)
WORLDS += r'''

class StepSigkillLater(W8):
    """The process stepping it is SIGKILLed at its 12th step (the OOM killer)."""

    def step(self, action, next_task=None):
        if self.steps >= 11:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().step(action, next_task)
'''

# One case per class fixed after the first run (the test runs these; fast ones where a class has several).
QUICK: tuple[str, ...] = (
    "yaml-rnn-hidden-huge",                  # a memory refusal blamed hidden_sizes for rnn_hidden / an action space
    "lr-monitor-without-logger",             # Lightning's own refusal as a traceback
    "early-stopping-patience-negative",      # Lightning settings out of range
    "fit-torch-threads-huge",                # an OpenMP crash
    "world-step-keyboard-interrupt",         # Ctrl-C / SIGTERM without an error: line
    "world-step-unprintable-error",          # an exception whose __str__ fails
    "world-device-gpu-string",               # a device that is no device (or not its tensors')
    "world-parts-none-later",                # the step contract: parts dropped, next_task drawn twice
    "ext-obs-complex",                       # an external observation coerced silently
    "strategy-observe-wrong-arity",          # a strategy method of the wrong arity
    "callback-state-dict-lambda",            # a callback state a checkpoint cannot hold
    "ckpt-lightning-version-ancient",        # checkpoints: edited version key, another sampler's state, NaN init_from
    "eval-bank-seeds-beyond-int64",          # evaluate / bc argument ranges and memory
    "bc-lr-inf",
    "plot-title-newline-only",               # plot: mathtext titles, event-file folders, broad patterns, huge grids
    "api-action-spec-multi-discrete-nvec-negative",  # a public constructor's entries
    "ddp-collector-process-killed",          # a named package error under a traceback
    "script-world-fit-out-is-file",          # scripts: output folders, counts, --config, --device, --axis / --set keys
    "script-raw-ppo-clip-negative",
)

# Cases found to be valid inputs in the review of the first run (each with the reason); not counted.
DROPPED: dict[str, str] = {
    "yaml-num-steps-float-text": "1e1 is exactly 10; reading it as 10 is right",
    "yaml-seed-everything-true": "Lightning's documented meaning: true picks a random seed (and logs it)",
    "yaml-callbacks-mapping": "jsonargparse reads one callback given as a mapping as a list of one",
    "yaml-actors-in-flight-above-envs": "docs/guides/collection.md: capacity (actors_in_flight) above the batch (num_envs) is the documented use",
    "trainer-precision-16-mixed-cpu": "Lightning runs 16-mixed on the CPU (torch's CPU autocast has float16)",
    "trainer-logger-tensorboard-version-negative": "a TensorBoardLogger version is a free-form name (version_-3)",
    "fit-print-config-and-ckpt-missing": "--print_config prints the resolved config and exits before the run reads any file",
    "world-state-dict-set": "torch.load(weights_only=True) reads a set: the preflight round trip passed",
    "world-task-ids-three-million": "a large task bank is valid; it trained in 5.5 s",
    "ext-obs-tensor-grad": "a tensor observation is converted (its values, detached): nothing wrong is trained on",
    "ext-init-takes-nothing": "a world constructor without seed is allowed (the seed is passed only where accepted)",
    "ext-switch-interval-ten-seconds": "a legal sys.setswitchinterval value (slow, not wrong)",
    "ext-workers-more-than-actors-trajectories": "docs/guides/external-worlds.md: at most one worker per actor (the count is capped)",
    "process-fn-steps-huge": "a large but finite step count is a valid value",
    "ckpt-hparams-extra-key": "an extra hyper_parameters key that the module does not take is harmless",
    "eval-device-cpu-index": "torch treats cpu:N as the CPU",
    "plot-title-unbalanced-mathtext": "a single $ is literal text in matplotlib (not math)",
    "plot-smooth-huge": "a window longer than the series is the running mean",
    "plot-out-without-suffix": "matplotlib writes a PNG when the name has no suffix",
    "api-predict-int-obs": "integer observations are cast to float (as a world's are)",
    "api-simulated-pool-wait-negative-timeout": "Python's wait convention: a negative timeout does not wait",
    "world-reward-double-later": "the step contract takes any float reward tensor ('a float [num_envs] tensor'); float64 is cast into the float32 buffer",
    "yaml-two-strategy-planners": "by design the last StrategyPlanner listed is in force (a later config swaps it: ppo/data.py, tests/test_reliability.py append one with --trainer.callbacks+=); judged after the before run",
    "process-fn-returns-tuple": "a (success, steps) pair is a documented return value of a subagent function (parlightning.subagents.pool.normalize)",
}

for c in CASES:
    if c.name in QUICK:
        c.quick = True
unknown = (set(QUICK) | set(DROPPED)) - {c.name for c in CASES}
assert not unknown, f"QUICK / DROPPED name no case: {sorted(unknown)}"
VALID = [c for c in CASES if c.name in DROPPED]
CASES = [c for c in CASES if c.name not in DROPPED]


# ------------------------------------------------------------------------------------ fixtures
def make_fixtures(fx: Path, cases: list[Case]) -> None:
    """User code modules, tiny configs, and the checkpoints, exported program and run folder the
    chosen `cases` use (built once per run, only those some case needs)."""
    fx.mkdir(parents=True, exist_ok=True)
    (fx / "r8worlds.py").write_text(WORLDS)
    (fx / "r8ext.py").write_text(EXT)
    (fx / "r8user.py").write_text(USER)
    (fx / "user.yaml").write_text(USER_YAML)
    (fx / "ext.yaml").write_text(EXT_YAML)
    (fx / "pool.yaml").write_text(POOL_YAML)
    used = " ".join(str(v) for c in cases for v in c.files.values()) + " " + " ".join(str(c.args) for c in cases)
    derived = ("swarm-noopt", "swarm-oldver", "swarm-prefix", "swarm-int", "swarm-hpextra", "swarm-nan", "swarm-hpgru")
    swarm = any(k in used for k in ("swarm.ckpt", "run0", "policy.pt2") + derived)
    cart = "cart.ckpt" in used
    w8 = "w8.ckpt" in used
    jobs = [
        ("swarm", swarm, "fit", TINY + ["--trainer.default_root_dir", str(fx / "swarm")]),
        ("cart", cart, "fit", CART + ["--trainer.default_root_dir", str(fx / "cart")]),
        ("w8", w8, "fit", UW + ["--trainer.default_root_dir", str(fx / "w8")]),
    ]
    for i, (name, wanted, kind, args) in enumerate(jobs):
        if not wanted:
            continue
        c = Case(f"fixture-{name}", "fixture", kind, args, control=True, timeout=300)
        outcome, _line, _s, text = run_case(c, fx / "_runs", fx, i)
        if outcome != "ok":
            raise SystemExit(f"fixture {name} failed ({outcome}): {text[-2000:]}")
    for name in ("swarm", "cart", "w8"):
        src = fx / name / "lightning_logs/version_0/checkpoints/last.ckpt"
        if src.exists():
            shutil.copy(src, fx / f"{name}.ckpt")
    if not swarm:
        return
    shutil.copytree(fx / "swarm/lightning_logs/version_0", fx / "run0", ignore=shutil.ignore_patterns("checkpoints"))
    if "policy.pt2" in used:
        c = Case("fixture-export", "fixture", "export", ["--ckpt_path", str(fx / "swarm.ckpt"), "--out", str(fx / "policy.pt2")],
                 control=True, timeout=300)
        outcome, _line, _s, text = run_case(c, fx / "_runs", fx, 9)
        if outcome != "ok":
            raise SystemExit(f"fixture export failed ({outcome}): {text[-2000:]}")
    import torch

    def edited(name: str, edit: Any) -> None:
        ck = torch.load(fx / "swarm.ckpt", map_location="cpu", weights_only=False)
        edit(ck)
        torch.save(ck, fx / f"{name}.ckpt")

    def noopt(ck: dict) -> None:
        ck["optimizer_states"] = []

    def oldver(ck: dict) -> None:
        ck["pytorch-lightning_version"] = "0.1.0"

    def prefix(ck: dict) -> None:
        ck["state_dict"] = {"model." + k: v for k, v in ck["state_dict"].items()}

    def to_int(ck: dict) -> None:
        k = next(k for k, v in ck["state_dict"].items() if v.is_floating_point())
        ck["state_dict"][k] = ck["state_dict"][k].long()

    def hpextra(ck: dict) -> None:
        ck.setdefault("hyper_parameters", {})["foo"] = 1

    def nan(ck: dict) -> None:
        k = next(k for k, v in ck["state_dict"].items() if v.is_floating_point())
        ck["state_dict"][k] = torch.full_like(ck["state_dict"][k], float("nan"))

    def hpgru(ck: dict) -> None:
        ck.setdefault("hyper_parameters", {})["policy"] = "gru"

    for name, fn in zip(derived, (noopt, oldver, prefix, to_int, hpextra, nan, hpgru)):
        edited(name, fn)


# ------------------------------------------------------------------------------------ main
def main(argv: Optional[list[str]] = None) -> int:
    return r5.run_corpus(argv, round_no=8, description=__doc__.split("\n\n")[0], cases_all=CASES, valid=VALID,
                         dropped=DROPPED, make_fixtures=make_fixtures)


if __name__ == "__main__":
    sys.exit(main())
