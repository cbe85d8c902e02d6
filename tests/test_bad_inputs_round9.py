"""Round 9 of the bad-input corpus (scripts/bad_inputs_round9.py): its --quick subset (one case per
class of input the round found unclean on the code before its fixes), and unit tests of the fit-side
classes: a world whose spaces change mid-run, a sparse reward, a done mask of the wrong dtype handed
to next_task, a checkpoint whose counters were edited, the DDP rendezvous variables (a host that does
not resolve, a port that is taken), failures that come from the process's environment (a warning
turned into an error, thread and file-size limits, Lightning's SLURM refusal), SIGUSR1 / SIGUSR2, and
a user world that closes sys.stderr."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.corpus_check import assert_quick_subset_clean

ROOT = Path(__file__).resolve().parents[1]


def test_round9_quick_subset_is_clean() -> None:
    assert_quick_subset_clean("bad_inputs_round9.py", min_cases=10)


def test_the_user_signal_handlers_are_the_fits_own_and_are_put_back() -> None:
    from parlightning.cli.stop_signals import Signalled, stop_on_signals

    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    with pytest.raises(Signalled) as stopped:
        with stop_on_signals((signal.SIGUSR1, signal.SIGUSR2), after="; kept"):  # what main() does around fit
            assert callable(signal.getsignal(signal.SIGUSR1)) and callable(signal.getsignal(signal.SIGUSR2))
            signal.raise_signal(signal.SIGUSR2)
    assert str(stopped.value).startswith("SIGUSR2: stopped by a signal") and str(stopped.value).endswith("; kept")
    assert stopped.value.code == 128 + signal.SIGUSR2
    # fit() from the Python API leaves the caller's handlers as they were
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL and signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL


def test_environment_failures_are_one_line_naming_the_cause() -> None:
    from parlightning.cli.fit import _environment_error

    assert "PYTHONWARNINGS=error" in _environment_error(DeprecationWarning("old API"))
    assert "ulimit -v" in _environment_error(RuntimeError("can't start new thread"))
    assert "ulimit -v" in _environment_error(MemoryError())
    big = OSError(errno.EFBIG, "File too large", "/runs/version_0/config.yaml")
    line = _environment_error(big)
    assert "ulimit -f" in line and "/runs/version_0/config.yaml" in line
    assert "the disk is full" in _environment_error(OSError(errno.ENOSPC, "No space left on device"))
    assert "MASTER_PORT" in _environment_error(RuntimeError("... code: -98, name: EADDRINUSE, message: address"))
    slurm = RuntimeError("You set `--ntasks=4` in your SLURM bash script, but this variable is not supported.")
    assert _environment_error(slurm).startswith("SLURM: You set `--ntasks=4`")
    assert _environment_error(ValueError("a bug")) is None  # not the environment: the traceback is kept


def test_ddp_rendezvous_variables_are_checked_before_any_rank_starts(monkeypatch) -> None:
    from parlightning.cli.fit import check_environment_for_ddp
    from parlightning.errors import ConfigError

    two, one = SimpleNamespace(world_size=2), SimpleNamespace(world_size=1)
    for name in ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "no-such-host.invalid")
    with pytest.raises(ConfigError, match="MASTER_ADDR: host 'no-such-host.invalid' does not resolve"):
        check_environment_for_ddp(two)
    check_environment_for_ddp(one)  # one process: no rendezvous, nothing checked
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "http")
    with pytest.raises(ConfigError, match="MASTER_PORT: 'http' is not a port number"):
        check_environment_for_ddp(two)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setenv("MASTER_PORT", str(taken.getsockname()[1]))
        with pytest.raises(ConfigError, match="MASTER_PORT .*: cannot listen on it"):
            check_environment_for_ddp(two)
        monkeypatch.setenv("LOCAL_RANK", "1")  # a launched rank: its port belongs to rank 0's store
        check_environment_for_ddp(two)


def _checkpoint(epoch: int, steps: int, done: int, optimizer_steps: int) -> dict:
    fit_loop = {"epoch_progress": {"current": {"processed": done}},
                "epoch_loop.automatic_optimization.optim_progress": {
                    "optimizer": {"step": {"total": {"completed": optimizer_steps}}}},
                "epoch_loop.manual_optimization.optim_step_progress": {"total": {"completed": 0}}}
    return {"epoch": epoch, "global_step": steps, "loops": {"fit_loop": fit_loop}}


def test_a_checkpoint_whose_counters_were_edited_is_refused() -> None:
    from parlightning.errors import ConfigError
    from parlightning.runtime.checkpoint import _check_counters

    _check_counters("c.ckpt", _checkpoint(epoch=1, steps=32, done=2, optimizer_steps=32))  # as Lightning writes it
    with pytest.raises(ConfigError, match=r"epoch 1000000000000 \(its fit loop finished 2 iterations\)"):
        _check_counters("c.ckpt", _checkpoint(epoch=10**12, steps=32, done=2, optimizer_steps=32))
    with pytest.raises(ConfigError, match=r"global_step 5 \(its fit loop took 32 optimizer steps\).*edited"):
        _check_counters("c.ckpt", _checkpoint(epoch=1, steps=5, done=2, optimizer_steps=32))


def _step_loop(env):
    from parlightning.collection.step_loop import StepLoop

    return StepLoop(lambda n, device, seed: env, num_envs=2, num_steps=2, seed=0, device=torch.device("cpu"))


class _World:
    """A two-actor world with three actions and a 4-feature observation."""

    def __init__(self) -> None:
        from parlightning.envs.base import ActionSpec

        self.num_envs, self.device, self.observation_shape = 2, torch.device("cpu"), (4,)
        self.action_spec = ActionSpec("discrete", nvec=(3,))


def test_a_world_whose_spaces_change_mid_run_is_named_at_the_rollouts_end() -> None:
    from parlightning.envs.base import ActionSpec
    from parlightning.errors import ReportedError

    world = _World()
    loop = _step_loop(world)
    loop.check_spaces(0)  # unchanged: nothing to say
    world.action_spec = ActionSpec("discrete", nvec=(5,))
    with pytest.raises(ReportedError, match=r"_World.action_spec changed during rollout 3"):
        loop.check_spaces(3)
    world.action_spec, world.observation_shape = ActionSpec("discrete", nvec=(3,)), (6,)
    with pytest.raises(ReportedError, match=r"_World.observation_shape changed"):
        loop.check_spaces(4)


def test_a_sparse_reward_and_a_float_done_mask_are_named_not_tracebacks() -> None:
    from parlightning.envs.base import StepResult
    from parlightning.errors import ReportedError

    loop = _step_loop(_World())
    z = torch.zeros(2, dtype=torch.bool)
    sparse = StepResult(torch.zeros(2, 4), torch.ones(2).to_sparse(), z, z, torch.zeros(2, 4))
    with pytest.raises(ReportedError, match="returned StepResult.reward as a sparse_coo tensor, not a dense"):
        loop._check_step(sparse, 1)
    loop.picks = SimpleNamespace(pick=lambda context, mask: torch.zeros(2, dtype=torch.long))
    with pytest.raises(ReportedError, match="passed a done mask to next_task of dtype torch.float32 during a rollout"):
        loop._pick(None, torch.zeros(2))
    with pytest.raises(ReportedError, match="passed a done mask to next_task as builtins.list"):
        loop._pick(None, [False, True])
    loop.current_task = torch.tensor([4, 5])
    assert loop._pick(None, torch.tensor([False, True])).tolist() == [0, 0] and loop.current_task.tolist() == [4, 0]


WORLD_CLOSING_STDERR = '''
import signal, os, sys
import torch
from parlightning.envs.base import ActionSpec, BatchedEnv, StepResult


class Base(BatchedEnv):
    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
        self.num_envs, self.device = num_envs, torch.device(device)
        self.observation_shape, self.action_spec = (3,), ActionSpec("discrete", nvec=(2,))
        self.steps = 0

    def reset(self, *, seed=None, task_index=None):
        return torch.zeros(self.num_envs, 3)

    def step(self, action, next_task=None):
        self.steps += 1
        if self.steps == 3:
            self.fault()
        z = torch.zeros(self.num_envs, dtype=torch.bool)
        return StepResult(torch.zeros(self.num_envs, 3), torch.ones(self.num_envs), z, z, torch.zeros(self.num_envs, 3))


class ClosesStderr(Base):
    def fault(self):
        sys.stderr.close()
        raise RuntimeError("broke after closing stderr")


class SendsSigusr2(Base):
    def fault(self):
        os.kill(os.getpid(), signal.SIGUSR2)
'''


@pytest.mark.parametrize("world, code, words", [("ClosesStderr", 1, "ClosesStderr.step raised RuntimeError"),
                                                ("SendsSigusr2", 128 + signal.SIGUSR2, "SIGUSR2: stopped by a signal")])
def test_a_world_that_closes_stderr_or_signals_its_process_still_gets_one_line(tmp_path, world, code, words) -> None:
    (tmp_path / "r9closing.py").write_text(WORLD_CLOSING_STDERR)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    proc = subprocess.run([sys.executable, "-m", "parlightning.fit", "--data.env", f"r9closing.{world}",
                           "--data.num_envs", "4", "--data.num_steps", "8", "--trainer.max_epochs", "1",
                           "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(tmp_path / "runs")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == code and len(lines) == 1 and words in lines[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "runs" / "lightning_logs" / "version_0").exists()  # failed before its first rollout ended
    assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL  # this process's handlers are untouched
