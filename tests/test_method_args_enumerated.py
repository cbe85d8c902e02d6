"""Every public method of every public class the README and the guides point users to, and the
public functions, refuse a bad argument with one package exception (`ArgumentError`, a
`ConfigError`) naming `Class.method(arg)` (or `function(arg)`): the surface is enumerated from the
classes (every public method defined in the package, inherited ones included), each method must be
checked at entry (`parlightning.method_args`) or sit in `NOT_WRAPPED` with its reason, and the bad
values are derived from each argument's check, so a method or argument added later is covered
without a new case. Plus the lifecycle: after `close()` every public method of each pool is one
`PoolClosedError` naming the pool, and a world stepped before `reset()` one `LifecycleError` (every
wrong state: `test_lifecycle_enumerated`; here each object is built in the state its methods need)."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

from parlightning.analysis import pipeline, stats, trace
from parlightning.analysis.pipeline import PipelineChain
from parlightning.buffer import RolloutBuffer, compute_gae
from parlightning.cli import evaluate, export
from parlightning.config_types import constraint_of, plain_of
from parlightning.distribution.samplers import DifficultyWeighted, PosteriorSignal, RoundRobin, SamplingForLearnability
from parlightning.distribution.strategies import ClusterParallel, DataParallel, TensorParallel
from parlightning.envs.base import ActionArg, NextTaskArg, TaskIndexArg
from parlightning.envs.cartpole import CartPoleEnv
from parlightning.envs.external import ExternalBatchedEnv
from parlightning.envs.gym import GymVectorEnv
from parlightning.envs.memory import CueMemoryEnv
from parlightning.envs.normalize import NormalizeEnv
from parlightning.envs.swarm import SwarmEnv
from parlightning.errors import ArgumentError, ConfigError, LifecycleError
from parlightning.inference import Policy, load_policy
from parlightning.method_args import (AllOf, Annotated, IndexArg, Is, ItemsArg, MappingArg, OneOf, Passed, PathArg,
                                      Serialisable, TensorArg, specs_of)
from parlightning.parl.metrics import CriticalSteps, stage_critical_steps
from parlightning.parl.reward import ConstantSchedule, CosineSchedule, LinearSchedule, PARLReward
from parlightning.ppo.data import DATA_HOOKS, RolloutDataModule
from parlightning.ppo.loss import ppo_loss
from parlightning.ppo.module import MODULE_HOOKS, PPOModule
from parlightning.subagents.async_http import AsyncHTTPPool
from parlightning.subagents.http import HTTPPool
from parlightning.subagents.pool import PoolClosedError, SimulatedPool, TimeoutArg
from parlightning.subagents.process import ProcessPool
from parlightning.subagents.world import AsyncPoolOrchestrationWorld, PoolOrchestrationWorld

URL = "http://127.0.0.1:9"  # never contacted: probe=False, and every case is refused before a request


def _policy() -> Policy:
    module = PPOModule()
    env = SwarmEnv(num_envs=2)
    return Policy(module.build_policy(env.observation_shape, env.action_spec), None, env.observation_shape)


def _reset(env):
    env.reset(seed=0)
    return env


def _serial(obs):
    return torch.zeros(obs.shape[0], 12, dtype=torch.long)


def _ready(obj, *calls):
    """`obj` after the calls its methods need first (its lifecycle, `test_lifecycle_enumerated`): the
    arguments are checked on an object in a valid state (a wrong state is refused before them)."""
    import asyncio
    import inspect as _inspect

    for make in calls:
        result = make(obj)
        if _inspect.iscoroutine(result):
            asyncio.run(result)
    return obj


def _trained_module():
    import lightning.pytorch as pl

    module = PPOModule()
    module.trainer = pl.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                enable_model_summary=False)
    return module


BIND = (lambda s: s.bind(["a-0", "a-1", "b-0"], torch.device("cpu")),)


# class -> how to build a valid one, in the state its methods need (the surface the README and docs/guides name)
SURFACE = {
    SwarmEnv: lambda: _reset(SwarmEnv(num_envs=4)),
    CartPoleEnv: lambda: _reset(CartPoleEnv(num_envs=2)),
    CueMemoryEnv: lambda: _reset(CueMemoryEnv(num_envs=2)),
    GymVectorEnv: lambda: _reset(GymVectorEnv(num_envs=2, env_id="CartPole-v1")),
    NormalizeEnv: lambda: _reset(NormalizeEnv(num_envs=2, env=CartPoleEnv)),
    ExternalBatchedEnv: lambda: _reset(ExternalBatchedEnv(2, world="parlightning.subagents.PoolOrchestrationWorld",
                                                          world_kwargs={"pool": SimulatedPool()})),
    PoolOrchestrationWorld: lambda: _ready(PoolOrchestrationWorld(pool=SimulatedPool()), lambda w: w.reset(None)),
    AsyncPoolOrchestrationWorld: lambda: _ready(AsyncPoolOrchestrationWorld(pool=SimulatedPool()), lambda w: w.reset(None)),
    SimulatedPool: SimulatedPool,
    ProcessPool: lambda: ProcessPool(fn="parlightning.subagents.examples:skill_matcher", workers=1),
    HTTPPool: lambda: HTTPPool(base_url=URL, probe=False),
    AsyncHTTPPool: lambda: AsyncHTTPPool(base_url=URL, probe=False),
    RoundRobin: lambda: _ready(RoundRobin(), *BIND),
    DifficultyWeighted: lambda: _ready(DifficultyWeighted(), *BIND),
    PosteriorSignal: lambda: _ready(PosteriorSignal(), *BIND),
    SamplingForLearnability: lambda: _ready(SamplingForLearnability(), *BIND),
    DataParallel: DataParallel,
    ClusterParallel: lambda: _ready(ClusterParallel(), lambda s: s.bind(["a-0", "a-1", "b-0"])),
    TensorParallel: lambda: TensorParallel(n_sections=2, keys=["a", "b", "c"]),
    PARLReward: lambda: PARLReward(max_subagents=4),
    LinearSchedule: LinearSchedule,
    CosineSchedule: CosineSchedule,
    ConstantSchedule: ConstantSchedule,
    CriticalSteps: CriticalSteps,
    RolloutBuffer: lambda: _ready(RolloutBuffer(4, 2, (3,), (), torch.device("cpu")), lambda b: b.allocate_memory((5,))),
    Policy: _policy,
    PPOModule: _trained_module,
    RolloutDataModule: lambda: _ready(RolloutDataModule(num_envs=2, num_steps=4), lambda d: d.build(torch.device("cpu"))),
    PipelineChain: lambda: PipelineChain(SwarmEnv(num_envs=1), _serial, reference=_serial),
}
# a method whose valid state is not the one SURFACE builds (build needs a data module not built yet)
STATE_FOR = {(RolloutDataModule, "build"): lambda: RolloutDataModule(num_envs=2, num_steps=4)}
FUNCTIONS = [ppo_loss, stage_critical_steps, compute_gae, load_policy, evaluate.run_episodes, evaluate.run_returns,
             evaluate.greedy_action, evaluate.policy_action, evaluate.load_policy, export.load_policy,
             export.load_normalizer, export.export_policy, stats.mean_std, stats.bootstrap_diff_ci, stats.tail_share,
             trace.trace_episodes, trace.write_trace, pipeline.blame_by_kind]
# public methods not checked at entry, each with its reason
NOT_WRAPPED = {
    **{(PPOModule, h): "a Lightning hook or override: Lightning calls it with its own objects" for h in MODULE_HOOKS},
    **{(RolloutDataModule, h): "a Lightning hook: Lightning calls it with its own objects" for h in DATA_HOOKS},
}
CLOSABLE = (SimulatedPool, ProcessPool, HTTPPool, AsyncHTTPPool)


def public_methods(cls):
    """(name, function) of every public method the package defines for `cls` (its own and inherited
    from the package's classes; not properties, not Lightning's / torch's / object's)."""
    out = []
    for name in sorted(dir(cls)):
        if name.startswith("_"):
            continue
        owner = next(k for k in cls.__mro__ if name in vars(k))
        static = vars(owner)[name]
        if not owner.__module__.startswith("parlightning") or isinstance(static, property):
            continue
        if callable(getattr(cls, name)):
            out.append((name, getattr(cls, name)))
    return out


def bad_values(spec, obj):
    """Values `spec` must refuse: another kind, None where it is not optional, a nested list, the wrong
    dtype, shape or device, nan / inf, a negative or a huge int."""
    none = [] if spec.optional else [None]
    if isinstance(spec, (TensorArg, ActionArg)):
        values = ["x", [[1.0]], *none]
        dtypes = getattr(spec, "dtype", None) or ()
        if isinstance(spec, ActionArg):
            dtypes = ("int",) if obj.action_spec.is_discrete else ("float",)
        if dtypes:
            wrong = torch.float32 if "int" in dtypes or "bool" in dtypes else torch.bool
            if "number" in dtypes:
                wrong = torch.bool
            values.append(torch.zeros(2, 3, dtype=wrong))
        shaped = isinstance(spec, ActionArg) or (isinstance(spec.shape, tuple) and spec.shape and spec.shape[0]
                                                 is not Ellipsis and not any(isinstance(d, str) and d.isupper()
                                                                             for d in spec.shape))
        if shaped:
            values.append(torch.zeros(7, 5, 3, dtype=torch.long if "int" in dtypes else torch.float32))
        if isinstance(spec, ActionArg) or spec.device == "self":
            good = (obj.num_envs, *obj.action_spec.action_shape) if isinstance(spec, ActionArg) else None
            if good is not None:
                dtype = torch.long if obj.action_spec.is_discrete else torch.float32
                values.append(torch.zeros(good, dtype=dtype, device="meta"))
        return values
    if isinstance(spec, IndexArg):
        return ["3", 2.5, True, spec.lo - 1, 2**70, math.nan, *none]
    if isinstance(spec, OneOf):
        return ["no-such-choice", 3, *none]
    if isinstance(spec, Is):
        return [object(), *none]
    if isinstance(spec, MappingArg):  # another kind; each declared key missing in turn; a value of the wrong kind
        whole = {key: 1 for key in spec.required}
        return [object(), [1], *none, *({k: v for k, v in whole.items() if k != key} for key in spec.required),
                {**whole, list(spec.required)[-1]: object()}]
    if isinstance(spec, TimeoutArg):
        return ["5", math.nan, True]
    if isinstance(spec, TaskIndexArg):
        return ["x", [[1]], torch.zeros(obj.num_envs), torch.zeros(obj.num_envs + 1, dtype=torch.long),
                [10**9] * obj.num_envs, [2**70] * obj.num_envs] if getattr(obj, "task_ids", None) is not None else []
    if isinstance(spec, NextTaskArg):
        return ["x", 3.5]
    if isinstance(spec, Annotated):
        if spec.kind == "constrained":
            tp = constraint_of(spec.annotation)[0]
            values = ["1", True, math.nan]
            if tp._type is int:
                values += [1.5, 2**70, -1]
            else:
                values += [math.inf]
            return values + none
        if spec.kind == "plain":
            tp, _, sequence = plain_of(spec.annotation)
            values = {int: ["3", True, 2.5, math.nan, 2**70], float: ["0.5", True, math.nan],
                      bool: ["yes", 1], str: [3, b"x", True]}[tp]
            return (["abc", *([v] for v in values)] if sequence else values) + none
        return {"mapping": [[1, 2], "x"], "callable": [3, "x"], "iterable": [3, "abc"], "generator": ["g", 3],
                "device": ["tpu", 3.5], "tensor_or_callable": ["x", 3]}[spec.kind] + none
    if isinstance(spec, ItemsArg):  # another kind; an item of another kind or out of range; one twice
        values = [3, "abc", [object()], *none]
        if spec.kind is int:
            values += [[-1], [True], [2**70], [1.5]]
        if spec.unique:
            values.append([0, 0] if spec.kind is int else ["a", "a"])
        return values
    if isinstance(spec, PathArg):  # not a path; a path that is not there
        return [3, "", "/no/such/folder/x", *none]
    if isinstance(spec, Serialisable):  # something json / pickle cannot write
        bad = object() if spec.how == "json" else (lambda: None)
        return [[bad]] if spec.each else [bad]
    if isinstance(spec, AllOf):
        return [v for part in spec.specs for v in bad_values(part, obj)]
    assert isinstance(spec, Passed), spec
    return []


def cases():
    for cls in SURFACE:
        for name, fn in public_methods(cls):
            found = specs_of(fn)
            if found is None:
                continue
            for arg, spec in found[0].items():
                yield pytest.param(cls, name, arg, id=f"{cls.__name__}.{name}({arg})")
    for fn in FUNCTIONS:
        for arg in specs_of(fn)[0]:
            yield pytest.param(None, fn, arg, id=f"{fn.__module__.rpartition('.')[2]}.{fn.__name__}({arg})")


CASES = list(cases())
_BUILT: dict = {}


def _instance(cls):
    if cls not in _BUILT:
        _BUILT[cls] = SURFACE[cls]()
    return _BUILT[cls]


@pytest.fixture(scope="module", autouse=True)
def _close_built():
    yield
    for obj in _BUILT.values():
        if isinstance(obj, RolloutDataModule):
            obj.teardown("fit")
        getattr(obj, "close", lambda: None)()


def test_every_public_method_is_checked_or_named_with_a_reason() -> None:
    unwrapped, unchecked, methods, arguments = [], [], 0, 0
    for cls in SURFACE:
        for name, fn in public_methods(cls):
            methods += 1
            found = specs_of(fn)
            if found is None:
                if (cls, name) not in NOT_WRAPPED:
                    unwrapped.append(f"{cls.__name__}.{name}")
                continue
            arguments += len(found[0])
            unchecked += [f"{cls.__name__}.{name}({a})" for a in found[1]]
    for fn in FUNCTIONS:
        found = specs_of(fn)
        assert found is not None, fn
        unchecked += [f"{fn.__name__}({a})" for a in found[1]]
    assert not unwrapped, f"public methods neither checked nor in NOT_WRAPPED: {unwrapped}"
    assert not unchecked, f"arguments without a check (give a spec, or Passed(reason)): {unchecked}"
    assert len(SURFACE) >= 29 and methods >= 180 and arguments >= 200, (len(SURFACE), methods, arguments)
    assert all(specs_of(getattr(cls, name)) is None for cls, name in NOT_WRAPPED)


@pytest.mark.parametrize("cls, method, arg", CASES)
def test_a_bad_argument_is_one_package_error_naming_the_method_and_argument(cls, method, arg) -> None:
    if cls is None:
        fn, obj, where = method, None, f"{method.__name__}({arg})"
        spec = specs_of(fn)[0][arg]
    else:
        obj = STATE_FOR[(cls, method)]() if (cls, method) in STATE_FOR else _instance(cls)
        fn = getattr(obj, method)
        spec = specs_of(fn)[0][arg]
        where = f"{cls.__name__}.{method}({arg})"
    values = bad_values(spec, obj)
    for value in values:
        with pytest.raises(ConfigError) as err:
            result = fn(**{arg: value})
            if inspect.iscoroutine(result):  # an `async def` method: checked when awaited
                import asyncio

                asyncio.run(result)
        message = str(err.value)
        assert where in message and "\n" not in message, (value, message)
        assert "must" in message or "outside" in message, message
        assert isinstance(err.value, ArgumentError), (value, message)


@pytest.mark.parametrize("cls", [AsyncPoolOrchestrationWorld, AsyncHTTPPool])
def test_coroutine_methods_are_checked_when_awaited(cls) -> None:
    import asyncio

    obj = _instance(cls)
    name = "step" if cls is AsyncPoolOrchestrationWorld else "acall"
    arg = "action" if name == "step" else "instruction"
    if name == "acall":  # the instruction is the user's payload (Passed): its lifecycle is what is checked
        return
    with pytest.raises(ArgumentError, match=rf"{cls.__name__}.{name}\({arg}\)"):
        asyncio.run(getattr(obj, name)(**{arg: "x"}))
    assert inspect.iscoroutinefunction(getattr(cls, name))


def test_shared_dims_devices_and_shapes_agree_within_a_call() -> None:
    x = torch.zeros(8)
    with pytest.raises(ArgumentError, match=r"ppo_loss\(returns\): must have the shape of new_logprob \(\[8\]"):
        ppo_loss(x, x, x, x, x, x, torch.zeros(7))
    with pytest.raises(ArgumentError, match=r"ppo_loss\(entropy\): must be (on the device of new_logprob|a tensor "
                                            r"holding data)"):  # (a meta tensor: refused for its missing data first)
        ppo_loss(x, torch.zeros(8, device="meta"), x, x, x, x, x)
    with pytest.raises(ArgumentError, match=r"compute_gae\(values\): .*with T = 4 as in rewards"):
        compute_gae(torch.zeros(4, 2), torch.zeros(5, 2), *[torch.zeros(4, 2, dtype=torch.bool)] * 2,
                    torch.zeros(4, 2), torch.zeros(2), 0.99, 0.95)
    with pytest.raises(ArgumentError, match=r"RoundRobin.record_batch\(score\): .*E = 3 as in task_index"):
        RoundRobin().record_batch(torch.zeros(3, dtype=torch.long), torch.zeros(4))


@pytest.mark.parametrize("build", [lambda n: SwarmEnv(num_envs=n), lambda n: CueMemoryEnv(num_envs=n),
                                   lambda n: CartPoleEnv(num_envs=n)], ids=["SwarmEnv", "CueMemoryEnv", "CartPoleEnv"])
def test_a_state_dict_of_another_size_is_refused_before_anything_is_loaded(build) -> None:
    small, large = _reset(build(2)), _reset(build(4))
    with pytest.raises(ValueError, match=r"num_envs"):
        large.load_state_dict(small.state_dict())
    with pytest.raises(ConfigError, match=r"load_state_dict\(state\): must be a dict"):
        large.load_state_dict([1, 2])


def test_valid_calls_still_work() -> None:
    env = SwarmEnv(num_envs=4)
    obs = env.reset(seed=0, task_index=[0, 1, 2, 3])
    res = env.step(env.scripted_action("oracle", obs), next_task=torch.zeros(4, dtype=torch.long))
    assert res.obs.shape == obs.shape
    x = torch.randn(8)
    assert torch.isfinite(ppo_loss(x, x, x, x, x, x, x, sample_mask=torch.ones(8, dtype=torch.bool)).loss)
    pool = SimulatedPool()
    handle = pool.spawn({"cost": 1, "skill": 0, "instruction": 0})
    assert pool.wait([handle], timeout=5.0)[0].steps == 2
    assert _policy().predict(obs, mask=env.action_masks()).shape == (4, 12)


@pytest.mark.parametrize("cls", CLOSABLE, ids=[c.__name__ for c in CLOSABLE])
def test_after_close_every_method_of_a_pool_names_the_closed_pool(cls) -> None:
    pool = SURFACE[cls]()
    pool.close()
    pool.close()  # idempotent
    methods = [name for name, _ in public_methods(cls) if name != "close"]
    assert {"spawn", "poll", "wait", "cancel"} <= set(methods), methods
    args = {"spawn": ({"cost": 1, "skill": 0, "instruction": 0},), "poll": (0,), "cancel": (0,), "wait": ([0],),
            "acall": ("hello",)}
    for name in methods:
        with pytest.raises(PoolClosedError) as err:
            result = getattr(pool, name)(*args.get(name, ()))
            if inspect.iscoroutine(result):
                import asyncio

                asyncio.run(result)
        message = str(err.value)
        assert message.startswith(f"{cls.__name__}.{name}: the pool is closed") and "\n" not in message, message
        assert isinstance(err.value, LifecycleError) and isinstance(err.value, RuntimeError)


@pytest.mark.parametrize("build", [lambda: CartPoleEnv(num_envs=2), lambda: GymVectorEnv(num_envs=2, env_id="CartPole-v1")],
                         ids=["CartPoleEnv", "GymVectorEnv"])
def test_a_world_stepped_before_reset_is_one_lifecycle_error(build) -> None:
    env = build()
    try:
        with pytest.raises(LifecycleError, match=r"\w+Env.step: called before reset\(\); call env.reset\(\) first"):
            env.step(torch.zeros(2, dtype=torch.long))
    finally:
        getattr(env, "close", lambda: None)()
