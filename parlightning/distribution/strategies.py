"""Parallelism strategies: how one round's work is split across workers (Lightning ranks).

A strategy answers one question: for round r with N workers, who works on what? `plan()` is
handed the round's TASK ids; TP sections are about ARTIFACT keys (rows of a per-key parameter
table). The two key spaces are never conflated: `route` is the only bridge between them.

| strategy | partition | enforced |
|---|---|---|
| `DataParallel()` | disjoint task shards, rotating each round | `keys` |
| `ClusterParallel(cluster_of)` | whole clusters leased by UCB with a difficulty filter | `keys` + `observe` |
| `TensorParallel(n_sections, keys=, route=)` | one section of the key table per worker | `section` |
| `PipelineParallel` | refused: one artifact, no stage chain to walk | - |

Plain Python and torch; nothing here imports Lightning.
"""

from __future__ import annotations

import math
import numbers
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Protocol, Sequence, Union, runtime_checkable

import torch
from torch import Tensor

from parlightning.config_types import NonNegativeFinite, PositiveInt, check_args, check_fields
from parlightning.distribution.counters import AgreedCounters
from parlightning.errors import ArgumentError, ConfigError, LifecycleValueError
from parlightning.method_args import IndexArg, Is, ItemsArg, Lifecycle, State, TensorArg, checked, checked_methods, require
from parlightning.runtime.torch_state import global_state, state_change

PLAN_SPECS = {"n_workers": IndexArg(lo=1, text="the number of workers"), "round_index": IndexArg(),
              "keys": ItemsArg(str, unique=True, min_len=1,
                                text="the round's task ids or artifact keys (distinct): a plan needs one to give out")}
SECTION = IndexArg("n_sections", text="a section of the key table")

__all__ = [
    "WorkUnit",
    "ParallelStrategy",
    "checked_plan",
    "unit_for",
    "family_of",
    "DataParallel",
    "ClusterParallel",
    "TensorParallel",
    "PipelineParallel",
    "assign_key_sections",
]


_normal_tensors = torch.inference_mode(False)
"""State tensors must stay normal tensors: hooks may run under the rollout's inference_mode,
and an inference tensor cannot be updated in place outside it (e.g. at the next sync)."""


# -- the interface ---------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkUnit:
    """What one worker owns for one round: task ids (`keys`), and for TP/PP a `section`/`stage`."""

    worker: int
    keys: tuple[str, ...]
    stage: Optional[int] = None
    section: Optional[int] = None

    def __post_init__(self) -> None:
        if isinstance(self.keys, str):
            raise ArgumentError(
                f"WorkUnit.keys: got the string {self.keys!r}; pass a sequence of task ids, e.g. ({self.keys!r},)"
            )
        worker = self.worker
        if isinstance(worker, bool) or not isinstance(worker, numbers.Integral) or not 0 <= worker < 2**63:
            raise ConfigError(f"WorkUnit.worker: got {worker!r:.40}; a worker is a rank index 0..n_workers-1 (an int)")
        for field, what in (("section", "a TensorParallel section, 0..n_sections-1"),
                            ("stage", "a pipeline stage index, 0 or more")):
            value = getattr(self, field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ConfigError(f"WorkUnit.{field}: got {value!r}; it is None or {what}")
        check_fields("WorkUnit", self)  # the annotations: keys a list of task ids (strings), ...
        object.__setattr__(self, "keys", tuple(self.keys))  # a user's plan may hand back a list


@runtime_checkable
class ParallelStrategy(Protocol):
    """`name` and `plan(n_workers, round_index, keys) -> list[WorkUnit]`; `keys` are task ids.

    Optional: `observe(unit, task_id, score)` after every finished episode (score in 0..1), and
    `validate(n_workers)` before the first rollout. Any class with `name` and `plan` qualifies.
    """

    name: str

    # Annotated `Any` on purpose: the config parser matches a class_path against the protocol's annotations
    # exactly, so a user's unannotated strategy would be refused. Meant: (int, int, Sequence[str]) -> list[WorkUnit].
    def plan(self, n_workers: Any, round_index: Any, keys: Any) -> Any: ...


def _label(strategy: Any) -> str:
    return f"{type(strategy).__name__}(name={getattr(strategy, 'name', '?')!r})"


def checked_plan(strategy: Any, n_workers: int, round_index: int, keys: Sequence[str]) -> list[WorkUnit]:
    """Validate the strategy, plan, and check the plan; returns units sorted by worker.

    A valid plan gives every worker exactly one unit whose keys are a non-empty subset of `keys`.
    Units may overlap only when there are fewer tasks than workers (every rank must roll out
    something, so spare ranks repeat a task); otherwise the built-ins are disjoint.
    """
    if isinstance(strategy, type) or not isinstance(strategy, ParallelStrategy):  # a class where an instance goes too
        raise ArgumentError(
            f"parallel (strategy): {'the class ' + strategy.__name__ if isinstance(strategy, type) else type(strategy).__name__} "
            f"is not a ParallelStrategy instance; it needs a `name` attribute and "
            "plan(n_workers, round_index, keys) -> list[WorkUnit]"
        )
    if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
        raise ArgumentError(f"n_workers: must be a positive int (the world size), got {n_workers!r}")
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
        raise ArgumentError(f"keys: must be a list of task ids (strings), got {keys!r:.60}")
    keys = tuple(keys)
    if not keys:
        raise ArgumentError("keys: the round has no task ids; give plan() the task bank's ids")
    if len(set(keys)) != len(keys):
        raise ArgumentError("keys: task ids must be unique; deduplicate the task bank")
    validate = getattr(strategy, "validate", None)
    who = _label(strategy)
    before = global_state()
    if callable(validate):
        validate(n_workers)
        _check_state(who, "validate", before)
    try:
        units = strategy.plan(n_workers, round_index, keys)
    except (ValueError, TypeError):  # a plan's own refusal: reported on the config field as it is
        raise
    except Exception as err:  # the user's plan failing otherwise: named (the caller reports it on its config field)
        raise ValueError(f"{who}.plan raised {type(err).__name__}: {' '.join(str(err).split())[:300]}") from err
    _check_state(who, "plan", before)
    if not isinstance(units, (list, tuple)) or not all(isinstance(u, WorkUnit) for u in units):
        raise TypeError(f"{who}.plan must return a list of WorkUnit, got {type(units).__name__}")
    workers = sorted(u.worker for u in units)
    if workers != list(range(n_workers)):
        raise ValueError(
            f"{who}.plan gave units for workers {workers}; it must give exactly one unit to each of "
            f"workers 0..{n_workers - 1}"
        )
    known = set(keys)
    for u in units:
        stray = [k for k in u.keys if k not in known]
        if stray:
            raise ValueError(f"{who}.plan gave worker {u.worker} task ids not in this round's keys: {stray[:3]}")
        if not u.keys:
            raise ValueError(
                f"{who}.plan gave worker {u.worker} no tasks; every rank must roll out something. With fewer "
                f"tasks ({len(keys)}) than workers ({n_workers}) give spare workers a repeated task"
            )
    return sorted(units, key=lambda u: u.worker)


def _check_state(who: str, method: str, before: tuple) -> None:
    """A strategy's call that changed torch's process-wide settings (`runtime.torch_state`): named, as
    a plan's own refusal is (the caller reports it on its config field)."""
    changed = state_change(before)
    if changed is not None:
        raise ValueError(f"{who}.{method} {changed}")


def unit_for(strategy: Any, n_workers: int, round_index: int, keys: Sequence[str], worker: int) -> WorkUnit:
    """This worker's (rank's) unit of a checked plan; every rank computes the same plan."""
    units = checked_plan(strategy, n_workers, round_index, keys)
    if isinstance(worker, bool) or not isinstance(worker, int) or not 0 <= worker < n_workers:
        raise ArgumentError(f"worker: {worker!r} is not a rank of a world of size {n_workers}")
    return units[worker]


@checked(task_id=str)
def family_of(task_id: str) -> str:
    """The `family` of a `family-index` task id; the default cluster (usable from YAML by import path)."""
    family, sep, index = task_id.rpartition("-")
    if not sep or not family or not index:
        raise ArgumentError(
            f"family_of(task_id): task id {task_id!r} is not of the form 'family-index'; pass cluster_of=/route= a function "
            "mapping your task ids to clusters/keys"
        )
    return family


def _check_plan_args(who: str, n_workers: Any, round_index: Any) -> None:
    """A built-in strategy's `plan` arguments: n_workers a positive int (the world size), round_index
    an int >= 0 (the round's number, counted from 0); a ConfigError naming the argument otherwise."""
    if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
        raise ConfigError(f"{who}.plan: n_workers must be a positive int (the world size), got {n_workers!r}")
    if isinstance(round_index, bool) or not isinstance(round_index, numbers.Integral) or round_index < 0:
        raise ConfigError(f"{who}.plan: round_index must be an int >= 0 (the round's number, counted from 0), got "
                         f"{round_index!r}")


def _wrap(keys: Sequence[str], n_workers: int, offset: int) -> list[tuple[str, ...]]:
    """Fewer tasks than workers: each worker gets one task, repeating (cannot be disjoint)."""
    return [(keys[(w + offset) % len(keys)],) for w in range(n_workers)]


# -- DP --------------------------------------------------------------------------------------


@checked_methods(plan=PLAN_SPECS)
class DataParallel:
    """Disjoint strided task shards covering every task; worker w gets shard (w + round) mod N."""

    name = "data"

    def plan(self, n_workers: int, round_index: int, keys: Sequence[str]) -> list[WorkUnit]:
        _check_plan_args("DataParallel", n_workers, round_index)
        keys = tuple(keys)
        if len(keys) < n_workers:
            return [WorkUnit(w, k) for w, k in enumerate(_wrap(keys, n_workers, round_index))]
        shards = [keys[s::n_workers] for s in range(n_workers)]
        return [WorkUnit(w, shards[(w + round_index) % n_workers]) for w in range(n_workers)]

    def __repr__(self) -> str:
        return "DataParallel()"


# -- CP --------------------------------------------------------------------------------------


@checked_methods(merge_stats={"global_increments": TensorArg("number")})
class _AgreedStatistics:
    """The distributed contract CP and TP share, over one `AgreedCounters` (`self._counts`, under
    `self._lock`): `stats_tensor` hands this rank's increments since the last sync out for an
    all-reduce (SUM), `merge_stats` adds the reduced union and retires what was handed out, and
    `sync` does both; `counters_state` / `load_counters_state` keep both parts in checkpoints."""

    _counts: AgreedCounters
    _lock: threading.Lock

    @_normal_tensors
    def stats_tensor(self) -> Tensor:
        """This rank's increments since the last sync; all-reduce SUM it and pass it to `merge_stats`."""
        with self._lock:
            return self._counts.handout()

    @_normal_tensors
    def merge_stats(self, global_increments: Tensor) -> None:
        """Add the all-reduced increments to the agreed statistics and retire what was handed out."""
        with self._lock:
            try:
                self._counts.merge(global_increments)
            except ValueError:
                raise ValueError(
                    f"merge_stats: got shape {tuple(global_increments.shape)}, expected "
                    f"{tuple(self._counts.agreed.shape)}; every rank must bind/plan the same task ids before syncing"
                ) from None

    def sync(self, all_reduce_sum: Optional[Callable[[Tensor], Tensor]] = None) -> None:
        """One round of agreement: `all_reduce_sum(stats_tensor())` (identity when None) -> `merge_stats`."""
        inc = self.stats_tensor()
        self.merge_stats(inc if all_reduce_sum is None else all_reduce_sum(inc))

    @staticmethod
    def combine_states(states: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """One state from every rank's `state_dict()` (resuming on another number of ranks): the
        agreed statistics plus every rank's increments since the last sync, all agreed."""
        out = dict(states[0])
        if all("counters" in s for s in states):  # (older checkpoints saved agreed totals only)
            out["counters"] = AgreedCounters.combine([s["counters"] for s in states])
        return out


@checked_methods(plan=PLAN_SPECS, observe={"unit": Is(WorkUnit, "a WorkUnit of this strategy's plan", optional=True)},
                 leased_clusters={"unit": Is(WorkUnit, "a WorkUnit of this strategy's plan")},
                 observe_batch={"task_index": Is((Tensor, list, tuple), "[E] bank indices (a long tensor) or task ids"),
                                "scores": TensorArg("number", ("E",))},
                 observe_tasks={"task_rows": TensorArg("int", ("E",)), "scores": TensorArg("number", ("E",))},
                 lifecycle=Lifecycle({
                     "registered": State("called before any task was registered: its tasks were never planned; call "
                                         "bind(task_ids) or plan() with the task bank first",
                                         holds=lambda s: bool(s.tasks), error=LifecycleValueError),
                     "bound": State("bank indices need the bank's order: call bind(task_ids) first (or pass task ids)",
                                    holds=lambda s: s._bank_rows is not None)},
                     requires=dict.fromkeys(("observe", "observe_batch", "observe_tasks"), "registered")))
class ClusterParallel(_AgreedStatistics):
    """Lease whole task clusters to workers, best UCB first, with a difficulty filter on outcome
    spread.

    Per task it tracks episodes n, summed room `1 - score` and summed squared room. A cluster's
    learning signal is 4 x its pooled within-task variance of outcomes (sum over its tasks of
    n_k var_k, over sum n_k): the source document's zero-advantage argument, since a task whose
    rollouts all score alike gives every rollout the same advantage, so no gradient. For pass/fail
    outcomes it is 4 p (1 - p) per task; a cluster whose episodes all score the same partial value,
    or one always-solved plus one never-solved task, scores 0 (a mean-score filter ranked both as
    informative). A task needs two episodes to show spread. Untried clusters use the optimistic
    signal 1. UCB = signal + c * sqrt(ln(1 + N) / (1 + n_cluster)). Each round the top clusters
    are dealt out, `clusters_per_worker` per worker, so every worker gets a cluster when there are
    at least as many clusters as workers.

    Distributed: `observe`/`observe_batch` add to local per-task increments [T, 3]; `stats_tensor()`
    returns them, the caller all-reduces (SUM) and hands the result to `merge_stats`. `plan` reads
    merged statistics only, so every rank computes the same plan. Tasks and clusters are
    registered by `bind` or `plan` (called identically on every rank), never by `observe`.
    """

    name = "cluster"

    @_normal_tensors
    def __init__(
        self,
        cluster_of: Optional[Callable[[str], str]] = None,
        c: NonNegativeFinite = 1.4,
        clusters_per_worker: PositiveInt = 1,
    ) -> None:
        typed = check_args("ClusterParallel", ClusterParallel.__init__, locals())  # c: the exploration constant
        c, clusters_per_worker = typed["c"], typed["clusters_per_worker"]
        self.cluster_of = cluster_of if cluster_of is not None else family_of
        self.c = float(c)
        self.clusters_per_worker = clusters_per_worker
        self._lock = threading.Lock()
        self.clusters: list[str] = []  # registry order = cluster row order
        self._cluster_index: dict[str, int] = {}
        self.tasks: list[str] = []  # registry order = stats row order
        self._task_index: dict[str, int] = {}
        self._task_cluster_list: list[int] = []  # task row -> cluster row
        self._bank_rows: Optional[Tensor] = None  # [K] bank index -> task row (after bind)
        self._device = torch.device("cpu")
        # [T, (episodes, room, room^2)]: agreed by all ranks + this rank's increments since the last sync
        self._counts = AgreedCounters.zeros(0, 3, dtype=torch.float64)

    # registry ---------------------------------------------------------------------------------
    @_normal_tensors
    def _register(self, task_ids: Sequence[str]) -> None:
        for cl in sorted({self.cluster_of(t) for t in task_ids} - self._cluster_index.keys()):
            self._cluster_index[cl] = len(self.clusters)
            self.clusters.append(cl)
        new = sorted(set(task_ids) - self._task_index.keys())
        if not new:
            return
        for t in new:
            self._task_index[t] = len(self.tasks)
            self.tasks.append(t)
            self._task_cluster_list.append(self._cluster_index[self.cluster_of(t)])
        self._counts.grow(len(new))

    @_normal_tensors
    def bind(self, task_ids: Sequence[str], device: Optional[torch.device] = None) -> None:
        """Declare the task bank (same order on every rank) so `observe_batch` takes bank indices."""
        with self._lock:
            if device is not None:
                self._device = torch.device(device)
                self._counts.to(self._device)
            self._register(task_ids)
            self._bank_rows = torch.tensor([self._task_index[t] for t in task_ids], dtype=torch.long,
                                           device=self._device)

    # observation ------------------------------------------------------------------------------
    @_normal_tensors
    def observe(self, unit: Optional[WorkUnit], task_id: str, score: float) -> None:
        """One finished episode of `task_id` scored in 0..1."""
        if not (isinstance(score, (int, float)) and 0.0 <= score <= 1.0):
            raise ValueError(f"score: must be a number in 0..1, got {score!r} for task {task_id!r}")
        with self._lock:
            row = self._task_index.get(task_id)
            if row is None:
                raise ValueError(
                    f"ClusterParallel.observe: task {task_id!r} (cluster {self.cluster_of(task_id)!r}) was never "
                    "planned; call bind(task_ids) or plan() with the task bank first"
                )
            room = 1.0 - float(score)
            self._counts.pending[row] += torch.tensor([1.0, room, room * room], dtype=torch.float64,
                                                      device=self._device)

    def observe_batch(self, task_index: Union[Tensor, Sequence[str]], scores: Tensor) -> None:
        """E finished episodes at once: task bank indices (long tensor, after `bind`) or task ids,
        and scores [E] in 0..1 (clamped; no host sync on the tensor path)."""
        if not isinstance(task_index, Tensor):
            rows_list = [self._task_index.get(t, -1) for t in task_index]
            if -1 in rows_list:
                bad = [t for t, r in zip(task_index, rows_list) if r < 0][:3]
                raise ValueError(f"ClusterParallel.observe_batch: tasks {bad} were never planned; bind(task_ids) first")
            self.observe_tasks(torch.tensor(rows_list, dtype=torch.long), scores)
            return
        require(self, "observe_batch", "bound")
        self.observe_tasks(self._bank_rows[task_index.to(self._device)], scores)

    @_normal_tensors
    def observe_tasks(self, task_rows: Tensor, scores: Tensor) -> None:
        """E finished episodes by task row (index into `tasks`) with scores [E] in 0..1."""
        task_rows = task_rows.to(self._device, torch.long).reshape(-1)
        room = 1.0 - scores.to(self._device, torch.float64).reshape(-1).clamp(0.0, 1.0)
        inc = torch.stack([torch.ones_like(room), room, room * room], dim=1)
        with self._lock:
            self._counts.pending.index_add_(0, task_rows, inc)

    # distributed agreement: stats_tensor / merge_stats / sync (_AgreedStatistics) ---------------

    # planning -----------------------------------------------------------------------------------
    def _by_cluster(self, per_task: Tensor) -> Tensor:
        """[C, 3]: per cluster (episodes, room, within-task sum of squared deviations), on the CPU."""
        per_task = per_task.cpu()
        n, room, sq = per_task.unbind(1)
        ss = (sq - room * room / n.clamp_min(1.0)).clamp_min(0.0)  # per task: n_k var_k
        out = torch.zeros(len(self.clusters), 3, dtype=torch.float64)
        out.index_add_(0, torch.tensor(self._task_cluster_list, dtype=torch.long), torch.stack([n, room, ss], 1))
        return out

    def scores(self) -> Tensor:
        """UCB score per registered cluster from the merged statistics, [C] float64 on the CPU."""
        with self._lock:
            cl = self._by_cluster(self._counts.agreed)
        n, ss = cl[:, 0], cl[:, 2]
        spread = torch.where(n > 0, ss / n.clamp_min(1.0), torch.full_like(n, 0.25))  # untried: optimistic
        signal = (4.0 * spread).clamp(0.0, 1.0)
        bonus = self.c * torch.sqrt(math.log1p(float(n.sum())) / (1.0 + n))
        return signal + bonus

    def plan(self, n_workers: int, round_index: int, keys: Sequence[str]) -> list[WorkUnit]:
        _check_plan_args("ClusterParallel", n_workers, round_index)
        keys = tuple(keys)
        with self._lock:
            self._register(keys)
        groups: dict[int, list[str]] = {}
        for t in keys:
            groups.setdefault(self._cluster_index[self.cluster_of(t)], []).append(t)
        score = self.scores().tolist()  # once per round, off the step loop
        order = sorted(groups, key=lambda r: (-score[r], r))  # ties: registry order, same on every rank
        if len(order) < n_workers:
            leased = [[order[w % len(order)]] for w in range(n_workers)]
        else:
            take = min(len(order), n_workers * self.clusters_per_worker)
            leased = [order[w:take:n_workers] for w in range(n_workers)]
        return [WorkUnit(w, tuple(t for r in rows for t in groups[r])) for w, rows in enumerate(leased)]

    def leased_clusters(self, unit: WorkUnit) -> list[str]:
        """The cluster ids a unit covers (for logging)."""
        return sorted({self.cluster_of(t) for t in unit.keys})

    # checkpoints --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """This rank's view, exact: `counters` holds the agreed per-task statistics [T, 3] and this
        rank's increments since the last sync (each rank saves its own; `combine_states` folds them
        together for another number of ranks). `task_stats` [T, 3] is everything seen (agreed +
        pending) and `stats` [C, 2] its per-cluster (episodes, room) summary, for reading."""
        with self._lock:
            per_task = self._counts.total().cpu().clone()
            return {"clusters": list(self.clusters), "tasks": list(self.tasks), "task_stats": per_task,
                    "stats": self._by_cluster(per_task)[:, :2].clone(), "counters": self._counts.state_dict()}

    @_normal_tensors
    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._lock:
            for cl in state["clusters"]:  # saved registry order (tie-breaks) unless already bound
                if cl not in self._cluster_index:
                    self._cluster_index[cl] = len(self.clusters)
                    self.clusters.append(cl)
            tasks = list(state.get("tasks", []))
            saved = state.get("task_stats")
            for t in tasks:
                if t not in self._task_index:
                    self._task_index[t] = len(self.tasks)
                    self.tasks.append(t)
                    self._task_cluster_list.append(self._cluster_index[self.cluster_of(t)])
            counters = state.get("counters")  # older checkpoints: `task_stats` as agreed totals
            parts = counters if counters is not None else {"agreed": saved, "pending": None}
            laid_out = {}
            for name in ("agreed", "pending"):
                value = torch.zeros(len(self.tasks), 3, dtype=torch.float64, device=self._device)
                if parts.get(name) is not None:
                    for i, t in enumerate(tasks):
                        value[self._task_index[t]] = parts[name][i].to(self._device, torch.float64)
                laid_out[name] = value
            self._counts = AgreedCounters(laid_out["agreed"], laid_out["pending"])

    def __repr__(self) -> str:
        return f"ClusterParallel(c={self.c})"


# -- TP --------------------------------------------------------------------------------------


@checked(keys=ItemsArg(str, unique=True, min_len=1, text="the declared artifact keys"), n_sections=IndexArg(lo=1))
def assign_key_sections(keys: Sequence[str], n_sections: int) -> list[tuple[str, ...]]:
    """Balanced contiguous partition of a declared key space: sizes differ by at most 1, every
    section owns at least one key, deterministic (declared order). Unlike a hash bucket."""
    keys = tuple(keys)
    if isinstance(n_sections, bool) or not isinstance(n_sections, int) or n_sections < 1:
        raise ValueError(f"n_sections: must be a positive int, got {n_sections!r}")
    if n_sections > len(keys):
        raise ArgumentError(
            f"assign_key_sections(n_sections): {n_sections} sections over {len(keys)} keys would leave a section owning nothing "
            f"(a worker that can never commit); use n_sections <= {len(keys)} or declare more keys"
        )
    base, extra = divmod(len(keys), n_sections)
    out, start = [], 0
    for s in range(n_sections):
        size = base + (1 if s < extra else 0)
        out.append(keys[start : start + size])
        start += size
    return out


@checked_methods(plan=PLAN_SPECS, validate={"n_workers": PLAN_SPECS["n_workers"]},
                 section_rows={"section": SECTION}, violation_mask={"row_index": TensorArg("int"), "section": SECTION},
                 record_updates={"rows": TensorArg("int"), "section": SECTION},
                 gradient_mask={"section": SECTION, "world_size": IndexArg(lo=1)},
                 register_gradient_mask={"table": TensorArg(), "section": SECTION, "world_size": IndexArg(lo=1)},
                 lifecycle=Lifecycle({"keys": State(
                     "no declared key space; pass keys= (the rows of the policy's per-key table, e.g. the task "
                     "families) to TensorParallel or call declare_keys(keys) first, before the first rollout",
                     holds=lambda s: s.keys is not None, error=LifecycleValueError)},
                     requires=dict.fromkeys(("validate", "plan", "key_index", "section_of_key", "section_rows",
                                             "violation_mask", "record_updates", "gradient_mask",
                                             "register_gradient_mask"), "keys")))
class TensorParallel(_AgreedStatistics):
    """Split a per-key parameter table (one row per declared artifact key) into `n_sections`
    disjoint sections, one per worker; a worker updates only its section's rows.

    `keys` is the ARTIFACT key space (table rows), not task ids. `route(task_id) -> key` sends
    each task to its section's owner (zero violations); without it tasks are sharded as in DP,
    and updates to rows outside the rank's section are rejected (`record_updates` counts them as
    `section_violations`; `gradient_mask` / `register_gradient_mask` zero them before DDP).
    """

    name = "tensor"

    @_normal_tensors
    def __init__(
        self,
        n_sections: PositiveInt,
        keys: Optional[Sequence[str]] = None,
        route: Optional[Callable[[str], str]] = None,
    ) -> None:
        self.n_sections = check_args("TensorParallel", TensorParallel.__init__, locals())["n_sections"]
        self.route = route
        self._lock = threading.Lock()
        self.keys: Optional[tuple[str, ...]] = None
        # (delivered, violations): agreed by all ranks + this rank's increments since the last sync
        self._counts = AgreedCounters.zeros(2, dtype=torch.long)
        self._owner_cache: dict[torch.device, Tensor] = {}
        if keys is not None:
            self.declare_keys(keys)

    # key space ------------------------------------------------------------------------------------
    @_normal_tensors
    def declare_keys(self, keys: Sequence[str]) -> None:
        """Declare the artifact key space (the table's rows, in row order); idempotent."""
        if isinstance(keys, str):
            raise ValueError(f"keys: got the string {keys!r}; pass a sequence of artifact keys")
        keys = tuple(keys)
        if not keys:
            raise ConfigError("TensorParallel: keys is empty; declare the artifact key space (at least n_sections "
                              "keys, e.g. keys: [k0, k1]) or leave keys out to declare it later with declare_keys")
        if len(set(keys)) != len(keys):
            raise ConfigError("keys: the artifact key space must be a sequence of unique keys")
        if self.keys is not None and self.keys != keys:  # twice with another key space: the table has its rows
            raise LifecycleValueError("TensorParallel.declare_keys: called twice with another key space (it already "
                                      "declares a different key space); build a new strategy")
        self.keys = keys
        try:
            self._check_keys()  # more sections than keys: a section would own nothing, whatever comes later
        except ConfigError:
            self.keys = None
            raise
        self._row = {k: i for i, k in enumerate(keys)}
        self._sections = assign_key_sections(keys, self.n_sections)
        if self._sections is not None:
            self._owner_list = [s for s, sec in enumerate(self._sections) for _ in sec]
            self._owner = torch.tensor(self._owner_list, dtype=torch.long)
            self._owner_cache = {self._owner.device: self._owner}

    def validate(self, n_workers: int) -> None:
        """Refuse, before the first rollout, a pairing that could never be conflict-free."""
        self._check_keys()
        if self.n_sections != n_workers:
            raise ValueError(
                f"TensorParallel: n_sections={self.n_sections} but there are {n_workers} workers; one section per "
                f"rank, so set n_sections={n_workers} (or run on {self.n_sections} devices)"
            )

    def _check_keys(self, method: str = "validate") -> None:
        require(self, method, "keys")  # (the public methods are refused at entry: the lifecycle)
        if self.n_sections > len(self.keys):
            raise ConfigError(
                f"TensorParallel: n_sections={self.n_sections} is greater than the {len(self.keys)} declared keys, "
                f"so a section would own nothing; use n_sections <= {len(self.keys)}"
            )

    @property
    def sections(self) -> list[tuple[str, ...]]:
        """The balanced partition of the declared keys, one tuple of keys per section."""
        self._check_keys("sections")
        return list(self._sections)

    def key_index(self, key: str) -> int:
        """Row of an artifact key in the table."""
        self._check_keys()
        if key not in self._row:
            raise ValueError(f"key {key!r} is not in the declared key space ({len(self._row)} keys)")
        return self._row[key]

    def section_of_key(self, key: str) -> int:
        """The section (rank) that owns an artifact key."""
        return self._owner_list[self.key_index(key)]

    def section_rows(self, section: int) -> list[int]:
        """Row indices into the key table owned by `section` (a contiguous range)."""
        self._check_section(section)
        return [self._row[k] for k in self._sections[section]]

    def _check_section(self, section: int) -> None:
        self._check_keys()
        if not 0 <= section < self.n_sections:
            raise ValueError(f"section: {section} is not in 0..{self.n_sections - 1}")

    def _owner_on(self, device: torch.device) -> Tensor:
        owner = self._owner_cache.get(device)
        if owner is None:
            owner = self._owner_cache[device] = self._owner.to(device)
        return owner

    # planning ---------------------------------------------------------------------------------------
    def plan(self, n_workers: int, round_index: int, keys: Sequence[str]) -> list[WorkUnit]:
        _check_plan_args("TensorParallel", n_workers, round_index)
        self.validate(n_workers)
        tasks = tuple(keys)
        if self.route is None:  # DP shards: some episodes will touch rows outside the rank's section
            dp = DataParallel().plan(n_workers, round_index, tasks)
            return [WorkUnit(u.worker, u.keys, section=u.worker) for u in dp]
        routed: list[list[str]] = [[] for _ in range(n_workers)]
        for t in tasks:
            key = self.route(t)
            if key not in self._row:
                raise ValueError(
                    f"route: task {t!r} routes to {key!r}, which is not a declared key; route must return one of keys="
                )
            routed[self._owner_list[self._row[key]]].append(t)
        for s, shard in enumerate(routed):
            if not shard:
                raise ValueError(
                    f"TensorParallel: no task routes to section {s} (keys {list(self._sections[s])[:4]}); that rank "
                    "would have nothing to roll out. Add tasks for those keys or use fewer sections"
                )
        return [WorkUnit(w, tuple(routed[w]), section=w) for w in range(n_workers)]

    # enforcement --------------------------------------------------------------------------------------
    def violation_mask(self, row_index: Tensor, section: int) -> Tensor:
        """Bool mask, same shape as `row_index`: True where the row is outside `section`."""
        self._check_section(section)
        return self._owner_on(row_index.device)[row_index] != section

    @_normal_tensors
    def record_updates(self, rows: Tensor, section: int) -> Tensor:
        """Count updates to table rows by a rank owning `section`; returns the in-section mask.
        In-section rows add to `updates_delivered`, others to `section_violations` (no host sync)."""
        inside = ~self.violation_mask(rows, section)
        n_in = inside.sum()
        inc = torch.stack([n_in, inside.numel() - n_in])
        with self._lock:
            if self._counts.device != inc.device:
                self._counts.to(inc.device)
            self._counts.pending += inc
        return inside

    def gradient_mask(self, section: int, world_size: int = 1, device: Optional[torch.device] = None) -> Tensor:
        """[K, 1] float: `world_size` on this section's rows, 0 elsewhere. Multiplying the table's
        gradient by it before DDP's mean all-reduce leaves each row exactly its owner's gradient."""
        self._check_section(section)
        owned = self._owner_on(torch.device(device) if device is not None else self._owner.device) == section
        return (owned.to(torch.float32) * float(world_size)).unsqueeze(1)

    def register_gradient_mask(self, table: Tensor, section: int, world_size: int = 1) -> Any:
        """Hook `table.grad` (a [K, ...] leaf) so only this section's rows get gradient; the tensor
        hook runs before DDP's reducer, so all ranks then hold the same union. Returns the handle."""
        self._check_section(section)
        if table.shape[0] != len(self.keys):
            raise ValueError(f"table: has {table.shape[0]} rows but {len(self.keys)} keys are declared; one row per key")
        mask = self.gradient_mask(section, world_size, table.device).to(table.dtype)
        mask = mask.reshape((-1,) + (1,) * (table.dim() - 1))
        return table.register_hook(lambda grad: grad * mask)

    # counters (same distributed contract as ClusterParallel) ------------------------------------
    @property
    def updates_delivered(self) -> int:
        """In-section updates: agreed total at the last sync plus this rank's since then."""
        with self._lock:
            return int(self._counts.total()[0])

    @property
    def section_violations(self) -> int:
        """Out-of-section updates rejected: agreed total at the last sync plus this rank's since then."""
        with self._lock:
            return int(self._counts.total()[1])

    def state_dict(self) -> dict[str, Any]:
        """This rank's counters, exact: agreed totals and this rank's increments since the last
        sync (`combine_states` folds every rank's together for another number of ranks)."""
        with self._lock:
            return {"counters": self._counts.state_dict()}

    @_normal_tensors
    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._lock:
            device = self._counts.device
            self._counts = AgreedCounters(torch.zeros(2, dtype=torch.long, device=device))
            self._counts.load_state_dict(state["counters"])  # older checkpoints: one agreed [2] tensor

    def __repr__(self) -> str:
        keys = ", keys=..." if self.keys is not None else ""
        route = ", route=..." if self.route is not None else ""
        return f"TensorParallel({self.n_sections}{keys}{route})"


# -- PP --------------------------------------------------------------------------------------

_PP_REFUSAL = (
    "PipelineParallel is refused: training evolves ONE artifact (the orchestrator policy), and pipeline "
    "parallelism needs one artifact per stage, so there is no stage chain for workers to walk. Accepting it "
    "would hand every worker the whole task list, strictly worse than DataParallel, with no signal. Use "
    "DataParallel() (the default), ClusterParallel() or TensorParallel(n_sections, keys=, route=) instead."
)


class PipelineParallel:
    """Refused with a clear error: one artifact, no stage chain to walk."""

    name = "pipeline"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise ValueError(_PP_REFUSAL)

    def plan(self, n_workers: int, round_index: int, keys: Sequence[str]) -> list[WorkUnit]:
        raise ValueError(_PP_REFUSAL)
