"""Round 10's hangs and tracebacks, by class, through the CLI as users run it: user code that
blocks anywhere (a class's constructor, a strategy's plan, a world's constructor or close) ends the
run within a bound with one line naming where; a worker process whose answer cannot be pickled
prints no traceback of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENDED_S = 120  # generous: each case ends in seconds; this only catches a hang

WORLDS = '''
import threading
import time

from lightning.pytorch import Callback

from parlightning.distribution.strategies import WorkUnit
from parlightning.envs.base import ActionSpec


class Good:
    observation_shape = (4,)
    action_spec = ActionSpec("discrete", nvec=(2,))
    tasks = ["easy-0", "easy-1", "hard-0", "hard-1"]

    def __init__(self, seed=0, actor=0):
        self.t, self.calls, self.actor = 0, 0, actor

    def reset(self, task):
        self.t = 0
        return [0.0, 0.0, 0.0, 0.0]

    def step(self, action):
        self.t += 1
        self.calls += 1
        done = self.t >= 3
        return [float(self.t), 0.0, 0.0, 1.0], 0.1, done, False, ({"outcome": 1.0} if done else None)


class InitHangs(Good):
    def __init__(self, seed=0, actor=0):
        time.sleep(3600)


class ClosesForever(Good):
    def close(self):
        time.sleep(3600)


class ClosesForeverAfterTheProbe(Good):
    """close() hangs only for actors the preflight's 2-actor probe does not build: at the run's end."""

    def close(self):
        if self.actor >= 2:
            time.sleep(3600)


class ObsUnpicklable(Good):
    def step(self, action):
        obs, r, term, trunc, parts = super().step(action)
        if self.calls >= 2:
            obs = (x for x in obs)
        return obs, r, term, trunc, parts


class PlanBlocksForever:
    name = "mine"

    def plan(self, n_workers, round_index, keys):
        lock = threading.Lock()
        lock.acquire()
        lock.acquire()


class CallbackInitBlocks(Callback):
    """A callback whose constructor waits on a lock nobody releases."""

    def __init__(self):
        lock = threading.Lock()
        lock.acquire()
        lock.acquire()
'''

EXT = """\
seed_everything: 0
torch_threads: 1
trainer: {{max_epochs: 1, accelerator: cpu, devices: 1, enable_progress_bar: false, enable_model_summary: false}}
model: {{hidden_sizes: [16], activation: relu}}
data:
  env:
    class_path: parlightning.envs.external.ExternalBatchedEnv
    init_args: {{world: "r10h:{world}", step_timeout: {timeout}{extra}}}
  num_envs: 4
  num_steps: 8
  update_epochs: 1
  num_minibatches: 2
  reward: null
"""
TINY = ["--config", "swarm", "--data.num_envs", "4", "--data.num_steps", "8", "--trainer.max_epochs", "1",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def _fit(tmp_path: Path, args: list[str]) -> tuple[subprocess.CompletedProcess, float]:
    (tmp_path / "r10h.py").write_text(WORLDS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "parlightning.fit", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=ENDED_S)
    return proc, time.monotonic() - start


def _ext(tmp_path: Path, world: str, timeout: float = 2, extra: str = "") -> list[str]:
    (tmp_path / "ext.yaml").write_text(EXT.format(world=world, timeout=timeout, extra=extra))
    return ["--config", "ext.yaml"]


def _one_line(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode not in (0, None) and len(lines) == 1, (proc.returncode, proc.stderr[-3000:])
    return lines[0]


def test_a_world_constructor_that_never_returns_is_one_line_naming_it(tmp_path: Path) -> None:
    proc, _ = _fit(tmp_path, _ext(tmp_path, "InitHangs"))
    line = _one_line(proc)
    assert "InitHangs" in line and "constructor" in line and "step_timeout" in line and "actor 0" in line, line
    assert not (tmp_path / "lightning_logs").exists()  # refused before anything was written


def test_a_user_class_constructor_that_blocks_ends_with_the_stall_line(tmp_path: Path) -> None:
    """Blocked while the CLI builds the config's classes (before the trainer exists)."""
    proc, _ = _fit(tmp_path, TINY + ["--trainer.callbacks+", "r10h.CallbackInitBlocks", "--stall_timeout", "3"])
    line = _one_line(proc)
    assert "CallbackInitBlocks.__init__" in line and "--stall_timeout" in line and "expected_wait" in line, line


def test_a_strategy_plan_that_blocks_ends_with_the_stall_line(tmp_path: Path) -> None:
    """plan() runs in the data module's setup, before any callback's setup."""
    (tmp_path / "c.yaml").write_text(textwrap.dedent("""\
        trainer:
          callbacks+:
            - class_path: parlightning.callbacks.StrategyPlanner
              init_args:
                strategy: {class_path: r10h.PlanBlocksForever}
        """))
    proc, _ = _fit(tmp_path, TINY + ["--config", "c.yaml", "--stall_timeout", "3"])
    line = _one_line(proc)
    assert "PlanBlocksForever.plan" in line and "--stall_timeout" in line, line


def test_a_world_close_that_never_returns_is_refused_by_the_probe(tmp_path: Path) -> None:
    proc, _ = _fit(tmp_path, _ext(tmp_path, "ClosesForever"))
    line = _one_line(proc)
    assert "ClosesForever.close()" in line and "step_timeout" in line, line


def test_a_close_that_hangs_at_the_end_of_a_run_neither_keeps_it_alive_nor_loses_its_checkpoint(tmp_path: Path) -> None:
    proc, seconds = _fit(tmp_path, _ext(tmp_path, "ClosesForeverAfterTheProbe"))
    assert proc.returncode == 0, proc.stderr[-3000:]  # the run is complete: its close is warned about
    assert "Traceback" not in proc.stderr
    assert seconds >= 10.0, (seconds, proc.stderr[-3000:])  # the hung close() was waited for, up to its bound
    assert list(tmp_path.glob("lightning_logs/version_*/checkpoints/last.ckpt")), proc.stderr[-3000:]
    # (the WorldCloseWarning's line is asserted in-process below: in two CI runs, in an xdist worker after other
    # tests, this subprocess's stderr held no warning line, while 7 runs of this test alone printed it; not explained)


def test_a_close_that_hangs_is_one_warning_naming_the_world_and_the_rest_is_closed(tmp_path: Path) -> None:
    import warnings

    import torch

    from parlightning.envs.external import ExternalBatchedEnv
    from parlightning.envs.world_runner import WorldCloseWarning

    (tmp_path / "r10h_inproc.py").write_text(WORLDS)
    sys.path.insert(0, str(tmp_path))
    try:
        import r10h_inproc

        env = ExternalBatchedEnv(4, world=r10h_inproc.ClosesForeverAfterTheProbe, step_timeout=2.0)
        env.reset(seed=0)
        env.step(torch.zeros(4, dtype=torch.long))
        start = time.monotonic()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            env.close()
        took = time.monotonic() - start
    finally:
        sys.path.remove(str(tmp_path))
    closes = [w for w in seen if issubclass(w.category, WorldCloseWarning)]
    assert len(closes) == 1, [str(w.message) for w in seen]
    text = str(closes[0].message)
    assert "ClosesForeverAfterTheProbe.close()" in text and "abandoned" in text and "actor 2, 3" in text, text
    assert 9.0 <= took < 60.0, took  # one bound (10 s) for all the worlds' close(), not one per world


def test_a_worker_whose_answer_cannot_be_pickled_prints_no_traceback(tmp_path: Path) -> None:
    proc, _ = _fit(tmp_path, _ext(tmp_path, "ObsUnpicklable", timeout=20, extra=", workers: 1"))
    line = _one_line(proc)
    assert "ObsUnpicklable" in line and "pickle" in line and "actor 0" in line, line
