"""scripts/parl_study.py end to end through the real fit / evaluate CLIs: the --quick study (every arm,
2 cells, 2 seeds, held-out evaluation, table, heatmaps), killed mid-way and resumed without rerunning
finished runs; and its refusals of bad input."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.script_inprocess import run_in_process

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "parl_study.py"
sys.path.insert(0, str(ROOT / "scripts"))
ARMS = ("perf_only", "parl_annealed", "parl_constant")
CELLS = ("merge_cost=0.05", "merge_cost=0.5")  # --quick: one axis, two values


def study(*args, env=None):
    return subprocess.Popen([sys.executable, str(SCRIPT), *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)


def finish(proc, timeout):
    """(returncode, output); a study still running at `timeout` is killed (it takes its runs with it)."""
    try:
        text, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        text, _ = proc.communicate()
    return proc.returncode, text


def processes_marked(mark: str) -> list[int]:
    """Live processes whose environment carries `mark` (the study and everything it started)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark.encode() in (entry / "environ").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def run_results(out: Path) -> dict[str, float]:
    """Finished (cell, arm, seed) results and their modification times."""
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in (out / "results").rglob("seed*.json")}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kills and /proc checks are Linux-only here")
def test_quick_study_runs_end_to_end_and_resumes_after_a_kill(tmp_path):
    out = tmp_path / "study"
    args = ["--quick", "--jobs", "2", "--out", str(out)]
    mark = f"PARL_STUDY_TEST={uuid.uuid4().hex}"
    env = dict(os.environ, PARL_STUDY_TEST=mark.split("=")[1])
    proc = study(*args, env=env)
    deadline = time.time() + 240
    while not run_results(out) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, proc.stdout.read()  # still running: the kill lands mid-way
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = run_results(out)
    done = list((out / "results").rglob("*.json"))  # the runs and the serial / oracle bounds
    assert 1 <= len(finished) < 12
    killed = time.time()
    while processes_marked(mark) and time.time() < killed + 60:  # the runs in progress die with the study:
        time.sleep(0.2)                                           # no orphans left training
    assert processes_marked(mark) == []
    print(f"children gone {time.time() - killed:.1f} s after the kill")

    code, log = finish(study(*args), timeout=400)
    assert code == 0, log
    assert f"{len(done)} already finished (skipped), {18 - len(done)} to run" in log
    after = run_results(out)
    assert len(after) == 12
    assert all(after[k] == v for k, v in finished.items())  # finished runs were not rerun

    lines = (out / "runs.jsonl").read_text().splitlines()
    runs = [json.loads(line) for line in lines]
    assert len(runs) == 18  # 2 cells x (3 arms x 2 seeds + serial, oracle and optimal bounds)
    trained = [r for r in runs if r["kind"] == "run"]
    assert sorted({(r["cell"], r["arm"]) for r in trained}) == sorted(
        (c, a) for c in CELLS for a in ARMS)
    for r in trained:
        assert r["split"] == "heldout" and 0.0 <= r["eval"]["success_rate"] <= 1.0
        assert r["eval"]["speedup_vs_serial"] > 0 and r["env_steps"] == 2 * 16 * 8
        assert len(r["curves"]["success_rate"]) == 2  # one point per PPO iteration, read back from TensorBoard
        assert r["blame"]["by_kind"] and r["blame"]["reference"] == "oracle"
    serial = [r for r in runs if r.get("policy") == "serial"]
    assert len(serial) == 2 and all(r["eval"]["speedup_vs_serial"] == pytest.approx(1.0) for r in serial)
    assert len((out / "runs.csv").read_text().splitlines()) == 19
    for r in runs:  # held out over three banks (one evaluation seed in --quick)
        assert r["eval"]["bank_seeds"] == [1234, 2234, 3234] and len(r["eval"]["runs"]) == 3

    summary = json.loads((out / "summary.json").read_text())
    assert summary["budget"]["env_steps"] == 256 and summary["budget"]["seeds"] == 2
    for cell in summary["cells"]:
        assert sorted(cell["arms"]) == sorted(ARMS) and all(a["seeds"] == 2 for a in cell["arms"].values())
        assert set(cell["diffs"]) == {"b-a/success_rate", "b-a/speedup_vs_serial", "b-c/success_rate",
                                      "b-c/speedup_vs_serial"}
        for d in cell["diffs"].values():
            assert d["low"] <= d["diff"] <= d["high"]
            assert d["label"].endswith("not significant") == (not d["significant"])
        assert set(cell["bounds"]) == {"serial", "oracle", "optimal"}
        assert cell["bounds"]["optimal"]["speedup_vs_serial"] > cell["bounds"]["oracle"]["speedup_vs_serial"]
    table = (out / "table.md").read_text()
    for text in ("## merge_cost=0.05", "## merge_cost=0.5", "(a) r_perf only", "(b) PARL annealed", "(c) PARL constant",
                 "scripted oracle", "scripted optimal", "scripted serial", "(b)-(a) held-out success", "(b)-(c) speed-up vs serial",
                 "2 seeds per arm and cell; 256 env steps per run"):
        assert text in table
    grid = table.split("## The grid", 1)[1].split("\n## ", 1)[0]  # one row per cell: the arms' means, then the CIs
    for cell in summary["cells"]:
        means = " / ".join(f"{cell['arms'][a]['success_rate']['mean']:.3f}" for a in ARMS)
        assert f"| {cell['overrides']['data.env.init_args.merge_cost']} | {means} |" in grid
        assert cell["diffs"]["b-c/speedup_vs_serial"]["label"] + " |" in grid
    assert (out / "heatmaps.png").read_bytes()[:4] == b"\x89PNG"


def test_bad_arguments_get_one_error_line_before_anything_is_written(tmp_path):
    import parl_study  # scripts/ (the refusals run in this process; the first also as the command itself)

    out = tmp_path / "s"
    code, text = finish(study("--quick", "--out", str(out), "--seeds", "0"), timeout=60)
    assert code != 0 and text.strip().splitlines()[-1].startswith(
        "parl_study.py: error: argument --seeds: must be a positive integer"), text
    for args, message in (
        (["--axis", "merge_cost"], "parl_study.py: error: argument --axis: 'merge_cost': write KEY=v1,v2"),
        (["--arms", "nope"], "parl_study.py: error: argument --arms: item 1 ('nope'): no arm config"),
        (["--seeds", "0"], "parl_study.py: error: argument --seeds: must be a positive integer"),
    ):
        code, text = run_in_process(parl_study.main, SCRIPT, ["--quick", "--out", str(out), *args])
        assert code != 0 and text.strip().splitlines()[-1].startswith(message), text
        assert not out.exists()
    (out).mkdir()
    (out / "study.json").write_text(json.dumps({"seeds": 3}))
    code, text = run_in_process(parl_study.main, SCRIPT, ["--quick", "--out", str(out)])
    assert code != 0 and "holds a study with other settings" in text and "pass a fresh --out" in text
