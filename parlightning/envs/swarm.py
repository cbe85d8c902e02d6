"""`SwarmEnv`: a batched, tensor-native simulator of orchestration (the PARL world).

A task is a chain of stages; each stage holds up to `max_width` subtasks that depend on the
whole previous stage. At every env step the orchestrator looks at the pending subtasks of the
current stage and, per subtask, either does it itself (serial: always works, costs the
subtask's steps on the main agent) or delegates it to a frozen subagent with one of `n_skills`
instructions (parallel: the subagent needs `spawn_steps` to start, then finishes the subtask
with probability `subagent_reliability` only when the instruction matches the subtask's
skill; otherwise the subtask stays pending). It may also spawn up to `max_helpers` extra
subagents per step that get no subtask: they wander for `helper_steps` (longer than any real
subtask) and finish nothing; they count as spawned, never as assigned, and are only spawned
while the episode has spawned fewer than `max_subagents` (where r_parallel saturates). A
stage costs `S_main + max_i S_sub,i` critical steps.

Outcome (r_perf): 1 when every stage is done within the task's step budget (solved);
`late_credit` when done later but within `late_window` x budget; 0 when the episode is
abandoned past `late_window` x budget (terminated) or cut at `max_episode_steps` (truncated).

Both PARL failure modes are real here. Serial collapse: an untrained instruction is right one
time in `n_skills`, so untrained delegation rarely finishes even late, while doing the work
yourself always finishes (in time on narrow tasks, where delegating never pays; late on wide
ones). A policy paid on the outcome alone learns to do everything itself and never learns the
instructions that wide tasks need to be done in time; a dense signal per delegated subtask
(r_finish) teaches them. Spurious parallelism: helpers are the cheapest way to raise
r_parallel, and every stage they run in lasts longer, so a policy that is still paid for
parallelism keeps spawning subagents that finish nothing; on a narrow task one helper makes it
late, and a policy that spawns them in most steps rarely sees the episode that shows it.
The bank mixes tasks that are always solvable, never solvable (budget below the critical
path) and in between, grouped in families (`family-index` ids; families are clusters).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch
from torch import Tensor

from parlightning.errors import ConfigError
from parlightning.envs.base import ActionSpec, BatchedEnv, EpisodeParts, StepResult
from parlightning.metrics import stage_critical_steps

# family name -> (levels lo, levels hi, width lo, width hi, budget profile)
# budget profile: "serial" is serial execution + 1 step (always solvable by doing it yourself;
# no room for a failed delegation or a helper), "spread" runs from the critical path (hard) to a
# quarter of the way to serial (easier) across the family, "tight" sits near the critical path
# (needs reliable delegation), "locked" is below it (never solvable).
FAMILIES: dict[str, tuple[int, int, int, int, str]] = {
    "solo": (1, 3, 1, 1, "serial"),
    "fanout": (1, 2, 3, 4, "spread"),
    "pipeline": (2, 3, 2, 3, "tight"),
    "locked": (1, 2, 3, 4, "locked"),
}


def _check_positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"SwarmEnv: `{name}` must be a positive integer, got {value!r}")


class TaskBank:
    """The tasks, as tensors resident once on the device and shared by all actors.

    skill/cost/present: [K, L, W]; n_levels, budget, family: [K]. `task_ids[k]` is `family-index`.
    """

    def __init__(
        self,
        families: Sequence[str],
        tasks_per_family: int,
        max_levels: int,
        max_width: int,
        n_skills: int,
        max_cost: int,
        seed: int,
        device: torch.device,
        spawn_steps: int = 1,
    ) -> None:
        unknown = [f for f in families if f not in FAMILIES]
        if unknown:
            raise ConfigError(f"SwarmEnv: unknown `families` {unknown}; choose from {sorted(FAMILIES)}")
        g = torch.Generator().manual_seed(seed)
        K, L, W = len(families) * tasks_per_family, max_levels, max_width
        skill = torch.randint(0, n_skills, (K, L, W), generator=g)
        cost = torch.randint(1, max_cost + 1, (K, L, W), generator=g).float()
        present = torch.zeros(K, L, W, dtype=torch.bool)
        n_levels = torch.zeros(K, dtype=torch.long)
        budget = torch.zeros(K)
        family = torch.zeros(K, dtype=torch.long)
        self.task_ids: list[str] = []
        for f, name in enumerate(families):
            lv_lo, lv_hi, w_lo, w_hi, profile = FAMILIES[name]
            for i in range(tasks_per_family):
                k = f * tasks_per_family + i
                levels = int(torch.randint(min(lv_lo, L), min(lv_hi, L) + 1, (), generator=g))
                widths = torch.randint(min(w_lo, W), min(w_hi, W) + 1, (levels,), generator=g)
                for lv in range(levels):
                    present[k, lv, : int(widths[lv])] = True
                n_levels[k] = levels
                c = cost[k] * present[k]
                # all delegated and right the first time / all done by the main agent
                critical = float((1 + spawn_steps + c.amax(dim=1)).narrow(0, 0, levels).sum())
                serial = float((1 + c.sum(dim=1)).narrow(0, 0, levels).sum())
                frac = i / max(tasks_per_family - 1, 1)
                if profile == "serial":
                    budget[k] = serial + 1
                elif profile == "spread":
                    budget[k] = round(critical + 0.25 * frac * (serial - critical))
                elif profile == "tight":
                    budget[k] = round(critical + 0.25 * frac * (serial - critical)) + 1
                else:  # locked
                    budget[k] = critical - 1
                family[k] = f
                self.task_ids.append(f"{name}-{i}")
        self.families = list(families)
        self.skill = skill.to(device)
        self.cost = (cost * present).to(device)
        self.present = present.to(device)
        self.n_levels = n_levels.to(device)
        self.budget = budget.to(device)
        self.family = family.to(device)

    def __len__(self) -> int:
        return len(self.task_ids)


class SwarmEnv(BatchedEnv):
    """N orchestrator actors on the task bank, stepped together; see the module docstring.

    Action (multi-discrete): one entry per subtask slot, 0 = do it yourself, s > 0 = delegate
    with instruction s - 1; then one entry with the number of extra helpers to spawn.
    `EpisodeParts.serial_steps` counts the useful work only (every finished subtask at its cost,
    plus the orchestration step of every env step): failed tries and helpers add critical steps
    but no serial steps, so a speed-up below 1 means the orchestration lost more time than its
    parallelism saved.
    """

    solved_threshold = 1.0  # outcome 1 = done within the budget (solved); late_credit = done late; 0 = unfinished

    def __init__(
        self,
        num_envs: int = 256,
        device: str | torch.device = "cpu",
        seed: int = 0,
        families: Sequence[str] = ("solo", "fanout", "pipeline", "locked"),
        tasks_per_family: int = 8,
        max_levels: int = 3,
        max_width: int = 4,
        n_skills: int = 8,
        max_cost: int = 3,
        max_subagents: int = 16,
        max_helpers: int = 6,
        helper_steps: int = 5,
        subagent_reliability: float = 0.9,
        max_episode_steps: int = 12,
        bank_seed: int = 1234,
        spawn_steps: int = 1,
        late_credit: float = 0.1,
        late_window: float = 2.0,
    ) -> None:
        for name in ("num_envs", "tasks_per_family", "max_levels", "max_width", "n_skills", "max_cost",
                     "max_subagents", "helper_steps", "max_episode_steps"):
            _check_positive(name, locals()[name])
        for name, value in (("max_helpers", max_helpers), ("spawn_steps", spawn_steps)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"SwarmEnv: `{name}` must be an integer >= 0, got {value!r}")
        if not 0.0 <= subagent_reliability <= 1.0:
            raise ConfigError(f"SwarmEnv: `subagent_reliability` must lie in [0, 1], got {subagent_reliability!r}")
        if not 0.0 <= late_credit < 1.0:
            raise ConfigError(f"SwarmEnv: `late_credit` must lie in [0, 1), got {late_credit!r}")
        if not late_window >= 1.0:
            raise ConfigError(f"SwarmEnv: `late_window` must be >= 1 (a multiple of the budget), got {late_window!r}")
        if len(families) == 0:
            raise ConfigError("SwarmEnv: `families` is empty; name at least one of " + str(sorted(FAMILIES)))
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.max_width, self.n_skills, self.max_levels = max_width, n_skills, max_levels
        self.max_cost, self.max_subagents, self.max_helpers = max_cost, max_subagents, max_helpers
        self.helper_steps, self.spawn_steps = float(helper_steps), float(spawn_steps)
        self.reliability, self.late_credit, self.late_window = subagent_reliability, float(late_credit), float(late_window)
        self.max_episode_steps = max_episode_steps
        self.bank = TaskBank(families, tasks_per_family, max_levels, max_width, n_skills, max_cost,
                             bank_seed, self.device, spawn_steps)
        self.task_ids = self.bank.task_ids
        self.action_spec = ActionSpec("multi_discrete", nvec=(n_skills + 1,) * max_width + (max_helpers + 1,))
        n_fam = len(self.bank.families)
        self.observation_shape = (max_width * (n_skills + 2) + 6 + n_fam,)
        self._budget_scale = float(self.bank.budget.max().clamp(min=1.0))
        self._fam_eye = torch.eye(n_fam, device=self.device)
        self._skill_eye = torch.eye(n_skills, device=self.device)
        # Per (task, level) rows flattened to [K*L, ...]: one index_select instead of 2-D fancy indexing
        # (aten::index with two index tensors was a third of a step at N=4096 on CPU).
        K, L = len(self.bank), max_levels
        self._skill_rows = self.bank.skill.reshape(K * L, max_width)
        self._cost_rows = self.bank.cost.reshape(K * L, max_width)
        self._present_rows = self.bank.present.reshape(K * L, max_width)
        self._slot_rows = torch.cat(  # [K*L, W, 1 + S + 1]: what a pending slot shows (pending, skill, cost)
            [torch.ones_like(self._cost_rows).unsqueeze(-1), self._skill_eye[self._skill_rows],
             (self._cost_rows / self.max_cost).unsqueeze(-1)], -1)
        self._task_family = self._fam_eye[self.bank.family]  # [K, F]
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self._seed = seed
        N, W = num_envs, max_width
        z = lambda dtype=torch.float32: torch.zeros(N, dtype=dtype, device=self.device)  # noqa: E731
        self.task, self.level, self.attempts = z(torch.long), z(torch.long), z(torch.long)
        self.pending = torch.zeros(N, W, dtype=torch.bool, device=self.device)
        self.elapsed, self.serial = z(), z()
        self.n_subagents, self.assigned, self.completed = z(), z(), z()
        self._arange = torch.arange(N, device=self.device)
        self._start_obs = self._fresh_observations()  # [K, D]: an episode's first observation depends on its task only

    def _fresh_observations(self) -> Tensor:
        """The first observation of an episode of each task (what `_observe` shows right after `_start`)."""
        K = len(self.bank)
        task = torch.arange(K, device=self.device)
        zero, zero_long = torch.zeros(K, device=self.device), torch.zeros(K, dtype=torch.long, device=self.device)
        return self._observe_state(task, zero_long, self.bank.present[:, 0], zero, zero, zero_long)

    # ------------------------------------------------------------------ observation
    def _observe(self) -> Tensor:
        return self._observe_state(self.task, self.level, self.pending, self.elapsed, self.n_subagents, self.attempts)

    def _observe_state(
        self, task: Tensor, level: Tensor, pending: Tensor, elapsed: Tensor, n_subagents: Tensor, attempts: Tensor
    ) -> Tensor:
        bank = self.bank
        row = task * self.max_levels + level.clamp(max=self.max_levels - 1)
        slots = self._slot_rows.index_select(0, row) * pending.unsqueeze(-1)  # [N, W, 1 + S + 1]
        budget = bank.budget.index_select(0, task)
        scalars = torch.stack(
            [
                (budget - elapsed) / self._budget_scale,
                elapsed / self._budget_scale,
                level.float() / self.max_levels,
                bank.n_levels.index_select(0, task).float() / self.max_levels,
                (self.max_subagents - n_subagents).clamp(min=0) / self.max_subagents,
                attempts.float() / self.max_episode_steps,
            ],
            -1,
        )
        return torch.cat([slots.flatten(1), scalars, self._task_family.index_select(0, task)], -1)

    def _start(self, mask: Tensor, task: Tensor) -> None:
        """Begin a fresh episode on `task` for every actor where `mask` is True (tensor ops only)."""
        self.task = torch.where(mask, task, self.task)
        keep = ~mask
        self.level = self.level * keep
        self.attempts = self.attempts * keep
        keep = keep.float()  # converted once, not once per field
        for name in ("elapsed", "serial", "n_subagents", "assigned", "completed"):
            setattr(self, name, getattr(self, name) * keep)
        first = self._present_rows.index_select(0, self.task * self.max_levels)
        self.pending = torch.where(mask.unsqueeze(-1), first, self.pending)

    def reset(self, *, seed: Optional[int] = None, task_index: Optional[Tensor] = None) -> Tensor:
        """Start every actor on `task_index` ([N] bank indices; default: actor i on task i mod K)."""
        if seed is not None:
            self.generator.manual_seed(seed)
            self._seed = seed
        if task_index is None:
            task_index = self._arange % len(self.bank)
        task_index = task_index.to(self.device, torch.long)
        self._start(torch.ones(self.num_envs, dtype=torch.bool, device=self.device), task_index)
        return self._observe()

    # ------------------------------------------------------------------ dynamics
    def step(self, action: Tensor, next_task: Optional[Tensor | Callable[[Tensor], Tensor]] = None) -> StepResult:
        bank, W = self.bank, self.max_width
        action = action.to(self.device, torch.long)
        row = self.task * self.max_levels + self.level.clamp(max=self.max_levels - 1)
        skill, cost = self._skill_rows.index_select(0, row), self._cost_rows.index_select(0, row)
        slot, extra = action[:, :W], action[:, W]

        # Delegations are never refused; extra helpers only while the episode is under max_subagents.
        delegate = self.pending & (slot > 0)
        own = self.pending & ~delegate
        n_delegated = delegate.sum(1, dtype=torch.float32)
        helpers = torch.minimum(extra.float(), (self.max_subagents - self.n_subagents - n_delegated).clamp(min=0))
        right = (slot - 1) == skill
        lucky = torch.rand(self.pending.shape, generator=self.generator, device=self.device) < self.reliability
        success = delegate & right & lucky

        # Stage timing: the main agent does its own subtasks one after another (+1 to orchestrate);
        # subagents (delegates and helpers) run side by side; the stage lasts main + longest subagent.
        main_steps = 1.0 + (cost * own).sum(1)
        sub_steps = torch.cat([cost + self.spawn_steps, torch.full_like(cost[:, :1], self.helper_steps)], 1)
        sub_mask = torch.cat([delegate, (helpers > 0).unsqueeze(1)], 1)
        stage = stage_critical_steps(main_steps, sub_steps, sub_mask)
        self.elapsed = self.elapsed + stage
        self.serial = self.serial + main_steps + (cost * success).sum(1)  # useful work, done by the main agent
        self.n_subagents = self.n_subagents + n_delegated + helpers
        self.assigned = self.assigned + n_delegated  # helpers get no subtask: spawned, never assigned
        self.completed = self.completed + success.sum(1).float()
        self.attempts = self.attempts + 1

        # Advance past finished stages.
        self.pending = self.pending & ~(own | success)
        stage_done = ~self.pending.any(1)
        self.level = self.level + stage_done.long()
        next_row = self.task * self.max_levels + self.level.clamp(max=self.max_levels - 1)
        self.pending = torch.where(stage_done.unsqueeze(1), self._present_rows.index_select(0, next_row), self.pending)
        all_done = self.level >= bank.n_levels.index_select(0, self.task)
        self.pending = self.pending & ~all_done.unsqueeze(1)

        budget = bank.budget.index_select(0, self.task)
        on_time = self.elapsed <= budget
        abandoned = self.elapsed > self.late_window * budget
        finished = all_done & ~abandoned
        terminated = all_done | abandoned
        truncated = ~terminated & (self.attempts >= self.max_episode_steps)
        done = terminated | truncated
        outcome = torch.where(on_time, 1.0, self.late_credit) * finished
        parts = EpisodeParts(
            task=self.task.clone(),
            outcome=outcome,
            n_subagents=self.n_subagents.clone(),
            assigned=self.assigned.clone(),
            completed=self.completed.clone(),
            critical_steps=self.elapsed.clone(),
            serial_steps=self.serial.clone(),
        )
        final_obs = self._observe()
        if next_task is None:
            next_task = self.task
        elif callable(next_task):
            next_task = next_task(done)  # the data module's sampler picks for the actors that reset
        self._start(done, next_task.to(self.device, torch.long))
        obs = torch.where(done.unsqueeze(1), self._start_obs.index_select(0, self.task), final_obs)
        return StepResult(obs, outcome, terminated, truncated, final_obs, parts)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        names = ("task", "level", "attempts", "pending", "elapsed", "serial", "n_subagents", "assigned", "completed")
        state = {n: getattr(self, n).clone() for n in names}
        state["generator"] = self.generator.get_state()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            if name == "generator":
                self.generator.set_state(value)
            else:
                getattr(self, name).copy_(value)
