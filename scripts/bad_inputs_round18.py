#!/usr/bin/env python
"""Round 18 of the bad-input corpus: a fresh set of bad inputs and faults, written blind from the
README, `docs/guides/*.md` (the reliability guide's promises table only), `docs/README.md`,
`configs/` (and `parlightning/configs/`), the example callbacks (`callbacks/`), every CLI's and
script's `--help`, `--print_config`, and the signatures and docstrings of the public classes and
functions (read through `inspect.signature` / `inspect.getdoc`, not by opening the package's
files), plus the key layout of a checkpoint a 2-iteration fit wrote; its author read neither
`tests/`, nor the package's source, nor the earlier rounds' cases, outputs or fixes, nor the git log
or the changelog (the case names of rounds 4-17 and of `scripts/bad_inputs.py` /
`scripts/bad_inputs_fresh.py` were listed with `--list` only, and every case whose name or idea
matched one of them was removed; round 5's harness and round 17's preamble, fixture, signal-driver
helpers, case helpers and `main()` were read to copy the harness and the file's shape).

New kinds of input, or old kinds through a new door:
- configs and overrides: a YAML `0o10` for `num_envs`, a `data.env` given as a bare JSON string, a
  `--config` naming a Python file's neighbour kinds (a Cyrillic letter in a key, a document separator
  as a value), a schedule class given another schedule's argument, `model:` wrapped in `init_args`,
  `data:` with a `class_path`, a callback entry with `init_arg`, packaged configs combined (swarm then
  cartpole_fast), an example strategy given as the sampler, Gymnasium ids with discrete or tuple
  observations, a wrapper that needs arguments, an Atari id, a version that does not exist, the native
  vector env with wrappers, a reward-aware sampler on a world without tasks, an external world named
  by a method path, a TensorParallel planner with the slots policy and on an external world, `prior`
  beside `init_from` on the command line, a default root dir on s3;
- Lightning pieces: a weights-only checkpoint resumed, a TensorBoard `sub_dir` in /proc, a checkpoint
  `filename` escaping its folder, two CSV loggers writing one folder, a zero Timer, TensorBoard's
  `max_queue` of 0;
- checkpoints edited and re-stamped with `stamp_checkpoint`: an unknown activation (resumed, exported,
  loaded, evaluated), `policy_spaces` of another observation shape, kind or width (exported, loaded),
  PARL annealing's unit and a NaN position, Adam's betas, eps, weight decay, amsgrad without its state,
  its state shifted to another parameter, the planner's per-rank state removed or its episodes short,
  the data module's ranks emptied, a fractional env-step count, the env signature's class and width,
  a Lightning version that is not a version; keyed (TensorParallel) checkpoints exported, loaded and
  used as bc's teacher; a bc checkpoint as `--ckpt_path`;
- evaluate / export / bc / plot: repeated seeds, `--split train` on a world without splits, an ONNX
  suffix against `--format pt2`, a run folder as `--ckpt_path`, bc on the memory world with a
  scripted teacher, a plot CSV that is the run folder, a tag that does not exist;
- user tensor worlds: unbounded recursion, a constructor argument the config lacks, a reset that fails
  only for the full batch (inline and in a collector process), a device attribute of cuda;
- external worlds: a keyword-only `reset`, a `close` that never returns, Gymnasium's info dict as
  parts;
- subagent pools: a function that names a module constant or a class, forks a grandchild; an
  AsyncHTTPPool whose every answer comes after its timeout, a malformed IPv6 URL, `n_skills: 0`;
- user code: callbacks that add a forward hook, save into /proc, change `hparams` (lr a word,
  clip_coef negative), convert the policy to float64 or the module to meta, drop the optimizer states
  from each checkpoint, delete the critic, empty the trainer's optimizers, scale gradients to inf; a
  sampler whose pick blocks; rewards whose bonus is NaN or a column, whose terms are NaN; a schedule
  returning -inf; a logger whose `log_metrics` blocks;
- the Python API: `predict` with a bad batch, mask, generator or device, `fit` with a dangling flag or
  a list config with a missing file, constructors (worlds, samplers, schedules, reward, pools, buffer,
  actor-critic, action spec, PPOModule) with values of a new kind, `stamp_checkpoint` of a list,
  `load_policy` of a file edited without a new stamp;
- the filesystem (a private mount namespace, `unshare -rm`): export's ONNX on a full tmpfs, tune's
  `--out` on a read-only mount, a CSV logger on a full tmpfs;
- signals at new moments: SIGTERM and SIGUSR2 during bc's teacher rollout, SIGHUP during evaluate with
  `--trace`, a double Ctrl-C, SIGTERM to the collector process and to a `ProcessPool` worker;
- four 2-rank gloo faults (the real CLI): rank 1's sampler raising, rank 1's reward bonus NaN, rank
  1's `on_save_checkpoint` raising, rank 1's world raising a `BaseException` subclass (plus a
  2-rank control);
- the scripts with arguments the earlier rounds did not try.

    python scripts/bad_inputs_round18.py                # every case; writes docs/results/data/bad_inputs_round18-<tag>.txt
    python scripts/bad_inputs_round18.py --tag draft    # the same, into ...-draft.txt
    python scripts/bad_inputs_round18.py --quick        # one case per category
    python scripts/bad_inputs_round18.py --only NAME... # the cases whose name contains any NAME
    python scripts/bad_inputs_round18.py --list         # the cases, one per line

The harness is round 5's (`scripts/bad_inputs_round5.py`: `Case`, `CaseBook`, `run_case`,
`run_corpus`), imported, not copied: a case per forked process and folder (the scripts, signals,
HTTP-server, DDP and mount cases as `cmd`, a fresh interpreter); outcome classes clean / traceback /
misleading / messy / accepted / hang / crash. A case is **clean** when it exits non-zero with
exactly one `error:` line containing the case's keywords (the field or the failing component), no
traceback and nothing left behind. For the Python API a case is clean when it raises an exception
of the package whose message contains the keywords. Controls (correct inputs near the bad ones) must
succeed; they are not counted. Cases judged valid input or ambiguous after the draft run are in
`DROPPED` with the reason (not counted). Run it with stdin from /dev/null (`< /dev/null`).
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
# Tensor worlds (r18worlds), external worlds (r18ext), samplers / callbacks / schedules / rewards /
# loggers (r18user), subagent functions (r18fns), a fault HTTP server (r18http), a signal driver
# (r18drive). Each class is wrong in one way (its docstring says how) except those marked correct.
WORLDS = r'''
"""Round 18's tensor worlds: W18 and the W18Mark* classes are correct; each other class is wrong in one way."""
import os
import sys
import threading
import time

import torch
from parlightning.envs.base import ActionSpec, EpisodeParts, StepResult


def mark(text=None):
    """Write this process's pid (or `text`) to $R18_MARKER (once) and give the driver time to signal."""
    p = os.environ.get("R18_MARKER")
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


class W18:
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

    def _parts(self, a):
        ones = torch.ones(self.num_envs)
        return EpisodeParts(task=self.task.clone(), outcome=(a == 1).float(), n_subagents=ones.clone(),
                            assigned=ones.clone(), completed=ones.clone(), critical_steps=3 * ones,
                            serial_steps=3 * ones)

    def step(self, action, next_task=None):
        self.steps += 1
        a = action.reshape(self.num_envs, -1)[:, 0]
        self.t += 1
        reward = self._reward(a)
        done = self.t >= 3
        final = self._obs()
        parts = self._parts(a)
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


class W18MarkStep(W18):
    """Correct; its 3rd step marks (the pid of the process stepping it)."""

    def step(self, action, next_task=None):
        if self.steps == 2:
            mark()
        return super().step(action, next_task)


class W18MarkStepChild(W18):
    """Correct; its 3rd step in a child process (the collector process) marks that child's pid."""

    def step(self, action, next_task=None):
        if self.steps == 2 and in_child():
            mark()
        return super().step(action, next_task)


class W18MarkStepLater(W18):
    """Correct; its 20th step marks (so a rollout and an update have happened)."""

    def step(self, action, next_task=None):
        if self.steps == 19:
            mark()
        return super().step(action, next_task)


class NonDaemonThreadThenRaises(W18):
    """Starts a non-daemon heartbeat thread in __init__ (never stopped), and its 5th step raises."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        threading.Thread(target=lambda: [time.sleep(0.2) for _ in iter(int, 1)], daemon=False).start()

    def step(self, action, next_task=None):
        if self.steps == 4 and self.num_envs > 2:
            raise ValueError("NonDaemonThreadThenRaises: the simulator lost its state")
        return super().step(action, next_task)


class SetsDefaultDtypeFloat64(W18):
    """Its 4th step (after the probe) calls torch.set_default_dtype(torch.float64) and leaves it."""

    def step(self, action, next_task=None):
        if self.steps == 3 and self.num_envs > 2:
            torch.set_default_dtype(torch.float64)
        return super().step(action, next_task)


class TurnsGradOff(W18):
    """Its 4th step (after the probe) calls torch.set_grad_enabled(False) and leaves it off."""

    def step(self, action, next_task=None):
        if self.steps == 3 and self.num_envs > 2:
            torch.set_grad_enabled(False)
        return super().step(action, next_task)


class ChangesWorkingFolder(W18):
    """Its 4th step (after the probe) changes the process's working folder to ./elsewhere."""

    def step(self, action, next_task=None):
        if self.steps == 3 and self.num_envs > 2:
            os.makedirs("elsewhere", exist_ok=True)
            os.chdir("elsewhere")
        return super().step(action, next_task)


class RecursesForever(W18):
    """Its 3rd step recurses without end (RecursionError)."""

    def _deep(self, n):
        return self._deep(n + 1) + 1

    def step(self, action, next_task=None):
        if self.steps == 2:
            self._deep(0)
        return super().step(action, next_task)


class NeedsDifficulty(W18):
    """Its constructor has a required argument `difficulty` the config does not give."""

    def __init__(self, num_envs: int, difficulty: float, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)


class TaskIdsGenerator(W18):
    """task_ids is a generator expression."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.task_ids = (f"t-{i}" for i in range(8))


class ObservationShapeList(W18):
    """observation_shape is a list [4], not a tuple."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.observation_shape = [4]


class ResetFailsForTheFullBatch(W18):
    """reset raises when more than 2 actors reset at once (the probe's 2 pass)."""

    def reset(self, *, seed=None, task_index=None):
        if self.num_envs > 2:
            raise RuntimeError("ResetFailsForTheFullBatch: the simulator licence allows 2 instances")
        return super().reset(seed=seed, task_index=task_index)


class LoadStateRaisesOnResume(W18):
    """load_state_dict raises when $R18_LOAD_RAISES is set (a resume), not on the probe's own check."""

    def load_state_dict(self, state):
        if os.environ.get("R18_LOAD_RAISES") and self.num_envs > 2:
            raise KeyError("LoadStateRaisesOnResume: the saved state is from another simulator build")
        super().load_state_dict(state)


class ScriptedActionOutOfRange(W18):
    """scripted_action returns action 7 for a world with 3 actions."""

    def scripted_action(self, name, obs, generator=None):
        return torch.full((obs.shape[0],), 7, dtype=torch.long)


class TurnsOnDeterministicAlgorithms(W18):
    """Its 4th step (after the probe) calls torch.use_deterministic_algorithms(True) and leaves it on."""

    def step(self, action, next_task=None):
        if self.steps == 3 and self.num_envs > 2:
            torch.use_deterministic_algorithms(True)
        return super().step(action, next_task)


class SetsEightThreads(W18):
    """Its 4th step (after the probe) calls torch.set_num_threads(8) on a run configured for 1."""

    def step(self, action, next_task=None):
        if self.steps == 3 and self.num_envs > 2:
            torch.set_num_threads(8)
        return super().step(action, next_task)


class DeviceAttributeCuda(W18):
    """Says its device is cuda (a string) while every tensor it returns is on the CPU."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.device = "cuda"


class Abort(BaseException):
    """A user's own 'abort' class that derives from BaseException, not Exception."""


class Rank1RaisesBaseException(W18):
    """On rank 1, its 6th step raises Abort (a BaseException subclass)."""

    def step(self, action, next_task=None):
        if rank() == 1 and self.steps == 5 and self.num_envs > 2:
            raise Abort("Rank1RaisesBaseException: the simulator sandbox aborted")
        return super().step(action, next_task)


class Rank1ExitsZero(W18):
    """On rank 1, its 6th step ends the process with os._exit(0)."""

    def step(self, action, next_task=None):
        if rank() == 1 and self.steps == 5 and self.num_envs > 2:
            os._exit(0)
        return super().step(action, next_task)
'''

EXT = r'''
"""Round 18's external worlds: ExtGood and ExtObsBoolList are correct; each other class is wrong in one way."""
import os
import time

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
        self.seed = seed

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


class ExtObsBoolList(ExtGood):
    """Correct: observations as lists of bools (documented: read as 0 / 1)."""

    def reset(self, task):
        super().reset(task)
        return [False, True, True]


class Abort(BaseException):
    """A user's own 'abort' signal class that derives from BaseException, not Exception."""


class ExtStepRaisesBaseException(ExtGood):
    """Its 4th step raises Abort, a BaseException subclass."""

    def step(self, action):
        if self.steps == 3:
            raise Abort("ExtStepRaisesBaseException: the tool sandbox aborted")
        return super().step(action)


class ExtSyncStepReturnsCoroutine(ExtGood):
    """A sync step that returns a coroutine (an `await` forgotten inside)."""

    async def _remote(self, action):
        return super().step(action)

    def step(self, action):
        return self._remote(action)


class ExtObsMapping(ExtGood):
    """reset returns the observation as a mapping {name: value}."""

    def reset(self, task):
        super().reset(task)
        return {"t": 0.0, "hard": 1.0, "bias": 1.0}


class ExtResetKeywordOnly(ExtGood):
    """reset takes its task as a keyword-only argument."""

    def reset(self, *, task):
        return super().reset(task)


class ExtTasksPropertyRaises(ExtGood):
    """Its tasks property raises (the task list is fetched from a service that is down)."""

    @property
    def tasks(self):
        raise ConnectionError("ExtTasksPropertyRaises: task service unreachable")


class ExtCloseHangs(ExtGood):
    """close() never returns."""

    def close(self):
        time.sleep(10_000)


class ExtStepReturnsInfoDict(ExtGood):
    """step returns Gymnasium's info dict as parts (unknown keys, non-numeric values)."""

    def step(self, action):
        obs, r, term, trunc, parts = super().step(action)
        return obs, r, term, trunc, {"TimeLimit.truncated": False, "episode": {"r": 1.0}}
'''

USER = r'''
"""Round 18's samplers, callbacks, schedules, rewards and loggers: GoodLogger and StopAtOnce are
correct; each other class is wrong in one way."""
import os
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


class GoodSampler:
    """Correct: a two-method round-robin sampler."""

    def __init__(self):
        self.i = 0

    def pick(self, keys, round_index):
        self.i += 1
        return keys[self.i % len(keys)]

    def record(self, task_id, score):
        pass


class PickBlocksForever(GoodSampler):
    """pick waits forever on its 20th call (a lock that is never released)."""

    def pick(self, keys, round_index):
        if self.i == 19:
            import threading
            lk = threading.Lock()
            lk.acquire()
            lk.acquire()
        return super().pick(keys, round_index)


class Rank1PickRaises(GoodSampler):
    """On rank 1, pick raises on its 12th call."""

    def pick(self, keys, round_index):
        if rank() == 1 and self.i == 11:
            raise LookupError("Rank1PickRaises: the curriculum table has no row for this round")
        return super().pick(keys, round_index)


class NaNLearningRate(lightning.Callback):
    """on_train_epoch_start sets the optimizer's learning rate to NaN."""

    def on_train_epoch_start(self, trainer, pl_module):
        for group in trainer.optimizers[0].param_groups:
            group["lr"] = float("nan")


class FreezesPolicy(lightning.Callback):
    """on_train_start turns requires_grad off for every parameter (a 'freeze the backbone' gone wrong)."""

    def on_train_start(self, trainer, pl_module):
        for p in pl_module.parameters():
            p.requires_grad_(False)


class ActorForwardHook(lightning.Callback):
    """on_train_start registers a forward hook that doubles the width of the actor's output."""

    def on_train_start(self, trainer, pl_module):
        pl_module.policy.actor.register_forward_hook(lambda m, i, o: torch.cat([o, o], dim=-1))


class SavesCheckpointIntoProc(lightning.Callback):
    """on_train_epoch_end saves a checkpoint of its own into /proc."""

    def on_train_epoch_end(self, trainer, pl_module):
        trainer.save_checkpoint("/proc/r18-extra.ckpt")


class Rank1SaveRaises(lightning.Callback):
    """On rank 1, on_save_checkpoint raises."""

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        if trainer.global_rank == 1:
            raise OSError("Rank1SaveRaises: the sidecar metadata store is read-only")


class MutatesHparamsLr(lightning.Callback):
    """on_train_epoch_start sets pl_module.hparams.lr to the word 'fast'."""

    def on_train_epoch_start(self, trainer, pl_module):
        pl_module.hparams.lr = "fast"


class PolicyToFloat64(lightning.Callback):
    """on_train_epoch_start converts the policy to float64."""

    def on_train_epoch_start(self, trainer, pl_module):
        pl_module.policy.double()


class ModuleToMeta(lightning.Callback):
    """on_train_start moves the module to the meta device."""

    def on_train_start(self, trainer, pl_module):
        pl_module.to("meta")


class DropsOptimizerStates(lightning.Callback):
    """on_save_checkpoint removes the optimizer states from every checkpoint."""

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        checkpoint.pop("optimizer_states", None)


class TearsDownTheDataModule(lightning.Callback):
    """on_train_epoch_end tears the data module down (closing its collector) mid-run."""

    def on_train_epoch_end(self, trainer, pl_module):
        trainer.datamodule.teardown("fit")


class AddsAParamGroup(lightning.Callback):
    """on_train_epoch_start adds a new parameter group (a fresh tensor) to the optimizer."""

    def on_train_epoch_start(self, trainer, pl_module):
        trainer.optimizers[0].add_param_group({"params": [torch.nn.Parameter(torch.zeros(3))]})


class DeletesTheCritic(lightning.Callback):
    """on_train_start deletes the policy's critic."""

    def on_train_start(self, trainer, pl_module):
        del pl_module.policy.critic


class HparamsClipCoefNegative(lightning.Callback):
    """on_train_batch_start sets pl_module.hparams.clip_coef to -1."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        pl_module.hparams.clip_coef = -1.0


class EmptiesTheOptimizers(lightning.Callback):
    """on_train_epoch_end sets trainer.optimizers to an empty list."""

    def on_train_epoch_end(self, trainer, pl_module):
        trainer.optimizers = []


class ScalesGradsByAHuge(lightning.Callback):
    """on_before_optimizer_step multiplies every gradient by 1e38 (an overflow to inf in the step)."""

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        for p in pl_module.parameters():
            if p.grad is not None:
                p.grad.mul_(1e38).mul_(1e38)


class StopAtOnce(lightning.Callback):
    """Correct: asks the trainer to stop after the first iteration."""

    def on_train_epoch_end(self, trainer, pl_module):
        trainer.should_stop = True


class BonusPythonFloat(PARLReward):
    """bonus returns a Python float."""

    def bonus(self, n_subagents, assigned, completed, *args, **kwargs):
        return 0.0


class BonusNaN(PARLReward):
    """bonus returns NaN for every episode."""

    def bonus(self, n_subagents, assigned, completed, *args, **kwargs):
        return torch.full_like(n_subagents, float("nan"), dtype=torch.float32)


class BonusColumn(PARLReward):
    """bonus returns a [E, 1] column instead of [E]."""

    def bonus(self, n_subagents, assigned, completed, *args, **kwargs):
        return torch.zeros(n_subagents.shape[0], 1)


class Rank1BonusNaN(PARLReward):
    """On rank 1, bonus returns NaN."""

    def bonus(self, n_subagents, assigned, completed, *args, **kwargs):
        out = torch.zeros_like(n_subagents, dtype=torch.float32)
        return out + float("nan") if rank() == 1 else out


class TermsNaN(PARLReward):
    """terms returns NaN for every term (what PARLAnnealing logs)."""

    def terms(self, *args, **kwargs):
        out = super().terms(*args, **kwargs)
        if isinstance(out, dict):
            return {k: torch.full_like(v, float("nan")) if torch.is_tensor(v) else float("nan") for k, v in out.items()}
        return tuple(torch.full_like(v, float("nan")) for v in out)


class StringSchedule(Schedule):
    """value returns a string."""

    def value(self, position):
        return "0.1"


class MinusInfSchedule(Schedule):
    """value returns -inf."""

    def value(self, position):
        return float("-inf")


class GoodLogger(Logger):
    """Correct: a logger that keeps the metrics in memory."""

    def __init__(self):
        super().__init__()
        self.rows = []

    @property
    def name(self):
        return "r18"

    @property
    def version(self):
        return 0

    def log_hyperparams(self, params, *args, **kwargs):
        pass

    def log_metrics(self, metrics, step=None):
        self.rows.append(dict(metrics))


class LogHyperparamsRaises(GoodLogger):
    """log_hyperparams raises (the tracking server refuses the config)."""

    def log_hyperparams(self, params, *args, **kwargs):
        raise ValueError("LogHyperparamsRaises: parameter value too long for the tracking server")


class FinalizeRaises(GoodLogger):
    """finalize raises at the end of the run."""

    def finalize(self, status):
        raise RuntimeError("FinalizeRaises: could not close the remote run")


class LogMetricsBlocks(GoodLogger):
    """log_metrics blocks forever on its 2nd call (a lock that is never released)."""

    def log_metrics(self, metrics, step=None):
        self.rows.append(dict(metrics))
        if len(self.rows) == 2:
            import threading
            lk = threading.Lock()
            lk.acquire()
            lk.acquire()
'''

FNS = r'''
"""Round 18's subagent functions: fn_good and fn_ignores_term_and_hangs are correct (the second is
killed past its timeout, by design); each other is wrong in one way."""
import os
import signal
import time

CONSTANT = 3


def fn_good(instruction):
    """Correct: succeeds when the instruction names the skill."""
    return {"success": instruction.get("instruction") == instruction.get("skill"), "steps": int(instruction.get("cost", 1)) + 1}


def fn_steps_a_bool(instruction):
    """Returns steps as True."""
    return {"success": True, "steps": True}


def fn_forks_and_returns(instruction):
    """Forks a grandchild that sleeps for an hour, then returns normally."""
    if os.fork() == 0:
        time.sleep(3600)
        os._exit(0)
    return {"success": True, "steps": 2}


class FnClass:
    """A class named as the function: calling it returns an instance, not a result."""

    def __init__(self, instruction):
        self.instruction = instruction


def fn_reads_stdin(instruction):
    """Asks for confirmation on stdin (input())."""
    answer = input("delegate? ")
    return {"success": answer == "y", "steps": 2}


def fn_ignores_term_and_hangs(instruction):
    """Correct on purpose: ignores SIGTERM and hangs on its 3rd call; the pool's timeout must kill it."""
    global CALLS
    CALLS = globals().get("CALLS", 0) + 1
    if CALLS == 3:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(3600)
    return {"success": True, "steps": 2}


def fn_marks(instruction):
    """Correct; its 3rd call in a worker marks that worker's pid."""
    global CALLS
    CALLS = globals().get("CALLS", 0) + 1
    p = os.environ.get("R18_MARKER")
    if CALLS == 3 and p:
        try:
            os.close(os.open(p + ".lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return {"success": True, "steps": 2}
        with open(p + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(p + ".tmp", p)
        time.sleep(5)
    return {"success": True, "steps": 2}
'''

# A local OpenAI-compatible endpoint that answers every call wrongly in one way (MODE), run in a
# thread of a wrapper that then runs the case's command: r18http.py MODE PORT -- CMD...
HTTP = r'''
import http.server
import json
import subprocess
import sys
import threading
import time

mode, port = sys.argv[1], int(sys.argv[2])
cmd = sys.argv[sys.argv.index("--") + 1:]


class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _send(self, code, body, ctype="application/json"):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send(200, "{}")

    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0) or 0)
        self.rfile.read(n)
        try:
            self._answer()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout): nothing to answer
            pass

    def _answer(self):
        if mode == "nochoices":
            self._send(200, json.dumps({"id": "x", "object": "chat.completion", "choices": []}))
        elif mode == "late":
            time.sleep(3)
            self._send(200, json.dumps({"choices": [{"message": {"content": "DONE"}}], "usage": {"completion_tokens": 3}}))
        elif mode == "usage-negative":
            self._send(200, json.dumps({"choices": [{"message": {"content": "DONE"}}], "usage": {"completion_tokens": -40}}))
        else:
            self._send(200, json.dumps({"choices": [{"message": {"content": "DONE"}}], "usage": {"completion_tokens": 3}}))


srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
srv.daemon_threads = True
threading.Thread(target=srv.serve_forever, daemon=True).start()
rc = subprocess.call(cmd)
srv.shutdown()
sys.exit(rc)
'''

DRIVE = r'''
"""Round 18's signal driver: r18drive.py MARKER SIGNALS WAIT -- CMD...

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
    class_path: r18worlds.W18
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
      world: r18ext:ExtGood
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

# configs/parallel/tp.yaml on one rank (one section per rank)
TP1_YAML = """\
trainer:
  callbacks+:
    - class_path: parlightning.callbacks.StrategyPlanner
      init_args:
        strategy:
          class_path: parlightning.distribution.strategies.TensorParallel
          init_args: {n_sections: 1, keys: [solo, fanout, pipeline, locked]}
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


def hp(key, value):
    return lambda c: c["hyper_parameters"].__setitem__(key, value)


def group0(c):
    return c["optimizer_states"][0]["param_groups"][0]


def mc_key(c):
    return next(k for k in c["callbacks"] if k.startswith("ModelCheckpoint"))


save("st_identity.ckpt", lambda c: None)
save("st_top_level_note.ckpt", lambda c: c.__setitem__("my_notes", "trained on the laptop, lr sweep 3"))
save("st_hp_activation_unknown.ckpt", hp("activation", "swish2"))
save("st_hp_init_from_missing.ckpt", hp("init_from", "/nonexistent/teacher.ckpt"))
save("st_hp_prior_two.ckpt", hp("prior", 2.0))
save("st_hp_lr_negative.ckpt", hp("lr", -0.001))
save("st_spaces_obs_shape_other.ckpt", lambda c: c["policy_spaces"].__setitem__("observation_shape", [13, 7]))
save("st_spaces_kind_continuous.ckpt", lambda c: c["policy_spaces"]["action_spec"].__setitem__("kind", "continuous"))
save("st_dm_num_envs_other.ckpt", lambda c: c["RolloutDataModule"].__setitem__("num_envs", 16))
save("st_dm_signature_class_other.ckpt",
     lambda c: c["RolloutDataModule"]["env_signature"].__setitem__("class", "parlightning.envs.cartpole.CartPoleEnv"))
save("st_annealing_unit_other.ckpt", lambda c: c["callbacks"]["PARLAnnealing"].__setitem__("unit", "optimizer_steps"))
save("st_adam_betas_above_one.ckpt", lambda c: group0(c).__setitem__("betas", (1.5, 0.999)))
save("st_adam_eps_negative.ckpt", lambda c: group0(c).__setitem__("eps", -1e-5))
save("st_adam_step_negative.ckpt",
     lambda c: [s.__setitem__("step", torch.tensor(-100.0)) for s in c["optimizer_states"][0]["state"].values()])
save("st_mc_dirpath_proc.ckpt", lambda c: c["callbacks"][mc_key(c)].__setitem__("dirpath", "/proc/ckpts"))
save("st_planner_ranks_removed.ckpt", lambda c: c["StrategyPlanner"].pop("ranks"))
save("st_dm_ranks_empty.ckpt", lambda c: c["RolloutDataModule"].__setitem__("ranks", []))
save("st_adam_state_of_another_parameter.ckpt", lambda c: c["optimizer_states"][0].__setitem__("state", {
    k: v for k, v in zip(sorted(c["optimizer_states"][0]["state"]), [c["optimizer_states"][0]["state"][j]
                                                                    for j in sorted(c["optimizer_states"][0]["state"])[1:] + [0]])}))
save("st_adam_weight_decay_negative.ckpt", lambda c: group0(c).__setitem__("weight_decay", -0.5))
save("st_adam_amsgrad_without_its_state.ckpt", lambda c: group0(c).__setitem__("amsgrad", True))
save("st_adam_exp_avg_float16.ckpt", lambda c: [s.__setitem__("exp_avg", s["exp_avg"].half())
                                                 for s in c["optimizer_states"][0]["state"].values()])
save("st_planner_episodes_short.ckpt", lambda c: c["StrategyPlanner"].__setitem__("episodes", c["StrategyPlanner"]["episodes"][:3].clone()))
save("st_annealing_position_nan.ckpt", lambda c: c["callbacks"]["PARLAnnealing"].__setitem__("position", float("nan")))
save("st_dm_env_steps_fraction.ckpt", lambda c: c["RolloutDataModule"].__setitem__("env_steps", 128.5))
save("st_dm_num_envs_float.ckpt", lambda c: c["RolloutDataModule"].__setitem__("num_envs", 8.0))
save("st_signature_max_width_other.ckpt", lambda c: c["RolloutDataModule"]["env_signature"].__setitem__("max_width", 64))
save("st_pl_version_garbage.ckpt", lambda c: c.__setitem__("pytorch-lightning_version", "not-a-version"))
save("st_spaces_nvec_short.ckpt", lambda c: c["policy_spaces"]["action_spec"].__setitem__("nvec", c["policy_spaces"]["action_spec"]["nvec"][:11]))
save("st_hparams_name_other.ckpt", lambda c: c.__setitem__("hparams_name", "config"))
'''


def make_fixtures(fx: Path, cases: list) -> None:
    """User code modules, configs, and the checkpoints, edits and run folders the cases copy (built
    once per run, only what the chosen cases need)."""
    import shutil

    fx.mkdir(parents=True, exist_ok=True)
    (fx / "r18worlds.py").write_text(WORLDS)
    (fx / "r18ext.py").write_text(EXT)
    (fx / "r18user.py").write_text(USER)
    (fx / "r18fns.py").write_text(FNS)
    (fx / "r18http.py").write_text(HTTP)
    (fx / "r18drive.py").write_text(DRIVE)
    (fx / "user.yaml").write_text(USER_YAML)
    (fx / "ext.yaml").write_text(EXT_YAML)
    (fx / "pool.yaml").write_text(POOL_YAML)
    (fx / "edits.py").write_text(EDITS)
    (fx / "tp1.yaml").write_text(TP1_YAML)
    used = " ".join(str(v) for c in cases for v in list(c.files.values()) + (c.args if isinstance(c.args, list) else [c.args]))
    need = lambda *names: any(n in used for n in names)  # noqa: E731
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(fx), os.environ.get("PYTHONPATH", "")])}
    if need("swarm.ckpt", "run0", "st_"):
        c = Case("fixture-swarm", "fixture", "fit", r5.TINY + ["--trainer.default_root_dir", str(fx / "swarm")], control=True,
                 timeout=300)
        outcome, _line, _s, text = run_case(c, fx / "_runs", fx, 0)
        if outcome != "ok":
            raise SystemExit(f"fixture swarm failed ({outcome}): {text[-2000:]}")
        shutil.copy(fx / "swarm/lightning_logs/version_0/checkpoints/last.ckpt", fx / "swarm.ckpt")
        shutil.copytree(fx / "swarm/lightning_logs/version_0", fx / "run0", ignore=shutil.ignore_patterns("checkpoints"))
        done = subprocess.run([PY, "edits.py"], cwd=fx, env=env, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise SystemExit(f"fixture edits failed: {done.stdout[-1500:]} {done.stderr[-1500:]}")
    if need("user.ckpt"):
        c = Case("fixture-user", "fixture", "fit", UWF + ["--data.env", "r18worlds.LoadStateRaisesOnResume",
                                                          "--trainer.default_root_dir", str(fx / "user")],
                 control=True, timeout=300)
        outcome, _line, _s, text = run_case(c, fx / "_runs", fx, 1)
        if outcome != "ok":
            raise SystemExit(f"fixture user failed ({outcome}): {text[-2000:]}")
        shutil.copy(fx / "user/lightning_logs/version_0/checkpoints/last.ckpt", fx / "user.ckpt")
    if need("bc.ckpt"):
        c = Case("fixture-bc", "fixture", "bc", ["--config", "swarm", "--teacher", "serial", "--out", str(fx / "bc.ckpt"),
                                                 "--rounds", "2", "--num_envs", "8", "--epochs", "1"], control=True, timeout=300)
        outcome, _line, _s, text = run_case(c, fx / "_runs", fx, 2)
        if outcome != "ok":
            raise SystemExit(f"fixture bc failed ({outcome}): {text[-2000:]}")
    if need("tp.ckpt"):
        c = Case("fixture-tp", "fixture", "fit", r5.TINY + ["--config", str(fx / "tp1.yaml"), "--trainer.default_root_dir", str(fx / "tp")],
                 control=True, timeout=300)
        outcome, _line, _s, text = run_case(c, fx / "_runs", fx, 4)
        if outcome != "ok":
            raise SystemExit(f"fixture tp failed ({outcome}): {text[-2000:]}")
        shutil.copy(fx / "tp/lightning_logs/version_0/checkpoints/last.ckpt", fx / "tp.ckpt")
    if need("weights_only.ckpt"):  # Lightning's own weights-only save (ModelCheckpoint(save_weights_only=True))
        c = Case("fixture-weights-only", "fixture", "fit",
                 r5.TINY + ["--trainer.enable_checkpointing", "true", "--trainer.callbacks+",
                            "lightning.pytorch.callbacks.ModelCheckpoint", "--trainer.callbacks.dirpath", str(fx / "wo"),
                            "--trainer.callbacks.filename", "w", "--trainer.callbacks.save_weights_only", "true",
                            "--trainer.callbacks.every_n_train_steps", "8",
                            "--trainer.default_root_dir", str(fx / "wo_run")], control=True, timeout=300)
        outcome, _line, _s, text = run_case(c, fx / "_runs", fx, 3)
        if outcome != "ok":
            raise SystemExit(f"fixture weights-only failed ({outcome}): {text[-2000:]}")
        shutil.copy(sorted((fx / "wo").glob("*.ckpt"))[-1], fx / "weights_only.ckpt")


# ------------------------------------------------------------------------------------ the cases
B = r5.CaseBook("r18worlds")
fit, case, world, yaml_case = B.fit, B.case, B.world, B.yaml_case
TINY, Q = r5.TINY, r5.Q
UWF = ["--config", "{fx}/user.yaml"]
EXTC = ["--config", "{fx}/ext.yaml"]
POOLC = ["--config", "{fx}/pool.yaml"]
DDP = ["--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp"]
M = ["-m", "parlightning.fit"]
RUN = "lightning_logs"  # a run folder a fault after training started may leave (a user logger's: r18/)
RESUME2 = ["--trainer.max_epochs", "2"]
BCA = ["--out", "b.ckpt", "--rounds", "2", "--num_envs", "8", "--epochs", "1"]
ORACLE = ["--policy", "oracle", "--episodes", "1"]
S = {"s.ckpt": "fixture:swarm.ckpt"}
RUN0 = {"run0": "fixture:run0"}
ADD = ["--trainer.callbacks+"]
MK = {"R18_MARKER": "mark"}  # relative: every case runs in its own folder
PROCC = ["--data.max_policy_lag", "1", "--data.collect_in", "process"]
TRAJ = ["--data.collect", "trajectories", "--data.max_policy_lag", "1"]
PROC = "parlightning.subagents.ProcessPool"
CK = "{fx}/swarm.ckpt"


def sh(script: str, **fmt: Any) -> list:
    """A shell command line (for limits and redirections)."""
    return ["sh", "-c", script.format(py=shlex.quote(PY), **fmt)]


def ns(setup: str, argv: list) -> list:
    """`argv` in a private user + mount namespace after `setup` (mounts), as root of that namespace."""
    return ["unshare", "-rm", "sh", "-c", f"{setup} && exec " + " ".join(shlex.quote(a) for a in argv)]


FULL_TMPFS = "mkdir -p mnt && mount -t tmpfs -o size=8k tmpfs mnt && head -c 8192 /dev/zero > mnt/fill 2>/dev/null; true"
RO_MOUNT = "mkdir -p ro && mount -t tmpfs -o ro tmpfs ro"


def drive(sigs: str, argv: list, wait: float = 60) -> list:
    return [PY, "{fx}/r18drive.py", "{tmp}/mark", sigs, str(wait), "--"] + argv


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
    """A config file naming one of r18worlds' classes (for evaluate and bc, which take configs only)."""
    return {"w.yaml": f"data:\n  env:\n    class_path: r18worlds.{cls}\n"}


CB = "trainer:\n  callbacks+:\n    - class_path: {cls}\n      init_args: {args}\n"
SW = "--data.env.init_args."

# ---------------------------------------------------------------- configs and overrides
fit("cfg-reload-dataloaders-every-two-epochs", "config", TINY + ["--trainer.max_epochs", "2",
    "--trainer.reload_dataloaders_every_n_epochs", "2"], "reload_dataloaders_every_n_epochs", quick=True)
fit("cfg-data-env-a-bare-json-string", "config", TINY + ["--data.env", '"parlightning.envs.SwarmEnv"'], "data.env")
yaml_case("cfg-yaml-octal-looking-num-envs", "config", "data:\n  num_envs: 0o10\n", "num_envs")
fit("cfg-override-value-a-yaml-document-separator", "config", TINY + ["--model.activation", "---"], "activation")
yaml_case("cfg-key-with-a-cyrillic-letter", "config", "model:\n  l\u0440: 0.01\n", ("model",))
yaml_case("cfg-lambda1-linear-schedule-given-constant-value", "config",
          "data:\n  reward:\n    init_args:\n      lambda1:\n        class_path: parlightning.parl.reward.LinearSchedule\n"
          "        init_args: {value: 0.3}\n", ("lambda1|value",))
fit("cfg-sampler-class-path-with-trailing-dot", "config",
    TINY + ["--data.sampler", "parlightning.distribution.samplers.RoundRobin."], "sampler")
fit("cfg-model-hidden-sizes-a-bare-number", "config", TINY + ["--model.hidden_sizes", "64"], "hidden_sizes")
fit("cfg-swarm-splits-not-sorted-with-a-one-missing", "config", TINY + [SW + "splits", "[4, 2]"], "splits")
fit("cfg-swarm-max-cost-one-billion", "config", TINY + [SW + "max_cost", "1000000000"], "max_cost", timeout=90)
fit("cfg-data-seed-beyond-uint32", "config", TINY + ["--data.seed", "18446744073709551616"], "seed")
fit("cfg-collect-in-process-without-a-lag", "config", UWF + ["--data.collect_in", "process"], "collect_in")
fit("cfg-external-world-workers-above-num-envs", "config", EXTC + ["--data.env.init_args.workers", "9"], "workers")
fit("cfg-print-config-with-a-misspelt-section", "config", TINY + ["--modle.lr", "0.1", "--print_config"], "modle")
fit("cfg-default-root-dir-an-url", "config", TINY + ["--trainer.default_root_dir", "s3://bucket/runs"],
    "default_root_dir", timeout=90)

# ---------------------------------------------------------------- Lightning pieces
fit("lightning-model-checkpoint-weights-only-then-resumed", "lightning",
    TINY + RESUME2 + ["--ckpt_path", "w.ckpt"], ("ckpt_path|w.ckpt",),
    files={"w.ckpt": "fixture:weights_only.ckpt"}, guard=("w.ckpt",))
fit("lightning-tensorboard-sub-dir-escaping-the-run", "lightning",
    TINY + ["--trainer.logger", "lightning.pytorch.loggers.TensorBoardLogger", "--trainer.logger.save_dir", "tb",
            "--trainer.logger.sub_dir", "/proc/r18"], "sub_dir", allow=("^tb",))
yaml_case("lightning-checkpoint-filename-with-a-slash-into-a-missing-folder", "lightning",
          "trainer:\n  callbacks+:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
          "      init_args: {dirpath: ck, every_n_train_steps: 4, filename: '../../../../../../../../../../proc/{epoch}'}\n", "filename", allow=(RUN, "^ck"))
fit("lightning-csv-logger-prefix-with-a-slash", "lightning",
    TINY + ["--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", "csv",
            "--trainer.logger.prefix", "a/b"], "prefix", allow=("^csv",))
yaml_case("lightning-timer-one-second-interval-step", "lightning",
          CB.format(cls="lightning.pytorch.callbacks.Timer", args="{duration: '00:00:00:00', interval: step}"),
          ("duration|Timer",))
fit("lightning-logger-version-with-a-slash", "lightning",
    TINY + ["--trainer.logger", "lightning.pytorch.loggers.TensorBoardLogger", "--trainer.logger.save_dir", "tb",
            "--trainer.logger.version", "../../../escape"], "version", allow=("^tb",))
fit("lightning-two-loggers-one-folder-same-version", "lightning",
    TINY + ["--trainer.logger+", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", "same",
            "--trainer.logger.version", "0",
            "--trainer.logger+", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", "same",
            "--trainer.logger.version", "0"], ("logger",), allow=("^same",))
fit("lightning-precision-16-mixed-on-cpu", "lightning", TINY + ["--trainer.accelerator", "cpu", "--trainer.precision",
                                                                 "16-mixed"], "precision")
fit("lightning-gradient-clip-algorithm-value-beside-max-grad-norm", "lightning",
    TINY + ["--trainer.gradient_clip_val", "0.5", "--trainer.gradient_clip_algorithm", "value"],
    ("gradient_clip|max_grad_norm",))

# ---------------------------------------------------------------- checkpoints edited and re-stamped
def resume(name: str, ckpt: str, expect: Any, extra: list = (), **kw: Any) -> None:
    fit(name, "checkpoint", TINY + RESUME2 + ["--ckpt_path", "c.ckpt"] + list(extra), expect,
        files={"c.ckpt": f"fixture:{ckpt}"}, guard=("c.ckpt",), allow=kw.pop("allow", ()), **kw)


def ck_tool(name: str, kind: str, ckpt: str, args: list, expect: Any, **kw: Any) -> None:
    case(name, "checkpoint", kind, args, expect, files={"c.ckpt": f"fixture:{ckpt}", **kw.pop("files", {})},
         guard=("c.ckpt",), **kw)


resume("ckpt-stamped-activation-unknown-resumed", "st_hp_activation_unknown.ckpt", "activation")
ck_tool("ckpt-stamped-activation-unknown-exported", "export", "st_hp_activation_unknown.ckpt",
        ["--ckpt_path", "c.ckpt", "--out", "p.pt2"], "activation")
resume("ckpt-stamped-init-from-a-missing-file-resumed", "st_hp_init_from_missing.ckpt", ("init_from",))
resume("ckpt-stamped-prior-two-resumed", "st_hp_prior_two.ckpt", "prior")
ck_tool("ckpt-stamped-prior-two-loaded-as-a-policy", "py", "st_hp_prior_two.ckpt",
        "import parlightning\nparlightning.load_policy('c.ckpt')\n", "prior")
resume("ckpt-stamped-lr-negative-resumed", "st_hp_lr_negative.ckpt", "lr")
ck_tool("ckpt-stamped-spaces-obs-shape-other-exported", "export", "st_spaces_obs_shape_other.ckpt",
        ["--ckpt_path", "c.ckpt", "--out", "p.pt2"], ("ckpt_path|c.ckpt",))
ck_tool("ckpt-stamped-spaces-obs-shape-other-evaluated", "evaluate", "st_spaces_obs_shape_other.ckpt",
        ["--config", "swarm", "--ckpt_path", "c.ckpt", "--episodes", "1"], ("observation_shape|policy_spaces",))
ck_tool("ckpt-stamped-spaces-kind-continuous-loaded-as-a-policy", "py", "st_spaces_kind_continuous.ckpt",
        "import parlightning\nparlightning.load_policy('c.ckpt')\n", ("continuous|action_spec|policy_spaces",))
resume("ckpt-stamped-env-signature-class-cartpole", "st_dm_signature_class_other.ckpt", ("CartPoleEnv|class",))
resume("ckpt-stamped-annealing-unit-other-than-the-config", "st_annealing_unit_other.ckpt", ("unit",))
resume("ckpt-stamped-adam-beta-above-one", "st_adam_betas_above_one.ckpt", "betas")
resume("ckpt-stamped-adam-eps-negative", "st_adam_eps_negative.ckpt", "eps")
resume("ckpt-stamped-checkpoint-dirpath-in-proc", "st_mc_dirpath_proc.ckpt", ("dirpath|ModelCheckpoint",),
       allow=(RUN,))
resume("ckpt-stamped-planner-ranks-removed", "st_planner_ranks_removed.ckpt", ("StrategyPlanner", "ranks"))
resume("ckpt-stamped-data-module-ranks-empty", "st_dm_ranks_empty.ckpt", ("ranks",))
ck_tool("ckpt-stamped-data-module-ranks-empty-evaluated", "evaluate", "st_dm_ranks_empty.ckpt",
        ["--config", "swarm", "--ckpt_path", "c.ckpt", "--episodes", "1"], ("ranks",))
resume("ckpt-stamped-hparams-name-config", "st_hparams_name_other.ckpt", ("hparams_name",))
fit("ckpt-a-bc-checkpoint-given-as-ckpt-path", "checkpoint", TINY + ["--ckpt_path", "b.ckpt"], ("ckpt_path", "init_from"),
    files={"b.ckpt": "fixture:bc.ckpt"}, guard=("b.ckpt",))

# ---------------------------------------------------------------- evaluate / export / bc / plot
case("eval-seeds-given-twice-the-same", "evaluate", "evaluate", ["--policy", "oracle", "--episodes", "1", "--seeds", "3", "3"],
     "seeds")
case("eval-gantt-without-png-suffix", "evaluate", "evaluate", ORACLE + ["--gantt", "episode.svg"], "gantt")
case("eval-config-with-a-trainer-section-only", "evaluate", "evaluate",
     ["--config", "t.yaml", "--policy", "oracle", "--episodes", "1"], ("config|data.env|t.yaml",),
     files={"t.yaml": "trainer:\n  max_epochs: 3\n"})
case("export-format-contradicting-the-suffix", "export", "export",
     ["--ckpt_path", "s.ckpt", "--out", "p.onnx", "--format", "pt2"], ("format", "onnx"), files=S, guard=("s.ckpt",))
case("plot-smooth-larger-than-the-run", "plot", "plot", ["run0", "--smooth", "1000000", "--csv", "c.csv"], "smooth",
     files=RUN0)
case("plot-band-std-of-a-single-run", "plot", "plot", ["run0", "--band", "ci", "--csv", "c.csv", "--tag",
     "charts/nosuch_tag"], ("tag", "nosuch_tag"), files=RUN0)

# ---------------------------------------------------------------- user tensor worlds
world("world-turns-grad-mode-off", "TurnsGradOff", ("TurnsGradOff", "grad"), base=UWF + ["--trainer.max_epochs", "2"],
      allow=(RUN,))
world("world-changes-the-working-folder", "ChangesWorkingFolder", ("ChangesWorkingFolder",),
      base=UWF + ["--trainer.max_epochs", "3"], allow=(RUN, "^elsewhere"))
world("world-recurses-without-end", "RecursesForever", ("RecursesForever", "step"))
world("world-constructor-needs-an-argument-the-config-lacks", "NeedsDifficulty", ("difficulty",))
world("world-observation-shape-a-list", "ObservationShapeList", ("observation_shape",))
world("world-reset-fails-for-the-full-batch-only", "ResetFailsForTheFullBatch", ("ResetFailsForTheFullBatch", "reset"))
world("world-reset-fails-for-the-full-batch-under-a-collector-process", "ResetFailsForTheFullBatch",
      ("ResetFailsForTheFullBatch", "reset"), base=UWF + PROCC, timeout=90)

# ---------------------------------------------------------------- external worlds
EXT_BASE = "world: 'r18ext:{cls}', step_timeout: 20"


def ext(name: str, cls: str, expect: Any, more: str = "", extra: str = "", base: list = EXTC, **kw: Any) -> None:
    yaml_case(name, "external", env_yaml("{" + EXT_BASE.format(cls=cls) + more + "}", extra), expect, base=base, **kw)


ext("ext-reset-keyword-only-task", "ExtResetKeywordOnly", ("ExtResetKeywordOnly", "reset"))
ext("ext-close-never-returns", "ExtCloseHangs", ("ExtCloseHangs", "close"), allow=(RUN,), timeout=120)
ext("ext-step-parts-a-gymnasium-info-dict", "ExtStepReturnsInfoDict", ("ExtStepReturnsInfoDict", "parts"))

# ---------------------------------------------------------------- subagent pools
def pool_case(name: str, pool: str, expect: Any, world_kwargs: str = "", step_timeout: float = 30, **kw: Any) -> None:
    yaml_case(name, "pool", pool_yaml(pool, world_kwargs, step_timeout), expect, base=POOLC,
              timeout=kw.pop("timeout", 90), **kw)


def proc_pool(fn: str, more: str = "") -> str:
    return f"{{class_path: {PROC}, init_args: {{fn: '{fn}', workers: 2, timeout: 20{more}}}}}"


def http_case(name: str, mode: str, pool: str, expect: Any, port: int, **kw: Any) -> None:
    """fit over pool.yaml with `pool` (PORT substituted) against r18http.py serving MODE on that port."""
    body = pool_yaml(pool.replace("PORT", str(port)))
    case(name, "pool", "cmd", [PY, "{fx}/r18http.py", mode, str(port), "--", PY] + M + POOLC + ["--config", "p.yaml"],
         expect, files={"p.yaml": body}, timeout=kw.pop("timeout", 120), allow=kw.pop("allow", (RUN,)), **kw)


pool_case("pool-process-fn-names-a-module-constant", proc_pool("r18fns:CONSTANT"), ("fn", "CONSTANT"))
pool_case("pool-process-fn-forks-a-grandchild-and-returns", proc_pool("r18fns:fn_forks_and_returns"),
          ("fn_forks_and_returns",), allow=(RUN,))
http_case("pool-async-http-every-reply-after-the-timeout", "late",
          "{class_path: parlightning.subagents.AsyncHTTPPool, init_args: {base_url: 'http://127.0.0.1:PORT/v1', timeout: 1,"
          " retries: 0}}", ("AsyncHTTPPool|timeout|127.0.0.1",), 18432, timeout=180)
pool_case("pool-http-base-url-malformed-ipv6", "{class_path: parlightning.subagents.HTTPPool, init_args: {base_url: 'http://[::1/v1'}}",
          ("base_url",))
yaml_case("pool-world-kwargs-n-skills-zero", "pool",
          pool_yaml("{class_path: parlightning.subagents.SimulatedPool}").replace("n_skills: 3", "n_skills: 0"),
          "n_skills", base=POOLC, timeout=90)

# ---------------------------------------------------------------- user code: callbacks, samplers, rewards, schedules, loggers
def user(name: str, args: list, expect: Any, **kw: Any) -> None:
    fit(name, "user", TINY + args, expect, allow=kw.pop("allow", (RUN,)), **kw)


user("user-callback-forward-hook-doubles-the-actor-output", ADD + ["r18user.ActorForwardHook"], ("ActorForwardHook",))
user("user-callback-saves-its-own-checkpoint-into-proc", ADD + ["r18user.SavesCheckpointIntoProc"],
     ("SavesCheckpointIntoProc",))
user("user-sampler-pick-blocks-forever", ["--data.sampler", "r18user.PickBlocksForever", "--stall_timeout", "4",
     "--trainer.max_epochs", "3"], ("PickBlocksForever|pick",), timeout=90)
YR = "data:\n  reward:\n    class_path: r18user.{cls}\n    init_args: {{max_subagents: 128}}\n"
yaml_case("user-reward-bonus-nan", "user", YR.format(cls="BonusNaN"), ("BonusNaN", "bonus"), allow=(RUN,))
yaml_case("user-reward-bonus-a-column", "user", YR.format(cls="BonusColumn"), ("BonusColumn", "bonus"), allow=(RUN,))
YS = ("data:\n  reward:\n    class_path: parlightning.parl.reward.PARLReward\n    init_args:\n      max_subagents: 128\n"
      "      lambda1: {{class_path: r18user.{cls}}}\n")
yaml_case("user-schedule-value-minus-inf", "user", YS.format(cls="MinusInfSchedule"), ("MinusInfSchedule",), allow=(RUN,))
user("user-logger-log-metrics-blocks-forever", ["--trainer.logger", "r18user.LogMetricsBlocks", "--stall_timeout", "4",
     "--trainer.max_epochs", "3"], ("LogMetricsBlocks",), timeout=90, allow=(RUN, "^r18"))

# ---------------------------------------------------------------- the Python API
def api(name: str, code: str, expect: Any, **kw: Any) -> None:
    case(name, "api", "py", code, expect, timeout=kw.pop("timeout", 60), **kw)


LP = f"import torch, numpy as np, parlightning\np = parlightning.load_policy('{CK}')\n"
api("api-predict-with-an-all-false-mask", LP + "p.predict(torch.zeros(2, 13, 6), mask=torch.zeros(2, 12, dtype=torch.bool))\n",
    "mask")
api("api-predict-an-empty-batch-of-the-wrong-width", LP + "p.predict(torch.zeros(0, 13, 5))\n", ("obs|observation",))
api("api-predict-a-nested-list-of-strings", LP + "p.predict([['a'] * 6] * 13)\n", ("obs|observation",))
api("api-predict-return-value-a-word", LP + "p.predict(torch.zeros(2, 13, 6), return_value='yes')\n", "return_value")
api("api-fit-overrides-a-dangling-flag", "from parlightning import fit\nfit(config='swarm', overrides=['--trainer.max_epochs'])\n",
    "max_epochs")
api("api-fit-config-a-list-with-a-missing-file",
    "from parlightning import fit\nfit(config=['swarm', 'nosuch_r18.yaml'], overrides=['trainer.max_epochs=1'])\n",
    ("config|nosuch_r18",))
api("api-cartpole-max-episode-steps-a-float", "from parlightning.envs import CartPoleEnv\nCartPoleEnv(4, max_episode_steps=2.5)\n",
    "max_episode_steps")
api("api-normalize-env-given-a-world-instance",
    "from parlightning.envs import NormalizeEnv, CartPoleEnv\nNormalizeEnv(4, env=CartPoleEnv(4)).reset()\n", "env")
api("api-difficulty-weighted-seed-negative", "from parlightning.distribution.samplers import DifficultyWeighted\n"
    "DifficultyWeighted(seed=-3)\n", "seed")
api("api-action-spec-nvec-a-numpy-array-of-floats",
    "import numpy as np\nfrom parlightning.envs.base import ActionSpec\nActionSpec('discrete', nvec=np.array([2.5]))\n", "nvec")
api("api-process-pool-timeout-nan", "from parlightning.subagents import ProcessPool\n"
    "ProcessPool(fn='r18fns:fn_good', timeout=float('nan'))\n", "timeout")
api("api-rollout-buffer-observation-shape-with-a-zero", "import torch\nfrom parlightning.buffer import RolloutBuffer\n"
    "RolloutBuffer(4, 2, (0, 3), (1,), torch.device('cpu'))\n", "observation_shape")
api("api-rollout-buffer-action-dtype-a-string", "import torch\nfrom parlightning.buffer import RolloutBuffer\n"
    "RolloutBuffer(4, 2, (3,), (1,), torch.device('cpu'), action_dtype='int64')\n", "action_dtype")
api("api-external-env-world-a-lambda-with-workers",
    "from parlightning.envs.external import ExternalBatchedEnv\nimport r18ext\n"
    "ExternalBatchedEnv(2, world=lambda seed=0: r18ext.ExtGood(seed), workers=1).reset()\n", ("world",), timeout=90)
api("api-verify-checkpoint-path-not-a-string", f"import torch\nfrom parlightning.runtime.checkpoint import verify_checkpoint\n"
    f"verify_checkpoint(torch.load('{CK}', weights_only=False), 7)\n", "path")
api("api-tensor-parallel-n-sections-above-keys", "from parlightning.distribution.strategies import TensorParallel\n"
    "TensorParallel(n_sections=5, keys=['a', 'b'])\n", ("n_sections",))

# ---------------------------------------------------------------- the filesystem (a private mount namespace)

# ---------------------------------------------------------------- signals at new moments
def signal_case(name: str, sigs: str, argv: list, expect: Any, **kw: Any) -> None:
    case(name, "signal", "cmd", drive(sigs, argv), expect, env=MK, allow=tuple(kw.pop("allow", (RUN,))) + (r"^mark\.lock$",),
         timeout=kw.pop("timeout", 90), **kw)


signal_case("sig-term-during-bc-teacher-rollout", "TERM",
            [PY, "-m", "parlightning.bc", "--config", "{fx}/user.yaml", "--config", "w.yaml", "--teacher", "serial",
             "--out", "b.ckpt", "--rounds", "8", "--num_envs", "8", "--epochs", "1"], ("SIGTERM|signal",),
            files=world_cfg("W18MarkStep"), allow=())
signal_case("sig-hup-during-evaluate-with-a-trace", "HUP",
            [PY, "-m", "parlightning.evaluate", "--config", "{fx}/user.yaml", "--config", "w.yaml", "--policy", "serial",
             "--episodes", "2", "--trace", "t.jsonl", "--json", "e.json"], ("SIGHUP|signal",),
            files=world_cfg("W18MarkStep"), allow=())
signal_case("sig-int-twice-in-quick-succession", "INT,sleep0.1,INT",
            [PY] + M + UWF + ["--data.env", "r18worlds.W18MarkStepLater", "--trainer.max_epochs", "20"],
            ("SIGINT|interrupt",))
signal_case("sig-term-to-the-collector-process", "TERM",
            [PY] + M + UWF + PROCC + ["--data.env", "r18worlds.W18MarkStepChild", "--trainer.max_epochs", "4"],
            ("collector|SIGTERM",))
signal_case("sig-term-to-a-process-pool-worker", "TERM",
            [PY] + M + POOLC + ["--config", "p.yaml"], ("fn_marks|ProcessPool|worker",),
            files={"p.yaml": pool_yaml(proc_pool("r18fns:fn_marks"))})

# ---------------------------------------------------------------- 2-rank gloo DDP faults (the real CLI)
DDPW = UWF + DDP + ["--trainer.max_epochs", "3", "--data.num_envs", "8", "--data.num_steps", "4"]


def ddp(name: str, args: list, expect: Any, **kw: Any) -> None:
    case(name, "ddp", "cmd", [PY] + M + DDPW + args, expect, timeout=kw.pop("timeout", 180),
         allow=kw.pop("allow", (RUN,)), **kw)


ddp("ddp-rank1-sampler-pick-raises", ["--data.sampler", "r18user.Rank1PickRaises"], ("rank 1", "Rank1PickRaises"))
ddp("ddp-rank1-reward-bonus-nan", ["--config", "r.yaml"], ("rank 1", "Rank1BonusNaN|bonus"),
    files={"r.yaml": YR.format(cls="Rank1BonusNaN").replace("128", "8")})
ddp("ddp-rank1-on-save-checkpoint-raises", ["--config", "cb.yaml"], ("rank 1", "Rank1SaveRaises"),
    files={"cb.yaml": "trainer:\n  callbacks:\n    - class_path: r18user.Rank1SaveRaises\n"
                      "    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n      init_args: {save_last: true}\n"})

# ---------------------------------------------------------------- the scripts
def script(name: str, file: str, args: list, expect: Any, **kw: Any) -> None:
    case(name, "script", "cmd", [PY, "{root}/scripts/" + file] + args, expect, timeout=kw.pop("timeout", 120), **kw)


script("script-world-baselines-split-and-wide-episodes-huge", "world_baselines.py", ["--quick", "--episodes", "100000000"],
       "episodes")
script("script-recurrent-vs-mlp-n-cues-one", "recurrent_vs_mlp.py", ["--quick", "--n_cues", "1"], "n_cues")
script("script-bench-async-sizes-zero", "bench_async.py", ["--quick", "--sizes", "0"], "sizes")
script("script-sampler-table-seeds-a-word", "sampler_table.py", ["--quick", "--seeds", "many"], "seeds")


# ---------------------------------------------------------------- more: configs through Gymnasium, packaged configs, strategies
GYM = ["--config", "cartpole", "--trainer.max_epochs", "1", "--data.num_envs", "2", "--data.num_steps", "8"] + Q
fit("cfg-two-packaged-configs-swarm-then-cartpole-fast", "config",
    ["--config", "swarm", "--config", "cartpole_fast", "--trainer.max_epochs", "1", "--data.num_envs", "8",
     "--data.num_steps", "8"] + Q, ("reward|PARLReward|StrategyPlanner|PARLAnnealing",))
fit("cfg-example-block-planner-given-as-the-sampler", "config",
    TINY + ["--data.sampler", "parlightning.examples.block_planner.BlockPlanner"], ("sampler", "BlockPlanner"))
fit("cfg-gym-frozenlake-discrete-observations", "config", GYM + ["--data.env.init_args.env_id", "FrozenLake-v1"],
    ("FrozenLake|observation",))
fit("cfg-gym-blackjack-tuple-observations-without-flatten", "config", GYM + ["--data.env.init_args.env_id", "Blackjack-v1"],
    ("Blackjack|observation",))
fit("cfg-gym-wrapper-that-needs-arguments", "config", GYM + ["--data.env.init_args.wrappers",
    "[gymnasium.wrappers.RecordVideo]"], ("wrappers|RecordVideo",))
fit("cfg-gym-atari-id-not-installed", "config", GYM + ["--data.env.init_args.env_id", "ALE/Pong-v5"], ("env_id|ALE",))
fit("cfg-gym-vector-entry-point-with-wrappers", "config", GYM + ["--data.env.init_args.vectorization", "vector_entry_point",
    "--data.env.init_args.wrappers", "[gymnasium.wrappers.FlattenObservation]"], ("wrappers",))
fit("cfg-posterior-signal-sampler-on-a-world-without-tasks", "config",
    ["--config", "cartpole_fast", "--trainer.max_epochs", "1", "--data.num_envs", "8", "--data.num_steps", "8"] + Q +
    ["--data.sampler", "parlightning.distribution.samplers.PosteriorSignal"], ("sampler|PosteriorSignal",))
yaml_case("cfg-external-world-named-by-a-method-path", "config",
          env_yaml("{world: 'r18ext:ExtGood.reset', step_timeout: 20}"), ("world",), base=EXTC)
fit("cfg-tensor-parallel-config-with-the-slots-policy", "config", TINY + ["--config", "{fx}/tp1.yaml", "--model.policy", "slots"],
    ("slots|TensorParallel",))
fit("cfg-tensor-parallel-config-on-an-external-world", "config", EXTC + ["--config", "{fx}/tp1.yaml"],
    ("TensorParallel|keys|strategy",))
fit("cfg-prior-beside-init-from-on-the-command-line", "config",
    TINY + ["--model.prior", "0.9", "--model.init_from", "b.ckpt"], ("prior", "init_from"),
    files={"b.ckpt": "fixture:bc.ckpt"}, guard=("b.ckpt",))
fit("lightning-tensorboard-max-queue-zero", "lightning",
    TINY + ["--trainer.logger", "lightning.pytorch.loggers.TensorBoardLogger", "--trainer.logger.save_dir", "tb",
            "--trainer.logger.max_queue", "0"], ("max_queue",), allow=("^tb",))

# ---------------------------------------------------------------- more: keyed (TensorParallel) checkpoints, Adam state of another parameter
ck_tool("ckpt-keyed-tensor-parallel-checkpoint-exported", "export", "tp.ckpt", ["--ckpt_path", "c.ckpt", "--out", "p.pt2"],
        ("keyed|TensorParallel",))
ck_tool("ckpt-keyed-tensor-parallel-checkpoint-loaded-as-a-policy", "py", "tp.ckpt",
        "import parlightning\nparlightning.load_policy('c.ckpt')\n", ("keyed|TensorParallel",))
ck_tool("ckpt-keyed-tensor-parallel-checkpoint-as-bc-teacher", "bc", "tp.ckpt",
        ["--config", "swarm", "--teacher", "c.ckpt"] + BCA, ("teacher|keyed|TensorParallel",))
resume("ckpt-stamped-adam-state-of-another-parameter", "st_adam_state_of_another_parameter.ckpt",
       ("optimizer|exp_avg|Adam",))
case("eval-split-train-on-a-user-world-without-splits", "evaluate", "evaluate",
     ["--config", "{fx}/user.yaml", "--policy", "serial", "--episodes", "1", "--split", "train"], ("split",))
case("bc-memory-world-with-a-scripted-teacher", "bc", "bc", ["--config", "memory", "--config", "m.yaml", "--teacher", "serial"]
     + BCA, ("teacher|serial",), files={"m.yaml": "model:\n  policy: mlp\n"})
case("plot-csv-the-run-folder-itself", "plot", "plot", ["run0", "--csv", "run0"], ("csv",), files=RUN0)

# ---------------------------------------------------------------- more: worlds changing process-wide torch state
world("world-turns-on-deterministic-algorithms", "TurnsOnDeterministicAlgorithms", ("TurnsOnDeterministicAlgorithms",),
      base=UWF + ["--trainer.max_epochs", "2"], allow=(RUN,))
world("world-sets-eight-torch-threads", "SetsEightThreads", ("SetsEightThreads", "threads"),
      base=UWF + ["--trainer.max_epochs", "2"], allow=(RUN,))
world("world-device-attribute-cuda-with-cpu-tensors", "DeviceAttributeCuda", ("device",))

# ---------------------------------------------------------------- more: pools and user code
pool_case("pool-process-fn-names-a-class", proc_pool("r18fns:FnClass"), ("FnClass",))
user("user-callback-mutates-hparams-lr-to-a-word", ADD + ["r18user.MutatesHparamsLr"], ("MutatesHparamsLr",))
user("user-callback-converts-the-policy-to-float64", ADD + ["r18user.PolicyToFloat64"], ("PolicyToFloat64",))
user("user-callback-moves-the-module-to-the-meta-device", ADD + ["r18user.ModuleToMeta"], ("ModuleToMeta",))
user("user-callback-drops-the-optimizer-states-from-each-checkpoint", ADD + ["r18user.DropsOptimizerStates"],
     ("DropsOptimizerStates",))
user("user-callback-tears-down-the-data-module-mid-run", ADD + ["r18user.TearsDownTheDataModule", "--trainer.max_epochs", "3"],
     ("TearsDownTheDataModule",))
yaml_case("user-reward-terms-nan", "user", YR.format(cls="TermsNaN"), ("TermsNaN", "terms"), allow=(RUN,))

# ---------------------------------------------------------------- more: the Python API
api("api-predict-a-float-numpy-mask", LP + "p.predict(np.zeros((2, 13, 6), np.float32), mask=np.ones((2, 12)))\n", "mask")
api("api-ppo-module-policy-transformer", "from parlightning.ppo.module import PPOModule\nPPOModule(policy='transformer')\n",
    "policy")
api("api-ppo-module-hidden-sizes-with-a-negative", "from parlightning.ppo.module import PPOModule\nPPOModule(hidden_sizes=[64, -1])\n",
    "hidden_sizes")
api("api-swarm-scripted-action-on-obs-of-another-width", "import torch\nfrom parlightning.envs import SwarmEnv\n"
    "e = SwarmEnv(8)\ne.reset(seed=0)\ne.scripted_action('oracle', torch.zeros(8, 13, 5))\n", "obs")
api("api-stamp-checkpoint-of-a-list", "from parlightning.runtime.checkpoint import stamp_checkpoint\nstamp_checkpoint([1, 2])\n",
    "checkpoint")

# ---------------------------------------------------------------- more: the filesystem
case("fs-export-onnx-on-a-full-tmpfs", "filesystem", "cmd",
     ns(FULL_TMPFS, [PY, "-m", "parlightning.export", "--ckpt_path", "s.ckpt", "--out", "mnt/p.onnx"]), ("out",),
     files=S, guard=("s.ckpt",), allow=(r"^mnt$",), timeout=120)
case("fs-tune-out-on-a-read-only-mount", "filesystem", "cmd",
     ns(RO_MOUNT, [PY, "{root}/scripts/tune.py", "--quick", "--out", "ro/t"]), ("out",), allow=(r"^ro$",), timeout=120)
case("fs-fit-csv-logger-on-a-full-tmpfs", "filesystem", "cmd",
     ns(FULL_TMPFS, [PY] + M + TINY + ["--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
                                       "--trainer.logger.save_dir", "mnt/csv"]), ("save_dir|mnt|csv",),
     allow=(r"^mnt$", RUN), timeout=90)

# ---------------------------------------------------------------- more: signals, DDP, scripts
signal_case("sig-usr2-during-bc-teacher-rollout", "USR2",
            [PY, "-m", "parlightning.bc", "--config", "{fx}/user.yaml", "--config", "w.yaml", "--teacher", "serial",
             "--out", "b.ckpt", "--rounds", "8", "--num_envs", "8", "--epochs", "1"], ("SIGUSR2|signal",),
            files=world_cfg("W18MarkStep"), allow=())
ddp("ddp-rank1-world-raises-a-base-exception-subclass", ["--data.env", "r18worlds.Rank1RaisesBaseException"],
    ("rank 1", "Rank1RaisesBaseException"))
script("script-experiment-set-a-missing-config", "experiment.py", ["--quick", "--set=--config=nosuch_r18.yaml", "--out", "e"],
       ("config|nosuch_r18",))

yaml_case("cfg-model-section-wrapped-in-init-args", "config", "model:\n  init_args:\n    lr: 0.01\n", ("model", "init_args"))
yaml_case("cfg-data-section-with-a-class-path", "config",
          "data:\n  class_path: parlightning.ppo.data.RolloutDataModule\n  init_args:\n    num_envs: 8\n", ("data", "init_args"))
yaml_case("cfg-callback-entry-with-init-arg-singular", "config",
          "trainer:\n  callbacks+:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n      init_arg: {save_last: true}\n",
          ("init_arg",))
fit("cfg-gym-env-id-version-that-does-not-exist", "config", GYM + ["--data.env.init_args.env_id", "CartPole-v99"],
    ("env_id|CartPole-v99",))
case("export-ckpt-path-the-run-folder", "export", "export", ["--ckpt_path", "run0", "--out", "p.pt2"], ("ckpt_path",), files=RUN0)
api("api-simulated-pool-wait-negative-timeout", "from parlightning.subagents import SimulatedPool\np = SimulatedPool()\n"
    "h = p.spawn({'skill': 0, 'instruction': 0, 'cost': 2})\np.wait([h], timeout=-1)\n", "timeout")
api("api-simulated-pool-spawn-negative-cost", "from parlightning.subagents import SimulatedPool\n"
    "SimulatedPool().spawn({'skill': 0, 'instruction': 0, 'cost': -3})\n", "cost")
api("api-constant-schedule-value-at-a-nan-position", "from parlightning.parl.reward import ConstantSchedule\n"
    "ConstantSchedule(0.1).value(float('nan'))\n", "position")
api("api-parl-reward-bonus-completed-above-assigned", "import torch\nfrom parlightning.parl.reward import PARLReward\n"
    "PARLReward(8).bonus(torch.ones(3), torch.ones(3), torch.full((3,), 5.0))\n", "completed")
api("api-write-trace-record-with-nan", "from parlightning.analysis.trace import write_trace\n"
    "write_trace([{'episode': 0, 'outcome': float('nan')}], 't.jsonl')\n", ("nan|outcome",))
api("api-predict-generator-on-the-meta-device", LP + "p.predict(torch.zeros(2, 13, 6), deterministic=False, "
    "generator=torch.Generator(device='meta'))\n", "generator")


# ---------------------------------------------------------------- more: checkpoint edits through other doors, optimizer state
ck_tool("ckpt-stamped-activation-unknown-loaded-as-a-policy", "py", "st_hp_activation_unknown.ckpt",
        "import parlightning\nparlightning.load_policy('c.ckpt')\n", "activation")
ck_tool("ckpt-stamped-activation-unknown-evaluated", "evaluate", "st_hp_activation_unknown.ckpt",
        ["--config", "swarm", "--ckpt_path", "c.ckpt", "--episodes", "1"], "activation")
ck_tool("ckpt-stamped-spaces-kind-continuous-exported", "export", "st_spaces_kind_continuous.ckpt",
        ["--ckpt_path", "c.ckpt", "--out", "p.pt2"], ("continuous|action_spec|policy_spaces",))
ck_tool("ckpt-stamped-spaces-nvec-short-loaded-as-a-policy", "py", "st_spaces_nvec_short.ckpt",
        "import parlightning\nparlightning.load_policy('c.ckpt')\n", ("checkpoint", "spaces"))
ck_tool("ckpt-stamped-spaces-obs-shape-other-loaded-as-a-policy", "py", "st_spaces_obs_shape_other.ckpt",
        "import parlightning\nparlightning.load_policy('c.ckpt')\n", ("checkpoint", "spaces"))
resume("ckpt-stamped-adam-weight-decay-negative", "st_adam_weight_decay_negative.ckpt", "weight_decay")
resume("ckpt-stamped-adam-amsgrad-without-its-state", "st_adam_amsgrad_without_its_state.ckpt", ("amsgrad|optimizer",))
resume("ckpt-stamped-adam-exp-avg-float16", "st_adam_exp_avg_float16.ckpt", ("exp_avg|optimizer",))
resume("ckpt-stamped-planner-episodes-short", "st_planner_episodes_short.ckpt", ("StrategyPlanner", "episodes"))
resume("ckpt-stamped-annealing-position-nan", "st_annealing_position_nan.ckpt", ("position|PARLAnnealing",))
resume("ckpt-stamped-env-steps-a-fraction", "st_dm_env_steps_fraction.ckpt", ("env_steps",))
resume("ckpt-stamped-num-envs-a-float", "st_dm_num_envs_float.ckpt", ("num_envs",))
resume("ckpt-stamped-env-signature-max-width-other", "st_signature_max_width_other.ckpt", ("max_width",))
resume("ckpt-stamped-lightning-version-not-a-version", "st_pl_version_garbage.ckpt", ("pytorch-lightning_version|version",))

# ---------------------------------------------------------------- more: callbacks that change the module or the optimizer
user("user-callback-adds-an-optimizer-param-group", ADD + ["r18user.AddsAParamGroup"], ("AddsAParamGroup",))
user("user-callback-deletes-the-critic", ADD + ["r18user.DeletesTheCritic"], ("DeletesTheCritic",))
user("user-callback-sets-hparams-clip-coef-negative", ADD + ["r18user.HparamsClipCoefNegative"], ("HparamsClipCoefNegative",))
user("user-callback-empties-the-trainers-optimizers", ADD + ["r18user.EmptiesTheOptimizers", "--trainer.max_epochs", "2"],
     ("EmptiesTheOptimizers",))
user("user-callback-scales-gradients-to-inf", ADD + ["r18user.ScalesGradsByAHuge"], ("ScalesGradsByAHuge",))
fit("cfg-critical-steps-monitor-on-a-world-without-episode-parts", "config",
    ["--config", "cartpole_fast", "--trainer.max_epochs", "1", "--data.num_envs", "8", "--data.num_steps", "8"] + Q + ADD +
    ["parlightning.callbacks.CriticalStepsMonitor"], ("CriticalStepsMonitor",))

# ---------------------------------------------------------------- more: the Python API
api("api-predict-obs-on-the-meta-device", LP + "p.predict(torch.zeros(2, 13, 6, device='meta'))\n", ("obs|device|meta",))
api("api-ppo-module-target-kl-nan", "from parlightning.ppo.module import PPOModule\nPPOModule(target_kl=float('nan'))\n",
    "target_kl")
api("api-cartpole-env-on-the-meta-device", "from parlightning.envs import CartPoleEnv\nCartPoleEnv(4, device='meta').reset()\n",
    "device")
api("api-load-policy-of-a-file-edited-without-a-new-stamp",
    f"import torch, parlightning\nc = torch.load('{CK}', weights_only=False)\nc['hyper_parameters']['lr'] = 0.5\n"
    "torch.save(c, 'e.ckpt')\nparlightning.load_policy('e.ckpt')\n", ("e.ckpt|checksum|edited",), allow=(r"^e\.ckpt$",))

api("api-actor-critic-observation-shape-with-a-zero", "from parlightning.policies.actor_critic import ActorCritic\n"
    "from parlightning.envs.base import ActionSpec\nActorCritic((0, 6), ActionSpec('discrete', nvec=(3,)))\n", "observation_shape")
api("api-actor-critic-activation-softmax", "from parlightning.policies.actor_critic import ActorCritic\n"
    "from parlightning.envs.base import ActionSpec\nActorCritic((4,), ActionSpec('discrete', nvec=(3,)), activation='softmax')\n",
    "activation")
api("api-sfl-refresh-episodes-a-fraction", "from parlightning.distribution.samplers import SamplingForLearnability\n"
    "SamplingForLearnability(refresh_episodes=0.5)\n", "refresh_episodes")
api("api-compute-gae-lambda-nan", "import torch\nfrom parlightning.buffer import compute_gae\nz = torch.zeros(4, 2)\n"
    "compute_gae(z, z, z.bool(), z.bool(), z, torch.zeros(2), gamma=0.99, gae_lambda=float('nan'))\n", "gae_lambda")
api("api-cosine-schedule-start-inf", "from parlightning.parl.reward import CosineSchedule\nCosineSchedule(start=float('inf'))\n",
    "start")
api("api-parl-reward-max-subagents-beyond-int64", "from parlightning.parl.reward import PARLReward\nPARLReward(2 ** 70)\n",
    "max_subagents")
api("api-async-http-pool-retries-true", "from parlightning.subagents import AsyncHTTPPool\n"
    "AsyncHTTPPool(base_url='http://127.0.0.1:9/v1', retries=True, probe=False)\n", "retries")
api("api-simulated-pool-spawn-steps-true", "from parlightning.subagents import SimulatedPool\nSimulatedPool(spawn_steps=True)\n",
    "spawn_steps")

api("api-actor-critic-hidden-sizes-with-a-zero", "from parlightning.policies.actor_critic import ActorCritic\n"
    "from parlightning.envs.base import ActionSpec\nActorCritic((4,), ActionSpec('discrete', nvec=(3,)), hidden_sizes=(64, 0))\n",
    "hidden_sizes")
api("api-action-spec-multi-discrete-without-dimensions", "from parlightning.envs.base import ActionSpec\n"
    "ActionSpec('multi_discrete', nvec=())\n", "nvec")

# ---------------------------------------------------------------- controls (must succeed)
def control(name: str, kind: str, args: Any, **kw: Any) -> None:
    case(name, "control", kind, args, control=True, timeout=kw.pop("timeout", 120), **kw)


control("control-tiny-swarm-run", "fit", TINY)
control("control-user-world-w18", "fit", UWF)
control("control-user-world-w18-under-a-collector-process", "fit", UWF + PROCC + ["--trainer.max_epochs", "2"])
control("control-external-world", "fit", EXTC)
control("control-external-world-bool-observations", "fit", EXTC + ["--config", "c.yaml"],
        files={"c.yaml": env_yaml("{" + EXT_BASE.format(cls="ExtObsBoolList") + "}")})
control("control-pool-world", "fit", POOLC)
control("control-process-fn-ignores-sigterm-and-hangs-past-its-timeout", "fit", POOLC + ["--config", "p.yaml"],
        files={"p.yaml": pool_yaml(proc_pool("r18fns:fn_ignores_term_and_hangs", ", on_error: fail").replace(
            "timeout: 20", "timeout: 3"))}, timeout=180)
control("control-resume-stamped-identity", "fit", TINY + RESUME2 + ["--ckpt_path", "c.ckpt"],
        files={"c.ckpt": "fixture:st_identity.ckpt"})
control("control-resume-stamped-with-a-top-level-note", "fit", TINY + RESUME2 + ["--ckpt_path", "c.ckpt"],
        files={"c.ckpt": "fixture:st_top_level_note.ckpt"})
control("control-export-swarm", "export", ["--ckpt_path", "s.ckpt", "--out", "p.pt2"], files=S)
control("control-evaluate-swarm-checkpoint", "evaluate", ["--config", "swarm", "--ckpt_path", "s.ckpt", "--episodes", "1",
                                                          "--json", "e.json"], files=S)
control("control-bc-serial", "bc", ["--config", "swarm", "--teacher", "serial"] + BCA)
control("control-plot-run0", "plot", ["run0", "--csv", "c.csv", "--out", "c.png"], files=RUN0)
control("control-fit-api-overrides-a-tuple", "py",
        "from parlightning import fit\nfit(config='swarm', overrides=('trainer.max_epochs=1', 'data.num_envs=8', "
        "'data.num_steps=8', 'trainer.enable_progress_bar=false'))\n")
control("control-load-policy-predict-numpy-float64", "py", LP + "a = p.predict(np.zeros((2, 13, 6)))\nassert a.shape == (2, 12)\n")
control("control-callback-stops-after-one-iteration", "fit", TINY + ["--trainer.max_epochs", "5"] + ADD + ["r18user.StopAtOnce"])
control("control-async-checkpoint-io-plugin", "fit", TINY + ["--trainer.plugins",
        "lightning.pytorch.plugins.io.AsyncCheckpointIO"])
control("control-ddp-two-ranks-user-world", "cmd", [PY] + M + DDPW, timeout=180)

CASES = B.cases

# Cases judged valid input or ambiguous after the draft run: name -> reason (not counted).
DROPPED: dict[str, str] = {
    'cfg-reload-dataloaders-every-two-epochs': 'it trained 2 iterations: the README says the rollout is collected when the loader is iterated, so Lightning keeping the loader object for 2 epochs need not reuse a rollout; not shown wrong (not verified further), ambiguous',
    'cfg-swarm-max-cost-one-billion': 'it trained: a huge but finite subtask size is a legal world parameter (episodes end at the round cap); valid',
    'cfg-external-world-workers-above-num-envs': "it trained: the external-worlds guide says workers run 'at most one per actor', a documented cap; valid",
    'lightning-csv-logger-prefix-with-a-slash': "it trained: CSVLogger's prefix only prefixes column names, where a slash is legal; valid",
    'lightning-logger-version-with-a-slash': "it trained: a version string with '..' is a path the user chose; Lightning documents version as a folder name; ambiguous",
    'lightning-precision-16-mixed-on-cpu': 'it trained: torch autocast supports float16 on the CPU and Lightning accepts 16-mixed there; valid',
    'lightning-gradient-clip-algorithm-value-beside-max-grad-norm': "it trained: clipping by value in the trainer besides the module's norm clip is two legal settings applied together; ambiguous",
    'ckpt-stamped-init-from-a-missing-file-resumed': 'it resumed: init_from is read only at a fresh start, so an edited value is never used on resume; valid',
    'ckpt-stamped-prior-two-resumed': 'it resumed: the prior only sets the initial bias, which resume replaces with the saved weights; the saved value is unused',
    'ckpt-stamped-prior-two-loaded-as-a-policy': 'it loaded: load_policy restores the saved weights, so the prior (an initialisation setting) is unused; ambiguous',
    'ckpt-stamped-lr-negative-resumed': "it resumed: a resumed fit builds the module from the command's config (lr 0.001), not from the saved hyper_parameters; the edited value is unused",
    'ckpt-stamped-hparams-name-config': 'it resumed: as ckpt-stamped-lr-negative-resumed, the saved hyper-parameter metadata is not used on resume; valid',
    'ckpt-stamped-spaces-obs-shape-other-evaluated': "it scored: evaluate builds the policy from --config's world and loads the weights, which fit; the unused policy_spaces entry changes nothing there",
    'ckpt-stamped-data-module-ranks-empty-evaluated': "it scored: evaluate reads only the weights, not the data module's per-rank state; valid",
    'ckpt-stamped-checkpoint-dirpath-in-proc': "it resumed: Lightning's ModelCheckpoint ignores a saved dirpath that differs from the current one (by design, with a warning); valid",
    'eval-gantt-without-png-suffix': 'it wrote the chart: matplotlib writes SVG by the suffix; valid',
    'eval-config-with-a-trainer-section-only': 'it scored: a config without data.env means the default world (SwarmEnv), and evaluate ignores trainer; valid',
    'plot-smooth-larger-than-the-run': 'it plotted: a trailing average over more points than there are is the mean of those there are; a reasonable reading',
    'world-turns-grad-mode-off': 'it trained: the step loop runs the world under inference mode and the update restored grad mode; harmless here',
    'world-changes-the-working-folder': "it trained and wrote its run: a world changing the process's working folder is its own choice; ambiguous",
    'world-observation-shape-a-list': 'it trained: a list [4] read as the tuple (4,) is a lenient, unambiguous reading',
    'world-turns-on-deterministic-algorithms': 'it trained: deterministic mode on the CPU changes nothing the run uses; harmless',
    'world-sets-eight-torch-threads': 'it trained: a thread count changes speed only; harmless',
    'pool-process-fn-forks-a-grandchild-and-returns': "it trained; the grandchild the user's function forked outlives the call by the function's design, not the package's; ambiguous (and the case would leave a sleeping process behind)",
    'user-callback-tears-down-the-data-module-mid-run': 'it trained 3 iterations: the reliability guide documents that after teardown the data module builds fresh worlds; valid',
    'api-predict-with-an-all-false-mask': "it answered: SwarmEnv's mask is one flag per slot and an all-false mask means no pending slot (each takes action 0, documented); valid",
    'api-verify-checkpoint-path-not-a-string': 'it returned: the path argument only labels messages; harmless',
    'api-predict-a-float-numpy-mask': 'it answered: a 0/1 float mask read as bool is a lenient, unambiguous reading',
    'api-simulated-pool-wait-negative-timeout': "it returned: a negative wait is 'do not wait', a common reading; ambiguous",
    'api-parl-reward-bonus-completed-above-assigned': 'it answered: the worlds guide defines r_finish as clamp(completed / assigned, 0, 1), so the value is clamped by definition; valid',
    'api-write-trace-record-with-nan': "it wrote: Python's json writes NaN and pandas reads it; a missing outcome as NaN is a legal trace value; ambiguous",
    'ckpt-stamped-adam-exp-avg-float16': "it resumed: torch's Optimizer.load_state_dict casts floating-point state to its parameter's dtype, so a float16 moment loads as float32; valid",
    'ckpt-stamped-num-envs-a-float': "it resumed: 8.0 equals the run's 8 actors; valid",
    'user-callback-adds-an-optimizer-param-group': 'it trained: a callback adding a parameter group is a legal optimizer change, and a resume with the same callback may match it; ambiguous',
    'api-predict-generator-on-the-meta-device': "dropped by the fixer after the before run: on torch 2.13 torch.Generator(device='meta') itself raises 'META device type not an accelerator.' in the case's own line, before predict is called, so the package is never reached (a CPU policy given a generator on another device is refused by predict since round 18's fixes)",
    'cfg-critical-steps-monitor-on-a-world-without-episode-parts': 'it trained: a monitor that finds no episode parts logs nothing; harmless',
}

VALID = [c for c in CASES if c.name in DROPPED]
CASES = [c for c in CASES if c.name not in DROPPED]


def main(argv: Any = None) -> int:
    return r5.run_corpus(argv, round_no=18, description=__doc__.split("\n\n")[0], cases_all=CASES, valid=VALID,
                         dropped=DROPPED, make_fixtures=make_fixtures)


if __name__ == "__main__":
    sys.exit(main())
