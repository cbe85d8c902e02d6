"""Serial collapse, mapped (issue 23 item 6): where does outcome-only PPO collapse to doing everything
itself, and does annealed PARL shaping rescue it there?

Axes: the policy's serial prior (`model.prior` = P(do it yourself) at the start: none, 0.9, 0.99,
0.998, 0.9999, 0.99999 -- the last two added once seed 0 showed that 0.998 no longer collapses with
action masks, to find the edge; or `bc`, behaviour cloning on the serial policy with label smoothing 0.002 before PPO) x the
shaping scale λ (λ1 = λ2 = 0.1 or 1.0) x the training budget (1x or 3x the config's iterations).
Arms: (a) perf_only (r_perf only; it has no λ, so one run serves both λ rows), (b) annealed (λ
linearly to 0 at --anneal-frac of the run's budget), (c) constant λ. Then the anneal horizon as a
third axis in the collapse region: for every (prior, λ, budget) cell where (a) collapsed in most
seeds, arm (b) again with each --horizons fraction. Optional --wide-row: the Kimi-scale world
(configs/swarm_wide.yaml: 64 slots, 100 subagents, slots policy) at --wide-prior (default 0.99999, where
the default world's outcome-only arm stalls) and --wide-lam (default 1.0, the λ that rescued it there).

Collapse, defined before any run: a run collapsed when its held-out success is within 0.05 of the
serial policy's on the same tasks and it spawns fewer than 10 subagents per episode (means over
the banks and evaluation seeds). Every run is evaluated over 3 held-out banks and --eval-seeds
evaluation seeds; CIs are 95% two-level bootstrap intervals (training seeds, then banks x
evaluation seeds) of (b)-(a) and (b)-(c).

Runs go through scripts/experiment.py (resumable: a finished run is never rerun; the same --store
continues). Each run's result (held-out evaluation, curves, BC report) is one small JSON under
STORE/results/, beside STORE/study.json (the plan) and the tables (runs.csv, summary.json); the full
map keeps its store in the repository, docs/results/data/collapse, so it resumes in any checkout
across sessions. A run's own files (logs, checkpoints) stay in OUT/work and are not needed once its
result is written. Outputs in OUT: collapse.md, heatmaps.png, delegation.png (per-seed
`rollout/delegation_share` curves); --docs PATH also writes the page there (the full map writes
docs/results/collapse.md).

    python scripts/collapse_study.py --quick                 # the pipeline in a minute: 2 priors, 2 seeds, tiny budget
    python scripts/collapse_study.py --jobs 2 --wide-row --store docs/results/data/collapse --docs docs/results/collapse.md  # the full map: hours
    python scripts/collapse_study.py --plan --docs docs/results/collapse.md     # the page before any run (no numbers)
    python scripts/collapse_study.py --report --store docs/results/data/collapse --docs docs/results/collapse.md  # the page from finished runs
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/: the shared experiment runner

from experiment import (  # noqa: E402
    ROOT, Job, bank_seeds, default_launch, eval_cmd, fit_cmd, flat_eval, load_results, log_dir, nested_diff_ci,
    open_study, publish_page, pyplot, read_curves, result_path, run_jobs, tail_of, write_json_atomic,
)

from parlightning.cli.arg_types import (  # noqa: E402
    actor_count, as_path, comma_list, config_file, episode_count, job_count, non_negative_float, open_unit_interval,
    output_folder, output_path, positive_fraction, positive_int, step_count,
)

ARMS = ("perf_only", "annealed", "constant")
LABEL = {"perf_only": "(a) r_perf only", "annealed": "(b) annealed", "constant": "(c) constant"}
PRIORS = ("none", "0.9", "0.99", "0.998", "0.9999", "0.99999", "bc")
QUICK_PRIORS = ("0.998", "bc")
COLLAPSE_SUCCESS_GAP, COLLAPSE_SUBAGENTS = 0.05, 10.0
CURVES = {"delegation_share": ("rollout/delegation_share",), "success_rate": ("rollout/success_rate",)}
BC_ARGS = ["--teacher", "serial", "--label_smoothing", "0.002"]


def near_serial(ev: dict[str, Any]) -> bool:
    """The success half of the definition alone: held-out success within the gap of the serial policy's."""
    return ev["success_rate"] - ev["serial_success_rate"] < COLLAPSE_SUCCESS_GAP


def collapsed(ev: dict[str, Any]) -> bool:
    """The definition above, on one run's held-out means."""
    return (ev["success_rate"] - ev["serial_success_rate"] < COLLAPSE_SUCCESS_GAP
            and ev["subagents_per_episode"] < COLLAPSE_SUBAGENTS)


# ---------------------------------------------------------------------------------------------- plan
def make_plan(a: argparse.Namespace) -> dict[str, Any]:
    cfg = yaml.safe_load(Path(a.config).read_text())
    cells = [{"world": "default", "prior": p, "lam": lam, "budget": b} for p in a.priors for lam in a.lams
             for b in a.budgets]
    if a.wide_row:
        cells += [{"world": "wide", "prior": a.wide_prior, "lam": a.wide_lam, "budget": 1}]
    for c in cells:
        c["name"] = f"{c['world']}_prior={c['prior']}_lam={c['lam']}_budget={c['budget']}x"
    return {"config": portable(a.config), "seeds": a.seeds, "cells": cells, "epochs": a.epochs,
            "num_envs": a.num_envs or int(cfg["data"]["num_envs"]), "num_steps": a.num_steps or int(cfg["data"]["num_steps"]),
            "anneal_frac": a.anneal_frac, "horizons": a.horizons, "banks": bank_seeds(3), "eval_seeds": list(range(a.eval_seeds)),
            "episodes": a.episodes, "bc": {"rounds": a.bc_rounds, "epochs": a.bc_epochs}, "launch": a.launch,
            "quick": a.quick}


def portable(path: Path) -> str:
    """A path as the plan records it: relative to the checkout when inside it, so a study stored in the
    repository resumes from any clone."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path.resolve())


def run_id(cell: dict, arm: str, seed: int, horizon: Optional[float] = None) -> str:
    lam = "nolam" if arm == "perf_only" else f"lam={cell['lam']}"  # (a) is the same run for every λ
    tail = f"_h={horizon}" if horizon is not None else ""
    return f"{cell['world']}_prior={cell['prior']}_budget={cell['budget']}x/{arm}_{lam}{tail}/seed{seed}"


def specs_of(plan: dict[str, Any], horizon_cells: tuple[str, ...] = ()) -> list[dict]:
    """Every run of the main grid (the default world before the wide row, whose runs cost ~40 minutes
    each on one core; then budget, so the 1x map completes first; then seeds), then the horizon runs
    of `horizon_cells`."""
    seen, out = set(), []
    order = sorted({(c["world"] != "default", c["budget"]) for c in plan["cells"]})
    for (wide, budget), seed in ((o, s) for o in order for s in range(plan["seeds"])):
        for cell in (c for c in plan["cells"] if c["budget"] == budget and (c["world"] != "default") == wide):
            for arm in ARMS:
                rid = run_id(cell, arm, seed)
                if rid not in seen:
                    seen.add(rid)
                    out.append({"id": rid, "cell": cell, "arm": arm, "seed": seed, "horizon": plan["anneal_frac"]})
    for seed in range(plan["seeds"]):
        for cell in plan["cells"]:
            if cell["name"] in horizon_cells:
                for h in plan["horizons"]:
                    if h != plan["anneal_frac"]:
                        out.append({"id": run_id(cell, "annealed", seed, h), "cell": cell, "arm": "annealed",
                                    "seed": seed, "horizon": h, "horizon_axis": True})
    return out


def configs_of(plan: dict, cell: dict, arm: str) -> list[str]:
    """The base config, the wide world where asked, then the arm's reward config (its λ values are
    overridden per cell)."""
    files = {"perf_only": "perf_only", "annealed": "parl_annealed", "constant": "parl_constant"}
    wide = [str(ROOT / "configs" / "swarm_wide.yaml")] if cell["world"] == "wide" else []
    return [str(ROOT / plan["config"]), *wide, str(ROOT / "configs" / "arms" / f"{files[arm]}.yaml")]


def run_overrides(plan: dict, spec: dict) -> dict[str, Any]:
    """The run's dotted overrides: budget, λ schedules, prior (BC: set by the bc phase)."""
    cell, arm = spec["cell"], spec["arm"]
    epochs = plan["epochs"] * cell["budget"]
    steps = epochs * plan["num_envs"] * plan["num_steps"]
    o: dict[str, Any] = {"trainer.max_epochs": epochs, "data.num_envs": plan["num_envs"], "data.num_steps": plan["num_steps"]}
    for lam in ("lambda1", "lambda2"):  # the arm's config sets the schedule's class; here its values
        key = f"data.reward.init_args.{lam}.init_args"
        if arm == "constant":
            o[f"{key}.value"] = cell["lam"]
        elif arm == "annealed":
            o[f"{key}.start"], o[f"{key}.end"] = cell["lam"], 0.0
            o[f"{key}.horizon"] = max(1, round(spec["horizon"] * steps))
    if cell["world"] == "wide":  # the arm configs name the default world's cap
        o["data.reward.init_args.max_subagents"] = 100
    if cell["prior"] not in ("none", "bc"):
        o["model.prior"] = float(cell["prior"])
    return o


def finished(store: Path, specs: list[dict]) -> list[dict]:
    """The results of the specs that have finished (all of them after a complete run)."""
    return load_results(store, [s for s in specs if result_path(store, s["id"]).is_file()])


def make_job(spec: dict, plan: dict, out: Path, store: Path) -> Job:
    configs = configs_of(plan, spec["cell"], spec["arm"])

    def bc(job: Job) -> Optional[tuple[str, list[str]]]:
        if spec["cell"]["prior"] != "bc":
            return None
        cmd = [sys.executable, "-m", "parlightning.bc"]
        for c in configs:
            cmd += ["--config", c]
        return "bc", cmd + [*BC_ARGS, "--out", str(job.work / "bc.ckpt"), "--seed", str(spec["seed"]),
                            "--rounds", str(plan["bc"]["rounds"]), "--epochs", str(plan["bc"]["epochs"]),
                            "--num_envs", str(plan["num_envs"]), "--json", str(job.work / "bc.json")]

    def train(job: Job) -> tuple[str, list[str]]:
        o = run_overrides(plan, spec)
        if spec["cell"]["prior"] == "bc":
            o["model.init_from"] = str(job.work / "bc.ckpt")
        return "fit", fit_cmd(configs, job.work, spec["seed"], o)

    def evaluate(job: Job) -> tuple[str, list[str]]:
        logs = log_dir(job.work)
        return "evaluate", eval_cmd([logs / "config.yaml"], job.work / "eval.json", banks=plan["banks"],
                                    seeds=plan["eval_seeds"], episodes=plan["episodes"],
                                    extra=["--ckpt_path", str(logs / "checkpoints" / "last.ckpt")])

    def finish(job: Job) -> dict[str, Any]:
        logs = log_dir(job.work)
        curves = read_curves(logs, CURVES)
        ev = flat_eval(json.loads((job.work / "eval.json").read_text()))
        record = {k: spec[k] for k in ("id", "arm", "seed", "horizon")}
        record.update(cell=spec["cell"], horizon_axis=bool(spec.get("horizon_axis")), eval=ev, curves=curves,
                      tail_share={k: tail_of(v) for k, v in curves.items()}, collapsed=collapsed(ev),
                      env_steps=plan["epochs"] * spec["cell"]["budget"] * plan["num_envs"] * plan["num_steps"],
                      log_dir=str(logs.relative_to(out)))
        if (job.work / "bc.json").is_file():
            record["bc"] = {k: v for k, v in json.loads((job.work / "bc.json").read_text()).items() if k != "loss_per_epoch"}
        return record

    return Job(spec, out, [bc, train, evaluate], finish, plan["launch"], store)


# ---------------------------------------------------------------------------------------------- analysis
def runs_of(results: list[dict], cell: dict, arm: str, horizon_axis: bool = False) -> list[dict]:
    same = lambda c: all(c[k] == cell[k] for k in ("world", "prior", "budget"))  # noqa: E731
    return [r for r in results if same(r["cell"]) and r["arm"] == arm and r["horizon_axis"] == horizon_axis
            and (arm == "perf_only" or r["cell"]["lam"] == cell["lam"])]


def eval_values(runs: list[dict], metric: str) -> list[list[float]]:
    return [[e[metric] for e in r["eval"]["runs"]] for r in runs]


def stat(runs: list[dict], metric: str) -> Optional[dict[str, float]]:
    from parlightning.analysis.stats import mean_std

    if not runs:
        return None
    m, s = mean_std([r["eval"][metric] for r in runs])
    return {"mean": m, "std": s}


def final_delegation(r: dict) -> Optional[float]:
    pts = r["curves"].get("delegation_share")
    return pts[-1][1] if pts else None


def summarize(plan: dict, results: list[dict], seed: int = 0) -> dict[str, Any]:
    cells = []
    for cell in plan["cells"]:
        arms = {}
        for arm in ARMS:
            rs = runs_of(results, cell, arm)
            finals = [x for x in (final_delegation(r) for r in rs) if x is not None]
            arms[arm] = {"seeds": len(rs), "collapsed": sum(r["collapsed"] for r in rs),
                         "near_serial": sum(near_serial(r["eval"]) for r in rs),
                         **{m: stat(rs, m) for m in ("success_rate", "speedup_vs_serial", "subagents_per_episode",
                                                     "serial_success_rate", "ceiling_success_rate")},
                         "final_delegation_share": (sum(finals) / len(finals)) if finals else None,
                         "curves_flat": sum(1 for r in rs if (r["tail_share"].get("success_rate") or 1.0) <= 0.1),
                         "curves_measured": sum(1 for r in rs if r["tail_share"].get("success_rate") is not None)}
        diffs = {}
        b = runs_of(results, cell, "annealed")
        for other, tag in (("perf_only", "b-a"), ("constant", "b-c")):
            o = runs_of(results, cell, other)
            for m in ("success_rate", "speedup_vs_serial"):
                if b and o:
                    ci = nested_diff_ci(eval_values(b, m), eval_values(o, m), seed=seed)
                    diffs[f"{tag}/{m}"] = ci.as_dict() | {"label": ci.label()}
        horizons = {}
        a_runs = runs_of(results, cell, "perf_only")
        for h in plan["horizons"]:
            hr = [r for r in runs_of(results, cell, "annealed", True) if r["horizon"] == h] if h != plan["anneal_frac"] else b
            if hr and a_runs:
                ci = nested_diff_ci(eval_values(hr, "success_rate"), eval_values(a_runs, "success_rate"), seed=seed)
                horizons[str(h)] = {"seeds": len(hr), "success": stat(hr, "success_rate"),
                                    "b-a/success_rate": ci.as_dict() | {"label": ci.label()},
                                    "subagents": stat(hr, "subagents_per_episode")}
        cells.append({**cell, "arms": arms, "diffs": diffs, "horizons": horizons,
                      "a_collapses": arms["perf_only"]["seeds"] > 0
                      and 2 * arms["perf_only"]["collapsed"] > arms["perf_only"]["seeds"],
                      "a_stalls": arms["perf_only"]["seeds"] > 0
                      and 2 * arms["perf_only"]["near_serial"] > arms["perf_only"]["seeds"]})
    return {"plan": {k: v for k, v in plan.items() if k != "cells"}, "cells": cells,
            "collapse": {"success_gap": COLLAPSE_SUCCESS_GAP, "subagents": COLLAPSE_SUBAGENTS},
            "bootstrap": {"seed": seed, "n_boot": 10000, "level": 0.95}}


def in_region(cell: dict) -> bool:
    """Where the anneal-horizon axis runs: (a) collapsed in most seeds, or (added after the first 1x
    results, where no run met the subagent half of the definition) its success stalled within the gap
    of the serial policy's in most seeds."""
    return cell["a_collapses"] or cell.get("a_stalls", False)


def fmt(s: Optional[dict], d: int = 3) -> str:
    return "n/a" if not s else f"{s['mean']:.{d}f} ± {s['std']:.{d}f}"


def budget_note(plan: dict) -> str:
    """Which budgets (and, where a budget covers only some priors, which priors) this plan holds so far:
    a map run 1x first gains its 3x cells later, prior by prior."""
    default = [c for c in plan["cells"] if c["world"] == "default"]
    priors = list(dict.fromkeys(c["prior"] for c in default))
    partial = {b: [p for p in priors if any(c["prior"] == p and c["budget"] == b for c in default)]
               for b in sorted({c["budget"] for c in default})}
    if sorted(partial) == [1, 3] and all(len(v) == len(priors) for v in partial.values()) or not default:
        return ""
    held = "; ".join(f"{b}x: " + ("every prior" if len(v) == len(priors) else "priors " + ", ".join(map(str, v)))
                     for b, v in partial.items())
    return (f" This plan holds, so far, {held}; the other cells are not run yet (the same --store grows: "
            "`--priors ... --budgets 3` adds cells).")


def merged_cells(store: Path, plan: dict) -> None:
    """A study's cells are the union of every invocation's (so `--priors 0.99999 --budgets 3` adds the
    3x cells of one prior to a map that holds every prior at 1x): the saved cells first, in their
    order, then the new ones."""
    saved = store / "study.json"
    if saved.is_file():
        old = json.loads(saved.read_text()).get("cells", [])
        plan["cells"] = old + [c for c in plan["cells"] if c not in old]


def page(summary: Optional[dict], plan: dict, images: dict[str, str], progress: Optional[tuple[int, int]] = None) -> str:
    """docs/results/collapse.md: the definition, the budgets, then the map (or that it has not run)."""
    p = plan
    steps = p["epochs"] * p["num_envs"] * p["num_steps"]
    lines = ["# Serial collapse, mapped", "",
             "Generated by `scripts/collapse_study.py` (do not edit by hand). Issue 23 item 6: where outcome-only PPO "
             "collapses to doing everything itself, and whether annealed PARL shaping rescues it there.", "",
             "## Design (fixed before any run)", "",
             f"- **Collapse**: a run collapsed when its held-out success is within {COLLAPSE_SUCCESS_GAP} of the serial "
             f"policy's on the same tasks and it spawns fewer than {COLLAPSE_SUBAGENTS:g} subagents per episode (means "
             "over the banks and evaluation seeds); a cell's arm collapses when most of its seeds do.",
             "- **Axes**: serial prior (P(do it yourself) at the start: " + ", ".join(p_ for p_ in PRIORS) + "; `bc` = "
             "behaviour cloning on the serial policy, label smoothing 0.002) x λ scale (0.1, 1.0) x budget (1x, 3x).",
             "- **Arms**: (a) r_perf only; (b) λ1 = λ2 = λ annealed linearly to 0 at "
             f"{p['anneal_frac']} of the run's budget; (c) λ constant. The anneal horizon ({p['horizons']} of the "
             "budget) is a third axis in the cells where (a) collapses.",
             f"- **Budget**: 1x = {p['epochs']} PPO iterations of {p['num_envs']} actors x {p['num_steps']} steps "
             f"= {steps:,} env steps; 3x = {3 * steps:,}." + budget_note(p),
             "- **Kimi-scale row** (`--wide-row`" + (", in this plan" if any(c["world"] == "wide" for c in p["cells"])
                                                     else ", not in this plan") + "): configs/swarm_wide.yaml (64 slots, "
             "100 subagents, slots policy) at a collapsing prior, 1x budget, the three arms" + "".join(
                 f" (here: prior {c['prior']}, λ {c['lam']})" for c in p["cells"] if c["world"] == "wide") + ".",
             f"- **Evaluation**: held out over banks {p['banks']} x evaluation seeds {p['eval_seeds']}, greedy; "
             f"{p['seeds']} training seeds per cell and arm; 95% two-level bootstrap CIs (seeds, then banks x "
             "evaluation seeds).",
             "- **Added after the first 1x results** (no run met the subagent half of the collapse definition: weak "
             "policies still delegate, badly): the table also counts the seeds whose (a) success is within "
             f"{COLLAPSE_SUCCESS_GAP} of serial (near serial), and the anneal-horizon axis also runs in cells where most "
             "(a) seeds are near serial."]
    if any(c["world"] == "wide" for c in p["cells"]):
        lines.append(f"- **Added after the wide row's first runs**: the subagent half of the collapse definition "
                     f"(fewer than {COLLAPSE_SUBAGENTS:g} per episode) was set for the default world (12 slots); on the "
                     "wide world a policy at the serial policy's success can spawn hundreds of subagents per episode "
                     "and gain nothing from them, so for the wide row the near-serial count is the informative one.")
    lines.append("")
    if summary is None:
        lines += ["## Results", "", "**Not yet run at full budget.** The full map takes many hours on 2 cores and "
                  "resumes across sessions:", "", "    python scripts/collapse_study.py --jobs 2 --wide-row --out runs/collapse "
                  "--docs docs/results/collapse.md", "",
                  "No numbers are shown here until that run has finished; `--quick` checks the pipeline only."]
        return "\n".join(lines) + "\n"
    if p.get("quick"):
        lines += ["## Results (quick smoke run)", "", "**Not yet run at full budget.** This page comes from `--quick` "
                  "(a tiny budget, 2 seeds, a reduced grid): its numbers test the pipeline and say nothing about "
                  "collapse.", ""]
    else:
        lines += ["## Results", ""]
    if progress is not None and progress[0] < progress[1]:
        lines += [f"**Partial: {progress[0]} of {progress[1]} planned runs have finished**; "
                  "each row below says how many seeds it holds (the (a) collapsed column's denominator), and a cell "
                  "with fewer seeds than planned has wider intervals. The study resumes with the same command.", ""]
    lines += ["| world | prior | λ | budget | (a) collapsed (near serial) | success (a) / (b) / (c) | subagents / ep (a) / (b) / (c) | "
              "final delegation share (a) / (b) / (c) | (b)-(a) success | (b)-(c) success | serial success |",
              "|---" * 11 + "|"]
    for c in summary["cells"]:
        arms = c["arms"]

        def three(key: str, d: int = 3, _arms: dict = arms) -> str:
            return " / ".join(f"{_arms[a][key]['mean']:.{d}f}" if _arms[a].get(key) else "n/a" for a in ARMS)

        deleg = " / ".join(f"{arms[a]['final_delegation_share']:.3f}" if arms[a]["final_delegation_share"] is not None
                           else "n/a" for a in ARMS)
        serial = arms["perf_only"]["serial_success_rate"]
        serial_text = f"{serial['mean']:.3f}" if serial else "n/a"
        a_arm = arms["perf_only"]
        lines.append(f"| {c['world']} | {c['prior']} | {c['lam']} | {c['budget']}x | {a_arm['collapsed']}/"
                     f"{a_arm['seeds']} ({a_arm.get('near_serial', 0)}/{a_arm['seeds']}) | {three('success_rate')} | {three('subagents_per_episode', 1)} | "
                     f"{deleg} | {c['diffs'].get('b-a/success_rate', {}).get('label', 'n/a')} | "
                     f"{c['diffs'].get('b-c/success_rate', {}).get('label', 'n/a')} | {serial_text} |")
    hz = [c for c in summary["cells"] if c["horizons"] and in_region(c)]
    lines += ["", "### Anneal horizon in the collapse region", ""]
    if hz:
        lines += ["| cell | horizon (share of budget) | (b) success | (b) subagents / ep | (b)-(a) success |", "|---" * 5 + "|"]
        for c in hz:
            for h, row in c["horizons"].items():
                lines.append(f"| {c['name']} | {h} | {fmt(row['success'])} | {fmt(row['subagents'], 1)} | "
                             f"{row['b-a/success_rate']['label']} |")
    else:
        lines.append("No cell in which (a) collapsed or stalled near serial success in most seeds: no horizon runs.")
    flat = [(c["name"], a, c["arms"][a]["curves_flat"], c["arms"][a]["curves_measured"]) for c in summary["cells"]
            for a in ARMS]
    unflat = [f"{n} {LABEL[a]} ({k}/{m} flat)" for n, a, k, m in flat if m and k < m]
    short = any(m == 0 for *_, m in flat)
    lines += ["", "### Curves", "", "Success curves that had not flattened (last 20% moved more than 10% of their "
              "range) by the end of the budget: " + ("; ".join(unflat) if unflat else "none") + "."
              + (" Runs of fewer than 5 iterations cannot tell (not counted)." if short else ""), ""]
    for name, path in images.items():
        lines += [f"![{name}]({path})", ""]
    return "\n".join(lines) + "\n"


def heatmaps(summary: dict, path: Path) -> Optional[str]:
    plt = pyplot()
    if plt is None:
        return "matplotlib is not installed: no heatmaps"
    cells = [c for c in summary["cells"] if c["world"] == "default"]
    priors = list(dict.fromkeys(c["prior"] for c in cells))
    cols = list(dict.fromkeys((c["lam"], c["budget"]) for c in cells))
    panels = [("(a) collapsed seeds", lambda c: (c["arms"]["perf_only"]["collapsed"] / c["arms"]["perf_only"]["seeds"]
                                                 if c["arms"]["perf_only"]["seeds"] else None)),  # not run: blank
              ("(a) final delegation share", lambda c: c["arms"]["perf_only"]["final_delegation_share"]),
              ("(b)-(a) held-out success", lambda c: c["diffs"].get("b-a/success_rate", {}).get("diff")),
              ("(b)-(c) held-out success", lambda c: c["diffs"].get("b-c/success_rate", {}).get("diff"))]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels), 0.6 * len(priors) + 2.2), squeeze=False)
    for ax, (title, get) in zip(axes[0], panels):
        grid = [[math.nan] * len(cols) for _ in priors]
        notes = [[""] * len(cols) for _ in priors]
        for c in cells:
            i, j = priors.index(c["prior"]), cols.index((c["lam"], c["budget"]))
            v = get(c)
            if v is not None:
                grid[i][j] = v
                key = "b-a/success_rate" if "(b)-(a)" in title else "b-c/success_rate" if "(b)-(c)" in title else None
                ns = key is not None and not c["diffs"].get(key, {}).get("significant", False)
                notes[i][j] = f"{v:+.2f}" + ("\nns" if ns else "") if key else f"{v:.2f}"
        diff = title.startswith("(b)")
        lim = max([abs(v) for row in grid for v in row if not math.isnan(v)] + [0.05]) if diff else None
        im = ax.imshow(grid, cmap="RdBu" if diff else "viridis", vmin=-lim if diff else 0, vmax=lim if diff else 1,
                       aspect="auto")
        for i in range(len(priors)):
            for j in range(len(cols)):
                ax.text(j, i, notes[i][j], ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(cols)), [f"λ {lam}\n{b}x" for lam, b in cols], fontsize=7)
        ax.set_yticks(range(len(priors)), priors, fontsize=7)
        ax.set_ylabel("prior P(do it yourself)", fontsize=7)
        ax.set_title(title, fontsize=8)
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.suptitle("serial collapse map (held-out; ns = 95% CI covers 0)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def delegation_curves(results: list[dict], plan: dict, path: Path) -> Optional[str]:
    plt = pyplot()
    if plt is None:
        return "matplotlib is not installed: no curves"
    cells = plan["cells"]
    cols = min(4, len(cells))
    rows = math.ceil(len(cells) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False, sharey=True)
    colour = {"perf_only": "tab:grey", "annealed": "tab:blue", "constant": "tab:red"}
    for ax, cell in zip(axes.flat, cells):
        for arm in ARMS:
            for r in runs_of(results, cell, arm):
                pts = r["curves"].get("delegation_share", [])
                ax.plot([q[0] for q in pts], [q[1] for q in pts], color=colour[arm], linewidth=0.8,
                        label=LABEL[arm] if r["seed"] == 0 else None)
        ax.set_title(cell["name"], fontsize=6)
        ax.set_ylim(0, 1)
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(cells):]:
        ax.axis("off")
    drawn = [ax for ax in axes.flat if ax.lines]  # (a partial map's first panels may be empty)
    if drawn:
        drawn[0].legend(fontsize=6)
    axes[0][0].set_ylabel("rollout/delegation_share", fontsize=7)
    fig.suptitle("share of live decisions that delegate, per seed (x: env steps)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def write_csv(results: list[dict], path: Path) -> None:
    cols = ["id", "world", "prior", "lam", "budget", "arm", "horizon", "seed", "env_steps", "success_rate",
            "serial_success_rate", "speedup_vs_serial", "subagents_per_episode", "collapsed", "final_delegation_share"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in results:
            row = {**r["cell"], **r["eval"], **{k: r[k] for k in ("id", "arm", "horizon", "seed", "env_steps", "collapsed")},
                   "final_delegation_share": final_delegation(r)}
            w.writerow([row.get(c, "") for c in cols])


# ---------------------------------------------------------------------------------------------- main
def prior_value(text: str) -> str:
    """A row's prior: none, bc, or a per-slot probability in (0, 1) (kept as the text the run names)."""
    if text in ("none", "bc"):
        return text
    try:
        open_unit_interval(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be none, bc or a number in (0, 1) (got {text!r})") from None
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=as_path(config_file), default=ROOT / "configs" / "swarm.yaml")
    p.add_argument("--priors", type=comma_list(prior_value), default=None, help=f"comma-separated (default {','.join(PRIORS)})")
    p.add_argument("--lams", type=comma_list(non_negative_float), default=None, help="λ scales (default 0.1,1.0)")
    p.add_argument("--budgets", type=comma_list(positive_int), default=None, help="budget multiples (default 1,3)")
    p.add_argument("--seeds", type=positive_int, default=None, help="seeds per cell and arm (default 5; --quick 2)")
    p.add_argument("--epochs", type=positive_int, default=None, help="PPO iterations of the 1x budget (default: the config's)")
    p.add_argument("--num-envs", dest="num_envs", type=actor_count, default=None)
    p.add_argument("--num-steps", dest="num_steps", type=step_count, default=None)
    p.add_argument("--anneal-frac", dest="anneal_frac", type=positive_fraction, default=0.6)
    p.add_argument("--horizons", type=comma_list(positive_fraction), default=None,
                   help="anneal horizons in the collapse region (share of the budget; default 0.2,0.6,1.0)")
    p.add_argument("--eval-seeds", dest="eval_seeds", type=positive_int, default=None, help="evaluation seeds per bank (default 2)")
    p.add_argument("--episodes", type=episode_count, default=None, help="evaluation episodes per task (default 4; --quick 1)")
    p.add_argument("--bc-rounds", dest="bc_rounds", type=step_count, default=32)
    p.add_argument("--bc-epochs", dest="bc_epochs", type=positive_int, default=30)
    p.add_argument("--wide-row", dest="wide_row", action="store_true", help="add the Kimi-scale row")
    p.add_argument("--wide-prior", dest="wide_prior", type=prior_value, default="0.99999", help="the wide row's prior (a per-slot "
                   "probability: over 64 slots a prior is weaker per round than over 12)")
    p.add_argument("--wide-lam", dest="wide_lam", type=non_negative_float, default=1.0, help="the wide row's λ scale")
    p.add_argument("--jobs", type=job_count, default=1)
    p.add_argument("--out", type=as_path(output_folder), default=None, help="output folder (default runs/collapse/<time>); resumes")
    p.add_argument("--store", type=as_path(output_folder), default=None, help="where study.json and results/<run>.json live (default "
                   "--out); small enough to commit, so a study resumes in another checkout: the full map uses "
                   "docs/results/data/collapse")
    p.add_argument("--docs", type=as_path(output_path), default=None, help="also write the results page here")
    p.add_argument("--plan", action="store_true", help="write the page without running anything (needs --docs)")
    p.add_argument("--report", action="store_true", help="run nothing: summarize the finished runs in --out (partial "
                   "allowed; the page says how many) and write the page and plots")
    p.add_argument("--launch", choices=("exec", "fork"), default=None)
    p.add_argument("--quick", action="store_true", help="2 priors x λ 1.0 x 1x budget x 2 seeds, 2 iterations of 16 x 8")
    return p


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = build_parser()
    a = p.parse_args(argv)
    cfg = yaml.safe_load(a.config.read_text())
    q = a.quick
    a.priors = a.priors or list(QUICK_PRIORS if q else PRIORS)
    a.lams = a.lams or ([1.0] if q else [0.1, 1.0])
    a.budgets = a.budgets or ([1] if q else [1, 3])
    a.horizons = a.horizons or ([0.3, 0.6] if q else [0.2, 0.6, 1.0])
    pick = lambda v, quick, full: v if v is not None else (quick if q else full)  # noqa: E731
    a.seeds = pick(a.seeds, 2, 5)
    a.epochs = pick(a.epochs, 2, int(cfg["trainer"]["max_epochs"]))
    a.num_envs = pick(a.num_envs, 16, None)
    a.num_steps = pick(a.num_steps, 8, None)
    a.eval_seeds = pick(a.eval_seeds, 1, 2)
    a.episodes = pick(a.episodes, 1, 4)
    if q:
        a.bc_rounds, a.bc_epochs = min(a.bc_rounds, 4), min(a.bc_epochs, 5)
    if a.epochs <= 0:  # the config's trainer.max_epochs (the arguments are checked by their types)
        raise SystemExit(f"error: --config: trainer.max_epochs must be positive, got {a.epochs}; or pass --epochs")
    if a.report and a.out is None and a.store is None:
        raise SystemExit("error: --report: summarizes an existing study; give its --store (or --out)")
    if a.plan and a.docs is None:
        raise SystemExit("error: --plan: writes the page only; give --docs PATH")
    a.launch = a.launch or default_launch(q)
    return a


def main(argv: Optional[list[str]] = None) -> Optional[dict]:
    a = parse_args(argv)
    plan = make_plan(a)
    if a.plan:
        a.docs.parent.mkdir(parents=True, exist_ok=True)
        a.docs.write_text(page(None, plan, {}))
        print(f"wrote {a.docs} (the design; no run yet)")
        return None
    out = a.out or ROOT / "runs" / "collapse" / datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    store = a.store or out  # study.json and results/<run>.json; OUT keeps the runs' own files
    if a.report:
        if not (store / "study.json").is_file():
            raise SystemExit(f"error: --report: no study in {store} (no study.json); give the --store (or --out) of a study")
        merged_cells(store, plan)  # the page covers the whole study, whichever cells these arguments name
        open_study(store, plan, grow=("cells",))  # the same settings as the runs (cells may grow: results
        # copied in from another store of the same settings), or one error naming what differs
        main_specs = specs_of(plan)
        first = summarize(plan, finished(store, main_specs))
        specs = specs_of(plan, tuple(c["name"] for c in first["cells"] if in_region(c)))
    else:
        out.mkdir(parents=True, exist_ok=True)
        store.mkdir(parents=True, exist_ok=True)
        merged_cells(store, plan)
        open_study(store, plan, grow=("cells",))  # a map run 1x first can gain its 3x cells later
        main_specs = specs_of(plan)
        print(f"collapse study: {len(plan['cells'])} cells, {len(main_specs)} runs in the main grid, out {out}, "
              f"results in {store}", flush=True)
        run_jobs(main_specs, out, a.jobs, lambda spec: make_job(spec, plan, out, store), store)
        first = summarize(plan, load_results(store, main_specs))
        region = tuple(c["name"] for c in first["cells"] if in_region(c))
        specs = specs_of(plan, region)
        if len(specs) > len(main_specs):
            print(f"anneal horizons {plan['horizons']} in the collapse region ({len(region)} cells)", flush=True)
            run_jobs(specs, out, a.jobs, lambda spec: make_job(spec, plan, out, store), store)
    results = finished(store, specs)
    progress = (len(results), len(specs))
    summary = summarize(plan, results)
    summary["progress"] = {"finished": progress[0], "planned": progress[1]}
    out.mkdir(parents=True, exist_ok=True)
    for folder in dict.fromkeys((out, store)):  # the tables beside the runs' results, where they are kept
        write_json_atomic(folder / "summary.json", summary)
        write_csv(results, folder / "runs.csv")
    problems = [heatmaps(summary, out / "heatmaps.png"), delegation_curves(results, plan, out / "delegation.png")]
    images = {"heatmaps": "heatmaps.png", "delegation_share curves": "delegation.png"}
    text = page(summary, plan, images, progress)
    (out / "collapse.md").write_text(text)
    if a.docs is not None:  # the page and its pictures side by side
        publish_page(a.docs, out, images, lambda named: page(summary, plan, named, progress))
    print(text)
    print("; ".join(p for p in problems if p) or f"plots: {out / 'heatmaps.png'}, {out / 'delegation.png'}")
    return summary


if __name__ == "__main__":
    from parlightning.cli.script_main import run_main

    run_main(main)
