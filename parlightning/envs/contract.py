"""What a tensor world hands back, checked by one set of functions that the preflight probe
(`runtime.preflight.check_env`: the first reset and step of a 2-actor probe) and the step loop
(`collection.step_loop.StepLoop`: every step, every reset) share, so the two refuse the same values.

Each check returns what is wrong as words (`Problem`: the value's problem and the fix's hint), or
None; the caller raises (a `ConfigError` before anything ran, a `ReportedError` during a rollout)
and says when (the probe, step t of a rollout). The per-step checks read metadata only (type,
layout, shape, dtype, device): no host sync. The value checks (`non_finite`, `parts_rows_problem`)
read the host: the probe, a reset, once per rollout.

The contract (docs/guides/bring-your-own-env.md): every value is a dense torch tensor on the
world's device, of its shape and dtype: observations float32 [num_envs, *observation_shape],
rewards float [num_envs], terminated / truncated bool [num_envs], `EpisodeParts` fields [num_envs]
(task an integer bank index, the rest numbers), action masks bool [num_envs, D or sum(nvec)].
Non-contiguous and expanded views, tensor subclasses and tensors that require grad are accepted:
the step loop copies every value into its own buffers and acts under `torch.inference_mode()`.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, NamedTuple, Optional, Sequence

import torch
from torch import Tensor

from parlightning.envs.base import EpisodeParts, StepResult

STEP_FIELDS = StepResult._fields[:5]  # obs, reward, terminated, truncated, final_obs (parts: optional)
PART_FIELDS = EpisodeParts._fields  # task, outcome, n_subagents, assigned, completed, critical_steps, serial_steps


class Want(NamedTuple):
    """What one returned value must be: `dtype_ok(dtype)`, `text` (said in the fix) and `make` (how
    to build one from whatever the world has)."""

    dtype_ok: Callable[[torch.dtype], bool]
    text: str
    make: str


class Problem(NamedTuple):
    """What is wrong with a value (`says`: "of dtype torch.int64") and a hint for the fix, appended
    after "return <want>" ("", " (e.g. torch.as_tensor(...))", " or fix observation_shape")."""

    says: str
    hint: str = ""


def _real(dtype: torch.dtype) -> bool:
    return not dtype.is_complex and dtype != torch.bool


def _integer(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


OBS = Want(lambda d: d == torch.float32, "a float32 [num_envs, *observation_shape] tensor",
           "torch.as_tensor(x, dtype=torch.float32, device=self.device)")
REWARD = Want(lambda d: d.is_floating_point, "a float [num_envs] tensor",
              "torch.as_tensor(x, dtype=torch.float32, device=self.device)")
FLAG = Want(lambda d: d == torch.bool, "a bool [num_envs] tensor",
            "torch.as_tensor(x, dtype=torch.bool, device=self.device)")
TASK = Want(_integer, "an integer (torch.long) [num_envs] tensor of task bank indices",
            "torch.as_tensor(x, dtype=torch.long, device=self.device)")
NUMBER = Want(_real, "a [num_envs] tensor of numbers (float or integer, not bool)",
              "torch.as_tensor(x, dtype=torch.float32, device=self.device)")
MASK = Want(lambda d: d == torch.bool, "a bool [num_envs, D] or [num_envs, sum(nvec)] tensor (True = live)",
            "torch.as_tensor(x, dtype=torch.bool, device=self.device)")
PARTS = Want(lambda d: True, "EpisodeParts(task, outcome, n_subagents, assigned, completed, critical_steps, "
             "serial_steps) of [num_envs] tensors, or None", "EpisodeParts(...)")
RESULT = Want(lambda d: True, "a parlightning.envs.StepResult(obs, reward, terminated, truncated, final_obs, parts)",
              "StepResult(...)")
STEP_WANTS = {"obs": OBS, "final_obs": OBS, "reward": REWARD, "terminated": FLAG, "truncated": FLAG}
PART_WANTS = {name: TASK if name == "task" else NUMBER for name in PART_FIELDS}


def type_name(value: Any) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


def same_device(have: torch.device, want: torch.device) -> bool:
    """`have` is `want` (an index left out on either side matches any)."""
    return have.type == want.type and (have.index is None or want.index is None or have.index == want.index)


def _own_torch_function(kind: type) -> bool:
    """A Tensor subclass that routes every operation through its own `__torch_function__` (a plain
    subclass and `nn.Parameter` do not)."""
    impl = getattr(kind.__torch_function__, "__func__", kind.__torch_function__)
    return impl not in (Tensor.__torch_function__.__func__, torch._C._disabled_torch_function_impl)


def tensor_problem(value: Any, shape: Sequence[int], want: Want, device: torch.device,
                   shape_note: str = "") -> Optional[Problem]:
    """Whether `value` is a dense tensor of `shape` whose dtype `want` accepts, on `device`; metadata
    only. `shape_note` is added to a wrong shape's words (e.g. "observation_shape is [3]")."""
    if not isinstance(value, Tensor):
        return Problem(f"as {type_name(value)}, not a torch.Tensor", f" (e.g. {want.make})")
    if type(value) is not Tensor and _own_torch_function(type(value)):
        return Problem(f"as a {type(value).__name__} (a torch.Tensor subclass with its own __torch_function__, which "
                       "every operation on it goes through), not a plain torch.Tensor",
                       " (return value.as_subclass(torch.Tensor))")
    try:  # a subclass whose metadata cannot be read (an uninitialized parameter) is named, not a traceback
        layout, got, dtype, where = value.layout, tuple(value.shape), value.dtype, value.device
    except Exception as err:  # noqa: BLE001
        return Problem(f"as a {type_name(value)} whose shape cannot be read ({type(err).__name__})",
                       f" (e.g. {want.make})")
    if layout != torch.strided:
        return Problem(f"as a {str(layout).replace('torch.', '')} tensor, not a dense (strided) one",
                       " (call .to_dense() on it)")
    if got != tuple(shape):
        note = f": {shape_note}" if shape_note else ""
        return Problem(f"of shape {list(got)} (expected {list(shape)}{note})",
                       " or fix observation_shape" if shape_note else "")
    if not want.dtype_ok(dtype):
        return Problem(f"of dtype {dtype}", f" (e.g. {want.make})")
    if not same_device(where, device):
        return Problem(f"on device {where} (the world was built on {device})", " on self.device")
    return None


def _article(value: Any) -> str:
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def result_problem(res: Any) -> Optional[Problem]:
    """Whether a world's `step` returned a StepResult (or an object with its fields: a NamedTuple or
    dataclass of them is read the same way)."""
    if res is None:
        return Problem("None (a missing `return`?), not a StepResult")
    missing = [f for f in STEP_FIELDS if not hasattr(res, f)]
    if len(missing) == len(STEP_FIELDS):
        return Problem(f"{_article(res)}, not a StepResult")
    if missing:
        return Problem(f"{_article(res)} without `{missing[0]}`")
    return None


def parts_container_problem(parts: Any) -> Optional[Problem]:
    """Whether `parts` is None or an EpisodeParts (an object with its seven fields)."""
    if parts is None or all(hasattr(parts, f) for f in PART_FIELDS):
        return None
    if isinstance(parts, dict):
        return Problem("as a dict, not EpisodeParts", " (EpisodeParts(**that_dict) builds one)")
    return Problem(f"as {_article(parts)}, not EpisodeParts")


def step_problems(res: Any, num_envs: int, obs_shape: Sequence[int], device: torch.device):
    """Yield (field, Problem, Want) for the first wrong value of a StepResult that has its fields
    (`result_problem` first): obs and final_obs, reward, terminated, truncated, then each part."""
    obs = (num_envs, *obs_shape)
    note = f"num_envs {num_envs}, observation_shape is {list(obs_shape)}"
    for field in STEP_FIELDS:
        want = STEP_WANTS[field]
        shape = obs if want is OBS else (num_envs,)
        problem = tensor_problem(getattr(res, field), shape, want, device, note if want is OBS else "")
        if problem is not None:
            yield f"StepResult.{field}", problem, want
            return
    parts = getattr(res, "parts", None)
    problem = parts_container_problem(parts)
    if problem is not None:
        yield "StepResult.parts", problem, PARTS
        return
    if parts is None:
        return
    for field in PART_FIELDS:
        want = PART_WANTS[field]
        problem = tensor_problem(getattr(parts, field), (num_envs,), want, device)
        if problem is not None:
            yield f"StepResult.parts.{field}", problem, want
            return


def non_finite(value: Tensor) -> Optional[int]:
    """The first actor (row) of `value` holding NaN or inf, or None (one host read). An expanded
    (stride-0) view is read once per distinct element, and nothing of its size is allocated unless
    something is not finite: a world may return a view far larger than its memory."""
    v = value.detach()
    for dim in range(v.dim()):
        if v.stride(dim) == 0 and v.shape[dim] > 1:
            v = v.narrow(dim, 0, 1)  # every entry along it is the same element
    if not v.numel():
        return None
    low, high = torch.aminmax(v.reshape(-1) if v.dim() == 0 else v)
    if bool(torch.isfinite(torch.stack([low, high]).float()).all()):
        return None
    rows = (~torch.isfinite(v.float())).reshape(v.shape[0], -1).any(1) if v.dim() else torch.ones(1, dtype=torch.bool)
    return int(rows.nonzero()[0]) if bool(rows.any()) else 0


def parts_rows_problem(rows: Tensor, bank: Optional[int]) -> Optional[tuple[str, int, str]]:
    """(field, row, what it must be) for the first of `rows` ([E, 7] float: EpisodeParts of finished
    episodes, task first) whose task is not an index into a bank of `bank` tasks, outcome not in
    [0, 1], a count or step total not finite and >= 0, or more completed than assigned subtasks; None
    when all are (one host read)."""
    if not rows.numel():
        return None
    task, outcome, rest = rows[:, 0], rows[:, 1], rows[:, 2:]
    bad_task = (task < 0) | (task != task.round())
    if bank is not None:
        bad_task = bad_task | (task >= bank)
    over = rows[:, 4] > rows[:, 3]  # completed counts assigned subtasks the subagents completed: at most assigned
    bad = torch.cat([bad_task[:, None], ~((outcome >= 0) & (outcome <= 1))[:, None],
                     ~(torch.isfinite(rest) & (rest >= 0)), over[:, None]], 1)  # [E, 8]
    if not bool(bad.any()):
        return None
    row, col = (int(i) for i in bad.nonzero()[0])
    if col == len(PART_FIELDS):
        return "completed", row, "at most assigned (the subtasks assigned that subagents completed)"
    need = ((f"an index into its {bank}-task bank" if bank is not None else "an index >= 0") if col == 0 else
            "in [0, 1]" if col == 1 else "finite and >= 0")
    return PART_FIELDS[col], row, need


def task_ids_problem(tasks: Any) -> Optional[str]:
    """Whether `tasks` is a task bank: a non-empty list (or tuple) of distinct, non-empty strings
    (samplers, strategies and checkpoints key their statistics by these ids, in this order)."""
    if isinstance(tasks, (str, bytes)) or not isinstance(tasks, (list, tuple)):
        return (f"is {type(tasks).__name__} {tasks!r:.60}; it must be a list of task id strings (e.g. "
                "['easy-0', 'hard-0']), or absent for a world without tasks")
    if not tasks:
        return "is empty; a world with tasks needs at least one (or drop it for a world without tasks)"
    bad = next((t for t in tasks if not isinstance(t, str) or not t), None)
    if bad is not None or any(not isinstance(t, str) for t in tasks):
        return f"holds {bad!r:.60} ({type(bad).__name__}); every task id is a non-empty string (e.g. 'easy-0')"
    seen: set[str] = set()
    twice = next((t for t in tasks if t in seen or seen.add(t)), None)
    if twice is not None:
        return (f"lists {twice!r} twice; task ids must be distinct (samplers and checkpoints key their "
                "statistics by them)")
    return None


def shape_problem(shape: Any) -> Optional[str]:
    """Whether `shape` is an observation shape: a non-empty tuple (list, torch.Size) of positive ints."""
    if isinstance(shape, (tuple, list, torch.Size)) and shape and all(
            isinstance(d, numbers.Integral) and not isinstance(d, bool) and d > 0 for d in shape):
        return None
    return (f"is {shape!r:.80}; it must be a non-empty tuple of positive ints (one observation's shape, e.g. (4,); "
            "a single number is (1,))")
