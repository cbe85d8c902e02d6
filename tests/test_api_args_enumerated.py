"""Every public callable x every class of bad argument (issue 27, the Python API): each function,
constructor, method and classmethod that `__all__`, the README and docs/guides point users to is
called with a valid set of arguments in which one argument at a time is replaced by a value of each
malformation class (another kind, None, a string, a list where a tensor goes, a class where an
instance goes and back, sparse / meta / complex / nested tensors, the wrong dtype or rank, negative /
zero / NaN / inf / bool numbers, ids outside the bank or duplicated, payloads that cannot be
serialised, missing files and folders, the wrong call order). Each must be one package exception
(`ConfigError` / `ReportedError`, so `ArgumentError`, `LifecycleError`...) whose message names the
argument. The checked surface's spec-derived bad values are `test_method_args_enumerated`'s; this file
adds the classes those derive nothing for (tensor layouts on every tensor argument, the less-used
functions, serialisation, files, order). No Trainer.fit: each case is refused before anything runs."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch

from parlightning.envs.base import ActionArg
from parlightning.errors import ConfigError, ReportedError
from parlightning.method_args import TensorArg, specs_of

BAD_LAYOUTS = ("sparse", "meta", "complex", "nested")


def _layout(kind: str, good: torch.Tensor) -> torch.Tensor:
    """`good` (a valid argument) in a layout / dtype no public method computes with."""
    if kind == "sparse":
        return good.to_sparse() if good.dim() else good.reshape(1).to_sparse()
    if kind == "meta":
        return good.to("meta")
    if kind == "complex":
        return good.to(torch.complex64)
    return torch.nested.nested_tensor([good.float().reshape(-1), good.float().reshape(-1)])


# ------------------------------------------------------------------ tensor layouts on every tensor argument
def _good_tensor(spec, obj) -> "torch.Tensor | None":
    """A tensor `spec` accepts on `obj` (dims from the object's sizes), or None when none is derivable."""
    if isinstance(spec, ActionArg):  # a world's step(action)
        spec_ = obj.action_spec
        return torch.zeros((obj.num_envs, *spec_.action_shape), dtype=torch.long if spec_.is_discrete else torch.float32,
                           device=obj.device)
    if not isinstance(spec, TensorArg) or not isinstance(spec.shape, tuple):
        return None
    dims = []
    for d in spec.shape:
        if d is Ellipsis:
            continue
        if isinstance(d, str) and d.startswith("*"):
            known = getattr(obj, d[1:], None)
            if known is None:
                return None
            dims += list(known)
        elif isinstance(d, str) and d.isupper():
            dims.append(3)
        elif isinstance(d, str) or callable(d):
            from parlightning.method_args import _size

            dims.append(int(_size(obj, d)))
        else:
            dims.append(2 if d is None else d)
    kind = (spec.dtype or ("float",))[0]
    dtype = {"int": torch.long, "float": torch.float32, "bool": torch.bool, "number": torch.float32}[kind]
    device = getattr(obj, "device", "cpu") if obj is not None else "cpu"
    return torch.zeros(dims, dtype=dtype, device=device)


def _tensor_cases():
    from tests.test_method_args_enumerated import FUNCTIONS, SURFACE, public_methods

    for cls in SURFACE:
        for name, fn in public_methods(cls):
            found = specs_of(fn)
            for arg, spec in (found[0] if found else {}).items():
                if isinstance(spec, ActionArg) or (isinstance(spec, TensorArg) and isinstance(spec.shape, tuple)):
                    yield pytest.param(cls, name, arg, id=f"{cls.__name__}.{name}({arg})")
    for fn in FUNCTIONS:
        for arg, spec in specs_of(fn)[0].items():
            if isinstance(spec, TensorArg) and isinstance(spec.shape, tuple):
                yield pytest.param(None, fn, arg, id=f"{fn.__name__}({arg})")


_BUILT: dict = {}


def _instance(cls):
    from tests.test_method_args_enumerated import SURFACE

    if cls not in _BUILT:
        _BUILT[cls] = SURFACE[cls]()
    return _BUILT[cls]


@pytest.fixture(scope="module", autouse=True)
def _close_built():
    yield
    for obj in _BUILT.values():
        getattr(obj, "close", lambda: None)()


def _refused(call, arg: str) -> str:
    """`call()` raises a package error naming `arg`: '' when so, else what happened (for the message)."""
    try:
        result = call()
        if hasattr(result, "__await__"):
            import asyncio

            asyncio.run(result)
    except (ConfigError, ReportedError) as err:
        text = str(err)
        return "" if arg in text and "\n" not in text.strip() else f"{type(err).__name__} not naming {arg}: {text[:200]}"
    except BaseException as err:  # noqa: BLE001 - what is being counted
        return f"raw {type(err).__name__}: {str(err)[:200]}"
    return "accepted"


@pytest.mark.parametrize("cls, method, arg", list(_tensor_cases()))
def test_a_tensor_argument_in_another_layout_is_refused_naming_it(cls, method, arg) -> None:
    """Every tensor argument of the checked surface: a sparse, meta, complex or nested tensor of the
    accepted shape is one package error naming the argument (metadata only: O(1))."""
    obj = None if cls is None else _instance(cls)
    fn = method if cls is None else getattr(obj, method)
    spec = specs_of(fn)[0][arg]
    good = _good_tensor(spec, obj)
    if good is None:
        pytest.skip("no valid tensor derivable from the spec")
    faults = []
    for kind in BAD_LAYOUTS:
        if kind == "complex" and getattr(spec, "dtype", "action") is None:
            continue
        if kind == "meta" and obj is None:  # a pure function given only meta tensors computes shapes: valid
            continue
        bad = _layout(kind, good)
        why = _refused(lambda: fn(**{arg: bad}), arg)
        if why:
            faults.append(f"{kind}: {why}")
    assert not faults, faults


# ------------------------------------------------------------------ the less-used public callables
def _swarm():
    from parlightning.envs.swarm import SwarmEnv

    env = SwarmEnv(num_envs=2)
    env.reset(seed=0)
    return env


def _policy():
    from tests.test_method_args_enumerated import _policy as make

    return make()


def _bound_round_robin():
    from parlightning.distribution.samplers import RoundRobin

    s = RoundRobin()
    s.bind(["solo-0", "solo-1"], torch.device("cpu"))
    return s


def _world():
    from parlightning.subagents import SimulatedPool
    from parlightning.subagents.world import PoolOrchestrationWorld

    w = PoolOrchestrationWorld(SimulatedPool())
    w.reset("solo-0")
    return w


def _external():
    from tests.test_method_args_enumerated import SURFACE
    from parlightning.envs.external import ExternalBatchedEnv

    return SURFACE[ExternalBatchedEnv]()


def _process_pool():
    from parlightning.subagents.process import ProcessPool

    return ProcessPool(fn="parlightning.subagents.examples:skill_matcher", workers=1)


def _local_function():
    def local():
        return None

    return local


UNPICKLABLE = {"lambda": lambda: None, "local function": _local_function()}
HERE = Path(__file__).parent


# label -> (callable(args...) -> what to call, {arg: [bad values]}, valid kwargs)
def _cases() -> dict:
    from parlightning.analysis.logs import read_scalars
    from parlightning.cli.packaged import config_path
    from parlightning.collection import stream_seed
    from parlightning.distribution.samplers import RoundRobin, as_batched
    from parlightning.distribution.strategies import DataParallel, TensorParallel, checked_plan, family_of, unit_for
    from parlightning.envs import ActionSpec
    from parlightning.envs.external import build_shared
    from parlightning.analysis.trace import write_trace
    from parlightning.distribution.strategies import WorkUnit, assign_key_sections
    from parlightning.parl.reward import PARLReward
    from parlightning.ppo.data import RolloutDataModule
    from parlightning.ppo.module import PPOModule
    from parlightning.runtime.waits import expected_wait

    def enter(seconds, what):
        with expected_wait(seconds, what):
            pass

    one = torch.ones(4)
    return {
        "Policy.predict": (lambda: _policy().predict, {
            "obs": [None, "x", *(_layout(k, torch.zeros(4, 13, 6)) for k in BAD_LAYOUTS)]},
            {"obs": torch.zeros(4, 13, 6)}),
        "PARLReward.__call__": (lambda: PARLReward(8), {
            "n_subagents": [None, "x", torch.ones(3), *(_layout(k, one) for k in ("sparse", "meta", "nested"))],
            "outcome": [None, torch.ones(5, 2)]},
            {"n_subagents": one, "assigned": one, "completed": one, "outcome": one}),
        "PARLReward.bonus": (lambda: PARLReward(8).bonus, {"completed": [torch.ones(3)]},
                             {"n_subagents": one, "assigned": one, "completed": one}),
        "PoolOrchestrationWorld.step": (lambda: _world().step, {
            "action": [[0], [0, 0, 0, 0], [0, 0, 99], [0, 0, -1], None, "abc", [0.5, 0, 0], [True, 0, 0]]},
            {"action": [0, 0, 0]}),
        "PoolOrchestrationWorld.reset": (lambda: _world().reset, {"task": ["nope-0", 3]}, {"task": "solo-0"}),
        "RoundRobin.pick_batch": (lambda: _bound_round_robin().pick_batch, {
            "shard": [torch.tensor([5]), torch.tensor([-1]), torch.tensor([0, 2])]},
            {"shard": torch.tensor([0, 1]), "round_index": 0, "reset_mask": torch.ones(2, dtype=torch.bool)}),
        "ExternalBatchedEnv.send": (lambda: _external().send, {
            "actors": [[0, 0], [0, 5], [-1, 0], None, "ab", [0.5, 1], [True, 1]]},
            {"actors": [0, 1], "action": torch.zeros(2, 3, dtype=torch.long)}),
        "ProcessPool.spawn": (lambda: _process_pool().spawn, {
            "instruction": [{"skill": 0, "instruction": 0, "cost": 1, "on_done": f} for f in UNPICKLABLE.values()]},
            {"instruction": {"skill": 0, "instruction": 0, "cost": 1}}),
        "read_scalars": (lambda: read_scalars, {"logdir": ["no_such_run", None, 3, __file__]},
                         {"logdir": str(HERE)}),
        "write_trace": (lambda: write_trace, {
            "records": [[{"episode": 0, "obs": torch.zeros(2)}], [{"episode": 0, "f": lambda: 0}], [3], None, "abc"],
            "path": [None, 3, "/no/such/folder/t.jsonl"],
            "policy": [object(), torch.zeros(2)]},
            {"records": [{"episode": 0}], "path": os.devnull, "policy": "oracle"}),
        "expected_wait": (lambda: enter, {"seconds": [0, -1.0, math.nan, math.inf, "5", None, True],
                                          "what": [None, 3]}, {"seconds": 1.0, "what": "the judge"}),
        "WorkUnit": (lambda: WorkUnit, {"worker": [True, -1, "0", None, 1.5], "keys": [None, "abc", [1], 3],
                                        "stage": [-1, True, "1"], "section": [-1, True, "1"]},
                     {"worker": 0, "keys": ("solo-0",)}),
        "assign_key_sections": (lambda: assign_key_sections, {
            "keys": [None, "abc", [1, 2], ["a", "a"], 3], "n_sections": [0, -1, True, 2.5, None, "2", 5]},
            {"keys": ["a", "b", "c"], "n_sections": 2}),
        "RolloutDataModule": (lambda: RolloutDataModule, {
            "env": [_swarm(), 3, "swarm"], "sampler": [_bound_round_robin, 3, "RoundRobin"]},
            {"num_envs": 2, "num_steps": 4}),
        "PPOModule.training_step": (lambda: PPOModule().training_step, {
            "batch": [{"obs": torch.zeros(4, 4), "actions": torch.zeros(4, dtype=torch.long)}]},
            {"batch": {"obs": torch.zeros(4, 4)}, "batch_idx": 0}),
        "PPOModule.load_from_checkpoint": (lambda: PPOModule.load_from_checkpoint, {
            "checkpoint_path": [None, 3],
            "lr": [-1.0, math.nan, "x"], "hidden_sizes": ["abc", [-1]], "no_such_hparam": [1]},
            {"checkpoint_path": "/no/such/m.ckpt"}),  # the overrides are checked before the file
        "ActionSpec": (lambda: ActionSpec, {"kind": ["bad", None, 3], "nvec": ["abc", (-1,), 3, None, (1.5,)]},
                       {"kind": "multi_discrete", "nvec": (3,)}),
        "build_shared": (lambda: build_shared, {"specs": [3, [1], "abc"]}, {"specs": None}),
        "stream_seed": (lambda: stream_seed, {"stream": ["nope", 3, None], "seed": ["x", None, 1.5]},
                        {"seed": 0, "stream": "env"}),
        "family_of": (lambda: family_of, {"task_id": [None, 3, "nodash"]}, {"task_id": "solo-0"}),
        "checked_plan": (lambda: checked_plan, {
            "strategy": [None, DataParallel, 3], "n_workers": [0, -1, True, "2"], "round_index": [-1, "0"],
            "keys": [None, "abc", [], ["a-0", "a-0"], 3]},
            {"strategy": DataParallel(), "n_workers": 1, "round_index": 0, "keys": ["a-0", "b-0"]}),
        "unit_for": (lambda: unit_for, {"worker": [5, -1, True, "0"]},
                     {"strategy": DataParallel(), "n_workers": 2, "round_index": 0, "keys": ["a-0", "b-0"], "worker": 0}),
        "as_batched": (lambda: as_batched, {"sampler": [None, RoundRobin, 3], "queue_length": [0, -1, True, "4"]},
                       {"sampler": RoundRobin(), "queue_length": 4}),
        "config_path": (lambda: config_path, {"name": [None, 3]}, {"name": "swarm"}),
        "TensorParallel": (lambda: TensorParallel, {"keys": [["a", "a"], "ab"]}, {"n_sections": 2, "keys": ["a", "b"]}),
    }


CASES = None
# the word the message names where it is not the argument's own name (a call order: the method)
NAMED = {("PPOModule.training_step", "batch"): "training_step", ("PPOModule.load_from_checkpoint", "checkpoint_path"):
         "checkpoint"}


def _case_ids():
    """(label, arg) pairs without building anything (collection stays cheap)."""
    names = {
        "Policy.predict": ["obs"], "PARLReward.__call__": ["n_subagents", "outcome"], "PARLReward.bonus": ["completed"],
        "PoolOrchestrationWorld.step": ["action"], "PoolOrchestrationWorld.reset": ["task"],
        "RoundRobin.pick_batch": ["shard"], "ExternalBatchedEnv.send": ["actors"], "ProcessPool.spawn": ["instruction"],
        "read_scalars": ["logdir"], "write_trace": ["records", "path", "policy"],
        "expected_wait": ["seconds", "what"], "WorkUnit": ["worker", "keys", "stage", "section"],
        "assign_key_sections": ["keys", "n_sections"], "RolloutDataModule": ["env", "sampler"],
        "PPOModule.training_step": ["batch"],
        "PPOModule.load_from_checkpoint": ["checkpoint_path", "lr", "hidden_sizes", "no_such_hparam"],
        "ActionSpec": ["kind", "nvec"], "build_shared": ["specs"], "stream_seed": ["stream", "seed"],
        "family_of": ["task_id"], "checked_plan": ["strategy", "n_workers", "round_index", "keys"],
        "unit_for": ["worker"], "as_batched": ["sampler", "queue_length"], "config_path": ["name"],
        "TensorParallel": ["keys"],
    }
    return [pytest.param(label, arg, id=f"{label}({arg})") for label, args in names.items() for arg in args]


def _build_call(label: str, target, kwargs: dict):
    """What calling `label` with `kwargs` does (a data module is built too: a factory is used then)."""
    if label == "RolloutDataModule":
        def call():
            dm = target(**kwargs)
            dm.build(torch.device("cpu"))
            dm.teardown("fit")
        return call
    if label == "PPOModule.training_step":
        return lambda: target(kwargs["batch"], kwargs["batch_idx"])
    if label == "PPOModule.load_from_checkpoint":
        kw = dict(kwargs)
        path = kw.pop("checkpoint_path")
        return lambda: target(path() if callable(path) else path, **kw)
    return lambda: target(**kwargs)


@pytest.mark.parametrize("label, arg", _case_ids())
def test_a_bad_argument_of_a_less_used_callable_is_one_package_error_naming_it(label, arg) -> None:
    global CASES
    if CASES is None:
        CASES = _cases()
    make, bad, valid = CASES[label]
    faults = []
    for value in bad[arg]:
        target = make()
        try:
            kwargs = {**valid, arg: value}
            why = _refused(_build_call(label, target, kwargs), NAMED.get((label, arg), arg))
        finally:
            owner = getattr(target, "__self__", target)
            if not isinstance(owner, type):
                getattr(owner, "close", lambda: None)()
        if why:
            faults.append(f"{value!r:.60}: {why}")
    assert not faults, faults
