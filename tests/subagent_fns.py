"""Subagent functions the ProcessPool tests run in worker processes (imported by path)."""

import time


def solve(instruction):
    if instruction.get("hang"):
        time.sleep(60)
    if instruction.get("raise"):
        raise RuntimeError("subagent crashed")
    return {"success": instruction["instruction"] == instruction["skill"], "steps": instruction["cost"] + 1}
