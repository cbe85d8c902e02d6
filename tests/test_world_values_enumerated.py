"""Every value a user's world hands back, crossed with every way it can be malformed, derived from the
contract (docs/guides/bring-your-own-env.md, docs/guides/external-worlds.md) rather than from known bugs.

Tensor worlds (`BatchedEnv`): reset's observations; step's `StepResult` fields obs, reward,
terminated, truncated, final_obs and each `EpisodeParts` field; `action_masks()`; the done mask a
world hands to `next_task`; the StepResult and EpisodeParts containers; the attributes
(observation_shape, action_spec, num_envs, device, task_ids, action_masks) and state_dict /
load_state_dict. External worlds (`ExternalBatchedEnv`): each actor's observation (reset and step),
reward, terminated / truncated, parts (the mapping and each value), the step's answer tuple, and the
world's observation_shape, action_spec, tasks and optional facts.

Malformation classes: each wrong dtype, numpy array / numpy scalar / Python scalar / list / None /
str / dict, 0-d, an extra or a missing dimension, the wrong length, sparse (COO, CSR), non-contiguous
and expanded (stride-0) views, requires_grad, tensor subclasses (nn.Parameter, a custom one), the
meta device, NaN / +inf / -inf, and a value that turns bad only at a later step (step 1, step 3:
after the first episode ended) or only at the run's own actor count.

Each case is run where the package meets it: the preflight probe (`check_env` on a 2-actor probe:
ConfigError before anything ran) and the step loop (a short collection through `make_collector`:
ReportedError during a rollout), which share one checker (`parlightning.envs.contract`) and must
agree. A refused case is one line naming the world's class, the method, the field and the fix; an
accepted case (well-formed and harmless: views, subclasses, tensors that require grad, the numeric
dtypes a field admits) must collect and leave no gradient graph or subclass in the rollout. A few
runs of the CLI (one in a subprocess) show the one `error:` line, the exit status, no traceback and
nothing written; one in-process fit trains a world returning every accepted malformation at once.
"""

from __future__ import annotations

import dataclasses
import decimal
import fractions
import math
import os
import subprocess
import sys
from collections import namedtuple
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional

import numpy as np
import pytest
import torch

from parlightning.collection.collector import make_collector
from parlightning.collection.context import RoundHooks
from parlightning.distribution.samplers import RoundRobin
from parlightning.envs import contract
from parlightning.envs.base import ActionSpec, BatchedEnv, EpisodeParts, StepResult
from parlightning.envs.external import ExternalBatchedEnv, ExternalWorldError
from parlightning.errors import ConfigError, NonFiniteError, ReportedError
from parlightning.policies.actor_critic import ActorCritic
from parlightning.runtime import preflight

pytestmark = pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
N, T = 4, 4  # the collection's actors and steps per round (the probe has 2 actors)


class MyTensor(torch.Tensor):
    """A user's tensor subclass (torch function dispatch keeps it through ops)."""


# ================================================================================== tensor worlds
class MatrixWorld(BatchedEnv):
    """A correct 3-feature, 2-action world with a 2-task bank whose episodes last `episode` steps;
    `bad` maps a value's name ("reset", a StepResult field, "parts.<field>", "parts", "result",
    "mask") to `fn(good, world) -> the value returned instead`, from the `at`-th step call on (0: the
    preflight probe's first step; "reset" is replaced at the first reset when `at` is 0, or only when
    the world has other than 2 actors when `at` is "N")."""

    task_ids = ["a-0", "a-1"]
    observation_shape = (3,)
    action_spec = ActionSpec("discrete", nvec=(2,))
    action_masks = None  # MaskedWorld defines the method
    bad: dict = {}
    at: Any = 0
    episode = 2

    def __init__(self, num_envs: int = 2, device: str = "cpu", seed: int = 0) -> None:
        self.num_envs, self.device = num_envs, torch.device(device)
        self.calls, self.t, self.done = 0, torch.zeros(num_envs), torch.zeros(num_envs, dtype=torch.bool)
        self.task = torch.zeros(num_envs, dtype=torch.long)  # each actor's bank index (parts.task where it ends)

    def _replace(self, name: str, good: Any, now: bool) -> Any:
        fn = self.bad.get(name)
        return fn(good, self) if fn is not None and now else good

    def _now(self) -> bool:
        return self.at != "N" and self.calls >= self.at

    def reset(self, *, seed=None, task_index=None):
        self.t.zero_()
        if task_index is not None:
            self.task = torch.as_tensor(task_index, dtype=torch.long).clone()
        now = self.at == 0 or (self.at == "N" and self.num_envs != 2)
        return self._replace("reset", torch.full((self.num_envs, 3), 0.5), now)

    def step(self, action, next_task=None):
        n, now = self.num_envs, self._now()
        self.calls += 1
        self.t += 1
        done = self.done = self.t >= self.episode
        ran = self.task.clone()
        if callable(next_task):
            picked = next_task(self._replace("done", done, now))
            self.task = torch.where(done, picked, self.task)
        self.t[done] = 0
        parts = EpisodeParts(ran, torch.full((n,), 0.5), *[torch.ones(n)] * 5)
        parts = EpisodeParts(*[self._replace(f"parts.{f}", getattr(parts, f), now) for f in EpisodeParts._fields])
        obs = torch.full((n, 3), 0.5)
        res = StepResult(obs, torch.ones(n), done, torch.zeros(n, dtype=torch.bool), obs.clone(),
                         self._replace("parts", parts, now))
        res = res._replace(**{f: self._replace(f, getattr(res, f), now) for f in contract.STEP_FIELDS})
        return self._replace("result", res, now)


class MaskedWorld(MatrixWorld):
    def action_masks(self):
        return self._replace("mask", torch.ones(self.num_envs, 2, dtype=torch.bool), self._now())


def _world(bad: dict, at: Any = 0, masked: bool = False, **attrs: Any) -> type:
    """A fresh subclass named UserWorld (the name every message must carry)."""
    return type("UserWorld", (MaskedWorld if masked else MatrixWorld,), {"bad": bad, "at": at, **attrs})


class _Hooks(RoundHooks):
    def __init__(self, policy: torch.nn.Module) -> None:
        self._policy = policy

    def policy(self) -> torch.nn.Module:
        return self._policy


POLICY = ActorCritic((3,), ActionSpec("discrete", nvec=(2,)), [8])


def _probe(cls: type) -> None:
    """What the preflight runs on a user's world (a 2-actor probe on the CPU)."""
    env = cls(2)
    preflight.check_env(env, 2, 0)
    preflight.check_state("data.env", type(env).__name__, env, load_back=True)


def _collect(cls: type, rounds: int = 2) -> Any:
    """Two rounds of N actors x T steps through the package's collector; returns the collector."""
    collector = make_collector(lambda num_envs, device, seed: cls(num_envs, device, seed), N, T, 0,
                               torch.device("cpu"))
    collector.start(RoundRobin())
    for r in range(rounds):
        collector.collect(r, r * N * T, _Hooks(POLICY))
    return collector


def _assert_kept_nothing_of_the_world(collector: Any) -> None:
    """An accepted value leaves the rollout plain: no tensor of the buffer or the saved state requires
    grad, carries a graph or is a subclass (what the learner trains on and a checkpoint saves)."""
    loop = collector.loop
    for name, value in vars(loop.buffer).items():
        if isinstance(value, torch.Tensor):
            assert type(value) is torch.Tensor and not value.requires_grad and value.grad_fn is None, name
    for name, value in loop.state_dict().items():
        if isinstance(value, torch.Tensor):
            assert type(value) is torch.Tensor and not value.requires_grad and value.grad_fn is None, name


def _assert_one_line(err: BaseException, *names: str) -> str:
    message = str(err)
    assert "\n" not in message, message
    for name in names:
        assert name in message, (name, message)
    return message


# ---------------------------------------------------------------------------------- the malformations
def _csr(g: torch.Tensor) -> torch.Tensor:
    return (g if g.dim() == 2 else g.unsqueeze(1)).to_sparse_csr()


def _noncontiguous(g: torch.Tensor) -> torch.Tensor:
    return g.t().contiguous().t() if g.dim() == 2 else torch.stack([g, g], 1)[:, 0]


DTYPES = (torch.float16, torch.bfloat16, torch.float64, torch.float32, torch.complex64, torch.int8, torch.int16,
          torch.int32, torch.int64, torch.uint8, torch.bool)
OK_DTYPES = {  # what each kind of value admits (contract.Want)
    "obs": {torch.float32},
    "reward": {torch.float16, torch.bfloat16, torch.float32, torch.float64},
    "flag": {torch.bool},
    "task": {torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8},
    "number": {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32,
               torch.int64, torch.uint8},
}
FLOATING = ("obs", "reward", "number")
SHAPES_AND_CONTAINERS = {  # refused for every kind
    "numpy": lambda g, w: g.numpy(),
    "numpy-scalar": lambda g, w: g.numpy().ravel()[0],
    "python-scalar": lambda g, w: g.ravel()[0].item(),
    "list": lambda g, w: g.tolist(),
    "None": lambda g, w: None,
    "str": lambda g, w: "0.5",
    "dict": lambda g, w: {"value": g},
    "0-d": lambda g, w: g.ravel()[0].clone(),
    "extra-dim": lambda g, w: g.unsqueeze(-1),
    "missing-dim": lambda g, w: g[0],
    "wrong-length": lambda g, w: g[:1],
    "sparse-coo": lambda g, w: g.to_sparse(),
    "sparse-csr": lambda g, w: _csr(g),
    "meta": lambda g, w: g.to("meta"),
}
HARMLESS = {  # accepted for every kind: the step loop copies into its own buffers, under inference mode
    "non-contiguous": lambda g, w: _noncontiguous(g),
    "expanded-stride-0": lambda g, w: g[:1].expand_as(g),
    "nn.Parameter": lambda g, w: torch.nn.Parameter(g.clone(), requires_grad=g.is_floating_point()),
    "subclass": lambda g, w: g.clone().as_subclass(MyTensor),
}
GRAD = {"requires-grad": lambda g, w: g.clone().requires_grad_()}  # accepted where the kind is a float
NON_FINITE = {"nan": math.nan, "+inf": math.inf, "-inf": -math.inf}


def _malformations(kind: str) -> list[tuple[str, Callable, bool]]:
    """(name, fn(good, world), accepted) for one kind of value."""
    out = [(f"dtype-{str(d).replace('torch.', '')}", (lambda g, w, d=d: g.to(d)), d in OK_DTYPES[kind])
           for d in DTYPES if d != {"obs": torch.float32, "reward": torch.float32, "flag": torch.bool,
                                    "task": torch.int64, "number": torch.float32}[kind]]
    out += [(name, fn, False) for name, fn in SHAPES_AND_CONTAINERS.items()]
    # (a stride-0 view of parts.task repeats actor 0's task for every actor: other values, a wrong task where
    # the actors ran different ones; refused by the step loop's task check, test_round11_leftovers.py)
    out += [(name, fn, True) for name, fn in HARMLESS.items() if not (kind == "task" and name == "expanded-stride-0")]
    if kind in FLOATING:
        out += [(name, fn, True) for name, fn in GRAD.items()]
        out += [(name, (lambda g, w, v=v: torch.full_like(g, v)), False) for name, v in NON_FINITE.items()]
    return out


# value -> (kind, the method that returns it, the words that name it in a message)
TENSOR_VALUES = {
    "reset": ("obs", "reset", "observations"),
    "obs": ("obs", "step", "StepResult.obs"),
    "final_obs": ("obs", "step", "StepResult.final_obs"),
    "reward": ("reward", "step", "StepResult.reward"),
    "terminated": ("flag", "step", "StepResult.terminated"),
    "truncated": ("flag", "step", "StepResult.truncated"),
    **{f"parts.{f}": ("task" if f == "task" else "number", "step", f) for f in EpisodeParts._fields},
    "mask": ("flag", "action_masks", "action_masks"),
}
NAMES_IN_ROLLOUT = {"obs": "StepResult.obs", "final_obs": "StepResult.final_obs", "reward": "StepResult.reward"}
TENSOR_CASES = [pytest.param(value, name, fn, ok, id=f"{value}-{name}")
                for value, (kind, _, _) in TENSOR_VALUES.items() for name, fn, ok in _malformations(kind)]


def _attrs_for(value: str) -> dict:
    # parts are read where an episode ended: one-step episodes, so the probe's step and every later one end them
    return {"episode": 1} if value.startswith("parts.") else {}


@pytest.mark.parametrize("value, name, fn, accepted", TENSOR_CASES)
def test_a_tensor_worlds_value_is_refused_or_trains_alike_in_the_probe_and_the_step_loop(value, name, fn, accepted):
    kind, method, field = TENSOR_VALUES[value]
    masked, extra = value == "mask", _attrs_for(value)
    # the preflight probe: the world's first reset and step (a mask of None from the start: an unmasked world)
    if accepted or (value, name) == ("mask", "None"):
        _probe(_world({value: fn}, masked=masked, **extra))
    else:
        with pytest.raises(ConfigError) as err:
            _probe(_world({value: fn}, masked=masked, **extra))
        _assert_one_line(err.value, "data.env: UserWorld.", method, field, "preflight probe")
        assert "return" in str(err.value) or "call" in str(err.value), str(err.value)
    # the step loop: a world right at the probe that turns bad at step 3 (after its first episode ended),
    # or, for reset, at the run's own actor count
    cls = _world({value: fn}, at="N" if value == "reset" else 3, masked=masked, **extra)
    if accepted:
        _assert_kept_nothing_of_the_world(_collect(cls))
        return
    with pytest.raises(ReportedError) as err:
        _collect(cls)
    named = NAMES_IN_ROLLOUT.get(value, field) if isinstance(err.value, NonFiniteError) else field
    _assert_one_line(err.value, "data.env: ", "UserWorld.", method, named)
    assert any(w in str(err.value) for w in ("return", "fix")), str(err.value)


@pytest.mark.parametrize("value, name", [(v, n) for v in ("obs", "reward", "terminated", "parts.task", "mask")
                                         for n in ("dtype-complex64", "list", "wrong-length", "sparse-coo")])
def test_a_value_that_turns_bad_at_step_1_is_named_at_step_1(value, name) -> None:
    kind, method, field = TENSOR_VALUES[value]
    fn = {n: f for n, f, _ in _malformations(kind)}[name]
    with pytest.raises(ReportedError) as err:
        _collect(_world({value: fn}, at=1, masked=value == "mask", **_attrs_for(value)))
    _assert_one_line(err.value, "UserWorld.", method, field, "at step 1 of a rollout")


class HugeExpandedWorld(MatrixWorld):
    """Declares and returns 10^9 features per actor as a stride-0 view of one number (8 GB if copied)."""

    observation_shape = (100000, 10000)

    def reset(self, *, seed=None, task_index=None):
        return torch.zeros(self.num_envs, 1, 1).expand(self.num_envs, 100000, 10000)


def test_a_huge_expanded_observation_is_checked_without_materializing_it() -> None:
    """The probe's NaN read goes over the distinct elements of a view (it read, and copied, all 2 x 10^9)."""
    env = HugeExpandedWorld(2)
    obs = env.reset()
    assert contract.tensor_problem(obs, (2, 100000, 10000), contract.OBS, torch.device("cpu")) is None
    assert contract.non_finite(obs) is None
    assert contract.non_finite(torch.full((1, 1), math.nan).expand(2, 10**9)) == 0


def _nan_where_no_episode_ended(good: torch.Tensor, world: MatrixWorld) -> torch.Tensor:
    return torch.where(world.done, good, torch.full_like(good, math.nan))


def test_parts_are_read_only_where_an_episode_ended() -> None:
    """NaN in parts rows whose episode did not end is not read (the contract: parts are valid where done)."""
    cls = _world({"parts.outcome": _nan_where_no_episode_ended, "parts.critical_steps": _nan_where_no_episode_ended})
    _probe(cls)
    _assert_kept_nothing_of_the_world(_collect(cls))


# ---------------------------------------------------------------------------------- containers
class OtherResult(NamedTuple):
    obs: Any
    reward: Any
    terminated: Any
    truncated: Any
    final_obs: Any
    parts: Any = None


class ExtraResult(NamedTuple):
    obs: Any
    reward: Any
    terminated: Any
    truncated: Any
    final_obs: Any
    parts: Any = None
    info: Any = None


class GymResult(NamedTuple):
    obs: Any
    reward: Any
    terminated: Any
    truncated: Any


@dataclasses.dataclass
class ResultDataclass:
    obs: Any
    reward: Any
    terminated: Any
    truncated: Any
    final_obs: Any
    parts: Any = None


PartsTuple = namedtuple("PartsTuple", EpisodeParts._fields)

CONTAINER_CASES = [  # (value, name, fn, accepted, the words the refusal says)
    ("result", "tuple", lambda r, w: tuple(r), False, "a tuple, not a StepResult"),
    ("result", "list", lambda r, w: list(r), False, "a list, not a StepResult"),
    ("result", "dict", lambda r, w: r._asdict(), False, "a dict, not a StepResult"),
    ("result", "None", lambda r, w: None, False, "None (a missing `return`?)"),
    ("result", "str", lambda r, w: "obs", False, "a str, not a StepResult"),
    ("result", "gymnasium-4-fields", lambda r, w: GymResult(*r[:4]), False, "without `final_obs`"),
    ("result", "another-namedtuple", lambda r, w: OtherResult(*r), True, ""),
    ("result", "namedtuple-with-extra-fields", lambda r, w: ExtraResult(*r), True, ""),
    ("result", "dataclass", lambda r, w: ResultDataclass(*r), True, ""),
    ("parts", "dict", lambda p, w: p._asdict(), False, "StepResult.parts as a dict, not EpisodeParts"),
    ("parts", "tuple", lambda p, w: tuple(p), False, "StepResult.parts as a tuple, not EpisodeParts"),
    ("parts", "list", lambda p, w: list(p), False, "StepResult.parts as a list"),
    ("parts", "tensor", lambda p, w: torch.stack(tuple(p), -1).float(), False, "StepResult.parts as a Tensor"),
    ("parts", "str", lambda p, w: "done", False, "StepResult.parts as a str"),
    ("parts", "another-namedtuple", lambda p, w: PartsTuple(*p), True, ""),
    ("parts", "None-at-every-step", lambda p, w: None, True, ""),
]


@pytest.mark.parametrize("value, name, fn, accepted, says", [pytest.param(*c, id=f"{c[0]}-{c[1]}")
                                                             for c in CONTAINER_CASES])
def test_a_step_result_or_parts_of_another_shape_is_named(value, name, fn, accepted, says) -> None:
    if accepted:
        _probe(_world({value: fn}))
        _assert_kept_nothing_of_the_world(_collect(_world({value: fn}, at=0 if name == "None-at-every-step" else 3)))
        return
    with pytest.raises(ConfigError) as err:
        _probe(_world({value: fn}))
    _assert_one_line(err.value, "data.env: UserWorld.step returned", says, "preflight probe", "return")
    with pytest.raises(ReportedError) as err:
        _collect(_world({value: fn}, at=3))
    _assert_one_line(err.value, "data.env: UserWorld.step returned", says, "at step 3 of a rollout", "return")


def test_parts_that_stop_after_earlier_steps_had_them_are_named() -> None:
    with pytest.raises(ReportedError) as err:
        _collect(_world({"parts": lambda p, w: None}, at=3))
    _assert_one_line(err.value, "UserWorld.step returned parts None after EpisodeParts at earlier steps")


@pytest.mark.parametrize("name, fn", [pytest.param(n, f, id=n) for n, f, ok in _malformations("flag") if not ok] + [
    pytest.param("a-callable", lambda d, w: (lambda: d), id="a-callable")])
def test_the_done_mask_a_world_hands_to_next_task_is_checked(name, fn) -> None:
    """A value the world passes to the package (the sampler's next_task): checked like one it returns."""
    with pytest.raises(ReportedError) as err:
        _collect(_world({"done": fn}, at=1))
    _assert_one_line(err.value, "UserWorld.step passed a done mask to next_task", "next_task(done) with done a bool")


# ---------------------------------------------------------------------------------- attributes and state
class _Obj:
    pass


def _state(value: Any) -> dict:
    return {"state_dict": lambda self: value}


ATTRIBUTE_CASES = [  # (name, class attributes, accepted, the words the refusal says)
    ("observation_shape-int", {"observation_shape": 3}, False, "UserWorld.observation_shape is 3"),
    ("observation_shape-empty", {"observation_shape": ()}, False, "observation_shape is ()"),
    ("observation_shape-zero", {"observation_shape": (0,)}, False, "observation_shape is (0,)"),
    ("observation_shape-negative", {"observation_shape": (-3,)}, False, "observation_shape is (-3,)"),
    ("observation_shape-float", {"observation_shape": (3.0,)}, False, "observation_shape is (3.0,)"),
    ("observation_shape-bool", {"observation_shape": (True,)}, False, "observation_shape is (True,)"),
    ("observation_shape-str", {"observation_shape": "3"}, False, "observation_shape is '3'"),
    ("observation_shape-None", {"observation_shape": None}, False, "observation_shape is None"),
    ("observation_shape-ndarray", {"observation_shape": np.array([3])}, False, "observation_shape is array"),
    ("observation_shape-tensor", {"observation_shape": torch.tensor([3])}, False, "observation_shape is tensor"),
    ("observation_shape-nested", {"observation_shape": ((3,),)}, False, "observation_shape is ((3,),)"),
    ("observation_shape-wider-than-returned", {"observation_shape": (5,)}, False, "observation_shape is [5]"),
    ("observation_shape-list", {"observation_shape": [3]}, True, ""),
    ("observation_shape-numpy-ints", {"observation_shape": (np.int64(3),)}, True, ""),
    ("observation_shape-torch.Size", {"observation_shape": torch.Size([3])}, True, ""),
    ("action_spec-dict", {"action_spec": {"kind": "discrete", "nvec": (2,)}}, False, "not an ActionSpec"),
    ("action_spec-None", {"action_spec": None}, False, "UserWorld.action_spec is NoneType None, not an ActionSpec"),
    ("action_spec-str", {"action_spec": "discrete"}, False, "not an ActionSpec"),
    ("action_spec-int", {"action_spec": 2}, False, "not an ActionSpec"),
    ("num_envs-str", {"num_envs": "2"}, False, "UserWorld.num_envs is str '2', not an int"),
    ("num_envs-None", {"num_envs": None}, False, "UserWorld.num_envs is NoneType None, not an int"),
    ("num_envs-float", {"num_envs": 2.0}, False, "UserWorld.num_envs is float 2.0, not an int"),
    ("num_envs-bool", {"num_envs": True}, False, "UserWorld.num_envs is bool True, not an int"),
    ("num_envs-tensor", {"num_envs": torch.tensor(2)}, False, "UserWorld.num_envs is Tensor"),
    ("num_envs-list", {"num_envs": [2]}, False, "UserWorld.num_envs is list [2], not an int"),
    ("num_envs-wrong", {"num_envs": 3}, False, "asked for 2 actors, UserWorld built 3"),
    ("num_envs-numpy-int", {"num_envs": np.int64(2)}, True, ""),
    ("device-None", {"device": None}, False, "UserWorld.device is None, not a torch device"),
    ("device-gpu", {"device": "gpu"}, False, "UserWorld.device is 'gpu', not a torch device"),
    ("device-int-list", {"device": ["cpu"]}, False, "UserWorld.device is ['cpu'], not a torch device"),
    ("device-meta", {"device": torch.device("meta")}, False, "UserWorld.device says meta but its reset returned"),
    ("device-str", {"device": "cpu"}, True, ""),
    ("task_ids-ndarray", {"task_ids": np.array(["a-0", "a-1"])}, False, "UserWorld.task_ids is ndarray"),
    ("task_ids-ints", {"task_ids": [0, 1]}, False, "UserWorld.task_ids holds 0 (int)"),
    ("task_ids-duplicate", {"task_ids": ["a", "a"]}, False, "UserWorld.task_ids lists 'a' twice"),
    ("task_ids-empty", {"task_ids": []}, False, "UserWorld.task_ids is empty"),
    ("task_ids-str", {"task_ids": "a-0"}, False, "UserWorld.task_ids is str 'a-0'"),
    ("task_ids-dict", {"task_ids": {"a-0": 1, "a-1": 2}}, False, "UserWorld.task_ids is dict"),
    ("task_ids-set", {"task_ids": {"a-0", "a-1"}}, False, "UserWorld.task_ids is set"),
    ("task_ids-generator", {"task_ids": property(lambda self: (t for t in ["a-0", "a-1"]))}, False,
     "UserWorld.task_ids is generator"),
    ("task_ids-bytes", {"task_ids": [b"a-0", b"a-1"]}, False, "UserWorld.task_ids holds b'a-0' (bytes)"),
    ("task_ids-None-inside", {"task_ids": ["a-0", None]}, False, "UserWorld.task_ids holds None"),
    ("task_ids-tuple", {"task_ids": ("a-0", "a-1")}, True, ""),
    ("task_ids-numpy-str", {"task_ids": [np.str_("a-0"), np.str_("a-1")]}, True, ""),
    ("action_masks-a-tensor", {"action_masks": torch.ones(2, 2, dtype=torch.bool)}, False,
     "UserWorld.action_masks is a Tensor, not a method"),
    ("state_dict-list", _state([1]), False, "UserWorld.state_dict returned a list, not a dict"),
    ("state_dict-None", _state(None), False, "UserWorld.state_dict returned a NoneType, not a dict"),
    ("state_dict-numpy", _state({"a": np.zeros(3)}), False, "UserWorld.state_dict holds a numpy"),
    ("state_dict-object", _state({"a": _Obj()}), False, "_Obj object, which a checkpoint cannot load back"),
    ("state_dict-lambda", _state({"a": lambda: 1}), False, "UserWorld.state_dict holds a value"),
    ("state_dict-subclass", _state({"a": torch.ones(3).as_subclass(MyTensor)}), False, "MyTensor object"),
    ("state_dict-meta", _state({"a": torch.ones(3, device="meta")}), False, "tensor on the meta device"),
    ("state_dict-raises", {"state_dict": lambda self: 1 / 0}, False, "UserWorld.state_dict raised ZeroDivisionError"),
    ("state_dict-not-a-method", {"state_dict": {}}, False, "UserWorld.state_dict is a dict, not a method"),
    ("load_state_dict-raises", {"load_state_dict": lambda self, state: {}["missing"]}, False,
     "UserWorld.load_state_dict(its own state_dict()) raised KeyError"),
    ("load_state_dict-no-argument", {"load_state_dict": lambda self: None}, False,
     "UserWorld.load_state_dict(its own state_dict()) raised TypeError"),
    ("load_state_dict-not-a-method", {"load_state_dict": None}, False,
     "UserWorld.load_state_dict is a NoneType, not a method"),
    ("state_dict-sparse", {"state_dict": lambda self: {"a": torch.ones(3).to_sparse(),
                                                      "b": torch.ones(2, 2).to_sparse_csr()}}, True, ""),
    ("state_dict-requires-grad", _state({"a": torch.ones(3, requires_grad=True) * 2}), True, ""),
    ("state_dict-parameter", _state({"a": torch.nn.Parameter(torch.ones(3))}), True, ""),
    ("state_dict-nan", _state({"a": torch.tensor(math.nan)}), True, ""),
    ("state_dict-expanded", _state({"a": torch.ones(1).expand(5)}), True, ""),
    ("state_dict-plain-containers", _state({"a": {1, 2}, (1, 2): b"x", "g": torch.Generator().get_state(),
                                            "d": torch.float32, "dev": torch.device("cpu")}), True, ""),
]


@pytest.mark.parametrize("name, attrs, accepted, says", [pytest.param(*c, id=c[0]) for c in ATTRIBUTE_CASES])
def test_a_tensor_worlds_attribute_or_state_is_checked_before_anything_ran(name, attrs, accepted, says) -> None:
    plain = {k: v for k, v in attrs.items() if k in ("num_envs", "device")}  # set per instance by __init__
    cls = _world({}, **{k: v for k, v in attrs.items() if k not in plain})
    if plain:
        init = cls.__init__

        def __init__(self, num_envs=2, device="cpu", seed=0):
            init(self, num_envs, device, seed)
            for k, v in plain.items():
                setattr(self, k, v)

        cls.__init__ = __init__
    if not accepted:
        with pytest.raises(ConfigError) as err:
            _probe(cls)
        _assert_one_line(err.value, "data.env", says)
        return
    _probe(cls)
    if not plain:  # the run's own worlds (N actors) take the attributes as they are
        _assert_kept_nothing_of_the_world(_collect(cls))


def test_a_worlds_sparse_state_is_saved_with_its_checksum_and_loads_back() -> None:
    """The checkpoint's checksum covers a sparse tensor (it was a RuntimeError at the first save)."""
    from parlightning.runtime.checkpoint import state_checksum

    state = {"coo": torch.ones(3).to_sparse(), "csr": torch.eye(2).to_sparse_csr()}
    assert state_checksum(state) == state_checksum({k: v.clone() for k, v in state.items()})
    assert state_checksum(state) != state_checksum({"coo": (2 * torch.ones(3)).to_sparse(), "csr": state["csr"]})


class DuckWorld:
    """A world that does not inherit BatchedEnv and defines neither state_dict nor load_state_dict (both
    optional: BatchedEnv's defaults save nothing)."""

    task_ids = ["a-0", "a-1"]
    observation_shape = (3,)
    action_spec = ActionSpec("discrete", nvec=(2,))

    def __init__(self, num_envs: int = 2, device: str = "cpu", seed: int = 0) -> None:
        self.inner = MatrixWorld(num_envs, device, seed)
        self.num_envs, self.device = num_envs, torch.device(device)

    def reset(self, *, seed=None, task_index=None):
        return self.inner.reset(seed=seed, task_index=task_index)

    def step(self, action, next_task=None):
        return self.inner.step(action, next_task)


def test_a_world_without_state_dict_checkpoints_and_resumes() -> None:
    _probe(DuckWorld)
    collector = _collect(DuckWorld)
    state = collector.loop.state_dict()
    assert state["env"] == {}
    collector.loop.load_state_dict(state)  # a resume: it was an AttributeError at the first checkpoint


# ================================================================================== external worlds
class XWorld:
    """A correct external world: 3 numbers per observation, 2 actions, a 2-task bank, episodes of 2
    steps; `bad` maps "reset", "obs", "reward", "terminated", "truncated", "parts", "parts.<field>" or
    "answer" to `fn(good) -> the value returned instead`, from the `at`-th step call on (reset: at its
    first call when `at` is 0, at resets after an episode end otherwise)."""

    tasks = ["a-0", "a-1"]
    observation_shape = (3,)
    action_spec = ActionSpec("discrete", nvec=(2,))
    bad: dict = {}
    at = 0

    def __init__(self, seed: int = 0, actor: int = 0) -> None:
        self.calls, self.t, self.resets = 0, 0, 0

    def _replace(self, name: str, good: Any, now: bool) -> Any:
        fn = self.bad.get(name)
        return fn(good) if fn is not None and now else good

    def reset(self, task):
        self.t, self.resets = 0, self.resets + 1
        return self._replace("reset", [0.5, 0.5, 0.5], self.at == 0 or (self.resets > 1 and self.calls >= self.at))

    def step(self, action):
        now = self.calls >= self.at
        self.calls, self.t = self.calls + 1, self.t + 1
        done = self.t >= 2
        parts = {"outcome": 0.5, "n_subagents": 1.0}
        parts = {k: self._replace(f"parts.{k}", v, now) for k, v in parts.items()}
        answer = (self._replace("obs", [0.5, 0.5, 0.5], now), self._replace("reward", 1.0, now),
                  self._replace("terminated", done, now), self._replace("truncated", False, now),
                  self._replace("parts", parts, now))
        return self._replace("answer", answer, now)


def _xworld(bad: dict, at: int = 0, **attrs: Any) -> type:
    return type("UserXWorld", (XWorld,), {"bad": bad, "at": at, **attrs})


def _xprobe(cls: type) -> ExternalBatchedEnv:
    env = ExternalBatchedEnv(2, world=cls, step_timeout=10)
    try:
        preflight.check_env(env, 2, 0)
        env.step(torch.zeros(2, dtype=torch.long))  # the probe's second step ends the first episodes: parts read
        return env
    finally:
        env.close()


def _xsteps(cls: type, steps: int = 6) -> list[StepResult]:
    """`steps` lock-step steps of 2 actors; every result must keep the tensor contract."""
    env = ExternalBatchedEnv(2, world=cls, step_timeout=10)
    try:
        env.reset(seed=0, task_index=torch.zeros(2, dtype=torch.long))
        out = []
        for _ in range(steps):
            res = env.step(torch.zeros(2, dtype=torch.long))
            assert next(contract.step_problems(res, 2, (3,), torch.device("cpu")), None) is None
            assert not any(contract.non_finite(v) is not None for v in (res.obs, res.final_obs, res.reward))
            out.append(res)
        return out
    finally:
        env.close()


def _xstream(cls: type, answers: int = 10) -> None:
    """Per-actor collection's interface (`send` / `receive`, `data.collect: trajectories`): the same parsers."""
    env = ExternalBatchedEnv(2, world=cls, step_timeout=10)
    try:
        env.reset(seed=0, task_index=torch.zeros(2, dtype=torch.long))
        env.send([0, 1], torch.zeros(2, dtype=torch.long))
        got, calls = 0, 0
        while got < answers:
            calls += 1
            assert calls < 100, "the worlds stopped answering"
            arrived = env.receive(lambda mask: torch.zeros(2, dtype=torch.long), timeout=10)
            if arrived is None:  # an episode ended: its actor arrives once its reset answered
                continue
            got += len(arrived.actors)
            env.send(arrived.actors.tolist(), torch.zeros(len(arrived.actors), dtype=torch.long))
    finally:
        env.close()


OBS_MALFORMATIONS = [  # (name, fn(good list), accepted)
    ("numpy-float32", lambda g: np.array(g, np.float32), True),
    ("numpy-float16", lambda g: np.array(g, np.float16), True),
    ("numpy-float64", lambda g: np.array(g), True),
    ("numpy-int8", lambda g: np.array([1, 2, 3], np.int8), True),
    ("numpy-uint8", lambda g: np.array([1, 2, 3], np.uint8), True),
    ("numpy-bool", lambda g: np.array([True, False, True]), True),
    ("python-bools", lambda g: [True, False, True], True),
    ("tuple", lambda g: tuple(g), True),
    ("tensor-float32", lambda g: torch.tensor(g), True),
    ("tensor-float16", lambda g: torch.tensor(g, dtype=torch.float16), True),
    ("tensor-bfloat16", lambda g: torch.tensor(g, dtype=torch.bfloat16), True),
    ("tensor-float64", lambda g: torch.tensor(g, dtype=torch.float64), True),
    ("tensor-int64", lambda g: torch.tensor([1, 2, 3]), True),
    ("tensor-uint8", lambda g: torch.tensor([1, 2, 3], dtype=torch.uint8), True),
    ("tensor-bool", lambda g: torch.tensor([True, False, True]), True),
    ("tensor-non-contiguous", lambda g: torch.arange(6.0)[::2], True),
    ("tensor-expanded-stride-0", lambda g: torch.tensor([0.5]).expand(3), True),
    ("tensor-requires-grad", lambda g: torch.tensor(g, requires_grad=True), True),
    ("tensor-nn.Parameter", lambda g: torch.nn.Parameter(torch.tensor(g)), True),
    ("tensor-subclass", lambda g: torch.tensor(g).as_subclass(MyTensor), True),
    ("numpy-complex64", lambda g: np.array(g, np.complex64), False),
    ("numpy-object", lambda g: np.array(g, dtype=object), False),
    ("numpy-str", lambda g: np.array(["a", "b", "c"]), False),
    ("tensor-complex64", lambda g: torch.tensor(g, dtype=torch.complex64), False),
    ("tensor-sparse-coo", lambda g: torch.tensor(g).to_sparse(), False),
    ("tensor-sparse-csr", lambda g: torch.tensor([g]).to_sparse_csr(), False),
    ("tensor-meta", lambda g: torch.tensor(g, device="meta"), False),
    ("python-scalar", lambda g: 0.5, False),
    ("numpy-scalar", lambda g: np.float32(0.5), False),
    ("0-d-array", lambda g: np.array(0.5), False),
    ("None", lambda g: None, False),
    ("str", lambda g: "abc", False),
    ("dict", lambda g: {"a": 1}, False),
    ("set", lambda g: {0.1, 0.2, 0.3}, False),
    ("generator", lambda g: (x for x in g), False),
    ("extra-dim", lambda g: [g], False),
    ("column", lambda g: np.array(g)[:, None], False),
    ("too-short", lambda g: g[:2], False),
    ("too-long", lambda g: g + [1.0], False),
    ("mixed-types", lambda g: [0.5, "a", 1], False),
    ("gymnasium-(obs, info)", lambda g: (np.array(g), {}), False),
    ("int-beyond-float", lambda g: [2**70] * 3, False),
    ("nan", lambda g: [math.nan] * 3, False),
    ("+inf", lambda g: [math.inf] * 3, False),
    ("-inf", lambda g: [-math.inf] * 3, False),
    ("beyond-float32", lambda g: [1e300] * 3, False),
]
NUMBER_MALFORMATIONS = [  # (name, fn(good), accepted): a reward or a part's value
    ("int", lambda g: 1, True),
    ("numpy-float32", lambda g: np.float32(0.5), True),
    ("numpy-float16", lambda g: np.float16(0.5), True),
    ("numpy-int64", lambda g: np.int64(1), True),
    ("numpy-uint8", lambda g: np.uint8(1), True),
    ("0-d-array", lambda g: np.array(0.5), True),
    ("0-d-tensor", lambda g: torch.tensor(0.5), True),
    ("0-d-tensor-bfloat16", lambda g: torch.tensor(0.5, dtype=torch.bfloat16), True),
    ("0-d-tensor-requires-grad", lambda g: torch.tensor(0.5, requires_grad=True), True),
    ("0-d-nn.Parameter", lambda g: torch.nn.Parameter(torch.tensor(0.5)), True),
    ("decimal", lambda g: decimal.Decimal("0.5"), True),
    ("fraction", lambda g: fractions.Fraction(1, 2), True),
    ("bool", lambda g: True, False),
    ("numpy-bool", lambda g: np.bool_(True), False),
    ("0-d-tensor-bool", lambda g: torch.tensor(True), False),
    ("tensor-meta", lambda g: torch.tensor(0.5, device="meta"), False),
    ("tensor-sparse", lambda g: torch.tensor([0.5]).to_sparse(), False),
    ("one-element-array", lambda g: np.array([0.5]), False),
    ("one-element-tensor", lambda g: torch.tensor([0.5]), False),
    ("two-element-array", lambda g: np.array([0.5, 0.5]), False),
    ("list", lambda g: [0.5], False),
    ("None", lambda g: None, False),
    ("str", lambda g: "0.5", False),
    ("bytes", lambda g: b"1", False),
    ("dict", lambda g: {"r": 1}, False),
    ("complex", lambda g: 1j, False),
    ("numpy-complex64", lambda g: np.complex64(0.5), False),
    ("tensor-complex", lambda g: torch.tensor(0.5 + 0j), False),
    ("nan", lambda g: math.nan, False),
    ("+inf", lambda g: math.inf, False),
    ("-inf", lambda g: -math.inf, False),
    ("numpy-nan", lambda g: np.float32("nan"), False),
    ("int-beyond-float", lambda g: 10**400, False),
    ("beyond-float32", lambda g: 1e300, False),
]
FLAG_MALFORMATIONS = [  # (name, fn(good bool), accepted)
    ("int-0-or-1", lambda g: int(g), True),
    ("numpy-bool", lambda g: np.bool_(g), True),
    ("numpy-int-0-or-1", lambda g: np.int64(g), True),
    ("0-d-array", lambda g: np.array(g), True),
    ("0-d-tensor", lambda g: torch.tensor(g), True),
    ("0-d-tensor-int", lambda g: torch.tensor(int(g)), True),
    ("float", lambda g: float(g), False),
    ("numpy-float", lambda g: np.float32(g), False),
    ("two", lambda g: 2, False),
    ("minus-one", lambda g: -1, False),
    ("None", lambda g: None, False),
    ("str", lambda g: "no", False),
    ("list", lambda g: [g], False),
    ("one-element-array", lambda g: np.array([g]), False),
    ("dict", lambda g: {}, False),
    ("nan", lambda g: math.nan, False),
    ("tensor-meta", lambda g: torch.tensor(g, device="meta"), False),
]
EXTERNAL_VALUES = {  # value -> (its malformations, the method, the words naming the field)
    "reset": (OBS_MALFORMATIONS, "reset", "field obs"),
    "obs": (OBS_MALFORMATIONS, "step", "field obs"),
    "reward": (NUMBER_MALFORMATIONS, "step", "field reward"),
    "parts.outcome": (NUMBER_MALFORMATIONS, "step", "field parts['outcome']"),
    "parts.n_subagents": (NUMBER_MALFORMATIONS, "step", "field parts['n_subagents']"),
    "terminated": (FLAG_MALFORMATIONS, "step", "field terminated"),
    "truncated": (FLAG_MALFORMATIONS, "step", "field truncated"),
}
EXTERNAL_CASES = [pytest.param(value, name, fn, ok, id=f"{value}-{name}")
                  for value, (table, _, _) in EXTERNAL_VALUES.items() for name, fn, ok in table]


@pytest.mark.parametrize("value, name, fn, accepted", EXTERNAL_CASES)
def test_an_external_worlds_value_is_refused_naming_world_actor_task_and_field_or_converted(
        value, name, fn, accepted) -> None:
    _, method, field = EXTERNAL_VALUES[value]
    if accepted:
        _xprobe(_xworld({value: fn}))
        _xsteps(_xworld({value: fn}, at=3))
        _xstream(_xworld({value: fn}, at=3))
        return
    with pytest.raises(ExternalWorldError) as err:  # at the probe (the first reset or step)
        _xprobe(_xworld({value: fn}))
    _assert_one_line(err.value, "external world UserXWorld actor 0 on task 'a-0'", f"{method} returned", field, "must")
    with pytest.raises(ExternalWorldError) as err:  # later: after the first episodes ended
        _xsteps(_xworld({value: fn}, at=3))
    _assert_one_line(err.value, "external world UserXWorld actor ", f"{method} returned", field, "must")
    with pytest.raises(ExternalWorldError) as err:  # the per-actor interface reads them with the same parsers
        _xstream(_xworld({value: fn}, at=3))
    _assert_one_line(err.value, "external world UserXWorld actor ", f"{method} returned", field, "must")


class XAnswer(NamedTuple):
    obs: Any
    reward: Any
    terminated: Any
    truncated: Any
    parts: Any


EXTERNAL_CONTAINER_CASES = [  # (value, name, fn, accepted, the words the refusal says)
    ("answer", "list", lambda a: list(a), True, ""),
    ("answer", "namedtuple", lambda a: XAnswer(*a), True, ""),
    ("answer", "4-tuple", lambda a: a[:4], False, "it must return (obs, reward, terminated, truncated, parts)"),
    ("answer", "6-tuple", lambda a: a + ({},), False, "it must return (obs, reward, terminated, truncated, parts)"),
    ("answer", "None", lambda a: None, False, "returned None (NoneType); it must return"),
    ("answer", "dict-of-5", lambda a: dict(zip(XAnswer._fields, a)), False, "(dict); it must return"),
    ("answer", "str-of-5", lambda a: "abcde", False, "(str); it must return"),
    ("answer", "generator", lambda a: (x for x in a), False, "(generator); it must return"),
    ("answer", "numpy-array", lambda a: np.array(a, dtype=object), False, "(ndarray); it must return"),
    ("answer", "reward-and-terminated-swapped", lambda a: (a[0], a[2], a[1], a[3], a[4]), False,
     "field reward must be a finite number (is the answer in the order"),
    ("answer", "gymnasium-info-for-parts", lambda a: (*a[:4], {"info": 1}), False, "unknown fields ['info']"),
    ("parts", "list", lambda p: list(p.values()), False, "field parts must be None or a mapping"),
    ("parts", "tuple", lambda p: tuple(p.values()), False, "field parts must be None or a mapping"),
    ("parts", "EpisodeParts", lambda p: EpisodeParts(*[torch.zeros(1)] * 7), False, "field parts must be None"),
    ("parts", "tensor", lambda p: torch.zeros(6), False, "field parts must be None or a mapping"),
    ("parts", "str", lambda p: "x", False, "field parts must be None or a mapping"),
    ("parts", "unknown-key", lambda p: {**p, "speed": 1.0}, False, "unknown fields ['speed']"),
    ("parts", "task-key", lambda p: {**p, "task": 0}, False, "unknown fields ['task']"),
    ("parts", "int-and-str-keys", lambda p: {1: 0.5, "x": 1.0}, False, "unknown fields ['x', 1]"),
    ("parts", "negative-count", lambda p: {**p, "n_subagents": -1.0}, False, "must be >= 0"),
    ("parts", "outcome-above-one", lambda p: {**p, "outcome": 1.5}, False, "must be in [0, 1]"),
    ("parts", "empty", lambda p: {}, True, ""),
    ("parts", "None", lambda p: None, True, ""),
]


@pytest.mark.parametrize("value, name, fn, accepted, says", [pytest.param(*c, id=f"{c[0]}-{c[1]}")
                                                             for c in EXTERNAL_CONTAINER_CASES])
def test_an_external_worlds_answer_or_parts_of_another_shape_is_named(value, name, fn, accepted, says) -> None:
    if accepted:
        _xprobe(_xworld({value: fn}))
        _xsteps(_xworld({value: fn}, at=3))
        return
    for cls, where in ((_xworld({value: fn}), "actor 0 on task 'a-0'"), (_xworld({value: fn}, at=3), "actor ")):
        with pytest.raises(ExternalWorldError) as err:
            _xprobe(cls) if where.endswith("'a-0'") else _xsteps(cls)
        _assert_one_line(err.value, f"external world UserXWorld {where}", "step returned", says)


EXTERNAL_ATTRIBUTE_CASES = [  # (name, class attributes, accepted, the words the refusal says)
    ("observation_shape-int", {"observation_shape": 3}, False, "UserXWorld.observation_shape is 3"),
    ("observation_shape-empty", {"observation_shape": ()}, False, "UserXWorld.observation_shape is ()"),
    ("observation_shape-zero", {"observation_shape": (0,)}, False, "UserXWorld.observation_shape is (0,)"),
    ("observation_shape-ndarray", {"observation_shape": np.array([3])}, False, "UserXWorld.observation_shape is array"),
    ("observation_shape-None", {"observation_shape": None}, False, "UserXWorld.observation_shape is None"),
    ("observation_shape-numpy-ints", {"observation_shape": (np.int64(3),)}, True, ""),
    ("observation_shape-torch.Size", {"observation_shape": torch.Size([3])}, True, ""),
    ("action_spec-mapping", {"action_spec": {"kind": "discrete", "nvec": [2]}}, True, ""),
    ("action_spec-mapping-without-kind", {"action_spec": {"nvec": [2]}}, False,
     "data.env.world: UserXWorld.action_spec: the mapping {'nvec': [2]} has no `kind`"),
    ("action_spec-mapping-unknown-key", {"action_spec": {"kind": "discrete", "nvec": [2], "n": 2}}, False,
     "UserXWorld.action_spec: the mapping"),
    ("action_spec-mapping-bad-kind", {"action_spec": {"kind": "discret", "nvec": [2]}}, False,
     "UserXWorld.action_spec: ActionSpec.kind: 'discret' is not a kind"),
    ("action_spec-mapping-nvec-str", {"action_spec": {"kind": "discrete", "nvec": "2"}}, False,
     "UserXWorld.action_spec: ActionSpec.nvec"),
    ("action_spec-None", {"action_spec": None}, False, "UserXWorld.action_spec must be an ActionSpec or a mapping"),
    ("action_spec-str", {"action_spec": "discrete"}, False, "UserXWorld.action_spec must be an ActionSpec"),
    ("tasks-ints", {"tasks": [0, 1]}, False, "UserXWorld.tasks holds 0 (int)"),
    ("tasks-duplicate", {"tasks": ["a-0", "a-0"]}, False, "UserXWorld.tasks lists 'a-0' twice"),
    ("tasks-empty-string", {"tasks": ["a-0", ""]}, False, "UserXWorld.tasks holds ''"),
    ("tasks-None-inside", {"tasks": ["a-0", None]}, False, "UserXWorld.tasks holds None"),
    ("tasks-generator", {"tasks": (t for t in ["a-0", "a-1"])}, False, "UserXWorld.tasks is generator"),
    ("tasks-dict", {"tasks": {"a-0": 1}}, False, "UserXWorld.tasks is dict"),
    ("tasks-set", {"tasks": {"a-0", "a-1"}}, False, "UserXWorld.tasks is set"),
    ("tasks-ndarray", {"tasks": np.array(["a-0", "a-1"])}, False, "UserXWorld.tasks is ndarray"),
    ("tasks-str", {"tasks": "a-0"}, False, "UserXWorld.tasks is str"),
    ("tasks-empty", {"tasks": []}, False, "UserXWorld.tasks is empty"),
    ("tasks-tuple", {"tasks": ("a-0", "a-1")}, True, ""),
    ("solved_threshold-two", {"solved_threshold": 2.0}, False, "data.env.world: UserXWorld.solved_threshold: must be"),
    ("solved_threshold-str", {"solved_threshold": "x"}, False, "data.env.world: UserXWorld.solved_threshold: must be"),
    ("max_subagents-zero", {"max_subagents": 0}, False, "data.env.world: UserXWorld.max_subagents: must be"),
]


@pytest.mark.parametrize("name, attrs, accepted, says", [pytest.param(*c, id=c[0]) for c in EXTERNAL_ATTRIBUTE_CASES])
def test_an_external_worlds_attributes_are_checked_naming_the_world(name, attrs, accepted, says) -> None:
    cls = _xworld({}, **attrs)
    if accepted:
        _xprobe(cls)
        return
    with pytest.raises(ConfigError) as err:
        _xprobe(cls)
    _assert_one_line(err.value, says)


# ================================================================================== the CLI, end to end
class ReplyAtStep3(MatrixWorld):
    """Right at the probe; at step 3 of the run its parts' task turns complex64 (a traceback from the
    rollout buffer's stack before the checks shared with the probe)."""

    bad = {"parts.task": lambda g, w: g.to(torch.complex64)}
    at = 3


class SparseRewardWorld(MatrixWorld):
    bad = {"reward": lambda g, w: g.to_sparse()}


class NaNReset(MatrixWorld):
    bad = {"reset": lambda g, w: torch.full_like(g, math.nan)}


class EveryAcceptedValue(MaskedWorld):
    """Every accepted malformation at once (a different one per value), from the first call on, with
    a sparse tensor and a graph in its state: it must train, checkpoint and resume."""

    episode = 3
    bad = {"reset": lambda g, w: (g * torch.nn.Parameter(torch.ones(1))),  # a graph from a parameter
           "obs": lambda g, w: torch.nn.Parameter(g.clone()),
           "final_obs": lambda g, w: g[:1].expand_as(g),
           "reward": lambda g, w: g.double().as_subclass(MyTensor),
           "terminated": lambda g, w: _noncontiguous(g),
           "truncated": lambda g, w: g.clone().as_subclass(MyTensor),
           "parts.task": lambda g, w: g.to(torch.int16),
           "parts.outcome": lambda g, w: g.clone().requires_grad_(),
           "parts.n_subagents": lambda g, w: g.to(torch.uint8),
           "parts.serial_steps": lambda g, w: g.to(torch.bfloat16),
           "mask": lambda g, w: g[:1].expand_as(g)}

    def state_dict(self):
        return {"seen": torch.ones(3).to_sparse(), "w": torch.ones(2, requires_grad=True) * 2}

    def load_state_dict(self, state):
        assert state["seen"].layout == torch.sparse_coo


class XNaNLater(XWorld):
    bad = {"obs": lambda g: [math.nan] * 3}
    at = 3


def _fit_in_process(capsys, root: Path, world: str, *extra: str) -> Optional[str]:
    """`python -m parlightning.fit` in this process; the one error line (SystemExit's), or None."""
    from parlightning.cli.fit import main

    args = ["--data.env", world, "--data.num_envs", "4", "--data.num_steps", "4", "--trainer.max_epochs", "2",
            "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(root), *extra]
    try:
        main(args)
    except SystemExit as exit_:
        message = exit_.code
        assert isinstance(message, str) and message.startswith("error: ") and "\n" not in message, message
        stderr = capsys.readouterr().err
        assert "Traceback" not in stderr and "error:" not in stderr, stderr[-2000:]
        return message
    return None


@pytest.mark.parametrize("world, says", [
    ("SparseRewardWorld", "SparseRewardWorld.step returned StepResult.reward as a sparse_coo tensor"),
    ("NaNReset", "NaNReset.reset returned observations holding NaN or inf"),
    ("ReplyAtStep3", "ReplyAtStep3.step returned StepResult.parts.task of dtype torch.complex64 at step 3"),
])
def test_the_cli_ends_a_bad_tensor_world_with_one_line_and_nothing_written(tmp_cwd, capsys, monkeypatch, world, says):
    monkeypatch.syspath_prepend(str(TESTS))
    message = _fit_in_process(capsys, tmp_cwd / "runs", f"{__name__}.{world}")
    assert message is not None and says in message, message
    assert not list((tmp_cwd / "runs").rglob("*")), list((tmp_cwd / "runs").rglob("*"))  # nothing written


def test_the_cli_ends_a_bad_external_world_with_one_line_and_nothing_written(tmp_cwd, capsys, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(TESTS))
    world = f"{{world: {__name__}:XNaNLater, step_timeout: 20}}"
    message = _fit_in_process(capsys, tmp_cwd / "runs", "parlightning.envs.external.ExternalBatchedEnv",
                              "--data.env.init_args", world)
    assert message is not None and "external world XNaNLater actor " in message and "field obs must be finite" \
        in message, message
    assert not list((tmp_cwd / "runs").rglob("*")), list((tmp_cwd / "runs").rglob("*"))


def test_a_world_returning_every_accepted_value_trains_checkpoints_and_resumes(tmp_cwd, capsys, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(TESTS))
    root = tmp_cwd / "runs"
    assert _fit_in_process(capsys, root, f"{__name__}.EveryAcceptedValue") is None
    (ckpt,) = root.rglob("last.ckpt")
    saved = torch.load(ckpt, weights_only=True)  # a checkpoint loads without unpickling a subclass
    ranks = saved["RolloutDataModule"]["ranks"][0]
    assert type(ranks["obs"]) is torch.Tensor and not ranks["obs"].requires_grad
    assert _fit_in_process(capsys, root, f"{__name__}.EveryAcceptedValue", "--trainer.max_epochs", "3",
                           "--ckpt_path", str(ckpt)) is None


def test_one_real_cli_run_prints_one_error_line_exits_1_and_writes_nothing(tmp_path) -> None:
    """The same as the in-process runs above, through `python -m parlightning.fit` in its own process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}
    proc = subprocess.run([sys.executable, "-m", "parlightning.fit", "--data.env",
                           "test_world_values_enumerated.ReplyAtStep3", "--data.num_envs", "4", "--data.num_steps", "4",
                           "--trainer.max_epochs", "2", "--trainer.enable_progress_bar", "false",
                           "--trainer.default_root_dir", str(tmp_path / "runs")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr[-3000:]
    assert "ReplyAtStep3.step returned StepResult.parts.task of dtype torch.complex64" in lines[0], lines[0]
    assert "Traceback" not in proc.stderr
    assert not list((tmp_path / "runs").rglob("*")), list((tmp_path / "runs").rglob("*"))


# ------------------------------------------------------------- the task each actor runs (round 11's leftovers)
class IgnoresNextTask(MatrixWorld):
    """Restarts finished actors on tasks of its own: never calls next_task."""

    def step(self, action, next_task=None):
        return super().step(action, None)


class ReportsTaskZero(MatrixWorld):
    """Calls next_task but reports every ended episode as task 0 (actors on task 1 too)."""

    def step(self, action, next_task=None):
        res = super().step(action, next_task)
        return res._replace(parts=res.parts._replace(task=torch.zeros_like(res.parts.task)))


class ReordersItsBank(MatrixWorld):
    """Reverses its task bank at its 6th step call (the second rollout of 4 steps)."""

    def step(self, action, next_task=None):
        if self.calls == 5:
            self.task_ids = list(reversed(self.task_ids))
        return super().step(action, next_task)


class CallsNextTaskOnlyWhenSomeEnd(MatrixWorld):
    """A correct world that reads `done` on the host and calls next_task only when an episode ended."""

    def step(self, action, next_task=None):
        ending = bool((self.t + 1 >= self.episode).any())
        return super().step(action, next_task if ending else None)


@pytest.mark.parametrize("cls, says", [
    (IgnoresNextTask, r"IgnoresNextTask.step ended an episode of actor 0 without starting it on the sampler's next "
                      r"task, in rollout 0 \(it never called next_task\); a world with task_ids must call next_task"),
    (ReportsTaskZero, r"ReportsTaskZero.step ended an episode of actor 1 without starting it on the sampler's next "
                      r"task, in rollout 0 \(next_task was not called in that step, or the actor did not start"),
    (ReordersItsBank, r"ReordersItsBank.task_ids changed during rollout 1 \(position 0: 'a-0' is now 'a-1'\); the "
                      r"task bank is read once"),
])
def test_a_world_must_run_the_tasks_the_sampler_gave_and_keep_its_bank(cls, says):
    with pytest.raises(ReportedError, match=r"^data.env: " + says):
        _collect(cls)
    _collect(CallsNextTaskOnlyWhenSomeEnd, rounds=3)  # next_task only in steps where episodes end: a good world
