"""Trajectory traces for debugging an orchestrator: `python -m parlightning.evaluate ... --trace out.jsonl`
writes one JSON object per evaluated episode (per line), round by round.

For a SwarmEnv episode: the task and its outcome (the EpisodeParts fields), then per round its stage,
the main agent's steps, the longest subagent and the round's critical steps (their sum over rounds
is the episode's `critical_steps`), and per pending slot what the policy did with it: `own` (did it
itself), `delegate` (`shards` subagents, `generic` or `briefed` instruction, the subagents' `steps`
and whether they `finished` the subtask), `wait` (left it pending) or `capped` (asked to delegate
past the subagent cap); with the slot's kind, size and whether it failed the round before.
Other worlds with tasks: per round the action and reward; worlds without tasks (Gymnasium): per
step the action and reward, and the episode's return and length.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Optional, Sequence

import torch
from torch import Tensor

from parlightning.config_types import Seed
from parlightning.envs.base import BatchedEnv, action_mask_of, solved_threshold_of
from parlightning.method_args import AllOf, IndexArg, Is, ItemsArg, PathArg, Serialisable, checked

WORLD = Is(BatchedEnv, "a world (a BatchedEnv: reset and step)")

KINDS = ("plain", "hard", "local")  # SwarmEnv slot features 2..4
PARTS = ("outcome", "critical_steps", "serial_steps", "n_subagents", "assigned", "completed")


def _slots(obs: list, action: list, info: dict[str, list], i: int, n_splits: int) -> list[dict[str, Any]]:
    """What actor i did with each pending slot this round (a SwarmEnv round)."""
    out = []
    for j, row in enumerate(obs[:-1]):
        if row[0] <= 0:  # nothing pending in this slot
            continue
        a = int(action[j])
        slot: dict[str, Any] = {"slot": j, "kind": KINDS[max(range(3), key=lambda k: row[2 + k])],
                                "size": int(info["size"][j][i]), "failed_before": bool(row[5] > 0)}
        if bool(info["delegated"][j][i]):
            slot.update(did="delegate", shards=int(info["shards"][j][i]),
                        instruction="briefed" if a > n_splits else "generic", steps=float(info["sub"][j][i]),
                        finished=bool(info["success"][j][i]))
        elif bool(info["own"][j][i]):
            slot["did"] = "own"
        else:
            slot["did"] = "capped" if a >= 1 else "wait"
        out.append(slot)
    return out


@checked(env=WORLD, seed=Seed, max_steps=IndexArg(lo=1))
def trace_episodes(env: Any, act: Callable[[Tensor, Optional[Tensor]], Tensor], seed: int, task_ids: Optional[Sequence[str]],
                   max_steps: int = 100_000) -> list[dict[str, Any]]:
    """Run every actor's first episode as `parlightning.evaluate` does (actor i on task i mod K, reset
    with `seed`) and return one trace record per actor. Host reads every round: evaluation only."""
    N = env.num_envs
    task = torch.arange(N, device=env.device) % len(task_ids) if task_ids else None
    obs = env.reset(seed=seed, task_index=task) if task is not None else env.reset(seed=seed)
    swarm = task is not None and hasattr(env, "trace_actor") and hasattr(env, "splits")
    if swarm:
        env.trace, env.trace_actor = True, slice(None)  # record every actor's round
    steps: list[list[dict[str, Any]]] = [[] for _ in range(N)]
    records: list[Optional[dict[str, Any]]] = [None] * N
    ret = [0.0] * N
    try:
        for t in range(max_steps):
            action = act(obs, action_mask_of(env))  # as evaluate acts: under the world's mask
            res = env.step(action, task) if task is not None else env.step(action)
            live = [i for i in range(N) if records[i] is None]
            obs_l, act_l, rew_l = obs.tolist(), action.tolist(), res.reward.tolist()
            info = {k: v.tolist() for k, v in env.last_round.items()} if swarm else None
            for i in live:
                ret[i] += rew_l[i]
                step: dict[str, Any] = {"round" if task is not None else "t": t, "reward": rew_l[i]}
                if swarm:
                    sub = [info["sub"][j][i] for j in range(len(info["sub"])) if info["delegated"][j][i]]
                    longest = max(sub, default=0.0)
                    step.update(stage=int(info["level"][i]), main_steps=info["main"][i], longest_subagent=longest,
                                critical_steps=info["main"][i] + longest,
                                slots=_slots(obs_l[i], act_l[i], info, i, len(env.splits)))
                else:
                    step["action"] = act_l[i]
                steps[i].append(step)
            done = (res.terminated | res.truncated).tolist()
            for i in live:
                if not done[i]:
                    continue
                record: dict[str, Any] = {"episode": i}
                if task is not None:
                    tid = task_ids[i % len(task_ids)]
                    record.update(task=tid, family=tid.rsplit("-", 1)[0])
                    if res.parts is not None:
                        record.update({f: float(getattr(res.parts, f)[i]) for f in PARTS})
                        record["solved"] = record["outcome"] >= solved_threshold_of(env)
                else:
                    record.update({"return": ret[i], "length": len(steps[i])})
                record["terminated"] = bool(res.terminated[i])
                record["rounds" if task is not None else "steps"] = steps[i]
                records[i] = record
            obs = res.obs
            if all(r is not None for r in records):
                break
    finally:
        if swarm:
            env.trace, env.trace_actor = False, 0
    return [r for r in records if r is not None]


@checked(records=AllOf(Is((list, tuple), "a list of trace records (dicts), as trace_episodes returns"),
                      ItemsArg(dict, text="trace records, as trace_episodes returns"),
                      Serialisable("json", each=True, text="one JSON line per record")),
         path=PathArg("new_file"), common=Serialisable("json", text="written into every line"))
def write_trace(records: Sequence[dict[str, Any]], path: str, **common: Any) -> None:
    """One JSON object per line: `common` (policy, split, seed) then the episode's record."""
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps({**common, **r}) + "\n")
