"""scripts/sampler_study.py (issue 25): the quick study end to end through the real fit / evaluate CLIs
(resumed without rerunning), its page and plots, its refusals, and its curve arithmetic."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "sampler_study.py"
sys.path.insert(0, str(ROOT / "scripts"))

import sampler_study  # noqa: E402
from tests.script_inprocess import run_in_process, run_in_process_full  # noqa: E402


def _run(*args, timeout=600):
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_quick_study_trains_evaluates_every_checkpoint_and_resumes(tmp_path):
    out = tmp_path / "s"
    args = ["--quick", "--banks", "scarce", "--seeds", "2", "--out", str(out), "--docs", str(tmp_path / "d" / "p.md")]
    proc = _run(*args)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    arms = summary["banks"]["scarce"]["arms"]
    assert set(arms) == {"round_robin", "sfl"} and all(a["seeds"] == 2 for a in arms.values())
    rr = json.loads((out / "results" / "scarce" / "round_robin" / "seed0.json").read_text())
    assert [p["env_steps"] for p in rr["points"]] == [128, 256]  # a checkpoint per iteration, each evaluated
    assert all(len(p["runs"]) == 3 for p in rr["points"])  # 3 held-out banks
    assert rr["task_families"].count("solo") == 24 and rr["task_families"].count("fanout") == 8  # the scarce bank
    assert 0.0 <= rr["train_eval"]["success_rate"] <= 1.0
    picks = rr["points"][-1]["picks"]  # RoundRobin cycles the bank: no task twice before every task once
    assert len(picks) == 64 and max(picks) - min(picks) <= 1 and sum(picks) > 16
    share = sampler_study.family_share(rr)
    assert sum(share.values()) == pytest.approx(1.0) and set(share) == {"solo", "fanout", "pipeline", "locked"}
    assert "success_rate" in arms["sfl"]["diffs"] and arms["sfl"]["own_informative_share"] is not None
    assert arms["round_robin"]["own_informative_share"] is None  # reward-blind: it records nothing
    assert set(summary["repeat"]) == {"lockstep", "lag1"} and summary["repeat"]["lag1"]["seeds"] == 1
    page = (out / "samplers_training.md").read_text()
    assert "quick smoke run" in page.lower() and "scripts/sampler_study.py" in page and "load average" in page
    assert "max_policy_lag: 1" in page and "Not checked: needs the scarce and the default bank" in page
    for png in ("heldout_curves.png", "family_picks.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
        assert (tmp_path / "d" / f"p_{png}").read_bytes()[:4] == b"\x89PNG"
    assert "](p_heldout_curves.png)" in (tmp_path / "d" / "p.md").read_text()
    mtimes = {p: p.stat().st_mtime_ns for p in (out / "results").rglob("*.json")}
    code, again, err = run_in_process_full(sampler_study.main, SCRIPT, args)  # the resume runs nothing: in this process
    assert code == 0 and "5 jobs, 5 already finished (skipped), 0 to run" in again, err
    assert all(p.stat().st_mtime_ns == t for p, t in mtimes.items())


def test_bad_arguments_are_one_error_line_before_anything_is_written(tmp_path):
    bad = _run("--arms", "nope", "--out", str(tmp_path / "never"))  # the command itself; the rest in this process
    assert bad.returncode != 0 and bad.stderr.strip().splitlines()[-1].startswith(
        "sampler_study.py: error: argument --arms: item 1 ('nope'): must be one of"), bad.stderr
    for args, message in ((["--arms", "nope"], "sampler_study.py: error: argument --arms: item 1 ('nope'): must be one of"),
                          (["--arms", "sfl"], "error: --arms: every comparison is against round_robin"),
                          (["--seeds", "0"], "sampler_study.py: error: argument --seeds: must be a positive integer"),
                          (["--epochs", "10", "--every", "3"], "error: --every: 3 must divide --epochs 10"),
                          (["--num-envs", "7"], "error: --num-envs: 7 must be even"),
                          (["--config", "nope.yaml"], "sampler_study.py: error: argument --config: no file at 'nope.yaml'")):
        code, err = run_in_process(sampler_study.main, SCRIPT, [*args, "--out", str(tmp_path / "never")])
        assert code != 0 and err.strip().splitlines()[-1].startswith(message), err
    assert not (tmp_path / "never").exists()


def _run_of(curve, steps=(10, 20, 30, 40, 50)):
    return {"points": [{"env_steps": s, "eval": {"success_rate": v}} for s, v in zip(steps, curve)]}


def test_steps_to_reach_interpolates_the_mean_curve_and_says_when_it_never_does():
    assert sampler_study.crossing([10, 20, 30], [0.1, 0.3, 0.5], 0.4) == pytest.approx(25.0)
    assert sampler_study.crossing([10, 20, 30], [0.5, 0.6, 0.7], 0.4) == 10.0  # already there at the first point
    assert sampler_study.crossing([10, 20, 30], [0.1, 0.2, 0.3], 0.4) is None
    fast = [_run_of([0.2, 0.5, 0.5, 0.5, 0.5]), _run_of([0.2, 0.5, 0.6, 0.6, 0.6])]
    reach = sampler_study.steps_to_reach(fast, 0.35, seed=0)
    assert reach["steps"] == pytest.approx(15.0) and reach["ratio"] == pytest.approx(0.3)
    assert reach["reached_share"] == 1.0 and reach["low_ratio"] <= 0.3 <= reach["high_ratio"]
    never = sampler_study.steps_to_reach([_run_of([0.1] * 5), _run_of([0.2] * 5)], 0.5, seed=0)
    assert never["ratio"] is None and never["reached_share"] == 0.0 and never["high_ratio"] is None
    assert "not reached" in sampler_study.reach_text(never)


def test_the_repeated_runs_train_the_same_env_steps_on_two_ranks():
    a = sampler_study.parse_args(["--out", "x"])
    plan = sampler_study.make_plan(a)
    spec = {"arm": "posterior_signal", "bank": "scarce", "seed": 0}
    one = sampler_study.run_config(plan, {**spec, "variant": "lockstep"})
    ddp = sampler_study.run_config(plan, {**spec, "variant": "ddp2"})
    lag = sampler_study.run_config(plan, {**spec, "variant": "lag1"})
    assert one["data"]["num_envs"] == 2 * ddp["data"]["num_envs"] and ddp["trainer"]["devices"] == 2
    assert ddp["trainer"]["strategy"] == "ddp" and lag["data"]["max_policy_lag"] == 1
    assert one["data"]["env"]["init_args"]["family_tasks"] == sampler_study.SCARCE
    assert one["data"]["sampler"]["class_path"] == "parlightning.distribution.samplers.PosteriorSignal"
    ck = [c for c in one["trainer"]["callbacks"] if c["class_path"].endswith("ModelCheckpoint")][0]
    assert ck["init_args"]["every_n_epochs"] == plan["every"] and ck["init_args"]["save_top_k"] == -1
    horizon = one["data"]["reward"]["init_args"]["lambda1"]["init_args"]["horizon"]
    assert horizon == round(0.6 * plan["epochs"] * plan["num_envs"] * plan["num_steps"])
    specs = sampler_study.specs_of(plan)
    assert len(specs) == 4 * 3 * 5 + 2 * 3 and len({s["id"] for s in specs}) == len(specs)
