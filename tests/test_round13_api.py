"""Round 13's bad-input classes (scripts/bad_inputs_round13.py): each is one line naming the field and
the fix (one package exception for the Python API), nothing written. Every test here failed on the
code before its fix."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest
import torch

from parlightning.runtime.checkpoint import stamp_checkpoint

from parlightning.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SWARM = str(ROOT / "configs" / "swarm.yaml")
TINY = ["--data.num_envs", "8", "--data.num_steps", "4", "--trainer.max_epochs", "1"]


def _one_line(err: pytest.ExceptionInfo, *parts: str) -> str:
    text = str(err.value)
    assert "\n" not in text.strip(), text
    for part in parts:
        assert part in text, (part, text)
    return text


# ------------------------------------------------------------------ 1 PPOModule.load_from_checkpoint
@pytest.fixture(scope="module")
def swarm_ckpt(tmp_path_factory) -> str:
    """A real 1-iteration SwarmEnv fit's last checkpoint (Lightning's instantiator key included)."""
    from parlightning.cli.fit import main as fit_main

    out = tmp_path_factory.mktemp("fit")
    fit_main(["--config", SWARM, "--trainer.default_root_dir", str(out), "--trainer.enable_progress_bar", "false",
              "--trainer.enable_model_summary", "false", *TINY])
    return glob.glob(str(out / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"))[0]


def _edited(src: str, dst: Path, **hparams) -> str:
    ck = torch.load(src, weights_only=False, map_location="cpu")
    ck["hyper_parameters"].update(hparams)
    torch.save(stamp_checkpoint(ck), dst)  # re-stamped: the values are checked, not the edit (see below)
    return str(dst)


UNAVAILABLE = ["cuda:7", "xla", "xpu:3"] + ([] if torch.cuda.is_available() else ["cuda", "cuda:0"]) + (
    [] if torch.backends.mps.is_available() else ["mps"])


@pytest.mark.parametrize("target", UNAVAILABLE)
@pytest.mark.parametrize("form", ["str", "device", "dict", "callable"])
def test_1a_map_location_to_a_missing_device_names_it(swarm_ckpt, target, form) -> None:
    from parlightning.ppo.module import PPOModule

    location = {"str": target, "device": torch.device(target), "dict": {"cpu": target},
                "callable": lambda storage, loc: storage.to(target)}[form]
    with pytest.raises(ConfigError) as err:
        PPOModule.load_from_checkpoint(swarm_ckpt, map_location=location)
    _one_line(err, swarm_ckpt, "map_location", "map_location='cpu'")


def test_1a_map_location_to_cpu_still_loads(swarm_ckpt) -> None:
    from parlightning.ppo.module import PPOModule

    for location in ("cpu", torch.device("cpu"), {"cpu": "cpu"}, lambda storage, loc: storage):
        assert PPOModule.load_from_checkpoint(swarm_ckpt, map_location=location).policy is not None


@pytest.mark.parametrize("name, value", [
    ("lr", "fast"), ("lr", -1.0), ("lr", float("nan")), ("ent_coef", -0.5), ("hidden_sizes", [0, 64]),
    ("hidden_sizes", "64"), ("anneal_lr", "yes"), ("rnn_hidden", 2.5), ("activation", 3), ("policy", "transformer"),
    ("activation", "swish"), ("target_kl", "none"), ("clip_coef", 0),
])
def test_1b_edited_hyper_parameter_names_it_and_the_checkpoint(swarm_ckpt, tmp_path, name, value) -> None:
    from parlightning.ppo.module import PPOModule

    path = _edited(swarm_ckpt, tmp_path / "e.ckpt", **{name: value})
    with pytest.raises(ConfigError) as err:
        PPOModule.load_from_checkpoint(path)
    _one_line(err, path, f"hyper_parameters.{name}", f"load_from_checkpoint(path, {name}=...)")


def test_1b_an_override_replaces_the_edited_value(swarm_ckpt, tmp_path) -> None:
    from parlightning.ppo.module import PPOModule

    path = _edited(swarm_ckpt, tmp_path / "e.ckpt", lr="fast")
    assert PPOModule.load_from_checkpoint(path, lr=1e-3).hparams.lr == 1e-3


def test_1b_an_edit_the_checksum_did_not_see_is_refused_naming_the_setting_and_the_override(swarm_ckpt, tmp_path):
    from parlightning.ppo.module import PPOModule

    ck = torch.load(swarm_ckpt, weights_only=False, map_location="cpu")
    ck["hyper_parameters"]["lr"] = 0.5  # a valid value, edited in the file
    torch.save(ck, tmp_path / "e.ckpt")
    with pytest.raises(ConfigError) as err:
        PPOModule.load_from_checkpoint(tmp_path / "e.ckpt", lr=1e-3)
    _one_line(err, "e.ckpt", "was changed after it was saved: hyper_parameters.lr changed",
              "load_from_checkpoint(path, lr=...)")


def test_1c_subclass_argument_missing_from_the_checkpoint_names_it(swarm_ckpt) -> None:
    from parlightning.ppo.module import PPOModule

    class MyPPO(PPOModule):
        def __init__(self, extra: int, *, tag: str, **kw):
            super().__init__(**kw)
            self.extra, self.tag = extra, tag

    with pytest.raises(ConfigError) as err:
        MyPPO.load_from_checkpoint(swarm_ckpt)
    _one_line(err, swarm_ckpt, "'extra'", "MyPPO.load_from_checkpoint(path, extra=...)")
    with pytest.raises(ConfigError) as err:
        MyPPO.load_from_checkpoint(swarm_ckpt, extra=1)
    _one_line(err, swarm_ckpt, "'tag'", "tag=...")
    with pytest.raises(ConfigError) as err:
        MyPPO.load_from_checkpoint(swarm_ckpt, extra="one", tag="x")
    _one_line(err, "extra")
    loaded = MyPPO.load_from_checkpoint(swarm_ckpt, extra=1, tag="x", lr=1e-3)
    assert (loaded.extra, loaded.tag, loaded.hparams.lr) == (1, "x", 1e-3)


# ------------------------------------------------------------------ 2 distributed environment variables
BAD_DISTRIBUTED = [
    ({"LOCAL_RANK": "abc"}, "LOCAL_RANK"), ({"RANK": "-1"}, "RANK"), ({"WORLD_SIZE": "two"}, "WORLD_SIZE"),
    ({"NODE_RANK": ""}, "NODE_RANK"), ({"LOCAL_WORLD_SIZE": "0"}, "LOCAL_WORLD_SIZE"), ({"GROUP_RANK": "1.5"}, "GROUP_RANK"),
    ({"MASTER_PORT": "70000"}, "MASTER_PORT"), ({"MASTER_PORT": "http"}, "MASTER_PORT"),
    ({"RANK": "3", "WORLD_SIZE": "2"}, "RANK=3"), ({"LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"}, "LOCAL_RANK=2"),
    ({"SLURM_PROCID": "x"}, "SLURM_PROCID"), ({"SLURM_PROCID": "4", "SLURM_NTASKS": "4"}, "SLURM_PROCID=4"),
    ({"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "4"}, "LOCAL_WORLD_SIZE=4"),
]


@pytest.mark.parametrize("env, name", BAD_DISTRIBUTED)
def test_2_distributed_variable_is_one_line_naming_it(env, name) -> None:
    from parlightning.runtime.launch_env import distributed_environment_error

    line = distributed_environment_error(env)
    assert line is not None and name in line and "unset" in line and "\n" not in line, line


@pytest.mark.parametrize("env", [{}, {"LOCAL_RANK": "0"}, {"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "29500"},
                                 {"LOCAL_RANK": " 1 ", "LOCAL_WORLD_SIZE": "2", "NODE_RANK": "0", "GROUP_RANK": "0"}])
def test_2_valid_distributed_variables_pass(env) -> None:
    from parlightning.runtime.launch_env import distributed_environment_error

    assert distributed_environment_error(env) is None


def _run(args, cwd, env=None, **kw):
    import os
    import subprocess
    import sys

    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=120, **kw)


@pytest.mark.parametrize("program", ["fit", "evaluate", "bc", "export", "plot"])
@pytest.mark.parametrize("env, name", [BAD_DISTRIBUTED[0], BAD_DISTRIBUTED[6], BAD_DISTRIBUTED[8]])
def test_2_every_program_refuses_it_before_anything_is_written(tmp_path, program, env, name) -> None:
    done = _run(["-m", f"parlightning.{program}", "--config", SWARM, *(TINY if program == "fit" else [])],
                tmp_path, env)
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: ") and name in lines[0], done.stderr
    assert "Traceback" not in done.stderr and not list(tmp_path.iterdir())


# ------------------------------------------------------------------ 5 a SwarmEnv subclass over swarm.yaml's init_args
SWARM_SUB = '''from typing import Optional

from parlightning.envs.swarm import SwarmEnv


class SwarmMine(SwarmEnv):
    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0, label: str = "mine",
                 max_subagents: int = 128, subagent_budget: Optional[int] = 256, lam: float = 0.5):
        super().__init__(num_envs, device, seed, max_subagents=max_subagents, subagent_budget=subagent_budget)
        self.label = label
'''


@pytest.mark.parametrize("how", ["second-config", "command-line"])
def test_5_swarm_subclass_keeping_swarm_yaml_s_values_prints_its_config(tmp_path, how) -> None:
    (tmp_path / "mine.py").write_text(SWARM_SUB)
    (tmp_path / "c.yaml").write_text("data:\n  env:\n    class_path: mine.SwarmMine\n    init_args: {label: x}\n")
    where = ["--config", "c.yaml"] if how == "second-config" else ["--data.env", "mine.SwarmMine",
                                                                   "--data.env.label", "x"]
    done = _run(["-m", "parlightning.fit", "--config", SWARM, *where, "--print_config"], tmp_path,
                {"PYTHONPATH": f"{ROOT}:{tmp_path}"})
    assert done.returncode == 0, done.stderr
    assert "class_path: mine.SwarmMine" in done.stdout and "max_subagents: 128" in done.stdout, done.stdout


def test_5_swarm_subclass_in_a_second_config_trains(tmp_path) -> None:
    (tmp_path / "mine.py").write_text(SWARM_SUB)
    (tmp_path / "c.yaml").write_text("data:\n  env:\n    class_path: mine.SwarmMine\n    init_args: {label: x}\n")
    done = _run(["-m", "parlightning.fit", "--config", SWARM, "--config", "c.yaml", *TINY,
                 "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"], tmp_path,
                {"PYTHONPATH": f"{ROOT}:{tmp_path}"})
    assert done.returncode == 0, done.stderr
    saved = (tmp_path / "lightning_logs" / "version_0" / "config.yaml").read_text()
    assert "max_subagents: 128" in saved and "label: x" in saved, saved


def test_5_parser_subclasses_and_numpy_scalars_dump_as_plain_values() -> None:
    import numpy as np
    import yaml
    from jsonargparse.typing import NonNegativeInt, PositiveInt

    from parlightning.config_types import PositiveFinite, Seed

    tree = {"a": PositiveInt(3), "b": PositiveFinite(0.5), "c": NonNegativeInt(0), "d": Seed(7), "e": np.float32(0.5),
            "f": np.int64(4), "g": True, "h": [PositiveInt(1)]}
    assert yaml.safe_load(yaml.safe_dump(tree)) == {"a": 3, "b": 0.5, "c": 0, "d": 7, "e": 0.5, "f": 4, "g": True,
                                                    "h": [1]}
    with pytest.raises(yaml.representer.RepresenterError):  # a real object stays unrepresentable
        yaml.safe_dump({"x": object()})


# ------------------------------------------------------------------ 6 a repeated value in a script's list option
@pytest.mark.parametrize("script, args, flag, value", [
    ("world_fit.py", ["--policies", "mlp", "mlp"], "--policies", "'mlp'"),
    ("world_fit.py", ["--seeds", "0", "1", "0"], "--seeds", "0"),
    ("cartpole_check.py", ["--seeds", "0", "0"], "--seeds", "0"),
    ("recurrent_vs_mlp.py", ["--policies", "gru", "lstm", "gru"], "--policies", "'gru'"),
    ("bench_throughput.py", ["--num-envs", "256", "256"], "--num-envs", "256"),
    ("bench_lag.py", ["--lags", "0", "0"], "--lags", "0"),
    ("bench_async.py", ["--sizes", "64", "64"], "--sizes", "64"),
    ("collapse_study.py", ["--lams", "0.1,0.10"], "--lams", "0.10"),
    ("sampler_study.py", ["--arms", "round_robin,round_robin"], "--arms", "round_robin"),
])
def test_6_script_list_option_with_a_repeated_value_is_one_line(tmp_path, script, args, flag, value) -> None:
    done = _run([str(ROOT / "scripts" / script), *args], tmp_path)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and "error: argument " + flag in last and value in last, done.stderr
    assert "twice" in last or "repeats" in last
    assert "Traceback" not in done.stderr and not list(tmp_path.iterdir())


def test_6_script_parser_and_comma_list_classes() -> None:
    import argparse

    from parlightning.cli.arg_types import ScriptParser, comma_list, positive_int

    p = ScriptParser(prog="x", repeats_allowed=("widths",))
    p.add_argument("--widths", type=positive_int, nargs="+")
    p.add_argument("--sizes", type=positive_int, nargs="*", default=[8, 8])  # a default is not the user's
    assert p.parse_args(["--widths", "64", "64"]).widths == [64, 64]
    assert p.parse_args([]).sizes == [8, 8]
    assert p.parse_args(["--sizes", "1", "2"]).sizes == [1, 2]
    with pytest.raises(SystemExit):
        p.parse_args(["--sizes", "1", "2", "1"])
    with pytest.raises(argparse.ArgumentTypeError, match=r"item 3 \('1'\) repeats item 1"):
        comma_list(positive_int)("1,2,1")
    assert comma_list(positive_int, distinct=False)("1,1") == [1, 1]


# ------------------------------------------------------------------ 4 bc and evaluate hold every step's mask to fit's contract
def _mask_world(later):
    """A correct two-dimension task world whose action mask, from the third step on, is `later(n)`."""
    from parlightning.envs.base import ActionSpec, EpisodeParts, StepResult

    class MaskChanges:
        observation_shape = (4,)

        def __init__(self, num_envs: int = 8, device: str = "cpu", seed: int = 0):
            self.num_envs, self.device = num_envs, torch.device(device)
            self.action_spec = ActionSpec("multi_discrete", nvec=(3, 3))
            self.task_ids = [f"t-{i}" for i in range(4)]
            self.t = torch.zeros(num_envs, dtype=torch.long)
            self.task = torch.arange(num_envs) % 4
            self.steps = 0

        def _obs(self):
            n = self.num_envs
            return torch.stack([self.t.float(), self.task.float(), torch.ones(n), torch.zeros(n)], 1)

        def reset(self, *, seed=None, task_index=None):
            self.t = torch.zeros(self.num_envs, dtype=torch.long)
            if task_index is not None:
                self.task = torch.as_tensor(task_index, dtype=torch.long).clone()
            return self._obs()

        def action_masks(self):
            return later(self.num_envs) if self.steps >= 2 else torch.ones(self.num_envs, 6, dtype=torch.bool)

        def step(self, action, next_task=None):
            self.steps += 1
            self.t = self.t + 1
            done = self.t >= 50
            z = torch.zeros(self.num_envs)
            parts = EpisodeParts(task=self.task.clone(), outcome=z, n_subagents=z, assigned=z, completed=z,
                                 critical_steps=self.t.float(), serial_steps=self.t.float())
            return StepResult(self._obs(), z, done, torch.zeros_like(done), self._obs(), parts)

    return MaskChanges()


LATER_MASKS = {
    "none": lambda n: None,
    "float": lambda n: torch.ones(n, 6),
    "narrower": lambda n: torch.ones(n, 3, dtype=torch.bool),
    "one-dimensional": lambda n: torch.ones(n, dtype=torch.bool),
    "fewer-rows": lambda n: torch.ones(n - 1, 6, dtype=torch.bool),
    "a-list": lambda n: [[True] * 6] * n,
    "meta": lambda n: torch.ones(n, 6, dtype=torch.bool, device="meta"),
}


def _teacher(obs, mask):
    return torch.zeros(obs.shape[0], 2, dtype=torch.long)


@pytest.mark.parametrize("kind", list(LATER_MASKS))
def test_4_bc_refuses_a_mask_that_changes_mid_collection(kind) -> None:
    from parlightning.cli.bc import collect

    with pytest.raises(ConfigError) as err:
        collect(_mask_world(LATER_MASKS[kind]), _teacher, rounds=6, seed=0)
    _one_line(err, "MaskChanges.action_masks", "at step 2", "every step")


@pytest.mark.parametrize("kind", list(LATER_MASKS))
def test_4_evaluate_refuses_a_mask_that_changes_mid_episode(kind) -> None:
    from parlightning.cli.evaluate import run_episodes

    with pytest.raises(ConfigError) as err:
        run_episodes(_mask_world(LATER_MASKS[kind]), _teacher, 0, masked=True)
    _one_line(err, "MaskChanges.action_masks", "at step 2", "every step")


def test_4_a_steady_mask_still_collects() -> None:
    from parlightning.cli.bc import collect

    obs, masks, acts = collect(_mask_world(lambda n: torch.ones(n, 6, dtype=torch.bool)), _teacher, rounds=4, seed=0)
    assert obs.shape == (32, 4) and masks.shape == (32, 6) and acts.shape == (32, 2)


# ------------------------------------------------------------------ 3 a standard output that fails on write
def _run_stdout(args, cwd, stdout):
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, *args], cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=180)


STDOUT_PROGRAMS = [["-m", "parlightning.fit", "--help"], ["-m", "parlightning.evaluate", "--help"],
                   ["-m", "parlightning.bc", "--help"], ["-m", "parlightning.export", "--help"],
                   ["-m", "parlightning.plot", "--help"], [str(ROOT / "scripts" / "world_fit.py"), "--help"],
                   [str(ROOT / "scripts" / "collapse_study.py"), "--help"]]


@pytest.mark.parametrize("args", STDOUT_PROGRAMS, ids=lambda a: a[-2].rsplit("/", 1)[-1])
def test_3_stdout_on_a_full_device_is_one_line(tmp_path, args) -> None:
    with open("/dev/full", "w") as full:
        done = _run_stdout(args, tmp_path, full)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: stdout: ") and "ENOSPC" in lines[0] and "Traceback" not in done.stderr


@pytest.mark.parametrize("args", STDOUT_PROGRAMS[:2] + STDOUT_PROGRAMS[5:6], ids=lambda a: a[-2].rsplit("/", 1)[-1])
def test_3_stdout_pipe_closed_by_its_reader_ends_quietly(tmp_path, args) -> None:
    import os

    read, write = os.pipe()
    os.close(read)  # `| head -1` that has already exited
    try:
        done = _run_stdout(args, tmp_path, write)
    finally:
        os.close(write)
    assert done.returncode == 141 and done.stderr.strip() == "", done.stderr


def test_3_evaluate_keeps_its_whole_json_when_stdout_is_full(tmp_path) -> None:
    import json

    with open("/dev/full", "w") as full:
        done = _run_stdout(["-m", "parlightning.evaluate", "--config", SWARM, "--policy", "serial", "--episodes", "1",
                            "--json", "e.json"], tmp_path, full)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and lines[-1].startswith("error: stdout: ") and "Traceback" not in done.stderr
    assert json.loads((tmp_path / "e.json").read_text())["success_rate"] >= 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.json"]
