"""The `BatchedEnv` protocol: N actors stepped together by tensor ops, with auto-reset.

A world never knows the learner. It takes a batched action tensor and returns batched
tensors; an actor whose episode ends is reset inside `step` (to the task given in
`next_task` when the world has tasks) and its final observation is returned beside the
new one, so truncation can bootstrap.
"""

from __future__ import annotations

import abc
import hashlib
import inspect
import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Callable, Literal, NamedTuple, Optional, Sequence

import torch
from torch import Tensor

from parlightning.errors import ArgumentError, ConfigError, check_call_shape
from parlightning.method_args import Arg, Lifecycle, State, TensorArg, check_real_device, layout_fault, vouch, vouched


@dataclass(frozen=True)
class ActionSpec:
    """What one actor's action is: `discrete` (nvec=(n,)), `multi_discrete` (nvec=(n1, n2, ...))
    or `continuous` (shape=(d,), optional bounds)."""

    kind: Literal["discrete", "multi_discrete", "continuous"]
    nvec: tuple[int, ...] = ()
    shape: tuple[int, ...] = ()
    low: Optional[float] = None
    high: Optional[float] = None

    def __post_init__(self) -> None:
        if self.kind not in ("discrete", "multi_discrete", "continuous"):
            raise ConfigError(f"ActionSpec.kind: {self.kind!r} is not a kind of action; use 'discrete' (nvec=(n,)), "
                             "'multi_discrete' (nvec=(n1, n2, ...)) or 'continuous' (shape=(d,))")
        for field, example in (("nvec", "nvec=(3,)"), ("shape", "shape=(2,)")):
            value = getattr(self, field)
            if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
                raise ConfigError(f"ActionSpec.{field}: {value!r} ({type(value).__name__}) is not a tuple of ints; "
                                 f"give a tuple, e.g. {example} (one entry per action dimension)")
            if not isinstance(value, tuple):
                object.__setattr__(self, field, tuple(value))
            # negative or non-integer entries are refused here; 0 (no action at all) by the preflight probe,
            # which names the world it came from
            bad = [v for v in getattr(self, field) if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0]
            huge = [v for v in getattr(self, field) if v not in bad and v >= 2**63]
            if huge:  # torch holds sizes and category counts as int64: beyond it nothing can be built
                raise ConfigError(f"ActionSpec.{field}: {huge[0]} does not fit a 64-bit integer (at most {2**63 - 1:,}); "
                                  f"each entry is the {'categories' if field == 'nvec' else 'size'} of one action "
                                  f"dimension, e.g. {example}")
            if bad:
                what = "categories" if field == "nvec" else "numbers"
                raise ConfigError(f"ActionSpec.{field}: {getattr(self, field)!r} has {bad[0]!r}; each entry is an int >= 1 "
                                 f"(the {what} of one action dimension), e.g. {example}")
        self._check_kind()

    def _check_kind(self) -> None:
        """The fields the kind uses, and only those: a discrete action has at most one nvec entry, a field
        of another kind (a discrete spec's shape or bounds, a continuous one's nvec) is refused, bounds are
        finite with low < high, and a discrete or multi-discrete spec has at least one action dimension
        (an empty nvec is a policy with no action to take). A continuous spec with no shape
        (`ActionSpec('continuous')`) and a dimension of 0 categories are the preflight probe's to refuse,
        naming the world: a module may build a spec before it fills it in."""
        from parlightning.errors import ConfigError

        kind, nvec = self.kind, self.nvec
        if kind != "continuous" and not nvec:
            example = "nvec=(3,)" if kind == "discrete" else "nvec=(3, 3)"
            raise ConfigError(f"ActionSpec.nvec: a {kind} action needs at least one action dimension, got nvec=(); "
                              f"give one entry (the number of categories) per dimension, e.g. ActionSpec({kind!r}, "
                              f"{example})")
        if kind == "discrete" and len(nvec) > 1:
            raise ConfigError(f"ActionSpec.nvec: a discrete action is one category, nvec=(n,), got nvec={nvec!r}; for "
                              f"one category per dimension use ActionSpec('multi_discrete', nvec={nvec!r})")
        if kind != "continuous":
            for field in ("shape", "low", "high"):
                if getattr(self, field) not in ((), None):
                    raise ConfigError(f"ActionSpec.{field}: {getattr(self, field)!r} is for continuous actions; a {kind} "
                                      f"action is nvec only (drop {field}, or use ActionSpec('continuous', shape=...))")
            return
        if nvec:
            raise ConfigError(f"ActionSpec.nvec: {nvec!r} is for discrete actions; a continuous action is shape (and "
                              "optional low / high) only: drop nvec")
        for field in ("low", "high"):
            value = getattr(self, field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)
                                      or not math.isfinite(value)):
                raise ConfigError(f"ActionSpec.{field}: must be a finite number or None (unbounded), got {value!r:.40}")
        if self.low is not None and self.high is not None and not self.low < self.high:
            raise ConfigError(f"ActionSpec: low={self.low} must be below high={self.high} (actions are clipped to "
                              "[low, high])")

    @property
    def is_discrete(self) -> bool:
        return self.kind != "continuous"

    @property
    def action_shape(self) -> tuple[int, ...]:
        """Shape of one actor's action tensor: () discrete, (len(nvec),) multi-discrete, shape continuous."""
        if self.kind == "discrete":
            return ()
        if self.kind == "multi_discrete":
            return (len(self.nvec),)
        return tuple(self.shape)


class EpisodeParts(NamedTuple):
    """Per-actor facts about the episode that just finished (valid where `done`), all shape [N].

    `outcome` is r_perf in 0..1; the PARL reward, the samplers and critical steps read these.
    """

    task: Tensor  # long: index into the env's task bank
    outcome: Tensor  # float: task outcome r_perf in [0, 1]
    n_subagents: Tensor  # float: subagents spawned in the episode
    assigned: Tensor  # float: subtasks assigned to subagents
    completed: Tensor  # float: assigned subtasks the subagents completed
    critical_steps: Tensor  # float: sum over stages of main steps + longest subagent
    serial_steps: Tensor  # float: the same work done one step after another by the main agent


class StepResult(NamedTuple):
    """One batched env step. `obs` is after auto-reset; `final_obs` is the observation the
    finished episode ended on (equal to `obs` where not done). `parts` is None for worlds
    without tasks (e.g. CartPole)."""

    obs: Tensor  # [N, *observation_shape]
    reward: Tensor  # [N] float
    terminated: Tensor  # [N] bool
    truncated: Tensor  # [N] bool
    final_obs: Tensor  # [N, *observation_shape]
    parts: Optional[EpisodeParts] = None


class BatchedEnv(abc.ABC):
    """N actors, one tensor op per step. A structural protocol: any class with `reset` and
    `step` counts as a BatchedEnv (`issubclass` checks the methods), so a user's world need not
    inherit from it; inheriting gives the default `state_dict`.

    Attributes: `num_envs`, `device`, `observation_shape`, `action_spec`. Worlds with tasks
    also expose `task_ids` (a list of `family-index` strings, the task bank) and accept
    `next_task` in `step` (either [N] bank indices read only where an episode ends, or a
    callable `done_mask -> [N] bank indices` the env calls once per step so the sampler picks
    only for actors that reset) and `task_index` in `reset`; they may expose
    `solved_threshold` (outcome counted as solved).

    Action masks (optional, discrete worlds; sb3-contrib's `MaskablePPO` semantics): a world may
    define `action_masks()` returning a bool tensor for the observation it last returned (from
    `reset` or `step`, after auto-reset), one row per actor, True = live. Two layouts:
    `[N, D]` (one flag per action dimension: a dimension that is not live takes the fixed action
    0 and adds nothing to the log-prob, entropy, ratio or KL) or `[N, sum(nvec)]` (one flag per
    category, each dimension's categories in turn, as MaskablePPO's flattened masks: the policy
    samples and scores only the live categories; every dimension needs at least one). A world
    without the method is unmasked. `check_action_mask` validates a world's mask once.
    """

    num_envs: int
    device: torch.device
    observation_shape: tuple[int, ...]
    action_spec: ActionSpec

    @classmethod
    def __subclasshook__(cls, other: type) -> bool:
        if cls is BatchedEnv:
            return all(callable(getattr(other, m, None)) for m in ("reset", "step"))
        return NotImplemented

    @abc.abstractmethod
    def reset(self, *, seed: Optional[int] = None, task_index: Optional[Tensor] = None) -> Tensor:
        """Start every actor; returns obs [N, *observation_shape]."""

    @abc.abstractmethod
    def step(self, action: Tensor, next_task: Optional[Tensor | Callable[[Tensor], Tensor]] = None) -> StepResult:
        """Step every actor; finished actors are reset inside (to `next_task` where given)."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly (tensors and plain containers)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None


def checked_device(field: str, device: Any) -> torch.device:
    """`device` as a torch.device that this machine has, or one ConfigError naming `field` (a world's
    `SwarmEnv.device`): a name torch does not know, CUDA without a usable GPU, an index past the count."""
    from parlightning.errors import ConfigError

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise ConfigError(f"{field}: {device!r:.60} is not a torch device; use cpu, cuda or cuda:N") from None
    if dev.type == "meta":
        raise ConfigError(f"{field}: 'meta' tensors have shapes and no values, and a world computes on values; use cpu "
                          "or cuda")
    backend = getattr(torch, dev.type, None) if dev.type not in ("cpu", "cuda") else torch.cuda
    if dev.type != "cpu" and not (callable(getattr(backend, "is_available", None)) and backend.is_available()):
        raise ConfigError(f"{field}: {device!r} asked for, but this torch has no usable {dev.type} device; use cpu")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{field}: {device!r} asked for, but this torch has no usable CUDA device; use cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ConfigError(f"{field}: {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s); "
                          f"use cuda:0..cuda:{torch.cuda.device_count() - 1}")
    return dev


def checked_seed(field: str, seed: Any) -> Optional[int]:
    """A world's `reset(seed=...)`: None (keep the generator's stream) or a seed in [0, 2**32 - 1]
    as a plain int; anything else one ConfigError naming `field` (e.g. `SwarmEnv.reset: seed`)."""
    if seed is None:
        return None
    from parlightning.config_types import Seed, check_value

    return check_value(field, Seed, seed)



def checked_task_index(field: str, value: Any, num_envs: int, num_tasks: int, device: torch.device) -> Tensor:
    """`task_index` of a world's `reset` (or a user's `next_task` tensor): one bank index per actor,
    as a long tensor on `device`. A tensor or a list of ints; an integer dtype (not bool, not float),
    shape [num_envs] and every entry in 0..num_tasks - 1, else one ConfigError naming `field`. Reads
    the values on the host (a range check): call it where a user hands the indices in, never per step
    of the package's own collection."""
    from parlightning.errors import ConfigError

    if not isinstance(value, Tensor):
        if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
            raise ConfigError(f"{field}: must be [num_envs] = [{num_envs}] task bank indices (a long tensor or a "
                              f"list of ints), got {type(value).__name__} {value!r:.60}")
        items = list(value)
        if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in items):
            raise ConfigError(f"{field}: must be [num_envs] = [{num_envs}] integer task bank indices, got {items!r:.80}")
        if any(not -2**63 <= v < 2**63 for v in items):
            value = None  # beyond int64: outside the bank, reported below
        else:
            value = torch.tensor(items, dtype=torch.long)
        if value is None:
            raise ConfigError(f"{field}: every entry must be a task bank index in 0..{num_tasks - 1}, got {items!r:.80}")
    if value.dtype == torch.bool or value.is_floating_point() or value.is_complex():
        raise ConfigError(f"{field}: must hold integer task bank indices (torch.long), got dtype {value.dtype}")
    if tuple(value.shape) != (num_envs,):
        raise ConfigError(f"{field}: must have shape [num_envs] = [{num_envs}] (one task bank index per actor), got "
                          f"{list(value.shape)}")
    outside = (value < 0) | (value >= num_tasks)
    if bool(outside.any()):  # a host read: the caller's indices, off the step loop
        i = int(outside.long().argmax())
        raise ConfigError(f"{field}: actor {i} has task index {int(value[i])}, outside the task bank (0..{num_tasks - 1}, "
                          f"{num_tasks} tasks); pass indices into the world's task_ids")
    return value.to(device, torch.long)


class ActionArg(Arg):
    """A world's `step(action)`: a tensor [num_envs, *action_spec.action_shape], integer for discrete
    actions and float for continuous ones, holding values (not on the meta device); with
    `same_device` on the world's device (a world that indexes its own tensors with it). Metadata
    only: O(1) per step."""

    def __init__(self, same_device: bool = True, flat: bool = False) -> None:
        self.same_device, self.flat = same_device, flat  # flat: [N, prod(shape)] continuous actions too

    def check(self, field: str, value: Any, obj: Any, call: dict) -> None:
        spec = obj.action_spec
        want = (obj.num_envs, *spec.action_shape)
        if isinstance(value, Tensor) and value.device.type != "meta":  # sparse / nested: metadata only, O(1)
            why = layout_fault(value, obj)
            if why is not None:
                self.fail(field, why, value)
        ok = isinstance(value, Tensor) and value.device.type != "meta" and (tuple(value.shape) == want or (
            self.flat and not spec.is_discrete and value.dim() == 2 and value.shape[0] == obj.num_envs
            and value.shape[1] == math.prod(spec.shape)))
        if ok:
            dt = value.dtype
            ok = (not dt.is_floating_point and not dt.is_complex and dt != torch.bool) if spec.is_discrete \
                else dt.is_floating_point
        if ok and self.same_device and value.device != obj.device:
            ok = value.device.type == obj.device.type and (value.device.index is None or obj.device.index is None)
        if not ok:
            kind = "an integer (torch.long) tensor of action indices" if spec.is_discrete else "a float tensor"
            where = f" on {obj.device}" if self.same_device else ""
            self.fail(field, f"{kind} of shape [num_envs, *action_shape] = {list(want)}{where}", value)
        if spec.is_discrete and value.numel() and not _actions_vouched(value, spec):
            _check_action_range(field, value, spec)  # one host read: a call the package's step loop did not vouch for


def vouch_actions(action: Tensor, spec: "ActionSpec") -> Tensor:
    """Record that `action` holds indices in range for `spec` (the step loop's actions, sampled by the
    policy over `spec`'s categories: in range by construction): a world's `step` then reads no value of
    it (O(1): until it is changed in place, see `method_args.vouch`)."""
    return vouch(action, ("actions", spec))


def _actions_vouched(action: Tensor, spec: "ActionSpec") -> bool:
    known = vouched(action)
    return isinstance(known, tuple) and known[0] == "actions" and (known[1] is spec or known[1] == spec)


_NVEC: dict = {}  # (nvec, device) -> the tensor of upper bounds (built once per world kind and device)


def _check_action_range(field: str, action: Tensor, spec: "ActionSpec") -> None:
    """Every entry of a discrete `action` in 0..nvec[d] - 1 (its dimension's categories): one host read."""
    nvec = spec.nvec
    if len(set(nvec)) == 1:
        high: Any = nvec[0]
    else:
        key = (nvec, action.device)
        high = _NVEC.get(key)
        if high is None:
            high = _NVEC[key] = torch.tensor(nvec, device=action.device)
    outside = (action < 0) | (action >= high)
    if not bool(outside.any()):
        return
    flat = outside.reshape(-1).nonzero()[0, 0]
    row, dim = (int(flat) // len(nvec), int(flat) % len(nvec)) if spec.kind == "multi_discrete" else (int(flat), 0)
    at = f"[{row}, {dim}]" if spec.kind == "multi_discrete" else f"[{row}]"
    bad = int(action.reshape(-1)[flat])
    ranges = (f"0..{nvec[0] - 1}" if len(set(nvec)) == 1 else
              f"0..nvec[d] - 1 with nvec = {list(nvec)}")
    raise ArgumentError(f"{field}: every entry must lie in {ranges} (the index of one of its "
                        f"{'dimension' + chr(39) + 's ' if spec.kind == 'multi_discrete' else ''}{nvec[dim]} "
                        f"actions), got {bad} at {at} ({int(outside.sum())} of {action.numel()} out of range)")


_SCRIPTED = ActionArg(same_device=False)


_SCRIPTED_SHAPES: set = set()  # the scripted_action functions whose signature takes the package's call


def scripted_action(env: Any, name: str, obs: Tensor, generator: Any = None) -> Tensor:
    """`env.scripted_action(name, obs, generator)` (a world's scripted policy: evaluate's --policy and
    its baselines, bc's --teacher), its return checked as the world's `step(action)` is (`ActionArg`:
    [num_envs, *action_shape], integer for discrete actions, float for continuous): a wrong one is one
    ArgumentError naming `World.scripted_action` and the shape and dtype it must return, before the
    world's own step computes with it. The method's signature is probed once (`check_call_shape`): one
    that cannot take `(name, obs, generator)` (the documented `scripted_action(self, name, obs,
    generator=None)`) is one ConfigError naming it, not a TypeError from the call. O(1)."""
    fn = env.scripted_action
    args = ("name", "obs") if generator is None else ("name", "obs", "generator")
    key = (getattr(fn, "__func__", fn), len(args))
    if key not in _SCRIPTED_SHAPES:
        owner = type(getattr(fn, "__self__", env)).__name__
        check_call_shape("data.env", owner, "scripted_action", fn, args, caller="the package (evaluate --policy, bc --teacher)",
                         define="scripted_action(self, name, obs, generator=None) (drawing any random action from "
                                "generator, so --seed repeats it)")
        _SCRIPTED_SHAPES.add(key)
    action = env.scripted_action(name, obs) if generator is None else env.scripted_action(name, obs, generator)
    _SCRIPTED.check(f"{type(env).__name__}.scripted_action({name!r})'s return", action, env, {})
    return action


class TaskIndexArg(Arg):
    """A world's `reset(task_index)`: None, or one task bank index per actor (`checked_task_index`: a
    host read, so reset only, never per step). A world without a task bank ignores it."""

    optional = True

    def check(self, field: str, value: Any, obj: Any, call: dict) -> None:
        ids = getattr(obj, "task_ids", None)
        if value is not None and ids is not None:
            checked_task_index(field, value, obj.num_envs, len(ids), obj.device)


class NextTaskArg(Arg):
    """A world's `step(next_task)`: None, the sampler's callable (the package's step loop: not read),
    or [num_envs] (or one) bank indices; a direct call's tensor is range-checked in `step` itself."""

    optional = True

    def check(self, field: str, value: Any, obj: Any, call: dict) -> None:
        if value is not None and not callable(value) and not isinstance(value, (Tensor, list, tuple)):
            self.fail(field, f"a callable done -> [N] bank indices or [num_envs] = [{obj.num_envs}] task bank indices "
                      "(a long tensor)", value)


_PICK = TensorArg("int", text="the bank indices of the tasks the finished actors start next; "
                  "e.g. torch.zeros(num_envs, dtype=torch.long)")


def checked_pick(world: str, picked: Any, num_envs: int) -> Tensor:
    """What a `step(next_task=callable)` returned: an integer tensor of [num_envs] (or one) bank indices,
    else one ArgumentError naming `world.step(next_task)` and what the callable must return (a float
    tensor would be truncated to indices silently). Metadata only (dtype, shape): O(1), no host read, on
    the step path."""
    from parlightning.errors import ArgumentError

    field = f"{world}.step(next_task)'s return"
    _PICK.check(field, picked, None, {})
    if tuple(picked.shape) not in ((num_envs,), (1,), ()):
        raise ArgumentError(f"{field}: must have shape [num_envs] = [{num_envs}] (one task bank index per actor) or one "
                            f"index for all, got {list(picked.shape)}")
    return picked


RESET = State("called before reset(); call env.reset() first")


def world_lifecycle(exact: Optional[bool] = True, closes: bool = False, reset_why: str = "",
                    requires: Optional[dict[str, Any]] = None) -> Lifecycle:
    """A world's lifecycle (`checked_methods(lifecycle=...)`): `step` (and `requires`' methods) before the
    first `reset` is one LifecycleError; `load_state_dict` of an exact world (`exact`: it restores
    every episode) counts as a reset, of an inexact one (False) ends it (reset() again before stepping;
    None: the world marks it itself); `closes`: after `close()` every other method is refused."""
    state = State(RESET.text + reset_why) if reset_why else RESET
    enters, leaves = {"reset": "reset"}, {}
    if exact:
        enters["load_state_dict"] = "reset"
    elif exact is not None:
        leaves["load_state_dict"] = "reset"
    return Lifecycle({"reset": state}, requires={"step": "reset", **(requires or {})}, enters=enters, leaves=leaves,
                     closes="close" if closes else None)


def world_specs(action: Optional[Arg] = None, **more: Any) -> dict[str, Any]:
    """The argument checks of the `BatchedEnv` methods (`checked_methods(**world_specs())`): reset's
    seed (0..2**32 - 1) and task_index, step's action and next_task, load_state_dict's state (a dict)."""
    from parlightning.config_types import Seed

    specs: dict[str, Any] = {
        "reset": {"seed": Optional[Seed], "task_index": TaskIndexArg()},
        "step": {"action": action or ActionArg(), "next_task": NextTaskArg()},
        "load_state_dict": {"state": dict},
    }
    for name, spec in more.items():
        specs[name] = {**specs.get(name, {}), **spec}
    return specs


def task_ids_of(env: Any) -> Optional[Sequence[str]]:
    """The env's task bank ids, or None for a world without tasks."""
    return getattr(env, "task_ids", None)


def solved_threshold_of(env: Any) -> float:
    """The outcome at or above which an episode counts as solved: the world's `solved_threshold`,
    1.0 (only a full success) when it has none or says None (a proxy answering None for what its
    inner world lacks). Its type and range are checked when the world is probed."""
    value = getattr(env, "solved_threshold", None)
    return 1.0 if value is None else float(value)


def action_mask_of(env: Any) -> Optional[Tensor]:
    """The world's action mask for its last observation (`env.action_masks()`), or None when the
    world declares none. No validation and no host sync (called once per step)."""
    masks = getattr(env, "action_masks", None)
    return masks() if callable(masks) else None


def mask_layout(spec: ActionSpec, width: int) -> Literal["dimensions", "categories"]:
    """Which layout a mask of `width` columns has for `spec` (`dimensions` when both fit)."""
    if width == len(spec.nvec):
        return "dimensions"
    if width == sum(spec.nvec):
        return "categories"
    raise ValueError(
        f"action mask: {width} columns fit neither layout of actions {list(spec.nvec)}: pass [N, {len(spec.nvec)}] "
        f"(one flag per dimension) or [N, {sum(spec.nvec)}] (one flag per category)")


def check_action_mask(mask: Any, spec: ActionSpec, num_envs: int, where: str = "action_masks()",
                      device: Any = None) -> None:
    """Refuse a world's mask that the policy cannot use, naming what is wrong and the fix (one host
    sync: call it once, e.g. at the first reset, never per step). `device`: the world's, where the
    mask must be (a meta mask is refused whatever `device` is)."""
    name = f"{where}"
    if not isinstance(mask, Tensor):
        raise ValueError(f"{name}: must return a bool tensor, got {type(mask).__name__}")
    check_real_device(name, mask, device)  # before any read of its values
    if mask.layout != torch.strided:
        raise ValueError(f"{name}: must be a dense (strided) bool tensor, got a {str(mask.layout).replace('torch.', '')} "
                         "tensor; call .to_dense() on it")
    if not spec.is_discrete:
        raise ValueError(f"{name}: action masks apply to discrete actions only; this world's are {spec.kind}: "
                         "drop action_masks() or use discrete actions")
    if mask.dtype != torch.bool:
        raise ValueError(f"{name}: must be a bool tensor (True = live), got {mask.dtype}; return mask.bool()")
    if mask.dim() != 2 or mask.shape[0] != num_envs:
        raise ValueError(f"{name}: must be [num_envs, D] or [num_envs, sum(nvec)] with num_envs = {num_envs}, got "
                         f"shape {list(mask.shape)}; return one row of flags per actor")
    try:
        layout = mask_layout(spec, mask.shape[1])
    except ValueError as err:
        raise ValueError(f"{name}: {str(err).split(': ', 1)[1]}") from None
    if layout == "categories":
        empty = torch.stack([m.any(1) for m in mask.split(list(spec.nvec), 1)], 1).logical_not()
        if bool(empty.any()):
            actor, dim = (int(i) for i in empty.nonzero()[0])
            raise ValueError(f"{name}: actor {actor}'s action dimension {dim} has no live category; every dimension "
                             "needs at least one (mask the whole dimension with a [N, D] mask instead)")


def world_label(env: Any) -> str:
    """The name a message gives a world: its class, with the user's own class inside where the
    package's class only carries it (an external world's `world_name`: `ExternalBatchedEnv(MySim)`;
    a wrapper's `env`: `NormalizeEnv(MyWorld)`), so a fault is named after the code that holds it."""
    kind = type(env).__name__
    world = getattr(env, "world_name", None)
    if isinstance(world, str) and world and world != kind:
        return f"{kind}({world})"
    inner = getattr(env, "env", None)
    if inner is not None and inner is not env and callable(getattr(inner, "step", None)):
        return f"{kind}({world_label(inner)})"
    return kind


def env_signature(env: Any) -> dict[str, Any]:
    """What a checkpoint's world must share with the world it resumes into: class, spaces, the
    task bank and every plain constructor setting the env keeps as an attribute (not num_envs,
    device or seed). A world stepping in a collector process reports its own (`remote_signature`)."""
    if isinstance(getattr(env, "remote_signature", None), dict):
        return dict(env.remote_signature)
    sig: dict[str, Any] = {
        "class": f"{type(env).__module__}.{type(env).__qualname__}",
        "observation_shape": [int(d) for d in getattr(env, "observation_shape", ())],
        "action_spec": repr(getattr(env, "action_spec", None)),
    }
    tasks = getattr(env, "task_ids", None)
    if tasks is not None:
        sig["task_ids"] = hashlib.sha256("\n".join(map(str, tasks)).encode()).hexdigest()[:16]
    try:
        params = inspect.signature(type(env).__init__).parameters
    except (TypeError, ValueError):
        params = {}
    for name in params:
        if name in ("self", "num_envs", "device", "seed") or not hasattr(env, name):
            continue
        value = getattr(env, name)
        if isinstance(value, tuple):
            value = list(value)
        if value is None or isinstance(value, (bool, int, float, str)) or (
                isinstance(value, list) and all(isinstance(v, (bool, int, float, str)) for v in value)):
            sig[name] = value
    return sig
