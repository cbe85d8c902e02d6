"""The built wheel, installed into a fresh venv, runs the README's main command from a folder outside
the checkout: the configs and the example callbacks ship with the package (`--config configs/swarm.yaml`
and `--config swarm` name the packaged file), and an example named by its old checkout path
(`callbacks.block_planner.BlockPlanner`) gets one `error:` line naming the packaged one."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import torch

from parlightning.cli.packaged import config_path, moved_hint, packaged_configs, resolve_config_args

ROOT = Path(__file__).resolve().parent.parent
SKIP = shutil.ignore_patterns(".git", "lightning_logs", "runs", "results", "build", "dist", "*.egg-info",
                              "__pycache__", ".pytest_cache", "docs", "tests", "scripts")


def test_a_config_name_resolves_to_the_packaged_file_and_an_existing_path_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    swarm = str(ROOT / "parlightning" / "configs" / "swarm.yaml")
    assert os.path.samefile(config_path("swarm"), swarm)
    assert os.path.samefile(config_path("configs/swarm.yaml"), swarm)  # the README's path, outside a checkout
    assert os.path.samefile(config_path("parallel/cp"), ROOT / "configs" / "parallel" / "cp.yaml")
    assert config_path("no_such_config") is None and config_path("swarm.py") is None
    (tmp_path / "swarm").write_text("model: {lr: 0.1}\n")  # a user's own file of that name is used as given
    assert config_path("swarm") is None
    args = resolve_config_args(["--config", "cartpole_fast", "--config=parallel/tp", "--model.lr", "swarm"])
    assert os.path.samefile(args[1], ROOT / "configs" / "cartpole_fast.yaml")
    assert os.path.samefile(args[2].removeprefix("--config="), ROOT / "configs" / "parallel" / "tp.yaml")
    assert args[3:] == ["--model.lr", "swarm"]  # only --config values are names
    assert {"swarm", "cartpole_fast", "parallel/block", "arms/strong/parl_annealed"} <= set(packaged_configs())
    assert set(packaged_configs()) == {p.relative_to(ROOT / "configs").with_suffix("").as_posix()
                                       for p in (ROOT / "configs").rglob("*.yaml")}


def test_moved_hint_names_the_packaged_example():
    line = "trainer.callbacks: No module named 'callbacks' (callbacks.block_planner.BlockPlanner)"
    assert moved_hint(line).endswith("use class_path parlightning.examples.block_planner.BlockPlanner)")
    assert moved_hint("model.lr: must be positive") == "model.lr: must be positive"


def test_the_wheel_installed_in_a_fresh_venv_runs_the_readme_main_command(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=SKIP)  # build from a copy: nothing is written in the checkout
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(src),
                    "-w", str(dist)], check=True, timeout=300)
    (wheel,) = glob.glob(str(dist / "parlightning-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"parlightning/configs/swarm.yaml", "parlightning/configs/parallel/block.yaml",
            "parlightning/examples/block_planner.py", "parlightning/examples/hardest_first.py"} <= names

    venv = tmp_path / "venv"  # the system's torch and lightning, this wheel's parlightning
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                   check=True, timeout=120)
    python = str(venv / "bin" / "python")
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "--ignore-installed", "-q",
                    wheel], check=True, timeout=300)
    away = tmp_path / "elsewhere"
    away.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PL_DISABLE_FORK")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"  # `python` is the venv's, as a user's shell
    where = subprocess.run([python, "-c", "import parlightning.cli.packaged as p; print(p.__file__)"], cwd=away, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(str(venv)), where  # the wheel's copy, not the checkout's editable install

    # the README's main command, as written, for two iterations
    run = subprocess.run(["python", "-m", "parlightning.fit", "--config", "configs/swarm.yaml",
                          "--trainer.max_epochs", "2", "--trainer.enable_progress_bar", "false"],
                         cwd=away, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "LightningCLI's args parameter" not in run.stderr
    ckpt = torch.load(away / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["epoch"] == 1
    config = (away / "lightning_logs" / "version_0" / "config.yaml").read_text()
    assert "parlightning.envs.swarm.SwarmEnv" in config or "parlightning.envs.SwarmEnv" in config

    # an example callback by its old checkout path: one error line naming the packaged path, nothing written
    old = subprocess.run(["parlightning-fit", "--config", "swarm", "--trainer.callbacks+",
                          "callbacks.block_planner.BlockPlanner"], cwd=away, env=env, capture_output=True, text=True,
                         timeout=300)
    assert old.returncode != 0
    lines = [line for line in old.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "parlightning.examples.block_planner.BlockPlanner" in lines[0], old.stderr[-2000:]
