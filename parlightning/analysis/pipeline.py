"""`PipelineChain`: per-stage blame for one finished episode by counterfactual replay.

An episode is a chain of stages. `record` plays a policy on a one-actor env and keeps the env's
exact snapshot (`state_dict`, RNG included) at every stage start; `blame` restores each snapshot,
lets a reference policy (the world's oracle or serial policy) make that stage's decisions, hands
control back to the original policy, and returns the (original, counterfactual) pairs as data:
did the outcome change, how many critical steps did the stage's decisions cost. A standalone
analysis primitive on a world; `PipelineParallel` stays refused as a training strategy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from parlightning.errors import ConfigError
from parlightning.method_args import IndexArg, Is, checked, checked_methods

Policy = Callable[[Tensor], Tensor]  # obs [1, *obs_shape] -> action [1, *action_shape]; deterministic


def default_stage_of(env: Any) -> int:
    """The stage the env's single actor is in: `env.stage_index()` where the world defines it, else `env.level`."""
    fn = getattr(env, "stage_index", None)
    value = fn() if callable(fn) else getattr(env, "level")
    return int(torch.as_tensor(value).reshape(-1)[0])


def default_kind_of(env: Any, obs: Tensor) -> str:
    """The kind of the actor's current stage (`obs`: what it shows at the stage's first step):
    `env.stage_kind()` where the world defines it, else `stage`."""
    fn = getattr(env, "stage_kind", None)
    if not callable(fn):
        return "stage"
    value = fn()
    return value if isinstance(value, str) else str(list(value)[0])


@dataclass(frozen=True)
class Outcome:
    """How one (original or counterfactual) episode ended, and the decisions taken in it."""

    outcome: float
    critical_steps: float
    n_subagents: float
    assigned: float
    completed: float
    actions: Tensor  # [T, *action_shape]
    stages: Tensor  # [T] the stage index of every step

    def same_as(self, other: "Outcome") -> bool:
        """Exactly the same episode: same decisions, same stages, same end."""
        return (self.outcome, self.critical_steps, self.n_subagents, self.assigned, self.completed) == (
            other.outcome, other.critical_steps, other.n_subagents, other.assigned, other.completed
        ) and torch.equal(self.actions, other.actions) and torch.equal(self.stages, other.stages)


@dataclass(frozen=True)
class Episode:
    """A recorded episode: its outcome plus, per stage, the snapshot taken when the stage began."""

    task: int
    result: Outcome
    kinds: list[str]  # per stage index
    snapshots: list[dict[str, Any]] = field(repr=False)  # per stage: env.state_dict() at its first step
    first_obs: list[Tensor] = field(repr=False)  # per stage: the observation at its first step
    first_step: list[int] = field(default_factory=list)  # per stage: index of its first step


@dataclass(frozen=True)
class StageBlame:
    """One stage replayed with the reference policy's decisions: the (original, counterfactual) pair."""

    stage: int
    kind: str
    original: Outcome
    counterfactual: Outcome

    @property
    def time_lost(self) -> float:
        """Critical steps the original decisions of this stage cost over the reference's (negative: saved)."""
        return self.original.critical_steps - self.counterfactual.critical_steps

    @property
    def outcome_changed(self) -> bool:
        return self.original.outcome != self.counterfactual.outcome

    @property
    def critical_steps_changed(self) -> bool:
        return self.original.critical_steps != self.counterfactual.critical_steps

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "kind": self.kind, "time_lost": self.time_lost,
                "outcome": [self.original.outcome, self.counterfactual.outcome],
                "critical_steps": [self.original.critical_steps, self.counterfactual.critical_steps],
                "outcome_changed": self.outcome_changed}


@checked_methods(record={"task_index": IndexArg(lambda c: len(c.env.task_ids), text="an index into the world's task_ids")},
                 replay={"episode": Is(Episode, "an Episode from PipelineChain.record"), "stage": IndexArg(optional=True)},
                 blame={"episode": Is(Episode, "an Episode from PipelineChain.record")})
class PipelineChain:
    """Counterfactual replay of one actor's episode, stage by stage; see the module docstring.

    Args:
        env: a one-actor world with tasks whose `state_dict` / `load_state_dict` capture its
            whole state (RNG included), so a restored snapshot replays exactly.
        policy: the policy under study (deterministic, e.g. greedy).
        reference: the policy whose decisions replace a stage's (the oracle or the serial policy).
        stage_of: the actor's stage index, read off the env.
        kind_of: `(env, obs) -> str`, the kind of stage the actor is starting (obs: what it shows).
        max_steps: safety cap on one episode's length (default: the env's `max_episode_steps`).
    """

    def __init__(
        self,
        env: Any,
        policy: Policy,
        reference: Policy,
        stage_of: Callable[[Any], int] = default_stage_of,
        kind_of: Callable[[Any, Tensor], str] = default_kind_of,
        max_steps: Optional[int] = None,
    ) -> None:
        if getattr(env, "num_envs", 1) != 1:
            raise ConfigError(f"PipelineChain: needs a one-actor env (num_envs=1), got num_envs={env.num_envs}")
        for name in ("state_dict", "load_state_dict", "reset", "step"):
            if not callable(getattr(env, name, None)):
                raise ConfigError(f"PipelineChain: the env has no `{name}`; snapshots need state_dict/load_state_dict")
        for name, fn in (("policy", policy), ("reference", reference), ("stage_of", stage_of), ("kind_of", kind_of)):
            if not callable(fn):  # called at every step of every replay: refused here, not at the first step
                raise ConfigError(f"PipelineChain: {name} must be callable (a policy: obs -> action), got "
                                  f"{type(fn).__name__} {fn!r:.40}")
        self.env, self.policy, self.reference = env, policy, reference
        self.stage_of, self.kind_of = stage_of, kind_of
        self.max_steps = int(max_steps or getattr(env, "max_episode_steps", 0) or 10_000)

    @staticmethod
    def _clone(state: Any) -> Any:
        if isinstance(state, Tensor):
            return state.clone()
        if isinstance(state, dict):
            return {k: PipelineChain._clone(v) for k, v in state.items()}
        if isinstance(state, (list, tuple)):
            return type(state)(PipelineChain._clone(v) for v in state)
        return state

    @torch.no_grad()  # not inference_mode: the env's tensors must stay writable by load_state_dict
    def _play(self, obs: Tensor, task: Tensor, replace: Optional[int], episode: Optional[dict] = None) -> Outcome:
        """Play to the end of the episode from the env's current state; `replace` names the stage whose
        decisions the reference makes. With `episode`, snapshot every stage start into it."""
        actions, stages = [], []
        for _ in range(self.max_steps):
            stage = self.stage_of(self.env)
            if episode is not None and stage not in episode["seen"]:
                episode["seen"].add(stage)
                episode["snapshots"][stage] = self._clone(self.env.state_dict())
                episode["first_obs"][stage] = obs.clone()
                episode["kinds"][stage] = self.kind_of(self.env, obs)
                episode["first_step"][stage] = len(actions)
            act = (self.reference if stage == replace else self.policy)(obs)
            res = self.env.step(act, task)
            actions.append(act[0].clone())
            stages.append(stage)
            if bool((res.terminated | res.truncated)[0]):
                p = res.parts
                return Outcome(float(p.outcome[0]), float(p.critical_steps[0]), float(p.n_subagents[0]),
                               float(p.assigned[0]), float(p.completed[0]), torch.stack(actions),
                               torch.tensor(stages, dtype=torch.long))
            obs = res.obs
        raise RuntimeError(f"PipelineChain: the episode did not end within {self.max_steps} steps")

    def record(self, task_index: int, seed: int = 0) -> Episode:
        """Reset the actor to `task_index` with `seed` and play the policy to the end, snapshotting each stage."""
        task = torch.tensor([task_index], dtype=torch.long)
        obs = self.env.reset(seed=seed, task_index=task)
        book: dict[str, Any] = {"seen": set(), "snapshots": {}, "first_obs": {}, "kinds": {}, "first_step": {}}
        result = self._play(obs, task, None, book)
        order = sorted(book["snapshots"])
        return Episode(task_index, result, [book["kinds"][s] for s in order], [book["snapshots"][s] for s in order],
                       [book["first_obs"][s] for s in order], [book["first_step"][s] for s in order])

    def replay(self, episode: Episode, stage: Optional[int] = None) -> Outcome:
        """Restore the snapshot at `stage`'s start (the first stage when None) and play on; the reference
        makes `stage`'s decisions, the policy every other. `stage=None` replays the policy alone."""
        start = 0 if stage is None else stage
        if not 0 <= start < len(episode.snapshots):
            raise ValueError(f"PipelineChain.replay: stage {stage} not in the episode's {len(episode.snapshots)} stages")
        self.env.load_state_dict(self._clone(episode.snapshots[start]))
        task = torch.tensor([episode.task], dtype=torch.long)
        tail = self._play(episode.first_obs[start].clone(), task, stage)
        cut = episode.first_step[start]  # the steps before the snapshot are the original's
        return Outcome(tail.outcome, tail.critical_steps, tail.n_subagents, tail.assigned, tail.completed,
                       torch.cat([episode.result.actions[:cut], tail.actions]),
                       torch.cat([episode.result.stages[:cut], tail.stages]))

    def blame(self, episode: Episode) -> list[StageBlame]:
        """Every stage of `episode` replayed with the reference's decisions: one pair per stage."""
        return [StageBlame(s, episode.kinds[s], episode.result, self.replay(episode, s))
                for s in range(len(episode.snapshots))]


@checked(pairs=Is((list, tuple), "a list of StageBlame (PipelineChain.blame's)"))
def blame_by_kind(pairs: list[StageBlame]) -> dict[str, dict[str, float]]:
    """Per stage kind: how many stages, mean and total critical steps lost to the original decisions,
    and the share of stages whose replacement changed the outcome."""
    out: dict[str, dict[str, float]] = {}
    wrong = next((p for p in pairs if not isinstance(p, StageBlame)), None)
    if wrong is not None:
        raise ConfigError(f"blame_by_kind(pairs): every entry must be a StageBlame (PipelineChain.blame's), got "
                          f"{type(wrong).__name__} {wrong!r:.40}")
    for p in pairs:
        row = out.setdefault(p.kind, {"stages": 0, "time_lost_total": 0.0, "outcome_changed": 0})
        row["stages"] += 1
        row["time_lost_total"] += p.time_lost
        row["outcome_changed"] += int(p.outcome_changed)
    for row in out.values():
        row["time_lost_mean"] = row["time_lost_total"] / row["stages"]
        row["outcome_changed_rate"] = row["outcome_changed"] / row["stages"]
    return out
