"""Example subagent functions for `ProcessPool` (what a user's `package.module:function` looks like)."""

from __future__ import annotations

import time
from typing import Any


def skill_matcher(instruction: dict[str, Any]) -> dict[str, Any]:
    """Succeeds when the instruction names the subtask's skill; sleeps `seconds_per_step` per
    step of work (real latency); uses cost + 1 steps (one to start)."""
    steps = int(instruction.get("cost", 1)) + 1
    time.sleep(float(instruction.get("seconds_per_step", 0.0)) * steps)
    return {"success": instruction.get("instruction") == instruction.get("skill"), "steps": steps}
