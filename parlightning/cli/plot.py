"""`python -m parlightning.plot`: learning curves over seeds from TensorBoard event files (RL-Zoo's
`plot_train`, openrlbenchmark's style): per group of runs, the mean curve and a confidence band over
seeds, against env steps.

    python -m parlightning.plot runs/seed_*                  # one group: every run folder matched
    python -m parlightning.plot --group mlp='runs/mlp_*' --group slots='runs/slots_*' --out curves.png
    python -m parlightning.plot runs/seed_* --tag rollout/success_rate --smooth 5 --csv curves.csv

A run is any folder holding `events.out.tfevents.*` (a `lightning_logs/version_N`; a folder above
several holds several runs). The x axis is the event step, which parlightning logs as env steps
(the `step` metric). Each run is interpolated onto a common grid over the steps every run of the
group covers; the band is the 95% confidence interval of the mean over runs (Student's t, n - 1
degrees of freedom), or `--band std`. Needs matplotlib (`pip install 'parlightning[plot]'`).
"""

from __future__ import annotations

import argparse
import csv
import glob
import math
import os
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from parlightning.cli.arg_types import ScriptParser, bounded_int, comma_list, output_file, positive_int, text_item
from parlightning.errors import ConfigError
from parlightning.cli.outputs import check_output_file, outputs_together, raise_write_error, written_whole
from parlightning.cli.stop_signals import UNWRITTEN, Signalled, stop_on_signals, stopped

T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_quantile(df: int) -> float:
    """Student's t 0.975 quantile for `df` degrees of freedom (1.96 beyond 30)."""
    return T975[df - 1] if df <= len(T975) else 1.96


@dataclass
class Curve:
    """One group's curve: the grid `steps`, `mean` and band `low`/`high` over its `runs`."""

    name: str
    runs: list[str]
    steps: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray


SEARCH_LIMIT = 200_000  # folder entries looked at below a pattern's matches before it is called too broad


def find_runs(pattern: str, limit: int = SEARCH_LIMIT) -> list[str]:
    """Every folder holding TensorBoard event files (regular files) at or below the folders
    `pattern` matches; a pattern whose folders hold more than `limit` entries (`/*`, `~`) is refused
    instead of searched for minutes."""
    roots = sorted(glob.glob(os.path.expanduser(pattern))) or ([pattern] if os.path.isdir(pattern) else [])
    runs = set()
    seen = 0
    for root in roots:
        walk = os.walk(root) if os.path.isdir(root) else [(os.path.dirname(root) or ".", [], [os.path.basename(root)])]
        for folder, dirs, files in walk:
            seen += len(dirs) + len(files)
            if seen > limit:
                raise ConfigError(f"run pattern {pattern!r}: its folders hold more than {limit:,} files and folders to "
                                  "search for TensorBoard event files; name the runs' folders (e.g. "
                                  "lightning_logs/version_*) or a folder just above them")
            for f in files:
                if f.startswith("events.out.tfevents.") and os.path.isfile(os.path.join(folder, f)):
                    runs.add(folder)
    return sorted(runs)


def read_run(run: str, tag: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of `tag` in one run, sorted by step (the last value of a repeated step)."""
    from parlightning.analysis.logs import read_scalars

    scalars = read_scalars(run)
    if tag not in scalars:
        known = ", ".join(sorted(t for t in scalars if not t.startswith("hp_metric"))[:12])
        raise ConfigError(f"--tag: {run} has no scalar {tag!r}; it logs {known or 'no scalars'}")
    by_step = dict(scalars[tag])
    steps = np.array(sorted(by_step), dtype=np.float64)
    return steps, np.array([by_step[s] for s in sorted(by_step)], dtype=np.float64)


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average over `window` points (1: unchanged)."""
    if window <= 1:
        return values
    c = np.cumsum(np.insert(values, 0, 0.0))
    out = np.empty_like(values)
    for i in range(len(values)):
        lo = max(0, i + 1 - window)
        out[i] = (c[i + 1] - c[lo]) / (i + 1 - lo)
    return out


def group_curve(name: str, runs: Sequence[str], tag: str, points: int = 200, window: int = 1,
                band: str = "ci") -> Curve:
    """Mean and band over `runs` of `tag`, on `points` steps spanning what every run covers."""
    series = [read_run(r, tag) for r in runs]
    start, end = max(s[0] for s, _ in series), min(s[-1] for s, _ in series)
    if start > end:
        raise ConfigError(f"--group {name}: its runs cover no common env steps ({start:g} > {end:g}); "
                          "group runs of the same length")
    exact = all(np.array_equal(s, series[0][0]) for s, _ in series)
    grid = series[0][0] if exact else np.linspace(start, end, points)  # the logged steps when they agree
    ys = np.stack([np.interp(grid, s, smooth(v, window)) for s, v in series])
    mean = ys.mean(0)
    n = ys.shape[0]
    if n == 1:
        half = np.zeros_like(mean)
    else:
        sd = ys.std(0, ddof=1)
        half = sd if band == "std" else t_quantile(n - 1) * sd / math.sqrt(n)
    return Curve(name, list(runs), grid, mean, mean - half, mean + half)


def draw(curves: Sequence[Curve], out: str, tag: str, title: Optional[str], band: str) -> None:
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("--out: drawing needs matplotlib: pip install 'parlightning[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for c in curves:
        (line,) = ax.plot(c.steps, c.mean, label=f"{c.name} (n={len(c.runs)})")
        ax.fill_between(c.steps, c.low, c.high, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel("env steps")
    ax.set_ylabel(tag)
    ax.set_title(title or f"{tag}: mean over seeds, band {'95% CI' if band == 'ci' else '± 1 std'}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def write_csv(curves: Sequence[Curve], path: str) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["group", "runs", "env_steps", "mean", "low", "high"])
        for c in curves:
            for row in zip(c.steps, c.mean, c.low, c.high):
                w.writerow([c.name, len(c.runs), *(f"{v:.6g}" for v in row)])


MAX_POINTS = 1_000_000


def group_spec(text: str) -> str:
    """--group NAME=PATTERN[,PATTERN...]: a name, `=`, and patterns with no empty one."""
    name, sep, patterns = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"must be NAME=PATTERN (e.g. mlp='runs/mlp_*'), got {text!r}")
    try:
        comma_list(text_item)(patterns)
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(f"the patterns after {name}=: {err}") from None
    return text


def build_parser() -> argparse.ArgumentParser:
    p = ScriptParser(prog="python -m parlightning.plot", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="*", help="run folders or glob patterns: one group named 'runs'")
    p.add_argument("--group", action="append", default=[], type=group_spec, metavar="NAME=PATTERN",
                   help="a named group of runs (repeatable; the pattern may be repeated with commas)")
    p.add_argument("--tag", default="charts/episodic_return", help="the scalar to plot (default: episodic return)")
    p.add_argument("--out", type=output_file, default="curves.png", help="the PNG to write")
    p.add_argument("--csv", type=output_file, help="also write the curves' numbers to this CSV")
    p.add_argument("--smooth", type=positive_int, default=1, help="trailing moving average over N logged points")
    p.add_argument("--band", choices=("ci", "std"), default="ci", help="95%% CI of the mean (default) or ± 1 std")
    p.add_argument("--points", type=bounded_int(2, MAX_POINTS), default=200, help="grid points when runs log different steps")
    p.add_argument("--title")  # free text (drawn as the figure's title; checked by _check_title)
    return p


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    return build_parser().parse_args(argv)



def _check_title(title: Optional[str]) -> None:
    """--title is drawn by matplotlib, which reads text between two `$` as math: a formula it cannot
    parse fails when the figure is saved, so it is drawn once here first."""
    if not title or "$" not in title:
        return
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return  # draw() names the missing extra
    fig = Figure(figsize=(2, 1))
    FigureCanvasAgg(fig)
    fig.suptitle(title)
    try:
        fig.canvas.draw()
    except ValueError as err:
        first = " ".join(str(err).split())[:160]
        raise ConfigError(f"--title: {title!r} is not text matplotlib can draw ({first}); matplotlib reads text "
                          "between two $ as a formula: write \\$ for a dollar sign") from None


def _check_image_format(path: str) -> None:
    """--out's suffix must be an image format matplotlib writes (it picks the format from it); a name
    without one is refused (matplotlib would write `NAME.png`, not the file named)."""
    suffix = os.path.splitext(path)[1].lstrip(".").lower()
    if not suffix:
        raise ConfigError(f"--out: {path!r} has no suffix, and the suffix picks the image format (matplotlib would "
                          f"write {path + '.png'!r}, not {path!r}); name the image with its format, e.g. "
                          f"{path + '.png'!r}")
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return  # draw() names the missing extra
    formats = Figure().canvas.get_supported_filetypes()
    if suffix not in formats:
        raise ConfigError(f"--out: {path!r} ends in .{suffix}, which matplotlib cannot write; use .png (or one of "
                          f"{', '.join(sorted(formats)[:8])}, ...)")


def plot(a: argparse.Namespace) -> list[Curve]:
    groups: list[tuple[str, list[str]]] = []
    asked: dict[str, list[str]] = {}  # each group's patterns, to name them when they match nothing
    if a.runs:
        groups.append(("runs", sorted({r for pattern in a.runs for r in find_runs(pattern)})))
        asked["runs"] = list(a.runs)
    for item in a.group:
        name, sep, patterns = item.partition("=")
        if not sep or not name or not patterns:
            raise ConfigError(f"--group: expected NAME=PATTERN (e.g. mlp='runs/mlp_*'), got {item!r}")
        if name in asked:
            raise ConfigError(f"--group: the name {name!r} is given twice (each group is one curve and one legend "
                              "entry); give the groups different names, or list both patterns in one: NAME=A,B")
        groups.append((name, sorted({r for pattern in patterns.split(",") for r in find_runs(pattern)})))
        asked[name] = patterns.split(",")
    if not groups:
        raise ConfigError("runs: name at least one run folder (or --group NAME=PATTERN)")
    for name, runs in groups:
        if not runs:
            shown = ", ".join(repr(p) for p in asked.get(name, []))
            matched = [p for p in asked.get(name, []) if glob.glob(p)]
            why = "holds none" if matched else "matches no file or folder"
            raise ConfigError(f"{'runs' if name == 'runs' else '--group ' + name}: no TensorBoard event files: {shown} "
                              f"{why}; pass run folders such as lightning_logs/version_0 (or a folder above them)")
    if a.smooth < 1 or a.points < 2:
        raise ConfigError("--smooth / --points: need --smooth >= 1 and --points >= 2")
    if a.points > MAX_POINTS:
        raise ConfigError(f"--points: {a.points:,} grid points is more than a figure can show ({MAX_POINTS:,} at "
                          "most; the default 200 suits a plot)")
    _check_title(a.title)
    run_files = [("a file of run " + run, os.path.join(run, f)) for _name, runs in groups for run in runs
                 for f in (os.listdir(run) if os.path.isdir(run) else ())]
    check_output_file("--out", a.out, run_files)
    _check_image_format(a.out)
    check_output_file("--csv", a.csv, run_files + [("--out", a.out)])
    curves = [group_curve(name, runs, a.tag, a.points, a.smooth, a.band) for name, runs in groups]
    with outputs_together():  # --out and --csv both or neither (a failed --csv write leaves no --out)
        with written_whole(a.out) as tmp:
            draw(curves, tmp, a.tag, a.title, a.band)
        if a.csv:
            with written_whole(a.csv) as tmp:
                write_csv(curves, tmp)
    for c in curves:
        print(f"{c.name}: {len(c.runs)} runs, {a.tag} at {c.steps[-1]:,.0f} env steps: {c.mean[-1]:.3f} "
              f"[{c.low[-1]:.3f}, {c.high[-1]:.3f}] ({'95% CI' if a.band == 'ci' else '± 1 std'})")
    print(f"wrote {a.out}")
    return curves


def main(argv: Optional[Sequence[str]] = None) -> list[Curve]:
    a = parse_args(argv)
    try:
        with stop_on_signals(after=UNWRITTEN):  # a signal or Ctrl-C: one line; --out and --csv whole or not at all
            return plot(a)
    except ConfigError as err:
        raise SystemExit(f"error: {err}") from None
    except (Signalled, KeyboardInterrupt) as err:
        stopped(err, UNWRITTEN)
    except OSError as err:  # an output's write failing after the checks (a full disk)
        raise_write_error(err, [("--out", a.out), ("--csv", a.csv)])


if __name__ == "__main__":
    main()
