"""The PARL study: when does annealed shaping help? Arms x a grid of world parameters x seeds,
every run trained through `python -m parlightning.fit` and evaluated on held-out tasks.

Arms (configs/arms/*.yaml on top of --config): (a) perf_only: r_perf only; (b) parl_annealed:
λ1, λ2 annealed to 0 (horizon = --anneal-frac of the run's budget); (c) parl_constant: λ held
constant; add others with --arms. Each cell of the grid (the product of the --axis values, dotted
overrides of the world's constructor) trains every arm for --seeds seeds with the same explicit
budget, evaluates the final checkpoint with `python -m parlightning.evaluate --split heldout
--json` over --banks held-out banks (default 3) and --eval-seeds evaluation seeds, reads its
learning curves back from TensorBoard (with how much they still moved over the last 20% of
training), and replays a few held-out episodes with `PipelineChain` to find which kind of stage
loses the most time. The scripted serial, oracle and optimal (the round-optimal oracle: the
ceiling) policies give each cell's bounds. Runs go through scripts/experiment.py, the shared runner.

Every finished run writes its result JSON atomically under OUT/results/; a restarted study skips
them, so a killed study loses only the runs in progress (their processes die with it).
Outputs: runs.jsonl, runs.csv, table.md (per cell: mean ± std per arm, 95% bootstrap CIs of
(b)-(a) and (b)-(c) on held-out success and speed-up vs serial), heatmaps.png, summary.json.

    python scripts/parl_study.py --quick                 # 3 arms x 2 cells x 2 seeds, tiny budget: minutes
    python scripts/parl_study.py --jobs 2                # the full study (default axes, 5 seeds): hours
    python scripts/parl_study.py --axis data.env.init_args.spawn_steps=1.0,4.0 --seeds 3 --epochs 30
    python scripts/parl_study.py --out runs/parl_study/<name>   # the same --out again resumes it
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/: the shared experiment runner

from experiment import (  # noqa: E402
    ROOT, bank_seeds, cell_name, Job, nested_diff_ci, parse_axis, default_launch, eval_cmd, fit_cmd as run_fit_cmd, flat_eval, load_results as load_all,
    log_dir, nested, open_study, read_curves as read_tags, run_jobs, tail_of, write_json_atomic, axis_spec,
)
from parlightning.cli.arg_types import (  # noqa: E402
    actor_count, as_path, comma_list, config_file, episode_count, existing_folder, job_count, non_negative_float,
    output_file, output_folder, positive_fraction, positive_int, random_seed, step_count,
)

ARM_LABELS = {"perf_only": "(a) r_perf only", "parl_annealed": "(b) PARL annealed", "parl_constant": "(c) PARL constant"}
A, B, C = "perf_only", "parl_annealed", "parl_constant"
# World parameters whose values set how hard delegation is to discover and how costly over-splitting is.
# spawn_steps: a subagent's start-up cost (the higher, the less an untrained delegation pays: harder to discover);
# merge_cost: the main agent's cost per delegated shard (the higher, the more over-splitting costs).
DEFAULT_AXES = ["data.env.init_args.spawn_steps=1.0,2.0,4.0", "data.env.init_args.merge_cost=0.05,0.2,0.5"]
QUICK_AXES = ["data.env.init_args.merge_cost=0.05,0.5"]
METRICS = ("success_rate", "speedup_vs_serial", "critical_steps", "serial_critical_steps", "subagents_per_episode",
           "finish_rate")
BEHAVIOUR = ("subagents_per_episode", "finish_rate")  # differences reported beside the outcome ones
CURVE_TAGS = {  # curve name -> TensorBoard tags to try, first found wins
    "success_rate": ("rollout/success_rate", "charts/success_rate"),
    "speedup": ("critical_steps/speedup",),
    "subagents": ("rollout/subagents_per_episode",),
    "episodic_return": ("charts/episodic_return",),
}


# ---------------------------------------------------------------------------------------------- planning
def arm_path(arm: str) -> Path:
    return Path(arm) if arm.endswith((".yaml", ".yml")) else ROOT / "configs" / "arms" / f"{arm}.yaml"


def arm_name(arm: str) -> str:
    """An item of --arms: a name in configs/arms/ or a .yaml path that exists."""
    if not arm_path(arm).is_file():
        raise argparse.ArgumentTypeError(f"no arm config {arm_path(arm)}; name a file in configs/arms/ or pass a .yaml path")
    return arm


def arm_config(arm: str) -> Path:
    try:
        arm_name(arm)
    except argparse.ArgumentTypeError as err:
        raise SystemExit(f"error: --arms: {err}") from None
    return arm_path(arm)


def annealed_lambdas(arm: str) -> list[str]:
    """The λ names whose schedule in the arm's config has a horizon (it scales with the budget)."""
    reward = (yaml.safe_load(arm_config(arm).read_text()).get("data") or {}).get("reward") or {}
    init = reward.get("init_args") or {}
    return [lam for lam in ("lambda1", "lambda2") if "horizon" in ((init.get(lam) or {}).get("init_args") or {})]


def make_plan(args: argparse.Namespace) -> dict[str, Any]:
    twice = sorted({arm for arm in args.arms if list(args.arms).count(arm) > 1})
    if twice:  # one arm's runs would share their folders and names: the study would wait on itself
        raise SystemExit(f"error: --arms: {', '.join(twice)} given twice; list each arm once")
    axes = dict(parse_axis(a) for a in args.axis)
    cells = [dict(zip(axes, values)) for values in itertools.product(*axes.values())] or [{}]
    return {
        "config": str(args.config), "arms": args.arms, "axes": axes, "seeds": args.seeds,
        "epochs": args.epochs, "num_envs": args.num_envs, "num_steps": args.num_steps,
        "env_steps": args.epochs * args.num_envs * args.num_steps, "anneal_frac": args.anneal_frac,
        "episodes": args.episodes, "blame_episodes": args.blame_episodes, "eval_seeds": args.eval_seeds,
        "banks": args.banks,
        "launch": args.launch, "cells": [{"name": cell_name(c), "overrides": c} for c in cells],
    }


def jobs_of(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every unit of work: the scripted bounds per cell, then (cell, arm, seed) runs, seeds outermost
    so that a half-finished study already has every arm in every cell."""
    jobs = [{"kind": "bound", "cell": c, "policy": p, "id": f"{c['name']}/bound_{p}"}
            for c in plan["cells"] for p in BOUNDS]
    for seed in range(plan["seeds"]):
        for c in plan["cells"]:
            for arm in plan["arms"]:
                jobs.append({"kind": "run", "cell": c, "arm": arm, "seed": seed,
                             "id": f"{c['name']}/{Path(arm).stem}/seed{seed}"})
    return jobs


# ---------------------------------------------------------------------------------------------- jobs
BOUNDS = ("serial", "oracle", "optimal")  # optimal: the round-optimal oracle, the ceiling


def evaluate_args(plan: dict, work: Path, config: list[Path], extra: list[str]) -> list[str]:
    return eval_cmd(config, work / "eval.json", banks=plan["banks"], seeds=plan["eval_seeds"],
                    episodes=plan["episodes"], extra=extra)


def fit_cmd(plan: dict, job: dict, root: Path) -> list[str]:
    budget = plan["env_steps"]
    extra = [f"--trainer.max_epochs={plan['epochs']}", f"--data.num_envs={plan['num_envs']}",
             f"--data.num_steps={plan['num_steps']}"]
    for lam in annealed_lambdas(job["arm"]):
        extra.append(f"--data.reward.init_args.{lam}.init_args.horizon={max(1, round(plan['anneal_frac'] * budget))}")
    return run_fit_cmd([plan["config"], arm_config(job["arm"])], root, job["seed"], job["cell"]["overrides"], extra)


def make_job(spec: dict, plan: dict, out: Path) -> Job:
    """bound: evaluate the scripted policy on the cell's world; run: fit -> evaluate -> blame."""
    if spec["kind"] == "bound":
        def bound(job: Job) -> tuple[str, list[str]]:
            cell_yaml = job.work / "cell.yaml"  # the cell's overrides as a config layered on the base one
            cell_yaml.write_text(yaml.safe_dump(nested(spec["cell"]["overrides"])))
            return "evaluate", evaluate_args(plan, job.work, [Path(plan["config"]), cell_yaml], ["--policy", spec["policy"]])

        phases = [bound]
    else:
        def train(job: Job) -> tuple[str, list[str]]:
            return "fit", fit_cmd(plan, spec, job.work)

        def evaluate(job: Job) -> tuple[str, list[str]]:
            logs = log_dir(job.work)
            return "evaluate", evaluate_args(plan, job.work, [logs / "config.yaml"],
                                             ["--ckpt_path", str(logs / "checkpoints" / "last.ckpt")])

        def blame(job: Job) -> Optional[tuple[str, list[str]]]:
            if not plan["blame_episodes"]:
                return None
            return "blame", [sys.executable, str(Path(__file__).resolve()), "--blame-run", str(log_dir(job.work)),
                             "--blame-json", str(job.work / "blame.json"), "--blame-episodes",
                             str(plan["blame_episodes"]), "--blame-seed", str(plan["eval_seeds"][0])]

        phases = [train, evaluate, blame]
    return Job(spec, out, phases, lambda job: finish(job, plan), plan["launch"])


def finish(job: Job, plan: dict) -> dict[str, Any]:
    spec, out = job.spec, job.out
    evaluation = flat_eval(json.loads((job.work / "eval.json").read_text()))
    record = {"id": spec["id"], "kind": spec["kind"], "cell": spec["cell"]["name"], "overrides": spec["cell"]["overrides"],
              "eval": evaluation, "eval_seeds": plan["eval_seeds"], "banks": plan["banks"], "split": "heldout"}
    if spec["kind"] == "bound":
        record["policy"] = spec["policy"]
    else:
        logs = log_dir(job.work)
        curves = read_curves(logs)
        record.update(arm=Path(spec["arm"]).stem, seed=spec["seed"], env_steps=plan["env_steps"], epochs=plan["epochs"],
                      num_envs=plan["num_envs"], num_steps=plan["num_steps"], curves=curves,
                      tail_share={name: tail_of(points) for name, points in curves.items()},
                      blame=json.loads((job.work / "blame.json").read_text()) if plan["blame_episodes"] else {},
                      log_dir=str(logs.relative_to(out)))
    return record


# ---------------------------------------------------------------------------------------------- per run
def read_curves(logs: Path) -> dict[str, list[list[float]]]:
    return read_tags(logs, CURVE_TAGS)


def run_blame(logs: Path, episodes: int, seed: int) -> dict[str, Any]:
    """Replay `episodes` held-out episodes of the trained (greedy) policy with PipelineChain, each
    stage's decisions replaced in turn by the oracle's: critical steps lost per kind of stage."""
    from parlightning.analysis.pipeline import PipelineChain, blame_by_kind

    env, policy, oracle = load_for_blame(logs, split="heldout")
    chain = PipelineChain(env, policy, reference=oracle, kind_of=stage_kind)
    pairs, by_family = [], {}
    n_tasks = len(env.task_ids)
    for i in range(episodes):  # spread over the bank: families are contiguous blocks of task indices
        task = (i * n_tasks) // episodes if episodes <= n_tasks else i % n_tasks
        found = chain.blame(chain.record(task, seed=seed + i))
        pairs += found
        by_family.setdefault(env.task_ids[task].rsplit("-", 1)[0], []).extend(found)
    return {"episodes": episodes, "reference": "oracle", "stage_kinds": "skewed | wide | narrow (see stage_kind)",
            "by_kind": blame_by_kind(pairs),
            "by_family": {f: {"stages": len(ps), "time_lost_mean": sum(p.time_lost for p in ps) / len(ps)}
                          for f, ps in by_family.items()}}


def stage_kind(env: Any, obs: Any) -> str:
    """The shape of the stage the one actor starts, read off what it shows (SwarmEnv's slot rows:
    pending, size / max_cost, ...): `skewed` (one subtask at least twice the mean of the others:
    split it or wait), `wide` (at least half the slots pending) or `narrow`."""
    sizes = obs[0, : env.max_width]  # [W, F]
    size = sizes[:, 1][sizes[:, 0] > 0.5]
    if size.numel() >= 2:
        top = float(size.max())
        rest = (float(size.sum()) - top) / (size.numel() - 1)
        if top >= 2.0 * rest:
            return "skewed"
    return "wide" if 2 * size.numel() >= env.max_width else "narrow"


def load_for_blame(logs: Path, split: str) -> tuple[Any, Any, Any]:
    """A one-actor env of the run's world on `split`, the run's greedy policy and the world's oracle."""
    import torch

    from parlightning.cli.evaluate import build_env, env_spec, greedy_action, load_policy

    cls, init_args = env_spec([str(logs / "config.yaml")])
    env = build_env(cls, init_args, 1, 0, split, "cpu")
    policy = load_policy(str(logs / "checkpoints" / "last.ckpt"), env)

    def greedy(obs: Any) -> Any:
        with torch.no_grad():
            return greedy_action(policy, obs)

    return env, greedy, lambda obs: env.scripted_action("oracle", obs)


# ---------------------------------------------------------------------------------------------- the loop
def run_study(plan: dict, out: Path, jobs: int) -> None:
    run_jobs(jobs_of(plan), out, jobs, lambda spec: make_job(spec, plan, out))


# ---------------------------------------------------------------------------------------------- outputs
def load_results(out: Path, plan: dict) -> list[dict]:
    return load_all(out, jobs_of(plan))


def write_runs(results: list[dict], out: Path) -> None:
    with open(out / "runs.jsonl", "w") as f:
        for r in results:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    cols = ["id", "kind", "cell", "arm", "policy", "seed", "env_steps", *METRICS, "tail_share_success", "blame_worst_kind",
            "wall_s"]
    with open(out / "runs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in results:
            row = {**r, **{m: r["eval"].get(m) for m in METRICS}}
            row["tail_share_success"] = (r.get("tail_share") or {}).get("success_rate")
            row["blame_worst_kind"] = worst_kind((r.get("blame") or {}).get("by_kind") or {})
            w.writerow([row.get(c, "") if row.get(c) is not None else "" for c in cols])


def worst_kind(by_kind: dict[str, dict[str, float]]) -> Optional[str]:
    return max(by_kind, key=lambda k: by_kind[k]["time_lost_mean"]) if by_kind else None


def summarize(results: list[dict], plan: dict, seed: int, flat_tol: float) -> dict[str, Any]:
    from parlightning.analysis.stats import mean_std

    cells = []
    for cell in plan["cells"]:
        rs = [r for r in results if r["cell"] == cell["name"]]
        bounds = {r["policy"]: {m: r["eval"].get(m) for m in METRICS} for r in rs if r["kind"] == "bound"}
        arms: dict[str, Any] = {}
        for arm in (Path(a).stem for a in plan["arms"]):
            runs = [r for r in rs if r["kind"] == "run" and r["arm"] == arm]
            stats = {m: dict(zip(("mean", "std"), mean_std([r["eval"][m] for r in runs])))
                     for m in METRICS if all(r["eval"].get(m) is not None for r in runs)}
            shares = [(r.get("tail_share") or {}).get("success_rate") for r in runs]
            stats["flattened"] = sum(1 for s in shares if s is not None and s <= flat_tol)
            stats["flat_measured"] = sum(1 for s in shares if s is not None)
            stats["seeds"] = len(runs)
            stats["values"] = {m: [r["eval"].get(m) for r in runs] for m in ("success_rate", "speedup_vs_serial", *BEHAVIOUR)}
            # per seed, its evaluation values (banks x evaluation seeds): the CIs resample both levels
            stats["eval_values"] = {m: [[e[m] for e in r["eval"].get("runs") or [r["eval"]]] for r in runs]
                                    for m in ("success_rate", "speedup_vs_serial", *BEHAVIOUR)}
            arms[arm] = stats
        diffs = {}
        for other in (A, C):
            if B in arms and other in arms:
                for m in ("success_rate", "speedup_vs_serial"):
                    ci = nested_diff_ci(arms[B]["eval_values"][m], arms[other]["eval_values"][m], seed=seed)
                    diffs[f"b-{'a' if other == A else 'c'}/{m}"] = ci.as_dict() | {"label": ci.label()}
        behaviour = {}  # how the arms act: do the shaping terms make more subagents, and do fewer of them finish?
        for other in (A, C):
            if B in arms and other in arms:
                for m in BEHAVIOUR:
                    if None not in arms[B]["values"][m] + arms[other]["values"][m]:
                        ci = nested_diff_ci(arms[B]["eval_values"][m], arms[other]["eval_values"][m], seed=seed)
                        behaviour[f"b-{'a' if other == A else 'c'}/{m}"] = ci.as_dict() | {"label": ci.label()}
        cells.append({"name": cell["name"], "overrides": cell["overrides"], "bounds": bounds, "arms": arms, "diffs": diffs,
                      "behaviour_diffs": behaviour})
    blame: dict[str, dict[str, dict[str, float]]] = {}  # arm -> kind -> totals over every run of every cell
    for r in results:
        for kind, row in ((r.get("blame") or {}).get("by_kind") or {}).items():
            acc = blame.setdefault(r["arm"], {}).setdefault(kind, {"stages": 0, "time_lost_total": 0.0, "outcome_changed": 0})
            for key in acc:
                acc[key] += row[key]
    families: dict[str, dict[str, dict[str, float]]] = {}  # arm -> task family -> the same
    for r in results:
        for fam, row in ((r.get("blame") or {}).get("by_family") or {}).items():
            acc = families.setdefault(r["arm"], {}).setdefault(fam, {"stages": 0, "time_lost_total": 0.0})
            acc["stages"] += row["stages"]
            acc["time_lost_total"] += row["time_lost_mean"] * row["stages"]
    for kinds in (*blame.values(), *families.values()):
        for row in kinds.values():
            row["time_lost_mean"] = row["time_lost_total"] / max(row["stages"], 1)
    budget = {k: plan[k] for k in ("env_steps", "epochs", "num_envs", "num_steps", "seeds", "anneal_frac", "episodes",
                                   "banks", "eval_seeds")}
    return {"budget": budget, "axes": plan["axes"], "arms": plan["arms"], "bootstrap": {"seed": seed, "n_boot": 10000,
            "level": 0.95}, "flat_tol": flat_tol, "cells": cells, "blame": blame, "blame_by_family": families,
            "blame_worst_kind": {arm: worst_kind(k) for arm, k in blame.items()}}


def fmt(stat: Optional[dict], digits: int = 2) -> str:
    return "n/a" if not stat else f"{stat['mean']:.{digits}f} ± {stat['std']:.{digits}f}"


def flat_text(s: dict) -> str:
    """`3/5`: curves of 3 of the 5 seeds flattened; `n/a` when the runs were too short to tell."""
    return f"{s['flattened']}/{s['flat_measured']}" if s["flat_measured"] else "n/a (< 5 iterations)"


DIFF_NAMES = {"success_rate": "held-out success", "speedup_vs_serial": "speed-up vs serial"}


def overview(summary: dict) -> str:
    """The grid in two compact tables, one row per cell: each arm's held-out means (success, speed-up,
    subagents per episode, finish rate) beside the bounds, then the four CIs (the README quotes these)."""
    arms = [a for a in (A, B, C) if all(a in c["arms"] for c in summary["cells"])]
    tag = "/".join(f"({ARM_LABELS[a][1]})" for a in arms)
    keys = [k.rsplit(".", 1)[-1] for k in (summary["cells"][0]["overrides"] if summary["cells"] else {})]
    head = " | ".join(keys)

    def per_arm(cell: dict, metric: str, digits: int) -> str:
        return " / ".join(f"{cell['arms'][a][metric]['mean']:.{digits}f}" if metric in cell["arms"][a] else "n/a"
                          for a in arms)

    lines = [f"| {head} | success {tag} | speed-up {tag} | subagents / ep {tag} | finish rate {tag} | "
             "success curves flat (b) | serial success | ceiling (optimal) success / speed-up |",
             "|---" * (len(keys) + 7) + "|"]
    for cell in summary["cells"]:
        vals = " | ".join(str(v) for v in cell["overrides"].values())
        bo = cell["bounds"]
        serial = f"{bo['serial']['success_rate']:.2f}" if "serial" in bo else "n/a"
        oracle = f"{bo['optimal']['success_rate']:.2f} / {bo['optimal']['speedup_vs_serial']:.2f}x" if "optimal" in bo else "n/a"
        flat = flat_text(cell["arms"][B]) if B in cell["arms"] else "n/a"
        lines.append(f"| {vals} | {per_arm(cell, 'success_rate', 3)} | {per_arm(cell, 'speedup_vs_serial', 2)} | "
                     f"{per_arm(cell, 'subagents_per_episode', 1)} | {per_arm(cell, 'finish_rate', 2)} | {flat} | "
                     f"{serial} | {oracle} |")
    lines += ["", f"| {head} | (b)-(a) success | (b)-(c) success | (b)-(a) speed-up | (b)-(c) speed-up |",
              "|---" * (len(keys) + 4) + "|"]
    for cell in summary["cells"]:
        vals = " | ".join(str(v) for v in cell["overrides"].values())
        d = cell["diffs"]
        ci = [d[k]["label"] if k in d else "n/a" for k in ("b-a/success_rate", "b-c/success_rate",
                                                             "b-a/speedup_vs_serial", "b-c/speedup_vs_serial")]
        lines.append(f"| {vals} | " + " | ".join(ci) + " |")
    lines += ["", f"| {head} | (b)-(a) subagents / ep | (b)-(c) subagents / ep | (b)-(a) finish rate | (b)-(c) finish rate |",
              "|---" * (len(keys) + 4) + "|"]
    for cell in summary["cells"]:
        vals = " | ".join(str(v) for v in cell["overrides"].values())
        d = cell.get("behaviour_diffs") or {}
        ci = [d[k]["label"] if k in d else "n/a" for k in ("b-a/subagents_per_episode", "b-c/subagents_per_episode",
                                                             "b-a/finish_rate", "b-c/finish_rate")]
        lines.append(f"| {vals} | " + " | ".join(ci) + " |")
    return "\n".join(lines)


def table(summary: dict) -> str:
    b = summary["budget"]
    lines = [f"# PARL study: held-out evaluation ({b['seeds']} seeds per arm and cell; {b['env_steps']:,} env steps per run "
             f"= {b['epochs']} iterations of {b['num_envs']} x {b['num_steps']}; held out over banks {b['banks']} x "
             f"evaluation seeds {b['eval_seeds']}; mean ± std over seeds; 95% two-level bootstrap CI (seeds, then "
             f"banks x evaluation seeds), seed {summary['bootstrap']['seed']})", "", "## The grid", "", overview(summary), ""]
    for cell in summary["cells"]:
        lines += [f"## {cell['name']}", "",
                  "| arm | success | speed-up vs serial | critical steps | subagents / ep | finish rate | curves flat (success) |",
                  "|---|---|---|---|---|---|---|"]
        for arm, s in cell["arms"].items():
            lines.append(f"| {ARM_LABELS.get(arm, arm)} | {fmt(s.get('success_rate'))} | {fmt(s.get('speedup_vs_serial'))} | "
                         f"{fmt(s.get('critical_steps'), 1)} | {fmt(s.get('subagents_per_episode'), 1)} | "
                         f"{fmt(s.get('finish_rate'))} | {flat_text(s)} |")
        for policy, e in sorted(cell["bounds"].items()):
            su, sp = e.get("success_rate"), e.get("speedup_vs_serial")
            lines.append(f"| scripted {policy} | {su:.2f} | {sp:.2f} | {e.get('critical_steps', float('nan')):.1f} | "
                         f"{e.get('subagents_per_episode') or 0:.1f} | {e.get('finish_rate') or 0:.2f} | — |")
        lines.append("")
        for key, d in cell["diffs"].items():
            pair, metric = key.split("/")
            lines.append(f"- ({pair[0]})-({pair[2]}) {DIFF_NAMES[metric]}: {d['label']}")
        lines.append("")
    if summary["blame"]:
        lines += ["## Blame: mean critical steps lost per stage to the arm's decisions vs the oracle's "
                  "(counterfactual replay; all cells, held-out episodes; stages replayed in brackets)", "",
                  "| arm | " + " | ".join(sorted({k for v in summary["blame"].values() for k in v})) + " | worst |", ""]
        kinds = sorted({k for v in summary["blame"].values() for k in v})
        lines[-1] = "|---" * (len(kinds) + 2) + "|"
        for arm, rows in summary["blame"].items():
            cells = [f"{rows[k]['time_lost_mean']:+.2f} ({rows[k]['stages']})" if k in rows else "—" for k in kinds]
            lines.append(f"| {ARM_LABELS.get(arm, arm)} | " + " | ".join(cells) + f" | {summary['blame_worst_kind'][arm]} |")
        lines.append("")
        fams = sorted({f for v in summary["blame_by_family"].values() for f in v})
        lines += ["Per task family (mean critical steps lost per stage, stages replayed):", "",
                  "| arm | " + " | ".join(fams) + " |", "|---" * (len(fams) + 1) + "|"]
        for arm, rows in summary["blame_by_family"].items():
            cells = [f"{rows[f]['time_lost_mean']:+.2f} ({rows[f]['stages']})" if f in rows else "—" for f in fams]
            lines.append(f"| {ARM_LABELS.get(arm, arm)} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


HEATMAP_PANELS = [("b-a/success_rate", "(b)-(a) held-out success"), ("b-c/success_rate", "(b)-(c) held-out success"),
                  ("b-a/speedup_vs_serial", "(b)-(a) speed-up vs serial"), ("b-c/speedup_vs_serial", "(b)-(c) speed-up vs serial"),
                  ("serial/success_rate", "bound: serial success"), ("optimal/success_rate", "ceiling: optimal success"),
                  ("optimal/speedup_vs_serial", "ceiling: optimal speed-up")]


def heatmap_grid(summary: dict, key: str) -> tuple[list, list, list[list[float]], list[list[str]]]:
    """(row values, column values, values, cell notes) of one panel over the first two axes
    (further axes: the cells are averaged over them, and the table has them one by one)."""
    axes = list(summary["axes"].items())
    (rk, rows), (ck, cols) = (axes + [("", [None])] * 2)[:2]
    head, metric = key.split("/")
    values = [[math.nan] * len(cols) for _ in rows]
    notes = [[""] * len(cols) for _ in rows]
    for i, rv in enumerate(rows):
        for j, cv in enumerate(cols):
            found = [c for c in summary["cells"] if (not rk or c["overrides"].get(rk) == rv)
                     and (not ck or c["overrides"].get(ck) == cv)]
            if head in ("b-a", "b-c"):
                ds = [c["diffs"][key] for c in found if key in c["diffs"]]
                if ds:
                    values[i][j] = sum(d["diff"] for d in ds) / len(ds)
                    ns = sum(not d["significant"] for d in ds)
                    notes[i][j] = f"{values[i][j]:+.2f}" + ("\nns" if ns == len(ds) else (f"\n{ns} ns" if ns else ""))
            else:
                vs = [c["bounds"][head][metric] for c in found if c["bounds"].get(head, {}).get(metric) is not None]
                if vs:
                    values[i][j] = sum(vs) / len(vs)
                    notes[i][j] = f"{values[i][j]:.2f}"
    return rows, cols, values, notes


MIN_COLOUR_RANGE = {"success_rate": 0.05, "speedup_vs_serial": 0.25}


def heatmaps(summary: dict, path: Path) -> Optional[str]:
    """The differences (b)-(a) and (b)-(c) on held-out success and speed-up over the grid, next to the
    serial bound and the optimal ceiling; 'ns' marks a difference whose 95% CI covers 0."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no heatmaps (pip install matplotlib)"
    names = [k.rsplit(".", 1)[-1] for k in summary["axes"]] + ["", ""]
    grids = {key: heatmap_grid(summary, key) for key, _ in HEATMAP_PANELS}
    rows, cols = grids[HEATMAP_PANELS[0][0]][:2]
    fig, axes = plt.subplots(1, len(HEATMAP_PANELS), figsize=(2.6 * len(HEATMAP_PANELS), 0.8 * len(rows) + 2.4),
                             squeeze=False)
    for ax, (key, title) in zip(axes[0], HEATMAP_PANELS):
        _, _, values, notes = grids[key]
        metric = key.split("/")[1]
        if key.startswith("b-"):  # one symmetric colour scale per metric, shared by (b)-(a) and (b)-(c)
            same = [v for k, (_, _, vs, _) in grids.items() if k.startswith("b-") and k.endswith(metric)
                    for row in vs for v in row if not math.isnan(v)]
            # never narrower than a difference that matters (0.05 success, 0.25x speed-up): noise stays pale
            lim = max([abs(v) for v in same] + [MIN_COLOUR_RANGE[metric]])
            im = ax.imshow(values, cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto")
        else:
            im = ax.imshow(values, cmap="viridis", aspect="auto")
        for i in range(len(rows)):
            for j in range(len(cols)):
                ax.text(j, i, notes[i][j], ha="center", va="center", fontsize=8,
                        bbox={"facecolor": "white", "alpha": 0.6, "linewidth": 0, "pad": 1})
        ax.set_xticks(range(len(cols)), [str(c) for c in cols] if names[1] else [""] * len(cols))
        ax.set_yticks(range(len(rows)), [str(r) for r in rows])
        ax.set_xlabel(names[1])
        ax.set_ylabel(names[0])
        ax.set_title(title, fontsize=8)
        fig.colorbar(im, ax=ax, fraction=0.046)
    b = summary["budget"]
    fig.suptitle(f"PARL study, held-out tasks: {b['seeds']} seeds per arm and cell, {b['env_steps']:,} env steps per run; "
                 "ns = 95% bootstrap CI covers 0", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# ---------------------------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=as_path(config_file), default=ROOT / "configs" / "swarm.yaml", help="base config (default configs/swarm.yaml)")
    p.add_argument("--arms", type=comma_list(arm_name, distinct=False), default=f"{A},{B},{C}", help="comma-separated configs/arms/ names or .yaml paths")
    p.add_argument("--axis", action="append", type=axis_spec, default=None,
                   help=f"KEY=v1,v2,... (repeatable); default {' '.join(DEFAULT_AXES)}")
    p.add_argument("--seeds", type=positive_int, default=None, help="seeds per arm and cell (default 5; --quick 2)")
    p.add_argument("--epochs", type=positive_int, default=None, help="PPO iterations per run (default: the config's)")
    p.add_argument("--num-envs", dest="num_envs", type=actor_count, default=None, help="actors per run (default: the config's)")
    p.add_argument("--num-steps", dest="num_steps", type=step_count, default=None, help="rollout length (default: the config's)")
    p.add_argument("--anneal-frac", dest="anneal_frac", type=positive_fraction, default=0.6,
                   help="annealed arms reach λ = 0 at this fraction of the budget (default 0.6)")
    p.add_argument("--episodes", type=episode_count, default=None, help="held-out evaluation episodes per task (default: evaluate's; --quick 1)")
    p.add_argument("--blame-episodes", dest="blame_episodes", type=episode_count, default=None,
                   help="held-out episodes per run replayed stage by stage with PipelineChain (default 8; --quick 2)")
    p.add_argument("--banks", type=positive_int, default=3, help="held-out task banks every run is evaluated on (default 3)")
    p.add_argument("--eval-seeds", dest="eval_seeds", type=positive_int, default=1,
                   help="evaluation seeds per bank (default 1; their spread is inside the table's std)")
    p.add_argument("--jobs", type=job_count, default=1, help="runs in parallel processes (one CPU thread each)")
    p.add_argument("--out", type=as_path(output_folder), default=None, help="output folder (default: a fresh runs/parl_study/<time>); "
                   "an existing study folder is resumed")
    p.add_argument("--bootstrap-seed", dest="bootstrap_seed", type=random_seed, default=0, help="seed of the bootstrap CIs")
    p.add_argument("--flat-tol", dest="flat_tol", type=non_negative_float, default=0.1,
                   help="a curve counts as flat when its last 20%% moved at most this share of its range")
    p.add_argument("--launch", choices=("exec", "fork"), default=None,
                   help="exec: every run a fresh `python -m parlightning.fit` / `evaluate` interpreter (default); fork: the same "
                   "CLI modules run as __main__ in children of a fork server that imported them once (saves ~6 s of "
                   "imports per process: default with --quick)")
    p.add_argument("--blame-run", dest="blame_run", type=as_path(existing_folder), default=None, help=argparse.SUPPRESS)  # internal phase
    p.add_argument("--blame-json", dest="blame_json", type=as_path(output_file), default=None, help=argparse.SUPPRESS)
    p.add_argument("--blame-seed", dest="blame_seed", type=random_seed, default=0, help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="smoke run: 2 cells, 2 seeds, 2 iterations of 16 x 8")
    return p


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    config = yaml.safe_load(args.config.read_text())
    q = args.quick
    args.axis = args.axis if args.axis is not None else (QUICK_AXES if q else DEFAULT_AXES)
    pick = lambda value, quick, full: value if value is not None else (quick if q else full)  # noqa: E731
    args.seeds = pick(args.seeds, 2, 5)
    args.epochs = pick(args.epochs, 2, int(config["trainer"]["max_epochs"]))
    args.num_envs = pick(args.num_envs, 16, int(config["data"]["num_envs"]))
    args.num_steps = pick(args.num_steps, 8, int(config["data"]["num_steps"]))
    args.episodes = pick(args.episodes, 1, None)
    args.blame_episodes = pick(args.blame_episodes, 2, 8)
    args.launch = args.launch or default_launch(q)
    for name in ("epochs", "num_envs", "num_steps"):  # the config's values when not given (arguments: their types)
        if getattr(args, name) <= 0:
            raise SystemExit(f"error: --{name.replace('_', '-')}: must be positive, got {getattr(args, name)}")
    args.banks = bank_seeds(args.banks)
    args.eval_seeds = list(range(args.eval_seeds))
    return args


def main(argv: Optional[list[str]] = None) -> Optional[dict]:
    args = parse_args(argv)
    if args.blame_run is not None:  # one run's blame phase (a child of the study)
        write_json_atomic(args.blame_json, run_blame(args.blame_run, args.blame_episodes, args.blame_seed))
        return None
    plan = make_plan(args)
    out = args.out or ROOT / "runs" / "parl_study" / datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    open_study(out, plan)
    print(f"PARL study: {len(plan['arms'])} arms x {len(plan['cells'])} cells x {plan['seeds']} seeds, "
          f"{plan['env_steps']:,} env steps per run, out {out}", flush=True)
    start = time.perf_counter()
    run_study(plan, out, args.jobs)
    results = load_results(out, plan)
    write_runs(results, out)
    summary = summarize(results, plan, args.bootstrap_seed, args.flat_tol)
    write_json_atomic(out / "summary.json", summary)
    text = table(summary)
    (out / "table.md").write_text(text + "\n")
    problem = heatmaps(summary, out / "heatmaps.png")
    print("\n" + text)
    print(problem or f"heatmaps: {out / 'heatmaps.png'}")
    print(f"outputs: {out}/runs.jsonl, runs.csv, table.md, summary.json   ({time.perf_counter() - start:.0f} s)")
    return summary


if __name__ == "__main__":
    from parlightning.cli.script_main import run_main

    run_main(main)
