"""SwarmEnv v2: procedural held-out tasks, parallelism that pays, and both PARL failure modes."""

import pytest
import torch

from parlightning.envs.base import BatchedEnv
from parlightning.envs.swarm import SwarmEnv
from parlightning.envs.swarm_tasks import HARD, LOCAL, PLAIN
from parlightning.errors import ConfigError
from parlightning.cli.evaluate import run_episodes


def _env(reps=4, **kw):
    kw.setdefault("tasks_per_family", 4)
    probe = SwarmEnv(num_envs=1, **kw)
    return SwarmEnv(num_envs=len(probe.task_ids) * reps, **kw)


def _play(env, name, seed=0):
    g = torch.Generator().manual_seed(seed)
    return run_episodes(env, lambda obs: env.scripted_action(name, obs, g), seed=seed)


def test_protocol_shapes_and_auto_reset():
    env = SwarmEnv(num_envs=16, seed=0)
    assert isinstance(env, BatchedEnv)
    W = env.max_width
    obs = env.reset()
    assert obs.shape == (16, W + 1, 6) == (16, *env.observation_shape)
    assert env.action_spec.nvec == (7,) * W and env.task_ids[0] == "solo-0" and len(env.task_ids) == 4 * 16
    seen_done = torch.zeros(16, dtype=torch.bool)
    for _ in range(40):
        before = env.task.clone()
        res = env.step(env.scripted_action("random", obs, torch.Generator().manual_seed(1)), torch.full((16,), 5))
        done = res.terminated | res.truncated
        assert not (res.terminated & res.truncated).any()
        assert torch.equal(env.task[done], torch.full_like(env.task[done], 5))
        assert torch.equal(env.task[~done], before[~done]) and (env.elapsed[done] == 0).all()
        assert torch.equal(res.final_obs[~done], res.obs[~done])
        assert (res.reward[~done] == 0).all() and torch.equal(res.reward[done], res.parts.outcome[done])
        seen_done |= done
        obs = res.obs
    assert seen_done.all()


def test_the_observation_shows_the_work_not_the_task():
    env = SwarmEnv(num_envs=2, seed=0, tasks_per_family=2)
    obs = env.reset(task_index=torch.tensor([2, 2]))  # fanout-0
    slots, W = obs[0, : env.max_width], env.max_width
    present = env.bank.present[2, 0]
    assert torch.equal(slots[:, 0] > 0, present)  # pending
    torch.testing.assert_close(slots[:, 1], env.bank.size[2, 0] / env.max_cost)
    kind = env.bank.kind[2, 0]
    for col, k in ((2, PLAIN), (3, HARD), (4, LOCAL)):
        assert torch.equal(slots[:, col] > 0, present & (kind == k))
    budget = float(env.bank.budget[2])
    ctx = obs[0, W]
    assert ctx[0].item() == pytest.approx(budget / env.time_scale) and ctx[4].item() == 1.0  # all subagents left


def test_determinism_per_seed():
    def rollout(seed):
        env = SwarmEnv(num_envs=32, seed=seed)
        obs, out = env.reset(), []
        g = torch.Generator().manual_seed(0)
        for _ in range(12):
            res = env.step(env.scripted_action("random", obs, g))
            obs = res.obs
            out.append(torch.cat([res.reward, res.parts.completed, res.parts.critical_steps]))
        return torch.stack(out)

    assert torch.equal(rollout(3), rollout(3))
    assert not torch.equal(rollout(3), rollout(4))


def test_splits_are_disjoint_and_a_task_does_not_depend_on_the_bank_size():
    train, held = SwarmEnv(num_envs=1, split="train"), SwarmEnv(num_envs=1, split="heldout")
    assert not set(train.task_ids) & set(held.task_ids)
    assert held.task_ids[0] == "solo-16" and {t.rsplit("-", 1)[0] for t in held.task_ids} == set(train.bank.families)
    a = torch.cat([train.bank.size.flatten(1), train.bank.kind.flatten(1).float()], 1)
    b = torch.cat([held.bank.size.flatten(1), held.bank.kind.flatten(1).float()], 1)
    assert not (a.unsqueeze(1) == b.unsqueeze(0)).all(-1).any()  # no held-out task is a training task
    small = SwarmEnv(num_envs=1, tasks_per_family=4)
    assert torch.equal(small.bank.size[:4], train.bank.size[:4])  # solo-0..3: the same tasks in both banks
    with pytest.raises(ConfigError, match="split"):
        SwarmEnv(num_envs=1, split="test")


def test_oracle_is_at_least_3x_faster_than_serial_on_held_out_tasks():
    # the default config's held-out bank (64 tasks), two episodes per task
    serial, oracle, rand = (_play(SwarmEnv(num_envs=128, split="heldout"), n) for n in ("serial", "oracle", "random"))
    s, o = serial.parts["critical_steps"].mean(), oracle.parts["critical_steps"].mean()
    assert s / o >= 3.0
    succ = {k: (e.parts["outcome"] >= 1).float().mean() for k, e in (("s", serial), ("o", oracle), ("r", rand))}
    assert succ["o"] > succ["s"] > succ["r"]  # untrained delegation is worse than doing it yourself
    assert succ["s"] == 0.25  # serial solves exactly the solo family


def test_families_always_never_and_sometimes_solved():
    env = _env(split="heldout", reps=8)
    serial, oracle = _play(env, "serial"), _play(env, "oracle")
    fam = env.bank.family[oracle.task]
    for f, name in enumerate(env.bank.families):
        s = (serial.parts["outcome"][fam == f] >= 1).float().mean()
        o = (oracle.parts["outcome"][fam == f] >= 1).float().mean()
        if name == "solo":
            assert s == 1.0  # always: the budget is the serial time + 1
        elif name == "locked":
            assert s == 0.0 and o == 0.0  # never: the budget is below a lower bound on any policy's time
        else:
            assert s == 0.0 and 0.5 < o < 1.0  # sometimes: only good delegation, and not always


def test_over_splitting_and_delegating_local_work_are_assigned_never_completed():
    env = SwarmEnv(num_envs=1, seed=0, subagent_reliability=1.0, tasks_per_family=2)
    W = env.max_width
    k = 2  # fanout-0: a wide stage
    env.reset(task_index=torch.tensor([k]))
    size, kind, present = env.bank.size[k, 0], env.bank.kind[k, 0], env.bank.present[k, 0]
    # every slot: 4 shards (the largest split), briefed: right instruction, too many pieces for small work
    act = torch.full((1, W), 6)
    res = env.step(act)
    plain_or_hard = present & (kind != LOCAL)
    assert res.parts.assigned.item() == 4 * present.sum().item()  # every shard counts as assigned ...
    # ... and completes only where it had work: min(4, size) per finishable subtask, none for LOCAL work
    assert res.parts.completed.item() == torch.minimum(size, torch.tensor(4.0))[plain_or_hard].sum().item()
    assert res.parts.n_subagents.item() == res.parts.assigned.item()
    # the same stage split exactly (oracle) finishes everything it assigned and is faster
    env.reset(task_index=torch.tensor([k]))
    obs = env.reset(task_index=torch.tensor([k]))
    res2 = env.step(env.scripted_action("oracle", obs))
    assert res2.parts.completed.item() == res2.parts.assigned.item() > 0
    assert res2.parts.critical_steps.item() < res.parts.critical_steps.item()


def test_generic_instructions_fail_on_hard_work_and_briefed_ones_succeed():
    env = SwarmEnv(num_envs=1, seed=0, subagent_reliability=1.0, tasks_per_family=2)
    k, W = 2, env.max_width
    kind, present = env.bank.kind[k, 0], env.bank.present[k, 0]
    for choice, finished in ((1, PLAIN), (4, HARD)):  # generic / briefed, one shard each
        env.reset(task_index=torch.tensor([k]))
        res = env.step(torch.full((1, W), choice))
        suitable = present & ((kind == PLAIN) | (kind == finished))
        assert res.parts.completed.item() == suitable.sum().item() and res.parts.assigned.item() == present.sum().item()
        if choice == 1:
            assert suitable.sum() < present.sum()  # this stage has HARD work  # the stage is not done: the failed ones stay pending, flagged in the next observation
            assert torch.equal(env.pending[:, 0], present & ~suitable) and torch.equal(env.failed[:, 0], present & ~suitable)
            assert torch.equal(res.obs[0, :W, 5] > 0, present & ~suitable)


def test_time_limit_terminates_the_round_cap_truncates_and_outcomes_are_paid():
    env = SwarmEnv(num_envs=1, seed=0, tasks_per_family=2)
    locked = env.task_ids.index("locked-0")
    ep = run_episodes(env, lambda o: env.scripted_action("serial", o), seed=0)  # solo-0 on actor 0
    assert ep.parts["outcome"].item() == 1.0
    obs = env.reset(task_index=torch.tensor([locked]))
    for _ in range(env.max_episode_steps):
        res = env.step(env.scripted_action("serial", obs), torch.tensor([locked]))
        obs = res.obs
        if res.terminated.any() or res.truncated.any():
            break
    budget = env.bank.budget[locked].item()
    # past late_window x budget the episode ends as a termination (the limit is in the observation), outcome 0
    assert res.terminated.item() and not res.truncated.item() and res.reward.item() == 0.0
    assert res.parts.critical_steps.item() > env.late_window * budget
    # the round cap ends a stuck episode unfinished: a termination by default (round_cap: terminal), the
    # earlier truncation with round_cap: truncation; generic delegation never finishes HARD work
    for cap, as_truncation in (("terminal", False), ("truncation", True)):
        capped = SwarmEnv(num_envs=1, seed=0, tasks_per_family=2, max_episode_steps=3, round_cap=cap)
        capped.reset(task_index=torch.tensor([2]))
        ends = [capped.step(torch.full((1, capped.max_width), 1)) for _ in range(3)]
        assert capped.bank.kind[2, 0][capped.bank.present[2, 0]].ne(PLAIN).any()  # fanout-0 starts with HARD work
        assert not (ends[0].truncated | ends[0].terminated).item()
        assert ends[-1].truncated.item() == as_truncation and ends[-1].terminated.item() != as_truncation
        assert ends[-1].reward.item() == 0.0 and ends[-1].parts.outcome.item() == 0.0
    with pytest.raises(ConfigError, match="round_cap"):
        SwarmEnv(num_envs=1, round_cap="never")
    # late: done after the budget but within the window earns late_credit
    late = SwarmEnv(num_envs=1, seed=0, tasks_per_family=4, late_window=10.0)
    fan = late.task_ids.index("fanout-1")
    obs = late.reset(task_index=torch.tensor([fan]))
    while True:
        res = late.step(late.scripted_action("serial", obs), torch.tensor([fan]))
        obs = res.obs
        if res.terminated.item():
            break
    assert res.parts.critical_steps.item() > late.bank.budget[fan].item()
    assert res.reward.item() == pytest.approx(late.late_credit)


@pytest.mark.parametrize("cap", [{"max_subagents": 3}, {"subagent_budget": 3}], ids=["per_round", "per_episode"])
def test_subagent_caps_make_delegations_wait_unassigned(cap):
    env = SwarmEnv(num_envs=1, seed=0, tasks_per_family=2, subagent_reliability=1.0, **cap)
    k = 2
    env.reset(task_index=torch.tensor([k]))
    res = env.step(torch.full((1, env.max_width), 4))  # briefed, one shard each: only 3 fit
    assert res.parts.assigned.item() == 3 == res.parts.n_subagents.item()
    n_pending = env.bank.present[k, 0].sum().item()
    assert env.pending[:, 0].sum().item() == n_pending - 3 - 0  # the rest wait (not failed)
    assert not env.failed[:, 0].any()


def test_state_dict_round_trip_resumes_exactly():
    a = SwarmEnv(num_envs=24, seed=5)
    g = torch.Generator().manual_seed(0)
    obs = a.reset()
    for _ in range(5):
        obs = a.step(a.scripted_action("random", obs, g)).obs
    state = a.state_dict()
    b = SwarmEnv(num_envs=24, seed=99)
    b.load_state_dict(state)
    acts = [a.scripted_action("random", obs, g) for _ in range(6)]
    ra = [a.step(x) for x in acts]
    rb = [b.step(x) for x in acts]
    for x, y in zip(ra, rb):
        assert torch.equal(x.obs, y.obs) and torch.equal(x.reward, y.reward)
        assert torch.equal(x.parts.critical_steps, y.parts.critical_steps)


def test_bad_arguments_are_refused_with_the_field_named():
    for kwargs, field in [({"num_envs": 0}, "num_envs"), ({"subagent_reliability": 1.5}, "subagent_reliability"),
                          ({"families": ("nope",)}, "families"), ({"splits": (4, 2)}, "splits"),
                          ({"merge_cost": -1}, "merge_cost"), ({"late_credit": 1.0}, "late_credit"),
                          ({"late_window": 0.5}, "late_window"), ({"max_cost": 0}, "max_cost")]:
        with pytest.raises(ConfigError, match=field):
            SwarmEnv(**kwargs)
    with pytest.raises(ConfigError, match="oracle"):
        SwarmEnv(num_envs=1).scripted_action("genius", torch.zeros(1, 13, 6))


def _trajectory_digest(**kw):
    """sha256 over a fixed-seed trajectory (obs, reward, flags, final_obs, parts; dtypes included)."""
    import hashlib

    n, steps = kw.pop("n"), kw.pop("steps")
    kw.setdefault("round_cap", "truncation")  # the reference dynamics cut capped episodes as truncations
    env = SwarmEnv(num_envs=n, seed=3, tasks_per_family=4, **kw)
    g = torch.Generator().manual_seed(5)
    obs = env.reset(seed=7)
    h = hashlib.sha256(obs.numpy().tobytes())
    for t in range(steps):
        action = env.scripted_action("random" if t % 3 else "oracle", obs, g)
        r = env.step(action, lambda done: torch.randint(0, len(env.task_ids), done.shape, generator=g))
        obs = r.obs
        for x in (r.obs, r.reward, r.terminated, r.truncated, r.final_obs, *r.parts):
            h.update(str(x.dtype).encode())
            h.update(x.numpy().tobytes())
    return h.hexdigest()[:16]


@pytest.mark.parametrize("kw, expected", [
    (dict(n=64, steps=60), "2d391da5f158cead"),  # default world, caps never bind
    (dict(n=8, steps=40, max_width=64, max_levels=32, max_subagents=100, max_episode_steps=128),
     "ebf6207282844385"),  # the wide config: the per-round cap binds
    (dict(n=32, steps=40, max_subagents=10, subagent_budget=30), "d219e375e0b1f236"),  # both caps bind
])
def test_step_is_bit_identical_to_the_reference_dynamics(kw, expected):
    """Digests computed by the straightforward step (bool masks, two observations per step) that the
    fast float-mask step replaced: a speed-up must not change one bit of a trajectory. The reference
    cut episodes at the round cap as truncations (round_cap: truncation); the default differs only in
    those flags (next test)."""
    assert _trajectory_digest(**kw) == expected


def test_a_terminal_round_cap_changes_only_the_flags_of_capped_episodes():
    def run(cap):
        env = SwarmEnv(num_envs=32, seed=3, tasks_per_family=4, max_subagents=10, subagent_budget=30, round_cap=cap)
        g = torch.Generator().manual_seed(5)
        obs, out = env.reset(seed=7), []
        for t in range(40):
            r = env.step(env.scripted_action("random" if t % 3 else "oracle", obs, g))
            obs = r.obs
            out.append(r)
        return out

    capped = 0
    for a, b in zip(run("terminal"), run("truncation")):
        for x, y in zip((a.obs, a.reward, a.final_obs, *a.parts), (b.obs, b.reward, b.final_obs, *b.parts)):
            assert torch.equal(x, y)
        assert torch.equal(a.terminated, b.terminated | b.truncated) and not a.truncated.any()
        capped += int(b.truncated.sum())
    assert capped > 0


@pytest.mark.parametrize("config", ["swarm.yaml", "swarm_wide.yaml"])
def test_the_shipped_configs_budget_column_moves_and_binds_on_no_scripted_policy(config):
    import os

    from parlightning.cli.evaluate import build_env, env_spec

    root = os.path.join(os.path.dirname(__file__), "..", "configs")
    cls, args = env_spec([os.path.join(root, "swarm.yaml")] + ([os.path.join(root, config)] if config != "swarm.yaml" else []))
    assert args["subagent_budget"] > 0
    wide = config != "swarm.yaml"
    n = 16 if wide else 128
    for name in ("oracle", "optimal"):
        env = build_env(cls, args, n, 0, "heldout", "cpu")
        free = build_env(cls, {**args, "subagent_budget": None}, n, 0, "heldout", "cpu")
        seen = set()
        obs = env.reset(seed=0)
        for _ in range(3):
            seen.update(obs[:, env.max_width, 4].tolist())
            obs = env.step(env.scripted_action(name, obs)).obs
        assert len(seen) > 3  # the share of the budget left is information, not a constant
        if not wide:  # the same episodes with and without the budget: it never binds on them
            a = run_episodes(env, lambda o: env.scripted_action(name, o), 0)
            b = run_episodes(free, lambda o: free.scripted_action(name, o), 0)
            for k in a.parts:
                assert torch.equal(a.parts[k], b.parts[k]), (name, k)


def test_family_tasks_sets_the_bank_composition_and_keeps_splits_disjoint():
    comp = {"solo": 6, "fanout": 2, "pipeline": 2, "locked": 6}
    train = SwarmEnv(num_envs=1, family_tasks=comp)
    held = SwarmEnv(num_envs=1, family_tasks=comp, split="heldout")
    fams = [t.rsplit("-", 1)[0] for t in train.task_ids]
    assert {f: fams.count(f) for f in comp} == comp and len(train.task_ids) == 16
    assert train.task_ids[:7] == [f"solo-{i}" for i in range(6)] + ["fanout-0"]
    assert held.task_ids[0] == "solo-6" and held.task_ids[6] == "fanout-2"  # held out: indices [n_f, 2 n_f)
    assert not set(train.task_ids) & set(held.task_ids)
    default = SwarmEnv(num_envs=1)
    assert torch.equal(train.bank.size[:6], default.bank.size[:6])  # a task is the same whatever the bank
    assert torch.equal(train.bank.size[6:8], default.bank.size[16:18])  # fanout-0, fanout-1
    assert train.bank.family.tolist() == [0] * 6 + [1] * 2 + [2] * 2 + [3] * 6
    for bad, match in (({"solo": 0}, "family_tasks.solo"), ({"nope": 3}, "unknown `families`"), ({}, "must map"),
                       ({"solo": 2.5}, "family_tasks.solo")):
        with pytest.raises(ConfigError, match=match):
            SwarmEnv(num_envs=1, family_tasks=bad)
    with pytest.raises(ConfigError, match="drop `families`"):
        SwarmEnv(num_envs=1, family_tasks=comp, tasks_per_family=4)


def test_outcome_noise_flips_finished_outcomes_at_its_rate_and_only_those():
    clean, noisy = _env(reps=64, split="heldout"), _env(reps=64, split="heldout", outcome_noise=0.15)
    a, b = _play(clean, "oracle"), _play(noisy, "oracle")
    for f in ("critical_steps", "n_subagents", "completed"):  # the dynamics are untouched
        assert torch.equal(a.parts[f], b.parts[f])
    passed = a.parts["outcome"] >= 1
    flipped = torch.where(passed, b.parts["outcome"] == 0, b.parts["outcome"] == 1)
    kept = b.parts["outcome"] == a.parts["outcome"]
    assert bool((flipped | kept).all())  # a pass becomes 0, anything else 1
    assert 0.11 < float(flipped.float().mean()) < 0.19  # 1024 episodes at p = 0.15
    env = _env(reps=1, outcome_noise=0.5)
    env.reset(seed=0)
    for _ in range(3):  # the flip touches finished episodes only: no reward mid-episode
        res = env.step(torch.zeros(env.num_envs, env.max_width, dtype=torch.long))
        assert bool((res.reward[~(res.terminated | res.truncated)] == 0).all())
        assert torch.equal(res.reward, res.parts.outcome)
    state = env.state_dict()  # the noise stream is checkpointed: a resumed env flips the same episodes
    twin = _env(reps=1, outcome_noise=0.5)
    twin.load_state_dict(state)
    act = torch.zeros(env.num_envs, env.max_width, dtype=torch.long)
    for _ in range(4):
        assert torch.equal(env.step(act).reward, twin.step(act).reward)
    for bad in (-0.1, 0.6, "x"):
        with pytest.raises(ConfigError, match="outcome_noise"):
            SwarmEnv(num_envs=1, outcome_noise=bad)
    assert "outcome_noise" not in __import__("parlightning.runtime.preflight", fromlist=["x"]).env_signature(env)
