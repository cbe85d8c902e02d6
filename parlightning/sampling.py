"""Task samplers: which task an actor starts next.

The public protocol is two methods on strings (`pick`, `record`). The data module uses the
batched, tensor-native path (`bind`, `pick_batch`, `record_batch`) that the built-ins
implement without a Python loop per actor; `as_batched` wraps a user's two-method class.

Built-ins: `RoundRobin` (default, reward-blind), `DifficultyWeighted` (UCB over learning
signal, sampled in proportion to its score) and `PosteriorSignal` (a posterior over
always-pass / always-fail / informative with an estimated flip rate, Thompson-sampled).
"""

from __future__ import annotations

import math
import threading
from typing import Any, Optional, Protocol, Sequence, runtime_checkable

import torch
from torch import Tensor


@runtime_checkable
class TaskSampler(Protocol):
    """Picks one task id from a shard (never mutating it) and learns from scored episodes."""

    def pick(self, keys: Sequence[str], round_index: int) -> str: ...

    def record(self, task_id: str, score: float) -> None: ...


@runtime_checkable
class BatchedTaskSampler(Protocol):
    """The tensor path. Task ids are bank indices (long tensors on the env's device).

    - `bind(task_ids, device)`: declare the task bank once, before the first pick.
    - `pick_batch(shard, round_index, reset_mask, generator)`: [N] bank indices, one per actor;
      only entries where `reset_mask` is True are used (those actors start a new episode).
    - `record_batch(task_index, score)`: E finished episodes, scores in 0..1.
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
        raise ValueError(f"{name}.pick_batch: `shard` must be a non-empty 1-D tensor of bank indices, got shape {tuple(shard.shape)}")


def _check_keys(name: str, keys: Sequence[str]) -> None:
    if len(keys) == 0:
        raise ValueError(f"{name}.pick: the shard is empty; give the sampler at least one task id")


class RoundRobin:
    """Cycles through the shard in order: deterministic, reward-blind, the default."""

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
        assert self._batch_cursor is not None and self.picks is not None, "call bind() first"
        _check_shard("RoundRobin", shard)
        order = torch.cumsum(reset_mask.long(), 0) - 1 + self._batch_cursor
        chosen = shard[order.remainder(shard.numel())]
        with self._lock:
            self._batch_cursor += reset_mask.sum()
            self.picks.index_add_(0, chosen, reset_mask.long())
        return chosen

    def record_batch(self, task_index: Tensor, score: Tensor) -> None:
        return None

    def signals(self) -> dict[str, Tensor]:
        """Run-level statistics for logging (0-dim tensors): a reward-blind sampler has picks only."""
        batch = self.picks.sum() if self.picks is not None else torch.zeros((), dtype=torch.long)
        return {"picks": (batch + self._cursor).float()}

    def state_dict(self) -> dict[str, Any]:
        return {
            "cursor": self._cursor,
            "batch_cursor": None if self._batch_cursor is None else self._batch_cursor.clone(),
            "picks": None if self.picks is None else self.picks.clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._cursor = int(state["cursor"])
        if state.get("batch_cursor") is None:
            return
        if self._batch_cursor is None:  # not bound yet: applied by bind()
            self._pending = dict(state)
            return
        self._batch_cursor.copy_(state["batch_cursor"])
        if state["picks"].shape != self.picks.shape:
            raise ValueError(
                f"RoundRobin.load_state_dict: the checkpoint has picks for {state['picks'].numel()} tasks but the "
                f"bound bank has {self.picks.numel()}; resume with the same task bank"
            )
        self.picks.copy_(state["picks"])


class _LearningSampler:
    """Shared machinery of the reward-aware built-ins: per-task statistics as tensors
    ([K] attempts, passes, picks) indexed by task id, one lock, both paths, checkpoints.

    Unbound (string path only), the statistics grow as new task ids appear; `bind` lays them
    out over the bank, on its device, keeping what was already learnt for ids in the bank.
    Subclasses supply `_weights(shard)` (per-key inputs) and `_sample(weights, n, generator)`
    (n positions into the shard), and may refresh derived state in `_refresh()`.
    """

    def __init__(self, pass_threshold: float, seed: Optional[int]) -> None:
        if not (isinstance(pass_threshold, (int, float)) and 0.0 < pass_threshold <= 1.0):
            raise ValueError(
                f"pass_threshold={pass_threshold!r} must be in (0, 1]; use the env's solved threshold "
                "(0.999 for binary outcomes, lower, e.g. 0.8, for a graded scorer)"
            )
        self.pass_threshold = float(pass_threshold)
        self.seed = seed
        self._lock = threading.Lock()
        self._rng = torch.Generator()
        if seed is None:
            self._rng.seed()
        else:
            self._rng.manual_seed(int(seed))
        self._ids: list[str] = []  # index -> task id
        self._index: dict[str, int] = {}
        self._bound = False
        self.device = torch.device("cpu")
        self.attempts = torch.zeros(0)  # [K] float: recorded episodes per task
        self.passes = torch.zeros(0)  # [K] float: of those, score >= pass_threshold
        self.picks = torch.zeros(0, dtype=torch.long)  # [K] picks handed out per task
        self._resize(0)

    # -- statistics layout -----------------------------------------------------------------
    def _resize(self, k: int) -> None:
        """Grow per-task tensors to k entries (new tasks start untried)."""
        extra = k - self.attempts.numel()
        if extra > 0:
            z = torch.zeros(extra, device=self.device)
            self.attempts = torch.cat([self.attempts, z])
            self.passes = torch.cat([self.passes, z])
            self.picks = torch.cat([self.picks, torch.zeros(extra, dtype=torch.long, device=self.device)])
        self._grow_extra(k)

    def _grow_extra(self, k: int) -> None:
        """Hook: subclasses grow their own per-task tensors."""

    def _indices(self, keys: Sequence[str], who: str) -> list[int]:
        """Bank positions of `keys` (caller holds the lock); unbound, unknown ids are added."""
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
        if not self._bound and len(self._ids) > self.attempts.numel():
            self._resize(len(self._ids))
        return out

    def _adopt(self, ids: Sequence[str], tensors: dict[str, Tensor]) -> None:
        """Lay out statistics given for `ids` over the current index (ids outside it are dropped)."""
        keep_src, keep_dst = [], []
        for j, k in enumerate(ids):
            i = self._index.get(k)
            if i is not None:
                keep_src.append(j)
                keep_dst.append(i)
        if not keep_src:
            return
        src = torch.tensor(keep_src, dtype=torch.long)
        dst = torch.tensor(keep_dst, dtype=torch.long, device=self.device)
        for name, value in tensors.items():
            mine = getattr(self, name)
            mine[dst] = value.to(device=self.device, dtype=mine.dtype)[src.to(value.device)]

    def bind(self, task_ids: Sequence[str], device: torch.device) -> None:
        """Lay the statistics out over the bank (on `device`); what was learnt for ids in it is kept."""
        with self._lock:
            old_ids, old = list(self._ids), self._per_task()
            self.device = torch.device(device)
            self._ids = list(task_ids)
            self._index = {k: i for i, k in enumerate(self._ids)}
            if len(self._index) != len(self._ids):
                raise ValueError(f"{type(self).__name__}.bind: task_ids has duplicates; give each task one id")
            self._bound = True
            self.attempts = torch.zeros(0, device=self.device)
            self.passes = torch.zeros(0, device=self.device)
            self.picks = torch.zeros(0, dtype=torch.long, device=self.device)
            self._reset_extra()
            self._resize(len(self._ids))
            self._adopt(old_ids, old)
            self._derive()

    def _reset_extra(self) -> None:
        """Hook: subclasses drop their per-task tensors before a re-layout."""

    def _per_task(self) -> dict[str, Tensor]:
        return {"attempts": self.attempts, "passes": self.passes, "picks": self.picks}

    def _refresh(self) -> None:
        """Hook: learn from new results (caller holds the lock); by default just `_derive()`."""
        self._derive()

    def _derive(self) -> None:
        """Hook: recompute state derived from the statistics, learning nothing new (bind, load)."""

    # -- subclass hooks --------------------------------------------------------------------
    def _weights(self, shard: Tensor) -> Tensor:
        raise NotImplementedError

    def _sample(self, weights: Tensor, n: int, generator: Optional[torch.Generator]) -> Tensor:
        raise NotImplementedError

    def weights(self, keys: Sequence[str]) -> Tensor:
        """What `pick` draws from for these keys, on the CPU (for inspection and tests)."""
        with self._lock:
            idx = self._indices(keys, "weights")
            return self._weights(torch.tensor(idx, dtype=torch.long, device=self.device)).cpu()

    # -- string protocol -------------------------------------------------------------------
    def pick(self, keys: Sequence[str], round_index: int) -> str:
        """One task id from `keys` (never mutated); drawn with the sampler's own seeded generator."""
        _check_keys(type(self).__name__, keys)
        with self._lock:
            idx = self._indices(keys, "pick")
            shard = torch.tensor(idx, dtype=torch.long, device=self.device)
            weights = self._weights(shard).cpu()
            pos = int(self._sample(weights, 1, self._rng)[0])
            self.picks[idx[pos]] += 1
        return keys[pos]

    def record(self, task_id: str, score: float) -> None:
        """One scored episode; a score >= pass_threshold is a pass."""
        score = float(score)
        if not (0.0 <= score <= 1.0):  # also rejects NaN
            raise ValueError(f"{type(self).__name__}.record: score={score!r} for {task_id!r} must be in [0, 1]; normalise the reward")
        with self._lock:
            (i,) = self._indices((task_id,), "record")
            self.attempts[i] += 1.0
            if score >= self.pass_threshold:
                self.passes[i] += 1.0
            self._refresh()

    # -- tensor path -----------------------------------------------------------------------
    def pick_batch(
        self, shard: Tensor, round_index: int, reset_mask: Tensor, generator: Optional[torch.Generator] = None
    ) -> Tensor:
        """[N] bank indices drawn from `shard` only; one draw per actor, no host sync."""
        _check_shard(type(self).__name__, shard)
        if not self._bound:
            raise RuntimeError(f"{type(self).__name__}.pick_batch: call bind(task_ids, device) first")
        if generator is None and self.device.type == "cpu":
            generator = self._rng
        with self._lock:
            pos = self._sample(self._weights(shard), reset_mask.numel(), generator)
            chosen = shard[pos]
            self.picks.index_add_(0, chosen, reset_mask.to(torch.long))
        return chosen

    def record_batch(self, task_index: Tensor, score: Tensor) -> None:
        """E finished episodes at once (scores in 0..1; not range-checked here to avoid a host sync)."""
        if not self._bound:
            raise RuntimeError(f"{type(self).__name__}.record_batch: call bind(task_ids, device) first")
        with self._lock:
            self.attempts.index_add_(0, task_index, torch.ones_like(score, dtype=self.attempts.dtype))
            self.passes.index_add_(0, task_index, (score >= self.pass_threshold).to(self.passes.dtype))
            self._refresh()

    # -- observability -----------------------------------------------------------------------
    def signals(self) -> dict[str, Tensor]:
        """Run-level statistics for logging, as 0-dim tensors (read at rollout end, not per step):
        `informative_share` (picks so far on tasks whose observed pass rate is strictly between
        0 and 1), `pass_rate_spread` (std of the observed pass rates of tried tasks),
        `tried_fraction` and `picks`."""
        with self._lock:
            n, s, picks = self.attempts, self.passes, self.picks.to(self.attempts.dtype)
            tried = (n > 0).to(n.dtype)
            rate = s / n.clamp(min=1.0)
            informative = tried * ((rate > 0) & (rate < 1)).to(n.dtype)
            total_picks = picks.sum()
            n_tried = tried.sum()
            mean = (rate * tried).sum() / n_tried.clamp(min=1.0)
            spread = (((rate - mean) ** 2 * tried).sum() / n_tried.clamp(min=1.0)).sqrt()
            out = {
                "informative_share": (picks * informative).sum() / total_picks.clamp(min=1.0),
                "pass_rate_spread": spread,
                "tried_fraction": n_tried / max(n.numel(), 1),
                "picks": total_picks,
            }
            out.update(self._extra_signals())
        return out

    def _extra_signals(self) -> dict[str, Tensor]:
        return {}

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Tensors and plain containers only (loads with torch.load(weights_only=True))."""
        with self._lock:
            state: dict[str, Any] = {"task_ids": list(self._ids), "pass_threshold": self.pass_threshold, "rng": self._rng.get_state()}
            state.update({k: v.detach().clone() for k, v in self._per_task().items()})
            state.update(self._extra_state())
        return state

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _load_extra(self, state: dict[str, Any]) -> None:
        """Hook: restore non per-task state (caller holds the lock)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore statistics; bound, they are laid out over the current bank by task id (a
        checkpoint from a different bank keeps what overlaps). Works before or after bind()."""
        missing = [k for k in ("task_ids", "attempts", "passes", "picks") if k not in state]
        if missing:
            raise ValueError(f"{type(self).__name__}.load_state_dict: state lacks {missing}; pass a dict from state_dict()")
        with self._lock:
            if float(state.get("pass_threshold", self.pass_threshold)) != self.pass_threshold:
                raise ValueError(
                    f"{type(self).__name__}.load_state_dict: the checkpoint counted a pass at "
                    f"{state['pass_threshold']} but this sampler at pass_threshold={self.pass_threshold}; "
                    "construct it with the checkpoint's pass_threshold"
                )
            if "rng" in state:
                self._rng.set_state(state["rng"])
            if not self._bound:
                self._ids = list(state["task_ids"])
                self._index = {k: i for i, k in enumerate(self._ids)}
                self.attempts = torch.zeros(0, device=self.device)
                self.passes = torch.zeros(0, device=self.device)
                self.picks = torch.zeros(0, dtype=torch.long, device=self.device)
                self._reset_extra()
                self._resize(len(self._ids))
            else:
                for t in self._per_task().values():
                    t.zero_()
            per_task = {k: state[k] for k in self._per_task()}
            self._adopt(state["task_ids"], per_task)
            self._load_extra(state)
            self._derive()


class DifficultyWeighted(_LearningSampler):
    """UCB over learning signal: score = min(4p(1-p), 1) + c*sqrt(ln(total)/n), p the observed
    pass rate (untried tasks at the optimistic prior p = 0.5), sampled in proportion to score.

    Why proportional rather than argmax: the data module picks for many actors at once, before
    their results return; argmax sends every one of them to the same task (and collapses onto
    one task even sequentially), while proportional draws spread in-flight picks over the
    shard's informative tasks. It is also what reproduces the published targeting table.
    `total` is every episode recorded so far; n is clamped to 1 for untried tasks.
    """

    def __init__(self, c: float = 0.2, pass_threshold: float = 0.999, seed: Optional[int] = None) -> None:
        if not (isinstance(c, (int, float)) and c >= 0 and math.isfinite(c)):
            raise ValueError(f"c={c!r} must be a finite number >= 0 (0.2 is the measured default; larger explores more)")
        self.c = float(c)
        super().__init__(pass_threshold, seed)

    def _weights(self, shard: Tensor) -> Tensor:
        n, s = self.attempts[shard], self.passes[shard]
        p = torch.where(n > 0, s / n.clamp(min=1.0), torch.full_like(n, 0.5))
        signal = (4.0 * p * (1.0 - p)).clamp(max=1.0)
        total = self.attempts.sum().clamp(min=1.0)
        explore = self.c * torch.sqrt(torch.log(total) / n.clamp(min=1.0))
        return signal + explore + 1e-6  # floor: an all-zero shard is drawn uniformly

    def _sample(self, weights: Tensor, n: int, generator: Optional[torch.Generator]) -> Tensor:
        return torch.multinomial(weights, n, replacement=True, generator=generator)


class PosteriorSignal(_LearningSampler):
    """Thompson sampling over "is this task informative?". Each task is always-pass,
    always-fail or informative (true pass rate ~ Beta(2, 2), the shape of the 4p(1-p) signal);
    every outcome flips with a rate that is estimated. One EM step per update refits the class
    priors and the flip rate; `p_informative` [K] is each task's posterior probability of
    being informative. Each pick draws, for every shard task, an indicator with probability
    `p_informative ** sharpness` and takes one of the hits at random (any task if none hit).

    Why it beats `DifficultyWeighted` on share of rollouts landing on informative tasks: a
    flipped outcome makes a solved task look half-solved to a pass-rate weight (p = 0.85 gives
    4p(1-p) = 0.51), while the posterior knows flips happen at the estimated rate and asks
    whether the task's outcomes are more mixed than that. Draws are independent per actor, so
    picks made before earlier results return spread instead of piling onto one task.
    `sharpness=1` is plain probability matching; 2 (the measured default) exploits harder.
    `flip_rate=None` estimates the flip rate; a float fixes it.
    """

    GRID = 32  # quadrature points over the informative class's true pass rate
    FLIP_PRIOR = (0.05, 20.0)  # flip-rate prior: mean, weight in pseudo-episodes

    def __init__(
        self,
        pass_threshold: float = 0.999,
        flip_rate: Optional[float] = None,
        sharpness: float = 2.0,
        informative_prior: tuple[float, float] = (2.0, 2.0),
        seed: Optional[int] = None,
    ) -> None:
        if flip_rate is not None and not (isinstance(flip_rate, (int, float)) and 0.0 <= flip_rate < 0.5):
            raise ValueError(f"flip_rate={flip_rate!r} must be in [0, 0.5), or None to estimate it from the outcomes")
        if not (isinstance(sharpness, (int, float)) and sharpness > 0):
            raise ValueError(f"sharpness={sharpness!r} must be > 0 (1 = probability matching, 2 = default, higher exploits harder)")
        a, b = (float(v) for v in informative_prior)
        if not (a > 0 and b > 0):
            raise ValueError(f"informative_prior={informative_prior!r} must be two positive Beta parameters, e.g. (2.0, 2.0)")
        self.flip_rate = flip_rate
        self.sharpness = float(sharpness)
        self.informative_prior = (a, b)
        grid = (torch.arange(self.GRID, dtype=torch.float32) + 0.5) / self.GRID
        logw = (a - 1.0) * torch.log(grid) + (b - 1.0) * torch.log1p(-grid)
        self._grid, self._grid_logw = grid, logw - torch.logsumexp(logw, 0)
        self._flip = torch.tensor(self.FLIP_PRIOR[0] if flip_rate is None else float(flip_rate))
        self._class_prior = torch.full((3,), 1.0 / 3.0)  # always-pass, always-fail, informative
        self.p_informative = torch.zeros(0)
        super().__init__(pass_threshold, seed)

    def _posterior(self) -> Tensor:
        """E-step: [K, 3] posterior over (always-pass, always-fail, informative) per task."""
        n, s = self.attempts, self.passes
        eps = self._flip.clamp(1e-4, 0.45)
        log_pass = s * torch.log1p(-eps) + (n - s) * torch.log(eps)
        log_fail = s * torch.log(eps) + (n - s) * torch.log1p(-eps)
        q = eps + (1.0 - 2.0 * eps) * self._grid  # observed pass rate of an informative task
        log_inf = torch.logsumexp(self._grid_logw + s[:, None] * torch.log(q) + (n - s)[:, None] * torch.log1p(-q), dim=1)
        logits = torch.stack([log_pass, log_fail, log_inf], -1) + torch.log(self._class_prior)
        return torch.softmax(logits, -1)

    def _refresh(self) -> None:
        """One warm-started EM step: posterior, then class priors and flip rate from tried tasks."""
        n, s = self.attempts, self.passes
        r = self._posterior()
        tried = (n > 0).to(n.dtype)
        self._class_prior = ((r * tried[:, None]).sum(0) + 1.0) / (tried.sum() + 3.0)
        if self.flip_rate is None:
            mean, weight = self.FLIP_PRIOR
            flips = (r[:, 0] * (n - s) + r[:, 1] * s).sum()
            exposure = ((r[:, 0] + r[:, 1]) * n).sum()
            self._flip = (flips + mean * weight) / (exposure + weight)
        self.p_informative = r[:, 2]

    def _derive(self) -> None:
        self.p_informative = self._posterior()[:, 2]

    def _grow_extra(self, k: int) -> None:
        self._derive()  # new tasks sit at the class prior

    def _reset_extra(self) -> None:
        self._flip = self._flip.to(self.device)
        self._class_prior = self._class_prior.to(self.device)
        self._grid, self._grid_logw = self._grid.to(self.device), self._grid_logw.to(self.device)

    def _weights(self, shard: Tensor) -> Tensor:
        return self.p_informative[shard] ** self.sharpness

    def _sample(self, weights: Tensor, n: int, generator: Optional[torch.Generator]) -> Tensor:
        shape = (n, weights.numel())
        hit = torch.rand(shape, generator=generator, device=weights.device) < weights
        tie = torch.rand(shape, generator=generator, device=weights.device)
        return (hit.to(weights.dtype) + tie).argmax(1)  # uniform among hits; uniform if none

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
        if "flip" in state:
            self._flip = state["flip"].to(self.device, torch.float32).clone()
            self._class_prior = state["class_prior"].to(self.device, torch.float32).clone()


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

    def bind(self, task_ids: Sequence[str], device: torch.device) -> None:
        self._task_ids = list(task_ids)
        self._index = {k: i for i, k in enumerate(self._task_ids)}
        self._cursor = torch.zeros((), dtype=torch.long, device=device)
        self._device = device

    def _refill(self, shard: Tensor, round_index: int) -> None:
        keys = tuple(self._task_ids[i] for i in shard.tolist())
        picks = []
        for _ in range(self.queue_length):
            task_id = self.sampler.pick(keys, round_index)
            if task_id not in self._index:
                raise ValueError(
                    f"{type(self.sampler).__name__}.pick returned {task_id!r}, which is not in the shard "
                    f"it was given; pick must return one of `keys`"
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

    def record_batch(self, task_index: Tensor, score: Tensor) -> None:
        for i, s in zip(task_index.tolist(), score.tolist()):
            self.sampler.record(self._task_ids[i], float(s))

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


def as_batched(sampler: Any, queue_length: int) -> BatchedTaskSampler:
    """The sampler itself when it has the tensor path, else a queue-based adapter."""
    if all(callable(getattr(sampler, m, None)) for m in ("bind", "pick_batch", "record_batch")):
        return sampler
    if not isinstance(sampler, TaskSampler):
        raise TypeError(
            f"sampler: {type(sampler).__name__} is not a TaskSampler; it needs "
            "pick(keys, round_index) -> task_id and record(task_id, score)"
        )
    return _BatchedAdapter(sampler, queue_length)
