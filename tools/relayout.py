#!/usr/bin/env python3
"""Move parlightning's modules into subpackages that show the architecture (issue 22), in one
idempotent step: `git mv` the files, rewrite imports, class paths and file paths, write the thin
`python -m` entry modules and the new packages' `__init__.py`, and leave the alias table that
`parlightning._moved` reads so that old dotted paths in users' YAML and code keep resolving.

    python tools/relayout.py            # apply (in a git checkout, from its root)
    python tools/relayout.py --dry-run  # print what it would do
    python tools/relayout.py --readme   # also rewrite README.md (the users' page; off by default)

Running it twice changes nothing the second time. The layout (old module -> new module) is the
table MOVES below, built from `parlightning/_moved.py`'s alias table (one table).

The layers, lowest first (a module imports only from its own layer or those below it):
  top level   errors, config_types, buffer (RolloutBuffer, compute_gae), rollout: the shared vocabulary
  envs        the worlds (SwarmEnv and its kernel, CartPole, Gymnasium, external worlds, subagent pools)
  runtime     processes, checkpoints, preflight, rank watch
  policies    heads with action masks: actor_critic (MLP), slots, recurrent
  distribution  strategies (DP/CP/TP), the round planner, samplers, rank-agreed counters
  parl        the PARL objective: the shaped reward and critical steps
  collection  step loop, schedules, transports, finishing a round
  callbacks   rollout callbacks (Lightning)
  ppo         the PPO algorithm on Lightning: loss, PPOModule, RolloutDataModule
  analysis    reading results: statistics, TensorBoard scalars, traces, stage blame
  cli         the programs behind `python -m parlightning.fit|evaluate|export|bc|plot`
  top level   api, inference (the Python API) and the thin `python -m` entry modules
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path


ENTRY_PROGRAMS = ("fit", "evaluate", "export", "bc", "plot")  # thin `python -m` modules stay at the old path
# old module -> new module: the alias table parlightning._moved serves (one table, not two), plus
# the entry modules (a thin module remains at their old path) and `parlightning.policies` (a package
# of that name remains: the old module's names are its re-exports)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from parlightning._moved import MOVED  # noqa: E402

MOVES = {**MOVED, "parlightning.policies": "parlightning.policies.actor_critic",
         **{f"parlightning.{p}": f"parlightning.cli.{p}" for p in ENTRY_PROGRAMS}}
ENTRY = tuple(f"parlightning.{p}" for p in ENTRY_PROGRAMS)

PACKAGES = {  # new package -> its docstring (its __init__.py defines nothing else, unless FACADES says so)
    "parlightning.ppo": "The PPO algorithm on Lightning: the clipped loss, `PPOModule` and `RolloutDataModule`.",
    "parlightning.parl": "The PARL objective: the shaped reward (`PARLReward`, λ schedules) and critical steps.",
    "parlightning.policies": "The policies: actor-critic MLP heads with action masks (`actor_critic`), one network "
                             "shared across subtask slots (`slots`), recurrent (`recurrent`).",
    "parlightning.distribution": "Distribution across ranks: strategies (DP / CP / TP), the round planner, task "
                                 "samplers and rank-agreed counters.",
    "parlightning.analysis": "Reading results: statistics, TensorBoard scalars, episode traces, stage blame.",
    "parlightning.cli": "The programs behind `python -m parlightning.fit|evaluate|export|bc|plot` and their CLI "
                        "helpers (default callbacks, the logged config, packaged configs).",
}
FACADES = {  # a package whose old module name is the package itself: re-export the old module's names
    "parlightning.policies": ["parlightning.policies.actor_critic"],
}
# docs/guides/extending.md's "## Layout" section (to the end of the page) after the move
LAYOUT_PAGE = "docs/guides/extending.md"
LAYOUT = """## Layout

The packages are layers: a module imports only from its own layer or the ones above it in this table
(`python tools/relayout.py --upward` and `python ../shared/tools/import_cycles.py parlightning` check it).
Old module paths (the modules that sat directly in `parlightning/` before this layout) still import, as the moved
module itself (`parlightning/_moved.py`), so a YAML `class_path` written for an earlier release keeps working.

| path | holds |
|---|---|
| `parlightning/errors.py`, `config_types.py`, `method_args.py`, `buffer.py`, `rollout.py` | the shared vocabulary: `ConfigError`; the constrained types of config fields (`PositiveInt`, `PositiveFinite`, ..., `check_args`); the entry checks of public methods (`checked_methods`, `checked`: `Class.method(arg)` errors); `RolloutBuffer` (its per-step fields one table, `STEP_FIELDS`) + GAE; `Rollout` |
| `parlightning/envs/` | the worlds: `BatchedEnv` (and the action-mask contract), `SwarmEnv` (+ `swarm_tasks.py`, the compiled step `swarm_compiled.py` with its C++ source `swarm_step.cpp`), `CartPoleEnv`, `GymVectorEnv`, `MemoryEnv`, `NormalizeEnv`; `external.py`, `world_runner.py`, `world_processes.py`, `world_ray.py`: per-episode worlds on threads, processes or Ray |
| `parlightning/subagents/` | the subagent pool seam (simulated, process, HTTP, async HTTP) |
| `parlightning/runtime/` | `processes.py` (the process toolkit: start method, messages, parent watch, stop, named errors), `checkpoint.py`, `preflight.py` (checks before anything is written), `rank_watch.py` (one rank's fault stops all), `waits.py` (`expected_wait`: a long wait declared with its bound) |
| `parlightning/policies/` | `actor_critic.py` (MLP actor-critic and action heads), `slots.py` (`SlotsActorCritic`), `recurrent.py` (GRU/LSTM); the package re-exports `actor_critic`'s names |
| `parlightning/distribution/` | `strategies.py` (DP / CP / TP / PP refusal), `planning.py` (`RoundPlanner`), `samplers.py` (`RoundRobin`, `DifficultyWeighted`, `PosteriorSignal`), `counters.py` (`AgreedCounters`, the rank-agreed counts) |
| `parlightning/parl/` | `reward.py` (`PARLReward`, λ schedules), `metrics.py` (`CriticalSteps`) |
| `parlightning/collection/` | collection composed ([guide](collection.md)): `StepLoop`, schedules `LockStep` / `LagBudget(k)`, transports inline / thread / process, `finish_round`, `RoundContext`, `Collector` |
| `parlightning/callbacks/` | `RolloutCallback`, `StrategyPlanner`, `PARLAnnealing`, `CriticalStepsMonitor` |
| `parlightning/ppo/` | `loss.py` (`ppo_loss`), `module.py` (`PPOModule`), `data.py` (`RolloutDataModule`: config, loader, checkpoints) |
| `parlightning/analysis/` | `stats.py` (bootstrap CIs), `logs.py` (TensorBoard scalars), `trace.py` (evaluate's `--trace`), `pipeline.py` (`PipelineChain`, per-stage blame) |
| `parlightning/cli/` | the programs: `fit.py`, `evaluate.py`, `export.py`, `bc.py`, `plot.py`; `defaults.py` (progress bar, `last.ckpt`), `config_log.py` (the resolved config to every logger), `packaged.py` (`--config NAME`) |
| `parlightning/{fit,evaluate,export,bc,plot}.py` | thin `python -m parlightning.X` entry modules (importing one gives its `cli` module) |
| `parlightning/api.py`, `inference.py` | the Python API: `fit(config=, overrides=)`, the console scripts; `load_policy(path).predict` |
| `callbacks/` | examples to copy: `BlockPlanner`, `HardestFirst`; shipped as `parlightning.examples` |
| `configs/` | shipped as `parlightning/configs/` (`--config swarm` names `swarm.yaml`) |
| `scripts/` | benchmarks and experiments that print tables, on one runner (`experiment.py`; in a checkout: not in the wheel) |
| `tools/relayout.py` | the move that made this layout (old module -> new module table) |
| `docs/` | guides (`docs/guides/`) and results pages (`docs/results/`) |
"""

ROOTS = ("parlightning", "tests", "scripts", "configs", "callbacks", "docs")
FILES = ("pyproject.toml", "MANIFEST.in")
TEXT = {".py", ".yaml", ".yml", ".md", ".toml", ".cfg", ".txt", ".in", ".json", ".cpp"}
SKIP = ("tools/relayout.py", "parlightning/_moved.py", "tests/test_moved.py")  # they name the old paths on purpose


def path_of(module: str, package: bool = False) -> Path:
    parts = module.split(".")
    return Path(*parts, "__init__.py") if package else Path(*parts[:-1], parts[-1] + ".py")


def git(*args: str, check: bool = True) -> str:
    return subprocess.run(["git", *args], check=check, capture_output=True, text=True).stdout


def dotted_pattern(old: str, new: str) -> re.Pattern:
    """`old` as a whole dotted name, not already part of `new` (so a second run changes nothing)."""
    ahead = ""
    if new.startswith(old + "."):  # e.g. parlightning.policies -> parlightning.policies.actor_critic
        children = sorted({n[len(old) + 1:].split(".")[0] for n in MOVES.values() if n.startswith(old + ".")})
        ahead = r"(?!\.(?:" + "|".join(map(re.escape, children)) + r")\b)"
    return re.compile(r"(?<![\w.])" + re.escape(old) + r"(?![\w])" + ahead)


def path_pattern(old: str) -> re.Pattern:
    return re.compile(r"(?<![\w/.])" + re.escape(path_of(old).as_posix()) + r"(?![\w])")


def rewrite(text: str, is_python: bool) -> str:
    for old, new in sorted(MOVES.items(), key=lambda kv: -len(kv[0])):
        if old not in text and path_of(old).as_posix() not in text:
            continue  # a plain substring test first: the patterns' look-behinds are slow on large data files
        text = path_pattern(old).sub(path_of(new).as_posix(), text)
        if old in ENTRY:  # `python -m parlightning.fit` stays; code imports the program's module
            if is_python:
                text = re.sub(r"(?m)^(\s*(?:from|import)\s+)" + re.escape(old) + r"(?![\w.])",
                              lambda m: m.group(1) + new, text)
                text = re.sub(r"(?m)^(\s*import\s+)" + re.escape(old) + r"(\s+as\s)", lambda m: m.group(1) + new + m.group(2), text)
            continue
        text = dotted_pattern(old, new).sub(new, text)
    if is_python:  # `from parlightning import preflight` -> `from parlightning.runtime import preflight`
        def one(match: re.Match) -> str:
            indent, names = match.group(1), [n.strip() for n in match.group(2).split(",")]
            lines = []
            for name in names:
                alias = name.split(" as ")
                old = f"parlightning.{alias[0].strip()}"
                as_name = alias[-1].strip()
                if old in MOVES and old not in ENTRY:
                    package, _, leaf = MOVES[old].rpartition(".")
                    lines.append(f"{indent}from {package} import {leaf}" + (f" as {as_name}" if as_name != leaf else ""))
                else:
                    lines.append(f"{indent}from parlightning import {name}")
            return "\n".join(lines)
        text = re.sub(r"(?m)^(\s*)from parlightning import ([\w ,]+)$", one, text)
    return text


ENTRY_MARK = "# A thin entry module, written by tools/relayout.py.\n"


def entry_module(old: str, new: str) -> str:
    name = old.rpartition(".")[2]
    return (ENTRY_MARK + f'"""`python -m {old}`: the entry point; the program is `{new}`, and importing `{old}` gives that\n'
            f'module itself (the same object: its names, its patches, a callable `fit`)."""\n\n'
            "import sys\n\n"
            'if __name__ == "__main__":  # a shadowing file, or a signal while importing, is one line\n'
            "    from parlightning.cli.entry import run_program\n\n"
            f'    run_program("{new}")\n'
            "else:\n"
            f"    from {new.rpartition('.')[0]} import {name} as _program\n\n"
            "    sys.modules[__name__] = _program\n")


def package_init(package: str) -> str:
    text = f'"""{PACKAGES[package]}"""\n'
    for module in FACADES.get(package, []):
        text += (f"\n# the names of the old module `{package}` (now `{module}`), so `{package}.X` still resolves\n"
                 f"from {module} import *  # noqa: F401,F403\n")
    return text


def check_alias_table() -> None:
    sys.path.insert(0, str(Path.cwd()))
    from parlightning._moved import MOVED  # noqa: PLC0415

    want = {old: new for old, new in MOVES.items() if old not in ENTRY and old not in FACADES}
    if MOVED != want:
        raise SystemExit(f"error: parlightning/_moved.py's MOVED disagrees with tools/relayout.py's MOVES: "
                         f"{sorted(set(MOVED.items()) ^ set(want.items()))}")


def files_to_rewrite(readme: bool) -> list[Path]:
    tracked = git("ls-files").splitlines() + git("ls-files", "--others", "--exclude-standard").splitlines()
    out = []
    for name in sorted(set(tracked)):
        p = Path(name)
        if name in SKIP or not p.is_file() or p.is_symlink() or p.suffix not in TEXT:
            continue
        if p.parts[0] in ROOTS or name in FILES or (readme and name == "README.md"):
            out.append(p)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="print the moves and rewrites, change nothing")
    parser.add_argument("--readme", action="store_true", help="also rewrite README.md")
    args = parser.parse_args(argv)
    if not Path("parlightning/__init__.py").is_file():
        raise SystemExit("error: run it from the checkout's root (no parlightning/__init__.py here)")
    check_alias_table()
    say = print
    # 1. packages and moves
    for package in PACKAGES:
        init = path_of(package, package=True)
        if not init.exists():
            say(f"write {init}")
            if not args.dry_run:
                init.parent.mkdir(parents=True, exist_ok=True)
                init.write_text(package_init(package))
    for old, new in MOVES.items():
        src, dst = path_of(old), path_of(new)
        if src.exists() and not dst.exists() and not (old in ENTRY and src.read_text().startswith(ENTRY_MARK)):
            say(f"git mv {src} {dst}")
            if not args.dry_run:
                dst.parent.mkdir(parents=True, exist_ok=True)
                git("mv", str(src), str(dst))
        if old in ENTRY and not src.exists():
            say(f"write {src} (thin entry module)")
            if not args.dry_run:
                src.write_text(entry_module(old, new))
    # 2. rewrites
    changed = 0
    for p in files_to_rewrite(args.readme):
        text = p.read_text(encoding="utf-8", errors="surrogateescape")
        new = rewrite(text, p.suffix == ".py")
        if p.suffix == ".py" and p.name != "__init__.py" and p.as_posix() in {path_of(o).as_posix() for o in ENTRY}:
            new = text  # the thin entry modules name their program on purpose
        if new != text:
            changed += 1
            say(f"rewrite {p}")
            if not args.dry_run:
                p.write_text(new, encoding="utf-8", errors="surrogateescape")
    page = Path(LAYOUT_PAGE)
    if page.is_file():
        text = page.read_text(encoding="utf-8")
        head, found, _ = text.partition("## Layout\n")
        if found and text != head + LAYOUT:
            say(f"rewrite {page} (its Layout section)")
            if not args.dry_run:
                page.write_text(head + LAYOUT, encoding="utf-8")
    if not args.dry_run:
        git("add", "-A", "parlightning", "tests", "scripts", "configs", "callbacks", "docs", *FILES, check=False)
    say(f"{changed} files rewritten" + (" (dry run)" if args.dry_run else ""))
    return 0


def upward_imports(root: str = "parlightning") -> list[str]:
    """Modules that import a package containing them (`parlightning.collection.x` importing
    `parlightning.collection` or `parlightning`): none may."""
    found = []
    for path in Path(root).rglob("*.py"):
        module = ".".join(path.with_suffix("").parts)
        module = module[: -len(".__init__")] if module.endswith(".__init__") else module
        ancestors = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
        if path.name == "__init__.py":
            ancestors.discard(module)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] if not any(f"{node.module}.{a.name}" in _modules(root) for a in node.names) else []
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            found += [f"{module} imports {n}" for n in names if n in ancestors]
    return sorted(found)


_MODULES: set[str] = set()


def _modules(root: str) -> set[str]:
    if not _MODULES:
        for path in Path(root).rglob("*.py"):
            name = ".".join(path.with_suffix("").parts)
            _MODULES.add(name[: -len(".__init__")] if name.endswith(".__init__") else name)
    return _MODULES


if __name__ == "__main__":
    if sys.argv[1:] == ["--upward"]:
        lines = upward_imports()
        print("\n".join(lines) or "no upward imports")
        sys.exit(1 if lines else 0)
    sys.exit(main())
