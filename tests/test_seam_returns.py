"""What user code hands back goes through one validator per seam, and each kind of wrong value (type,
shape, dtype, device, NaN, out of range, where the seam has tensors) is one line naming the user's
component and the field:

- a world's `step` result: `StepLoop._check_step` (every step, metadata), `check_finite` and
  `check_parts` (once per round: NaN, ranges);
- a batched sampler's `pick_batch`: `SamplerPicks.check` (every step, metadata; picks outside the
  bank set a device flag read after the step or when the world fails on them);
- a two-method sampler's `pick`: `_BatchedAdapter._refill` (once per round);
- a strategy's `plan`: `strategies.checked_plan`;
- a subagent function's return: `subagents.pool.normalize` (the worker prefixes the function's path);
- a rollout callback's `rollout.stats`: `ppo.data.check_rollout_stats`.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from parlightning.collection.step_loop import SamplerLock, SamplerPicks, StepLoop
from parlightning.distribution.samplers import as_batched
from parlightning.distribution.strategies import WorkUnit, checked_plan
from parlightning.envs.base import ActionSpec, EpisodeParts, StepResult
from parlightning.errors import ReportedError
from parlightning.ppo.data import check_rollout_stats
from parlightning.subagents.pool import normalize


class UserWorld:
    """A two-actor world with three actions and a 4-feature observation and a two-task bank."""

    task_ids = ["a-0", "a-1"]

    def __init__(self) -> None:
        self.num_envs, self.device, self.observation_shape = 2, torch.device("cpu"), (4,)
        self.action_spec = ActionSpec("discrete", nvec=(3,))


def _loop() -> StepLoop:
    world = UserWorld()
    return StepLoop(lambda n, device, seed: world, num_envs=2, num_steps=2, seed=0, device=torch.device("cpu"))


def _result(**change) -> StepResult:
    z = torch.zeros(2, dtype=torch.bool)
    return StepResult(torch.zeros(2, 4), torch.zeros(2), z, z, torch.zeros(2, 4))._replace(**change)


@pytest.mark.parametrize("change, says", [
    (dict(reward=[0.0, 1.0]), r"UserWorld.step returned StepResult.reward as builtins.list, not a torch.Tensor"),
    (dict(reward=torch.zeros(3)), r"UserWorld.step returned StepResult.reward of shape \[3\] \(expected \[2\]\)"),
    (dict(terminated=torch.zeros(2)), r"UserWorld.step returned StepResult.terminated of dtype torch.float32"),
    (dict(obs=torch.zeros(2, 4, device="meta")), r"UserWorld.step returned StepResult.obs on device meta"),
], ids=["type", "shape", "dtype", "device"])
def test_a_worlds_step_result_is_checked_every_step(change, says) -> None:
    with pytest.raises(ReportedError, match=rf"^data\.env: {says}") as err:
        _loop()._check_step(_result(**change), 1)
    assert "\n" not in str(err.value)


def test_a_worlds_nan_and_out_of_range_parts_are_named_once_per_round() -> None:
    loop = _loop()
    buf = loop.buffer
    buf.rewards[1, 0] = math.nan
    with pytest.raises(FloatingPointError, match=r"non-finite reward \(StepResult.reward\): NaN or inf from UserWorld.step in rollout 3 "
                                                 r"\(first at step 1 of 2, actor 0"):
        loop.check_finite(buf, 3)
    buf.rewards.zero_()
    buf.terminated[0, 1] = True
    buf.write(0, parts=EpisodeParts(*[torch.tensor([0.0, 7.0])] + [torch.zeros(2)] * 6))
    with pytest.raises(ReportedError, match=r"^data.env: UserWorld.step returned episode parts with task not an index "
                                            r"into its 2-task bank in rollout 4"):
        loop.check_parts(buf, 4)
    buf.write(0, parts=EpisodeParts(torch.zeros(2), torch.tensor([0.0, 1.5]), *[torch.zeros(2)] * 5))
    with pytest.raises(ReportedError, match=r"UserWorld.step returned episode parts with outcome not in \[0, 1\]"):
        loop.check_parts(buf, 4)


class UserSampler:
    """A batched sampler whose pick_batch returns whatever the test sets."""

    def __init__(self, picked) -> None:
        self.picked = picked

    def pick_batch(self, shard, round_index, reset_mask, generator=None):
        return self.picked


@pytest.mark.parametrize("picked, says", [
    ([0, 1], r"returned list \[0, 1\], not a tensor"),
    (torch.zeros(3, dtype=torch.long), r"returned a tensor of shape \[3\], not \[num_envs\] = \[2\]"),
    (torch.zeros(2), r"returned a torch.float32 tensor, not integer bank indices"),
    (torch.tensor([0.0, math.nan]), r"returned a torch.float32 tensor, not integer bank indices"),
    (torch.zeros(2, dtype=torch.long, device="meta"), r"returned a tensor on meta, not on the actors' device cpu"),
], ids=["type", "shape", "dtype", "nan", "device"])
def test_a_batched_samplers_picks_are_checked_every_step(picked, says) -> None:
    loop = _loop()
    loop.picks = SamplerPicks(UserSampler(picked), torch.Generator(), SamplerLock())
    loop.current_task = torch.zeros(2, dtype=torch.long)
    context = SimpleNamespace(shard=torch.arange(2), round_index=0)
    with pytest.raises(ReportedError, match=rf"^data\.sampler: UserSampler\.pick_batch {says}") as err:
        loop._pick(context, torch.ones(2, dtype=torch.bool))
    assert "\n" not in str(err.value)


def test_a_batched_samplers_picks_outside_the_bank_are_named_without_a_host_read_per_step() -> None:
    loop = _loop()
    loop.picks = SamplerPicks(UserSampler(torch.tensor([0, 9])), torch.Generator(), SamplerLock())
    loop.current_task = torch.zeros(2, dtype=torch.long)
    context = SimpleNamespace(shard=torch.arange(2), round_index=0)
    loop._pick(context, torch.ones(2, dtype=torch.bool))  # no raise here: a device flag, read off the step
    error = loop._sampler_fault()
    assert error is not None and str(error).startswith(
        "data.sampler: UserSampler.pick_batch returned a task index outside the task bank (0..1)"), error
    assert loop._sampler_fault() is None  # read once


class StringSampler:
    def __init__(self, answer) -> None:
        self.answer = answer

    def pick(self, keys, round_index):
        return self.answer

    def record(self, task_id, score):
        return None


@pytest.mark.parametrize("answer", [["a-0"], math.nan, "b-7", None], ids=["type", "nan", "out-of-range", "none"])
def test_a_two_method_samplers_pick_is_checked(answer) -> None:
    sampler = as_batched(StringSampler(answer), queue_length=2)
    sampler.bind(["a-0", "a-1"], torch.device("cpu"))
    with pytest.raises(ReportedError, match=r"^data\.sampler: StringSampler\.pick returned .* which is not in the "
                                            r"shard it was given \(2 of the bank's 2 tasks\); pick must return one of `keys`$"):
        sampler.pick_batch(torch.arange(2), 0, torch.ones(2, dtype=torch.bool))


class UserPlan:
    name = "user"

    def __init__(self, units) -> None:
        self.units = units

    def plan(self, n_workers, round_index, keys):
        return self.units


@pytest.mark.parametrize("units, says", [
    (None, r"UserPlan\(name=.user.\)\.plan must return a list of WorkUnit, got NoneType"),
    ([("a-0",)], r"UserPlan\(name=.user.\)\.plan must return a list of WorkUnit, got list"),
    ([WorkUnit(0, ("a-0",)), WorkUnit(5, ("a-1",))], r"UserPlan\(name=.user.\)\.plan gave units for workers \[0, 5\]"),
    ([WorkUnit(0, ("a-0",)), WorkUnit(1, ("z-9",))], r"UserPlan\(name=.user.\)\.plan gave worker 1 task ids not in this round's keys"),
], ids=["type", "nested", "out-of-range-worker", "out-of-range-key"])
def test_a_strategys_plan_is_checked(units, says) -> None:
    with pytest.raises((TypeError, ValueError), match=says) as err:
        checked_plan(UserPlan(units), 2, 0, ["a-0", "a-1"])
    assert "\n" not in str(err.value)
    for worker in (math.nan, 1.5, "0", -1):  # a unit with a NaN, fractional or negative worker cannot be built
        with pytest.raises(ValueError, match=r"^WorkUnit.worker: got .*; a worker is a rank index"):
            WorkUnit(worker, ("a-0",))


@pytest.mark.parametrize("value, says", [
    (None, r"returned None \(a missing `return`\?\)"),
    ("done", r"returned str 'done'"),
    ({"success": "no"}, r"returned success='no'; success must be a bool"),
    ({"success": True, "steps": math.nan}, r"returned steps=nan; steps must be a whole number >= 0"),
    ({"success": True, "steps": -1}, r"returned steps=-1; steps must be a whole number >= 0"),
    ({"success": True, "steps": 10**400 if False else math.inf}, r"returned steps=inf"),
], ids=["none", "type", "dtype", "nan", "negative", "inf"])
def test_a_subagent_functions_return_is_checked(value, says) -> None:
    # the worker prefixes the function's path (`tests.subagent_fns:solve returned steps=nan; ...`:
    # tests/test_external_env.py runs it end to end through a ProcessPool)
    with pytest.raises(TypeError, match=rf"^{says}"):
        normalize(value, 0.0)


class UserCallback:
    pass


@pytest.mark.parametrize("stats, says", [
    ([1.0], r"set rollout.stats to list"),
    ({"user/x": torch.zeros(3)}, r"set rollout.stats\['user/x'\] to a tensor of shape \[3\]"),
    ({"user/x": "high"}, r"set rollout.stats\['user/x'\] to str 'high'"),
    ({3: torch.tensor(1.0)}, r"added the key 3 to rollout.stats"),
], ids=["type", "shape", "string", "key"])
def test_a_callbacks_rollout_stats_are_checked(stats, says) -> None:
    with pytest.raises(ReportedError, match=rf"^trainer\.callbacks: .*UserCallback\.on_rollout_end {says}") as err:
        check_rollout_stats(SimpleNamespace(stats=stats), UserCallback())
    assert "\n" not in str(err.value)
