"""Round 18's classes (`scripts/bad_inputs_round18.py`, measured before these fixes): a string (or a
numpy dtype) where a torch.dtype is expected; an observation shape with a zero or negative size; a
discrete action spec without dimensions; a random generator on another device than the policy; a
checkpoint whose saved hyper-parameters its module refuses, rebuilt by export, evaluate, bc or
load_policy; a trainer path given as a URL whose filesystem package is missing; a full disk under a
logger's folder; two loggers writing one folder. Each is one line naming the field and the fix."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from parlightning.envs.base import ActionSpec
from parlightning.errors import ArgumentError, ConfigError

ROOT = Path(__file__).resolve().parents[1]
SWARM = str(ROOT / "configs" / "swarm.yaml")
TINY = ["--data.num_envs", "8", "--data.num_steps", "8", "--trainer.max_epochs", "1",
        "--trainer.enable_model_summary", "false", "--trainer.enable_progress_bar", "false"]
SPEC = ActionSpec("discrete", nvec=(3,))


def _run(args: list[str], cwd: Path, timeout: float = 180) -> tuple[int, str]:
    """A program of the package in a subprocess: (exit code, stderr)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    return done.returncode, done.stderr


def _one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


# ---------------------------------------------------------------------------------- a torch.dtype argument
@pytest.mark.parametrize("dtype, says", [
    ("int64", r"got the string 'int64': pass torch\.int64"),
    ("torch.float32", r"got the string 'torch\.float32': pass torch\.float32"),
    ("long-ish", r"must be a torch\.dtype \(e\.g\. torch\.long .*got the string 'long-ish'$"),
    (np.dtype("int32"), r"pass torch\.int32"),
    (int, r"pass torch\.int64"),
    (None, r"must be a torch\.dtype .*got None"),
    (torch.complex64, r"must be an integer or a floating-point torch\.dtype .*got torch\.complex64"),
    (torch.bool, r"must be an integer or a floating-point torch\.dtype .*got torch\.bool"),
])
def test_a_dtype_argument_given_anything_but_a_torch_dtype_is_named(dtype, says):
    from parlightning.buffer import RolloutBuffer

    with pytest.raises(ArgumentError, match=r"^RolloutBuffer\(action_dtype\): .*" + says):
        RolloutBuffer(4, 2, (3,), (1,), torch.device("cpu"), action_dtype=dtype)
    buffer = RolloutBuffer(4, 2, (3,), (2,), torch.device("cpu"), action_dtype=torch.float32)
    assert buffer.actions.dtype == torch.float32


def test_every_dtype_argument_is_checked_alike():
    from parlightning.distribution.counters import AgreedCounters
    from parlightning.method_args import checked

    with pytest.raises(ArgumentError, match=r"^AgreedCounters\.zeros\(dtype\): .*got the string 'int64': pass torch\.int64"):
        AgreedCounters.zeros(3, dtype="int64")
    assert AgreedCounters.zeros(3, dtype=torch.long).total().dtype == torch.long

    @checked
    def cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:  # an annotation the checker reads
        return x.to(dtype)

    with pytest.raises(ArgumentError, match=r"^cast\(dtype\): must be a torch\.dtype .*pass torch\.float16"):
        cast(torch.zeros(2), "float16")
    assert cast(torch.zeros(2), torch.float16).dtype == torch.float16


# ---------------------------------------------------------------------------------- an observation shape
def _policies():
    from parlightning.policies.actor_critic import ActorCritic
    from parlightning.policies.recurrent import RecurrentActorCritic
    from parlightning.policies.slots import SlotsActorCritic

    return [ActorCritic, RecurrentActorCritic, SlotsActorCritic]


@pytest.mark.parametrize("shape", [(0, 6), (4, 0), (-3,), (), 4, (2.5,), torch.Size([3, 0])])
@pytest.mark.parametrize("index", [0, 1, 2])
def test_every_policy_refuses_an_observation_shape_without_features(shape, index):
    cls = _policies()[index]
    spec = ActionSpec("multi_discrete", nvec=(3,) * 5) if cls.__name__.startswith("Slots") else SPEC
    with pytest.raises(ArgumentError, match=rf"^{cls.__name__}\(observation_shape\): must be a non-empty tuple of "
                                            r"positive ints .*e\.g\. \(4,\)"):
        cls(shape, spec)
    assert cls((6, 4), spec) is not None  # a real shape still builds


def test_the_other_public_observation_shapes_refuse_a_zero():
    from parlightning.cli.export import export_policy
    from parlightning.envs.normalize import RunningMeanStd
    from parlightning.inference import Policy
    from parlightning.policies.actor_critic import ActorCritic

    net = ActorCritic((4,), SPEC)
    with pytest.raises(ArgumentError, match=r"^Policy\(observation_shape\): must be a non-empty tuple of positive ints"):
        Policy(net, observation_shape=(0, 4))
    with pytest.raises(ArgumentError, match=r"^export_policy\(observation_shape\): must be a non-empty tuple"):
        export_policy(net, (4, 0), "p.pt2")
    with pytest.raises(ArgumentError, match=r"^RunningMeanStd\(shape\): must be a tuple of sizes >= 1"):
        RunningMeanStd((0,), torch.device("cpu"))
    assert RunningMeanStd((), torch.device("cpu")).mean.shape == ()  # a scalar's statistics (returns)


# ---------------------------------------------------------------------------------- an action spec
@pytest.mark.parametrize("kind, example", [("discrete", r"nvec=\(3,\)"), ("multi_discrete", r"nvec=\(3, 3\)")])
def test_a_discrete_action_spec_without_dimensions_is_refused(kind, example):
    with pytest.raises(ConfigError, match=rf"^ActionSpec\.nvec: a {kind} action needs at least one action dimension, "
                                          rf"got nvec=\(\); .*ActionSpec\('{kind}', {example}\)"):
        ActionSpec(kind, nvec=())
    with pytest.raises(ConfigError, match=r"^ActionSpec\.nvec"):
        ActionSpec(kind, nvec=[])
    assert ActionSpec("continuous").shape == ()  # still filled in later (the probe names the world)


# ---------------------------------------------------------------------------------- a generator's device
def test_predict_refuses_a_generator_on_another_device_than_the_policy():
    from parlightning.inference import Policy
    from parlightning.policies.actor_critic import ActorCritic

    on_meta = Policy(ActorCritic((4,), SPEC).to("meta"))
    with pytest.raises(ArgumentError, match=r"^Policy\.predict\(generator\): must be a torch\.Generator on the "
                                            r"Policy's device meta, or None, got a generator on cpu"):
        on_meta.predict(torch.zeros(2, 4), deterministic=False, generator=torch.Generator())
    policy = Policy(ActorCritic((4,), SPEC))
    action = policy.predict(torch.zeros(2, 4), deterministic=False, generator=torch.Generator().manual_seed(0))
    assert action.shape == (2,)


def test_a_generator_that_cannot_say_its_device_is_named():
    from parlightning.method_args import generator_fault

    class Unreadable(torch.Generator):  # torch.Generator(device='meta') where torch builds one: .device raises
        @property
        def device(self):
            raise RuntimeError("META device type not an accelerator.")

    owner = SimpleNamespace(device=torch.device("cpu"))
    generator_fault("Policy.predict(generator)", torch.Generator(), owner)  # on the owner's device: accepted
    with pytest.raises(ArgumentError, match=r"^Policy\.predict\(generator\): must be a torch\.Generator on the "
                                            r"SimpleNamespace's device cpu \(e\.g\. torch\.Generator\(device='cpu'\)"
                                            r"\.manual_seed\(0\)\), or None, got a generator on a device that cannot "
                                            r"draw random numbers \(meta\)"):
        generator_fault("Policy.predict(generator)", Unreadable(), owner)


# ---------------------------------------------------------------------------------- saved hyper-parameters
def _edited(ckpt: str, folder: Path, **hp) -> str:
    from parlightning.runtime.checkpoint import stamp_checkpoint

    ck = torch.load(ckpt, weights_only=True)
    ck["hyper_parameters"].update(hp)
    path = folder / "c.ckpt"
    torch.save(stamp_checkpoint(ck), path)
    return str(path)


@pytest.mark.parametrize("name, value", [("activation", "swish2"), ("hidden_sizes", [64, 0]), ("lr", -1.0),
                                         ("policy", "transformer"), ("fused_adam", "yes")])
def test_every_door_that_rebuilds_a_policy_names_a_refused_saved_hyper_parameter(ckpt, tmp_path, name, value):
    from parlightning.cli import evaluate, export
    from parlightning.envs.swarm import SwarmEnv
    from parlightning.inference import load_policy

    path = _edited(ckpt, tmp_path, **{name: value})
    with pytest.raises(ConfigError, match=rf"^--ckpt_path: '{path}': hyper_parameters\.{name}: .*the checkpoint was "
                                          "edited or written by other code"):
        export.load_policy(path)
    with pytest.raises(ConfigError, match=rf"^--ckpt_path: '{path}': hyper_parameters\.{name}: "):
        evaluate.load_policy(path, SwarmEnv(num_envs=2))
    with pytest.raises(ConfigError, match=rf"^--teacher: '{path}': hyper_parameters\.{name}: "):
        __import__("parlightning.cli.bc", fromlist=["x"]).teacher_for(path, SwarmEnv(num_envs=2))
    with pytest.raises(ConfigError, match=rf"^load_policy\(path\): '{path}': hyper_parameters\.{name}: "):
        load_policy(path)
    assert export.load_policy(ckpt)[1] == (13, 6)  # the unedited file still loads everywhere
    assert load_policy(ckpt).observation_shape == (13, 6)


def test_export_of_a_refused_saved_hyper_parameter_is_one_line_and_writes_nothing(ckpt, tmp_path):
    _edited(ckpt, tmp_path, activation="swish2")
    code, stderr = _run(["parlightning.export", "--ckpt_path", "c.ckpt", "--out", "p.pt2"], tmp_path)
    line = _one_error_line(stderr)
    assert code != 0 and line.startswith("error: --ckpt_path: 'c.ckpt': hyper_parameters.activation: unknown 'swish2'")
    assert not (tmp_path / "p.pt2").exists()


# ---------------------------------------------------------------------------------- remote paths
def test_a_url_whose_filesystem_package_is_missing_names_the_field_and_the_package():
    from parlightning.cli.run_folders import remote_path_error, url_problem

    if _installed("gcsfs"):
        pytest.skip("gcsfs is installed here")
    config = {"trainer": {"default_root_dir": "runs", "logger": [
        {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": "csv"}},
        {"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": {"save_dir": "gs://bucket/tb"}}]}}
    line = remote_path_error(config)
    assert line.startswith("trainer.logger[1].init_args.save_dir: 'gs://bucket/tb' is a gs:// URL, whose filesystem "
                           "needs a package that is not installed"), line
    assert "pip install gcsfs, or use a local folder" in line, line
    assert url_problem("trainer.default_root_dir", "nosuchfs://x").startswith(
        "trainer.default_root_dir: 'nosuchfs://x' names the filesystem protocol 'nosuchfs', which fsspec does not know")
    assert "can only read" in url_problem("trainer.default_root_dir", "https://example.org/runs")
    assert url_problem("trainer.default_root_dir", "file:///tmp/runs") is None
    assert url_problem("trainer.default_root_dir", "runs/a") is None
    assert url_problem("trainer.default_root_dir", "memory://runs") is None  # fsspec's own: installed


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@pytest.mark.skipif(_installed("s3fs"), reason="s3fs is installed here")
def test_fit_with_a_default_root_dir_on_s3_without_s3fs_is_one_line_naming_it(tmp_path):
    code, stderr = _run(["parlightning.fit", "--config", SWARM, *TINY, "--trainer.default_root_dir", "s3://bucket/runs"],
                        tmp_path)
    line = _one_error_line(stderr)
    assert code != 0 and line.startswith("error: trainer.default_root_dir: 's3://bucket/runs' is a s3:// URL"), line
    assert "pip install s3fs" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------- a full disk
def test_a_full_disk_without_a_file_name_names_the_fullest_folder_of_the_run(tmp_path, monkeypatch):
    from parlightning.cli import fit, run_folders

    places = [("trainer.default_root_dir", str(tmp_path)), ("trainer.logger.init_args.save_dir", str(tmp_path / "csv"))]
    free = {str(tmp_path): 10 * 2**30, str(tmp_path / "csv"): 0}
    monkeypatch.setattr(run_folders, "_free", lambda folder: free[folder])
    line = fit._environment_error(OSError(errno.ENOSPC, "No space left on device"), places)
    assert line == (f"writing into trainer.logger.init_args.save_dir {str(tmp_path / 'csv')!r} failed: the disk is full, "
                    "0.0 B free there; free space there, or point trainer.logger.init_args.save_dir at a folder on a "
                    "disk with room"), line
    named = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "csv" / "v0" / "metrics.csv"))
    line = fit._environment_error(named, places)
    assert line.startswith(f"writing {tmp_path / 'csv' / 'v0' / 'metrics.csv'} (trainer.logger.init_args.save_dir"), line
    assert "the disk is full" in fit._environment_error(OSError(errno.ENOSPC, "No space left on device"))  # no places


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare (a tmpfs)")
def test_fit_with_a_csv_logger_on_a_full_tmpfs_names_its_save_dir(tmp_path):
    mount = "mkdir -p mnt && mount -t tmpfs -o size=8k tmpfs mnt && head -c 8192 /dev/zero > mnt/fill 2>/dev/null; true"
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", mount], cwd=tmp_path, capture_output=True)
    if probe.returncode != 0:
        pytest.skip("no private mount namespace here")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    argv = " ".join([sys.executable, "-m", "parlightning.fit", "--config", SWARM, *TINY, "--trainer.logger",
                     "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", "mnt/csv"])
    done = subprocess.run(["unshare", "-rm", "sh", "-c", f"{mount} && exec {argv}"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    line = _one_error_line(done.stderr)
    assert done.returncode != 0 and "trainer.logger.init_args.save_dir 'mnt/csv'" in line, line
    assert "the disk is full" in line and "free there" in line, line


# ---------------------------------------------------------------------------------- loggers in one folder
def test_loggers_whose_folders_coincide_are_refused_and_default_versions_are_not(tmp_path):
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    from parlightning.cli.run_folders import check_logger_folders

    same = str(tmp_path / "same")

    def trainer(*loggers):
        return SimpleNamespace(loggers=list(loggers))

    with pytest.raises(ConfigError, match=r"^trainer\.logger: trainer\.logger\[0\] \(CSVLogger\) and trainer\.logger\[1\] "
                                          r"\(CSVLogger\) write into one folder, .*same/lightning_logs/version_0.* give each "
                                          r"its own name or version \(e\.g\. trainer\.logger\[1\]\.init_args\.version: 1\)"):
        check_logger_folders(trainer(CSVLogger(same, version=0), CSVLogger(same, version=0)))
    with pytest.raises(ConfigError, match=r"trainer\.logger\[0\] \(TensorBoardLogger\) and trainer\.logger\[2\] \(CSVLogger\)"):
        check_logger_folders(trainer(TensorBoardLogger(same, version="run"), CSVLogger(same, name="x"),
                                     CSVLogger(same, version="run")))
    check_logger_folders(trainer(CSVLogger(same, version=0), CSVLogger(same, version=1)))  # distinct versions
    check_logger_folders(trainer(CSVLogger(same, version=0), CSVLogger(same, name="other", version=0)))  # names
    unversioned = [CSVLogger(same), TensorBoardLogger(same)]  # Lightning's default versioning
    check_logger_folders(trainer(*unversioned))
    assert [logger._version for logger in unversioned] == [None, None]  # left to choose its version_N itself
    assert not (tmp_path / "same").exists()


def test_fit_with_two_loggers_in_one_folder_is_one_line_and_writes_nothing(tmp_path):
    args = ["parlightning.fit", "--config", SWARM, *TINY]
    for _ in range(2):
        args += ["--trainer.logger+", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", "same",
                 "--trainer.logger.version", "0"]
    code, stderr = _run(args, tmp_path)
    line = _one_error_line(stderr)
    assert code != 0 and line.startswith("error: trainer.logger: trainer.logger[0] (CSVLogger) and trainer.logger[1] "
                                         "(CSVLogger) write into one folder, 'same/lightning_logs/version_0'"), line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("index", [0, 1, 2])
@pytest.mark.parametrize("arg, value, says", [
    ("hidden_sizes", (64, 0), r"must be (a list of|one or more) positive ints .* got \(64, 0\)"),
    ("hidden_sizes", "64", r"must be (a list of|one or more) positive ints"),
    ("hidden_sizes", (2.5,), r"must be (a list of|one or more) positive ints"),
    ("activation", "softmax", r"unknown 'softmax'; choose one of \['gelu', 'relu', 'silu', 'tanh'\]"),
])
def test_every_policy_names_a_refused_layer_setting_with_a_package_error(index, arg, value, says):
    cls = _policies()[index]
    spec = ActionSpec("multi_discrete", nvec=(3,) * 5) if cls.__name__.startswith("Slots") else SPEC
    owner = "model" if cls.__name__.startswith("Slots") and arg == "activation" else cls.__name__  # slots: the config's
    with pytest.raises(ConfigError, match=rf"^{owner}[.(]{arg}\)?: {says}"):
        cls((6, 4), spec, **{arg: value})
