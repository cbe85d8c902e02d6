"""PARL pieces pinned by value: the reward and its λ schedules against plain-Python formulas,
critical steps on a hand-computed episode with garbage in masked entries, and the samplers'
statistics, weights and pick order by hand."""

import math

import pytest
import torch

from parlightning.parl.metrics import CriticalSteps, stage_critical_steps
from parlightning.parl.reward import ConstantSchedule, CosineSchedule, LinearSchedule, PARLReward
from parlightning.distribution.samplers import DifficultyWeighted, PosteriorSignal, RoundRobin

CPU = torch.device("cpu")


# ------------------------------------------------------------------ reward
def _reference_reward(n, assigned, completed, outcome, max_subagents, lam1, lam2):
    r_parallel = min(max(n / max_subagents, 0.0), 1.0)
    r_finish = min(max(completed / assigned, 0.0), 1.0) if assigned > 0 else 0.0
    return lam1 * r_parallel + lam2 * r_finish + outcome, lam1 * r_parallel + lam2 * r_finish


def test_reward_and_bonus_equal_the_formula_with_distinct_lambdas_on_a_grid():
    cases = [(n, a, c, o) for n in (0, 1, 3, 6, 11) for a in (0, 2, 5) for c in (0, 1, 2, 7) for o in (0.0, 0.4, 1.0)]
    n, a, c, o = (torch.tensor([x[i] for x in cases], dtype=torch.float32) for i in range(4))
    r = PARLReward(6, ConstantSchedule(0.3), ConstantSchedule(0.7))
    full, bonus = r(n, a, c, o), r.bonus(n, a, c)
    want = [_reference_reward(*x, 6, 0.3, 0.7) for x in cases]
    torch.testing.assert_close(full, torch.tensor([w[0] for w in want]))
    torch.testing.assert_close(bonus, torch.tensor([w[1] for w in want]))


def test_r_finish_is_completed_over_assigned_not_over_subagents():
    r = PARLReward(8, ConstantSchedule(0.0), ConstantSchedule(1.0))
    # 4 subagents, 5 assigned, 2 completed: r_finish = 2/5, not 2/4
    _, r_finish, _ = r.terms(torch.tensor([4.0]), torch.tensor([5.0]), torch.tensor([2.0]), torch.tensor([0.0]))
    torch.testing.assert_close(r_finish, torch.tensor([0.4]))
    torch.testing.assert_close(r.bonus(torch.tensor([4.0]), torch.tensor([5.0]), torch.tensor([2.0])), torch.tensor([0.4]))


@pytest.mark.parametrize("cls,shape", [(LinearSchedule, lambda t: t), (CosineSchedule, lambda t: 0.5 * (1 - math.cos(math.pi * t)))])
def test_schedules_equal_the_formula_at_every_position(cls, shape):
    s = cls(start=0.4, end=0.1, horizon=10, warmup=5)
    for p in range(0, 22):
        t = (p - 5) / 10
        want = 0.4 if p <= 5 else 0.1 if t >= 1 else 0.4 + (0.1 - 0.4) * shape(t)
        assert s.value(p) == pytest.approx(want, abs=1e-12), p
    assert s.value(10) == pytest.approx(0.4 - 0.3 * shape(0.5))  # halfway


def test_reward_reads_lambdas_at_its_position():
    r = PARLReward(2, LinearSchedule(0.2, 0.0, horizon=100), LinearSchedule(0.0, 0.6, horizon=100))
    r.advance_to(25)  # λ1 = 0.15, λ2 = 0.15
    assert r.lambdas() == pytest.approx((0.15, 0.15))
    r.advance_to(75)  # λ1 = 0.05, λ2 = 0.45
    torch.testing.assert_close(r.bonus(torch.tensor([1.0]), torch.tensor([4.0]), torch.tensor([1.0])),
                               torch.tensor([0.05 * 0.5 + 0.45 * 0.25]))


# ------------------------------------------------------------------ critical steps
def test_critical_steps_take_the_longest_subagent_and_ignore_masked_garbage():
    # episode 0: stage 0 main 2 + subs (1, 4, [9 masked]) -> 6; stage 1 main 1, no subs -> 1;
    #            stage 2 does not exist (main 50, subs 40 garbage)           -> 0
    # episode 1: stage 0 main 0 + subs (3, 3, 2) -> 3; stage 1 main 5 + sub (1) -> 6; stage 2 main 1 -> 1
    main = torch.tensor([[2.0, 1.0, 50.0], [0.0, 5.0, 1.0]])
    sub = torch.tensor([[[1.0, 4.0, 9.0], [8.0, 8.0, 8.0], [40.0, 40.0, 40.0]],
                        [[3.0, 3.0, 2.0], [1.0, 7.0, 7.0], [6.0, 6.0, 6.0]]])
    stage_mask = torch.tensor([[True, True, False], [True, True, True]])
    sub_mask = torch.tensor([[[True, True, False], [False, False, False], [True, True, True]],
                             [[True, True, True], [True, False, False], [False, False, False]]])
    torch.testing.assert_close(stage_critical_steps(main[1], sub[1], sub_mask[1]), torch.tensor([3.0, 6.0, 1.0]))
    m = CriticalSteps()
    m.update(main, sub, stage_mask, sub_mask)
    out = m.compute()
    critical, serial = (6 + 1, 3 + 6 + 1), ((2 + 1 + 4) + 1, (3 + 3 + 2) + (5 + 1) + 1)
    assert float(out["critical_steps"]) == pytest.approx(sum(critical) / 2)
    assert float(out["serial_steps"]) == pytest.approx(sum(serial) / 2)
    assert float(out["speedup"]) == pytest.approx(sum(serial) / sum(critical))
    assert int(out["episodes"]) == 2


def test_critical_step_totals_count_only_masked_in_episodes():
    m = CriticalSteps()
    m.update_totals(torch.tensor([4.0, 100.0, 6.0]), torch.tensor([8.0, 1.0, 12.0]), mask=torch.tensor([True, False, True]))
    out = m.compute()
    assert int(out["episodes"]) == 2 and float(out["critical_steps"]) == 5.0 and float(out["serial_steps"]) == 10.0
    assert float(out["speedup"]) == 2.0


# ------------------------------------------------------------------ samplers
def test_difficulty_weighted_weights_by_hand_with_total_over_every_task():
    s = DifficultyWeighted(c=1.0, pass_threshold=0.8, seed=0)
    s.bind(["a", "b", "c", "d"], CPU)
    # graded scores: a passes 1 of 2 (0.9 yes, 0.5 no), b 0 of 1 (0.79), c 3 of 3 (0.8 counts)
    s.record_batch(torch.tensor([0, 0, 1, 2, 2, 2]), torch.tensor([0.9, 0.5, 0.79, 0.8, 1.0, 0.85]))
    torch.testing.assert_close(s.attempts, torch.tensor([2.0, 1.0, 3.0, 0.0]))
    torch.testing.assert_close(s.passes, torch.tensor([1.0, 0.0, 3.0, 0.0]))
    total = math.log(6)  # every episode recorded, not only the shard's
    w = s.weights(["a"])  # a shard of one task
    assert float(w[0]) == pytest.approx(1.0 + math.sqrt(total / 2) + 1e-6, abs=1e-5)
    w = s.weights(["a", "b", "c", "d"])
    want = [1.0 + math.sqrt(total / 2), 0.0 + math.sqrt(total / 1), 0.0 + math.sqrt(total / 3), 1.0 + math.sqrt(total)]
    torch.testing.assert_close(w, torch.tensor(want) + 1e-6, rtol=0, atol=1e-5)
    # a quarter pass rate: 4 * 0.25 * 0.75 = 0.75 (c = 0)
    q = DifficultyWeighted(c=0.0, seed=0)
    for score in (1.0, 0.0, 0.0, 0.0):
        q.record("t", score)
    assert float(q.weights(["t"])[0]) == pytest.approx(0.75, abs=1e-5)


def test_record_batch_mask_drops_unfinished_entries():
    s = DifficultyWeighted(seed=0)
    s.bind(["a", "b"], CPU)
    s.record_batch(torch.tensor([0, 1, 1, 0]), torch.tensor([1.0, 1.0, 0.0, 0.0]), mask=torch.tensor([True, False, True, False]))
    torch.testing.assert_close(s.attempts, torch.tensor([1.0, 1.0]))
    torch.testing.assert_close(s.passes, torch.tensor([1.0, 0.0]))


def test_round_robin_hands_out_the_shard_in_order_to_resetting_actors_only():
    rr = RoundRobin()
    rr.bind(["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"], CPU)
    shard = torch.tensor([3, 5, 7])
    first = rr.pick_batch(shard, 0, torch.tensor([True, False, True, True]))
    assert first[[0, 2, 3]].tolist() == [3, 5, 7]
    second = rr.pick_batch(shard, 0, torch.tensor([False, True, True]))
    assert second[[1, 2]].tolist() == [3, 5]
    assert rr.picks.tolist() == [0, 0, 0, 2, 0, 2, 0, 1]


def test_posterior_signal_weights_are_p_informative_to_the_sharpness():
    s = PosteriorSignal(sharpness=2.0, seed=0)
    s.bind(["mixed", "solved", "new"], CPU)
    s.record_batch(torch.tensor([0] * 6 + [1] * 6), torch.tensor([1.0, 0.0] * 3 + [1.0] * 6))
    w = s.weights(["mixed", "solved", "new"])
    p = s.p_informative
    torch.testing.assert_close(w, p ** 2 + 1e-12)
    assert float(p[0]) > 0.9 and float(p[1]) < 0.2 and float(p[1]) < float(p[2]) < float(p[0])
