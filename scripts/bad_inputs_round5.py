#!/usr/bin/env python
"""Round 5 of the bad-input corpus: a fresh set of bad inputs and faults, written from the README,
`docs/`, `configs/`, the CLIs' `--help`, the public Python API and the extension guides only (its
author read neither `tests/` nor the earlier corpora's cases), run against the package and
classified.

    python scripts/bad_inputs_round5.py              # every case (several minutes on 2 cores)
    python scripts/bad_inputs_round5.py --quick      # one case per class fixed after the first run
    python scripts/bad_inputs_round5.py --only NAME  # the cases whose name contains NAME
    python scripts/bad_inputs_round5.py --list       # the cases, one per line

Each case runs in its own folder, in a process forked from this one (which has imported the
package, so a case costs its own work, not the interpreter's start-up), or, for environment
variables read at start-up and for the scripts, in a fresh interpreter. A case is **clean** when it
exits non-zero with exactly one `error:` line (argparse's `prog: error:` counts) that contains the
case's keywords (the field or the failing component), with no traceback, and leaves nothing behind:
no `lightning_logs/version_*`, no new file in its folder, every file it was given unchanged, no
process of its group alive. Otherwise it is **traceback** (a Python traceback in the output),
**accepted** (exit 0), **misleading** (no `error:` line, several, or one that names something
else), **messy** (a clean line, but files or processes left behind), **crash** (killed by a signal)
or **hang** (no answer within the case's timeout). For the Python API a case is clean when it
raises an exception of the package (a class defined in `parlightning`, or a builtin exception raised
by a `raise` statement in the package) whose message contains the keywords; the harness prints it
as the case's `error:` line. A few runtime faults (a world whose rewards overflow the loss) may
leave the run's folder and its complete checkpoints, never a partial file. Controls (a user's world,
factory, external world, sampler, strategy and callback written by the book) must train; they are
reported apart and not counted.

The summary table is `bad_inputs_fresh.summarize`, shared by every round. Whether a line also gives
the fix is judged by hand (the review in docs/guides/reliability.md).
"""

from __future__ import annotations

import argparse
import hashlib
import linecache
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

# ------------------------------------------------------------------------------------ user code
# Worlds, external worlds, samplers, strategies, callbacks and subagent functions a user might
# write, each wrong in one way (its docstring says how); written into the fixtures folder as the
# modules r5worlds, r5ext and r5user. Base, Good, GoodSampler, GoodStrategy, GoodCallback and
# make_base are the controls.
WORLDS = r'''
import numpy as np
import torch
from parlightning.envs.base import ActionSpec, BatchedEnv, EpisodeParts, StepResult


class Base(BatchedEnv):
    """Control: 4 features, 3 actions, 5-step episodes, reward 1 for action 1."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.observation_shape = (4,)
        self.action_spec = ActionSpec("discrete", nvec=(3,))
        self.t = torch.zeros(num_envs, dtype=torch.long)
        self.calls = 0

    def _obs(self):
        n = self.num_envs
        return torch.stack([self.t.float() / 5, torch.ones(n), torch.zeros(n), torch.zeros(n)], 1)

    def reset(self, *, seed=None, task_index=None):
        self.t.zero_()
        return self._obs()

    def _advance(self, action):
        self.calls += 1
        self.t += 1
        reward = (action.reshape(self.num_envs) == 1).float()
        done = self.t >= 5
        final = self._obs()
        self.t[done] = 0
        return reward, done, final

    def step(self, action, next_task=None):
        reward, done, final = self._advance(action)
        return StepResult(self._obs(), reward, done, torch.zeros_like(done), final, None)


class DoneLong(Base):
    """terminated has N + 1 entries."""

    def step(self, action, next_task=None):
        r = super().step(action, next_task)
        return r._replace(terminated=torch.zeros(self.num_envs + 1, dtype=torch.bool))


class DoneInt(Base):
    """terminated is a 0/1 int64 tensor, not bool."""

    def step(self, action, next_task=None):
        r = super().step(action, next_task)
        return r._replace(terminated=r.terminated.long())


class FinalObsShape(Base):
    """final_obs has 5 features where observations have 4."""

    def step(self, action, next_task=None):
        r = super().step(action, next_task)
        return r._replace(final_obs=torch.zeros(self.num_envs, 5))


class FinalObsNaNOnTruncation(Base):
    """episodes are truncated, and the final observation of a truncated episode is NaN (only the
    bootstrap reads it)."""

    def step(self, action, next_task=None):
        reward, done, final = self._advance(action)
        final = torch.where(done[:, None], torch.full_like(final, float("nan")), final)
        return StepResult(self._obs(), reward, torch.zeros_like(done), done, final, None)


class ScalarObs(Base):
    """observation_shape () with obs [N]."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.observation_shape = ()

    def _obs(self):
        return self.t.float() / 5


class ZeroWidthObs(Base):
    """observation_shape (4, 0): an observation with no numbers."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.observation_shape = (4, 0)

    def _obs(self):
        return torch.zeros(self.num_envs, 4, 0)


class WrongNumEnvsAttr(Base):
    """num_envs attribute says 3 while the tensors have N rows."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.rows = num_envs

    def _obs(self):
        return torch.zeros(self.rows, 4)

    def reset(self, *, seed=None, task_index=None):
        self.num_envs = 3
        self.t = torch.zeros(self.rows, dtype=torch.long)
        return self._obs()

    def step(self, action, next_task=None):
        done = torch.zeros(self.rows, dtype=torch.bool)
        return StepResult(self._obs(), torch.zeros(self.rows), done, done, self._obs(), None)


class HalfObs(Base):
    """observations are float16."""

    def _obs(self):
        return super()._obs().half()


class BoolReward(Base):
    """reward is a bool tensor."""

    def step(self, action, next_task=None):
        r = super().step(action, next_task)
        return r._replace(reward=r.reward > 0)


class FloatNvec(Base):
    """ActionSpec nvec=(2.5,)."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.action_spec = ActionSpec("discrete", nvec=(2.5,))


class NegativeNvec(Base):
    """ActionSpec nvec=(-3,)."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.action_spec = ActionSpec("discrete", nvec=(-3,))


class LowAboveHigh(Base):
    """continuous actions with low 1.0 above high -1.0."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.action_spec = ActionSpec("continuous", shape=(2,), low=1.0, high=-1.0)

    def step(self, action, next_task=None):
        return super().step(torch.zeros(self.num_envs, dtype=torch.long), next_task)


class ResetTuple(Base):
    """reset returns (obs, info), Gymnasium's way."""

    def reset(self, *, seed=None, task_index=None):
        return super().reset(seed=seed, task_index=task_index), {}


class WeirdDevice(Base):
    """device attribute is the string 'gpu' (not a torch device name)."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.device = "gpu"


class StateDictObject(Base):
    """state_dict holds a random.Random (a pickled object: not loadable with weights_only=True)."""

    def state_dict(self):
        import random

        return {"t": self.t.clone(), "rng": random.Random(0)}


class StateDictRaises(Base):
    """state_dict raises."""

    def state_dict(self):
        raise RuntimeError("cannot snapshot the simulator")


class StateDictNotDict(Base):
    """state_dict returns a list."""

    def state_dict(self):
        return [self.t.clone()]


class MaskedBase(Base):
    """3 dimensions of 3 categories each, masked per category."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.action_spec = ActionSpec("multi_discrete", nvec=(3, 3, 3))

    def _mask(self):
        return torch.ones(self.num_envs, 9, dtype=torch.bool)

    def action_masks(self):
        return self._mask()

    def step(self, action, next_task=None):
        return super().step(action[:, 0], next_task)


class MaskEmptyLater(MaskedBase):
    """from the 3rd step, actor 0's first dimension has no live category (the first mask is fine)."""

    def _mask(self):
        m = super()._mask()
        if self.calls >= 2:
            m[0, 0:3] = False
        return m


class MaskFloatLater(MaskedBase):
    """from the 3rd step the mask is float, not bool."""

    def _mask(self):
        m = super()._mask()
        return m.float() if self.calls >= 2 else m


class MaskRaisesLater(MaskedBase):
    """action_masks raises from the 3rd step."""

    def _mask(self):
        if self.calls >= 2:
            raise KeyError("slot table")
        return super()._mask()


class MaskShapeLater(MaskedBase):
    """from the 3rd step the mask has 5 columns."""

    def _mask(self):
        if self.calls >= 2:
            return torch.ones(self.num_envs, 5, dtype=torch.bool)
        return super()._mask()


class MaskAsProperty(MaskedBase):
    """action_masks is a property holding the tensor, not a method: the world means to mask."""

    action_masks = property(lambda self: torch.zeros(self.num_envs, 3, dtype=torch.bool))


class TaskBase(Base):
    """A world with a task bank and episode parts."""

    task_ids = ["easy-0", "easy-1", "hard-0", "hard-1"]

    def _parts(self, done):
        n = self.num_envs
        z = torch.zeros(n)
        return EpisodeParts(torch.zeros(n, dtype=torch.long), done.float(), z, z, z, z + 5, z + 5)

    def step(self, action, next_task=None):
        reward, done, final = self._advance(action)
        if callable(next_task):
            next_task(done)
        return StepResult(self._obs(), reward, done, torch.zeros_like(done), final, self._parts(done))


class PartsTaskOutOfRange(TaskBase):
    """parts.task holds 999, outside the 4-task bank."""

    def _parts(self, done):
        return super()._parts(done)._replace(task=torch.full((self.num_envs,), 999, dtype=torch.long))


class PartsShort(TaskBase):
    """parts tensors have N - 1 entries."""

    def _parts(self, done):
        return EpisodeParts(*(p[:-1] for p in super()._parts(done)))


class PartsOutcomeNaN(TaskBase):
    """outcome is NaN where an episode ends."""

    def _parts(self, done):
        return super()._parts(done)._replace(outcome=torch.full((self.num_envs,), float("nan")))


class TaskIdsString(TaskBase):
    """task_ids is one string, not a list."""

    task_ids = "easy-0"


class TaskIdsEmpty(TaskBase):
    """task_ids is an empty list."""

    task_ids = []


class TaskIdsDuplicate(TaskBase):
    """task_ids lists one id twice."""

    task_ids = ["easy-0", "easy-0", "hard-0"]


class TaskIdsInts(TaskBase):
    """task_ids are integers."""

    task_ids = [0, 1, 2, 3]


class AbstractWorld(BatchedEnv):
    """inherits BatchedEnv but defines no step."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        self.num_envs = num_envs

    def reset(self, *, seed=None, task_index=None):
        return torch.zeros(self.num_envs, 4)


class ObsShapeLater(Base):
    """from the 3rd step observations have 6 features."""

    def _obs(self):
        if self.calls >= 2:
            return torch.zeros(self.num_envs, 6)
        return super()._obs()


class RewardShapeLater(Base):
    """from the 3rd step the reward is [N, 1]."""

    def step(self, action, next_task=None):
        r = super().step(action, next_task)
        return r._replace(reward=r.reward[:, None]) if self.calls >= 3 else r


class RewardMetaLater(Base):
    """from the 3rd step the reward is on the meta device."""

    def step(self, action, next_task=None):
        r = super().step(action, next_task)
        return r._replace(reward=torch.empty(self.num_envs, device="meta")) if self.calls >= 3 else r


class NumpyDoneLater(Base):
    """from the 3rd step terminated is a numpy array."""

    def step(self, action, next_task=None):
        r = super().step(action, next_task)
        return r._replace(terminated=r.terminated.numpy()) if self.calls >= 3 else r


class ObsInfLater(Base):
    """from the 3rd step, actor 2's observation is +inf."""

    def _obs(self):
        o = super()._obs()
        if self.calls >= 2:
            o[2] = float("inf")
        return o


class HugeReward(Base):
    """rewards of 1e38 (finite, but their squares are not)."""

    def step(self, action, next_task=None):
        r = super().step(action, next_task)
        return r._replace(reward=torch.full((self.num_envs,), 1e38))


class StepReturnsList(Base):
    """step returns a list of 6 tensors, not a StepResult."""

    def step(self, action, next_task=None):
        return list(super().step(action, next_task))


class ObsRequiresGrad(Base):
    """observations carry an autograd graph (a learnable feature inside the world)."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.w = torch.nn.Parameter(torch.ones(4))

    def _obs(self):
        return super()._obs() * self.w


def make_base(num_envs: int, device: str, seed: int) -> BatchedEnv:
    """Control factory."""
    return Base(num_envs, device, seed)


def make_returns_class(num_envs: int, device: str, seed: int) -> BatchedEnv:
    """a factory that returns the class, not an instance."""
    return Base
'''

EXT = r'''
import math
from parlightning.envs.base import ActionSpec


class Good:
    """Control: 3 features, 2 actions, 3-step episodes."""

    observation_shape = (3,)
    action_spec = ActionSpec("discrete", nvec=(2,))
    tasks = ["a-0", "a-1", "b-0"]

    def __init__(self, seed: int = 0, length: int = 3):
        self.t, self.length = 0, length

    def reset(self, task):
        self.t = 0
        return [0.0, 0.0, 1.0]

    def step(self, action):
        self.t += 1
        done = self.t >= self.length
        return [self.t / 3, 0.0, 1.0], float(int(action) == 1), done, False, ({"outcome": 1.0} if done else None)


class FourTuple(Good):
    """step returns 4 values (no parts)."""

    def step(self, action):
        return super().step(action)[:4]


class TasksDict(Good):
    """tasks is a dict."""

    tasks = {"a-0": 1, "b-0": 2}


class NoSpec:
    """no action_spec."""

    observation_shape = (3,)

    def reset(self, task):
        return [0.0, 0.0, 0.0]

    def step(self, action):
        return [0.0, 0.0, 0.0], 0.0, True, False, None


class RetryableString(Good):
    """retryable is a string, and step raises a ConnectionError."""

    retryable = "ConnectionError"

    def step(self, action):
        raise ConnectionError("service unavailable")


class PartsUnknownKey(Good):
    """parts names a field that does not exist ('outcom')."""

    def step(self, action):
        obs, r, term, trunc, parts = super().step(action)
        return obs, r, term, trunc, ({"outcom": 1.0} if term else None)


class OutcomeAboveOne(Good):
    """outcome 7.5 (outside [0, 1])."""

    def step(self, action):
        obs, r, term, trunc, parts = super().step(action)
        return obs, r, term, trunc, ({"outcome": 7.5} if term else None)


class NegativeSubagents(Good):
    """n_subagents -4."""

    def step(self, action):
        obs, r, term, trunc, parts = super().step(action)
        return obs, r, term, trunc, ({"outcome": 1.0, "n_subagents": -4} if term else None)


class ActionOutOfSpec(Good):
    """observation_shape (3,), but reset returns a nested list [[0, 0, 0]] (shape [1, 3])."""

    def reset(self, task):
        return [[0.0, 0.0, 0.0]]


class ResetNeedsTwoArgs(Good):
    """reset(self, task, options): one argument more than the contract."""

    def reset(self, task, options):
        return super().reset(task)


def not_a_class(seed=0):
    """a factory returning None."""
    return None
'''

USER = r'''
import random
import torch
import lightning
from parlightning.distribution.strategies import WorkUnit
from parlightning.parl.reward import PARLReward


class GoodSampler:
    """Control sampler: first key."""

    def pick(self, keys, round_index):
        return keys[0]

    def record(self, task_id, score):
        pass


class PickIndex(GoodSampler):
    """pick returns an index (0), not a task id."""

    def pick(self, keys, round_index):
        return 0


class PickUnknown(GoodSampler):
    """pick returns an id outside the shard."""

    def pick(self, keys, round_index):
        return "nonexistent-0"


class PickNone(GoodSampler):
    """pick returns None."""

    def pick(self, keys, round_index):
        return None


class PickList(GoodSampler):
    """pick returns a list of ids."""

    def pick(self, keys, round_index):
        return list(keys[:2])


class RecordRaises(GoodSampler):
    """record raises."""

    def record(self, task_id, score):
        raise ZeroDivisionError("no episodes yet")


class SamplerStateObject(GoodSampler):
    """state_dict holds a random.Random (not loadable with weights_only=True)."""

    def state_dict(self):
        return {"rng": random.Random(0)}


class GoodStrategy:
    """Control strategy: the whole bank to worker 0."""

    name = "good"

    def plan(self, n_workers, round_index, keys):
        return [WorkUnit(worker=w, keys=tuple(keys)) for w in range(n_workers)]


class PlanEmpty(GoodStrategy):
    """plan returns no unit."""

    def plan(self, n_workers, round_index, keys):
        return []


class PlanWrongWorker(GoodStrategy):
    """plan's unit names worker 5 of 1."""

    def plan(self, n_workers, round_index, keys):
        return [WorkUnit(worker=5, keys=tuple(keys))]


class PlanUnknownKeys(GoodStrategy):
    """plan's unit holds keys outside the bank."""

    def plan(self, n_workers, round_index, keys):
        return [WorkUnit(worker=0, keys=("nope-0", "nope-1"))]


class PlanNoKeys(GoodStrategy):
    """plan's unit holds no key."""

    def plan(self, n_workers, round_index, keys):
        return [WorkUnit(worker=0, keys=())]


class PlanDict(GoodStrategy):
    """plan returns a dict worker -> keys."""

    def plan(self, n_workers, round_index, keys):
        return {0: list(keys)}


class PlanStrings(GoodStrategy):
    """plan returns the keys themselves (a list of strings)."""

    def plan(self, n_workers, round_index, keys):
        return list(keys)


class ObserveRaises(GoodStrategy):
    """observe raises."""

    def observe(self, unit, task_id, score):
        raise IndexError("family table")


class GoodCallback(lightning.Callback):
    """Control callback."""

    def on_train_epoch_end(self, trainer, pl_module):
        pass


class NotACallback:
    """has a hook name but is not a lightning.Callback."""

    def on_train_start(self, trainer, pl_module):
        pass


class MyReward:
    """a reward class that is not a PARLReward."""

    def __init__(self, scale: float = 1.0):
        self.scale = scale

    def __call__(self, parts):
        return parts.outcome * self.scale


def pool_arity(a, b):
    """a subagent function taking two arguments (the contract passes one instruction)."""
    return {"success": True, "steps": 1}


def pool_no_steps(instruction):
    """returns no 'steps'."""
    return {"success": True}


def pool_negative_steps(instruction):
    """returns steps -3."""
    return {"success": True, "steps": -3}


def pool_success_string(instruction):
    """returns success 'yes' (a string)."""
    return {"success": "yes", "steps": 1}


def pool_returns_list(instruction):
    """returns a list."""
    return [True, 1]


not_callable = 42


def family_len(task_id):
    """an artifact key / cluster function returning an int, not a string."""
    return len(task_id)
'''

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from bad_inputs_fresh import summarize  # noqa: E402  the shared table

PY = sys.executable
TRACEBACK = "Traceback (most recent call last)"
ERROR_LINE = re.compile(r"^(?:error: |\S[^:]*: error: )")  # ours, or argparse's `prog: error:`
OUTCOMES = ("clean", "traceback", "misleading", "messy", "accepted", "hang", "crash")


@dataclass
class Case:
    name: str
    category: str
    kind: str  # fit | evaluate | export | bc | plot | py | cmd
    args: Any  # argv (list) for the CLIs and cmd, code (str) for py
    expect: tuple[str, ...] = ()  # each: 'a|b' alternatives; all must be in the error line (case-insensitive)
    timeout: float = 60.0
    files: dict[str, Any] = field(default_factory=dict)  # name -> text / bytes / fixture:NAME / dir / link:TARGET
    env: dict[str, str] = field(default_factory=dict)
    guard: tuple[str, ...] = ()  # files given to the case that must stay unchanged
    readonly: tuple[str, ...] = ()  # folders (in the case's folder) made read-only before the run
    allow: tuple[str, ...] = ()  # new files a refused run may leave (regexes on the relative path)
    quick: bool = False
    control: bool = False  # must succeed (exit 0)
    note: str = ""


CASES: list[Case] = []


def case(name: str, category: str, kind: str, args: Any, expect: Any = (), **kw: Any) -> None:
    if isinstance(expect, str):
        expect = (expect,)
    CASES.append(Case(name, category, kind, args, tuple(expect), **kw))


# ------------------------------------------------------------------------------------ running a case
def _snapshot(folder: Path) -> dict[str, Optional[str]]:
    """Relative path -> sha256 of every file (None for folders) under `folder`."""
    out: dict[str, Optional[str]] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), folder)] = None
        for f in filenames:
            p = os.path.join(dirpath, f)
            rel = os.path.relpath(p, folder)
            try:
                if os.path.islink(p) or not os.path.isfile(p):
                    out[rel] = "link-or-special"
                    continue
                with open(p, "rb") as fh:
                    out[rel] = hashlib.sha256(fh.read()).hexdigest()
            except OSError:
                out[rel] = "unreadable"
    return out


def _prepare(c: Case, work: Path, fx: Path) -> None:
    for name, content in c.files.items():
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif content == "dir":
            path.mkdir(parents=True, exist_ok=True)
        elif content == "fifo":
            os.mkfifo(path)
        elif isinstance(content, str) and content.startswith("fixture:"):
            src = fx / content.removeprefix("fixture:")
            if src.is_dir():
                shutil.copytree(src, path)
            else:
                shutil.copy(src, path)
        elif isinstance(content, str) and content.startswith("link:"):
            os.symlink(content.removeprefix("link:"), path)
        else:
            path.write_text(textwrap.dedent(content))
    for folder in c.readonly:
        (work / folder).mkdir(parents=True, exist_ok=True)
        os.chmod(work / folder, 0o555)


def _subst(value: Any, work: Path, fx: Path) -> Any:
    if isinstance(value, str):
        return value.replace("{fx}", str(fx)).replace("{tmp}", str(work)).replace("{root}", str(ROOT))
    if isinstance(value, list):
        return [_subst(v, work, fx) for v in value]
    if isinstance(value, dict):  # a case's environment variables: {tmp} and {fx} in their values too
        return {k: _subst(v, work, fx) for k, v in value.items()}
    return value


def _api_error(err: BaseException) -> Optional[str]:
    """The package's own exception (its class, or a builtin raised by a `raise` in the package), as a
    line; None for anything else (a raw Python / torch / numpy error)."""
    package = str(ROOT / "parlightning") + os.sep
    if type(err).__module__.startswith("parlightning"):
        return f"{type(err).__name__}: {err}"
    tb = err.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if last is not None and os.path.abspath(last.tb_frame.f_code.co_filename).startswith(package):
        line = linecache.getline(last.tb_frame.f_code.co_filename, last.tb_lineno).strip()
        if line.startswith("raise "):
            return f"{type(err).__name__}: {err}"
    return None


def _child(c: Case, work: Path, fx: Path, out_path: Path) -> None:
    """In the forked process: run the case, write its output, exit with its status. Whatever the case
    does (close stderr, raise from an error handler), the fork exits here: a copy of the harness that
    returned into it would run the harness's cleanup and delete the corpus's folder."""
    status = 1
    try:
        status = _run_in_child(c, work, fx, out_path)
    except BaseException:  # noqa: BLE001
        pass
    finally:
        os._exit(status)


def _run_in_child(c: Case, work: Path, fx: Path, out_path: Path) -> int:
    """`_child`'s work: the case's status."""
    os.setpgid(0, 0)
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.chdir(work)
    os.environ.update(_subst(dict(c.env), work, fx))
    status = 0
    try:
        if c.kind == "py":
            try:
                exec(compile(textwrap.dedent(_subst(c.args, work, fx)), f"<case {c.name}>", "exec"), {"__name__": "__case__"})
            except SystemExit:
                raise
            except BaseException as err:  # noqa: BLE001  classify: the package's named error or a raw one
                line = _api_error(err)
                if line is None:
                    raise
                print("error: " + " ".join(line.split()), file=sys.stderr)
                status = 1
        else:
            import importlib

            module = importlib.import_module(f"parlightning.cli.{c.kind}")
            sys.argv = [f"parlightning.{c.kind}"] + _subst(c.args, work, fx)
            module.main(sys.argv[1:])
    except SystemExit as exit_:
        code = exit_.code
        if isinstance(code, str):
            print(code, file=sys.stderr)
            status = 1
        else:
            status = 0 if code is None else int(code)
    except BaseException:  # noqa: BLE001
        status = 1
        traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    return status


def run_case(c: Case, base: Path, fx: Path, index: int) -> tuple[str, str, float, str]:
    """(outcome, the error line or a reason, seconds, the output)."""
    folder = base / f"{index:03d}"
    work = folder / "work"
    work.mkdir(parents=True)
    _prepare(c, work, fx)
    before = _snapshot(work)
    out_path = folder / "out.txt"
    t0 = time.monotonic()
    timed_out = False
    if c.kind == "cmd":
        env = {**os.environ, **_subst(dict(c.env), work, fx)}
        with open(out_path, "wb") as out:
            proc = subprocess.Popen(_subst(c.args, work, fx), cwd=work, stdout=out, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True)
            try:
                rc = proc.wait(timeout=c.timeout)
            except subprocess.TimeoutExpired:
                timed_out, rc = True, None
        pgid = proc.pid
    else:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(c, work, fx, out_path)
        pgid = pid
        rc = None
        deadline = t0 + c.timeout
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                rc = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(0.05)
    seconds = time.monotonic() - t0
    survivors = False
    if not timed_out:  # a process of the run still alive 3 s after it ended (a worker it did not stop)
        for _ in range(60):
            try:
                os.killpg(pgid, 0)
            except (ProcessLookupError, PermissionError):
                break
            time.sleep(0.05)
        else:
            survivors = True
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if timed_out and c.kind != "cmd":
        try:
            os.waitpid(pgid, 0)
        except ChildProcessError:
            pass
    elif timed_out:
        proc.wait()
    for folder_ro in c.readonly:
        os.chmod(work / folder_ro, 0o755)
    try:
        text = out_path.read_text(errors="replace")
    except FileNotFoundError:  # the case's process ended before it opened its output file
        text = f"(no output: the case's process ended with status {rc} before it opened {out_path.name})"
    after = _snapshot(work)
    if timed_out:
        return "hang", f"no answer within {c.timeout:g} s", seconds, text
    if c.control:
        return ("ok" if rc == 0 else "refused"), _last_lines(text), seconds, text
    errors = [line for line in text.splitlines() if ERROR_LINE.match(line)]
    if TRACEBACK in text:
        return "traceback", _last_lines(text), seconds, text
    if rc is not None and rc < 0:
        return "crash", f"killed by signal {-rc}", seconds, text
    if rc == 0:
        return "accepted", _last_lines(text), seconds, text
    if len(errors) != 1:
        return "misleading", (f"{len(errors)} error lines: " if errors else "no error line: ") + _last_lines(text), seconds, text
    line = errors[0]
    missing = [e for e in c.expect if not any(alt.lower() in line.lower() for alt in e.split("|"))]
    if missing:
        return "misleading", f"{line}   [expected to name: {', '.join(missing)}]", seconds, text
    left = _leftovers(c, before, after)
    if survivors:
        left.append("processes of the run still alive")
    if left:
        return "messy", f"{line}   [left: {', '.join(left[:4])}]", seconds, text
    return "clean", line, seconds, text


def _leftovers(c: Case, before: dict, after: dict) -> list[str]:
    left = []
    for rel, digest in after.items():
        if rel in before:
            if before[rel] != digest and rel in c.guard:
                left.append(f"{rel} changed")
            continue
        if any(re.search(p, rel) for p in c.allow):
            continue
        name = os.path.basename(rel)
        if digest is None:
            if re.fullmatch(r"version_\d+", name):
                left.append(rel + "/")
            continue
        left.append(rel)
    for rel in c.guard:
        if rel in before and rel not in after:
            left.append(f"{rel} removed")
    return left


def _last_lines(text: str, n: int = 2) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip() and "Warning" not in line
             and "deprecated" not in line and "Tip:" not in line and not line.startswith("warnings.warn")]
    return " | ".join(lines[-n:])[:400]


# ------------------------------------------------------------------------------------ fixtures
def make_fixtures(fx: Path, cases: list[Case]) -> None:
    """User code modules, tiny configs, and the checkpoints and run folder the chosen `cases` copy
    (built once per run, only those some case needs)."""
    fx.mkdir(parents=True, exist_ok=True)
    (fx / "r5worlds.py").write_text(WORLDS)
    (fx / "r5ext.py").write_text(EXT)
    (fx / "r5user.py").write_text(USER)
    (fx / "user.yaml").write_text(USER_YAML)
    (fx / "ext.yaml").write_text(EXT_YAML)
    (fx / "text.txt").write_text("some notes\n")
    jobs = [
        ("swarm", "fit", TINY + ["--trainer.default_root_dir", str(fx / "swarm")]),
        ("cart", "fit", ["--config", "cartpole_fast", "--trainer.max_epochs", "1", "--data.num_envs", "8",
                         "--data.num_steps", "8", "--data.num_minibatches", "2", "--trainer.enable_progress_bar",
                         "false", "--trainer.default_root_dir", str(fx / "cart")]),
        ("bc", "bc", ["--config", str(ROOT / "configs/swarm.yaml"), "--teacher", "serial", "--out", str(fx / "bc.ckpt"), "--rounds", "4",
                      "--num_envs", "8", "--epochs", "1"]),
    ]
    used = " ".join(str(v) for c in cases for v in c.files.values())
    needs = {"swarm": "fixture:swarm.ckpt" in used or "fixture:run0" in used, "cart": "fixture:cart.ckpt" in used,
             "bc": "fixture:bc.ckpt" in used}
    for i, (name, kind, args) in enumerate(jobs):
        if not needs[name]:
            continue
        c = Case(f"fixture-{name}", "fixture", kind, args, control=True, timeout=240)
        outcome, line, _s, text = run_case(c, fx / "_runs", fx, i)
        if outcome != "ok":
            raise SystemExit(f"fixture {name} failed ({outcome}): {text[-2000:]}")
    if needs["swarm"]:
        shutil.copy(fx / "swarm/lightning_logs/version_0/checkpoints/last.ckpt", fx / "swarm.ckpt")
        shutil.copytree(fx / "swarm/lightning_logs/version_0", fx / "run0", ignore=shutil.ignore_patterns("checkpoints"))
    if needs["cart"]:
        shutil.copy(fx / "cart/lightning_logs/version_0/checkpoints/last.ckpt", fx / "cart.ckpt")


# ------------------------------------------------------------------------------------ main
# ------------------------------------------------------------------ what later rounds (6 on) write cases with
Q = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
TINY = ["--config", "swarm", "--trainer.max_epochs", "1", "--data.num_envs", "8", "--data.num_steps", "8"] + Q
CART = ["--config", "cartpole_fast", "--trainer.max_epochs", "1", "--data.num_envs", "8", "--data.num_steps", "8",
        "--data.num_minibatches", "2"] + Q
UW = ["--config", "{fx}/user.yaml"]  # the round's fixture configs (user_yaml / ext_yaml / pool_yaml texts)
EXTC = ["--config", "{fx}/ext.yaml"]
POOLC = ["--config", "{fx}/pool.yaml"]


class CaseBook:
    """A later round's case-writing helpers: each call appends one `Case` to `cases`. `worlds` names
    the module of the round's tensor worlds: `world(name, "Bad", ...)` trains `--data.env <worlds>.Bad`
    over the user config."""

    def __init__(self, worlds: str) -> None:
        self.cases: list[Case] = []
        self.worlds = worlds

    def case(self, name: str, category: str, kind: str, args: Any, expect: Any = (), **kw: Any) -> None:
        if isinstance(expect, str):
            expect = (expect,)
        self.cases.append(Case(name, category, kind, args, tuple(expect), **kw))

    def fit(self, name: str, category: str, args: list, expect: Any, **kw: Any) -> None:
        self.case(name, category, "fit", args, expect, **kw)

    def yaml_case(self, name: str, category: str, body: str, expect: Any, base: Optional[list] = None, **kw: Any) -> None:
        """A config file `c.yaml` layered over `base` (default: the tiny swarm run)."""
        files = {"c.yaml": body, **kw.pop("files", {})}
        self.fit(name, category, (TINY if base is None else base) + ["--config", "c.yaml"] + kw.pop("extra", []),
                 expect, files=files, **kw)

    def world(self, name: str, cls: str, expect: Any, base: Optional[list] = None, **kw: Any) -> None:
        self.fit(name, "world", (UW if base is None else base) + ["--data.env", f"{self.worlds}.{cls}"], expect, **kw)

    def ext(self, name: str, init_args: str, expect: Any, **kw: Any) -> None:
        body = ("data:\n  env:\n    class_path: parlightning.envs.external.ExternalBatchedEnv\n"
                f"    init_args: {init_args}\n")
        self.yaml_case(name, "external", body, expect, base=EXTC, **kw)


def run_corpus(argv: Optional[list[str]], *, round_no: int, description: str, cases_all: list, valid: list,
               dropped: dict, make_fixtures: Any) -> int:
    """The command line of a later round (6 on) on this harness: --quick / --only / --list / --verbose /
    --keep / --timeout-scale / --tag, every case run and classified, the table, and a full run's output
    written to docs/results/data/bad_inputs_round{N}-TAG.txt."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="the quick subset (one case per fixed class)")
    parser.add_argument("--only", nargs="+", default=[], help="run the cases whose name contains any of these")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--verbose", action="store_true", help="print every case's line, not only the unclean ones")
    parser.add_argument("--keep", action="store_true", help="keep the cases' folders")
    parser.add_argument("--timeout-scale", type=float, default=1.0, help="multiply every case's timeout")
    parser.add_argument("--tag", default="before", help=f"a full run writes docs/results/data/bad_inputs_round{round_no}-TAG.txt")
    a = parser.parse_args(argv)
    only = [o for item in a.only for o in item.split(",") if o]
    cases = [c for c in cases_all if (not a.quick or c.quick) and (not only or any(o in c.name for o in only))]
    if a.list:
        for c in cases:
            print(f"{c.category:>12}  {c.name}")
        print(f"{len(cases)} cases ({sum(not c.control for c in cases)} counted, {sum(c.control for c in cases)} controls); "
              f"{len(valid)} dropped as valid")
        return 0
    names = [c.name for c in cases_all + valid]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise SystemExit(f"duplicate case names: {sorted(dupes)}")
    if not cases:  # --only naming nothing that runs (a dropped case's name, a typo)
        dropped = [n for n in (getattr(v, "name", v) for v in valid) if any(o in str(n) for o in only)]
        why = f": {', '.join(map(str, dropped))} {'is' if len(dropped) == 1 else 'are'} dropped as valid" if dropped else ""
        print(f"error: --only {' '.join(only)}: no case to run{why} (--list shows the cases)", file=sys.stderr)
        return 2
    full = not a.quick and not only
    if hasattr(signal, "SIGHUP"):  # cases that send SIGHUP test a program run from a terminal: a corpus started
        signal.signal(signal.SIGHUP, signal.SIG_DFL)  # under nohup would pass it down ignored (kept ignored)
    # likewise SIGINT and SIGQUIT: a non-interactive shell starts a background job (`... &`) with both ignored, and
    # the cases' programs would keep them ignored (a Ctrl-C or Ctrl-\ case then trains to the end); a handler here is
    # reset at exec
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if hasattr(signal, "SIGQUIT"):
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    log_lines: list[str] = []
    real_stdout = sys.stdout

    class _Tee:
        def write(self, s: str) -> int:
            log_lines.append(s)
            return real_stdout.write(s)

        def flush(self) -> None:
            real_stdout.flush()

    if full:
        sys.stdout = _Tee()  # type: ignore[assignment]
    base = Path(tempfile.mkdtemp(prefix=f"bad_inputs_r{round_no}_"))
    fx = base / "fixtures"
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(fx), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    sys.path.insert(0, str(fx))
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    t0 = time.monotonic()
    load = os.getloadavg()
    print(f"round {round_no}: {len(cases)} cases, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}", flush=True)
    try:
        make_fixtures(fx, cases)
        import importlib

        importlib.invalidate_caches()
        for kind in sorted({c.kind for c in cases} - {"py", "cmd"}):
            importlib.import_module(f"parlightning.cli.{kind}")
        results, counted, controls = [], [], []
        for i, c in enumerate(cases):
            c.timeout *= a.timeout_scale
            outcome, line, seconds, _text = run_case(c, base / "cases", fx, i)
            row = (c, outcome, line, seconds)
            results.append(row)
            (controls if c.control else counted).append(row)
            if a.verbose or outcome not in ("clean", "ok"):
                print(f"[{outcome:>10}] {c.category}/{c.name} ({seconds:.1f} s): {line}", flush=True)
        summarize(results, counted, t0, max(len(c.category) for c in cases) + 1, controls)
        if valid:
            print(f"dropped as valid (not counted): {len(valid)}: " + ", ".join(f"{c.name} ({dropped[c.name]})" for c in valid))
    finally:
        sys.stdout = real_stdout
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)
    if full:
        out = ROOT / "docs" / "results" / "data" / f"bad_inputs_round{round_no}-{a.tag}.txt"
        import subprocess

        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        header = (f"# Round {round_no} bad-input corpus (scripts/bad_inputs_round{round_no}.py{' --verbose' if a.verbose else ''}), tag '{a.tag}', "
                  f"run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} at {rev or 'unknown commit'} on the shared 2-core machine\n")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(header + "".join(log_lines))
        print(f"wrote {out.relative_to(ROOT)}")
    clean = sum(r[1] == "clean" for r in counted)
    ok_controls = all(r[1] == "ok" for r in controls)
    return 0 if clean == len(counted) and ok_controls else 1



def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the quick subset (one case per fixed class)")
    parser.add_argument("--only", help="run the cases whose name contains this (several: comma-separated)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--verbose", action="store_true", help="print every case's line, not only the unclean ones")
    parser.add_argument("--keep", action="store_true", help="keep the cases' folders")
    parser.add_argument("--timeout-scale", type=float, default=1.0, help="multiply every case's timeout")
    a = parser.parse_args(argv)
    only = [o for o in (a.only or "").split(",") if o]
    cases = [c for c in CASES if (not a.quick or c.quick) and (not only or any(o in c.name for o in only))]
    if a.list:
        for c in cases:
            print(f"{c.category:>12}  {c.name}")
        print(f"{len(cases)} cases ({sum(not c.control for c in cases)} counted, {sum(c.control for c in cases)} controls)")
        return 0
    names = [c.name for c in CASES]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise SystemExit(f"duplicate case names: {sorted(dupes)}")
    base = Path(tempfile.mkdtemp(prefix="bad_inputs_r5_"))
    fx = base / "fixtures"
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(fx), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    sys.path.insert(0, str(fx))
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    t0 = time.monotonic()
    load = os.getloadavg()
    print(f"round 5: {len(cases)} cases, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, folder {base}", flush=True)
    make_fixtures(fx, cases)
    import importlib

    importlib.invalidate_caches()  # the fixtures folder on sys.path was empty until now
    for kind in sorted({c.kind for c in cases} - {"py", "cmd"}):  # imported once here, not in every forked case
        importlib.import_module(f"parlightning.cli.{kind}")
    results, counted, controls = [], [], []
    for i, c in enumerate(cases):
        c.timeout *= a.timeout_scale
        outcome, line, seconds, _text = run_case(c, base / "cases", fx, i)
        row = (c, outcome, line, seconds)
        results.append(row)
        (controls if c.control else counted).append(row)
        if a.verbose or outcome not in ("clean", "ok"):
            print(f"[{outcome:>10}] {c.category}/{c.name} ({seconds:.1f} s): {line}", flush=True)
    summarize(results, counted, t0, max(len(c.category) for c in cases) + 1, controls)
    if not a.keep:
        shutil.rmtree(base, ignore_errors=True)
    clean = sum(r[1] == "clean" for r in counted)
    ok_controls = all(r[1] == "ok" for r in controls)
    return 0 if clean == len(counted) and ok_controls else 1

# ------------------------------------------------------------------------------------ configs
TINY = ["--config", "swarm", "--trainer.max_epochs", "1", "--data.num_envs", "8", "--data.num_steps", "8",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
CART = ["--config", "cartpole_fast", "--trainer.max_epochs", "1", "--data.num_envs", "8", "--data.num_steps", "8",
        "--data.num_minibatches", "2", "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
GYM = ["--config", "cartpole", "--trainer.max_epochs", "1", "--data.num_envs", "2", "--data.num_steps", "8",
       "--data.num_minibatches", "2", "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
MEM = ["--config", "memory", "--trainer.max_epochs", "1", "--data.num_envs", "8", "--data.num_steps", "16",
       "--data.num_minibatches", "2", "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
UW = ["--config", "{fx}/user.yaml"]
EXTC = ["--config", "{fx}/ext.yaml"]
RUN_META = r"^lightning_logs(/version_\d+(/(hparams\.yaml|config\.yaml|events\.out\.tfevents\.[^/]*|checkpoints(/[^/]*\.ckpt)?))?)?$"

def user_yaml(world: str = "r5worlds.Base", num_steps: int = 8) -> str:
    """A one-iteration config on a user's tensor world (rounds 6 and 7 reuse it with their own worlds)."""
    return f"""\
seed_everything: 0
torch_threads: 1
trainer: {{max_epochs: 1, accelerator: cpu, devices: 1, enable_progress_bar: false, enable_model_summary: false}}
model: {{hidden_sizes: [16], activation: relu, lr: 0.001}}
data:
  env: {{class_path: {world}}}
  num_envs: 8
  num_steps: {num_steps}
  update_epochs: 1
  num_minibatches: 2
  reward: null
"""


def ext_yaml(world: str = "r5ext:Good", num_steps: int = 4) -> str:
    """A one-iteration config on a user's external world (rounds 6 and 7 reuse it)."""
    return f"""\
seed_everything: 0
torch_threads: 1
trainer: {{max_epochs: 1, accelerator: cpu, devices: 1, enable_progress_bar: false, enable_model_summary: false}}
model: {{hidden_sizes: [16], activation: relu}}
data:
  env:
    class_path: parlightning.envs.external.ExternalBatchedEnv
    init_args: {{world: "{world}", step_timeout: 20}}
  num_envs: 4
  num_steps: {num_steps}
  update_epochs: 1
  num_minibatches: 2
  reward: null
"""


USER_YAML = user_yaml()
EXT_YAML = ext_yaml()


def pool_yaml(pool: str = "{class_path: parlightning.subagents.SimulatedPool, init_args: {reliability: 0.9}}",
              world_kwargs: str = "{families: [solo, fanout, locked], tasks_per_family: 2, max_width: 3, n_skills: 3}",
              extra: str = "") -> str:
    return f"""\
seed_everything: 0
torch_threads: 1
trainer: {{max_epochs: 1, accelerator: cpu, devices: 1, enable_progress_bar: false, enable_model_summary: false}}
model: {{hidden_sizes: [16], activation: relu}}
data:
  env:
    class_path: parlightning.envs.external.ExternalBatchedEnv
    init_args:
      world: parlightning.subagents.world:PoolOrchestrationWorld
      world_kwargs: {world_kwargs}
      shared:
        pool: {pool}
      step_timeout: 30
{extra}  num_envs: 4
  num_steps: 4
  update_epochs: 1
  num_minibatches: 2
  reward: null
"""


def swarm_yaml(body: str) -> dict[str, str]:
    """A config file layered over the packaged swarm config (the case passes --config swarm first)."""
    return {"c.yaml": body}


CFG = TINY + ["--config", "c.yaml"]

# ------------------------------------------------------------------------------------ controls
case("control-user-world", "control", "fit", UW, control=True)
case("control-user-factory", "control", "fit", UW + ["--data.env", "r5worlds.make_base"], control=True)
case("control-external-world", "control", "fit", EXTC, control=True)
case("control-user-sampler", "control", "fit", TINY + ["--data.sampler", "r5user.GoodSampler"], control=True)
case("control-user-strategy", "control", "fit", TINY + [
    "--trainer.callbacks+", "{class_path: parlightning.callbacks.StrategyPlanner, init_args: {strategy: {class_path: r5user.GoodStrategy}}}"],
    control=True)
case("control-user-callback", "control", "fit", TINY + ["--trainer.callbacks+", "r5user.GoodCallback"], control=True)

# ------------------------------------------------------------------------------------ config files and fields
case("config-is-a-directory", "config", "fit", ["--config", "confdir"], "config", files={"confdir": "dir"})
case("config-is-a-checkpoint", "config", "fit", ["--config", "good.ckpt"], "config", files={"good.ckpt": "fixture:swarm.ckpt"},
     guard=("good.ckpt",))
case("config-packaged-name-typo", "config", "fit", ["--config", "swarmm"], "swarmm")
case("config-top-level-typo", "config", "fit", TINY + ["--config", "c.yaml"], "trainr",
     files=swarm_yaml("trainr: {max_epochs: 1}\n"))
case("config-num-envs-fraction", "config", "fit", CFG, "num_envs", files=swarm_yaml("data: {num_envs: 8.5}\n"))
case("config-hidden-sizes-scalar", "config", "fit", CFG, "hidden_sizes", files=swarm_yaml("model: {hidden_sizes: 64}\n"))
case("config-hidden-sizes-negative", "config", "fit", TINY + ["--model.hidden_sizes", "[64, -1]"], "hidden_sizes")
case("config-hidden-sizes-zero", "config", "fit", TINY + ["--model.hidden_sizes", "[0]"], "hidden_sizes")
case("config-hidden-sizes-fraction", "config", "fit", TINY + ["--model.hidden_sizes", "[64.5]"], "hidden_sizes")
case("config-activation-class-path", "config", "fit", TINY + ["--model.activation", "torch.nn.ReLU"], "activation")
case("config-policy-unknown", "config", "fit", TINY + ["--model.policy", "transformer"], "policy")
case("config-prior-bool", "config", "fit", TINY + ["--model.prior", "true"], "prior")
case("config-prior-no-probability", "config", "fit", TINY + ["--model.prior", "{action: 1}"], "prior")
case("config-prior-fractional-action", "config", "fit", TINY + ["--model.prior", "{action: 1.5, probability: 0.9}"], "prior")
case("config-prior-list", "config", "fit", TINY + ["--model.prior", "[0.9, 0.1]"], "prior")
case("config-prior-string", "config", "fit", CFG, "prior", files=swarm_yaml("model: {prior: 'high'}\n"))
case("init-from-missing", "config", "fit", TINY + ["--model.init_from", "nope.ckpt"], "init_from")
case("init-from-directory", "config", "fit", TINY + ["--model.init_from", "sub"], "init_from", files={"sub": "dir"})
case("init-from-text-file", "config", "fit", TINY + ["--model.init_from", "notes.txt"], "init_from",
     files={"notes.txt": "fixture:text.txt"})
case("init-from-other-world", "config", "fit", TINY + ["--model.init_from", "cart.ckpt"], "init_from",
     files={"cart.ckpt": "fixture:cart.ckpt"})
case("init-from-other-width", "config", "fit", TINY + ["--model.init_from", "bc.ckpt", "--model.hidden_sizes", "[32]"],
     "init_from", files={"bc.ckpt": "fixture:bc.ckpt"})
case("init-from-dev-zero", "config", "fit", TINY + ["--model.init_from", "/dev/zero"], "init_from", timeout=60)
case("bptt-longer-than-rollout", "config", "fit", MEM + ["--data.bptt_len", "32"], "bptt_len")
case("minibatches-more-than-rows", "config", "fit", TINY + ["--data.num_minibatches", "128"], "num_minibatches")
case("minibatches-do-not-divide", "config", "fit", TINY + ["--data.num_minibatches", "3"], "num_minibatches")
case("collect-typo", "config", "fit", TINY + ["--data.collect", "trajectory"], "collect")
case("collect-trajectories-lag-0", "config", "fit", TINY + ["--data.collect", "trajectories"], "max_policy_lag")
case("collect-trajectories-in-process", "config", "fit", TINY + [
    "--data.collect", "trajectories", "--data.max_policy_lag", "1", "--data.collect_in", "process"], "collect_in")
case("collect-trajectories-recurrent", "config", "fit", MEM + ["--data.collect", "trajectories", "--data.max_policy_lag", "1"],
     "gru|recurrent|policy")
case("actors-in-flight-without-trajectories", "config", "fit", TINY + ["--data.actors_in_flight", "4"], "actors_in_flight")
case("collect-in-typo", "config", "fit", TINY + ["--data.max_policy_lag", "1", "--data.collect_in", "proces"], "collect_in")
case("artifact-key-not-importable", "config", "fit", TINY + ["--data.artifact_key", "nosuch_module.family"], "artifact_key")
case("sampler-class-typo", "config", "fit", TINY + ["--data.sampler", "parlightning.distribution.samplers.RoundRobinn"], "sampler")
SFL = ["--data.sampler", "parlightning.distribution.samplers.SamplingForLearnability"]
case("sfl-buffer-size-zero", "config", "fit", TINY + SFL + ["--data.sampler.buffer_size", "0"], "buffer_size")
case("sfl-replay-prob-above-one", "config", "fit", TINY + SFL + ["--data.sampler.replay_prob", "1.5"], "replay_prob")
case("sfl-refresh-zero", "config", "fit", TINY + SFL + ["--data.sampler.refresh_episodes", "0"], "refresh_episodes")
case("sfl-pass-threshold-two", "config", "fit", TINY + SFL + ["--data.sampler.pass_threshold", "2"], "pass_threshold")
PS = ["--data.sampler", "parlightning.distribution.samplers.PosteriorSignal"]
case("posterior-prior-zero", "config", "fit", TINY + PS + ["--data.sampler.informative_prior", "[0, 0]"], "informative_prior")
case("posterior-prior-one-number", "config", "fit", TINY + PS + ["--data.sampler.informative_prior", "[1]"], "informative_prior")
case("difficulty-seed-negative", "config", "fit", TINY + [
    "--data.sampler", "parlightning.distribution.samplers.DifficultyWeighted", "--data.sampler.seed", "-3"], "seed")
case("reward-cap-differs-from-world", "config", "fit", TINY + ["--data.reward.init_args.max_subagents", "64"], "max_subagents")
case("world-cap-differs-from-reward", "config", "fit", TINY + ["--data.env.init_args.max_subagents", "8"], "max_subagents")
case("reward-lambda-is-a-number", "config", "fit", TINY + ["--data.reward.init_args.lambda1", "0.1"], "lambda1")
case("reward-without-max-subagents", "config", "fit", UW + ["--data.reward", "parlightning.parl.reward.PARLReward"],
     "max_subagents")
case("reward-on-cartpole", "config", "fit", CART + ["--data.reward", "parlightning.parl.reward.PARLReward",
                                                    "--data.reward.max_subagents", "4"], "reward")
case("reward-constant-infinite", "config", "fit", TINY + [
    "--data.reward.init_args.lambda1", "{class_path: parlightning.parl.reward.ConstantSchedule, init_args: {value: .inf}}"],
    "value|lambda1")
case("reward-start-nan", "config", "fit", TINY + ["--data.reward.init_args.lambda1.init_args.start", "nan"], "start")
case("reward-user-class", "config", "fit", UW + ["--data.reward", "r5user.MyReward"], "reward")
case("annealing-unit-typo", "config", "fit", CFG, "unit", files=swarm_yaml("""\
    trainer:
      callbacks:
        - {class_path: parlightning.callbacks.PARLAnnealing, init_args: {unit: steps}}
    """))

# ------------------------------------------------------------------------------------ SwarmEnv arguments
SW = "--data.env.init_args."
case("swarm-family-unknown", "swarm", "fit", TINY + [SW + "families", "[solo, nonexistent]"], "families")
case("swarm-families-empty", "swarm", "fit", TINY + [SW + "families", "[]"], "families")
case("swarm-split-zero-shards", "swarm", "fit", TINY + [SW + "splits", "[3, 0]"], "splits")
case("swarm-splits-repeated", "swarm", "fit", TINY + [SW + "splits", "[2, 2]"], "splits")
case("swarm-family-tasks-negative", "swarm", "fit", TINY + [SW + "family_tasks", "{solo: -1}"], "family_tasks")
case("swarm-family-tasks-unknown-family", "swarm", "fit", TINY + [SW + "family_tasks", "{nosuch: 4}"], "family_tasks|nosuch")
case("swarm-round-cap-typo", "swarm", "fit", TINY + [SW + "round_cap", "bogus"], "round_cap")
case("swarm-compile-without-compiler", "swarm", "fit", TINY + [SW + "compile", "true"], "compile|CXX",
     env={"CXX": "/nonexistent/g++", "PARLIGHTNING_BUILD_DIR": "{tmp}/../build"}, timeout=120)
case("swarm-swap-world-keeps-args", "swarm", "fit", TINY + ["--data.env", "parlightning.envs.CartPoleEnv"],
     "data.env|split|max_subagents|reward")
case("swarm-device-in-init-args", "swarm", "fit", TINY + [SW + "device", "cuda"], "device")

# ------------------------------------------------------------------------------------ Gymnasium and NormalizeEnv
case("gym-wrapper-missing", "gym", "fit", GYM + [SW + "wrappers", "[gymnasium.wrappers.NoSuchWrapper]"], "wrappers")
case("gym-wrapper-not-a-wrapper", "gym", "fit", GYM + [SW + "wrappers", "[builtins.len]"], "wrappers")
case("gym-env-kwargs-unknown", "gym", "fit", GYM + [SW + "env_kwargs", "{bogus_arg: 1}"], "env_kwargs|bogus_arg")
case("gym-vectorization-typo", "gym", "fit", GYM + [SW + "vectorization", "asyncc"], "vectorization")
case("gym-env-id-empty", "gym", "fit", GYM + [SW + "env_id", ""], "env_id")
NORM = CART + ["--data.env", "parlightning.envs.NormalizeEnv", "--data.env.env", "parlightning.envs.CartPoleEnv"]
case("normalize-epsilon-negative", "gym", "fit", NORM + ["--data.env.epsilon", "-1"], "epsilon")
case("normalize-gamma-above-one", "gym", "fit", NORM + ["--data.env.gamma", "1.5"], "gamma")
case("normalize-without-inner-world", "gym", "fit", CART + ["--data.env", "parlightning.envs.NormalizeEnv"], "env")
case("normalize-inner-not-a-world", "gym", "fit", CART + ["--data.env", "parlightning.envs.NormalizeEnv",
                                                          "--data.env.env", "r5user.GoodSampler"], "env")
case("normalize-clip-zero", "gym", "fit", NORM + ["--data.env.clip_obs", "0"], "clip_obs")

# ------------------------------------------------------------------------------------ a user's tensor world
for cls, runtime in [
    ("DoneLong", False), ("DoneInt", False), ("FinalObsShape", False), ("FinalObsNaNOnTruncation", False),
    ("ScalarObs", False), ("ZeroWidthObs", False), ("WrongNumEnvsAttr", False), ("HalfObs", False),
    ("BoolReward", False), ("FloatNvec", False), ("NegativeNvec", False), ("LowAboveHigh", False),
    ("ResetTuple", False), ("WeirdDevice", False), ("StateDictObject", False), ("StateDictRaises", False),
    ("StateDictNotDict", False), ("MaskEmptyLater", False), ("MaskFloatLater", False), ("MaskRaisesLater", False),
    ("MaskShapeLater", False), ("MaskAsProperty", False), ("PartsTaskOutOfRange", False), ("PartsShort", False),
    ("PartsOutcomeNaN", False), ("TaskIdsString", False), ("TaskIdsEmpty", False), ("TaskIdsDuplicate", False),
    ("TaskIdsInts", False), ("AbstractWorld", False), ("ObsShapeLater", False), ("RewardShapeLater", False),
    ("RewardMetaLater", False), ("NumpyDoneLater", False), ("ObsInfLater", False), ("HugeReward", True),
    ("StepReturnsList", False), ("ObsRequiresGrad", False),
]:
    case(f"world-{cls}", "world", "fit", UW + ["--data.env", f"r5worlds.{cls}"], cls,
         allow=(RUN_META,) if runtime else ())
case("world-factory-returns-class", "world", "fit", UW + ["--data.env", "r5worlds.make_returns_class"],
     "make_returns_class")

# ------------------------------------------------------------------------------------ user samplers, strategies, callbacks
for cls in ("PickIndex", "PickUnknown", "PickNone", "PickList", "RecordRaises", "SamplerStateObject"):
    case(f"sampler-{cls}", "plugins", "fit", TINY + ["--data.sampler", f"r5user.{cls}"], cls)
for cls in ("PlanEmpty", "PlanWrongWorker", "PlanUnknownKeys", "PlanNoKeys", "PlanDict", "PlanStrings", "ObserveRaises"):
    case(f"strategy-{cls}", "plugins", "fit", TINY + [
        "--trainer.callbacks+", "{class_path: parlightning.callbacks.StrategyPlanner, init_args: {strategy: {class_path: "
        f"r5user.{cls}}}}}}}"], cls)
case("callback-not-a-callback", "plugins", "fit", TINY + ["--trainer.callbacks+", "r5user.NotACallback"],
     "callbacks|NotACallback")
case("early-stopping-on-missing-metric", "plugins", "fit", TINY + [
    "--trainer.callbacks+", "{class_path: lightning.pytorch.callbacks.EarlyStopping, init_args: {monitor: val_loss}}"],
    "val_loss|EarlyStopping|monitor", allow=(RUN_META,))
case("checkpoint-dirpath-is-a-file", "plugins", "fit", TINY + [
    "--trainer.callbacks+", "{class_path: lightning.pytorch.callbacks.ModelCheckpoint, init_args: {dirpath: notes.txt, every_n_epochs: 2}}"],
    "dirpath|notes.txt", files={"notes.txt": "fixture:text.txt"}, guard=("notes.txt",))
case("checkpoint-every-n-negative", "plugins", "fit", TINY + [
    "--trainer.callbacks+", "{class_path: lightning.pytorch.callbacks.ModelCheckpoint, init_args: {every_n_epochs: -1}}"],
    "every_n_epochs")
case("checkpoint-save-top-k-below-minus-one", "plugins", "fit", TINY + [
    "--trainer.callbacks+", "{class_path: lightning.pytorch.callbacks.ModelCheckpoint, init_args: {save_top_k: -2}}"],
    "save_top_k")

# ------------------------------------------------------------------------------------ external worlds
EA = "--data.env.init_args."
case("external-world-module-missing", "external", "fit", EXTC + [EA + "world", "nosuch_module:World"], "world")
case("external-world-attr-missing", "external", "fit", EXTC + [EA + "world", "r5ext:Nope"], "world|Nope")
case("external-world-factory-returns-none", "external", "fit", EXTC + [EA + "world", "r5ext:not_a_class"], "not_a_class")
case("external-world-kwargs-typo", "external", "fit", EXTC + [EA + "world_kwargs", "{lenght: 3}"], "lenght")
case("external-world-kwargs-list", "external", "fit", EXTC + [EA + "world_kwargs", "[3]"], "world_kwargs")
case("external-shared-without-class-path", "external", "fit", EXTC + [EA + "shared", "{pool: {reliability: 0.9}}"], "shared|pool")
case("external-step-timeout-with-unit", "external", "fit", EXTC + [EA + "step_timeout", "30s"], "step_timeout")
case("external-workers-more-than-actors", "external", "fit", EXTC + [EA + "workers", "1000"], "workers", timeout=90)
case("external-on-error-typo", "external", "fit", EXTC + [EA + "on_error", "ignore"], "on_error")
case("external-drop-with-rounds", "external", "fit", EXTC + [EA + "on_error", "drop"], "on_error|drop")
case("external-drop-budget-above-one", "external", "fit", EXTC + [EA + "drop_budget", "1.5"], "drop_budget")
case("external-runner-typo", "external", "fit", EXTC + [EA + "runner", "rayy"], "runner")
case("external-start-method-typo", "external", "fit", EXTC + [EA + "workers", "1", EA + "start_method", "spawnn"], "start_method")
case("external-switch-interval-negative", "external", "fit", EXTC + [EA + "switch_interval", "-1"], "switch_interval")
case("external-task-ids-empty", "external", "fit", EXTC + [EA + "task_ids", "[]"], "task_ids")
case("external-task-ids-numbers", "external", "fit", EXTC + [EA + "task_ids", "[1, 2]"], "task_ids")
for cls, word in [("FourTuple", "step"), ("TasksDict", "tasks"), ("NoSpec", "action_spec"), ("RetryableString", "retryable"),
                  ("PartsUnknownKey", "outcom"), ("OutcomeAboveOne", "outcome"), ("NegativeSubagents", "n_subagents"),
                  ("ResetNeedsTwoArgs", "reset")]:
    extra = [EA + "retries", "2"] if cls == "RetryableString" else []
    case(f"external-{cls}", "external", "fit", EXTC + [EA + "world", f"r5ext:{cls}"] + extra, word)

# ------------------------------------------------------------------------------------ subagent pools and PoolOrchestrationWorld
def pool_case(name: str, expect: Any, pool: Optional[str] = None, world_kwargs: Optional[str] = None, timeout: float = 60,
              extra: str = "", **kw: Any) -> None:
    args = {k: v for k, v in (("pool", pool), ("world_kwargs", world_kwargs)) if v is not None}
    case(name, "pools", "fit", ["--config", "p.yaml"], expect, files={"p.yaml": pool_yaml(extra=extra, **args)},
         timeout=timeout, **kw)


SIM = "parlightning.subagents.SimulatedPool"
PROC = "parlightning.subagents.ProcessPool"
HTTP = "parlightning.subagents.HTTPPool"
AHTTP = "parlightning.subagents.AsyncHTTPPool"
pool_case("simulated-reliability-above-one", "reliability", f"{{class_path: {SIM}, init_args: {{reliability: 1.5}}}}")
pool_case("simulated-latency-negative", "seconds_per_step", f"{{class_path: {SIM}, init_args: {{seconds_per_step: -1}}}}")
pool_case("simulated-spawn-steps-negative", "spawn_steps", f"{{class_path: {SIM}, init_args: {{spawn_steps: -1}}}}")
pool_case("pool-not-a-pool", "pool", "{class_path: collections.OrderedDict}")
pool_case("process-fn-without-module", "fn", f"{{class_path: {PROC}, init_args: {{fn: skill_matcher, workers: 1}}}}")
pool_case("process-fn-missing", "fn", f"{{class_path: {PROC}, init_args: {{fn: 'os:nonexistent', workers: 1}}}}")
pool_case("process-fn-not-callable", "fn|not_callable", f"{{class_path: {PROC}, init_args: {{fn: 'r5user:not_callable', workers: 1}}}}")
pool_case("process-workers-zero", "workers", f"{{class_path: {PROC}, init_args: {{fn: 'parlightning.subagents.examples:skill_matcher', workers: 0}}}}")
pool_case("process-timeout-negative", "timeout", f"{{class_path: {PROC}, init_args: {{fn: 'parlightning.subagents.examples:skill_matcher', workers: 1, timeout: -1}}}}")
pool_case("process-start-method-typo", "start_method", f"{{class_path: {PROC}, init_args: {{fn: 'parlightning.subagents.examples:skill_matcher', workers: 1, start_method: forkk}}}}")
pool_case("process-on-error-typo", "on_error", f"{{class_path: {PROC}, init_args: {{fn: 'parlightning.subagents.examples:skill_matcher', workers: 1, on_error: ignore}}}}")
pool_case("process-start-timeout-zero", "start_timeout", f"{{class_path: {PROC}, init_args: {{fn: 'parlightning.subagents.examples:skill_matcher', workers: 1, start_timeout: 0}}}}")
for fn, word in [("pool_arity", "pool_arity"), ("pool_no_steps", "steps"), ("pool_negative_steps", "steps"),
                 ("pool_success_string", "success"), ("pool_returns_list", "pool_returns_list")]:
    pool_case(f"process-fn-{fn.removeprefix('pool_').replace('_', '-')}", word,
              f"{{class_path: {PROC}, init_args: {{fn: 'r5user:{fn}', workers: 1, timeout: 20}}}}", timeout=120)
pool_case("http-url-not-a-url", "base_url", f"{{class_path: {HTTP}, init_args: {{base_url: 'not a url'}}}}")
pool_case("http-url-ftp", "base_url", f"{{class_path: {HTTP}, init_args: {{base_url: 'ftp://127.0.0.1/v1'}}}}")
pool_case("http-url-port-out-of-range", "base_url|port", f"{{class_path: {HTTP}, init_args: {{base_url: 'http://127.0.0.1:99999/v1'}}}}")
pool_case("http-workers-zero", "workers", f"{{class_path: {HTTP}, init_args: {{base_url: 'http://127.0.0.1:9/v1', probe: false, workers: 0}}}}")
pool_case("http-timeout-zero", "timeout", f"{{class_path: {HTTP}, init_args: {{base_url: 'http://127.0.0.1:9/v1', probe: false, timeout: 0}}}}")
pool_case("http-max-tokens-zero", "max_tokens", f"{{class_path: {HTTP}, init_args: {{base_url: 'http://127.0.0.1:9/v1', probe: false, max_tokens: 0}}}}")
pool_case("http-api-key-with-newline", "api_key", f"{{class_path: {HTTP}, init_args: {{base_url: 'http://127.0.0.1:9/v1', probe: false, api_key: \"sk-1\\nX-Evil: 1\"}}}}", timeout=90)
pool_case("async-http-retries-negative", "retries", f"{{class_path: {AHTTP}, init_args: {{base_url: 'http://127.0.0.1:9/v1', probe: false, retries: -1}}}}")
pool_case("async-http-backoff-negative", "backoff", f"{{class_path: {AHTTP}, init_args: {{base_url: 'http://127.0.0.1:9/v1', probe: false, backoff: -1}}}}")
pool_case("async-http-max-backoff-below-backoff", "max_backoff", f"{{class_path: {AHTTP}, init_args: {{base_url: 'http://127.0.0.1:9/v1', probe: false, backoff: 4, max_backoff: 0.1}}}}")
pool_case("async-http-extra-body-list", "extra_body", f"{{class_path: {AHTTP}, init_args: {{base_url: 'http://127.0.0.1:9/v1', probe: false, extra_body: [1, 2]}}}}")
pool_case("async-http-workers-zero", "workers", f"{{class_path: {AHTTP}, init_args: {{base_url: 'http://127.0.0.1:9/v1', probe: false, workers: 0}}}}")
WK = "families: [solo, fanout, locked], tasks_per_family: 2, max_width: 3, n_skills: 3"
pool_case("orchestration-fail-rate-above-one", "fail_rate", world_kwargs=f"{{{WK}, fail_rate: 1.5}}")
pool_case("orchestration-hang-rate-negative", "hang_rate", world_kwargs=f"{{{WK}, hang_rate: -0.1}}")
pool_case("orchestration-latency-one-number", "call_latency", world_kwargs=f"{{{WK}, call_latency: [0.002]}}")
pool_case("orchestration-latency-negative-median", "call_latency", world_kwargs=f"{{{WK}, call_latency: [-1, 0.8]}}")
pool_case("orchestration-family-unknown", "families|nosuch", world_kwargs="{families: [solo, nosuch], tasks_per_family: 2}")
pool_case("orchestration-subagent-timeout-negative", "subagent_timeout", world_kwargs=f"{{{WK}, subagent_timeout: -1}}")
pool_case("orchestration-main-seconds-negative", "main_seconds", world_kwargs=f"{{{WK}, main_seconds: -1}}")
pool_case("orchestration-max-cost-negative", "max_cost", world_kwargs=f"{{{WK}, max_cost: -1}}")

# ------------------------------------------------------------------------------------ trainer values
T = "--trainer."
case("trainer-precision-64", "trainer", "fit", TINY + [T + "precision", "64-true"], "precision")
case("trainer-precision-bf16-true", "trainer", "fit", TINY + [T + "precision", "bf16-true"], "precision")
case("trainer-clip-algorithm-typo", "trainer", "fit", TINY + [T + "gradient_clip_val", "0.5", T + "gradient_clip_algorithm", "valu"],
     "gradient_clip_algorithm")
case("trainer-profiler-unknown", "trainer", "fit", TINY + [T + "profiler", "bogus"], "profiler")
case("trainer-plugin-unknown", "trainer", "fit", TINY + [T + "plugins", "bogus_plugin"], "plugins")
case("trainer-checkpointing-off-with-checkpoint-callback", "trainer", "fit", TINY + [T + "enable_checkpointing", "false"],
     "enable_checkpointing")
case("trainer-overfit-batches", "trainer", "fit", TINY + [T + "overfit_batches", "1"], "overfit_batches")
case("trainer-max-time-words", "trainer", "fit", TINY + [T + "max_time", "five minutes"], "max_time")
case("trainer-max-time-negative", "trainer", "fit", TINY + [T + "max_time", "{minutes: -1}"], "max_time")
case("trainer-min-steps-negative", "trainer", "fit", TINY + [T + "min_steps", "-5"], "min_steps")
case("trainer-log-every-zero", "trainer", "fit", TINY + [T + "log_every_n_steps", "0"], "log_every_n_steps")
case("trainer-accumulate-zero", "trainer", "fit", TINY + [T + "accumulate_grad_batches", "0"], "accumulate_grad_batches")
case("trainer-fast-dev-run-negative", "trainer", "fit", TINY + [T + "fast_dev_run", "-1"], "fast_dev_run")
case("trainer-csv-save-dir-is-a-file", "trainer", "fit", TINY + [
    T + "logger", "lightning.pytorch.loggers.CSVLogger", T + "logger.save_dir", "notes.txt"], "save_dir|notes.txt",
    files={"notes.txt": "fixture:text.txt"}, guard=("notes.txt",))
case("trainer-logger-class-typo", "trainer", "fit", TINY + [T + "logger", "lightning.pytorch.loggers.NoSuchLogger"], "logger")
case("trainer-root-dir-under-a-file", "trainer", "fit", TINY + [T + "default_root_dir", "notes.txt/sub"], "default_root_dir",
     files={"notes.txt": "fixture:text.txt"}, guard=("notes.txt",))
case("trainer-root-dir-name-too-long", "trainer", "fit", TINY + [T + "default_root_dir", "x" * 300], "default_root_dir")
case("trainer-root-dir-dev-null", "trainer", "fit", TINY + [T + "default_root_dir", "/dev/null"], "default_root_dir")
case("trainer-root-dir-in-proc", "trainer", "fit", TINY + [T + "default_root_dir", "/proc/runs"], "default_root_dir")
case("trainer-version-folder-is-a-file", "trainer", "fit", TINY, "version_0|lightning_logs",
     files={"lightning_logs/version_0": "not a folder\n"}, guard=("lightning_logs/version_0",))
case("trainer-log-folder-dangling-link", "trainer", "fit", TINY, "lightning_logs",
     files={"lightning_logs": "link:/nonexistent/place"})
case("trainer-strategy-fsdp-on-cpu", "trainer", "fit", TINY + [T + "accelerator", "cpu", T + "strategy", "fsdp"], "fsdp|strategy")
case("trainer-strategy-deepspeed", "trainer", "fit", TINY + [T + "strategy", "deepspeed"], "deepspeed|strategy")
case("trainer-num-nodes-zero", "trainer", "fit", TINY + [T + "num_nodes", "0"], "num_nodes")
case("trainer-barebones", "trainer", "fit", TINY + [T + "barebones", "true"], "barebones")

# ------------------------------------------------------------------------------------ fit's own arguments
case("fit-ckpt-path-empty", "fit-args", "fit", TINY + ["--ckpt_path", ""], "ckpt_path")
case("fit-torch-threads-fraction", "fit-args", "fit", TINY + ["--torch_threads", "1.5"], "torch_threads")
case("fit-seed-word", "fit-args", "fit", TINY + ["--seed", "abc"], "seed")
case("fit-seed-fraction", "fit-args", "fit", TINY + ["--seed", "1.5"], "seed")
case("fit-print-config-bad-flag", "fit-args", "fit", TINY + ["--print_config=bogus"], "print_config|bogus")
case("fit-flag-without-value", "fit-args", "fit", TINY + ["--trainer.max_epochs"], "max_epochs")
case("fit-config-as-positional", "fit-args", "fit", ["swarm.yaml"], "swarm.yaml|config")
case("fit-stall-timeout-with-unit", "fit-args", "fit", TINY + ["--stall_timeout", "30s"], "stall_timeout")
case("fit-data-seed-word", "fit-args", "fit", TINY + ["--data.seed", "abc"], "seed")
case("fit-help-unknown-subclass", "fit-args", "fit", ["--data.env.help", "NoSuchEnv"], "NoSuchEnv|data.env")
case("fit-max-epochs-without-section", "fit-args", "fit", TINY + ["--max_epochs", "1"], "max_epochs")
case("fit-config-fifo", "fit-args", "fit", ["--config", "pipe.yaml"], "config|pipe.yaml", files={"pipe.yaml": "fifo"},
     timeout=40)
case("fit-config-dev-zero", "fit-args", "fit", ["--config", "/dev/zero"], "config|/dev/zero", timeout=40)

# ------------------------------------------------------------------------------------ checkpoints
case("ckpt-zero-bytes", "checkpoint", "fit", TINY + ["--ckpt_path", "empty.ckpt"], "ckpt_path|empty.ckpt",
     files={"empty.ckpt": b""}, guard=("empty.ckpt",))
case("ckpt-json-text", "checkpoint", "fit", TINY + ["--ckpt_path", "x.ckpt"], "ckpt_path|x.ckpt",
     files={"x.ckpt": '{"state_dict": {}}\n'}, guard=("x.ckpt",))
case("ckpt-behaviour-clone-as-resume", "checkpoint", "fit", TINY + ["--ckpt_path", "bc.ckpt"], "init_from",
     files={"bc.ckpt": "fixture:bc.ckpt"}, guard=("bc.ckpt",))
case("ckpt-resume-with-more-actors", "checkpoint", "fit", TINY + ["--trainer.max_epochs", "2", "--ckpt_path", "good.ckpt",
                                                                  "--data.num_envs", "16"], "num_envs",
     files={"good.ckpt": "fixture:swarm.ckpt"}, guard=("good.ckpt",))
case("ckpt-a-list", "checkpoint", "py", """
    import torch
    torch.save([1, 2, 3], "l.ckpt")
    from parlightning.cli.fit import main
    main(%r)
""" % (TINY + ["--ckpt_path", "l.ckpt"]), "ckpt_path|l.ckpt", allow=(r"^l\.ckpt$",))
case("ckpt-fifo", "checkpoint", "fit", TINY + ["--ckpt_path", "pipe.ckpt"], "ckpt_path|pipe.ckpt", files={"pipe.ckpt": "fifo"},
     timeout=40)
case("ckpt-resume-into-trajectories", "checkpoint", "fit", TINY + [
    "--trainer.max_epochs", "2", "--ckpt_path", "good.ckpt", "--data.collect", "trajectories", "--data.max_policy_lag", "1"],
    "collect|trajectories", files={"good.ckpt": "fixture:swarm.ckpt"}, guard=("good.ckpt",))
EDIT = """
    import torch
    ck = torch.load("good.ckpt", weights_only=False)
    {edit}
    torch.save(ck, "edited.ckpt")
"""
for name, edit, word in [
    ("ckpt-without-state-dict", "del ck['state_dict']", "state_dict"),
    ("ckpt-future-lightning-version", "ck['pytorch-lightning_version'] = '99.0.0'", "version"),
    ("ckpt-negative-epoch", "ck['epoch'] = -5", "epoch"),
    ("ckpt-global-step-word", "ck['global_step'] = 'ten'", "global_step"),
    ("ckpt-loops-removed", "del ck['loops']", "loops"),
]:
    case(name, "checkpoint", "py", EDIT.format(edit=edit) + """
    from parlightning.cli.fit import main
    main(%r)
    """ % (TINY + ["--trainer.max_epochs", "2", "--ckpt_path", "edited.ckpt"]), "ckpt_path|" + word,
         files={"good.ckpt": "fixture:swarm.ckpt"}, guard=("good.ckpt",), allow=(r"^edited\.ckpt$",))

# ------------------------------------------------------------------------------------ evaluate
E_OR = ["--policy", "oracle", "--episodes", "1"]
case("evaluate-scripted-on-cartpole", "evaluate", "evaluate", ["--config", "cartpole_fast"] + E_OR, "policy")
case("evaluate-scripted-on-external", "evaluate", "evaluate", ["--config", "{fx}/ext.yaml", "--policy", "serial"], "policy")
case("evaluate-checkpoint-and-policy", "evaluate", "evaluate", ["--config", "swarm", "--ckpt_path", "good.ckpt"] + E_OR,
     "policy|ckpt_path", files={"good.ckpt": "fixture:swarm.ckpt"})
case("evaluate-neither-checkpoint-nor-policy", "evaluate", "evaluate", ["--config", "cartpole_fast"], "policy|ckpt_path")
case("evaluate-bank-seed-negative", "evaluate", "evaluate", E_OR + ["--bank_seeds", "-1"], "bank_seeds")
case("evaluate-bank-seeds-on-gym", "evaluate", "evaluate", ["--config", "cartpole_fast", "--ckpt_path", "cart.ckpt",
                                                            "--bank_seeds", "1", "2"], "bank_seeds",
     files={"cart.ckpt": "fixture:cart.ckpt"})
case("evaluate-video-on-swarm", "evaluate", "evaluate", E_OR + ["--video", "out.mp4"], "video")
case("evaluate-gantt-on-gym", "evaluate", "evaluate", ["--config", "cartpole_fast", "--ckpt_path", "cart.ckpt",
                                                       "--gantt", "g.png"], "gantt", files={"cart.ckpt": "fixture:cart.ckpt"})
case("evaluate-device-tpu", "evaluate", "evaluate", E_OR + ["--device", "tpu"], "device")
case("evaluate-json-and-trace-same-file", "evaluate", "evaluate", E_OR + ["--json", "o.json", "--trace", "o.json"], "trace|json")
case("evaluate-json-is-a-directory", "evaluate", "evaluate", E_OR + ["--json", "outdir"], "json", files={"outdir": "dir"})
case("evaluate-trace-to-full-device", "evaluate", "evaluate", E_OR + ["--trace", "/dev/full"], "trace")
case("evaluate-split-on-gym", "evaluate", "evaluate", ["--config", "cartpole_fast", "--ckpt_path", "cart.ckpt",
                                                       "--split", "heldout"], "split", files={"cart.ckpt": "fixture:cart.ckpt"})
case("evaluate-config-key-typo", "evaluate", "evaluate", ["--config", "e.yaml"] + E_OR, "max_widht",
     files={"e.yaml": "data:\n  env:\n    class_path: parlightning.envs.swarm.SwarmEnv\n    init_args: {max_widht: 8}\n"})
case("evaluate-optimal-on-memory", "evaluate", "evaluate", ["--config", "memory", "--policy", "optimal"], "policy")
case("evaluate-json-fifo", "evaluate", "evaluate", E_OR + ["--json", "pipe.json"], "json", files={"pipe.json": "fifo"},
     timeout=60)
case("evaluate-episodes-word", "evaluate", "evaluate", ["--policy", "oracle", "--episodes", "four"], "episodes")

# ------------------------------------------------------------------------------------ export
case("export-out-is-a-directory", "export", "export", ["--ckpt_path", "good.ckpt", "--out", "outdir"], "out",
     files={"good.ckpt": "fixture:swarm.ckpt", "outdir": "dir"})
case("export-out-full-device", "export", "export", ["--ckpt_path", "good.ckpt", "--out", "/dev/full"], "out",
     files={"good.ckpt": "fixture:swarm.ckpt"})
case("export-pt2-format-onnx-name", "export", "export", ["--ckpt_path", "good.ckpt", "--format", "pt2", "--out", "p.onnx"],
     "format|out", files={"good.ckpt": "fixture:swarm.ckpt"})
case("export-unknown-suffix", "export", "export", ["--ckpt_path", "good.ckpt", "--out", "policy.txt"], "out|format",
     files={"good.ckpt": "fixture:swarm.ckpt"})
case("export-ckpt-text", "export", "export", ["--ckpt_path", "notes.txt", "--out", "p.pt2"], "ckpt_path|notes.txt",
     files={"notes.txt": "fixture:text.txt"})
case("export-out-under-a-file", "export", "export", ["--ckpt_path", "good.ckpt", "--out", "notes.txt/p.pt2"], "out",
     files={"good.ckpt": "fixture:swarm.ckpt", "notes.txt": "fixture:text.txt"}, guard=("notes.txt",))
case("export-out-is-input-by-another-path", "export", "export", ["--ckpt_path", "good.ckpt", "--format", "pt2", "--out",
                                                                 "sub/../good.ckpt"],
     "out", files={"good.ckpt": "fixture:swarm.ckpt", "sub": "dir"}, guard=("good.ckpt",))
case("export-out-links-to-input", "export", "export", ["--ckpt_path", "good.ckpt", "--out", "link.pt2"], "out",
     files={"good.ckpt": "fixture:swarm.ckpt", "link.pt2": "link:good.ckpt"}, guard=("good.ckpt",))

# ------------------------------------------------------------------------------------ bc
BC = ["--config", "{root}/configs/swarm.yaml", "--rounds", "2", "--num_envs", "8", "--epochs", "1"]
case("bc-teacher-capitalised", "bc", "bc", BC + ["--teacher", "Oracle", "--out", "b.ckpt"], "teacher")
case("bc-teacher-other-world", "bc", "bc", BC + ["--teacher", "cart.ckpt", "--out", "b.ckpt"], "teacher",
     files={"cart.ckpt": "fixture:cart.ckpt"})
case("bc-world-without-scripts", "bc", "bc", ["--config", "{root}/configs/cartpole_fast.yaml", "--teacher", "serial", "--out", "b.ckpt",
                                             "--rounds", "2", "--num_envs", "8", "--epochs", "1"], "teacher")
case("bc-label-smoothing-above-one", "bc", "bc", BC + ["--label_smoothing", "1.5", "--out", "b.ckpt"], "label_smoothing")
case("bc-label-smoothing-negative", "bc", "bc", BC + ["--label_smoothing", "-0.1", "--out", "b.ckpt"], "label_smoothing")
case("bc-lr-nan", "bc", "bc", BC + ["--lr", "nan", "--out", "b.ckpt"], "lr")
case("bc-out-is-a-directory", "bc", "bc", BC + ["--out", "outdir"], "out", files={"outdir": "dir"})
case("bc-json-equals-out", "bc", "bc", BC + ["--out", "b.ckpt", "--json", "b.ckpt"], "json")
case("bc-recurrent-policy", "bc", "bc", BC + ["--config", "{root}/configs/swarm_gru.yaml", "--out", "b.ckpt"], "policy|gru")
case("bc-seed-negative", "bc", "bc", BC + ["--seed", "-5", "--out", "b.ckpt"], "seed")
case("bc-out-full-device", "bc", "bc", BC + ["--out", "/dev/full"], "out")

# ------------------------------------------------------------------------------------ plot
RUN = {"run0": "fixture:run0"}
case("plot-no-runs", "plot", "plot", ["--out", "c.png"], "runs")
case("plot-pattern-matches-nothing", "plot", "plot", ["nonexistent/*", "--out", "c.png"], "nonexistent")
case("plot-group-without-equals", "plot", "plot", ["--group", "abc", "--out", "c.png"], "group")
case("plot-group-empty-pattern", "plot", "plot", ["--group", "a=", "--out", "c.png"], "group|pattern")
case("plot-tag-missing", "plot", "plot", ["run0", "--tag", "nope/tag", "--out", "c.png"], "nope/tag|tag", files=RUN)
case("plot-smooth-zero", "plot", "plot", ["run0", "--smooth", "0", "--out", "c.png"], "smooth", files=RUN)
case("plot-points-one", "plot", "plot", ["run0", "--points", "1", "--out", "c.png"], "points", files=RUN)
case("plot-csv-equals-out", "plot", "plot", ["run0", "--out", "c.png", "--csv", "c.png"], "csv", files=RUN)
case("plot-out-is-a-directory", "plot", "plot", ["run0", "--out", "outdir"], "out", files={**RUN, "outdir": "dir"})
case("plot-run-folder-without-events", "plot", "plot", ["emptyrun", "--out", "c.png"], "emptyrun|events",
     files={"emptyrun": "dir"})
case("plot-corrupt-events-file", "plot", "plot", ["bad", "--out", "c.png"], "bad|events",
     files={"bad/events.out.tfevents.1.host.1.0": bytes(range(256)) * 4})
case("plot-same-group-twice", "plot", "plot", ["--group", "a=run0", "--group", "a=run0", "--out", "c.png"], "group", files=RUN)
case("plot-out-unknown-format", "plot", "plot", ["run0", "--out", "curves.txt"], "out", files=RUN)

# ------------------------------------------------------------------------------------ the Python API
case("api-fit-override-without-value", "api", "py", """
    from parlightning import fit
    fit("swarm", ["trainer.max_epochs"])
""", "trainer.max_epochs")
case("api-fit-override-double-equals", "api", "py", """
    from parlightning import fit
    fit("swarm", ["model.lr==0.1", "trainer.max_epochs=1"])
""", "model.lr|lr")
case("api-fit-overrides-generator", "api", "py", """
    from parlightning import fit
    fit("swarm", (o for o in ["trainer.max_epochs=1"]))
""", "overrides")
case("api-fit-config-bytes", "api", "py", """
    from parlightning import fit
    fit(b"configs/swarm.yaml", ["trainer.max_epochs=1"])
""", "config")
case("api-load-policy-directory", "api", "py", """
    import parlightning
    parlightning.load_policy(".")
""", "directory|path|checkpoint")
case("api-load-policy-number", "api", "py", """
    import parlightning
    parlightning.load_policy(123)
""", "path")
case("api-load-policy-device-word", "api", "py", """
    import parlightning
    parlightning.load_policy("good.ckpt", device="gpu")
""", "device", files={"good.ckpt": "fixture:swarm.ckpt"})
PRED = """
import torch, parlightning
p = parlightning.load_policy("good.ckpt")
obs = torch.zeros(2, 13, 6)
"""
case("api-predict-wrong-shape", "api", "py", PRED + "p.predict(torch.zeros(2, 5))\n", "obs|observation",
     files={"good.ckpt": "fixture:swarm.ckpt"})
case("api-predict-nested-list", "api", "py", PRED + "p.predict([[0.0] * 6] * 13)\n", "obs|observation",
     files={"good.ckpt": "fixture:swarm.ckpt"})
case("api-predict-mask-shape", "api", "py", PRED + "p.predict(obs, mask=torch.ones(2, 5, dtype=torch.bool))\n", "mask",
     files={"good.ckpt": "fixture:swarm.ckpt"})
case("api-predict-generator-string", "api", "py", PRED + "p.predict(obs, deterministic=False, generator='seed')\n", "generator",
     files={"good.ckpt": "fixture:swarm.ckpt"})
case("api-predict-deterministic-string", "api", "py", PRED + "p.predict(obs, deterministic='no')\n", "deterministic",
     files={"good.ckpt": "fixture:swarm.ckpt"})
case("api-predict-nan-observation", "api", "py", PRED + "p.predict(torch.full((2, 13, 6), float('nan')))\n",
     "obs|observation|finite", files={"good.ckpt": "fixture:swarm.ckpt"})
case("api-predict-integer-mask", "api", "py", PRED + "p.predict(obs, mask=torch.ones(2, 12, dtype=torch.long))\n", "mask",
     files={"good.ckpt": "fixture:swarm.ckpt"})
case("api-module-from-text-file", "api", "py", """
    from parlightning.ppo.module import PPOModule
    PPOModule.load_from_checkpoint("notes.txt")
""", "notes.txt|checkpoint", files={"notes.txt": "fixture:text.txt"})
case("api-module-lr-negative", "api", "py", """
    from parlightning.ppo.module import PPOModule
    PPOModule(lr=-1)
""", "lr")
case("api-datamodule-no-actors", "api", "py", """
    from parlightning.ppo.data import RolloutDataModule
    RolloutDataModule(num_envs=0)
""", "num_envs")
case("api-swarm-no-actors", "api", "py", """
    from parlightning.envs.swarm import SwarmEnv
    SwarmEnv(num_envs=0)
""", "num_envs")
case("api-swarm-split-typo", "api", "py", """
    from parlightning.envs.swarm import SwarmEnv
    SwarmEnv(num_envs=4, split="test")
""", "split")
SWE = """
import torch
from parlightning.envs.swarm import SwarmEnv
env = SwarmEnv(num_envs=4)
env.reset(seed=0)
"""
case("api-swarm-step-wrong-shape", "api", "py", SWE + "env.step(torch.zeros(4, 3, dtype=torch.long))\n", "action")
case("api-swarm-step-out-of-range", "api", "py", SWE + "env.step(torch.full((4, 12), 99))\n", "action")
case("api-swarm-step-float-actions", "api", "py", SWE + "env.step(torch.zeros(4, 12))\n", "action")
case("api-swarm-reset-seed-negative", "api", "py", """
    from parlightning.envs.swarm import SwarmEnv
    SwarmEnv(num_envs=4).reset(seed=-1)
""", "seed")
case("api-external-world-number", "api", "py", """
    from parlightning.envs.external import ExternalBatchedEnv
    ExternalBatchedEnv(4, world=5)
""", "world")
case("api-normalize-no-world", "api", "py", """
    from parlightning.envs import NormalizeEnv
    NormalizeEnv(4, env=None)
""", "env")
case("api-process-pool-fn-number", "api", "py", """
    from parlightning.subagents import ProcessPool
    ProcessPool(fn=5, workers=1)
""", "fn")
case("api-http-pool-url-none", "api", "py", """
    from parlightning.subagents import HTTPPool
    HTTPPool(base_url=None)
""", "base_url")
case("api-cartpole-step-before-reset", "api", "py", """
    import torch
    from parlightning.envs import CartPoleEnv
    CartPoleEnv(4).step(torch.zeros(4, dtype=torch.long))
""", "reset")

# ------------------------------------------------------------------------------------ the environment
case("env-slurm-variables-leaked", "environment", "fit", TINY, "SLURM", timeout=60,
     env={"SLURM_NTASKS": "2", "SLURM_JOB_NAME": "train", "SLURM_NODELIST": "node1", "SLURM_PROCID": "0",
          "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_JOB_ID": "42", "SLURM_NTASKS_PER_NODE": "2"})
case("env-local-rank-leaked", "environment", "fit", TINY, "LOCAL_RANK", env={"LOCAL_RANK": "1"}, timeout=60)
case("env-traceback-switch-with-bad-value", "environment", "fit", TINY + ["--model.lr", "abc"], "model.lr",
     env={"PARLIGHTNING_TRACEBACK": "1"})
case("env-tmpdir-missing", "environment", "cmd", [PY, "-m", "parlightning.fit"] + EXTC + [
    "--data.max_policy_lag", "1", "--data.collect_in", "process"], "TMPDIR", env={"TMPDIR": "/nonexistent/tmp"}, timeout=90)
case("env-ascii-output-non-ascii-path", "environment", "cmd", [PY, "-m", "parlightning.fit", "--config", "cönfig.yaml"],
     "config", env={"PYTHONIOENCODING": "ascii", "LC_ALL": "C"})
case("env-mlflow-file-store-not-allowed", "environment", "fit", TINY + [
    T + "logger", "lightning.pytorch.loggers.MLFlowLogger", T + "logger.tracking_uri", "file:./mlruns"],
    "MLFLOW_ALLOW_FILE_STORE|tracking_uri")

# ------------------------------------------------------------------------------------ scripts
def script(name: str, argv: list[str], expect: Any, timeout: float = 60) -> None:
    case(f"script-{name}", "scripts", "cmd", [PY, "{root}/scripts/" + argv[0]] + argv[1:], expect, timeout=timeout)


script("bench-world-no-actors", ["bench_world.py", "--n", "0", "--quick"], "--n")
script("bench-world-negative-steps", ["bench_world.py", "--steps", "-1", "--quick"], "--steps")
script("bench-world-device-tpu", ["bench_world.py", "--device", "tpu", "--quick"], "--device")
script("bench-world-threads-zero", ["bench_world.py", "--threads", "0", "--quick"], "--threads")
script("bench-collect-no-actors", ["bench_collect.py", "--num-envs", "0", "--json", "{tmp}/b.json"], "--num-envs")
script("bench-collect-warmup-covers-all", ["bench_collect.py", "--epochs", "2", "--warmup", "5", "--num-envs", "8",
                                           "--num-steps", "8", "--modes", "sync", "--json", "{tmp}/b.json"], "--warmup")
script("bench-async-size-zero", ["bench_async.py", "--quick", "--sizes", "0"], "--sizes")
script("bench-async-seeds-zero", ["bench_async.py", "--quick", "--seeds", "0"], "--seeds")
script("bench-async-part-seven", ["bench_async.py", "--quick", "--parts", "7"], "--parts")
script("world-baselines-seeds-zero", ["world_baselines.py", "--seeds", "0"], "--seeds")
script("world-baselines-episodes-negative", ["world_baselines.py", "--episodes", "-1"], "--episodes")
script("world-baselines-split-typo", ["world_baselines.py", "--split", "bogus", "--quick"], "--split|split")
script("world-baselines-banks-negative", ["world_baselines.py", "--banks", "-2", "--quick"], "--banks")
script("world-baselines-json-in-proc", ["world_baselines.py", "--quick", "--json", "/proc/nope/b.json"], "--json")
script("sampler-table-seeds-zero", ["sampler_table.py", "--seeds", "0"], "--seeds")
script("sampler-table-workers-zero", ["sampler_table.py", "--quick", "--workers", "0"], "--workers")
script("cartpole-check-steps-not-multiple", ["cartpole_check.py", "--steps", "100", "--paths", "tensor",
                                             "--logdir", "{tmp}/l"], "--steps")
script("bench-throughput-repeats-zero", ["bench_throughput.py", "--repeats", "0", "--quick"], "--repeats")
script("bench-throughput-warmup-equals-iterations", ["bench_throughput.py", "--iterations", "1", "--warmup", "1",
                                                     "--num-envs", "64", "--num-steps", "8", "--repeats", "1", "--skip-env"],
       "--warmup|--iterations")
script("world-fit-jobs-zero", ["world_fit.py", "--quick", "--jobs", "0", "--out", "{tmp}/wf"], "--jobs")
script("world-fit-banks-zero", ["world_fit.py", "--quick", "--banks", "0", "--out", "{tmp}/wf"], "--banks")
script("bench-lag-latency-negative", ["bench_lag.py", "--quick", "--latencies", "-1", "--out", "{tmp}/bl"], "--latencies")
script("bench-lag-lag-negative", ["bench_lag.py", "--quick", "--lags", "-1", "--out", "{tmp}/bl"], "--lags")
script("tune-trials-zero", ["tune.py", "--quick", "--trials", "0", "--out", "{tmp}/t"], "--trials")
script("tune-override-without-equals", ["tune.py", "--quick", "--override", "model.lr", "--out", "{tmp}/t"], "--override")
script("sampler-study-arm-unknown", ["sampler_study.py", "--quick", "--arms", "bogus", "--out", "{tmp}/s"], "--arms|bogus")
script("sampler-study-jobs-zero", ["sampler_study.py", "--quick", "--jobs", "0", "--out", "{tmp}/s"], "--jobs")
script("time-to-solve-budget-zero", ["time_to_solve.py", "--quick", "--budget", "0", "--logdir", "{tmp}/l"], "--budget")


# ------------------------------------------------------------------------------------ dropped after review
# Cases of the first run (on the code before the fixes) that turned out to be valid input, with why. They
# stay written above so the record is complete; they are not run or counted.
DROPPED = {
    "difficulty-seed-negative": "torch generators take negative seeds; the sampler runs deterministically with -3",
    "bc-seed-negative": "the same: bc seeds torch and the world with -5 and runs deterministically",
    "api-swarm-reset-seed-negative": "the same for SwarmEnv.reset(seed=-1)",
    "swarm-compile-without-compiler": "CXX is a preference: with CXX missing the build falls back to g++ (documented)",
    "world-WrongNumEnvsAttr": "the attribute is never read after the probe; the run trains on the tensors' 8 actors",
    "world-WeirdDevice": "env.device is never read by the package (tensors carry their device); the run is correct",
    "world-ObsRequiresGrad": "observations are used under inference mode; the run trains correctly",
    "external-workers-more-than-actors": "workers are capped at one per actor (documented: at most one per actor)",
    "external-TasksDict": "a dict of tasks iterates its ids; the bank is the dict's keys, as meant",
    "ckpt-resume-into-trajectories": "switching the schedule on resume is allowed: the state it needs is there",
    "ckpt-future-lightning-version": "Lightning loads a checkpoint whatever version string it carries; nothing is wrong",
    "trainer-version-folder-is-a-file": "the run takes version_1 and leaves the file alone: nothing is lost",
    "env-slurm-variables-leaked": "Lightning runs one process correctly with these variables (SLURM requeue handler only)",
    "env-tmpdir-missing": "Python's tempfile falls back to /tmp when TMPDIR is unusable; the collector process starts",
    "process-fn-no-steps": "by design: a subagent's result mapping may leave out steps (1 is assumed; the pool's docs)",
    "process-fn-returns-list": "by design: any value but None is a successful subagent with that output (the pool's docs)",
    "script-bench-throughput-warmup-equals-iterations": "--warmup iterations come on top of --iterations (both are "
                                                        "per run): 1 + 1 is valid; the expectation was wrong",
    "api-predict-nested-list": "a [13, 6] nested list is one unbatched observation of SwarmEnv's shape: one action",
    "api-predict-integer-mask": "a 0/1 integer mask is read as bool (as_tensor): the right mask",
}
unknown = set(DROPPED) - {c.name for c in CASES}
assert not unknown, unknown
CASES = [c for c in CASES if c.name not in DROPPED]

# The --quick subset (tests/test_bad_inputs_round5.py): one fast case per class fixed after the first run.
QUICK = {
    "world-ScalarObs",                      # the world's declared spaces (empty observation shape, continuous bounds)
    "world-StateDictObject",                # state a checkpoint cannot hold or load back, checked on the probe
    "world-ObsShapeLater",                  # every step keeps the probe's contract (types, shapes, dtypes, device)
    "trainer-precision-64",                 # trainer values Lightning takes and the rollout cannot run with
    "trainer-log-folder-dangling-link",     # output folders that cannot be created (links, long names)
    "fit-config-fifo",                      # a --config that is not a regular file
    "evaluate-trace-to-full-device",        # outputs that are devices or pipes; writes that fail
    "env-local-rank-leaked",                # a rank variable left in a one-process run's environment
    "http-api-key-with-newline",            # pool arguments validated where the pool is built
    "script-bench-world-device-tpu",        # the scripts' arguments typed
}
for c in CASES:
    c.quick = c.name in QUICK
assert QUICK <= {c.name for c in CASES}, QUICK - {c.name for c in CASES}


if __name__ == "__main__":
    sys.exit(main())
