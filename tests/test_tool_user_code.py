"""evaluate and bc run the user's world too: what fit promises holds for them (issue 27).

A world that raises is one line naming the world, method, file and line; a world whose values break
the contract (checked on a small CPU probe first, as fit's preflight does) is one line naming the
value; a world stuck for good ends the program within `--stall_timeout` with one line naming where
(the one-process stall watch of fit, `parlightning.cli.user_code.stall_watched`); a SIGTERM ends it
with one line and the shell's code 143, an output written whole or not at all (`cli/stop_signals.py`,
`cli/outputs.written_whole`)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from parlightning.cli.bc import main as bc_main
from parlightning.cli.evaluate import main as evaluate_main
from parlightning.cli.fit import main as fit

ROOT = Path(__file__).resolve().parents[1]

WORLD = textwrap.dedent('''
    import os
    import signal
    import time

    import torch
    from parlightning.envs.base import ActionSpec, BatchedEnv, StepResult


    class Tool(BatchedEnv):
        """3 actions, obs [N, 4], 4-step episodes; `mode` breaks it from its 4th step on."""

        observation_shape = (4,)

        def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0, mode: str = "ok"):
            self.num_envs, self.device, self.mode = num_envs, torch.device(device), mode
            self.action_spec = ActionSpec("discrete", nvec=(3,))
            self.t = torch.zeros(num_envs, dtype=torch.long)
            self.calls = 0

        def _obs(self):
            obs = torch.zeros(self.num_envs, 4)
            if self.calls > 3 and self.mode == "wider_later":
                return torch.zeros(self.num_envs, 5)
            if self.calls > 3 and self.mode == "nan_later":
                obs[-1, 2] = float("nan")
            return obs.double() if self.mode == "float64" else obs

        def reset(self, *, seed=None, task_index=None):
            self.t.zero_()
            return self._obs()

        def step(self, action, next_task=None):
            self.calls += 1
            if self.calls > 3 and self.mode == "raise":
                raise ValueError("the simulator lost its licence")
            if self.calls > 3 and self.mode == "hang":
                time.sleep(10**6)
            if self.calls == 4 and self.mode == "sigterm":  # a scheduler's SIGTERM, while the program runs
                os.kill(os.getpid(), signal.SIGTERM)
            self.t += 1
            done = self.t >= 4
            self.t[done] = 0
            reward = (action.reshape(-1) == 1).float()
            return StepResult(self._obs(), reward, done, torch.zeros_like(done), self._obs())
''')


def _config(folder: Path, mode: str) -> str:
    path = folder / f"{mode}.yaml"
    path.write_text(f"data:\n  num_envs: 8\n  num_steps: 8\n  env:\n    class_path: toolworld.Tool\n"
                    f"    init_args: {{mode: {mode}}}\n")
    return str(path)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tool")
    (folder / "toolworld.py").write_text(WORLD)
    sys.path.insert(0, str(folder))
    try:
        fit(["--config", _config(folder, "ok"), "--trainer.default_root_dir", str(folder / "run"),
             "--trainer.enable_progress_bar", "false", "--trainer.max_epochs", "1"])
        yield folder, str(folder / "run" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt")
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("toolworld", None)


def _refused(main, args) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(args)
    return str(exit_.value.code)


def test_a_raising_world_is_one_line_naming_it_in_evaluate_and_bc(setup, tmp_path):
    folder, ckpt = setup
    config = _config(folder, "raise")
    for line in (_refused(evaluate_main, ["--config", config, "--ckpt_path", ckpt, "--json", str(tmp_path / "e.json")]),
                 _refused(bc_main, ["--config", config, "--teacher", ckpt, "--out", str(tmp_path / "bc.ckpt"),
                                    "--num_envs", "8"])):
        assert line.startswith("error: data.env: Tool.step (toolworld.py:")
        assert "raised ValueError: the simulator lost its licence" in line and "fix it there" in line
    assert list(tmp_path.iterdir()) == []  # neither output was written


def test_a_world_breaking_the_contract_is_named_before_evaluate_or_bc_run(setup, tmp_path):
    folder, ckpt = setup
    config = _config(folder, "float64")
    for line in (_refused(evaluate_main, ["--config", config, "--ckpt_path", ckpt]),
                 _refused(bc_main, ["--config", config, "--teacher", ckpt, "--out", str(tmp_path / "bc.ckpt")])):
        assert line.startswith("error: data.env: Tool.reset returned observations of dtype torch.float64 in the "
                               "preflight probe (2 actors, before anything ran); return a float32 [num_envs, "
                               "*observation_shape] tensor"), line
    assert list(tmp_path.iterdir()) == []
    evaluate_main(["--config", _config(folder, "ok"), "--ckpt_path", ckpt])  # the same world by the book runs


@pytest.mark.parametrize("program", ["evaluate", "bc"])
def test_a_world_stuck_for_good_ends_the_program_with_one_line(setup, tmp_path, program):
    folder, ckpt = setup
    extra = ["--ckpt_path", ckpt] if program == "evaluate" else ["--teacher", ckpt, "--out", "bc.ckpt"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(folder)])}
    run = subprocess.run([sys.executable, "-m", f"parlightning.{program}", "--config", _config(folder, "hang"),
                          *extra, "--stall_timeout", "3"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert lines[-1].startswith("error: the run stopped: hung: its main thread made no progress for 3 s")
    assert "toolworld.py:" in lines[-1] and "in Tool.step" in lines[-1] and "--stall_timeout" in lines[-1]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("program", ["evaluate", "bc"])
def test_a_sigterm_while_the_program_runs_is_one_line_and_keeps_the_old_output(setup, tmp_path, program):
    folder, ckpt = setup
    (tmp_path / "report.json").write_text('{"old": 1}')
    extra = ["--ckpt_path", ckpt] if program == "evaluate" else ["--teacher", ckpt, "--out", "bc.ckpt"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(folder)])}
    run = subprocess.run([sys.executable, "-m", f"parlightning.{program}", "--config", _config(folder, "sigterm"),
                          *extra, "--json", "report.json"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 143 and "Traceback" not in run.stderr, run.stderr
    assert [ln for ln in run.stderr.splitlines() if ln.strip()][-1] == (
        "error: SIGTERM: stopped by a signal (from a scheduler, a shell, or user code such as a world); an output "
        "is written whole or not at all: none was left half-written")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
    assert (tmp_path / "report.json").read_text() == '{"old": 1}'


@pytest.mark.parametrize("mode,says", [
    ("wider_later", "data.env: Tool.step returned StepResult.obs of shape [{n}, 5] (expected [{n}, 4]"),
    ("nan_later", "data.env: Tool.step returned a non-finite (NaN or inf) StepResult.obs for actor {last} at step 3"),
])
def test_a_world_going_wrong_after_the_probe_is_named_with_the_step(setup, tmp_path, mode, says):
    folder, ckpt = setup
    config = _config(folder, mode)
    evaluated = _refused(evaluate_main, ["--config", config, "--ckpt_path", ckpt, "--episodes", "3"])
    cloned = _refused(bc_main, ["--config", config, "--teacher", ckpt, "--out", str(tmp_path / "bc.ckpt"),
                                "--num_envs", "8"])
    assert evaluated.startswith("error: " + says.format(n=3, last=2)), evaluated
    assert cloned.startswith("error: " + says.format(n=8, last=7)), cloned
    assert list(tmp_path.iterdir()) == []
