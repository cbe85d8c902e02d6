"""Round 11's leftovers and some of round 12's classes (scripts/bad_inputs_round11.py / round12.py found
them): a two-method sampler's pick outside its shard, a sampler's signals() that are not numbers, a proxy world
answering None, a world parsing sys.argv, SubagentResult fields, a family listed twice, the processes a failed
run started, a SIGTERM to a process group with a collector process, invisible characters in YAML keys and tags
that cannot read their value, trainer settings that contradict each other or the devices."""

import re
from pathlib import Path

import pytest
import torch

from parlightning.errors import ReportedError


class TwoMethod:
    def __init__(self, answer):
        self.answer = answer

    def pick(self, keys, round_index):
        return self.answer(keys)

    def record(self, task_id, score):
        pass


def test_a_two_method_sampler_must_pick_from_its_own_shard_not_the_bank():
    from parlightning.distribution.samplers import as_batched

    bank = [f"t{i}" for i in range(6)]
    inside = as_batched(TwoMethod(lambda keys: keys[-1]), queue_length=4)
    inside.bind(bank, torch.device("cpu"))
    shard = torch.tensor([0, 1, 2])
    picked = inside.pick_batch(shard, 0, torch.ones(4, dtype=torch.bool))
    assert picked.tolist() == [2, 2, 2, 2]
    outside = as_batched(TwoMethod(lambda keys: "t5"), queue_length=4)  # in the bank, not in the shard
    outside.bind(bank, torch.device("cpu"))
    with pytest.raises(ReportedError, match=r"^data.sampler: TwoMethod.pick returned 't5', which is not in the shard "
                                            r"it was given \(3 of the bank's 6 tasks\)"):
        outside.pick_batch(shard, 0, torch.ones(4, dtype=torch.bool))


@pytest.mark.parametrize("signals, says", [
    ({"mood": "curious"}, r"'mood': 'curious' \(str\)"),
    ({"flag": True}, r"'flag': True \(bool\)"),
    ({"spread": torch.ones(3)}, r"'spread': a float32 tensor \[3\]"),
    ({3: 1.0}, r"the key 3"),
    ([("a", 1.0)], r"a list, not a dict"),
])
def test_a_samplers_signals_must_be_named_numbers(signals, says):
    from parlightning.collection.step_loop import SamplerPicks, SamplerLock

    class Signals(TwoMethod):
        def signals(self):
            return signals

    picks = SamplerPicks(Signals(None), torch.Generator(), SamplerLock())
    with pytest.raises(ReportedError, match=rf"^data.sampler: Signals.signals\(\) returned {says}; it must return a dict"):
        picks.signals()


def test_a_samplers_signals_may_be_numbers_or_one_element_tensors():
    from parlightning.collection.step_loop import SamplerPicks, SamplerLock

    class Signals(TwoMethod):
        def signals(self):
            return {"share": 0.5, "count": 3, "spread": torch.tensor([0.25], dtype=torch.float64)}

    got = SamplerPicks(Signals(None), torch.Generator(), SamplerLock()).signals()
    assert {k: (v.dtype, v.shape, v.item()) for k, v in got.items()} == {
        "share": (torch.float32, torch.Size([]), 0.5), "count": (torch.float32, torch.Size([]), 3.0),
        "spread": (torch.float32, torch.Size([]), 0.25)}


def test_a_getattr_proxy_answering_none_is_a_world_without_the_optional_attributes():
    from parlightning.envs.base import BatchedEnv, solved_threshold_of
    from parlightning.envs.cartpole import CartPoleEnv
    from parlightning.runtime.preflight import check_env

    class Proxy(BatchedEnv):
        def __init__(self, num_envs, device="cpu", seed=0):
            self._inner = CartPoleEnv(num_envs, device, seed)

        def __getattr__(self, name):
            if name.startswith("__") or name == "_inner":
                raise AttributeError(name)
            return getattr(self._inner, name, None)

        def reset(self, *, seed=None, task_index=None):
            return self._inner.reset(seed=seed)

        def step(self, action, next_task=None):
            return self._inner.step(action)

    world = Proxy(2)
    assert world.solved_threshold is None and world.task_ids is None and world.action_masks is None
    check_env(world, 2, 0)  # the probe's whole contract
    assert solved_threshold_of(world) == 1.0
    world._inner.solved_threshold = 0.75
    assert solved_threshold_of(world) == 0.75


def test_a_world_parsing_sys_argv_is_one_line_with_argparses_message_and_stderr_of_a_good_one_is_kept(
        monkeypatch, capsys):
    import argparse
    import sys

    from parlightning.envs.cartpole import CartPoleEnv
    from parlightning.errors import ConfigError
    from parlightning.runtime.preflight import build_env

    class ParsesArgv(CartPoleEnv):
        def __init__(self, num_envs, device="cpu", seed=0):
            parser = argparse.ArgumentParser(prog="mysim")
            parser.add_argument("--level", type=int, default=1)
            parser.parse_args()
            super().__init__(num_envs, device, seed)

    monkeypatch.setattr(sys, "argv", ["fit", "--config", "c.yaml"])
    with pytest.raises(ConfigError) as err:
        build_env(ParsesArgv, 2, "cpu", 0)
    assert re.match(r"data.env: \S*ParsesArgv\(num_envs=2\) exited \(SystemExit: 2\) after printing 'mysim: error: "
                    r"unrecognized arguments: --config c.yaml'; a world that parses sys.argv", str(err.value))
    assert "unrecognized" not in capsys.readouterr().err  # folded into the one line, not printed beside it

    class Talks(CartPoleEnv):
        def __init__(self, num_envs, device="cpu", seed=0):
            print("loading the simulator", file=sys.stderr)
            super().__init__(num_envs, device, seed)

    assert build_env(Talks, 2, "cpu", 0).num_envs == 2
    assert capsys.readouterr().err == "loading the simulator\n"


@pytest.mark.parametrize("args, says", [
    ((True, 2, -1.5), r"SubagentResult.seconds: must be a finite number >= 0 .*got float -1.5"),
    ((True, 2, float("nan")), r"SubagentResult.seconds: must be a finite number >= 0"),
    ((True, -1, 1.0), r"SubagentResult.steps: must be an int >= 0 .*got int -1"),
    ((True, 2.5, 1.0), r"SubagentResult.steps: must be an int >= 0 .*got float 2.5"),
    (("yes", 2, 1.0), r"SubagentResult.success: must be a bool, got str 'yes'"),
])
def test_a_subagent_result_refuses_what_would_corrupt_steps_and_timings(args, says):
    from parlightning.subagents import SubagentResult
    from parlightning.subagents.pool import normalize

    with pytest.raises(TypeError, match=says):
        SubagentResult(*args)
    assert normalize(SubagentResult(True, 2, 0.0), 1.0) == SubagentResult(True, 2, 0.0)


def test_an_orchestration_world_refuses_a_family_listed_twice():
    from parlightning.subagents import SimulatedPool
    from parlightning.subagents.world import PoolOrchestrationWorld

    with pytest.raises(ValueError, match=r"families lists 'solo' twice; name each family once"):
        PoolOrchestrationWorld(SimulatedPool(), families=["solo", "solo", "fanout"])
    assert len(PoolOrchestrationWorld(SimulatedPool(), families=["solo", "fanout"], tasks_per_family=3).bank) == 6


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _runs_a_program(path):
    import subprocess

    child = subprocess.Popen(["sleep", "300"])
    with open(path, "w") as f:
        f.write(str(child.pid))
    child.wait()  # stuck, as a world's step waiting on a program that never ends


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/stat"), reason="reads /proc (Linux)")
def test_the_processes_a_run_started_end_with_it_and_a_stopped_child_takes_its_programs_along(tmp_path):
    import multiprocessing as mp
    import subprocess
    import time

    from parlightning.runtime.processes import clock_ticks, end_processes, started_processes, stop

    began = clock_ticks()
    shell = subprocess.Popen(["sh", "-c", "sleep 300 & wait"])
    for _ in range(1500):  # the shell's child appears (polled: no race, a loaded machine only takes longer)
        below = started_processes(began, root=shell.pid)
        if below:
            break
        time.sleep(0.02)
    ours = started_processes(began)  # (other processes this test process started since `began` may be there too)
    found = [p for p in ours if p[0] == shell.pid] + below
    pids = {pid for pid, _ in found}
    assert len(below) == 1 and shell.pid in pids and below[0] in ours, (below, ours)
    assert started_processes(clock_ticks() + 10_000) == []  # none started after "later"
    end_processes(found)
    shell.wait(timeout=60)
    for _ in range(600):  # SIGKILL is delivered asynchronously: poll until both are gone (bounded)
        if not any(_alive(pid) for pid in pids):
            break
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)

    marker = tmp_path / "pid"
    proc = mp.get_context("fork").Process(target=_runs_a_program, args=(str(marker),))
    proc.start()
    for _ in range(1500):
        if marker.exists() and marker.read_text():
            break
        time.sleep(0.02)
    program = int(marker.read_text())
    assert _alive(program)
    stop([proc], [], grace=0.1)  # the child does not exit when asked: terminated, with the program it started
    for _ in range(600):
        if not _alive(program):
            break
        time.sleep(0.05)
    assert not proc.is_alive() and not _alive(program)


def test_a_sigterm_to_the_process_group_with_a_collector_process_is_named_as_sigterm(tmp_path):
    """The group's SIGTERM also ends the collector process; the run's one line is the signal (exit 143),
    not the collector's death."""
    import os
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "waiting.py").write_text(
        "import os, time\nimport lightning.pytorch as pl\nfrom parlightning.envs.swarm import SwarmEnv\n"
        "class SlowSwarm(SwarmEnv):\n"  # the learner waits on the collector's rounds most of the time
        "    def step(self, action, next_task=None):\n"
        "        time.sleep(0.05)\n"
        "        return super().step(action, next_task)\n"
        "class Waiting(pl.Callback):\n"
        "    def on_train_epoch_end(self, trainer, pl_module):\n"
        "        if not os.path.exists('ready'):\n"
        "            open('ready.tmp', 'w').close()\n"
        "            os.rename('ready.tmp', 'ready')\n")
    cmd = [sys.executable, "-m", "parlightning.fit", "--config", "swarm", "--data.num_envs", "8", "--data.num_steps",
           "8", "--data.max_policy_lag", "1", "--data.collect_in", "process", "--trainer.max_epochs", "100000",
           "--data.env", "waiting.SlowSwarm", "--trainer.callbacks+=waiting.Waiting"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(__file__).resolve().parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        while not (tmp_path / "ready").exists():  # the first iteration is done: the collector runs
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    errors = [line for line in err.splitlines() if "error:" in line]
    assert proc.returncode == 143 and len(errors) == 1 and errors[0].startswith("error: SIGTERM"), err[-2000:]
    assert "Traceback" not in err


@pytest.mark.parametrize("text, says", [
    (b"model:\n  lr: 0.001\n\xef\xbb\xbfdata:\n  num_envs: 8\n",
     r"line 3: the key '\\ufeffdata' holds an invisible character \(U\+FEFF, ZERO WIDTH NO-BREAK SPACE\); delete it"),
    ("model:\n  lr\u200b: 0.001\n".encode(), r"line 2: the key 'lr\\u200b' holds an invisible character \(U\+200B"),
    (b"model:\n  lr: !!int 3e-4\n", r"line 2: '3e-4' cannot be read as !!int \(invalid literal for int\(\) with base "
                                    r"10: '3e-4'\); drop the tag or write a value of its type"),
    (b"data:\n  num_envs: !!float eight\n", r"line 2: 'eight' cannot be read as !!float"),
])
def test_yaml_keys_with_invisible_characters_and_tags_that_cannot_read_their_value_name_the_file_and_line(
        tmp_path, text, says):
    from parlightning.errors import ConfigError
    from parlightning.runtime.preflight import read_yaml_file

    path = tmp_path / "c.yaml"
    path.write_bytes(text)
    with pytest.raises(ConfigError, match=rf"^--config {re.escape(str(path))}: {says}"):
        read_yaml_file(str(path))
    path.write_bytes(b"\xef\xbb\xbfmodel:\n  lr: !!float 3e-4\n")  # a byte-order mark at the start, a tag that reads
    assert read_yaml_file(str(path)) == {"model": {"lr": 3e-4}}


@pytest.mark.parametrize("trainer, says", [
    ({"max_steps": 4, "min_steps": 100}, r"trainer.min_steps: 100 is more than trainer.max_steps=4"),
    ({"strategy": "single_device", "devices": "2"}, r"trainer.strategy: single_device runs on one device, but "
                                                    r"trainer.devices asks for 2"),
    ({"strategy": "single_device", "devices": [0, 1]}, r"trainer.strategy: single_device .* asks for 2"),
    ({"accelerator": "cpu", "strategy": {"class_path": "lightning.pytorch.strategies.DDPStrategy",
                                         "init_args": {"process_group_backend": "nccl"}}},
     r"trainer.strategy.init_args.process_group_backend: nccl needs CUDA GPUs"),
])
def test_trainer_settings_that_contradict_each_other_or_the_devices_are_refused(trainer, says):
    from parlightning.errors import ConfigError
    from parlightning.runtime.preflight import _check_trainer_bounds

    with pytest.raises(ConfigError, match="^" + says):
        _check_trainer_bounds(trainer)
    _check_trainer_bounds({"max_steps": 100, "min_steps": 4, "strategy": "single_device", "devices": 1})
    _check_trainer_bounds({"accelerator": "cpu", "strategy": {"class_path": "lightning.pytorch.strategies.DDPStrategy",
                                                              "init_args": {"process_group_backend": "gloo"}}})
