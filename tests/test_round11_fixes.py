"""Round 11's fixes, one test per class (the corpus, scripts/bad_inputs_round11.py, found them):
a user's own ConfigError named with its world, a signal during a world call is not the world's
error, a complex YAML key, a deleted working folder, `async def` sampler / strategy / callback
methods, HTTP pools' api_key / extra_body / proxy, a TMPDIR too long for worker sockets, and
SIGHUP ending a one-process fit with one line."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from lightning.pytorch.utilities.exceptions import SIGTERMException

from parlightning.errors import ConfigError, named_by_package

ROOT = Path(__file__).resolve().parents[1]


def test_the_packages_own_error_is_named_by_it_but_a_users_is_not(tmp_path):
    from parlightning.runtime.preflight import _call_world, read_yaml_file

    def users_world_step():  # this file is outside the package: the user's code
        raise ConfigError("scenario file has no entry for level 3")

    with pytest.raises(ConfigError) as err:
        _call_world("MyWorld", "step", users_world_step)
    assert str(err.value).startswith("data.env: MyWorld.step raised ConfigError: scenario file has no entry")

    def reads_a_missing_file():  # the package's own error, raised inside parlightning: passed on as it is
        read_yaml_file(str(tmp_path / "missing.yaml"))

    with pytest.raises(ConfigError) as own:
        _call_world("MyWorld", "step", reads_a_missing_file)
    assert named_by_package(own.value) and str(own.value).startswith("--config: ")
    assert not named_by_package(ValueError("not the package's class"))


@pytest.mark.parametrize("signal_error", [SIGTERMException(), type("Stop", (Exception,), {"signum": 2})()])
def test_a_signal_during_a_world_call_is_reraised_not_blamed_on_the_world(signal_error):
    from parlightning.collection.step_loop import StepLoop

    loop = StepLoop.__new__(StepLoop)
    with pytest.raises(type(signal_error)):
        loop._world_error("step", signal_error, 3)


def test_a_complex_yaml_key_names_its_line(tmp_path):
    from parlightning.runtime.preflight import read_yaml_file

    path = tmp_path / "c.yaml"
    path.write_text("model:\n  ? [lr, hidden]\n  : 0.001\n")
    with pytest.raises(ConfigError, match=r"line 2: a mapping key is a list \(\['lr', 'hidden'\]\); every key is a name"):
        read_yaml_file(str(path))


def test_a_deleted_working_folder_is_one_line(tmp_path):
    from parlightning.cli.entry import check_working_folder

    here = os.getcwd()
    gone = tmp_path / "gone"
    gone.mkdir()
    os.chdir(gone)
    try:
        gone.rmdir()
        with pytest.raises(SystemExit, match="the working folder no longer exists"):
            check_working_folder()
    finally:
        os.chdir(here)


def test_async_methods_of_a_users_sampler_strategy_or_callback_are_refused():
    from parlightning.runtime.preflight import check_sync_methods

    class AsyncRecord:
        async def record(self, tasks, outcomes):
            return None

    class AsyncGen:
        async def observe(self, rows):
            yield rows

    with pytest.raises(ConfigError, match=r"data.sampler: .*AsyncRecord.record is `async def`"):
        check_sync_methods("data.sampler", AsyncRecord())
    with pytest.raises(ConfigError, match=r"AsyncGen.observe is `async def`"):
        check_sync_methods("trainer.callbacks.StrategyPlanner.strategy", AsyncGen())
    check_sync_methods("data.sampler", object())  # nothing async: nothing said


def test_http_pools_refuse_what_every_request_would_fail_on(monkeypatch):
    from parlightning.subagents.async_http import AsyncHTTPPool
    from parlightning.subagents.http import HTTPPool, _through_proxy

    with pytest.raises(ValueError, match="api_key holds '…', which is not ASCII"):
        HTTPPool("http://127.0.0.1:9/v1", api_key="sk-proj-\u2026", probe=False)
    import datetime

    with pytest.raises(ValueError, match=r"extra_body cannot be sent as JSON"):
        AsyncHTTPPool("http://127.0.0.1:9/v1", extra_body={"seed": datetime.date(2024, 1, 1)}, probe=False)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert "sent through the proxy http://127.0.0.1:9 (HTTP_PROXY" in _through_proxy("http://10.1.2.3:8000/v1/x")
    monkeypatch.setenv("NO_PROXY", "10.1.2.3")
    assert _through_proxy("http://10.1.2.3:8000/v1/x") == ""


def test_a_tmpdir_too_long_for_worker_sockets_names_tmpdir():
    from parlightning.runtime.preflight import build_env

    def world(num_envs, device, seed):
        raise OSError("AF_UNIX path too long")

    with pytest.raises(ConfigError, match=r"^TMPDIR: the temporary folder .* is too long a path"):
        build_env(world, 2, "cpu", 0)


def test_sighup_ends_a_one_process_fit_with_one_line(tmp_path):
    (tmp_path / "hup_world.py").write_text(textwrap.dedent("""
        import os, signal
        from parlightning.envs.swarm import SwarmEnv

        class HangsUp(SwarmEnv):
            calls = 0

            def step(self, action, next_task=None):
                if self.num_envs > 2:
                    HangsUp.calls += 1
                    if HangsUp.calls == 3:  # the terminal closing, mid-rollout
                        os.kill(os.getpid(), signal.SIGHUP)
                return super().step(action, next_task)
    """))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    run = subprocess.run([sys.executable, "-m", "parlightning.fit", "--config", "swarm", "--data.env",
                          "hup_world.HangsUp", "--data.num_envs", "8", "--data.num_steps", "8",
                          "--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                         # as from a terminal: a suite started under nohup passes SIGHUP down ignored, and an
                         # ignored SIGHUP is kept ignored (a nohup'd run means it)
                         preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    assert run.returncode == 128 + signal.SIGHUP and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert [ln for ln in run.stderr.splitlines() if ln.startswith("error:")] == [
        "error: SIGHUP: stopped by a signal (from a scheduler, a shell, or user code such as a world) before the "
        "run's first rollout; nothing was kept"]  # mid-way through the first rollout: no checkpoint ever existed
    assert not (tmp_path / "lightning_logs").exists()  # and the run's new folder went with the refused start


class _ExternalWorld:
    observation_shape = (4,)
    tasks = ["easy-0", "hard-0"]

    def __init__(self, seed=0, actor=0):
        from parlightning.envs.base import ActionSpec

        self.action_spec, self.t = ActionSpec("discrete", nvec=(2,)), 0

    def reset(self, task):
        self.t = 0
        return [0.0, 0.0, 0.0, 0.0]

    def step(self, action):
        self.t += 1
        done = self.t >= 3
        return [float(self.t), 0.0, 0.0, 1.0], 0.1, done, False, ({"outcome": 1.0} if done else None)


class _ClosesWithSysExit(_ExternalWorld):
    def close(self):
        sys.exit(3)


def test_a_world_close_calling_sys_exit_is_a_close_error_not_the_end_of_the_trainer():
    import warnings

    from parlightning.envs.external import ExternalBatchedEnv
    from parlightning.errors import WorldCloseWarning

    env = ExternalBatchedEnv(2, world=_ClosesWithSysExit, step_timeout=5.0)
    env.reset(seed=0)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        env.close()  # before: SystemExit(3) left the trainer without a word
    closes = [str(w.message) for w in seen if issubclass(w.category, WorldCloseWarning)]
    assert len(closes) == 1 and "_ClosesWithSysExit.close() raised SystemExit: 3" in closes[0], closes


@pytest.mark.parametrize("script,args,says", [
    ("bench_throughput", ["--from-json", "{tmp}/r.json"], "error: --from-json: {tmp}/r.json is not a file this script wrote"),
    ("parl_study", ["--quick", "--arms", "perf_only,perf_only", "--out", "{tmp}/o"],
     "error: --arms: perf_only given twice; list each arm once"),
    ("sampler_study", ["--report-only", "--out", "{tmp}/missing"], "error: --report-only: no finished run in"),
])
def test_scripts_refuse_arguments_that_do_not_fit_before_writing(tmp_path, monkeypatch, script, args, says):
    import importlib

    (tmp_path / "r.json").write_text('{"hello": 1}\n')
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    program = importlib.import_module(script)
    with pytest.raises(SystemExit) as stop:
        program.main([a.format(tmp=tmp_path) for a in args])
    assert str(stop.value.code).startswith(says.format(tmp=tmp_path)), stop.value.code
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]  # nothing written


def test_policy_refuses_what_is_not_a_policy_network_and_the_world_an_unknown_task():
    import torch

    from parlightning.inference import Policy
    from parlightning.subagents import SimulatedPool
    from parlightning.subagents.world import PoolOrchestrationWorld

    for network in (None, torch.nn.Linear(4, 3)):
        with pytest.raises(ConfigError, match=r"^Policy\(network\): (None|Linear) is not a parlightning policy network"):
            Policy(network)
    world = PoolOrchestrationWorld(SimulatedPool())
    with pytest.raises(ConfigError, match=r"PoolOrchestrationWorld.reset\(task\): 'nope-0' is not one of its tasks"):
        world.reset("nope-0")
    assert len(world.reset(world.tasks[0])) == len(world.observation_shape) * 0 + len(world.reset(None))


def test_state_without_load_state_dict_is_refused_before_the_run():
    from parlightning.runtime.preflight import check_state

    class SavesOnly:
        def state_dict(self):
            return {"seen": 3}

    with pytest.raises(ConfigError, match=r"^data.sampler: SavesOnly defines state_dict but no load_state_dict"):
        check_state("data.sampler", "SavesOnly", SavesOnly())
