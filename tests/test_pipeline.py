"""PipelineChain: counterfactual replays reproduce the episode exactly when nothing is replaced and
change it, by hand-computed amounts, when a stage's decision is replaced by a different one."""


import pytest
import torch

from parlightning.envs.base import ActionSpec, BatchedEnv, EpisodeParts, StepResult
from parlightning.errors import ConfigError
from parlightning.analysis.pipeline import PipelineChain, blame_by_kind


class ChainEnv(BatchedEnv):
    """A task is a chain of stages of `work` steps. Action 0: do the stage yourself (costs `work`,
    always done). Action 1: delegate it (costs 1 to start + ceil(work / 2), finishes with probability
    `reliability`, else the stage stays pending). Solved when the chain ends within `budget`."""

    def __init__(self, tasks, budget, reliability=1.0, num_envs=1, seed=0):
        self.num_envs, self.device = num_envs, torch.device("cpu")
        self.work = torch.tensor(tasks, dtype=torch.float32)  # [K, L]
        self.budget, self.reliability = float(budget), reliability
        self.task_ids = [f"chain-{k}" for k in range(len(tasks))]
        self.observation_shape, self.action_spec = (3,), ActionSpec("discrete", nvec=(2,))
        self.max_episode_steps = 20
        self.generator = torch.Generator().manual_seed(seed)
        z = lambda: torch.zeros(num_envs)  # noqa: E731
        self.task, self.level = torch.zeros(num_envs, dtype=torch.long), torch.zeros(num_envs, dtype=torch.long)
        self.elapsed, self.n_sub, self.completed, self.steps = z(), z(), z(), z()

    def _obs(self):
        w = self.work[self.task, self.level.clamp(max=self.work.shape[1] - 1)]
        return torch.stack([w, self.level.float(), self.elapsed], -1)

    def stage_kind(self):
        return "wide" if float(self._obs()[0, 0]) >= 3 else "narrow"

    def reset(self, *, seed=None, task_index=None):
        if seed is not None:
            self.generator.manual_seed(seed)
        self.task = task_index.clone() if task_index is not None else torch.zeros(self.num_envs, dtype=torch.long)
        for t in (self.level, self.elapsed, self.n_sub, self.completed, self.steps):
            t.zero_()
        return self._obs()

    def step(self, action, next_task=None):
        w = self._obs()[:, 0]
        delegate = action.reshape(-1) == 1
        lucky = torch.rand(self.num_envs, generator=self.generator) < self.reliability
        self.elapsed += torch.where(delegate, 1 + torch.ceil(w / 2), w)
        self.n_sub += delegate.float()
        self.completed += (delegate & lucky).float()
        self.steps += 1
        self.level += (~delegate | lucky).long()
        done = self.level >= self.work.shape[1]
        outcome = (done & (self.elapsed <= self.budget)).float()
        truncated = ~done & (self.steps >= self.max_episode_steps)
        parts = EpisodeParts(self.task.clone(), outcome, self.n_sub.clone(), self.n_sub.clone(),
                             self.completed.clone(), self.elapsed.clone(), self.elapsed.clone())
        final = self._obs()
        if bool((done | truncated).any()):
            self.reset(task_index=self.task)
        return StepResult(self._obs(), outcome, done, truncated, final, parts)

    def state_dict(self):
        return {"task": self.task.clone(), "level": self.level.clone(), "elapsed": self.elapsed.clone(),
                "n_sub": self.n_sub.clone(), "completed": self.completed.clone(), "steps": self.steps.clone(),
                "generator": self.generator.get_state()}

    def load_state_dict(self, state):
        for name, value in state.items():
            if name == "generator":
                self.generator.set_state(value)
            else:
                getattr(self, name).copy_(value)


serial = lambda obs: torch.zeros(1, dtype=torch.long)  # noqa: E731
delegate = lambda obs: torch.ones(1, dtype=torch.long)  # noqa: E731
delegate_wide = lambda obs: (obs[:, 0] >= 3).long()  # noqa: E731


def test_replays_reproduce_the_episode_exactly_when_nothing_is_replaced():
    env = ChainEnv([[4, 1, 6, 3, 5]], budget=30, reliability=0.5)  # random failures: the RNG is in the snapshot
    chain = PipelineChain(env, delegate_wide, reference=delegate_wide)
    episode = chain.record(0, seed=2)
    assert len(episode.snapshots) == 5 and episode.kinds == ["wide", "narrow", "wide", "wide", "wide"]
    assert episode.result.actions.numel() > 5  # some delegations failed and were retried
    assert chain.replay(episode).same_as(episode.result)
    for pair in chain.blame(episode):  # replacing a stage by the same policy's decision changes nothing
        assert pair.counterfactual.same_as(pair.original)
        assert pair.time_lost == 0.0 and not pair.outcome_changed
    # a different seed is a different episode, so the reproduction above is not vacuous
    assert not chain.record(0, seed=3).result.same_as(episode.result)


def test_replacing_a_stage_with_a_different_decision_changes_it_by_the_right_amount():
    env = ChainEnv([[4, 1, 6]], budget=10)  # serial: 4 + 1 + 6 = 11 > 10, not solved
    chain = PipelineChain(env, serial, reference=delegate)
    episode = chain.record(0)
    assert (episode.result.outcome, episode.result.critical_steps) == (0.0, 11.0)
    pairs = chain.blame(episode)
    # delegating a stage of work w costs 1 + ceil(w / 2): 3 for 4, 2 for 1, 4 for 6
    assert [p.counterfactual.critical_steps for p in pairs] == [10.0, 12.0, 9.0]
    assert [p.time_lost for p in pairs] == [1.0, -1.0, 2.0]
    assert [p.counterfactual.outcome for p in pairs] == [1.0, 0.0, 1.0]
    assert [p.outcome_changed for p in pairs] == [True, False, True]
    assert [p.kind for p in pairs] == ["wide", "narrow", "wide"]
    assert pairs[2].counterfactual.actions.tolist() == [0, 0, 1]  # only stage 2's decision replaced
    assert pairs[2].counterfactual.n_subagents == 1.0 and pairs[0].original.n_subagents == 0.0
    table = blame_by_kind(pairs)
    assert table["wide"] == {"stages": 2, "time_lost_total": 3.0, "outcome_changed": 2,
                             "time_lost_mean": 1.5, "outcome_changed_rate": 1.0}
    assert table["narrow"]["time_lost_mean"] == -1.0 and table["narrow"]["outcome_changed_rate"] == 0.0


def test_a_replaced_stage_hands_control_back_to_the_policy_on_the_new_state():
    env = ChainEnv([[2, 4]], budget=100, reliability=1.0)
    chain = PipelineChain(env, delegate_wide, reference=serial)
    episode = chain.record(0)
    assert episode.result.actions.tolist() == [0, 1] and episode.result.critical_steps == 2.0 + 3.0
    pair = chain.blame(episode)[1]
    assert pair.counterfactual.actions.tolist() == [0, 0] and pair.time_lost == -1.0  # serial was 1 step faster


def test_replay_on_swarm_env_reproduces_a_stochastic_episode_exactly():
    from parlightning.envs.swarm import SwarmEnv  # only through its public protocol: no dynamics pinned
    from parlightning.policies.actor_critic import ActorCritic

    env = SwarmEnv(num_envs=1, seed=0, split="heldout", tasks_per_family=4, subagent_reliability=0.7)
    torch.manual_seed(0)
    net = ActorCritic(env.observation_shape, env.action_spec, (16,), "relu")
    nvec = list(env.action_spec.nvec)

    def greedy(obs):  # a fixed random policy: deterministic in the observation, delegates some work
        return torch.stack([p.argmax(-1) for p in net.actor(obs.flatten(1)).split(nvec, -1)], -1)

    oracle = lambda obs: env.scripted_action("oracle", obs)  # noqa: E731
    serial = lambda obs: env.scripted_action("serial", obs)  # noqa: E731
    changed = 0
    for task in range(len(env.task_ids)):
        episode = PipelineChain(env, greedy, reference=oracle).record(task, seed=task)
        chain = PipelineChain(env, greedy, reference=oracle)
        assert chain.replay(episode).same_as(episode.result)  # snapshots carry the world's RNG
        assert all(p.counterfactual.same_as(p.original) for p in PipelineChain(env, greedy, greedy).blame(episode))
        serial_episode = PipelineChain(env, serial, reference=oracle).record(task, seed=task)
        pairs = PipelineChain(env, serial, reference=oracle).blame(serial_episode)
        changed += sum(p.critical_steps_changed for p in pairs)
    assert changed > 0  # the oracle's decisions on some stage differ from doing it all yourself


def test_pipeline_chain_refuses_a_batched_env():
    with pytest.raises(ConfigError, match="num_envs=1"):
        PipelineChain(ChainEnv([[1]], budget=1, num_envs=2), serial, serial)
