"""Task samplers: which task an actor starts next.

The public protocol is two methods on strings (`pick`, `record`). The data module uses the
batched, tensor-native path (`bind`, `pick_batch`, `record_batch`) that the built-ins
implement without a Python loop per actor; `as_batched` wraps a user's two-method class.

Built-ins: `RoundRobin` (default, reward-blind), `DifficultyWeighted` (UCB over learning
signal, sampled in proportion to its score) and `PosteriorSignal` (a posterior over
always-pass / always-fail / informative with an estimated flip rate, sampled in proportion
to the sharpened probability that a task is informative). `SamplingForLearnability` is a
published curriculum baseline (SFL, Rutherford et al. 2024: a top-k learnability buffer).
"""

from __future__ import annotations

import math
import threading
from typing import Any, Callable, Optional, Protocol, Sequence, runtime_checkable

import torch
from torch import Tensor

from parlightning.config_types import (
    ClosedUnitInterval, NonNegativeFinite, PositiveFinite, PositiveInt, Seed, check_args, check_value,
    restricted_number_type,
)
from parlightning.distribution.counters import AgreedCounters
from parlightning.errors import ArgumentError, ConfigError, ReportedError, check_call_shape
from parlightning.method_args import IndexArg, ItemsArg, Lifecycle, State, TensorArg, check_state, checked_methods
from parlightning.runtime.torch_state import global_state, state_change

# the samplers' method arguments (`checked_methods`): metadata only on the per-step pick_batch / record_batch
SAMPLER_SPECS = {
    "pick": {"round_index": IndexArg()},
    "bind": {"task_ids": ItemsArg(str, min_len=1, text="the task bank's ids, e.g. env.task_ids: a sampler needs one "
                                  "task to pick")},
    "pick_batch": {"shard": TensorArg("int", ("K",), device="same", values=(0, lambda s: _bank_size(s)), once=True,
                                      text="the round's bank indices: read once per shard tensor, not per step"),
                   "round_index": IndexArg(),
                   "reset_mask": TensorArg("bool", ("N",), device="same", text="one flag per actor")},
    "record_batch": {"task_index": TensorArg("int", ("E",), device="same"), "score": TensorArg("number", ("E",), device="same"),
                     "mask": TensorArg("bool", ("E",), device="same", optional=True)},
}

def _bank_size(sampler: Any) -> Optional[int]:
    """The bound bank's size (the tensor path's statistics' length), or None before bind."""
    for name in ("picks", "attempts", "p_informative", "in_buffer"):
        t = getattr(sampler, name, None)
        if isinstance(t, Tensor):
            return int(t.shape[0])
    index = getattr(sampler, "_index", None)
    return len(index) if index else None


# The tensor path needs the bank: `pick_batch` (and a reward-aware sampler's `record_batch`) before `bind` is one
# LifecycleError (a RuntimeError, as before); `bind` again lays the statistics out over the new bank.
BOUND = State("called before bind(task_ids, device); call sampler.bind(env.task_ids, device) first (the collector "
              "does, before the first rollout)")


def bound_lifecycle(*tensor_path: str) -> Lifecycle:
    return Lifecycle({"bound": BOUND}, requires=dict.fromkeys(tensor_path, "bound"), enters={"bind": "bound"})


PassThreshold = restricted_number_type("PassThreshold", float, [(">", 0.0), ("<=", 1.0)],
                                       docstring="the score that counts as a pass, in (0, 1]")
FlipRate = restricted_number_type("FlipRate", float, [(">=", 0.0), ("<", 0.5)], docstring="a flip rate in [0, 0.5)")


@runtime_checkable
class TaskSampler(Protocol):
    """Picks one task id from a shard (never mutating it) and learns from scored episodes:
    `pick(keys: Sequence[str], round_index: int) -> str` and `record(task_id: str, score: float)`.

    The methods are annotated `Any` on purpose: the config parser matches a class named by
    `class_path` against this protocol's annotations exactly, so a user's class with no (or other)
    annotations would be refused; any class with the two methods qualifies."""

    def pick(self, keys: Any, round_index: Any) -> Any: ...

    def record(self, task_id: Any, score: Any) -> Any: ...


@runtime_checkable
class BatchedTaskSampler(Protocol):
    """The tensor path. Task ids are bank indices (long tensors on the env's device).

    - `bind(task_ids, device)`: declare the task bank once, before the first pick.
    - `pick_batch(shard, round_index, reset_mask, generator)`: [N] bank indices, one per actor;
      only entries where `reset_mask` is True are used (those actors start a new episode).
    - `record_batch(task_index, score)`: E finished episodes, scores in 0..1. The built-ins
      and the `as_batched` adapter also take `mask=` ([E] bool; only True entries count), so
      the data module can pass all N actors with mask=done every step without a host sync.
    """

    def bind(self, task_ids: Sequence[str], device: torch.device) -> None: ...

    def pick_batch(
        self, shard: Tensor, round_index: int, reset_mask: Tensor, generator: Optional[torch.Generator] = None
    ) -> Tensor: ...

    def record_batch(self, task_index: Tensor, score: Tensor) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def _check_shard(name: str, shard: Tensor) -> None:
    """Shape-only checks (no host sync): a non-empty 1-D long tensor of bank indices."""
    if shard.dim() != 1 or shard.numel() == 0:
        raise ValueError(
            f"{name}.pick_batch: `shard` must be a non-empty 1-D tensor of bank indices, got shape {tuple(shard.shape)}"
        )


def _check_keys(name: str, keys: Sequence[str]) -> None:
    if len(keys) == 0:
        raise ValueError(f"{name}.pick: the shard is empty; give the sampler at least one task id")


@checked_methods(**SAMPLER_SPECS, lifecycle=bound_lifecycle("pick_batch"))  # record_batch: reward-blind, no bank
class RoundRobin:
    """Cycles through the shard in order: deterministic, reward-blind, the default."""

    reward_blind = True  # picks never read records: a collector process may pick from its own copy

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cursor = 0  # the string path's position
        self._batch_cursor: Optional[Tensor] = None  # the tensor path's position, on device
        self._index: dict[str, int] = {}
        self.picks: Optional[Tensor] = None  # [K] picks per task (tensor path)
        self._pending: Optional[dict[str, Any]] = None  # state loaded before bind()

    # -- string protocol -------------------------------------------------------------------
    def pick(self, keys: Sequence[str], round_index: int) -> str:
        _check_keys("RoundRobin", keys)
        with self._lock:
            key = keys[self._cursor % len(keys)]
            self._cursor += 1
        return key

    def record(self, task_id: str, score: float) -> None:  # reward-blind
        return None

    # -- tensor path -----------------------------------------------------------------------
    def bind(self, task_ids: Sequence[str], device: torch.device) -> None:
        self._index = {k: i for i, k in enumerate(task_ids)}
        self._batch_cursor = torch.zeros((), dtype=torch.long, device=device)
        self.picks = torch.zeros(len(task_ids), dtype=torch.long, device=device)
        if self._pending is not None:
            state, self._pending = self._pending, None
            self.load_state_dict(state)

    def pick_batch(
        self, shard: Tensor, round_index: int, reset_mask: Tensor, generator: Optional[torch.Generator] = None
    ) -> Tensor:
        _check_shard("RoundRobin", shard)  # (before bind: refused at entry, the lifecycle)
        count = reset_mask.long()
        with self._lock:  # read and advance the cursor together: threads never hand out the same turn
            order = torch.cumsum(count, 0).add_(self._batch_cursor - 1).remainder_(shard.numel())
            chosen = shard.index_select(0, order)  # (a 1-D gather: cheaper than advanced indexing)
            self._batch_cursor += count.sum()
            self.picks.index_add_(0, chosen, count)
        return chosen

    def record_batch(self, task_index: Tensor, score: Tensor, mask: Optional[Tensor] = None) -> None:
        return None  # reward-blind

    def signals(self) -> dict[str, Tensor]:
        """Run-level statistics for logging (0-dim tensors): a reward-blind sampler has picks only."""
        batch = self.picks.sum() if self.picks is not None else torch.zeros((), dtype=torch.long)
        return {"picks": (batch + self._cursor).float()}

    def __getstate__(self) -> dict[str, Any]:  # pickles (for a collector process) without its lock
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def state_dict(self) -> dict[str, Any]:
        return {
            "cursor": self._cursor,
            "batch_cursor": None if self._batch_cursor is None else self._batch_cursor.clone(),
            "picks": None if self.picks is None else self.picks.clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state("RoundRobin", state, self.state_dict(), free_shape=("picks", "batch_cursor"))  # sizes: below
        self._cursor = int(state["cursor"])
        if state.get("batch_cursor") is None:
            return
        if self._batch_cursor is None:  # not bound yet: applied by bind()
            self._pending = dict(state)
            return
        if state["picks"].shape != self.picks.shape:
            raise ValueError(
                f"RoundRobin.load_state_dict: the checkpoint has picks for {state['picks'].numel()} tasks but the "
                f"bound bank has {self.picks.numel()}; resume with the same task bank"
            )
        self._batch_cursor.copy_(state["batch_cursor"])
        self.picks.copy_(state["picks"])


@checked_methods(**SAMPLER_SPECS, lifecycle=bound_lifecycle("pick_batch", "record_batch"))
class _LearningSampler:
    """Shared machinery of the reward-aware built-ins: per-task statistics as tensors
    ([K] attempts, passes, picks, plus a subclass's own) indexed by task id, one lock, both
    paths, signals and checkpoints.

    Unbound (string path only), the statistics grow as new task ids appear; `bind` lays them
    out over the bank, on its device, keeping what was already learnt for ids in the bank.
    Recording only counts; a subclass that fits something to the counts does it in `_learn()`,
    run once before the next pick after new results, so both paths learn on the same schedule.
    Subclasses supply `_weights(shard)` and `_sample(weights, n, generator)` (n positions).
    """

    PER_TASK = ("attempts", "passes", "picks")

    def __init__(self, pass_threshold: PassThreshold, seed: Optional[Seed]) -> None:
        # pass_threshold: use the env's solved threshold (0.999 for binary outcomes, e.g. 0.8 for a graded scorer)
        self.pass_threshold, self.seed = check_args(type(self).__name__, _LearningSampler.__init__, locals()).values()
        seed = self.seed
        self._lock = threading.Lock()
        self._rng = torch.Generator()
        # seed=None follows torch's global seed, so `seed_everything` makes runs reproducible
        self._rng.manual_seed(int(torch.initial_seed() if seed is None else seed))
        self._ids: list[str] = []  # index -> task id
        self._index: dict[str, int] = {}
        self._bound = False
        self._dirty = False  # results recorded since the last _learn()
        self.device = torch.device("cpu")
        self._empty()

    # -- statistics layout -----------------------------------------------------------------
    def _new_entries(self, name: str, n: int) -> Tensor:
        """Values for n new (untried) tasks of per-task tensor `name`."""
        if name == "picks":
            return torch.zeros(n, dtype=torch.long, device=self.device)
        return torch.zeros(n, device=self.device)

    def _empty(self) -> None:
        for name in self.PER_TASK:
            setattr(self, name, self._new_entries(name, 0))

    def _per_task(self) -> dict[str, Tensor]:
        return {name: getattr(self, name) for name in self.PER_TASK}

    def _resize(self, k: int) -> None:
        """Grow the per-task tensors to k entries; new tasks start untried."""
        extra = k - self.attempts.numel()
        if extra > 0:
            for name, value in self._per_task().items():
                setattr(self, name, torch.cat([value, self._new_entries(name, extra)]))

    def _indices(self, keys: Sequence[str], who: str) -> list[int]:
        """Positions of `keys` (caller holds the lock); unbound, unknown ids are added."""
        out = []
        for k in keys:
            i = self._index.get(k)
            if i is None:
                if self._bound:
                    raise ValueError(
                        f"{type(self).__name__}.{who}: task id {k!r} is not in the bank given to bind(); "
                        "pass ids from the env's task_ids"
                    )
                i = self._index[k] = len(self._ids)
                self._ids.append(k)
            out.append(i)
        self._resize(len(self._ids))
        return out

    def _layout(self, ids: Sequence[str], per_task: dict[str, Tensor]) -> None:
        """Fresh untried statistics over the current index, then copy in `per_task` (given for
        `ids`) where an id is in the index; others are dropped."""
        self._empty()
        self._resize(len(self._ids))
        src, dst = [], []
        for j, k in enumerate(ids):
            i = self._index.get(k)
            if i is not None:
                src.append(j)
                dst.append(i)
        if not src:
            return
        for name, value in per_task.items():
            mine = getattr(self, name)
            src_t, dst_t = torch.tensor(src, device=self.device), torch.tensor(dst, device=self.device)
            mine[dst_t] = value.to(self.device, mine.dtype)[src_t]

    def bind(self, task_ids: Sequence[str], device: torch.device) -> None:
        """Lay the statistics out over the bank (on `device`); what was learnt for ids in it is kept."""
        ids = list(task_ids)
        if len(set(ids)) != len(ids):
            raise ValueError(f"{type(self).__name__}.bind: task_ids has duplicates; give each task one id")
        with self._lock:
            old_ids, old = self._ids, self._per_task()
            self.device = torch.device(device)
            self._to_device()
            self._ids, self._index, self._bound = ids, {k: i for i, k in enumerate(ids)}, True
            self._layout(old_ids, old)

    def _to_device(self) -> None:
        """Hook: move a subclass's non per-task tensors to self.device."""

    def _learn(self) -> None:
        """Hook: fit whatever the subclass derives from the counts (caller holds the lock)."""

    def _learn_if_dirty(self) -> None:
        if self._dirty:
            self._learn()
            self._dirty = False

    # -- subclass hooks --------------------------------------------------------------------
    def _weights(self, shard: Tensor) -> Tensor:
        raise NotImplementedError

    def _sample(self, weights: Tensor, n: int, generator: Optional[torch.Generator]) -> Tensor:
        """n independent draws in proportion to the weights: one multinomial, no loop per actor."""
        return torch.multinomial(weights, n, replacement=True, generator=generator)

    def weights(self, keys: Sequence[str]) -> Tensor:
        """What `pick` draws from for these keys, on the CPU (for inspection and tests)."""
        with self._lock:
            idx = self._indices(keys, "weights")
            self._learn_if_dirty()
            return self._weights(torch.tensor(idx, dtype=torch.long, device=self.device)).cpu()

    # -- string protocol -------------------------------------------------------------------
    def pick(self, keys: Sequence[str], round_index: int) -> str:
        """One task id from `keys` (never mutated); drawn with the sampler's own seeded generator."""
        _check_keys(type(self).__name__, keys)
        with self._lock:
            idx = self._indices(keys, "pick")
            self._learn_if_dirty()
            weights = self._weights(torch.tensor(idx, dtype=torch.long, device=self.device)).cpu()
            pos = int(self._sample(weights, 1, self._rng)[0])
            self.picks[idx[pos]] += 1
        return keys[pos]

    def record(self, task_id: str, score: float) -> None:
        """One scored episode; a score >= pass_threshold is a pass."""
        score = float(score)
        if not (0.0 <= score <= 1.0):  # also rejects NaN
            raise ValueError(
                f"{type(self).__name__}.record: score={score!r} for {task_id!r} must be in [0, 1]; normalise the reward"
            )
        with self._lock:
            (i,) = self._indices((task_id,), "record")
            self.attempts[i] += 1.0
            if score >= self.pass_threshold:
                self.passes[i] += 1.0
            self._dirty = True

    # -- tensor path -----------------------------------------------------------------------
    def pick_batch(
        self, shard: Tensor, round_index: int, reset_mask: Tensor, generator: Optional[torch.Generator] = None
    ) -> Tensor:
        """[N] bank indices drawn from `shard` only, one independent draw per actor; no host
        sync. Without a generator, the sampler's own seeded one is used on CPU."""
        _check_shard(type(self).__name__, shard)  # (before bind: refused at entry, the lifecycle)
        if generator is None and self.device.type == "cpu":
            generator = self._rng
        with self._lock:
            self._learn_if_dirty()
            chosen = shard[self._sample(self._weights(shard), reset_mask.numel(), generator)]
            self.picks.index_add_(0, chosen, reset_mask.to(torch.long))
        return chosen

    def record_batch(self, task_index: Tensor, score: Tensor, mask: Optional[Tensor] = None) -> None:
        """E finished episodes at once (scores in 0..1; not range-checked here, to avoid a host
        sync). With `mask` ([E] bool), only entries where it is True count: pass all N actors'
        tasks and outcomes with mask=done every step, and nothing is synchronised."""
        count = torch.ones_like(score, dtype=self.attempts.dtype) if mask is None else mask.to(self.attempts.dtype)
        with self._lock:
            self.attempts.index_add_(0, task_index, count)
            self.passes.index_add_(0, task_index, (score >= self.pass_threshold).to(self.passes.dtype) * count)
            self._dirty = True

    # -- observability -----------------------------------------------------------------------
    def signals(self) -> dict[str, Tensor]:
        """Run-level statistics for logging, as 0-dim tensors (read at rollout end, not per step):
        `informative_share` (share of all picks so far that went to tasks whose observed pass
        rate is strictly between 0 and 1), `pass_rate_spread` (std of the observed pass rates
        of tried tasks), `tried_fraction` and `picks`."""
        with self._lock:
            n, s = self.attempts, self.passes
            picks = self.picks.to(n.dtype)
            tried = (n > 0).to(n.dtype)
            rate = s / n.clamp(min=1.0)
            informative = tried * ((rate > 0) & (rate < 1)).to(n.dtype)
            total_picks = picks.sum()
            n_tried = tried.sum()
            mean = (rate * tried).sum() / n_tried.clamp(min=1.0)
            out = {
                "informative_share": (picks * informative).sum() / total_picks.clamp(min=1.0),
                "pass_rate_spread": (((rate - mean) ** 2 * tried).sum() / n_tried.clamp(min=1.0)).sqrt(),
                "tried_fraction": n_tried / max(n.numel(), 1),
                "picks": total_picks,
            }
            out.update(self._extra_signals())
        return out

    def _extra_signals(self) -> dict[str, Tensor]:
        return {}

    # -- distributed ------------------------------------------------------------------------
    COUNTS = ("attempts", "passes", "picks")  # what `sync` adds across ranks: counts only, never probabilities

    def sync(self, reduce_sum: Callable[[Tensor], Tensor]) -> None:
        """Make every rank's statistics the union of all ranks' episodes: all-reduce (sum) the
        counts recorded since the last sync, then refit what derives from them (e.g. a posterior)
        on the union, identically on every rank. Every rank must call it (a collective)."""
        with self._lock:
            counters = AgreedCounters.from_total(self._stacked_counts(), getattr(self, "_synced", None))
            counters.sync(reduce_sum)
            total = counters.total()
            for i, name in enumerate(self.COUNTS):
                mine = getattr(self, name)
                setattr(self, name, total[i].to(mine.dtype))
            self._synced = counters.agreed  # the union as of this sync, the same on every rank
            self._dirty = True
            self._learn_if_dirty()  # derived statistics from the union (the logged signals read them)

    def _stacked_counts(self) -> Tensor:
        return torch.stack([getattr(self, n).to(torch.float64) for n in self.COUNTS])

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Tensors and plain containers only (loads with torch.load(weights_only=True)). Under DDP
        `synced` [3, K] is the part of the counts all ranks agreed at the last sync: each rank saves
        its own state, so its picks and records since then are all-reduced at the first sync after
        a resume (counting them as agreed would leave the ranks apart forever)."""
        with self._lock:
            state: dict[str, Any] = {
                "task_ids": list(self._ids),
                "pass_threshold": self.pass_threshold,
                "dirty": self._dirty,
                "rng": self._rng.get_state(),
            }
            synced = getattr(self, "_synced", None)  # None: never synced (one rank)
            ok = synced is not None and synced.shape == (len(self.COUNTS), len(self._ids))
            state["synced"] = synced.detach().cpu().clone() if ok else None
            state.update({k: v.detach().clone() for k, v in self._per_task().items()})
            state.update(self._extra_state())
        return state

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _load_extra(self, state: dict[str, Any]) -> None:
        """Hook: restore a subclass's non per-task state (caller holds the lock)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore statistics. Bound, they are laid out over the current bank by task id (a
        checkpoint from another bank keeps what overlaps); works before or after bind()."""
        own = self.state_dict()
        # the per-task counts follow the checkpoint's bank (laid out by task id below); older checkpoints lack
        # the rng, the agreed counts and the dirty flag
        check_state(type(self).__name__, state, own, optional=("rng", "synced", "dirty", "pass_threshold"),
                    free_shape=(*self.PER_TASK, "synced", "task_ids"))
        if float(state.get("pass_threshold", self.pass_threshold)) != self.pass_threshold:
            raise ValueError(
                f"{type(self).__name__}.load_state_dict: the checkpoint counted a pass at "
                f"{state['pass_threshold']} but this sampler at pass_threshold={self.pass_threshold}; "
                "construct it with the checkpoint's pass_threshold"
            )
        with self._lock:
            if "rng" in state:
                self._rng.set_state(state["rng"])
            if not self._bound:
                self._ids = list(state["task_ids"])
                self._index = {k: i for i, k in enumerate(self._ids)}
            self._load_extra(state)
            self._layout(state["task_ids"], {k: state[k] for k in self.PER_TASK})
            self._dirty = bool(state.get("dirty", False))
            # the agreed part: the next sync all-reduces everything counted since (this rank's own)
            synced = state.get("synced", "absent")
            counts = self._stacked_counts()
            if synced is None:  # never synced (one rank): nothing agreed yet
                self._synced = None
            elif isinstance(synced, Tensor) and list(state["task_ids"]) == list(self._ids) \
                    and synced.shape == counts.shape:
                self._synced = synced.to(counts.device, counts.dtype).clone()
            else:  # older checkpoints, another bank: everything loaded counts as agreed
                self._synced = counts


class DifficultyWeighted(_LearningSampler):
    """UCB over learning signal: score = min(4p(1-p), 1) + c*sqrt(ln(total)/n), p the observed
    pass rate (a score >= pass_threshold is a pass; untried tasks at the optimistic prior
    p = 0.5), and each actor's task drawn in proportion to its score. `total` is every episode
    recorded so far; n is clamped to 1 for untried tasks.

    Why in proportion rather than the best score: the data module picks for every actor that
    resets in a step at once, from one shard, before their results return; argmax sends all of
    them to the same task. Measured (scripts/sampler_table.py), argmax lands more rollouts on
    informative tasks one at a time but loses a fifth of that with 8 picks in flight, and
    concentrates on fewer of them (coverage ~72 vs ~92 with noisy rewards); proportional
    draws are also what reproduce the published table. For sharper targeting without that
    collapse, use `PosteriorSignal`.
    """

    def __init__(self, c: NonNegativeFinite = 0.2, pass_threshold: PassThreshold = 0.999,
                 seed: Optional[Seed] = None) -> None:
        self.c = check_args("DifficultyWeighted", DifficultyWeighted.__init__, locals())["c"]  # 0.2: default; larger explores more
        super().__init__(pass_threshold, seed)

    def _weights(self, shard: Tensor) -> Tensor:
        n, s = self.attempts[shard], self.passes[shard]
        p = torch.where(n > 0, s / n.clamp(min=1.0), torch.full_like(n, 0.5))
        signal = (4.0 * p * (1.0 - p)).clamp(max=1.0)
        total = self.attempts.sum().clamp(min=1.0)
        explore = self.c * torch.sqrt(torch.log(total) / n.clamp(min=1.0))
        return signal + explore + 1e-6  # floor: an all-zero shard is drawn uniformly


class PosteriorSignal(_LearningSampler):
    """A posterior over what each task is, sampled towards the informative ones. Each task is
    always-pass, always-fail or informative (true pass rate ~ Beta(2, 2), the shape of the
    4p(1-p) signal), and every outcome flips with a rate that is estimated. One warm-started
    EM step after new results refits the class priors and the flip rate; `p_informative` [K]
    is each task's posterior probability of being informative. Picks are drawn independently
    per actor in proportion to `p_informative ** sharpness` (one multinomial per call).

    Why it beats `DifficultyWeighted` on the share of rollouts landing on informative tasks: a
    flipped outcome makes a solved task look half-solved to a pass-rate weight (p = 0.85 gives
    4p(1-p) = 0.51), while the posterior knows flips happen at the estimated rate and asks
    whether a task's outcomes are more mixed than that; and a task seen to pass and fail is
    near-certainly informative after a few episodes, where 4p(1-p) keeps wavering. Untried
    tasks sit at the estimated share of informative tasks, so exploration needs no constant.
    Independent draws spread picks made before earlier results return. `sharpness=1` is
    probability matching; 3 (the measured default) concentrates harder on tasks known to be
    informative. `flip_rate=None` estimates the flip rate; a float fixes it.
    """

    PER_TASK = ("attempts", "passes", "picks", "p_informative")
    GRID = 32  # quadrature points over the informative class's true pass rate
    FLIP_PRIOR = (0.05, 20.0)  # flip-rate prior: mean, weight in pseudo-episodes

    def __init__(
        self,
        pass_threshold: PassThreshold = 0.999,
        flip_rate: Optional[FlipRate] = None,
        sharpness: PositiveFinite = 3.0,
        informative_prior: tuple[PositiveFinite, ...] = (2.0, 2.0),
        seed: Optional[Seed] = None,
    ) -> None:
        typed = check_args("PosteriorSignal", PosteriorSignal.__init__, locals())  # flip_rate None: estimated
        flip_rate, sharpness = typed["flip_rate"], typed["sharpness"]  # sharpness 1: probability matching
        if len(typed["informative_prior"]) != 2:
            raise ConfigError(f"PosteriorSignal.informative_prior: must be two positive Beta parameters, e.g. "
                              f"(2.0, 2.0), got {informative_prior!r}")
        a, b = typed["informative_prior"]
        self.flip_rate = flip_rate
        self.sharpness = float(sharpness)
        self.informative_prior = (a, b)
        grid = (torch.arange(self.GRID, dtype=torch.float32) + 0.5) / self.GRID
        logw = (a - 1.0) * torch.log(grid) + (b - 1.0) * torch.log1p(-grid)
        self._grid, self._grid_logw = grid, logw - torch.logsumexp(logw, 0)
        self._flip = torch.tensor(self.FLIP_PRIOR[0] if flip_rate is None else float(flip_rate))
        self._class_prior = torch.full((3,), 1.0 / 3.0)  # always-pass, always-fail, informative
        super().__init__(pass_threshold, seed)

    def _posterior(self) -> Tensor:
        """E-step: [K, 3] posterior over (always-pass, always-fail, informative) per task."""
        n, s = self.attempts, self.passes
        eps = self._flip.clamp(1e-4, 0.45)
        log_pass = s * torch.log1p(-eps) + (n - s) * torch.log(eps)
        log_fail = s * torch.log(eps) + (n - s) * torch.log1p(-eps)
        q = eps + (1.0 - 2.0 * eps) * self._grid  # observed pass rate of an informative task
        log_inf = torch.logsumexp(
            self._grid_logw + s[:, None] * torch.log(q) + (n - s)[:, None] * torch.log1p(-q), dim=1
        )
        logits = torch.stack([log_pass, log_fail, log_inf], -1) + torch.log(self._class_prior)
        return torch.softmax(logits, -1)

    def _learn(self) -> None:
        """One warm-started EM step: posterior, then class priors and flip rate from tried tasks."""
        n, s = self.attempts, self.passes
        r = self._posterior()
        self.p_informative = r[:, 2].contiguous()
        tried = (n > 0).to(n.dtype)
        self._class_prior = ((r * tried[:, None]).sum(0) + 1.0) / (tried.sum() + 3.0)
        if self.flip_rate is None:
            mean, weight = self.FLIP_PRIOR
            flips = (r[:, 0] * (n - s) + r[:, 1] * s).sum()
            exposure = ((r[:, 0] + r[:, 1]) * n).sum()
            self._flip = (flips + mean * weight) / (exposure + weight)

    def _new_entries(self, name: str, n: int) -> Tensor:
        if name == "p_informative":  # an untried task's posterior is the class prior
            return self._class_prior[2].expand(n).clone()
        return super()._new_entries(name, n)

    def _to_device(self) -> None:
        self._flip = self._flip.to(self.device)
        self._class_prior = self._class_prior.to(self.device)
        self._grid, self._grid_logw = self._grid.to(self.device), self._grid_logw.to(self.device)

    def _weights(self, shard: Tensor) -> Tensor:
        return self.p_informative[shard] ** self.sharpness + 1e-12  # floor: never an all-zero shard

    def _extra_signals(self) -> dict[str, Tensor]:
        picks = self.picks.to(self.p_informative.dtype)
        return {
            "flip_rate": self._flip.clone(),
            "informative_prior": self._class_prior[2].clone(),
            "posterior_informative_share": (picks * self.p_informative).sum() / picks.sum().clamp(min=1.0),
        }

    def _extra_state(self) -> dict[str, Any]:
        return {"flip": self._flip.clone(), "class_prior": self._class_prior.clone()}

    def _load_extra(self, state: dict[str, Any]) -> None:
        self._flip = state["flip"].to(self.device, torch.float32).clone()
        self._class_prior = state["class_prior"].to(self.device, torch.float32).clone()



class SamplingForLearnability(_LearningSampler):
    """Sampling For Learnability (SFL), from Rutherford et al. 2024, "No Regrets: Investigating and
    Improving Regret Approximations for Curriculum Discovery" (NeurIPS 2024): a task's learnability
    is p(1 - p), p the current policy's success rate on it; a buffer holds the `buffer_size` tasks
    of highest learnability and is refreshed periodically; each pick comes from the buffer with
    probability `replay_prob` (uniformly among its tasks), otherwise uniformly from the shard.

    Adapted to a fixed task bank and to this package's protocol, as follows. The paper measures p
    with dedicated rollouts of the current policy on freshly generated levels; here p is each
    task's pass rate over the training episodes recorded since the previous refresh (the policy of
    that window), so no rollouts are spent on measuring. The paper refreshes every T updates; here
    the buffer is refreshed once at least `refresh_episodes` episodes have been recorded since the
    last refresh (counted on the union of all ranks' episodes after `sync`, so every rank refreshes
    at the same point to the same buffer). A task with no episode in the window is not measured
    and enters the buffer only when fewer than `buffer_size` tasks were. Before the first refresh
    the buffer is empty and picks are uniform. Under a data-parallel shard, buffer picks are made
    among the buffer's tasks in this rank's shard (uniform when it has none). The mixture is one
    weight vector over the shard, drawn with one multinomial, in tensor ops only (no host sync).
    """

    PER_TASK = ("attempts", "passes", "picks", "mark_attempts", "mark_passes", "learnability", "in_buffer")

    def __init__(self, buffer_size: PositiveInt = 16, replay_prob: ClosedUnitInterval = 0.5,
                 refresh_episodes: PositiveInt = 1024, pass_threshold: PassThreshold = 0.999,
                 seed: Optional[Seed] = None) -> None:
        typed = check_args("SamplingForLearnability", SamplingForLearnability.__init__, locals())
        self.buffer_size, self.replay_prob, self.refresh_episodes = (  # replay_prob: the share of picks from the buffer
            typed["buffer_size"], typed["replay_prob"], typed["refresh_episodes"])
        self._refreshes = torch.zeros(())
        super().__init__(pass_threshold, seed)

    def _learn(self) -> None:
        """Refresh the buffer when `refresh_episodes` new episodes have come in (tensor ops: the
        decision is a 0-dim tensor, never read on the host)."""
        n = self.attempts - self.mark_attempts
        s = self.passes - self.mark_passes
        due = n.sum() >= self.refresh_episodes
        p = s / n.clamp(min=1.0)
        score = torch.where(n > 0, p * (1.0 - p), torch.full_like(p, -1.0))  # unmeasured tasks rank last
        fresh = torch.zeros_like(self.in_buffer)
        k = min(self.buffer_size, score.numel())
        if k:
            fresh.index_fill_(0, torch.topk(score, k).indices, 1.0)
        self.in_buffer = torch.where(due, fresh, self.in_buffer)
        self.learnability = torch.where(due, score.clamp(min=0.0), self.learnability)
        self.mark_attempts = torch.where(due, self.attempts, self.mark_attempts)
        self.mark_passes = torch.where(due, self.passes, self.mark_passes)
        self._refreshes = self._refreshes + due.to(self._refreshes.dtype)

    def _weights(self, shard: Tensor) -> Tensor:
        buffered = self.in_buffer[shard]
        n_buffered = buffered.sum()
        uniform = torch.full_like(buffered, 1.0 / shard.numel())
        mixed = (1.0 - self.replay_prob) * uniform + self.replay_prob * buffered / n_buffered.clamp(min=1.0)
        return torch.where(n_buffered > 0, mixed, uniform)

    def _to_device(self) -> None:
        self._refreshes = self._refreshes.to(self.device)

    def _extra_signals(self) -> dict[str, Tensor]:
        size = self.in_buffer.sum()
        return {"buffer_size": size, "refreshes": self._refreshes.clone(),
                "buffer_learnability": (self.learnability * self.in_buffer).sum() / size.clamp(min=1.0)}

    def _extra_state(self) -> dict[str, Any]:
        return {"refreshes": self._refreshes.clone()}

    def _load_extra(self, state: dict[str, Any]) -> None:
        self._refreshes = state["refreshes"].to(self.device, torch.float32).clone()

def pass_threshold_mismatch(sampler: Any, solved_threshold: Optional[float]) -> Optional[str]:
    """A warning message when the sampler's `pass_threshold` disagrees with the env's solved
    threshold (the data module warns once with it), else None."""
    mine = getattr(sampler, "pass_threshold", None)
    if mine is None:
        inner = getattr(sampler, "sampler", None)  # the as_batched adapter
        mine = getattr(inner, "pass_threshold", None)
    if mine is None or solved_threshold is None or math.isclose(float(mine), float(solved_threshold)):
        return None
    return (
        f"{type(sampler).__name__}.pass_threshold={mine} but the env counts a task solved at "
        f"{solved_threshold}; the sampler and the env disagree on what a pass is. Set "
        f"pass_threshold={solved_threshold} on the sampler (or change the env's solved threshold)"
    )


class _BatchedAdapter:
    """Gives a user's two-method sampler the tensor path: at each new round it asks `pick` for
    one task per actor (picks in flight ahead of time), hands them out in order as actors reset,
    and replays finished episodes into `record` at rollout end (off the step loop)."""

    def __init__(self, sampler: TaskSampler, queue_length: int) -> None:
        self.sampler = sampler
        self.queue_length = queue_length
        self._task_ids: list[str] = []
        self._index: dict[str, int] = {}
        self._queue: Optional[Tensor] = None
        self._queue_round: Optional[int] = None
        self._cursor: Optional[Tensor] = None

    @property
    def display_name(self) -> str:
        """The wrapped sampler's class name, for the lines that name the user's sampler."""
        return type(self.sampler).__name__

    def bind(self, task_ids: Sequence[str], device: torch.device) -> None:
        self._task_ids = list(task_ids)
        self._index = {k: i for i, k in enumerate(self._task_ids)}
        self._cursor = torch.zeros((), dtype=torch.long, device=device)
        self._device = device

    def _refill(self, shard: Tensor, round_index: int) -> None:
        keys = tuple(self._task_ids[i] for i in shard.tolist())
        in_shard, picks = frozenset(keys), []
        for _ in range(self.queue_length):
            task_id = self._call("pick", keys, round_index)
            try:  # the shard, not the bank: under a plan, another rank's tasks are not this rank's to run
                known = task_id in in_shard
            except TypeError:  # a list or a dict: not even hashable
                known = False
            if not known:
                raise ReportedError(
                    f"data.sampler: {type(self.sampler).__name__}.pick returned {task_id!r:.80}, which is not in the "
                    f"shard it was given ({len(keys)} of the bank's {len(self._task_ids)} tasks); pick must return one "
                    "of `keys`"
                )
            picks.append(self._index[task_id])
        self._queue = torch.tensor(picks, dtype=torch.long, device=self._device)
        self._queue_round = round_index
        self._cursor.zero_()

    def pick_batch(
        self, shard: Tensor, round_index: int, reset_mask: Tensor, generator: Optional[torch.Generator] = None
    ) -> Tensor:
        if self._queue is None or self._queue_round != round_index:
            self._refill(shard, round_index)  # once per round, outside the per-step hot path
        order = torch.cumsum(reset_mask.long(), 0) - 1 + self._cursor
        self._cursor += reset_mask.sum()
        return self._queue[order.remainder(self._queue.numel())]

    def record_batch(self, task_index: Tensor, score: Tensor, mask: Optional[Tensor] = None) -> None:
        if mask is not None:  # this path syncs anyway: call it off the step loop
            task_index, score = task_index[mask], score[mask]
        for i, s in zip(task_index.tolist(), score.tolist()):
            self._call("record", self._task_ids[i], float(s))

    def _call(self, method: str, *args: Any) -> Any:
        """The user's pick / record; what it raises is one line naming the sampler (not a traceback)."""
        before = global_state()
        try:
            out = getattr(self.sampler, method)(*args)
        except ReportedError:
            raise
        except Exception as err:
            text = " ".join(str(err).split())[:300]
            raise ReportedError(f"data.sampler: {type(self.sampler).__name__}.{method} raised {type(err).__name__}"
                                f"{': ' + text if text else ''}; fix the sampler") from err
        changed = state_change(before)  # torch's process-wide settings, compared host-side (~1 us)
        if changed is not None:
            raise ReportedError(f"data.sampler: {type(self.sampler).__name__}.{method} {changed}")
        return out

    def signals(self) -> dict[str, Tensor]:
        """The wrapped sampler's `signals()` when it has one, else nothing."""
        inner = getattr(self.sampler, "signals", None)
        return dict(inner()) if callable(inner) else {}

    def state_dict(self) -> dict[str, Any]:
        inner = getattr(self.sampler, "state_dict", None)
        return {"sampler": inner() if callable(inner) else {}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        inner = getattr(self.sampler, "load_state_dict", None)
        if callable(inner):
            inner(state.get("sampler", {}))


SAMPLER_CALLS = {  # the calls the collector makes into a sampler, by path: method -> its arguments, in order
    "batched": {"bind": ("task_ids", "device"), "pick_batch": ("shard", "round_index", "mask", "generator"),
                "record_batch": ("task_index", "score")},
    "two-method": {"pick": ("keys", "round_index"), "record": ("task_id", "score")},
}


def check_sampler_calls(field: str, sampler: Any) -> None:
    """Probe the signatures of the methods the collector will call on `sampler` (the tensor path's
    when it has one, else pick / record), once, before anything is written (`check_call_shape`)."""
    blind = getattr(sampler, "reward_blind", False)
    if not isinstance(blind, bool):  # read as a truth value: "no" or "false" would mean True
        raise ConfigError(f"{field}: {type(sampler).__name__}.reward_blind is {blind!r} ({type(blind).__name__}); it "
                          "must be True (picks never read the records: a collector process may pick from its own "
                          "copy) or False")
    batched = all(callable(getattr(sampler, m, None)) for m in SAMPLER_CALLS["batched"])
    for method, args in SAMPLER_CALLS["batched" if batched else "two-method"].items():
        fn = getattr(sampler, method, None)
        if callable(fn):
            check_call_shape(field, type(sampler).__name__, method, fn, args, caller="the collector")


def as_batched(sampler: Any, queue_length: int) -> BatchedTaskSampler:
    """The sampler itself when it has the tensor path, else a queue-based adapter that asks `pick`
    for `queue_length` tasks (a positive int) at each new round."""
    queue_length = check_value("as_batched: queue_length", PositiveInt, queue_length)
    if not isinstance(sampler, type) and all(callable(getattr(sampler, m, None)) for m in ("bind", "pick_batch",
                                                                                          "record_batch")):
        return sampler
    if isinstance(sampler, type) or not isinstance(sampler, TaskSampler):  # a class where an instance goes, too
        raise ArgumentError(
            f"as_batched(sampler): {'the class ' + sampler.__name__ if isinstance(sampler, type) else type(sampler).__name__} "
            "is not a TaskSampler instance; it needs pick(keys, round_index) -> task_id and record(task_id, score)"
            + (f"; pass {sampler.__name__}()" if isinstance(sampler, type) else "")
        )
    return _BatchedAdapter(sampler, queue_length)
