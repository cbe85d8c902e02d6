#!/usr/bin/env python
"""Round 11 of the bad-input corpus: a fresh set of bad inputs and faults, written blind from the
README, `docs/guides/*.md`, `docs/README.md`, `configs/` (and `parlightning/configs/`), every CLI's and
script's `--help`, and the docstrings of the public classes and functions (read through `help()` /
`inspect.getdoc`, not by opening the package's files); its author read neither `tests/`, nor the
package's source, nor the earlier rounds' cases, outputs or fixes, nor the git log or the changelog
(the case names of rounds 5-10 were listed with `--list` only to avoid repeats).

New kinds of input were the point, weighted towards the code a user writes and the Python API:
- tensor worlds (`BatchedEnv`) returning bfloat16 or sparse observations, a 0-d or numpy-scalar or
  bfloat16 reward later in the run, a nested tensor, finite observations so large the policy
  overflows, values that depend on `num_envs` (so the 2-actor probe cannot see them), a `num_envs`
  property that raises AttributeError, a `__getattr__` proxy answering None, a class-level
  `num_envs`, a SwarmEnv subclass that drops `next_task`, `next_task` called with indices, a task bank
  reordered mid-run, `async def action_masks`, factories that cache their world or take only
  `**kwargs`, worlds that set torch's default device or grad mode, call `breakpoint()` or parse
  `sys.argv`, raise ENOSPC / BrokenPipeError / the package's own ConfigError, or whose `repr` raises;
- external worlds returning bytes, a generator, numeric strings or None inside the observation, None
  as the terminal observation, `task` inside `parts`, a one-element flag array, `retryable` as
  strings, an `async def` step that stops the event loop, `close()` calling `sys.exit`, a step stuck in
  a child process (threads and worker processes), shared resources whose constructor or `close()`
  never returns, a world that closes the shared pool, a YAML timestamp for a `str` argument;
- subagent pools: functions returning a triple, a timedelta or negative seconds, closing every file
  descriptor, calling `breakpoint()`, running out of memory, a builtin (`len`); HTTP endpoints that
  send a partial body, drip the body, die mid-run, speak another protocol, or are reached over
  https; a non-latin-1 `api_key`, a timestamp in `extra_body`, a dead `HTTP_PROXY`;
- samplers (generator / `async def` pick or record, a pick outside its shard, `signals()` of
  strings, an infinite declared wait, state without `load_state_dict`, batched picks shaped [N, 1] or
  compacted to the resetting actors, a mutated shard, a pick that raises under a lag budget or a
  collector process), strategies (`async def` plan / observe, `validate` that refuses or takes no
  argument, a string section, a plan that mutates its keys or returns namedtuples, a plan that
  raises under a lag budget), callbacks (`trainer.fit` or `parlightning.fit` called from a hook, a
  checkpoint stripped of its `state_dict` or given a datetime, `load_state_dict` raising on resume,
  a truncated batch, `on_exception` that raises, `teardown` that hangs, an overrun declared wait,
  `pl_module.log` in a rollout hook, a changed default dtype, a dropped rollout buffer);
- the Python API called with wrong arguments or in the wrong order: `predict` from threads and with
  sparse input, `Policy` built from None or a Linear, `PPOModule` hyper-parameter overrides and its
  methods before a trainer, `RolloutDataModule` before `build`, with an env instance or a sampler
  class, `ExternalBatchedEnv.send` / `receive` / `close` misuse, SwarmEnv / CartPoleEnv / NormalizeEnv
  / GymVectorEnv state and lifecycle, pools and samplers with bad arguments, `WorkUnit`,
  `expected_wait`, `read_scalars`, `PARLReward`, `PoolOrchestrationWorld` used directly;
- tools (`evaluate` / `export` / `bc` / `plot`) with arguments wrong in new ways and checkpoints that
  are a pickled module, saved weights-only, carry trailing garbage or an unknown hyper-parameter;
- the command line (16-mixed on CPU, Lightning callbacks and plugins that cannot work here, the
  `hpc` / `registry` checkpoint keywords, `--ckpt_path` with `init_from`), YAML (timestamps, `!!set`,
  `!!binary`, `%YAML 1.2`, complex keys, `0o` octal, null list entries), the filesystem (a deleted
  working folder, read-only mounts in a private mount namespace, `last.ckpt` that is a folder, a
  UNIX socket as a checkpoint), the environment (a TMPDIR too long for the fork server's socket,
  `CXX=true`, a RANK beyond WORLD_SIZE);
- signals at the start, in the first rollout, during a checkpoint save, twice, to the whole process
  group (with pool workers, world workers or a collector process), during `evaluate` and `bc`; and
  four 2-rank gloo faults (a world worker of rank 1 SIGKILLed, Ctrl-C to the group,
  rank 1 raising while a checkpoint is saved, rank 1 leaving the fit loop early).

    python scripts/bad_inputs_round11.py                # every case; writes docs/results/data/bad_inputs_round11-<tag>.txt
    python scripts/bad_inputs_round11.py --tag draft    # the same, into ...-draft.txt
    python scripts/bad_inputs_round11.py --quick        # one case per category
    python scripts/bad_inputs_round11.py --only NAME... # the cases whose name contains any NAME
    python scripts/bad_inputs_round11.py --list         # the cases, one per line

The harness is round 5's (`scripts/bad_inputs_round5.py`: `Case`, `CaseBook`, `run_case`,
`run_corpus`), imported, not copied: a case per forked process and folder (the scripts, signals, DDP,
read-only mounts and start-up environment cases as `cmd`, a fresh interpreter); outcome classes clean /
traceback / misleading / messy / accepted / hang / crash. A case is **clean** when it exits non-zero
with exactly one `error:` line containing the case's keywords (the field or the failing component), no
traceback and nothing left behind (no new file, no `lightning_logs/version_*` unless the fault comes
after training started, given files unchanged, no process of the case alive). For the Python API a
case is clean when it raises an exception of the package whose message contains the keywords. Controls
(user code written by the book, some of it adversarial but valid: reused buffers, views, noisy pool
workers) must train; they are not counted. Cases judged valid input after the draft run are in
`DROPPED` with the reason (not counted).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import bad_inputs_round5 as r5  # noqa: E402  the harness: Case, CaseBook, run_case, run_corpus

PY = sys.executable
Case = r5.Case
run_case = r5.run_case


# ------------------------------------------------------------------------------------ user code
# Tensor worlds (module r11worlds), external worlds and shared resources (r11ext), samplers /
# strategies / callbacks (r11user), subagent functions (r11fns: no torch import), small HTTP servers
# and a pool-config runner (r11http), and a signal driver (r11drive). Each class or function is wrong
# in one way (its docstring says how); W11, W11Tasks, W11InPlace, W11Views, Good, NoisyGood,
# GoodSampler, BindOnce, GoodStrategy, GoodCallback and good_fn / noisy_fn are the controls.
WORLDS = r'''
"""Round 11's tensor worlds: W11 is a correct world; each other class is wrong in one way."""
import errno
import os
import sys
import time

import numpy as np
import torch
from parlightning.envs.base import ActionSpec, BatchedEnv, EpisodeParts, StepResult


class W11(BatchedEnv):
    """Control: 4 features, 3 actions, episodes of 5 steps, reward 1 for action 1."""

    observation_shape = (4,)
    action_spec = ActionSpec("discrete", nvec=(3,))

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0) -> None:
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.gen = torch.Generator().manual_seed(int(seed))
        self.t = torch.zeros(self.num_envs, dtype=torch.long)
        self.calls = 0

    def _obs(self):
        return torch.rand(self.num_envs, 4, generator=self.gen)

    def _reward(self, action):
        return (action == 1).float()

    def reset(self, *, seed=None, task_index=None):
        if seed is not None:
            self.gen.manual_seed(int(seed))
        self.t.zero_()
        return self._obs()

    def step(self, action, next_task=None):
        self.calls += 1
        reward = self._reward(action)
        self.t += 1
        done = self.t >= 5
        final = self._obs()
        fresh = self._obs()
        self.t = torch.where(done, torch.zeros_like(self.t), self.t)
        obs = torch.where(done[:, None], fresh, final)
        truncated = torch.zeros(self.num_envs, dtype=torch.bool)
        return StepResult(obs, reward, done.clone(), truncated, final, None)

    def state_dict(self):
        return {"t": self.t.clone(), "gen": self.gen.get_state()}

    def load_state_dict(self, state):
        self.t = state["t"].clone()
        self.gen.set_state(state["gen"])


class W11Tasks(W11):
    """Control: W11 with a task bank (one id with a non-ASCII letter, one of 200 characters) and parts."""

    task_ids = ["solo-0", "solo-1", "fanout-\u00fc", "fanout-" + "x" * 200]

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0) -> None:
        super().__init__(num_envs, device, seed)
        self.task = torch.arange(self.num_envs) % len(self.task_ids)

    def reset(self, *, seed=None, task_index=None):
        obs = super().reset(seed=seed)
        if task_index is not None:
            self.task = torch.as_tensor(task_index).long().clone()
        return obs

    def _next(self, next_task, done):
        return next_task(done) if callable(next_task) else next_task

    def step(self, action, next_task=None):
        res = super().step(action)
        done = res.terminated
        n = self.num_envs
        parts = EpisodeParts(task=self.task.clone(), outcome=(action == 1).float(), n_subagents=torch.zeros(n),
                             assigned=torch.zeros(n), completed=torch.zeros(n), critical_steps=torch.full((n,), 5.0),
                             serial_steps=torch.full((n,), 5.0))
        if next_task is not None:
            picks = self._next(next_task, done)
            self.task = torch.where(done, torch.as_tensor(picks).long(), self.task)
        return res._replace(parts=parts)


class W11InPlace(W11):
    """Control: returns the same preallocated observation, reward, flag and mask tensors every call,
    written in place (as Gymnasium's vector envs reuse their buffers); valid: the caller copies."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0) -> None:
        super().__init__(num_envs, device, seed)
        n = self.num_envs
        self.obs_buf = torch.zeros(n, 4)
        self.final_buf = torch.zeros(n, 4)
        self.rew_buf = torch.zeros(n)
        self.term_buf = torch.zeros(n, dtype=torch.bool)
        self.trunc_buf = torch.zeros(n, dtype=torch.bool)
        self.mask_buf = torch.ones(n, 1, dtype=torch.bool)

    def reset(self, *, seed=None, task_index=None):
        self.obs_buf.copy_(super().reset(seed=seed))
        return self.obs_buf

    def step(self, action, next_task=None):
        res = super().step(action)
        self.obs_buf.copy_(res.obs)
        self.final_buf.copy_(res.final_obs)
        self.rew_buf.copy_(res.reward)
        self.term_buf.copy_(res.terminated)
        return StepResult(self.obs_buf, self.rew_buf, self.term_buf, self.trunc_buf, self.final_buf, None)

    def action_masks(self):
        return self.mask_buf


class W11Views(W11):
    """Control: non-contiguous observation views, a stride-0 (expanded) flag tensor, a numpy int
    `num_envs` and a torch.Size `observation_shape`: all valid tensors and sizes."""

    observation_shape = torch.Size([4])

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0) -> None:
        super().__init__(num_envs, device, seed)
        self.num_envs = np.int64(num_envs)

    def _obs(self):
        wide = torch.rand(int(self.num_envs), 8, generator=self.gen)
        return wide[:, ::2]

    def step(self, action, next_task=None):
        res = super().step(action)
        return res._replace(truncated=torch.zeros(1, dtype=torch.bool).expand(int(self.num_envs)))


class ObsBF16(W11):
    """Observations in bfloat16 (from reset on)."""

    def _obs(self):
        return super()._obs().to(torch.bfloat16)


class ObsSparseAtReset(W11):
    """reset returns a sparse COO observation tensor."""

    def reset(self, *, seed=None, task_index=None):
        return super().reset(seed=seed).to_sparse()


class RewardZeroDimLater(W11):
    """From the 3rd step the reward is one 0-d tensor instead of [N]."""

    def _reward(self, action):
        return torch.tensor(1.0) if self.calls >= 3 else super()._reward(action)


class RewardNumpyScalar(W11):
    """The reward is a numpy float32 scalar."""

    def _reward(self, action):
        return np.float32(1.0)


class RewardBF16Later(W11):
    """From the 4th step the reward is bfloat16."""

    def _reward(self, action):
        r = super()._reward(action)
        return r.to(torch.bfloat16) if self.calls >= 4 else r


class ObsNestedLater(W11):
    """From the 3rd step the observation is a torch.nested tensor of the rows."""

    def step(self, action, next_task=None):
        res = super().step(action)
        if self.calls >= 3:
            res = res._replace(obs=torch.nested.nested_tensor([row for row in res.obs]))
        return res


class ObsHuge(W11):
    """Finite observations of 1e30 (a raw counter): the policy's activations overflow."""

    def _obs(self):
        return torch.full((self.num_envs, 4), 1e30)


class RewardRowsFixedAtTwo(W11):
    """The reward is built for 2 actors (the size it was tried at): wrong at any other num_envs."""

    def _reward(self, action):
        return torch.ones(2)


class ResetNaNBeyondProbe(W11):
    """reset's observation is NaN for actors 2 and up (the 2-actor probe never has them)."""

    def reset(self, *, seed=None, task_index=None):
        obs = super().reset(seed=seed)
        obs[2:] = float("nan")
        return obs


class DtypeDependsOnNumEnvs(W11):
    """Observations are float64 when num_envs > 2 (float32 on the 2-actor probe)."""

    def _obs(self):
        obs = super()._obs()
        return obs.double() if self.num_envs > 2 else obs


class InitFailsAtFullSize(W11):
    """The constructor refuses more than 2 actors (a licence limit), after the probe passed."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0) -> None:
        if int(num_envs) > 2:
            raise ValueError(f"simulator licence allows 2 actors, asked for {num_envs}")
        super().__init__(num_envs, device, seed)


class NumEnvsClassAttribute(W11):
    """`num_envs = 2` as a class attribute and the constructor never sets it: tensors have N rows."""

    num_envs = 2

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0) -> None:
        n = int(num_envs)
        self.device = torch.device(device)
        self.gen = torch.Generator().manual_seed(int(seed))
        self.t = torch.zeros(n, dtype=torch.long)
        self.calls = 0
        self.n = n

    def _obs(self):
        return torch.rand(self.n, 4, generator=self.gen)

    def step(self, action, next_task=None):
        self.calls += 1
        reward = self._reward(action)
        self.t += 1
        done = self.t >= 5
        self.t = torch.where(done, torch.zeros_like(self.t), self.t)
        obs = self._obs()
        return StepResult(obs, reward, done, torch.zeros(self.n, dtype=torch.bool), obs.clone(), None)


class NumEnvsTypo(W11):
    """`num_envs` is a property that reads a misspelt attribute (AttributeError inside the property)."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0) -> None:
        self._n = int(num_envs)
        self.device = torch.device(device)
        self.gen = torch.Generator().manual_seed(int(seed))
        self.t = torch.zeros(self._n, dtype=torch.long)
        self.calls = 0

    @property
    def num_envs(self):
        return self._num


class GetattrProxy(BatchedEnv):
    """A wrapper world that forwards attributes to an inner W11 with `__getattr__`, answering None
    for anything the inner world lacks (`action_masks`, `task_ids`, `solved_threshold`, ...)."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0) -> None:
        self._inner = W11(num_envs, device, seed)

    def __getattr__(self, name):
        if name.startswith("__") or name == "_inner":
            raise AttributeError(name)
        return getattr(self._inner, name, None)

    def reset(self, *, seed=None, task_index=None):
        return self._inner.reset(seed=seed, task_index=task_index)

    def step(self, action, next_task=None):
        return self._inner.step(action, next_task)


class RaisesAtStep3(W11):
    """step raises ValueError('simulator diverged') at its 3rd call."""

    def step(self, action, next_task=None):
        if self.calls >= 2:
            raise ValueError("simulator diverged at t=3")
        return super().step(action, next_task)


class StepRaisesENOSPC(W11):
    """step raises OSError(ENOSPC) from its own cache file at the 3rd call (not the trainer's disk)."""

    def step(self, action, next_task=None):
        if self.calls >= 2:
            raise OSError(errno.ENOSPC, "No space left on device", "/scratch/sim_cache.bin")
        return super().step(action, next_task)


class StepRaisesBrokenPipe(W11):
    """step raises BrokenPipeError (its simulator subprocess went away) at the 3rd call."""

    def step(self, action, next_task=None):
        if self.calls >= 2:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
        return super().step(action, next_task)


class StepRaisesPackageConfigError(W11):
    """step raises the package's own ConfigError (reused by the user) at the 3rd call."""

    def step(self, action, next_task=None):
        if self.calls >= 2:
            from parlightning.errors import ConfigError
            raise ConfigError("scenario file has no entry for level 3")
        return super().step(action, next_task)


class ReprRaises(W11):
    """`__repr__` raises, and step raises at the 3rd call (the error report must still name it)."""

    def __repr__(self):
        raise RuntimeError("repr of the simulator handle failed")

    def step(self, action, next_task=None):
        if self.calls >= 2:
            raise ValueError("simulator diverged at t=3")
        return super().step(action, next_task)


class InitParsesArgv(W11):
    """The constructor parses sys.argv with argparse (meant for its own script): argparse exits."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0) -> None:
        import argparse
        parser = argparse.ArgumentParser(prog="mysim")
        parser.add_argument("--level", type=int, default=1)
        parser.parse_args()
        super().__init__(num_envs, device, seed)


class StepBreakpoint(W11):
    """A forgotten breakpoint() in step (3rd call); stdin is not a terminal."""

    def step(self, action, next_task=None):
        if self.calls == 2:
            breakpoint()
        return super().step(action, next_task)


class SetsDefaultDeviceMeta(W11):
    """The constructor leaves torch's default device set to 'meta' (left over from a shape check)."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0) -> None:
        super().__init__(num_envs, device, seed)
        torch.set_default_device("meta")


class StepDisablesGrad(W11):
    """step turns autograd off for the whole thread (torch.set_grad_enabled(False)) to go faster."""

    def step(self, action, next_task=None):
        torch.set_grad_enabled(False)
        return super().step(action, next_task)


class MasksAsync(W11):
    """`action_masks` is an `async def` (returns a coroutine)."""

    async def action_masks(self):
        return torch.ones(self.num_envs, 1, dtype=torch.bool)


class NextTaskIndices(W11Tasks):
    """Calls next_task with the indices of the finished actors instead of the bool done mask."""

    def _next(self, next_task, done):
        if callable(next_task):
            return next_task(done.nonzero().squeeze(1))
        return next_task


class TaskIdsReorderedMidRun(W11Tasks):
    """From the 9th step (the second rollout) its task bank is re-sorted in place (ids move)."""

    def step(self, action, next_task=None):
        if self.calls == 8:
            self.task_ids = sorted(self.task_ids, reverse=True)
        return super().step(action, next_task)


class PartsTaskIdStrings(W11Tasks):
    """parts.task holds the task id strings (a list) instead of bank indices."""

    def step(self, action, next_task=None):
        res = super().step(action, next_task)
        return res._replace(parts=res.parts._replace(task=[self.task_ids[int(i)] for i in res.parts.task]))


class MaskCategoryDeadBeyondProbe(W11):
    """Category-layout masks [N, 3]; actor 5 (absent from the 2-actor probe) has no live category."""

    def action_masks(self):
        mask = torch.ones(self.num_envs, 3, dtype=torch.bool)
        if self.num_envs > 5:
            mask[5] = False
        return mask


class MarkStep(W11):
    """Helper for signal cases: in the run's own world (not the 2-actor probe) writes $R11_MARK at its
    3rd step, then takes 0.2 s per step."""

    def step(self, action, next_task=None):
        if self.calls >= 2 and self.num_envs > 2:
            mark = os.environ.get("R11_MARK")
            if mark and not os.path.exists(mark):
                with open(mark + ".tmp", "w") as fh:
                    fh.write(str(os.getpid()))
                os.replace(mark + ".tmp", mark)
            time.sleep(0.2)
        return super().step(action, next_task)


_CACHE = {}


def make_w11(num_envs: int, device: str, seed: int) -> BatchedEnv:
    """Control factory."""
    return W11(num_envs, device, seed)


def make_cached(num_envs: int, device: str, seed: int) -> BatchedEnv:
    """A factory that builds its world once and hands the same one back on every call (memoised)."""
    if "env" not in _CACHE:
        _CACHE["env"] = W11(num_envs, device, seed)
    return _CACHE["env"]


def make_kwargs_only(**kwargs) -> BatchedEnv:
    """A factory that takes only keyword arguments."""
    return W11(kwargs["num_envs"], kwargs.get("device", "cpu"), kwargs.get("seed", 0))
'''

SWARMSUB = r'''
"""A SwarmEnv subclass (its own module: it imports the built-in world)."""
from parlightning.envs.swarm import SwarmEnv


class SwarmDropsNextTask(SwarmEnv):
    """Adds a step counter and calls super().step(action) without passing next_task on."""

    def step(self, action, next_task=None):
        self.rounds = getattr(self, "rounds", 0) + 1
        return super().step(action)
'''

EXT = r'''
"""Round 11's external worlds (one episode at a time) and shared resources."""
import asyncio
import os
import subprocess
import sys
import time

import numpy as np
from parlightning.envs.base import ActionSpec


class Good:
    """Control: 3 features, 2 actions, 3-step episodes; reuses one observation list as its buffer."""

    observation_shape = (3,)
    action_spec = ActionSpec("discrete", nvec=(2,))
    tasks = ["solo-0", "solo-1", "fanout-0"]

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.t = 0
        self.buf = [0.0, 0.0, 0.0]

    def reset(self, task):
        self.t = 0
        self.task = task
        self.buf[:] = [0.0, 0.0, 0.0]
        return self.buf

    def _act(self, action):
        return int(np.asarray(action).reshape(-1)[0])

    def step(self, action):
        self.t += 1
        a = self._act(action)
        self.buf[:] = [float(self.t), float(a), 1.0]
        done = self.t >= 3
        parts = {"outcome": 1.0 if a == 1 else 0.0} if done else None
        return self.buf, float(a == 1), done, False, parts


class NoisyGood(Good):
    """Control for worker processes: prints 100 KB to stdout and stderr every step."""

    def step(self, action):
        sys.stdout.write("o" * 100_000 + "\n")
        sys.stderr.write("e" * 100_000 + "\n")
        return super().step(action)


_STEPS = [0]


class MarkGood(Good):
    """Helper for signal cases: writes $R11_MARK once its process has stepped worlds 20 times (past
    the preflight probe), then 0.1 s per step."""

    def step(self, action):
        _STEPS[0] += 1
        mark = os.environ.get("R11_MARK")
        if _STEPS[0] >= 20 and mark and not os.path.exists(mark):
            with open(mark + ".tmp", "w") as fh:
                fh.write(str(os.getpid()))
            os.replace(mark + ".tmp", mark)
        time.sleep(0.1)
        return super().step(action)


class WorkerPidRank1(Good):
    """Helper for DDP: rank 1's world worker writes its pid to $R11_MARK once it has stepped 4 times
    (the preflight probe's worker steps twice); 0.05 s per step."""

    def step(self, action):
        _STEPS[0] += 1
        mark = os.environ.get("R11_MARK")
        if os.environ.get("LOCAL_RANK") == "1" and _STEPS[0] >= 4 and mark and not os.path.exists(mark):
            with open(mark + ".tmp", "w") as fh:
                fh.write(str(os.getpid()))
            os.replace(mark + ".tmp", mark)
        time.sleep(0.05)
        return super().step(action)


class Slow(Good):
    """Helper for the API: every step takes 3 s."""

    def step(self, action):
        time.sleep(3)
        return super().step(action)


class ObsBytes(Good):
    """Observations are raw bytes of the right length (b'\\x00\\x01\\x02')."""

    def reset(self, task):
        super().reset(task)
        return b"\x00\x01\x02"

    def step(self, action):
        _obs, r, term, trunc, parts = super().step(action)
        return bytes([self.t, 1, 2]), r, term, trunc, parts


class ObsGenerator(Good):
    """From the 2nd step the observation is a generator over the values."""

    def step(self, action):
        obs, r, term, trunc, parts = super().step(action)
        if self.t >= 2:
            obs = (x for x in list(obs))
        return obs, r, term, trunc, parts


class ObsNumericStrings(Good):
    """From the 2nd step the observation is a list of numeric strings ('1.0', ...)."""

    def step(self, action):
        obs, r, term, trunc, parts = super().step(action)
        if self.t >= 2:
            obs = [str(x) for x in obs]
        return obs, r, term, trunc, parts


class ObsContainsNone(Good):
    """At the 2nd step the observation has a None in the middle."""

    def step(self, action):
        obs, r, term, trunc, parts = super().step(action)
        if self.t == 2:
            obs = [obs[0], None, obs[2]]
        return obs, r, term, trunc, parts


class TerminalObsNone(Good):
    """Returns None as the observation of the step that ends the episode."""

    def step(self, action):
        obs, r, term, trunc, parts = super().step(action)
        return (None if term else obs), r, term, trunc, parts


class TerminatedArray(Good):
    """`terminated` is a one-element numpy bool array."""

    def step(self, action):
        obs, r, term, trunc, parts = super().step(action)
        return obs, r, np.array([term]), trunc, parts


class PartsHasTask(Good):
    """parts carries a `task` key (the one EpisodeParts field a world must not set)."""

    def step(self, action):
        obs, r, term, trunc, parts = super().step(action)
        if parts is not None:
            parts = dict(parts, task=2)
        return obs, r, term, trunc, parts


class RewardComplex(Good):
    """The reward is a complex number (1+0j) from the 2nd step."""

    def step(self, action):
        obs, r, term, trunc, parts = super().step(action)
        return obs, (complex(r, 0.0) if self.t >= 2 else r), term, trunc, parts


class RetryableStrings(Good):
    """`retryable` is a list of exception names (strings); step raises ConnectionError at t=2."""

    retryable = ["ConnectionError", "TimeoutError"]

    def step(self, action):
        if self.t == 1:
            self.t += 1
            raise ConnectionError("simulator socket reset")
        return super().step(action)


class AsyncStopsLoop(Good):
    """`async def` world whose step stops the running event loop at t=2 (a misplaced loop.stop())."""

    async def reset(self, task):
        return Good.reset(self, task)

    async def step(self, action):
        res = Good.step(self, action)
        if self.t == 2:
            asyncio.get_running_loop().stop()
        return res


class CloseSysExit(Good):
    """close() calls sys.exit(3)."""

    def close(self):
        sys.exit(3)


class SubprocessHang(Good):
    """At t=2 the step runs a program that never ends (`sleep 300`) and waits for it."""

    def step(self, action):
        if self.t == 1:
            subprocess.run(["sleep", "300"])
        return super().step(action)


class UsesPool(Good):
    """A correct world that takes a shared `pool` (helper)."""

    def __init__(self, pool, seed: int = 0) -> None:
        super().__init__(seed)
        self.pool = pool


class ClosesSharedPool(UsesPool):
    """Delegates one subtask per step, and at the end of its episode closes the pool every world shares."""

    def step(self, action):
        h = self.pool.spawn({"skill": 0, "instruction": 0, "cost": 1})
        self.pool.wait([h], timeout=5)
        res = super().step(action)
        if res[2]:
            self.pool.close()
        return res


class UsesDb(Good):
    """A correct world that takes a shared `db` resource (helper)."""

    def __init__(self, db, seed: int = 0) -> None:
        super().__init__(seed)
        self.db = db


class Labelled(Good):
    """A correct world with a `start: str` label argument (helper)."""

    def __init__(self, seed: int = 0, start: str = "2024-01-01") -> None:
        super().__init__(seed)
        self.start = start.strip()


class Db:
    """A shared resource (a database handle) whose close() never returns."""

    def __init__(self, name: str = "runs") -> None:
        self.name = name

    def close(self) -> None:
        time.sleep(3600)


class DbInitHangs:
    """A shared resource whose constructor never returns (a connect without timeout)."""

    def __init__(self, name: str = "runs") -> None:
        time.sleep(3600)

    def close(self) -> None:
        pass
'''

USER = r'''
"""Round 11's samplers, strategies and callbacks."""
import collections
import datetime
import os
import time

import lightning
import torch
from parlightning.callbacks import RolloutCallback
from parlightning.distribution.samplers import BatchedTaskSampler
from parlightning.distribution.strategies import WorkUnit
from parlightning.runtime.waits import expected_wait


class GoodSampler:
    """Control: a two-method sampler (the least picked task first) with state."""

    def __init__(self) -> None:
        self.n = {}

    def pick(self, keys, round_index):
        k = min(keys, key=lambda x: self.n.get(x, 0))
        self.n[k] = self.n.get(k, 0) + 1
        return k

    def record(self, task_id, score):
        pass

    def state_dict(self):
        return {"n": dict(self.n)}

    def load_state_dict(self, state):
        self.n = dict(state["n"])


class PickGenerator(GoodSampler):
    """pick is a generator function (yield instead of return)."""

    def pick(self, keys, round_index):
        yield keys[0]


class PickAsync(GoodSampler):
    """pick is `async def`."""

    async def pick(self, keys, round_index):
        return keys[0]


class RecordAsync(GoodSampler):
    """record is `async def` (its records would never run)."""

    async def record(self, task_id, score):
        self.n[task_id] = self.n.get(task_id, 0) - 1


class PickOutsideShard(GoodSampler):
    """pick ignores the shard it is given and returns a fixed bank task (locked-15)."""

    def pick(self, keys, round_index):
        return "locked-15"


class PickRaises(GoodSampler):
    """pick raises at its 12th call (the second round)."""

    def pick(self, keys, round_index):
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls >= 12:
            raise LookupError("task server returned no task")
        return super().pick(keys, round_index)


class SignalsStrings(GoodSampler):
    """signals() (logged by the package) returns strings, not 0-d tensors."""

    def signals(self):
        return {"mood": "curious", "picks": str(sum(self.n.values()))}


class PickInfiniteWait(GoodSampler):
    """pick declares its wait on a task server with an infinite bound."""

    def pick(self, keys, round_index):
        with expected_wait(float("inf"), "the task server"):
            return super().pick(keys, round_index)


class StateNoLoad:
    """A sampler with state_dict but no load_state_dict."""

    def __init__(self) -> None:
        self.n = 0

    def pick(self, keys, round_index):
        self.n += 1
        return keys[self.n % len(keys)]

    def record(self, task_id, score):
        pass

    def state_dict(self):
        return {"n": self.n}


class SubclassesBatchedProtocol(BatchedTaskSampler):
    """Subclasses the BatchedTaskSampler protocol (as if it were a base class) but implements only the
    two-method path; the batched methods it inherits are the protocol's empty stubs."""

    def pick(self, keys, round_index):
        return keys[round_index % len(keys)]

    def record(self, task_id, score):
        pass


class GoodBatched:
    """Control-like sampler with both paths: two methods and the batched one (bind / pick_batch /
    record_batch), which is the one used."""

    def pick(self, keys, round_index):
        return keys[round_index % len(keys)]

    def record(self, task_id, score):
        pass

    def bind(self, task_ids, device):
        self.k = len(task_ids)

    def pick_batch(self, shard, round_index, reset_mask, generator=None):
        idx = torch.randint(len(shard), (reset_mask.shape[0],), generator=generator, device=shard.device)
        return shard[idx]

    def record_batch(self, task_index, score, mask=None):
        pass

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class BindOnce(GoodBatched):
    """Control: refuses a second bind (the protocol says: once, before the first pick) and has the
    protocol's record_batch(task_index, score), without the built-ins' `mask`."""

    def bind(self, task_ids, device):
        if getattr(self, "bound", False):
            raise RuntimeError("BindOnce.bind called twice")
        self.bound = True
        super().bind(task_ids, device)

    def record_batch(self, task_index, score):  # the protocol's signature: no mask
        pass


class BatchedColumn(GoodBatched):
    """pick_batch returns [N, 1] instead of [N]."""

    def pick_batch(self, shard, round_index, reset_mask, generator=None):
        return super().pick_batch(shard, round_index, reset_mask, generator).unsqueeze(1)


class BatchedCompact(GoodBatched):
    """pick_batch returns picks for the resetting actors only ([E], E = reset_mask.sum())."""

    def pick_batch(self, shard, round_index, reset_mask, generator=None):
        return super().pick_batch(shard, round_index, reset_mask, generator)[reset_mask]


class BatchedMutatesShard(GoodBatched):
    """pick_batch overwrites the shard it is given with its first task."""

    def pick_batch(self, shard, round_index, reset_mask, generator=None):
        picks = super().pick_batch(shard, round_index, reset_mask, generator)
        shard.fill_(int(shard[0]))
        return picks


class GoodStrategy:
    """Control: every worker gets every n-th sorted task."""

    name = "good"

    def plan(self, n_workers, round_index, keys):
        ks = sorted(keys)
        return [WorkUnit(w, tuple(ks[w::n_workers])) for w in range(n_workers)]


class HalfShard(GoodStrategy):
    """Helper: worker w gets two sorted tasks (a shard smaller than the bank)."""

    name = "half"

    def plan(self, n_workers, round_index, keys):
        ks = sorted(keys)
        return [WorkUnit(w, tuple(ks[2 * w:2 * w + 2])) for w in range(n_workers)]


class PlanAsync(GoodStrategy):
    """plan is `async def`."""

    async def plan(self, n_workers, round_index, keys):
        return GoodStrategy.plan(self, n_workers, round_index, keys)


class ObserveAsync(GoodStrategy):
    """observe is `async def`."""

    async def observe(self, unit, task_id, score):
        self.seen = getattr(self, "seen", 0) + 1


class ValidateRefuses(GoodStrategy):
    """validate(n_workers) refuses one worker (this strategy needs 4)."""

    def validate(self, n_workers):
        if n_workers < 4:
            raise ValueError(f"BlockAffinity needs 4 workers, got {n_workers}")


class ValidateNoArg(GoodStrategy):
    """validate takes no argument besides self."""

    def validate(self):
        return None


class SectionString(GoodStrategy):
    """plan gives each unit a section as a string ('0')."""

    def plan(self, n_workers, round_index, keys):
        ks = sorted(keys)
        return [WorkUnit(w, tuple(ks[w::n_workers]), section=str(w)) for w in range(n_workers)]


class PlanMutatesKeys(GoodStrategy):
    """plan reverses the task-id list it is given, in place (when it is a list)."""

    def plan(self, n_workers, round_index, keys):
        if isinstance(keys, list):
            keys.reverse()
        return super().plan(n_workers, round_index, keys)


Unit = collections.namedtuple("Unit", ["worker", "keys"])


class PlanNamedTuples(GoodStrategy):
    """plan returns namedtuples (worker, keys) instead of WorkUnit."""

    def plan(self, n_workers, round_index, keys):
        ks = sorted(keys)
        return [Unit(w, tuple(ks[w::n_workers])) for w in range(n_workers)]


class PlanRaisesRoundTwo(GoodStrategy):
    """plan raises at round 2."""

    def plan(self, n_workers, round_index, keys):
        if round_index >= 2:
            raise KeyError("cluster map has no entry for round 2")
        return super().plan(n_workers, round_index, keys)


class GoodCallback(RolloutCallback):
    """Control: logs one stat per rollout."""

    def on_rollout_end(self, trainer, pl_module, rollout):
        rollout.stats["user/ok"] = torch.tensor(1.0)


class CallsTrainerFit(RolloutCallback):
    """Calls trainer.fit again from inside on_rollout_start (re-entrant fit)."""

    def on_rollout_start(self, trainer, pl_module, round_index):
        if round_index == 1:
            trainer.fit(pl_module, datamodule=trainer.datamodule)


class CallsApiFit(RolloutCallback):
    """Calls parlightning.fit (a whole nested run) from inside on_rollout_start."""

    def on_rollout_start(self, trainer, pl_module, round_index):
        if round_index == 0:
            from parlightning import fit
            fit(config="swarm", overrides=["trainer.max_epochs=1", "data.num_envs=8", "data.num_steps=8",
                                           "trainer.default_root_dir=nested"])


class SaveDropsStateDict(lightning.Callback):
    """Removes the weights (`state_dict`) from every checkpoint to keep them small."""

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        checkpoint.pop("state_dict", None)


class SaveAddsDatetime(lightning.Callback):
    """Stores a datetime object in every checkpoint."""

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        checkpoint["saved_at"] = datetime.datetime(2026, 1, 1, 12, 0)


class LoadRaises(RolloutCallback):
    """Has state; its load_state_dict raises KeyError (a renamed field) when a run resumes."""

    def state_dict(self):
        return {"seen": 1}

    def load_state_dict(self, state_dict):
        raise KeyError("seen_rounds")


class TruncatesBatch(lightning.Callback):
    """on_train_batch_start cuts the observation field of the minibatch to one row."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        key = next((k for k in batch if "obs" in k), next(iter(batch)))
        batch[key] = batch[key][:1]


class OnExceptionRaises(lightning.Callback):
    """on_exception itself raises (its cleanup fails) while another error is being reported."""

    def on_exception(self, trainer, pl_module, exception):
        raise RuntimeError("could not upload the crash report")


class TeardownHangs(lightning.Callback):
    """teardown never returns (waits on a flush thread that is gone)."""

    def teardown(self, trainer, pl_module, stage):
        time.sleep(3600)


class OverrunsDeclaredWait(RolloutCallback):
    """Declares a 1 s wait for 'the label service' and blocks for good inside it."""

    def on_rollout_start(self, trainer, pl_module, round_index):
        with expected_wait(1.0, "the label service"):
            time.sleep(3600)


class LogsInRolloutHook(RolloutCallback):
    """Logs with pl_module.log from a rollout hook (instead of rollout.stats)."""

    def on_rollout_end(self, trainer, pl_module, rollout):
        pl_module.log("user/rounds", float(rollout.round_index))


class SetsDefaultDtypeDouble(lightning.Callback):
    """on_fit_start sets torch's default dtype to float64 for the rest of the run."""

    def on_fit_start(self, trainer, pl_module):
        torch.set_default_dtype(torch.float64)


class DropsRolloutBuffer(RolloutCallback):
    """on_rollout_end replaces the rollout's buffer with None (to free memory early)."""

    def on_rollout_end(self, trainer, pl_module, rollout):
        rollout.buffer = None


class SaveAddsMetaTensor(lightning.Callback):
    """Stores a tensor on the meta device in every checkpoint."""

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        checkpoint["shapes"] = torch.empty(4, device="meta")


class LoadEmptiesStateDict(lightning.Callback):
    """on_load_checkpoint replaces the checkpoint's weights with {} (a botched key migration)."""

    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        checkpoint["state_dict"] = {}


class SlowSave(lightning.Callback):
    """Helper for signal cases: writes $R11_MARK during its first checkpoint save and sleeps 3 s there."""

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        mark = os.environ.get("R11_MARK")
        if mark and not os.path.exists(mark):
            open(mark, "w").close()
            time.sleep(3)


class RaiseInSaveRank1(lightning.Callback):
    """Rank 1 raises while a checkpoint is being saved (its metadata upload fails)."""

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        if trainer.global_rank == 1:
            raise RuntimeError("metadata service refused the upload")


class StopEarlyRank1(RolloutCallback):
    """Rank 1 alone sets trainer.should_stop at round 1 (a local early-stopping rule)."""

    def on_rollout_start(self, trainer, pl_module, round_index):
        if trainer.global_rank == 1 and round_index == 1:
            trainer.should_stop = True
'''

FNS = r'''
"""Round 11's subagent functions for ProcessPool (no torch import: workers start fast)."""
import datetime
import os
import signal
import sys
import threading
import time


def good_fn(instruction):
    """Control: succeeds when the instruction names the skill; cost + 1 steps."""
    return {"success": instruction.get("instruction") == instruction.get("skill"),
            "steps": int(instruction.get("cost", 1)) + 1}


def noisy_fn(instruction):
    """Control: prints 200 KB to stdout and stderr, changes its cwd, ignores SIGTERM and leaves a
    non-daemon thread behind, then answers correctly (hostile but valid)."""
    sys.stdout.write("o" * 200_000 + "\n")
    sys.stderr.write("e" * 200_000 + "\n")
    os.chdir("/")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=time.sleep, args=(3600,), daemon=False).start()
    return good_fn(instruction)


def slow_fn(instruction):
    """Helper: 5 s per subagent."""
    time.sleep(5)
    return good_fn(instruction)


_CALLS = [0]


def mark_fn(instruction):
    """Helper for signal cases: writes $R11_MARK at its 10th call in this worker (past the preflight
    probe), then 0.1 s per call."""
    _CALLS[0] += 1
    mark = os.environ.get("R11_MARK")
    if _CALLS[0] >= 10 and mark and not os.path.exists(mark):
        with open(mark + ".tmp", "w") as fh:
            fh.write(str(os.getpid()))
        os.replace(mark + ".tmp", mark)
    time.sleep(0.1)
    return good_fn(instruction)


def mark_rank1(instruction):
    """Helper for DDP: a worker of rank 1 writes its pid to $R11_MARK at its 5th call (the preflight
    probe's pool makes at most 4); 0.05 s per call."""
    _CALLS[0] += 1
    mark = os.environ.get("R11_MARK")
    if os.environ.get("LOCAL_RANK") == "1" and _CALLS[0] >= 5 and mark and not os.path.exists(mark):
        with open(mark + ".tmp", "w") as fh:
            fh.write(str(os.getpid()))
        os.replace(mark + ".tmp", mark)
    time.sleep(0.05)
    return good_fn(instruction)


def negative_seconds(instruction):
    """Returns a SubagentResult whose wall seconds are negative."""
    from parlightning.subagents import SubagentResult
    return SubagentResult(True, 2, -1.5)


def triple(instruction):
    """Returns a (success, steps, output) triple instead of a pair."""
    return (True, 2, "merged the shards")


def timedelta_steps(instruction):
    """Reports its steps as a datetime.timedelta."""
    return {"success": True, "steps": datetime.timedelta(seconds=3)}


def closes_fds(instruction):
    """Closes every inherited file descriptor (daemon-style) before working."""
    os.closerange(3, 4096)
    return good_fn(instruction)


def calls_breakpoint(instruction):
    """A forgotten breakpoint() (stdin is not a terminal)."""
    breakpoint()
    return good_fn(instruction)


def memory_error(instruction):
    """Allocates 16 TB."""
    blob = bytearray(1 << 44)
    return good_fn(instruction) if blob else None
'''

HTTP = r'''
"""Round 11's small HTTP endpoints (in the case's own process) and a pool-config runner."""
import json
import os
import socket
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))


def completion(text="DONE: ok", tokens=3):
    return json.dumps({"id": "c1", "object": "chat.completion", "model": "m",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1}}).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self._reply(200, b"{}")

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        srv = self.server
        srv.count += 1
        body = completion()
        if srv.mode == "die" and srv.count > srv.after:
            srv.dead = True
            threading.Thread(target=_stop, args=(srv,), daemon=True).start()
        if getattr(srv, "dead", False):
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if srv.mode == "partial":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body) + 400))
            self.end_headers()
            self.wfile.write(body[:25])
            self.wfile.flush()
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if srv.mode == "drip":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for i in range(len(body)):
                self.wfile.write(body[i:i + 1])
                self.wfile.flush()
                time.sleep(0.5)
            return
        self._reply(200, body)

    def _reply(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _stop(srv):
    srv.shutdown()
    srv.server_close()


def serve(mode="good", after=0):
    """A chat-completions endpoint on 127.0.0.1 in a daemon thread: good | partial | drip | die."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    srv.mode, srv.count, srv.after = mode, 0, after
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{srv.server_address[1]}/v1"


class _Banner(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.sendall(b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n")
        time.sleep(0.2)


def serve_banner():
    """Another protocol on the port: an SSH banner, then the connection closes."""
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Banner)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{srv.server_address[1]}/v1"


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


WORLD_KWARGS = {"families": ["solo", "fanout"], "tasks_per_family": 2, "max_width": 2, "n_skills": 2,
                "subagent_timeout": 5}


def fit_pool(pool_class, pool_args, world_kwargs=None, step_timeout=20, extra=()):
    """Train pool.yaml's orchestration world with this pool (a c.yaml in the case's folder)."""
    env = {"class_path": "parlightning.envs.external.ExternalBatchedEnv",
           "init_args": {"world": "parlightning.subagents.world:PoolOrchestrationWorld",
                         "world_kwargs": dict(WORLD_KWARGS, **(world_kwargs or {})),
                         "shared": {"pool": {"class_path": pool_class, "init_args": pool_args}},
                         "step_timeout": step_timeout}}
    with open("c.yaml", "w") as fh:
        json.dump({"data": {"env": env}}, fh)
    from parlightning.cli import fit as cli
    cli.main(["--config", os.path.join(HERE, "pool.yaml"), "--config", "c.yaml", *extra])
'''

DRIVE = r'''
"""Run a command, wait for a moment, signal it, and exit as it did.

    python -m r11drive SIGNAL WHEN TARGET -- command...

WHEN: after:SECONDS | marker:PATH (a file some user code writes). TARGET: pid (the command),
group (every process of this process group, as a terminal's Ctrl-C or a scheduler does), twice
(the command, two signals 0.3 s apart), pidfile (the pid written in the marker file).
"""
import os
import signal
import subprocess
import sys
import time


def main():
    sig = getattr(signal, sys.argv[1])
    when, target = sys.argv[2], sys.argv[3]
    cmd = sys.argv[sys.argv.index("--") + 1:]
    if sig not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(sig, lambda *a: None)  # this driver survives a group signal; the child starts with SIG_DFL
    child = subprocess.Popen(cmd)
    if when.startswith("after:"):
        deadline = time.monotonic() + float(when.split(":", 1)[1])
        while time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.02)
    else:
        path = when.split(":", 1)[1]
        while not os.path.exists(path) and child.poll() is None:
            time.sleep(0.02)
    if child.poll() is None:
        if target == "pid":
            os.kill(child.pid, sig)
        elif target == "twice":
            os.kill(child.pid, sig)
            time.sleep(0.3)
            if child.poll() is None:
                os.kill(child.pid, sig)
        elif target == "group":
            os.killpg(os.getpgrp(), sig)
        elif target == "pidfile":
            pid = int(open(path).read().strip() or 0)
            if pid:
                os.kill(pid, sig)
    rc = child.wait()
    if rc < 0:
        signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
        time.sleep(1)
    sys.exit(rc)


if __name__ == "__main__":
    main()
'''


RUNHELP = r'''
"""Round 11 helpers for cases that run in the case's own (forked) process: a signal sent at a moment
(as a scheduler or a terminal would), a private read-only mount, a script run as `python script.py`."""
import ctypes
import os
import runpy
import signal
import subprocess
import sys
import threading
import time


def signal_when(sig, when, target="pid"):
    """In a daemon thread: wait until `when` (after:SECONDS | marker:PATH), then send `sig` to this
    process (pid), twice 0.3 s apart (twice), to its whole process group (group: workers and DDP
    ranks too), or to the pid written in the marker file (pidfile)."""
    sig = getattr(signal, sig)
    # a process started normally has Python's SIGINT handler and SIG_DFL for the rest; undo a launcher's
    # SIG_IGN (nohup, a background job of a non-interactive shell) that the corpus may have inherited
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(s, signal.default_int_handler if s == signal.SIGINT else signal.SIG_DFL)

    def run():
        if when.startswith("after:"):
            time.sleep(float(when.split(":", 1)[1]))
        else:
            path = when.split(":", 1)[1]
            while not os.path.exists(path):
                time.sleep(0.02)
        if target == "group":
            os.killpg(os.getpgrp(), sig)
        elif target == "pidfile":
            os.kill(int(open(path).read().strip()), sig)
        else:
            os.kill(os.getpid(), sig)
            if target == "twice":
                time.sleep(0.3)
                os.kill(os.getpid(), sig)

    threading.Thread(target=run, daemon=True).start()


def ro_mount(path):
    """Mount an empty read-only tmpfs at `path` in a mount namespace of this process only (the
    machine's mounts are untouched; it ends with the process)."""
    os.makedirs(path, exist_ok=True)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x00020000) != 0:  # CLONE_NEWNS
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", path], check=True)


def script(path, *argv):
    """Run a script as `python path argv...` would (its folder first on sys.path)."""
    sys.path.insert(0, os.path.dirname(path))
    sys.argv = [path, *argv]
    runpy.run_path(path, run_name="__main__")
'''


# ------------------------------------------------------------------------------------ configs
Q = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
TINY = ["--config", "swarm", "--trainer.max_epochs", "1", "--data.num_envs", "8", "--data.num_steps", "8"] + Q
CART = ["--config", "cartpole_fast", "--trainer.max_epochs", "1", "--data.num_envs", "8", "--data.num_steps", "8",
        "--data.num_minibatches", "2"] + Q
UW = ["--config", "{fx}/user.yaml"]  # the tensor-world config (W11)
TW = ["--config", "{fx}/tasks.yaml"]  # the task-world config (W11Tasks)
EXTC = ["--config", "{fx}/ext.yaml"]  # the external-world config (r11ext:Good)
POOLC = ["--config", "{fx}/pool.yaml"]  # PoolOrchestrationWorld on a SimulatedPool

USER_YAML = """\
seed_everything: 0
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
    class_path: r11worlds.W11
  num_envs: 8
  num_steps: 8
  update_epochs: 1
  num_minibatches: 2
  reward: null
"""
TASKS_YAML = USER_YAML.replace("r11worlds.W11", "r11worlds.W11Tasks")
EXT_YAML = """\
seed_everything: 0
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
      world: r11ext:Good
      step_timeout: 10
  num_envs: 4
  num_steps: 6
  update_epochs: 1
  num_minibatches: 2
  reward: null
"""
POOL_YAML = """\
seed_everything: 0
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
      world_kwargs: {families: [solo, fanout], tasks_per_family: 2, max_width: 2, n_skills: 2, subagent_timeout: 5}
      shared:
        pool:
          class_path: parlightning.subagents.SimulatedPool
          init_args: {reliability: 0.9}
      step_timeout: 20
  num_envs: 4
  num_steps: 4
  update_epochs: 1
  num_minibatches: 2
  reward: null
"""

RUNS = (r5.RUN_META,)  # a fault after training started may leave its run folder (never a partial file)
BOOK = r5.CaseBook(worlds="r11worlds")
T = 30.0  # default per-case timeout (s)


def case(name: str, category: str, kind: str, args: Any, expect: Any = (), **kw: Any) -> None:
    kw.setdefault("timeout", T)
    BOOK.case(name, category, kind, args, expect, **kw)


def fit(name: str, category: str, args: list, expect: Any, **kw: Any) -> None:
    case(name, category, "fit", args, expect, **kw)


def yaml_case(name: str, category: str, body: str, expect: Any, base: Optional[list] = None, **kw: Any) -> None:
    """A config file `c.yaml` layered over `base` (default: the tiny swarm run)."""
    files = {"c.yaml": body, **kw.pop("files", {})}
    fit(name, category, (TINY if base is None else base) + ["--config", "c.yaml"] + kw.pop("extra", []), expect,
        files=files, **kw)


def world(name: str, cls: str, expect: Any, base: Optional[list] = None, **kw: Any) -> None:
    fit(name, "world", (UW if base is None else base) + ["--data.env", f"r11worlds.{cls}"], expect, **kw)


def ext(name: str, init_args: str, expect: Any, category: str = "external", **kw: Any) -> None:
    body = ("data:\n  env:\n    class_path: parlightning.envs.external.ExternalBatchedEnv\n"
            f"    init_args: {init_args}\n")
    yaml_case(name, category, body, expect, base=EXTC, **kw)


def callbacks_yaml(*specs: str) -> str:
    return "trainer:\n  callbacks:\n" + "".join(f"    - {s}\n" for s in specs)


def planner_yaml(strategy: str) -> str:
    return callbacks_yaml("{class_path: parlightning.callbacks.StrategyPlanner, init_args: {strategy: {class_path: %s}}}"
                          % strategy)


def api(name: str, code: str, expect: Any, **kw: Any) -> None:
    case(name, "api", "py", code, expect, **kw)


def cmd(name: str, category: str, argv: list, expect: Any, **kw: Any) -> None:
    case(name, category, "cmd", argv, expect, **kw)


def script(name: str, argv: list, expect: Any, **kw: Any) -> None:
    """A script run as `python scripts/NAME.py ARGS` would, in the case's own process (runpy)."""
    code = f"import r11run\nr11run.script('{{root}}/scripts/{argv[0]}', *{argv[1:]!r})\n"
    case(name, "scripts", "py", code, expect, **kw)


def drive(sig: str, when: str, target: str) -> list:
    return [PY, "-m", "r11drive", sig, when, target, "--"]


FIT = [PY, "-m", "parlightning.fit"]
MARK = {"R11_MARK": "mark"}  # relative: every process of a case runs in its folder

# ------------------------------------------------------------------------------------ controls
case("control-w11", "control", "fit", UW, control=True)
case("control-w11-tasks-unicode-and-long-ids", "control", "fit", TW + ["--data.sampler", "r11user.GoodSampler"],
     control=True)
case("control-w11-inplace-buffers-and-mask", "control", "fit", UW + ["--data.env", "r11worlds.W11InPlace"],
     control=True)
case("control-w11-views-expanded-numpy-int", "control", "fit", UW + ["--data.env", "r11worlds.W11Views"], control=True)
case("control-factory", "control", "fit", UW + ["--data.env", "r11worlds.make_w11"], control=True)
case("control-ext-good", "control", "fit", EXTC, control=True)
case("control-ext-noisy-worker-process", "control", "fit", EXTC + ["--config", "c.yaml"], control=True,
     files={"c.yaml": "data:\n  env:\n    class_path: parlightning.envs.external.ExternalBatchedEnv\n"
                      "    init_args: {world: 'r11ext:NoisyGood', step_timeout: 10, workers: 1}\n"}, timeout=45)
case("control-strategy-and-callback", "control", "fit", TW + ["--config", "c.yaml"], control=True,
     files={"c.yaml": callbacks_yaml("{class_path: parlightning.callbacks.StrategyPlanner, init_args: "
                                     "{strategy: {class_path: r11user.GoodStrategy}}}",
                                     "{class_path: r11user.GoodCallback}")})
case("control-batched-sampler-bind-once", "control", "fit", TW + ["--data.sampler", "r11user.BindOnce"], control=True)
case("control-pool-noisy-fn", "control", "fit", POOLC + ["--config", "c.yaml"], control=True, timeout=45,
     files={"c.yaml": "data:\n  env:\n    init_args:\n      shared:\n        pool:\n"
                      "          class_path: parlightning.subagents.ProcessPool\n"
                      "          init_args: {fn: 'r11fns:noisy_fn', workers: 2, timeout: 10}\n"})
case("control-http-good", "control", "py",
     "import r11http\nr11http.fit_pool('parlightning.subagents.HTTPPool', {'base_url': r11http.serve('good'), "
     "'timeout': 5})\n", control=True)
case("control-compile-cache-dir-with-spaces", "control", "fit",
     TINY + ["--data.env.init_args.compile", "true"], control=True, env={"PARLIGHTNING_CACHE_DIR": "my cache"},
     timeout=45)

# ------------------------------------------------------------------------------------ tensor worlds
world("world-obs-bfloat16", "ObsBF16", ("ObsBF16|observation|obs", "bfloat16|dtype|float32"))
world("world-obs-sparse-at-reset", "ObsSparseAtReset", ("ObsSparseAtReset|observation|obs", "sparse|layout"))
world("world-reward-0d-tensor-later", "RewardZeroDimLater", ("RewardZeroDimLater", "reward"), allow=RUNS)
world("world-reward-numpy-scalar", "RewardNumpyScalar", ("RewardNumpyScalar", "reward"))
world("world-reward-bfloat16-later", "RewardBF16Later", ("RewardBF16Later", "reward"), allow=RUNS)
world("world-obs-nested-tensor-later", "ObsNestedLater", ("ObsNestedLater", "observation|obs"), allow=RUNS)
world("world-obs-finite-1e30", "ObsHuge", ("ObsHuge|observation|obs",), allow=RUNS)
world("world-reward-rows-fixed-at-probe-size", "RewardRowsFixedAtTwo", ("RewardRowsFixedAtTwo", "reward"))
world("world-reset-nan-beyond-probe-actors", "ResetNaNBeyondProbe",
      ("ResetNaNBeyondProbe|observation|obs", "nan|non-finite|finite"), allow=RUNS)
world("world-obs-float64-only-at-full-size", "DtypeDependsOnNumEnvs",
      ("DtypeDependsOnNumEnvs|observation|obs", "float64|dtype|double"))
world("world-init-fails-at-full-size", "InitFailsAtFullSize", ("InitFailsAtFullSize|data.env", "licence|2 actors"))
world("world-num-envs-class-attribute", "NumEnvsClassAttribute", ("NumEnvsClassAttribute|data.env", "num_envs"))
world("world-num-envs-property-attribute-error", "NumEnvsTypo", ("NumEnvsTypo", "num_envs|_num"))
world("world-getattr-proxy-answers-none", "GetattrProxy",
      ("GetattrProxy", "action_masks|task_ids|solved_threshold|max_subagents|none"))
world("world-on-exception-callback-raises-too", "RaisesAtStep3", ("RaisesAtStep3|simulator diverged",),
      base=UW + ["--config", "c.yaml"], files={"c.yaml": callbacks_yaml("{class_path: r11user.OnExceptionRaises}")},
      allow=RUNS)
world("world-step-raises-enospc-of-its-own", "StepRaisesENOSPC", ("StepRaisesENOSPC", "step"), allow=RUNS)
world("world-step-raises-broken-pipe", "StepRaisesBrokenPipe", ("StepRaisesBrokenPipe", "step"), allow=RUNS)
world("world-step-raises-package-config-error", "StepRaisesPackageConfigError",
      ("StepRaisesPackageConfigError", "step"), allow=RUNS)
world("world-repr-raises-and-step-raises", "ReprRaises", ("ReprRaises", "step|simulator diverged"), allow=RUNS)
world("world-init-parses-sys-argv", "InitParsesArgv", ("InitParsesArgv|data.env", "argv|argument|argparse"))
world("world-step-forgotten-breakpoint", "StepBreakpoint", ("StepBreakpoint", "breakpoint|BdbQuit|debugger|stdin"),
      allow=RUNS)
world("world-sets-default-device-meta", "SetsDefaultDeviceMeta", ("SetsDefaultDeviceMeta", "meta|default device"))
world("world-step-disables-grad-globally", "StepDisablesGrad", ("StepDisablesGrad", "grad"), allow=RUNS)
world("world-action-masks-async", "MasksAsync", ("MasksAsync|action_masks", "async|coroutine"))
world("world-next-task-called-with-indices", "NextTaskIndices", ("NextTaskIndices|next_task", "mask|bool"),
      base=TW, allow=RUNS)
world("world-task-ids-reordered-mid-run", "TaskIdsReorderedMidRun", ("TaskIdsReorderedMidRun", "task_ids|task bank"),
      base=TW, allow=RUNS)
world("world-factory-caches-its-world", "make_cached", ("make_cached|data.env", "num_envs|actors"))
world("world-factory-kwargs-only", "make_kwargs_only", ("make_kwargs_only|data.env", "num_envs|positional|argument"))
world("world-parts-task-ids-as-strings", "PartsTaskIdStrings", ("PartsTaskIdStrings", "task"), base=TW, allow=RUNS)
world("world-mask-category-dead-beyond-probe", "MaskCategoryDeadBeyondProbe",
      ("MaskCategoryDeadBeyondProbe|action_masks", "mask|categor"), allow=RUNS)
fit("world-swarm-subclass-drops-next-task", "world", TINY + ["--trainer.max_epochs", "2", "--data.env",
                                                               "r11swarmsub.SwarmDropsNextTask"],
    ("SwarmDropsNextTask", "next_task"), allow=RUNS)

# ------------------------------------------------------------------------------------ external worlds
EW = "{world: 'r11ext:%s', step_timeout: %s%s}"


def ew(cls: str, timeout: float = 10, more: str = "") -> str:
    return EW % (cls, timeout, more)


ext("ext-obs-bytes-of-the-right-length", ew("ObsBytes"), ("ObsBytes", "observation|obs", "bytes"))
ext("ext-obs-generator-later", ew("ObsGenerator"), ("ObsGenerator", "observation|obs"), allow=RUNS)
ext("ext-obs-numeric-strings-later", ew("ObsNumericStrings"), ("ObsNumericStrings", "observation|obs"), allow=RUNS)
ext("ext-obs-none-inside-list", ew("ObsContainsNone"), ("ObsContainsNone", "observation|obs"), allow=RUNS)
ext("ext-terminal-obs-none", ew("TerminalObsNone"), ("TerminalObsNone", "observation|obs"), allow=RUNS)
ext("ext-terminated-one-element-array", ew("TerminatedArray"), ("TerminatedArray", "terminated"), allow=RUNS)
ext("ext-parts-sets-task", ew("PartsHasTask"), ("PartsHasTask", "task"), allow=RUNS)
ext("ext-reward-complex-later", ew("RewardComplex"), ("RewardComplex", "reward"), allow=RUNS)
ext("ext-retryable-as-strings", ew("RetryableStrings", more=", retries: 2"), ("RetryableStrings", "retryable"),
    allow=RUNS)
ext("ext-async-step-stops-event-loop", ew("AsyncStopsLoop", 5), ("AsyncStopsLoop", "step_timeout|did not return|loop"),
    allow=RUNS)
ext("ext-close-calls-sys-exit", ew("CloseSysExit"), ("CloseSysExit", "close"))
ext("ext-step-waits-on-endless-child-process", ew("SubprocessHang", 4), ("SubprocessHang", "step_timeout|did not return"),
    allow=RUNS)
ext("ext-step-waits-on-endless-child-process-workers", ew("SubprocessHang", 4, ", workers: 1"),
    ("SubprocessHang", "step_timeout|did not return"), allow=RUNS, timeout=40)
ext("ext-world-closes-the-shared-pool", ew("ClosesSharedPool", more=", shared: {pool: {class_path: "
                                           "parlightning.subagents.SimulatedPool}}"),
    ("ClosesSharedPool|pool", "closed|close"), allow=RUNS)
ext("ext-shared-resource-close-hangs", ew("UsesDb", more=", shared: {db: {class_path: r11ext.Db}}"),
    ("Db|db", "close"), timeout=45)
ext("ext-shared-resource-init-hangs", ew("UsesDb", more=", shared: {db: {class_path: r11ext.DbInitHangs}}"),
    ("DbInitHangs|db|shared",), timeout=45)
ext("ext-world-kwargs-yaml-timestamp-for-str", ew("Labelled", more=", world_kwargs: {start: 2024-01-01}"),
    ("start",), category="yaml")

# ------------------------------------------------------------------------------------ subagent pools
PROC = "parlightning.subagents.ProcessPool"


def pool_case(name: str, pool: str, expect: Any, world_kwargs: str = "", category: str = "pools", **kw: Any) -> None:
    body = ("data:\n  env:\n    init_args:\n" + (f"      world_kwargs: {{{world_kwargs}}}\n" if world_kwargs else "")
            + f"      shared:\n        pool: {pool}\n")
    kw.setdefault("timeout", 40)
    yaml_case(name, category, body, expect, base=POOLC, **kw)


def proc(fn: str, more: str = "") -> str:
    return "{class_path: %s, init_args: {fn: 'r11fns:%s', workers: 2, timeout: 10%s}}" % (PROC, fn, more)


WK = "families: [solo, fanout], tasks_per_family: 2, max_width: 2, n_skills: 2, subagent_timeout: 5"
pool_case("process-fn-result-negative-seconds", proc("negative_seconds"), ("negative_seconds", "seconds"), allow=RUNS)
pool_case("process-fn-returns-triple", proc("triple"), ("triple", "tuple|pair|result"), allow=RUNS)
pool_case("process-fn-steps-timedelta", proc("timedelta_steps"), ("timedelta_steps", "steps"), allow=RUNS)
pool_case("process-fn-closes-all-fds", proc("closes_fds"), ("closes_fds",), allow=RUNS)
pool_case("process-fn-forgotten-breakpoint", proc("calls_breakpoint"), ("calls_breakpoint",), allow=RUNS)
pool_case("process-fn-memory-error", proc("memory_error"), ("memory_error", "MemoryError|memory"), allow=RUNS)
pool_case("process-fn-is-builtin-len", "{class_path: %s, init_args: {fn: 'builtins:len', workers: 1}}" % PROC,
          ("len", "int|number|result"), allow=RUNS)
pool_case("orchestration-families-duplicate", "{class_path: parlightning.subagents.SimulatedPool}", ("families",),
          world_kwargs="families: [solo, solo, fanout], tasks_per_family: 2, max_width: 2, n_skills: 2")
pool_case("orchestration-call-latency-zero-median", "{class_path: parlightning.subagents.SimulatedPool}",
          ("call_latency",), world_kwargs=WK + ", call_latency: [0.0, 0.8]")

# ------------------------------------------------------------------------------------ HTTP endpoints
HP = "parlightning.subagents.HTTPPool"
AHP = "parlightning.subagents.AsyncHTTPPool"


def http(name: str, code: str, expect: Any, category: str = "http", **kw: Any) -> None:
    kw.setdefault("allow", RUNS + (r"^c\.yaml$",))  # c.yaml: the case's own pool config, written by fit_pool
    kw.setdefault("timeout", 40)
    case(name, category, "py", "import r11http\n" + code, expect, **kw)


http("http-partial-body", f"r11http.fit_pool('{HP}', {{'base_url': r11http.serve('partial'), 'timeout': 2}})\n",
     ("127.0.0.1|base_url", "incomplete|partial|IncompleteRead|content-length|body"))
http("http-slow-drip-body", f"r11http.fit_pool('{HP}', {{'base_url': r11http.serve('drip'), 'timeout': 2}})\n",
     ("127.0.0.1|base_url", "timeout|timed out"))
http("http-async-server-dies-mid-run",
     f"r11http.fit_pool('{AHP}', {{'base_url': r11http.serve('die', after=6), 'timeout': 2, 'retries': 1, "
     "'backoff': 0.05, 'max_backoff': 0.1}, world_kwargs={'subagent_timeout': 10})\n",
     ("127.0.0.1|base_url", "PoolUnreachable|unreachable|cannot connect|refused"))
http("http-api-key-not-latin1", f"r11http.fit_pool('{HP}', {{'base_url': r11http.serve('good'), 'api_key': 'sk-proj-\u2026'}})\n",
     ("api_key",))
http("http-https-url-to-plain-server",
     f"r11http.fit_pool('{HP}', {{'base_url': r11http.serve('good').replace('http:', 'https:'), 'timeout': 2}})\n",
     ("https|ssl|tls",))
http("http-async-https-url-to-plain-server",
     f"r11http.fit_pool('{AHP}', {{'base_url': r11http.serve('good').replace('http:', 'https:'), 'timeout': 2, "
     "'retries': 0})\n", ("https|ssl|tls",))
http("http-port-speaks-another-protocol", f"r11http.fit_pool('{HP}', {{'base_url': r11http.serve_banner(), 'timeout': 2}})\n",
     ("127.0.0.1|base_url", "SSH|protocol|BadStatusLine|not an HTTP|status line"))
http("http-async-extra-body-not-json", "import datetime\nfrom parlightning.subagents import AsyncHTTPPool\n"
     "p = AsyncHTTPPool(r11http.serve('good'), extra_body={'seed': datetime.date(2024, 1, 1)}, retries=0)\n"
     "try:\n    h = p.spawn({'skill': 0, 'instruction': 0, 'cost': 1, 'prompt': 'do it'})\n"
     "    print(p.wait([h], timeout=10))\nfinally:\n    p.close()\n", ("extra_body",))
http("env-http-proxy-dead-with-httppool",
     f"import os\nos.environ['HTTP_PROXY'] = os.environ['http_proxy'] = f'http://127.0.0.1:{{r11http.closed_port()}}'\n"
     f"r11http.fit_pool('{HP}', {{'base_url': r11http.serve('good'), 'timeout': 2}})\n",
     ("proxy",), category="env")

# ------------------------------------------------------------------------------------ samplers
def sampler(name: str, cls: str, expect: Any, base: Optional[list] = None, **kw: Any) -> None:
    fit(name, "sampler", (TW if base is None else base) + ["--data.sampler", f"r11user.{cls}"], expect, **kw)


sampler("sampler-pick-generator-function", "PickGenerator", ("PickGenerator|pick", "generator"))
sampler("sampler-pick-async", "PickAsync", ("PickAsync|pick", "async|coroutine"))
sampler("sampler-record-async", "RecordAsync", ("RecordAsync|record", "async|coroutine"), allow=RUNS)
fit("sampler-pick-outside-its-shard", "sampler", TINY + ["--data.sampler", "r11user.PickOutsideShard", "--config", "c.yaml"],
    ("PickOutsideShard|pick", "shard"), files={"c.yaml": planner_yaml("r11user.HalfShard")}, allow=RUNS)
sampler("sampler-signals-returns-strings", "SignalsStrings", ("SignalsStrings|signals",), allow=RUNS)
sampler("sampler-pick-declares-infinite-wait", "PickInfiniteWait", ("PickInfiniteWait|expected_wait", "seconds|inf"))
sampler("sampler-pick-raises-under-lag-budget", "PickRaises", ("PickRaises", "pick|task server"),
        base=TW + ["--data.max_policy_lag", "1", "--trainer.max_epochs", "4"], allow=RUNS)
sampler("sampler-pick-raises-with-collector-process", "PickRaises", ("PickRaises", "pick|task server"),
        base=TW + ["--data.max_policy_lag", "1", "--data.collect_in", "process", "--trainer.max_epochs", "4"],
        allow=RUNS, timeout=40)
sampler("sampler-subclasses-batched-protocol", "SubclassesBatchedProtocol",
        ("SubclassesBatchedProtocol", "pick_batch|bind|BatchedTaskSampler|state_dict"))
sampler("sampler-batched-picks-n-by-1", "BatchedColumn", ("BatchedColumn|pick_batch", "shape|[8]|[N]"))
sampler("sampler-batched-picks-only-resetting-actors", "BatchedCompact", ("BatchedCompact|pick_batch",), allow=RUNS)
sampler("sampler-batched-mutates-shard", "BatchedMutatesShard", ("BatchedMutatesShard|pick_batch", "shard"), allow=RUNS)
case("sampler-state-without-load-on-resume", "sampler", "py",
     "from parlightning import fit\n"
     "base = ['--config', '{fx}/tasks.yaml', '--data.sampler', 'r11user.StateNoLoad']\n"
     "fit(overrides=base + ['--trainer.max_epochs', '1'])\n"
     "fit(overrides=base + ['--trainer.max_epochs', '2', '--ckpt_path', 'lightning_logs/version_0/checkpoints/last.ckpt'])\n",
     ("StateNoLoad|sampler", "load_state_dict"), allow=RUNS)

# ------------------------------------------------------------------------------------ strategies
def strategy(name: str, cls: str, expect: Any, base: Optional[list] = None, **kw: Any) -> None:
    yaml_case(name, "strategy", planner_yaml(f"r11user.{cls}"), expect, base=TW if base is None else base, **kw)


strategy("strategy-plan-async", "PlanAsync", ("PlanAsync|plan", "async|coroutine"))
strategy("strategy-observe-async", "ObserveAsync", ("ObserveAsync|observe", "async|coroutine"))
strategy("strategy-validate-refuses-one-worker", "ValidateRefuses", ("ValidateRefuses|strategy", "4 workers|validate"))
strategy("strategy-validate-takes-no-argument", "ValidateNoArg", ("ValidateNoArg", "validate"))
strategy("strategy-unit-section-string", "SectionString", ("SectionString|WorkUnit", "section"))
strategy("strategy-plan-mutates-keys", "PlanMutatesKeys", ("PlanMutatesKeys|plan", "keys|mutat"))
strategy("strategy-plan-returns-namedtuples", "PlanNamedTuples", ("PlanNamedTuples|plan", "WorkUnit"))
strategy("strategy-plan-raises-round-two-under-lag", "PlanRaisesRoundTwo", ("PlanRaisesRoundTwo", "plan|cluster map"),
         base=TW + ["--data.max_policy_lag", "1", "--trainer.max_epochs", "4"], allow=RUNS)

# ------------------------------------------------------------------------------------ callbacks
def callback(name: str, cls: str, expect: Any, base: Optional[list] = None, **kw: Any) -> None:
    spec = cls if cls.startswith("{") else f"{{class_path: r11user.{cls}}}"
    yaml_case(name, "callback", callbacks_yaml(spec), expect, base=UW if base is None else base, **kw)


callback("callback-calls-trainer-fit-reentrant", "CallsTrainerFit", ("CallsTrainerFit", "fit"), allow=RUNS)
callback("callback-calls-parlightning-fit-nested", "CallsApiFit", ("CallsApiFit", "fit"), allow=RUNS + ("^nested",))
callback("callback-checkpoint-without-state-dict", "SaveDropsStateDict", ("SaveDropsStateDict", "state_dict"),
         allow=RUNS)
callback("callback-checkpoint-holds-datetime", "SaveAddsDatetime", ("SaveAddsDatetime", "datetime|weights_only|saved_at"),
         allow=RUNS)
callback("callback-checkpoint-holds-meta-tensor", "SaveAddsMetaTensor", ("SaveAddsMetaTensor", "meta|checkpoint"),
         allow=RUNS)
case("callback-on-load-checkpoint-empties-weights", "callback", "py",
     "from parlightning import fit\n"
     "base = ['--config', '{fx}/user.yaml', '--trainer.callbacks+', 'r11user.LoadEmptiesStateDict']\n"
     "fit(overrides=base + ['--trainer.max_epochs', '1'])\n"
     "fit(overrides=base + ['--trainer.max_epochs', '2', '--ckpt_path', 'lightning_logs/version_0/checkpoints/last.ckpt'])\n",
     ("LoadEmptiesStateDict", "state_dict|weights"), allow=RUNS)
case("callback-load-state-raises-on-resume", "callback", "py",
     "from parlightning import fit\n"
     "base = ['--config', '{fx}/user.yaml', '--trainer.callbacks+', 'r11user.LoadRaises']\n"
     "fit(overrides=base + ['--trainer.max_epochs', '1'])\n"
     "fit(overrides=base + ['--trainer.max_epochs', '2', '--ckpt_path', 'lightning_logs/version_0/checkpoints/last.ckpt'])\n",
     ("LoadRaises", "load_state_dict|seen_rounds"), allow=RUNS)
callback("callback-truncates-minibatch", "TruncatesBatch", ("TruncatesBatch", "batch"), allow=RUNS)
callback("callback-teardown-hangs", "TeardownHangs", ("TeardownHangs|teardown", "stuck|progress|stall"),
         extra=["--stall_timeout", "5"], allow=RUNS)
callback("callback-overruns-its-declared-wait", "OverrunsDeclaredWait", ("the label service|OverrunsDeclaredWait",),
         extra=["--stall_timeout", "5"])
callback("callback-pl-module-log-in-rollout-hook", "LogsInRolloutHook", ("LogsInRolloutHook", "log|rollout.stats"),
         allow=RUNS)
callback("callback-sets-default-dtype-double", "SetsDefaultDtypeDouble", ("SetsDefaultDtypeDouble", "dtype|float64|double"),
         allow=RUNS)
callback("callback-drops-rollout-buffer", "DropsRolloutBuffer", ("DropsRolloutBuffer", "buffer"), allow=RUNS)

# ------------------------------------------------------------------------------------ Python API
LP = "import torch, parlightning\np = parlightning.load_policy('{fx}/swarm.ckpt')\n"
SW = "import torch\nfrom parlightning.envs.swarm import SwarmEnv\n"
EXTIMP = "import torch\nfrom parlightning.envs.external import ExternalBatchedEnv\n"
DM = "import torch\nfrom parlightning.ppo.data import RolloutDataModule\n"

api("api-predict-from-threads-one-bad-shape", LP +
    "import threading\nerrs = []\n"
    "def run(obs):\n    try:\n        p.predict(obs)\n    except BaseException as e:\n        errs.append(e)\n"
    "ts = [threading.Thread(target=run, args=(torch.zeros(4, 13, 6) if i % 4 else torch.zeros(4, 13, 5),)) for i in range(8)]\n"
    "[t.start() for t in ts]\n[t.join() for t in ts]\n"
    "if errs:\n    raise errs[0]\n", ("predict", "obs"))
api("api-predict-sparse-obs", LP + "p.predict(torch.zeros(4, 13, 6).to_sparse())\n", ("predict", "obs|sparse"))
api("api-policy-network-none", "import torch\nfrom parlightning.inference import Policy\nPolicy(None).predict(torch.zeros(2, 4))\n",
    ("network",))
api("api-policy-network-plain-linear", "import torch\nfrom parlightning.inference import Policy\n"
    "Policy(torch.nn.Linear(4, 3), observation_shape=(4,)).predict(torch.zeros(2, 4))\n", ("network",))
api("api-module-load-override-lr-negative", "from parlightning.ppo.module import PPOModule\n"
    "PPOModule.load_from_checkpoint('{fx}/swarm.ckpt', lr=-1.0)\n", ("lr",))
api("api-module-build-policy-slots-on-flat-obs", "from parlightning.ppo.module import PPOModule\n"
    "from parlightning.envs.base import ActionSpec\n"
    "PPOModule(policy='slots').build_policy((4,), ActionSpec('discrete', nvec=(3,)))\n", ("slots", "observation"))
api("api-module-build-policy-spec-string", "from parlightning.ppo.module import PPOModule\n"
    "PPOModule().build_policy((4,), 'discrete')\n", ("action_spec",))
api("api-module-annealed-lr-without-trainer", "from parlightning.ppo.module import PPOModule\nPPOModule().annealed_lr(3)\n",
    ("annealed_lr", "trainer|max_epochs"))
api("api-module-training-step-before-setup", "import torch\nfrom parlightning.ppo.module import PPOModule\n"
    "PPOModule().training_step({'obs': torch.zeros(4, 4), 'actions': torch.zeros(4, dtype=torch.long)}, 0)\n",
    ("training_step|policy|setup",))
api("api-dm-collect-before-build", DM + "RolloutDataModule(num_envs=8, num_steps=8).collect()\n",
    ("collect", "setup|build"))
api("api-dm-dataloader-before-setup", DM + "next(iter(RolloutDataModule(num_envs=8, num_steps=8).train_dataloader()))\n",
    ("setup|build",))
api("api-dm-load-empty-state", DM + "RolloutDataModule(num_envs=8, num_steps=8).load_state_dict({})\n",
    ("load_state_dict|state",))
api("api-dm-env-instance-not-factory", DM + "from parlightning.envs.swarm import SwarmEnv\n"
    "dm = RolloutDataModule(env=SwarmEnv(num_envs=8), num_envs=8, num_steps=8)\ndm.build(torch.device('cpu'))\n", ("env",))
api("api-dm-sampler-class-not-instance", DM + "from parlightning.distribution.samplers import RoundRobin\n"
    "dm = RolloutDataModule(sampler=RoundRobin, num_envs=8, num_steps=8)\ndm.build(torch.device('cpu'))\n", ("sampler",))
api("api-dm-preflight-zero-ranks", DM + "RolloutDataModule(num_envs=8, num_steps=8).preflight(ranks_here=0)\n",
    ("ranks_here",))
api("api-dm-bind-keys-before-build", DM + "RolloutDataModule(num_envs=8, num_steps=8).bind_keys(['solo-0'])\n",
    ("bind_keys|build|setup",))
api("api-ext-receive-nan-timeout", EXTIMP + "env = ExternalBatchedEnv(2, world='r11ext:Good')\nenv.reset()\n"
    "try:\n    env.receive(None, float('nan'))\nfinally:\n    env.close()\n", ("timeout",))
api("api-ext-send-same-actor-twice", EXTIMP + "env = ExternalBatchedEnv(2, world='r11ext:Good')\nenv.reset()\n"
    "try:\n    env.send([0, 0], torch.ones(2, dtype=torch.long))\nfinally:\n    env.close()\n", ("actors",))
api("api-ext-send-before-reset", EXTIMP + "env = ExternalBatchedEnv(2, world='r11ext:Good')\n"
    "try:\n    env.send([0], torch.ones(1, dtype=torch.long))\nfinally:\n    env.close()\n", ("reset",))
api("api-ext-reset-task-index-out-of-bank", EXTIMP + "env = ExternalBatchedEnv(2, world='r11ext:Good')\n"
    "try:\n    env.reset(task_index=torch.tensor([99, 0]))\nfinally:\n    env.close()\n", ("task_index",))
api("api-ext-close-while-another-thread-steps", EXTIMP + "import threading, time\n"
    "env = ExternalBatchedEnv(2, world='r11ext:Slow')\nenv.reset()\nerrs = []\n"
    "def go():\n    try:\n        env.step(torch.ones(2, dtype=torch.long))\n    except BaseException as e:\n        errs.append(e)\n"
    "t = threading.Thread(target=go)\nt.start()\ntime.sleep(0.5)\nenv.close()\nt.join()\n"
    "if errs:\n    raise errs[0]\n", ("close",))
api("api-ext-local-class-with-workers", EXTIMP + "from r11ext import Good\n"
    "def make():\n    class Local(Good):\n        pass\n    return Local\n"
    "env = ExternalBatchedEnv(2, world=make(), workers=1)\ntry:\n    env.reset()\nfinally:\n    env.close()\n",
    ("world", "module-level|import path|pickl"))
api("api-ext-ready-made-shared-pool-with-workers", EXTIMP + "from parlightning.subagents import SimulatedPool\n"
    "env = ExternalBatchedEnv(2, world='r11ext:UsesPool', shared={'pool': SimulatedPool()}, workers=1)\n"
    "try:\n    env.reset()\nfinally:\n    env.close()\n", ("shared",))
api("api-swarm-load-state-of-other-split", SW + "a = SwarmEnv(num_envs=8, split='train')\na.reset(seed=0)\n"
    "b = SwarmEnv(num_envs=8, split='heldout')\nb.load_state_dict(a.state_dict())\n", ("split",))
api("api-swarm-action-masks-before-reset", SW + "SwarmEnv(num_envs=8).action_masks()\n", ("reset",))
api("api-swarm-reset-task-index-ids", SW + "SwarmEnv(num_envs=8).reset(task_index=['solo-0'] * 8)\n", ("task_index",))
api("api-cartpole-load-state-other-max-steps", "from parlightning.envs import CartPoleEnv\n"
    "a = CartPoleEnv(8, max_episode_steps=500)\na.reset(seed=0)\n"
    "CartPoleEnv(8, max_episode_steps=200).load_state_dict(a.state_dict())\n", ("max_episode_steps",))
api("api-normalize-step-before-reset", "import torch\nfrom parlightning.envs import CartPoleEnv, NormalizeEnv\n"
    "NormalizeEnv(8, env=CartPoleEnv).step(torch.zeros(8, dtype=torch.long))\n", ("reset",))
api("api-normalize-normalize-wrong-width", "import torch\nfrom parlightning.envs import CartPoleEnv, NormalizeEnv\n"
    "e = NormalizeEnv(8, env=CartPoleEnv)\ne.reset(seed=0)\ne.normalize(torch.zeros(8, 5))\n", ("normalize|obs",))
api("api-gym-step-after-close", "import torch\nfrom parlightning.envs import GymVectorEnv\n"
    "g = GymVectorEnv(2, env_id='CartPole-v1')\ng.reset()\ng.close()\ng.step(torch.zeros(2, dtype=torch.long))\n",
    ("close",))
api("api-process-pool-spawn-unpicklable-instruction", "from parlightning.subagents.process import ProcessPool\n"
    "p = ProcessPool(fn='r11fns:good_fn', workers=1)\n"
    "try:\n    h = p.spawn({'skill': 0, 'instruction': 0, 'cost': 1, 'on_done': lambda: None})\n"
    "    print(p.wait([h], timeout=10))\nfinally:\n    p.close()\n", ("instruction|spawn", "pickl|lambda"))
api("api-sim-pool-wait-nan-timeout", "from parlightning.subagents import SimulatedPool\np = SimulatedPool()\n"
    "h = p.spawn({'skill': 0, 'instruction': 0, 'cost': 1})\np.wait([h], timeout=float('nan'))\n", ("timeout",))
api("api-workunit-worker-bool", "from parlightning.distribution.strategies import WorkUnit\n"
    "WorkUnit(worker=True, keys=('solo-0',))\n", ("worker",))
api("api-workunit-stage-negative", "from parlightning.distribution.strategies import WorkUnit\n"
    "WorkUnit(0, ('solo-0',), stage=-1)\n", ("stage",))
api("api-expected-wait-zero-seconds", "from parlightning.runtime.waits import expected_wait\n"
    "with expected_wait(0, 'the judge'):\n    pass\n", ("seconds|expected_wait",))
api("api-read-scalars-missing-folder", "from parlightning.analysis.logs import read_scalars\nread_scalars('no_such_run')\n",
    ("no_such_run|logdir",))
api("api-dw-bind-duplicate-ids", "import torch\nfrom parlightning.distribution.samplers import DifficultyWeighted\n"
    "DifficultyWeighted().bind(['solo-0', 'solo-0'], torch.device('cpu'))\n", ("task_ids",))
api("api-sfl-pick-batch-float-reset-mask", "import torch\nfrom parlightning.distribution.samplers import SamplingForLearnability\n"
    "s = SamplingForLearnability()\ns.bind(['solo-0', 'solo-1'], torch.device('cpu'))\n"
    "s.pick_batch(torch.arange(2), 0, torch.ones(4))\n", ("reset_mask",))
api("api-posterior-record-batch-score-rows", "import torch\nfrom parlightning.distribution.samplers import PosteriorSignal\n"
    "s = PosteriorSignal()\ns.bind(['solo-0', 'solo-1'], torch.device('cpu'))\n"
    "s.record_batch(torch.tensor([0, 1]), torch.tensor([1.0]))\n", ("score",))
api("api-parl-reward-shapes-do-not-broadcast", "import torch\nfrom parlightning.parl.reward import PARLReward\n"
    "PARLReward(8)(torch.ones(3), torch.ones(4), torch.ones(4), torch.ones(4))\n",
    ("n_subagents|assigned|shape|broadcast",))
api("api-orchestration-world-unknown-task", "from parlightning.subagents import SimulatedPool\n"
    "from parlightning.subagents.world import PoolOrchestrationWorld\n"
    "PoolOrchestrationWorld(SimulatedPool()).reset('nope-0')\n", ("task|nope-0",))
api("api-orchestration-world-step-before-reset", "from parlightning.subagents import SimulatedPool\n"
    "from parlightning.subagents.world import PoolOrchestrationWorld\n"
    "PoolOrchestrationWorld(SimulatedPool()).step([0, 0, 0])\n", ("reset",))
api("api-orchestration-world-short-action", "from parlightning.subagents import SimulatedPool\n"
    "from parlightning.subagents.world import PoolOrchestrationWorld\n"
    "w = PoolOrchestrationWorld(SimulatedPool())\nw.reset('solo-0')\nw.step([0])\n", ("action",))
api("api-ext-step-three-actions-for-two", EXTIMP + "env = ExternalBatchedEnv(2, world='r11ext:Good')\nenv.reset()\n"
    "try:\n    env.step(torch.ones(3, dtype=torch.long))\nfinally:\n    env.close()\n", ("action",))
api("api-ext-load-state-of-a-swarm-env", EXTIMP + "from parlightning.envs.swarm import SwarmEnv\n"
    "env = ExternalBatchedEnv(2, world='r11ext:Good')\n"
    "try:\n    env.load_state_dict(SwarmEnv(num_envs=2).state_dict())\nfinally:\n    env.close()\n", ("state",))
api("api-async-http-acall-after-close", "import asyncio, r11http\nfrom parlightning.subagents import AsyncHTTPPool\n"
    "p = AsyncHTTPPool(r11http.serve('good'))\np.close()\n"
    "asyncio.run(p.acall({'skill': 0, 'instruction': 0, 'cost': 1, 'prompt': 'x'}))\n", ("closed|close",))
api("api-predict-return-logits-string", LP + "p.predict(torch.zeros(2, 13, 6), return_logits='no')\n", ("return_logits",))
api("api-normalize-load-state-of-other-world", "import torch\nfrom parlightning.envs import CartPoleEnv, NormalizeEnv, SwarmEnv\n"
    "a = NormalizeEnv(8, env=CartPoleEnv)\na.reset(seed=0)\nb = NormalizeEnv(8, env=SwarmEnv)\n"
    "b.load_state_dict(a.state_dict())\n", ("state|load_state_dict",))
api("api-roundrobin-shard-outside-bank", "import torch\nfrom parlightning.distribution.samplers import RoundRobin\n"
    "s = RoundRobin()\ns.bind(['solo-0', 'solo-1'], torch.device('cpu'))\n"
    "s.pick_batch(torch.tensor([5]), 0, torch.ones(2, dtype=torch.bool))\n", ("shard",))
api("api-tp-plan-undeclared-key", "from parlightning.distribution.strategies import TensorParallel\n"
    "TensorParallel(2, keys=['solo', 'fanout']).plan(2, 0, ['solo-0', 'pipeline-0'])\n", ("pipeline",))
api("api-memory-step-before-reset", "import torch\nfrom parlightning.envs.memory import CueMemoryEnv\n"
    "CueMemoryEnv(8).step(torch.zeros(8, dtype=torch.long))\n", ("reset",))
api("api-gym-step-after-load-state-without-reset", "import torch\nfrom parlightning.envs import GymVectorEnv\n"
    "a = GymVectorEnv(2, env_id='CartPole-v1')\na.reset()\nb = GymVectorEnv(2, env_id='CartPole-v1')\n"
    "b.load_state_dict(a.state_dict())\nb.step(torch.zeros(2, dtype=torch.long))\n", ("reset",))
api("api-load-policy-trailing-garbage", "import parlightning\nparlightning.load_policy('{fx}/junk.ckpt')\n", ("junk.ckpt",))
api("api-sim-spawn-cost-nan", "from parlightning.subagents import SimulatedPool\n"
    "SimulatedPool().spawn({'skill': 0, 'instruction': 0, 'cost': float('nan')})\n", ("cost",))
ST = "from parlightning.analysis.stats import bootstrap_diff_ci, tail_share\n"
api("api-bootstrap-ci-level-above-one", ST + "bootstrap_diff_ci([0.1, 0.2, 0.3], [0.2, 0.4], level=1.5)\n", ("level",))
api("api-bootstrap-ci-empty-sample", ST + "bootstrap_diff_ci([], [0.2, 0.4])\n", ("bootstrap_diff_ci",))
api("api-tail-share-lengths-differ", ST + "tail_share([0, 1, 2, 3], [0.1, 0.2])\n", ("tail_share", "steps|values"))
api("api-write-trace-record-not-json", "import torch\nfrom parlightning.analysis.trace import write_trace\n"
    "write_trace([{'episode': 0}, {'episode': 1, 'obs': torch.zeros(2)}], 't.jsonl', policy='oracle')\n",
    ("write_trace|record|trace", "json|serial|tensor"))
api("api-load-policy-unknown-hyper-parameter", "import parlightning\nparlightning.load_policy('{fx}/oldhp.ckpt')\n",
    ("num_layers|hyper",))

# ------------------------------------------------------------------------------------ checkpoints
fit("ckpt-path-is-a-pickled-module", "ckpt", TINY + ["--trainer.max_epochs", "2", "--ckpt_path", "{fx}/module.pt"],
    ("ckpt_path",))
fit("ckpt-resume-from-weights-only-save", "ckpt", TINY + ["--trainer.max_epochs", "3", "--ckpt_path", "{fx}/slim.ckpt"],
    ("weights_only|weights only|optimizer",))
fit("ckpt-path-with-trailing-garbage", "ckpt", TINY + ["--trainer.max_epochs", "2", "--ckpt_path", "{fx}/junk.ckpt"],
    ("ckpt_path",))
fit("ckpt-init-from-pickled-module", "ckpt", TINY + ["--model.init_from", "{fx}/module.pt"], ("init_from",))
case("ckpt-evaluate-pickled-module", "ckpt", "evaluate", ["--config", "swarm", "--ckpt_path", "{fx}/module.pt",
                                                          "--episodes", "1"], ("ckpt_path",))
case("ckpt-export-trailing-garbage", "ckpt", "export", ["--ckpt_path", "{fx}/junk.ckpt", "--out", "p.pt2"], ("ckpt_path",))
case("ckpt-evaluate-unknown-hyper-parameter", "ckpt", "evaluate",
     ["--config", "swarm", "--ckpt_path", "{fx}/oldhp.ckpt", "--episodes", "1"], ("num_layers|hyper",))
case("ckpt-export-unknown-hyper-parameter", "ckpt", "export", ["--ckpt_path", "{fx}/oldhp.ckpt", "--out", "p.pt2"],
     ("num_layers|hyper",))
case("ckpt-bc-teacher-with-trailing-garbage", "ckpt", "bc",
     ["--config", "swarm", "--teacher", "{fx}/junk.ckpt", "--out", "b.ckpt", "--rounds", "2", "--num_envs", "8",
      "--epochs", "1"], ("teacher",))

# ------------------------------------------------------------------------------------ tools
E1 = ["--policy", "oracle", "--episodes", "1"]
case("eval-seed-and-seeds-together", "tools", "evaluate", E1 + ["--seed", "3", "--seeds", "1", "2"], ("--seed",))
case("eval-ckpt-path-unexpanded-glob", "tools", "evaluate",
     ["--config", "swarm", "--ckpt_path", "lightning_logs/*/checkpoints/last.ckpt"], ("ckpt_path",))
case("eval-trace-empty-string", "tools", "evaluate", E1 + ["--trace", ""], ("--trace",))
case("eval-device-trailing-space", "tools", "evaluate", E1 + ["--device", "cpu "], ("--device",))
case("export-ckpt-path-empty-string", "tools", "export", ["--ckpt_path", "", "--out", "p.pt2"], ("--ckpt_path|ckpt_path",))
case("bc-teacher-empty-string", "tools", "bc",
     ["--config", "swarm", "--teacher", "", "--out", "b.ckpt", "--rounds", "2", "--num_envs", "8", "--epochs", "1"],
     ("--teacher|teacher",))
case("bc-json-is-the-teacher", "tools", "bc",
     ["--config", "swarm", "--teacher", "t.ckpt", "--out", "b.ckpt", "--json", "t.ckpt", "--rounds", "2", "--num_envs",
      "8", "--epochs", "1"], ("--json",), files={"t.ckpt": "fixture:swarm.ckpt"}, guard=("t.ckpt",))
case("plot-tag-missing-in-one-run", "tools", "plot",
     ["run0", "cartrun", "--tag", "critical_steps/mean", "--out", "p.png"], ("critical_steps/mean", "cartrun"),
     files={"run0": "fixture:run0", "cartrun": "fixture:cartrun"})

# ------------------------------------------------------------------------------------ command line
fit("cli-precision-16-mixed-on-cpu", "cli", TINY + ["--trainer.accelerator", "cpu", "--trainer.precision", "16-mixed"],
    ("precision",))
fit("cli-csv-logger-flush-every-zero", "cli", TINY + ["--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
                                                      "--trainer.logger.save_dir", "runs",
                                                      "--trainer.logger.flush_logs_every_n_steps", "0"],
    ("flush_logs_every_n_steps",))
yaml_case("cli-grad-accumulation-scheduler-zero", "cli",
          callbacks_yaml("{class_path: lightning.pytorch.callbacks.GradientAccumulationScheduler, "
                         "init_args: {scheduling: {0: 0}}}"), ("scheduling|GradientAccumulationScheduler",), base=CART)
yaml_case("cli-batch-size-finder-callback", "cli", callbacks_yaml("{class_path: lightning.pytorch.callbacks.BatchSizeFinder}"),
          ("BatchSizeFinder|batch_size",), base=CART)
yaml_case("cli-model-summary-depth-below-minus-one", "cli",
          callbacks_yaml("{class_path: lightning.pytorch.callbacks.ModelSummary, init_args: {max_depth: -2}}"),
          ("max_depth",), base=CART)
fit("cli-plugin-plain-checkpoint-io", "cli", TINY + ["--trainer.plugins", "lightning.pytorch.plugins.io.TorchCheckpointIO"],
    ("plugins|CheckpointIO",))
fit("cli-ckpt-path-with-init-from", "cli", TINY + ["--trainer.max_epochs", "2", "--ckpt_path", "c.ckpt",
                                                   "--model.init_from", "c.ckpt"],
    ("init_from", "ckpt_path"), files={"c.ckpt": "fixture:swarm.ckpt"})
fit("cli-model-registry-without-litmodels", "cli", TINY + ["--trainer.model_registry", "my-orchestrator"],
    ("model_registry|litmodels",))
fit("cli-max-epochs-minus-one-with-lr-anneal", "cli", TINY + ["--trainer.max_epochs=-1"], ("max_epochs",))
fit("cli-ckpt-path-hpc-keyword", "cli", TINY + ["--ckpt_path", "hpc"], ("ckpt_path|hpc",))
fit("cli-ckpt-path-registry-keyword", "cli", TINY + ["--ckpt_path", "registry"], ("ckpt_path|registry",))

# ------------------------------------------------------------------------------------ YAML
yaml_case("yaml-lr-timestamp", "yaml", "model:\n  lr: 2024-01-01\n", ("lr",))
yaml_case("yaml-hidden-sizes-set-tag", "yaml", "model:\n  hidden_sizes: !!set {64: null, 32: null}\n", ("hidden_sizes",))
yaml_case("yaml-env-init-args-binary-tag", "yaml",
          "data:\n  env:\n    class_path: parlightning.envs.swarm.SwarmEnv\n    init_args: !!binary aGVsbG8=\n",
          ("init_args|data.env",))
yaml_case("yaml-version-directive-1-2", "yaml", "%YAML 1.2\n---\nmodel:\n  lr: 0.001\n", ("c.yaml|YAML",))
yaml_case("yaml-complex-mapping-key", "yaml", "model:\n  ? [lr, hidden]\n  : 0.001\n", ("model|key",))
yaml_case("yaml-max-time-timestamp", "yaml", "trainer:\n  max_time: 2024-01-01 12:00:00\n", ("max_time",))
yaml_case("yaml-num-steps-0o-octal", "yaml", "data:\n  num_steps: 0o10\n", ("num_steps",))
yaml_case("yaml-env-class-path-colon-form", "yaml", "data:\n  env:\n    class_path: parlightning.envs.swarm:SwarmEnv\n",
          ("class_path|data.env",))
yaml_case("yaml-recursive-alias", "yaml", "model: &m\n  hidden_sizes: [64]\n  prior: *m\n", ("model|prior|alias|recurs",))
yaml_case("yaml-families-null-entry", "yaml", "data:\n  env:\n    init_args:\n      families: [solo, ~, fanout]\n",
          ("families",))

# ------------------------------------------------------------------------------------ filesystem
CLI = "from parlightning.cli import {0} as cli\n"
case("fs-working-folder-deleted", "fs", "py", "import os\nos.mkdir('gone')\nos.chdir('gone')\nos.rmdir('../gone')\n"
     + CLI.format("fit") + "cli.main(['--config', '{fx}/user.yaml'])\n", ("folder|directory|cwd|getcwd",))
case("fs-root-dir-on-read-only-mount", "fs", "py", "import r11run\nr11run.ro_mount('ro')\n" + CLI.format("fit")
     + "cli.main(['--config', '{fx}/user.yaml', '--trainer.default_root_dir', 'ro'])\n",
     ("ro|default_root_dir", "read-only|writ"))
case("fs-evaluate-json-on-read-only-mount", "fs", "py", "import r11run\nr11run.ro_mount('ro')\n" + CLI.format("evaluate")
     + "cli.main(['--policy', 'oracle', '--episodes', '1', '--json', 'ro/out.json'])\n", ("--json",))
case("fs-export-out-on-read-only-mount", "fs", "py", "import r11run\nr11run.ro_mount('ro')\n" + CLI.format("export")
     + "cli.main(['--ckpt_path', '{fx}/swarm.ckpt', '--out', 'ro/policy.pt2'])\n", ("--out",))
yaml_case("fs-last-ckpt-is-a-folder", "fs",
          callbacks_yaml("{class_path: lightning.pytorch.callbacks.ModelCheckpoint, init_args: {dirpath: ck, save_last: true}}"),
          ("last.ckpt",), base=UW, files={"ck/last.ckpt/.keep": ""}, allow=RUNS + (r"^ck/epoch=.*\.ckpt$",))
case("fs-ckpt-path-is-a-unix-socket", "fs", "py",
     "import socket\ns = socket.socket(socket.AF_UNIX)\ns.bind('sock.ckpt')\n"
     "from parlightning.cli import fit as cli\n"
     "cli.main(['--config', 'swarm', '--trainer.max_epochs', '1', '--data.num_envs', '8', '--data.num_steps', '8', "
     "'--ckpt_path', 'sock.ckpt'])\n", ("ckpt_path",), allow=(r"^sock\.ckpt$",))

# ------------------------------------------------------------------------------------ environment
LONG = "t" * 60 + "/" + "u" * 60
case("env-tmpdir-too-long-for-fork-server", "env", "py",
     f"import os, tempfile\nos.makedirs('{LONG}')\nos.environ['TMPDIR'] = os.path.abspath('{LONG}')\n"
     "tempfile.tempdir = None\n" + CLI.format("fit")
     + "cli.main(['--config', '{fx}/ext.yaml', '--data.env.init_args.workers', '1'])\n", ("TMPDIR",))
fit("env-cxx-is-true-compile", "env", TINY + ["--data.env.init_args.compile", "true"], ("CXX|compil",),
    env={"CXX": "/bin/true", "PARLIGHTNING_CACHE_DIR": "cache"}, allow=(r"^cache",))
fit("env-rank-beyond-world-size", "env", TINY,
    ("RANK|WORLD_SIZE",), env={"RANK": "5", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "GROUP_RANK": "0",
                               "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29531"})

# ------------------------------------------------------------------------------------ signals
SIG_UW = ["--config", "{fx}/user.yaml", "--data.env", "r11worlds.MarkStep", "--trainer.max_epochs", "50"]


def sig(name: str, signame: str, when: str, target: str, kind: str, argv: list, expect: Any, **kw: Any) -> None:
    """A signal sent by a thread of the case's own process at `when` (to it, or to its process group)."""
    kw.setdefault("env", MARK)
    kw.setdefault("allow", RUNS + ("^mark$",))
    kw.setdefault("timeout", 40)
    code = (f"import r11run\nr11run.signal_when({signame!r}, {when!r}, {target!r})\n" + CLI.format(kind)
            + f"cli.main({argv!r})\n")
    case(name, "signals", "py", code, expect, **kw)


cmd("signal-sigterm-during-import", "signals", drive("SIGTERM", "after:0.8", "pid") + FIT + UW, ("SIGTERM",), timeout=40)
sig("signal-sighup-in-first-rollout", "SIGHUP", "marker:mark", "pid", "fit", SIG_UW, ("SIGHUP",))
sig("signal-sigterm-during-checkpoint-save", "SIGTERM", "marker:mark", "pid", "fit",
    UW + ["--trainer.max_epochs", "50", "--trainer.callbacks+", "r11user.SlowSave"], ("SIGTERM",))
sig("signal-sigterm-twice", "SIGTERM", "marker:mark", "twice", "fit", SIG_UW, ("SIGTERM",))
sig("signal-sigint-group-with-pool-workers", "SIGINT", "marker:mark", "group", "fit",
    POOLC + ["--trainer.max_epochs", "50", "--config", "c.yaml"], ("interrupt|SIGINT",),
    files={"c.yaml": "data:\n  env:\n    init_args:\n      shared:\n        pool:\n"
                     f"          class_path: {PROC}\n          init_args: {{fn: 'r11fns:mark_fn', workers: 2}}\n"})
sig("signal-sigint-group-with-world-workers", "SIGINT", "marker:mark", "group", "fit",
    EXTC + ["--trainer.max_epochs", "50", "--config", "c.yaml"], ("interrupt|SIGINT",),
    files={"c.yaml": "data:\n  env:\n    init_args: {world: 'r11ext:MarkGood', step_timeout: 10, workers: 1}\n"})
sig("signal-sigterm-group-with-collector-process", "SIGTERM", "marker:mark", "group", "fit",
    SIG_UW + ["--data.max_policy_lag", "1", "--data.collect_in", "process"], ("SIGTERM",))
sig("signal-sigterm-during-evaluate", "SIGTERM", "after:3", "pid", "evaluate",
    ["--policy", "oracle", "--episodes", "400", "--json", "out.json"], ("SIGTERM",), allow=())
sig("signal-sigint-during-bc", "SIGINT", "after:4", "pid", "bc",
    ["--config", "swarm", "--teacher", "oracle", "--out", "b.ckpt", "--rounds", "400", "--num_envs", "256",
     "--epochs", "200"], ("interrupt|SIGINT",), allow=())

# ------------------------------------------------------------------------------------ DDP (2 gloo ranks)
DDP = ["--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp", "--trainer.max_epochs", "50"]


def ddp(name: str, argv: list, expect: Any, signal: Optional[tuple] = None, **kw: Any) -> None:
    """A 2-rank gloo run as `python -m parlightning.fit ARGS` starts it: rank 0 is the case's own process
    (Lightning starts rank 1 as `python -m parlightning.fit ARGS`); `signal` = signal_when's arguments."""
    kw.setdefault("allow", RUNS + ("^mark$",))
    kw.setdefault("timeout", 45)
    code = ("import sys, importlib.util, __main__\n__main__.__spec__ = importlib.util.find_spec('parlightning.fit')\n"
            f"sys.argv = ['parlightning.fit'] + {argv!r}\n")
    if signal:
        code += f"import r11run\nr11run.signal_when{signal!r}\n"
    code += CLI.format("fit") + f"cli.main({argv!r})\n"
    case(name, "ddp", "py", code, expect, **kw)


SMALL = ["--data.num_envs", "2", "--data.num_steps", "4"]
ddp("ddp-rank1-world-worker-sigkilled", EXTC + DDP + SMALL + ["--config", "c.yaml"], ("rank 1|rank1", "worker|died|killed|-9"),
    signal=("SIGKILL", "marker:mark", "pidfile"), env=MARK,
    files={"c.yaml": "data:\n  env:\n    init_args: {world: 'r11ext:WorkerPidRank1', step_timeout: 10, workers: 1}\n"})
ddp("ddp-ctrl-c-to-process-group", SIG_UW + DDP, ("interrupt|SIGINT",), signal=("SIGINT", "marker:mark", "group"), env=MARK)
ddp("ddp-rank1-raises-while-saving", UW + DDP + ["--trainer.callbacks+", "r11user.RaiseInSaveRank1"],
    ("rank 1|rank1", "RaiseInSaveRank1|metadata service"))
ddp("ddp-rank1-leaves-fit-loop-early", UW + DDP + ["--trainer.callbacks+", "r11user.StopEarlyRank1"],
    ("rank 1|rank1", "should_stop|stop|StopEarlyRank1"))

# ------------------------------------------------------------------------------------ scripts
script("script-bench-lag-modes-negative-workers", ["bench_lag.py", "--quick", "--modes", "thread:-1"], ("--modes",))
script("script-collapse-report-on-empty-folder", ["collapse_study.py", "--report", "--out", "empty"],
       ("--out|empty|no finished|no runs|study",), files={"empty/.keep": ""})
script("script-sampler-study-report-only-missing-out", ["sampler_study.py", "--report-only", "--out", "missing"],
       ("--out|missing",))
script("script-parl-study-duplicate-arms", ["parl_study.py", "--quick", "--arms", "perf_only,perf_only", "--out", "{tmp}/o"],
       ("--arms|perf_only",))
script("script-bench-throughput-from-json-foreign", ["bench_throughput.py", "--from-json", "r.json"],
       ("--from-json|r.json",), files={"r.json": '{"hello": 1}\n'})

# ------------------------------------------------------------------------------------ judged valid after the draft
DROPPED: dict[str, str] = {
    "world-step-disables-grad-globally": "valid: the world's torch.set_grad_enabled(False) is undone for the update "
                                         "(training ran with gradients), so it changes nothing the run relies on",
    "ext-world-kwargs-yaml-timestamp-for-str": "valid: the config loader keeps an unquoted 2024-01-01 as the string "
                                               "'2024-01-01', which is what the `start: str` argument wants",
    "sampler-batched-mutates-shard": "ambiguous: whether the shard a batched sampler is given is its own copy is not "
                                     "documented; if it is, overwriting it changes nothing (the run trained)",
    "strategy-plan-mutates-keys": "ambiguous: the case mutates `keys` only when it is a list; the run trained, so "
                                  "either it was immutable (nothing to refuse) or a copy",
    "callback-calls-parlightning-fit-nested": "valid as far as can be told: the nested fit and the outer one both "
                                              "completed; nothing documented forbids a run inside a hook",
    "api-ext-close-while-another-thread-steps": "ambiguous: close() may wait for the step in flight and let it "
                                                "return; nothing says an in-flight call must fail",
    "api-swarm-load-state-of-other-split": "valid per SwarmEnv.load_state_dict's docstring: it needs the same "
                                           "num_envs and max_width only",
    "api-load-policy-unknown-hyper-parameter": "ambiguous: ignoring a saved hyper-parameter this version does not "
                                               "know is a tolerant reading; the weights fit the network",
    "ckpt-evaluate-unknown-hyper-parameter": "as api-load-policy-unknown-hyper-parameter",
    "ckpt-export-unknown-hyper-parameter": "as api-load-policy-unknown-hyper-parameter",
    "eval-seed-and-seeds-together": "ambiguous: --seeds taking precedence over --seed is a reasonable reading",
    "cli-precision-16-mixed-on-cpu": "valid: Lightning trains with 16-mixed on the CPU here",
    "cli-model-registry-without-litmodels": "ambiguous: Lightning's own handling of model_registry without "
                                            "litmodels (the run trained); not this package's setting",
    "yaml-hidden-sizes-set-tag": "ambiguous: the loader turned the !!set into a list and the run trained",
    "yaml-version-directive-1-2": "valid: the config loader reads a %YAML 1.2 document",
    "api-tp-plan-undeclared-key": "ambiguous: an undeclared key is documented as refused before the first rollout of a "
                                  "run (the planner), not by a direct TensorParallel.plan call",
    "callback-on-load-checkpoint-empties-weights": "ambiguous: the run resumed and trained; whether Lightning calls "
                                                   "on_load_checkpoint before or after it loads the weights decides "
                                                   "whether emptying them does anything",
    "fs-last-ckpt-is-a-folder": "valid: Lightning writes the last checkpoint under a versioned name beside the "
                                "folder (its version counter), so nothing is lost",
}

ALL = BOOK.cases
assert not set(DROPPED) - {c.name for c in ALL}, "DROPPED names a case that does not exist"
VALID = [c for c in ALL if c.name in DROPPED]
CASES = [c for c in ALL if c.name not in DROPPED]
_seen: set[str] = set()
for _c in CASES:  # --quick: the first case of every category
    if _c.category not in _seen:
        _c.quick = True
        _seen.add(_c.category)


# ------------------------------------------------------------------------------------ fixtures
def make_fixtures(fx: Path, cases: list) -> None:
    """The user-code modules and configs, and the checkpoints and run folders the chosen cases use."""
    import shutil

    fx.mkdir(parents=True, exist_ok=True)
    for name, text in (("r11worlds.py", WORLDS), ("r11swarmsub.py", SWARMSUB), ("r11ext.py", EXT), ("r11user.py", USER),
                       ("r11fns.py", FNS), ("r11http.py", HTTP), ("r11drive.py", DRIVE), ("r11run.py", RUNHELP), ("user.yaml", USER_YAML),
                       ("tasks.yaml", TASKS_YAML), ("ext.yaml", EXT_YAML), ("pool.yaml", POOL_YAML)):
        (fx / name).write_text(text)
    used = " ".join(str(c.args) + " " + " ".join(str(v) for v in c.files.values()) for c in cases)
    need = {k: k in used for k in ("swarm.ckpt", "run0", "cartrun", "slim.ckpt", "module.pt", "oldhp.ckpt", "junk.ckpt")}
    need["swarm"] = any(need[k] for k in ("swarm.ckpt", "run0", "module.pt", "oldhp.ckpt", "junk.ckpt"))
    jobs = []
    if need["swarm"]:
        jobs.append(Case("fixture-swarm", "fixture", "fit", TINY + ["--trainer.default_root_dir", str(fx / "swarm")],
                         control=True, timeout=240))
    if need["cartrun"]:
        jobs.append(Case("fixture-cart", "fixture", "fit", CART + ["--trainer.default_root_dir", str(fx / "cart")],
                         control=True, timeout=240))
    if need["slim.ckpt"]:
        jobs.append(Case("fixture-slim", "fixture", "py",
                         "from parlightning import fit\n"
                         f"t = fit(config='swarm', overrides={TINY[2:] + ['--trainer.default_root_dir', str(fx / 'slimrun')]!r})\n"
                         f"t.save_checkpoint({str(fx / 'slim.ckpt')!r}, weights_only=True)\n", control=True, timeout=240))
    for i, c in enumerate(jobs):
        outcome, _line, _s, text = run_case(c, fx / "_runs", fx, i)
        if outcome != "ok":
            raise SystemExit(f"fixture {c.name} failed ({outcome}): {text[-3000:]}")
    if need["swarm"]:
        ckpt = fx / "swarm/lightning_logs/version_0/checkpoints/last.ckpt"
        shutil.copy(ckpt, fx / "swarm.ckpt")
        shutil.copytree(fx / "swarm/lightning_logs/version_0", fx / "run0", ignore=shutil.ignore_patterns("checkpoints"))
        (fx / "junk.ckpt").write_bytes(ckpt.read_bytes() + b"\x00GARBAGE-APPENDED-BY-A-BROKEN-COPY" * 4000)
        derive = Case("fixture-derive", "fixture", "py",
                      "import torch\nfrom parlightning.ppo.module import PPOModule\n"
                      f"m = PPOModule.load_from_checkpoint({str(fx / 'swarm.ckpt')!r})\n"
                      f"torch.save(m, {str(fx / 'module.pt')!r})\n"
                      f"c = torch.load({str(fx / 'swarm.ckpt')!r}, weights_only=False)\n"
                      "c['hyper_parameters']['num_layers'] = 2\n"
                      f"torch.save(c, {str(fx / 'oldhp.ckpt')!r})\n", control=True, timeout=240)
        outcome, _line, _s, text = run_case(derive, fx / "_runs", fx, 90)
        if outcome != "ok":
            raise SystemExit(f"fixture derive failed ({outcome}): {text[-3000:]}")
    if need["cartrun"]:
        shutil.copytree(fx / "cart/lightning_logs/version_0", fx / "cartrun", ignore=shutil.ignore_patterns("checkpoints"))


def main(argv: Optional[list[str]] = None) -> int:
    return r5.run_corpus(argv, round_no=11, description=__doc__.split("\n\n")[0], cases_all=CASES, valid=VALID,
                         dropped=DROPPED, make_fixtures=make_fixtures)


if __name__ == "__main__":
    sys.exit(main())
