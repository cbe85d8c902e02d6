"""scripts/bench_throughput.py: `--profile` attributes both paths' CPU time (its raw-loop child broke when the
buffer's `write_outcome` became `write`), and `--from-json` re-renders a saved run's table with the per-phase
CPU ratios."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench_throughput.py"
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
TINY = ["--n", "64", "--num-steps", "8", "--iterations", "1", "--warmup", "1", "--threads", "1"]


@pytest.mark.parametrize("child", ["profile_raw", "profile"])
def test_profile_children_attribute_the_shared_pieces(child, tmp_path):
    out = tmp_path / "profile.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--child", child, *TINY, "--out", str(out)], cwd=tmp_path,
                          env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    seconds = result["seconds"]
    for piece in ("rollout: SwarmEnv.step", "rollout: policy act", "rollout: buffer writes",
                  "update: forward + loss", "update: backward", "update: minibatch gather"):
        assert seconds.get(piece, 0.0) > 0.0, (piece, seconds)
    assert result["iterations"] == 1 and result["total"] >= sum(v for v in seconds.values() if v > 0) - 1e-6


def _run(kind, scale):
    """One run's phases as `_phases` stores them: 2 iterations, CPU time `scale` x wall time."""
    phases = {"rollout_s": [0.5, 0.5], "update_s": [2.0, 2.0], "iteration_s": [2.5, 2.5]}
    phases.update({f"cpu_{k}": [v * scale for v in vs] for k, vs in phases.items()})
    return {**phases, "peak_rss_delta": 100 * 2**20}


def test_from_json_prints_the_per_phase_cpu_ratios(tmp_path):
    args = {"device": "cpu", "threads": 1, "num_steps": 128, "update_epochs": 4, "num_minibatches": 4, "repeats": 1,
            "iterations": 2, "warmup": 1, "num_envs": [1024], "env_n": 4096, "compile": False}
    lightning = _run("lightning", 1.0)
    lightning["cpu_update_s"] = [2.5, 2.5]  # (a)'s update phase costs 2.5 CPU-s against (b)'s 2.0
    lightning["cpu_iteration_s"] = [3.0, 3.0]
    saved = {"args": args, "runs": {"lightning-1024": [lightning], "raw-1024": [_run("raw", 1.0)]}, "env": {}}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(saved))
    proc = subprocess.run([sys.executable, str(SCRIPT), "--from-json", str(path)], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| 1024 | (a) Lightning"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # columns: N, path, rollout, update, iteration SPS, a/b, a/b cpu, a/b cpu rollout, a/b cpu update, peak MB
    assert cells[5].startswith("1.00") and cells[7].startswith("1.00")
    assert cells[8].startswith("0.80")  # 2.0 / 2.5 CPU-s
    assert cells[6].startswith("0.83")  # 2.5 / 3.0 CPU-s per iteration
