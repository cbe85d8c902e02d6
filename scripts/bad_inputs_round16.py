#!/usr/bin/env python
"""Round 16 of the bad-input corpus: a fresh set of bad inputs and faults, written blind from the
README, `docs/guides/*.md` (the reliability guide's promises table only), `docs/README.md`,
`configs/` (and `parlightning/configs/`), the example callbacks (`callbacks/`), every CLI's and
script's `--help`, and the signatures and docstrings of the public classes and functions (read
through `inspect.signature` / `inspect.getdoc`, not by opening the package's files); its author read
neither `tests/`, nor the package's source, nor the earlier rounds' cases, outputs or fixes, nor the
git log or the changelog (the case names of rounds 6-15 were listed with `--list` only, to avoid
repeats; round 5's harness and round 15's preamble, fixture and signal-driver helpers, case helpers
and `main()` were read to copy the harness and the file's shape).

New kinds of input, or old kinds through a new door (the case names of rounds 6-15 were compared, by
name and by idea, and the repeats removed):
- configs and overrides: a component of the wrong kind in each slot (a strategy as the sampler, a
  sampler as the strategy and as the world, a schedule as the reward), a schedule given without its
  `class_path`, `init_args` as a list, SwarmEnv's families with an empty or capitalised name and
  duplicate splits, `model.init_from` a YAML file, a packaged config's name as the world, a JSON
  config with comments, a second `StrategyPlanner` and a second `PARLAnnealing`, an infinite schedule
  end;
- Lightning pieces: checkpointing switched off beside a `ModelCheckpoint`, a `TQDMProgressBar` with
  the bar switched off, two identical `ModelCheckpoint`s, a checkpoint interval both in epochs and in
  time, `EarlyStopping(mode=maximum)`, a `LearningRateMonitor` interval of an hour, a `Timer` whose
  duration is a word, a `ModelSummary` depth of -2, a CSV logger flushing every 0 steps, a
  sanity-step count of -2, an empty `default_root_dir`, a device list on the CPU, a strategy typo;
- checkpoints edited and re-stamped with `stamp_checkpoint` (so the checksum trusts the edit): the
  data module's actor count, a rank's observation shape, NaN episode returns, an out-of-bank current
  task, a negative sampler cursor, a short env generator state, numpy's bit generator, a short Python
  RNG state, NaN Adam moments, a negative Adam step, the planner's episode table, the reward's
  position and the env's split;
- evaluate / export / bc / plot: outputs that are symlinks to the checkpoint, the teacher or an event
  file, dangling symlinks into missing folders, `--bank_seeds` without values, a word among the seeds,
  NaN stall timeouts, `--device gpu` and an empty device, a second config with a YAML syntax error,
  the optimal baseline of the pool world, a trace and a JSON report on one file, a `file://` URL and
  an unexpanded glob as export's checkpoint, a symlink loop, bc's negative epochs and minibatch, a
  fractional actor count, an infinite label smoothing, plot's zero and fractional smoothing, a group
  without `=`, no runs at all;
- user tensor worlds: NaN rewards and infinite observations through a `NormalizeEnv`, NaN rewards under
  a collector process, `StopIteration`, an exception whose `str` raises, a message with an `error:`
  line of its own, an `ExceptionGroup`, a `BaseException` subclass, a step that mutates its action,
  task ids, action spec and observation shape that change after the probe, a `close` that raises, a
  step that switches autograd off;
- external worlds: a Gymnasium-style `(obs, info)` reset, a reset without its task, a six-value step,
  empty parts, a set of tasks, a constructor without `seed`, a dict observation, an exception whose
  `str` raises, an `ExceptionGroup`, `retryable` as a class and as strings;
- subagent pools: a class as the function, a module without a function name, `os:getcwd`, huge and
  nested step counts, the `thread` start method, a 1 ms start timeout, an API key with a newline, an
  empty success marker, a maximum backoff below the backoff;
- user code: schedules that turn NaN later, return a string or two values, rewards whose bonus has
  the wrong length or lives on the meta device, loggers whose `finalize` or `save_dir` raise,
  callbacks that put a file where the checkpoints go, replace the policy, switch autograd off, call
  `trainer.fit` again; an `async def pick`;
- the Python API: booleans as counts, NaN / infinite schedule values, zero-category and negative
  shapes, env_kwargs as a list, bytes paths, a meta device, float masks, hidden sizes as a string,
  overrides with spaces around `=` and a list for a scalar, `task_ids_of` of a string;
- the filesystem and environment: read-only mounts, full tmpfs and no inodes under export, evaluate,
  bc, plot and fit's `default_root_dir`; a `lightning.py` and a `yaml.py` in the working folder, a
  file-size limit, an address-space limit;
- signals at new moments: SIGINT during the preflight probe, SIGUSR1 to the collector process, SIGTERM
  to a pool worker mid-call and while the workers import, SIGHUP during evaluate, two SIGINTs in bc;
- four 2-rank gloo faults: rank 0's logger raising, rank 1's schedule NaN, rank 1's world with other
  task ids, rank 1 calling `os._exit(0)`;
- the scripts: arguments of recurrent_vs_mlp, world_baselines, world_fit, time_to_solve,
  sampler_table, bench_http_pool and parallelism that the earlier rounds did not try.

    python scripts/bad_inputs_round16.py                # every case; writes docs/results/data/bad_inputs_round16-<tag>.txt
    python scripts/bad_inputs_round16.py --tag draft    # the same, into ...-draft.txt
    python scripts/bad_inputs_round16.py --quick        # one case per category (none of DDP)
    python scripts/bad_inputs_round16.py --only NAME... # the cases whose name contains any NAME
    python scripts/bad_inputs_round16.py --list         # the cases, one per line

The harness is round 5's (`scripts/bad_inputs_round5.py`: `Case`, `CaseBook`, `run_case`,
`run_corpus`), imported, not copied: a case per forked process and folder (the scripts, signals, DDP,
limits and mount cases as `cmd`, a fresh interpreter); outcome classes clean / traceback / misleading
/ messy / accepted / hang / crash. A case is **clean** when it exits non-zero with exactly one
`error:` line containing the case's keywords (the field or the failing component), no traceback and
nothing left behind. For the Python API a case is clean when it raises an exception of the package
whose message contains the keywords. Controls (correct inputs near the bad ones) must succeed; they
are not counted. Cases judged valid input or ambiguous after the draft run are in `DROPPED` with the
reason (not counted). Run it with stdin from /dev/null (`< /dev/null`).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import bad_inputs_round5 as r5  # noqa: E402  the harness: Case, CaseBook, run_case, run_corpus

PY = sys.executable
Case = r5.Case
run_case = r5.run_case

# ------------------------------------------------------------------------------------ user code
# Tensor worlds (r16worlds), external worlds (r16ext), samplers / callbacks / schedules / rewards /
# loggers (r16user), subagent functions (r16fns, r16fnstart), a signal driver (r16drive). Each class
# is wrong in one way (its docstring says how) except those marked correct.
WORLDS = r'''
"""Round 16's tensor worlds: W16, W16MarkStep and W16MarkInit are correct; each other class is wrong in one way."""
import os
import time

import torch
from parlightning.envs.base import ActionSpec, EpisodeParts, StepResult


def mark(text=None):
    """Write this process's pid (or `text`) to $R16_MARKER (once) and give the driver time to signal."""
    p = os.environ.get("R16_MARKER")
    if p and not os.path.exists(p):
        with open(p + ".tmp", "w") as f:
            f.write(str(os.getpid()) if text is None else text)
        os.replace(p + ".tmp", p)
        time.sleep(5)


def in_child():
    import multiprocessing
    return multiprocessing.parent_process() is not None


def rank():
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:
        pass
    return int(os.environ.get("LOCAL_RANK", "0") or 0)


class W16:
    """Correct: 8 tasks (easy/hard), observation [4], 3 discrete actions, episodes of 3 steps."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.observation_shape = (4,)
        self.action_spec = ActionSpec("discrete", nvec=(3,))
        self.task_ids = [f"easy-{i}" for i in range(4)] + [f"hard-{i}" for i in range(4)]
        self.t = torch.zeros(num_envs, dtype=torch.long)
        self.task = torch.arange(num_envs, dtype=torch.long) % 8
        self.steps = 0

    def _obs(self):
        o = torch.zeros(self.num_envs, 4)
        o[:, 0] = self.t.float()
        o[:, 1] = self.task.float() / 8.0
        o[:, 2] = 1.0
        return o

    def reset(self, *, seed=None, task_index=None):
        if task_index is not None:
            self.task = task_index.to(torch.long).clone()
        self.t.zero_()
        return self._obs()

    def _reward(self, a):
        return (a == 1).float() * 0.1

    def step(self, action, next_task=None):
        self.steps += 1
        a = action.reshape(self.num_envs, -1)[:, 0]
        self.t += 1
        reward = self._reward(a)
        done = self.t >= 3
        final = self._obs()
        ones = torch.ones(self.num_envs)
        parts = EpisodeParts(task=self.task.clone(), outcome=(a == 1).float(), n_subagents=ones.clone(),
                             assigned=ones.clone(), completed=ones.clone(), critical_steps=3 * ones,
                             serial_steps=3 * ones)
        if next_task is not None:
            nt = next_task(done) if callable(next_task) else next_task
            self.task = torch.where(done, nt.to(torch.long), self.task)
        self.t = torch.where(done, torch.zeros_like(self.t), self.t)
        return StepResult(self._obs(), reward, done.clone(), torch.zeros_like(done), final, parts)

    def scripted_action(self, name, obs, generator=None):
        return torch.ones(obs.shape[0], dtype=torch.long)

    def state_dict(self):
        return {"t": self.t.clone(), "task": self.task.clone()}

    def load_state_dict(self, state):
        self.t = state["t"].clone()
        self.task = state["task"].clone()


class W16MarkStep(W16):
    """Correct; its 3rd step marks (the pid of the process stepping it)."""

    def step(self, action, next_task=None):
        if self.steps == 2:
            mark()
        return super().step(action, next_task)


class W16MarkStepChild(W16):
    """Correct; its 3rd step in a child process (the collector process) marks that child's pid."""

    def step(self, action, next_task=None):
        if self.steps == 2 and in_child():
            mark()
        return super().step(action, next_task)


class W16MarkInit(W16):
    """Correct; its first construction (the preflight probe) marks, naming the command itself."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        mark("main")
        super().__init__(num_envs, device, seed)


class RewardNaNLater(W16):
    """From its 3rd step every reward is NaN."""

    def _reward(self, a):
        r = super()._reward(a)
        return r * float("nan") if self.steps >= 3 else r


class ObsInfLater(W16):
    """From its 3rd step the first observation feature is +inf."""

    def _obs(self):
        o = super()._obs()
        if self.steps >= 3:
            o[:, 0] = float("inf")
        return o


class RaisesStopIteration(W16):
    """Its 2nd step raises StopIteration (an iterator the world drained)."""

    def step(self, action, next_task=None):
        if self.steps == 1:
            raise StopIteration("RaisesStopIteration: the scenario iterator ran dry")
        return super().step(action, next_task)


class _UnprintableError(RuntimeError):
    def __str__(self):
        raise ValueError("this error cannot be printed")


class ExcStrRaises(W16):
    """Its 2nd step raises an exception whose str() itself raises."""

    def step(self, action, next_task=None):
        if self.steps == 1:
            raise _UnprintableError("ExcStrRaises")
        return super().step(action, next_task)


class ErrorLineInMessage(W16):
    """Its 2nd step raises with a message whose second line starts with `error: `."""

    def step(self, action, next_task=None):
        if self.steps == 1:
            raise RuntimeError("ErrorLineInMessage: the step failed\nerror: this line is the world's, not the package's")
        return super().step(action, next_task)


class RaisesExceptionGroup(W16):
    """Its 2nd step raises an ExceptionGroup of two errors."""

    def step(self, action, next_task=None):
        if self.steps == 1:
            raise ExceptionGroup("RaisesExceptionGroup: two sub-simulations failed",
                                 [ValueError("left failed"), KeyError("right")])
        return super().step(action, next_task)


class _Abort(BaseException):
    pass


class RaisesBaseException(W16):
    """Its 2nd step raises a BaseException subclass (not an Exception)."""

    def step(self, action, next_task=None):
        if self.steps == 1:
            raise _Abort("RaisesBaseException: abort the simulation")
        return super().step(action, next_task)


class MutatesAction(W16):
    """Its step changes the action tensor it was given, in place (the sampled actions the learner keeps)."""

    def step(self, action, next_task=None):
        out = super().step(action, next_task)
        action.add_(1).remainder_(3)
        return out


class TaskIdsGrowLater(W16):
    """Its task bank grows by two ids after the first step."""

    @property
    def task_ids(self):
        ids = [f"easy-{i}" for i in range(4)] + [f"hard-{i}" for i in range(4)]
        return ids + ["extra-0", "extra-1"] if self.steps >= 1 else ids

    @task_ids.setter
    def task_ids(self, value):
        pass


class ActionSpecChangesLater(W16):
    """Its action_spec has 4 categories after the first step (3 before)."""

    @property
    def action_spec(self):
        return ActionSpec("discrete", nvec=(4,) if self.steps >= 1 else (3,))

    @action_spec.setter
    def action_spec(self, value):
        pass


class ObsShapeAttrChangesLater(W16):
    """Its observation_shape attribute says (5,) after the first step; the observations stay [N, 4]."""

    def step(self, action, next_task=None):
        out = super().step(action, next_task)
        self.observation_shape = (5,)
        return out


class CloseRaises(W16):
    """Its close() raises (after a good run)."""

    def close(self):
        raise RuntimeError("CloseRaises: the simulator's licence server is gone")


class TurnsGradOff(W16):
    """Its 2nd step calls torch.set_grad_enabled(False) and leaves it off."""

    def step(self, action, next_task=None):
        if self.steps == 1:
            torch.set_grad_enabled(False)
        return super().step(action, next_task)


class RankTaskIds(W16):
    """Under DDP rank 1's bank has other task ids than rank 0's."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        if rank() == 1:
            self.task_ids = [f"other-{i}" for i in range(8)]
'''

EXT = r'''
"""Round 16's external worlds: ExtGood is correct; each other class is wrong in one way."""
import numpy as np
from parlightning.envs.base import ActionSpec


class ExtGood:
    """Correct: 4 tasks, observation [3], 2 discrete actions, episodes of 3 steps."""
    observation_shape = (3,)
    action_spec = ActionSpec("discrete", nvec=(2,))
    tasks = ["easy-0", "easy-1", "hard-0", "hard-1"]

    def __init__(self, seed: int = 0):
        self.t = 0
        self.task = None
        self.steps = 0

    def reset(self, task):
        self.t = 0
        self.task = task
        return [0.0, 1.0 if task and task.startswith("hard") else 0.0, 1.0]

    def step(self, action):
        self.steps += 1
        a = int(np.asarray(action).reshape(-1)[0])
        self.t += 1
        done = self.t >= 3
        parts = {"outcome": float(a == 1), "n_subagents": 1, "assigned": 1, "completed": 1,
                 "critical_steps": 3.0, "serial_steps": 3.0} if done else None
        return [float(self.t), 0.0, 1.0], 0.1 * a, done, False, parts


class ExtResetObsInfo(ExtGood):
    """reset returns Gymnasium's (observation, info) pair."""

    def reset(self, task):
        return super().reset(task), {"task": task}


class ExtResetNoTask(ExtGood):
    """reset takes no task."""

    def reset(self):
        return super().reset(None)


class ExtStepSix(ExtGood):
    """step returns six values (an info dict after the parts)."""

    def step(self, action):
        return super().step(action) + ({},)


class ExtPartsEmpty(ExtGood):
    """At an episode's end the parts are an empty mapping."""

    def step(self, action):
        obs, r, done, trunc, parts = super().step(action)
        return obs, r, done, trunc, ({} if done else None)


class ExtTasksSet(ExtGood):
    """tasks is a set (no order)."""
    tasks = {"easy-0", "easy-1", "hard-0", "hard-1"}


class ExtNoSeed(ExtGood):
    """The constructor takes no seed."""

    def __init__(self):
        super().__init__(0)


class ExtObsDict(ExtGood):
    """Observations are dicts {"x": [...]}."""

    def reset(self, task):
        return {"x": super().reset(task)}

    def step(self, action):
        obs, r, done, trunc, parts = super().step(action)
        return {"x": obs}, r, done, trunc, parts


class _UnprintableError(RuntimeError):
    def __str__(self):
        raise ValueError("this error cannot be printed")


class ExtExcStrRaises(ExtGood):
    """Its 2nd step raises an exception whose str() itself raises."""

    def step(self, action):
        if self.steps == 1:
            raise _UnprintableError("ExtExcStrRaises")
        return super().step(action)


class ExtExceptionGroup(ExtGood):
    """Its 2nd step raises an ExceptionGroup."""

    def step(self, action):
        if self.steps == 1:
            raise ExceptionGroup("ExtExceptionGroup: two services failed", [ConnectionError("a"), TimeoutError("b")])
        return super().step(action)


class ExtRetryableClass(ExtGood):
    """retryable is one exception class, not a tuple of them; its 2nd step raises it."""
    retryable = ConnectionError

    def step(self, action):
        if self.steps == 1:
            self.steps += 1
            raise ConnectionError("ExtRetryableClass: the service dropped the connection")
        return super().step(action)


class ExtRetryableStrings(ExtGood):
    """retryable names the exception classes as strings; its 2nd step raises one."""
    retryable = ("ConnectionError", "TimeoutError")

    def step(self, action):
        if self.steps == 1:
            self.steps += 1
            raise ConnectionError("ExtRetryableStrings: the service dropped the connection")
        return super().step(action)
'''

USER = r'''
"""Round 16's samplers, callbacks, schedules, rewards and loggers: GoodSchedule and GoodLogger are
correct; each other class is wrong in one way."""
import copy
import os
import shutil
import time

import lightning
import torch
from lightning.pytorch.loggers import Logger
from parlightning.parl.reward import PARLReward, Schedule


def rank():
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:
        pass
    return int(os.environ.get("LOCAL_RANK", "0") or 0)


class GoodSchedule(Schedule):
    """Correct: halves λ every 1000 positions."""

    def value(self, position):
        return 0.1 * 0.5 ** (position / 1000.0)


class NaNLaterSchedule(Schedule):
    """NaN once the position has moved."""

    def value(self, position):
        return float("nan") if position > 0 else 0.1


class StringSchedule(Schedule):
    """value returns the text "0.1"."""

    def value(self, position):
        return "0.1"


class TwoValueSchedule(Schedule):
    """value returns a tensor of two values."""

    def value(self, position):
        return torch.tensor([0.1, 0.2])


class Rank1NaNSchedule(Schedule):
    """NaN on rank 1 only."""

    def value(self, position):
        return float("nan") if rank() == 1 else 0.1


class BonusWrongLength(PARLReward):
    """bonus returns one value more than it was given."""

    def bonus(self, n_subagents, assigned, completed, *, validate=True):
        b = super().bonus(n_subagents, assigned, completed, validate=validate)
        return torch.cat([torch.as_tensor(b).reshape(-1), torch.zeros(1)])


class BonusOnMeta(PARLReward):
    """bonus returns its values on the meta device."""

    def bonus(self, n_subagents, assigned, completed, *, validate=True):
        return torch.as_tensor(super().bonus(n_subagents, assigned, completed, validate=validate)).to("meta")


class GoodLogger(Logger):
    """Correct: a logger that keeps the metrics in memory."""

    def __init__(self):
        super().__init__()
        self.rows = []

    @property
    def name(self):
        return "r16"

    @property
    def version(self):
        return 0

    def log_hyperparams(self, params, *args, **kwargs):
        pass

    def log_metrics(self, metrics, step=None):
        self.rows.append(dict(metrics))


class FinalizeRaises(GoodLogger):
    """finalize raises at the end of training."""

    def finalize(self, status):
        raise RuntimeError("FinalizeRaises: could not upload the run")


class SaveDirRaises(GoodLogger):
    """Its save_dir property raises."""

    @property
    def save_dir(self):
        raise RuntimeError("SaveDirRaises: no save_dir configured")


class LogMetricsRaises(GoodLogger):
    """log_metrics raises (under DDP only rank 0 logs)."""

    def log_metrics(self, metrics, step=None):
        raise RuntimeError("LogMetricsRaises: the metrics service refused the row")


class FileWhereCheckpointsGo(lightning.Callback):
    """After the first epoch, replaces the checkpoint folder with a file of the same name."""

    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch == 1:
            d = trainer.checkpoint_callback.dirpath
            shutil.rmtree(d, ignore_errors=True)
            with open(d, "w") as f:
                f.write("not a folder")


class ReplacesPolicy(lightning.Callback):
    """At the second epoch replaces the policy with a copy (the optimizer keeps the old parameters)."""

    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch == 1:
            pl_module.policy = copy.deepcopy(pl_module.policy)


class TurnsGradOffCallback(lightning.Callback):
    """Switches autograd off at the start of every epoch."""

    def on_train_epoch_start(self, trainer, pl_module):
        torch.set_grad_enabled(False)


class CallsFitAgain(lightning.Callback):
    """Calls trainer.fit again from on_train_start."""

    def on_train_start(self, trainer, pl_module):
        trainer.fit(pl_module, datamodule=trainer.datamodule)


class Rank1ExitsZero(lightning.Callback):
    """Rank 1 calls os._exit(0) at the end of its first epoch."""

    def on_train_epoch_end(self, trainer, pl_module):
        if rank() == 1:
            os._exit(0)


class AsyncPick:
    """A two-method sampler whose pick is `async def` (never awaited)."""

    def __init__(self):
        self.count = {}

    async def pick(self, keys, round_index):
        return keys[0]

    def record(self, task_id, score):
        pass
'''

FNS = r'''
"""Round 16's subagent functions: fn_good and fn_mark are correct; each other is wrong in one way."""
import os
import time


def fn_good(instruction):
    """Correct: succeeds when the instruction names the skill."""
    return {"success": instruction.get("instruction") == instruction.get("skill"), "steps": int(instruction.get("cost", 1)) + 1}


def fn_mark(instruction):
    """Correct; its first call marks this worker's pid (the driver signals the worker)."""
    p = os.environ.get("R16_MARKER")
    if p and not os.path.exists(p):
        with open(p + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(p + ".tmp", p)
        time.sleep(5)
    return fn_good(instruction)


class FnClass:
    """A class given as the function: calling it builds an instance, not a result."""

    def __init__(self, instruction):
        self.instruction = instruction


def fn_steps_huge(instruction):
    """Returns a step count of 10**30."""
    return {"success": True, "steps": 10 ** 30}


def fn_steps_nested(instruction):
    """Returns the step count inside a mapping."""
    return {"success": True, "steps": {"n": 2}}
'''

# A subagent module that marks while a pool worker imports it, naming the trainer (the command).
FNSTART = r'''
import os
import time

p = os.environ.get("R16_MARKER")
if p and not os.path.exists(p):
    with open(p + ".tmp", "w") as f:
        f.write("main")
    os.replace(p + ".tmp", p)
    time.sleep(5)

from r16fns import fn_good  # noqa: E402,F401
'''

DRIVE = r'''
"""Round 16's signal driver: r16drive.py MARKER SIGNALS WAIT -- CMD...

Runs CMD, waits up to WAIT seconds for MARKER (a file holding the pid to signal, written by the case's
user code; any other text names CMD itself), sends SIGNALS (comma-separated names: TERM, INT, HUP,
USR1, USR2, QUIT; sleepN.N waits), waits for CMD and exits with its status (re-raising a signal that
ended it), removing MARKER."""
import os
import signal
import subprocess
import sys
import time

args = sys.argv[1:]
sep = args.index("--")
marker, sigs, wait_s = args[0], args[1], float(args[2])
proc = subprocess.Popen(args[sep + 1:])
deadline = time.monotonic() + wait_s
while time.monotonic() < deadline and proc.poll() is None:
    if os.path.exists(marker):
        break
    time.sleep(0.05)
if proc.poll() is None and os.path.exists(marker):
    text = open(marker).read().strip()
    pid = int(text) if text.isdigit() else proc.pid
    for s in sigs.split(","):
        if s.startswith("sleep"):
            time.sleep(float(s[5:]))
            continue
        try:
            os.kill(pid, getattr(signal, "SIG" + s))
        except ProcessLookupError:
            print(f"driver: pid {pid} gone before SIG{s}", file=sys.stderr)
        time.sleep(0.3)
elif proc.poll() is None:
    print("driver: the marker never appeared", file=sys.stderr)
rc = proc.wait()
for p in (marker, marker + ".tmp"):
    if os.path.exists(p):
        os.remove(p)
if rc < 0:
    signal.signal(-rc, signal.SIG_DFL)
    os.kill(os.getpid(), -rc)
    time.sleep(1)
sys.exit(rc)
'''

USER_YAML = """\
seed_everything: 0
torch_threads: 1
trainer:
  max_epochs: 1
  accelerator: cpu
  devices: 1
  enable_progress_bar: false
  enable_model_summary: false
  log_every_n_steps: 1
model:
  hidden_sizes: [16]
  activation: relu
data:
  env:
    class_path: r16worlds.W16
  num_envs: 8
  num_steps: 4
  update_epochs: 1
  num_minibatches: 2
  reward: null
"""

EXT_YAML = """\
seed_everything: 0
torch_threads: 1
trainer:
  max_epochs: 2
  accelerator: cpu
  devices: 1
  enable_progress_bar: false
  enable_model_summary: false
  log_every_n_steps: 1
model:
  hidden_sizes: [16]
  activation: relu
data:
  env:
    class_path: parlightning.envs.external.ExternalBatchedEnv
    init_args:
      world: r16ext:ExtGood
      step_timeout: 20
  num_envs: 4
  num_steps: 6
  update_epochs: 1
  num_minibatches: 1
  reward: null
"""

POOL_YAML = """\
seed_everything: 0
torch_threads: 1
trainer:
  max_epochs: 2
  accelerator: cpu
  devices: 1
  enable_progress_bar: false
  enable_model_summary: false
  log_every_n_steps: 1
model:
  hidden_sizes: [16]
  activation: relu
data:
  env:
    class_path: parlightning.envs.external.ExternalBatchedEnv
    init_args:
      world: parlightning.subagents.world:PoolOrchestrationWorld
      world_kwargs: {families: [solo, fanout, locked], tasks_per_family: 2, max_width: 3, n_skills: 3}
      shared:
        pool:
          class_path: parlightning.subagents.SimulatedPool
          init_args: {reliability: 0.9}
      step_timeout: 30
  num_envs: 4
  num_steps: 8
  update_epochs: 1
  num_minibatches: 1
  reward: null
"""

# Checkpoint edits, each re-stamped with parlightning's own `stamp_checkpoint` (the documented way
# for a program that edits a checkpoint on purpose), so the checksum trusts the edit and what is
# checked is the edited value itself.
EDITS = r'''
import copy

import torch
from parlightning.runtime.checkpoint import stamp_checkpoint

ck = torch.load("swarm.ckpt", map_location="cpu", weights_only=False)


def save(name, edit):
    c = copy.deepcopy(ck)
    edit(c)
    torch.save(stamp_checkpoint(c), name)


def rank0(c):
    return c["RolloutDataModule"]["ranks"][0]


def adam0(c):
    return c["optimizer_states"][0]["state"][0]


save("st_identity.ckpt", lambda c: None)
save("st_num_envs.ckpt", lambda c: c["RolloutDataModule"].__setitem__("num_envs", 16))
save("st_obs_shape.ckpt", lambda c: rank0(c).__setitem__("obs", torch.zeros(8, 13, 5)))
save("st_return_nan.ckpt", lambda c: rank0(c).__setitem__("episode_return", torch.full_like(rank0(c)["episode_return"], float("nan"))))
save("st_task_oob.ckpt", lambda c: rank0(c).__setitem__("current_task", torch.full_like(rank0(c)["current_task"], 9999)))
save("st_cursor.ckpt", lambda c: rank0(c)["sampler"].__setitem__("cursor", -3))
save("st_env_gen.ckpt", lambda c: rank0(c)["env"].__setitem__("generator", rank0(c)["env"]["generator"][:10].clone()))
save("st_np_kind.ckpt", lambda c: rank0(c)["rng"]["numpy"].__setitem__("kind", "PCG64"))
save("st_py_rng.ckpt", lambda c: rank0(c)["rng"]["python"].__setitem__("internal", rank0(c)["rng"]["python"]["internal"][:10]))
save("st_exp_avg_nan.ckpt", lambda c: adam0(c).__setitem__("exp_avg", torch.full_like(adam0(c)["exp_avg"], float("nan"))))
save("st_adam_step.ckpt", lambda c: adam0(c).__setitem__("step", torch.tensor(-5.0)))
save("st_planner.ckpt", lambda c: c["StrategyPlanner"].__setitem__("episodes", c["StrategyPlanner"]["episodes"][:3].clone()))
save("st_reward_pos.ckpt", lambda c: c["RolloutDataModule"]["reward"].__setitem__("position", -10))
save("st_env_split.ckpt", lambda c: rank0(c)["env"].__setitem__("split", "heldout"))
'''


def make_fixtures(fx: Path, cases: list) -> None:
    """User code modules, configs, and the checkpoints, edits and run folders the cases copy (built
    once per run, only what the chosen cases need)."""
    import shutil

    fx.mkdir(parents=True, exist_ok=True)
    (fx / "r16worlds.py").write_text(WORLDS)
    (fx / "r16ext.py").write_text(EXT)
    (fx / "r16user.py").write_text(USER)
    (fx / "r16fns.py").write_text(FNS)
    (fx / "r16fnstart.py").write_text(FNSTART)
    (fx / "r16drive.py").write_text(DRIVE)
    (fx / "user.yaml").write_text(USER_YAML)
    (fx / "ext.yaml").write_text(EXT_YAML)
    (fx / "pool.yaml").write_text(POOL_YAML)
    (fx / "edits.py").write_text(EDITS)
    used = " ".join(str(v) for c in cases for v in list(c.files.values()) + (c.args if isinstance(c.args, list) else [c.args]))
    need = lambda *names: any(n in used for n in names)  # noqa: E731
    swarm_needed = need("swarm.ckpt", "run0", "st_")
    jobs = []
    if swarm_needed:
        jobs.append(("swarm", "fit", r5.TINY + ["--trainer.default_root_dir", str(fx / "swarm")]))
    for i, (name, kind, args) in enumerate(jobs):
        c = Case(f"fixture-{name}", "fixture", kind, args, control=True, timeout=300)
        outcome, _line, _s, text = run_case(c, fx / "_runs", fx, i)
        if outcome != "ok":
            raise SystemExit(f"fixture {name} failed ({outcome}): {text[-2000:]}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(fx), os.environ.get("PYTHONPATH", "")])}
    if (fx / "swarm/lightning_logs/version_0/checkpoints/last.ckpt").exists():
        shutil.copy(fx / "swarm/lightning_logs/version_0/checkpoints/last.ckpt", fx / "swarm.ckpt")
    if swarm_needed:
        shutil.copytree(fx / "swarm/lightning_logs/version_0", fx / "run0", ignore=shutil.ignore_patterns("checkpoints"))
        done = subprocess.run([PY, "edits.py"], cwd=fx, env=env, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise SystemExit(f"fixture edits failed: {done.stdout[-1500:]} {done.stderr[-1500:]}")


# ------------------------------------------------------------------------------------ the cases
B = r5.CaseBook("r16worlds")
fit, case, world, yaml_case = B.fit, B.case, B.world, B.yaml_case
TINY, Q = r5.TINY, r5.Q
UWF = ["--config", "{fx}/user.yaml"]
EXTC = ["--config", "{fx}/ext.yaml"]
POOLC = ["--config", "{fx}/pool.yaml"]
DDP = ["--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp"]
M = ["-m", "parlightning.fit"]
RUN = "lightning_logs"  # a run folder a fault after training started may leave (a user logger's: r16/)
RESUME2 = ["--trainer.max_epochs", "2"]
BCS = ["--config", "swarm"]
BCA = ["--out", "b.ckpt", "--rounds", "2", "--num_envs", "8", "--epochs", "1"]
ORACLE = ["--policy", "oracle", "--episodes", "1"]
S = {"s.ckpt": "fixture:swarm.ckpt"}
RUN0 = {"run0": "fixture:run0"}
ADD = ["--trainer.callbacks+"]
MK = {"R16_MARKER": "mark"}  # relative: every case runs in its own folder
NORMW = ["--data.env", "parlightning.envs.NormalizeEnv", "--data.env.env"]
PROCC = ["--data.max_policy_lag", "1", "--data.collect_in", "process"]
PROC = "parlightning.subagents.ProcessPool"


def sh(script: str, **fmt: Any) -> list:
    """A shell command line (for limits and redirections)."""
    return ["sh", "-c", script.format(py=shlex.quote(PY), **fmt)]


def bash(script: str, **fmt: Any) -> list:
    return ["bash", "-c", script.format(py=shlex.quote(PY), **fmt)]


def ns(setup: str, argv: list) -> list:
    """`argv` in a private user + mount namespace after `setup` (mounts), as root of that namespace."""
    return ["unshare", "-rm", "sh", "-c", f"{setup} && exec " + " ".join(shlex.quote(a) for a in argv)]


FULL_TMPFS = "mkdir -p mnt && mount -t tmpfs -o size=8k tmpfs mnt && head -c 8192 /dev/zero > mnt/fill 2>/dev/null; true"
READ_ONLY = "mkdir -p ro && mount -t tmpfs -o size=1m tmpfs ro && mount -o remount,ro ro"
NO_INODES = "mkdir -p mnt && mount -t tmpfs -o size=1m,nr_inodes=2 tmpfs mnt && (touch mnt/a mnt/b mnt/c 2>/dev/null; true)"


def drive(sigs: str, argv: list, wait: float = 60) -> list:
    return [PY, "{fx}/r16drive.py", "{tmp}/mark", sigs, str(wait), "--"] + argv


def env_yaml(init_args: str, extra: str = "") -> str:
    """An ExternalBatchedEnv `data.env` over ext.yaml with these init_args (YAML flow mapping text)."""
    return ("data:\n  env:\n    class_path: parlightning.envs.external.ExternalBatchedEnv\n"
            f"    init_args: {init_args}\n" + extra)


def pool_yaml(pool: str, world_kwargs: str = "", step_timeout: float = 30) -> str:
    """pool.yaml's world with this `shared.pool` (YAML flow mapping text)."""
    return ("data:\n  env:\n    class_path: parlightning.envs.external.ExternalBatchedEnv\n    init_args:\n"
            "      world: parlightning.subagents.world:PoolOrchestrationWorld\n"
            "      world_kwargs: {families: [solo, fanout, locked], tasks_per_family: 2, max_width: 3, n_skills: 3"
            f"{world_kwargs}}}\n"
            f"      shared: {{pool: {pool}}}\n      step_timeout: {step_timeout}\n")


def world_cfg(cls: str) -> dict:
    """A config file naming one of r16worlds' classes (for evaluate and bc, which take configs only)."""
    return {"w.yaml": f"data:\n  env:\n    class_path: r16worlds.{cls}\n"}


PLANNER = ("trainer:\n  callbacks+:\n    - class_path: parlightning.callbacks.StrategyPlanner\n"
           "      init_args:\n        strategy: {strategy}\n")
LAM = ("data:\n  reward:\n    class_path: parlightning.parl.reward.PARLReward\n    init_args:\n      max_subagents: 128\n"
       "      lambda1: {lam}\n")
RWD = "data:\n  reward:\n    class_path: {cls}\n    init_args: {{max_subagents: 128}}\n"
CB = "trainer:\n  callbacks+:\n    - class_path: {cls}\n      init_args: {args}\n"
SW = "data:\n  env:\n    class_path: parlightning.envs.swarm.SwarmEnv\n    init_args: {args}\n"

# ---------------------------------------------------------------- configs and overrides
yaml_case("cfg-sampler-slot-given-a-strategy", "config",
          "data:\n  sampler:\n    class_path: parlightning.distribution.strategies.DataParallel\n",
          ("sampler", "DataParallel"), quick=True)
yaml_case("cfg-planner-strategy-given-a-sampler", "config",
          PLANNER.format(strategy="{class_path: parlightning.distribution.samplers.RoundRobin}"), ("strategy", "RoundRobin"))
yaml_case("cfg-reward-slot-given-a-schedule", "config",
          "data:\n  reward:\n    class_path: parlightning.parl.reward.LinearSchedule\n", ("reward", "LinearSchedule"))
fit("cfg-world-slot-given-a-sampler", "config", TINY + ["--data.env", "parlightning.distribution.samplers.RoundRobin"],
    ("data.env|env", "RoundRobin"))
fit("cfg-world-given-a-packaged-config-name", "config", TINY + ["--data.env", "swarm"], "data.env")
yaml_case("cfg-schedule-without-its-class-path", "config", LAM.format(lam="{start: 0.1, end: 0.0, horizon: 1000}"),
          "lambda1")
yaml_case("cfg-linear-schedule-end-minus-infinity", "config",
          LAM.format(lam="{class_path: parlightning.parl.reward.LinearSchedule, init_args: {start: 0.1, end: -.inf, horizon: 1000}}"),
          "end")
yaml_case("cfg-env-init-args-a-list", "config",
          "data:\n  env:\n    class_path: parlightning.envs.swarm.SwarmEnv\n    init_args: [train, 128]\n", "init_args")
yaml_case("cfg-swarm-families-with-an-empty-name", "config", SW.format(args="{families: [solo, '', fanout]}"), "families")
yaml_case("cfg-swarm-families-capitalised", "config", SW.format(args="{families: [Solo, Fanout]}"), ("families|Solo",))
yaml_case("cfg-swarm-splits-duplicated", "config", SW.format(args="{splits: [4, 1, 4]}"), "splits")
fit("cfg-init-from-a-yaml-file", "config", TINY + ["--model.init_from", "{fx}/user.yaml"], "init_from")
fit("cfg-config-json-with-comments", "config", TINY + ["--config", "c.json"], "c.json",
    files={"c.json": '{\n  // fewer actors\n  "data": {"num_envs": 8}\n}\n'})
yaml_case("cfg-a-second-strategy-planner", "config",
          PLANNER.format(strategy="{class_path: parlightning.distribution.strategies.DataParallel}"), "StrategyPlanner")
yaml_case("cfg-a-second-parl-annealing", "config",
          "trainer:\n  callbacks+:\n    - class_path: parlightning.callbacks.PARLAnnealing\n      init_args: {unit: optimizer_steps}\n",
          "PARLAnnealing")
fit("cfg-critical-steps-monitor-on-cartpole", "config",
    r5.CART + ADD + ["parlightning.callbacks.CriticalStepsMonitor", "--trainer.max_epochs", "1"], "CriticalStepsMonitor")
yaml_case("cfg-reward-lambda-schedules-swapped-for-numbers-in-a-list", "config",
          LAM.format(lam="[0.1, 0.0]"), "lambda1")
fit("cfg-override-dotted-key-with-trailing-dot", "config", TINY + ["--data.num_envs.", "8"], "num_envs")
fit("cfg-num-envs-with-an-underscore-thousands-separator-word", "config", TINY + ["--data.num_envs", "8_k"], "num_envs")
yaml_case("cfg-swarm-split-and-splits-confused", "config", SW.format(args="{split: [1, 2, 4]}"), "split")
yaml_case("cfg-data-env-class-path-with-a-trailing-colon", "config",
          "data:\n  env:\n    class_path: 'parlightning.envs.swarm:SwarmEnv:'\n", ("data.env|class_path|SwarmEnv",))

# ---------------------------------------------------------------- Lightning pieces
fit("lightning-checkpointing-off-beside-a-model-checkpoint", "lightning", TINY + ["--trainer.enable_checkpointing", "false"],
    ("enable_checkpointing|ModelCheckpoint",), quick=True)
yaml_case("lightning-tqdm-progress-bar-with-the-bar-off", "lightning",
          CB.format(cls="lightning.pytorch.callbacks.TQDMProgressBar", args="{refresh_rate: 1}"), "progress")
yaml_case("lightning-two-identical-model-checkpoints", "lightning",
          CB.format(cls="lightning.pytorch.callbacks.ModelCheckpoint", args="{every_n_epochs: 1, save_last: true}"),
          "ModelCheckpoint")
yaml_case("lightning-checkpoint-every-epoch-and-every-ten-seconds", "lightning",
          CB.format(cls="lightning.pytorch.callbacks.ModelCheckpoint", args="{every_n_epochs: 1, train_time_interval: '0:00:10'}"),
          ("train_time_interval|every_n_epochs",))
yaml_case("lightning-early-stopping-mode-maximum", "lightning",
          CB.format(cls="lightning.pytorch.callbacks.EarlyStopping", args="{monitor: charts/episodic_return, mode: maximum}"),
          "mode")
yaml_case("lightning-lr-monitor-interval-an-hour", "lightning",
          CB.format(cls="lightning.pytorch.callbacks.LearningRateMonitor", args="{logging_interval: hour}"), "logging_interval")
yaml_case("lightning-timer-duration-a-word", "lightning",
          CB.format(cls="lightning.pytorch.callbacks.Timer", args="{duration: soon}"), "duration")
yaml_case("lightning-timer-interval-plural", "lightning",
          CB.format(cls="lightning.pytorch.callbacks.Timer", args="{duration: '00:00:10:00', interval: steps}"), "interval")
yaml_case("lightning-model-summary-depth-minus-two", "lightning",
          CB.format(cls="lightning.pytorch.callbacks.ModelSummary", args="{max_depth: -2}"), "max_depth",
          extra=["--trainer.enable_model_summary", "true"])
fit("lightning-csv-logger-flushing-every-zero-steps", "lightning",
    TINY + ["--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", "logs",
            "--trainer.logger.flush_logs_every_n_steps", "0"], "flush_logs_every_n_steps")
fit("lightning-sanity-steps-minus-two", "lightning", TINY + ["--trainer.num_sanity_val_steps", "-2"], "num_sanity_val_steps")
fit("lightning-default-root-dir-empty", "lightning", TINY + ["--trainer.default_root_dir", ""], "default_root_dir")
fit("lightning-device-list-on-the-cpu", "lightning", TINY + ["--trainer.accelerator", "cpu", "--trainer.devices", "[0, 1]"],
    "devices")
fit("lightning-strategy-find-unused-typo", "lightning", TINY + ["--trainer.strategy", "ddp_find_unused_parameters_ture"],
    "strategy")

# ---------------------------------------------------------------- checkpoints edited and re-stamped
def resume(name: str, ckpt: str, expect: Any, extra: list = (), **kw: Any) -> None:
    fit(name, "checkpoint", TINY + RESUME2 + ["--ckpt_path", "c.ckpt"] + list(extra), expect,
        files={"c.ckpt": f"fixture:{ckpt}"}, guard=("c.ckpt",), allow=kw.pop("allow", ()), **kw)


resume("ckpt-stamped-data-module-num-envs-sixteen", "st_num_envs.ckpt", "num_envs", quick=True)
resume("ckpt-stamped-rank-observation-of-another-shape", "st_obs_shape.ckpt", ("obs|observation",))
resume("ckpt-stamped-episode-returns-nan", "st_return_nan.ckpt", "episode_return")
resume("ckpt-stamped-current-task-out-of-bank", "st_task_oob.ckpt", ("current_task|task",))
resume("ckpt-stamped-sampler-cursor-negative", "st_cursor.ckpt", ("cursor|sampler",))
resume("ckpt-stamped-env-generator-state-short", "st_env_gen.ckpt", ("generator", "env"))
resume("ckpt-stamped-numpy-bit-generator-pcg64", "st_np_kind.ckpt", ("numpy|rng",))
resume("ckpt-stamped-python-rng-state-short", "st_py_rng.ckpt", ("python|rng",))
resume("ckpt-stamped-adam-moments-nan", "st_exp_avg_nan.ckpt", ("optimizer|exp_avg",), allow=(RUN,))
resume("ckpt-stamped-adam-step-negative", "st_adam_step.ckpt", ("optimizer|step",))
resume("ckpt-stamped-planner-episode-table-short", "st_planner.ckpt", ("StrategyPlanner|episodes",))
resume("ckpt-stamped-reward-position-negative", "st_reward_pos.ckpt", ("position|reward",))
resume("ckpt-stamped-env-split-heldout", "st_env_split.ckpt", "split")

# ---------------------------------------------------------------- evaluate
EVC = ["--config", "swarm", "--episodes", "1"]
case("eval-json-a-symlink-to-the-checkpoint", "evaluate", "evaluate", EVC + ["--ckpt_path", "s.ckpt", "--json", "r.json"],
     "json", files={**S, "r.json": "link:s.ckpt"}, guard=("s.ckpt",), quick=True)
case("eval-gantt-a-dangling-symlink-into-a-missing-folder", "evaluate", "evaluate", ORACLE + ["--gantt", "g.png"], "gantt",
     files={"g.png": "link:nowhere/g.png"})
case("eval-bank-seeds-without-values", "evaluate", "evaluate", ORACLE + ["--bank_seeds"], "bank_seeds")
case("eval-seeds-a-word-among-numbers", "evaluate", "evaluate", ORACLE + ["--seeds", "1", "two", "3"], "seeds")
case("eval-stall-timeout-nan", "evaluate", "evaluate", ORACLE + ["--stall_timeout", "nan"], "stall_timeout")
case("eval-device-gpu", "evaluate", "evaluate", EVC + ["--ckpt_path", "s.ckpt", "--device", "gpu"], "device", files=S)
case("eval-device-empty", "evaluate", "evaluate", EVC + ["--ckpt_path", "s.ckpt", "--device", ""], "device", files=S)
case("eval-second-config-a-yaml-syntax-error", "evaluate", "evaluate", ORACLE + ["--config", "swarm", "--config", "b.yaml"],
     "b.yaml", files={"b.yaml": "data:\n  num_envs: [8\n"})
case("eval-optimal-baseline-of-the-pool-world", "evaluate", "evaluate",
     POOLC + ["--policy", "optimal", "--episodes", "1"], ("policy",), timeout=120)
case("eval-trace-and-json-one-file", "evaluate", "evaluate", ORACLE + ["--json", "o.out", "--trace", "o.out"],
     ("json|trace",))

# ---------------------------------------------------------------- export
EXO = ["--out", "p.pt2"]
case("export-out-a-symlink-to-the-checkpoint", "export", "export", ["--ckpt_path", "s.ckpt", "--out", "p.pt2"],
     "out", files={**S, "p.pt2": "link:s.ckpt"}, guard=("s.ckpt",), quick=True)
case("export-out-a-dangling-symlink-into-a-missing-folder", "export", "export", ["--ckpt_path", "s.ckpt", "--out", "p.pt2"],
     "out", files={**S, "p.pt2": "link:nowhere/p.pt2"})
case("export-ckpt-a-file-url", "export", "export", ["--ckpt_path", "file://{tmp}/s.ckpt"] + EXO, "ckpt_path", files=S)
case("export-ckpt-an-unexpanded-glob", "export", "export", ["--ckpt_path", "*/last.ckpt"] + EXO, "ckpt_path",
     files={"v0/last.ckpt": "fixture:swarm.ckpt", "v1/last.ckpt": "fixture:swarm.ckpt"})
case("export-ckpt-a-symlink-loop", "export", "export", ["--ckpt_path", "a.ckpt"] + EXO, "ckpt_path",
     files={"a.ckpt": "link:b.ckpt", "b.ckpt": "link:a.ckpt"})

# ---------------------------------------------------------------- bc
case("bc-epochs-negative", "bc", "bc", BCS + ["--out", "b.ckpt", "--rounds", "2", "--num_envs", "8", "--epochs", "-1"],
     "epochs", quick=True)
case("bc-minibatch-negative", "bc", "bc", BCS + BCA + ["--minibatch", "-16"], "minibatch")
case("bc-num-envs-fractional", "bc", "bc", BCS + ["--out", "b.ckpt", "--rounds", "2", "--num_envs", "8.5", "--epochs", "1"],
     "num_envs")
case("bc-label-smoothing-infinite", "bc", "bc", BCS + BCA + ["--label_smoothing", "inf"], "label_smoothing")
case("bc-stall-timeout-negative", "bc", "bc", BCS + BCA + ["--stall_timeout", "-5"], "stall_timeout")
case("bc-stall-timeout-nan", "bc", "bc", BCS + BCA + ["--stall_timeout", "nan"], "stall_timeout")
case("bc-out-a-symlink-to-the-teacher", "bc", "bc", BCS + BCA + ["--teacher", "s.ckpt"], ("out",),
     files={**S, "b.ckpt": "link:s.ckpt"}, guard=("s.ckpt",))
case("bc-out-a-dangling-symlink-into-a-missing-folder", "bc", "bc", BCS + BCA, "out", files={"b.ckpt": "link:nowhere/b.ckpt"})
case("bc-second-config-a-yaml-syntax-error", "bc", "bc", BCS + ["--config", "b.yaml"] + BCA, "b.yaml",
     files={"b.yaml": "model:\n  lr: [0.1\n"})
case("bc-seed-fractional", "bc", "bc", BCS + BCA + ["--seed", "1.5"], "seed")

# ---------------------------------------------------------------- plot
case("plot-smooth-zero", "plot", "plot", ["run0", "--out", "p.png", "--smooth", "0"], "smooth", files=RUN0, quick=True)
case("plot-smooth-fractional", "plot", "plot", ["run0", "--out", "p.png", "--smooth", "2.5"], "smooth", files=RUN0)
case("plot-points-fractional", "plot", "plot", ["run0", "--out", "p.png", "--points", "10.5"], "points", files=RUN0)
case("plot-group-without-an-equals-sign", "plot", "plot", ["--group", "run0", "--out", "p.png"], "group", files=RUN0)
case("plot-no-runs-at-all", "plot", "plot", ["--out", "p.png"], ("runs|group",))
case("plot-csv-a-symlink-to-an-event-file", "plot", "plot", ["run0", "--out", "p.png", "--csv", "c.csv"], "csv",
     files={**RUN0, "c.csv": "link:run0/hparams.yaml"}, guard=("run0/hparams.yaml",))
case("plot-out-a-dangling-symlink-into-a-missing-folder", "plot", "plot", ["run0", "--out", "p.png"], "out",
     files={**RUN0, "p.png": "link:nowhere/p.png"})
case("plot-band-empty", "plot", "plot", ["run0", "--out", "p.png", "--band", ""], "band", files=RUN0)

# ---------------------------------------------------------------- user tensor worlds
fit("world-reward-nan-later-through-normalize-env", "world", UWF + NORMW + ["r16worlds.RewardNaNLater"],
    ("RewardNaNLater", "reward"), allow=(RUN,), quick=True)
fit("world-obs-inf-later-through-normalize-env", "world", UWF + NORMW + ["r16worlds.ObsInfLater"],
    ("ObsInfLater", "obs|observation"), allow=(RUN,))
world("world-reward-nan-later-under-a-collector-process", "RewardNaNLater", ("RewardNaNLater", "reward"),
      base=UWF + PROCC + ["--trainer.max_epochs", "2"], allow=(RUN,), timeout=120)
world("world-step-raises-stop-iteration", "RaisesStopIteration", ("RaisesStopIteration", "StopIteration|ran dry"))
world("world-exception-whose-str-raises", "ExcStrRaises", "ExcStrRaises")
world("world-message-with-an-error-line-of-its-own", "ErrorLineInMessage", "ErrorLineInMessage")
world("world-step-raises-an-exception-group", "RaisesExceptionGroup", ("RaisesExceptionGroup", "sub-simulations|ExceptionGroup"))
world("world-step-raises-a-base-exception-subclass", "RaisesBaseException", ("RaisesBaseException", "abort|_Abort"))
world("world-step-mutates-its-action", "MutatesAction", ("MutatesAction", "action"), base=UWF + ["--trainer.max_epochs", "2"],
      allow=(RUN,))
world("world-task-ids-grow-after-the-probe", "TaskIdsGrowLater", ("TaskIdsGrowLater", "task_ids"), allow=(RUN,))
world("world-action-spec-changes-after-the-probe", "ActionSpecChangesLater", ("ActionSpecChangesLater", "action_spec"),
      allow=(RUN,))
world("world-observation-shape-attribute-changes-later", "ObsShapeAttrChangesLater",
      ("ObsShapeAttrChangesLater", "observation_shape"), allow=(RUN,))
world("world-close-raises-after-a-good-run", "CloseRaises", ("CloseRaises", "close|licence"), allow=(RUN,))
world("world-step-switches-autograd-off", "TurnsGradOff", ("TurnsGradOff", "grad"), allow=(RUN,))

# ---------------------------------------------------------------- external worlds
EXT_BASE = "world: 'r16ext:{cls}', step_timeout: 20"


def ext(name: str, cls: str, expect: Any, more: str = "", extra: str = "", **kw: Any) -> None:
    yaml_case(name, "external", env_yaml("{" + EXT_BASE.format(cls=cls) + more + "}", extra), expect, base=EXTC, **kw)


ext("ext-reset-returns-obs-and-info", "ExtResetObsInfo", ("ExtResetObsInfo", "reset|obs"), quick=True)
ext("ext-reset-takes-no-task", "ExtResetNoTask", ("ExtResetNoTask", "reset|task"))
ext("ext-step-returns-six-values", "ExtStepSix", ("ExtStepSix", "step|values|six|5"))
ext("ext-parts-an-empty-mapping", "ExtPartsEmpty", ("ExtPartsEmpty", "parts|outcome"))
ext("ext-tasks-a-set", "ExtTasksSet", ("ExtTasksSet", "tasks"))
ext("ext-constructor-without-seed", "ExtNoSeed", ("ExtNoSeed", "seed"))
ext("ext-observation-a-dict", "ExtObsDict", ("ExtObsDict", "obs|observation"))
ext("ext-exception-whose-str-raises", "ExtExcStrRaises", "ExtExcStrRaises")
ext("ext-step-raises-an-exception-group", "ExtExceptionGroup", "ExtExceptionGroup")
ext("ext-retryable-one-class", "ExtRetryableClass", ("ExtRetryableClass", "retryable"), more=", retries: 2")
ext("ext-retryable-names-as-strings", "ExtRetryableStrings", ("ExtRetryableStrings", "retryable"), more=", retries: 2")

# ---------------------------------------------------------------- subagent pools and functions
def pool_case(name: str, pool: str, expect: Any, world_kwargs: str = "", step_timeout: float = 30, **kw: Any) -> None:
    yaml_case(name, "pool", pool_yaml(pool, world_kwargs, step_timeout), expect, base=POOLC,
              timeout=kw.pop("timeout", 90), **kw)


def proc_pool(fn: str, more: str = "") -> str:
    return f"{{class_path: {PROC}, init_args: {{fn: '{fn}', workers: 2, timeout: 20{more}}}}}"


pool_case("pool-fn-a-class", proc_pool("r16fns:FnClass"), ("FnClass", "fn|result|steps"), allow=(RUN,), quick=True)
pool_case("pool-fn-a-module-without-a-function", proc_pool("r16fns"), "fn")
pool_case("pool-fn-os-getcwd", proc_pool("os:getcwd"), ("getcwd",), allow=(RUN,))
pool_case("pool-fn-step-count-ten-to-the-thirty", proc_pool("r16fns:fn_steps_huge"), ("fn_steps_huge", "steps"), allow=(RUN,))
pool_case("pool-fn-step-count-a-mapping", proc_pool("r16fns:fn_steps_nested"), ("fn_steps_nested", "steps"), allow=(RUN,))
pool_case("pool-start-method-thread", proc_pool("r16fns:fn_good", ", start_method: thread"), "start_method")
pool_case("pool-start-timeout-one-millisecond", proc_pool("r16fns:fn_good", ", start_timeout: 0.001"), "start_timeout")
pool_case("pool-http-api-key-with-a-newline",
          "{class_path: parlightning.subagents.HTTPPool, init_args: {base_url: 'http://127.0.0.1:9', probe: false, "
          "api_key: \"sk-abc\\nX-Injected: 1\"}}", "api_key")
pool_case("pool-http-success-marker-empty",
          "{class_path: parlightning.subagents.HTTPPool, init_args: {base_url: 'http://127.0.0.1:9', probe: false, "
          "success_marker: ''}}", "success_marker")
pool_case("pool-async-http-max-backoff-below-backoff",
          "{class_path: parlightning.subagents.AsyncHTTPPool, init_args: {base_url: 'http://127.0.0.1:9', probe: false, "
          "backoff: 5.0, max_backoff: 1.0}}", ("max_backoff",))

# ---------------------------------------------------------------- samplers, callbacks, schedules, rewards, loggers
yaml_case("user-schedule-nan-once-the-position-moves", "user", LAM.format(lam="{class_path: r16user.NaNLaterSchedule}"),
          ("NaNLaterSchedule|lambda1", "nan"), extra=RESUME2, allow=(RUN,), quick=True)
yaml_case("user-schedule-returns-a-string", "user", LAM.format(lam="{class_path: r16user.StringSchedule}"),
          ("StringSchedule|lambda1",))
yaml_case("user-schedule-returns-two-values", "user", LAM.format(lam="{class_path: r16user.TwoValueSchedule}"),
          ("TwoValueSchedule|lambda1",))
yaml_case("user-reward-bonus-one-value-too-many", "user", RWD.format(cls="r16user.BonusWrongLength"),
          ("BonusWrongLength", "bonus"), allow=(RUN,))
yaml_case("user-reward-bonus-on-the-meta-device", "user", RWD.format(cls="r16user.BonusOnMeta"), ("BonusOnMeta", "bonus|meta"),
          allow=(RUN,))
fit("user-logger-finalize-raises", "user", TINY + ["--trainer.logger", "r16user.FinalizeRaises"],
    ("FinalizeRaises", "finalize|upload"), allow=(RUN, r"^r16(/|$)"))
fit("user-logger-save-dir-raises", "user", TINY + ["--trainer.logger", "r16user.SaveDirRaises"], ("SaveDirRaises", "save_dir"))
fit("user-callback-puts-a-file-where-the-checkpoints-go", "user", TINY + RESUME2 + ADD + ["r16user.FileWhereCheckpointsGo"],
    ("checkpoint|dirpath",), allow=(RUN,))
fit("user-callback-replaces-the-policy-mid-run", "user", TINY + ["--trainer.max_epochs", "3"] + ADD + ["r16user.ReplacesPolicy"],
    ("ReplacesPolicy|policy", "optimizer|parameters|policy"), allow=(RUN,))
fit("user-callback-switches-autograd-off", "user", TINY + ADD + ["r16user.TurnsGradOffCallback"],
    ("TurnsGradOffCallback|grad",), allow=(RUN,))
fit("user-callback-calls-fit-again", "user", TINY + ADD + ["r16user.CallsFitAgain"], ("CallsFitAgain", "fit"), allow=(RUN,))
fit("user-sampler-async-pick", "user", TINY + ["--data.sampler", "r16user.AsyncPick"], ("AsyncPick", "pick|async"))

# ---------------------------------------------------------------- the Python API
CK = "{fx}/swarm.ckpt"


def api(name: str, code: str, expect: Any, **kw: Any) -> None:
    case(name, "api", "py", code, expect, timeout=kw.pop("timeout", 60), **kw)


api("api-parl-reward-max-subagents-true", "from parlightning.parl.reward import PARLReward\nPARLReward(max_subagents=True)\n",
    "max_subagents", quick=True)
api("api-sfl-buffer-size-true",
    "from parlightning.distribution.samplers import SamplingForLearnability\nSamplingForLearnability(buffer_size=True)\n",
    "buffer_size")
api("api-cluster-parallel-clusters-per-worker-true",
    "from parlightning.distribution.strategies import ClusterParallel\nClusterParallel(clusters_per_worker=True)\n",
    "clusters_per_worker")
api("api-simulated-pool-seed-fractional", "from parlightning.subagents import SimulatedPool\nSimulatedPool(seed=1.5)\n", "seed")
api("api-linear-schedule-start-nan", "from parlightning.parl.reward import LinearSchedule\nLinearSchedule(start=float('nan'))\n",
    "start")
api("api-cosine-schedule-end-infinite", "from parlightning.parl.reward import CosineSchedule\nCosineSchedule(end=float('inf'))\n",
    "end")
api("api-constant-schedule-minus-infinity",
    "from parlightning.parl.reward import ConstantSchedule\nConstantSchedule(value=float('-inf'))\n", "value")
api("api-action-spec-discrete-zero-categories", "from parlightning.envs import ActionSpec\nActionSpec('discrete', nvec=(0,))\n",
    "nvec")
api("api-action-spec-continuous-negative-shape",
    "from parlightning.envs import ActionSpec\nActionSpec('continuous', shape=(-2,), low=-1.0, high=1.0)\n", "shape")
api("api-gym-env-kwargs-a-list",
    "from parlightning.envs import GymVectorEnv\nGymVectorEnv(2, env_id='CartPole-v1', env_kwargs=['max_episode_steps', 10])\n",
    "env_kwargs")
api("api-normalize-env-clip-obs-true",
    "from parlightning.envs import NormalizeEnv, CartPoleEnv\nNormalizeEnv(4, env=CartPoleEnv, clip_obs=True)\n", "clip_obs")
api("api-swarm-num-envs-true", "from parlightning.envs import SwarmEnv\nSwarmEnv(num_envs=True)\n", "num_envs")
api("api-load-policy-path-as-bytes", f"import parlightning\nparlightning.load_policy(b'{CK}')\n", "path")
api("api-load-policy-on-the-meta-device", f"import parlightning\nparlightning.load_policy('{CK}', device='meta')\n", "device")
api("api-predict-mask-of-floats",
    f"import torch, parlightning\nfrom parlightning.envs.swarm import SwarmEnv\np = parlightning.load_policy('{CK}')\n"
    "env = SwarmEnv(num_envs=4, split='heldout')\nobs = env.reset(seed=0)\n"
    "p.predict(obs, mask=env.action_masks().float())\n", "mask")
api("api-ppo-module-hidden-sizes-a-string", "from parlightning.ppo.module import PPOModule\nPPOModule(hidden_sizes='64,64')\n",
    "hidden_sizes")
api("api-ppo-module-clip-coef-true", "from parlightning.ppo.module import PPOModule\nPPOModule(clip_coef=True)\n", "clip_coef")
api("api-task-ids-of-a-string", "from parlightning.envs import task_ids_of\nprint(task_ids_of('swarm'))\n", "task_ids")
api("api-fit-override-with-spaces-around-the-equals-sign",
    "from parlightning import fit\nfit('swarm', ['data.num_envs = 8', 'trainer.max_epochs=1'])\n", "num_envs")
api("api-fit-override-a-list-for-a-scalar",
    "from parlightning import fit\nfit('swarm', ['data.num_envs=[8, 16]', 'trainer.max_epochs=1'])\n", "num_envs")
api("api-process-pool-timeout-infinite",
    "from parlightning.subagents import ProcessPool\nProcessPool('r16fns:fn_good', timeout=float('inf'))\n", "timeout")

# ---------------------------------------------------------------- the filesystem
case("fs-export-out-in-a-read-only-mount", "filesystem", "cmd",
     ns(READ_ONLY, [PY, "-m", "parlightning.export", "--ckpt_path", "s.ckpt", "--out", "ro/p.pt2"]),
     ("out|ro/p.pt2", "read-only|read only|permission"), files=S, quick=True)
case("fs-eval-trace-on-a-full-tmpfs", "filesystem", "cmd",
     ns(FULL_TMPFS, [PY, "-m", "parlightning.evaluate"] + ORACLE + ["--trace", "mnt/t.jsonl"]), ("trace", "space"))
case("fs-bc-out-on-a-full-tmpfs", "filesystem", "cmd",
     ns(FULL_TMPFS, [PY, "-m", "parlightning.bc"] + BCS + ["--out", "mnt/b.ckpt", "--rounds", "2", "--num_envs", "8",
                                                           "--epochs", "1"]), ("out", "space"), timeout=120)
case("fs-plot-csv-out-of-inodes", "filesystem", "cmd",
     ns(NO_INODES, [PY, "-m", "parlightning.plot", "run0", "--out", "p.png", "--csv", "mnt/c.csv"]), ("csv",),
     files=RUN0)
case("fs-fit-default-root-dir-in-a-read-only-mount", "filesystem", "cmd",
     ns(READ_ONLY, [PY] + M + TINY + ["--trainer.default_root_dir", "ro/run"]), ("default_root_dir|ro/run",))
case("fs-eval-gantt-in-a-read-only-mount", "filesystem", "cmd",
     ns(READ_ONLY, [PY, "-m", "parlightning.evaluate"] + ORACLE + ["--gantt", "ro/g.png"]), ("gantt",))

# ---------------------------------------------------------------- the environment and limits
case("env-a-lightning-py-in-the-working-folder", "env", "cmd", [PY] + M + TINY, ("lightning.py|lightning",),
     files={"lightning.py": "print('my lightning talk notes')\n"}, guard=("lightning.py",), quick=True)
case("env-a-yaml-py-in-the-working-folder", "env", "cmd", [PY] + M + TINY, ("yaml.py|yaml",),
     files={"yaml.py": "def load(text):\n    return text\n"}, guard=("yaml.py",))
case("env-file-size-limit-64k", "env", "cmd", bash("ulimit -f 64; exec {py} -m parlightning.fit " + " ".join(TINY)),
     ("checkpoint|file size|SIGXFSZ|limit",), allow=(RUN,))
case("env-address-space-limit-3g", "env", "cmd", bash("ulimit -v 3000000; exec {py} -m parlightning.fit " + " ".join(TINY)),
     ("memory|address",), allow=(RUN,))

# ---------------------------------------------------------------- signals at new moments
def signal_case(name: str, sigs: str, argv: list, expect: Any, **kw: Any) -> None:
    case(name, "signal", "cmd", drive(sigs, argv), expect, env=MK, allow=kw.pop("allow", (RUN,)),
         timeout=kw.pop("timeout", 90), **kw)


signal_case("signal-sigint-during-the-preflight-probe", "INT", [PY] + M + UWF + ["--data.env", "r16worlds.W16MarkInit"],
            "interrupt|SIGINT", quick=True)
signal_case("signal-sigusr1-to-the-collector-process", "USR1",
            [PY] + M + UWF + ["--data.env", "r16worlds.W16MarkStepChild", "--trainer.max_epochs", "3"] + PROCC,
            ("collector|process|child", "SIGUSR1|signal"), timeout=120)
signal_case("signal-sigterm-to-a-pool-worker-mid-call", "TERM", [PY] + M + POOLC + ["--config", "p.yaml"],
            ("worker|fn_mark", "SIGTERM|signal"), files={"p.yaml": pool_yaml(proc_pool("r16fns:fn_mark"))}, timeout=120)
signal_case("signal-sigterm-while-pool-workers-import", "TERM", [PY] + M + POOLC + ["--config", "p.yaml"], "SIGTERM",
            files={"p.yaml": pool_yaml(proc_pool("r16fnstart:fn_good"))}, timeout=120)
signal_case("signal-sighup-during-evaluate", "HUP",
            [PY, "-m", "parlightning.evaluate", "--config", "{fx}/user.yaml", "--config", "w.yaml", "--policy", "serial",
             "--episodes", "2"], "SIGHUP", files=world_cfg("W16MarkStep"), allow=())
signal_case("signal-two-sigints-during-bc", "INT,INT",
            [PY, "-m", "parlightning.bc", "--config", "{fx}/user.yaml", "--config", "w.yaml", "--teacher", "serial",
             "--out", "b.ckpt", "--rounds", "6", "--num_envs", "8", "--epochs", "1"], "interrupt|SIGINT",
            files=world_cfg("W16MarkStep"), allow=())

# ---------------------------------------------------------------- 2-rank gloo DDP
case("ddp-rank0-logger-log-metrics-raises", "ddp", "cmd", [PY] + M + TINY + DDP + ["--trainer.logger", "r16user.LogMetricsRaises"],
     ("rank 0|LogMetricsRaises", "LogMetricsRaises|log_metrics"), allow=(RUN, r"^r16(/|$)"), timeout=120)
case("ddp-rank1-schedule-nan", "ddp", "cmd", [PY] + M + TINY + DDP + ["--config", "l.yaml"], ("rank 1|Rank1NaNSchedule",),
     files={"l.yaml": LAM.format(lam="{class_path: r16user.Rank1NaNSchedule}")}, allow=(RUN,), timeout=120)
case("ddp-rank1-world-with-other-task-ids", "ddp", "cmd", [PY] + M + UWF + DDP + ["--data.env", "r16worlds.RankTaskIds"],
     ("rank 1|rank", "task"), timeout=120)
case("ddp-rank1-exits-zero-mid-run", "ddp", "cmd",
     [PY] + M + TINY + DDP + ["--trainer.max_epochs", "3"] + ADD + ["r16user.Rank1ExitsZero"], "rank 1", allow=(RUN,),
     timeout=120)

# ---------------------------------------------------------------- the scripts
def script(name: str, file: str, args: list, expect: Any, **kw: Any) -> None:
    case(name, "script", "cmd", [PY, "{root}/scripts/" + file] + args, expect, timeout=kw.pop("timeout", 90), **kw)


script("script-recurrent-vs-mlp-policies-without-values", "recurrent_vs_mlp.py", ["--quick", "--policies"], "policies",
       quick=True)
script("script-recurrent-vs-mlp-epochs-negative", "recurrent_vs_mlp.py", ["--quick", "--epochs", "-2"], "epochs")
script("script-world-baselines-episodes-negative", "world_baselines.py", ["--quick", "--episodes", "-1"], "episodes")
script("script-world-fit-every-negative", "world_fit.py", ["--quick", "--every", "-1"], "every")
script("script-world-fit-threads-negative", "world_fit.py", ["--quick", "--threads", "-2"], "threads")
script("script-time-to-solve-paths-without-values", "time_to_solve.py", ["--quick", "--paths"], "paths")
script("script-time-to-solve-budget-zero", "time_to_solve.py", ["--quick", "--budget", "0"], "budget")
script("script-sampler-table-seeds-negative", "sampler_table.py", ["--quick", "--seeds", "-3"], "seeds")
script("script-sampler-table-workers-zero", "sampler_table.py", ["--quick", "--workers", "0"], "workers")
script("script-bench-http-pool-latency-nan", "bench_http_pool.py", ["--quick", "--latency", "nan"], "latency")
script("script-bench-http-pool-timeout-negative", "bench_http_pool.py", ["--quick", "--timeout", "-1"], "timeout")
script("script-parallelism-timeout-a-word", "parallelism.py", ["--quick", "--timeout", "soon"], "timeout")

# ---------------------------------------------------------------- controls (must succeed; not counted)
def control(name: str, kind: str, args: Any, **kw: Any) -> None:
    case(name, "control", kind, args, control=True, timeout=kw.pop("timeout", 120), **kw)


control("control-tiny-swarm-run", "fit", TINY)
control("control-user-world-w16", "fit", UWF)
control("control-user-world-w16-through-normalize-env", "fit", UWF + NORMW + ["r16worlds.W16"])
control("control-user-world-w16-under-a-collector-process", "fit", UWF + PROCC + ["--trainer.max_epochs", "2"])
control("control-external-world", "fit", EXTC)
control("control-process-pool-good-fn", "fit", POOLC + ["--config", "p.yaml"],
        files={"p.yaml": pool_yaml(proc_pool("r16fns:fn_good"))})
control("control-resume-from-a-stamped-unedited-checkpoint", "fit", TINY + RESUME2 + ["--ckpt_path", "c.ckpt"],
        files={"c.ckpt": "fixture:st_identity.ckpt"})
control("control-evaluate-oracle-json", "evaluate", ORACLE + ["--json", "e.json"])
control("control-export-swarm", "export", ["--ckpt_path", "s.ckpt", "--out", "p.pt2"], files=S)
control("control-bc-oracle", "bc", BCS + BCA + ["--teacher", "oracle"])
control("control-plot-run0-smooth-one", "plot", ["run0", "--out", "p.png", "--smooth", "1", "--csv", "c.csv"], files=RUN0)
control("control-user-schedule-and-logger", "fit", TINY + ["--trainer.logger", "r16user.GoodLogger", "--config", "l.yaml"],
        files={"l.yaml": LAM.format(lam="{class_path: r16user.GoodSchedule}")})
control("control-load-policy-predict-with-mask", "py",
        f"import parlightning\nfrom parlightning.envs.swarm import SwarmEnv\np = parlightning.load_policy('{CK}')\n"
        "env = SwarmEnv(num_envs=4, split='heldout')\nobs = env.reset(seed=0)\n"
        "print(p.predict(obs, deterministic=True, mask=env.action_masks()).shape)\n")

CASES = B.cases

# Cases judged valid input or ambiguous after the draft run: name -> reason (not counted).
DROPPED: dict[str, str] = {
    "cfg-schedule-without-its-class-path": "it trained: the mapping is merged into the init_args of the LinearSchedule "
    "the base config already names for lambda1 (jsonargparse's documented merge); valid",
    "cfg-critical-steps-monitor-on-cartpole": "it trained: a monitor with nothing to monitor (CartPole has no episode "
    "parts) logs nothing; harmless, not wrong",
    "lightning-default-root-dir-empty": "it trained: an empty default_root_dir is read as the working folder, a "
    "reasonable reading",
    "ext-parts-an-empty-mapping": "it trained: parts are optional for a world trained on its own reward (reward: null), "
    "so an empty mapping is read as no parts; ambiguous",
    "ext-constructor-without-seed": "it trained: a world constructor without `seed` is called without one, a "
    "reasonable reading",
    "ext-retryable-one-class": "it trained: one exception class is what isinstance takes as well as a tuple; a "
    "reasonable reading of `retryable`",
    "pool-http-success-marker-empty": "the case's endpoint is a closed port (probe off), so the run failed on the "
    "connection before any reply could meet the marker: the case does not isolate its fault",
    "api-predict-mask-of-floats": "a float mask of exact 0s and 1s has one reading (live / dead); ambiguous, not wrong",
    "api-task-ids-of-a-string": "task_ids_of answers None for an object without tasks, its documented answer for a "
    "world without a task bank; valid",
    "env-address-space-limit-3g": "it trained: the tiny run fits in 3 GB of address space, so the limit was no fault",
    "ckpt-stamped-sampler-cursor-negative": "it trained: a negative round-robin cursor is read modulo the bank, a "
    "well-defined position; ambiguous, not wrong",
}

VALID = [c for c in CASES if c.name in DROPPED]
CASES = [c for c in CASES if c.name not in DROPPED]


def main(argv: Any = None) -> int:
    return r5.run_corpus(argv, round_no=16, description=__doc__.split("\n\n")[0], cases_all=CASES, valid=VALID,
                         dropped=DROPPED, make_fixtures=make_fixtures)


if __name__ == "__main__":
    sys.exit(main())
