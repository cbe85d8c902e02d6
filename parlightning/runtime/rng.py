"""The global random generators as checkpointable state: `rng_state` captures torch (CPU and CUDA),
numpy and Python `random` as tensors and plain containers (they load with
`torch.load(weights_only=True)`); `set_rng_state` restores them all or none.

Torch and numpy only (no Lightning): the collector process imports it, and a child that does not
import Lightning starts in a third of the time."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from parlightning.errors import ConfigError


def rng_state() -> dict[str, Any]:
    """The global generators (torch CPU and CUDA, numpy, Python `random`) as tensors and plain
    containers, so they load with `torch.load(weights_only=True)`."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {"kind": str(kind), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "python": {"version": int(version), "internal": list(internal), "gauss_next": gauss_next},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore `rng_state()`; a stream whose saved state does not fit (edited, another version) is one
    ConfigError naming it, before any stream is changed."""
    saved = (torch.get_rng_state(), np.random.get_state(), random.getstate())
    stream = "torch"
    try:
        torch.set_rng_state(state["torch"])
        stream = "numpy"
        np_state = state["numpy"]
        np.random.set_state((np_state["kind"], np_state["keys"].numpy().astype(np.uint32), np_state["pos"],
                             np_state["has_gauss"], np_state["gauss"]))
        stream = "python"
        py = state["python"]
        random.setstate((py["version"], tuple(py["internal"]), py["gauss_next"]))
        stream = "cuda"
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])
    except (ValueError, TypeError, KeyError, RuntimeError, AttributeError) as err:
        torch.set_rng_state(saved[0])
        np.random.set_state(saved[1])
        random.setstate(saved[2])
        text = " ".join(str(err).split())[:160]
        raise ConfigError(f"--ckpt_path: the checkpoint's {stream} RNG state (rng.{stream}) cannot be restored "
                          f"({type(err).__name__}: {text}): it was edited or comes from another version; resume from "
                          "an unedited checkpoint or start fresh without --ckpt_path") from None
