"""The quick subset of the fourth bad-input corpus (`scripts/bad_inputs_round4.py --quick`): every
case must end with one `error:` line naming the field, a non-zero exit and nothing written. The
subset holds a case of each class that corpus found and this round fixed (a required world argument
the config leaves out, a world property that raises, an integer beyond 64 bits, `max_steps: 0`, a
resume whose `max_steps` is already reached, an output that is the input checkpoint, `overrides`
given as one string, a `PoolOrchestrationWorld` with `n_skills: 0`), so reverting one fails here."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quick_round4_cases_are_all_clean(tmp_path):
    out = tmp_path / "r4.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, str(ROOT / "scripts/bad_inputs_round4.py"), "--quick", "--json", str(out)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    results = json.loads(out.read_text()) if out.exists() else []
    bad = [f"{r['category']}:{r['name']}: {r['outcome']}: {r['line']}" for r in results if r["outcome"] != "clean"]
    assert len(results) >= 12, p.stdout[-2000:] + p.stderr[-2000:]
    assert not bad, "\n".join(bad)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
