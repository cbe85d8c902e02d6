"""`finish_round`: the one function that turns a collected round (`RoundResult`) into a `Rollout`,
whatever schedule and transport collected it. Always in the learner's thread, in this order:

1. the round's finished episodes: `on_episodes_end` hooks, the planner's per-round record, the
   sampler's records, and the PARL bonus added to each episode's last reward, at the λ position
   of the round's context (under a lag budget later rounds have moved λ on already);
2. the sampler's cross-rank sync (every rank, every round, under DDP);
3. GAE with the bootstrap values the step loop computed;
4. the `Rollout` and its stats: SPS, explained variance, episode means all-reduced over ranks
   (weighted by episodes), the sampler's signals (as the transport read them at the round's end,
   else now), the schedule's own (policy lag, importance weights; per-actor collection pools its
   counts over ranks), the planner's (carried
   episodes, TP counters) with the round's own shard, plan and unit;
5. `on_rollout_end` hooks.

Nothing here reads "the latest" of anything: the round's context says which shard, plan, unit
and λ position it ran under. Steps 1-2 hold the sampler's lock (a collector thread picks from
the same sampler).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

import torch
from torch import Tensor

from parlightning.collection.context import RoundHooks, RoundResult
from parlightning.collection.step_loop import Picks, SamplerLock
from parlightning.parl.reward import check_reward_output
from parlightning.rollout import Rollout


@contextlib.contextmanager
def at_position(reward: Any, position: Optional[int]) -> Iterator[None]:
    """`reward`'s λ schedules at `position` (the round's, from its context) for the duration."""
    current = getattr(reward, "position", None)
    if reward is None or position is None or position == current:
        yield
        return
    reward.advance_to(position)
    try:
        yield
    finally:
        reward.advance_to(current)


def _package_own(obj: Any) -> bool:
    return type(obj).__module__.split(".")[0] == "parlightning"


def finish_round(result: RoundResult, *, hooks: RoundHooks, sampler: Any, picks: Optional[Picks], lock: SamplerLock,
                 reward: Any, planner: Any, schedule: Any, policy: Any, gamma: float, gae_lambda: float,
                 env_steps: int, solved_threshold: float, iteration_time: Optional[float],
                 extra_stats: Optional[dict[str, Tensor]] = None) -> Rollout:
    """Finish `result` into its `Rollout` (see the module docstring). `env_steps`: global env steps
    after this round; `policy`: the learner's current policy (a lag schedule scores the round with
    it); `extra_stats`: the collector's own (e.g. its wait shares), logged with the round."""
    ctx, buf = result.context, result.buffer
    done = buf.done
    with at_position(reward, ctx.reward_position):
        with lock.learner():  # a collector thread picks tasks from the same sampler
            episodes = buf.finished_parts()
            if episodes is not None and episodes.task.numel():  # numel of a masked select: known on the host
                hooks.on_episodes_end(episodes.task, episodes)
                if planner is not None:
                    planner.record(ctx, episodes.task, episodes.outcome)
                sampler.record_batch(episodes.task, episodes.outcome)
                if reward is not None:
                    bonus = reward.bonus(episodes.n_subagents, episodes.assigned, episodes.completed, validate=False)
                    check_reward_output(reward, "bonus", bonus, episodes.n_subagents, buf.rewards.device,
                                        finite=not _package_own(reward))  # a user's reward: one read per round
                    buf.rewards[buf.done] += bonus
            sync = getattr(sampler, "sync", None)
            if hooks.world_size > 1 and callable(sync):  # every rank, every round: the union of all ranks' episodes
                sync(hooks.reduce_sum)
        buf.compute_advantages(result.next_value, result.truncated_values, gamma, gae_lambda)
        rollout = Rollout(
            round_index=ctx.round_index, buffer=buf, episode_return=buf.episode_return[done],
            episode_length=buf.episode_length[done], episodes=episodes, env_steps=env_steps,
            policy_version=schedule.policy_version(result), context=ctx,
        )
        stats = rollout.stats
        local_steps = buf.num_steps * buf.num_envs
        stats["rollout/SPS"] = torch.tensor(local_steps / max(result.rollout_time, 1e-9))
        if iteration_time is not None:
            stats["charts/SPS"] = torch.tensor(local_steps * hooks.world_size / max(iteration_time, 1e-9))
        var_returns = buf.returns.var()
        stats["losses/explained_variance"] = torch.where(
            var_returns > 0, 1 - (buf.returns - buf.values).var() / var_returns, torch.zeros_like(var_returns)
        )
        stats.update(episode_stats(rollout, hooks, solved_threshold))
        signals = result.signals if result.signals is not None else (picks.signals() if picks is not None else None)
        if signals is not None:  # informative share, pass-rate spread, ... (same keys on every rank)
            stats.update({f"sampler/{k}": v.detach().float() for k, v in signals.items()})
        stats.update(extra_stats or {})
        schedule.finish(result, rollout, policy, hooks.reduce_sum if hooks.world_size > 1 else None)
        if planner is not None:
            planner.finish(ctx, rollout, hooks.reduce_sum)
        hooks.on_rollout_end(rollout)
    return rollout


def episode_stats(rollout: Rollout, hooks: RoundHooks, solved_threshold: float) -> dict[str, Tensor]:
    """rollout/* over every episode that ended this round on any rank, weighted by episodes: the
    per-rank sums and counts are all-reduced (one collective, every rank), never a mean of
    per-rank means. With no finished episode anywhere only `rollout/episodes` (0) is logged,
    not a made-up 0 return; the keys are the same on every rank, as DDP's metric sync needs."""
    ep, device = rollout.episodes, rollout.buffer.rewards.device
    sums = [torch.tensor(float(rollout.episode_return.numel()), device=device), rollout.episode_return.sum(),
            rollout.episode_length.sum()]
    if ep is not None:
        sums += [(ep.outcome >= solved_threshold).float().sum(), ep.n_subagents.float().sum(),
                 ep.completed.float().sum(), ep.assigned.float().sum(), ep.critical_steps.float().sum()]
    total = torch.stack([v.float() for v in sums])
    if hooks.world_size > 1:
        total = hooks.reduce_sum(total)
    n = total[0]
    stats = {"rollout/episodes": n}
    if not bool(n > 0):
        return stats
    stats["charts/episodic_return"] = total[1] / n
    stats["charts/episodic_length"] = total[2] / n
    if ep is not None:
        stats["rollout/success_rate"] = total[3] / n
        stats["rollout/subagents_per_episode"] = total[4] / n
        stats["rollout/finish_rate"] = total[5] / total[6].clamp(min=1.0)
        stats["rollout/critical_steps"] = total[7] / n
    return stats
