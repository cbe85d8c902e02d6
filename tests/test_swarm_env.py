"""SwarmEnv invariants and the failure modes PARL needs the world to show."""

import torch

from parlightning.envs.base import BatchedEnv
from parlightning.envs.swarm import SwarmEnv


def _policy_actions(env: SwarmEnv, mode: str, helpers: int = 0) -> torch.Tensor:
    """Scripted orchestrators: 'serial' does everything itself; 'delegate' gives every pending
    subtask to a subagent with the right instruction; 'random' picks uniformly."""
    N, W = env.num_envs, env.max_width
    lv = env.level.clamp(max=env.max_levels - 1)
    skill = env.bank.skill[env.task, lv]
    if mode == "serial":
        slots = torch.zeros(N, W, dtype=torch.long)
    elif mode == "delegate":
        slots = skill + 1
    else:
        slots = torch.randint(0, env.n_skills + 1, (N, W))
    return torch.cat([slots, torch.full((N, 1), helpers, dtype=torch.long)], 1)


def _run_episodes(env: SwarmEnv, mode: str, task: int, helpers: int = 0, steps: int = 40):
    env.reset(task_index=torch.full((env.num_envs,), task))
    outcomes, parts_seen = [], []
    for _ in range(steps):
        res = env.step(_policy_actions(env, mode, helpers), torch.full((env.num_envs,), task))
        done = res.terminated | res.truncated
        outcomes.append(res.parts.outcome[done])
        parts_seen.append(torch.stack([p.float() for p in res.parts], -1)[done])
    return torch.cat(outcomes), torch.cat(parts_seen)


def _tasks(env: SwarmEnv, family: str) -> list[int]:
    return [i for i, t in enumerate(env.task_ids) if t.startswith(family + "-")]


def test_protocol_shapes_and_ids():
    env = SwarmEnv(num_envs=16, seed=0)
    assert isinstance(env, BatchedEnv) and issubclass(SwarmEnv, BatchedEnv)
    obs = env.reset()
    assert obs.shape == (16, *env.observation_shape) and obs.dtype == torch.float32
    assert env.action_spec.kind == "multi_discrete" and len(env.action_spec.nvec) == env.max_width + 1
    assert len(env.task_ids) == 32 and all(t.count("-") == 1 for t in env.task_ids)
    res = env.step(_policy_actions(env, "random"))
    for t in (res.obs, res.final_obs):
        assert t.shape == obs.shape and torch.isfinite(t).all()
    assert res.reward.shape == res.terminated.shape == res.truncated.shape == (16,)
    assert all(p.shape == (16,) for p in res.parts)


def test_deterministic_for_a_seed_and_resumable():
    def rollout(env, steps=30):
        torch.manual_seed(1)
        out = []
        for _ in range(steps):
            res = env.step(_policy_actions(env, "random"))
            out.append(torch.cat([res.obs.flatten(), res.reward, res.terminated.float()]))
        return torch.stack(out)

    a, b = SwarmEnv(num_envs=8, seed=3), SwarmEnv(num_envs=8, seed=3)
    a.reset(), b.reset()
    assert torch.equal(rollout(a), rollout(b))
    state = a.state_dict()
    first = rollout(a)
    b.load_state_dict(state)
    assert torch.equal(first, rollout(b))
    c = SwarmEnv(num_envs=8, seed=4)
    c.reset()
    assert not torch.equal(rollout(c), rollout(SwarmEnv(num_envs=8, seed=3)))


def test_per_actor_reset_and_done_semantics():
    env = SwarmEnv(num_envs=64, seed=0)
    env.reset()
    seen_done = torch.zeros(64, dtype=torch.bool)
    for _ in range(40):
        before = env.task.clone()
        next_task = torch.full((64,), 5)
        res = env.step(_policy_actions(env, "random"), next_task)
        done = res.terminated | res.truncated
        assert not (res.terminated & res.truncated).any()
        # finished actors restart on the given task with fresh counters; the others keep going
        assert torch.equal(env.task[done], next_task[done]) and torch.equal(env.task[~done], before[~done])
        assert (env.elapsed[done] == 0).all() and (env.n_subagents[done] == 0).all()
        # final_obs differs from the fresh obs only for actors that were reset
        assert torch.equal(res.final_obs[~done], res.obs[~done])
        # the reward is the outcome, paid once at the end of an episode
        assert (res.reward[~done] == 0).all() and torch.equal(res.reward[done], res.parts.outcome[done])
        seen_done |= done
    assert seen_done.all()


def test_truncation_at_the_episode_step_cap():
    env = SwarmEnv(num_envs=4, seed=0, max_episode_steps=2, families=("solo",))
    long_task = max(range(len(env.task_ids)), key=lambda k: int(env.bank.n_levels[k]))
    env.reset(task_index=torch.full((4,), long_task))
    # do nothing useful: delegate with a wrong instruction so the stage never completes
    lv = env.level.clamp(max=env.max_levels - 1)
    wrong = (env.bank.skill[env.task, lv] + 1) % env.n_skills + 1
    act = torch.cat([wrong, torch.zeros(4, 1, dtype=torch.long)], 1)
    res1 = env.step(act)
    res2 = env.step(act)
    assert not (res1.terminated | res1.truncated).any()
    assert (res2.truncated | res2.terminated).all()


FIELDS = {n: i for i, n in enumerate(("task", "outcome", "n_subagents", "assigned", "completed",
                                       "critical_steps", "serial_steps"))}


def test_serial_collapse_is_real_wide_tasks_need_delegation():
    env = SwarmEnv(num_envs=64, seed=0)
    wide = []  # fanout/pipeline tasks that serial execution cannot do in time but skilled delegation can
    serial_pay, random_pay = [], []
    for k in _tasks(env, "fanout") + _tasks(env, "pipeline"):
        serial, _ = _run_episodes(env, "serial", k)
        delegate, _ = _run_episodes(env, "delegate", k)
        random_, parts = _run_episodes(env, "random", k)
        # untrained delegation: the outcome almost never rewards it, and doing it yourself pays more ...
        assert random_.mean() < 0.05 and serial.mean() >= random_.mean()
        serial_pay.append(serial.mean())
        random_pay.append(random_.mean())
        finish = parts[:, FIELDS["completed"]].sum() / parts[:, FIELDS["assigned"]].sum()
        assert 0.02 < finish < 0.3  # ... while r_finish still sees the lucky right instructions
        if (serial >= 1).float().mean() == 0.0 and (delegate >= 1).float().mean() > 0.6:
            wide.append(k)
    assert len(wide) >= 4
    assert sum(serial_pay) > 3 * sum(random_pay)  # late credit for doing it yourself: the serial attractor
    # on narrow tasks doing it yourself always succeeds and delegating never pays: the attractor
    for k in _tasks(env, "solo")[:3]:
        serial, _ = _run_episodes(env, "serial", k)
        delegate, _ = _run_episodes(env, "delegate", k)
        assert (serial == 1.0).all() and delegate.mean() < serial.mean()


def test_spurious_parallelism_costs_critical_steps_and_finishes_nothing():
    env = SwarmEnv(num_envs=64, seed=0)
    for k in (_tasks(env, "solo")[0], _tasks(env, "fanout")[1]):
        mode = "serial" if k == _tasks(env, "solo")[0] else "delegate"
        clean_out, clean = _run_episodes(env, mode, k, helpers=0)
        farm_out, farm = _run_episodes(env, mode, k, helpers=env.max_helpers)
        helpers = farm[:, FIELDS["n_subagents"]] - farm[:, FIELDS["assigned"]]
        assert helpers.mean() > 0  # spawned, never assigned ...
        assert farm[:, FIELDS["critical_steps"]].mean() > clean[:, FIELDS["critical_steps"]].mean()  # ... slower ...
        # ... and it misses budgets it could meet (at best late credit)
        assert (clean_out >= env.solved_threshold).float().mean() > 0.3 and (farm_out < env.solved_threshold).all()
    _, serial_farm = _run_episodes(env, "serial", _tasks(env, "solo")[0], helpers=env.max_helpers)
    assert serial_farm[:, FIELDS["completed"]].sum() == 0  # helpers finish nothing


def test_speedup_counts_useful_work_only():
    env = SwarmEnv(num_envs=64, seed=0)
    k = _tasks(env, "fanout")[1]
    _, serial = _run_episodes(env, "serial", k)
    _, delegate = _run_episodes(env, "delegate", k)
    _, farm = _run_episodes(env, "serial", k, helpers=env.max_helpers)

    def speedup(p):
        return float(p[:, FIELDS["serial_steps"]].sum() / p[:, FIELDS["critical_steps"]].sum())

    assert speedup(serial) == 1.0  # doing it yourself: the critical path is the serial work
    assert speedup(delegate) > 1.0  # parallel, skilled subagents: faster than serial
    assert speedup(farm) < 1.0  # waiting on helpers that do nothing: slower than serial


def test_task_bank_has_always_never_and_in_between_tasks():
    env = SwarmEnv(num_envs=128, seed=0)
    best = []  # solved (in time) rate of the better scripted policy per task
    for k in range(len(env.task_ids)):
        rates = [(_run_episodes(env, mode, k, steps=24)[0] >= env.solved_threshold).float().mean().item()
                 for mode in ("serial", "delegate")]
        best.append(max(rates))
    best = torch.tensor(best)
    locked = torch.tensor([t.startswith("locked") for t in env.task_ids])
    assert (best[locked] == 0).all()  # never solvable: budget below the critical path
    assert (best == 1.0).sum() >= 8  # always solvable
    assert ((best > 0.05) & (best < 0.95)).sum() >= 2  # in between even for the best scripted policy


def test_outcome_is_one_in_time_late_credit_late_and_zero_when_abandoned():
    env = SwarmEnv(num_envs=64, seed=0)
    k = _tasks(env, "fanout")[1]  # serial misses the budget but stays inside the late window
    serial, parts = _run_episodes(env, "serial", k)
    budget = float(env.bank.budget[k])
    critical = parts[:, FIELDS["critical_steps"]]
    assert (critical > budget).all() and (critical <= env.late_window * budget).all()
    assert torch.allclose(serial, torch.full_like(serial, env.late_credit))
    random_, parts = _run_episodes(env, "random", k)
    abandoned = parts[:, FIELDS["critical_steps"]] > env.late_window * budget
    assert abandoned.float().mean() > 0.5 and (random_[abandoned] == 0).all()
    delegate, parts = _run_episodes(env, "delegate", k)
    in_time = parts[:, FIELDS["critical_steps"]] <= budget
    assert in_time.any() and (delegate[in_time] == 1.0).all()


def test_helpers_stop_at_max_subagents_delegations_never_do():
    env = SwarmEnv(num_envs=8, seed=0, max_subagents=3, max_helpers=2)
    k = _tasks(env, "pipeline")[0]
    _, farm = _run_episodes(env, "serial", k, helpers=2)
    assert (farm[:, FIELDS["n_subagents"]] <= 3).all() and (farm[:, FIELDS["n_subagents"]] == 3).any()
    _, delegate = _run_episodes(env, "delegate", k)
    assert (delegate[:, FIELDS["assigned"]] > 3).any()  # real delegations are never refused


def test_bad_arguments_are_refused_with_the_field_named():
    import pytest

    for kwargs, field in [({"num_envs": 0}, "num_envs"), ({"subagent_reliability": 1.5}, "subagent_reliability"),
                          ({"families": ("nope",)}, "families"), ({"max_helpers": -1}, "max_helpers"),
                          ({"spawn_steps": -1}, "spawn_steps"), ({"late_credit": 1.0}, "late_credit"),
                          ({"late_window": 0.5}, "late_window")]:
        with pytest.raises(ValueError, match=field):
            SwarmEnv(**kwargs)
