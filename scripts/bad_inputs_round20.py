#!/usr/bin/env python
"""Round 20 of the bad-input corpus: a fresh set of bad inputs and faults, written blind from the
README, `docs/README.md`, `docs/guides/*.md` (the reliability guide's promises table only),
`configs/` (and `parlightning/configs/`), the example callbacks, every CLI's and script's `--help`,
`--print_config`, the key layout of a checkpoint a short fit wrote, and the signatures and
docstrings of the public classes and functions (read through `inspect.signature` /
`inspect.getdoc`, not by opening the package's files); its author read neither `tests/`, nor the
package's source, nor the earlier rounds' cases, outputs or fixes, nor the git log or the changelog
(the case names of rounds 4-19 and of `scripts/bad_inputs.py` / `scripts/bad_inputs_fresh.py` were
listed with `--list` only, and every case whose name or idea matched one of them was removed;
round 5's harness and round 19's preamble, fixture builder, helpers, controls and `main()` were
read to copy the harness and the file's shape).

New kinds of input, or old kinds through a new door:
- configs and overrides: a hex float (`0x1p-10`), full-width digits, a word for a bool, an empty
  activation name, a capitalised activation, an empty hidden-size list, a URL as `--config`, a
  JSON list as a config, a YAML scalar, an undefined YAML alias, a misspelt top-level section,
  SwarmEnv arguments of new kinds (`splits [0]`, a family given as one string, a family repeated,
  `round_cap` unknown, `family_tasks` negative), NormalizeEnv's bounds, PPO counts (`update_epochs
  0`, more minibatches than rows, `bptt_len` past the rollout), `actors_in_flight` above the actors;
- Lightning pieces: `max_time` in words, precision `8-mixed`, clip value and algorithm, zero devices
  and nodes, `overfit_batches` above one, a TPU accelerator, ModelCheckpoint's `save_top_k -2`, a
  filename with a bad format spec, `train_time_interval` in words, EarlyStopping's mode, LR
  monitor's interval, SWA's negative lr, a Timer of "forever", a CSV logger on a file, a logger
  class path in the wrong case, a logger that is not installed;
- checkpoints edited and re-stamped with `stamp_checkpoint`: a bias given a second axis, one inf
  weight, renamed modules, Adam's second moment negative, its step negative, betas above one, no
  parameter groups, optimizer states as a dict, a scheduler state without a scheduler, bf16 moments,
  PARLAnnealing's position negative and beyond any run, the planner's episode table halved and its
  round count negative, the loops' epoch far ahead and a negative batch count, the data module's
  env-step count negative, actor count other, round index a word, no per-rank part, the saved
  observation one row short, the RNG a word, the reward's position negative; hyper-parameters with
  an unknown activation, a negative lr, an unknown key, hidden sizes as text; policy_spaces with an
  unknown kind, a negative mask width, an extra observation axis, other category counts; the env
  signature of another observation shape or class; NormalizeEnv statistics with a negative
  variance, a mean of another shape, a NaN count; a future Lightning version, a global step beyond
  64 bits, a fractional epoch; callbacks' states that are a list — through resume, export,
  `load_policy`, evaluate, bc's teacher and `PPOModule.load_from_checkpoint`;
- evaluate / export / bc / plot / tune: a missing output folder, a CUDA device on a CPU machine, the
  optimal oracle on CartPole, `--gantt` to a text file, a checkpoint as `--config`, `--format` that
  disagrees with `--out`, `/proc` as output, a `.pt2` as checkpoint, zero rounds / minibatch / lr,
  a teacher spelt with a capital, bc's `--json` onto its `--out`, plot groups with an empty name or
  pattern, an unknown tag, a file as a run, one grid point, tune overrides without `=`;
- user tensor worlds: `observation_shape` a string, `action_spec` None, a step returning None,
  `final_obs` None, `truncated` None, complex rewards, float64 observations later, meta-device
  observations later, rows that drop later, a world that claims CUDA, 10^12 categories, a reset
  that raises KeyError, a reset without keyword arguments, a step that needs a third argument,
  NaN in the first reset, a step that sleeps past the stall timeout;
- external worlds: a step returning None, bytes as an observation, a reward array of two, an int
  flag, reset returning (obs, info), a float observation shape, a task bank holding None, a step
  that calls `sys.exit`, an action_spec that is a dict, observations beyond float32, a constructor
  that raises; init_args `step_timeout 0`, negative workers, unknown `on_error` / `runner`,
  `drop_budget 2`, a negative switch interval, an empty task list, a missing world, an unknown
  world kwarg;
- subagent pools: SimulatedPool given a word, a fraction of steps, a negative seed; ProcessPool with
  a missing function, a module without `:`, zero workers, zero timeout, a function returning None,
  a success that is a word, one that raises; HTTPPool with a URL without scheme;
- user code: callbacks that raise in setup / on_train_batch_end / teardown / on_train_end / their
  constructor / on_episodes_end, set the data module's `num_steps` to 0 at fit start, remove the
  policy at epoch start, make every gradient NaN before the optimizer step, empty the trainer's
  optimizers at epoch end, drop or poison the checkpoint's state_dict while saving, keep a set as
  state, write an lr that is a string, freeze the policy, swap the sampler for a string; samplers
  that return bytes, a key with a trailing space, raise in their second pick, take no arguments,
  hold a lambda as state; schedules that return NaN or a tensor of two; loggers whose `name` raises,
  whose `log_metrics` writes NaN-typed garbage;
- the Python API: `load_policy` of a folder, to the meta device, to device 3; `predict` with axes
  swapped, integer obs, a mask of another width, a numpy RandomState as generator, a word for
  deterministic, inf obs; `fit` with an override without value, tuple overrides, a number as
  config; constructors of PPOModule, RolloutDataModule, SwarmEnv, NormalizeEnv,
  ExternalBatchedEnv, LinearSchedule, PARLReward, SimulatedPool, ProcessPool with new wrong values;
  `compute_gae`, `ppo_loss`, `stage_critical_steps`, `stamp_checkpoint`, `read_scalars`,
  `export_policy` with bad arguments;
- the filesystem (`unshare -rm`): fit's `default_root_dir` on a full tmpfs, fit run from a read-only
  working folder, a ModelCheckpoint dirpath on a read-only mount, export's `--out` on a full tmpfs,
  evaluate's `--gantt` and bc's `--json` on a read-only mount, plot's `--csv` on a full tmpfs;
- signals at new moments: SIGTERM in the training world's second reset, SIGINT during the optimizer
  step, SIGHUP in a callback's setup, SIGUSR2 in evaluate's world constructor, SIGTERM in bc's
  teacher rollout, two SIGINTs in a rollout, SIGALRM during teardown;
- 2-rank gloo faults via the real CLI (rank 1's callback raising at epoch end, rank 1's reward of
  another shape later) and a 2-rank control;
- the scripts with arguments of new kinds.

    python scripts/bad_inputs_round20.py                # every case; writes docs/results/data/bad_inputs_round20-<tag>.txt
    python scripts/bad_inputs_round20.py --tag draft    # the same, into ...-draft.txt
    python scripts/bad_inputs_round20.py --only NAME... # the cases whose name contains any NAME
    python scripts/bad_inputs_round20.py --list         # the cases, one per line

The harness is round 5's (`scripts/bad_inputs_round5.py`: `Case`, `CaseBook`, `run_case`,
`run_corpus`), imported, not copied: a case per forked process and folder (the scripts, signals,
DDP and mount cases as `cmd`, a fresh interpreter); outcome classes clean / traceback / misleading /
messy / accepted / hang / crash. A case is **clean** when it exits non-zero with exactly one
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
WORLDS = r'''
"""Round 20's tensor worlds: W20 is correct; each other class is wrong in one way."""
import os
import time

import torch
from parlightning.envs.base import ActionSpec, BatchedEnv, EpisodeParts, StepResult


def mark():
    with open(os.environ.get("R20_MARK", "mark"), "w") as fh:
        fh.write("x")


def rank():
    return int(os.environ.get("LOCAL_RANK", "0"))


class W20(BatchedEnv):
    """Correct: 4 features, 3 actions, 5-step episodes, reward 1 for action 1."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.observation_shape = (4,)
        self.action_spec = ActionSpec("discrete", nvec=(3,))
        self.t = torch.zeros(num_envs, dtype=torch.long)
        self.calls = 0
        self.resets = 0

    def _obs(self):
        n = self.num_envs
        return torch.stack([self.t.float() / 5, torch.ones(n), torch.zeros(n), torch.zeros(n)], 1)

    def reset(self, *, seed=None, task_index=None):
        self.resets += 1
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


class ObsShapeText(W20):
    """observation_shape is the string '4'."""

    def __init__(self, num_envs, device="cpu", seed=0):
        super().__init__(num_envs, device, seed)
        self.observation_shape = "4"


class SpecNone(W20):
    """action_spec is None."""

    def __init__(self, num_envs, device="cpu", seed=0):
        super().__init__(num_envs, device, seed)
        self.action_spec = None


class StepNone(W20):
    """step returns None."""

    def step(self, action, next_task=None):
        super().step(action, next_task)
        return None


class FinalObsNone(W20):
    """final_obs is None."""

    def step(self, action, next_task=None):
        return super().step(action, next_task)._replace(final_obs=None)


class TruncatedNone(W20):
    """truncated is None."""

    def step(self, action, next_task=None):
        return super().step(action, next_task)._replace(truncated=None)


class RewardComplex(W20):
    """reward is a complex tensor."""

    def step(self, action, next_task=None):
        r = super().step(action, next_task)
        return r._replace(reward=r.reward.to(torch.complex64))


class ObsDoubleLater(W20):
    """from the 3rd step observations are float64."""

    def _obs(self):
        o = super()._obs()
        return o.double() if self.calls >= 2 else o


class ObsMetaLater(W20):
    """from the 3rd step observations are on the meta device."""

    def _obs(self):
        o = super()._obs()
        return o.to("meta") if self.calls >= 2 else o


class RowsDropLater(W20):
    """from the 3rd step observations have N - 2 rows."""

    def _obs(self):
        o = super()._obs()
        return o[:-2] if self.calls >= 2 else o


class ClaimsCuda(W20):
    """device attribute says cuda:0 on a machine without CUDA; tensors are on the CPU."""

    def __init__(self, num_envs, device="cpu", seed=0):
        super().__init__(num_envs, device, seed)
        self.device = torch.device("cuda:0")


class TrillionActions(W20):
    """ActionSpec nvec=(10**12,)."""

    def __init__(self, num_envs, device="cpu", seed=0):
        super().__init__(num_envs, device, seed)
        self.action_spec = ActionSpec("discrete", nvec=(10 ** 12,))


class ResetKeyError(W20):
    """reset raises KeyError (a missing map file)."""

    def reset(self, *, seed=None, task_index=None):
        raise KeyError("map_07.json")


class ResetPositionalOnly(W20):
    """reset takes no keyword arguments."""

    def reset(self):
        self.t.zero_()
        return self._obs()


class StepNeedsThird(W20):
    """step requires a third argument."""

    def step(self, action, next_task, budget):
        return super().step(action, next_task)


class ResetNaN(W20):
    """the first reset's observations hold NaN."""

    def reset(self, *, seed=None, task_index=None):
        o = super().reset(seed=seed, task_index=task_index)
        o[0, 0] = float("nan")
        return o


class StepSleeps(W20):
    """from the 3rd step, step sleeps 600 s (a simulator that never answers)."""

    def step(self, action, next_task=None):
        if self.calls >= 2:
            time.sleep(600)
        return super().step(action, next_task)


class MarkSecondReset(W20):
    """Correct, but writes the marker and sleeps 3 s in the second reset of the process (the training world's first, after the probe's)."""

    total = 0

    def reset(self, *, seed=None, task_index=None):
        MarkSecondReset.total += 1
        if MarkSecondReset.total >= 2:
            mark()
            time.sleep(3)
        return super().reset(seed=seed, task_index=task_index)


class MarkInInitEval(W20):
    """Correct, but writes the marker and sleeps 3 s in its constructor."""

    def __init__(self, num_envs, device="cpu", seed=0):
        super().__init__(num_envs, device, seed)
        mark()
        time.sleep(3)


class MarkAtStep(W20):
    """Correct, but from its 4th step writes the marker and sleeps 50 ms per step."""

    def step(self, action, next_task=None):
        if self.calls >= 3:
            mark()
            time.sleep(0.05)
        return super().step(action, next_task)


class Rank1RewardShapeLater(W20):
    """rank 1's reward is [N, 2] from its 3rd step."""

    def step(self, action, next_task=None):
        r = super().step(action, next_task)
        if rank() == 1 and self.calls >= 3:
            return r._replace(reward=torch.zeros(self.num_envs, 2))
        return r
'''

EXT = r'''
"""Round 20's external worlds: Good is correct; each other class is wrong in one way."""
import sys

import numpy as np
from parlightning.envs.base import ActionSpec


class Good:
    """Correct: 3 features, 2 actions, 3-step episodes."""

    observation_shape = (3,)
    action_spec = ActionSpec("discrete", nvec=(2,))

    def __init__(self, **kw):
        self.t = 0

    def reset(self, task):
        self.t = 0
        return np.zeros(3, dtype=np.float32)

    def step(self, action):
        self.t += 1
        done = self.t >= 3
        return np.full(3, self.t / 3, dtype=np.float32), float(int(action) == 1), done, False, None


class StepNone(Good):
    """step returns None."""

    def step(self, action):
        super().step(action)
        return None


class ObsBytes(Good):
    """step's observation is bytes."""

    def step(self, action):
        obs, r, te, tr, p = super().step(action)
        return b"\x00\x01\x02", r, te, tr, p


class RewardPair(Good):
    """step's reward is a numpy array of two values."""

    def step(self, action):
        obs, r, te, tr, p = super().step(action)
        return obs, np.array([r, r]), te, tr, p


class TerminatedTwo(Good):
    """terminated is the int 2."""

    def step(self, action):
        obs, r, te, tr, p = super().step(action)
        return obs, r, 2 if te else 0, tr, p


class ResetObsInfo(Good):
    """reset returns (obs, info) (Gymnasium's shape)."""

    def reset(self, task):
        return super().reset(task), {"seed": 0}


class ShapeFloat(Good):
    """observation_shape is (3.0,)."""

    observation_shape = (3.0,)


class TasksWithNone(Good):
    """the task bank holds None."""

    tasks = ["easy-0", None, "hard-0"]


class StepSysExit(Good):
    """step calls sys.exit(3) at its 2nd call."""

    def step(self, action):
        if self.t >= 1:
            sys.exit(3)
        return super().step(action)


class SpecDict(Good):
    """action_spec is a dict."""

    action_spec = {"kind": "discrete", "nvec": [2]}


class ObsBeyondFloat32(Good):
    """observations are 1e39 (beyond float32: inf once cast)."""

    def step(self, action):
        obs, r, te, tr, p = super().step(action)
        return np.full(3, 1e39, dtype=np.float64), r, te, tr, p


class CtorRaises(Good):
    """the constructor raises (a licence server refused)."""

    def __init__(self, **kw):
        raise PermissionError("licence server refused seat 3")
'''

USER = r'''
"""Round 20's user code: each class is wrong in one way (its docstring says how), except those marked correct."""
import os
import time

import lightning
import torch
from lightning.pytorch.loggers import Logger
from parlightning.callbacks import RolloutCallback
from parlightning.parl.reward import LinearSchedule


def mark():
    with open(os.environ.get("R20_MARK", "mark"), "w") as fh:
        fh.write("x")


def rank():
    return int(os.environ.get("LOCAL_RANK", "0"))


class R20SetupRaises(lightning.Callback):
    """setup raises."""

    def setup(self, trainer, pl_module, stage):
        raise ValueError("R20SetupRaises: cannot open the results database")


class R20FitStartZeroSteps(lightning.Callback):
    """on_fit_start sets the data module's num_steps to 0."""

    def on_fit_start(self, trainer, pl_module):
        trainer.datamodule.num_steps = 0


class R20EpochStartDropsPolicy(lightning.Callback):
    """on_train_epoch_start sets the policy to None."""

    def on_train_epoch_start(self, trainer, pl_module):
        pl_module.policy = None


class R20NaNGrads(lightning.Callback):
    """on_before_optimizer_step fills every gradient with NaN."""

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        for p in pl_module.parameters():
            if p.grad is not None:
                p.grad.fill_(float("nan"))


class R20BatchEndRaises(lightning.Callback):
    """on_train_batch_end raises at the 2nd batch."""

    n = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        R20BatchEndRaises.n += 1
        if R20BatchEndRaises.n >= 2:
            raise RuntimeError("R20BatchEndRaises: metrics sink closed")


class R20EpochEndNoOptimizers(lightning.Callback):
    """on_train_epoch_start empties the trainer's optimizers."""

    def on_train_epoch_start(self, trainer, pl_module):
        trainer.optimizers = []


class R20EpisodesEndRaises(RolloutCallback):
    """on_episodes_end raises."""

    def on_episodes_end(self, trainer, pl_module, task_ids, parts):
        raise LookupError("R20EpisodesEndRaises: no such leaderboard")


class R20SaveDropsStateDict(lightning.Callback):
    """on_save_checkpoint removes the checkpoint's state_dict."""

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        checkpoint.pop("state_dict", None)


class R20SavePoisonsWeights(lightning.Callback):
    """on_save_checkpoint replaces every saved weight with NaN."""

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        sd = checkpoint["state_dict"]
        for k in list(sd):
            sd[k] = torch.full_like(sd[k], float("nan"))


class R20StateSet(lightning.Callback):
    """state_dict returns a set."""

    def state_dict(self):
        return {"seen": {1, 2, 3}}


class R20TrainEndRaises(lightning.Callback):
    """on_train_end raises."""

    def on_train_end(self, trainer, pl_module):
        raise OSError("R20TrainEndRaises: upload failed")


class R20TeardownRaises(lightning.Callback):
    """teardown raises."""

    def teardown(self, trainer, pl_module, stage):
        raise RuntimeError("R20TeardownRaises: lock file busy")


class R20LrString(lightning.Callback):
    """on_train_start writes the lr as the string '0.001'."""

    def on_train_start(self, trainer, pl_module):
        for opt in trainer.optimizers:
            for g in opt.param_groups:
                g["lr"] = "0.001"


class R20CtorRaises(lightning.Callback):
    """the constructor raises."""

    def __init__(self, level: int = 1):
        raise ValueError("R20CtorRaises: level must be set in the environment")


class R20FreezePolicy(lightning.Callback):
    """on_train_start freezes every parameter (requires_grad False)."""

    def on_train_start(self, trainer, pl_module):
        for p in pl_module.parameters():
            p.requires_grad_(False)


class R20SamplerString(lightning.Callback):
    """on_fit_start replaces the data module's sampler with a string."""

    def on_fit_start(self, trainer, pl_module):
        trainer.datamodule.sampler = "round_robin"


class MarkInSetup(lightning.Callback):
    """Correct, but writes the marker and sleeps 3 s in setup."""

    def setup(self, trainer, pl_module, stage):
        mark()
        time.sleep(3)


class MarkOnOptimizerStep(lightning.Callback):
    """Correct, but writes the marker and sleeps 3 s before the 2nd optimizer step."""

    n = 0

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        MarkOnOptimizerStep.n += 1
        if MarkOnOptimizerStep.n == 2:
            mark()
            time.sleep(3)


class MarkInTeardown(lightning.Callback):
    """Correct, but writes the marker and sleeps 3 s in teardown."""

    def teardown(self, trainer, pl_module, stage):
        mark()
        time.sleep(3)


class Rank1EpochEndRaises(lightning.Callback):
    """rank 1's on_train_epoch_end raises."""

    def on_train_epoch_end(self, trainer, pl_module):
        if rank() == 1:
            raise RuntimeError("rank 1 epoch-end hook failed")


class GoodCallback(lightning.Callback):
    """Correct: counts epochs."""

    def __init__(self):
        self.epochs = 0

    def on_train_epoch_end(self, trainer, pl_module):
        self.epochs += 1


class GoodSampler:
    """Correct: the first key, every time."""

    def pick(self, keys, round_index):
        return keys[0]

    def record(self, task_id, score):
        pass


class PickBytes(GoodSampler):
    """pick returns the key as bytes."""

    def pick(self, keys, round_index):
        return str(keys[0]).encode()


class PickTrailingSpace(GoodSampler):
    """pick returns the key with a trailing space."""

    def pick(self, keys, round_index):
        return str(keys[0]) + " "


class PickRaisesLater(GoodSampler):
    """pick raises from its 3rd call."""

    n = 0

    def pick(self, keys, round_index):
        PickRaisesLater.n += 1
        if PickRaisesLater.n >= 3:
            raise IndexError("PickRaisesLater: shard exhausted")
        return keys[0]


class PickNoArgs(GoodSampler):
    """pick takes no arguments."""

    def pick(self):
        return "easy-0"


class SamplerLambdaState(GoodSampler):
    """state_dict holds a lambda."""

    def state_dict(self):
        return {"weight": lambda k: 1.0}

    def load_state_dict(self, state):
        pass


class NaNSchedule(LinearSchedule):
    """value returns NaN."""

    def value(self, *args, **kwargs):
        return float("nan")


class PairSchedule(LinearSchedule):
    """value returns a tensor of two values."""

    def value(self, *args, **kwargs):
        return torch.tensor([0.1, 0.2])


class NameRaisesLogger(Logger):
    """name is a property that raises."""

    @property
    def name(self):
        raise RuntimeError("NameRaisesLogger: no project configured")

    @property
    def version(self):
        return 0

    def log_hyperparams(self, params, *args, **kwargs):
        pass

    def log_metrics(self, metrics, step=None):
        pass


class LogMetricsTypeError(Logger):
    """log_metrics raises TypeError on its first call (a float it cannot serialise)."""

    @property
    def name(self):
        return "r20"

    @property
    def version(self):
        return 0

    def log_hyperparams(self, params, *args, **kwargs):
        pass

    def log_metrics(self, metrics, step=None):
        raise TypeError("LogMetricsTypeError: Object of type Tensor is not JSON serializable")


NOT_CALLABLE = 42
'''

FNS = r'''
"""Round 20's subagent functions."""


def good(instruction):
    """Correct."""
    return {"success": True, "steps": 2}


def returns_none(instruction):
    """returns None."""
    return None


def success_word(instruction):
    """success is the word 'yes'."""
    return {"success": "yes", "steps": 1}


def raises(instruction):
    """raises."""
    raise ConnectionResetError("R20 subagent backend reset the connection")
'''

DRIVE = r'''
"""r20drive MARK SIGNALS WAIT -- ARGV: run ARGV, wait for the file MARK (at most WAIT s), send each
signal (comma-separated names) 0.3 s apart, and end as ARGV ended (a signal death re-raised)."""
import os
import signal
import subprocess
import sys
import time

marker, sigs, wait = sys.argv[1], sys.argv[2], float(sys.argv[3])
argv = sys.argv[sys.argv.index("--") + 1:]
p = subprocess.Popen(argv)
t0 = time.time()
while not os.path.exists(marker) and p.poll() is None and time.time() - t0 < wait:
    time.sleep(0.05)
if p.poll() is None:
    for s in sigs.split(","):
        p.send_signal(getattr(signal, s))
        time.sleep(0.3)
rc = p.wait()
try:
    os.remove(marker)
except OSError:
    pass
if rc < 0:
    signal.signal(-rc, signal.SIG_DFL)
    os.kill(os.getpid(), -rc)
sys.exit(rc)
'''

EDITS = r'''
"""Round 20's checkpoint edits: each loads a fixture checkpoint, changes one thing, re-stamps it and saves it."""
import copy

import torch
from parlightning.runtime.checkpoint import stamp_checkpoint

BASE = torch.load("swarm.ckpt", map_location="cpu", weights_only=False)
NORM = torch.load("norm.ckpt", map_location="cpu", weights_only=False)


def save(name, edit, base=BASE):
    c = copy.deepcopy(base)
    edit(c)
    torch.save(stamp_checkpoint(c), name)


def sd(c):
    return c["state_dict"]


def adam(c):
    return c["optimizer_states"][0]


def first_state(c):
    return next(iter(adam(c)["state"].values()))


def cb(c, part):
    return c["callbacks"][next(k for k in c["callbacks"] if part in k)]


def dm(c):
    return c["RolloutDataModule"]


def obs_rms(c):
    return dm(c)["ranks"][0]["env"]["obs_rms"]


def set_(d, k, v):
    d[k] = v


def first_float(d):
    return next(k for k, v in d.items() if isinstance(v, torch.Tensor) and v.is_floating_point())


save("st_bias_two_axes.ckpt", lambda c: set_(sd(c), "policy.actor.4.bias", sd(c)["policy.actor.4.bias"][:, None].clone()))
save("st_one_inf_weight.ckpt", lambda c: sd(c)["policy.critic.2.weight"].__setitem__((0, 0), float("inf")))
save("st_modules_renamed.ckpt", lambda c: set_(c, "state_dict", {k.replace("policy.actor.", "policy.pi."): v for k, v in sd(c).items()}))
save("st_adam_sq_negative.ckpt", lambda c: first_state(c)["exp_avg_sq"].fill_(-1.0))
save("st_adam_step_negative.ckpt", lambda c: set_(first_state(c), "step", torch.tensor(-5.0)))
save("st_adam_betas_above_one.ckpt", lambda c: [set_(g, "betas", (1.5, 0.999)) for g in adam(c)["param_groups"]])
save("st_adam_no_groups.ckpt", lambda c: set_(adam(c), "param_groups", []))
save("st_optimizer_states_dict.ckpt", lambda c: set_(c, "optimizer_states", {"adam": adam(c)}))
save("st_scheduler_without_scheduler.ckpt", lambda c: set_(c, "lr_schedulers", [{"last_epoch": 3, "_step_count": 4, "base_lrs": [0.001]}]))
save("st_adam_moments_bf16.ckpt", lambda c: [set_(s, "exp_avg", s["exp_avg"].bfloat16()) for s in adam(c)["state"].values()])
save("st_annealing_position_negative.ckpt", lambda c: set_(cb(c, "PARLAnnealing"), "position", -100))
save("st_annealing_position_huge.ckpt", lambda c: set_(cb(c, "PARLAnnealing"), "position", 10 ** 30))
save("st_planner_episodes_halved.ckpt", lambda c: set_(c["StrategyPlanner"], "episodes", c["StrategyPlanner"]["episodes"][:32].clone()))
save("st_planner_rounds_negative.ckpt", lambda c: set_(c["StrategyPlanner"], "rounds", -1))
save("st_loops_epoch_far_ahead.ckpt", lambda c: [set_(c["loops"]["fit_loop"]["epoch_progress"][p], k, 100) for p in ("total", "current") for k in ("ready", "completed", "started", "processed")])
save("st_loops_batches_negative.ckpt", lambda c: [set_(c["loops"]["fit_loop"]["epoch_loop.batch_progress"][p], k, -5) for p in ("total", "current") for k in ("ready", "completed", "started", "processed")])
save("st_dm_env_steps_negative.ckpt", lambda c: set_(dm(c), "env_steps", -64))
save("st_dm_num_envs_other.ckpt", lambda c: set_(dm(c), "num_envs", 9999))
save("st_dm_round_index_word.ckpt", lambda c: set_(dm(c), "round_index", "one"))
save("st_dm_ranks_empty.ckpt", lambda c: set_(dm(c), "ranks", []))
save("st_dm_obs_row_short.ckpt", lambda c: set_(dm(c)["ranks"][0], "obs", dm(c)["ranks"][0]["obs"][:-1].clone()))
save("st_dm_rng_word.ckpt", lambda c: set_(dm(c)["ranks"][0], "rng", "seed-0"))
save("st_dm_reward_position_negative.ckpt", lambda c: set_(dm(c)["reward"], "position", -1))
save("st_hp_activation_unknown.ckpt", lambda c: set_(c["hyper_parameters"], "activation", "swish2"))
save("st_hp_lr_negative.ckpt", lambda c: set_(c["hyper_parameters"], "lr", -1.0))
save("st_hp_unknown_key.ckpt", lambda c: set_(c["hyper_parameters"], "dropout", 0.5))
save("st_hp_hidden_text.ckpt", lambda c: set_(c["hyper_parameters"], "hidden_sizes", "64,64"))
save("st_spaces_kind_tree.ckpt", lambda c: set_(c["policy_spaces"]["action_spec"], "kind", "tree"))
save("st_spaces_mask_width_negative.ckpt", lambda c: set_(c["policy_spaces"], "action_mask_width", -12))
save("st_spaces_obs_extra_axis.ckpt", lambda c: set_(c["policy_spaces"], "observation_shape", [13, 6, 1]))
save("st_spaces_nvec_eight.ckpt", lambda c: set_(c["policy_spaces"]["action_spec"], "nvec", [8] * 12))
save("st_signature_obs_other.ckpt", lambda c: set_(dm(c)["env_signature"], "observation_shape", [14, 6]))
save("st_signature_class_other.ckpt", lambda c: set_(dm(c)["env_signature"], "class", "parlightning.envs.CartPoleEnv"))
save("st_lightning_version_future.ckpt", lambda c: set_(c, "pytorch-lightning_version", "99.0.0"))
save("st_global_step_beyond_int64.ckpt", lambda c: set_(c, "global_step", 2 ** 70))
save("st_epoch_fraction.ckpt", lambda c: set_(c, "epoch", 0.5))
save("st_callbacks_a_list.ckpt", lambda c: set_(c, "callbacks", list(c["callbacks"].values())))
save("st_norm_var_negative.ckpt", lambda c: obs_rms(c).__setitem__("var", -torch.ones_like(obs_rms(c)["var"])), NORM)
save("st_norm_mean_shape.ckpt", lambda c: obs_rms(c).__setitem__("mean", torch.zeros(5, dtype=obs_rms(c)["mean"].dtype)), NORM)
save("st_norm_count_nan.ckpt", lambda c: obs_rms(c).__setitem__("count", torch.tensor(float("nan")) if isinstance(obs_rms(c)["count"], torch.Tensor) else float("nan")), NORM)
print("edits written")
'''

NORM_CFG = ["--config", "cartpole_fast", "--trainer.max_epochs", "1", "--data.num_envs", "8", "--data.num_steps", "8",
            "--data.num_minibatches", "2", "--data.env", "parlightning.envs.NormalizeEnv", "--data.env.env",
            "parlightning.envs.CartPoleEnv"] + r5.Q
NORM_YAML = ("data:\n  env:\n    class_path: parlightning.envs.NormalizeEnv\n    init_args:\n"
             "      env: parlightning.envs.CartPoleEnv\n")
USER_YAML = r5.user_yaml("r20worlds.W20")
EXT_YAML = r5.ext_yaml("r20ext:Good")
POOL_YAML = r5.pool_yaml()


def make_fixtures(fx: Path, cases: list) -> None:
    """User code modules, configs, and the checkpoints, edits and run folder the cases copy (built
    once per run, only what the chosen cases need)."""
    import shutil

    fx.mkdir(parents=True, exist_ok=True)
    (fx / "r20worlds.py").write_text(WORLDS)
    (fx / "r20ext.py").write_text(EXT)
    (fx / "r20user.py").write_text(USER)
    (fx / "r20fns.py").write_text(FNS)
    (fx / "r20drive.py").write_text(DRIVE)
    (fx / "user.yaml").write_text(USER_YAML)
    (fx / "ext.yaml").write_text(EXT_YAML)
    (fx / "pool.yaml").write_text(POOL_YAML)
    (fx / "norm.yaml").write_text(NORM_YAML)
    (fx / "edits.py").write_text(EDITS)
    (fx / "notes.txt").write_text("notes, not a run\n")
    used = " ".join(str(v) for c in cases for v in list(c.files.values()) + (c.args if isinstance(c.args, list) else [c.args]))
    need = lambda *names: any(n in used for n in names)  # noqa: E731
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(fx), os.environ.get("PYTHONPATH", "")])}
    if need("swarm.ckpt", "run0", "st_", "norm.ckpt", "p.pt2"):
        for i, (name, args) in enumerate([("swarm", r5.TINY), ("norm", NORM_CFG)]):
            c = Case(f"fixture-{name}", "fixture", "fit", args + ["--trainer.default_root_dir", str(fx / name)], control=True,
                     timeout=300)
            outcome, _line, _s, text = run_case(c, fx / "_runs", fx, i)
            if outcome != "ok":
                raise SystemExit(f"fixture {name} failed ({outcome}): {text[-2000:]}")
            shutil.copy(fx / f"{name}/lightning_logs/version_0/checkpoints/last.ckpt", fx / f"{name}.ckpt")
        shutil.copytree(fx / "swarm/lightning_logs/version_0", fx / "run0", ignore=shutil.ignore_patterns("checkpoints"))
        done = subprocess.run([PY, "edits.py"], cwd=fx, env=env, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise SystemExit(f"fixture edits failed: {done.stdout[-1500:]} {done.stderr[-1500:]}")
        done = subprocess.run([PY, "-m", "parlightning.export", "--ckpt_path", "swarm.ckpt", "--out", "p.pt2"], cwd=fx, env=env,
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise SystemExit(f"fixture export failed: {done.stdout[-1500:]} {done.stderr[-1500:]}")


# ------------------------------------------------------------------------------------ the cases
B = r5.CaseBook("r20worlds")
fit, case, world, yaml_case = B.fit, B.case, B.world, B.yaml_case
TINY, Q, CART = r5.TINY, r5.Q, r5.CART
UWF = ["--config", "{fx}/user.yaml"]
EXTC = ["--config", "{fx}/ext.yaml"]
POOLC = ["--config", "{fx}/pool.yaml"]
DDP = ["--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp"]
M = ["-m", "parlightning.fit"]
RUNF = (r5.RUN_META,)
RESUME = TINY + ["--trainer.max_epochs", "2", "--ckpt_path", "c.ckpt"]
BCA = ["--out", "b.ckpt", "--rounds", "2", "--num_envs", "8", "--epochs", "1"]
EV = ["--config", "swarm", "--ckpt_path", "c.ckpt", "--episodes", "1"]
S = {"s.ckpt": "fixture:swarm.ckpt"}
RUN0 = {"run0": "fixture:run0"}
T = "--trainer."
SW = "--data.env.init_args."
MARK = (r"^mark$",)
PRED = "import torch, numpy as np, parlightning\np = parlightning.load_policy('s.ckpt')\n"


def sh(script: str, **fmt: Any) -> list:
    return ["sh", "-c", script.format(py=shlex.quote(PY), **fmt)]


def ns(setup: str, argv: list) -> list:
    """`argv` in a private user + mount namespace after `setup` (mounts), as root of that namespace."""
    return ["unshare", "-rm", "sh", "-c", f"{setup} && exec " + " ".join(shlex.quote(a) for a in argv)]


FULL_TMPFS = "mkdir -p mnt && mount -t tmpfs -o size=8k tmpfs mnt && head -c 8192 /dev/zero > mnt/fill 2>/dev/null; true"
RO_MOUNT = "mkdir -p ro && mount -t tmpfs -o ro tmpfs ro"


def drive(sigs: str, argv: list, wait: float = 60) -> list:
    return [PY, "{fx}/r20drive.py", "{tmp}/mark", sigs, str(wait), "--"] + argv


def env_yaml(init_args: str) -> str:
    return ("data:\n  env:\n    class_path: parlightning.envs.external.ExternalBatchedEnv\n"
            f"    init_args: {init_args}\n")


def pool_yaml(pool: str) -> str:
    return ("data:\n  env:\n    class_path: parlightning.envs.external.ExternalBatchedEnv\n    init_args:\n"
            "      world: parlightning.subagents.world:PoolOrchestrationWorld\n"
            "      world_kwargs: {families: [solo, fanout, locked], tasks_per_family: 2, max_width: 3, n_skills: 3}\n"
            f"      shared: {{pool: {pool}}}\n      step_timeout: 30\n")


def world_cfg(cls: str) -> dict:
    return {"w.yaml": f"data:\n  env:\n    class_path: r20worlds.{cls}\n"}


CB = "trainer:\n  callbacks+:\n    - class_path: {cls}\n      init_args: {args}\n"


def cbk(name: str, cls: str, expect: Any, args: str = "{}", base: Any = None, **kw: Any) -> None:
    fit(name, "callback", (UWF if base is None else base) + ["--config", "c.yaml"], expect,
        files={"c.yaml": CB.format(cls=cls, args=args), **kw.pop("files", {})}, **kw)


def ckpt(name: str, edit: str, kind: str, expect: Any, **kw: Any) -> None:
    """A re-stamped edit `edit` (st_*.ckpt) given as c.ckpt to `kind`: resume | export | policy | evaluate | teacher | lightning."""
    files = {"c.ckpt": f"fixture:{edit}.ckpt", **kw.pop("files", {})}
    guard = ("c.ckpt",)
    if kind == "resume":
        case(name, "checkpoint", "fit", RESUME, expect, files=files, guard=guard, **kw)
    elif kind == "export":
        case(name, "checkpoint", "export", ["--ckpt_path", "c.ckpt", "--out", "p.pt2"], expect, files=files, guard=guard, **kw)
    elif kind == "policy":
        case(name, "checkpoint", "py", "import parlightning, torch\np = parlightning.load_policy('c.ckpt')\n"
             "print(p.predict(torch.zeros((1, *p.observation_shape))))\n", expect, files=files, guard=guard, **kw)
    elif kind == "evaluate":
        case(name, "checkpoint", "evaluate", kw.pop("ev", EV), expect, files=files, guard=guard, **kw)
    elif kind == "teacher":
        case(name, "checkpoint", "bc", ["--config", "swarm", "--teacher", "c.ckpt"] + BCA, expect, files=files, guard=guard, **kw)
    elif kind == "lightning":
        case(name, "checkpoint", "py", "from parlightning.ppo.module import PPOModule\n"
             "m = PPOModule.load_from_checkpoint('c.ckpt')\nprint(type(m.policy))\n", expect, files=files, guard=guard, **kw)
    else:
        raise ValueError(kind)


# ---------------------------------------------------------------- configs and overrides
fit("cfg-lr-hex-float", "config", TINY + ["--model.lr", "0x1p-10"], "lr")
fit("cfg-lr-fullwidth-digits", "config", TINY + ["--model.lr", "\uff11e-3"], "lr")
fit("cfg-clip-coef-a-bool-word", "config", TINY + ["--model.clip_coef", "true"], "clip_coef")
fit("cfg-activation-empty-name", "config", TINY + ["--model.activation", ""], "activation")
fit("cfg-activation-capitalised", "config", TINY + ["--model.activation", "ReLU"], "activation")
fit("cfg-policy-transformer", "config", TINY + ["--model.policy", "transformer"], "policy")
fit("cfg-rnn-hidden-zero-with-gru", "config", TINY + ["--model.policy", "gru", "--model.rnn_hidden", "0"], "rnn_hidden")
fit("cfg-prior-nan", "config", TINY + ["--model.prior", "nan"], "prior")
fit("cfg-prior-empty-mapping", "config", TINY + ["--model.prior", "{}"], "prior")
fit("cfg-init-from-a-text-file", "config", TINY + ["--model.init_from", "notes.txt"], "init_from", files={"notes.txt": "hello\n"})
fit("cfg-init-from-a-folder", "config", TINY + ["--model.init_from", "d"], "init_from", files={"d": "dir"})
fit("cfg-target-kl-zero", "config", TINY + ["--model.target_kl", "0"], "target_kl")
fit("cfg-max-grad-norm-negative-half", "config", TINY + ["--model.max_grad_norm", "-0.5"], "max_grad_norm")
fit("cfg-hidden-sizes-empty-list", "config", TINY + ["--model.hidden_sizes", "[]"], "hidden_sizes")
fit("cfg-anneal-lr-sometimes", "config", TINY + ["--model.anneal_lr", "sometimes"], "anneal_lr")
fit("cfg-update-epochs-zero", "config", TINY + ["--data.update_epochs", "0"], "update_epochs")
fit("cfg-minibatches-above-rows", "config", TINY + ["--data.num_minibatches", "100"], "num_minibatches")
fit("cfg-minibatches-not-dividing-rows", "config", TINY + ["--data.num_minibatches", "3"], "num_minibatches")
fit("cfg-bptt-len-past-the-rollout", "config", TINY + ["--model.policy", "gru", "--data.bptt_len", "100"], "bptt_len")
fit("cfg-actors-in-flight-above-actors", "config", TINY + ["--data.actors_in_flight", "100"], "actors_in_flight")
fit("cfg-collect-in-gpu", "config", TINY + ["--data.collect_in", "gpu"], "collect_in")
fit("cfg-data-seed-negative-five", "config", TINY + ["--data.seed", "-5"], "seed")
fit("cfg-artifact-key-an-int-attribute", "config", TINY + ["--data.artifact_key", "r20user.NOT_CALLABLE"], "artifact_key")
fit("cfg-global-seed-a-word", "config", TINY + ["--seed", "abc"], "seed")
fit("cfg-torch-threads-zero", "config", TINY + ["--torch_threads", "0"], "torch_threads")
fit("cfg-stall-timeout-negative-one", "config", TINY + ["--stall_timeout", "-1"], "stall_timeout")
fit("cfg-heartbeat-timeout-zero", "config", TINY + ["--heartbeat_timeout", "0"], "heartbeat_timeout")
fit("cfg-ckpt-path-empty-string", "config", TINY + ["--ckpt_path", ""], "ckpt_path")
fit("cfg-config-an-http-url", "config", TINY + ["--config", "http://127.0.0.1:9/c.yaml"], "config|http")
fit("cfg-config-a-json-list", "config", TINY + ["--config", "c.json"], "c.json", files={"c.json": "[1, 2, 3]\n"})
fit("cfg-config-a-yaml-scalar", "config", TINY + ["--config", "c.yaml"], "c.yaml", files={"c.yaml": "42\n"})
fit("cfg-config-undefined-alias", "config", TINY + ["--config", "c.yaml"], "c.yaml|alias", files={"c.yaml": "model:\n  lr: *base_lr\n"})
fit("cfg-top-level-section-misspelt", "config", TINY + ["--config", "c.yaml"], "trainner", files={"c.yaml": "trainner:\n  max_epochs: 1\n"})
fit("cfg-swarm-families-one-string", "config", TINY + [SW + "families", "solo"], "families")
fit("cfg-swarm-families-repeated", "config", TINY + [SW + "families", "[solo, solo]"], "families")
fit("cfg-swarm-splits-zero", "config", TINY + [SW + "splits", "[0]"], "splits")
fit("cfg-swarm-max-levels-zero", "config", TINY + [SW + "max_levels", "0"], "max_levels")
fit("cfg-swarm-round-cap-unknown", "config", TINY + [SW + "round_cap", "sometimes"], "round_cap")
fit("cfg-swarm-family-tasks-negative", "config", TINY + [SW + "family_tasks", "{solo: -1}"], "family_tasks")
fit("cfg-swarm-subagent-budget-zero", "config", TINY + [SW + "subagent_budget", "0"], "subagent_budget")
fit("cfg-swarm-spawn-steps-negative", "config", TINY + [SW + "spawn_steps", "-1"], "spawn_steps")
fit("cfg-swarm-max-episode-steps-1e30", "config", TINY + [SW + "max_episode_steps", "1000000000000000000000000000000"], "max_episode_steps")
fit("cfg-swarm-compile-yes-word", "config", TINY + [SW + "compile", "perhaps"], "compile")
fit("cfg-normalize-clip-obs-zero", "config", NORM_CFG + [SW + "clip_obs", "0"], "clip_obs")
fit("cfg-normalize-epsilon-zero", "config", NORM_CFG + [SW + "epsilon", "0"], "epsilon")
fit("cfg-normalize-gamma-above-one", "config", NORM_CFG + [SW + "gamma", "1.5"], "gamma")
fit("cfg-normalize-without-inner-world", "config", CART + ["--data.env", "parlightning.envs.NormalizeEnv"], "env")
fit("cfg-reward-max-subagents-zero", "config", TINY + ["--data.reward.init_args.max_subagents", "0"], "max_subagents")
fit("cfg-schedule-horizon-zero", "config", TINY + ["--data.reward.init_args.lambda1.init_args.horizon", "0"], "horizon")
fit("cfg-schedule-warmup-negative", "config", TINY + ["--data.reward.init_args.lambda2.init_args.warmup", "-1"], "warmup")

# ---------------------------------------------------------------- Lightning pieces
fit("lightning-max-time-in-words", "lightning", TINY + [T + "max_time", "one hour"], "max_time")
fit("lightning-precision-8-mixed", "lightning", TINY + [T + "precision", "8-mixed"], "precision")
fit("lightning-gradient-clip-negative", "lightning", TINY + [T + "gradient_clip_val", "-1"], "gradient_clip_val")
fit("lightning-gradient-clip-algorithm-max", "lightning", TINY + [T + "gradient_clip_algorithm", "max"], "gradient_clip_algorithm")
fit("lightning-devices-zero", "lightning", TINY + [T + "devices", "0"], "devices")
fit("lightning-num-nodes-zero", "lightning", TINY + [T + "num_nodes", "0"], "num_nodes")
fit("lightning-log-every-negative", "lightning", TINY + [T + "log_every_n_steps", "-1"], "log_every_n_steps")
fit("lightning-max-steps-minus-two", "lightning", TINY + [T + "max_steps", "-2"], "max_steps")
fit("lightning-overfit-batches-above-one", "lightning", TINY + [T + "overfit_batches", "1.5"], "overfit_batches")
fit("lightning-accelerator-tpu", "lightning", TINY + [T + "accelerator", "tpu"], "accelerator|tpu")
fit("lightning-detect-anomaly-maybe", "lightning", TINY + [T + "detect_anomaly", "maybe"], "detect_anomaly")
MC = "lightning.pytorch.callbacks.ModelCheckpoint"
fit("lightning-checkpoint-save-top-k-minus-two", "lightning", TINY + ["--config", "c.yaml"], "save_top_k",
    files={"c.yaml": CB.format(cls=MC, args="{dirpath: ck, save_top_k: -2}")})
fit("lightning-checkpoint-filename-bad-format-spec", "lightning", TINY + ["--config", "c.yaml"], "filename",
    files={"c.yaml": CB.format(cls=MC, args="{dirpath: ck, filename: '{epoch:q}'}")})
fit("lightning-checkpoint-time-interval-words", "lightning", TINY + ["--config", "c.yaml"], "train_time_interval",
    files={"c.yaml": CB.format(cls=MC, args="{dirpath: ck, train_time_interval: five minutes}")})
fit("lightning-early-stopping-mode-maxish", "lightning", TINY + ["--config", "c.yaml"], "mode",
    files={"c.yaml": CB.format(cls="lightning.pytorch.callbacks.EarlyStopping", args="{monitor: charts/episodic_return, mode: maxish}")})
fit("lightning-lr-monitor-interval-batch", "lightning", TINY + ["--config", "c.yaml"], "logging_interval",
    files={"c.yaml": CB.format(cls="lightning.pytorch.callbacks.LearningRateMonitor", args="{logging_interval: batch}")})
fit("lightning-swa-negative-lr", "lightning", TINY + ["--config", "c.yaml"], "swa_lrs",
    files={"c.yaml": CB.format(cls="lightning.pytorch.callbacks.StochasticWeightAveraging", args="{swa_lrs: -0.01}")})
fit("lightning-timer-forever", "lightning", TINY + ["--config", "c.yaml"], "duration",
    files={"c.yaml": CB.format(cls="lightning.pytorch.callbacks.Timer", args="{duration: forever}")})
fit("lightning-csv-logger-on-a-file", "lightning", TINY + [T + "logger", "lightning.pytorch.loggers.CSVLogger",
    T + "logger.save_dir", "notes.txt"], "save_dir|notes.txt", files={"notes.txt": "x\n"}, guard=("notes.txt",))
fit("lightning-logger-class-wrong-case", "lightning", TINY + [T + "logger", "lightning.pytorch.loggers.TensorboardLogger"],
    "logger|TensorboardLogger")
fit("lightning-logger-not-installed", "lightning", TINY + [T + "logger", "lightning.pytorch.loggers.NeptuneLogger"],
    "NeptuneLogger|neptune")
fit("lightning-logger-name-raises", "lightning", TINY + [T + "logger", "r20user.NameRaisesLogger"], "NameRaisesLogger")
fit("lightning-logger-log-metrics-raises", "lightning", TINY + [T + "logger", "r20user.LogMetricsTypeError"],
    "LogMetricsTypeError", allow=RUNF)

# ---------------------------------------------------------------- checkpoints (edited, re-stamped)
ckpt("ckpt-bias-two-axes-policy", "st_bias_two_axes", "policy", "actor.4.bias|bias")
ckpt("ckpt-one-inf-weight-evaluated", "st_one_inf_weight", "evaluate", "critic.2.weight|inf")
ckpt("ckpt-modules-renamed-exported", "st_modules_renamed", "export", "state_dict|pi|actor")
ckpt("ckpt-adam-second-moment-negative-resumed", "st_adam_sq_negative", "resume", "exp_avg_sq|optimizer")
ckpt("ckpt-adam-step-negative-resumed", "st_adam_step_negative", "resume", "step|optimizer")
ckpt("ckpt-adam-betas-above-one-resumed", "st_adam_betas_above_one", "resume", "betas")
ckpt("ckpt-adam-no-param-groups-resumed", "st_adam_no_groups", "resume", "param_groups|optimizer")
ckpt("ckpt-optimizer-states-a-dict-resumed", "st_optimizer_states_dict", "resume", "optimizer_states")
ckpt("ckpt-scheduler-state-without-scheduler-resumed", "st_scheduler_without_scheduler", "resume", "lr_schedulers|scheduler")
ckpt("ckpt-adam-moments-bf16-resumed", "st_adam_moments_bf16", "resume", "exp_avg|optimizer")
ckpt("ckpt-annealing-position-negative-resumed", "st_annealing_position_negative", "resume", "PARLAnnealing|position")
ckpt("ckpt-annealing-position-1e30-resumed", "st_annealing_position_huge", "resume", "PARLAnnealing|position")
ckpt("ckpt-planner-episodes-halved-resumed", "st_planner_episodes_halved", "resume", "StrategyPlanner|episodes")
ckpt("ckpt-planner-rounds-negative-resumed", "st_planner_rounds_negative", "resume", "StrategyPlanner|rounds")
ckpt("ckpt-loops-epoch-far-ahead-resumed", "st_loops_epoch_far_ahead", "resume", "loops|epoch")
ckpt("ckpt-loops-batches-negative-resumed", "st_loops_batches_negative", "resume", "loops|batch")
ckpt("ckpt-datamodule-env-steps-negative-resumed", "st_dm_env_steps_negative", "resume", "env_steps")
ckpt("ckpt-datamodule-actor-count-other-resumed", "st_dm_num_envs_other", "resume", "num_envs")
ckpt("ckpt-datamodule-round-index-word-resumed", "st_dm_round_index_word", "resume", "round_index")
ckpt("ckpt-datamodule-no-rank-part-resumed", "st_dm_ranks_empty", "resume", "ranks|RolloutDataModule")
ckpt("ckpt-datamodule-saved-obs-row-short-resumed", "st_dm_obs_row_short", "resume", "obs|RolloutDataModule")
ckpt("ckpt-datamodule-rng-a-word-resumed", "st_dm_rng_word", "resume", "rng")
ckpt("ckpt-reward-position-negative-resumed", "st_dm_reward_position_negative", "resume", "reward|position")
ckpt("ckpt-hp-activation-unknown-policy", "st_hp_activation_unknown", "policy", "activation")
ckpt("ckpt-hp-lr-negative-lightning-load", "st_hp_lr_negative", "lightning", "lr")
ckpt("ckpt-hp-unknown-key-lightning-load", "st_hp_unknown_key", "lightning", "dropout|hyper_parameters")
ckpt("ckpt-hp-hidden-sizes-text-exported", "st_hp_hidden_text", "export", "hidden_sizes")
ckpt("ckpt-spaces-kind-tree-policy", "st_spaces_kind_tree", "policy", "kind|policy_spaces")
ckpt("ckpt-spaces-mask-width-negative-exported", "st_spaces_mask_width_negative", "export", "action_mask_width|policy_spaces")
ckpt("ckpt-spaces-obs-extra-axis-policy", "st_spaces_obs_extra_axis", "policy", "observation_shape|policy_spaces")
ckpt("ckpt-spaces-nvec-eight-teacher", "st_spaces_nvec_eight", "teacher", "teacher|nvec|policy_spaces")
ckpt("ckpt-signature-obs-shape-other-resumed", "st_signature_obs_other", "resume", "signature|observation")
ckpt("ckpt-signature-class-cartpole-resumed", "st_signature_class_other", "resume", "signature|CartPole|world")
ckpt("ckpt-lightning-version-future-resumed", "st_lightning_version_future", "resume", "version")
ckpt("ckpt-global-step-beyond-int64-resumed", "st_global_step_beyond_int64", "resume", "global_step")
ckpt("ckpt-epoch-a-fraction-resumed", "st_epoch_fraction", "resume", "epoch")
ckpt("ckpt-callbacks-a-list-resumed", "st_callbacks_a_list", "resume", "callbacks")
ckpt("ckpt-norm-variance-negative-policy", "st_norm_var_negative", "policy", "var|obs_rms|normali")
ckpt("ckpt-norm-mean-other-shape-exported", "st_norm_mean_shape", "export", "mean|obs_rms|normali")
ckpt("ckpt-norm-count-nan-evaluated", "st_norm_count_nan", "evaluate", "count|obs_rms|normali",
     ev=["--config", "cartpole_fast", "--config", "{fx}/norm.yaml", "--ckpt_path", "c.ckpt", "--episodes", "1"])
ckpt("ckpt-modules-renamed-teacher", "st_modules_renamed", "teacher", "teacher|state_dict|pi")
ckpt("ckpt-spaces-kind-tree-lightning-load", "st_spaces_kind_tree", "lightning", "kind|policy_spaces")
ckpt("ckpt-hp-activation-unknown-evaluated", "st_hp_activation_unknown", "evaluate", "activation")

# ---------------------------------------------------------------- evaluate / export / bc / plot / tune
S_EV = ["--config", "swarm", "--ckpt_path", "s.ckpt", "--episodes", "1"]
case("evaluate-json-in-a-missing-folder", "evaluate", "evaluate", S_EV + ["--json", "no/such/e.json"], "--json", files=S)
case("evaluate-device-cuda-without-cuda", "evaluate", "evaluate", S_EV + ["--device", "cuda:0"], "--device|cuda", files=S)
case("evaluate-device-cpu-colon-one", "evaluate", "evaluate", S_EV + ["--device", "cpux"], "--device", files=S)
case("evaluate-optimal-on-cartpole", "evaluate", "evaluate", ["--config", "cartpole_fast", "--policy", "optimal", "--episodes", "1"],
     "optimal|--policy")  # widened after the draft (was "optimal"): the line names the flag, --policy, and the fix
case("evaluate-gantt-to-a-text-file", "evaluate", "evaluate", ["--config", "swarm", "--policy", "serial", "--episodes", "1",
     "--gantt", "g.txt"], "--gantt")
case("evaluate-config-a-checkpoint", "evaluate", "evaluate", ["--config", "s.ckpt", "--policy", "serial", "--episodes", "1"],
     "--config|s.ckpt", files=S)
case("evaluate-bank-seeds-negative", "evaluate", "evaluate", ["--config", "swarm", "--policy", "serial", "--bank_seeds", "-1"],
     "--bank_seeds")
case("evaluate-stall-timeout-zero", "evaluate", "evaluate", ["--config", "swarm", "--policy", "serial", "--stall_timeout", "0"],
     "--stall_timeout")
case("evaluate-heldout-split-on-cartpole", "evaluate", "evaluate", ["--config", "cartpole_fast", "--policy", "random",
     "--split", "heldout", "--episodes", "1"], "split")
case("evaluate-trace-is-the-checkpoint", "evaluate", "evaluate", S_EV + ["--trace", "s.ckpt"], "--trace", files=S, guard=("s.ckpt",))
case("export-format-onnx-out-pt2", "export", "export", ["--ckpt_path", "s.ckpt", "--out", "p.pt2", "--format", "onnx"],
     "--format|--out", files=S)
case("export-out-an-existing-folder", "export", "export", ["--ckpt_path", "s.ckpt", "--out", "d"], "--out", files={**S, "d": "dir"})
case("export-out-under-proc", "export", "export", ["--ckpt_path", "s.ckpt", "--out", "/proc/r20.pt2"], "--out", files=S)
case("export-ckpt-path-a-pt2-program", "export", "export", ["--ckpt_path", "p.pt2", "--out", "q.pt2"], "--ckpt_path|p.pt2",
     files={"p.pt2": "fixture:p.pt2"})
case("bc-rounds-zero", "bc", "bc", ["--config", "swarm", "--teacher", "serial", "--out", "b.ckpt", "--rounds", "0"], "--rounds")
case("bc-minibatch-zero", "bc", "bc", ["--config", "swarm", "--teacher", "serial", "--minibatch", "0"] + BCA, "--minibatch")
case("bc-lr-zero", "bc", "bc", ["--config", "swarm", "--teacher", "serial", "--lr", "0"] + BCA, "--lr")
case("bc-teacher-capitalised", "bc", "bc", ["--config", "swarm", "--teacher", "Serial"] + BCA, "--teacher|Serial")
case("bc-optimal-teacher-on-cartpole", "bc", "bc", ["--config", "cartpole_fast", "--teacher", "optimal"] + BCA, "teacher|optimal")
case("bc-json-onto-its-out", "bc", "bc", ["--config", "swarm", "--teacher", "serial", "--json", "b.ckpt"] + BCA, "--json|--out")
case("bc-cartpole-config-swarm-teacher", "bc", "bc", ["--config", "cartpole_fast", "--teacher", "s.ckpt"] + BCA,
     "teacher|s.ckpt", files=S)
case("bc-num-envs-zero", "bc", "bc", ["--config", "swarm", "--teacher", "serial", "--out", "b.ckpt", "--num_envs", "0"], "--num_envs")
case("plot-smooth-zero", "plot", "plot", ["run0", "--smooth", "0", "--out", "c.png"], "--smooth", files=RUN0)
case("plot-group-empty-name", "plot", "plot", ["--group", "=run0", "--out", "c.png"], "--group", files=RUN0)
case("plot-group-empty-pattern", "plot", "plot", ["--group", "a=", "--out", "c.png"], "--group", files=RUN0)
case("plot-tag-nobody-logs", "plot", "plot", ["run0", "--tag", "nope/never_logged", "--out", "c.png"], "nope/never_logged|--tag",
     files=RUN0)
case("plot-run-a-text-file", "plot", "plot", ["notes.txt", "--out", "c.png"], "notes.txt", files={"notes.txt": "x\n"})
case("plot-points-one", "plot", "plot", ["run0", "--points", "1", "--out", "c.png"], "--points", files=RUN0)
case("plot-csv-a-folder", "plot", "plot", ["run0", "--csv", "d", "--out", "c.png"], "--csv", files={**RUN0, "d": "dir"})


def script(name: str, argv: list, expect: Any, timeout: float = 60) -> None:
    case(name, "script", "cmd", [PY, "{root}/scripts/" + argv[0]] + argv[1:], expect, timeout=timeout)


script("tune-override-without-equals", ["tune.py", "--quick", "--override", "model.lr", "--out", "{tmp}/t"], "--override|model.lr")
script("tune-last-zero", ["tune.py", "--quick", "--last", "0", "--out", "{tmp}/t"], "--last")
script("tune-config-missing-file", ["tune.py", "--quick", "--config", "{tmp}/none.yaml", "--out", "{tmp}/t"], "--config|none.yaml")
script("raw-ppo-hidden-size-zero", ["raw_ppo.py", "--quick", "--hidden-sizes", "64", "0"], "--hidden-sizes")
script("raw-ppo-anneal-lr-word", ["raw_ppo.py", "--quick", "--anneal-lr", "sometimes"], "--anneal-lr")
script("raw-ppo-device-gpu-word", ["raw_ppo.py", "--quick", "--device", "gpu"], "--device")
script("bench-world-n-zero", ["bench_world.py", "--quick", "--n", "0"], "--n")
script("world-baselines-banks-word", ["world_baselines.py", "--quick", "--banks", "1,x"], "--banks")
script("cartpole-check-steps-zero", ["cartpole_check.py", "--quick", "--steps", "0", "--logdir", "{tmp}/l"], "--steps")
script("recurrent-vs-mlp-delay-negative", ["recurrent_vs_mlp.py", "--quick", "--delay", "-1"], "--delay")
script("collapse-study-priors-words", ["collapse_study.py", "--quick", "--priors", "a,b", "--plan"], "--priors")
script("experiment-axis-unknown-key", ["experiment.py", "--quick", "--axis", "model.nope=1,2", "--out", "{tmp}/e"], "axis|model.nope")
script("bench-lag-latency-negative", ["bench_lag.py", "--quick", "--latencies", "-1"], "--latencies")
script("sampler-table-workers-zero", ["sampler_table.py", "--quick", "--workers", "0"], "--workers")
script("bench-collect-warmup-negative", ["bench_collect.py", "--quick", "--warmup", "-1"], "--warmup")
script("parallelism-timeout-zero", ["parallelism.py", "--quick", "--timeout", "0"], "--timeout")

script("cartpole-check-seeds-a-fraction", ["cartpole_check.py", "--quick", "--seeds", "1.5", "--logdir", "{tmp}/l"], "--seeds")
script("recurrent-vs-mlp-n-cues-a-billion", ["recurrent_vs_mlp.py", "--quick", "--n_cues", "1000000000"], "--n_cues")
script("bench-lag-workers-zero-in-a-list", ["bench_lag.py", "--quick", "--workers", "2", "0"], "--workers")
script("collapse-study-jobs-zero", ["collapse_study.py", "--quick", "--jobs", "0", "--plan"], "--jobs")

# ---------------------------------------------------------------- user tensor worlds
world("world-observation-shape-a-string", "ObsShapeText", "observation_shape")
world("world-action-spec-none", "SpecNone", "action_spec")
world("world-step-returns-none", "StepNone", "step")
world("world-final-obs-none", "FinalObsNone", "final_obs")
world("world-truncated-none", "TruncatedNone", "truncated")
world("world-reward-complex", "RewardComplex", "reward")
world("world-obs-float64-later", "ObsDoubleLater", "obs|observation", allow=RUNF)
world("world-obs-meta-later", "ObsMetaLater", "obs|observation", allow=RUNF)
world("world-rows-drop-later", "RowsDropLater", "obs|observation", allow=RUNF)
world("world-claims-cuda-device", "ClaimsCuda", "device")
world("world-trillion-categories", "TrillionActions", "action_spec|nvec")
world("world-reset-raises-keyerror", "ResetKeyError", "reset|map_07")
world("world-reset-without-keywords", "ResetPositionalOnly", "reset")
world("world-step-needs-a-third-argument", "StepNeedsThird", "step")
world("world-first-reset-nan", "ResetNaN", "obs|observation|nan")
world("world-step-sleeps-past-stall-timeout", "StepSleeps", "stall|stuck|step", base=UWF + ["--stall_timeout", "4"], timeout=90,
      allow=RUNF)
case("world-evaluate-config-reset-keyerror", "world", "evaluate", ["--config", "{fx}/user.yaml", "--config", "w.yaml",
     "--policy", "random", "--episodes", "1"], "reset|map_07", files=world_cfg("ResetKeyError"))
case("world-bc-config-step-returns-none", "world", "bc", ["--config", "{fx}/user.yaml", "--config", "w.yaml", "--teacher", "random"]
     + BCA, "step", files=world_cfg("StepNone"))

# ---------------------------------------------------------------- external worlds
EXT_CASES = [
    ("ext-step-returns-none", "r20ext:StepNone", "step"),
    ("ext-observation-bytes", "r20ext:ObsBytes", "obs"),
    ("ext-reward-array-of-two", "r20ext:RewardPair", "reward"),
    ("ext-terminated-int-two", "r20ext:TerminatedTwo", "terminated"),
    ("ext-reset-returns-obs-info", "r20ext:ResetObsInfo", "reset|obs"),
    ("ext-observation-shape-float", "r20ext:ShapeFloat", "observation_shape"),
    ("ext-task-bank-holds-none", "r20ext:TasksWithNone", "task"),
    ("ext-step-calls-sys-exit", "r20ext:StepSysExit", "step|exit"),
    ("ext-action-spec-a-dict", "r20ext:SpecDict", "action_spec"),
    ("ext-observation-beyond-float32", "r20ext:ObsBeyondFloat32", "obs"),
    ("ext-constructor-raises", "r20ext:CtorRaises", "licence|CtorRaises"),
]
for _n, _w, _e in EXT_CASES:
    fit(_n, "external", EXTC + ["--config", "c.yaml"], _e, files={"c.yaml": env_yaml("{world: '%s', step_timeout: 20}" % _w)},
        allow=RUNF)
for _n, _a, _e in [
    ("ext-step-timeout-zero", "step_timeout: 0", "step_timeout"),
    ("ext-workers-negative", "workers: -1", "workers"),
    ("ext-on-error-ignore", "on_error: ignore", "on_error"),
    ("ext-runner-ray2", "runner: ray2", "runner"),
    ("ext-drop-budget-two", "drop_budget: 2", "drop_budget"),
    ("ext-switch-interval-negative", "switch_interval: -1", "switch_interval"),
    ("ext-task-ids-empty", "task_ids: []", "task_ids"),
    ("ext-world-missing-attribute", None, "r20ext:Missing|Missing"),
    ("ext-world-kwargs-unknown-key", "world_kwargs: {colour: red}", "colour|world_kwargs"),
]:
    _init = "{world: 'r20ext:Missing'}" if _a is None else "{world: 'r20ext:Good', %s}" % _a
    fit(_n, "external", EXTC + ["--config", "c.yaml"], _e, files={"c.yaml": env_yaml(_init)})

# ---------------------------------------------------------------- subagent pools
SIM = "parlightning.subagents.SimulatedPool"
PROC = "parlightning.subagents.ProcessPool"
for _n, _p, _e in [
    ("pool-simulated-reliability-word", "{class_path: %s, init_args: {reliability: high}}" % SIM, "reliability"),
    ("pool-simulated-spawn-steps-fraction", "{class_path: %s, init_args: {spawn_steps: 1.5}}" % SIM, "spawn_steps"),
    ("pool-simulated-seed-negative", "{class_path: %s, init_args: {seed: -1}}" % SIM, "seed"),
    ("pool-process-function-missing", "{class_path: %s, init_args: {fn: 'r20fns:missing', workers: 1}}" % PROC, "missing|fn"),
    ("pool-process-fn-module-without-colon", "{class_path: %s, init_args: {fn: 'r20fns', workers: 1}}" % PROC, "fn|r20fns"),
    ("pool-process-workers-zero", "{class_path: %s, init_args: {fn: 'r20fns:good', workers: 0}}" % PROC, "workers"),
    ("pool-process-timeout-zero", "{class_path: %s, init_args: {fn: 'r20fns:good', workers: 1, timeout: 0}}" % PROC, "timeout"),
    ("pool-process-fn-returns-none", "{class_path: %s, init_args: {fn: 'r20fns:returns_none', workers: 1}}" % PROC, "returns_none"),
    ("pool-process-success-a-word", "{class_path: %s, init_args: {fn: 'r20fns:success_word', workers: 1}}" % PROC, "success"),
    ("pool-process-fn-connection-reset", "{class_path: %s, init_args: {fn: 'r20fns:raises', workers: 1}}" % PROC, "raises|r20fns"),
    ("pool-http-url-without-scheme", "{class_path: parlightning.subagents.HTTPPool, init_args: {base_url: 'localhost:8000', probe: false}}",
     "base_url"),
]:
    fit(_n, "pool", POOLC + ["--config", "p.yaml"], _e, files={"p.yaml": pool_yaml(_p)}, allow=RUNF, timeout=120)

# ---------------------------------------------------------------- user code: callbacks, samplers, schedules
cbk("callback-setup-raises", "r20user.R20SetupRaises", "R20SetupRaises")
cbk("callback-fit-start-zero-steps", "r20user.R20FitStartZeroSteps", "num_steps", allow=RUNF)
cbk("callback-epoch-start-drops-policy", "r20user.R20EpochStartDropsPolicy", "policy", allow=RUNF)
cbk("callback-nan-gradients-before-step", "r20user.R20NaNGrads", "nan|grad", allow=RUNF)
cbk("callback-batch-end-raises", "r20user.R20BatchEndRaises", "R20BatchEndRaises", allow=RUNF)
cbk("callback-empties-trainer-optimizers", "r20user.R20EpochEndNoOptimizers", "optimizer", allow=RUNF)
cbk("callback-episodes-end-raises", "r20user.R20EpisodesEndRaises", "R20EpisodesEndRaises|leaderboard", allow=RUNF)
cbk("callback-save-drops-state-dict", "r20user.R20SaveDropsStateDict", "state_dict", allow=RUNF)
cbk("callback-save-poisons-weights", "r20user.R20SavePoisonsWeights", "R20SavePoisonsWeights|nan", allow=RUNF)
cbk("callback-state-holds-a-set", "r20user.R20StateSet", "R20StateSet|state_dict")
cbk("callback-train-end-raises", "r20user.R20TrainEndRaises", "R20TrainEndRaises", allow=RUNF)
cbk("callback-teardown-raises", "r20user.R20TeardownRaises", "R20TeardownRaises", allow=RUNF)
cbk("callback-lr-written-as-string", "r20user.R20LrString", "lr", allow=RUNF)
cbk("callback-constructor-raises", "r20user.R20CtorRaises", "R20CtorRaises")
cbk("callback-freezes-the-policy", "r20user.R20FreezePolicy", "grad|R20FreezePolicy", allow=RUNF)
cbk("callback-sampler-swapped-for-string", "r20user.R20SamplerString", "sampler", allow=RUNF)
cbk("callback-class-path-of-a-function", "r20user.mark", "r20user.mark|callback")
fit("sampler-pick-returns-bytes", "sampler", TINY + ["--data.sampler", "r20user.PickBytes"], "PickBytes|pick", allow=RUNF)
fit("sampler-pick-trailing-space", "sampler", TINY + ["--data.sampler", "r20user.PickTrailingSpace"], "PickTrailingSpace|pick",
    allow=RUNF)
fit("sampler-pick-raises-third-call", "sampler", TINY + ["--data.sampler", "r20user.PickRaisesLater"], "PickRaisesLater|pick",
    allow=RUNF)
fit("sampler-pick-takes-no-arguments", "sampler", TINY + ["--data.sampler", "r20user.PickNoArgs"], "pick")
fit("sampler-state-holds-a-lambda", "sampler", TINY + ["--data.sampler", "r20user.SamplerLambdaState"], "SamplerLambdaState|state_dict",
    allow=RUNF)
fit("schedule-value-nan", "reward", TINY + ["--data.reward.init_args.lambda1", "r20user.NaNSchedule"], "NaNSchedule|lambda1",
    allow=RUNF)
fit("schedule-value-a-pair", "reward", TINY + ["--data.reward.init_args.lambda2", "r20user.PairSchedule"], "PairSchedule|lambda2",
    allow=RUNF)

# ---------------------------------------------------------------- Python API
case("api-load-policy-a-folder", "api", "py", "import parlightning\nparlightning.load_policy('d')\n", "d", files={"d": "dir"})
case("api-load-policy-meta-device", "api", "py", "import parlightning\nparlightning.load_policy('s.ckpt', device='meta')\n",
     "device|meta", files=S)
case("api-load-policy-device-three", "api", "py", "import parlightning\nparlightning.load_policy('s.ckpt', device=3)\n",
     "device", files=S)
case("api-predict-axes-swapped", "api", "py", PRED + "p.predict(torch.zeros(2, 6, 13))\n", "obs|shape", files=S)
case("api-predict-integer-obs", "api", "py", PRED + "p.predict(torch.zeros(2, 13, 6, dtype=torch.long))\n", "obs", files=S)
case("api-predict-mask-other-width", "api", "py", PRED + "p.predict(torch.zeros(2, 13, 6), mask=torch.ones(2, 5, dtype=torch.bool))\n",
     "mask", files=S)
case("api-predict-generator-numpy-randomstate", "api", "py", PRED + "p.predict(torch.zeros(2, 13, 6), deterministic=False, "
     "generator=np.random.RandomState(0))\n", "generator", files=S)
case("api-predict-deterministic-a-word", "api", "py", PRED + "p.predict(torch.zeros(2, 13, 6), deterministic='yes')\n",
     "deterministic", files=S)
case("api-predict-obs-inf", "api", "py", PRED + "p.predict(torch.full((2, 13, 6), float('inf')))\n", "obs|finite|inf", files=S)
case("api-fit-override-without-value", "api", "py", "from parlightning import fit\nfit(config='swarm', overrides=['trainer.max_epochs'])\n",
     "max_epochs|override")
case("api-fit-overrides-as-tuples", "api", "py", "from parlightning import fit\nfit(config='swarm', overrides=[('trainer.max_epochs', 1)])\n",
     "overrides")
case("api-fit-config-a-number", "api", "py", "from parlightning import fit\nfit(config=123)\n", "config")
case("api-ppomodule-lr-zero", "api", "py", "from parlightning.ppo.module import PPOModule\nPPOModule(lr=0)\n", "lr")
case("api-ppomodule-hidden-size-negative", "api", "py", "from parlightning.ppo.module import PPOModule\nPPOModule(hidden_sizes=(64, -1))\n",
     "hidden_sizes")
case("api-ppomodule-activation-a-class", "api", "py", "import torch\nfrom parlightning.ppo.module import PPOModule\n"
     "PPOModule(activation=torch.nn.ReLU)\n", "activation")
case("api-ppomodule-prior-unknown-key", "api", "py", "from parlightning.ppo.module import PPOModule\nPPOModule(prior={'bogus': 1})\n",
     "prior")
case("api-datamodule-num-envs-true", "api", "py", "from parlightning.ppo.data import RolloutDataModule\nRolloutDataModule(num_envs=True)\n",
     "num_envs")
case("api-datamodule-env-an-int", "api", "py", "from parlightning.ppo.data import RolloutDataModule\nRolloutDataModule(env=42)\n", "env")
case("api-swarm-families-empty", "api", "py", "from parlightning.envs import SwarmEnv\nSwarmEnv(num_envs=8, families=[])\n", "families")
case("api-swarm-device-cuda", "api", "py", "from parlightning.envs import SwarmEnv\nSwarmEnv(num_envs=8, device='cuda')\n", "device|cuda")
case("api-normalize-clip-obs-negative", "api", "py", "from parlightning.envs import NormalizeEnv, CartPoleEnv\n"
     "NormalizeEnv(4, env=CartPoleEnv, clip_obs=-1)\n", "clip_obs")
case("api-external-step-timeout-inf", "api", "py", "from parlightning.envs.external import ExternalBatchedEnv\n"
     "ExternalBatchedEnv(4, world='r20ext:Good', step_timeout=float('inf'))\n", "step_timeout")
case("api-compute-gae-shapes-disagree", "api", "py", "import torch\nfrom parlightning.buffer import compute_gae\n"
     "z = torch.zeros(8, 4)\ncompute_gae(z, torch.zeros(8, 3), z.bool(), z.bool(), z, torch.zeros(4), 0.99, 0.95)\n", "values|shape")
case("api-compute-gae-gamma-two", "api", "py", "import torch\nfrom parlightning.buffer import compute_gae\n"
     "z = torch.zeros(8, 4)\ncompute_gae(z, z, z.bool(), z.bool(), z, torch.zeros(4), 2.0, 0.95)\n", "gamma")
case("api-ppo-loss-integer-tensors", "api", "py", "import torch\nfrom parlightning.ppo.loss import ppo_loss\n"
     "z = torch.zeros(8, dtype=torch.long)\nppo_loss(z, z, z, z, z, z, z)\n", "ppo_loss")
case("api-stage-critical-steps-mask-shape", "api", "py", "import torch\nfrom parlightning.parl.metrics import stage_critical_steps\n"
     "stage_critical_steps(torch.ones(4), torch.ones(4, 3), torch.ones(4, 2, dtype=torch.bool))\n", "sub_mask|stage_critical_steps")
case("api-stamp-checkpoint-a-list", "api", "py", "from parlightning.runtime.checkpoint import stamp_checkpoint\nstamp_checkpoint([1, 2])\n",
     "checkpoint")
case("api-read-scalars-a-text-file", "api", "py", "from parlightning.analysis.logs import read_scalars\nread_scalars('notes.txt')\n",
     "notes.txt|logdir", files={"notes.txt": "x\n"})
case("api-export-policy-wrong-observation-shape", "api", "py", PRED + "from parlightning.export import export_policy\n"
     "export_policy(p.network, (13,), 'q.pt2')\n", "observation_shape", files=S)
case("api-linear-schedule-horizon-zero", "api", "py", "from parlightning.parl.reward import LinearSchedule\nLinearSchedule(horizon=0)\n",
     "horizon")
case("api-parl-reward-max-subagents-zero", "api", "py", "from parlightning.parl.reward import PARLReward\nPARLReward(max_subagents=0)\n",
     "max_subagents")
case("api-simulated-pool-reliability-above-one", "api", "py", "from parlightning.subagents import SimulatedPool\nSimulatedPool(reliability=1.5)\n",
     "reliability")
case("api-process-pool-module-missing", "api", "py", "from parlightning.subagents import ProcessPool\n"
     "p = ProcessPool(fn='no_such_module_r20:fn', workers=1, start_timeout=30)\np.close()\n", "no_such_module_r20|fn", timeout=60)

# ---------------------------------------------------------------- the filesystem (private mount namespace)
case("fs-fit-root-on-a-full-tmpfs", "filesystem", "cmd", ns(FULL_TMPFS, [PY] + M + TINY + [T + "default_root_dir", "mnt/run"]),
     "mnt|space|default_root_dir", allow=(r"^mnt",), timeout=120)
case("fs-fit-from-a-read-only-folder", "filesystem", "cmd", ns(RO_MOUNT + " && cd ro", [PY] + M + TINY),
     "read-only|lightning_logs|default_root_dir|ro", allow=(r"^ro$",), timeout=120)
case("fs-checkpoint-dirpath-read-only", "filesystem", "cmd", ns(RO_MOUNT, [PY] + M + TINY + ["--config", "c.yaml"]),
     "ro|dirpath", files={"c.yaml": CB.format(cls=MC, args="{dirpath: ro/ck}")}, allow=(r"^ro$",) + RUNF, timeout=120)
case("fs-export-out-on-a-full-tmpfs", "filesystem", "cmd", ns(FULL_TMPFS, [PY, "-m", "parlightning.export", "--ckpt_path", "s.ckpt",
     "--out", "mnt/p.pt2"]), "mnt|space|--out", files=S, allow=(r"^mnt",), timeout=120)
case("fs-evaluate-gantt-read-only", "filesystem", "cmd", ns(RO_MOUNT, [PY, "-m", "parlightning.evaluate", "--config", "swarm",
     "--policy", "serial", "--episodes", "1", "--gantt", "ro/g.png"]), "ro|--gantt", allow=(r"^ro$",), timeout=120)
case("fs-bc-json-read-only", "filesystem", "cmd", ns(RO_MOUNT, [PY, "-m", "parlightning.bc", "--config", "swarm", "--teacher", "serial",
     "--json", "ro/b.json"] + BCA), "ro|--json", allow=(r"^ro$",), timeout=120)
case("fs-plot-csv-on-a-full-tmpfs", "filesystem", "cmd", ns(FULL_TMPFS, [PY, "-m", "parlightning.plot", "run0", "--csv", "mnt/c.csv",
     "--out", "c.png"]), "mnt|space|--csv", files=RUN0, allow=(r"^mnt",), timeout=120)

case("fs-tensorboard-save-dir-read-only", "filesystem", "cmd", ns(RO_MOUNT, [PY] + M + TINY + [T + "logger",
     "lightning.pytorch.loggers.TensorBoardLogger", T + "logger.save_dir", "ro/tb"]), "ro|save_dir", allow=(r"^ro$",), timeout=120)

# ---------------------------------------------------------------- signals at new moments
RENV = {"R20_MARK": "{tmp}/mark"}
case("signal-sigterm-in-the-second-reset", "signal", "cmd", drive("SIGTERM", [PY] + M + UWF + ["--data.env", "r20worlds.MarkSecondReset"]),
     "SIGTERM", allow=RUNF, timeout=120)
case("signal-sigint-during-optimizer-step", "signal", "cmd", drive("SIGINT", [PY] + M + UWF + ["--config", "c.yaml"]),
     "interrupt", files={"c.yaml": CB.format(cls="r20user.MarkOnOptimizerStep", args="{}")}, allow=RUNF, timeout=120)
case("signal-sighup-in-callback-setup", "signal", "cmd", drive("SIGHUP", [PY] + M + UWF + ["--config", "c.yaml"]),
     "SIGHUP", files={"c.yaml": CB.format(cls="r20user.MarkInSetup", args="{}")}, allow=RUNF, timeout=120)
case("signal-sigusr2-in-evaluate-world-constructor", "signal", "cmd", drive("SIGUSR2", [PY, "-m", "parlightning.evaluate", "--config",
     "{fx}/user.yaml", "--config", "w.yaml", "--policy", "random", "--episodes", "1"]), "SIGUSR2",
     files=world_cfg("MarkInInitEval"), timeout=120)
case("signal-sigterm-in-bc-teacher-rollout", "signal", "cmd", drive("SIGTERM", [PY, "-m", "parlightning.bc", "--config", "swarm",
     "--teacher", "serial", "--out", "b.ckpt", "--rounds", "20000", "--num_envs", "8", "--epochs", "20"], wait=7),
     "SIGTERM", timeout=120)
case("signal-two-sigints-in-a-rollout", "signal", "cmd", drive("SIGINT,SIGINT", [PY] + M + UWF + ["--data.env", "r20worlds.MarkAtStep",
     "--data.num_steps", "64"]), "interrupt", allow=RUNF, timeout=120)
case("signal-sigalrm-during-teardown", "signal", "cmd", drive("SIGALRM", [PY] + M + UWF + ["--config", "c.yaml"]),
     "SIGALRM", files={"c.yaml": CB.format(cls="r20user.MarkInTeardown", args="{}")}, allow=RUNF, timeout=120)

# ---------------------------------------------------------------- 2-rank gloo DDP via the real CLI
DDPU = UWF + DDP + ["--data.num_envs", "4"]
case("ddp-rank1-epoch-end-callback-raises", "ddp", "cmd", [PY] + M + DDPU + ["--config", "c.yaml"], "rank 1",
     files={"c.yaml": CB.format(cls="r20user.Rank1EpochEndRaises", args="{}")}, allow=RUNF, timeout=180)
case("ddp-rank1-reward-shape-later", "ddp", "cmd", [PY] + M + DDPU + ["--data.env", "r20worlds.Rank1RewardShapeLater"],
     "rank 1|reward", allow=RUNF, timeout=180)


# ---------------------------------------------------------------- controls (must succeed)
def control(name: str, kind: str, args: Any, **kw: Any) -> None:
    case(name, "control", kind, args, control=True, timeout=kw.pop("timeout", 120), **kw)


control("control-r20-tiny-swarm", "fit", TINY)
control("control-user-world-w20", "fit", UWF)
control("control-external-world-good", "fit", EXTC)
control("control-pool-process-good-fn", "fit", POOLC + ["--config", "p.yaml"],
        files={"p.yaml": pool_yaml("{class_path: %s, init_args: {fn: 'r20fns:good', workers: 1}}" % PROC)}, timeout=180)
control("control-good-callback", "fit", UWF + ["--config", "c.yaml"], files={"c.yaml": CB.format(cls="r20user.GoodCallback", args="{}")})
control("control-good-sampler", "fit", TINY + ["--data.sampler", "r20user.GoodSampler"])
control("control-normalize-run", "fit", NORM_CFG)
control("control-resume-unedited", "fit", RESUME, files={"c.ckpt": "fixture:swarm.ckpt"})
control("control-evaluate-checkpoint", "evaluate", EV + ["--json", "e.json"], files={"c.ckpt": "fixture:swarm.ckpt"})
control("control-r20-export", "export", ["--ckpt_path", "s.ckpt", "--out", "p.pt2"], files=S)
control("control-bc-checkpoint-teacher", "bc", ["--config", "swarm", "--teacher", "s.ckpt"] + BCA, files=S)
control("control-r20-plot-csv", "plot", ["run0", "--csv", "c.csv", "--out", "c.png"], files=RUN0)
control("control-r20-load-policy", "py", PRED + "a = p.predict(torch.zeros(2, 13, 6))\nassert a.shape[0] == 2\n", files=S)
control("control-lightning-load", "py", "from parlightning.ppo.module import PPOModule\nm = PPOModule.load_from_checkpoint('s.ckpt')\n"
        "assert m.policy is not None\n", files=S)
control("control-ddp-two-ranks-w20", "cmd", [PY] + M + DDPU, timeout=180)

# Drafted cases whose name or idea an earlier round (4-19, bad_inputs.py, bad_inputs_fresh.py) already has, by
# their `--list` names: removed before any run (not counted, not run).
SEEN_BEFORE = {
    'cfg-activation-capitalised',
    'cfg-prior-nan',
    'cfg-init-from-a-text-file',
    'cfg-init-from-a-folder',
    'cfg-target-kl-zero',
    'cfg-max-grad-norm-negative-half',
    'cfg-hidden-sizes-empty-list',
    'cfg-anneal-lr-sometimes',
    'cfg-update-epochs-zero',
    'cfg-minibatches-above-rows',
    'cfg-global-seed-a-word',
    'cfg-torch-threads-zero',
    'cfg-ckpt-path-empty-string',
    'cfg-config-undefined-alias',
    'cfg-swarm-families-one-string',
    'cfg-swarm-splits-zero',
    'cfg-swarm-max-levels-zero',
    'cfg-swarm-family-tasks-negative',
    'cfg-swarm-subagent-budget-zero',
    'cfg-swarm-spawn-steps-negative',
    'cfg-normalize-epsilon-zero',
    'cfg-normalize-gamma-above-one',
    'cfg-normalize-without-inner-world',
    'cfg-reward-max-subagents-zero',
    'lightning-max-time-in-words',
    'lightning-gradient-clip-negative',
    'lightning-devices-zero',
    'lightning-num-nodes-zero',
    'lightning-log-every-negative',
    'lightning-max-steps-minus-two',
    'lightning-detect-anomaly-maybe',
    'lightning-checkpoint-save-top-k-minus-two',
    'lightning-checkpoint-filename-bad-format-spec',
    'lightning-logger-not-installed',
    'lightning-logger-name-raises',
    'lightning-logger-log-metrics-raises',
    'ckpt-adam-second-moment-negative-resumed',
    'ckpt-adam-step-negative-resumed',
    'ckpt-annealing-position-negative-resumed',
    'ckpt-reward-position-negative-resumed',
    'ckpt-signature-class-cartpole-resumed',
    'ckpt-lightning-version-future-resumed',
    'evaluate-bank-seeds-negative',
    'evaluate-stall-timeout-zero',
    'evaluate-heldout-split-on-cartpole',
    'export-format-onnx-out-pt2',
    'export-out-an-existing-folder',
    'bc-rounds-zero',
    'bc-minibatch-zero',
    'bc-lr-zero',
    'bc-teacher-capitalised',
    'bc-num-envs-zero',
    'plot-smooth-zero',
    'plot-group-empty-name',
    'plot-group-empty-pattern',
    'plot-points-one',
    'plot-csv-a-folder',
    'tune-override-without-equals',
    'tune-last-zero',
    'raw-ppo-hidden-size-zero',
    'raw-ppo-anneal-lr-word',
    'bench-world-n-zero',
    'cartpole-check-steps-zero',
    'recurrent-vs-mlp-delay-negative',
    'experiment-axis-unknown-key',
    'bench-lag-latency-negative',
    'sampler-table-workers-zero',
    'bench-collect-warmup-negative',
    'parallelism-timeout-zero',
    'world-final-obs-none',
    'world-reward-complex',
    'world-obs-meta-later',
    'world-step-needs-a-third-argument',
    'ext-reset-returns-obs-info',
    'ext-step-timeout-zero',
    'ext-workers-negative',
    'ext-switch-interval-negative',
    'ext-task-ids-empty',
    'pool-simulated-reliability-word',
    'pool-process-fn-module-without-colon',
    'pool-process-workers-zero',
    'pool-process-timeout-zero',
    'pool-process-fn-returns-none',
    'pool-http-url-without-scheme',
    'callback-setup-raises',
    'callback-episodes-end-raises',
    'callback-teardown-raises',
    'sampler-pick-trailing-space',
    'api-load-policy-meta-device',
    'api-predict-obs-inf',
    'api-fit-override-without-value',
    'api-swarm-families-empty',
    'api-swarm-device-cuda',
    'api-normalize-clip-obs-negative',
    'api-stamp-checkpoint-a-list',
    'api-parl-reward-max-subagents-zero',
    'api-simulated-pool-reliability-above-one',
    'fs-checkpoint-dirpath-read-only',
    'fs-evaluate-gantt-read-only',
    'fs-bc-json-read-only',
    'fs-plot-csv-on-a-full-tmpfs',
}

assert not SEEN_BEFORE - {c.name for c in B.cases}, SEEN_BEFORE - {c.name for c in B.cases}
CASES = [c for c in B.cases if c.name not in SEEN_BEFORE]

# Cases judged valid input or ambiguous after the draft run: name -> reason (not counted).
DROPPED: dict[str, str] = {
    "cfg-lr-fullwidth-digits": "it trained: Python's float() reads full-width digits as 1e-3 exactly; the value is the number the user wrote, ambiguous",
    "ckpt-scheduler-state-without-scheduler-resumed": "it resumed: the run has no scheduler, so the extra scheduler state is unused; harmless",
    "ckpt-adam-moments-bf16-resumed": "it resumed: torch's Optimizer.load_state_dict casts floating state to the parameter's dtype (documented torch behaviour); valid",
    "ckpt-spaces-obs-extra-axis-policy": "it predicted: [13, 6, 1] holds the same 78 numbers and the case fed the shape the record names; the record is self-consistent, ambiguous",
    "ext-action-spec-a-dict": "it trained: a mapping of ActionSpec's fields is read as the spec; not shown wrong, ambiguous",
    "ext-world-kwargs-unknown-key": "harness mistake: r20ext.Good takes **kw, so the key is a legal argument of that world",
    "callback-state-holds-a-set": "it trained: a set is a plain value torch.save and the weights-only loader hold; harmless",
    "callback-lr-written-as-string": "it trained: the lr annealing rewrites every group's lr before the first step, so the string is never used; harmless",
    "api-predict-integer-obs": "it answered: integer observations are cast to float, which is what a user means; harmless",
    "bench-lag-workers-zero-in-a-list": "dropped by the fixer after the before run: 0 is a documented value of --workers (its --help: '0 threads, P worker processes'; the default is [0, 2]), so [2, 0] is valid input; the 'hang' was the case's 120 s timeout against a --quick run that takes about 2.3 min (measured with the default order, load 0.2-1.7)",
}

unknown = set(DROPPED) - {c.name for c in CASES}
assert not unknown, unknown
VALID = [c for c in CASES if c.name in DROPPED]
CASES = [c for c in CASES if c.name not in DROPPED]


def main(argv: Any = None) -> int:
    return r5.run_corpus(argv, round_no=20, description=__doc__.split("\n\n")[0], cases_all=CASES, valid=VALID,
                         dropped=DROPPED, make_fixtures=make_fixtures)


if __name__ == "__main__":
    sys.exit(main())
