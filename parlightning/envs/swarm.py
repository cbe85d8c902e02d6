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
`max_episode_steps` round cap ends the episode unfinished (outcome 0) as a *termination* too
(`round_cap: terminal`, the default): a stuck episode that reaches the cap through cheap rounds
(re-delegating work that cannot finish) has failed, and bootstrapping it as a truncation paid it
the value of carrying on. The cap is not in the observation (the time limit usually ends an episode
first); `round_cap: truncation` gives the earlier behaviour (bootstrap from the cut observation).

Observation [W + 1, 6]: one row per slot (pending, size / max_cost, kind one-hot, failed last
round; zeros for slots with nothing pending) and a context row (time left to the budget and to
the hard limit, elapsed, stages left, subagents left, pending work of the stage): what an
orchestrator sees, never the task's identity. Action: one entry per slot in 0..2S (S = len(splits)):
0 = do it yourself; 1..S = delegate with a generic instruction in splits[j-1] shards;
S+1..2S = delegate briefed. `scripted_action(name, obs)` gives the serial, oracle and random
policies, acting on the observation only.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, Optional, Sequence

import torch
from torch import Tensor

from parlightning.config_types import (
    ClosedUnitInterval, PositiveInt, Seed, check_allocation, check_args, check_value, restricted_number_type,
)
from parlightning.envs.base import (
    ActionSpec, BatchedEnv, EpisodeParts, StepResult, checked_device, checked_pick, checked_seed, checked_task_index, world_lifecycle,
    world_specs,
)
from parlightning.envs.swarm_tasks import FAMILIES, HARD, LOCAL, N_KINDS, PLAIN, SPLITS, Costs, TaskBank, oracle_split_index
from parlightning.errors import ArgumentError, ConfigError
from parlightning.method_args import OneOf, TensorArg, check_state, checked_methods

__all__ = ["FAMILIES", "SPLITS", "SCRIPTED", "SwarmEnv", "TaskBank"]
SLOT_FEATURES = 6  # pending, size, plain, hard, local, failed last round
SCRIPTED = ("serial", "oracle", "optimal", "random")
DEFAULT_FAMILIES = ("solo", "fanout", "pipeline", "locked")
NoiseProbability = restricted_number_type("NoiseProbability", float, [(">=", 0.0), ("<=", 0.5)],
                                          docstring="the probability that an episode's outcome is flipped, in [0, 0.5]")
NOISE_STREAM = 0x5EED  # the outcome noise's generator: seed + this
CEILING = "optimal"  # the best scripted policy: the ceiling every comparison reports against


Cost = restricted_number_type("Cost", float, [(">=", 0.0), ("<=", 1e6)], docstring="a cost in steps, 0..1e6")
LateCredit = restricted_number_type("LateCredit", float, [(">=", 0.0), ("<=", 0.999)],
                                    docstring="credit for a late finish, below 1")
LateWindow = restricted_number_type("LateWindow", float, [(">=", 1.0), ("<=", 1e6)],
                                    docstring="a multiple of the budget, 1..1e6")


@checked_methods(**world_specs(
    scripted_action={"name": OneOf(*SCRIPTED),
                     "obs": TensorArg("float", ("B", "*observation_shape"),
                                      text="this world's observations, as reset and step return them")}),
    lifecycle=world_lifecycle(requires={"action_masks": "reset"}))
class SwarmEnv(BatchedEnv):
    """N orchestrator actors on one split's task bank, stepped together; see the module docstring.

    `EpisodeParts.serial_steps` is the serial policy's time on the stages the episode finished
    (each stage: 1 + the sum of its sizes), so serial_steps / critical_steps is the speed-up over
    doing the same work yourself.

    `compile` (config `data.env.init_args.compile`, default false): run `step` as two C++ kernels
    (`parlightning.envs.swarm_compiled`) built on first use with the system compiler ($CXX, else g++,
    c++ or clang++; cached under $PARLIGHTNING_CACHE_DIR, default ~/.cache/parlightning), CPU only and
    single-threaded. The trajectories are bitwise the eager step's for the same seed (observations,
    rewards, flags, parts, and the generator's stream); only the speed differs (2-2.7x at N = 4096 on
    one thread; `swarm_compiled.retain_heap` also keeps freed heap for the per-step observations). A ConfigError names the problem when it cannot be built (no compiler, a non-CPU
    device). `trace` (evaluate's --gantt) runs the eager step.

    `family_tasks` (e.g. `{solo: 24, fanout: 8, pipeline: 8, locked: 24}`): the bank's composition,
    tasks per family by name, instead of `families` x `tasks_per_family` (scripts/sampler_study.py's
    scarce-signal bank). `outcome_noise` p in [0, 0.5]: a noisy verifier; each finished episode's
    outcome is flipped with probability p (pass -> 0, anything else -> 1) in the reward and the
    episode's parts, which is what the learner and the task sampler see (evaluate with 0).
    """

    solved_threshold = 1.0  # outcome 1 = done within the budget (solved); late_credit = done late; 0 = unfinished
    checkpoint_exact = True

    def __init__(
        self,
        num_envs: PositiveInt = 256,
        device: str | torch.device = "cpu",
        seed: Seed = 0,
        families: Sequence[str] = ("solo", "fanout", "pipeline", "locked"),
        tasks_per_family: PositiveInt = 16,
        split: str = "train",
        max_levels: PositiveInt = 4,
        max_width: PositiveInt = 12,
        max_cost: PositiveInt = 10,
        splits: Sequence[PositiveInt] = (1, 2, 4),
        max_subagents: PositiveInt = 128,
        subagent_budget: Optional[PositiveInt] = None,
        spawn_steps: Cost = 1.0,
        merge_cost: Cost = 0.05,
        brief_cost: Cost = 0.5,
        subagent_reliability: ClosedUnitInterval = 0.99,
        max_episode_steps: PositiveInt = 16,
        bank_seed: Seed = 1234,
        late_credit: LateCredit = 0.1,
        late_window: LateWindow = 2.0,
        compile: bool = False,
        round_cap: str = "terminal",
        family_tasks: Optional[dict[str, int]] = None,
        outcome_noise: NoiseProbability = 0.0,
    ) -> None:
        typed = check_args("SwarmEnv", SwarmEnv.__init__, locals())  # the annotated ranges (config_types)
        num_envs, tasks_per_family, max_levels, max_width, max_cost = (typed[k] for k in (
            "num_envs", "tasks_per_family", "max_levels", "max_width", "max_cost"))
        max_subagents, subagent_budget, max_episode_steps, bank_seed = (typed[k] for k in (
            "max_subagents", "subagent_budget", "max_episode_steps", "bank_seed"))
        spawn_steps, merge_cost, brief_cost, subagent_reliability, late_credit, late_window = (typed[k] for k in (
            "spawn_steps", "merge_cost", "brief_cost", "subagent_reliability", "late_credit", "late_window"))
        self.subagent_budget = subagent_budget
        self._budget = float(subagent_budget) if subagent_budget is not None else float("inf")
        splits = tuple(typed["splits"])
        if not splits or list(splits) != sorted(set(splits)):
            raise ConfigError(f"SwarmEnv: `splits` must be increasing positive shard counts like [1, 2, 4], got {list(splits)}")
        if len(families) == 0:
            raise ConfigError("SwarmEnv: `families` is empty; name at least one of " + str(sorted(FAMILIES)))
        twice = next((f for i, f in enumerate(families) if f in list(families)[:i]), None)
        if twice is not None and not isinstance(families, str):
            raise ConfigError(f"data.env.init_args.families: lists {twice!r} twice; name each family once (more tasks "
                              "of one family: tasks_per_family, or family_tasks: {" + f"{twice}: 32" + "})")
        counts: int | list[int] = tasks_per_family
        if family_tasks is not None:  # per-family task counts: a bank of another composition
            if tuple(families) != DEFAULT_FAMILIES or tasks_per_family != 16:
                raise ConfigError("SwarmEnv: `family_tasks` names the families and their counts; drop `families` / "
                                  "`tasks_per_family` when you give it")
            if not isinstance(family_tasks, dict) or not family_tasks:
                raise ConfigError(f"SwarmEnv: `family_tasks` must map family names to task counts, e.g. {{solo: 24, "
                                  f"fanout: 8, pipeline: 8, locked: 24}}, got {family_tasks!r}")
            for name, n in family_tasks.items():
                check_value(f"family_tasks.{name}", PositiveInt, n)
            families, counts = tuple(family_tasks), list(family_tasks.values())
        self.family_tasks = dict(family_tasks) if family_tasks is not None else None
        # private: not part of the world a checkpoint records (the verifier's noise, not the tasks), so
        # checkpoints from before the option resume as they did
        self._outcome_noise = typed["outcome_noise"]
        self.num_envs, self.device = num_envs, checked_device("SwarmEnv.device", device)
        self.max_width, self.max_levels, self.max_cost, self.max_subagents = max_width, max_levels, max_cost, max_subagents
        self.splits, self.split = splits, split
        self.costs = Costs(splits, float(spawn_steps), float(merge_cost), float(brief_cost))
        self.reliability, self.late_credit, self.late_window = float(subagent_reliability), float(late_credit), float(late_window)
        self.max_episode_steps = max_episode_steps
        if round_cap not in ("terminal", "truncation"):
            raise ConfigError(f"SwarmEnv: `round_cap` must be terminal or truncation, got {round_cap!r}")
        self.round_cap = round_cap
        seed = typed["seed"]
        self._check_size(num_envs, counts if isinstance(counts, list) else [counts] * len(families), max_levels,
                         max_width, device)
        self.bank = TaskBank(families, counts, split, max_levels, max_width, max_cost, self.costs,
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
        # Slot-major tables [W, K*R] (one column per stage row: task k, stage l at row k*R + l), gathered
        # with one index_select per step into [W, N]: reductions over slots then run over the outer
        # dimension, vectorised across actors (a last dimension of a few slots is slow to reduce on CPU).
        # Masks are float 0/1 and counts integer-valued floats (exact), so the dynamics are float
        # arithmetic: on CPU a bool compare or a bool-float product costs several float ops. R = L + 1: a
        # task's last row is an empty stage past its L stages, so "the next stage" is always row + 1 (it
        # is shown only to an episode that has just finished every stage, as no pending work).
        R = self._rows_per_task = L + 1
        pad = lambda t: torch.cat([t, torch.zeros_like(t[:, :1])], 1).reshape(K * R, W)  # noqa: E731
        size_rows, kind_rows, present_rows = pad(self.bank.size), pad(self.bank.kind), pad(self.bank.present)
        self._present_cols = present_rows.t().float().contiguous()
        self._stage_work = size_rows.sum(1)  # [K*R]: a stage's work (its sizes' sum)
        # Everything a step reads per actor from its stage row, stacked [3W + 5, K*R] so that one gather
        # serves the step: size, plain, hard ([W] each), then the task's budget, late_window x budget
        # (the hard limit), a zero row (the three make the context's time features in one op), the
        # task's number of stages and the stage's serial time. Task values repeat on each stage row.
        budget_rows = self.bank.budget.repeat_interleave(R)
        self._step_cols = torch.cat([
            size_rows, (present_rows & (kind_rows == PLAIN)).float(), (present_rows & (kind_rows == HARD)).float(),
            torch.stack([budget_rows, self.late_window * budget_rows, torch.zeros_like(budget_rows),
                         self.bank.n_levels.repeat_interleave(R).float(), 1.0 + self._stage_work], 1)], 1).t().contiguous()
        self._ctx_sign = torch.tensor([[-1.0], [-1.0], [1.0]], device=dev)  # budget - t, limit - t, 0 + t
        self._tri = torch.ones(W, W, device=dev).tril()  # cumulative sums over slots as one matmul (exact on counts)
        # What a slot shows, four table rows per (stage, slot), one per slot code: 0 nothing pending
        # (zeros), 1 pending, 2 pending and failed last round, 3 the stage just began (the slot's subtask
        # if it has one, else zeros). The observation's slot part is one gather, no broadcast multiply.
        kinds = torch.eye(N_KINDS, device=dev)[kind_rows]  # [K*R, W, 3]
        shown = torch.cat([torch.ones_like(size_rows).unsqueeze(-1), (size_rows / max_cost).unsqueeze(-1), kinds,
                           torch.zeros_like(size_rows).unsqueeze(-1)], -1)  # [K*R, W, F]
        failed_rows = shown.clone()
        failed_rows[..., SLOT_FEATURES - 1] = 1.0
        codes = torch.stack([torch.zeros_like(shown), shown, failed_rows, shown * present_rows.unsqueeze(-1)], 2)
        # Below the slot rows, one context row per actor, written in place before each gather (a compact
        # [N, F] block, then copied by the same gather, instead of strided writes into the observation).
        ctx_rows = torch.zeros(max(num_envs, K), SLOT_FEATURES, device=dev)
        if subagent_budget is None:
            ctx_rows[:, 4] = 1.0  # no episode budget: all of it always left (never written)
        self._slot_table = torch.cat([codes.reshape(K * R * W * 4, SLOT_FEATURES), ctx_rows])
        self._ctx_index = K * R * W * 4
        # shards per decoded entry e (see `step`): none for 0 (nothing to do) and 1 (do it yourself)
        self._shard_table = torch.tensor([0.0, 0.0, *splits, *splits], device=dev)
        self._index_buffers: dict[int, SimpleNamespace] = {}
        # the slot rows' gather index is computed in float (exact below 2**24 rows, else in double) and
        # gathered with an int32 index (half the bytes of int64)
        self._index_dtype = torch.float32 if self._slot_table.shape[0] < 2**24 else torch.float64
        self._slot_offset = (4 * torch.arange(W, device=dev)).to(self._index_dtype).unsqueeze(1)  # [W, 1]: slot w's rows
        self.generator = torch.Generator(device=dev).manual_seed(seed)
        self._noise_generator = torch.Generator(device=dev).manual_seed(seed + NOISE_STREAM)  # its own stream
        N = num_envs
        z = lambda dtype=torch.float32: torch.zeros(N, dtype=dtype, device=dev)  # noqa: E731
        self.task = z(torch.long)
        # per-actor counters stacked, so that a reset is one op: [2, N] long (level, attempts) and
        # [5, N] float (elapsed, serial, n_subagents, assigned, completed); the names are row views
        self._stage = torch.zeros(2, N, dtype=torch.long, device=dev)
        self._counts = torch.zeros(5, N, device=dev)
        self._pend = torch.zeros(W, N, device=dev)  # slot-major [W, N] float 0/1 (`pending`, `failed`: bool views)
        self._fail = torch.zeros(W, N, device=dev)
        self._scratch: dict[Any, Any] = {}  # reused per-step buffers, by size
        self._row = self._stage_row(self.task, self.level)  # [N]: the stage row of (task, level), kept by step
        self._arange = torch.arange(N, device=dev)
        self.trace, self.trace_actor, self.last_round = False, 0, {}  # evaluate's --gantt: one actor's rounds
        # A fresh episode's first observation depends on its task only: one table row per task, so a step
        # observes once and the actors that reset copy their row ([K, W+1, F]).
        tasks = torch.arange(K, device=dev)
        zk = torch.zeros(K, device=dev)
        self._first_obs = self._observe_state(tasks, tasks * 0, self._present_cols.index_select(1, tasks * R),
                                              torch.zeros(W, K, device=dev), zk, zk)
        if not isinstance(compile, bool):
            raise ConfigError(f"SwarmEnv: `compile` must be true or false, got {compile!r}")
        # compile=True: the same step as C++ kernels (see the class docstring); not kept as `self.compile`,
        # so not part of the world a checkpoint records (preflight.env_signature): it resumes either way
        self._compiled = None
        if compile:
            from parlightning.envs import swarm_compiled

            self._compiled = swarm_compiled.build(self)

    level = property(lambda self: self._stage[0], doc="[N] long: the current stage")
    attempts = property(lambda self: self._stage[1], doc="[N] long: rounds played in the episode")
    elapsed = property(lambda self: self._counts[0], doc="[N] float: critical steps so far")
    serial = property(lambda self: self._counts[1], doc="[N] float: the serial policy's time on the finished stages")
    n_subagents = property(lambda self: self._counts[2], doc="[N] float: subagents spawned")
    assigned = property(lambda self: self._counts[3], doc="[N] float: shards assigned to subagents")
    completed = property(lambda self: self._counts[4], doc="[N] float: assigned shards completed")

    @property
    def pending(self) -> Tensor:
        """[W, N] bool: subtasks of the current stage still to do."""
        return self._pend > 0

    def action_masks(self) -> Tensor:
        """[N, W] bool: the live action dimensions of the observation last returned (the pending
        slots; a slot with nothing pending ignores its entry). See `BatchedEnv` for the contract."""
        return self._pend.t() > 0

    @property
    def failed(self) -> Tensor:
        """[W, N] bool: delegations that failed last round."""
        return self._fail > 0

    # ------------------------------------------------------------------ observation
    def _observe(self, row: Tensor, codes: Sequence[Tensor], fresh: Optional[Tensor], limits: Tensor, left: Tensor,
                 elapsed: Tensor, n_subagents: Tensor, work: Tensor, out: Optional[Tensor] = None,
                 flat: Optional[Tensor] = None) -> Tensor:
        """[N, W+1, F] (into `out` when given): the slot rows (one gather from `_slot_table`) and the context row.

        `row` [N]: the stage row shown; `codes`: [W, N] float tensors whose sum is each slot's code (0
        nothing pending, 1 pending, 2 pending and failed last round); `fresh` [N] float 1 where the stage
        just began (its codes are 0 and every slot shows code 3, the stage's subtasks) or None; `limits`
        [3, N] the task's budget, hard limit and 0 (rows of `_step_cols`); `left` [N] stages left; `work` [N]
        pending work of the stage; `flat` a [W, N] float buffer for the slot rows' index (default: new)."""
        W, N = codes[0].shape
        ob = self._observe_buffers(N)
        base = (row * (4 * W)).to(self._index_dtype)
        if fresh is not None:
            base.add_(fresh, alpha=3.0)  # code 3 (exact: small integers)
        flat = torch.add(self._slot_offset, base, out=flat)
        for code in codes:
            flat.add_(code)
        ob.slots_t.copy_(flat)  # [W, N] -> the index's actor-major slot columns
        # time left to the budget and to the hard limit, elapsed: (budget - t, limit - t, 0 + t) / scale
        torch.div(torch.addcmul(limits, elapsed, self._ctx_sign).t(), self.time_scale, out=ob.ctx_time)
        torch.div(left, self.max_levels, out=ob.ctx_left)
        if self.subagent_budget is not None:  # share of the episode's subagent budget left (none: 1, never written)
            torch.clamp(1.0 - n_subagents / self._budget, min=0, out=ob.ctx_budget)
        torch.div(work, self.max_width * self.max_cost, out=ob.ctx_work)
        if out is None:
            out = torch.empty(N, W + 1, SLOT_FEATURES, device=self.device)
        torch.index_select(self._slot_table, 0, ob.index, out=out.view(N * (W + 1), SLOT_FEATURES))
        return out

    def _observe_buffers(self, N: int) -> SimpleNamespace:
        """The slot gather's reused int32 index [N, W+1] (flat; its context column stays: actor n reads
        context row n) with a view of its slot columns [W, N], and views of the N context rows."""
        ob = self._index_buffers.get(N)
        if ob is None:
            W = self.max_width
            index = torch.empty(N, W + 1, dtype=torch.int32, device=self.device)
            index[:, W] = torch.arange(N, device=self.device) + self._ctx_index
            ctx = self._slot_table[self._ctx_index:self._ctx_index + N]  # [N, F], written before each gather
            ob = self._index_buffers[N] = SimpleNamespace(
                index=index.view(-1), slots_t=index[:, :W].t(), ctx_time=ctx[:, :3], ctx_left=ctx[:, 3],
                ctx_budget=ctx[:, 4], ctx_work=ctx[:, 5])
        return ob

    def _observe_state(self, task: Tensor, level: Tensor, pend: Tensor, fail: Tensor, elapsed: Tensor,
                       n_subagents: Tensor) -> Tensor:
        """The observation of a state given in full (reset, the first observations): `_observe`'s inputs from it."""
        W, row = self.max_width, self._stage_row(task, level)
        cols = self._step_cols.index_select(1, row)
        left = cols[3 * W + 3] - level.float()
        work = (cols[:W] * pend).sum(0)
        return self._observe(row, (pend, fail * pend), None, cols[3 * W:3 * W + 3], left, elapsed, n_subagents, work)

    def _start(self, mask: Tensor, task: Tensor) -> None:
        """Begin a fresh episode on `task` for every actor where `mask` is True (tensor ops only)."""
        self.task = torch.where(mask, task, self.task)
        keep = ~mask
        self._stage = self._stage * keep
        keepf = keep.float()
        self._fail = self._fail * keepf
        self._counts = self._counts * keepf
        self._row = self._stage_row(self.task, self.level)
        first = self._present_cols.index_select(1, self.task * self._rows_per_task)
        self._pend = first * mask.float() + self._pend * keepf

    def _stage_row(self, task: Tensor, level: Tensor) -> Tensor:
        """[N] long: the stage row of (task, level) in the tables (past the last stage: the last stage's)."""
        return task * self._rows_per_task + level.clamp(max=self.max_levels - 1)

    @staticmethod
    def _check_size(num_envs: int, counts: list[int], max_levels: int, max_width: int, device: Any) -> None:
        """The world's tables (built below) against the free memory, before the task bank is drawn:
        the slot table (4 codes x stage rows x slots, twice while it is built), the step table, the
        slot-sum matrix [W, W] and the per-actor observation and state."""
        rows, width = sum(counts) * (max_levels + 1), max_width
        floats = (3 * rows * width * 4 * SLOT_FEATURES + (3 * width + 5) * rows + width * width
                  + 8 * num_envs * (width + 1) * SLOT_FEATURES)
        check_allocation(f"SwarmEnv(num_envs={num_envs}, max_width={max_width}, max_levels={max_levels}, "
                         f"{sum(counts)} tasks)", 4 * floats, device,
                         "lower max_width (slots per stage), max_levels, tasks_per_family or num_envs")

    def reset(self, *, seed: Optional[int] = None, task_index: Optional[Tensor] = None) -> Tensor:
        """Start every actor on `task_index` ([N] bank indices, a tensor or a list of ints; default: actor
        i on task i mod K). `seed` (0..2**32 - 1) reseeds the world's generators. Both are checked
        (a ConfigError naming them): reset is not the per-step path."""
        seed = checked_seed("SwarmEnv.reset(seed)", seed)
        if seed is not None:
            self.generator.manual_seed(seed)
            self._noise_generator.manual_seed(seed + NOISE_STREAM)
        if task_index is None:
            task_index = self._arange % len(self.bank)
        else:
            task_index = checked_task_index("SwarmEnv.reset(task_index)", task_index, self.num_envs, len(self.bank),
                                            self.device)
        self._start(torch.ones(self.num_envs, dtype=torch.bool, device=self.device), task_index.to(self.device, torch.long))
        return self._observe_state(self.task, self.level, self._pend, self._fail, self.elapsed, self.n_subagents)

    # ------------------------------------------------------------------ dynamics
    # The step's per-slot [W, N] values, one plane each of a buffer reused from step to step (nothing in it
    # outlives a step): fewer allocations and the same memory every step. `shards`..`shards_done` are
    # adjacent: one reduction sums them over slots.
    _PLANES = ("entry", "briefed_choice", "own", "shards", "briefed", "own_work", "shards_done", "delegated",
               "suitable", "with_work", "draw", "longest", "left_pending", "failed_now", "index", "pending_work",
               "next_pending")

    def _workspace(self, N: int) -> SimpleNamespace:
        """The reused step buffers for N actors: the `_PLANES`, the stage rows' gather, the int32 decode index."""
        ws = self._scratch.get(N)
        if ws is None:
            W, dev = self.max_width, self.device
            planes = torch.empty(len(self._PLANES), W, N, device=dev)
            increment = torch.ones(2, N, dtype=torch.long, device=dev)  # (level, attempts) per round; row 1 stays 1
            first = self._PLANES.index("shards")
            ws = SimpleNamespace(**dict(zip(self._PLANES, planes.unbind(0))), summed=planes[first:first + 4],
                                 increment=increment, stage_done=increment[0],
                                 cols=torch.empty(self._step_cols.shape[0], N, device=dev),
                                 entry_index=torch.empty(W * N, dtype=torch.int32, device=dev))
            ws.shards_flat = ws.shards.view(-1)
            self._scratch[N] = ws
        return ws

    def step(self, action: Tensor, next_task: Optional[Tensor | Callable[[Tensor], Tensor]] = None) -> StepResult:
        """One round for every actor; what it returns is new (never written later), so `parts` needs no copies.

        `action` is [N, W]: one entry per actor and subtask slot (any other shape is refused, never broadcast).
        `next_task`: None (an actor that resets replays its task), a callable `done -> [N]` bank indices (the
        package's collection passes its sampler's pick: valid by construction, not checked, no host read),
        or an [N] tensor of bank indices from a direct call, checked in full (dtype, shape and range: one
        host read, outside the package's step loop, which never passes a tensor)."""
        # action and next_task's kind: checked at entry (`checked_methods`, metadata only)
        if next_task is not None and not callable(next_task):
            next_task = self._checked_next_task(next_task)
        if self._compiled is not None and not self.trace:  # the same round, bitwise, as C++ kernels
            return self._cap(self._compiled.step(self, action, next_task))
        return self._cap(self._eager_step(action, next_task))

    def _checked_next_task(self, next_task: Any) -> Tensor:
        """A `next_task` tensor handed to `step` by a caller (never by the package's step loop, whose
        `next_task` is its sampler's callable): [N] (or one index for all) integer bank indices."""
        if isinstance(next_task, Tensor) and next_task.dim() == 0 or (
                isinstance(next_task, Tensor) and tuple(next_task.shape) == (1,)):
            next_task = next_task.reshape(1).expand(self.num_envs)
        if not isinstance(next_task, Tensor):
            raise ArgumentError(f"SwarmEnv.step(next_task): must be None, a callable done -> [N] bank indices or an "
                                f"[N] = [{self.num_envs}] long tensor of bank indices, got {type(next_task).__name__}")
        return checked_task_index("SwarmEnv.step(next_task)", next_task, self.num_envs, len(self.bank), self.device)

    def _cap(self, res: StepResult) -> StepResult:
        """`round_cap: terminal`: an episode cut by the round cap ends as a termination; then the
        outcome noise (plain torch, after either step)."""
        if self.round_cap != "truncation":
            res = res._replace(terminated=res.terminated | res.truncated, truncated=torch.zeros_like(res.truncated))
        return self._noisy(res) if self._outcome_noise > 0 else res

    def _noisy(self, res: StepResult) -> StepResult:
        """`outcome_noise` p: a noisy verifier. Every finished episode's outcome is flipped with
        probability p (a pass, outcome >= solved_threshold, becomes 0; anything else becomes 1), in
        the reward and in `parts.outcome` alike: what the learner and the sampler see. One uniform
        draw per actor per step from a generator of its own (seeded with the env, checkpointed), so the
        dynamics draw the same stream with or without noise; tensor ops only."""
        flip = torch.rand(res.reward.shape, generator=self._noise_generator, device=self.device) < self._outcome_noise
        flip &= res.terminated | res.truncated
        passed = res.reward >= self.solved_threshold
        outcome = torch.where(flip, (~passed).to(res.reward.dtype), res.reward)
        return res._replace(reward=outcome, parts=res.parts._replace(outcome=outcome))

    def _eager_step(self, action: Tensor, next_task: Optional[Tensor | Callable[[Tensor], Tensor]] = None) -> StepResult:
        """The round in tensor ops (see `step`)."""
        S, c, W = len(self.splits), self.costs, self.max_width
        N = self.num_envs
        task, pend, counts, row = self.task, self._pend, self._counts, self._row
        ws = self._workspace(N)
        # the observations' memory first: the step's only large allocation, made before any small one so
        # that it can reuse the last step's block when the caller has dropped it (fewer page faults)
        K = self._first_obs.shape[0]
        buf = torch.empty(2 * N + K, W + 1, SLOT_FEATURES, device=self.device)
        cols = torch.index_select(self._step_cols, 1, row, out=ws.cols)  # [3W + 5, N]
        size, plain, hard, limits, stage_rows = cols.split([W, W, W, 3, 2])
        budget, limit, _ = limits.unbind(0)
        n_levels, stage_serial = stage_rows.unbind(0)
        # Decode every entry in float, slot-major: e = (clamp(a, -1, 2S) + 1) x pending is 0 (nothing to do:
        # negative entries, no pending subtask), 1 (do it yourself), 2..S+1 (generic) or S+2..2S+1 (briefed)
        # in splits[(e - 2) % S] shards: two float compares and one gather of the shard counts.
        if action.is_floating_point():
            action = action.long()
        entry = ws.entry
        entry.copy_(action.t())  # exact on [-1, 2S]; the entries outside stay outside, so clamp after
        torch.addcmul(pend, entry.clamp_(-1.0, 2 * S), pend, out=entry)
        bc = torch.ge(entry, S + 2, out=ws.briefed_choice)
        own = torch.eq(entry, 1.0, out=ws.own)
        ws.entry_index.copy_(entry.view(-1))
        k = ws.shards
        torch.index_select(self._shard_table, 0, ws.entry_index, out=ws.shards_flat)
        if self._cap_binds:  # the caps (per round, per episode): delegations past them (in slot order) wait
            spawned = self._tri @ k
            cap = torch.clamp(self._budget - counts[2], max=float(self.max_subagents))
            k.mul_((cap - spawned + 1.0).clamp_(0.0, 1.0))
        deleg = torch.clamp(k, max=1.0, out=ws.delegated)
        briefed = torch.mul(deleg, bc, out=ws.briefed)
        # a suitable instruction: generic on PLAIN, briefed on HARD
        ok = torch.mul(deleg, plain, out=ws.suitable).addcmul_(briefed, hard)
        nonempty = torch.minimum(k, size, out=ws.with_work)  # shards with work; k > size leaves k - size empty shards
        in_a_row = ws.draw.uniform_(generator=self.generator)  # = torch.rand: the same draws
        in_a_row.log_().mul_(self._inv_log_rel).floor_()  # shards that succeed before the first failure
        torch.minimum(in_a_row, nonempty, out=ws.shards_done).mul_(ok)
        # done when every shard with work succeeds; a float compare into `in_a_row` (no bool tensor, no copy)
        success = torch.ge(in_a_row, nonempty, out=in_a_row).mul_(ok)
        torch.mul(size, own, out=ws.own_work)
        pieces, n_briefed, own_work, n_done = ws.summed.sum(1).unbind(0)  # exact: integer counts

        main = 1.0 + own_work + c.merge * pieces + c.brief * n_briefed
        # A subagent runs spawn + ceil(size / k) steps; the round waits for the longest. Taken as
        # spawn + ceil(max over delegated slots of size / k): ceil and + spawn are monotone, so this is
        # the max of the per-slot times, exactly (0 when nothing is delegated).
        ratio = torch.clamp(k, min=1.0, out=ws.longest)
        torch.div(size, ratio, out=ratio)
        if self.trace:  # evaluation only (a host-side flag, no sync): what actor `trace_actor` ran this round
            i = self.trace_actor
            self.last_round = {"level": self.level[i].clone(), "main": main[i].clone(),
                               "sub": c.spawn + torch.ceil(ratio[:, i]),
                               "delegated": deleg[:, i] > 0, "success": success[:, i] > 0,
                               "own": own[:, i] > 0, "shards": k[:, i].clone(), "size": size[:, i].clone()}
        longest = torch.add(ratio.mul_(deleg).amax(0).ceil_(), pieces.clamp(max=1.0), alpha=c.spawn)
        # the round's critical steps: main + longest subagent; counts and stage after the round
        new_counts = torch.empty_like(counts)
        elapsed, serial, n_subagents, assigned, completed = new_counts.unbind(0)
        was_elapsed, was_serial, _, _, was_completed = counts.unbind(0)
        torch.add(was_elapsed + main, longest, out=elapsed)
        torch.add(counts[2:4], pieces, out=new_counts[2:4])  # subagents spawned and assigned
        torch.add(was_completed, n_done, out=completed)

        # Advance past finished stages.
        pend = torch.sub(pend, own, out=ws.left_pending).sub_(success)
        stage_done = 1.0 - pend.amax(0)
        torch.addcmul(was_serial, stage_serial, stage_done, out=serial)
        ws.stage_done.copy_(stage_done)
        new_stage = self._stage + ws.increment  # level + stage done, attempts + 1
        level, attempts = new_stage.unbind(0)
        next_row = row + ws.stage_done  # (a task's last row is empty: see __init__)
        left = n_levels - level.float()  # stages left (exact: small integers)
        all_done = left <= 0
        advance = stage_done * ~all_done
        # A delegation that failed leaves its subtask pending, so its stage is not done: no mask needed.
        fail_seen = torch.sub(deleg, success, out=ws.failed_now)

        abandoned = elapsed > limit
        finished = all_done > abandoned  # (bools: a > b is a & ~b)
        terminated = all_done | abandoned
        time_out = attempts >= self.max_episode_steps
        truncated = time_out > terminated
        done = terminated | time_out
        outcome = torch.where(elapsed <= budget, 1.0, self.late_credit) * finished
        parts = EpisodeParts(task=task, outcome=outcome, n_subagents=n_subagents, assigned=assigned,
                             completed=completed, critical_steps=elapsed, serial_steps=serial)
        # One allocation holds the final observation, below it the first observation of every task, then
        # the observation after the resets: the actors that reset copy their task's row (one row gather),
        # the others their final one. An actor that began a new stage shows it (slot code 3, its pending
        # work that stage's); the others their current stage.
        final_obs, first_obs, obs = buf.split([N, K, N])
        work = torch.addcmul(torch.mul(size, pend, out=ws.pending_work).sum(0),
                             self._stage_work.index_select(0, next_row), advance)
        self._observe(next_row, (pend, fail_seen), advance, limits, left, elapsed, n_subagents, work, out=final_obs,
                      flat=ws.index)
        first_obs.copy_(self._first_obs)
        if next_task is None:
            next_task = task
        elif callable(next_task):
            next_task = checked_pick("SwarmEnv", next_task(done), N)  # the sampler picks for the actors that reset
        new_task = torch.where(done, next_task.to(self.device, torch.long), task)
        torch.index_select(buf[:N + K], 0, torch.where(done, new_task + N, self._arange), out=obs)

        # the state after the resets (pending and failed in place: private, read only here and by copies)
        keep = ~done
        keepf = keep.float()
        self.task = new_task
        self._stage = new_stage * keep
        self._counts = new_counts * keepf
        torch.mul(fail_seen, keepf, out=self._fail)
        # pending next round: a reset actor's first stage, a new stage's subtasks, else what is left
        # (lerp with a 0/1 weight picks one side exactly)
        state_row = self._row = torch.where(done, new_task * self._rows_per_task, next_row)  # next round's
        fresh = torch.index_select(self._present_cols, 1, state_row, out=ws.next_pending)
        torch.lerp(pend, fresh, torch.where(done, 1.0, advance), out=self._pend)
        return StepResult(obs, outcome, terminated, truncated, final_obs, parts)

    # ------------------------------------------------------------------ scripted policies
    def scripted_action(self, name: str, obs: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
        """The world's baselines, reading only `obs` ([N, W+1, F]) and acting in the action space:
        `serial` does everything itself; `oracle` delegates every non-LOCAL subtask in the largest
        split that leaves no shard empty, briefed exactly when HARD, and does LOCAL work itself
        (one shard each when the fine split does not fit under the caps); `random` draws every slot uniformly."""
        W, S = self.max_width, len(self.splits)  # name and obs: checked at entry (`checked_methods`)
        slots = obs[:, :W]
        if name == "serial":
            return torch.zeros(obs.shape[0], W, dtype=torch.long, device=obs.device)
        if name == "random":
            return torch.randint(0, 1 + 2 * S, (obs.shape[0], W), generator=generator, device=obs.device)
        if name == "optimal":
            return self._round_optimal(obs)
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

    def _round_optimal(self, obs: Tensor) -> Tensor:
        """`optimal`: the round-optimal oracle, from the observation only. For every subagent-phase
        length T in 0..max_cost (0: nothing delegated) each pending subtask takes the cheaper, in main-
        agent time, of doing it yourself (its size) or the smallest split k with ceil(size / k) <= T
        (merge_cost x k, + brief_cost when HARD; briefed exactly when HARD; LOCAL work never delegated;
        a tie goes to doing it yourself, which never fails); the round's time is 1 + that main time +
        spawn + the longest delegated shard; the T with the shortest round wins (so the all-serial
        round when it is faster). A plan whose shards exceed the subagents free this round is not
        considered. It ignores failures (reliability) and later stages: optimal per round, not overall."""
        W, S, c = self.max_width, len(self.splits), self.costs
        slots = obs[:, :W]
        pending = slots[..., 0] > 0.5  # [N, W]
        size = torch.round(slots[..., 1] * self.max_cost) * pending
        kind = slots[..., 2:5].argmax(-1)
        hard = (kind == HARD).float()
        splits = self._splits.to(obs.device)
        T = torch.arange(self.max_cost + 1, device=obs.device, dtype=size.dtype).view(1, -1, 1, 1)  # [1, C, 1, 1]
        shard_time = torch.ceil(size.unsqueeze(-1) / splits)  # [N, W, S]
        fits = shard_time.unsqueeze(1) <= T  # [N, C, W, S]
        any_fit = fits.any(-1)
        j = fits.float().argmax(-1)  # the smallest split that fits (the first True)
        k = splits[j]  # [N, C, W]
        cost = c.merge * k + c.brief * hard.unsqueeze(1)
        deleg = any_fit & (pending & (kind != LOCAL)).unsqueeze(1) & (cost < size.unsqueeze(1))
        main = 1.0 + torch.where(deleg, cost, size.unsqueeze(1)).sum(-1)  # [N, C]
        longest = (torch.ceil(size.unsqueeze(1) / k) * deleg).amax(-1)
        time = main + torch.where(deleg.any(-1), c.spawn + longest, torch.zeros_like(longest))
        free = torch.full_like(size[:, :1], float(self.max_subagents))
        if self.subagent_budget is not None:
            free = torch.minimum(free, torch.round(obs[:, W, 4:5] * self.subagent_budget))
        time = torch.where((k * deleg).sum(-1) <= free, time, torch.full_like(time, float("inf")))
        best = time.argmin(-1)  # [N]; T = 0 (nothing delegated) is always feasible
        pick = lambda t: t.gather(1, best.view(-1, 1, 1).expand(-1, 1, W)).squeeze(1)  # noqa: E731
        d, jj = pick(deleg), pick(j.long())
        return torch.where(d, 1 + jj + S * (kind == HARD), torch.zeros_like(jj))

    # ------------------------------------------------------------------ checkpoints
    _STATE = ("task", "level", "attempts", "pending", "failed", "elapsed", "serial", "n_subagents", "assigned",
              "completed")

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {n: getattr(self, n).clone() for n in self._STATE}  # pending, failed: bool
        state["generator"] = self.generator.get_state()
        if self._outcome_noise > 0:  # (absent otherwise: checkpoints without noise are as before)
            state["noise_generator"] = self._noise_generator.get_state()
        state["split"] = self.split
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()` of a SwarmEnv with the same num_envs and max_width (every key present,
        every tensor of this world's shape: a ConfigError naming the key otherwise, before any is loaded)."""
        check_state("SwarmEnv", state, self.state_dict(), optional=("noise_generator",),
                    hint=f" (num_envs={self.num_envs}, max_width={self.max_width}); load it into a SwarmEnv built "
                         "with the num_envs and max_width it was saved from")
        mine = self.state_dict().get("split")
        if "split" in state and state["split"] != mine:  # the task bank the actors' tasks index into
            raise ConfigError(f"SwarmEnv.load_state_dict(state): state['split'] is {state['split']!r}, this SwarmEnv's "
                              f"split is {mine!r}: the saved tasks index another bank; resume with the split it was "
                              "saved with (data.env.init_args.split), or start fresh")
        for name in self._STATE:  # counters and indices: >= 0 (and finite) at every step; a task indexes the bank
            value = state[name]
            if value.dtype == torch.bool:
                continue
            high = len(self.task_ids) if name == "task" else None
            if (value.is_floating_point() and not bool(torch.isfinite(value).all())) or bool((value < 0).any()) or (
                    high is not None and bool((value >= high).any())):
                within = f" in 0..{high - 1} (its task bank)" if high is not None else " >= 0 and finite"
                raise ConfigError(f"SwarmEnv.load_state_dict(state): state[{name!r}] holds a value outside what a step "
                                  f"writes (it is{within}): the checkpoint was edited or damaged; resume from an "
                                  "unedited checkpoint (--ckpt_path) or start fresh")
        for name, value in state.items():
            if name == "generator":
                self.generator.set_state(value)
            elif name == "noise_generator":
                self._noise_generator.set_state(value)
            elif name in ("pending", "failed"):
                getattr(self, "_pend" if name == "pending" else "_fail").copy_(value)
            elif name in self._STATE:
                getattr(self, name).copy_(value)
        self._row = self._stage_row(self.task, self.level)
