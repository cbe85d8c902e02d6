"""The distributed environment variables torch, Lightning and torchmetrics read at start-up.

`LOCAL_RANK=abc` ends a program inside an import (torchmetrics sets its rank-zero flag from
`int(os.environ["LOCAL_RANK"])` when imported; Lightning's cluster environments read RANK,
WORLD_SIZE, NODE_RANK, GROUP_RANK, MASTER_PORT, SLURM_* the same way) with a ValueError traceback,
before any of the program's own checks exist. `distributed_environment_error(environ)` names the
first such variable that is not an integer, is out of its range (a negative rank, a port above
65535) or contradicts its size (RANK >= WORLD_SIZE): one line with the variable and the fix, or None.
`parlightning.cli.entry.run_program` asks it before it imports the program (fit, evaluate, bc,
export, plot); `parlightning.runtime.preflight.check_environment` asks it again for the Python API.
It imports nothing heavy."""

from __future__ import annotations

import re
from typing import Any, Optional

# (name, the least value): ranks and counters start at 0, sizes at 1
RANKS = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "ROLE_RANK", "SLURM_PROCID", "SLURM_LOCALID",
         "SLURM_NODEID", "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_LOCAL_RANK", "OMPI_COMM_WORLD_RANK",
         "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS")
SIZES = ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "SLURM_NTASKS",
         "JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_LOCAL_SIZE", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
         "PMI_SIZE")
PORTS = ("MASTER_PORT", "STANDALONE_PORT")
# (rank, size): a rank runs 0 .. size - 1
BELOW = (("RANK", "WORLD_SIZE"), ("LOCAL_RANK", "LOCAL_WORLD_SIZE"), ("GROUP_RANK", "GROUP_WORLD_SIZE"),
         ("ROLE_RANK", "ROLE_WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"),
         ("JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE"), ("JSM_NAMESPACE_LOCAL_RANK", "JSM_NAMESPACE_LOCAL_SIZE"),
         ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
         ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"), ("PMI_RANK", "PMI_SIZE"))
VARIABLES = RANKS + SIZES + PORTS

_INTEGER = re.compile(r"\s*[0-9]+\s*", re.ASCII)
_UNSET = "unset it (`unset {name}`: a one-process run needs none of these) or give"


def _shown(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:40] + "...")


def distributed_environment_error(environ: Any) -> Optional[str]:
    """The one line (without `error: `) for the first distributed variable of `environ` that torch or
    Lightning would misread or fail on at start-up, else None."""
    debug = environ.get("TORCH_DISTRIBUTED_DEBUG")
    if debug is not None and debug.strip().upper() not in ("OFF", "INFO", "DETAIL"):
        return (f"TORCH_DISTRIBUTED_DEBUG={_shown(debug)} in the environment: torch.distributed reads it when a "
                "multi-process run starts and it must be OFF, INFO or DETAIL; unset it or give one of them")
    for name in ("GLOO_SOCKET_IFNAME",):  # gloo binds to these network interfaces: each must exist here
        value = environ.get(name)
        if value is None or not value.strip():
            continue
        import socket

        try:
            have = [n for _, n in socket.if_nameindex()]
        except OSError:
            continue
        missing = [n for n in value.split(",") if n.strip() and n.strip() not in have]
        if missing:
            return (f"{name}={_shown(value)} in the environment: gloo binds a multi-process run to these network "
                    f"interfaces, and this machine has no {missing[0]!r} (it has {', '.join(have)}); unset it or name "
                    "one of those")
    values: dict[str, int] = {}
    for name in VARIABLES:
        value = environ.get(name)
        if value is None:
            continue
        low, high, what = (1, 65535, "a port number 1..65535 (e.g. 29500)") if name in PORTS else (
            (1, None, "an integer >= 1 (a count of processes)") if name in SIZES else
            (0, None, "an integer >= 0 (a rank or counter)"))
        number = int(value) if _INTEGER.fullmatch(value) else None
        if number is None or number < low or (high is not None and number > high):
            fix = _UNSET.format(name=name)
            return (f"{name}={_shown(value)} in the environment: torch and Lightning read it at start-up and it must "
                    f"be {what}; {fix} {what.split(' (')[0]}")
        values[name] = number
    for rank, size in BELOW:
        if rank in values and size in values and values[rank] >= values[size]:
            return (f"{rank}={values[rank]} in the environment is not below {size}={values[size]}: ranks run 0.."
                    f"{values[size] - 1}; set {rank} to one of them, or unset {rank} and {size} (a one-process run "
                    "needs neither)")
    world, local = values.get("WORLD_SIZE"), values.get("LOCAL_WORLD_SIZE")
    if world is not None and local is not None and local > world:
        return (f"LOCAL_WORLD_SIZE={local} in the environment is more than WORLD_SIZE={world}: a node cannot run more "
                "processes than the whole job; fix them together, or unset both (a one-process run needs neither)")
    return None


# the environment variables libraries under the package read at start-up or on first use (torch, gloo, NCCL,
# tqdm, matplotlib, OpenMP / MKL, Lightning): a value one of them refuses surfaces as its own traceback
LIBRARY_PREFIXES = ("TORCH", "PYTORCH_", "GLOO_", "NCCL_", "TQDM_", "MPL", "OMP_", "MKL_", "KMP_", "CUDA_",
                    "LIGHTNING_", "PL_", "TORCHINDUCTOR_", "TORCHDYNAMO_", "TENSORBOARD", "TF_")


def library_environment_error(err: BaseException, environ: Any) -> Optional[str]:
    """One line for an error a library raised because of an environment variable it reads
    (`TORCH_LOGS=+nothing`, `TQDM_MININTERVAL=fast`, `MPLBACKEND=nonsense`,
    `GLOO_SOCKET_IFNAME=nosuch0`, `TORCH_DISTRIBUTED_DEBUG=VERBOSE`): a variable of a library's prefix
    whose name, or whose value (3 characters or more, not a number), is in the error's message; else
    None."""
    try:
        text = " ".join(str(err).split())
    except Exception:  # noqa: BLE001
        return None
    for name, value in sorted(environ.items()):
        if not name.startswith(LIBRARY_PREFIXES):
            continue
        shown = value.strip()
        by_value = len(shown) >= 3 and not shown.replace(".", "", 1).lstrip("+-").isdigit() and shown in text
        if name in text or by_value:
            first = text[:200] + ("..." if len(text) > 200 else "")
            return (f"{name}={_shown(value)} in the environment: the library that reads it refused it ({type(err).__name__}: "
                    f"{first}); unset it (`unset {name}`) or give a value that library accepts")
    return None
