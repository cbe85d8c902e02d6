"""Torch's process-wide settings that a component of the config (a callback, a sampler, a strategy)
may not change for the rest of the run: default dtype, default device, grad mode, deterministic
algorithms. `global_state()` reads them in ~1 us (host-side, no device sync), so a boundary where the
package takes control back from user code can compare them before and after the call;
`state_change(before)` restores them and says what changed, for the caller's one error line."""

from __future__ import annotations

from typing import Any, Optional

import torch

_NAMES = ("default dtype", "default device", "grad mode", "deterministic-algorithms mode")
_CALLS = ("torch.set_default_dtype", "torch.set_default_device", "torch.set_grad_enabled",
          "torch.use_deterministic_algorithms")
_LOCAL = ("compute in a dtype locally (x.double(), or torch.autocast)",
          "pass device= to the tensors it makes, or use `with torch.device(...):` inside the call",
          "use `with torch.no_grad():` inside the call", "leave it to trainer.deterministic")


def global_state() -> tuple:
    """(default dtype, the default-device context `torch.set_default_device` installs, grad mode,
    deterministic-algorithms mode); grad mode is per thread, the others per process."""
    return (torch.get_default_dtype(), getattr(getattr(torch, "_GLOBAL_DEVICE_CONTEXT", None), "device_context", None),
            torch.is_grad_enabled(), torch.are_deterministic_algorithms_enabled())


def _shown(index: int, value: Any) -> str:
    if index == 1:
        return str(getattr(value, "device", "cpu")) if value is not None else "cpu"
    if index == 2:
        return "enabled" if value else "disabled"
    if index == 3:
        return "on" if value else "off"
    return str(value).replace("torch.", "")


def state_change(before: tuple) -> Optional[str]:
    """None when torch's settings are as in `before`; else restore them and return the words for what
    changed: `changed torch's default dtype from float32 to float64 (torch.set_default_dtype) for the
    whole process, ...; <the local alternative>, and leave the global setting as it was`."""
    after = global_state()
    if after == before:
        return None
    i = next(k for k in range(len(before)) if before[k] != after[k])
    torch.set_default_dtype(before[0])
    if before[1] is not after[1]:
        torch.set_default_device(getattr(before[1], "device", None))
    torch.set_grad_enabled(before[2])
    torch.use_deterministic_algorithms(before[3])
    return (f"changed torch's {_NAMES[i]} from {_shown(i, before[i])} to {_shown(i, after[i])} ({_CALLS[i]}) for the "
            f"whole process, so the world, the rollout and the update would run with it; {_LOCAL[i]}, and leave the "
            "global setting as it was")
