"""`RoundPlanner`: plans each round across the ranks with a `ParallelStrategy` and keeps the
statistics that feed the plans. A component, not a callback: the data module owns one (built
from the `StrategyPlanner` callback's strategy) and the collector calls it when a round is
issued (`plan_round`) and when it is finished (`record`, `finish`), with the round's context,
so a round is always finished with the shard, plan and unit it ran under, however many rounds
are in flight. The `StrategyPlanner` callback calls it for what Lightning drives (TP's per-batch
counters, the final sync, checkpoints, the gradient mask).

Every rank computes the same plan: strategies plan from state that is all-reduced (SUM) once per
round, at rollout end, on every rank, so the epoch-end checkpoint holds agreed statistics; a user
strategy's `observe` is fed the union of all ranks' episodes, in rank order, each with the unit
of the rank that ran it in that round; and each round a digest of the plan is compared across
ranks (a mismatch is one error).
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Optional, Sequence

import torch
from torch import Tensor

from parlightning.method_args import vouch_values
from parlightning.runtime.ranks import gather_ranks
from parlightning.errors import ConfigError, ReportedError, check_call_shape
from parlightning.runtime.torch_state import global_state, state_change
from parlightning.distribution.strategies import DataParallel, ParallelStrategy, TensorParallel, WorkUnit, checked_plan

FIELD = "trainer.callbacks.StrategyPlanner.strategy"


def checked_strategy(strategy: Optional[ParallelStrategy]) -> ParallelStrategy:
    """`strategy` (default `DataParallel()`), refused with one error unless it is a ParallelStrategy."""
    strategy = strategy if strategy is not None else DataParallel()
    if not isinstance(strategy, ParallelStrategy):
        raise ConfigError(
            f"{FIELD}: {type(strategy).__name__} is not a ParallelStrategy; it needs a `name` and "
            "plan(n_workers, round_index, keys) -> list[WorkUnit]"
        )
    name = getattr(strategy, "name", None)
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(
            f"{FIELD}: {type(strategy).__name__}.name is {name!r} ({type(name).__name__}); a ParallelStrategy's name "
            "is a non-empty string (it labels the plan in logs and checkpoints): set name = \"my-strategy\""
        )
    for method, args in (("plan", ("n_workers", "round_index", "keys")), ("observe", ("unit", "task_id", "score"))):
        fn = getattr(strategy, method, None)
        if callable(fn):
            check_call_shape(FIELD, type(strategy).__name__, method, fn, args, caller="the planner (every round)")
    return strategy


class RoundPlanner:
    """Plans every round for `world_size` ranks; see the module docstring.

    `ClusterParallel` statistics and `TensorParallel` counters are all-reduced every round (and
    once more at the end of training); TP also masks the policy's key-table gradient to this
    rank's section (`mask_gradients`) and logs `parallel/updates_delivered` and
    `parallel/section_violations`. Episodes that end on a task outside their round's shard (started
    under the previous plan) are counted as `parallel/carried_episodes`. `summary()` gives the
    run's totals, the same on every rank.
    """

    def __init__(self, strategy: Optional[ParallelStrategy] = None) -> None:
        self.strategy = checked_strategy(strategy)
        self.world_size, self.rank = 1, 0
        self.rounds = 0
        self.carried_episodes = 0  # episodes that ended outside the plan they started under (all ranks)
        self._ready = False
        self._bank: Optional[tuple[str, ...]] = None  # task ids, bank order
        self._index: dict[str, int] = {}
        self._device = torch.device("cpu")
        self._episodes: Optional[Tensor] = None  # [K] finished episodes per task, all ranks, as of the last sync
        self._pending: Optional[Tensor] = None  # [K] this rank's since the last sync
        self._planned: dict[int, tuple[tuple[WorkUnit, ...], WorkUnit, Tensor]] = {}  # planned, not yet issued
        self._observed: dict[int, list[Tensor]] = {}  # per round: [E, 2] (bank index, score) for a user's observe
        self._restored: Optional[dict[str, Any]] = None
        self._mask_handle: Any = None

    # ------------------------------------------------------------------ set-up (every rank alike)
    def prepare(self, task_ids: Optional[Sequence[str]], device: torch.device, world_size: int, rank: int,
                bind_keys: Callable[[Sequence[str]], None], artifact_key: Callable[[str], str],
                env_name: str = "the env") -> None:
        """Bind the strategy to the task bank and check it against the world (once, before the first
        reset, so refusals come before anything is written). Errors name the fix."""
        if self._ready:
            return
        s = self.strategy
        self.world_size, self.rank, self._device = world_size, rank, device
        if task_ids is None:
            if not isinstance(s, DataParallel):
                raise ConfigError(
                    f"{FIELD}: {s!r} splits a task bank, but {env_name} has no task_ids; use DataParallel() (each "
                    "rank then rolls out its own seed + rank episodes)"
                )
            self._ready = True
            return
        try:
            bind = getattr(s, "bind", None)
            if callable(bind):
                bind(task_ids, device=device)
            if isinstance(s, TensorParallel):
                s.validate(world_size)
        except (ValueError, TypeError) as err:
            raise ConfigError(f"{FIELD}: {err}{self._key_hint(task_ids, artifact_key)}") from None
        if isinstance(s, TensorParallel):
            bind_keys(s.keys)
        self._bank = tuple(task_ids)
        self._index = {t: i for i, t in enumerate(self._bank)}
        self._episodes = torch.zeros(len(self._bank), dtype=torch.long, device=device)
        self._pending = torch.zeros_like(self._episodes)
        self._ready = True
        if self._restored is not None:
            self.load_state_dict(self._restored)

    def _key_hint(self, task_ids: Sequence[str], artifact_key: Callable[[str], str]) -> str:
        """For a TP without keys: the artifact keys this env's tasks map to, ready to paste."""
        if not isinstance(self.strategy, TensorParallel) or self.strategy.keys is not None:
            return ""
        try:
            keys = list(dict.fromkeys(artifact_key(t) for t in task_ids))
        except (ValueError, TypeError, AttributeError):
            return ""
        return f" (this env's tasks map to the artifact keys {keys})"

    @property
    def has_bank(self) -> bool:
        return self._bank is not None

    def n_keys(self, trainer: Any = None) -> int:
        """Rows the policy's key table needs: the declared keys under TensorParallel, else 0."""
        return len(self.strategy.keys) if isinstance(self.strategy, TensorParallel) else 0

    def mask_gradients(self, trainer: Any, policy: torch.nn.Module) -> None:
        """TensorParallel: hook the key table so this rank's gradient reaches only its own section
        (a tensor hook, so it runs before DDP's all-reduce; every rank then applies the same union)."""
        self.remove_mask()
        if not isinstance(self.strategy, TensorParallel):
            return
        table = getattr(policy, "key_table", None)
        if table is None:
            raise ConfigError(
                f"{FIELD}: TensorParallel needs a policy with a per-key table (`key_table`, one row per declared "
                "key); PPOModule's ActorCritic builds one when a TensorParallel planner is in trainer.callbacks"
            )
        self._mask_handle = self.strategy.register_gradient_mask(
            table.weight, section=trainer.global_rank, world_size=trainer.world_size
        )

    def remove_mask(self) -> None:
        if self._mask_handle is not None:
            self._mask_handle.remove()
            self._mask_handle = None

    # ------------------------------------------------------------------ per round
    def plan_round(self, round_index: int) -> tuple[tuple[WorkUnit, ...], Optional[WorkUnit], Optional[Tensor]]:
        """(every rank's unit, this rank's unit, this rank's shard as bank indices) for `round_index`;
        planned once per round (a round planned ahead, e.g. round 0 before the first reset, is handed
        out as planned). Without a bank: ((), None, None)."""
        if self._bank is None:
            return (), None, None
        if round_index not in self._planned:
            try:
                plan = tuple(checked_plan(self.strategy, self.world_size, round_index, self._bank))
            except (ValueError, TypeError) as err:
                raise ConfigError(f"{FIELD}: {err}") from None
            self._check_same_plan(plan, round_index)
            unit = plan[self.rank]
            shard = vouch_values(torch.tensor([self._index[k] for k in unit.keys], dtype=torch.long, device=self._device),
                                 0, len(self._index))  # bank indices of the checked plan's keys: in range by construction
            self._planned[round_index] = (plan, unit, shard)
        return self._planned[round_index]

    def issued(self, round_index: int) -> None:
        """Round `round_index` was issued: forget its plan (and any planned before it)."""
        for j in [j for j in self._planned if j <= round_index]:
            del self._planned[j]

    def _check_same_plan(self, plan: Sequence[WorkUnit], round_index: int) -> None:
        """Compare a digest of this round's plan across ranks (one small all-reduce, every rank,
        every round): ranks that planned differently would roll out overlapping or missing work."""
        if self.world_size <= 1 or not torch.distributed.is_available() or not torch.distributed.is_initialized():
            return
        text = repr([(u.worker, tuple(u.keys), u.stage, u.section) for u in plan]).encode()
        digest = int.from_bytes(hashlib.blake2b(text, digest_size=7).digest(), "little")  # < 2**56: exact in int64
        both = torch.tensor([digest, -digest], dtype=torch.long, device=self._device)
        torch.distributed.all_reduce(both, op=torch.distributed.ReduceOp.MAX)
        if int(both[0]) != -int(both[1]):
            raise ConfigError(
                f"{FIELD}: {self.strategy!r} computed different plans on different ranks in round {round_index}; "
                "plan() must depend only on (n_workers, round_index, keys) and on statistics every rank shares "
                "(observe() is fed the union of all ranks' episodes, in rank order), not on rank-local state"
            )

    def record(self, context: Any, task_ids: Tensor, outcome: Tensor) -> None:
        """The episodes that ended in round `context` on this rank (bank indices, scores)."""
        if self._bank is None:
            return
        self._pending.index_add_(0, task_ids, torch.ones_like(task_ids))
        s = self.strategy
        if callable(getattr(s, "observe_batch", None)):  # built-ins: local increments, all-reduced at rollout end
            s.observe_batch(task_ids, outcome)
        elif callable(getattr(s, "observe", None)):  # a user's strategy: the union of all ranks, at rollout end
            rows = torch.stack([task_ids.double(), outcome.double().clamp(0.0, 1.0)], 1)
            self._observed.setdefault(context.round_index, []).append(rows)

    def record_updates(self, keys: Tensor, rank: int) -> None:
        """TensorParallel: count a trained minibatch's key-table rows this rank's mask keeps and rejects."""
        if self._bank is not None and isinstance(self.strategy, TensorParallel):
            self.strategy.record_updates(keys, rank)

    def finish(self, context: Any, rollout: Any, reduce_sum: Callable[[Tensor], Tensor]) -> None:
        """One all-reduce (SUM) per round on every rank, same shape everywhere: per-task episode
        counts, the strategy's statistics and the round's carried episodes; then a user strategy's
        `observe` with the round's own plan; `parallel/*` stats into `rollout.stats`."""
        if self._bank is None:
            return
        s = self.strategy
        carried, episodes = self._sync(reduce_sum, self._carried(rollout, context.shard))
        self._observe_union(context)
        self.rounds += 1
        self.carried_episodes += int(carried)
        rollout.stats["parallel/carried_episodes"] = torch.tensor(float(carried))
        rollout.stats["parallel/carried_share"] = torch.tensor(float(carried) / max(float(episodes), 1.0))
        if isinstance(s, TensorParallel):
            rollout.stats["parallel/updates_delivered"] = torch.tensor(float(s.updates_delivered))
            rollout.stats["parallel/section_violations"] = torch.tensor(float(s.section_violations))

    def _observe_union(self, context: Any) -> None:
        """Feed a user strategy's `observe` every rank's episodes of round `context`, rank by rank,
        each with the unit that rank ran in that round (an all-gather: every rank, every round)."""
        s = self.strategy
        if callable(getattr(s, "observe_batch", None)) or not callable(getattr(s, "observe", None)):
            return
        rows = self._observed.pop(context.round_index, [])
        local = torch.cat(rows) if rows else torch.zeros(0, 2, dtype=torch.float64)
        plan = context.plan
        for rank, episodes in enumerate(gather_ranks(local, self.world_size)):
            unit = plan[rank] if rank < len(plan) else context.unit
            before = global_state()
            for i, score in episodes.tolist():
                s.observe(unit, self._bank[int(i)], float(score))
            changed = state_change(before)  # once per rank's episodes: host-side, ~1 us
            if changed is not None:
                raise ReportedError(f"{FIELD}: {type(s).__name__}.observe {changed}")

    def _carried(self, rollout: Any, shard: Optional[Tensor]) -> Tensor:
        """Episodes that ended in the round on a task outside the round's own shard: each actor's
        first episode to end was started under the previous round's plan (auto-reset picks from the
        shard in force), so DP's rotating shards finish some of last round's work each round."""
        buf = rollout.buffer
        done = buf.done
        if rollout.round_index == 0 or shard is None or not buf.has_parts:
            return torch.zeros((), dtype=torch.float64, device=self._pending.device)
        first = done.int().argmax(0)  # [N] first step each actor's episode ended (0 where none did)
        task = buf.parts[first, torch.arange(done.shape[1], device=done.device), 0].long()
        outside = done.any(0) & ~torch.isin(task, shard.to(task.device))
        return outside.sum().double().to(self._pending.device)

    def _sync(self, reduce_sum: Callable[[Tensor], Tensor], extra: Tensor) -> tuple[float, float]:
        """The one all-reduce (SUM): per-task episode counts, the strategy's statistics and `extra`
        (a scalar), packed in one float64 tensor (exact for counts). Returns (sum of extra, new
        episodes on all ranks)."""
        s = self.strategy
        synced = callable(getattr(s, "stats_tensor", None)) and callable(getattr(s, "merge_stats", None))
        stats = s.stats_tensor() if synced else None
        parts = [self._pending.double(), extra.reshape(1).double().to(self._pending.device)]
        if synced:
            parts.append(stats.double().reshape(-1).to(self._pending.device))
        total = reduce_sum(torch.cat(parts)).to(self._pending.device)
        k = self._pending.numel()
        new = total[:k].round().long()
        self._episodes += new
        self._pending.zero_()
        if synced:
            s.merge_stats(total[k + 1:].reshape(stats.shape).to(stats.dtype))
        return float(total[k]), float(new.sum())

    def final_sync(self, reduce_sum: Callable[[Tensor], Tensor]) -> None:
        """A last sync (every rank): TP's counters of the final update, so `summary()` agrees."""
        if self._bank is not None:
            self._sync(reduce_sum, torch.zeros((), dtype=torch.float64))

    # ------------------------------------------------------------------ results and checkpoints
    def summary(self) -> dict[str, Any]:
        """Run totals as of the last round, the same on every rank: strategy, rounds, episodes,
        updates delivered, out-of-section updates, keys (distinct tasks with a finished episode)."""
        counts = self._episodes if self._episodes is not None else torch.zeros(0, dtype=torch.long)
        episodes = int(counts.sum())
        out: dict[str, Any] = {
            "strategy": repr(self.strategy), "rounds": self.rounds, "episodes": episodes,
            "updates_delivered": episodes, "section_violations": 0,
            "keys": int((counts > 0).sum()), "tasks": counts.numel(), "carried_episodes": self.carried_episodes,
        }
        if isinstance(self.strategy, TensorParallel):
            out["updates_delivered"] = self.strategy.updates_delivered
            out["section_violations"] = self.strategy.section_violations
        return out

    def state_dict(self) -> dict[str, Any]:
        """Rounds, per-task episode counts and the strategy's own statistics (tensors and plain
        containers). `episodes` is the part every rank agreed at the last sync; what each rank
        counted since (TP's counters of the updates after the round's sync, say) is in `ranks`,
        one entry per rank, gathered here (a collective: every rank dumps the checkpoint), so no
        rank's increments are lost with the checkpoint that rank 0 writes."""
        state: dict[str, Any] = {"rounds": self.rounds, "carried_episodes": self.carried_episodes}
        mine: dict[str, Any] = {}
        if self._episodes is not None:
            state["episodes"] = self._episodes.cpu().clone()
            mine["episodes_pending"] = self._pending.cpu().clone()
        save = getattr(self.strategy, "state_dict", None)
        if callable(save):
            mine["strategy"] = save()
        state["ranks"] = gather_ranks(mine, self.world_size)
        if "strategy" in mine:
            state["strategy"] = state["ranks"][0]["strategy"]  # rank 0's, for readers of the file
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()` (held until the bank is bound when called before set-up): each
        rank its own saved part; on another number of ranks, every saved rank's increments folded
        into the agreed statistics (the strategy's `combine_states`, where it has one)."""
        if not self._ready:  # restored before set-up: applied once the bank is bound
            self._restored = state
            return
        self._restored = None
        self._check_state(state)
        self.rounds = int(state.get("rounds", 0))
        self.carried_episodes = int(state.get("carried_episodes", 0))
        ranks = state.get("ranks") or []
        exact = len(ranks) == self.world_size
        mine = ranks[self.rank] if exact else {}
        episodes = state.get("episodes")
        if episodes is not None and self._episodes is not None and episodes.numel() == self._episodes.numel():
            self._episodes = episodes.to(self._episodes.device, torch.long).clone()
            self._pending.zero_()
            if exact and mine.get("episodes_pending") is not None:
                self._pending += mine["episodes_pending"].to(self._pending.device, torch.long)
            elif not exact:
                for other in ranks:
                    if other.get("episodes_pending") is not None:
                        self._episodes += other["episodes_pending"].to(self._episodes.device, torch.long)
        load = getattr(self.strategy, "load_state_dict", None)
        saved = [r["strategy"] for r in ranks if r.get("strategy")]
        if exact and mine.get("strategy"):
            strategy_state = mine["strategy"]
        elif saved and len(saved) == len(ranks) and callable(getattr(self.strategy, "combine_states", None)):
            strategy_state = self.strategy.combine_states(saved)
        else:  # older checkpoints (rank 0's view only), or a user strategy without combine_states
            strategy_state = saved[0] if saved else state.get("strategy")
        if strategy_state and callable(load):
            load(strategy_state)

    def _check_state(self, state: Any) -> None:
        """Refuse a saved state `state_dict` never writes (edited or damaged), naming the entry: one
        ConfigError before any of it is applied."""
        fix = ("it was edited or damaged; resume from an unedited checkpoint, or start fresh without --ckpt_path")
        where = "--ckpt_path: the checkpoint's StrategyPlanner"
        if not isinstance(state, dict):
            raise ConfigError(f"{where} state is a {type(state).__name__}, not the dict it saves; {fix}")
        ranks = state.get("ranks")
        if not isinstance(ranks, list) or not ranks or not all(isinstance(r, dict) for r in ranks):
            raise ConfigError(f"{where} ranks is {str(ranks)[:40]!r}, not one entry per rank that saved it (each rank's "
                              f"counts since the last sync and its strategy's statistics); {fix}")
        for key in ("rounds", "carried_episodes"):
            value = state.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{where} {key} is {value!r}, not a count (an integer >= 0); {fix}")
        episodes = state.get("episodes")
        if episodes is not None and self._episodes is not None and (
                not isinstance(episodes, torch.Tensor) or episodes.shape != self._episodes.shape):
            got = list(episodes.shape) if isinstance(episodes, torch.Tensor) else type(episodes).__name__
            raise ConfigError(f"{where} episodes has shape {got}, but this run's task bank has "
                              f"{self._episodes.numel()} tasks (one count per task): the file was edited, or comes from "
                              "another task bank; resume from an unedited checkpoint of this config, or start fresh "
                              "without --ckpt_path")

    def __repr__(self) -> str:
        return f"RoundPlanner({self.strategy!r})"
