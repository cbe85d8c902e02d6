#!/usr/bin/env python
"""Round 13 of the bad-input corpus: a fresh set of bad inputs and faults, written blind from the
README, `docs/guides/*.md`, `docs/README.md`, `configs/` (and `parlightning/configs/`), the example
callbacks (`callbacks/`), every CLI's and script's `--help`, and the docstrings of the public classes,
functions and modules (read through `inspect.signature` / `inspect.getdoc`, not by opening the
package's files); its author read neither `tests/`, nor the package's source, nor the earlier
rounds' cases, outputs or fixes, nor the git log or the changelog (the case names of rounds 6-12 were
listed with `--list` only, to avoid repeats; round 5's harness and round 12's preamble were read to
copy the harness and the file's shape).

New kinds of input, or old kinds through a new door (the case names of rounds 6-12 were compared and
every repeat removed); about a third is the Python API and the code a user writes as the guides
describe it:
- configs composed of several files and overrides: a `--config` that is a folder or a FIFO, a
  `--trainer` section file holding model keys, `ckpt_path` set in YAML, a float `seed_everything`,
  the reward's `max_subagents` disagreeing with the world's, the reward dropped under
  `PARLAnnealing`, a `null` callback, `prior: yes` / a list / `action: true`, a torch lr scheduler
  or a NaN-valued `Schedule` subclass as λ, `PARLReward` subclasses that forget `super().__init__()`
  or return an int64 bonus, `--print_config=skip_defaults`, per-actor collection with lag 0, in a
  process, or with a GRU;
- Lightning pieces named in `trainer`: `ThroughputMonitor` without `batch_size_fn`,
  `ModelPruning(amount=2.0)`, a `LambdaCallback` whose hook takes no arguments, `LearningRateFinder`,
  `RichProgressBar` without rich, a second `PARLAnnealing`, a `ModelCheckpoint.dirpath` and a
  `default_root_dir` that are files, SwarmEnv's `device` as an init arg, `accumulate_grad_batches
  0`, a clip algorithm typo, `barebones`, an unknown profiler or plugin, `num_nodes 0`, negative
  `log_every_n_steps` and `max_time`, FSDP on the CPU, DeepSpeed not installed;
- checkpoints from other tools and commands: a raw `state_dict`, a plain Lightning checkpoint of
  another `LightningModule` (with `PARLIGHTNING_UNCHECKED_CHECKPOINTS=1`), zero-byte, gzip'd, FIFO and
  folder paths through `fit`, `evaluate`, `export`, `bc --teacher`, `init_from` and `load_policy`;
  `bc`'s output resumed with `--ckpt_path`, a bc checkpoint of another width to `init_from`, a
  checkpoint with its loops removed outside the checksum, a resume with another `num_envs`;
- the Python API: `fit()` with a key and no value, and from a thread and inside a running event loop
  (controls); `load_from_checkpoint` with a CUDA `map_location`, an unknown override, a checkpoint
  whose `lr` was edited to a word, a `PPOModule` subclass with a required argument; `load_policy` on
  zero-byte, folder, FIFO and int paths; `predict` with a string `deterministic` and a transposed
  mask; built-in worlds stepped with out-of-range or float actions, a bool count, duplicate splits,
  `reset(seed=True)`, an unknown scripted policy; `PPOModule` with prior + init_from, an unknown
  policy, string hidden sizes; `PARLReward` with a float λ or called with lists, a schedule at a
  negative position, low > high, an empty Gym id, a set of keys, a negative round, a trace into a
  missing folder, external-world `on_error` / `runner` typos;
- user code subclassing the documented bases wrongly: `SwarmEnv`, `RoundRobin`, `ClusterParallel`
  and `PARLReward` subclasses that forget `super().__init__()`; worlds that raise an exception whose
  `__str__` is not a string, call `sys.exit(0)`, close stdout, return float masks, masks of neither
  layout's width, `action_masks` as a tensor attribute, masks that raise later, `state_dict() ->
  None`, a factory annotated to return a dict, a scripted policy returning numpy or lacking
  `serial`; samplers whose `record` raises an exception of only newlines, whose `pick_batch` returns
  floats, whose `signals` or `state_dict` raise; strategies returning no units, keys outside the bank
  or a worker beyond the ranks; rollout callbacks writing NaN into the advantages or setting the
  policy to None; bc on a world whose mask disappears;
- evaluate / bc / plot: a bank seed past uint32, bank seeds on CartPole, 10**12 episodes, gantt on
  CartPole, a negative stall timeout; bc with negative label smoothing, a GRU config, `--out` over its
  teacher, `--json` == `--out` or a FIFO, a CartPole teacher, a zero stall timeout; plot on garbage,
  foreign (`SummaryWriter`) and text-only event files, runs whose steps do not overlap, an empty tag,
  `--csv` == `--out`, an empty group pattern, a `.txt` output;
- the environment and the filesystem: `LOCAL_RANK=abc`, an ASCII-only stderr with a non-ASCII
  checkpoint name; a read-only working folder, logger `save_dir`, `ModelCheckpoint.dirpath`, kernel
  cache, bc json, evaluate trace and plot output (read-only bind mounts in a private mount
  namespace), full tmpfs under evaluate's gantt and json, a disk that fills after the first
  iteration, stdout on `/dev/full` (print_config, evaluate);
- signals at new moments: SIGTERM while a world loads its state on resume, during the preflight
  probe's step, while `on_exception` runs, during `teardown`, while stopped (then continued), to a
  world worker, a process-pool worker or the collector process alone, during `fit()` called from
  Python; SIGHUP during bc's collection;
- six 2-rank gloo faults: `NODE_RANK=abc`, rank 1's world with another task bank, rank 1's sampler
  `record` raising, rank 1's world raising a `BaseException`, rank 1's callback logging a string,
  rank 1 raising and then hanging in `on_exception`;
- the scripts: arguments of sampler_table, cartpole_check, world_fit, bench_world, world_baselines and
  experiment the earlier rounds did not try.

    python scripts/bad_inputs_round13.py                # every case; writes docs/results/data/bad_inputs_round13-<tag>.txt
    python scripts/bad_inputs_round13.py --tag draft    # the same, into ...-draft.txt
    python scripts/bad_inputs_round13.py --quick        # one case per category (none of DDP)
    python scripts/bad_inputs_round13.py --only NAME... # the cases whose name contains any NAME
    python scripts/bad_inputs_round13.py --list         # the cases, one per line

The harness is round 5's (`scripts/bad_inputs_round5.py`: `Case`, `CaseBook`, `run_case`,
`run_corpus`), imported, not copied: a case per forked process and folder (the scripts, signals, DDP,
mount namespaces and environment cases as `cmd`, a fresh interpreter); outcome classes clean /
traceback / misleading / messy / accepted / hang / crash. A case is **clean** when it exits non-zero
with exactly one `error:` line containing the case's keywords (the field or the failing component), no
traceback and nothing left behind (no new file, no `lightning_logs/version_*` unless the fault comes
after training started, given files unchanged, no process of the case alive). For the Python API a
case is clean when it raises an exception of the package whose message contains the keywords.
Controls (correct inputs near the bad ones: a composed config, SwarmEnv subclasses done right (its
arguments in full, and in a second config that names the class and its own argument only), a
RoundRobin subclass, a user world with masks, several bank seeds, a plot, bc then `init_from`, a
resume, a resume from a read-only folder holding a stale partial checkpoint, `fit()` from a thread
and inside a running event loop, bf16 on the CPU, world workers with and without a usable `TMPDIR`,
a scalar rollout stat) must train; they are not counted. Cases judged valid input or
ambiguous after the draft run are in `DROPPED` with the reason (not counted). Run it with stdin from
/dev/null (`< /dev/null`).
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
# Tensor worlds (r13worlds), an external world (r13ext), samplers / strategies / callbacks / rewards
# (r13user) and a process driver for signals (r13drive). Each class is wrong in one way (its docstring
# says how) except W13, SwarmGood, RRGood, StatGood and ExtMark (controls).
WORLDS = r'''
"""Round 13's tensor worlds: W13 and SwarmGood are correct; each other class is wrong in one way."""
import itertools
import os
import sys
import time
from typing import Optional

import torch
from parlightning.envs.base import ActionSpec, EpisodeParts, StepResult
from parlightning.envs.swarm import SwarmEnv


def mark():
    """Write this process's pid to $R13_MARKER (once), for the signal driver."""
    p = os.environ.get("R13_MARKER")
    if p and not os.path.exists(p):
        with open(p + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(p + ".tmp", p)


class W13:
    """correct: 8 tasks in two families, two 3-way action dimensions, a per-dimension mask, episodes
    of `episode_len` steps; scripted policies answer 0 everywhere."""

    observation_shape = (4,)

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0, episode_len: int = 3):
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.action_spec = ActionSpec("multi_discrete", nvec=(3, 3))
        self.task_ids = [f"easy-{i}" for i in range(4)] + [f"hard-{i}" for i in range(4)]
        self.episode_len = episode_len
        self.t = torch.zeros(num_envs, dtype=torch.long)
        self.task = torch.arange(num_envs) % len(self.task_ids)
        self.steps = 0

    def _obs(self):
        n = self.num_envs
        return torch.stack([self.t.float(), self.task.float(), torch.ones(n), torch.zeros(n)], 1)

    def reset(self, *, seed=None, task_index=None):
        self.t = torch.zeros(self.num_envs, dtype=torch.long)
        if task_index is not None:
            self.task = torch.as_tensor(task_index, dtype=torch.long).clone()
        return self._obs()

    def _parts(self, outcome):
        z = torch.zeros(self.num_envs)
        return EpisodeParts(task=self.task.clone(), outcome=outcome, n_subagents=z, assigned=z, completed=z,
                            critical_steps=self.t.float(), serial_steps=self.t.float())

    def step(self, action, next_task=None):
        self.steps += 1
        self.t = self.t + 1
        outcome = (action[:, 0] == 1).float()
        reward = outcome * 0.1
        done = self.t >= self.episode_len
        final = self._obs()
        parts = self._parts(outcome)
        if next_task is not None:
            nt = next_task(done) if callable(next_task) else next_task
            nt = torch.as_tensor(nt, dtype=torch.long).expand(self.num_envs)
            self.task = torch.where(done, nt, self.task)
        self.t = torch.where(done, torch.zeros_like(self.t), self.t)
        return StepResult(self._obs(), reward, done, torch.zeros_like(done), final, parts)

    def action_masks(self):
        return torch.ones(self.num_envs, 2, dtype=torch.bool)

    def scripted_action(self, name, obs, generator=None):
        return torch.zeros(obs.shape[0], 2, dtype=torch.long)


class SwarmForgetsSuper(SwarmEnv):
    """wrong: a SwarmEnv subclass whose __init__ forgets super().__init__()."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0, label: str = "mine",
                 max_subagents: int = 128, subagent_budget: Optional[int] = 256):
        self.label = label


class SwarmGood(SwarmEnv):
    """correct: a SwarmEnv subclass with one argument of its own, calling super().__init__()."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0, label: str = "mine",
                 max_subagents: int = 128, subagent_budget: Optional[int] = 256):
        super().__init__(num_envs, device, seed, max_subagents=max_subagents, subagent_budget=subagent_budget)
        self.label = label


class MutatesAction(W13):
    """wrong: step clamps the action tensor it is handed, in place (the policy's sampled actions)."""

    def step(self, action, next_task=None):
        action.clamp_(max=0)
        return super().step(action, next_task)



class OddStrError(Exception):
    def __str__(self):
        return 42


class RaisesOddStr(W13):
    """wrong: step (from its third call) raises an exception whose __str__ returns an int."""

    def step(self, action, next_task=None):
        if self.steps >= 2:
            raise OddStrError("bad")
        return super().step(action, next_task)


class Abort(BaseException):
    """A user's 'stop everything' signal, derived from BaseException, not Exception."""



class ExitsZero(W13):
    """wrong: step (from its third call) calls sys.exit(0) mid-run."""

    def step(self, action, next_task=None):
        if self.steps >= 2:
            sys.exit(0)
        return super().step(action, next_task)



class RaisesLater(W13):
    """wrong: step (from its third call) raises ValueError."""

    def step(self, action, next_task=None):
        if self.steps >= 2:
            raise ValueError("the simulator lost its licence")
        return super().step(action, next_task)



class MaskFloat(W13):
    """wrong: the mask is float32 ones."""

    def action_masks(self):
        return torch.ones(self.num_envs, 2)


class MaskWidthOdd(W13):
    """wrong: the mask has 3 columns (dimensions: 2, categories: 6)."""

    def action_masks(self):
        return torch.ones(self.num_envs, 3, dtype=torch.bool)



class MaskNoneLater(W13):
    """wrong: action_masks answers None after the second step (the mask disappears mid-run)."""

    def action_masks(self):
        if self.steps >= 2:
            return None
        return torch.ones(self.num_envs, 2, dtype=torch.bool)


class MaskAttribute(W13):
    """wrong: `action_masks` is a tensor attribute, not a method."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.action_masks = torch.ones(num_envs, 2, dtype=torch.bool)



class NeverEnds(W13):
    """wrong (for evaluate): its episodes never end."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed, episode_len=10**9)


class ScriptedNumpy(W13):
    """wrong: scripted_action returns a numpy array."""

    def scripted_action(self, name, obs, generator=None):
        import numpy as np
        return np.zeros((obs.shape[0], 2), dtype=np.int64)


class SlowLoad(W13):
    """correct state, but with R13_SLOW_LOAD set its load_state_dict marks and sleeps 30 s."""

    def state_dict(self):
        return {"t": self.t.clone(), "task": self.task.clone()}

    def load_state_dict(self, state):
        if os.environ.get("R13_SLOW_LOAD"):
            mark()
            time.sleep(30)
        self.t = state["t"].clone()
        self.task = state["task"].clone()


class MarkOnStep(W13):
    """marks at its fourth step and sleeps 5 s there (a moment for the signal driver)."""

    def step(self, action, next_task=None):
        if self.steps == 3 and self.num_envs > 2:
            mark()
            time.sleep(5)
        return super().step(action, next_task)


class Rank1Abort(W13):
    """wrong under DDP: rank 1's world raises a BaseException subclass from its third step."""

    def step(self, action, next_task=None):
        if os.environ.get("LOCAL_RANK", "0") == "1" and self.steps >= 2 and self.num_envs > 2:
            raise Abort("rank one's operator pulled the plug")
        return super().step(action, next_task)


class ClosesStdout(W13):
    """wrong: step closes sys.stdout at its third call."""

    def step(self, action, next_task=None):
        if self.steps == 2:
            sys.stdout.close()
        return super().step(action, next_task)


class MaskRaisesLater(W13):
    """wrong: action_masks raises from the third step on."""

    def action_masks(self):
        if self.steps >= 2:
            raise RuntimeError("mask service unavailable")
        return super().action_masks()


class StateNone(W13):
    """wrong: state_dict returns None."""

    def state_dict(self):
        return None

    def load_state_dict(self, state):
        pass


class ScriptedNoSerial(W13):
    """wrong: its scripted_action knows 'oracle' only and raises for 'serial' (evaluate's baseline)."""

    def scripted_action(self, name, obs, generator=None):
        if name != "oracle":
            raise ValueError(f"no scripted policy called {name!r}")
        return super().scripted_action(name, obs, generator)


class MarkInProbe(W13):
    """marks in the 2-actor probe's step and sleeps 5 s there (a moment for the signal driver)."""

    def step(self, action, next_task=None):
        if self.num_envs == 2:
            mark()
            time.sleep(5)
        return super().step(action, next_task)


class MarkInChild(W13):
    """marks from its step when it runs in a child process (the collector process)."""

    def step(self, action, next_task=None):
        import multiprocessing

        if multiprocessing.parent_process() is not None and self.steps >= 2:
            mark()
            time.sleep(0.05)
        return super().step(action, next_task)


class Rank1OtherBank(W13):
    """wrong under DDP: rank 1's world has another task bank."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        if os.environ.get("LOCAL_RANK", "0") == "1":
            self.task_ids = [f"other-{i}" for i in range(8)]


class Rank1Raises(W13):
    """wrong under DDP: rank 1's world raises ValueError from its third step."""

    def step(self, action, next_task=None):
        if os.environ.get("LOCAL_RANK", "0") == "1" and self.steps >= 2 and self.num_envs > 2:
            raise ValueError("rank one's simulator crashed")
        return super().step(action, next_task)


def make_dict_annotated(num_envs: int, device: str = "cpu", seed: int = 0) -> dict:
    """wrong: a world factory whose return annotation says dict (it returns a W13)."""
    return W13(num_envs, device, seed)
'''

EXT = r'''
"""Round 13's external world: ExtMark is correct; in a worker process its actor 0 marks at step 2."""
import multiprocessing
import time

from r13worlds import mark
from parlightning.envs.base import ActionSpec


class ExtMark:
    observation_shape = (3,)
    action_spec = ActionSpec("discrete", nvec=(2,))
    tasks = ["a-0", "a-1", "b-0", "b-1"]

    def __init__(self, seed=0, actor=0):
        self.t = 0
        self.actor = actor

    def reset(self, task):
        self.t = 0
        return [0.0, 0.0, 0.0]

    def step(self, action):
        self.t += 1
        if self.t >= 2 and self.actor == 0 and multiprocessing.parent_process() is not None:
            mark()
            time.sleep(0.05)
        done = self.t >= 3
        return [float(self.t), float(int(action)), 0.0], 0.1, done, False, ({"outcome": 1.0} if done else None)
'''

USER = r'''
"""Round 13's samplers, strategies, callbacks and rewards: RRGood and StatGood are correct; each other
class is wrong in one way (its docstring says how)."""
import os
import time

import lightning as L
import torch
from parlightning.callbacks import RolloutCallback
from parlightning.distribution.samplers import RoundRobin
from parlightning.distribution.strategies import ClusterParallel, WorkUnit
from parlightning.parl.reward import PARLReward, Schedule
from r13worlds import mark


class RRForgetsSuper(RoundRobin):
    """wrong: a RoundRobin subclass whose __init__ forgets super().__init__()."""

    def __init__(self, label: str = "mine"):
        self.label = label


class RRGood(RoundRobin):
    """correct: a RoundRobin subclass with an argument of its own."""

    def __init__(self, label: str = "mine"):
        super().__init__()
        self.label = label


class NewlinesError(Exception):
    def __str__(self):
        return "\n\n"


class RecordRaisesNewlines:
    """wrong: a two-method sampler whose record raises an exception whose message is two newlines."""

    def pick(self, keys, round_index):
        return keys[round_index % len(keys)]

    def record(self, task_id, score):
        raise NewlinesError()


class Rank1RecordRaises:
    """wrong under DDP: a two-method sampler whose record raises on rank 1 only."""

    def pick(self, keys, round_index):
        return keys[round_index % len(keys)]

    def record(self, task_id, score):
        if os.environ.get("LOCAL_RANK", "0") == "1":
            raise RuntimeError("rank one's scoreboard is down")


class BatchedFloatPicks:
    """wrong: a batched sampler whose pick_batch returns float bank indices."""

    reward_blind = True

    def bind(self, task_ids, device):
        self.n = len(task_ids)

    def pick_batch(self, shard, round_index, reset_mask, generator=None):
        return torch.zeros(reset_mask.shape[0], dtype=torch.float32, device=shard.device) + shard[0].float()

    def record_batch(self, task_index, score, mask=None):
        pass

    def pick(self, keys, round_index):
        return keys[0]

    def record(self, task_id, score):
        pass


class PlanEmpty:
    """wrong: plan returns no work units at all."""

    name = "empty"

    def plan(self, n_workers, round_index, keys):
        return []



class PlanReversesKeys:
    """wrong: plan reverses the key list it is handed, in place, then deals blocks."""

    name = "reverser"

    def plan(self, n_workers, round_index, keys):
        if hasattr(keys, "reverse"):
            keys.reverse()
        ks = list(keys)
        return [WorkUnit(worker=w, keys=tuple(ks[w::n_workers])) for w in range(n_workers)]


class CPForgetsSuper(ClusterParallel):
    """wrong: a ClusterParallel subclass whose __init__ forgets super().__init__()."""

    def __init__(self, label: str = "mine"):
        self.label = label




class StatGood(RolloutCallback):
    """correct: adds a 0-dim tensor to rollout.stats."""

    def on_rollout_end(self, trainer, pl_module, rollout):
        rollout.stats["user/ok"] = torch.tensor(1.0)


class Rank1StringStat(RolloutCallback):
    """wrong under DDP: rank 1 adds a string to rollout.stats."""

    def on_rollout_end(self, trainer, pl_module, rollout):
        if trainer.global_rank == 1:
            rollout.stats["user/note"] = "rank one"



class NaNAdvantages(RolloutCallback):
    """wrong: writes NaN into the rollout's advantages after GAE."""

    def on_rollout_end(self, trainer, pl_module, rollout):
        rollout.buffer.advantages.fill_(float("nan"))


class FillsDisk(L.Callback):
    """wrong: at the end of the first iteration, fills the disk under $R13_FILL."""

    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.current_epoch == 0:
            try:
                with open(os.path.join(os.environ["R13_FILL"], "filler.bin"), "wb") as f:
                    while True:
                        f.write(b"\0" * 65536)
            except OSError:
                pass


class OnExceptionSleeps(L.Callback):
    """marks and sleeps 20 s in on_exception (a moment for the signal driver)."""

    def on_exception(self, trainer, pl_module, exception):
        mark()
        time.sleep(20)


class TeardownSleeps(L.Callback):
    """marks and sleeps 20 s in teardown, after training (a moment for the signal driver)."""

    def teardown(self, trainer, pl_module, stage):
        mark()
        time.sleep(20)


class MarkAndSleep(L.Callback):
    """marks at the start of iteration `epoch` and sleeps `seconds` there."""

    def __init__(self, epoch: int = 1, seconds: float = 10.0):
        self.epoch = epoch
        self.seconds = seconds

    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch == self.epoch:
            mark()
            time.sleep(self.seconds)



class RewardForgetsSuper(PARLReward):
    """wrong: a PARLReward subclass whose __init__ forgets super().__init__()."""

    def __init__(self, max_subagents: int, scale: float = 1.0):
        self.scale = scale


class RewardIntOutput(PARLReward):
    """wrong: a PARLReward subclass whose shaping bonus is an int64 tensor (the bonuses truncate to 0)."""

    def bonus(self, n_subagents, assigned, completed, *, validate=True):
        return super().bonus(n_subagents, assigned, completed, validate=validate).long()


class NaNSchedule(Schedule):
    """wrong: a λ schedule whose value is NaN."""

    def value(self, position):
        return float("nan")


class SignalsRaise:
    """wrong: a two-method sampler whose signals() raises."""

    def pick(self, keys, round_index):
        return keys[round_index % len(keys)]

    def record(self, task_id, score):
        pass

    def signals(self):
        raise KeyError("informative_share")


class StateDictRaises:
    """wrong: a two-method sampler whose state_dict raises."""

    def pick(self, keys, round_index):
        return keys[round_index % len(keys)]

    def record(self, task_id, score):
        pass

    def state_dict(self):
        raise RuntimeError("the sampler's database is locked")

    def load_state_dict(self, state):
        pass


class PlanKeysOutside:
    """wrong: plan hands out a task id that is not in the bank."""

    name = "outside"

    def plan(self, n_workers, round_index, keys):
        return [WorkUnit(worker=w, keys=("nope-0",)) for w in range(n_workers)]


class PlanWorkerBeyond:
    """wrong: plan's unit names worker 5 on a run of one rank."""

    name = "beyond"

    def plan(self, n_workers, round_index, keys):
        return [WorkUnit(worker=w + 5, keys=tuple(keys)) for w in range(n_workers)]


class Rank1OnExceptionHangs(L.Callback):
    """wrong under DDP: rank 1's on_exception never returns."""

    def on_exception(self, trainer, pl_module, exception):
        if trainer.global_rank == 1:
            while True:
                time.sleep(1)


class PolicyToNone(RolloutCallback):
    """wrong: replaces the module's policy with None after the first rollout."""

    def on_rollout_end(self, trainer, pl_module, rollout):
        pl_module.policy = None
'''

DRIVE = r'''
"""Round 13's signal driver: r13drive.py MARKER SIGNALS WAIT -- CMD...

Runs CMD, waits up to WAIT seconds for MARKER (a file holding the pid to signal, written by the case's
user code), sends SIGNALS (comma-separated names: TERM, HUP, STOP, CONT; sleepN.N waits), waits for CMD
and exits with its status (re-raising a signal that ended it), removing MARKER."""
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

FNS = r'''
"""Round 13's subagent function (no torch import): marks its worker's pid for the signal driver."""
import os


def marking_fn(instruction):
    p = os.environ.get("R13_MARKER")
    if p and not os.path.exists(p):
        with open(p + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(p + ".tmp", p)
    return {"success": True, "steps": 1}
'''

POOL_YAML = """\
seed_everything: 0
torch_threads: 1
trainer:
  max_epochs: 3
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
          class_path: parlightning.subagents.ProcessPool
          init_args: {fn: "r13fns:marking_fn", workers: 2, timeout: 10}
      step_timeout: 30
  num_envs: 4
  num_steps: 8
  update_epochs: 1
  num_minibatches: 1
  reward: null
"""

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
    class_path: r13worlds.W13
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
      world: r13ext:ExtMark
      workers: 1
      step_timeout: 20
  num_envs: 4
  num_steps: 8
  update_epochs: 1
  num_minibatches: 1
  reward: null
"""

W4_YAML = """\
data:
  env:
    class_path: parlightning.envs.swarm.SwarmEnv
    init_args: {split: train, max_subagents: 128, subagent_budget: 256, max_width: 4}
"""

# Lightning checkpoint of another LightningModule (no parlightning import), edited checkpoints, a raw
# state_dict, gzip, and TensorBoard event files from torch's SummaryWriter.
FOREIGN = r'''
import torch
import lightning as L


class Boring(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)

    def training_step(self, batch, i):
        return self.layer(batch[0]).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), batch_size=4)


t = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, default_root_dir=".")
t.fit(Boring())
t.save_checkpoint("foreign.ckpt")
'''

EDITS = r'''
import copy
import gzip

import torch
from parlightning.ppo.module import PPOModule

ck = torch.load("swarm.ckpt", weights_only=False, map_location="cpu")
for key in ("optimizer_states", "loops", "hyper_parameters"):
    assert key in ck, key


def save(name, edit):
    c = copy.deepcopy(ck)
    edit(c)
    torch.save(c, name)


save("ck_noopt.ckpt", lambda c: c.__setitem__("optimizer_states", []))
save("ck_noloops.ckpt", lambda c: c.pop("loops"))
save("ck_lrstr.ckpt", lambda c: c["hyper_parameters"].__setitem__("lr", "fast"))
save("ck_colour.ckpt", lambda c: c["hyper_parameters"].__setitem__("colour", "red"))
with open("swarm.ckpt", "rb") as f:
    data = f.read()
with open("swarm.ckpt.gz", "wb") as f:
    f.write(gzip.compress(data))
m = PPOModule.load_from_checkpoint("swarm.ckpt")
torch.save(m.state_dict(), "raw_sd.pt")

from torch.utils.tensorboard import SummaryWriter  # noqa: E402

for name, steps in [("disjoint/early", range(0, 50, 10)), ("disjoint/late", range(1000, 1050, 10)),
                    ("overlap/a", range(0, 110, 10)), ("overlap/b", range(5, 115, 10))]:
    w = SummaryWriter(name)
    for s in steps:
        w.add_scalar("charts/episodic_return", float(s % 7), s)
    w.close()
w = SummaryWriter("foreign_tb")
w.add_scalar("loss", 1.0, 0)
w.add_scalar("loss", 0.5, 1)
w.close()
w = SummaryWriter("text_only")
w.add_text("note", "hello", 0)
w.close()
'''


def make_fixtures(fx: Path, cases: list) -> None:
    """User code modules, configs, and the checkpoints, exports, run folder and event files the cases
    copy (built once per run, only what the chosen cases need)."""
    fx.mkdir(parents=True, exist_ok=True)
    (fx / "r13worlds.py").write_text(WORLDS)
    (fx / "r13ext.py").write_text(EXT)
    (fx / "r13user.py").write_text(USER)
    (fx / "r13drive.py").write_text(DRIVE)
    (fx / "r13fns.py").write_text(FNS)
    (fx / "pool.yaml").write_text(POOL_YAML)
    (fx / "user.yaml").write_text(USER_YAML)
    (fx / "ext.yaml").write_text(EXT_YAML)
    (fx / "w4.yaml").write_text(W4_YAML)
    (fx / "foreign.py").write_text(FOREIGN)
    (fx / "edits.py").write_text(EDITS)
    used = " ".join(str(v) for c in cases for v in list(c.files.values()) + (c.args if isinstance(c.args, list) else [c.args]))
    need = lambda *names: any(n in used for n in names)  # noqa: E731
    swarm_needed = need("swarm.ckpt", "run0", "policy.pt2", "ck_", "raw_sd", "disjoint", "overlap", "foreign_tb", "text_only")
    jobs = []
    if swarm_needed:
        jobs.append(("swarm", "fit", r5.TINY + ["--trainer.default_root_dir", str(fx / "swarm")]))
    if need("cart.ckpt"):
        jobs.append(("cart", "fit", r5.CART + ["--trainer.default_root_dir", str(fx / "cart")]))
    if need("bc.ckpt"):
        jobs.append(("bc", "bc", ["--config", "swarm", "--teacher", "serial", "--out", str(fx / "bc.ckpt"), "--rounds", "4",
                                  "--num_envs", "8", "--epochs", "1"]))
    if need("bc_w4.ckpt"):
        jobs.append(("bc_w4", "bc", ["--config", "swarm", "--config", str(fx / "w4.yaml"), "--teacher", "serial", "--out",
                                     str(fx / "bc_w4.ckpt"), "--rounds", "4", "--num_envs", "8", "--epochs", "1"]))
    for i, (name, kind, args) in enumerate(jobs):
        c = Case(f"fixture-{name}", "fixture", kind, args, control=True, timeout=300)
        outcome, _line, _s, text = run_case(c, fx / "_runs", fx, i)
        if outcome != "ok":
            raise SystemExit(f"fixture {name} failed ({outcome}): {text[-2000:]}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(fx), os.environ.get("PYTHONPATH", "")])}
    if swarm_needed:
        import shutil

        shutil.copy(fx / "swarm/lightning_logs/version_0/checkpoints/last.ckpt", fx / "swarm.ckpt")
        shutil.copytree(fx / "swarm/lightning_logs/version_0", fx / "run0", ignore=shutil.ignore_patterns("checkpoints"))
        for argv in ([PY, "-m", "parlightning.export", "--ckpt_path", "swarm.ckpt", "--out", "policy.pt2"],
                     [PY, "edits.py"]):
            done = subprocess.run(argv, cwd=fx, env=env, capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                raise SystemExit(f"fixture {argv} failed: {done.stdout[-1500:]} {done.stderr[-1500:]}")
    if need("cart.ckpt"):
        import shutil

        shutil.copy(fx / "cart/lightning_logs/version_0/checkpoints/last.ckpt", fx / "cart.ckpt")
    if need("foreign.ckpt"):
        done = subprocess.run([PY, "foreign.py"], cwd=fx, env=env, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise SystemExit(f"fixture foreign failed: {done.stderr[-1500:]}")


# ------------------------------------------------------------------------------------ the cases
B = r5.CaseBook("r13worlds")
fit, case, world, yaml_case = B.fit, B.case, B.world, B.yaml_case
TINY, CART, Q, UW = r5.TINY, r5.CART, r5.Q, r5.UW
EXTC = ["--config", "{fx}/ext.yaml"]
DDP = ["--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp"]
M = ["-m", "parlightning.fit"]
RUN = "lightning_logs"  # a run folder a fault after training started may leave
UNCHECKED = {"PARLIGHTNING_UNCHECKED_CHECKPOINTS": "1"}
RESUME2 = ["--trainer.max_epochs", "2"]
BCA = ["--out", "b.ckpt", "--rounds", "2", "--num_envs", "8", "--epochs", "1"]
ORACLE = ["--policy", "oracle", "--episodes", "1"]


def sh(script: str, **fmt: Any) -> list:
    """A shell command line (for mount namespaces and redirections)."""
    return ["sh", "-c", script.format(py=shlex.quote(PY), **fmt)]


def ns(setup: str, argv: list) -> list:
    """`argv` in a private user + mount namespace after `setup` (mounts), as root of that namespace."""
    return ["unshare", "-rm", "sh", "-c", f"{setup} && exec " + " ".join(shlex.quote(a) for a in argv)]


RO = "mkdir -p ro && mount --bind ro ro && mount -o remount,bind,ro ro"
FULL_TMPFS = "mkdir -p mnt && mount -t tmpfs -o size=8k tmpfs mnt && head -c 8192 /dev/zero > mnt/fill 2>/dev/null; true"


def drive(marker_sigs: str, argv: list, wait: float = 60) -> list:
    return [PY, "{fx}/r13drive.py", "{tmp}/mark", marker_sigs, str(wait), "--"] + argv


# ---------------------------------------------------------------- configs composed of several files
yaml_case("cfg-reward-max-subagents-differs-from-world", "config",
          "data:\n  reward:\n    class_path: parlightning.parl.reward.PARLReward\n    init_args:\n      max_subagents: 64\n",
          "max_subagents", quick=True)
fit("cfg-config-is-a-directory", "config", TINY + ["--config", "cfgdir"], "config", files={"cfgdir": "dir"})
fit("cfg-config-is-a-fifo", "config", TINY + ["--config", "c.yaml"], "c.yaml|config", files={"c.yaml": "fifo"},
    timeout=40)
yaml_case("cfg-ckpt-path-set-in-yaml-missing", "config", "ckpt_path: nowhere/last.ckpt\n", "ckpt_path")
fit("cfg-trainer-section-file-holds-model-keys", "config", TINY + ["--trainer", "t.yaml"], "lr",
    files={"t.yaml": "lr: 0.1\nclip_coef: 0.3\n"})
yaml_case("cfg-seed-everything-float", "config", "seed_everything: 1.5\n", "seed")
fit("cfg-reward-null-under-parl-annealing", "config", TINY + ["--data.reward", "null"], "reward|PARLAnnealing")
yaml_case("cfg-callbacks-list-with-null-entry", "config", "trainer:\n  callbacks:\n    - null\n", "callbacks")
yaml_case("cfg-prior-yes", "config", "model:\n  prior: yes\n", "prior")
yaml_case("cfg-prior-list", "config", "model:\n  prior: [0.9, 0.1]\n", "prior")
yaml_case("cfg-prior-action-true", "config", "model:\n  prior: {action: true, probability: 0.9}\n", "prior")
LAMBDA = ("data:\n  reward:\n    class_path: parlightning.parl.reward.PARLReward\n    init_args:\n      max_subagents: 128\n"
          "      lambda1:\n        class_path: {cls}\n        init_args: {args}\n")
yaml_case("cfg-lambda1-is-torch-lr-scheduler", "config",
          LAMBDA.format(cls="torch.optim.lr_scheduler.LinearLR", args="{start_factor: 0.5}"), "lambda1")
yaml_case("cfg-lambda1-schedule-subclass-returns-nan", "config", LAMBDA.format(cls="r13user.NaNSchedule", args="{}"),
          "NaNSchedule|lambda1")
yaml_case("cfg-reward-subclass-forgets-super-init", "config",
          "data:\n  reward:\n    class_path: r13user.RewardForgetsSuper\n    init_args: {max_subagents: 128}\n",
          "RewardForgetsSuper")
yaml_case("cfg-reward-subclass-returns-int64", "config",
          "data:\n  reward:\n    class_path: r13user.RewardIntOutput\n    init_args: {max_subagents: 128}\n",
          "RewardIntOutput")
fit("cfg-print-config-flag-typo", "config", TINY + ["--print_config=skip_defaults"], "print_config")
fit("cfg-per-actor-collection-with-lag-zero", "config", TINY + ["--data.collect", "trajectories"], "max_policy_lag")
fit("cfg-per-actor-collection-in-a-process", "config",
    TINY + ["--data.collect", "trajectories", "--data.max_policy_lag", "1", "--data.collect_in", "process"], "collect_in")
fit("cfg-prior-on-gru-policy", "config", TINY + ["--config", "swarm_gru", "--model.prior", "0.9"], "prior")
fit("cfg-gru-with-per-actor-collection", "config",
    TINY + ["--config", "swarm_gru", "--data.collect", "trajectories", "--data.max_policy_lag", "1"], "gru|recurrent")

# ---------------------------------------------------------------- Lightning pieces named in trainer
CB = "trainer:\n  callbacks+:\n    - class_path: {cls}\n      init_args: {args}\n"
ADD = ["--trainer.callbacks+"]
fit("cli-precision-16-mixed-on-cpu", "cli", TINY + ["--trainer.accelerator", "cpu", "--trainer.precision", "16-mixed"],
    "precision", quick=True)
fit("cli-swarm-device-cuda-without-gpu", "cli", TINY + ["--data.env.init_args.device", "cuda"], "device")
yaml_case("cli-throughput-monitor-without-batch-size-fn", "cli",
          CB.format(cls="lightning.pytorch.callbacks.ThroughputMonitor", args="{}"), "ThroughputMonitor|batch_size_fn")
yaml_case("cli-model-pruning-amount-two", "cli",
          CB.format(cls="lightning.pytorch.callbacks.ModelPruning", args="{pruning_fn: l1_unstructured, amount: 2.0}"),
          "ModelPruning|amount")
yaml_case("cli-lambda-callback-hook-takes-no-args", "cli",
          CB.format(cls="lightning.pytorch.callbacks.LambdaCallback", args="{on_train_start: os.getcwd}"),
          "LambdaCallback|on_train_start")
yaml_case("cli-checkpoint-dirpath-is-a-file", "cli",
          CB.format(cls="lightning.pytorch.callbacks.ModelCheckpoint", args="{dirpath: ckfile, every_n_epochs: 2}"), "dirpath|ckfile",
          files={"ckfile": "notes\n"}, guard=("ckfile",))
fit("cli-default-root-dir-is-a-file", "cli", TINY + ["--trainer.default_root_dir", "rootfile"], "default_root_dir|rootfile",
    files={"rootfile": "notes\n"}, guard=("rootfile",))
fit("cli-rich-progress-bar-without-rich", "cli",
    ["--config", "swarm", "--trainer.max_epochs", "1", "--data.num_envs", "8", "--data.num_steps", "8"] + ADD
    + ["lightning.pytorch.callbacks.RichProgressBar"], "RichProgressBar|rich")
fit("cli-learning-rate-finder-callback", "cli", TINY + ADD + ["lightning.pytorch.callbacks.LearningRateFinder"],
    "LearningRateFinder")
fit("cli-parl-annealing-twice", "cli", TINY + ADD + ["parlightning.callbacks.PARLAnnealing"], "PARLAnnealing")
fit("cli-accumulate-grad-batches-zero", "cli", TINY + ["--trainer.accumulate_grad_batches", "0"], "accumulate_grad_batches")
fit("cli-gradient-clip-algorithm-typo", "cli", TINY + ["--trainer.gradient_clip_val", "0.5",
                                                       "--trainer.gradient_clip_algorithm", "normal"],
    "gradient_clip_algorithm")
fit("cli-barebones-with-checkpointing", "cli", TINY + ["--trainer.barebones", "true"], "barebones")
fit("cli-num-nodes-zero", "cli", TINY + ["--trainer.num_nodes", "0"], "num_nodes")
fit("cli-log-every-n-steps-negative", "cli", TINY + ["--trainer.log_every_n_steps=-1"], "log_every_n_steps")
fit("cli-max-time-negative", "cli", TINY + ["--trainer.max_time", '{"minutes": -5}'], "max_time")
fit("cli-strategy-fsdp-on-cpu", "cli", TINY + ["--trainer.accelerator", "cpu", "--trainer.strategy", "fsdp"], "fsdp|strategy")
fit("cli-strategy-deepspeed-not-installed", "cli", TINY + ["--trainer.strategy", "deepspeed"], "deepspeed")
fit("cli-plugins-unknown-name", "cli", TINY + ["--trainer.plugins", "banana"], "plugins|banana")
fit("cli-profiler-unknown-name", "cli", TINY + ["--trainer.profiler", "fancy"], "profiler")
fit("cli-model-registry-without-litmodels", "cli", TINY + ["--trainer.model_registry", "my-model"], "model_registry")

# ---------------------------------------------------------------- checkpoints from other tools, resume changed
S = {"s.ckpt": "fixture:swarm.ckpt"}
fit("ckpt-path-is-a-fifo", "checkpoint", TINY + RESUME2 + ["--ckpt_path", "p.ckpt"], "ckpt_path", files={"p.ckpt": "fifo"},
    timeout=40)
fit("ckpt-resume-zero-byte-file", "checkpoint", TINY + RESUME2 + ["--ckpt_path", "z.ckpt"], "ckpt_path",
    files={"z.ckpt": b""})
fit("ckpt-resume-from-bc-output", "checkpoint", TINY + RESUME2 + ["--ckpt_path", "b.ckpt"], "ckpt_path",
    files={"b.ckpt": "fixture:bc.ckpt"}, guard=("b.ckpt",), quick=True)
fit("ckpt-init-from-zero-byte-file", "checkpoint", TINY + ["--model.init_from", "z.ckpt"], "init_from", files={"z.ckpt": b""})
fit("ckpt-init-from-bc-of-other-width", "checkpoint", TINY + ["--model.init_from", "b4.ckpt"], "init_from",
    files={"b4.ckpt": "fixture:bc_w4.ckpt"})
fit("ckpt-resume-with-changed-num-envs", "checkpoint", TINY + RESUME2 + ["--data.num_envs", "16", "--ckpt_path", "s.ckpt"],
    "num_envs", files=S, guard=("s.ckpt",))
fit("ckpt-resume-edited-loops-removed", "checkpoint", TINY + RESUME2 + ["--ckpt_path", "e.ckpt"], "ckpt_path|loops",
    files={"e.ckpt": "fixture:ck_noloops.ckpt"})
fit("ckpt-resume-lockstep-as-per-actor", "checkpoint",
    TINY + RESUME2 + ["--data.collect", "trajectories", "--data.max_policy_lag", "1", "--ckpt_path", "s.ckpt"],
    "collect", files=S, guard=("s.ckpt",))

# ---------------------------------------------------------------- evaluate
EV = ["--config", "swarm", "--ckpt_path"]
case("eval-ckpt-raw-state-dict", "evaluate", "evaluate", EV + ["r.pt", "--episodes", "1"], "ckpt_path",
     files={"r.pt": "fixture:raw_sd.pt"}, quick=True)
case("eval-ckpt-zero-byte", "evaluate", "evaluate", EV + ["z.ckpt", "--episodes", "1"], "ckpt_path", files={"z.ckpt": b""})
case("eval-ckpt-gzipped", "evaluate", "evaluate", EV + ["s.ckpt.gz", "--episodes", "1"], "ckpt_path",
     files={"s.ckpt.gz": "fixture:swarm.ckpt.gz"})
case("eval-bank-seeds-beyond-uint32", "evaluate", "evaluate", ORACLE + ["--bank_seeds", "4294967296"], "bank_seed")
case("eval-bank-seeds-on-cartpole", "evaluate", "evaluate",
     ["--config", "cartpole_fast", "--ckpt_path", "c.ckpt", "--episodes", "2", "--bank_seeds", "1", "2"], "bank_seeds",
     files={"c.ckpt": "fixture:cart.ckpt"})
case("eval-episodes-astronomical", "evaluate", "evaluate", ["--policy", "oracle", "--episodes", "1000000000000"], "episodes")
case("eval-user-world-episodes-never-end", "evaluate", "evaluate",
     UW + ["--config", "ne.yaml", "--policy", "serial", "--episodes", "1"], "NeverEnds|episode",
     files={"ne.yaml": "data:\n  env:\n    class_path: r13worlds.NeverEnds\n"}, timeout=60)
case("eval-user-world-float-mask", "evaluate", "evaluate",
     UW + ["--config", "mf.yaml", "--policy", "serial", "--episodes", "1"], ("MaskFloat", "mask"),
     files={"mf.yaml": "data:\n  env:\n    class_path: r13worlds.MaskFloat\n"})
case("eval-user-scripted-action-numpy", "evaluate", "evaluate",
     UW + ["--config", "sn.yaml", "--policy", "serial", "--episodes", "1"], ("ScriptedNumpy", "scripted_action"),
     files={"sn.yaml": "data:\n  env:\n    class_path: r13worlds.ScriptedNumpy\n"})
case("eval-user-world-without-a-serial-policy", "evaluate", "evaluate",
     UW + ["--config", "ns.yaml", "--policy", "oracle", "--episodes", "1"], ("ScriptedNoSerial", "serial"),
     files={"ns.yaml": "data:\n  env:\n    class_path: r13worlds.ScriptedNoSerial\n"})
case("eval-stall-timeout-negative", "evaluate", "evaluate", ORACLE + ["--stall_timeout", "-5"], "stall_timeout")
case("eval-gantt-on-cartpole", "evaluate", "evaluate",
     ["--config", "cartpole_fast", "--ckpt_path", "c.ckpt", "--episodes", "2", "--gantt", "g.png"], "gantt",
     files={"c.ckpt": "fixture:cart.ckpt"})

# ---------------------------------------------------------------- export
case("export-ckpt-zero-byte", "export", "export", ["--ckpt_path", "z.ckpt", "--out", "p.pt2"], "ckpt_path",
     files={"z.ckpt": b""}, quick=True)
case("export-ckpt-is-a-directory", "export", "export", ["--ckpt_path", "d", "--out", "p.pt2"], "ckpt_path", files={"d": "dir"})
case("export-ckpt-is-a-fifo", "export", "export", ["--ckpt_path", "f.ckpt", "--out", "p.pt2"], "ckpt_path",
     files={"f.ckpt": "fifo"}, timeout=40)
case("export-ckpt-foreign-lightning-unchecked", "export", "export", ["--ckpt_path", "f.ckpt", "--out", "p.pt2"], "ckpt_path",
     files={"f.ckpt": "fixture:foreign.ckpt"}, env=UNCHECKED)
case("export-ckpt-raw-state-dict", "export", "export", ["--ckpt_path", "r.pt", "--out", "p.pt2"], "ckpt_path",
     files={"r.pt": "fixture:raw_sd.pt"})
case("export-onnx-without-onnx-installed", "export", "export", ["--ckpt_path", "s.ckpt", "--out", "p.onnx"], "onnx",
     files=S, guard=("s.ckpt",))

# ---------------------------------------------------------------- bc
BCS = ["--config", "swarm", "--teacher", "serial"]
case("bc-label-smoothing-negative", "bc", "bc", BCS + BCA + ["--label_smoothing=-0.1"], "label_smoothing", quick=True)
case("bc-config-gru-policy", "bc", "bc", ["--config", "swarm", "--config", "swarm_gru", "--teacher", "serial"] + BCA,
     "gru|policy")
case("bc-out-is-its-teacher", "bc", "bc", ["--config", "swarm", "--teacher", "t.ckpt", "--out", "t.ckpt", "--rounds", "2",
                                           "--num_envs", "8", "--epochs", "1"], "out",
     files={"t.ckpt": "fixture:swarm.ckpt"}, guard=("t.ckpt",))
case("bc-json-same-as-out", "bc", "bc", BCS + BCA + ["--json", "b.ckpt"], "json")
case("bc-json-is-a-fifo", "bc", "bc", BCS + BCA + ["--json", "r.json"], "json", files={"r.json": "fifo"}, timeout=40)
case("bc-teacher-ckpt-of-cartpole", "bc", "bc", ["--config", "swarm", "--teacher", "c.ckpt"] + BCA, "teacher",
     files={"c.ckpt": "fixture:cart.ckpt"})
case("bc-teacher-zero-byte", "bc", "bc", ["--config", "swarm", "--teacher", "z.ckpt"] + BCA, "teacher", files={"z.ckpt": b""})
case("bc-teacher-gzipped", "bc", "bc", ["--config", "swarm", "--teacher", "t.ckpt.gz"] + BCA, "teacher",
     files={"t.ckpt.gz": "fixture:swarm.ckpt.gz"})
case("bc-teacher-raw-state-dict", "bc", "bc", ["--config", "swarm", "--teacher", "r.pt"] + BCA, "teacher",
     files={"r.pt": "fixture:raw_sd.pt"})
case("bc-teacher-foreign-lightning-unchecked", "bc", "bc", ["--config", "swarm", "--teacher", "f.ckpt"] + BCA, "teacher",
     files={"f.ckpt": "fixture:foreign.ckpt"}, env=UNCHECKED)
case("bc-stall-timeout-zero", "bc", "bc", BCS + BCA + ["--stall_timeout", "0"], "stall_timeout")
case("bc-user-world-mask-disappears", "bc", "bc",
     UW + ["--config", "mn.yaml", "--teacher", "serial", "--out", "b.ckpt", "--rounds", "6", "--num_envs", "8", "--epochs", "1"],
     ("MaskNoneLater", "mask"),
     files={"mn.yaml": "data:\n  env:\n    class_path: r13worlds.MaskNoneLater\n"})

# ---------------------------------------------------------------- plot and TensorBoard reads
GARBAGE = bytes((i * 37 + 11) % 251 for i in range(3000))
case("plot-event-file-garbage", "plot", "plot", ["r", "--out", "c.png"], "events|r",
     files={"r/events.out.tfevents.1.host": GARBAGE}, quick=True)
case("plot-foreign-summarywriter-run", "plot", "plot", ["f", "--out", "c.png"], "tag",
     files={"f": "fixture:foreign_tb"})
case("plot-text-only-run", "plot", "plot", ["t", "--out", "c.png"], "tag|scalar", files={"t": "fixture:text_only"})
case("plot-runs-whose-steps-do-not-overlap", "plot", "plot", ["d/*", "--out", "c.png"], "step|overlap|cover|range",
     files={"d": "fixture:disjoint"})
case("plot-tag-empty-string", "plot", "plot", ["r0", "--tag", "", "--out", "c.png"], "tag", files={"r0": "fixture:run0"})
case("plot-csv-same-as-out", "plot", "plot", ["r0", "--out", "c.png", "--csv", "c.png"], "csv|out",
     files={"r0": "fixture:run0"})
case("plot-group-empty-pattern", "plot", "plot", ["--group", "a=", "--out", "c.png"], "group")
case("plot-out-suffix-txt", "plot", "plot", ["r0", "--out", "c.txt"], "out", files={"r0": "fixture:run0"})
case("api-read-scalars-garbage-events", "plot", "py",
     "from parlightning.analysis.logs import read_scalars\nread_scalars('r')\n", "events|r",
     files={"r/events.out.tfevents.1.host": GARBAGE})

# ---------------------------------------------------------------- user worlds
yaml_case("world-swarm-subclass-forgets-super-init", "world",
          "data:\n  env:\n    class_path: r13worlds.SwarmForgetsSuper\n"
          "    init_args: {label: x, max_subagents: 128, subagent_budget: 256}\n", "SwarmForgetsSuper", quick=True)
world("world-step-clamps-the-action-in-place", "MutatesAction", ("MutatesAction", "action"))
world("world-step-raises-exception-whose-str-is-int", "RaisesOddStr", "RaisesOddStr")
world("world-step-sys-exit-zero", "ExitsZero", "ExitsZero")
world("world-step-closes-stdout", "ClosesStdout", "stdout")
world("world-mask-float", "MaskFloat", ("MaskFloat", "mask"))
world("world-mask-width-fits-neither-layout", "MaskWidthOdd", ("MaskWidthOdd", "mask"))
world("world-mask-is-a-tensor-attribute", "MaskAttribute", ("MaskAttribute", "action_masks"))
world("world-action-masks-raises-later", "MaskRaisesLater", ("MaskRaisesLater", "action_masks"))
world("world-factory-annotated-to-return-dict", "make_dict_annotated", "make_dict_annotated")
world("world-state-dict-returns-none", "StateNone", ("StateNone", "state_dict"))

# ---------------------------------------------------------------- user samplers, strategies, callbacks
fit("sampler-roundrobin-subclass-forgets-super-init", "sampler", TINY + ["--data.sampler", "r13user.RRForgetsSuper"],
    "RRForgetsSuper", quick=True)
fit("sampler-record-raises-newlines-only", "sampler", TINY + ["--data.sampler", "r13user.RecordRaisesNewlines"],
    ("RecordRaisesNewlines", "record"))
fit("sampler-batched-pick-batch-floats", "sampler", TINY + ["--data.sampler", "r13user.BatchedFloatPicks"],
    ("BatchedFloatPicks", "pick_batch"))
fit("sampler-signals-raises", "sampler", TINY + ["--data.sampler", "r13user.SignalsRaise"], ("SignalsRaise", "signals"))
fit("sampler-state-dict-raises", "sampler", TINY + ["--data.sampler", "r13user.StateDictRaises"],
    ("StateDictRaises", "state_dict"))
PLAN = ("trainer:\n  callbacks+:\n    - class_path: parlightning.callbacks.StrategyPlanner\n"
        "      init_args:\n        strategy: {{class_path: {cls}}}\n")
yaml_case("strategy-plan-returns-no-units", "strategy", PLAN.format(cls="r13user.PlanEmpty"), ("PlanEmpty", "plan"),
          quick=True)
yaml_case("strategy-plan-reverses-its-keys-in-place", "strategy", PLAN.format(cls="r13user.PlanReversesKeys"),
          ("PlanReversesKeys", "keys"))
yaml_case("strategy-plan-keys-outside-the-bank", "strategy", PLAN.format(cls="r13user.PlanKeysOutside"),
          ("PlanKeysOutside", "keys|nope-0"))
yaml_case("strategy-plan-worker-beyond-the-ranks", "strategy", PLAN.format(cls="r13user.PlanWorkerBeyond"),
          ("PlanWorkerBeyond", "worker"))
yaml_case("strategy-cluster-parallel-subclass-forgets-super", "strategy", PLAN.format(cls="r13user.CPForgetsSuper"),
          "CPForgetsSuper")
fit("callback-replaces-the-policy-with-none", "callback", TINY + ADD + ["r13user.PolicyToNone"], "PolicyToNone")
fit("callback-writes-nan-into-advantages", "callback", TINY + ADD + ["r13user.NaNAdvantages"], "NaNAdvantages", quick=True)

# ---------------------------------------------------------------- the Python API
CK = "{fx}/swarm.ckpt"
POL = f"import torch, parlightning\np = parlightning.load_policy('{CK}')\nobs = torch.zeros(3, 13, 6)\n"
FITO = ("['trainer.max_epochs=1', 'data.num_envs=8', 'data.num_steps=8', 'trainer.enable_progress_bar=false', "
        "'trainer.enable_model_summary=false']")
PPO = "from parlightning.ppo.module import PPOModule\n"
api = lambda name, code, expect, **kw: case(name, "api", "py", code, expect, **kw)  # noqa: E731
api("api-load-from-checkpoint-hparams-file-missing", PPO + f"PPOModule.load_from_checkpoint('{CK}', hparams_file='missing.yaml')\n",
    "hparams_file", quick=True)
api("api-load-from-checkpoint-map-location-cuda",
    PPO + f"PPOModule.load_from_checkpoint('{CK}', map_location={{'cpu': 'cuda:0'}})\n", "map_location|cuda")
api("api-load-from-checkpoint-strict-string", PPO + f"PPOModule.load_from_checkpoint('{CK}', strict='yes')\n", "strict")
api("api-load-from-checkpoint-unknown-override", PPO + f"PPOModule.load_from_checkpoint('{CK}', colour='red')\n", "colour")
api("api-load-from-checkpoint-edited-lr-string", PPO + "PPOModule.load_from_checkpoint('e.ckpt')\n", "lr",
    files={"e.ckpt": "fixture:ck_lrstr.ckpt"})
api("api-load-from-checkpoint-edited-unknown-hparam", PPO + "PPOModule.load_from_checkpoint('e.ckpt')\n", "colour",
    files={"e.ckpt": "fixture:ck_colour.ckpt"})
api("api-subclass-module-load-from-checkpoint-missing-arg",
    PPO + "class MyPPO(PPOModule):\n    def __init__(self, extra: int, **kw):\n        super().__init__(**kw)\n"
    "        self.extra = extra\n" + f"MyPPO.load_from_checkpoint('{CK}')\n", "extra")
api("api-fit-override-key-without-value", "from parlightning import fit\nfit(config='swarm', overrides=['trainer.max_epochs'])\n",
    "trainer.max_epochs")
api("api-load-policy-zero-byte", "import parlightning\nparlightning.load_policy('z.ckpt')\n", "z.ckpt", files={"z.ckpt": b""})
api("api-load-policy-directory", "import parlightning\nparlightning.load_policy('policy_dir')\n", "policy_dir",
    files={"policy_dir": "dir"})
api("api-load-policy-fifo", "import parlightning\nparlightning.load_policy('f.ckpt')\n", "f.ckpt", files={"f.ckpt": "fifo"},
    timeout=40)
api("api-load-policy-path-int", "import parlightning\nparlightning.load_policy(42)\n", "path")
api("api-predict-deterministic-string", POL + "p.predict(obs, deterministic='no')\n", "deterministic")
api("api-predict-mask-float", POL + "p.predict(obs, mask=torch.ones(3, 12))\n", "mask")
api("api-predict-mask-int64", POL + "p.predict(obs, mask=torch.ones(3, 12, dtype=torch.long))\n", "mask")
api("api-predict-mask-transposed", POL + "p.predict(obs, mask=torch.ones(12, 3, dtype=torch.bool))\n", "mask")
SW = "import torch\nfrom parlightning.envs.swarm import SwarmEnv\nenv = SwarmEnv(num_envs=4)\nobs = env.reset(seed=0)\n"
CP = "import torch\nfrom parlightning.envs import CartPoleEnv\nenv = CartPoleEnv(4)\nenv.reset(seed=0)\n"
api("api-swarm-scripted-action-unknown-name", SW + "env.scripted_action('serial2', obs)\n", "serial2")
api("api-swarm-num-envs-true", "from parlightning.envs.swarm import SwarmEnv\nSwarmEnv(num_envs=True)\n", "num_envs")
api("api-swarm-splits-duplicate", "from parlightning.envs.swarm import SwarmEnv\nSwarmEnv(num_envs=4, splits=(2, 2))\n",
    "splits")
api("api-swarm-reset-seed-true", SW + "env.reset(seed=True)\n", "seed")
api("api-swarm-step-action-out-of-range", SW + "env.step(torch.full((4, 12), 9, dtype=torch.long))\n", "action")
api("api-cartpole-step-float-actions", CP + "env.step(torch.zeros(4))\n", "action")
api("api-cartpole-step-action-out-of-range", CP + "env.step(torch.full((4,), 5, dtype=torch.long))\n", "action")
api("api-module-prior-and-init-from", PPO + "PPOModule(prior=0.9, init_from='{fx}/bc.ckpt')\n", ("prior", "init_from"))
api("api-module-policy-unknown", PPO + "PPOModule(policy='transformer')\n", "policy")
api("api-module-hidden-sizes-string", PPO + "PPOModule(hidden_sizes='64,64')\n", "hidden_sizes")
api("api-parl-reward-lambda1-float", "from parlightning.parl.reward import PARLReward\nPARLReward(128, lambda1=0.1)\n",
    "lambda1")
api("api-parl-reward-called-with-lists",
    "from parlightning.parl.reward import PARLReward\nPARLReward(128)([1.0], [1.0], [1.0], [1.0])\n", "n_subagents")
api("api-linear-schedule-value-negative-position",
    "from parlightning.parl.reward import LinearSchedule\nLinearSchedule().value(-5)\n", "position")
api("api-action-spec-low-above-high",
    "from parlightning.envs.base import ActionSpec\nActionSpec('continuous', shape=(2,), low=1.0, high=-1.0)\n", "low|high")
api("api-gym-env-id-empty", "from parlightning.envs import GymVectorEnv\nGymVectorEnv(2, env_id='')\n", "env_id")
api("api-roundrobin-pick-from-a-set",
    "from parlightning.distribution.samplers import RoundRobin\nRoundRobin().pick({'a-0', 'b-0'}, 0)\n", "keys")
api("api-roundrobin-pick-negative-round",
    "from parlightning.distribution.samplers import RoundRobin\nRoundRobin().pick(['a-0', 'b-0'], -1)\n", "round_index")
api("api-workunit-duplicate-keys",
    "from parlightning.distribution.strategies import WorkUnit\nWorkUnit(worker=0, keys=('a-0', 'a-0'))\n", "keys")
api("api-write-trace-into-missing-folder",
    "from parlightning.analysis.trace import write_trace\nwrite_trace([{'a': 1}], 'missing/t.jsonl')\n", "missing|path")
EXTW = "from parlightning.envs.external import ExternalBatchedEnv\nExternalBatchedEnv(2, world='r13ext:ExtMark', "
api("api-ext-env-on-error-typo", EXTW + "on_error='ignore')\n", "on_error")
api("api-ext-env-runner-typo", EXTW + "runner='dask')\n", "runner")

# ---------------------------------------------------------------- environment variables (fresh interpreters)
case("env-local-rank-not-a-number", "env", "cmd", [PY] + M + TINY, "LOCAL_RANK", env={"LOCAL_RANK": "abc"}, quick=True)
case("env-ascii-stderr-non-ascii-checkpoint-name", "env", "cmd",
     [PY, "-m", "parlightning.evaluate", "--config", "swarm", "--ckpt_path", "modèle_été.ckpt", "--episodes", "1"],
     "ckpt_path", env={"PYTHONIOENCODING": "ascii", "LC_ALL": "C", "LANG": "C"})

# ---------------------------------------------------------------- disk and permission faults
case("fs-working-folder-read-only", "fs", "cmd",
     ns('d="$PWD" && mount --bind "$d" "$d" && mount -o remount,bind,ro "$d" && cd "$d"', [PY] + M + TINY),
     "lightning_logs|default_root_dir|read-only", quick=True)
case("fs-logger-save-dir-read-only", "fs", "cmd",
     ns(RO, [PY] + M + TINY + ["--trainer.logger", "lightning.pytorch.loggers.TensorBoardLogger",
                               "--trainer.logger.save_dir", "ro/tb"]), "save_dir", files={"ro": "dir"})
case("fs-kernel-cache-read-only-compile", "fs", "cmd",
     ns(RO, [PY] + M + TINY + ["--data.env.init_args.compile", "true"]), "PARLIGHTNING_CACHE_DIR|cache",
     env={"PARLIGHTNING_CACHE_DIR": "ro/cache"}, files={"ro": "dir"}, timeout=120)
case("fs-bc-json-read-only", "fs", "cmd",
     ns(RO, [PY, "-m", "parlightning.bc"] + BCS + BCA + ["--json", "ro/r.json"]), "json", files={"ro": "dir"})
case("fs-checkpoint-dirpath-read-only", "fs", "cmd",
     ns(RO, [PY] + M + TINY + ["--config", "c.yaml"]), "dirpath",
     files={"ro": "dir", "c.yaml": CB.format(cls="lightning.pytorch.callbacks.ModelCheckpoint",
                                            args="{dirpath: ro/ck, every_n_epochs: 2}")})
case("fs-plot-out-read-only", "fs", "cmd", ns(RO, [PY, "-m", "parlightning.plot", "{fx}/run0", "--out", "ro/c.png"]), "out",
     files={"ro": "dir"})
case("fs-eval-trace-read-only", "fs", "cmd",
     ns(RO, [PY, "-m", "parlightning.evaluate"] + ORACLE + ["--trace", "ro/t.jsonl"]), "trace", files={"ro": "dir"})
case("fs-eval-gantt-on-full-tmpfs", "fs", "cmd",
     ns(FULL_TMPFS, [PY, "-m", "parlightning.evaluate"] + ORACLE + ["--gantt", "mnt/g.png"]), "gantt", files={"mnt": "dir"})
case("fs-eval-json-on-full-tmpfs", "fs", "cmd",
     ns(FULL_TMPFS, [PY, "-m", "parlightning.evaluate"] + ORACLE + ["--json", "mnt/e.json"]), "json", files={"mnt": "dir"})
case("fs-disk-fills-after-first-iteration", "fs", "cmd",
     ns("mkdir -p mnt && mount -t tmpfs -o size=6m tmpfs mnt",
        [PY] + M + TINY + ["--trainer.max_epochs", "3", "--trainer.default_root_dir", "mnt"] + ADD + ["r13user.FillsDisk"]),
     "space", env={"R13_FILL": "mnt"}, files={"mnt": "dir"}, timeout=90)
case("fs-print-config-stdout-is-dev-full", "fs", "cmd",
     sh("{py} -m parlightning.fit --config swarm --print_config > /dev/full"), "stdout|space|print_config")
case("fs-evaluate-stdout-is-dev-full", "fs", "cmd",
     sh("{py} -m parlightning.evaluate --policy oracle --episodes 1 > /dev/full"), "stdout|space")

# ---------------------------------------------------------------- signals at new moments
UWF = ["--config", "{fx}/user.yaml"]
MK = {"R13_MARKER": "mark"}  # relative: the harness does not substitute env values; every case runs in its folder
case("signal-sigterm-while-world-loads-state-on-resume", "signal", "cmd",
     sh("{py} -m parlightning.fit --config {fx}/user.yaml --data.env r13worlds.SlowLoad > first.log 2>&1 && rm first.log && "
        "R13_SLOW_LOAD=1 exec {py} {fx}/r13drive.py {tmp}/mark TERM 60 -- {py} -m parlightning.fit --config {fx}/user.yaml "
        "--data.env r13worlds.SlowLoad --trainer.max_epochs 2 "
        "--ckpt_path lightning_logs/version_0/checkpoints/last.ckpt", fx="{fx}", tmp="{tmp}"),
     "SIGTERM", env=MK, allow=(RUN,), timeout=120, quick=True)
case("signal-sigterm-during-the-probe-step", "signal", "cmd",
     drive("TERM", [PY] + M + UWF + ["--data.env", "r13worlds.MarkInProbe"]), "SIGTERM", env=MK, timeout=90)
case("signal-sigterm-while-on-exception-runs", "signal", "cmd",
     drive("TERM", [PY] + M + UWF + ["--data.env", "r13worlds.RaisesLater"] + ADD + ["r13user.OnExceptionSleeps"]),
     "SIGTERM|RaisesLater", env=MK, allow=(RUN,), timeout=90)
# after a finished iteration the line must say what was kept (every other such SIGTERM line names the checkpoint)
case("signal-sigterm-during-teardown", "signal", "cmd",
     drive("TERM", [PY] + M + TINY + ADD + ["r13user.TeardownSleeps"]), ("SIGTERM", "checkpoint"), env=MK, allow=(RUN,),
     timeout=90)
case("signal-sigterm-while-stopped-then-continued", "signal", "cmd",
     drive("STOP,sleep1,TERM,sleep1,CONT", [PY] + M + TINY + ["--trainer.max_epochs", "3"] + ADD + ["r13user.MarkAndSleep"]),
     "SIGTERM", env=MK, allow=(RUN,), timeout=90)
case("signal-sigterm-to-world-worker-only", "signal", "cmd", drive("TERM", [PY] + M + EXTC), "worker", env=MK,
     allow=(RUN,), timeout=90)
case("signal-sigterm-to-process-pool-worker-only", "signal", "cmd", drive("TERM", [PY] + M + ["--config", "{fx}/pool.yaml"]),
     "subagent|worker|ProcessPool", env=MK, allow=(RUN,), timeout=90)
case("signal-sigterm-to-collector-process-only", "signal", "cmd",
     drive("TERM", [PY] + M + UWF + ["--data.env", "r13worlds.MarkInChild", "--trainer.max_epochs", "3",
                                     "--data.max_policy_lag", "1", "--data.collect_in", "process"]),
     "collector", env=MK, allow=(RUN,), timeout=90)
case("signal-sigterm-during-api-fit", "signal", "cmd",
     drive("TERM", [PY, "-c", "from parlightning import fit\n"
                               f"fit(config='swarm', overrides={FITO[:-1]}, 'trainer.max_epochs=3', "
                               "'--trainer.callbacks+', 'r13user.MarkAndSleep'])\n"]),
     "SIGTERM", env=MK, allow=(RUN,), timeout=90)
case("signal-sighup-during-bc-collection", "signal", "cmd",
     drive("HUP", [PY, "-m", "parlightning.bc"] + UWF + ["--config", "mk.yaml", "--teacher", "serial", "--out", "b.ckpt",
                                                          "--rounds", "40", "--num_envs", "8", "--epochs", "1"]),
     "SIGHUP", env=MK, files={"mk.yaml": "data:\n  env:\n    class_path: r13worlds.MarkOnStep\n"}, timeout=90)

# ---------------------------------------------------------------- 2-rank gloo DDP
case("ddp-node-rank-not-a-number", "ddp", "cmd", [PY] + M + TINY + DDP, "NODE_RANK", env={"NODE_RANK": "abc"}, timeout=75)
case("ddp-rank1-world-has-another-task-bank", "ddp", "cmd",
     [PY] + M + UWF + ["--data.env", "r13worlds.Rank1OtherBank"] + DDP, ("rank", "task"), timeout=75)
case("ddp-rank1-sampler-record-raises", "ddp", "cmd",
     [PY] + M + TINY + DDP + ["--trainer.max_epochs", "2", "--data.sampler", "r13user.Rank1RecordRaises"],
     ("rank 1", "Rank1RecordRaises"), allow=(RUN,), timeout=75)
case("ddp-rank1-world-raises-base-exception", "ddp", "cmd",
     [PY] + M + UWF + ["--data.env", "r13worlds.Rank1Abort", "--trainer.max_epochs", "2"] + DDP, ("rank 1", "Rank1Abort"),
     allow=(RUN,), timeout=75)
case("ddp-rank1-callback-logs-a-string", "ddp", "cmd",
     [PY] + M + TINY + DDP + ["--trainer.max_epochs", "2"] + ADD + ["r13user.Rank1StringStat"], ("rank 1", "Rank1StringStat"),
     allow=(RUN,), timeout=75)
case("ddp-rank1-raises-then-on-exception-hangs", "ddp", "cmd",
     [PY] + M + UWF + ["--data.env", "r13worlds.Rank1Raises", "--trainer.max_epochs", "2"] + DDP + ADD
     + ["r13user.Rank1OnExceptionHangs"], "rank 1", allow=(RUN,), timeout=90)


# ---------------------------------------------------------------- the scripts
def script(name: str, file: str, args: list, expect: Any, **kw: Any) -> None:
    case(name, "script", "cmd", [PY, "{root}/scripts/" + file] + args, expect, **kw)


script("script-sampler-table-seeds-zero", "sampler_table.py", ["--quick", "--seeds", "0"], "seeds", timeout=60, quick=True)
script("script-cartpole-check-steps-not-a-multiple-of-512", "cartpole_check.py",
       ["--quick", "--paths", "tensor", "--steps", "1000", "--logdir", "cl"], "steps", timeout=90)
script("script-cartpole-check-seeds-duplicate", "cartpole_check.py",
       ["--quick", "--paths", "tensor", "--seeds", "0", "0", "--logdir", "cl"], "seeds", timeout=90)
script("script-cartpole-check-json-is-a-directory", "cartpole_check.py",
       ["--quick", "--paths", "tensor", "--json", "jd", "--logdir", "cl"], "json", files={"jd": "dir"}, timeout=90)
script("script-world-fit-banks-zero", "world_fit.py", ["--quick", "--banks", "0", "--out", "wf"], "banks", timeout=90)
script("script-world-fit-jobs-zero", "world_fit.py", ["--quick", "--jobs", "0", "--out", "wf"], "jobs", timeout=90)
script("script-world-fit-policies-duplicate", "world_fit.py", ["--quick", "--policies", "mlp", "mlp", "--out", "wf"],
       "policies", timeout=90)
script("script-world-fit-out-is-a-fifo", "world_fit.py", ["--quick", "--out", "wf"], "out", files={"wf": "fifo"}, timeout=90)
script("script-bench-world-actors-zero", "bench_world.py", ["--quick", "--n", "0"], "--n|actors", timeout=60)
script("script-bench-world-steps-zero", "bench_world.py", ["--quick", "--steps", "0"], "steps", timeout=60)
script("script-bench-world-threads-zero", "bench_world.py", ["--quick", "--threads", "0"], "threads", timeout=60)
script("script-bench-world-device-meta", "bench_world.py", ["--quick", "--device", "meta"], "device", timeout=60)
script("script-world-baselines-banks-negative", "world_baselines.py", ["--quick", "--banks", "-2"], "banks", timeout=60)
script("script-world-baselines-seeds-zero", "world_baselines.py", ["--quick", "--seeds", "0"], "seeds", timeout=60)
script("script-world-baselines-episodes-zero", "world_baselines.py", ["--quick", "--episodes", "0"], "episodes", timeout=60)
script("script-experiment-axis-without-equals", "experiment.py", ["--quick", "--axis", "model.lr", "--out", "ex"], "axis",
       timeout=90)

# ---------------------------------------------------------------- controls (must succeed; not counted)
control = dict(control=True)
fit("control-tiny-swarm", "control", TINY, (), **control)
fit("control-composed-config-cp-and-override", "control", TINY + ["--config", "parallel/cp", "--config", "o.yaml"], (),
    files={"o.yaml": "model:\n  lr: 0.0005\n"}, **control)
yaml_case("control-swarm-subclass-with-its-args", "control",
          "data:\n  env:\n    class_path: r13worlds.SwarmGood\n    init_args: {label: x, max_subagents: 128, subagent_budget: 256}\n",
          (), **control)
yaml_case("control-swarm-subclass-second-config-partial-args", "control",
          "data:\n  env:\n    class_path: r13worlds.SwarmGood\n    init_args: {label: x}\n", (), **control)
world("control-user-world-w13-with-masks", "W13", (), **control)
fit("control-sampler-subclass-calls-super", "control", TINY + ["--data.sampler", "r13user.RRGood"], (), **control)
fit("control-scalar-rollout-stat", "control", TINY + ADD + ["r13user.StatGood"], (), **control)
fit("control-resume-to-two-iterations", "control", TINY + RESUME2 + ["--ckpt_path", "s.ckpt"], (), files=S, **control)
case("control-resume-from-read-only-folder-with-stale-partial", "control", "cmd",
     ns(RO, [PY] + M + TINY + RESUME2 + ["--ckpt_path", "ro/s.ckpt"]), (),
     files={"ro/s.ckpt": "fixture:swarm.ckpt", "ro/.last.ckpt.999999.stale.partial": b"half a checkpoint"}, **control)
fit("control-bf16-mixed-on-cpu", "control", TINY + ["--trainer.accelerator", "cpu", "--trainer.precision", "bf16-mixed"], (),
    **control)
case("control-eval-two-bank-seeds", "control", "evaluate", EV + ["s.ckpt", "--episodes", "1", "--bank_seeds", "1", "2"], (),
     files=S, **control)
case("control-plot-one-run", "control", "plot", ["r0", "--out", "c.png"], (), files={"r0": "fixture:run0"}, **control)
case("control-bc-then-init-from", "control", "cmd",
     sh("{py} -m parlightning.bc --config swarm --teacher serial --out b.ckpt --rounds 2 --num_envs 8 --epochs 1 && "
        "exec {py} -m parlightning.fit " + " ".join(TINY) + " --model.init_from b.ckpt"), (), timeout=120, **control)
case("control-api-fit-from-a-thread", "control", "py",
     "import threading\nfrom parlightning import fit\nerr = []\n"
     f"def run():\n    try:\n        fit(config='swarm', overrides={FITO})\n    except BaseException as e:\n        err.append(e)\n"
     "t = threading.Thread(target=run)\nt.start()\nt.join()\nif err:\n    raise err[0]\n", (), **control)
case("control-api-fit-inside-running-event-loop", "control", "py",
     "import asyncio\nfrom parlightning import fit\n"
     f"async def main():\n    return fit(config='swarm', overrides={FITO})\nasyncio.run(main())\n", (), **control)
case("control-ext-world-one-worker", "control", "cmd", [PY] + M + EXTC, (), timeout=90, **control)
case("control-ext-world-worker-tmpdir-missing", "control", "cmd", [PY] + M + EXTC, (), env={"TMPDIR": "/nonexistent/r13"},
     timeout=90, **control)


CASES = B.cases

# Cases judged valid input or ambiguous after the draft run: name -> reason (not counted).
DROPPED: dict[str, str] = {
    "cli-precision-16-mixed-on-cpu": "Lightning 2.6 with torch 2.13 runs fp16 autocast on the CPU: valid input, it trained",
    "cli-model-registry-without-litmodels": "Lightning ignores trainer.model_registry when litmodels is absent; not the "
                                            "package's to refuse",
    "ckpt-resume-lockstep-as-per-actor": "a lock-step checkpoint resumed under per-actor collection (data.collect: "
                                         "trajectories) and trained: valid",
    "eval-user-world-episodes-never-end": "evaluate caps an episode's rounds and scores one that never ends as unsolved "
                                          "(success 0): a reasonable reading, not a hang",
    "export-onnx-without-onnx-installed": "onnx is installed on this machine after all: the export succeeded (valid)",
    "world-step-clamps-the-action-in-place": "the step loop stores the sampled actions before the step (checked: the "
                                             "buffer holds the sampled actions, not the clamped ones): a world mapping its "
                                             "own actions is its own semantics",
    "strategy-plan-reverses-its-keys-in-place": "plan is handed the keys as a tuple: there is nothing to mutate",
    "api-read-scalars-garbage-events": "an unreadable event file reads as no scalars ({}), as TensorBoard's own reader "
                                       "skips bad records; plot then says the run logs no scalars",
    "api-load-from-checkpoint-hparams-file-missing": "Lightning's own load_from_checkpoint warns about a missing "
                                                     "hparams_file and loads the checkpoint's hyper-parameters",
    "api-load-from-checkpoint-strict-string": "a truthy string is strict loading, which this valid checkpoint passes",
    "api-load-from-checkpoint-edited-unknown-hparam": "an extra hyper-parameter nobody reads is harmless",
    "api-predict-mask-float": "predict reads a 0/1 mask of another dtype as the same flags: lenient, not wrong",
    "api-predict-mask-int64": "predict reads a 0/1 mask of another dtype as the same flags: lenient, not wrong",
    "api-workunit-duplicate-keys": "a unit listing a task twice may weight it on purpose",
    "cfg-prior-on-gru-policy": "the prior applies to the recurrent policy's output bias too: it trained, valid",
}

VALID = [c for c in CASES if c.name in DROPPED]
CASES = [c for c in CASES if c.name not in DROPPED]


def main(argv: Any = None) -> int:
    return r5.run_corpus(argv, round_no=13, description=__doc__.split("\n\n")[0], cases_all=CASES, valid=VALID,
                         dropped=DROPPED, make_fixtures=make_fixtures)


if __name__ == "__main__":
    sys.exit(main())
