"""scripts/collapse_study.py (issue 23 item 6) and the shared runner scripts/experiment.py: the quick map
end to end through the real fit / bc / evaluate CLIs (resumed without rerunning), its page, its refusals,
and the runner's statistics."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.script_inprocess import run_in_process, run_in_process_full

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "collapse_study.py"
sys.path.insert(0, str(ROOT / "scripts"))

import experiment  # noqa: E402


def _run(*args, timeout=600):
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def _main(*args):
    """The script's main in this process (the study itself runs as the command above; the reports and the
    resume that runs nothing need no fresh interpreter): a CompletedProcess-like result."""
    import collapse_study as cs

    code, out, err = run_in_process_full(cs.main, SCRIPT, list(args))
    return subprocess.CompletedProcess([str(SCRIPT), *args], code, out, err)


def test_quick_map_runs_every_phase_and_resumes(tmp_path):
    out, store = tmp_path / "c", tmp_path / "store"  # the runs' own files, and what a study keeps (results, plan)
    args = ["--quick", "--priors", "0.998,bc", "--seeds", "1", "--jobs", "2", "--store", str(store)]
    proc = _run(*args, "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    cells = {c["prior"]: c for c in summary["cells"]}
    strong = cells["0.998"]
    # P(do it yourself) = 0.998 and two tiny iterations: outcome-only PPO never delegates, which is collapse
    assert strong["a_collapses"] and strong["arms"]["perf_only"]["collapsed"] == 1
    assert strong["arms"]["perf_only"]["final_delegation_share"] < 0.05
    assert set(strong["horizons"]) == {"0.3", "0.6"}  # the horizon axis ran in the collapse region
    assert not (out / "results").exists() and json.loads((store / "summary.json").read_text()) == summary
    assert json.loads((store / "study.json").read_text())["config"] == "configs/swarm.yaml"  # resumable from any clone
    bc = [json.loads(p.read_text()) for p in (store / "results").rglob("seed0.json") if "prior=bc" in str(p)
          and "_h=" not in str(p)]
    assert len(bc) == 3 and all("bc_loss" in r["bc"] for r in bc)  # every bc run cloned the serial policy first
    for r in bc:
        assert r["eval"]["bank_seeds"] == [1234, 2234, 3234] and len(r["eval"]["runs"]) == 3
    # the horizon axis runs once per cell in the region (0.3; 0.6 is the main grid's (b)): 0.998 collapses, and
    # bc's tiny-budget (a) may or may not stall near serial
    region = sum(bool(c["a_collapses"] or c["a_stalls"]) for c in summary["cells"])
    assert 1 <= region <= 2
    runs = (store / "runs.csv").read_text().splitlines()
    assert len(runs) == 1 + 6 + region  # header, 2 cells x 3 arms, the horizon runs
    page = (out / "collapse.md").read_text()
    assert "Not yet run at full budget" in page and "quick smoke run" in page and "Collapse" in page
    assert (out / "heatmaps.png").read_bytes()[:4] == b"\x89PNG" and (out / "delegation.png").read_bytes()[:4] == b"\x89PNG"
    total = 6 + region
    assert summary["progress"] == {"finished": total, "planned": total}
    # --report summarizes what has finished without running anything: with one result gone, a partial page
    gone = next(p for p in (store / "results").rglob("seed0.json") if "prior=bc" in str(p) and "constant" in str(p))
    kept = gone.read_bytes()
    gone.unlink()
    report = _main(*args, "--report", "--docs", str(tmp_path / "page.md"))
    assert report.returncode == 0, report.stderr[-2000:]
    assert f"**Partial: {total - 1} of {total} planned runs have finished**" in (tmp_path / "page.md").read_text()
    assert not gone.exists() and json.loads((store / "summary.json").read_text())["progress"]["finished"] == total - 1
    gone.write_bytes(kept)
    mtimes = {p: p.stat().st_mtime_ns for p in (store / "results").rglob("*.json")}
    again = _main(*args, "--out", str(tmp_path / "elsewhere"))  # another checkout: only the store came along
    assert again.returncode == 0 and f"{total} jobs, {total} already finished (skipped), 0 to run" in again.stdout
    assert all(p.stat().st_mtime_ns == t for p, t in mtimes.items())
    # --report with a prior the store has not run: the plan grows (as results copied in from another store of the
    # same settings would need), nothing runs, and the page counts the new cell's runs as planned, not finished
    grown = _main("--quick", "--priors", "none", "--seeds", "1", "--jobs", "2", "--store", str(store), "--report",
                 "--docs", str(tmp_path / "grown.md"))
    assert grown.returncode == 0, grown.stderr[-2000:]
    assert json.loads((store / "summary.json").read_text())["progress"] == {"finished": total, "planned": total + 3}
    assert [c["prior"] for c in json.loads((store / "study.json").read_text())["cells"]] == ["0.998", "bc", "none"]
    assert all(p.stat().st_mtime_ns == t for p, t in mtimes.items())


def test_the_plan_page_has_no_numbers_and_bad_arguments_are_one_error_line(tmp_path):
    import collapse_study as cs  # the page and the refusals run in this process; one refusal also as the command

    doc = tmp_path / "collapse.md"
    code, err = run_in_process(cs.main, SCRIPT, ["--plan", "--docs", str(doc)])
    assert code == 0, err
    text = doc.read_text()
    assert "**Not yet run at full budget.**" in text and "No numbers are shown here" in text
    assert "0.998" in text and "983,040 env steps" in text  # the design names the budget it will use
    bad = _run("--priors", "1.5", "--out", str(tmp_path / "never"))
    assert bad.returncode != 0 and bad.stderr.strip().splitlines()[-1].startswith(
        "collapse_study.py: error: argument --priors: item 1 ('1.5')"), bad.stderr
    for args, message in ((["--priors", "1.5"], "collapse_study.py: error: argument --priors: item 1 ('1.5')"),
                          (["--plan"], "error: --plan: writes the page only"),
                          (["--seeds", "0"], "collapse_study.py: error: argument --seeds: must be a positive integer"),
                          (["--config", "nope.yaml"], "collapse_study.py: error: argument --config: no file at"),
                          (["--report"], "error: --report: no study in")):
        code, err = run_in_process(cs.main, SCRIPT, [*args, "--out", str(tmp_path / "never")])
        assert code != 0 and err.strip().splitlines()[-1].startswith(message), err
    assert not (tmp_path / "never").exists()


def test_nested_bootstrap_puts_the_evaluation_spread_inside_the_interval():
    a = [[0.60, 0.70, 0.50], [0.62, 0.72, 0.52], [0.61, 0.71, 0.51]]
    b = [[0.40, 0.41, 0.39]] * 3
    wide = experiment.nested_diff_ci(a, b, seed=0)
    tight = experiment.nested_diff_ci([[sum(g) / 3] for g in a], [[sum(g) / 3] for g in b], seed=0)
    assert wide.low <= wide.diff <= wide.high and wide.diff == pytest.approx(0.21, abs=1e-9)
    assert (wide.high - wide.low) > 2 * (tight.high - tight.low)  # the banks' spread widens it
    assert wide.significant
    same = experiment.nested_diff_ci([[0.5, 0.6]] * 3, [[0.55, 0.55]] * 3, seed=0)
    assert not same.significant and "not significant" in same.label()
    assert "n/a" in experiment.nested_diff_ci([[0.5]], [[0.4]]).label()


def test_flat_eval_and_a_changed_study_is_refused(tmp_path):
    multi = {"policy": "p", "split": "heldout", "bank_seeds": [1, 2], "seeds": [0],
             "summary": {"success_rate": {"mean": 0.5, "std": 0.1, "std_over_banks": 0.1, "min": 0.4, "max": 0.6}},
             "runs": [{"success_rate": 0.4}, {"success_rate": 0.6}]}
    flat = experiment.flat_eval(multi)
    assert flat["success_rate"] == 0.5 and len(flat["runs"]) == 2 and flat["spread"]["success_rate"]["std"] == 0.1
    assert experiment.flat_eval({"success_rate": 0.3}) == {"success_rate": 0.3}
    experiment.open_study(tmp_path, {"seeds": 2, "launch": "fork"})
    experiment.open_study(tmp_path, {"seeds": 2, "launch": "exec"})  # how runs start does not matter
    with pytest.raises(SystemExit, match="holds a study with other settings \\(seeds\\)"):
        experiment.open_study(tmp_path, {"seeds": 3, "launch": "fork"})
    grown = tmp_path / "grown"
    grown.mkdir()
    experiment.open_study(grown, {"seeds": 2, "cells": ["1x"]}, grow=("cells",))
    experiment.open_study(grown, {"seeds": 2, "cells": ["1x", "3x"]}, grow=("cells",))  # a study gains cells
    assert json.loads((grown / "study.json").read_text())["cells"] == ["1x", "3x"]
    with pytest.raises(SystemExit, match="other settings \\(cells\\)"):  # but never loses one
        experiment.open_study(grown, {"seeds": 2, "cells": ["3x"]}, grow=("cells",))


def test_the_horizon_region_takes_cells_where_outcome_only_stalls_near_serial_while_still_delegating():
    import collapse_study as cs

    plan = {"cells": [{"world": "default", "prior": p, "lam": 1.0, "budget": 1, "name": p} for p in ("stall", "free")],
            "horizons": [0.2, 0.6], "anneal_frac": 0.6}

    def run(prior, success, subagents, seed):
        ev = {"success_rate": success, "serial_success_rate": 0.25, "subagents_per_episode": subagents,
              "speedup_vs_serial": 1.0, "ceiling_success_rate": 0.7, "runs": [{"success_rate": success}]}
        return {"cell": {"world": "default", "prior": prior, "lam": 1.0, "budget": 1}, "arm": "perf_only", "seed": seed,
                "horizon": 0.6, "horizon_axis": False, "eval": ev, "curves": {}, "tail_share": {},
                "collapsed": cs.collapsed(ev)}

    # near serial success in 2 of 3 seeds but ~20 subagents per episode: not collapsed by the definition
    results = [run("stall", 0.27, 20.0, 0), run("stall", 0.28, 22.0, 1), run("stall", 0.45, 30.0, 2),
               run("free", 0.55, 40.0, 0), run("free", 0.28, 25.0, 1), run("free", 0.56, 38.0, 2)]
    cells = {c["prior"]: c for c in cs.summarize(plan, results)["cells"]}
    assert cells["stall"]["arms"]["perf_only"]["collapsed"] == 0 and cells["stall"]["arms"]["perf_only"]["near_serial"] == 2
    assert cells["stall"]["a_stalls"] and not cells["stall"]["a_collapses"] and cs.in_region(cells["stall"])
    assert not cs.in_region(cells["free"])  # 1 of 3 near serial is not most seeds
    specs = cs.specs_of({**plan, "seeds": 1}, tuple(c["name"] for c in cells.values() if cs.in_region(c)))
    horizon = [s for s in specs if s.get("horizon_axis")]
    assert [(s["cell"]["prior"], s["horizon"]) for s in horizon] == [("stall", 0.2)]  # 0.6 is the main grid's (b)


def test_a_study_gains_one_priors_3x_cells_and_the_page_names_which(tmp_path):
    import collapse_study as cs

    cell = lambda p, b: {"world": "default", "prior": p, "lam": 1.0, "budget": b, "name": f"{p}_{b}x"}  # noqa: E731
    first = {"cells": [cell("none", 1), cell("0.99999", 1)]}
    (tmp_path / "study.json").write_text(json.dumps(first))
    later = {"cells": [cell("0.99999", 3)]}  # e.g. `--priors 0.99999 --budgets 3` on the same --store
    cs.merged_cells(tmp_path, later)
    assert later["cells"] == [cell("none", 1), cell("0.99999", 1), cell("0.99999", 3)]  # saved first, then new
    assert "3x: priors 0.99999" in cs.budget_note(later) and "1x: every prior" in cs.budget_note(later)
    assert cs.budget_note({"cells": [cell("none", 1), cell("none", 3)]}) == ""  # the whole map: nothing to say
    cs.merged_cells(tmp_path / "nowhere", later)  # no saved study: the arguments' cells as they are
    assert len(later["cells"]) == 3
