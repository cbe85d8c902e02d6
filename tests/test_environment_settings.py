"""The package's own environment variables: a value meaning neither on nor off is one line naming
the variable (every `python -m` program checks before it starts), `PARLIGHTNING_TRACEBACK=0` is off,
and a `PARLIGHTNING_CACHE_DIR` that cannot hold the compiled SwarmEnv kernel is named, not blamed on
the world's constructor."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from parlightning.errors import ConfigError, package_environment_error, tracebacks_wanted

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("value,on", [("1", True), ("true", True), ("YES", True), ("0", False), ("", False),
                                      ("off", False), (" no ", False)])
def test_parlightning_traceback_reads_on_and_off(monkeypatch, value, on):
    monkeypatch.setenv("PARLIGHTNING_TRACEBACK", value)
    assert tracebacks_wanted() is on and package_environment_error(os.environ) is None


@pytest.mark.parametrize("name,value", [("PARLIGHTNING_TRACEBACK", "maybe"), ("PARLIGHTNING_TRACEBACK", "2"),
                                        ("PARLIGHTNING_UNCHECKED_CHECKPOINTS", "yes")])
def test_a_value_that_is_neither_on_nor_off_is_named(name, value):
    line = package_environment_error({name: value})
    assert line.startswith(f"{name}={value!r} in the environment: it is 1 (") and "nothing else is read" in line


def test_every_program_checks_them_before_it_starts(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PARLIGHTNING_TRACEBACK": "maybe"}
    run = subprocess.run([sys.executable, "-m", "parlightning.export", "--help"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and run.stdout == "" and run.stderr.strip().splitlines() == [
        "error: PARLIGHTNING_TRACEBACK='maybe' in the environment: it is 1 (show the traceback of an error in your "
        "code) or 0 / unset (one line); nothing else is read as either"]


def test_a_cache_dir_that_cannot_hold_the_kernel_is_named(monkeypatch, tmp_path):
    from parlightning.envs import swarm_compiled
    from parlightning.envs.swarm import SwarmEnv

    if swarm_compiled.compiler_problem(__import__("torch").device("cpu")) is not None:
        pytest.skip("no C++ compiler")
    not_a_folder = tmp_path / "a_file"
    not_a_folder.write_text("x")
    monkeypatch.setenv("PARLIGHTNING_CACHE_DIR", str(not_a_folder))
    swarm_compiled._library.cache_clear()
    try:
        with pytest.raises(ConfigError) as err:
            SwarmEnv(num_envs=2, compile=True)
    finally:
        swarm_compiled._library.cache_clear()
    assert str(err.value).startswith(f"PARLIGHTNING_CACHE_DIR={str(not_a_folder)!r} in the environment: the compiled "
                                     "SwarmEnv's kernel cannot be built or loaded in")
    assert "writable folder" in str(err.value) and "compile: false" in str(err.value)
