"""Does targeting teach? Task samplers in training on SwarmEnv, held out, at equal env steps (issue 25).

Arms: RoundRobin (the default), DifficultyWeighted (c = 0.2), PosteriorSignal, and SFL
(`SamplingForLearnability`, Rutherford et al. 2024: a top-k learnability buffer, p(1 - p)), each
trained with `python -m parlightning.fit` at the same env steps on three banks: the default world
(configs/swarm.yaml), a scarce-signal bank (more `solo` and `locked` tasks, the same total:
`family_tasks`), and a noisy-outcome world (`outcome_noise: 0.15`: each finished episode's outcome
flipped with that probability, in what the learner and the sampler see).

Per run, checkpoints every --every iterations; each is scored greedily with `python -m
parlightning.evaluate --split heldout --bank_seeds ...` (3 held-out banks; the outcome noise off:
the true outcome), which gives the learning curve of held-out success against env steps; the last
checkpoint is also scored on the train bank (training success). The sampler's per-task picks in
each checkpoint give the share of picks per family over training; "informative" = the families
that are sometimes solved (`fanout`, `pipeline`). One cell (PosteriorSignal on the scarce bank)
is repeated with 2 DDP ranks (gloo, CPU, half the actors per rank: the same env steps) and with
`data.max_policy_lag: 1`. CIs are 95% two-level bootstrap intervals of arm - RoundRobin (training
seeds, then banks x evaluation seeds), "not significant" where they cover 0.

Runs go through scripts/experiment.py (resumable: a finished run is never rerun; the same --out
continues). Outputs in OUT: summary.json, samplers_training.md, heldout_curves.png,
family_picks.png; --docs PATH also writes the page there and the images beside it.

    python scripts/sampler_study.py --quick                  # the pipeline in about a minute
    python scripts/sampler_study.py --jobs 1 --docs docs/results/samplers_training.md   # the full study
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/: the shared experiment runner

from experiment import (  # noqa: E402
    ROOT, Job, bank_seeds, default_launch, eval_cmd, fit_cmd, flat_eval, load_results, log_dir, nested_diff_ci,
    open_study, publish_page, pyplot, read_curves, run_jobs, tail_of, write_json_atomic,
)
from parlightning.cli.arg_types import (  # noqa: E402
    actor_count, as_path, comma_list, config_file, episode_count, existing_file, job_count, one_of, output_folder,
    output_path, positive_fraction, positive_int, step_count,
)

ARMS = {
    "round_robin": {"class_path": "parlightning.distribution.samplers.RoundRobin"},
    "difficulty_weighted": {"class_path": "parlightning.distribution.samplers.DifficultyWeighted",
                            "init_args": {"c": 0.2, "pass_threshold": 1.0}},
    "posterior_signal": {"class_path": "parlightning.distribution.samplers.PosteriorSignal", "init_args": {"pass_threshold": 1.0}},
    "sfl": {"class_path": "parlightning.distribution.samplers.SamplingForLearnability",
            "init_args": {"buffer_size": 16, "replay_prob": 0.5, "refresh_episodes": 1024, "pass_threshold": 1.0}},
}
LABEL = {"round_robin": "RoundRobin", "difficulty_weighted": "DifficultyWeighted c=0.2",
         "posterior_signal": "PosteriorSignal", "sfl": "SFL (Rutherford et al. 2024)"}
SCARCE = {"solo": 24, "fanout": 8, "pipeline": 8, "locked": 24}
BANKS = {"default": {}, "scarce": {"family_tasks": SCARCE}, "noisy": {"outcome_noise": 0.15}}
BANK_TEXT = {"default": "the default world (configs/swarm.yaml: 16 tasks per family)",
             "scarce": "scarce signal: " + ", ".join(f"{k} {v}" for k, v in SCARCE.items()) + " (64 tasks)",
             "noisy": "the default bank, outcome flipped with probability 0.15 (evaluated without noise)"}
FAMILIES = ("solo", "fanout", "pipeline", "locked")
INFORMATIVE = ("fanout", "pipeline")  # sometimes solved; solo always (serially), locked never
REPEAT = {"arm": "posterior_signal", "bank": "scarce"}  # the cell repeated under DDP and with a lag budget
VARIANTS = ("lockstep", "ddp2", "lag1")
CURVES = {"success_rate": ("rollout/success_rate",), "own_informative_share": ("sampler/informative_share",)}
PRIMARY = "round_robin"
FLAT_ABS = 0.01  # a last-segment change in held-out success below this is within evaluation noise: flat


# ---------------------------------------------------------------------------------------------- plan
def make_plan(a: argparse.Namespace) -> dict[str, Any]:
    return {"config": str(a.config), "arms": a.arms, "banks": a.banks, "seeds": a.seeds, "epochs": a.epochs,
            "every": a.every, "num_envs": a.num_envs, "num_steps": a.num_steps, "anneal_frac": a.anneal_frac,
            "eval_banks": bank_seeds(3), "eval_seeds": list(range(a.eval_seeds)), "episodes": a.episodes,
            "variants": a.variants, "repeat_seeds": a.repeat_seeds, "launch": a.launch, "quick": a.quick,
            "sampler_args": {k: ARMS[k] for k in a.arms}, "bank_args": {k: BANKS[k] for k in a.banks},
            "repeat": {"arm": REPEAT["arm"] if REPEAT["arm"] in a.arms else a.arms[-1],
                       "bank": REPEAT["bank"] if REPEAT["bank"] in a.banks else a.banks[0]}}


def specs_of(plan: dict[str, Any]) -> list[dict]:
    """Seeds outermost (a half-finished study already has every arm and bank); the repeated cell's
    first two seeds run after the grid's first three, the rest at the end (a study cut short has
    both a grid with CIs and the repeats)."""
    main = [{"id": f"{bank}/{arm}/seed{seed}", "arm": arm, "bank": bank, "seed": seed, "variant": "lockstep"}
            for seed in range(plan["seeds"]) for bank in plan["banks"] for arm in plan["arms"]]
    rep = plan["repeat"]
    repeats = [{"id": f"{rep['bank']}/{rep['arm']}_{v}/seed{seed}", "arm": rep["arm"], "bank": rep["bank"],
                "seed": seed, "variant": v}
               for seed in range(plan["repeat_seeds"]) for v in plan["variants"] if v != "lockstep"]
    early = lambda sp, n: sp["seed"] < n  # noqa: E731
    return ([sp for sp in main if early(sp, 3)] + [sp for sp in repeats if early(sp, 2)]
            + [sp for sp in main if not early(sp, 3)] + [sp for sp in repeats if not early(sp, 2)])


def run_config(plan: dict, spec: dict) -> dict[str, Any]:
    """The base config with this run's sampler, world, budget, checkpoints and λ horizon."""
    cfg = yaml.safe_load(Path(plan["config"]).read_text())
    ranks = 2 if spec["variant"] == "ddp2" else 1
    steps = plan["epochs"] * plan["num_envs"] * plan["num_steps"]
    cfg["trainer"]["max_epochs"] = plan["epochs"]
    if ranks > 1:
        cfg["trainer"].update(devices=2, strategy="ddp", accelerator="cpu")
    for cb in cfg["trainer"]["callbacks"]:
        if cb["class_path"].endswith("ModelCheckpoint"):  # every --every iterations, all kept
            cb["init_args"] = {"every_n_epochs": plan["every"], "save_top_k": -1, "save_last": True,
                               "filename": "{epoch}"}
    data = cfg["data"]
    data["num_envs"], data["num_steps"] = plan["num_envs"] // ranks, plan["num_steps"]
    data["sampler"] = json.loads(json.dumps(ARMS[spec["arm"]]))
    data["env"]["init_args"].update(json.loads(json.dumps(BANKS[spec["bank"]])))
    if spec["variant"] == "lag1":
        data["max_policy_lag"] = 1
    for lam in ("lambda1", "lambda2"):  # the anneal horizon scaled to this budget
        data["reward"]["init_args"][lam]["init_args"]["horizon"] = max(1, round(plan["anneal_frac"] * steps))
    return cfg


def checkpoints(work: Path) -> list[Path]:
    """The run's periodic checkpoints (epoch=E.ckpt), in order."""
    ck = log_dir(work) / "checkpoints"
    return sorted(ck.glob("epoch=*.ckpt"), key=lambda p: int(p.stem.split("=")[1]))


def make_job(spec: dict, plan: dict, out: Path) -> Job:
    launch = "exec" if spec["variant"] == "ddp2" else plan["launch"]  # DDP re-launches the script itself

    def train(job: Job) -> tuple[str, list[str]]:
        config = job.work / "run.yaml"
        config.write_text(yaml.safe_dump(run_config(plan, spec), sort_keys=False))
        return "fit", fit_cmd([config], job.work, spec["seed"], {})

    def evaluate(job: Job) -> tuple[str, list[str]]:
        """One process runs evaluate's CLI for every checkpoint (imports and warm-up paid once)."""
        logs = log_dir(job.work)
        clean = job.work / "eval_world.yaml"  # evaluated on the true outcome
        clean.write_text(yaml.safe_dump({"data": {"env": {"init_args": {"outcome_noise": 0.0}}}}))
        configs = [logs / "config.yaml", clean]
        argvs = []
        for ck in checkpoints(job.work):
            argvs.append(eval_cmd(configs, job.work / f"eval_{ck.stem}.json", banks=plan["eval_banks"],
                                  seeds=plan["eval_seeds"], episodes=plan["episodes"],
                                  extra=["--ckpt_path", str(ck)])[3:])
        last = checkpoints(job.work)[-1]
        train_cmd = eval_cmd(configs, job.work / "eval_train.json", banks=[1234], seeds=plan["eval_seeds"],
                             episodes=plan["episodes"], extra=["--ckpt_path", str(last), "--split", "train"])[3:]
        argvs.append(train_cmd)
        listing = job.work / "evaluations.json"
        write_json_atomic(listing, argvs)
        return "evaluate", [sys.executable, str(Path(__file__).resolve()), "--evaluate-list", str(listing)]

    def finish(job: Job) -> dict[str, Any]:
        import torch

        logs = log_dir(job.work)
        points = []
        for ck in checkpoints(job.work):
            state = torch.load(ck, weights_only=True, map_location="cpu")
            dm = state["RolloutDataModule"]
            picks = dm["ranks"][0]["sampler"].get("picks")
            ev = flat_eval(json.loads((job.work / f"eval_{ck.stem}.json").read_text()))
            points.append({"epoch": int(state["epoch"]), "env_steps": int(dm["env_steps"]),
                           "picks": None if picks is None else picks.tolist(),
                           "eval": {k: ev[k] for k in ("success_rate", "speedup_vs_serial", "serial_success_rate",
                                                       "ceiling_success_rate", "subagents_per_episode")},
                           "runs": [{k: r[k] for k in ("success_rate", "speedup_vs_serial")} for r in ev["runs"]]})
        task_ids = _task_ids(plan, spec)
        curves = read_curves(logs, CURVES)
        train_ev = flat_eval(json.loads((job.work / "eval_train.json").read_text()))
        return {**{k: spec[k] for k in ("id", "arm", "bank", "seed", "variant")}, "points": points,
                "task_families": [t.rsplit("-", 1)[0] for t in task_ids], "train_eval": {
                    "success_rate": train_ev["success_rate"], "runs": [r["success_rate"] for r in train_ev["runs"]]},
                "curves": curves, "tail_share": {"success_rate": tail_of(curves.get("success_rate", []))},
                "loadavg": list(os.getloadavg()), "log_dir": str(logs.relative_to(out))}

    return Job(spec, out, [train, evaluate], finish, launch)


def _task_ids(plan: dict, spec: dict) -> list[str]:
    from parlightning.envs.swarm import SwarmEnv

    args = {k: v for k, v in yaml.safe_load(Path(plan["config"]).read_text())["data"]["env"]["init_args"].items()
            if k not in ("compile",)}
    args.update(BANKS[spec["bank"]])
    return SwarmEnv(num_envs=1, **args).task_ids


def evaluate_list(path: Path) -> None:
    """`--evaluate-list FILE`: run `python -m parlightning.evaluate` for each argv in FILE, in this process."""
    import parlightning.cli.evaluate as E

    for argv in json.loads(path.read_text()):
        E.main(argv)


# ---------------------------------------------------------------------------------------------- analysis
def runs_of(results: list[dict], bank: str, arm: str, variant: str = "lockstep") -> list[dict]:
    return sorted((r for r in results if r["bank"] == bank and r["arm"] == arm and r["variant"] == variant),
                  key=lambda r: r["seed"])


def final_values(runs: list[dict], metric: str) -> list[list[float]]:
    return [[e[metric] for e in r["points"][-1]["runs"]] for r in runs]


def family_share(r: dict, upto: Optional[int] = None, since: Optional[int] = None) -> dict[str, float]:
    """Share of picks per family between checkpoints `since` and `upto` (indices; default all)."""
    import numpy as np

    end = np.asarray(r["points"][upto if upto is not None else -1]["picks"], dtype=float)
    start = np.asarray(r["points"][since]["picks"], dtype=float) if since is not None else np.zeros_like(end)
    d = end - start
    total = max(d.sum(), 1.0)
    fams = r["task_families"]
    return {f: float(sum(d[i] for i, g in enumerate(fams) if g == f) / total) for f in FAMILIES}


def informative_share(r: dict) -> float:
    s = family_share(r)
    return sum(s[f] for f in INFORMATIVE)


def mean_curve(runs: list[dict]) -> tuple[list[float], list[float]]:
    import numpy as np

    steps = [p["env_steps"] for p in runs[0]["points"]]
    vals = np.mean([[p["eval"]["success_rate"] for p in r["points"]] for r in runs], axis=0)
    return steps, [float(v) for v in vals]


def crossing(steps: list[float], values: list[float], target: float) -> Optional[float]:
    """The first env step where the curve reaches `target` (linear between points; the first point
    counts from 0 steps at the curve's first value); None when it never does."""
    prev_s, prev_v = None, None
    for s, v in zip(steps, values):
        if v >= target:
            if prev_s is None or v == prev_v:
                return float(s)
            return float(prev_s + (target - prev_v) / (v - prev_v) * (s - prev_s))
        prev_s, prev_v = s, v
    return None


def steps_to_reach(runs: list[dict], target: float, seed: int = 0, n_boot: int = 2000) -> dict[str, Any]:
    """Env steps at which the seeds' mean held-out curve reaches `target`, with a bootstrap over seeds
    (percentile 95%; draws that never reach it count as beyond the budget)."""
    import numpy as np

    steps, vals = mean_curve(runs)
    point = crossing(steps, vals, target)
    rng = np.random.default_rng(seed)
    arr = np.asarray([[p["eval"]["success_rate"] for p in r["points"]] for r in runs])
    draws = []
    for _ in range(n_boot):
        c = crossing(steps, list(arr[rng.integers(0, len(runs), len(runs))].mean(0)), target)
        draws.append(math.inf if c is None else c)
    budget = steps[-1]
    beyond = 1e9 * budget  # never reached: a finite stand-in for the quantiles, read back as "beyond"
    lo, hi = (float(q) if q < beyond else math.inf for q in np.quantile(np.minimum(draws, beyond), [0.025, 0.975]))
    return {"steps": point, "budget": budget, "ratio": None if point is None else point / budget,
            "low_ratio": float(lo / budget) if math.isfinite(lo) else None,
            "high_ratio": float(hi / budget) if math.isfinite(hi) else None,
            "reached_share": float(np.mean([math.isfinite(d) for d in draws]))}


def stat(xs: list[float]) -> Optional[dict[str, float]]:
    from parlightning.analysis.stats import mean_std

    if not xs:
        return None
    m, s = mean_std(xs)
    return {"mean": m, "std": s, "n": len(xs)}


def summarize(plan: dict, results: list[dict], seed: int = 0) -> dict[str, Any]:
    from parlightning.analysis.stats import bootstrap_diff_ci

    banks = {}
    for bank in plan["banks"]:
        base = runs_of(results, bank, PRIMARY)
        target = stat([r["points"][-1]["eval"]["success_rate"] for r in base])["mean"] if base else None
        arms = {}
        for arm in plan["arms"]:
            rs = runs_of(results, bank, arm)
            if not rs:
                continue
            row: dict[str, Any] = {
                "seeds": len(rs),
                "success": stat([r["points"][-1]["eval"]["success_rate"] for r in rs]),
                "speedup": stat([r["points"][-1]["eval"]["speedup_vs_serial"] for r in rs]),
                "serial_success": stat([r["points"][-1]["eval"]["serial_success_rate"] for r in rs]),
                "ceiling_success": stat([r["points"][-1]["eval"]["ceiling_success_rate"] for r in rs]),
                "train_success": stat([r["train_eval"]["success_rate"] for r in rs]),
                "informative_share": stat([informative_share(r) for r in rs]),
                "own_informative_share": stat([r["curves"]["own_informative_share"][-1][1] for r in rs
                                               if r["curves"].get("own_informative_share")]),
                "curve": mean_curve(rs),
                "curve_tail": tail_share_of(mean_curve(rs)),
                "train_curves_flat": sum(1 for r in rs if (r["tail_share"].get("success_rate") or 1.0) <= 0.1),
                "train_curves_measured": sum(1 for r in rs if r["tail_share"].get("success_rate") is not None),
            }
            if target is not None:
                row["reach"] = steps_to_reach(rs, target, seed=seed)
            if base and arm != PRIMARY:
                diffs = {}
                for metric in ("success_rate", "speedup_vs_serial"):
                    ci = nested_diff_ci(final_values(rs, metric), final_values(base, metric), seed=seed)
                    diffs[metric] = ci.as_dict() | {"label": ci.label(3)}
                for name, get in (("train_success", lambda r: r["train_eval"]["success_rate"]),
                                  ("informative_share", informative_share)):
                    ci = bootstrap_diff_ci([get(r) for r in rs], [get(r) for r in base], seed=seed)
                    diffs[name] = ci.as_dict() | {"label": ci.label(3)}
                row["diffs"] = diffs
            arms[arm] = row
        banks[bank] = {"target": target, "arms": arms}
    repeat = {}
    rep = plan["repeat"]
    lock = runs_of(results, rep["bank"], rep["arm"])
    for v in plan["variants"]:
        rs = runs_of(results, rep["bank"], rep["arm"], v) if v != "lockstep" else lock
        if not rs:
            continue
        row = {"seeds": len(rs), "success": stat([r["points"][-1]["eval"]["success_rate"] for r in rs]),
               "speedup": stat([r["points"][-1]["eval"]["speedup_vs_serial"] for r in rs]),
               "informative_share": stat([informative_share(r) for r in rs]),
               "env_steps": rs[0]["points"][-1]["env_steps"]}
        if v != "lockstep" and lock:
            ci = nested_diff_ci(final_values(rs, "success_rate"), final_values(lock, "success_rate"), seed=seed)
            row["vs_lockstep"] = ci.as_dict() | {"label": ci.label(3)}
            ci = bootstrap_diff_ci([informative_share(r) for r in rs], [informative_share(r) for r in lock], seed=seed)
            row["share_vs_lockstep"] = ci.as_dict() | {"label": ci.label(3)}
        repeat[v] = row
    loads = [r["loadavg"][0] for r in results if r.get("loadavg")]
    return {"plan": plan, "banks": banks, "repeat": repeat, "goal": goal(plan, banks),
            "loadavg": {"min": min(loads), "max": max(loads)} if loads else None,
            "bootstrap": {"seed": seed, "n_boot": 10000, "level": 0.95}}


def tail_share_of(curve: tuple[list[float], list[float]]) -> Optional[float]:
    from parlightning.analysis.stats import tail_share

    steps, vals = curve
    if len(steps) < 5:
        return None
    return tail_share(steps, vals, frac=0.25)  # 5 points: the last segment


def goal(plan: dict, banks: dict) -> dict[str, Any]:
    """Issue 25's goal, checked on the numbers: the best sampler on the scarce bank reaches
    RoundRobin's final held-out success in <= 0.6x the env steps, its final-success CI vs RoundRobin
    excludes 0 (above), and on the default bank its CI does not exclude 0 below."""
    scarce, default = banks.get("scarce"), banks.get("default")
    if not scarce or not default:
        return {"checked": False, "reason": "needs the scarce and the default bank"}
    rows = []
    for arm, row in scarce["arms"].items():
        if arm == PRIMARY:
            continue
        reach = row.get("reach") or {}
        d = row.get("diffs", {}).get("success_rate", {})
        dd = default["arms"].get(arm, {}).get("diffs", {}).get("success_rate", {})
        ratio = reach.get("ratio")
        rows.append({"arm": arm, "ratio": ratio, "fast": ratio is not None and ratio <= 0.6,
                     "better": bool(d.get("significant")) and d.get("diff", 0) > 0,
                     "no_loss_default": not (bool(dd.get("significant")) and dd.get("diff", 0) < 0)})
    met = [r["arm"] for r in rows if r["fast"] and r["better"] and r["no_loss_default"]]
    return {"checked": True, "rows": rows, "met_by": met}


# ---------------------------------------------------------------------------------------------- page
def fmt(s: Optional[dict], d: int = 3) -> str:
    return "n/a" if not s else f"{s['mean']:.{d}f} ± {s['std']:.{d}f}"


def reach_text(reach: Optional[dict]) -> str:
    if not reach:
        return "n/a"
    if reach["ratio"] is None:
        return f"not reached in {reach['budget']:,} (reached in {reach['reached_share']:.0%} of bootstrap draws)"
    hi = "beyond the budget" if reach["high_ratio"] is None else f"{reach['high_ratio']:.2f}"
    lo = "n/a" if reach["low_ratio"] is None else f"{reach['low_ratio']:.2f}"
    return f"{reach['steps']:,.0f} ({reach['ratio']:.2f}x; 95% CI {lo} to {hi})"


def page(summary: dict, images: dict[str, str], command: str) -> str:
    p = summary["plan"]
    steps = p["epochs"] * p["num_envs"] * p["num_steps"]
    load = summary.get("loadavg")
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["# Results: task samplers in training (held out, equal env steps)", "",
             "[← docs index](../README.md)", "",
             "Generated by `scripts/sampler_study.py` (do not edit by hand); issue 25: does targeting teach?", "",
             "| | |", "|---|---|", "| script | `scripts/sampler_study.py` |", f"| command | `{command}` |",
             f"| measured | {when}; load average (1 min) over the runs {load['min']:.1f}-{load['max']:.1f} |" if load
             else f"| measured | {when} |",
             f"| seeds | planned: {p['seeds']} training seeds per arm and bank (0..{p['seeds'] - 1}), the repeated cell "
             f"{p['repeat_seeds']}; finished: as each table says |",
             f"| budget | {p['epochs']} PPO iterations of {p['num_envs']} actors x {p['num_steps']} steps = {steps:,} env "
             f"steps per run; PARL λ annealed to 0 at {p['anneal_frac']} of it; checkpoints every {p['every']} "
             "iterations |",
             f"| evaluation | greedy, held-out banks {p['eval_banks']} x evaluation seeds {p['eval_seeds']}, "
             f"{p['episodes']} episodes per task, outcome noise off; training success on the train bank (bank 1234) |",
             "| banks | " + "; ".join(f"**{b}**: {BANK_TEXT[b]}" for b in p["banks"]) + " |", ""]
    missing = summary.get("missing") or []
    if missing:
        lines += [f"**Partial: {len(missing)} of the plan's runs had not finished when this page was written** (the "
                  "page was written with --report-only; the study resumes: rerun the command). Seeds per arm are in the tables; missing: "
                  + ", ".join(f"`{m}`" for m in missing) + ".", ""]
    if p.get("quick"):
        lines += ["**Quick smoke run (`--quick`): a tiny budget; its numbers test the pipeline and say nothing "
                  "about samplers.**", ""]
    lines += ["Arms: " + ", ".join(f"`{LABEL[a]}`" for a in p["arms"]) + ". SFL is `parlightning.distribution.samplers."
              "SamplingForLearnability` (buffer of the 16 tasks of highest learnability p(1-p) measured on the "
              "episodes since the last refresh, refreshed every 1,024 episodes, half the picks from the buffer). "
              "Two shares of rollouts: **share on fanout + pipeline** is the share of all picks (over the whole "
              "run, from the sampler's per-task pick counts) that went to the families that are sometimes solved by "
              f"good delegation ({', '.join(INFORMATIVE)}); it is the same measure for every arm, but it is not "
              "\"informative for the current policy\": early on a fresh policy fails the `solo` tasks it delegates "
              "and never solves a `fanout` task, so mixed outcomes sit on `solo`. The **sampler's own informative "
              "share** is what a learning sampler logs (`sampler/informative_share`, end of the run): the share of "
              "its picks that went to tasks whose observed pass rate is strictly between 0 and 1 (RoundRobin records "
              "no outcomes, so it has none). Differences are arm - RoundRobin with 95% two-level bootstrap CIs "
              "(training seeds, then banks x evaluation seeds; seeds only for training success and share).", ""]
    for bank, b in summary["banks"].items():
        lines += [f"## {bank}: {BANK_TEXT[bank]}", ""]
        target = b["target"]
        if target is not None:
            lines += [f"RoundRobin's final held-out success: **{target:.3f}** (the target of \"env steps to reach\").",
                      ""]
        lines += ["| arm | held-out success | - RoundRobin | speed-up vs serial | - RoundRobin | env steps to reach "
                  "RoundRobin's final (x budget) | share on fanout + pipeline | - RoundRobin | sampler's own "
                  "informative share | training success | - RoundRobin |", "|---" * 12 + "|"]
        for arm, row in b["arms"].items():
            d = row.get("diffs", {})
            lab = lambda k, _d=d: _d[k]["label"] if k in _d else "—"  # noqa: E731
            lines.append(f"| {LABEL[arm]} ({row['seeds']} seeds) | {fmt(row['success'])} | {lab('success_rate')} | {fmt(row['speedup'])}x | "
                         f"{lab('speedup_vs_serial')} | {reach_text(row.get('reach'))} | "
                         f"{fmt(row['informative_share'])} | {lab('informative_share')} | "
                         f"{fmt(row['own_informative_share']) if row['own_informative_share'] else '— (records nothing)'} | "
                         f"{fmt(row['train_success'])} | {lab('train_success')} |")
        serial = next(iter(b["arms"].values()))["serial_success"]
        ceiling = next(iter(b["arms"].values()))["ceiling_success"]
        lines += ["", f"Serial policy on the same held-out tasks: success {fmt(serial)}; ceiling (round-optimal "
                  f"scripted oracle): {fmt(ceiling)}.", ""]
        lines += ["Held-out success at each checkpoint (mean over seeds):", "",
                  "| arm | " + " | ".join(f"{s:,}" for s in next(iter(b["arms"].values()))["curve"][0]) + " |",
                  "|---" * (1 + len(next(iter(b["arms"].values()))["curve"][0])) + "|"]
        for arm, row in b["arms"].items():
            lines.append(f"| {LABEL[arm]} | " + " | ".join(f"{v:.3f}" for v in row["curve"][1]) + " |")
        lines.append("")
    if summary["repeat"]:
        rep = p["repeat"]
        lines += [f"## Under DDP and a lag budget: {LABEL[rep['arm']]} on the {rep['bank']} bank", "",
                  "| variant | seeds | env steps | held-out success | - lock-step | speed-up | share on fanout + pipeline | "
                  "- lock-step |", "|---" * 8 + "|"]
        names = {"lockstep": "1 rank, lock-step", "ddp2": "2 DDP ranks (gloo, CPU)", "lag1": "max_policy_lag: 1"}
        for v, row in summary["repeat"].items():
            lines.append(f"| {names[v]} | {row['seeds']} | {row['env_steps']:,} | {fmt(row['success'])} | "
                         f"{row.get('vs_lockstep', {}).get('label', '—')} | {fmt(row['speedup'])}x | "
                         f"{fmt(row['informative_share'])} | {row.get('share_vs_lockstep', {}).get('label', '—')} |")
        lines.append("")
    g = summary["goal"]
    lines += ["## The goal", "", "Issue 25: the best sampler reaches RoundRobin's final held-out success in <= 0.6x the "
              "env steps on the scarce bank, with a CI that excludes 0 on final success, and loses nothing (within CI) "
              "on the default bank.", ""]
    if not g.get("checked"):
        lines.append(f"Not checked: {g.get('reason')}.")
    else:
        for r in g["rows"]:
            ratio = "does not reach it within the budget" if r["ratio"] is None else \
                f"reaches it at {r['ratio']:.2f}x the budget ({'<=' if r['fast'] else 'not <='} 0.6x)"
            lines.append(f"- {LABEL[r['arm']]}: {ratio}; final success above RoundRobin with a CI "
                         f"excluding 0: {'yes' if r['better'] else 'no'}; no loss on the default bank: "
                         f"{'yes' if r['no_loss_default'] else 'no'}.")
        lines += ["", ("**Met by " + ", ".join(LABEL[a] for a in g["met_by"]) + ".**") if g["met_by"] else
                  "**No sampler meets the goal** at this budget."]
    lines += ["", "## Curves", ""]
    unflat = []
    for bank, b in summary["banks"].items():
        for arm, row in b["arms"].items():
            t, vals = row["curve_tail"], row["curve"][1]
            last = vals[-1] - vals[-2] if len(vals) > 1 else 0.0
            if t is not None and t > 0.1 and abs(last) > FLAT_ABS:
                unflat.append(f"{bank}/{LABEL[arm]} ({last:+.3f} over the last segment, {t:.0%} of its range)")
    lines.append(f"Held-out curves (mean over seeds) that had not flattened at the end of the budget (the last "
                 f"segment moved more than 10% of the curve's range and more than {FLAT_ABS} in success): "
                 + ("; ".join(unflat) if unflat else "none") + ".")
    tr = [(bank, arm, row["train_curves_flat"], row["train_curves_measured"]) for bank, b in summary["banks"].items()
          for arm, row in b["arms"].items()]
    lines += ["Training-success curves (every iteration) that flattened (last 20% moved <= 10% of the range): "
              + ", ".join(f"{bank}/{LABEL[arm]} {k}/{m}" for bank, arm, k, m in tr) + ".", ""]
    for name, path in images.items():
        lines += [f"![{name}]({path})", ""]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- plots
COLOUR = {"round_robin": "tab:grey", "difficulty_weighted": "tab:orange", "posterior_signal": "tab:blue",
          "sfl": "tab:green"}


def curve_plot(plan: dict, results: list[dict], path: Path) -> Optional[str]:
    """Held-out success vs env steps per arm (mean over seeds) with a 95% bootstrap band over seeds."""
    import numpy as np

    plt = pyplot()
    if plt is None:
        return "matplotlib is not installed: no plots"
    fig, axes = plt.subplots(1, len(plan["banks"]), figsize=(4.2 * len(plan["banks"]), 3.2), squeeze=False)
    rng = np.random.default_rng(0)
    for ax, bank in zip(axes[0], plan["banks"]):
        for arm in plan["arms"]:
            rs = runs_of(results, bank, arm)
            if not rs:
                continue
            x = [p["env_steps"] for p in rs[0]["points"]]
            arr = np.asarray([[p["eval"]["success_rate"] for p in r["points"]] for r in rs])
            boot = arr[rng.integers(0, len(rs), (2000, len(rs)))].mean(1)
            lo, hi = np.quantile(boot, [0.025, 0.975], axis=0)
            ax.plot(x, arr.mean(0), color=COLOUR[arm], label=LABEL[arm], linewidth=1.4)
            ax.fill_between(x, lo, hi, color=COLOUR[arm], alpha=0.15)
        ax.set_title(bank, fontsize=9)
        ax.set_xlabel("env steps", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0][0].set_ylabel("held-out success (greedy, 3 banks)", fontsize=8)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("held-out success vs env steps (mean over seeds, 95% bootstrap band)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def family_plot(plan: dict, results: list[dict], path: Path) -> Optional[str]:
    """Share of picks per family in each checkpoint interval, mean over seeds: banks x arms."""
    import numpy as np

    plt = pyplot()
    if plt is None:
        return "matplotlib is not installed: no plots"
    rows, cols = len(plan["banks"]), len(plan["arms"])
    fig, axes = plt.subplots(rows, cols, figsize=(2.8 * cols, 2.2 * rows), squeeze=False, sharey=True)
    colours = {"solo": "tab:olive", "fanout": "tab:blue", "pipeline": "tab:cyan", "locked": "tab:red"}
    for i, bank in enumerate(plan["banks"]):
        for j, arm in enumerate(plan["arms"]):
            ax = axes[i][j]
            rs = runs_of(results, bank, arm)
            if not rs or rs[0]["points"][0]["picks"] is None:
                ax.axis("off")
                continue
            x = [p["env_steps"] for p in rs[0]["points"]]
            shares = {f: [] for f in FAMILIES}
            for k in range(len(x)):
                per = [family_share(r, upto=k, since=k - 1 if k else None) for r in rs]
                for f in FAMILIES:
                    shares[f].append(float(np.mean([s[f] for s in per])))
            ax.stackplot(x, *[shares[f] for f in FAMILIES], labels=FAMILIES, colors=[colours[f] for f in FAMILIES],
                         alpha=0.8)
            ax.set_ylim(0, 1)
            ax.set_title(f"{bank} / {LABEL[arm]}", fontsize=7)
            ax.tick_params(labelsize=6)
    axes[0][0].legend(fontsize=6, loc="lower left")
    axes[0][0].set_ylabel("share of picks", fontsize=7)
    fig.suptitle("share of picks per family over training (each checkpoint interval; x: env steps)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# ---------------------------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=as_path(config_file), default=ROOT / "configs" / "swarm.yaml")
    p.add_argument("--arms", type=comma_list(one_of(*ARMS)), default=None, help=f"comma-separated (default {','.join(ARMS)})")
    p.add_argument("--banks", type=comma_list(one_of(*BANKS)), default=None, help=f"comma-separated (default {','.join(BANKS)})")
    p.add_argument("--seeds", type=positive_int, default=None, help="training seeds per arm and bank (default 5; --quick 2)")
    p.add_argument("--repeat-seeds", dest="repeat_seeds", type=positive_int, default=None,
                   help="seeds of the DDP and lag repeats (default 3; --quick 1)")
    p.add_argument("--epochs", type=positive_int, default=None, help="PPO iterations per run (default 40; --quick 2)")
    p.add_argument("--every", type=positive_int, default=None, help="checkpoint (and evaluate) every N iterations "
                   "(default 8; --quick 1)")
    p.add_argument("--num-envs", dest="num_envs", type=actor_count, default=None, help="actors (default 128; --quick 16)")
    p.add_argument("--num-steps", dest="num_steps", type=step_count, default=None, help="steps per rollout (default 16; "
                   "--quick 8)")
    p.add_argument("--anneal-frac", dest="anneal_frac", type=positive_fraction, default=0.6)
    p.add_argument("--eval-seeds", dest="eval_seeds", type=positive_int, default=1, help="evaluation seeds per bank")
    p.add_argument("--episodes", type=episode_count, default=None, help="evaluation episodes per task (default 2; --quick 1)")
    p.add_argument("--no-ddp", dest="no_ddp", action="store_true", help="skip the 2-rank DDP repeat")
    p.add_argument("--jobs", type=job_count, default=1)
    p.add_argument("--out", type=as_path(output_folder), default=None, help="output folder (default runs/samplers/<time>); resumes")
    p.add_argument("--docs", type=as_path(output_path), default=None, help="also write the page here and the images beside it")
    p.add_argument("--launch", choices=("exec", "fork"), default=None)
    p.add_argument("--quick", action="store_true", help="2 arms x 2 banks x 2 seeds, 2 iterations of 16 x 8; the "
                   "lag repeat, no DDP")
    p.add_argument("--report-only", dest="report_only", action="store_true", help="write the page from the runs "
                   "finished so far in --out (nothing is run); the page lists the missing runs")
    p.add_argument("--evaluate-list", dest="evaluate_list", type=as_path(existing_file), default=None, help=argparse.SUPPRESS)
    return p


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = build_parser()
    a = p.parse_args(argv)
    if a.evaluate_list is not None:
        return a
    q = a.quick
    a.arms = a.arms or (["round_robin", "sfl"] if q else list(ARMS))
    a.banks = a.banks or (["scarce", "noisy"] if q else list(BANKS))
    if PRIMARY not in a.arms:
        raise SystemExit(f"error: --arms: every comparison is against {PRIMARY}; include it")
    pick = lambda v, quick, full: v if v is not None else (quick if q else full)  # noqa: E731
    a.seeds, a.repeat_seeds = pick(a.seeds, 2, 5), pick(a.repeat_seeds, 1, 3)
    a.epochs, a.every = pick(a.epochs, 2, 40), pick(a.every, 1, 8)
    a.num_envs, a.num_steps = pick(a.num_envs, 16, 128), pick(a.num_steps, 8, 16)
    a.episodes = pick(a.episodes, 1, 2)
    if a.epochs % a.every:
        raise SystemExit(f"error: --every: {a.every} must divide --epochs {a.epochs} (the last checkpoint is the "
                         "final policy)")
    if a.num_envs % 2:
        raise SystemExit(f"error: --num-envs: {a.num_envs} must be even (the DDP repeat halves it per rank)")
    a.variants = ["lockstep", "lag1"] + ([] if (q or a.no_ddp) else ["ddp2"])
    a.launch = a.launch or default_launch(True)  # the preloaded fork server (DDP runs start fresh interpreters)
    return a


def main(argv: Optional[list[str]] = None) -> Optional[dict]:
    a = parse_args(argv)
    if a.evaluate_list is not None:
        evaluate_list(a.evaluate_list)
        return None
    plan = make_plan(a)
    out = a.out or ROOT / "runs" / "samplers" / datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    if a.report_only and not (out / "results").is_dir():  # nothing to report: nothing written (no study.json)
        raise SystemExit(f"error: --report-only: no finished run in {out} (no such study); run the study first or "
                         "pass its --out")
    out.mkdir(parents=True, exist_ok=True)
    open_study(out, plan)
    specs = specs_of(plan)
    print(f"sampler study: {len(plan['arms'])} arms x {len(plan['banks'])} banks x {plan['seeds']} seeds + "
          f"{len(specs) - len(plan['arms']) * len(plan['banks']) * plan['seeds']} repeat runs, out {out}", flush=True)
    done = [sp for sp in specs if (out / "results" / f"{sp['id']}.json").is_file()]
    if a.report_only:  # the page from the runs finished so far (a study still running, or cut short)
        if not done:
            raise SystemExit(f"error: --report-only: no finished run in {out}; run the study first")
        specs_done = done
    else:
        run_jobs(specs, out, a.jobs, lambda spec: make_job(spec, plan, out))
        specs_done = specs
    results = load_results(out, specs_done)
    summary = summarize(plan, results)
    summary["missing"] = [sp["id"] for sp in specs if sp not in specs_done]
    write_json_atomic(out / "summary.json", summary)
    problems = [curve_plot(plan, results, out / "heldout_curves.png"), family_plot(plan, results, out / "family_picks.png")]
    images = {"held-out success vs env steps": "heldout_curves.png", "share of picks per family": "family_picks.png"}
    args = [x for x in (argv if argv is not None else sys.argv[1:]) if x != "--report-only"]
    command = "python scripts/sampler_study.py " + " ".join(args)
    text = page(summary, images, command.strip())
    (out / "samplers_training.md").write_text(text)
    if a.docs is not None:
        publish_page(a.docs, out, images, lambda named: page(summary, named, command.strip()))
    print(text)
    print("; ".join(x for x in problems if x) or f"plots: {out / 'heldout_curves.png'}, {out / 'family_picks.png'}")
    return summary


if __name__ == "__main__":
    from parlightning.cli.script_main import run_main

    run_main(main)
