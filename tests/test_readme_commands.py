"""The README's multi-device CPU commands, run exactly as written (read from README.md, with only
tiny --data.num_envs / --data.num_steps / --trainer.max_epochs overrides appended) in a
pseudo-terminal, so Lightning's progress bar is on and tqdm renders, as a user would see it.

Pins the gloo abort (rc 134, `collective mismatch`) that a collective in an epoch-end hook caused:
the progress bar syncs epoch metrics on rank 0 only in its epoch-end hook.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
TINY = "--data.num_envs 16 --data.num_steps 8 --trainer.max_epochs 2"


def readme_multi_device_cpu_commands() -> list[str]:
    """Every `python -m parlightning.fit` command of a README bash block that runs on 2 CPU ranks."""
    text = (ROOT / "README.md").read_text()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)  # backslash continuations
        for line in joined.splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith("python -m parlightning.fit") and "--trainer.accelerator cpu" in line \
                    and "--trainer.devices 2" in line:
                commands.append(line)
    return commands


def test_the_readme_lists_the_multi_device_cpu_commands():
    commands = readme_multi_device_cpu_commands()
    assert len(commands) >= 2, commands  # the tp_route override example and the DDPStrategy-with-timeout one
    assert any("configs/parallel/" in c for c in commands) and any("--trainer.strategy ddp" in c for c in commands)


@pytest.mark.skipif(shutil.which("script") is None or not sys.platform.startswith("linux"),
                    reason="needs util-linux `script` for a pseudo-terminal")
def test_readme_multi_device_commands_run_as_written_with_the_progress_bar(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("PL_DISABLE_FORK", None)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")  # `python` = this interpreter
    runs = []
    for i, command in enumerate(readme_multi_device_cpu_commands()):  # side by side: start-up dominates
        run = tmp_path / f"run{i}"
        run.mkdir()
        (run / "configs").symlink_to(ROOT / "configs")  # the commands' relative paths; outputs stay in run/
        full = f"{command} {TINY}"
        terminal = f"stty cols 120 rows 40; {full}"  # a sized terminal: with 0 columns tqdm draws nothing
        log = open(run / "terminal.txt", "w")
        runs.append((full, run, log, subprocess.Popen(["script", "-qec", terminal, "/dev/null"], cwd=run, env=env,
                                                      stdout=log, stderr=subprocess.STDOUT)))
    try:
        for _, _, log, proc in runs:
            proc.wait(timeout=400)
            log.close()
    finally:
        for _, _, _, proc in runs:
            if proc.poll() is None:
                proc.kill()
    for full, run, _, proc in runs:
        out = (run / "terminal.txt").read_text(errors="replace")
        assert proc.returncode == 0, f"{full}\nrc={proc.returncode}\n{out[-3000:]}"
        assert "collective mismatch" not in out and "Epoch 1" in out, out[-3000:]  # tqdm rendered both epochs
        ckpt = torch.load(next(run.rglob("last.ckpt")), weights_only=True)
        assert ckpt["epoch"] == 1 and len(ckpt["RolloutDataModule"]["ranks"]) == 2
