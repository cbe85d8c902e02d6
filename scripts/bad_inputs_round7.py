#!/usr/bin/env python
"""Round 7 of the bad-input corpus: a fresh set of bad inputs and faults, written from the README,
`docs/guides/`, `configs/`, the CLIs' `--help` and the public classes the guides tell users to write
(tensor worlds, external worlds, samplers, strategies, rollout callbacks, subagent functions) only;
its author read neither `tests/` nor the earlier corpora's cases (the case names of rounds 5 and 6
were listed to avoid repeats).

    python scripts/bad_inputs_round7.py                # every case; writes docs/results/data/bad_inputs_round7-<tag>.txt
    python scripts/bad_inputs_round7.py --tag after    # the same, into ...-after.txt
    python scripts/bad_inputs_round7.py --quick        # about a dozen cases
    python scripts/bad_inputs_round7.py --only NAME... # the cases whose name contains any NAME
    python scripts/bad_inputs_round7.py --list         # the cases, one per line

The harness is round 5's (`scripts/bad_inputs_round5.py`: `Case`, `run_case`), imported, not
copied: a case per forked process and folder (the multi-process DDP cases as `cmd`, a fresh
interpreter); outcome classes clean / traceback / misleading / messy / accepted / hang / crash. A
case is **clean** when it exits non-zero with exactly one `error:` line containing the case's
keywords (the field or the failing component), no traceback and nothing left behind (no new file,
no `lightning_logs/version_*`, given files unchanged, no process of the case alive). For the
Python API a case is clean when it raises an exception of the package whose message contains the
keywords. Controls (user code written by the book) must train; they are not counted. Whether a line
also gives the fix is judged by hand (docs/guides/reliability.md).
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
# Tensor worlds written from docs/guides/bring-your-own-env.md and the BatchedEnv protocol, each
# wrong in one way (its docstring says how); W7 and W7Tasks are the controls.
WORLDS = r'''
import sys

import numpy as np
import torch
from parlightning.envs.base import ActionSpec, BatchedEnv, EpisodeParts, StepResult


class W7(BatchedEnv):
    """Control: 4 features, 3 actions, 5-step episodes, reward 1 for action 2."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.observation_shape = (4,)
        self.action_spec = ActionSpec("discrete", nvec=(3,))
        self.t = torch.zeros(num_envs, dtype=torch.long)
        self.steps = 0

    def obs(self):
        n = self.num_envs
        return torch.stack([self.t.float() / 5, torch.ones(n), torch.zeros(n), torch.full((n,), 0.5)], 1)

    def reset(self, *, seed=None, task_index=None):
        self.t.zero_()
        return self.obs()

    def advance(self, action):
        self.steps += 1
        self.t += 1
        reward = (action.reshape(self.num_envs) == 2).float()
        done = self.t >= 5
        final = self.obs()
        self.t[done] = 0
        return reward, done, final

    def step(self, action, next_task=None):
        reward, done, final = self.advance(action)
        return StepResult(self.obs(), reward, done, torch.zeros_like(done), final, None)


class W7Tasks(W7):
    """Control: W7 with a bank of three tasks and EpisodeParts."""

    task_ids = ["x-0", "x-1", "y-0"]

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.task = torch.zeros(num_envs, dtype=torch.long)

    def reset(self, *, seed=None, task_index=None):
        if task_index is not None:
            self.task = task_index.clone()
        return super().reset(seed=seed)

    def parts(self, done):
        one = torch.ones(self.num_envs)
        return EpisodeParts(self.task.clone(), (self.task % 2).float(), one, one, one, 5 * one, 5 * one)

    def step(self, action, next_task=None):
        reward, done, final = self.advance(action)
        parts = self.parts(done)
        if next_task is not None:
            nt = next_task(done) if callable(next_task) else next_task
            self.task = torch.where(done, nt, self.task)
        return StepResult(self.obs(), reward, done, torch.zeros_like(done), final, parts)


class NoDeviceAttr(W7):
    """never sets self.device."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        del self.device


class NoNumEnvsAttr(W7):
    """never sets self.num_envs (keeps it as self.n)."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.n = num_envs
        del self.num_envs

    def obs(self):
        n = self.n
        return torch.stack([self.t.float() / 5, torch.ones(n), torch.zeros(n), torch.full((n,), 0.5)], 1)

    def advance(self, action):
        self.t += 1
        reward = (action.reshape(self.n) == 2).float()
        done = self.t >= 5
        final = self.obs()
        self.t[done] = 0
        return reward, done, final


class InitOnlyNumEnvs(W7):
    """__init__ takes num_envs only (no device, no seed)."""

    def __init__(self, num_envs: int):
        super().__init__(num_envs)


class InitNeedsLevel(W7):
    """a required constructor argument the config does not give."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0, *, level: str):
        super().__init__(num_envs, device, seed)
        self.level = level


class ObsShapeInt(W7):
    """observation_shape = 4 (an int, not a tuple)."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.observation_shape = 4


class NvecInt(W7):
    """ActionSpec("discrete", nvec=3): an int, not a tuple."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.action_spec = ActionSpec("discrete", nvec=3)


class ActionSpecString(W7):
    """action_spec = "discrete(3)" (a string)."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.action_spec = "discrete(3)"


class ContinuousShapeZero(W7):
    """a continuous spec with shape (0,)."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.action_spec = ActionSpec("continuous", shape=(0,), low=-1.0, high=1.0)


class HugeObs(W7):
    """an observation of 20 million numbers per actor (memory preflight)."""

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        super().__init__(num_envs, device, seed)
        self.observation_shape = (20_000_000,)

    def obs(self):
        return torch.zeros(self.num_envs, 20_000_000)


class ResetObsNaN(W7):
    """reset's observation has a NaN."""

    def reset(self, *, seed=None, task_index=None):
        o = super().reset()
        o[:, 2] = float("nan")
        return o


class ResetNoTaskIndex(W7Tasks):
    """reset(self, seed=None): no task_index parameter, though the world has a task bank."""

    def reset(self, seed=None):
        self.t.zero_()
        return self.obs()


class DoneColumnLater(W7):
    """terminated is [N, 1] from the third step on."""

    def step(self, action, next_task=None):
        r = super().step(action)
        if self.steps >= 3:
            return r._replace(terminated=r.terminated.unsqueeze(1))
        return r


class TerminatedFloat(W7):
    """terminated as a float tensor of 0/1."""

    def step(self, action, next_task=None):
        r = super().step(action)
        return r._replace(terminated=r.terminated.float())


class StepNoneLater(W7):
    """step returns None on its sixth call (a forgotten return in a branch)."""

    def step(self, action, next_task=None):
        r = super().step(action)
        if self.steps == 6:
            return None
        return r


class FinalObsNarrow(W7):
    """final_obs has 2 features instead of 4."""

    def step(self, action, next_task=None):
        r = super().step(action)
        return r._replace(final_obs=r.final_obs[:, :2])


class FieldsSwapped(W7):
    """StepResult built with obs and reward swapped."""

    def step(self, action, next_task=None):
        reward, done, final = self.advance(action)
        return StepResult(reward, self.obs(), done, torch.zeros_like(done), final, None)


class RewardInfLater(W7):
    """reward +inf on the fourth step."""

    def step(self, action, next_task=None):
        r = super().step(action)
        if self.steps == 4:
            return r._replace(reward=torch.full_like(r.reward, float("inf")))
        return r


class ObsDoubleWidthLater(W7):
    """observation width doubles after step 7."""

    def obs(self):
        o = super().obs()
        return torch.cat([o, o], 1) if self.steps >= 7 else o


class StepSysExit(W7):
    """calls sys.exit(3) from step (a user's "give up")."""

    def step(self, action, next_task=None):
        if self.steps >= 2:
            sys.exit(3)
        return super().step(action)


class StepAssert(W7):
    """an assert in step fails on the third call."""

    def step(self, action, next_task=None):
        assert self.steps < 2, "my invariant: t never exceeds 2"
        return super().step(action)


class PartsOnlyDone(W7Tasks):
    """EpisodeParts with one row per finished actor (not N rows)."""

    def parts(self, done):
        k = int(done.sum())
        one = torch.ones(k)
        return EpisodeParts(self.task[done].clone(), one, one, one, one, 5 * one, 5 * one)


class PartsColumn(W7Tasks):
    """EpisodeParts fields of shape [N, 1]."""

    def parts(self, done):
        p = super().parts(done)
        return EpisodeParts(*[f.unsqueeze(1) for f in p])


class PartsCriticalNaN(W7Tasks):
    """critical_steps NaN."""

    def parts(self, done):
        p = super().parts(done)
        return p._replace(critical_steps=torch.full_like(p.critical_steps, float("nan")))


class PartsTaskFloat(W7Tasks):
    """task index as a float tensor."""

    def parts(self, done):
        p = super().parts(done)
        return p._replace(task=p.task.float())


class NextTaskNoArg(W7Tasks):
    """calls next_task() without the done mask."""

    def step(self, action, next_task=None):
        reward, done, final = self.advance(action)
        if next_task is not None and callable(next_task):
            self.task = torch.where(done, next_task(), self.task)
        return StepResult(self.obs(), reward, done, torch.zeros_like(done), final, self.parts(done))


class TaskIdsRaises(W7Tasks):
    """task_ids is a property that raises."""

    @property
    def task_ids(self):
        raise FileNotFoundError("tasks.json")


class TaskIdsWithEmpty(W7Tasks):
    """task_ids holds an empty string."""

    task_ids = ["x-0", "", "y-0"]


class StateDictTensorKey(W7):
    """state_dict returns a dict keyed by a tensor."""

    def state_dict(self):
        return {torch.tensor(1): self.t}


class LoadStateWrongKey(W7):
    """load_state_dict reads a key its state_dict never wrote."""

    def state_dict(self):
        return {"t": self.t.clone()}

    def load_state_dict(self, state):
        # the fixture run that writes the checkpoint sets R7_BUILDING_FIXTURE: the preflight probe loads its
        # own state back, which would refuse this world at its first run (the case is the resume)
        if __import__("os").environ.get("R7_BUILDING_FIXTURE") == "1":
            return
        self.t = state["timer"]


class ObsNumpyLater(W7):
    """step's observation becomes a numpy array from the fifth call."""

    def step(self, action, next_task=None):
        r = super().step(action)
        if self.steps >= 5:
            return r._replace(obs=r.obs.numpy())
        return r


class ResetRaisesRankOne(W7):
    """reset raises on the second DDP rank only (its data file is missing there)."""

    def reset(self, *, seed=None, task_index=None):
        import os
        if os.environ.get("LOCAL_RANK") == "1":
            raise FileNotFoundError("levels.db (rank 1's copy)")
        return super().reset()


def make_w7(num_envs: int, device: str, seed: int) -> BatchedEnv:
    return W7(num_envs, device, seed)


def make_w7_raises(num_envs: int, device: str, seed: int) -> BatchedEnv:
    raise KeyError("MY_WORLD_HOME")
'''

# External worlds (docs/guides/external-worlds.md: one episode at a time), each wrong in one way;
# Good is the control.
EXT = r'''
import asyncio
import os
import time

import numpy as np
from parlightning.envs.base import ActionSpec


class Good:
    observation_shape = (3,)
    action_spec = ActionSpec("discrete", nvec=(2,))
    tasks = ["p-0", "p-1", "q-0"]

    def __init__(self, seed: int = 0, length: int = 3):
        self.length = length
        self.t = 0

    def reset(self, task):
        self.t = 0
        return np.zeros(3, dtype=np.float32)

    def step(self, action):
        self.t += 1
        a = int(np.asarray(action).reshape(-1)[0])
        done = self.t >= self.length
        parts = {"outcome": float(a == 1), "n_subagents": 1.0, "assigned": 1.0, "completed": 1.0,
                 "critical_steps": 3.0, "serial_steps": 3.0} if done else None
        return np.full(3, self.t / 3, dtype=np.float32), float(a), done, False, parts


class ThreeTuple(Good):
    """step returns (obs, reward, done)."""

    def step(self, action):
        obs, reward, done, _trunc, _parts = super().step(action)
        return obs, reward, done


class PartsList(Good):
    """parts as a list of numbers."""

    def step(self, action):
        obs, reward, term, trunc, parts = super().step(action)
        return obs, reward, term, trunc, (list(parts.values()) if parts else None)


class RewardNone(Good):
    """reward None on the second step."""

    def step(self, action):
        obs, reward, term, trunc, parts = super().step(action)
        return obs, (None if self.t == 2 else reward), term, trunc, parts


class RewardString(Good):
    """reward as a string."""

    def step(self, action):
        obs, reward, term, trunc, parts = super().step(action)
        return obs, str(reward), term, trunc, parts


class TruncatedNone(Good):
    """truncated None."""

    def step(self, action):
        obs, reward, term, _trunc, parts = super().step(action)
        return obs, reward, term, None, parts


class ResetShort(Good):
    """reset returns 2 numbers for a 3-wide observation."""

    def reset(self, task):
        super().reset(task)
        return [0.0, 0.0]


class ResetString(Good):
    """reset returns a string."""

    def reset(self, task):
        super().reset(task)
        return "ready"


class ResetNoTask(Good):
    """reset(self) takes no task."""

    def reset(self):
        self.t = 0
        return np.zeros(3, dtype=np.float32)


class NoObservationShape:
    """no observation_shape."""

    action_spec = ActionSpec("discrete", nvec=(2,))

    def reset(self, task):
        return np.zeros(3, dtype=np.float32)

    def step(self, action):
        return np.zeros(3, dtype=np.float32), 0.0, True, False, None


class InitNeedsLevel(Good):
    """a required constructor argument world_kwargs does not give."""

    def __init__(self, level, seed: int = 0):
        super().__init__(seed)
        self.level = level


class OutcomeString(Good):
    """parts' outcome as "pass"."""

    def step(self, action):
        obs, reward, term, trunc, parts = super().step(action)
        if parts:
            parts["outcome"] = "pass"
        return obs, reward, term, trunc, parts


class StepStopIteration(Good):
    """step raises StopIteration (a user's generator ran dry) on the third call of actor 1's world."""

    calls = 0

    def step(self, action):
        type(self).calls += 1
        if type(self).calls == 7:
            raise StopIteration
        return super().step(action)


class AsyncBlocks(Good):
    """async def step that blocks the event loop with time.sleep (no await)."""

    async def step(self, action):
        if self.t >= 1:
            time.sleep(300)
        return super().step(action)


class ExitInWorker(Good):
    """os._exit from step (a C library abort), run in worker processes."""

    def step(self, action):
        if self.t >= 1:
            os._exit(7)
        return super().step(action)


class ObsNested(Good):
    """observation as a nested list [[a], [b], [c]]."""

    def step(self, action):
        obs, reward, term, trunc, parts = super().step(action)
        return [[float(x)] for x in obs], reward, term, trunc, parts


class TasksDuplicate(Good):
    """tasks with a repeated id."""

    tasks = ["p-0", "p-0", "q-0"]


class RewardArray(Good):
    """reward as a 2-element array."""

    def step(self, action):
        obs, reward, term, trunc, parts = super().step(action)
        return obs, np.array([reward, reward]), term, trunc, parts
'''

# User samplers, strategies, rollout callbacks and subagent functions (docs/guides/samplers.md,
# parallelism.md, extending.md, subagent_pools.md); Good* are the controls.
USER = r'''
import asyncio

import lightning
from parlightning.callbacks import RolloutCallback
from parlightning.distribution.strategies import WorkUnit


class GoodSampler:
    def __init__(self):
        self.i = 0

    def pick(self, keys, round_index):
        self.i += 1
        return keys[self.i % len(keys)]

    def record(self, task_id, score):
        pass


def pick_function(keys, round_index):
    return keys[0]


class PickExhausts(GoodSampler):
    """picks from an iterator that runs dry after 5 picks."""

    def __init__(self):
        super().__init__()
        self.it = iter(range(5))

    def pick(self, keys, round_index):
        return keys[next(self.it) % len(keys)]


class PickBytes(GoodSampler):
    """returns the id as bytes."""

    def pick(self, keys, round_index):
        return keys[0].encode()


class PickDict(GoodSampler):
    """returns {"task": id}."""

    def pick(self, keys, round_index):
        return {"task": keys[0]}


class RecordNeedsThree(GoodSampler):
    """record(task_id, score, extra)."""

    def record(self, task_id, score, extra):
        pass


class GoodStrategy:
    name = "good7"

    def plan(self, n_workers, round_index, keys):
        return [WorkUnit(worker=w, keys=tuple(keys)) for w in range(n_workers)]


class NameNumber(GoodStrategy):
    """name = 3."""

    name = 3


class PlanNoWorkers(GoodStrategy):
    """plan returns units for worker 0 only, with no keys at all."""

    def plan(self, n_workers, round_index, keys):
        return [WorkUnit(worker=0, keys=())]


class PlanKeysString(GoodStrategy):
    """WorkUnit(keys="x-0") (a string, not a sequence of ids)."""

    def plan(self, n_workers, round_index, keys):
        return [WorkUnit(worker=w, keys=keys[0]) for w in range(n_workers)]


class GoodCallback(RolloutCallback):
    def on_rollout_end(self, trainer, pl_module, rollout):
        self.seen = True


class RolloutStartNoRound(RolloutCallback):
    """on_rollout_start(self, trainer, pl_module): no round_index."""

    def on_rollout_start(self, trainer, pl_module):
        pass


class TrainStartRaises(lightning.Callback):
    """raises in on_train_start."""

    def on_train_start(self, trainer, pl_module):
        raise ValueError("my callback: WANDB_PROJECT is not set")


class AsyncRolloutEnd(RolloutCallback):
    """an async def hook (never awaited)."""

    async def on_rollout_end(self, trainer, pl_module, rollout):
        await asyncio.sleep(0)


class RaisesOnRankOne(RolloutCallback):
    """raises on rank 1 only, at the first rollout's end."""

    def on_rollout_end(self, trainer, pl_module, rollout):
        if trainer.global_rank == 1:
            raise RuntimeError("my callback: rank 1 lost its metrics store")


class NeedsPath(lightning.Callback):
    """a required init argument."""

    def __init__(self, path: str):
        self.path = path


def good_fn(instruction):
    return {"success": True, "steps": 1}


def fn_returns_string(instruction):
    return "done"


def fn_two_args(instruction, context):
    return {"success": True, "steps": 1}


class FnClass:
    """a class given as the subagent function."""

    def __init__(self):
        pass
'''

BROKEN = "import superlib_not_installed  # noqa\n"

# ------------------------------------------------------------------------------------ configs
Q, TINY, CART, UW, EXTC, POOLC = r5.Q, r5.TINY, r5.CART, r5.UW, r5.EXTC, r5.POOLC
TW = ["--config", "{fx}/user.yaml", "--data.env", "r7worlds.W7Tasks"]

USER_YAML = r5.user_yaml("r7worlds.W7", num_steps=10)
EXT_YAML = r5.ext_yaml("r7ext:Good", num_steps=6)
POOL_YAML = r5.pool_yaml(world_kwargs="{families: [solo, fanout], tasks_per_family: 2, max_width: 2, n_skills: 2}")

BOOK = r5.CaseBook(worlds="r7worlds")  # case / fit / yaml_case / world / ext append to CASES
CASES: list[Case] = BOOK.cases
case, fit, yaml_case, world, ext = BOOK.case, BOOK.fit, BOOK.yaml_case, BOOK.world, BOOK.ext


def pool(name: str, pool_spec: str, expect: Any, **kw: Any) -> None:
    body = ("data:\n  env:\n    class_path: parlightning.envs.external.ExternalBatchedEnv\n    init_args:\n"
            "      world: parlightning.subagents.world:PoolOrchestrationWorld\n"
            "      world_kwargs: {families: [solo, fanout], tasks_per_family: 2, max_width: 2, n_skills: 2}\n"
            f"      shared:\n        pool: {pool_spec}\n      step_timeout: 30\n")
    yaml_case(name, "pools", body, expect, base=POOLC, **kw)


def script(name: str, argv: list[str], expect: Any, timeout: float = 60) -> None:
    case(name, "scripts", "cmd", [PY] + argv, expect, timeout=timeout)


def api(name: str, code: str, expect: Any, **kw: Any) -> None:
    case(name, "api", "py", code, expect, **kw)


# ------------------------------------------------------------------------------------ controls
world("control-w7", "W7", (), control=True)
world("control-w7-tasks", "W7Tasks", (), control=True)
fit("control-w7-factory", "world", UW + ["--data.env", "r7worlds.make_w7"], (), control=True)
fit("control-ext-good", "external", EXTC, (), control=True)
yaml_case("control-sampler", "plugins", "data:\n  sampler: {class_path: r7user.GoodSampler}\n", (), base=TW, control=True)
yaml_case("control-strategy", "plugins", "trainer:\n  callbacks:\n    - class_path: parlightning.callbacks.StrategyPlanner\n"
          "      init_args: {strategy: {class_path: r7user.GoodStrategy}}\n", (), base=TW, control=True)
yaml_case("control-callback", "plugins", "trainer:\n  callbacks:\n    - class_path: r7user.GoodCallback\n", (), base=UW,
          control=True)
pool("control-process-fn", "{class_path: parlightning.subagents.ProcessPool, init_args: {fn: 'r7user:good_fn', workers: 1}}",
     (), control=True)

# ------------------------------------------------------------------------------------ yaml
yaml_case("yaml-callback-entry-without-class-path", "yaml",
          "trainer:\n  callbacks:\n    - init_args: {every_n_epochs: 1}\n", "callbacks|class_path")
yaml_case("yaml-memory-env-as-docs-name-it", "yaml", "data:\n  env: {class_path: parlightning.envs.MemoryEnv}\n  reward: null\n",
          "data.env|MemoryEnv")
yaml_case("yaml-hidden-sizes-comma-string", "yaml", "model:\n  hidden_sizes: '64,64'\n", "hidden_sizes")
yaml_case("yaml-data-list-of-dicts", "yaml", "data:\n  - num_envs: 8\n  - num_steps: 8\n", "data")
yaml_case("yaml-init-args-at-env-level", "yaml",
          "data:\n  env:\n    class_path: parlightning.envs.swarm.SwarmEnv\n    split: train\n", "split|init_args")
yaml_case("yaml-trainer-is-null-callbacks", "yaml", "trainer:\n  callbacks:\n    - null\n", "callbacks")
yaml_case("yaml-reward-init-args-string", "yaml", "data:\n  reward:\n    class_path: parlightning.parl.reward.PARLReward\n"
          "    init_args: 'max_subagents=128'\n", "reward|init_args")
yaml_case("yaml-non-utf8-bytes", "yaml", "", "c.yaml|utf|decode|encoding",
          files={"c.yaml": b"model:\n  activation: r\xe9lu\n"})
yaml_case("yaml-schedule-as-reward", "yaml", "data:\n  reward: {class_path: parlightning.parl.reward.LinearSchedule}\n",
          "data.reward")
yaml_case("yaml-callback-is-a-strategy", "yaml", "trainer:\n  callbacks:\n    - class_path: parlightning.distribution.strategies.DataParallel\n",
          "callbacks|DataParallel")
yaml_case("yaml-env-class-path-trailing-dot", "yaml", "data:\n  env: {class_path: parlightning.envs.swarm.SwarmEnv.}\n",
          "data.env")
yaml_case("yaml-seed-everything-string", "yaml", "seed_everything: 'forty-two'\n", "seed")
yaml_case("yaml-model-key-typo-in-second-config", "yaml", "model:\n  learning_rate: 0.0003\n", "learning_rate|model")
yaml_case("yaml-unknown-section", "yaml", "optimizer:\n  lr: 0.001\n", "optimizer")
yaml_case("yaml-lambda-schedule-unknown-class", "yaml",
          "data:\n  reward:\n    class_path: parlightning.parl.reward.PARLReward\n    init_args:\n      max_subagents: 128\n"
          "      lambda1: {class_path: parlightning.parl.reward.ExponentialSchedule}\n", "lambda1|ExponentialSchedule")
yaml_case("yaml-config-key-inside-config", "yaml", "config: other.yaml\n", "config|other.yaml")

# ------------------------------------------------------------------------------------ model
fit("model-prior-exactly-one", "model", TINY + ["--model.prior", "1.0"], "prior")
fit("model-prior-zero", "model", TINY + ["--model.prior", "0.0"], "prior")
fit("model-anneal-lr-sometimes", "model", TINY + ["--model.anneal_lr", "sometimes"], "anneal_lr")
fit("model-init-from-empty", "model", TINY + ["--model.init_from", ""], "init_from")
fit("model-init-from-yaml", "model", TINY + ["--model.init_from", "{root}/configs/swarm.yaml"], "init_from")
fit("model-max-grad-norm-negative", "model", TINY + ["--model.max_grad_norm", "-1"], "max_grad_norm")
fit("model-vf-coef-word", "model", TINY + ["--model.vf_coef", "half"], "vf_coef")
fit("model-hidden-sizes-bad-list", "model", TINY + ["--model.hidden_sizes", "[64, x]"], "hidden_sizes")
fit("model-policy-gru-bptt-zero", "model", TINY + ["--model.policy", "gru", "--data.bptt_len", "0"], "bptt_len")
fit("model-lr-huge-string-unit", "model", TINY + ["--model.lr", "3e-4s"], "lr")
fit("model-rnn-hidden-on-mlp-word", "model", TINY + ["--model.rnn_hidden", "big"], "rnn_hidden")
fit("model-clip-coef-nan", "model", TINY + ["--model.clip_coef", "nan"], "clip_coef")

# ------------------------------------------------------------------------------------ data
fit("data-minibatch-of-one-row", "data", TINY + ["--data.num_envs", "2", "--data.num_steps", "2", "--data.num_minibatches", "4"],
    "num_minibatches")
fit("data-num-minibatches-zero", "data", TINY + ["--data.num_minibatches", "0"], "num_minibatches")
fit("data-seed-negative", "data", TINY + ["--data.seed", "-1"], "data.seed|seed")
fit("data-max-policy-lag-negative", "data", TINY + ["--data.max_policy_lag", "-1"], "max_policy_lag")
fit("data-env-init-args-num-envs", "data", TINY + ["--data.env.init_args.num_envs", "64"], "num_envs")
fit("data-roundrobin-seed", "data", TINY + ["--data.sampler", "parlightning.distribution.samplers.RoundRobin",
                                           "--data.sampler.init_args.seed", "3"], "seed|RoundRobin")
fit("data-gae-lambda-word", "data", TINY + ["--data.gae_lambda", "high"], "gae_lambda")
fit("data-update-epochs-fraction", "data", TINY + ["--data.update_epochs", "1.5"], "update_epochs")
fit("data-collect-rounds-typo", "data", TINY + ["--data.collect", "round"], "collect")
fit("data-actors-in-flight-negative", "data", EXTC + ["--data.collect", "trajectories", "--data.max_policy_lag", "1",
                                                     "--data.actors_in_flight", "-4"], "actors_in_flight")
fit("data-num-steps-word", "data", TINY + ["--data.num_steps", "thirty-two"], "num_steps")
fit("data-bptt-longer-than-steps-gru", "data", TINY + ["--model.policy", "gru", "--data.bptt_len", "9"], "bptt_len")
fit("data-sampler-is-a-callback", "data", TINY + ["--data.sampler", "parlightning.callbacks.CriticalStepsMonitor"],
    "sampler")
fit("data-collect-in-process-gru", "data", TINY + ["--data.max_policy_lag", "1", "--data.collect_in", "process",
                                                  "--model.policy", "gru"], "recurrent|gru|policy")

# ------------------------------------------------------------------------------------ reward / built-in plugins
yaml_case("reward-schedule-warmup-word", "reward",
          "data:\n  reward:\n    init_args:\n      lambda1:\n        class_path: parlightning.parl.reward.LinearSchedule\n"
          "        init_args: {warmup: soon}\n", "warmup")
yaml_case("reward-cosine-horizon-negative", "reward",
          "data:\n  reward:\n    init_args:\n      lambda2:\n        class_path: parlightning.parl.reward.CosineSchedule\n"
          "        init_args: {horizon: -100}\n", "horizon")
yaml_case("reward-constant-nan", "reward",
          "data:\n  reward:\n    init_args:\n      lambda1: {class_path: parlightning.parl.reward.ConstantSchedule, init_args: {value: .nan}}\n",
          "value|lambda1")
fit("reward-parl-on-user-world-without-parts", "reward", UW + ["--config", "c.yaml"], "reward|parts|EpisodeParts",
    files={"c.yaml": "data:\n  reward:\n    class_path: parlightning.parl.reward.PARLReward\n    init_args: {max_subagents: 4}\n"})
fit("annealing-unit-epochs", "reward", TINY + ["--config", "c.yaml"], "unit",
    files={"c.yaml": "trainer:\n  callbacks:\n    - class_path: parlightning.callbacks.PARLAnnealing\n      init_args: {unit: epochs}\n"})
yaml_case("sampler-sfl-buffer-negative", "reward", "data:\n  sampler:\n    class_path: parlightning.distribution.samplers.SamplingForLearnability\n"
          "    init_args: {buffer_size: -2}\n", "buffer_size")
yaml_case("sampler-dw-pass-threshold-zero", "reward", "data:\n  sampler:\n    class_path: parlightning.distribution.samplers.DifficultyWeighted\n"
          "    init_args: {pass_threshold: 0}\n", "pass_threshold")
yaml_case("sampler-posterior-informative-prior-negative", "reward",
          "data:\n  sampler:\n    class_path: parlightning.distribution.samplers.PosteriorSignal\n"
          "    init_args: {informative_prior: [-1, 2]}\n", "informative_prior")
yaml_case("sampler-sfl-replay-prob-word", "reward", "data:\n  sampler:\n    class_path: parlightning.distribution.samplers.SamplingForLearnability\n"
          "    init_args: {replay_prob: half}\n", "replay_prob")
yaml_case("strategy-tp-sections-more-than-tasks", "reward", "trainer:\n  callbacks:\n    - class_path: parlightning.callbacks.StrategyPlanner\n"
          "      init_args:\n        strategy: {class_path: parlightning.distribution.strategies.TensorParallel, init_args: {n_sections: 500}}\n",
          "n_sections|TensorParallel")
yaml_case("strategy-tp-keys-unknown", "reward", "trainer:\n  callbacks:\n    - class_path: parlightning.callbacks.StrategyPlanner\n"
          "      init_args:\n        strategy: {class_path: parlightning.distribution.strategies.TensorParallel,"
          " init_args: {n_sections: 1, keys: [nosuch-1]}}\n", "keys|nosuch")
yaml_case("strategy-block-planner-unknown-arg", "reward", "trainer:\n  callbacks:\n    - class_path: parlightning.callbacks.StrategyPlanner\n"
          "      init_args:\n        strategy: {class_path: parlightning.examples.block_planner.BlockPlanner, init_args: {block: 4}}\n",
          "block")
yaml_case("strategy-cp-c-negative", "reward", "trainer:\n  callbacks:\n    - class_path: parlightning.callbacks.StrategyPlanner\n"
          "      init_args:\n        strategy: {class_path: parlightning.distribution.strategies.ClusterParallel, init_args: {c: -1}}\n", "c")

# ------------------------------------------------------------------------------------ swarm / built-in worlds
fit("swarm-split-test", "swarm", TINY + ["--data.env.init_args.split", "test"], "split")
fit("swarm-families-duplicate", "swarm", TINY + ["--data.env.init_args.families", "[solo, solo]"], "families")
fit("swarm-tasks-per-family-zero", "swarm", TINY + ["--data.env.init_args.tasks_per_family", "0"], "tasks_per_family")
fit("swarm-max-width-65", "swarm", TINY + ["--data.env.init_args.max_width", "65"], "max_width")
fit("swarm-brief-cost-negative", "swarm", TINY + ["--data.env.init_args.brief_cost", "-1"], "brief_cost")
fit("swarm-family-tasks-string", "swarm", TINY + ["--data.env.init_args.family_tasks", "solo=4"], "family_tasks")
fit("swarm-subagent-budget-word", "swarm", TINY + ["--data.env.init_args.subagent_budget", "lots"], "subagent_budget")
fit("swarm-max-subagents-below-width", "swarm", TINY + ["--data.env.init_args.max_subagents", "2",
                                                       "--data.reward.init_args.max_subagents", "2"], "max_subagents")
fit("cartpole-max-steps-negative", "swarm", CART + ["--data.env.init_args.max_episode_steps", "-1"], "max_episode_steps")
fit("memory-one-cue", "swarm", ["--config", "memory", "--trainer.max_epochs", "1", "--data.num_envs", "8", "--data.num_steps", "16",
                                "--data.num_minibatches", "2", "--data.env.init_args.n_cues", "1"] + Q, "n_cues")
yaml_case("gym-discrete-observation-unwrapped", "swarm",
          "data:\n  env:\n    class_path: parlightning.envs.GymVectorEnv\n    init_args: {env_id: FrozenLake-v1}\n",
          "FrozenLake|observation|FlattenObservation", base=CART)
yaml_case("gym-wrapper-needs-arg", "swarm",
          "data:\n  env:\n    class_path: parlightning.envs.GymVectorEnv\n"
          "    init_args: {env_id: CartPole-v1, wrappers: [gymnasium.wrappers.TimeLimit]}\n", "wrappers|TimeLimit", base=CART)
yaml_case("normalize-env-is-a-string-id", "swarm",
          "data:\n  env:\n    class_path: parlightning.envs.normalize.NormalizeEnv\n    init_args: {env: CartPole-v1}\n",
          "env", base=CART)
yaml_case("normalize-gamma-word", "swarm",
          "data:\n  env:\n    class_path: parlightning.envs.normalize.NormalizeEnv\n"
          "    init_args: {env: {class_path: parlightning.envs.CartPoleEnv}, gamma: discount}\n", "gamma", base=CART)

# ------------------------------------------------------------------------------------ user tensor worlds
world("world-no-device-attr", "NoDeviceAttr", "device")
world("world-no-num-envs-attr", "NoNumEnvsAttr", "num_envs")
world("world-init-only-num-envs", "InitOnlyNumEnvs", "device|InitOnlyNumEnvs")
world("world-init-needs-level", "InitNeedsLevel", "level")
fit("world-init-args-typo", "world", UW + ["--data.env", "r7worlds.InitNeedsLevel", "--data.env.init_args.levl", "a"], "levl")
world("world-obs-shape-int", "ObsShapeInt", "observation_shape")
world("world-nvec-int", "NvecInt", "nvec|action_spec")
world("world-action-spec-string", "ActionSpecString", "action_spec")
world("world-continuous-shape-zero", "ContinuousShapeZero", "shape|action_spec")
world("world-obs-twenty-million-wide", "HugeObs", "memory|observation|num_envs", timeout=90)
world("world-reset-obs-nan", "ResetObsNaN", "reset|nan")
world("world-reset-no-task-index", "ResetNoTaskIndex", "reset|task_index")
world("world-done-column-later", "DoneColumnLater", "terminated")
world("world-terminated-float", "TerminatedFloat", "terminated")
world("world-step-none-later", "StepNoneLater", "step|StepResult")
world("world-final-obs-narrow", "FinalObsNarrow", "final_obs|final observation")
world("world-fields-swapped", "FieldsSwapped", "obs|reward")
world("world-reward-inf-later", "RewardInfLater", "reward")
world("world-obs-double-width-later", "ObsDoubleWidthLater", "obs|observation")
world("world-step-sys-exit", "StepSysExit", "step|exit|StepSysExit")
world("world-step-assert", "StepAssert", "StepAssert|step|invariant")
world("world-parts-only-done-rows", "PartsOnlyDone", "parts", base=TW)
world("world-parts-column", "PartsColumn", "parts", base=TW)
world("world-parts-critical-nan", "PartsCriticalNaN", "critical_steps", base=TW)
world("world-parts-task-float", "PartsTaskFloat", "task", base=TW)
world("world-next-task-without-done", "NextTaskNoArg", "next_task|step", base=TW)
world("world-task-ids-raise", "TaskIdsRaises", "task_ids", base=TW)
world("world-task-ids-empty-string", "TaskIdsWithEmpty", "task_ids", base=TW)
world("world-state-dict-tensor-key", "StateDictTensorKey", "state_dict")
world("world-obs-numpy-later", "ObsNumpyLater", "obs")
fit("world-factory-raises", "world", UW + ["--data.env", "r7worlds.make_w7_raises"], "make_w7_raises|data.env")
fit("world-module-import-error-inside", "world", UW + ["--data.env", "r7broken.World"], "r7broken|superlib")
fit("world-resume-load-state-wrong-key", "world", UW + ["--data.env", "r7worlds.LoadStateWrongKey", "--trainer.max_epochs", "2",
                                                      "--ckpt_path", "{fx}/lsw.ckpt"], "load_state_dict|timer")

# ------------------------------------------------------------------------------------ external worlds
ext("ext-three-tuple", "{world: 'r7ext:ThreeTuple', step_timeout: 20}", "step|ThreeTuple")
ext("ext-parts-list", "{world: 'r7ext:PartsList', step_timeout: 20}", "parts")
ext("ext-reward-none", "{world: 'r7ext:RewardNone', step_timeout: 20}", "reward")
ext("ext-reward-string", "{world: 'r7ext:RewardString', step_timeout: 20}", "reward")
ext("ext-truncated-none", "{world: 'r7ext:TruncatedNone', step_timeout: 20}", "truncated")
ext("ext-reset-short", "{world: 'r7ext:ResetShort', step_timeout: 20}", "reset|obs")
ext("ext-reset-string", "{world: 'r7ext:ResetString', step_timeout: 20}", "reset|obs")
ext("ext-reset-no-task", "{world: 'r7ext:ResetNoTask', step_timeout: 20}", "reset")
ext("ext-no-observation-shape", "{world: 'r7ext:NoObservationShape', step_timeout: 20}", "observation_shape")
ext("ext-init-needs-level", "{world: 'r7ext:InitNeedsLevel', step_timeout: 20}", "level")
ext("ext-outcome-string", "{world: 'r7ext:OutcomeString', step_timeout: 20}", "outcome")
ext("ext-step-stop-iteration", "{world: 'r7ext:StepStopIteration', step_timeout: 20}", "StepStopIteration|step")
ext("ext-async-step-blocks-loop", "{world: 'r7ext:AsyncBlocks', step_timeout: 3}", "step_timeout|AsyncBlocks", timeout=60)
ext("ext-os-exit-in-worker", "{world: 'r7ext:ExitInWorker', step_timeout: 20, workers: 1}", "worker|died|exit", timeout=60)
ext("ext-obs-nested-list", "{world: 'r7ext:ObsNested', step_timeout: 20}", "obs")
ext("ext-tasks-duplicate", "{world: 'r7ext:TasksDuplicate', step_timeout: 20}", "tasks|p-0")
ext("ext-reward-array", "{world: 'r7ext:RewardArray', step_timeout: 20}", "reward")
ext("ext-step-timeout-nan", "{world: 'r7ext:Good', step_timeout: .nan}", "step_timeout")
ext("ext-task-ids-duplicate", "{world: 'r7ext:Good', task_ids: [p-0, p-0]}", "task_ids")
ext("ext-world-kwargs-string", "{world: 'r7ext:Good', world_kwargs: 'length=3'}", "world_kwargs")
ext("ext-world-empty-string", "{world: ''}", "world")
ext("ext-world-no-colon-module-only", "{world: 'r7ext'}", "world|r7ext")

# ------------------------------------------------------------------------------------ pools
pool("process-fn-returns-string", "{class_path: parlightning.subagents.ProcessPool, init_args: {fn: 'r7user:fn_returns_string', workers: 1}}",
     "fn_returns_string|result|done")
pool("process-fn-two-args", "{class_path: parlightning.subagents.ProcessPool, init_args: {fn: 'r7user:fn_two_args', workers: 1}}",
     "fn_two_args|context")
pool("process-fn-is-a-class", "{class_path: parlightning.subagents.ProcessPool, init_args: {fn: 'r7user:FnClass', workers: 1}}",
     "FnClass|fn")
pool("process-timeout-with-unit", "{class_path: parlightning.subagents.ProcessPool, init_args: {fn: 'r7user:good_fn', timeout: 10s}}",
     "timeout")
pool("http-base-url-without-scheme", "{class_path: parlightning.subagents.HTTPPool, init_args: {base_url: '127.0.0.1:8000/v1'}}",
     "base_url")
pool("http-closed-port", "{class_path: parlightning.subagents.HTTPPool, init_args: {base_url: 'http://127.0.0.1:9/v1'}}",
     "base_url|127.0.0.1:9|connect")
pool("simulated-seconds-per-step-with-unit", "{class_path: parlightning.subagents.SimulatedPool, init_args: {seconds_per_step: 1ms}}",
     "seconds_per_step")
pool("shared-pool-bare-string", "parlightning.subagents.SimulatedPool", "pool|class_path")
pool("shared-pool-is-a-world", "{class_path: parlightning.envs.CartPoleEnv}", "pool")
yaml_case("shared-extra-resource", "pools",
          "data:\n  env:\n    init_args:\n      shared:\n        pool: {class_path: parlightning.subagents.SimulatedPool}\n"
          "        cache: {class_path: parlightning.subagents.SimulatedPool}\n", "cache|shared", base=POOLC)
yaml_case("orchestration-call-latency-negative-sigma", "pools",
          "data:\n  env:\n    init_args:\n      world_kwargs: {families: [solo], tasks_per_family: 2, max_width: 2, n_skills: 2,"
          " call_latency: [0.002, -0.8]}\n", "call_latency", base=POOLC)
yaml_case("orchestration-spawn-steps-zero", "pools",
          "data:\n  env:\n    init_args:\n      world_kwargs: {families: [solo], tasks_per_family: 2, max_width: 2, n_skills: 2,"
          " spawn_steps: 0}\n", "spawn_steps", base=POOLC)
yaml_case("orchestration-bank-seed-word", "pools",
          "data:\n  env:\n    init_args:\n      world_kwargs: {families: [solo], bank_seed: abc}\n", "bank_seed", base=POOLC)

# ------------------------------------------------------------------------------------ user plugins
yaml_case("sampler-class-path-function", "plugins", "data:\n  sampler: {class_path: r7user.pick_function}\n", "sampler|pick_function",
          base=TW)
yaml_case("sampler-pick-exhausts", "plugins", "data:\n  sampler: {class_path: r7user.PickExhausts}\n", "PickExhausts|pick",
          base=TW)
yaml_case("sampler-pick-bytes", "plugins", "data:\n  sampler: {class_path: r7user.PickBytes}\n", "pick", base=TW)
yaml_case("sampler-pick-dict", "plugins", "data:\n  sampler: {class_path: r7user.PickDict}\n", "pick", base=TW)
yaml_case("sampler-record-needs-three", "plugins", "data:\n  sampler: {class_path: r7user.RecordNeedsThree}\n", "record",
          base=TW)
yaml_case("strategy-name-number", "plugins", "trainer:\n  callbacks:\n    - class_path: parlightning.callbacks.StrategyPlanner\n"
          "      init_args: {strategy: {class_path: r7user.NameNumber}}\n", "name", base=TW)
yaml_case("strategy-plan-no-keys", "plugins", "trainer:\n  callbacks:\n    - class_path: parlightning.callbacks.StrategyPlanner\n"
          "      init_args: {strategy: {class_path: r7user.PlanNoWorkers}}\n", "plan|keys", base=TW)
yaml_case("strategy-workunit-keys-string", "plugins", "trainer:\n  callbacks:\n    - class_path: parlightning.callbacks.StrategyPlanner\n"
          "      init_args: {strategy: {class_path: r7user.PlanKeysString}}\n", "keys|plan", base=TW)
yaml_case("strategy-given-as-callback", "plugins", "trainer:\n  callbacks:\n    - class_path: r7user.GoodStrategy\n",
          "callbacks|GoodStrategy|StrategyPlanner", base=TW)
yaml_case("callback-rollout-start-no-round", "plugins", "trainer:\n  callbacks:\n    - class_path: r7user.RolloutStartNoRound\n",
          "on_rollout_start|RolloutStartNoRound", base=UW)
yaml_case("callback-train-start-raises", "plugins", "trainer:\n  callbacks:\n    - class_path: r7user.TrainStartRaises\n",
          "TrainStartRaises|WANDB_PROJECT", base=UW)
yaml_case("callback-async-hook", "plugins", "trainer:\n  callbacks:\n    - class_path: r7user.AsyncRolloutEnd\n",
          "AsyncRolloutEnd|async", base=UW)
yaml_case("callback-required-arg-missing", "plugins", "trainer:\n  callbacks:\n    - class_path: r7user.NeedsPath\n", "path|NeedsPath",
          base=UW)
yaml_case("callback-module-missing", "plugins", "trainer:\n  callbacks:\n    - class_path: my_callbacks.Logger\n",
          "my_callbacks", base=UW)
yaml_case("callback-early-stopping-no-monitor", "plugins",
          "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.EarlyStopping\n", "monitor|EarlyStopping", base=UW)
yaml_case("checkpoint-mode-typo", "plugins", "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
          "      init_args: {monitor: charts/episodic_return, mode: maximum}\n", "mode", base=UW)
yaml_case("checkpoint-filename-unbalanced-brace", "plugins",
          "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
          "      init_args: {filename: 'run-{epoch'}\n", "filename", base=UW)
yaml_case("lr-monitor-interval-typo", "plugins", "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.LearningRateMonitor\n"
          "      init_args: {logging_interval: iteration}\n", "logging_interval", base=UW)

# ------------------------------------------------------------------------------------ trainer
fit("trainer-devices-list-on-cpu", "trainer", TINY + ["--trainer.accelerator", "cpu", "--trainer.devices", "[0, 1]"], "devices")
fit("trainer-gradient-clip-word", "trainer", TINY + ["--trainer.gradient_clip_val", "big"], "gradient_clip_val")
fit("trainer-default-root-dir-empty", "trainer", TINY + ["--trainer.default_root_dir", ""], "default_root_dir")
fit("trainer-logger-wandb-not-installed", "trainer", TINY + ["--trainer.logger", "lightning.pytorch.loggers.WandbLogger"],
    "wandb|logger")
fit("trainer-max-epochs-word", "trainer", TINY + ["--trainer.max_epochs", "many"], "max_epochs")
fit("trainer-strategy-unknown-name", "trainer", TINY + ["--trainer.strategy", "dpp"], "strategy|dpp")
fit("trainer-precision-word", "trainer", TINY + ["--trainer.precision", "half"], "precision")
fit("trainer-max-steps-word", "trainer", TINY + ["--trainer.max_steps", "-5"], "max_steps")
fit("trainer-logger-csv-save-dir-missing-parent-file", "trainer", TINY + ["--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
                                                                        "--trainer.logger.save_dir", "notes.txt/csv"],
    "save_dir|notes.txt", files={"notes.txt": "hi\n"})

# ------------------------------------------------------------------------------------ fit arguments
fit("fit-config-empty-string", "fit-args", ["--config", ""] + TINY[2:], "config")
fit("fit-config-yml-suffix", "fit-args", ["--config", "configs/swarm.yml"] + TINY[2:], "config|swarm.yml")
fit("fit-config-packaged-subfolder-typo", "fit-args", TINY + ["--config", "parallel/tpp"], "parallel/tpp|config")
fit("fit-second-config-missing", "fit-args", TINY + ["--config", "extra.yaml"], "extra.yaml")
fit("fit-epochs-flag", "fit-args", TINY + ["--epochs", "5"], "epochs")
fit("fit-ckpt-path-glob", "fit-args", TINY + ["--ckpt_path", "lightning_logs/*/checkpoints/last.ckpt"], "ckpt_path")
fit("fit-ckpt-path-best-no-run", "fit-args", TINY + ["--ckpt_path", "best"], "ckpt_path|best")
fit("fit-seed-hex", "fit-args", TINY + ["--seed", "0x10zz"], "seed")
fit("fit-torch-threads-word", "fit-args", TINY + ["--torch_threads", "all"], "torch_threads")
fit("fit-heartbeat-word", "fit-args", TINY + ["--heartbeat_timeout", "soon"], "heartbeat_timeout")

# ------------------------------------------------------------------------------------ checkpoints
fit("ckpt-resume-finished-run", "checkpoint", TINY + ["--ckpt_path", "swarm.ckpt"], "max_epochs",
    files={"swarm.ckpt": "fixture:swarm.ckpt"}, guard=("swarm.ckpt",))
fit("ckpt-resume-other-families", "checkpoint", TINY + ["--trainer.max_epochs", "2", "--data.env.init_args.families", "[solo, fanout]",
                                                       "--ckpt_path", "swarm.ckpt"], "families|task|bank",
    files={"swarm.ckpt": "fixture:swarm.ckpt"}, guard=("swarm.ckpt",))
fit("ckpt-trailing-garbage", "checkpoint", TINY + ["--trainer.max_epochs", "2", "--ckpt_path", "g.ckpt"], "g.ckpt|checkpoint",
    files={"g.ckpt": "fixture:swarm-garbage.ckpt"}, guard=("g.ckpt",))
fit("ckpt-gzipped", "checkpoint", TINY + ["--trainer.max_epochs", "2", "--ckpt_path", "z.ckpt"], "z.ckpt|checkpoint",
    files={"z.ckpt": "fixture:swarm.ckpt.gz"})
fit("ckpt-edited-in-python", "checkpoint", TINY + ["--trainer.max_epochs", "2", "--ckpt_path", "e.ckpt"], "e.ckpt|checkpoint",
    files={"e.ckpt": "fixture:swarm-edited.ckpt"})
fit("ckpt-is-run-config-yaml", "checkpoint", TINY + ["--trainer.max_epochs", "2", "--ckpt_path", "{fx}/run0/config.yaml"],
    "ckpt_path|checkpoint")
fit("ckpt-init-from-ppo-of-cartpole", "checkpoint", TINY + ["--model.init_from", "cart.ckpt"], "init_from",
    files={"cart.ckpt": "fixture:cart.ckpt"})
fit("ckpt-resume-on-user-world", "checkpoint", UW + ["--trainer.max_epochs", "2", "--ckpt_path", "swarm.ckpt"], "ckpt|checkpoint|data.env",
    files={"swarm.ckpt": "fixture:swarm.ckpt"})
case("ckpt-evaluate-edited-hparams", "checkpoint", "evaluate", ["--config", "swarm", "--ckpt_path", "h.ckpt", "--episodes", "1"],
     "h.ckpt|checkpoint|hidden", files={"h.ckpt": "fixture:swarm-hparams.ckpt"})

# ------------------------------------------------------------------------------------ evaluate
EV = ["--config", "swarm", "--ckpt_path", "{fx}/swarm.ckpt", "--episodes", "1"]
case("eval-bank-seeds-duplicate", "evaluate", "evaluate", EV + ["--bank_seeds", "7", "7"], "bank_seeds")
case("eval-seeds-negative", "evaluate", "evaluate", EV + ["--seeds", "-1"], "seeds")
case("eval-json-missing-dir", "evaluate", "evaluate", EV + ["--json", "out/none/r.json"], "json|out/none")
case("eval-trace-is-a-directory", "evaluate", "evaluate", EV + ["--trace", "tdir"], "trace|tdir", files={"tdir": "dir"})
case("eval-ckpt-of-other-world", "evaluate", "evaluate", ["--config", "swarm", "--ckpt_path", "{fx}/cart.ckpt"], "ckpt|CartPole|observation")
case("eval-ckpt-is-directory", "evaluate", "evaluate", ["--config", "swarm", "--ckpt_path", "{fx}/run0"], "ckpt_path")
case("eval-episodes-fraction", "evaluate", "evaluate", EV[:-1] + ["1.5"], "episodes")
case("eval-gantt-missing-dir", "evaluate", "evaluate", EV + ["--gantt", "no/such/g.png"], "gantt")
case("eval-policy-with-user-world", "evaluate", "evaluate", UW + ["--policy", "oracle"], "oracle|policy|W7")
case("eval-split-on-user-world", "evaluate", "evaluate", UW + ["--policy", "random", "--split", "heldout"], "split")
case("eval-config-of-other-width", "evaluate", "evaluate", EV + ["--config", "c.yaml"], "max_width|observation|ckpt",
     files={"c.yaml": "data:\n  env:\n    init_args: {max_width: 4}\n"})

# ------------------------------------------------------------------------------------ export
case("export-out-without-suffix", "export", "export", ["--ckpt_path", "{fx}/swarm.ckpt", "--out", "policy"], "out|suffix|format")
case("export-format-onnx-out-pt2", "export", "export", ["--ckpt_path", "{fx}/swarm.ckpt", "--out", "p.pt2", "--format", "onnx"],
     "format|out")
case("export-ckpt-is-config", "export", "export", ["--ckpt_path", "{fx}/run0/config.yaml", "--out", "p.pt2"], "ckpt_path|checkpoint")
case("export-out-missing-dir", "export", "export", ["--ckpt_path", "{fx}/swarm.ckpt", "--out", "no/dir/p.pt2"], "out|no/dir")
case("export-ckpt-gzipped", "export", "export", ["--ckpt_path", "{fx}/swarm.ckpt.gz", "--out", "p.pt2"], "ckpt|checkpoint")
case("export-out-is-the-ckpt", "export", "export", ["--ckpt_path", "s.ckpt", "--out", "s.ckpt"], "out|ckpt",
     files={"s.ckpt": "fixture:swarm.ckpt"}, guard=("s.ckpt",))

# ------------------------------------------------------------------------------------ bc
BC = ["--config", "swarm", "--out", "bc.ckpt", "--rounds", "2", "--num_envs", "8", "--epochs", "1"]
case("bc-rounds-negative", "bc", "bc", BC[:4] + ["--rounds", "-1"] + BC[6:], "rounds")
case("bc-json-missing-dir", "bc", "bc", BC + ["--json", "no/dir/r.json"], "json")
case("bc-out-missing-dir", "bc", "bc", ["--config", "swarm", "--out", "no/dir/bc.ckpt"] + BC[4:], "out")
case("bc-label-smoothing-nan", "bc", "bc", BC + ["--label_smoothing", "nan"], "label_smoothing")
case("bc-teacher-oracle-on-user-world", "bc", "bc", ["--config", "{fx}/user.yaml", "--teacher", "oracle", "--out", "bc.ckpt",
                                                    "--rounds", "2", "--num_envs", "8", "--epochs", "1"], "teacher|oracle")
case("bc-out-suffix-pt2", "bc", "bc", BC[:2] + ["--out", "bc.pt2"] + BC[4:], "out|ckpt", note="bc writes a checkpoint; .pt2 is export's")
case("bc-config-missing", "bc", "bc", ["--config", "swarn.yaml", "--out", "bc.ckpt"], "config|swarn")

# ------------------------------------------------------------------------------------ plot
case("plot-smooth-word", "plot", "plot", ["{fx}/run0", "--smooth", "lots", "--out", "c.png"], "smooth")
case("plot-band-capitalised", "plot", "plot", ["{fx}/run0", "--band", "CI", "--out", "c.png"], "band")
case("plot-run-is-a-file", "plot", "plot", ["{fx}/run0/config.yaml", "--out", "c.png"], "config.yaml|run")
case("plot-points-negative", "plot", "plot", ["{fx}/run0", "--points", "-5", "--out", "c.png"], "points")
case("plot-csv-missing-dir", "plot", "plot", ["{fx}/run0", "--csv", "no/dir/c.csv", "--out", "c.png"], "csv")
case("plot-out-missing-dir", "plot", "plot", ["{fx}/run0", "--out", "no/dir/c.png"], "out")

# ------------------------------------------------------------------------------------ python api
api("api-fit-overrides-dict", "from parlightning import fit\nfit(config='swarm', overrides={'trainer.max_epochs': 1})", "overrides")
api("api-fit-config-list-with-number", "from parlightning import fit\nfit(config=['swarm', 3], overrides=['trainer.max_epochs=1'])",
    "config")
api("api-fit-lr-word", "from parlightning import fit\nfit(config='swarm', overrides=['trainer.max_epochs=1', 'data.num_envs=8',"
    " 'data.num_steps=8', 'model.lr=abc'])", "lr")
api("api-predict-unbatched", "import torch, parlightning\np = parlightning.load_policy('{fx}/cart.ckpt')\np.predict(torch.zeros(3))",
    "obs|shape|observation")
api("api-predict-numpy-mask-wrong-width", "import torch, numpy as np, parlightning\np = parlightning.load_policy('{fx}/swarm.ckpt')\n"
    "p.predict(torch.zeros(2, 13, 6), mask=np.ones((2, 5), bool))", "mask")
api("api-load-policy-of-bc-json", "import parlightning\nparlightning.load_policy('{fx}/run0/config.yaml')", "config.yaml|checkpoint")
api("api-load-from-checkpoint-map-location-word", "from parlightning.ppo.module import PPOModule\n"
    "PPOModule.load_from_checkpoint('{fx}/cart.ckpt', map_location='gpu0')", "map_location|gpu0|device")
api("api-ext-kwargs-lambda-workers", "from parlightning.envs.external import ExternalBatchedEnv\n"
    "ExternalBatchedEnv(2, world='r7ext:Good', world_kwargs={'length': lambda: 3}, workers=1)", "world_kwargs|pickle")
api("api-as-batched-no-record", "from parlightning.distribution.samplers import as_batched\n"
    "class S:\n    def pick(self, keys, round_index):\n        return keys[0]\nas_batched(S(), 4)", "record")
api("api-simulated-spawn-none", "from parlightning.subagents import SimulatedPool\nSimulatedPool().spawn(None)", "instruction|spawn")
api("api-swarm-num-envs-string", "from parlightning.envs.swarm import SwarmEnv\nSwarmEnv(num_envs='8')", "num_envs")
api("api-predict-deterministic-none-mask-bool-obs", "import torch, parlightning\np = parlightning.load_policy('{fx}/cart.ckpt')\n"
    "p.predict(torch.zeros(2, 4, dtype=torch.bool))", "obs|dtype|float")

# ------------------------------------------------------------------------------------ environment
fit("env-lightning-logs-is-a-file", "environment", TINY, "lightning_logs", files={"lightning_logs": "not a folder\n"},
    guard=("lightning_logs",))
fit("env-omp-threads-zero", "environment", TINY, "OMP_NUM_THREADS", env={"OMP_NUM_THREADS": "0"})
fit("env-home-is-a-file-config-tilde", "environment", TINY + ["--config", "~/my.yaml"], "my.yaml|config",
    env={"HOME": "{tmp}/homefile"}, files={"homefile": "x\n"})
fit("env-pythonpath-shadows-config-name", "environment", TINY + ["--config", "cfgdir"], "cfgdir|config", files={"cfgdir": "dir"})

# ------------------------------------------------------------------------------------ scripts the docs name
script("script-mask-entropy-bad-flag", ["{root}/scripts/mask_entropy.py", "--seeds", "3"], "seeds|unrecognized")
script("script-collapse-study-priors-word", ["{root}/scripts/collapse_study.py", "--priors", "high", "--plan"], "priors")
script("script-bench-async-workers-negative", ["{root}/scripts/bench_async.py", "--workers", "-1", "--quick"], "workers")
script("script-world-baselines-episodes-word", ["{root}/scripts/world_baselines.py", "--episodes", "many"], "episodes")
script("script-time-to-solve-config-missing", ["{root}/scripts/time_to_solve.py", "--config", "nosuch.yaml", "--quick"],
       "config|nosuch")
script("script-sampler-study-seeds-zero", ["{root}/scripts/sampler_study.py", "--seeds", "0", "--quick", "--report-only"], "seeds")
script("script-tune-trials-negative", ["{root}/scripts/tune.py", "--trials", "-3", "--quick"], "trials")
script("script-tune-override-unknown-key", ["{root}/scripts/tune.py", "--override", "model.learning_rate=0.1", "--trials", "1",
                                           "--iterations", "1"], "learning_rate")

# ------------------------------------------------------------------------------------ ddp (fresh interpreters)
DDP = [PY, "-m", "parlightning.fit"] + [a if a != "swarm" else "swarm" for a in TINY] + [
    "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp"]
case("ddp-callback-raises-on-rank-one", "ddp", "cmd", DDP + ["--config", "c.yaml"], "rank 1|RaisesOnRankOne|metrics store",
     files={"c.yaml": "trainer:\n  callbacks:\n    - class_path: r7user.RaisesOnRankOne\n"}, timeout=90)
case("ddp-user-world-reset-raises-on-rank-one", "ddp", "cmd", [PY, "-m", "parlightning.fit"] + UW +
     ["--data.env", "r7worlds.ResetRaisesRankOne", "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp"],
     "rank 1|ResetRaisesRankOne|levels.db", timeout=90)

# ------------------------------------------------------------------------------------ the quick subset
# One case per class of input this round found unclean on the code before its fixes (set after the
# counted run; it selects cases, it changes none).
QUICK = ("world-no-num-envs-attr", "world-nvec-int", "world-step-sys-exit", "world-parts-critical-nan",
         "world-task-ids-raise", "swarm-families-duplicate", "orchestration-bank-seed-word", "strategy-name-number",
         "callback-rollout-start-no-round", "callback-async-hook", "checkpoint-filename-unbalanced-brace",
         "api-load-from-checkpoint-map-location-word", "api-simulated-spawn-none", "script-tune-override-unknown-key")
for _c in CASES:
    _c.quick = _c.name in QUICK

# ------------------------------------------------------------------------------------ judged valid (not counted)
DROPPED: dict[str, str] = {
    "data-minibatch-of-one-row": "ppo_loss skips advantage normalisation for a one-row minibatch; the run is right",
    "swarm-max-width-65": "SwarmEnv's max_width is any positive integer (the README's 'up to 64' is the measured range); the run trains",
    "swarm-max-subagents-below-width": "max_subagents caps the subagents of a stage; a cap below the width is a legitimate setting",
    "world-state-dict-tensor-key": "a dict keyed by a tensor saves and loads with weights_only=True, which is the documented contract",
    "process-fn-returns-string": "ProcessPool reads any value but None as a success with that output (subagents/pool.py normalize)",
    "orchestration-spawn-steps-zero": "spawning at no step cost is a legitimate PoolOrchestrationWorld setting; the run is right",
    "trainer-default-root-dir-empty": "Lightning reads an empty default_root_dir as the working directory, its default",
    "ckpt-trailing-garbage": "the checkpoint's content is intact (a zip ignores trailing bytes); resuming it is right",
    "ckpt-edited-in-python": "setting epoch to 0 with torch.save keeps the checksum of the tensors; the run resumes as the user asked",
    "bc-out-suffix-pt2": "bc writes a checkpoint under the name given; --model.init_from bc.pt2 reads it",
    "api-predict-deterministic-none-mask-bool-obs": "predict casts observations to float32; the answer is right",
    "ext-obs-nested-list": ("judged valid after the counted run: the external-world contract is the observation's size "
                            "(reliability guide: 'an observation of the wrong size'), reshaped to observation_shape; "
                            "the run is right"),
    "world-obs-twenty-million-wide": ("judged valid after the counted run: 8 actors x 20M numbers fit this machine's "
                                      "memory, so the run proceeds (slowly, by design: the time preflight announces a "
                                      "long first iteration, it does not refuse it); too slow and memory-heavy for the "
                                      "corpus on a shared machine"),
}
VALID = [c for c in CASES if c.name in DROPPED]
CASES = [c for c in CASES if c.name not in DROPPED]


# ------------------------------------------------------------------------------------ fixtures
def make_fixtures(fx: Path, cases: list[Case]) -> None:
    """User code modules, tiny configs, and the checkpoints and run folder the chosen `cases` use
    (built once per run, only those some case needs)."""
    fx.mkdir(parents=True, exist_ok=True)
    (fx / "r7worlds.py").write_text(WORLDS)
    (fx / "r7ext.py").write_text(EXT)
    (fx / "r7user.py").write_text(USER)
    (fx / "r7broken.py").write_text(BROKEN)
    (fx / "user.yaml").write_text(USER_YAML)
    (fx / "ext.yaml").write_text(EXT_YAML)
    (fx / "pool.yaml").write_text(POOL_YAML)
    used = " ".join(str(v) for c in cases for v in c.files.values()) + " " + " ".join(str(c.args) for c in cases)
    swarm_names = ("swarm.ckpt", "swarm-garbage.ckpt", "swarm.ckpt.gz", "swarm-edited.ckpt", "swarm-hparams.ckpt", "run0")
    swarm = any(f"fixture:{k}" in used or f"{{fx}}/{k}" in used for k in swarm_names)
    cart = "cart.ckpt" in used
    lsw = "lsw.ckpt" in used
    jobs = [
        ("swarm", swarm, "fit", TINY + ["--trainer.default_root_dir", str(fx / "swarm")]),
        ("cart", cart, "fit", CART + ["--trainer.default_root_dir", str(fx / "cart")]),
        ("lsw", lsw, "fit", UW + ["--data.env", "r7worlds.LoadStateWrongKey", "--trainer.default_root_dir", str(fx / "lsw")]),
    ]
    for i, (name, wanted, kind, args) in enumerate(jobs):
        if not wanted:
            continue
        c = Case(f"fixture-{name}", "fixture", kind, args, control=True, timeout=300,
                 env={"R7_BUILDING_FIXTURE": "1"} if name == "lsw" else {})
        outcome, _line, _s, text = run_case(c, fx / "_runs", fx, i)
        if outcome != "ok":
            raise SystemExit(f"fixture {name} failed ({outcome}): {text[-2000:]}")
    for name in ("swarm", "cart", "lsw"):
        src = fx / name / "lightning_logs/version_0/checkpoints/last.ckpt"
        if src.exists():
            shutil.copy(src, fx / f"{name}.ckpt")
    if swarm:
        import gzip

        import torch

        sw = fx / "swarm.ckpt"
        data = sw.read_bytes()
        (fx / "swarm-garbage.ckpt").write_bytes(data + b"\x00garbage appended by a download tool\n" * 8)
        (fx / "swarm.ckpt.gz").write_bytes(gzip.compress(data))
        ck = torch.load(sw, map_location="cpu", weights_only=False)
        ck["epoch"] = 0  # what a user does to "restart" a run from its weights
        torch.save(ck, fx / "swarm-edited.ckpt")
        ck = torch.load(sw, map_location="cpu", weights_only=False)
        hp = ck.get("hyper_parameters", {})
        if "hidden_sizes" in hp:
            hp["hidden_sizes"] = [32, 32]
        torch.save(ck, fx / "swarm-hparams.ckpt")
        shutil.copytree(fx / "swarm/lightning_logs/version_0", fx / "run0", ignore=shutil.ignore_patterns("checkpoints"))


# ------------------------------------------------------------------------------------ main
def main(argv: Optional[list[str]] = None) -> int:
    return r5.run_corpus(argv, round_no=7, description=__doc__.split("\n\n")[0], cases_all=CASES, valid=VALID,
                         dropped=DROPPED, make_fixtures=make_fixtures)

if __name__ == "__main__":
    sys.exit(main())
