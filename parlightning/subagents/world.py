"""`PoolOrchestrationWorld`: a small orchestration task whose subagents are real work in a
`SubagentPool`, one episode at a time (the external-world contract of `ExternalBatchedEnv`).

A task is a chain of stages of up to `max_width` subtasks (skill, cost). Each step the
orchestrator does every pending subtask of the stage itself (action 0: costs the main agent
its steps) or delegates it with instruction s - 1 (action s > 0): the pool runs it and reports
success and the steps it used. The stage lasts main steps + the longest subagent; the episode
is solved when every stage is done within the task's budget, late (`late_credit`) within
`late_window` x budget, else abandoned. Tasks are generated from `bank_seed`, families like
SwarmEnv's: `solo` (one subtask wide, doing it yourself is right), `fanout` (wide, delegation
pays), `locked` (budget below the critical path: never solvable).
"""

from __future__ import annotations

import math
import random
import time
from typing import Any, Optional, Sequence

from parlightning.config_types import (
    ClosedUnitInterval, NonNegativeFinite, NonNegativeInt, PositiveFinite, PositiveInt, Seed, check_args, check_value,
    check_allocation, restricted_number_type,
)
from parlightning.envs.base import ActionSpec
from parlightning.errors import ConfigError
from parlightning.method_args import ItemsArg, Lifecycle, State, checked_methods
from parlightning.subagents.pool import SubagentPool, SubagentResult, checked_results

LateWindow = restricted_number_type("PoolLateWindow", float, [(">=", 1.0), ("<", math.inf)],
                                    docstring="a multiple of the budget, >= 1")

FAMILIES = {"solo": (1, 1), "fanout": (2, 3), "locked": (2, 3)}  # family -> (width lo, width hi)


def make_tasks(families: Sequence[str], tasks_per_family: int, max_levels: int, max_width: int, n_skills: int,
               max_cost: int, spawn_steps: int, bank_seed: int) -> dict[str, dict[str, Any]]:
    """Task id (`family-index`) -> {stages: [[(skill, cost), ...], ...], budget}."""
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise ValueError(f"PoolOrchestrationWorld: unknown families {unknown}; choose from {sorted(FAMILIES)}")
    rng = random.Random(bank_seed)
    tasks = {}
    for name in families:
        lo, hi = FAMILIES[name]
        for i in range(tasks_per_family):
            stages = []
            for _ in range(rng.randint(1, max_levels)):
                width = rng.randint(min(lo, max_width), min(hi, max_width))
                stages.append([(rng.randrange(n_skills), rng.randint(1, max_cost)) for _ in range(width)])
            critical = sum(1 + spawn_steps + max(c for _, c in s) for s in stages)
            serial = sum(1 + sum(c for _, c in s) for s in stages)
            budget = {"solo": serial + 1, "fanout": critical + (serial - critical) // 4, "locked": critical - 1}[name]
            tasks[f"{name}-{i}"] = {"stages": stages, "budget": float(budget)}
    return tasks


# an episode starts with reset(task): step before it has no task (AsyncPoolOrchestrationWorld inherits it)
EPISODE = Lifecycle({"reset": State("called before reset(task); call world.reset(task) first")},
                    requires={"step": "reset"}, enters={"reset": "reset"})


# step(action): one choice per subtask slot, as its action_spec says (0: the main agent does it; k: delegate with
# instruction k - 1); O(max_width) Python, as the step's own work is
ACTION = {"step": {"action": ItemsArg(int, length="max_width", hi=lambda w: w.n_skills + 1,
                                      text="one per subtask slot: 0 does it in the main agent, k delegates it "
                                           "with instruction k - 1")}}


@checked_methods(lifecycle=EPISODE, **ACTION)
class PoolOrchestrationWorld:
    """One orchestrator episode at a time on a subagent pool; see the module docstring.

    Args:
        pool: the `SubagentPool` subtasks are delegated to (shared by all actors).
        main_seconds: wall seconds the main agent spends per env step (its own model call: a wait).
        main_cpu_seconds: CPU seconds of Python the main agent burns per env step (parsing, bookkeeping,
            a local simulation: work that threads cannot overlap under the GIL; worker processes can).
        subagent_timeout: seconds to wait for a stage's subagents before counting them failed.
        call_latency: [median, sigma]: each step the main agent also waits for one model call of
            lognormal latency (seconds; drawn from the world's seeded stream), overlapping its
            subagents (the step lasts the longer of the two). None: no such call.
        fail_rate, hang_rate: the share of steps that raise `ConnectionError` (a 5xx answer) or
            hang for `hang_seconds` (a call that never answers), drawn from the world's stream:
            fault injection for the failure policy (`on_error`).
        `busy_seconds` counts the seconds of model calls and subagents this world waited for (each
        step: the longer of `call_latency`'s draw and its subagents' seconds, as drawn, however
        late the host noticed the answer): the numerator of a subagent utilisation.
        the rest: the task bank (as in SwarmEnv) and the episode limits.
    Observation: per slot [pending, one-hot skill, cost / max_cost], then budget left, elapsed,
    stage, stages (scaled) and steps taken. Action: multi-discrete, one entry per slot.
    """

    def __init__(self, pool: SubagentPool, seed: Seed = 0, families: Sequence[str] = ("solo", "fanout", "locked"),
                 tasks_per_family: PositiveInt = 4, max_levels: PositiveInt = 2, max_width: PositiveInt = 3,
                 n_skills: PositiveInt = 3, max_cost: PositiveInt = 3, spawn_steps: NonNegativeInt = 1,
                 max_episode_steps: PositiveInt = 8, late_credit: ClosedUnitInterval = 0.1,
                 late_window: LateWindow = 2.0, main_seconds: NonNegativeFinite = 0.0,
                 main_cpu_seconds: NonNegativeFinite = 0.0, subagent_timeout: Optional[PositiveFinite] = 60.0,
                 bank_seed: Seed = 1234, call_latency: Optional[Sequence[float]] = None,
                 fail_rate: ClosedUnitInterval = 0.0, hang_rate: ClosedUnitInterval = 0.0,
                 hang_seconds: NonNegativeFinite = 3600.0) -> None:
        name = "PoolOrchestrationWorld"
        typed = check_args(name, PoolOrchestrationWorld.__init__, locals())  # the annotated ranges (config_types)
        seed, tasks_per_family, max_levels, max_width, n_skills, max_cost, spawn_steps, max_episode_steps = (
            typed[k] for k in ("seed", "tasks_per_family", "max_levels", "max_width", "n_skills", "max_cost",
                               "spawn_steps", "max_episode_steps"))
        late_credit, late_window, main_seconds, main_cpu_seconds, subagent_timeout, bank_seed = (typed[k] for k in (
            "late_credit", "late_window", "main_seconds", "main_cpu_seconds", "subagent_timeout", "bank_seed"))
        fail_rate, hang_rate, hang_seconds = typed["fail_rate"], typed["hang_rate"], typed["hang_seconds"]
        missing = [m for m in ("spawn", "poll") if not callable(getattr(pool, m, None))]
        if missing:  # a wrong class under shared.pool would otherwise fail at the first delegation, mid-rollout
            raise ValueError(f"PoolOrchestrationWorld: pool is a {type(pool).__name__}, not a subagent pool (it has no "
                             f"{', '.join(missing)}); name a pool under shared.pool, e.g. "
                             "parlightning.subagents.SimulatedPool, or one with spawn / poll / wait / cancel / close")
        self.pool, self.seed = pool, seed
        if isinstance(families, str) or not families:
            raise ValueError(f"PoolOrchestrationWorld: families must be a non-empty list of families, got {families!r}")
        twice = next((f for i, f in enumerate(families) if f in list(families)[:i]), None)
        if twice is not None:  # its tasks would replace the first listing's under the same ids: fewer tasks, silently
            raise ValueError(f"PoolOrchestrationWorld: families lists {twice!r} twice; name each family once (more "
                             "tasks of one family: tasks_per_family)")
        if call_latency is not None and (isinstance(call_latency, (str, bytes)) or not isinstance(
                call_latency, Sequence) or len(call_latency) != 2):
            raise ValueError(f"PoolOrchestrationWorld: call_latency must be [median > 0, sigma >= 0] (two numbers: a "
                             f"lognormal's median seconds and sigma) or null, got {call_latency!r}")
        if call_latency is not None:
            call_latency = (check_value(f"{name}.call_latency[0] (the median)", PositiveFinite, call_latency[0]),
                            check_value(f"{name}.call_latency[1] (sigma)", NonNegativeFinite, call_latency[1]))
        self.call_latency = tuple(call_latency) if call_latency is not None else None
        self.fail_rate, self.hang_rate, self.hang_seconds = fail_rate, hang_rate, hang_seconds
        self._rng = random.Random(seed * 7919 + 17)
        self.busy_seconds = 0.0
        self.max_width, self.n_skills, self.max_levels, self.max_cost = max_width, n_skills, max_levels, max_cost
        self.max_episode_steps, self.late_credit, self.late_window = max_episode_steps, late_credit, late_window
        self.main_seconds, self.subagent_timeout = main_seconds, subagent_timeout
        self.main_cpu_seconds = main_cpu_seconds
        subtasks = len(families) * tasks_per_family * max_levels * max_width  # Python dicts of a few fields each
        check_allocation(f"{name}(tasks_per_family={tasks_per_family}, max_levels={max_levels}, max_width={max_width}, "
                         f"n_skills={n_skills})", 400 * subtasks + 8 * max_width * (n_skills + 2), "cpu",
                         "lower max_width, max_levels, tasks_per_family or n_skills")
        self.bank = make_tasks(families, tasks_per_family, max_levels, max_width, n_skills, max_cost, spawn_steps,
                               bank_seed)
        self.tasks = list(self.bank)
        self.scale = max(t["budget"] for t in self.bank.values())
        self.observation_shape = (max_width * (n_skills + 2) + 5,)
        self.action_spec = ActionSpec("multi_discrete", nvec=(n_skills + 1,) * max_width)
        self.task: Optional[str] = None
        self.solved_threshold = 1.0  # outcome 1 = done within the budget
        self.max_subagents = max_width * max_levels  # where r_parallel saturates: one subagent per subtask

    def _observe(self) -> list[float]:
        stage = self.stages[self.level] if self.level < len(self.stages) else []
        obs: list[float] = []
        for slot in range(self.max_width):
            pending = slot < len(stage) and self.pending[slot]
            skill, cost = stage[slot] if pending else (0, 0)
            obs += [float(pending)] + [float(pending and s == skill) for s in range(self.n_skills)]
            obs.append(cost / self.max_cost)
        budget = self.bank[self.task]["budget"]
        return obs + [(budget - self.elapsed) / self.scale, self.elapsed / self.scale, self.level / self.max_levels,
                      len(self.stages) / self.max_levels, self.attempts / self.max_episode_steps]

    def _enter(self, level: int) -> None:
        self.level = level
        width = len(self.stages[level]) if level < len(self.stages) else 0
        self.pending = [True] * width

    def reset(self, task: Optional[str]) -> list[float]:
        if task is not None and task not in self.bank:
            shown = ", ".join(self.tasks[:4]) + (", ..." if len(self.tasks) > 4 else "")
            raise ConfigError(f"{type(self).__name__}.reset(task): {task!r} is not one of its tasks ({shown}; "
                              f"{len(self.tasks)} in all); pass a name from its .tasks")
        self.task = task if task is not None else self.tasks[0]
        self.stages = self.bank[self.task]["stages"]
        self.elapsed = self.serial = 0.0
        self.n_subagents = self.assigned = self.completed = 0.0
        self.attempts = 0
        self._enter(0)
        return self._observe()

    def step(self, action: Sequence[int]) -> tuple[list[float], float, bool, bool, Optional[dict[str, float]]]:
        start = time.perf_counter()
        if self._fault():
            time.sleep(self.hang_seconds)
        call_until, stage, own, delegated, handles = self._begin(action, start)
        if self.main_cpu_seconds:  # Python work holding the GIL (thread CPU time, so contention does not shorten it)
            until = time.thread_time() + self.main_cpu_seconds
            while time.thread_time() < until:
                pass
        if self.main_seconds:
            time.sleep(self.main_seconds)  # the main agent works while its subagents run
        results = checked_results(self.pool, "wait", self.pool.wait(handles, timeout=self.subagent_timeout),
                                  len(handles)) if handles else []
        if call_until is not None:
            left = call_until - time.perf_counter()
            if left > 0:
                time.sleep(left)
        return self._finish(start, call_until, stage, own, delegated, results)

    def _fault(self) -> bool:
        """Fault injection: True for a call that hangs; raises for one that fails."""
        if self.fail_rate or self.hang_rate:
            u = self._rng.random()
            if u < self.hang_rate:
                return True
            if u < self.hang_rate + self.fail_rate:
                raise ConnectionError(f"simulated 503 from the model on task {self.task}")
        return False

    def _begin(self, action: Sequence[int], start: float) -> tuple:
        call_until = None
        if self.call_latency is not None:
            median, sigma = self.call_latency
            call_until = start + median * math.exp(sigma * self._rng.gauss(0.0, 1.0))
        stage = self.stages[self.level]
        own = [i for i, (p, a) in enumerate(zip(self.pending, action)) if p and a == 0]
        delegated = [i for i, (p, a) in enumerate(zip(self.pending, action)) if p and a > 0]
        handles = [self.pool.spawn({"skill": stage[i][0], "instruction": int(action[i]) - 1, "cost": stage[i][1],
                                    "prompt": f"subtask {self.task}/{self.level}/{i}: skill {stage[i][0]}, "
                                              f"instruction {int(action[i]) - 1}, cost {stage[i][1]}"})
                   for i in delegated]
        return call_until, stage, own, delegated, handles

    def _finish(self, start: float, call_until: Optional[float], stage: list, own: list, delegated: list,
                results: list) -> tuple:
        self.busy_seconds += max([r.seconds for r in results] + [(call_until - start) if call_until else 0.0])
        main_steps = 1.0 + sum(stage[i][1] for i in own)
        done_here = set(own) | {i for i, r in zip(delegated, results) if r.success}
        self.elapsed += main_steps + max((r.steps for r in results), default=0)
        self.serial += main_steps + sum(stage[i][1] for i, r in zip(delegated, results) if r.success)
        self.n_subagents += len(delegated)
        self.assigned += len(delegated)
        self.completed += sum(r.success for r in results)
        self.attempts += 1
        self.pending = [p and i not in done_here for i, p in enumerate(self.pending)]
        if not any(self.pending):
            self._enter(self.level + 1)
        budget = self.bank[self.task]["budget"]
        all_done = self.level >= len(self.stages)
        abandoned = self.elapsed > self.late_window * budget
        terminated = all_done or abandoned
        truncated = not terminated and self.attempts >= self.max_episode_steps
        outcome = (1.0 if self.elapsed <= budget else self.late_credit) if all_done and not abandoned else 0.0
        parts = None
        if terminated or truncated:
            parts = {"outcome": outcome, "n_subagents": self.n_subagents, "assigned": self.assigned,
                     "completed": self.completed, "critical_steps": self.elapsed, "serial_steps": self.serial}
        return self._observe(), outcome, terminated, truncated, parts


@checked_methods(**ACTION)
class AsyncPoolOrchestrationWorld(PoolOrchestrationWorld):
    """`PoolOrchestrationWorld` with `async def` reset and step: its waits (the model call, the
    subagents, a hang) are awaited, so thousands of worlds share one event loop in one thread
    (`ExternalBatchedEnv` runs `async def` worlds that way) instead of a thread each.
    `main_cpu_seconds` and `main_seconds` are not supported (they would block the loop)."""

    async def reset(self, task: Optional[str]) -> list[float]:  # type: ignore[override]
        return PoolOrchestrationWorld.reset(self, task)

    async def step(self, action: Sequence[int]) -> tuple:  # type: ignore[override]
        import asyncio

        start = time.perf_counter()
        if self._fault():
            await asyncio.sleep(self.hang_seconds)
        call_until, stage, own, delegated, handles = self._begin(action, start)
        interval = getattr(self.pool, "poll_interval", 0.0005)
        results: dict[int, Any] = {}
        deadline = None if self.subagent_timeout is None else start + self.subagent_timeout
        while len(results) < len(handles):
            for h in handles:
                if h not in results:
                    r = self.pool.poll(h)
                    if r is not None:
                        results[h] = checked_results(self.pool, "poll", r, 1)[0]
            if len(results) < len(handles):
                if deadline is not None and time.perf_counter() > deadline:
                    for h in handles:
                        if h not in results:
                            self.pool.cancel(h)
                            results[h] = SubagentResult(False, 0, self.subagent_timeout, error="timed out")
                    break
                await asyncio.sleep(interval)
        if call_until is not None:
            left = call_until - time.perf_counter()
            if left > 0:
                await asyncio.sleep(left)
        return self._finish(start, call_until, stage, own, delegated, [results[h] for h in handles])
