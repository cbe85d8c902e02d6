"""One checked loader for checkpoints (`runtime.checkpoint.read_torch_file`) and one for YAML
(`runtime.preflight.read_yaml_file`): a missing file, a folder, a pipe, a dangling link, a file that
is not a checkpoint, a truncated one, a read that fails and a YAML file that is not UTF-8 each give
one ConfigError naming the flag or field and the path."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch

from parlightning.errors import ConfigError
from parlightning.runtime.checkpoint import read_torch_file
from parlightning.runtime.preflight import read_yaml_file

ROOT = Path(__file__).parent.parent


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    out = {"missing": tmp_path / "missing.ckpt", "folder": tmp_path / "folder", "pipe": tmp_path / "pipe",
           "dangling": tmp_path / "dangling", "text": tmp_path / "notes.ckpt", "truncated": tmp_path / "half.ckpt",
           "latin": tmp_path / "latin.yaml"}
    out["folder"].mkdir()
    os.mkfifo(out["pipe"])
    os.symlink(tmp_path / "gone", out["dangling"])
    out["text"].write_text("just some notes\n")
    torch.save({"state_dict": {"w": torch.zeros(64)}}, tmp_path / "full.ckpt")
    raw = (tmp_path / "full.ckpt").read_bytes()
    out["truncated"].write_bytes(raw[: len(raw) // 2])
    out["latin"].write_bytes("model:\n  activation: r\xe9lu\n".encode("latin-1"))
    return out


@pytest.mark.parametrize("kind, says", [
    ("missing", "no checkpoint file at"), ("folder", "is a folder, not a file"),
    ("pipe", "is not a regular file"), ("dangling", "is a link to nothing"),
    ("text", "is not a readable checkpoint"), ("truncated", "is not a readable checkpoint (corrupt or truncated"),
])
def test_a_bad_checkpoint_path_is_one_line_naming_the_field_and_the_path(files, kind, says) -> None:
    path = str(files[kind])
    with pytest.raises(ConfigError) as err:
        read_torch_file(path, "model.init_from", "pass another")
    message = str(err.value)
    assert message.startswith("model.init_from: ") and repr(path) in message and says in message, message
    assert message.endswith("; pass another") and "\n" not in message, message


def test_a_failing_read_is_named_as_such(files, monkeypatch) -> None:
    def failing(*args, **kwargs):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(torch, "load", failing)
    with pytest.raises(ConfigError, match=r"^--ckpt_path: '.*half\.ckpt' is not a readable checkpoint \(reading it "
                                          r"failed: Input/output error\)"):
        read_torch_file(str(files["truncated"]), "--ckpt_path", "fix")


@pytest.mark.parametrize("kind, says", [
    ("missing", "does not exist"), ("folder", "is a folder, not a file"), ("pipe", "is not a regular file"),
    ("dangling", "is a link to nothing"), ("latin", "not UTF-8 text (byte 0xe9 at line 2)"),
    ("truncated", "not UTF-8 text"),
])
def test_a_bad_yaml_path_is_one_line_naming_the_field_and_the_path(files, kind, says) -> None:
    path = str(files[kind])
    with pytest.raises(ConfigError) as err:
        read_yaml_file(path, "--config")
    message = str(err.value)
    assert message.startswith("--config") and path in message and says in message and "\n" not in message, message


def test_the_loaders_read_good_files(tmp_path) -> None:
    torch.save({"a": torch.ones(2)}, tmp_path / "good.ckpt")
    assert torch.equal(read_torch_file(str(tmp_path / "good.ckpt"), "f", "x")["a"], torch.ones(2))
    assert read_yaml_file(str(ROOT / "configs" / "swarm.yaml"))["model"]


@pytest.mark.parametrize("args", [["--config", "{folder}"], ["--model.init_from", "{truncated}"],
                                  ["--ckpt_path", "{pipe}"], ["--config", "{latin}"]],
                         ids=["config-folder", "init-from-truncated", "ckpt-pipe", "config-latin1"])
def test_through_the_cli_one_error_line_and_nothing_written(files, tmp_path, capsys, args) -> None:
    from parlightning.cli.fit import main

    out = tmp_path / "out"
    args = [a.format(**{k: str(v) for k, v in files.items()}) for a in args]
    with pytest.raises(SystemExit) as exit_:
        main(["--config", str(ROOT / "configs" / "swarm.yaml"), *args, "--trainer.default_root_dir", str(out),
              "--data.num_envs", "8", "--data.num_steps", "4"])
    message = exit_.value.code
    field = args[0] if args[0] in ("--config", "--ckpt_path") else args[0][2:]  # model.init_from: the config key
    assert isinstance(message, str) and message.startswith(f"error: {field}") and "\n" not in message, message
    assert args[1] in message, message
    assert "Traceback" not in capsys.readouterr().err
    assert not out.exists()
