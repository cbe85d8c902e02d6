"""Round 15's classes (`scripts/bad_inputs_round15.py`, measured before these fixes): a checkpoint whose
values (not only its tensors) were edited after the save, named by the part that changed; environment
variables a library refuses (TORCH_LOGS, TQDM_*, MPLBACKEND, GLOO_SOCKET_IFNAME, TORCH_DISTRIBUTED_DEBUG);
the CPU-time limit's SIGXCPU; a library's writer thread failing on a full disk; a thread a world left
running after its error; DDP settings that cannot run (a backend this torch lacks, a zero timeout);
Lightning callback counts and a profiler folder that is a file; evaluate's config read as fit reads it;
a YAML set; a sampler on a world without tasks; a tensor subclass from a world; a fractional subagent
step count; a sampler signal that is not finite; a callback freezing the whole policy; the Python API's
buffer, recurrent state, stored actions, importance weights, critical steps and duplicate plan keys;
`experiment.py --axis` naming a key twice; a rank failing in its end-of-fit hooks."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch

from parlightning.errors import ArgumentError, ConfigError

ROOT = Path(__file__).resolve().parents[1]
SWARM = str(ROOT / "configs" / "swarm.yaml")
CARTPOLE = str(ROOT / "configs" / "cartpole.yaml")
TINY = ["--data.num_envs", "8", "--data.num_steps", "8", "--trainer.max_epochs", "1",
        "--trainer.enable_model_summary", "false", "--trainer.enable_progress_bar", "false"]


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_LOGS", "TQDM_", "MPLBACKEND"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**env, **extra}


# ------------------------------------------------------------------ a checkpoint's values edited after the save
def _put(ck: dict, path: list, value) -> None:
    node = ck
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value


@pytest.mark.parametrize("path, value, named", [
    (["hyper_parameters", "hidden_sizes"], [32], "hyper_parameters.hidden_sizes.0 changed"),
    (["hyper_parameters"], KeyError, "hyper_parameters.lr was removed"),
    (["pytorch-lightning_version"], KeyError, "pytorch-lightning_version was removed"),
    (["RolloutDataModule", "env_steps"], "many", "RolloutDataModule.env_steps changed"),
    (["policy_spaces", "action_spec", "nvec"], [7] * 11, "policy_spaces.action_spec.nvec"),
])
def test_a_value_edited_after_the_save_is_refused_naming_the_part(ckpt, tmp_path, path, value, named):
    from parlightning.runtime.checkpoint import load_checkpoint_file

    ck = torch.load(ckpt, weights_only=True)
    _put(ck, path, value)
    torch.save(ck, tmp_path / "e.ckpt")
    with pytest.raises(ConfigError) as err:
        load_checkpoint_file(str(tmp_path / "e.ckpt"))
    text = str(err.value)
    assert "was changed after it was saved: " in text and named in text, text
    assert "\n" not in text


def test_the_loaders_refuse_an_edit_too_and_a_restamped_file_loads(ckpt, tmp_path):
    import parlightning
    from parlightning.runtime.checkpoint import stamp_checkpoint

    ck = torch.load(ckpt, weights_only=True)
    ck["hyper_parameters"].pop("activation")  # load_policy would rebuild with the default activation
    torch.save(ck, tmp_path / "e.ckpt")
    with pytest.raises(ConfigError, match="hyper_parameters.activation was removed"):
        parlightning.load_policy(tmp_path / "e.ckpt")
    torch.save(stamp_checkpoint(torch.load(ckpt, weights_only=True)), tmp_path / "same.ckpt")
    assert parlightning.load_policy(tmp_path / "same.ckpt") is not None


def test_flipped_tensor_bytes_still_read_as_corrupt(ckpt, tmp_path):
    from parlightning.runtime.checkpoint import load_checkpoint_file

    ck = torch.load(ckpt, weights_only=True)
    name = next(iter(ck["state_dict"]))
    ck["state_dict"][name] = ck["state_dict"][name] + 1.0
    torch.save(ck, tmp_path / "f.ckpt")
    with pytest.raises(ConfigError, match=r"is corrupt: its tensors do not match the checksum .*state_dict\."):
        load_checkpoint_file(str(tmp_path / "f.ckpt"))


def test_an_unchecked_checkpoint_with_a_truncated_rng_stream_is_one_line(ckpt, tmp_path, monkeypatch):
    from parlightning import fit
    from parlightning.runtime.checkpoint import CHECKSUM_KEY

    ck = torch.load(ckpt, weights_only=True)
    ck.pop(CHECKSUM_KEY)
    ck["RolloutDataModule"]["ranks"][0]["task_generator"] = torch.zeros(10, dtype=torch.uint8)
    torch.save(ck, tmp_path / "u.ckpt")
    monkeypatch.setenv("PARLIGHTNING_UNCHECKED_CHECKPOINTS", "1")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"RolloutDataModule.load_state_dict\(state\): state\['task_generator'\]"):
        fit(SWARM, [*TINY, "--trainer.max_epochs", "2", "--ckpt_path", str(tmp_path / "u.ckpt")])


# ------------------------------------------------------------------ environment variables a library refuses
def test_a_library_variable_named_in_its_error_is_one_line():
    from parlightning.runtime.launch_env import distributed_environment_error, library_environment_error

    line = library_environment_error(ValueError("could not convert string to float: 'fast'"),
                                     {"TQDM_MININTERVAL": "fast", "HOME": "/fast"})
    assert line is not None and line.startswith("TQDM_MININTERVAL='fast' in the environment"), line
    assert library_environment_error(ValueError("x 1"), {"OMP_NUM_THREADS": "1"}) is None  # a number is no evidence
    assert library_environment_error(ValueError("bad fast"), {"HOME": "fast"}) is None  # not a library's variable
    assert "must be OFF, INFO or DETAIL" in distributed_environment_error({"TORCH_DISTRIBUTED_DEBUG": "VERBOSE"})
    assert "has no 'nosuch0'" in distributed_environment_error({"GLOO_SOCKET_IFNAME": "nosuch0"})
    assert distributed_environment_error({"TORCH_DISTRIBUTED_DEBUG": "detail", "GLOO_SOCKET_IFNAME": "lo"}) is None


@pytest.mark.parametrize("name, value", [("TORCH_LOGS", "+notacomponent"), ("TQDM_MININTERVAL", "fast")])
def test_a_variable_refused_while_the_program_imports_is_one_line(tmp_path, name, value):
    done = subprocess.run([sys.executable, "-m", "parlightning.export", "--help"], cwd=tmp_path,
                          env=_env(**{name: value}), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {name}={value!r} in the environment"), done.stderr[-2000:]


# ------------------------------------------------------------------ SIGXCPU, a writer thread's full disk
def test_the_cpu_time_limits_signal_ends_the_block_with_its_own_line():
    import signal

    from parlightning.cli.stop_signals import KILLING, Signalled, stop_on_signals

    assert signal.SIGXCPU in KILLING
    with pytest.raises(Signalled) as err, stop_on_signals():
        os.kill(os.getpid(), signal.SIGXCPU)
        signal.sigtimedwait([], 0) if hasattr(signal, "sigtimedwait") else None
    assert err.value.code == 128 + signal.SIGXCPU and "CPU-time limit (`ulimit -t`" in str(err.value)


def test_a_writer_threads_full_disk_is_left_to_the_main_threads_line(monkeypatch):
    from parlightning.cli.entry import _quiet_thread_write_failures

    shown = []
    monkeypatch.setattr(threading, "excepthook", lambda args: shown.append(args.exc_value.errno))
    _quiet_thread_write_failures()
    for code in (errno.ENOSPC, errno.EACCES):
        t = threading.Thread(target=lambda c=code: (_ for _ in ()).throw(OSError(c, os.strerror(c))))
        t.start()
        t.join()
    assert shown == [errno.EACCES]  # the full disk's traceback is left out, any other error is printed


WORLD = textwrap.dedent('''
    import threading, time
    from parlightning.envs.cartpole import CartPoleEnv


    class ThreadThenRaises(CartPoleEnv):
        def step(self, action, next_task=None):
            threading.Thread(target=time.sleep, args=(600,)).start()  # not a daemon: would keep the process
            raise RuntimeError("the simulator crashed")
''')


def test_a_thread_left_running_by_a_failing_world_does_not_keep_the_program_alive(tmp_path):
    (tmp_path / "r15w.py").write_text(WORLD)
    done = subprocess.run([sys.executable, "-m", "parlightning.fit", "--config", CARTPOLE, *TINY, "--data.env",
                           "r15w.ThreadThenRaises"], cwd=tmp_path, env=_env(PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "ThreadThenRaises.step" in done.stderr and "the simulator crashed" in done.stderr, done.stderr[-2000:]


# ------------------------------------------------------------------ settings refused before anything is written
@pytest.mark.parametrize("args, says", [
    (["--trainer.strategy.process_group_backend", "mpi"], "'mpi' is not built into this torch"),
    (["--trainer.strategy.timeout", "0:00:00"], "trainer.strategy.init_args.timeout: must be a positive duration"),
])
def test_ddp_settings_that_cannot_run_are_refused(tmp_path, monkeypatch, args, says):
    from parlightning import fit

    if "mpi" in args and torch.distributed.is_mpi_available():
        pytest.skip("this torch has MPI")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=says):
        fit(SWARM, [*TINY, "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy",
                    "lightning.pytorch.strategies.DDPStrategy", *args])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, says", [
    (["--trainer.callbacks+", "lightning.pytorch.callbacks.TQDMProgressBar", "--trainer.callbacks.refresh_rate", "-1"],
     "TQDMProgressBar refresh_rate: must be >= 0, got -1"),
    (["--trainer.profiler", "lightning.pytorch.profilers.SimpleProfiler", "--trainer.profiler.dirpath", "prof"],
     "trainer.profiler (SimpleProfiler.dirpath): cannot create 'prof'"),
])
def test_lightning_pieces_that_cannot_work_are_named(tmp_path, monkeypatch, args, says):
    from parlightning import fit

    monkeypatch.chdir(tmp_path)
    (tmp_path / "prof").write_text("a file\n")
    with pytest.raises(ConfigError) as err:
        fit(SWARM, [*TINY, *args])
    assert says in str(err.value), str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prof"]


def test_a_yaml_set_is_refused_naming_its_key(tmp_path):
    from parlightning.runtime.preflight import read_yaml_file

    (tmp_path / "s.yaml").write_text("model:\n  hidden_sizes: !!set {32: null, 16: null}\n")
    with pytest.raises(ConfigError, match="line 2: hidden_sizes: a YAML !!set is not a value any setting takes"):
        read_yaml_file(str(tmp_path / "s.yaml"))


@pytest.mark.parametrize("text, says", [("data:\n  num_env: 8\n", "unknown key data.'num_env'; did you mean 'num_envs'"),
                                        ("data:\n  num_envs: 0\n", "data.num_envs: must be a positive integer, got 0")])
def test_evaluate_reads_the_data_section_as_fit_does(tmp_path, text, says):
    from parlightning.cli.evaluate import checked_config

    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(ConfigError, match=says):
        checked_config(str(tmp_path / "c.yaml"))
    for shipped in sorted((ROOT / "configs").rglob("*.yaml")):
        checked_config(str(shipped))  # every shipped config still reads


def test_a_task_sampler_on_a_world_without_tasks_is_refused_and_the_default_is_not(tmp_path, monkeypatch):
    from parlightning import fit

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="data.sampler: DifficultyWeighted picks each actor's next task from the "
                                          r"world's task bank, and \w+ has none \(no task_ids\)"):
        fit(CARTPOLE, [*TINY, "--data.sampler", "parlightning.distribution.samplers.DifficultyWeighted"])
    fit(CARTPOLE, [*TINY, "--data.sampler", "parlightning.distribution.samplers.RoundRobin"])  # swarm.yaml's default


# ------------------------------------------------------------------ values user code hands back
def test_a_tensor_subclass_from_a_world_is_named_and_a_plain_tensor_is_not():
    from parlightning.envs import contract

    class Frame(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            raise RuntimeError("not supported on a simulator frame")

    want = contract.OBS
    frame = torch.zeros(2, 3).as_subclass(Frame)
    problem = contract.tensor_problem(frame, (2, 3), want, torch.device("cpu"))
    assert problem is not None and problem.says.startswith("as a Frame (a torch.Tensor subclass"), problem
    assert contract.tensor_problem(torch.zeros(2, 3), (2, 3), want, torch.device("cpu")) is None


def test_a_fractional_step_count_and_a_sampler_signal_that_is_not_finite_are_refused():
    from parlightning.collection.step_loop import checked_signals
    from parlightning.errors import ReportedError
    from parlightning.subagents.pool import _steps

    with pytest.raises(TypeError, match="steps must be a whole number"):
        _steps(2.5)
    assert _steps(3.0) == 3 and _steps(0) == 0
    with pytest.raises(ReportedError, match="'informative_share': nan \\(not a finite number"):
        checked_signals("SignalsNaN", {"informative_share": float("nan")})
    assert float(checked_signals("S", {"picks": torch.tensor(4.0)})["picks"]) == 4.0


CALLBACK = textwrap.dedent('''
    import lightning


    class FreezesThePolicy(lightning.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            for p in pl_module.parameters():
                p.requires_grad_(False)


    class FreezesOneLayer(lightning.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            next(pl_module.parameters()).requires_grad_(False)
''')


def test_a_callback_freezing_the_whole_policy_is_named_and_one_freezing_a_layer_trains(tmp_path, monkeypatch):
    from parlightning import fit

    (tmp_path / "r15cb.py").write_text(CALLBACK)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"FreezesThePolicy.on_train_epoch_start froze every parameter of the module"):
        fit(SWARM, [*TINY, "--trainer.callbacks+", "r15cb.FreezesThePolicy"])
    fit(SWARM, [*TINY, "--trainer.callbacks+", "r15cb.FreezesOneLayer", "--trainer.default_root_dir", "ok"])


def test_the_python_apis_wrong_values_name_the_argument():
    from parlightning.buffer import RolloutBuffer
    from parlightning.distribution.strategies import DataParallel
    from parlightning.envs.base import ActionSpec
    from parlightning.parl.metrics import CriticalSteps
    from parlightning.policies.actor_critic import ActorCritic
    from parlightning.policies.recurrent import RecurrentActorCritic
    from parlightning.ppo.loss import ppo_loss

    buffer = RolloutBuffer(8, 4, (3,), (), torch.device("cpu"))
    with pytest.raises(ArgumentError, match=r"RolloutBuffer.write\(obs\): must be a tensor of shape \(4, 3\)"):
        buffer.write(0, obs=torch.zeros(4, 5))
    buffer.write(0, obs=torch.zeros(4, 3))
    recurrent = RecurrentActorCritic((4,), ActionSpec("discrete", nvec=(2,)), rnn_hidden=8)
    with pytest.raises(ArgumentError, match=r"initial_state\(num_envs\): must be an int >= 0"):
        recurrent.initial_state(-1)
    with pytest.raises(ArgumentError, match=r"act\(state\): must be the hidden state \[N, S, H\] = \[3, 1, 8\]"):
        recurrent.act(torch.zeros(3, 4), None, torch.zeros(3, 1, 5), torch.ones(3, dtype=torch.bool))
    recurrent.act(torch.zeros(3, 4), None, recurrent.initial_state(3), torch.ones(3, dtype=torch.bool))
    with pytest.raises(ArgumentError, match=r"ActorCritic.evaluate\(action\): must hold a category"):
        ActorCritic((4,), ActionSpec("discrete", nvec=(3,))).evaluate(torch.zeros(2, 4), torch.tensor([5, 0]))
    z = torch.zeros(6)
    with pytest.raises(ArgumentError, match=r"ppo_loss\(is_weight\): must be importance weights >= 0"):
        ppo_loss(z, z, z, z, z, torch.randn(6), z, is_weight=-torch.ones(6))
    ppo_loss(z, z, z, z, z, torch.randn(6), z, is_weight=torch.ones(6))
    with pytest.raises(ValueError, match=r"update_totals\(critical\): must be step counts >= 0"):
        CriticalSteps().update(critical=torch.tensor([-3.0]), serial=torch.tensor([4.0]))
    with pytest.raises(ArgumentError, match="'a-0' is there twice"):
        DataParallel().plan(2, 0, ["a-0", "a-0", "b-0"])


# ------------------------------------------------------------------ a script's repeated axis; a rank's last hook
def test_experiment_refuses_an_axis_key_given_twice(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "experiment.py"), "--quick", "--axis",
                           "model.lr=1e-3,3e-4", "--axis", "model.lr=1e-2", "--out", "o"], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.strip().startswith("error: --axis: model.lr is given twice"), done.stderr
    assert not (tmp_path / "o").exists()


OBSERVED = textwrap.dedent('''
    import json, subprocess, sys
    from types import SimpleNamespace
    from torch.distributed import TCPStore
    from parlightning.runtime.rank_watch import KEY, RankWatch

    watch = RankWatch()
    watch.store, watch.rank, watch.world_size = TCPStore("127.0.0.1", 0, 1, True), 0, 2
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(1)"])
    watch.trainer = SimpleNamespace(strategy=SimpleNamespace(launcher=SimpleNamespace(procs=[child])))
    watch.store.set(KEY, json.dumps({"rank": 1, "pid": child.pid, "code": 1, "host": "h",
                                     "cause": "trainer.callbacks: Up.on_train_end raised RuntimeError: upload failed"}))
    watch.wait_for_launched_ranks(60)
    print("returned", file=sys.stderr)
''')


def test_rank_0_waits_for_a_launched_rank_failing_in_its_last_hooks_and_ends_with_its_line(tmp_path):
    done = subprocess.run([sys.executable, "-c", OBSERVED], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith(
        "error: rank 1 (pid"), done.stderr[-2000:]
    assert "Up.on_train_end raised RuntimeError: upload failed" in done.stderr and "returned" not in done.stderr
