"""One experiment runner for the study scripts (scripts/parl_study.py, world_fit.py, collapse_study.py):
a plan of jobs (cells x arms x seeds, plus scripted bounds), each job a short chain of processes
(`python -m parlightning.fit`, the command users run, then `python -m parlightning.evaluate` over
several held-out banks and evaluation seeds, then any extra phase), run `--jobs` at a time; every
finished job writes its result JSON atomically under OUT/results/, so a restarted study skips it
(a killed study loses only the jobs in progress: their processes die with it). Statistics (mean ±
std, seeded 95% bootstrap CIs of differences, with the evaluation's bank and seed variation inside
them), TensorBoard read-back and the shared plotting helpers live here too; the drivers describe
their grid and their tables, nothing else.

Not a command: imported by the drivers (`from experiment import ...`, scripts/ on sys.path).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence


ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from parlightning.cli.arg_types import (  # noqa: E402  (stdlib only: a cheap import)
    as_path, comma_list, config_file, episode_count, job_count, output_folder, positive_int, text_item,
)
from parlightning.cli.script_main import last_error_line  # noqa: E402  (stdlib only)

EVAL_BANKS = (1234, 2234, 3234)  # held-out banks every study reports over (1234 is SwarmEnv's default bank)


def bank_seeds(n: int) -> list[int]:
    """The first `n` held-out banks of the studies (1234, 2234, 3234, 4234, ...)."""
    return [EVAL_BANKS[0] + 1000 * i for i in range(n)]


T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}


# ---------------------------------------------------------------------------------------------- processes
# Both launches start their runs through parlightning.runtime.processes (one toolkit for every process
# the package starts): a run exits when the study is gone (`run_owned`'s parent watch), whichever way it
# was started.
def child_env() -> dict[str, str]:
    return dict(os.environ, PYTHONWARNINGS="ignore", PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))


def _forked_run(conn: Any, owner: int, args: list[str], log: str) -> None:  # pragma: no cover - runs in the child
    """A `processes.Child` target: the run's output into `log`, then `run_owned` (nothing is re-imported
    that the fork server has imported already)."""
    import warnings

    from parlightning.runtime.processes import run_owned

    conn.close()  # a run talks through its files, not the pipe
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.chdir(ROOT)
    warnings.simplefilter("ignore")
    try:
        run_owned(owner, args)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


PRELOAD = ["parlightning.fit", "parlightning.evaluate", "parlightning.analysis.pipeline", "torch.utils.tensorboard",
           "lightning.pytorch.loggers.tensorboard", "tensorboard.compat.tensorflow_stub", "attrs", "fsspec"]


class Forked:
    """A `python -m` run in a child of the toolkit's fork server, which has imported the CLIs once
    (`processes.Child` under forkserver with PRELOAD); Popen-like `poll` / `returncode`."""

    _env_set = False

    def __init__(self, cmd: list[str], log: Path) -> None:
        from parlightning.runtime.processes import Child

        if not Forked._env_set:  # before the fork server starts: its children inherit this environment
            os.environ.update(child_env())
            Forked._env_set = True
        self.child = Child(_forked_run, (cmd[1:], str(log)), name=f"run-{log.parent.name}-{log.stem}",
                           what=f"the {log.stem} run of {log.parent.name}", method="forkserver", preload=PRELOAD)

    def poll(self) -> Optional[int]:
        return None if self.child.process.is_alive() else self.child.process.exitcode

    @property
    def returncode(self) -> Optional[int]:
        return self.child.process.exitcode


def spawn(cmd: list[str], log: Path, launch: str) -> Any:
    """Start `python -m ...` as a fresh interpreter (`exec`) or as a child of the preloaded fork server
    (`fork`); either way owned by this process (`processes.run_owned`)."""
    from parlightning.runtime.processes import owned_command

    (log.parent / "command.txt").open("a").write(" ".join(cmd) + "\n")  # the equivalent command line, to rerun by hand
    if launch == "fork":
        return Forked(cmd, log)
    with open(log, "w") as out:
        return subprocess.Popen(owned_command(cmd), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=child_env())


def default_launch(quick: bool) -> str:
    return "fork" if quick and sys.platform.startswith("linux") else "exec"


# ---------------------------------------------------------------------------------------------- files
def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def nested(flat: dict[str, Any]) -> dict[str, Any]:
    """{"data.env.init_args.x": 1} -> {"data": {"env": {"init_args": {"x": 1}}}}."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def override_args(flat: dict[str, Any]) -> list[str]:
    """{"model.lr": 0.01} -> ["--model.lr=0.01"] (values JSON-encoded unless strings)."""
    return [f"--{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in flat.items()]


def open_study(out: Path, plan: dict[str, Any], ignore: Sequence[str] = ("launch",),
               grow: Sequence[str] = ()) -> None:
    """Write the plan to OUT/study.json, or check a resumed study has the same one (`ignore`: keys
    that do not change results); a mismatch is one error naming the changed keys. A `grow` key is a
    list that may gain entries (a study extended with new cells keeps every finished run; dropping
    an entry is a mismatch)."""
    saved = out / "study.json"
    if saved.is_file():
        previous, current = json.loads(saved.read_text()), json.loads(json.dumps(plan))
        grown = lambda k: (k in grow and isinstance(previous.get(k), list)  # noqa: E731
                           and all(x in current.get(k, []) for x in previous[k]))
        changed = sorted(k for k in set(plan) | set(previous)
                         if k not in ignore and previous.get(k) != current.get(k) and not grown(k))
        if changed:
            raise SystemExit(f"error: --out {out} holds a study with other settings ({', '.join(changed)}); "
                             "rerun with the same arguments to resume, or pass a fresh --out")
        grew = [k for k in grow if previous.get(k) != current.get(k)]
        if current != previous:
            write_json_atomic(saved, plan)  # the plan as now run (a grown list, or an ignored key such as launch)
        if grew:
            print(f"extending the study in {out} ({', '.join(grew)} grew)")
        else:
            print(f"resuming the study in {out}")
    else:
        write_json_atomic(saved, plan)


# ---------------------------------------------------------------------------------------------- commands
def fit_cmd(configs: Sequence[Path | str], root: Path, seed: int, overrides: dict[str, Any],
            extra: Sequence[str] = ()) -> list[str]:
    """`python -m parlightning.fit` for one run: configs in order, the seed (init and data), the run
    folder, no progress bar, one thread, then the dotted overrides."""
    cmd = [sys.executable, "-m", "parlightning.fit"]
    for c in configs:
        cmd += ["--config", str(c)]
    cmd += [f"--seed_everything={seed}", f"--data.seed={seed}", f"--trainer.default_root_dir={root}",
            "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false", "--torch_threads=1"]
    return cmd + list(extra) + override_args(overrides)


def eval_cmd(configs: Sequence[Path | str], out_json: Path, *, banks: Sequence[int], seeds: Sequence[int],
             episodes: Optional[int], extra: Sequence[str]) -> list[str]:
    """`python -m parlightning.evaluate --split heldout` over the banks and evaluation seeds, to JSON."""
    cmd = [sys.executable, "-m", "parlightning.evaluate"]
    for c in configs:
        cmd += ["--config", str(c)]
    cmd += ["--split", "heldout", "--json", str(out_json), "--bank_seeds", *map(str, banks), "--seeds", *map(str, seeds)]
    if episodes:
        cmd += ["--episodes", str(episodes)]
    return cmd + list(extra)


def flat_eval(evaluation: dict[str, Any]) -> dict[str, Any]:
    """An evaluate JSON with its headline means at the top level (the several-bank form's summary
    means; the single form as it is), the per-(bank, seed) runs kept under `runs`."""
    if "summary" not in evaluation:
        return evaluation
    out = {k: v["mean"] for k, v in evaluation["summary"].items()}
    out.update(policy=evaluation.get("policy"), split=evaluation.get("split"), bank_seeds=evaluation.get("bank_seeds"),
               seeds=evaluation.get("seeds"), runs=evaluation.get("runs", []),
               spread={k: {"std": v["std"], "std_over_banks": v["std_over_banks"]} for k, v in evaluation["summary"].items()})
    return out


def log_dir(work: Path) -> Path:
    """The newest lightning_logs/version_* under a run folder."""
    versions = sorted((work / "lightning_logs").glob("version_*"), key=lambda p: int(p.name.split("_")[1]))
    if not versions:
        raise RuntimeError(f"no lightning_logs/version_* under {work}")
    return versions[-1]


# ---------------------------------------------------------------------------------------------- jobs
Phase = Callable[["Job"], Optional[tuple[str, list[str]]]]


class Job:
    """One unit of work as a small state machine of processes: each phase (called when the one before
    has exited 0) returns (name, command) or None to skip; `finish(job)` then makes the result that is
    written atomically to STORE/results/<id>.json (STORE: `store`, default OUT; the run's own files stay
    in OUT/work/<id>). Reads: `job.spec`, `job.work`, `job.start`."""

    def __init__(self, spec: dict, out: Path, phases: Sequence[Phase], finish: Callable[["Job"], dict],
                 launch: str, store: Optional[Path] = None) -> None:
        self.spec, self.out, self.launch = spec, out, launch
        self.phases, self.finisher = list(phases), finish
        self.work = out / "work" / spec["id"]
        self.result = result_path(store or out, spec["id"])
        shutil.rmtree(self.work, ignore_errors=True)  # leftovers of a job killed in progress
        self.work.mkdir(parents=True)
        self.start = time.perf_counter()
        self.phase, self.proc = "", None
        self._next()

    def _next(self) -> bool:
        """Start the next phase that has a command; False when none is left."""
        while self.phases:
            step = self.phases.pop(0)(self)
            if step is not None:
                self.phase, cmd = step
                self.proc = spawn(cmd, self.work / f"{self.phase}.log", self.launch)
                return True
        self.proc = None
        return False

    def poll(self) -> Optional[str]:
        """None while running; 'done' once the result JSON is written; raises with the log tail on failure."""
        if self.proc is not None:
            if self.proc.poll() is None:
                return None
            if self.proc.returncode != 0:
                log = self.work / f"{self.phase}.log"
                text = log.read_text(errors="replace") if log.is_file() else ""
                own = last_error_line(text)
                why = own.removeprefix("error:").strip() if own else "\n" + "\n".join(text.splitlines()[-12:])
                raise PhaseFailed(f"{self.spec['id']}: {self.phase} failed (exit {self.proc.returncode}; log {log}): {why}",
                                  self.proc.returncode)
            if self._next():
                return None
        record = self.finisher(self)
        record["wall_s"] = round(time.perf_counter() - self.start, 1)
        if self.spec.get("restarts"):
            record["restarts"] = self.spec["restarts"]  # crashed by a signal, run again from scratch
        write_json_atomic(self.result, record)
        return "done"


class PhaseFailed(RuntimeError):
    """A job's phase exited non-zero; `returncode` < 0: killed by that signal."""

    def __init__(self, message: str, returncode: int) -> None:
        super().__init__(message)
        self.returncode = returncode


RESTARTS = 1  # a run killed by a signal (a crash: SIGSEGV, SIGBUS; the OOM killer) is run again this often


def result_path(store: Path, run_id: str) -> Path:
    """Where one run's result lives: STORE/results/<id>.json."""
    return store / "results" / f"{run_id}.json"


def run_jobs(specs: Sequence[dict], out: Path, parallel: int, make: Callable[[dict], Job],
             store: Optional[Path] = None) -> None:
    """Run every spec whose result is missing from STORE (default OUT), `parallel` at a time; a failure
    lets the others finish and then ends the study with one error line. A run killed by a signal (a
    crash of the interpreter or a library, the OOM killer) is run again from scratch, once (its seed
    fixes it: the same work, not a new draw), and its result records `restarts`; a second crash, or a
    run that exits with an error of its own, ends the study."""
    queue = [s for s in specs if not result_path(store or out, s["id"]).is_file()]
    done = len(specs) - len(queue)
    print(f"{len(specs)} jobs, {done} already finished (skipped), {len(queue)} to run, {parallel} at a time", flush=True)
    running: list[Job] = []
    failure: Optional[str] = None
    while (queue and failure is None) or running:
        while queue and failure is None and len(running) < parallel:
            running.append(make(queue.pop(0)))
        time.sleep(0.2)
        for job in list(running):
            try:
                state = job.poll()
            except Exception as err:  # a failed job: let the others finish, then stop
                running.remove(job)
                crashed = isinstance(err, PhaseFailed) and err.returncode < 0
                if crashed and job.spec.get("restarts", 0) < RESTARTS and failure is None:
                    job.spec["restarts"] = job.spec.get("restarts", 0) + 1
                    print(f"  {job.spec['id']}: {job.phase} killed by {_signal_name(-err.returncode)}; running it "
                          f"again from scratch (restart {job.spec['restarts']} of {RESTARTS})", flush=True)
                    queue.insert(0, job.spec)
                    continue
                failure = failure or str(err)
                continue
            if state == "done":
                running.remove(job)
                done += 1
                print(f"  [{done}/{len(specs)}] {job.spec['id']}  {time.perf_counter() - job.start:5.1f} s", flush=True)
    if failure is not None:
        raise SystemExit(f"error: {failure}")


def publish_page(docs: Path, out: Path, images: dict[str, str], render: Callable[[dict[str, str]], str]) -> None:
    """A study's results page at DOCS, its pictures (files in OUT) copied beside it as
    `<docs stem>_<file>`; `render(named)` writes the page given the pictures that exist there."""
    import shutil

    docs.parent.mkdir(parents=True, exist_ok=True)
    named = {}
    for name, file in images.items():
        target = docs.parent / f"{docs.stem}_{file}"
        if (out / file).is_file():
            shutil.copyfile(out / file, target)
            named[name] = target.name
    docs.write_text(render(named))


def load_results(store: Path, specs: Sequence[dict]) -> list[dict]:
    return [json.loads(result_path(store, s["id"]).read_text()) for s in specs]


# ---------------------------------------------------------------------------------------------- curves
def read_curves(logs: Path, tags: dict[str, Sequence[str]]) -> dict[str, list[list[float]]]:
    """TensorBoard scalars of one run: curve name -> [[env step, value], ...] (the first tag found)."""
    from parlightning.analysis.logs import read_scalars

    scalars = read_scalars(logs)
    out = {}
    for name, options in tags.items():
        for tag in options:
            if tag in scalars:
                out[name] = [[float(s), float(v)] for s, v in scalars[tag]]
                break
    return out


def tail_of(points: list[list[float]]) -> Optional[float]:
    """How much a curve still moved over its last 20% (share of its range); None below 5 points."""
    from parlightning.analysis.stats import tail_share

    if len(points) < 5:  # too few iterations to say whether a curve flattened
        return None
    return tail_share([p[0] for p in points], [p[1] for p in points], frac=0.2)


# ---------------------------------------------------------------------------------------------- statistics
def mean_ci(xs: Sequence[float]) -> tuple[float, float, float]:
    """(mean, std, half-width of the 95% t-interval) over seeds."""
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, 0.0, 0.0
    s = statistics.stdev(xs)
    return m, s, T95.get(len(xs) - 1, 1.96) * s / len(xs) ** 0.5


def mean_std_ci(xs: Sequence[float]) -> str:
    m, s, h = mean_ci(xs)
    return f"{m:.3f}" if len(xs) < 2 else f"{m:.3f} ± {s:.3f} [{m - h:.3f}, {m + h:.3f}]"


def welch_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Welch t-test p-value (the t density integrated numerically, Simpson's rule)."""
    va, vb = statistics.variance(a), statistics.variance(b)
    se = math.sqrt(va / len(a) + vb / len(b))
    if se == 0:
        return 1.0 if statistics.fmean(a) == statistics.fmean(b) else 0.0
    t = abs(statistics.fmean(a) - statistics.fmean(b)) / se
    df = (va / len(a) + vb / len(b)) ** 2 / ((va / len(a)) ** 2 / (len(a) - 1) + (vb / len(b)) ** 2 / (len(b) - 1))
    dens = lambda x: (1 + x * x / df) ** (-(df + 1) / 2)  # noqa: E731
    n, hi = 2000, t
    h = hi / n
    area = dens(0) + dens(hi) + sum((4 if i % 2 else 2) * dens(i * h) for i in range(1, n))
    norm = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
    return max(0.0, 1.0 - 2 * norm * area * h / 3)


def nested_diff_ci(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], *, n_boot: int = 10_000,
                   level: float = 0.95, seed: int = 0) -> Any:
    """mean(a) - mean(b) with a two-level percentile bootstrap: training seeds resampled, then each
    resampled seed's evaluation values (banks x evaluation seeds) resampled, so the evaluation's
    variation lies inside the interval. `a`, `b`: one list of evaluation values per training seed.
    Returns a `parlightning.analysis.stats.DiffCI` (NaN bounds with fewer than 2 seeds per arm)."""
    import numpy as np

    from parlightning.analysis.stats import DiffCI

    def point(groups: Sequence[Sequence[float]]) -> float:
        return float(np.mean([np.mean(g) for g in groups]))

    diff = point(a) - point(b)
    if len(a) < 2 or len(b) < 2:
        return DiffCI(diff, math.nan, math.nan, level, len(a), len(b))
    rng = np.random.default_rng(seed)

    def draws(groups: Sequence[Sequence[float]]) -> Any:
        sizes = {len(g) for g in groups}
        if len(sizes) != 1:
            raise ValueError(f"nested_diff_ci: every seed needs the same number of evaluation values, got {sorted(sizes)}")
        arr = np.asarray(groups, dtype=np.float64)  # [S, E]
        S, E = arr.shape
        seeds = rng.integers(0, S, size=(n_boot, S, 1))
        inner = rng.integers(0, E, size=(n_boot, S, E))
        return arr[seeds, inner].mean(axis=(1, 2))

    boot = draws(a) - draws(b)
    low, high = np.quantile(boot, [(1 - level) / 2, 1 - (1 - level) / 2])
    return DiffCI(diff, float(low), float(high), level, len(a), len(b))


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, or None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


# ---------------------------------------------------------------------------------------------- a plain grid
CURVES = {"success_rate": ("rollout/success_rate",), "critical_steps": ("rollout/critical_steps",),
          "subagents": ("rollout/subagents_per_episode",), "finish_rate": ("rollout/finish_rate",),
          "delegation_share": ("rollout/delegation_share",)}
METRICS = ("success_rate", "serial_success_rate", "speedup_vs_serial", "critical_steps", "subagents_per_episode",
           "finish_rate", "ceiling_success_rate", "ceiling_speedup_vs_serial")


def axis_values(text: str) -> tuple[str, list[Any]]:
    """`KEY=v1,v2,v3` -> (KEY, [v1, v2, v3]) with YAML-typed values; a malformed one raises
    argparse.ArgumentTypeError naming what is accepted."""
    import yaml

    key, sep, values = text.partition("=")
    example = "write KEY=v1,v2,... (e.g. data.env.init_args.merge_cost=0.05,0.2,0.5)"
    if not sep or not key or not values:
        raise argparse.ArgumentTypeError(f"{text!r}: {example}")
    if not key.startswith(("data.", "model.", "trainer.")):
        raise argparse.ArgumentTypeError(f"{text!r}: KEY must be a dotted config key such as data.env.init_args.NAME")
    try:
        items = comma_list(text_item, distinct=False)(values)  # repeats: its own line below
        parsed = [yaml.safe_load(v) for v in items]
    except (argparse.ArgumentTypeError, yaml.YAMLError) as err:
        raise argparse.ArgumentTypeError(f"{text!r}: the values: {' '.join(str(err).split())}; {example}") from None
    if len(set(map(str, parsed))) != len(parsed):
        raise argparse.ArgumentTypeError(f"{text!r}: repeated values")
    return key, parsed


def axis_spec(text: str) -> str:
    """--axis KEY=v1,v2,...: checked by `axis_values`, kept as text (`parse_axis` reads it)."""
    axis_values(text)
    return text


def fit_argument(text: str) -> str:
    """--set: one `python -m parlightning.fit` argument, `--KEY=VALUE` (checked against the fit's parser later)."""
    if not text.startswith("--") or len(text) < 3:
        raise argparse.ArgumentTypeError(f"must be a fit argument such as --trainer.max_epochs=20 (got {text!r})")
    return text


def parse_axis(text: str) -> tuple[str, list[Any]]:
    """`KEY=v1,v2,v3` -> (KEY, [v1, v2, v3]) with YAML-typed values; KEY a dotted config key."""
    try:
        return axis_values(text)
    except argparse.ArgumentTypeError as err:
        raise SystemExit(f"error: --axis {err}") from None


def check_fit_args(configs: Sequence[str], axes: dict[str, list[Any]], extra: Sequence[str]) -> None:
    """Parse the fit config once per axis value (the other axes at their first value) with `--set`'s
    arguments, as `--print_config` (its output dropped): a misspelt key or a value of the wrong type
    is one `error:` line naming the flag, not a failed run per cell."""
    import contextlib
    import io

    from parlightning import fit
    from parlightning.errors import ConfigError

    first = {k: v[0] for k, v in axes.items()}
    variants = [dict(first)] + [{**first, k: v} for k, values in axes.items() for v in values[1:]]
    for cell in variants:
        flag = "--axis / --set" if axes else "--set"
        args = [*(f"--{k}={json.dumps(v) if isinstance(v, (list, dict)) else v}" for k, v in cell.items()), *extra]
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                fit(list(configs), [*args, "--print_config"])
        except ConfigError as err:
            raise SystemExit(f"error: {flag}: {err}") from None
        except SystemExit as exit_:
            if exit_.code in (0, None):
                continue
            text = str(exit_.code).strip().removeprefix("error: ")
            raise SystemExit(f"error: {flag}: {text}") from None


def cell_name(cell: dict[str, Any]) -> str:
    return "_".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in cell.items()) or "default"


def grid_plan(configs: Sequence[str], axes: dict[str, list[Any]], seeds: Sequence[int], extra: Sequence[str],
              banks: Sequence[int], eval_seeds: Sequence[int], episodes: Optional[int], launch: str) -> dict[str, Any]:
    import itertools

    cells = [dict(zip(axes, values)) for values in itertools.product(*axes.values())] or [{}]
    return {"configs": [str(c) for c in configs], "axes": axes, "seeds": list(seeds), "extra": list(extra),
            "banks": list(banks), "eval_seeds": list(eval_seeds), "episodes": episodes, "launch": launch,
            "cells": [{"name": cell_name(c), "overrides": c} for c in cells]}


def grid_specs(plan: dict[str, Any]) -> list[dict]:
    """(cell, seed) runs, seeds outermost (a half-finished grid already has every cell)."""
    return [{"cell": c, "seed": s, "id": f"{c['name']}/seed{s}"} for s in plan["seeds"] for c in plan["cells"]]


def grid_job(spec: dict, plan: dict, out: Path) -> Job:
    def train(job: Job) -> tuple[str, list[str]]:
        return "fit", fit_cmd(plan["configs"], job.work, spec["seed"], spec["cell"]["overrides"], plan["extra"])

    def evaluate(job: Job) -> tuple[str, list[str]]:
        logs = log_dir(job.work)
        return "evaluate", eval_cmd([logs / "config.yaml"], job.work / "eval.json", banks=plan["banks"],
                                    seeds=plan["eval_seeds"], episodes=plan["episodes"],
                                    extra=["--ckpt_path", str(logs / "checkpoints" / "last.ckpt")])

    def finish(job: Job) -> dict:
        logs = log_dir(job.work)
        curves = read_curves(logs, CURVES)
        return {"id": spec["id"], "cell": spec["cell"]["name"], "overrides": spec["cell"]["overrides"],
                "seed": spec["seed"], "eval": flat_eval(json.loads((job.work / "eval.json").read_text())),
                "curves": curves, "tail_share": {k: tail_of(v) for k, v in curves.items()},
                "log_dir": str(logs.relative_to(out))}

    return Job(spec, out, [train, evaluate], finish, plan["launch"])


def run_grid(plan: dict[str, Any], out: Path, parallel: int) -> list[dict]:
    """Every (cell, seed) of the plan trained and evaluated (resuming OUT); the results."""
    out.mkdir(parents=True, exist_ok=True)
    open_study(out, plan)
    specs = grid_specs(plan)
    run_jobs(specs, out, parallel, lambda spec: grid_job(spec, plan, out))
    return load_results(out, specs)


def grid_table(plan: dict[str, Any], results: Sequence[dict]) -> str:
    """Per cell: mean ± std [95% t-interval] over seeds of each held-out metric (each seed's value is
    its mean over the banks and evaluation seeds)."""
    lines = [f"held out over banks {plan['banks']} x evaluation seeds {plan['eval_seeds']}; seeds {plan['seeds']}; "
             "mean ± std [95% t-interval] over seeds", "", "| cell | " + " | ".join(METRICS) + " |",
             "|---" * (len(METRICS) + 1) + "|"]
    for cell in plan["cells"]:
        rs = [r for r in results if r["cell"] == cell["name"]]
        cells = [mean_std_ci([r["eval"][m] for r in rs]) if all(m in r["eval"] for r in rs) else "n/a" for m in METRICS]
        lines.append(f"| {cell['name']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def curve_plot(results: Sequence[dict], curve: str, path: Path, title: str) -> Optional[str]:
    """One panel per cell: each seed's `curve` against env steps (PNG); a reason when not drawn."""
    plt = pyplot()
    if plt is None:
        return "matplotlib is not installed: no plots (pip install matplotlib)"
    cells = list(dict.fromkeys(r["cell"] for r in results))
    cols = min(4, len(cells))
    rows = math.ceil(len(cells) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False, sharey=True)
    for ax, cell in zip(axes.flat, cells):
        for r in results:
            if r["cell"] == cell and curve in r.get("curves", {}):
                pts = r["curves"][curve]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=f"seed {r['seed']}", linewidth=1)
        ax.set_title(cell, fontsize=7)
        ax.set_xlabel("env steps", fontsize=7)
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(cells):]:
        ax.axis("off")
    axes[0][0].set_ylabel(curve, fontsize=7)
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="A grid of configs x seeds: each run trained with python -m "
                                "parlightning.fit and evaluated over held-out banks; resumable.",
                                epilog=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", action="append", type=config_file, default=None, help="fit config(s) (default configs/swarm.yaml)")
    p.add_argument("--axis", action="append", type=axis_spec, default=[], help="KEY=v1,v2,... (repeatable)")
    p.add_argument("--seeds", type=positive_int, default=None, help="seeds per cell (default 3; --quick 2)")
    p.add_argument("--set", action="append", type=fit_argument, default=[], help="an extra fit argument for every run, e.g. "
                   "--set=--trainer.max_epochs=20 (repeatable)")
    p.add_argument("--banks", type=positive_int, default=3, help="held-out banks (default 3)")
    p.add_argument("--eval-seeds", dest="eval_seeds", type=positive_int, default=1, help="evaluation seeds per bank")
    p.add_argument("--episodes", type=episode_count, default=None, help="evaluation episodes per task (default evaluate's)")
    p.add_argument("--jobs", type=job_count, default=1)
    p.add_argument("--out", type=as_path(output_folder), default=None, help="output folder (default runs/experiment/<time>); resumes")
    p.add_argument("--launch", choices=("exec", "fork"), default=None)
    p.add_argument("--quick", action="store_true", help="2 seeds, 2 iterations of 16 x 8, 1 episode per task")
    return p


def main(argv: Optional[list[str]] = None) -> list[dict]:
    from datetime import datetime, timezone

    p = build_parser()
    a = p.parse_args(argv)
    configs = a.config or [str(ROOT / "configs" / "swarm.yaml")]
    extra = list(a.set)
    if a.quick:
        extra = ["--trainer.max_epochs=2", "--data.num_envs=16", "--data.num_steps=8", *extra]
    seeds = a.seeds if a.seeds is not None else (2 if a.quick else 3)
    parsed = [parse_axis(x) for x in a.axis]
    twice = next((key for i, (key, _) in enumerate(parsed) if key in [k for k, _ in parsed[:i]]), None)
    if twice is not None:
        raise SystemExit(f"error: --axis: {twice} is given twice (--axis {twice}=... appears more than once); give "
                         f"every value of one key in one --axis, e.g. --axis {twice}=1e-3,3e-4,1e-2")
    axes = dict(parsed)
    check_fit_args(configs, axes, extra)  # an unknown key or a bad value: one line, before any run or folder
    plan = grid_plan(configs, axes, range(seeds), extra, bank_seeds(a.banks), range(a.eval_seeds),
                     a.episodes or (1 if a.quick else None), a.launch or default_launch(a.quick))
    out = a.out or ROOT / "runs" / "experiment" / datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    results = run_grid(plan, out, a.jobs)
    text = grid_table(plan, results)
    (out / "table.md").write_text(text + "\n")
    write_json_atomic(out / "results.json", results)
    problem = curve_plot(results, "success_rate", out / "success_rate.png", "training success rate per seed")
    print(text)
    print(problem or f"plot: {out / 'success_rate.png'}")
    return results


if __name__ == "__main__":
    from parlightning.cli.script_main import run_main

    run_main(main)


def _signal_name(signum: int) -> str:
    import signal

    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
