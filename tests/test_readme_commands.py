"""The README's commands and Python snippets, run as written, in order, in a fresh folder: each Usage
line must work on its own after the first training run. Only size overrides are appended
(`--data.num_envs 16 --data.num_steps 8 --trainer.max_epochs 2`, and 4 iterations for the line that
continues a run past its first 2); `--config configs/...` resolves to the packaged configs, since the
folder has no `configs/` of its own.

The multi-process CPU commands of the README and of docs/guides/ run in a pseudo-terminal, so
Lightning's progress bar is on and tqdm renders, as a user would see it (this pins the gloo abort,
rc 134 `collective mismatch`, that a collective in an epoch-end hook caused: the progress bar syncs
epoch metrics on rank 0 only in its epoch-end hook). The other commands run in this process through
the same `main` functions that `python -m` runs (one Lightning import for all of them).

Static checks over README.md and docs/: every relative link resolves, every `--config` names a file.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from parlightning.cli.packaged import config_path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
GUIDES = sorted((ROOT / "docs" / "guides").glob("*.md"))
SIZE = ["--data.num_envs", "16", "--data.num_steps", "8", "--trainer.max_epochs", "2"]
NOT_RUN = {  # README commands a test cannot run as written, and where they are covered instead
    "pip ": "installs packages (tests/test_packaging.py builds the wheel and installs it in a venv)",
    "tensorboard ": "starts a viewer",
    "python -m pytest": "the test suite itself",
}


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def bash_commands(path: Path) -> list[str]:
    """Every command line of the file's bash blocks (continuations joined, trailing comments dropped)."""
    commands = []
    for block in blocks(path.read_text(), "bash"):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split(" #")[0].strip()
            if line and not line.startswith("#"):
                commands.extend(part.strip() for part in line.split(" && "))
    return commands


def is_multi_device_cpu(command: str) -> bool:
    return "--trainer.accelerator cpu" in command and "--trainer.devices 2" in command


def multi_device_cpu_commands() -> list[str]:
    found = [c for path in [README, *GUIDES] for c in bash_commands(path)
             if c.startswith("python -m parlightning.fit") and is_multi_device_cpu(c)]
    return list(dict.fromkeys(found))  # the same command in the README and a guide runs once


def sized(argv: list[str]) -> list[str]:
    """The size overrides; a run continued from a checkpoint trains 2 more iterations than its first run."""
    if argv[0] != "parlightning.fit" or "--print_config" in argv:
        return argv
    extra = list(SIZE)
    if "--ckpt_path" in argv:
        extra[-1] = "4"
    return argv + extra


def run_in_process(command: str, monkeypatch) -> None:
    tokens = shlex.split(command)
    while "=" in tokens[0] and not tokens[0].startswith("-"):  # `NAME=value python -m ...`
        name, value = tokens.pop(0).split("=", 1)
        monkeypatch.setenv(name, value)
    assert tokens[:2] == ["python", "-m"], command
    module, args = tokens[2], sized([tokens[2], *tokens[3:]])[1:]
    if module == "parlightning.fit":
        from parlightning.cli.fit import main
    elif module == "parlightning.evaluate":
        from parlightning.cli.evaluate import main
    elif module == "parlightning.export":
        from parlightning.cli.export import main
    else:
        raise AssertionError(f"a README command this test does not know how to run: {command}")
    try:
        main(args)
    except SystemExit as exit_:  # --print_config ends the program with status 0, as from a shell
        assert exit_.code in (0, None), f"{command}: {exit_.code}"


def test_the_readme_lists_its_commands_and_the_docs_their_multi_device_ones():
    commands = [c for c in bash_commands(README) if not c.startswith("pip ")]
    assert commands[0] == "python -m parlightning.fit --config configs/swarm.yaml"  # the first command trains
    assert sum(c.startswith("python -m parlightning.") for c in commands) >= 8
    unknown = [c for c in commands if not c.startswith("python -m parlightning.") and not c.startswith(tuple(NOT_RUN))]
    assert unknown == [], f"README commands neither run by this test nor listed in NOT_RUN: {unknown}"
    multi = multi_device_cpu_commands()
    assert len(multi) >= 2 and any("configs/parallel/" in c for c in multi)
    assert any("--trainer.strategy ddp" in c for c in multi) and any("DDPStrategy" in c for c in multi)


def test_readme_commands_and_snippets_run_as_written_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no configs/ here: --config configs/... names the packaged files
    ran = []
    for command in bash_commands(README):
        if command.startswith(tuple(NOT_RUN)) or is_multi_device_cpu(command):
            continue  # the multi-device ones: the pseudo-terminal test below
        run_in_process(command, monkeypatch)
        ran.append(command)
        if command.startswith("python -m parlightning.fit --config configs/swarm.yaml --trainer.max_epochs 80"):
            ckpt = torch.load(next((tmp_path / "lightning_logs").glob("version_*/checkpoints/last.ckpt")),
                              weights_only=True)
            assert ckpt["epoch"] >= 1
        if "parlightning.export" in command:
            assert (tmp_path / "policy.pt2").is_file()
    assert len(ran) >= 8, ran
    first = torch.load(tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)
    assert first["epoch"] == 1  # the first command's run, which the later lines read
    assert list((tmp_path / "runs" / "csv").rglob("metrics.csv"))
    for snippet in blocks(README.read_text(), "python"):  # exported program, then the Python API
        scope: dict = {}
        exec(compile(snippet, "README.md", "exec"), scope)
        if "actions" in scope:
            assert scope["actions"].shape[0] == 8
        if "trainer" in scope:
            assert scope["trainer"].current_epoch == 2


@pytest.mark.skipif(shutil.which("script") is None or not sys.platform.startswith("linux"),
                    reason="needs util-linux `script` for a pseudo-terminal")
def test_multi_device_commands_run_as_written_with_the_progress_bar(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("PL_DISABLE_FORK", None)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")  # `python` = this interpreter
    runs = []
    for i, command in enumerate(multi_device_cpu_commands()):  # side by side: start-up dominates
        run = tmp_path / f"run{i}"
        run.mkdir()
        (run / "configs").symlink_to(ROOT / "configs")  # the commands' relative paths; outputs stay in run/
        full = f"{command} {' '.join(SIZE)}"
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
        assert "env_steps=256" in out and "e+" not in out.split("env_steps=")[-1][:12]  # an integer, not 2.56e+2
        assert "LightningCLI's args parameter" not in out
        ckpt = torch.load(next(run.rglob("last.ckpt")), weights_only=True)
        assert ckpt["epoch"] == 1 and len(ckpt["RolloutDataModule"]["ranks"]) == 2


def doc_files() -> list[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_relative_link_in_the_readme_and_docs_resolves():
    broken = []
    for path in doc_files():
        for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            if not (path.parent / target.split("#")[0]).exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert broken == []


def test_every_config_and_script_the_docs_name_exists():
    missing = []
    for path in doc_files():
        text = path.read_text()
        for name in re.findall(r"--config[ =](\S+?)[`\s)]", text):
            if "<" in name or name in ("my.yaml", "NAME") or config_path(name) or (ROOT / name).is_file():
                continue
            missing.append(f"{path.relative_to(ROOT)}: --config {name}")
        for script in re.findall(r"scripts/[a-z_]+\.py", text):
            if not (ROOT / script).is_file():
                missing.append(f"{path.relative_to(ROOT)}: {script}")
    assert missing == []
