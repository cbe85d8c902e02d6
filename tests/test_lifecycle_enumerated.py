"""Every public method of every public class the arguments pass covers (`test_method_args_enumerated`'s
SURFACE, 29 classes), called in each wrong state its class's lifecycle allows: before the call that
must come first (a world's `reset`, a sampler's `bind`, the data module's `build`, ...), after
`close()`, and twice. Each call either raises one `LifecycleError` (a `ReportedError`, a
`RuntimeError`) whose one-line message names `Class.method` and the call that must come first, or is
harmless and well-defined, with the reason written down here (`HARMLESS`).

The methods are enumerated from the classes (`public_methods`), so a public method added later
fails `test_every_public_method_has_a_lifecycle_entry` until it is classified here. The lifecycle
itself (which state each method needs) was read off each class; the package declares the same with
one mechanism (`parlightning.method_args.Lifecycle`, checked at entry of every `checked_methods`
method), and `test_the_package_declares_what_this_file_expects` holds the two together."""

from __future__ import annotations

import asyncio
import inspect
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
import torch

from parlightning.analysis.pipeline import PipelineChain
from parlightning.buffer import RolloutBuffer
from parlightning.distribution.samplers import DifficultyWeighted, PosteriorSignal, RoundRobin, SamplingForLearnability
from parlightning.distribution.strategies import ClusterParallel, DataParallel, TensorParallel, WorkUnit
from parlightning.envs.cartpole import CartPoleEnv
from parlightning.envs.external import ExternalBatchedEnv
from parlightning.envs.gym import GymVectorEnv
from parlightning.envs.memory import CueMemoryEnv
from parlightning.envs.normalize import NormalizeEnv
from parlightning.envs.swarm import SwarmEnv
from parlightning.errors import LifecycleError, ReportedError
from parlightning.inference import Policy
from parlightning.parl.metrics import CriticalSteps
from parlightning.parl.reward import ConstantSchedule, CosineSchedule, LinearSchedule, PARLReward
from parlightning.ppo.data import DATA_HOOKS, RolloutDataModule
from parlightning.ppo.module import MODULE_HOOKS, PPOModule
from parlightning.subagents.async_http import AsyncHTTPPool
from parlightning.subagents.http import HTTPPool
from parlightning.subagents.pool import SimulatedPool, UnknownHandleError
from parlightning.subagents.process import ProcessPool
from parlightning.subagents.world import AsyncPoolOrchestrationWorld, PoolOrchestrationWorld
from test_method_args_enumerated import SURFACE, URL, _policy, _serial, public_methods

CPU = torch.device("cpu")
INSTRUCTION = {"cost": 1, "skill": 0, "instruction": 0}
BANK = ["a-0", "a-1", "b-0"]
KEYS = ["a", "b", "c"]
POOL_WORLD = "parlightning.subagents.PoolOrchestrationWorld"


def _run(result: Any) -> Any:
    """An `async def` method's coroutine, awaited (its checks run when it is awaited)."""
    return asyncio.run(result) if inspect.iscoroutine(result) else result


@dataclass
class Life:
    """A class's lifecycle as read off the class. `build`: a fresh object (just constructed).
    `states`: each state a method may need -> (the call that makes it hold, the text naming that call
    in the error); `requires`: method -> the states it needs, in the order they are checked;
    `closes`: the class has `close()`, after which every other public method is refused (and
    `close()` again is harmless); `harmless`: method -> why calling it in any state (before every
    other call included) is well-defined; `refused_twice`: methods whose second call is refused
    (every other state-making call may be repeated: `TWICE`)."""

    build: Callable[[], Any]
    states: dict[str, tuple[Callable[[Any], Any], str]] = field(default_factory=dict)
    requires: dict[str, tuple[str, ...]] = field(default_factory=dict)
    closes: bool = False
    harmless: dict[str, str] = field(default_factory=dict)
    refused_twice: tuple[str, ...] = ()


RESET = {"reset": (lambda env: env.reset(seed=0), "reset()")}
TASK_RESET = {"reset": (lambda world: _run(world.reset(None)), "reset(task)")}
STATE = "reads the object's state as it is (nothing of it needs a prior call)"
EXACT_LOAD = ("restores every episode (an exact world): the world counts as reset, before its first reset "
              "too, and stepping it continues the loaded episodes")
INEXACT_LOAD = ("restores the counters only (an inexact world); the world then needs reset() again before "
                "stepping (step after it is refused)")
RESTART = "starts every episode afresh; calling it again restarts them (the package resets after every inexact resume)"


def _world(build: Callable[[], Any], closes: bool = False, exact: bool = True, **harmless: str) -> Life:
    return Life(build, states=dict(RESET), requires={"step": ("reset",), **harmless.pop("_requires", {})},
                closes=closes, harmless={"reset": RESTART, "state_dict": STATE,
                                         "load_state_dict": EXACT_LOAD if exact else INEXACT_LOAD, **harmless})


def _bind(sampler: Any) -> None:
    sampler.bind(BANK, CPU)


BIND = {"bound": (_bind, "bind(task_ids, device)")}
SAMPLER = {"pick": "the string path needs no bank: unknown ids join the statistics as they come",
           "record": "the string path needs no bank", "signals": STATE, "state_dict": STATE,
           "load_state_dict": "before bind the statistics are kept by task id and laid out over the bank by bind()",
           "bind": "lays the statistics out over the bank; again (another bank too) keeps what was learnt for the "
                   "ids in both (documented in bind)"}
LEARNING = {**SAMPLER, "weights": "the string path: reads the statistics of the ids given",
            "sync": "sums the counts across ranks: defined on any statistics, the empty ones included"}
POOL = {"spawn": "needs an open pool only", "poll": "needs a handle spawn returned (an unknown one is the named "
        "UnknownHandleError, a LifecycleError)", "wait": "as poll", "cancel": "an unknown or finished handle is ignored"}
AGREED = {"stats_tensor": "this rank's increments since the last sync: empty before any task is registered",
          "merge_stats": "adds the reduced increments of the registered tasks (none yet: an empty tensor)",
          "sync": "stats_tensor then merge_stats", "combine_states": "a static function of the states given",
          "state_dict": STATE, "load_state_dict": "restores the registry and counters (it registers their tasks)"}


def _pipeline() -> PipelineChain:
    return PipelineChain(SwarmEnv(num_envs=1), _serial, reference=_serial)


LIVES: dict[type, Life] = {
    SwarmEnv: _world(lambda: SwarmEnv(num_envs=4), scripted_action="reads only the observation it is given",
                     _requires={"action_masks": ("reset",)}),
    CartPoleEnv: _world(lambda: CartPoleEnv(num_envs=2)),
    CueMemoryEnv: _world(lambda: CueMemoryEnv(num_envs=2)),
    GymVectorEnv: _world(lambda: GymVectorEnv(num_envs=2, env_id="CartPole-v1"), closes=True, exact=False),
    NormalizeEnv: _world(lambda: NormalizeEnv(num_envs=2, env=CartPoleEnv), closes=True,
                         normalize="applies the running statistics as they are (the identity before any update)"),
    ExternalBatchedEnv: _world(lambda: ExternalBatchedEnv(2, world=POOL_WORLD, world_kwargs={"pool": SimulatedPool()}),
                               closes=True, exact=False, in_flight="a count of the calls send started: 0 before any",
                               _requires={"send": ("reset",), "receive": ("reset",)}),
    PoolOrchestrationWorld: Life(lambda: PoolOrchestrationWorld(pool=SimulatedPool()), states=dict(TASK_RESET),
                                 requires={"step": ("reset",)}, harmless={"reset": RESTART}),
    AsyncPoolOrchestrationWorld: Life(lambda: AsyncPoolOrchestrationWorld(pool=SimulatedPool()), states=dict(TASK_RESET),
                                      requires={"step": ("reset",)}, harmless={"reset": RESTART}),
    SimulatedPool: Life(SimulatedPool, closes=True, harmless=POOL),
    ProcessPool: Life(lambda: ProcessPool(fn="parlightning.subagents.examples:skill_matcher", workers=1), closes=True,
                      harmless=POOL),
    HTTPPool: Life(lambda: HTTPPool(base_url=URL, probe=False), closes=True, harmless=POOL),
    AsyncHTTPPool: Life(lambda: AsyncHTTPPool(base_url=URL, probe=False, retries=0), closes=True,
                        states={"loop": (None, "acall(instruction)")}, requires={"call": ("loop",)},
                        harmless={**POOL, "acall": "one request, awaited from the caller's event loop"}),
    RoundRobin: Life(RoundRobin, states=dict(BIND), requires={"pick_batch": ("bound",)},
                     harmless={**SAMPLER, "record_batch": "reward-blind: it records nothing, bound or not"}),
    **{cls: Life(cls, states=dict(BIND), requires={"pick_batch": ("bound",), "record_batch": ("bound",)},
                 harmless=LEARNING) for cls in (DifficultyWeighted, PosteriorSignal, SamplingForLearnability)},
    DataParallel: Life(DataParallel, harmless={"plan": "stateless: a function of its arguments"}),
    ClusterParallel: Life(ClusterParallel, states={"registered": (lambda s: s.bind(BANK), "bind(task_ids) or plan()"),
                                                   "bound": (lambda s: s.bind(BANK), "bind(task_ids)")},
                          requires={"observe": ("registered",), "observe_batch": ("registered",),
                                    "observe_tasks": ("registered",)},  # observe_batch's bank indices: "bound", below
                          harmless={**AGREED, "bind": "registers the bank; again (another bank too) adds its tasks "
                                                      "and keeps every statistic (documented in bind)",
                                    "plan": "registers the round's tasks as it plans",
                                    "scores": "one UCB score per registered cluster: empty before any",
                                    "leased_clusters": "a function of the unit given"}),
    TensorParallel: Life(lambda: TensorParallel(n_sections=2),
                         states={"keys": (lambda s: s.declare_keys(KEYS), "declare_keys(keys)")},
                         requires={m: ("keys",) for m in ("validate", "plan", "key_index", "section_of_key",
                                                          "section_rows", "violation_mask", "record_updates",
                                                          "gradient_mask", "register_gradient_mask")},
                         harmless={**AGREED, "declare_keys": "idempotent with the same keys; another key space is "
                                                             "refused with the fix (build a new strategy)"}),
    PARLReward: Life(lambda: PARLReward(max_subagents=4), harmless=dict.fromkeys(
        ("advance_to", "bonus", "lambdas", "terms", "state_dict", "load_state_dict"),
        "no lifecycle: the position starts at 0 and every method reads or sets it")),
    **{cls: Life(cls, harmless={"value": "stateless: a function of the position"})
       for cls in (LinearSchedule, CosineSchedule, ConstantSchedule)},
    CriticalSteps: Life(CriticalSteps, harmless={
        "update": "adds episodes", "update_totals": "adds episodes",
        "compute": "before any episode: NaN (documented; torchmetrics warns that compute ran before update)"}),
    RolloutBuffer: Life(lambda: RolloutBuffer(4, 2, (3,), (), CPU),
                        states={"memory": (lambda b: b.allocate_memory((5,)), "allocate_memory(state_shape)")},
                        requires={"write_memory": ("memory",), "sequences": ("memory",)},
                        harmless={**dict.fromkeys(("write", "batch_fields", "flat", "minibatch_indices",
                                                   "compute_advantages", "finished_parts"),
                                                  "the columns are allocated (zeros) by the constructor"),
                                  "allocate_memory": "allocates the recurrent columns; again: fresh zero columns"}),
    Policy: Life(_policy, harmless={"predict": "stateless inference", "normalize": "stateless"}),
    PPOModule: Life(PPOModule, states={"trainer": (None, "Trainer")}, requires={"annealed_lr": ("trainer",)},
                    harmless={"build_policy": "a new network for the spaces given (no trainer: no per-key table)"}),
    RolloutDataModule: Life(lambda: RolloutDataModule(num_envs=2, num_steps=4, num_minibatches=1),
                            states={"built": (lambda d: d.build(CPU), "build(device)"), "trainer": (None, "Trainer")},
                            requires={"bind_keys": ("built",), "bind_memory": ("built",), "collect": ("built", "trainer")},
                            refused_twice=("build",),
                            harmless={"check_state": "a pure check of the state given", "state_dict": STATE,
                                      "load_state_dict": "before build: the counters only; a state that holds the "
                                                         "worlds' (ranks) is refused until build()",
                                      "make_collector": "a new collector the caller owns (and closes)",
                                      "preflight": "probes a world of its own", "build": "the first build"}),
    PipelineChain: Life(_pipeline, harmless=dict.fromkeys(("record", "replay", "blame"),
                                                          "no lifecycle: replay and blame take the episode record returns")),
}

NOT_CALLED = {  # hooks Lightning calls with its own objects (the arguments pass lists them too)
    **{(PPOModule, h): "a Lightning hook or override" for h in MODULE_HOOKS},
    **{(RolloutDataModule, h): "a Lightning hook (setup / teardown twice: test_data_module_setup_and_teardown_twice)"
       for h in DATA_HOOKS},
}


# ---------------------------------------------------------------------- valid calls, by method name
def _twin_state(obj: Any) -> Any:
    """The state_dict of a ready object of the same class (what load_state_dict is given)."""
    twin = _ready(type(obj))
    try:
        return twin.state_dict()
    finally:
        getattr(twin, "close", lambda: None)()


def _action(env: Any) -> torch.Tensor:
    spec = env.action_spec
    return torch.zeros(env.num_envs, *spec.action_shape, dtype=torch.long if spec.is_discrete else torch.float32)


def _handle(pool: Any) -> int:
    return pool.spawn(INSTRUCTION)


def _pool_world_step(world: Any) -> Any:
    return _run(world.step([0] * world.max_width))


def _recurrent() -> torch.nn.Module:
    env = SwarmEnv(num_envs=2)
    return PPOModule(policy="gru").build_policy(env.observation_shape, env.action_spec)


def _episode(chain: PipelineChain) -> Any:
    return chain.record(0)


CALLS: dict[Any, Callable[[Any], Any]] = {
    "step": lambda o: o.step(_action(o)),
    "reset": lambda o: o.reset(seed=0),
    "action_masks": lambda o: o.action_masks(),
    "scripted_action": lambda o: o.scripted_action("serial", torch.zeros(o.num_envs, *o.observation_shape)),
    "state_dict": lambda o: o.state_dict(),
    "load_state_dict": lambda o: o.load_state_dict(_twin_state(o)),
    "close": lambda o: o.close(),
    "normalize": lambda o: o.normalize(torch.zeros(o.num_envs, *o.observation_shape)),
    "in_flight": lambda o: o.in_flight(),
    "send": lambda o: o.send([0], _action(o)[:1]),
    "receive": lambda o: o.receive(None, 0.001),
    (PoolOrchestrationWorld, "reset"): lambda o: o.reset(None),
    (PoolOrchestrationWorld, "step"): _pool_world_step,
    (AsyncPoolOrchestrationWorld, "reset"): lambda o: _run(o.reset(None)),
    (AsyncPoolOrchestrationWorld, "step"): _pool_world_step,
    "spawn": lambda o: o.spawn(INSTRUCTION),
    "poll": lambda o: o.poll(_handle(o)),
    "wait": lambda o: o.wait([_handle(o)], timeout=10.0),
    "cancel": lambda o: o.cancel(_handle(o)),
    "call": lambda o: o.call("hello"),
    "acall": lambda o: _run(o.acall("hello")),
    "bind": lambda o: o.bind(BANK, CPU),
    "pick": lambda o: o.pick(BANK[:2], 0),
    "pick_batch": lambda o: o.pick_batch(torch.arange(3), 0, torch.ones(4, dtype=torch.bool)),
    "record": lambda o: o.record(BANK[0], 1.0),
    "record_batch": lambda o: o.record_batch(torch.tensor([0, 1]), torch.tensor([1.0, 0.0])),
    "signals": lambda o: o.signals(),
    "sync": lambda o: o.sync(lambda t: t),
    "weights": lambda o: o.weights(BANK[:2]),
    "plan": lambda o: o.plan(2, 0, BANK),
    (ClusterParallel, "bind"): lambda o: o.bind(BANK),
    "combine_states": lambda o: o.combine_states([o.state_dict()]),
    "leased_clusters": lambda o: o.leased_clusters(WorkUnit(0, (BANK[0],))),
    "merge_stats": lambda o: o.merge_stats(o.stats_tensor()),
    "observe": lambda o: o.observe(None, BANK[0], 1.0),
    "observe_batch": lambda o: o.observe_batch(torch.tensor([0]), torch.tensor([1.0])),
    "observe_tasks": lambda o: o.observe_tasks(torch.tensor([0]), torch.tensor([1.0])),
    "scores": lambda o: o.scores(),
    "stats_tensor": lambda o: o.stats_tensor(),
    (TensorParallel, "sync"): lambda o: o.sync(),
    (ClusterParallel, "sync"): lambda o: o.sync(),
    "declare_keys": lambda o: o.declare_keys(KEYS),
    "gradient_mask": lambda o: o.gradient_mask(0),
    "key_index": lambda o: o.key_index("a"),
    "register_gradient_mask": lambda o: o.register_gradient_mask(torch.zeros(3, 2, requires_grad=True), 0).remove(),
    "record_updates": lambda o: o.record_updates(torch.tensor([0]), 0),
    "section_of_key": lambda o: o.section_of_key("a"),
    "section_rows": lambda o: o.section_rows(0),
    "validate": lambda o: o.validate(2),
    "violation_mask": lambda o: o.violation_mask(torch.tensor([0]), 0),
    "advance_to": lambda o: o.advance_to(3),
    "bonus": lambda o: o.bonus(*[torch.ones(2)] * 3),
    "lambdas": lambda o: o.lambdas(),
    "terms": lambda o: o.terms(*[torch.ones(2)] * 4),
    "value": lambda o: o.value(3),
    "compute": lambda o: o.compute(),
    "update": lambda o: o.update(critical=torch.ones(2), serial=torch.ones(2)),
    "update_totals": lambda o: o.update_totals(torch.ones(2), torch.ones(2)),
    "allocate_memory": lambda o: o.allocate_memory((5,)),
    "batch_fields": lambda o: o.batch_fields(),
    "compute_advantages": lambda o: o.compute_advantages(torch.zeros(2), torch.zeros(4, 2), 0.99, 0.95),
    "finished_parts": lambda o: o.finished_parts(),
    "flat": lambda o: o.flat(),
    "minibatch_indices": lambda o: list(o.minibatch_indices(1, 2)),
    "sequences": lambda o: o.sequences(2),
    "write": lambda o: o.write(0, rewards=torch.zeros(2)),
    "write_memory": lambda o: o.write_memory(0, torch.zeros(2, 5), torch.zeros(2, dtype=torch.bool)),
    "predict": lambda o: o.predict(torch.zeros(2, *o.observation_shape)),
    (Policy, "normalize"): lambda o: o.normalize(torch.zeros(2, *o.observation_shape)),
    "annealed_lr": lambda o: o.annealed_lr(0),
    "build_policy": lambda o: o.build_policy((3,), SwarmEnv(num_envs=1).action_spec),
    "bind_keys": lambda o: o.bind_keys(["solo", "fanout", "pipeline", "locked"]),
    "bind_memory": lambda o: o.bind_memory(_recurrent()),
    "build": lambda o: o.build(CPU),
    "check_state": lambda o: o.check_state(o.state_dict()),
    "collect": lambda o: o.collect(),
    (RolloutDataModule, "load_state_dict"): lambda o: o.load_state_dict({"round_index": 0, "env_steps": 0}),
    "make_collector": lambda o: o.make_collector(CPU, 0).close(),
    "preflight": lambda o: o.preflight(),
    (PipelineChain, "record"): _episode,
    "replay": lambda o: o.replay(_episode(o)),
    "blame": lambda o: o.blame(_episode(o)),
}


CLOSED_CALLS = {"poll": lambda o: o.poll(0), "wait": lambda o: o.wait([0]), "cancel": lambda o: o.cancel(0)}  # (no spawn)


def call(obj: Any, method: str, closed: bool = False) -> Any:
    cls = type(obj)
    fn = next((CALLS[(k, method)] for k in cls.__mro__ if (k, method) in CALLS), None) or CALLS[method]
    return _run((CLOSED_CALLS.get(method, fn) if closed else fn)(obj))


def _ready(cls: type) -> Any:
    """A fresh object with every state its methods need that a call can make hold."""
    life = LIVES[cls]
    obj = life.build()
    for make, _ in dict.fromkeys(life.states.values()):
        if make is not None:
            make(obj)
    return obj


def _close(obj: Any) -> None:
    if isinstance(obj, RolloutDataModule):
        obj.teardown("fit")
    else:
        getattr(obj, "close", lambda: None)()


def _refused(err: BaseException, cls: type, method: str, *fixes: str) -> None:
    message = str(err)
    assert isinstance(err, LifecycleError) and isinstance(err, ReportedError), (type(err), message)
    assert "\n" not in message, message
    assert message.startswith(f"{cls.__name__}.{method}: "), message
    assert any(fix in message for fix in fixes), (fixes, message)


# ---------------------------------------------------------------------- the cases, enumerated
def _ids(cases: list) -> list[str]:
    return [f"{c[0].__name__}.{c[1]}" + (f"-{c[2]}" if len(c) > 2 else "") for c in cases]


BEFORE = [(cls, m) for cls, life in LIVES.items() for m in life.requires]
AFTER_CLOSE = [(cls, m) for cls, life in LIVES.items() if life.closes for m, _ in public_methods(cls) if m != "close"]
HARMLESS = [(cls, m) for cls, life in LIVES.items() for m in life.harmless]
TWICE = [(cls, m) for cls, life in LIVES.items() for m in dict.fromkeys(
    [*(m for m, _ in public_methods(cls) if m in ("reset", "bind", "declare_keys", "allocate_memory", "build", "close")),
     *life.refused_twice])]


def test_every_public_method_has_a_lifecycle_entry() -> None:
    assert set(LIVES) == set(SURFACE), set(LIVES) ^ set(SURFACE)
    missing, both = [], []
    for cls, life in LIVES.items():
        for name, _ in public_methods(cls):
            kinds = [name in life.requires, name in life.harmless, name == "close" and life.closes,
                     (cls, name) in NOT_CALLED]
            if sum(kinds) == 0:
                missing.append(f"{cls.__name__}.{name}")
            elif sum(kinds) > 1 and not (name == "build" and kinds[1]):
                both.append(f"{cls.__name__}.{name}")
        for need in life.requires.values():
            assert set(need) <= set(life.states), (cls, need)
    assert not missing, f"public methods with no lifecycle entry (add them to LIVES): {missing}"
    assert not both, f"public methods listed twice: {both}"
    counted = sum(len(public_methods(cls)) for cls in LIVES)
    assert len(LIVES) >= 29 and counted >= 180, (len(LIVES), counted)


@pytest.mark.parametrize("cls, method", BEFORE, ids=_ids(BEFORE))
def test_a_method_called_before_its_prerequisite_is_one_lifecycle_error(cls, method) -> None:
    life = LIVES[cls]
    obj = life.build()
    try:
        for state in life.requires[method]:  # each prerequisite in turn: refused naming it, then made to hold
            make, fix = life.states[state]
            with pytest.raises(Exception) as err:
                call(obj, method)
            _refused(err.value, cls, method, fix)
            if make is None:  # (a Trainer: attached by trainer.fit only)
                break
            make(obj)
        else:
            call(obj, method)  # every prerequisite holds: the call goes through
    finally:
        _close(obj)


@pytest.mark.parametrize("cls, method", AFTER_CLOSE, ids=_ids(AFTER_CLOSE))
def test_after_close_every_other_method_is_one_lifecycle_error(cls, method) -> None:
    obj = _ready(cls)
    obj.close()
    obj.close()  # twice: harmless
    with pytest.raises(Exception) as err:
        call(obj, method, closed=True)
    _refused(err.value, cls, method, "close()")


@pytest.mark.parametrize("cls, method", HARMLESS, ids=_ids(HARMLESS))
def test_a_harmless_method_works_on_a_fresh_object(cls, method) -> None:
    obj = LIVES[cls].build()
    try:
        call(obj, method)
    finally:
        _close(obj)


@pytest.mark.parametrize("cls, method", TWICE, ids=_ids(TWICE))
def test_a_state_making_method_called_twice(cls, method) -> None:
    life = LIVES[cls]
    obj = _ready(cls)  # every state-making call made once (close: not yet)
    try:
        if method in life.refused_twice:
            with pytest.raises(Exception) as err:
                call(obj, method)
            _refused(err.value, cls, method, "teardown(", "twice")
        else:
            call(obj, method)
            call(obj, method)
    finally:
        _close(obj)


# ---------------------------------------------------------------------- the declared lifecycle, and the cases
# that depend on the arguments or on what a load brings
def test_the_package_declares_what_this_file_expects() -> None:
    from parlightning.method_args import lifecycle_of

    for cls, life in LIVES.items():
        declared = lifecycle_of(cls)
        assert declared is not None or not (life.requires or life.closes), cls
        for method, states in life.requires.items():
            assert declared.needs(method), f"{cls.__name__}.{method} needs {states} but declares nothing"
        for method in life.harmless if declared is not None else ():
            needs = [n for n in declared.needs(method) if n != "open"]  # (open: after close, every method)
            assert not needs or (cls, method) == (RolloutDataModule, "build"), (cls, method, needs)
        assert bool(declared and declared.closes) == life.closes, cls


@pytest.mark.parametrize("cls, exact", [(SwarmEnv, True), (CartPoleEnv, True), (CueMemoryEnv, True),
                                        (NormalizeEnv, True), (GymVectorEnv, False), (ExternalBatchedEnv, False)],
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_load_state_dict_before_the_first_reset(cls, exact) -> None:
    """An exact world's state restores its episodes: the world counts as reset. An inexact world's
    does not: stepping it is refused until reset() (also after a reset: the loaded counters start new
    episodes)."""
    fresh, saved = LIVES[cls].build(), _ready(cls)
    try:
        call(saved, "step")
        fresh.load_state_dict(saved.state_dict())
        saved.load_state_dict(saved.state_dict())
        for env in (fresh, saved):
            if exact:
                call(env, "step")
            else:
                with pytest.raises(LifecycleError, match=rf"^{cls.__name__}\.step: called before reset\(\)"):
                    call(env, "step")
                env.reset(seed=0)
                call(env, "step")
    finally:
        _close(fresh)
        _close(saved)


def test_a_cartpole_state_saved_before_reset_needs_a_reset_after_loading() -> None:
    never = CartPoleEnv(num_envs=2).state_dict()
    env = _ready(CartPoleEnv)
    env.load_state_dict(never)
    with pytest.raises(LifecycleError, match=r"^CartPoleEnv\.step: called before reset\(\)"):
        call(env, "step")


@pytest.mark.parametrize("cls", [SimulatedPool, AsyncHTTPPool], ids=lambda c: c.__name__)
def test_a_handle_never_spawned_or_already_taken_names_the_pool_and_method(cls) -> None:
    pool = LIVES[cls].build()
    try:
        for method in ("poll", "wait"):
            with pytest.raises(UnknownHandleError) as err:
                pool.poll(12345) if method == "poll" else pool.wait([12345])
            _refused(err.value, cls, method, "spawn")
            assert isinstance(err.value, KeyError)  # what the pools raised before
        if cls is SimulatedPool:
            handle = pool.spawn(INSTRUCTION)
            assert pool.wait([handle])[0].steps == 2
            with pytest.raises(UnknownHandleError, match=r"^SimulatedPool\.poll: .*already taken"):
                pool.poll(handle)
    finally:
        pool.close()


def test_cluster_parallel_observe_batch_by_task_ids_needs_registration_only() -> None:
    cp = ClusterParallel()
    cp.plan(1, 0, BANK)  # registers the tasks (no bank indices yet)
    cp.observe_batch(list(BANK[:1]), torch.tensor([1.0]))
    with pytest.raises(LifecycleError, match=r"^ClusterParallel\.observe_batch: .*bind\(task_ids\)"):
        cp.observe_batch(torch.tensor([0]), torch.tensor([1.0]))  # bank indices: the bank's order, from bind
    with pytest.raises(ValueError, match="never planned"):  # (a ValueError too, as before)
        ClusterParallel().observe(None, BANK[0], 1.0)


def test_tensor_parallel_another_key_space_is_refused_naming_the_fix() -> None:
    tp = TensorParallel(2, keys=KEYS)
    tp.declare_keys(KEYS)
    with pytest.raises(ValueError, match=r"^TensorParallel\.declare_keys: .*already declares a different key space"):
        tp.declare_keys(["x", "y"])
    with pytest.raises(ValueError, match="no declared key space.*keys="):  # a ValueError too, as before
        TensorParallel(2).validate(2)


def test_data_module_setup_and_teardown_twice() -> None:
    """setup twice builds once; teardown closes the collector (twice, or before setup: harmless); after it a
    thread collector's methods are refused (an inline one's step loop runs here: the same worlds go on), and
    the next setup (a second trainer.fit) builds fresh worlds; a state holding the worlds' per-rank state is
    refused before build, never silently dropped."""
    dm = RolloutDataModule(num_envs=2, num_steps=4, max_policy_lag=1)  # a thread collector
    dm.teardown("fit")  # before setup: nothing to close
    saved = _ready(RolloutDataModule).state_dict()
    assert "ranks" in saved
    with pytest.raises(LifecycleError, match=r"^RolloutDataModule\.load_state_dict: called before build\(device\)"):
        dm.load_state_dict(saved)
    dm.setup("fit")
    collector = dm.collector
    dm.setup("fit")
    assert dm.collector is collector
    dm.teardown("fit")
    dm.teardown("fit")
    assert not collector.runs_after_close
    with pytest.raises(LifecycleError, match=r"^RolloutDataModule\.bind_keys: called after teardown\(\) closed"):
        call(dm, "bind_keys")
    dm.setup("fit")
    assert dm.collector is not collector
    dm.load_state_dict(saved)
    dm.teardown("fit")
    inline = _ready(RolloutDataModule)
    inline.teardown("fit")
    assert inline.collector.runs_after_close
    inline.build(CPU)  # after teardown: fresh worlds (not refused as twice)
    inline.teardown("fit")


def test_ppo_module_annealed_lr_needs_a_trainer() -> None:
    with pytest.raises(LifecycleError, match=r"^PPOModule\.annealed_lr: .*Trainer"):
        PPOModule().annealed_lr(0)


@pytest.mark.filterwarnings("ignore")
def test_fit_called_during_a_fit_is_one_lifecycle_error(tmp_path, monkeypatch) -> None:
    """Re-entrancy: `fit` from a callback while a fit runs, or from another thread, is refused at once
    (the run's signal handlers, stall watch and output folders are per process); the running fit
    goes on and ends normally."""
    import lightning.pytorch as pl

    import parlightning.api as api

    monkeypatch.chdir(tmp_path)
    seen: dict[str, BaseException] = {}

    class Nested(pl.Callback):
        def on_train_epoch_start(self, trainer, module):
            for where in ("callback", "thread"):
                try:
                    if where == "callback":
                        api.fit(config="cartpole_tensor")
                    else:
                        failed: list = []
                        thread = threading.Thread(target=lambda: _record(failed, api.fit, "cartpole_tensor"))
                        thread.start()
                        thread.join(60)
                        if failed:
                            raise failed[0]
                except BaseException as err:  # noqa: BLE001
                    seen[where] = err

    def _record(failed: list, fn: Callable, *args: Any) -> None:
        try:
            fn(*args)
        except BaseException as err:  # noqa: BLE001
            failed.append(err)

    trainer = _fit_with(api, Nested())
    assert trainer.current_epoch == 1
    for where in ("callback", "thread"):
        err = seen.get(where)
        assert isinstance(err, LifecycleError), (where, err)
        message = str(err)
        assert message.startswith("fit: called while a fit is running in this process") and "\n" not in message


def _fit_with(api: Any, callback: Any) -> Any:
    """A tiny in-process fit with `callback` added to the trainer's callbacks."""
    from parlightning.cli import fit as fit_module

    original = fit_module.build_cli

    def build(args: list) -> Any:
        cli = original(args)
        cli.trainer.callbacks.append(callback)
        return cli

    fit_module.build_cli = build
    try:
        return api.fit(config="cartpole_tensor", overrides=[
            "trainer.max_epochs=1", "data.num_envs=2", "data.num_steps=4", "data.num_minibatches=1",
            "data.update_epochs=1", "trainer.logger=false", "trainer.enable_checkpointing=false",
            "trainer.enable_progress_bar=false"])
    finally:
        fit_module.build_cli = original
