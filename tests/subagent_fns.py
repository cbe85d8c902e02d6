"""Subagent functions the ProcessPool tests run in worker processes (imported by path)."""

import os
import time


def solve(instruction):
    if instruction.get("hang"):
        time.sleep(60)
    if instruction.get("raise"):
        raise RuntimeError("subagent crashed")
    if instruction.get("exit"):
        os._exit(3)
    if "steps" in instruction:  # a malformed step count (NaN, a string)
        return {"success": True, "steps": instruction["steps"]}
    return {"success": instruction["instruction"] == instruction["skill"], "steps": instruction["cost"] + 1}


def crash(instruction):
    """Every call raises: a broken subagent function."""
    raise ValueError(f"cannot parse {instruction.get('prompt', instruction)!r:.40}")


def no_argument():  # the wrong shape: a subagent function takes the instruction
    return True


def interrupt(instruction):
    """Raises KeyboardInterrupt itself (not a Ctrl-C): the function's own failure."""
    raise KeyboardInterrupt
