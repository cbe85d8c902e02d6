"""`SwarmEnv`: a batched, tensor-native simulator of orchestration (the PARL world).

A task is a chain of stages; each stage holds up to `max_width` subtasks that depend on the
whole previous stage. At every env step the orchestrator looks at the pending subtasks of
the current stage and, per subtask, either does it itself (serial, always succeeds, costs
its steps on the main agent) or delegates it to a frozen subagent with one of `n_skills`
instructions (parallel; succeeds with probability `subagent_reliability` only when the
instruction matches the subtask's skill). It may also spawn up to `max_helpers` extra
subagents that get no subtask: they wander for `helper_steps`, finish nothing, and count
as spawned and assigned (spurious parallelism). A stage costs
`S_main + max_i S_sub,i` critical steps; the episode succeeds when every stage is done
within the task's step budget and ends (terminated) as soon as the budget is exceeded.

Both PARL failure modes are real here: delegating with untrained instructions fails most
of the time while doing the work yourself always succeeds, so a policy rewarded only on
outcome retreats to serial execution (serial collapse), which misses the budget of wide
tasks; and a policy paid for parallelism alone learns to spawn helpers that finish nothing.
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
# budget profile: "serial" fits serial execution with slack (always solvable),
# "spread" runs from the critical path (hard) up to serial (easy) across the family,
# "tight" sits near the critical path (needs reliable delegation), "locked" is below it.
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
                critical = float((1 + c.amax(dim=1)).narrow(0, 0, levels).sum())  # all delegated, first try
                serial = float((1 + c.sum(dim=1)).narrow(0, 0, levels).sum())  # all done by the main agent
                frac = i / max(tasks_per_family - 1, 1)
                if profile == "serial":
                    budget[k] = serial + 2
                elif profile == "spread":
                    budget[k] = round(critical + frac * (serial - critical))
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
    """

    solved_threshold = 1.0  # outcome is 0/1: an episode counts as solved at outcome >= 1

    def __init__(
        self,
        num_envs: int = 256,
        device: str | torch.device = "cpu",
        seed: int = 0,
        families: Sequence[str] = ("solo", "fanout", "pipeline", "locked"),
        tasks_per_family: int = 8,
        max_levels: int = 3,
        max_width: int = 4,
        n_skills: int = 4,
        max_cost: int = 3,
        max_subagents: int = 8,
        max_helpers: int = 2,
        helper_steps: int = 4,
        subagent_reliability: float = 0.9,
        max_episode_steps: int = 12,
        bank_seed: int = 1234,
    ) -> None:
        for name in ("num_envs", "tasks_per_family", "max_levels", "max_width", "n_skills", "max_cost",
                     "max_subagents", "helper_steps", "max_episode_steps"):
            _check_positive(name, locals()[name])
        if not isinstance(max_helpers, int) or max_helpers < 0:
            raise ConfigError(f"SwarmEnv: `max_helpers` must be an integer >= 0, got {max_helpers!r}")
        if not 0.0 <= subagent_reliability <= 1.0:
            raise ConfigError(f"SwarmEnv: `subagent_reliability` must lie in [0, 1], got {subagent_reliability!r}")
        if len(families) == 0:
            raise ConfigError("SwarmEnv: `families` is empty; name at least one of " + str(sorted(FAMILIES)))
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.max_width, self.n_skills, self.max_levels = max_width, n_skills, max_levels
        self.max_cost, self.max_subagents, self.max_helpers = max_cost, max_subagents, max_helpers
        self.helper_steps, self.reliability = float(helper_steps), subagent_reliability
        self.max_episode_steps = max_episode_steps
        self.bank = TaskBank(families, tasks_per_family, max_levels, max_width, n_skills, max_cost,
                             bank_seed, self.device)
        self.task_ids = self.bank.task_ids
        self.action_spec = ActionSpec("multi_discrete", nvec=(n_skills + 1,) * max_width + (max_helpers + 1,))
        n_fam = len(self.bank.families)
        self.observation_shape = (max_width * (n_skills + 2) + 6 + n_fam,)
        self._budget_scale = float(self.bank.budget.max().clamp(min=1.0))
        self._fam_eye = torch.eye(n_fam, device=self.device)
        self._skill_eye = torch.eye(n_skills, device=self.device)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self._seed = seed
        N, W = num_envs, max_width
        z = lambda dtype=torch.float32: torch.zeros(N, dtype=dtype, device=self.device)  # noqa: E731
        self.task, self.level, self.attempts = z(torch.long), z(torch.long), z(torch.long)
        self.pending = torch.zeros(N, W, dtype=torch.bool, device=self.device)
        self.elapsed, self.serial = z(), z()
        self.n_subagents, self.assigned, self.completed = z(), z(), z()
        self._arange = torch.arange(N, device=self.device)

    # ------------------------------------------------------------------ observation
    def _observe(self) -> Tensor:
        bank, lv = self.bank, self.level.clamp(max=self.max_levels - 1)
        skill = self._skill_eye[bank.skill[self.task, lv]]  # [N, W, S]
        cost = bank.cost[self.task, lv] / self.max_cost  # [N, W]
        pending = self.pending.float()
        slots = torch.cat([pending.unsqueeze(-1), skill * pending.unsqueeze(-1), (cost * pending).unsqueeze(-1)], -1)
        budget = bank.budget[self.task]
        scalars = torch.stack(
            [
                (budget - self.elapsed) / self._budget_scale,
                self.elapsed / self._budget_scale,
                self.level.float() / self.max_levels,
                bank.n_levels[self.task].float() / self.max_levels,
                (self.max_subagents - self.n_subagents) / self.max_subagents,
                self.attempts.float() / self.max_episode_steps,
            ],
            -1,
        )
        return torch.cat([slots.flatten(1), scalars, self._fam_eye[bank.family[self.task]]], -1)

    def _start(self, mask: Tensor, task: Tensor) -> None:
        """Begin a fresh episode on `task` for every actor where `mask` is True (tensor ops only)."""
        self.task = torch.where(mask, task, self.task)
        keep = ~mask
        self.level = self.level * keep
        self.attempts = self.attempts * keep
        for name in ("elapsed", "serial", "n_subagents", "assigned", "completed"):
            setattr(self, name, getattr(self, name) * keep)
        self.pending = torch.where(mask.unsqueeze(-1), self.bank.present[self.task, 0], self.pending)

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
        lv = self.level.clamp(max=self.max_levels - 1)
        skill, cost = bank.skill[self.task, lv], bank.cost[self.task, lv]
        slot, extra = action[:, :W], action[:, W]

        # Delegations past the subagent cap fall back to the main agent.
        left = self.max_subagents - self.n_subagents
        delegate = self.pending & (slot > 0)
        delegate = delegate & (torch.cumsum(delegate.float(), 1) <= left.unsqueeze(1))
        own = self.pending & ~delegate
        helpers = torch.minimum(extra.float(), (left - delegate.sum(1)).clamp(min=0))
        right = (slot - 1) == skill
        lucky = torch.rand(self.pending.shape, generator=self.generator, device=self.device) < self.reliability
        success = delegate & right & lucky

        # Stage timing: the main agent does its own subtasks one after another (+1 to orchestrate);
        # subagents (delegates and helpers) run side by side; the stage lasts main + longest subagent.
        main_steps = 1.0 + (cost * own).sum(1)
        sub_steps = torch.cat([cost, torch.full_like(cost[:, :1], self.helper_steps)], 1)
        sub_mask = torch.cat([delegate, (helpers > 0).unsqueeze(1)], 1)
        stage = stage_critical_steps(main_steps, sub_steps, sub_mask)
        self.elapsed = self.elapsed + stage
        self.serial = self.serial + main_steps + (cost * delegate).sum(1) + helpers * self.helper_steps
        n_delegated = delegate.sum(1).float()
        self.n_subagents = self.n_subagents + n_delegated + helpers
        self.assigned = self.assigned + n_delegated + helpers
        self.completed = self.completed + success.sum(1).float()
        self.attempts = self.attempts + 1

        # Advance past finished stages.
        self.pending = self.pending & ~(own | success)
        stage_done = ~self.pending.any(1)
        self.level = self.level + stage_done.long()
        next_lv = self.level.clamp(max=self.max_levels - 1)
        self.pending = torch.where(stage_done.unsqueeze(1), bank.present[self.task, next_lv], self.pending)
        all_done = self.level >= bank.n_levels[self.task]
        self.pending = self.pending & ~all_done.unsqueeze(1)

        budget = bank.budget[self.task]
        over = self.elapsed > budget
        solved = all_done & ~over
        terminated = all_done | over
        truncated = ~terminated & (self.attempts >= self.max_episode_steps)
        done = terminated | truncated
        outcome = solved.float()
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
        obs = torch.where(done.unsqueeze(1), self._observe(), final_obs)
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
