"""The argparse types of `parlightning.cli.arg_types`: what each accepts, what it refuses, and that the
refusal says what is accepted (argparse prints it as `error: argument --x: <message>`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from parlightning.cli import arg_types as t


def refused(check, text: str) -> str:
    with pytest.raises(argparse.ArgumentTypeError) as err:
        check(text)
    return str(err.value)


@pytest.mark.parametrize("check, good, bad, says", [
    (t.positive_int, {"1": 1, "42": 42, "1_000": 1000}, ["0", "-1", "1.5", "nan", "inf", "abc", "", str(10**30)],
     "must be a positive integer up to 1000000000"),
    (t.non_negative_int, {"0": 0, "7": 7}, ["-1", "x", str(10**10)], "must be an integer >= 0 up to 1000000000"),
    (t.actor_count, {"1": 1, "1000000": 1_000_000}, ["0", "1000001", "1e6"], "must be a positive integer up to 1000000"),
    (t.step_count, {"16": 16}, ["0", "10000000"], "up to 1000000"),
    (t.episode_count, {"4": 4}, ["-3", "2000000"], "up to 1000000"),
    (t.job_count, {"2": 2}, ["0", "5000"], f"up to {t.MAX_PROCESSES}"),
    (t.worker_count, {"0": 0, "3": 3}, ["-1", "5000"], f"up to {t.MAX_PROCESSES}"),
    (t.random_seed, {"0": 0, str(2**32 - 1): 2**32 - 1}, ["-1", str(2**32), "1.5"], "a seed in 0..4294967295"),
    (t.bank_seed, {"1234": 1234, str(2**63 - 1): 2**63 - 1}, ["-1", str(2**63)], "a bank seed in 0.."),
    (t.bounded_int(2, 5), {"2": 2, "5": 5}, ["1", "6"], "an integer in 2..5"),
    (t.finite_float, {"-1.5": -1.5, "0": 0.0, "1e300": 1e300}, ["nan", "inf", "-inf", "1e400", "x"], "a finite number"),
    (t.positive_float, {"0.5": 0.5, "3": 3.0}, ["0", "-1", "nan", "inf", "1e400"], "a finite number > 0"),
    (t.non_negative_float, {"0": 0.0, "2.5": 2.5}, ["-0.1", "nan", "inf"], "a finite number >= 0"),
    (t.unit_interval, {"0": 0.0, "1": 1.0, "0.3": 0.3}, ["-0.1", "1.1", "nan"], "a number in [0, 1]"),
    (t.open_unit_interval, {"0.5": 0.5}, ["0", "1", "nan"], "a number in (0, 1)"),
    (t.positive_fraction, {"1": 1.0, "0.2": 0.2}, ["0", "1.5"], "a number in (0, 1]"),
    (t.boolean, {"true": True, "No": False, "1": True, "off": False}, ["maybe", ""], "true or false"),
    (t.device_name, {"cpu": "cpu", "cuda:1": "cuda:1", "mps": "mps", "cpu:5": "cpu:5"}, ["gpu", "cuda:x", "meta", ""], "cpu, cuda, cuda:N or mps"),
    (t.one_of("a", "b"), {"a": "a"}, ["c", ""], "one of a, b"),
    (t.text_item, {" x ": "x"}, ["", "  "], "a non-empty name"),
])
def test_number_and_name_types(check, good: dict, bad: list, says: str) -> None:
    for text, value in good.items():
        assert check(text) == value
    for text in bad:
        message = refused(check, text)
        assert says in message and "(got " in message, (text, message)


def test_comma_list_checks_every_item_and_refuses_empty_items() -> None:
    ints = t.comma_list(t.positive_int)
    assert ints("1,2, 3") == [1, 2, 3]
    for text in ("", ",", "1,,2", "1,", ",1"):
        assert "comma-separated list with no empty item" in refused(ints, text)
    message = refused(ints, "1,x")
    assert message.startswith("item 2 ('x'): must be a positive integer"), message
    assert "item 1" in refused(t.comma_list(t.unit_interval), "nan,0.5")


def test_existing_file_and_folder(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_text("x")
    assert t.existing_file(str(f)) == str(f)
    assert "no file at" in refused(t.existing_file, str(tmp_path / "missing"))
    assert "is a folder" in refused(t.existing_file, str(tmp_path))
    assert "an empty path" in refused(t.existing_file, "")
    if os.path.exists("/dev/null"):
        assert "not a regular file" in refused(t.existing_file, "/dev/null")
    assert t.existing_folder(str(tmp_path)) == str(tmp_path)
    assert "no folder at" in refused(t.existing_folder, str(f))


def test_config_file(tmp_path: Path) -> None:
    good = tmp_path / "c.yaml"
    good.write_text("trainer:\n  max_epochs: 2\n")
    assert t.config_file(str(good)) == str(good)
    assert t.config_file("swarm").endswith("swarm.yaml")  # a packaged name, as fit's --config takes it
    assert "no file at" in refused(t.config_file, str(tmp_path / "missing.yaml"))
    for body, says in ((b"\x80\x81", "not UTF-8"), (b"- a\n- b\n", "not a mapping"), (b"a: [\n", "not valid YAML"),
                       (b"", "empty")):
        bad = tmp_path / "bad.yaml"
        bad.write_bytes(body)
        message = refused(t.config_file, str(bad))
        assert says in message and message.startswith(repr(str(bad))), message  # argparse names --config


def test_output_paths(tmp_path: Path) -> None:
    assert t.output_file(str(tmp_path / "out.json")) == str(tmp_path / "out.json")
    assert refused(t.output_file, str(tmp_path / "no" / "such" / "out.json"))
    assert refused(t.output_file, str(tmp_path))  # a folder, not a file
    assert "an empty path" in refused(t.output_file, "")
    assert t.output_folder(str(tmp_path / "new" / "deep")) == str(tmp_path / "new" / "deep")
    (tmp_path / "x").write_text("")
    assert "is a file, not a folder" in refused(t.output_folder, str(tmp_path / "x"))
    assert "cannot be created" in refused(t.output_folder, "/proc/parl_nope")
    assert t.output_path(str(tmp_path / "new" / "page.md")) == str(tmp_path / "new" / "page.md")  # folder made later
    assert "its folder" in refused(t.output_path, str(tmp_path / "x" / "page.md"))  # under a file
    assert "a file path to write" in refused(t.output_path, str(tmp_path))
    as_path = t.as_path(t.output_folder)
    assert as_path(str(tmp_path)) == tmp_path and as_path.__name__ == "output_folder"


def test_types_are_named_for_argparse() -> None:
    parser = argparse.ArgumentParser(prog="p")
    parser.add_argument("--episodes", type=t.episode_count)
    assert parser.parse_args(["--episodes", "3"]).episodes == 3
    with pytest.raises(SystemExit):
        parser.parse_args(["--episodes", "-3"])
    assert t.positive_int.__name__ == "positive_int" and t.comma_list(t.positive_int).__name__.startswith("comma_list")
