"""Issue 27's bad inputs, each one `error:` line naming the field or file and the fix, with nothing
written: config sections that are not mappings, non-UTF-8 files, YAML alias bombs, misspelt world
arguments, a negative entropy weight, scripts' counts; checkpoints without a checksum, with damaged
zip entries or NaN optimizer moments; a full disk while saving (the previous checkpoint kept)."""

import errno
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from parlightning.runtime.checkpoint import CHECKSUM_KEY, state_checksum
from parlightning.ppo.data import RolloutDataModule
from parlightning.cli.fit import main

ROOT = Path(__file__).parent.parent
CONFIG = str(ROOT / "configs" / "swarm.yaml")
TINY = ["--trainer.enable_progress_bar", "false", "--data.num_envs", "8", "--data.num_steps", "4"]

BOMB = "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['1'] * 9)}]\n"
               for p, c in zip(["", "a", "b", "c", "d", "e", "f"], "abcdefg")) + "model:\n  hidden_sizes: *g\n"
CONFIG_FILES = [  # (file content, what the line must say)
    (b"trainer: 5\n", ["trainer: is an int (5), not a mapping", "indented under it"]),
    (b"model: null\n", ["model: is null, not a mapping"]),
    (b"data: []\n", ["data: is a list", "not a mapping"]),
    (b"model:\n  lr: \xff\xfe\n", ["not UTF-8 text", "line 2", "save the file as UTF-8"]),
    (BOMB.encode(), ["expand to more than", "YAML bomb"]),
]


def _one_error_line(capsys, run):
    with pytest.raises(SystemExit) as exit_:
        run()
    message = exit_.value.code
    assert isinstance(message, str) and message.startswith("error: ") and "\n" not in message, message
    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr and "error:" not in stderr, stderr[-2000:]
    return message


@pytest.mark.parametrize("content, says", CONFIG_FILES, ids=["trainer-5", "model-null", "data-list", "utf8", "bomb"])
def test_a_bad_config_file_is_one_line_naming_the_file_and_the_fix(tmp_path, capsys, monkeypatch, content, says):
    monkeypatch.setattr(RolloutDataModule, "collect", lambda self: pytest.fail("a rollout started"))
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    before = set(tmp_path.rglob("*"))
    message = _one_error_line(capsys, lambda: main(["--config", CONFIG, "--config", str(path),
                                                    "--trainer.default_root_dir", str(tmp_path), *TINY]))
    assert str(path) in message and all(s in message for s in says), message
    assert set(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("args, says", [
    (["--data.env.init_args.max_subagentz", "3"], ["data.env.init_args.max_subagentz", "did you mean max_subagents"]),
    (["--model.ent_coef", "-0.01"], ["model.ent_coef", "must be >= 0"]),
    (["--model.hidden_sizes", "[200000, 200000]"], ["model.hidden_sizes", "parameters", "use smaller hidden_sizes"]),
])
def test_a_bad_argument_is_one_line_naming_the_field(tmp_path, capsys, monkeypatch, args, says):
    monkeypatch.setattr(RolloutDataModule, "collect", lambda self: pytest.fail("a rollout started"))
    message = _one_error_line(capsys, lambda: main(["--config", CONFIG, "--trainer.default_root_dir", str(tmp_path),
                                                    *TINY, *args]))
    assert all(s in message for s in says), message
    assert "Type typing.Callable" not in message
    assert not list(tmp_path.rglob("*"))


@pytest.mark.parametrize("script, args", [
    ("world_fit.py", ["--epochs", "-1"]), ("bench_throughput.py", ["--num-envs", "-1"]),
    ("recurrent_vs_mlp.py", ["--epochs", "0"]),
])
def test_scripts_refuse_non_positive_counts(script, args):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / script), *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "must be a positive integer" in done.stderr, done.stderr[-2000:]


# ---------------------------------------------------------------------------------- checkpoints
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    main(["--config", CONFIG, "--trainer.default_root_dir", str(root), *TINY, "--trainer.max_epochs", "1"])
    return next(root.rglob("checkpoints"))


def _resume(tmp_path, ckpt):
    return lambda: main(["--config", CONFIG, "--trainer.default_root_dir", str(tmp_path / "out"), *TINY,
                         "--trainer.max_epochs", "3", "--ckpt_path", str(ckpt)])


def test_a_checkpoint_without_its_checksum_is_refused_unless_opted_out(tmp_path, capsys, monkeypatch, run_dir):
    ckpt = torch.load(run_dir / "last.ckpt", weights_only=True)
    ckpt.pop(CHECKSUM_KEY)
    ckpt["state_dict"] = {k: v * -30 if v.is_floating_point() else v for k, v in ckpt["state_dict"].items()}
    torch.save(ckpt, tmp_path / "edited.ckpt")
    message = _one_error_line(capsys, _resume(tmp_path, tmp_path / "edited.ckpt"))
    assert "has no parlightning_checksum" in message and "PARLIGHTNING_UNCHECKED_CHECKPOINTS=1" in message, message
    assert not (tmp_path / "out").exists()
    monkeypatch.setenv("PARLIGHTNING_UNCHECKED_CHECKPOINTS", "1")
    from parlightning.runtime.checkpoint import load_checkpoint_file

    assert load_checkpoint_file(str(tmp_path / "edited.ckpt"))["epoch"] == 0  # the documented opt-out loads it


def test_flipped_bytes_in_the_pickle_are_reported_as_corruption(tmp_path, capsys, run_dir):
    import zipfile

    data = (run_dir / "last.ckpt").read_bytes()
    with zipfile.ZipFile(run_dir / "last.ckpt") as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith("data.pkl"))
    middle = info.header_offset + 30 + len(info.filename) + len(info.extra) + info.file_size // 2
    (tmp_path / "flipped.ckpt").write_bytes(data[:middle] + bytes(b ^ 0xFF for b in data[middle:middle + 8])
                                            + data[middle + 8:])
    message = _one_error_line(capsys, _resume(tmp_path, tmp_path / "flipped.ckpt"))
    assert "corrupt" in message and "data.pkl fails its CRC check" in message, message
    assert "pickled objects" not in message


def test_nan_optimizer_moments_are_refused_at_load(tmp_path, capsys, run_dir):
    ckpt = torch.load(run_dir / "last.ckpt", weights_only=True)
    state = ckpt["optimizer_states"][0]["state"]
    next(iter(state.values()))["exp_avg_sq"].view(-1)[0] = float("nan")
    ckpt[CHECKSUM_KEY] = state_checksum({k: v for k, v in ckpt.items() if k != CHECKSUM_KEY})
    torch.save(ckpt, tmp_path / "nan_moments.ckpt")
    message = _one_error_line(capsys, _resume(tmp_path, tmp_path / "nan_moments.ckpt"))
    assert "non-finite optimizer state" in message and "exp_avg_sq" in message, message


@pytest.mark.parametrize("fault", ["enospc", "zip_writer"])
def test_a_full_disk_while_saving_is_one_line_and_the_previous_checkpoint_is_kept(tmp_path, capsys, monkeypatch, fault):
    import parlightning.runtime.checkpoint as checkpoint

    real_save = torch.save

    def save(obj, f, *args, **kwargs):  # the disk fills up after the first iteration's checkpoints
        if isinstance(obj, dict) and obj.get("epoch", 0) >= 1:
            f.write(b"PK\x03\x04 partial")
            if fault == "enospc":
                raise OSError(errno.ENOSPC, "No space left on device")
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 4416 vs 4310")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(checkpoint.torch, "save", save)
    message = _one_error_line(capsys, lambda: main(["--config", CONFIG, "--trainer.default_root_dir", str(tmp_path),
                                                    *TINY, "--trainer.max_epochs", "3"]))
    (folder,) = {p.parent for p in tmp_path.rglob("last.ckpt")}
    assert f"in {str(folder)!r}" in message and "free there" in message and "checkpoints already there are kept" in message
    assert "last.ckpt" in message, message
    if fault == "enospc":
        assert "the disk is full" in message, message
    monkeypatch.setattr(checkpoint.torch, "save", real_save)
    assert torch.load(folder / "last.ckpt", weights_only=True)["epoch"] == 0  # the previous one, intact
    assert not [p for p in folder.iterdir() if p.name.endswith(".partial")]
