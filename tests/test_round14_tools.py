"""Round 14's leftovers (scripts/bad_inputs_round14.py found them): a YAML merge key carrying a typo, a
world's scripted_action without the generator parameter, plot's --out without a suffix, a command with
several outputs whose second write fails (bc, plot, evaluate), the chat server's CLI and constructor
arguments, and a user's subclass that never defines the method its package base leaves to it
(`Schedule.value`). Each is one `error:` line naming the field and the fix, and nothing left behind."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

import pytest

from parlightning.envs.swarm import SwarmEnv
from parlightning.errors import ConfigError
from parlightning.parl.reward import Schedule

from script_inprocess import run_in_process

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
SWARM = str(ROOT / "configs" / "swarm.yaml")


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _one_error_line(exit_: pytest.ExceptionInfo) -> str:
    line = str(exit_.value.code)
    assert line.startswith("error: ") and "\n" not in line, line
    return line


# ------------------------------------------------------------------------------- YAML merge keys
def _yaml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return str(path)


def test_a_yaml_merge_key_is_merged_and_its_keys_checked(tmp_path):
    from parlightning.runtime.preflight import read_yaml_file

    assert read_yaml_file(_yaml(tmp_path, "model:\n  <<: {lr: 0.001, clip_coeff: 0.2}\n")) == {
        "model": {"lr": 0.001, "clip_coeff": 0.2}}
    merged = read_yaml_file(_yaml(tmp_path, "base: &b {lr: 1, ent_coef: 2}\nmodel:\n  <<: *b\n  lr: 3\n"))
    assert merged["model"] == {"lr": 3, "ent_coef": 2}  # the mapping's own key wins, as YAML says
    assert read_yaml_file(_yaml(tmp_path, "model:\n  <<: [{lr: 1}, {ent_coef: 2}]\n")) == {
        "model": {"lr": 1, "ent_coef": 2}}
    with pytest.raises(ConfigError, match=r"key 'lr' appears twice \(lines 2 and 2\)"):  # inside the merged mapping
        read_yaml_file(_yaml(tmp_path, "model:\n  <<: {lr: 0.001, lr: 0.2}\n"))
    with pytest.raises(ConfigError, match=r"line 2: the merge key << merges a mapping into itself"):
        read_yaml_file(_yaml(tmp_path, "a: &a\n  <<: *a\n"))


def test_a_typo_carried_by_a_merge_key_is_named_by_fit(tmp_path):
    from parlightning.cli.fit import main as fit_main

    config = _yaml(tmp_path, "model:\n  <<: {lr: 0.001, clip_coeff: 0.2}\n")
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(SystemExit) as exit_:
        fit_main(["--config", SWARM, "--config", config, "--trainer.default_root_dir", str(root),
                  "--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false"])
    line = _one_error_line(exit_)
    assert line.startswith("error: model.clip_coeff: model has no option 'clip_coeff'; check the spelling"), line
    assert _files(root) == []


# ------------------------------------------------------------------------------- scripted_action's generator
class NoGeneratorSwarm(SwarmEnv):
    """A user's world whose scripted policy takes no generator."""

    def scripted_action(self, name, obs):
        return super().scripted_action(name, obs)


class RequiredGeneratorSwarm(SwarmEnv):
    """A user's world whose scripted policy requires the generator (no default): the documented call."""

    def scripted_action(self, name, obs, generator):
        return super().scripted_action(name, obs, generator)


def _world_config(tmp_path: Path, cls: type) -> str:
    return _yaml(tmp_path, f"data:\n  env:\n    class_path: {cls.__module__}.{cls.__qualname__}\n")


def test_a_scripted_action_without_the_generator_parameter_is_one_line(tmp_path, monkeypatch):
    from parlightning.cli.evaluate import main as evaluate_main

    monkeypatch.syspath_prepend(str(TESTS))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(SystemExit) as exit_:
        evaluate_main(["--config", SWARM, "--config", _world_config(tmp_path, NoGeneratorSwarm), "--policy", "random",
                       "--episodes", "1", "--json", str(out / "r.json")])
    line = _one_error_line(exit_)
    assert line == ("error: data.env: NoGeneratorSwarm.scripted_action does not take (name, obs, generator): it is "
                    "defined as scripted_action(self, name, obs); the package (evaluate --policy, bc --teacher) calls "
                    "it as scripted_action(name, obs, generator): define scripted_action(self, name, obs, "
                    "generator=None) (drawing any random action from generator, so --seed repeats it)"), line
    assert _files(out) == []


def test_evaluates_baselines_call_scripted_action_with_a_generator_too(tmp_path, monkeypatch):
    """A world whose generator has no default evaluates: the serial baseline is called as documented."""
    from parlightning.cli.evaluate import main as evaluate_main

    monkeypatch.syspath_prepend(str(TESTS))
    result = evaluate_main(["--config", SWARM, "--config", _world_config(tmp_path, RequiredGeneratorSwarm), "--policy",
                            "random", "--episodes", "1"])
    assert result["policy"] == "random" and result["serial_success_rate"] == 0.25


# ------------------------------------------------------------------------------- plot --out without a suffix
def _run(folder: Path) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    for step, value in ((64, 0.1), (128, 0.3), (192, 0.5)):
        writer.add_scalar("charts/episodic_return", value, step)
    writer.close()
    return folder


def test_plot_out_without_a_suffix_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    from parlightning.cli.plot import main as plot_main

    run = _run(tmp_path / "run0")
    monkeypatch.chdir(tmp_path)
    before = _files(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        plot_main([str(run), "--out", "curves"])
    assert _one_error_line(exit_) == ("error: --out: 'curves' has no suffix, and the suffix picks the image format "
                                      "(matplotlib would write 'curves.png', not 'curves'); name the image with its "
                                      "format, e.g. 'curves.png'")
    assert _files(tmp_path) == before


def test_written_whole_removes_a_file_its_writer_named_with_a_suffix(tmp_path):
    from parlightning.cli.outputs import written_whole

    with pytest.raises(FileNotFoundError):
        with written_whole(str(tmp_path / "curves")) as tmp:
            Path(tmp + ".png").write_bytes(b"\x89PNG")  # what savefig does with a name without a suffix
    assert _files(tmp_path) == []


# ------------------------------------------------------------------------------- several outputs: all or none
def _enospc(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_outputs_together_writes_all_or_none(tmp_path):
    from parlightning.cli.outputs import outputs_together, written_whole

    kept = tmp_path / "a.txt"
    kept.write_text("before")
    with pytest.raises(OSError):
        with outputs_together():
            with written_whole(str(kept)) as tmp:
                Path(tmp).write_text("new a")
            with written_whole(str(tmp_path / "b.txt")) as tmp:
                Path(tmp).write_text("half")
                _enospc()
    assert _files(tmp_path) == ["a.txt"] and kept.read_text() == "before"  # the file that was there: unchanged
    with outputs_together():
        for name in ("a.txt", "b.txt", "a.txt"):  # a path written twice: the last write
            with written_whole(str(tmp_path / name)) as tmp:
                Path(tmp).write_text(f"new {name}")
        assert _files(tmp_path) == [".partial-a.txt", ".partial-b.txt", "a.txt"]  # in place only at the end
    assert _files(tmp_path) == ["a.txt", "b.txt"] and kept.read_text() == "new a.txt"


def _disk_full_under(partial: Path) -> None:
    """The output's partial file is a link to /dev/full: its write fails with ENOSPC, as on a full disk."""
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    partial.symlink_to("/dev/full")


def test_bc_json_failing_leaves_no_checkpoint(tmp_path, monkeypatch):
    from parlightning.cli.bc import main as bc_main

    monkeypatch.chdir(tmp_path)
    _disk_full_under(tmp_path / ".partial-r.json")
    with pytest.raises(SystemExit) as exit_:
        bc_main(["--config", "swarm", "--teacher", "serial", "--out", "b.ckpt", "--rounds", "2", "--num_envs", "8",
                 "--epochs", "1", "--json", "r.json"])
    line = _one_error_line(exit_)
    assert line.startswith("error: --json: writing 'r.json' failed (No space left on device; ") and line.endswith(
        "free some space or write it elsewhere; nothing was written (--out and --json: all or none)"), line
    assert _files(tmp_path) == []  # no b.ckpt, no partial file


def test_plot_csv_failing_leaves_no_image(tmp_path, monkeypatch):
    from parlightning.cli.plot import main as plot_main

    run = _run(tmp_path / "run0")
    monkeypatch.chdir(tmp_path)
    before = _files(tmp_path)
    _disk_full_under(tmp_path / ".partial-c.csv")
    with pytest.raises(SystemExit) as exit_:
        plot_main([str(run), "--out", "p.png", "--csv", "c.csv"])
    line = _one_error_line(exit_)
    assert line.startswith("error: --csv: writing 'c.csv' failed (No space left on device; ") and line.endswith(
        "nothing was written (--out and --csv: all or none)"), line
    assert _files(tmp_path) == before  # no p.png, no partial file


def test_evaluate_json_failing_leaves_no_trace(tmp_path, monkeypatch):
    from parlightning.cli.evaluate import main as evaluate_main

    monkeypatch.chdir(tmp_path)
    _disk_full_under(tmp_path / ".partial-r.json")  # --json is written after --trace
    with pytest.raises(SystemExit) as exit_:
        evaluate_main(["--config", "swarm", "--policy", "serial", "--episodes", "1", "--trace", "t.jsonl", "--json",
                       "r.json"])
    line = _one_error_line(exit_)
    assert line.startswith("error: --json: writing 'r.json' failed (No space left on device; ") and line.endswith(
        "nothing was written (--json and --trace: all or none)"), line
    assert _files(tmp_path) == []


# ------------------------------------------------------------------------------- the chat server
CHAT = ROOT / "parlightning" / "subagents" / "chat_server.py"


@pytest.mark.parametrize("args, says", [
    (["--port", "70000"], "argument --port: must be a port in 1..65535, or 0 for a free one (got 70000)"),
    (["--port", "-1"], "argument --port: must be a port in 1..65535, or 0 for a free one (got -1)"),
    (["--latency-sigma", "-1"], "argument --latency-sigma: must be a number in [0, 10] (got -1)"),
    (["--latency", "-0.5"], "argument --latency: must be a finite number >= 0 (got -0.5)"),
    (["--seed", "x"], "argument --seed: must be a seed in 0..4294967295 (got 'x')"),
])  # (values the old server accepted, such as --latency nan, would serve forever: not run here)
def test_the_chat_servers_arguments_are_checked(args, says):
    from parlightning.subagents.chat_server import main

    code, err = run_in_process(main, CHAT, args)
    errors = [ln for ln in err.splitlines() if "error:" in ln]
    assert code == 2 and len(errors) == 1 and errors[0].endswith(says), err
    assert "Traceback" not in err


def test_the_chat_server_on_a_taken_port_is_one_line():
    from parlightning.subagents.chat_server import main

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        code, err = run_in_process(main, CHAT, ["--port", str(port)])
    finally:
        holder.close()
    assert code == 1 and err.startswith(f"error: --port: cannot listen on 127.0.0.1:{port} (") and err.count(
        "error:") == 1, err
    assert "pass --port 0 for a free port" in err and "Traceback" not in err


@pytest.mark.parametrize("kwargs, says", [
    ({"latency_sigma": -1.0}, r"^LocalChatServer\.latency_sigma: must lie in \[0, 10\], got -1"),
    ({"latency": -0.5}, r"^LocalChatServer\.latency: must be >= 0 \(a finite number\), got -0\.5"),
    ({"port": 70000}, r"^LocalChatServer\.port: must be an integer in \[0, 65535\], got 70000"),
    ({"seed": -1}, r"^LocalChatServer\.seed: must be an integer in \[0, 4294967295\], got -1"),
    ({"backlog": 0}, r"^LocalChatServer\.backlog: must be a positive integer, got 0"),
])
def test_the_chat_servers_constructor_names_a_bad_argument(kwargs, says):
    from parlightning.subagents.chat_server import LocalChatServer

    with pytest.raises(ConfigError, match=says):
        LocalChatServer(**kwargs)


# ------------------------------------------------------------------------------- methods left to subclasses
class ScheduleNoValue(Schedule):
    """Subclasses Schedule but never defines value."""

    def __init__(self, level: float = 0.1):
        self.level = level


class ScheduleWithValue(ScheduleNoValue):
    def value(self, position):
        return self.level


LAMBDA = ("data:\n  reward:\n    class_path: parlightning.parl.reward.PARLReward\n    init_args:\n"
          "      max_subagents: 128\n      lambda1: {{class_path: {cls}}}\n")


@pytest.mark.parametrize("cls, says", [
    (f"{__name__}.ScheduleNoValue",
     f"error: data.reward.lambda1: {__name__}.ScheduleNoValue never defines value, which its base "
     "parlightning.parl.reward.Schedule leaves to subclasses (it raises NotImplementedError): define "
     "value(self, position) in it"),
    ("parlightning.parl.reward.Schedule",
     "error: data.reward.lambda1: parlightning.parl.reward.Schedule is a base class: its value is left to subclasses "
     "(it raises NotImplementedError); name a class that defines value(self, position)"),
])
def test_a_schedule_without_value_is_refused_before_anything_is_written(tmp_path, monkeypatch, cls, says):
    from parlightning.cli.fit import main as fit_main

    monkeypatch.syspath_prepend(str(TESTS))
    config = _yaml(tmp_path, LAMBDA.format(cls=cls))
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(SystemExit) as exit_:
        fit_main(["--config", SWARM, "--config", config, "--trainer.default_root_dir", str(root),
                  "--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false"])
    assert _one_error_line(exit_) == says
    assert _files(root) == []


def test_undefined_method_error_reads_the_whole_mro():
    from parlightning.distribution.samplers import DifficultyWeighted
    from parlightning.runtime.subclass_init import undefined_method_error

    assert undefined_method_error("f", ScheduleWithValue) is None  # defined below the class named
    assert undefined_method_error("f", DifficultyWeighted) is None  # the package's own: every hook defined

    class Weightless(DifficultyWeighted.__mro__[1]):  # the learning samplers' base, without _weights
        pass

    line = undefined_method_error("data.sampler", Weightless)
    assert line is not None and line.startswith("data.sampler: ") and "never defines _weights" in line
    assert "define _weights(self, shard) in it" in line
