"""Round 14's classes in the run itself (`scripts/bad_inputs_round14.py`): a Timer of no time, a sampler's
`reward_blind` flag of the wrong type, a PARLReward subclass whose override training never calls, external
worlds that disagree on what they declare, Ctrl-C pressed twice, and two 2-rank faults (a rank's sampler
failing in the data module's setup; a rank's collector process whose world raises)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch

from parlightning.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SWARM = str(ROOT / "configs" / "swarm.yaml")
TINY = ["--data.num_envs", "8", "--data.num_steps", "8", "--trainer.max_epochs", "1",
        "--trainer.enable_model_summary", "false"]


# ------------------------------------------------------------------ a Timer callback of no time
@pytest.mark.parametrize("duration, seconds", [("{days: -1}", "-86400"), ("00:00:00:00", "0")])
def test_a_timer_of_no_time_is_refused_before_anything_is_written(tmp_path, monkeypatch, duration, seconds):
    from parlightning import fit

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        fit(SWARM, [*TINY, "--trainer.callbacks+", "lightning.pytorch.callbacks.Timer", "--trainer.callbacks.duration",
                    duration])
    assert str(err.value).startswith(f"trainer.callbacks[4]: Timer duration is {seconds} s, no time at all: the run "
                                     "would stop before its first iteration"), str(err.value)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ a sampler's reward_blind flag
def test_a_sampler_whose_reward_blind_is_not_a_bool_is_named():
    from parlightning.distribution.samplers import RoundRobin
    from parlightning.ppo.data import RolloutDataModule

    class Blind(RoundRobin):
        reward_blind = "no"  # truthy: a collector process would pick from its own copy

    with pytest.raises(ConfigError, match=r"data.sampler: Blind.reward_blind is 'no' \(str\); it must be True"):
        RolloutDataModule(sampler=Blind())
    RolloutDataModule(sampler=RoundRobin())  # the package's own: a bool


# ------------------------------------------------------------------ a PARLReward override never called
def test_a_reward_subclass_overriding_only_call_is_refused_and_one_overriding_bonus_is_kept():
    from parlightning.parl.reward import PARLReward
    from parlightning.ppo.data import RolloutDataModule

    class CallOnly(PARLReward):
        def __call__(self, n_subagents, assigned, completed, outcome, *, validate=True):
            return outcome * 2

    class Bonus(CallOnly):
        def bonus(self, n_subagents, assigned, completed, *, validate=True):
            return torch.zeros_like(n_subagents, dtype=torch.float32)

    with pytest.raises(ConfigError, match=r"data.reward: .*CallOnly overrides __call__, which training never calls: "
                                          r"the rollout adds bonus\(n_subagents, assigned, completed\)"):
        RolloutDataModule(reward=CallOnly(max_subagents=128))
    assert RolloutDataModule(reward=Bonus(max_subagents=128)).reward is not None


# ------------------------------------------------------------------ external worlds that disagree
WORLDS = '''
import itertools
import os
_COUNT = itertools.count()


class Declares:
    """Answers like a one-step world; each instance's declared facts come from its constructor."""

    observation_shape = (2,)
    action_spec = {"kind": "discrete", "nvec": [2]}

    def __init__(self, seed=0, tasks=None, shape=None):
        self.tasks = tasks
        if shape is not None:
            self.observation_shape = shape

    def reset(self, task_id=None):
        return [0.0, 0.0]

    def step(self, action):
        return [0.0, 0.0], 0.0, True, False, None


class TasksDiffer(Declares):
    def __init__(self, seed=0):
        k = next(_COUNT)
        super().__init__(seed, tasks=["a", "b"] if k == 0 else [f"t{k}-0", f"t{k}-1"])


class ShapeDiffers(Declares):
    def __init__(self, seed=0):
        super().__init__(seed, tasks=["a", "b"], shape=(2,) if next(_COUNT) == 0 else (3,))


class PerProcess(Declares):
    """Alike within a process, different across processes."""

    def __init__(self, seed=0):
        super().__init__(seed, tasks=[f"p{os.getpid()}-0", f"p{os.getpid()}-1"])


class Alike(Declares):
    def __init__(self, seed=0):
        super().__init__(seed, tasks=["a", "b"])
'''


@pytest.fixture
def worlds(tmp_path, monkeypatch):
    (tmp_path / "r14_declared.py").write_text(WORLDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    sys.modules.pop("r14_declared", None)
    yield
    sys.modules.pop("r14_declared", None)


@pytest.mark.parametrize("world, key, says", [
    ("TasksDiffer", "tasks", "actor 1's is ['t1-0', 't1-1'] but actor 0's is ['a', 'b']"),
    ("ShapeDiffers", "observation_shape", "actor 1's is (3,) but actor 0's is (2,)"),
])
def test_worlds_that_declare_different_facts_are_refused_naming_the_actors(worlds, world, key, says):
    from parlightning.envs.external import ExternalBatchedEnv

    with pytest.raises(ConfigError) as err:
        ExternalBatchedEnv(4, world=f"r14_declared:{world}")
    assert str(err.value).startswith(f"data.env.world: the {world} worlds disagree on `{key}`: {says}"), str(err.value)
    env = ExternalBatchedEnv(4, world="r14_declared:Alike")  # alike: built as before
    try:
        assert env.task_ids == ["a", "b"]
    finally:
        env.close()


def test_worker_processes_whose_worlds_disagree_are_refused_too(worlds):
    """Each worker process compares its own worlds; the env compares the workers' first worlds."""
    from parlightning.envs.external import ExternalBatchedEnv

    with pytest.raises(ConfigError, match=r"the TasksDiffer worlds disagree on `tasks`: actor 1's is"):
        ExternalBatchedEnv(4, world="r14_declared:TasksDiffer", workers=2)  # inside worker 0 (actors 0-1)
    with pytest.raises(ConfigError, match=r"the PerProcess worlds disagree on `tasks`: actor 2's is \['p\d+-0', "):
        ExternalBatchedEnv(4, world="r14_declared:PerProcess", workers=2)  # worker 1's first world vs worker 0's


# ------------------------------------------------------------------ Ctrl-C pressed twice
SLOW = '''
import os, time
from parlightning.envs.swarm import SwarmEnv


class SlowStep(SwarmEnv):
    steps = 0

    def step(self, action, next_task=None):
        SlowStep.steps += 1
        if SlowStep.steps == 4 and self.num_envs > 2:  # the run's rollout (not the preflight probe's two actors)
            with open(os.environ["R14_MARK"] + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.replace(os.environ["R14_MARK"] + ".tmp", os.environ["R14_MARK"])
            time.sleep(20)
        return super().step(action, next_task)
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals")
def test_ctrl_c_pressed_twice_ends_fit_with_its_one_line_and_code_130(tmp_path):
    """The second Ctrl-C came while the run ended (Lightning's teardown puts the default handler back, the
    interpreter then waited for the world step still sleeping): the process died by SIGINT. Whenever the
    second one lands, the run ends with 130 and the first one's line."""
    (tmp_path / "r14_slow.py").write_text(SLOW)
    mark = tmp_path / "mark"
    env = dict(os.environ, R14_MARK=str(mark), PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    proc = subprocess.Popen([sys.executable, "-m", "parlightning.fit", "--config", SWARM, *TINY,
                             "--data.env", "r14_slow.SlowStep", "--trainer.max_epochs", "2"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as from a terminal
    try:
        deadline = time.monotonic() + 240
        while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mark.exists(), proc.communicate(timeout=60)[1][-3000:]
        proc.send_signal(signal.SIGINT)
        time.sleep(0.2)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 130 and "Traceback" not in stderr, (proc.returncode, stderr[-3000:])
    assert lines == ["error: interrupted (KeyboardInterrupt: Ctrl-C, or raised by user code) before the run's first "
                     "rollout; nothing was kept"], stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mark", "r14_slow.py"]


# ------------------------------------------------------------------ 2-rank faults
USER = '''
import os
from parlightning.distribution.samplers import TaskSampler
from parlightning.envs.swarm import SwarmEnv


class Rank1UnknownPick(TaskSampler):
    """Rank 1 picks a task outside the bank, in the data module's setup (before any callback's setup)."""

    def __init__(self):
        super().__init__()
        self.i = 0

    def pick(self, keys, round_index):
        if os.environ.get("LOCAL_RANK") == "1":
            return "no-such-task"
        self.i += 1
        return keys[self.i % len(keys)]

    def record(self, task_id, score):
        pass


class Rank1Raises(SwarmEnv):
    """Rank 1's world raises at its third step of the run (in the rank's collector process)."""

    def step(self, action, next_task=None):
        self.n = getattr(self, "n", 0) + 1
        if self.n >= 3 and self.num_envs > 2 and os.environ.get("LOCAL_RANK") == "1":
            raise ValueError("rank 1's simulator lost its licence")
        return super().step(action, next_task)
'''


def _marked(marker: str) -> list[int]:
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/environ").read_bytes():
                pids.append(int(pid))
        except OSError:
            continue
    return pids


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the run's processes")
@pytest.mark.parametrize("fault, args, says", [
    ("setup", ["--data.sampler", "r14_user.Rank1UnknownPick"],
     "data.sampler: Rank1UnknownPick.pick returned 'no-such-task', which is not in the shard it was given"),
    ("collector-process", ["--data.env", "r14_user.Rank1Raises", "--data.max_policy_lag", "1", "--data.collect_in",
                           "process", "--trainer.max_epochs", "2"],
     "data.env: Rank1Raises.step raised ValueError: rank 1's simulator lost its licence at step 2 of a rollout"),
])
def test_a_fault_of_rank_1_ends_the_readme_ddp_command_with_its_line_and_no_process_left(tmp_path, fault, args, says):
    """The README's 2-rank command, progress bar on. In setup rank 1 assumed rank 0 met the same error and rank 0
    died in a collective with gloo's traceback (Lightning sets the data module up before any callback, so the
    ranks' watch started too late); with a collector process, its fork server outlived the rank that raised."""
    (tmp_path / "r14_user.py").write_text(USER)
    marker = f"R14_RUN={uuid.uuid4().hex}"
    env = dict(os.environ, R14_RUN=marker.split("=")[1], PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    env.pop("PL_DISABLE_FORK", None)
    try:
        done = subprocess.run([sys.executable, "-m", "parlightning.fit", "--config", SWARM, *TINY,
                               "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp",
                               *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
        left = _marked(marker)
    finally:
        for pid in _marked(marker):
            os.kill(pid, signal.SIGKILL)
    lines = [line for line in done.stderr.splitlines() if "error:" in line]
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(lines) == 1 and lines[0][lines[0].index("error:"):].startswith("error: rank 1 (pid "), done.stderr[-3000:]
    assert f"stopped the 2-rank run: {says}" in lines[0] and lines[0].endswith("every rank stopped"), lines[0]
    assert left == [], f"processes of the run still alive: {left}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r14_user.py"]  # before any checkpoint: nothing kept
