"""Round 6 of the bad-input corpus (scripts/bad_inputs_round6.py), its --quick subset: one case per
class of input the round found unclean on the code before its fixes (an action spec that
contradicts itself, a world's step without next_task, episode parts from a world without a task
bank, rollout hooks on a callback that is not a RolloutCallback, a non-finite value from an external
world, an external world's task bank given as one string, start_method without workers, a
world_kwargs key that a shared resource overrides, untyped shared-resource arguments, evaluate's
--gantt format and --sample with a scripted policy, the public constructors, the scripts' arguments).
Every case must end with one `error:` line naming the field or component, a non-zero exit, no
traceback and nothing written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_round6_quick_subset_is_clean() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bad_inputs_round6.py"), "--quick", "--verbose"],
                          capture_output=True, text=True, env=env, timeout=600)
    out = proc.stdout + proc.stderr
    found = re.search(r"clean (\d+) of (\d+)", out)
    assert found is not None, out[-3000:]
    clean, total = int(found.group(1)), int(found.group(2))
    assert total >= 12, out[-3000:]
    unclean = [line for line in out.splitlines() if line.startswith("[") and not line.startswith("[     clean]")]
    assert clean == total and proc.returncode == 0, "\n".join(unclean) or out[-3000:]
