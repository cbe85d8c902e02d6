"""`SwarmEnv`: a batched, tensor-native simulator of orchestration where parallelism pays.

A task (`parlightning.envs.swarm_tasks`) is a chain of stages of up to `max_width` subtasks,
each with a size (steps) and a kind: PLAIN, HARD (a subagent needs a briefed instruction) or
LOCAL (needs the main agent's context; a subagent never finishes it). One env step is one round
at the current stage: per pending subtask the orchestrator either does it itself (reliable,
costs its size on the main agent) or delegates it split into k shards (k in `splits`) with a
generic or a briefed instruction. Each shard is one subagent: it starts in `spawn_steps`, runs
ceil(size / k) steps, and the main agent pays `merge_cost` per shard to merge its output and
`brief_cost` per briefed subtask (one briefing serves its shards). A round lasts main + longest subagent (critical steps). Shards
of a suitable instruction succeed one after another with `subagent_reliability` until one
fails (a failed piece blocks the rest); a subtask is done when all its non-empty shards are.
Failed subtasks stay pending for the next round.

Both PARL failure modes come from these actions. Serial collapse: a generic instruction fails
on HARD work and any delegation fails on LOCAL work, so untrained delegation is slow and
unreliable while doing it yourself always works (slowly: wide stages miss their budgets).
Spurious parallelism: splitting a subtask into more shards than it has steps makes empty
shards, and delegating LOCAL work makes subagents that cannot finish; both raise n_subagents
(r_parallel) while they are assigned and never completed (r_finish sees them) and lengthen the
round by their merge cost. `max_subagents` caps the subagents running at once (one round), and
`subagent_budget` (optional) those of a whole episode: delegations past either cap (in slot order)
wait, unassigned, for a later round.

Outcome (r_perf, paid at the end): 1 when done within the task's budget of critical steps,
`late_credit` when done within `late_window` x budget, 0 when the elapsed time passes
`late_window` x budget: a hard time limit shown in the observation, so a *termination*. The
`max_episode_steps` round cap is a truncation (not in the observation; bootstrap from it).

Observation [W + 1, 6]: one row per slot (pending, size / max_cost, kind one-hot, failed last
round; zeros for slots with nothing pending) and a context row (time left to the budget and to
the hard limit, elapsed, stages left, subagents left, pending work of the stage): what an
orchestrator sees, never the task's identity. Action: one entry per slot in 0..2S (S = len(splits)):
0 = do it yourself; 1..S = delegate with a generic instruction in splits[j-1] shards;
S+1..2S = delegate briefed. `scripted_action(name, obs)` gives the serial, oracle and random
policies, acting on the observation only.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch
from torch import Tensor

from parlightning.envs.base import ActionSpec, BatchedEnv, EpisodeParts, StepResult
from parlightning.envs.swarm_tasks import FAMILIES, HARD, LOCAL, N_KINDS, PLAIN, SPLITS, Costs, TaskBank, oracle_split_index
from parlightning.errors import ConfigError

__all__ = ["FAMILIES", "SPLITS", "SCRIPTED", "SwarmEnv", "TaskBank"]
SLOT_FEATURES = 6  # pending, size, plain, hard, local, failed last round
SCRIPTED = ("serial", "oracle", "random")


def _check_int(name: str, value: Any, low: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        what = "a positive integer" if low == 1 else f"an integer >= {low}"
        raise ConfigError(f"SwarmEnv: `{name}` must be {what}, got {value!r}")


def _check_float(name: str, value: Any, low: float, high: float, fix: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ConfigError(f"SwarmEnv: `{name}` must lie in [{low}, {high}] ({fix}), got {value!r}")


class SwarmEnv(BatchedEnv):
    """N orchestrator actors on one split's task bank, stepped together; see the module docstring.

    `EpisodeParts.serial_steps` is the serial policy's time on the stages the episode finished
    (each stage: 1 + the sum of its sizes), so serial_steps / critical_steps is the speed-up over
    doing the same work yourself.
    """

    solved_threshold = 1.0  # outcome 1 = done within the budget (solved); late_credit = done late; 0 = unfinished
    checkpoint_exact = True

    def __init__(
        self,
        num_envs: int = 256,
        device: str | torch.device = "cpu",
        seed: int = 0,
        families: Sequence[str] = ("solo", "fanout", "pipeline", "locked"),
        tasks_per_family: int = 16,
        split: str = "train",
        max_levels: int = 4,
        max_width: int = 12,
        max_cost: int = 10,
        splits: Sequence[int] = (1, 2, 4),
        max_subagents: int = 128,
        subagent_budget: Optional[int] = None,
        spawn_steps: float = 1.0,
        merge_cost: float = 0.05,
        brief_cost: float = 0.5,
        subagent_reliability: float = 0.99,
        max_episode_steps: int = 16,
        bank_seed: int = 1234,
        late_credit: float = 0.1,
        late_window: float = 2.0,
    ) -> None:
        for name in ("num_envs", "tasks_per_family", "max_levels", "max_width", "max_cost", "max_subagents",
                     "max_episode_steps"):
            _check_int(name, locals()[name])
        _check_int("bank_seed", bank_seed, 0)
        if subagent_budget is not None:
            _check_int("subagent_budget", subagent_budget)
        self.subagent_budget = subagent_budget
        self._budget = float(subagent_budget) if subagent_budget is not None else float("inf")
        splits = tuple(splits)
        if not splits or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in splits) \
                or list(splits) != sorted(set(splits)):
            raise ConfigError(f"SwarmEnv: `splits` must be increasing positive shard counts like [1, 2, 4], got {list(splits)}")
        for name, value in (("spawn_steps", spawn_steps), ("merge_cost", merge_cost), ("brief_cost", brief_cost)):
            _check_float(name, value, 0.0, 1e6, "a cost in steps")
        _check_float("subagent_reliability", subagent_reliability, 0.0, 1.0, "a probability")
        _check_float("late_credit", late_credit, 0.0, 0.999, "credit for a late finish, below 1")
        _check_float("late_window", late_window, 1.0, 1e6, "a multiple of the budget")
        if len(families) == 0:
            raise ConfigError("SwarmEnv: `families` is empty; name at least one of " + str(sorted(FAMILIES)))
        self.num_envs, self.device = num_envs, torch.device(device)
        self.max_width, self.max_levels, self.max_cost, self.max_subagents = max_width, max_levels, max_cost, max_subagents
        self.splits, self.split = splits, split
        self.costs = Costs(splits, float(spawn_steps), float(merge_cost), float(brief_cost))
        self.reliability, self.late_credit, self.late_window = float(subagent_reliability), float(late_credit), float(late_window)
        self.max_episode_steps = max_episode_steps
        self.bank = TaskBank(families, tasks_per_family, split, max_levels, max_width, max_cost, self.costs,
                             bank_seed, self.device)
        self.task_ids = self.bank.task_ids
        S, W, L, K = len(splits), max_width, max_levels, len(self.bank)
        self.action_spec = ActionSpec("multi_discrete", nvec=(1 + 2 * S,) * W)
        self.observation_shape = (W + 1, SLOT_FEATURES)
        self.time_scale = float(max_levels * max_width * max_cost) / 4.0  # a constant: the same on every bank
        dev = self.device
        self._splits = torch.tensor(splits, dtype=torch.float32, device=dev)
        # a cap that can never bind is not checked (a host-side decision, made once)
        self._cap_binds = max_subagents < W * splits[-1] or subagent_budget is not None
        # 1 / log of the per-shard reliability: "successes before the first failure" from one uniform draw
        self._inv_log_rel = 1.0 / float(torch.tensor(min(self.reliability, 1 - 1e-7)).clamp(min=1e-30).log())
        # Slot-major tables [W, K*L] (one column per task stage), gathered with one index_select per
        # step into [W, N]: reductions over slots then run over the outer dimension, vectorised across
        # actors (a last dimension of a few slots is slow to reduce on CPU). Masks are float 0/1 and
        # counts integer-valued floats (exact), so the dynamics are float arithmetic: on CPU a bool
        # compare or a bool-float product costs several float ops.
        size_rows = self.bank.size.reshape(K * L, W)
        kind_rows = self.bank.kind.reshape(K * L, W)
        present_rows = self.bank.present.reshape(K * L, W)
        self._size_cols = size_rows.t().contiguous()
        self._present_cols = present_rows.t().float().contiguous()
        # size, plain, hard stacked [3W, K*L]: one gather per step
        self._step_cols = torch.cat([size_rows, (present_rows & (kind_rows == PLAIN)).float(),
                                     (present_rows & (kind_rows == HARD)).float()], 1).t().contiguous()
        self._stage_serial = 1.0 + size_rows.sum(1)  # [K*L]: the serial policy's time on the stage
        self._tri = torch.ones(W, W, device=dev).tril()  # cumulative sums over slots as one matmul (exact on counts)
        # What a slot shows, one table row per (stage, slot, failed flag) and row 0 for an empty slot:
        # the observation's slot part is one gather, no broadcast multiply.
        kinds = torch.eye(N_KINDS, device=dev)[kind_rows]  # [K*L, W, 3]
        shown = torch.cat([torch.ones_like(size_rows).unsqueeze(-1), (size_rows / max_cost).unsqueeze(-1), kinds,
                           torch.zeros_like(size_rows).unsqueeze(-1)], -1).reshape(K * L * W, SLOT_FEATURES)
        failed_rows = shown.clone()
        failed_rows[:, SLOT_FEATURES - 1] = 1.0
        self._slot_table = torch.cat([torch.zeros(1, SLOT_FEATURES, device=dev), shown, failed_rows])
        # per action entry a (row a + 1; row 0: any negative entry): shards, briefed choice, do it yourself
        table = torch.zeros(3, 2 * S + 2, device=dev)
        for a in range(1, 2 * S + 1):
            table[0, a + 1], table[1, a + 1] = float(splits[(a - 1) % S]), float(a > S)
        table[2, 1] = 1.0
        self._action_table = table
        self._index_buffers: dict[int, Tensor] = {}
        self._decode_buffers: dict[int, Tensor] = {}
        # the slot rows' gather index is computed in float (exact below 2**24 rows, else in double)
        self._index_dtype = torch.float32 if self._slot_table.shape[0] < 2**24 else torch.float64
        self._slot_offset = (torch.arange(W, device=dev) + 1).to(self._index_dtype).unsqueeze(1)  # [W, 1]: row of slot w, + 1 for row 0
        self.generator = torch.Generator(device=dev).manual_seed(seed)
        N = num_envs
        z = lambda dtype=torch.float32: torch.zeros(N, dtype=dtype, device=dev)  # noqa: E731
        self.task, self.level, self.attempts = z(torch.long), z(torch.long), z(torch.long)
        self._pend = torch.zeros(W, N, device=dev)  # slot-major [W, N] float 0/1 (`pending`, `failed`: bool views)
        self._fail = torch.zeros(W, N, device=dev)
        self.elapsed, self.serial = z(), z()
        self.n_subagents, self.assigned, self.completed = z(), z(), z()
        self._arange = torch.arange(N, device=dev)
        self.trace, self.trace_actor, self.last_round = False, 0, {}  # evaluate's --gantt: one actor's rounds
        # A fresh episode's first observation depends on its task only: one table row per task, so a step
        # observes once and the actors that reset copy their row ([K, W+1, F]).
        tasks = torch.arange(K, device=dev)
        zk = torch.zeros(K, device=dev)
        self._first_obs = self._observe(tasks, tasks * 0, self._present_cols.index_select(1, tasks * L),
                                        torch.zeros(W, K, device=dev), zk, zk)

    @property
    def pending(self) -> Tensor:
        """[W, N] bool: subtasks of the current stage still to do."""
        return self._pend > 0

    @property
    def failed(self) -> Tensor:
        """[W, N] bool: delegations that failed last round."""
        return self._fail > 0

    # ------------------------------------------------------------------ observation
    def _observe(self, task: Tensor, level: Tensor, pend: Tensor, fail: Tensor, elapsed: Tensor, n_subagents: Tensor,
                 out: Optional[Tensor] = None) -> Tensor:
        """[N, W+1, F] (into `out` when given): the slot rows (one gather from `_slot_table`) and the context row."""
        W, N = pend.shape
        L = self.max_levels
        row = task * L + level.clamp(max=L - 1)
        index = self._index_buffers.get(N)  # reused: its context column stays 0 (gathers row 0, then is written)
        if index is None:
            index = self._index_buffers[N] = torch.zeros(N, W + 1, dtype=torch.long, device=self.device)
        half = float(self._slot_table.shape[0] // 2)
        dt = self._index_dtype
        flat = torch.add(self._slot_offset, (row * W).to(dt))  # [W, N]
        index[:, :W].t().copy_(flat.add_(fail.to(dt), alpha=half).mul_(pend.to(dt)))
        if out is None:
            out = torch.empty(N, W + 1, SLOT_FEATURES, device=self.device)
        torch.index_select(self._slot_table, 0, index.view(-1), out=out.view(N * (W + 1), SLOT_FEATURES))
        budget = self.bank.budget.index_select(0, task)
        work = (self._size_cols.index_select(1, row) * pend).sum(0)
        ctx, scale = out.select(1, W), self.time_scale
        torch.div(budget - elapsed, scale, out=ctx[:, 0])
        torch.div(self.late_window * budget - elapsed, scale, out=ctx[:, 1])
        torch.div(elapsed, scale, out=ctx[:, 2])
        ctx[:, 3].copy_((self.bank.n_levels.index_select(0, task) - level).float() / self.max_levels)
        if self.subagent_budget is None:  # share of the episode's subagent budget left (none: always all of it)
            ctx[:, 4].fill_(1.0)
        else:
            torch.clamp(1.0 - n_subagents / self._budget, min=0, out=ctx[:, 4])
        torch.div(work, self.max_width * self.max_cost, out=ctx[:, 5])
        return out

    def _start(self, mask: Tensor, task: Tensor) -> None:
        """Begin a fresh episode on `task` for every actor where `mask` is True (tensor ops only)."""
        self.task = torch.where(mask, task, self.task)
        keep = ~mask
        self.level = self.level * keep
        self.attempts = self.attempts * keep
        keepf = keep.float()
        self._fail = self._fail * keepf
        self.elapsed, self.serial = self.elapsed * keepf, self.serial * keepf
        self.n_subagents, self.assigned, self.completed = (self.n_subagents * keepf, self.assigned * keepf,
                                                           self.completed * keepf)
        first = self._present_cols.index_select(1, self.task * self.max_levels)
        self._pend = first * mask.float() + self._pend * keepf

    def reset(self, *, seed: Optional[int] = None, task_index: Optional[Tensor] = None) -> Tensor:
        """Start every actor on `task_index` ([N] bank indices; default: actor i on task i mod K)."""
        if seed is not None:
            self.generator.manual_seed(seed)
        if task_index is None:
            task_index = self._arange % len(self.bank)
        self._start(torch.ones(self.num_envs, dtype=torch.bool, device=self.device), task_index.to(self.device, torch.long))
        return self._observe(self.task, self.level, self._pend, self._fail, self.elapsed, self.n_subagents)

    # ------------------------------------------------------------------ dynamics
    def step(self, action: Tensor, next_task: Optional[Tensor | Callable[[Tensor], Tensor]] = None) -> StepResult:
        """One round for every actor; tensors are rebuilt, never written in place, so `parts` needs no copies."""
        bank, L, S, c, W = self.bank, self.max_levels, len(self.splits), self.costs, self.max_width
        N = self.num_envs
        task, level, pend = self.task, self.level, self._pend
        row = task * L + level.clamp(max=L - 1)
        cols = self._step_cols.index_select(1, row)  # [3W, N]
        size, plain, hard = cols[:W], cols[W:2 * W], cols[2 * W:]
        # decode every entry with one table gather: shards, briefed, do-it-yourself ([3, W*N]; entries past
        # 2S act as 2S, negative ones do nothing)
        index = self._decode_buffers.get(N)  # reused slot-major int32 buffer (consumed right away)
        if index is None:
            index = self._decode_buffers[N] = torch.empty(W, N, dtype=torch.int32, device=self.device)
        if action.is_floating_point():
            action = action.long()
        index.copy_(action.clamp(-1, 2 * S).t()).add_(1)
        decoded = self._action_table.index_select(1, index.view(-1)).view(3, W, N)
        k, bc, own = decoded[0], decoded[1], decoded[2].mul_(pend)
        k.mul_(pend)
        if self._cap_binds:  # the caps (per round, per episode): delegations past them (in slot order) wait
            spawned = self._tri @ k
            limit = torch.clamp(self._budget - self.n_subagents, max=float(self.max_subagents))
            k.mul_((limit - spawned + 1.0).clamp_(0.0, 1.0))
        deleg = k.clamp(max=1.0)
        briefed = deleg * bc
        ok = torch.addcmul(deleg * plain, briefed, hard)  # a suitable instruction: generic on PLAIN, briefed on HARD
        nonempty = torch.minimum(k, size)  # shards with work; k > size leaves k - size empty shards
        u = torch.rand(pend.shape, generator=self.generator, device=self.device)
        in_a_row = u.log_().mul_(self._inv_log_rel).floor_()  # shards that succeed before the first failure
        done_raw = torch.minimum(in_a_row, nonempty)
        done_shards = done_raw * ok
        success = ok * (1.0 - (nonempty - done_raw)).clamp_(min=0.0)

        pieces = k.sum(0)
        main = 1.0 + (size * own).sum(0) + c.merge * pieces + c.brief * briefed.sum(0)
        sub = c.spawn + torch.ceil(size / k.clamp(min=1.0))
        # the round's critical steps: main + longest subagent (0 when none)
        elapsed = self.elapsed + main + (sub * deleg).amax(0)
        n_subagents = self.n_subagents + pieces
        assigned = self.assigned + pieces
        completed = self.completed + done_shards.sum(0)
        attempts = self.attempts + 1
        if self.trace:  # evaluation only (a host-side flag, no sync): what actor `trace_actor` ran this round
            i = self.trace_actor
            self.last_round = {"level": level[i].clone(), "main": main[i].clone(), "sub": sub[:, i].clone(),
                               "delegated": deleg[:, i] > 0, "success": success[:, i] > 0,
                               "own": own[:, i] > 0, "shards": k[:, i].clone(), "size": size[:, i].clone()}

        # Advance past finished stages.
        pend = pend - own - success
        stage_done = 1.0 - pend.amax(0)
        serial = self.serial + self._stage_serial.index_select(0, row) * stage_done
        level = level + stage_done.long()
        next_row = task * L + level.clamp(max=L - 1)
        all_done = level >= bank.n_levels.index_select(0, task)
        advance = stage_done * ~all_done
        fresh = self._present_cols.index_select(1, next_row) * advance
        pend_seen = pend + fresh
        fail_seen = (deleg - success) * (1.0 - stage_done)

        budget = bank.budget.index_select(0, task)
        abandoned = elapsed > self.late_window * budget
        finished = all_done & ~abandoned
        terminated = all_done | abandoned
        truncated = ~terminated & (attempts >= self.max_episode_steps)
        done = terminated | truncated
        outcome = torch.where(elapsed <= budget, 1.0, self.late_credit) * finished
        parts = EpisodeParts(task=task, outcome=outcome, n_subagents=n_subagents, assigned=assigned,
                             completed=completed, critical_steps=elapsed, serial_steps=serial)
        # the final observation and, below it, the first observation of every task: the actors that reset
        # then copy their task's row (one row gather), the others their final one
        K = self._first_obs.shape[0]
        buf = torch.empty(N + K, W + 1, SLOT_FEATURES, device=self.device)
        final_obs = buf[:N]
        self._observe(task, level, pend_seen, fail_seen, elapsed, n_subagents, out=final_obs)
        buf[N:].copy_(self._first_obs)
        if next_task is None:
            next_task = task
        elif callable(next_task):
            next_task = next_task(done)  # the data module's sampler picks for the actors that reset
        new_task = torch.where(done, next_task.to(self.device, torch.long), task)
        obs = buf.index_select(0, torch.where(done, new_task + N, self._arange))

        # the state after the resets
        keep = ~done
        keepf = keep.float()
        donef = done.float()
        self.task = new_task
        self.level, self.attempts = level * keep, attempts * keep
        self.elapsed, self.serial = elapsed * keepf, serial * keepf
        self.n_subagents, self.assigned, self.completed = n_subagents * keepf, assigned * keepf, completed * keepf
        self._fail = fail_seen * keepf
        self._pend = torch.addcmul(pend_seen * keepf, self._present_cols.index_select(1, new_task * L), donef)
        return StepResult(obs, outcome, terminated, truncated, final_obs, parts)

    # ------------------------------------------------------------------ scripted policies
    def scripted_action(self, name: str, obs: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
        """The world's baselines, reading only `obs` ([N, W+1, F]) and acting in the action space:
        `serial` does everything itself; `oracle` delegates every non-LOCAL subtask in the largest
        split that leaves no shard empty, briefed exactly when HARD, and does LOCAL work itself
        (one shard each when the fine split does not fit under the caps); `random` draws every slot uniformly."""
        W, S = self.max_width, len(self.splits)
        slots = obs[:, :W]
        if name == "serial":
            return torch.zeros(obs.shape[0], W, dtype=torch.long, device=obs.device)
        if name == "random":
            return torch.randint(0, 1 + 2 * S, (obs.shape[0], W), generator=generator, device=obs.device)
        if name != "oracle":
            raise ConfigError(f"scripted policy: unknown {name!r}; choose one of {list(SCRIPTED)}")
        pending = slots[..., 0] > 0.5
        size = torch.round(slots[..., 1] * self.max_cost)
        kind = slots[..., 2:5].argmax(-1)
        splits = self._splits.to(obs.device)
        j = oracle_split_index(size, splits)
        deleg = pending & (kind != LOCAL)
        free = torch.full_like(size[:, 0], float(self.max_subagents))
        if self.subagent_budget is not None:  # the episode's budget left, as the observation shows it
            free = torch.minimum(free, torch.round(obs[:, W, 4] * self.subagent_budget))
        # the fine split when it fits this round, else one shard each (what does not fit waits)
        fits = (splits[j] * deleg).sum(1) <= free
        j = j * fits.unsqueeze(1)
        return torch.where(deleg, 1 + j + S * (kind == HARD), torch.zeros_like(j))

    # ------------------------------------------------------------------ checkpoints
    _STATE = ("task", "level", "attempts", "pending", "failed", "elapsed", "serial", "n_subagents", "assigned",
              "completed")

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {n: getattr(self, n).clone() for n in self._STATE}  # pending, failed: bool
        state["generator"] = self.generator.get_state()
        state["split"] = self.split
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            if name == "generator":
                self.generator.set_state(value)
            elif name in ("pending", "failed"):
                getattr(self, "_pend" if name == "pending" else "_fail").copy_(value)
            elif name in self._STATE:
                getattr(self, name).copy_(value)
