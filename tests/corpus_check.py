"""The check every bad-input round's test runs on its corpus's `--quick` subset (one fast case per
class of input the round fixed): every case ends with one `error:` line naming the field or
component, a non-zero exit, no traceback and nothing written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def assert_quick_subset_clean(script: str, min_cases: int) -> None:
    """Run `scripts/<script> --quick --verbose` and assert it counted at least `min_cases` cases, all clean."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--quick", "--verbose"],
                          capture_output=True, text=True, env=env, timeout=600)
    out = proc.stdout + proc.stderr
    found = re.search(r"clean (\d+) of (\d+)", out)
    assert found is not None, out[-3000:]
    clean, total = int(found.group(1)), int(found.group(2))
    assert total >= min_cases, out[-3000:]
    unclean = [line for line in out.splitlines() if line.startswith("[") and not line.startswith("[     clean]")]
    assert clean == total and proc.returncode == 0, "\n".join(unclean) or out[-3000:]
