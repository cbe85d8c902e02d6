"""`StrategyPlanner`: plans each round (one rollout) across the Lightning ranks with a
`ParallelStrategy` and hands this rank its `WorkUnit`; the rank's task sampler then picks only
from the unit's tasks.

Every rank computes the same plan: strategies plan from state that is all-reduced (SUM) once per
round, at rollout end, on every rank (`trainer.strategy.reduce`), so the epoch-end checkpoint
holds agreed statistics; a user strategy's `observe` is fed the union of all ranks' episodes, in
rank order; and each round a digest of the plan is compared across ranks (a mismatch is one error). The last `StrategyPlanner` in `trainer.callbacks` is in force, so a later
config can swap the strategy with `callbacks+:`; earlier planners stand aside.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Optional

import lightning.pytorch as pl
import torch
from torch import Tensor

from parlightning.callbacks.base import RolloutCallback
from parlightning.checkpoint import gather_ranks
from parlightning.envs.base import EpisodeParts
from parlightning.errors import ConfigError
from parlightning.parallel import DataParallel, ParallelStrategy, TensorParallel, WorkUnit, checked_plan

if TYPE_CHECKING:
    from parlightning.rollout import Rollout

FIELD = "trainer.callbacks.StrategyPlanner.strategy"
CHECKPOINT_KEY = "StrategyPlanner"  # the checkpoint entry of the planner in force


def find_planner(trainer: Optional["pl.Trainer"]) -> Optional["StrategyPlanner"]:
    """The `StrategyPlanner` in force: the last one in `trainer.callbacks` (None without one)."""
    if trainer is None:
        return None
    planners = [cb for cb in trainer.callbacks if isinstance(cb, StrategyPlanner)]
    return planners[-1] if planners else None


class StrategyPlanner(RolloutCallback):
    """Plans every round for `trainer.world_size` ranks and sets this rank's shard.

    Args:
        strategy: a `ParallelStrategy` (any class with `name` and `plan`), by `class_path` in
            YAML; default `DataParallel()`.

    `ClusterParallel` statistics and `TensorParallel` counters are all-reduced every round (and
    once more at the end of training); TP also masks the policy's key-table gradient to this
    rank's section (`mask_gradients`, called by `PPOModule.on_fit_start`) and logs
    `parallel/updates_delivered` and `parallel/section_violations`: per trained minibatch row, the
    key-table rows the mask keeps and rejects (the shared trunk trains on every row). Episodes
    that end on a task outside their round's shard (started under the previous plan) are counted
    as `parallel/carried_episodes`. `summary()` gives the run's totals, the same on every rank.
    Checkpoints hold the planner's statistics under the `StrategyPlanner` key.
    """

    def __init__(self, strategy: Optional[ParallelStrategy] = None) -> None:
        strategy = strategy if strategy is not None else DataParallel()
        if not isinstance(strategy, ParallelStrategy):
            raise ConfigError(
                f"{FIELD}: {type(strategy).__name__} is not a ParallelStrategy; it needs a `name` and "
                "plan(n_workers, round_index, keys) -> list[WorkUnit]"
            )
        self.strategy = strategy
        self.plan: list[WorkUnit] = []  # this round's plan, one unit per rank (the same on every rank)
        self.unit: Optional[WorkUnit] = None  # this rank's unit
        self.rounds = 0
        self._ready = False
        self._bank: Optional[tuple[str, ...]] = None  # task ids, bank order
        self._index: dict[str, int] = {}
        self._round: Optional[int] = None  # the round `plan` is for
        self._shard: Optional[Tensor] = None
        self._episodes: Optional[Tensor] = None  # [K] finished episodes per task, all ranks, as of the last sync
        self._pending: Optional[Tensor] = None  # [K] this rank's since the last sync
        self._restored: Optional[dict[str, Any]] = None
        self._mask_handle: Any = None
        self._observed: list[Tensor] = []  # this round's [E, 2] (bank index, score) for a user's `observe`
        self.carried_episodes = 0  # episodes that ended outside the plan they started under (all ranks)

    # ------------------------------------------------------------------ set-up (every rank alike)
    def prepare(self, trainer: "pl.Trainer") -> None:
        """Bind the strategy to the task bank and check it against the world (once; called from the
        data module's build, so refusals come before the first reset). Errors name the fix."""
        if self._ready or find_planner(trainer) is not self:
            return
        dm, s = trainer.datamodule, self.strategy
        task_ids = getattr(dm, "task_ids", None)
        if task_ids is None:
            if not isinstance(s, DataParallel):
                raise ConfigError(
                    f"{FIELD}: {s!r} splits a task bank, but {type(getattr(dm, 'env', None)).__name__} has no "
                    "task_ids; use DataParallel() (each rank then rolls out its own seed + rank episodes)"
                )
            self._ready = True
            return
        device = dm.buffer.device
        try:
            bind = getattr(s, "bind", None)
            if callable(bind):
                bind(task_ids, device=device)
            if isinstance(s, TensorParallel):
                s.validate(trainer.world_size)
        except (ValueError, TypeError) as err:
            raise ConfigError(f"{FIELD}: {err}{self._key_hint(dm)}") from None
        if isinstance(s, TensorParallel):
            dm.bind_keys(s.keys)
        self._bank = tuple(task_ids)
        self._index = {t: i for i, t in enumerate(self._bank)}
        self._episodes = torch.zeros(len(self._bank), dtype=torch.long, device=device)
        self._pending = torch.zeros_like(self._episodes)
        self._ready = True
        if self._restored is not None:
            self.load_strategy_state(self._restored, trainer.global_rank, trainer.world_size)

    def _key_hint(self, dm: Any) -> str:
        """For a TP without keys: the artifact keys this env's tasks map to, ready to paste."""
        if not isinstance(self.strategy, TensorParallel) or self.strategy.keys is not None:
            return ""
        try:
            keys = list(dict.fromkeys(dm.artifact_key(t) for t in dm.task_ids))
        except (ValueError, TypeError, AttributeError):
            return ""
        return f" (this env's tasks map to the artifact keys {keys})"

    def n_keys(self, trainer: "pl.Trainer") -> int:
        """Rows the policy's key table needs: the declared keys under TensorParallel, else 0."""
        self.prepare(trainer)
        if find_planner(trainer) is not self or not isinstance(self.strategy, TensorParallel):
            return 0
        return len(self.strategy.keys)

    def mask_gradients(self, trainer: "pl.Trainer", policy: torch.nn.Module) -> None:
        """TensorParallel: hook the key table so this rank's gradient reaches only its own section
        (a tensor hook, so it runs before DDP's all-reduce; every rank then applies the same union)."""
        self._remove_mask()
        if find_planner(trainer) is not self or not isinstance(self.strategy, TensorParallel):
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

    def _remove_mask(self) -> None:
        if self._mask_handle is not None:
            self._mask_handle.remove()
            self._mask_handle = None

    def teardown(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        self._remove_mask()

    # ------------------------------------------------------------------ per round
    def shard_for(self, trainer: "pl.Trainer", round_index: int) -> Optional[Tensor]:
        """This rank's task bank indices for `round_index` (planned once per round; None without a bank)."""
        self.prepare(trainer)
        if self._bank is None or find_planner(trainer) is not self:
            return None
        if self._round != round_index:
            try:
                self.plan = checked_plan(self.strategy, trainer.world_size, round_index, self._bank)
            except (ValueError, TypeError) as err:
                raise ConfigError(f"{FIELD}: {err}") from None
            self._check_same_plan(trainer, round_index)
            self.unit = self.plan[trainer.global_rank]
            self._shard = torch.tensor([self._index[k] for k in self.unit.keys], dtype=torch.long,
                                       device=self._episodes.device)
            self._round = round_index
        return self._shard

    def _check_same_plan(self, trainer: "pl.Trainer", round_index: int) -> None:
        """Compare a digest of this round's plan across ranks (one small all-reduce, every rank,
        every round): ranks that planned differently would roll out overlapping or missing work."""
        if trainer.world_size <= 1 or not torch.distributed.is_available() or not torch.distributed.is_initialized():
            return
        text = repr([(u.worker, tuple(u.keys), u.stage, u.section) for u in self.plan]).encode()
        digest = int.from_bytes(hashlib.blake2b(text, digest_size=7).digest(), "little")  # < 2**56: exact in int64
        both = torch.tensor([digest, -digest], dtype=torch.long, device=self._episodes.device)
        torch.distributed.all_reduce(both, op=torch.distributed.ReduceOp.MAX)
        if int(both[0]) != -int(both[1]):
            raise ConfigError(
                f"{FIELD}: {self.strategy!r} computed different plans on different ranks in round {round_index}; "
                "plan() must depend only on (n_workers, round_index, keys) and on statistics every rank shares "
                "(observe() is fed the union of all ranks' episodes, in rank order), not on rank-local state"
            )

    def on_rollout_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", round_index: int) -> None:
        shard = self.shard_for(trainer, round_index)
        if shard is not None:
            trainer.datamodule.shard = shard

    def on_episodes_end(
        self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", task_ids: Tensor, parts: EpisodeParts
    ) -> None:
        if self._bank is None or find_planner(trainer) is not self:
            return
        self._pending.index_add_(0, task_ids, torch.ones_like(task_ids))
        s = self.strategy
        if callable(getattr(s, "observe_batch", None)):  # built-ins: local increments, all-reduced at rollout end
            s.observe_batch(task_ids, parts.outcome)
        elif callable(getattr(s, "observe", None)):  # a user's strategy: the union of all ranks, at rollout end
            self._observed.append(torch.stack([task_ids.double(), parts.outcome.double().clamp(0.0, 1.0)], 1))

    def on_train_batch_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", batch: Any,
                             batch_idx: int) -> None:
        """TensorParallel: count the minibatch's per-sample key-table rows that this rank's gradient
        mask keeps (`updates_delivered`) and rejects (`section_violations`); no host sync."""
        if self._bank is None or find_planner(trainer) is not self or not isinstance(self.strategy, TensorParallel):
            return
        if isinstance(batch, dict) and "keys" in batch:
            self.strategy.record_updates(batch["keys"], trainer.global_rank)

    def _observe_union(self, trainer: "pl.Trainer") -> None:
        """Feed a user strategy's `observe` every rank's episodes of this round, rank by rank, each
        with the unit of the rank that ran it (an all-gather: every rank, every round)."""
        s = self.strategy
        if callable(getattr(s, "observe_batch", None)) or not callable(getattr(s, "observe", None)):
            return
        local = torch.cat(self._observed) if self._observed else torch.zeros(0, 2, dtype=torch.float64)
        self._observed = []
        for rank, episodes in enumerate(gather_ranks(local, trainer.world_size)):
            unit = self.plan[rank] if rank < len(self.plan) else self.unit
            for i, score in episodes.tolist():
                s.observe(unit, self._bank[int(i)], float(score))

    def _carried(self, rollout: "Rollout") -> Tensor:
        """Episodes that ended this round on a task outside this round's shard: each actor's first
        episode to end was started under the previous round's plan (auto-reset picks from the
        shard in force), so DP's rotating shards finish some of last round's work each round."""
        buf = rollout.buffer
        done = buf.done
        if rollout.round_index == 0 or self._shard is None or not buf.has_parts:
            return torch.zeros((), dtype=torch.float64, device=self._pending.device)
        first = done.int().argmax(0)  # [N] first step each actor's episode ended (0 where none did)
        task = buf.parts[first, torch.arange(done.shape[1], device=done.device), 0].long()
        outside = done.any(0) & ~torch.isin(task, self._shard.to(task.device))
        return outside.sum().double().to(self._pending.device)

    def on_rollout_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", rollout: "Rollout") -> None:
        """One all-reduce (SUM) per round on every rank, same shape everywhere: per-task episode
        counts and the strategy's statistics, packed in one float64 tensor (exact for counts)."""
        if self._bank is None or find_planner(trainer) is not self:
            return
        s = self.strategy
        carried, episodes = self._sync(trainer, pl_module, self._carried(rollout))
        self._observe_union(trainer)
        self.rounds += 1
        self.carried_episodes += int(carried)
        rollout.stats["parallel/carried_episodes"] = torch.tensor(float(carried))
        rollout.stats["parallel/carried_share"] = torch.tensor(float(carried) / max(float(episodes), 1.0))
        if isinstance(s, TensorParallel):
            rollout.stats["parallel/updates_delivered"] = torch.tensor(float(s.updates_delivered))
            rollout.stats["parallel/section_violations"] = torch.tensor(float(s.section_violations))

    def _sync(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", extra: Tensor) -> tuple[float, float]:
        """The one all-reduce (SUM): per-task episode counts, the strategy's statistics and `extra`
        (a scalar), packed in one float64 tensor (exact for counts). Returns (sum of extra, new
        episodes on all ranks)."""
        s = self.strategy
        synced = callable(getattr(s, "stats_tensor", None)) and callable(getattr(s, "merge_stats", None))
        stats = s.stats_tensor() if synced else None
        parts = [self._pending.double(), extra.reshape(1).double().to(self._pending.device)]
        if synced:
            parts.append(stats.double().reshape(-1).to(self._pending.device))
        total = trainer.strategy.reduce(torch.cat(parts).to(pl_module.device), reduce_op="sum")
        total = total.to(self._pending.device)
        k = self._pending.numel()
        new = total[:k].round().long()
        self._episodes += new
        self._pending.zero_()
        if synced:
            s.merge_stats(total[k + 1:].reshape(stats.shape).to(stats.dtype))
        return float(total[k]), float(new.sum())

    def on_train_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        """A last sync (every rank): TP's counters of the final update, so `summary()` agrees."""
        if self._bank is not None and find_planner(trainer) is self:
            self._sync(trainer, pl_module, torch.zeros((), dtype=torch.float64))

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

    def on_save_checkpoint(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", checkpoint: dict) -> None:
        if find_planner(trainer) is self:  # under its own key: several planners may be listed, one is in force
            checkpoint[CHECKPOINT_KEY] = self.strategy_state(trainer.world_size)

    def on_load_checkpoint(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", checkpoint: dict) -> None:
        if find_planner(trainer) is self and CHECKPOINT_KEY in checkpoint:
            self.load_strategy_state(checkpoint[CHECKPOINT_KEY], trainer.global_rank, trainer.world_size)

    def strategy_state(self, world_size: int = 1) -> dict[str, Any]:
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
        state["ranks"] = gather_ranks(mine, world_size)
        if "strategy" in mine:
            state["strategy"] = state["ranks"][0]["strategy"]  # rank 0's, for readers of the file
        return state

    def load_strategy_state(self, state: dict[str, Any], rank: int = 0, world_size: int = 1) -> None:
        """Restore `strategy_state()` (held until the bank is bound when called before set-up): each
        rank its own saved part; on another number of ranks, every saved rank's increments folded
        into the agreed statistics (the strategy's `combine_states`, where it has one)."""
        if not self._ready:  # restored before set-up: applied once the bank is bound
            self._restored = state
            return
        self._restored = None
        self.rounds = int(state.get("rounds", 0))
        self.carried_episodes = int(state.get("carried_episodes", 0))
        ranks = state.get("ranks") or []
        exact = len(ranks) == world_size
        mine = ranks[rank] if exact else {}
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

    def __repr__(self) -> str:
        return f"StrategyPlanner({self.strategy!r})"
