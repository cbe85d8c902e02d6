"""What ships inside the package: the example configs (`parlightning/configs/`, the checkout's
top-level `configs/`) and the example callbacks (`parlightning/examples/`, the checkout's
`callbacks/`), and how a `--config` name resolves to them.

`--config swarm`, `--config parallel/cp` and `--config configs/swarm.yaml` (when no such file is in
the working directory, as after `pip install` anywhere but a checkout) all name the packaged file;
an existing path always wins, so a checkout and a user's own files behave as before.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence

from parlightning.method_args import checked

PACKAGE_DIR = Path(__file__).resolve().parents[__name__.count(".") - 1]  # parlightning/, wherever this module sits
CONFIG_DIR = PACKAGE_DIR / "configs"

# The example callbacks' old import paths (a checkout's `callbacks/` folder on sys.path) -> the packaged ones.
MOVED_CLASS_PATHS = {
    "callbacks.block_planner": "parlightning.examples.block_planner",
    "callbacks.hardest_first": "parlightning.examples.hardest_first",
}


def packaged_configs() -> list[str]:
    """The packaged config names (`swarm`, `parallel/cp`, ...), sorted."""
    if not CONFIG_DIR.is_dir():
        return []
    return sorted(p.relative_to(CONFIG_DIR).with_suffix("").as_posix() for p in CONFIG_DIR.rglob("*.yaml"))


@checked
def config_path(name: str) -> Optional[str]:
    """The packaged file a `--config` value names, or None (then the value is used as given)."""
    if not name or os.path.exists(name) or not CONFIG_DIR.is_dir():
        return None
    stem = name.replace(os.sep, "/")
    stem = stem[len("configs/"):] if stem.startswith("configs/") else stem
    for candidate in (stem, f"{stem}.yaml"):
        path = CONFIG_DIR / candidate
        if path.suffix in (".yaml", ".yml") and path.is_file():
            return str(path)
    return None


def resolve_config_args(args: Sequence[str]) -> list[str]:
    """`--config NAME` / `--config=NAME` tokens with a packaged NAME replaced by the file's path."""
    out = list(args)
    for i, arg in enumerate(out):
        if arg == "--config" and i + 1 < len(out):
            found = config_path(out[i + 1])
            if found is not None:
                out[i + 1] = found
        elif arg.startswith("--config="):
            found = config_path(arg.split("=", 1)[1])
            if found is not None:
                out[i] = f"--config={found}"
    return out


def moved_hint(line: str) -> str:
    """An error line that names an example callback by its old import path gets the new one."""
    for old, new in MOVED_CLASS_PATHS.items():
        if f"{old}." in line and f"parlightning.{old}" not in line:
            cls = line.split(f"{old}.", 1)[1].split()[0].strip("'\"`,;:()")
            return f"{line} (the example moved with the package: use class_path {new}.{cls})"
    return line
