"""Round 8 of the bad-input corpus (scripts/bad_inputs_round8.py): its --quick subset (one case per
class of input the round found unclean on the code before its fixes), and a unit test per class:
a memory refusal that blamed hidden_sizes for an rnn_hidden or an action space; Ctrl-C and SIGTERM
without an `error:` line; Lightning refusing a callback setting with a traceback; Lightning
settings out of range accepted; a torch_threads count that crashes OpenMP; a
callback state a checkpoint cannot hold; a strategy's observe / plan of the wrong arity; a task
world dropping its parts or drawing next_task twice; a world's device that is no device or not its
tensors'; an external world's observation nested differently or complex; a checkpoint naming an
ancient Lightning or holding another sampler's state; init_from NaN weights; evaluate / bc / plot
arguments out of range, non-UTF-8 configs, allocations too large, mathtext titles and patterns
that search the whole disk; an ActionSpec with a negative category count; an exception whose
`__str__` fails; a named package error (a dead collector process) under a traceback; a
one-process run whose main thread is stuck for good."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.corpus_check import assert_quick_subset_clean

ROOT = Path(__file__).resolve().parents[1]


def test_round8_quick_subset_is_clean() -> None:
    assert_quick_subset_clean("bad_inputs_round8.py", min_cases=15)


def test_memory_refusal_names_the_field_that_makes_the_policy_large() -> None:
    from parlightning.envs.base import ActionSpec
    from parlightning.errors import ConfigError
    from parlightning.ppo.module import PPOModule
    from parlightning.runtime.preflight import check_policy_memory

    cpu = torch.device("cpu")
    gru = PPOModule(hidden_sizes=[16], policy="gru", rnn_hidden=200000)
    with pytest.raises(ConfigError, match=r"^model\.rnn_hidden: 200000"):
        check_policy_memory(gru, {"observation_shape": (4,), "action_spec": ActionSpec("discrete", nvec=(3,))}, cpu)
    mlp = PPOModule(hidden_sizes=[16])
    with pytest.raises(ConfigError, match=r"action_spec has 1,000,000,000 action categories"):
        check_policy_memory(mlp, {"observation_shape": (4,), "action_spec": ActionSpec("discrete", nvec=(10**9,))}, cpu)
    wide = PPOModule(hidden_sizes=[200000, 200000])
    with pytest.raises(ConfigError, match=r"^model\.hidden_sizes"):
        check_policy_memory(wide, {"observation_shape": (4,), "action_spec": ActionSpec("discrete", nvec=(3,))}, cpu)


def test_keyboard_interrupt_after_lightnings_graceful_stop_is_recognised() -> None:
    from parlightning.cli.fit import _interrupted

    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            sys.exit(1)  # what Lightning's _call_and_handle_interrupt does
    except SystemExit as err:
        exit_ = err
    assert _interrupted(exit_, SimpleNamespace(interrupted=True))
    assert not _interrupted(SystemExit(1), SimpleNamespace(interrupted=True))
    assert not _interrupted(exit_, SimpleNamespace(interrupted=False))
    src = (ROOT / "parlightning" / "cli" / "fit.py").read_text()
    assert 'print(f"error: SIGTERM: stopped{kept}"' in src


def test_package_runtime_errors_and_lightning_refusals_are_one_line() -> None:
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    from parlightning.cli.fit import _start_error
    from parlightning.runtime.processes import ProcessDied

    died = ProcessDied.__new__(ProcessDied)
    RuntimeError.__init__(died, "the collector process (pid 7) died (exit code -9)")
    assert _start_error(died) == "the collector process (pid 7) died (exit code -9)"
    line = _start_error(MisconfigurationException("Cannot use `LearningRateMonitor` callback with `Trainer` that has no logger."))
    assert line is not None and line.startswith("trainer: Cannot use `LearningRateMonitor`")
    assert _start_error(RuntimeError("a bug")) is None  # a plain RuntimeError keeps its traceback


def test_trainer_settings_lightning_does_not_check() -> None:
    from parlightning.errors import ConfigError
    from parlightning.runtime.preflight import _check_trainer_bounds

    for trainer, field in (({"num_sanity_val_steps": -2}, "num_sanity_val_steps"), ({"val_check_interval": 0}, "val_check_interval"),
                           ({"callbacks": [{"class_path": "lightning.pytorch.callbacks.EarlyStopping",
                                            "init_args": {"monitor": "x", "patience": -1}}]}, "patience")):
        with pytest.raises(ConfigError, match=field):
            _check_trainer_bounds(trainer)
    _check_trainer_bounds({"num_sanity_val_steps": -1, "val_check_interval": 1.0,
                           "callbacks": [{"class_path": "lightning.pytorch.callbacks.EarlyStopping", "init_args": {"patience": 0}}]})


def test_a_callback_state_a_checkpoint_cannot_hold_is_refused() -> None:
    import lightning

    from parlightning.callbacks import StrategyPlanner
    from parlightning.cli.fit import check_callbacks
    from parlightning.distribution.strategies import ClusterParallel, DataParallel
    from parlightning.errors import ConfigError

    class Lambda(lightning.Callback):
        def state_dict(self):
            return {"f": lambda: 1}

    with pytest.raises(ConfigError, match=r"trainer\.callbacks: .*Lambda\.state_dict"):
        check_callbacks([Lambda()])
    check_callbacks([StrategyPlanner(DataParallel()), StrategyPlanner(ClusterParallel()), lightning.Callback()])  # the last planner is in force


def test_strategy_plan_and_observe_arity() -> None:
    from parlightning.distribution.planning import checked_strategy
    from parlightning.errors import ConfigError

    class ObserveOne:
        name = "o"

        def plan(self, n_workers, round_index, keys):
            return []

        def observe(self, unit):
            pass

    class PlanTwo:
        name = "p"

        def plan(self, n_workers, round_index):
            return []

    with pytest.raises(ConfigError, match=r"ObserveOne\.observe does not take \(unit, task_id, score\)"):
        checked_strategy(ObserveOne())
    with pytest.raises(ConfigError, match=r"PlanTwo\.plan does not take"):
        checked_strategy(PlanTwo())


def _probe_world(device_attr: str):
    from parlightning.envs.base import ActionSpec, BatchedEnv, StepResult

    class World(BatchedEnv):
        def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0):
            self.num_envs, self.device = num_envs, device_attr
            self.observation_shape, self.action_spec = (2,), ActionSpec("discrete", nvec=(2,))

        def reset(self, *, seed=None, task_index=None):
            return torch.zeros(self.num_envs, 2)

        def step(self, action, next_task=None):
            z = torch.zeros(self.num_envs, dtype=torch.bool)
            return StepResult(torch.zeros(self.num_envs, 2), torch.zeros(self.num_envs), z, z, torch.zeros(self.num_envs, 2))

    return World


def test_world_device_must_be_a_device_and_its_tensors() -> None:
    from parlightning.errors import ConfigError
    from parlightning.runtime.preflight import check_env

    with pytest.raises(ConfigError, match=r"World\.device is 'gpu', not a torch device"):
        check_env(_probe_world("gpu")(2), 2, 0)
    with pytest.raises(ConfigError, match=r"World\.device says cuda:0 but its reset returned tensors on cpu"):
        check_env(_probe_world("cuda:0")(2), 2, 0)
    check_env(_probe_world("cpu")(2), 2, 0)


def test_external_observation_must_have_the_declared_shape_and_be_real() -> None:
    from parlightning.envs.external import ExternalBatchedEnv, ExternalWorldError

    env = ExternalBatchedEnv.__new__(ExternalBatchedEnv)
    env.observation_shape = (3,)
    env._fail = lambda i, method, why: ExternalWorldError(f"actor {i} {method}: {why}")
    assert env._obs_array([np.zeros(3), [1, 2, 3]]).shape == (2, 3)
    assert env._obs_array([torch.ones(3, requires_grad=True)] * 2).dtype == np.float32
    for bad in ([[1.0, 2.0, 3.0]], np.ones(3, dtype=np.complex64), "abc"):
        with pytest.raises(ExternalWorldError, match="observation"):
            env._obs_array([np.zeros(3), bad])
    env.observation_shape = (2, 2)
    assert env._obs_array([np.zeros(4), np.zeros((2, 2))]).shape == (2, 2, 2)  # flat or shaped
    env.observation_shape = (1,)
    assert env._obs_array([0.5, 1.0]).shape == (2, 1)  # a one-number observation may be a scalar


def test_checkpoint_lightning_version_and_init_from_nan(tmp_path: Path) -> None:
    from parlightning.errors import ConfigError
    from parlightning.ppo.module import load_policy_weights
    from parlightning.runtime.checkpoint import _check_lightning_version

    with pytest.raises(ConfigError, match="Lightning '0.1.0'"):
        _check_lightning_version("x.ckpt", {"pytorch-lightning_version": "0.1.0"})
    import lightning

    _check_lightning_version("x.ckpt", {"pytorch-lightning_version": lightning.__version__})
    policy = torch.nn.Linear(2, 2)
    path = tmp_path / "nan.ckpt"
    torch.save({"state_dict": {"policy.weight": torch.full((2, 2), float("nan")), "policy.bias": torch.zeros(2)}}, path)
    with pytest.raises(ConfigError, match="non-finite policy weights"):
        load_policy_weights(policy, str(path))


def test_sampler_state_of_another_sampler_is_one_line() -> None:
    from parlightning.collection.collector import Collector
    from parlightning.distribution.samplers import DifficultyWeighted
    from parlightning.errors import ConfigError

    collector = Collector.__new__(Collector)
    collector.sampler = DifficultyWeighted()
    with pytest.raises(ConfigError, match=r"data\.sampler: the checkpoint's sampler state does not fit"):
        collector.load_sampler_state({"sampler": {"cursor": 3}})


def test_evaluate_and_bc_arguments(tmp_path: Path) -> None:
    from parlightning.cli.arg_types import bank_seed
    from parlightning.cli.evaluate import env_spec
    from parlightning.errors import ConfigError, out_of_memory

    with pytest.raises(argparse.ArgumentTypeError):
        bank_seed("99999999999999999999")
    with pytest.raises(argparse.ArgumentTypeError):
        bank_seed("-1")
    assert bank_seed("1234") == 1234
    binary = tmp_path / "c.yaml"
    binary.write_bytes(b"PK\x03\x04\x80\x81\x82")
    with pytest.raises(ConfigError, match="not UTF-8"):
        env_spec([str(binary)])
    assert out_of_memory(RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory"))
    assert out_of_memory(MemoryError()) and not out_of_memory(RuntimeError("shape mismatch"))


def test_plot_refuses_broad_patterns_bad_titles_and_huge_grids(tmp_path: Path) -> None:
    from parlightning.cli import plot
    from parlightning.errors import ConfigError

    for i in range(30):
        (tmp_path / f"d{i}").mkdir()
    with pytest.raises(ConfigError, match="more than 10 files and folders"):
        plot.find_runs(str(tmp_path), limit=10)
    (tmp_path / "run" / "events.out.tfevents.1.h").mkdir(parents=True)  # a folder named like an event file
    assert plot.find_runs(str(tmp_path / "run")) == []
    with pytest.raises(ConfigError, match="--title"):
        plot._check_title("$\\frac{1}{$")
    plot._check_title("cost in $ per run")


def test_action_spec_entries_and_environment_value() -> None:
    from parlightning.envs.base import ActionSpec
    from parlightning.errors import ConfigError
    from parlightning.runtime.preflight import check_environment

    with pytest.raises(ValueError, match="nvec"):
        ActionSpec("multi_discrete", nvec=(3, -1))
    with pytest.raises(ValueError, match="shape"):
        ActionSpec("continuous", shape=(2.5,))
    assert ActionSpec("discrete", nvec=(0,)).nvec == (0,)  # no action at all: the preflight probe names the world
    assert ActionSpec("multi_discrete", nvec=(np.int64(2), 3)).nvec == (2, 3)
    with pytest.raises(ConfigError, match="PARLIGHTNING_UNCHECKED_CHECKPOINTS"):
        check_environment({"devices": 1}, {"PARLIGHTNING_UNCHECKED_CHECKPOINTS": "maybe"})
    check_environment({"devices": 1}, {"PARLIGHTNING_UNCHECKED_CHECKPOINTS": "1"})


def test_an_exception_whose_str_fails_is_still_reported() -> None:
    from parlightning.errors import error_text

    class Bad(Exception):
        def __str__(self):
            raise RuntimeError("no")

    assert "Bad.__str__ raised RuntimeError" in error_text(Bad())


def test_a_stuck_main_thread_ends_a_one_process_run(tmp_path: Path) -> None:
    """The stall watch also runs without DDP: a main thread stuck for good (here a lock taken twice)
    ends the process with one line naming where, instead of hanging."""
    code = textwrap.dedent("""
        import threading
        from types import SimpleNamespace
        from parlightning.runtime.rank_watch import RankWatch
        watch = RankWatch(stall_timeout=8)  # longer than the 6 s after which a silent ticker means "paused"
        watch.setup(SimpleNamespace(world_size=1, global_rank=0), None, "fit")
        lock = threading.Lock()
        lock.acquire()
        lock.acquire()
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "made no progress for 8 s" in lines[0], proc.stderr[-2000:]
