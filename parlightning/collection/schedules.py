"""Schedules: which rounds may be collected before the learner's next update, which policy
version acts in each step, and what a stale round needs before it is trained on. A schedule
knows nothing of where the step loop runs (that is the transport's choice).

`LockStep` (`data.max_policy_lag: 0`): round v is released when the learner has done v updates
and collected with exactly those weights (CleanRL's loop).

`LagBudget(k)` (`data.max_policy_lag: k >= 1`): at its v-th rollout the learner publishes its
weights as version v and releases every round j <= v + k (their `on_rollout_start` hooks run
then, in the learner's thread, so the planner's shard and λ are set k rounds ahead and frozen
into each round's context). The collector starts round j once it is released, loads the newest
published weights before every env step and stamps each step with the version it used. Round j
is trained after j updates, so every sample is at most k versions old (checked on every rollout).

Staleness correction: decoupled PPO (Hilton et al. 2021, "Batch size-invariance for policy
optimization") with truncated importance weights (IMPACT, V-trace's rho-bar). At the start of
the update the learner scores the rollout with its own current policy pi_prox; the clipped ratio
is pi_theta / pi_prox (`logprobs` in the batch), and each sample's surrogate is weighted by
w = min(pi_prox / mu, `weight_clip`) with mu the behaviour policy that acted. Clipping against mu
instead would put stale samples outside the trust region before the first gradient step (no
learning from them) or let the update run off; the weights correct the sampling distribution
and the truncation bounds their variance. Advantages use the behaviour-time values (GAE at most
k updates old): V-trace targets would also correct them, at the price of a value pass per
update; with k <= 2 the correction of the action distribution is the part that matters.
Recurrent policies are refused (their hidden state would have to be re-run under pi_prox).

`policy_version(result)`: a rollout's `Rollout.policy_version`, in PPO iterations for both: the
oldest weights that acted in it.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import Tensor

from parlightning.collection.context import RoundResult
from parlightning.config_types import PositiveFinite, check_value
from parlightning.errors import ConfigError


def score_proximal(buf: Any, policy: Any, weight_clip: float) -> None:
    """The decoupled objective's inputs: the learner's log-probs (pi_prox) of every sample and the
    truncated importance weights min(pi_prox / mu, weight_clip), into the buffer."""
    keyed = {"key": buf.keys.reshape(-1)} if buf.keys is not None else {}
    B = buf.num_steps * buf.num_envs
    if buf.masks is not None:  # the proximal log-prob under the same action masks as the behaviour's
        keyed["mask"] = buf.masks.reshape(B, -1)
    with torch.no_grad():
        prox, _, _ = policy.evaluate(buf.obs.reshape(B, *buf.obs.shape[2:]),
                                     buf.actions.reshape(B, *buf.actions.shape[2:]), **keyed)
    prox = prox.reshape(buf.num_steps, buf.num_envs)
    buf.prox_logprobs = prox
    buf.is_weights = (prox - buf.logprobs).exp().clamp(max=weight_clip)


class LockStep:
    """Collect round v with the weights of version v, after the learner's v-th update."""

    lag = 0
    stamps = False  # the version of every step is the round's own

    def horizon(self, version: int) -> int:
        """The last round that may be released once the learner has done `version` updates."""
        return version

    def policy_version(self, result: RoundResult) -> int:
        return result.context.release_version

    def finish(self, result: RoundResult, rollout: Any, policy: Any,
               reduce_sum: Optional[Callable[[Tensor], Tensor]] = None) -> None:
        """Nothing to correct: the round was collected by the learner's own weights."""

    def check_recurrent(self) -> None:
        pass


class LagBudget:
    """Collect ahead of the learner under a budget of `k` policy versions; see the module docstring.
    `weight_clip` truncates the importance weights pi_prox / mu."""

    stamps = True

    def __init__(self, k: int, weight_clip: float = 1.0) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"data.max_policy_lag: a lag budget needs an integer >= 1, got {k!r}")
        check_value(f"{type(self).__name__}(weight_clip)", PositiveFinite, weight_clip)
        self.lag, self.weight_clip = k, weight_clip

    def horizon(self, version: int) -> int:
        return version + self.lag

    def policy_version(self, result: RoundResult) -> int:
        return min(result.step_versions)

    def check_recurrent(self) -> None:
        raise ConfigError("data.max_policy_lag: asynchronous collection does not support recurrent policies; "
                          "use model.policy: mlp or data.max_policy_lag: 0")

    def check(self, result: RoundResult, version: int) -> list[int]:
        """Every step's lag behind the learner's `version`; a breach of the budget is an error."""
        lags = [version - b for b in result.step_versions]
        if max(lags) > self.lag or min(lags) < 0:
            raise RuntimeError(f"LagBudget: policy lag {max(lags)} exceeds data.max_policy_lag={self.lag}")
        return lags

    def finish(self, result: RoundResult, rollout: Any, policy: Any,
               reduce_sum: Optional[Callable[[Tensor], Tensor]] = None) -> None:
        """Check the budget, score the round with the learner's current policy (pi_prox) and log its lag."""
        score_proximal(rollout.buffer, policy, self.weight_clip)
        lags = self.check(result, rollout.round_index)  # the learner trains round v after v updates
        rollout.stats["perf/policy_lag"] = torch.tensor(sum(lags) / len(lags))
        rollout.stats["perf/policy_lag_max"] = torch.tensor(float(max(lags)))


class Trajectories:
    """Per-actor asynchronous collection (`data.collect: trajectories`): every actor acts as soon as
    its own world answers, with the newest published weights, each step stamped with their version;
    a round is a batch of B = data.num_envs trajectory segments of T = data.num_steps steps (complete,
    or cut where the next segment of the same actor begins: bootstrapped like a round's end), taken
    oldest first. Staleness is bounded per sample: round v is trained after v updates, and a sample
    whose acting version is more than `k` behind is dropped from the loss (its `sample_mask` is
    False; `collect/stale_dropped` counts them, `collect/stale_share` is their share). The rest is
    the lag budget's decoupled objective, unchanged (pi_prox, truncated importance weights)."""

    stamps = True

    def __init__(self, k: int, weight_clip: float = 1.0) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"data.max_policy_lag: per-actor collection (data.collect: trajectories) bounds "
                              f"staleness per sample and needs an integer >= 1 (e.g. 2), got {k!r}")
        check_value(f"{type(self).__name__}(weight_clip)", PositiveFinite, weight_clip)
        self.lag, self.weight_clip = k, weight_clip

    def horizon(self, version: int) -> int:
        return version  # contexts are issued one round at a time; the actors never wait for them

    def policy_version(self, result: RoundResult) -> int:
        return min(result.step_versions)

    def check_recurrent(self) -> None:
        raise ConfigError("data.collect: trajectories does not support recurrent policies; use model.policy: mlp "
                          "or data.collect: rounds")

    def finish(self, result: RoundResult, rollout: Any, policy: Any,
               reduce_sum: Optional[Callable[[Tensor], Tensor]] = None) -> None:
        """Mask the samples older than the budget, score the rest with pi_prox, log the lag and the drops.

        Under DDP (`reduce_sum`: the sum over ranks) what is logged is pooled over every rank's
        samples and segments in one collective: the counts (`collect/stale_dropped`,
        `collect/dropped_trajectories`, `collect/retries`, `collect/segments`,
        `collect/resumed_discarded_steps`) are totals over the
        ranks, `collect/stale_share`, `perf/policy_lag` and `collect/utilisation` the shares and
        means of the pooled samples and calls, `perf/policy_lag_max` the largest lag of any rank.
        Every rank then logs the same values, so Lightning's mean over ranks leaves them as they are."""
        buf = rollout.buffer
        lags = rollout.round_index - buf.versions
        keep = lags <= self.lag
        if bool((lags < 0).any()):
            raise RuntimeError("Trajectories: a sample was stamped with a version the learner has not published")
        buf.sample_mask = keep
        score_proximal(buf, policy, self.weight_clip)
        stats = rollout.stats
        counts = {k: v for k, v in result.stats.items() if k in POOLED}  # the transport's, per rank
        names = sorted(counts)  # the same order on every rank
        # kept samples per lag 0..k (their count, mean and max), stale samples, then the transport's sums
        hist = torch.bincount(lags[keep].reshape(-1).long(), minlength=self.lag + 1).float()
        local = torch.cat([hist, (~keep).sum().float().reshape(1),
                           torch.stack([counts[k].float().to(hist.device) for k in names]) if names
                           else hist.new_zeros(0)])
        pooled = reduce_sum(local) if reduce_sum is not None else local
        hist, stale, sums = pooled[:self.lag + 1], pooled[self.lag + 1], dict(zip(names, pooled[self.lag + 2:]))
        kept = hist.sum()
        lag_values = torch.arange(self.lag + 1, dtype=hist.dtype, device=hist.device)
        stats["collect/stale_dropped"] = stale
        stats["collect/stale_share"] = stale / (kept + stale).clamp(min=1)
        stats["perf/policy_lag"] = (hist * lag_values).sum() / kept.clamp(min=1)
        stats["perf/policy_lag_max"] = torch.where(hist > 0, lag_values, torch.zeros_like(lag_values)).max()
        for name in ("collect/dropped_trajectories", "collect/retries", "collect/segments",
                     "collect/resumed_discarded_steps"):
            if name in sums:
                stats[name] = sums[name]
        if "collect/busy_seconds" in sums:  # the share of the worlds' capacity that calls kept busy
            stats["collect/utilisation"] = sums["collect/busy_seconds"] / sums["collect/capacity_seconds"].clamp(
                min=1e-9)
        for name in ("collect/busy_seconds", "collect/capacity_seconds"):
            stats.pop(name, None)


POOLED = ("collect/dropped_trajectories", "collect/retries", "collect/segments", "collect/resumed_discarded_steps",
          "collect/busy_seconds", "collect/capacity_seconds")  # per-rank sums of the per-actor transport, pooled over ranks
