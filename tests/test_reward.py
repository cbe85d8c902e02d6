"""PARLReward and its λ schedules: hand-computed values, edge cases, dtype/device, checkpoints."""

import io
import math

import pytest
import torch

from parlightning.parl.reward import ConstantSchedule, CosineSchedule, LinearSchedule, PARLReward, Schedule

torch.set_num_threads(1)


def t(*values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


# -- schedules ---------------------------------------------------------------------------------


def test_linear_schedule_start_middle_horizon_beyond():
    s = LinearSchedule(start=0.1, end=0.0, horizon=100)
    assert s.value(0) == 0.1
    assert s.value(25) == pytest.approx(0.075)
    assert s.value(50) == pytest.approx(0.05)
    assert s.value(100) == 0.0
    assert s.value(10_000) == 0.0


def test_linear_schedule_can_rise():
    s = LinearSchedule(start=0.0, end=1.0, horizon=4)
    assert [s.value(p) for p in range(6)] == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0, 1.0])


def test_cosine_schedule_start_middle_horizon_beyond():
    s = CosineSchedule(start=0.1, end=0.0, horizon=100)
    assert s.value(0) == 0.1
    assert s.value(50) == pytest.approx(0.05)
    # half-cosine: at a quarter of the way, (1 - cos(pi/4)) / 2 of the drop is done
    assert s.value(25) == pytest.approx(0.1 - 0.1 * (1 - math.cos(math.pi / 4)) / 2)
    assert s.value(25) > LinearSchedule(0.1, 0.0, 100).value(25)  # slower start than linear
    assert s.value(100) == 0.0
    assert s.value(10**9) == 0.0


def test_constant_schedule():
    s = ConstantSchedule(0.3)
    assert [s.value(p) for p in (0, 1, 10**12)] == [0.3, 0.3, 0.3]


@pytest.mark.parametrize("cls", [LinearSchedule, CosineSchedule])
def test_warmup_holds_start_then_anneals_over_horizon(cls):
    s = cls(start=0.2, end=0.0, horizon=10, warmup=5)
    assert s.value(0) == 0.2 and s.value(5) == 0.2
    assert s.value(10) == pytest.approx(0.1)  # halfway through the horizon that starts at 5
    assert s.value(15) == 0.0 and s.value(100) == 0.0


@pytest.mark.parametrize("cls", [LinearSchedule, CosineSchedule])
@pytest.mark.parametrize("horizon", [0, -5, 0.0, float("nan"), float("inf")])
def test_bad_horizon_is_refused(cls, horizon):
    with pytest.raises(ValueError, match="horizon"):
        cls(horizon=horizon)


@pytest.mark.parametrize("cls", [LinearSchedule, CosineSchedule])
def test_negative_warmup_is_refused(cls):
    with pytest.raises(ValueError, match="warmup"):
        cls(horizon=10, warmup=-1)


def test_bad_schedule_values_are_refused():
    with pytest.raises(ValueError, match="start"):
        LinearSchedule(start=float("nan"))
    with pytest.raises(ValueError, match="value"):
        ConstantSchedule("0.1")
    with pytest.raises(ValueError, match="position"):
        LinearSchedule(horizon=10).value(-1)


def test_schedule_subclass_plugs_in():
    class Step(Schedule):
        def value(self, position: int) -> float:
            return 1.0 if position < 10 else 0.0

    r = PARLReward(4, lambda1=Step(), lambda2=ConstantSchedule(0.0))
    assert r.lambdas() == (1.0, 0.0)
    r.advance_to(10)
    assert r.lambdas() == (0.0, 0.0)


# -- reward values -----------------------------------------------------------------------------


def test_terms_hand_computed_with_edge_cases():
    r = PARLReward(max_subagents=4)
    n = t(0, 2, 4, 9)  # 9 > max: clamped to 1
    assigned = t(0, 4, 0, 3)  # assigned 0: r_finish 0 whatever completed says
    completed = t(0, 3, 2, 5)  # completed > assigned: clamped to 1
    outcome = t(1.0, 0.0, 0.5, 1.0)
    r_par, r_fin, r_perf = r.terms(n, assigned, completed, outcome)
    torch.testing.assert_close(r_par, t(0.0, 0.5, 1.0, 1.0))
    torch.testing.assert_close(r_fin, t(0.0, 0.75, 0.0, 1.0))
    torch.testing.assert_close(r_perf, outcome)


def test_full_reward_and_bonus_follow_the_schedules():
    r = PARLReward(4, lambda1=LinearSchedule(0.1, 0.0, horizon=100), lambda2=ConstantSchedule(0.2))
    n, assigned, completed, outcome = t(2, 8), t(4, 0), t(3, 0), t(1.0, 0.0)
    # position 0: λ1 = 0.1, λ2 = 0.2
    torch.testing.assert_close(r(n, assigned, completed, outcome), t(0.1 * 0.5 + 0.2 * 0.75 + 1.0, 0.1 * 1.0))
    torch.testing.assert_close(r.bonus(n, assigned, completed), t(0.1 * 0.5 + 0.2 * 0.75, 0.1))
    r.advance_to(50)  # λ1 = 0.05
    assert r.lambdas() == pytest.approx((0.05, 0.2))
    torch.testing.assert_close(r(n, assigned, completed, outcome), t(0.05 * 0.5 + 0.2 * 0.75 + 1.0, 0.05))
    r.advance_to(1_000)  # past the horizon: λ1 = 0, only r_finish shaping and r_perf remain
    torch.testing.assert_close(r(n, assigned, completed, outcome), t(0.2 * 0.75 + 1.0, 0.0))
    # full reward = bonus + r_perf at every position
    torch.testing.assert_close(r(n, assigned, completed, outcome), r.bonus(n, assigned, completed) + outcome)


def test_defaults_are_linear_point_one_to_zero():
    r = PARLReward(8)
    assert r.lambdas() == (0.1, 0.1)
    r.advance_to(500_000)
    assert r.lambdas() == pytest.approx((0.05, 0.05))
    r.advance_to(10**7)
    assert r.lambdas() == (0.0, 0.0)


def test_integer_counts_broadcast_and_batch_shapes():
    r = PARLReward(4, lambda1=ConstantSchedule(1.0), lambda2=ConstantSchedule(1.0))
    n = torch.tensor([[1, 2], [3, 4]])  # long counts
    out = r(n, torch.tensor(4), torch.tensor(2), torch.zeros(2, 2, dtype=torch.float64))
    assert out.shape == (2, 2) and out.dtype == torch.float64
    torch.testing.assert_close(out, torch.tensor([[0.75, 1.0], [1.25, 1.5]], dtype=torch.float64))
    bonus = r.bonus(n, torch.tensor(4), torch.tensor(2))  # all integer: default float dtype
    assert bonus.dtype == torch.get_default_dtype()


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "4"])
def test_max_subagents_must_be_positive_int(bad):
    with pytest.raises(ValueError, match="max_subagents"):
        PARLReward(bad)


@pytest.mark.parametrize("which", ["n_subagents", "assigned", "completed"])
def test_negative_counts_are_refused(which):
    r = PARLReward(4)
    args = {"n_subagents": t(1, 2), "assigned": t(2, 2), "completed": t(1, 1)}
    args[which] = t(1, -1)
    with pytest.raises(ValueError, match=which):
        r(**args, outcome=t(0, 1))
    with pytest.raises(ValueError, match=which):
        r.bonus(**args)
    with pytest.raises(ValueError, match=which):
        r.terms(**args, outcome=t(0, 1))
    # the hot path skips the check (no host sync) and clamps: still a reward in range
    out = r.terms(**args, outcome=t(0, 1), validate=False)
    assert all(bool(((x >= 0) & (x <= 1)).all()) for x in out)


def test_bad_lambda_and_position_are_refused():
    with pytest.raises(ValueError, match="lambda1"):
        PARLReward(4, lambda1=0.1)
    with pytest.raises(ValueError, match="position"):
        PARLReward(4).advance_to(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtype_and_device_are_preserved(dtype):
    r = PARLReward(4)
    n, a, c, o = (torch.tensor([1.0, 3.0], dtype=dtype) for _ in range(4))
    for out in (r(n, a, c, o), r.bonus(n, a, c), *r.terms(n, a, c, o)):
        assert out.dtype == dtype and out.device == n.device


def test_hot_path_never_reads_values_back_to_the_host():
    """On the meta device any host read (.item(), bool(), .any()) raises: validate=False must not read."""
    r = PARLReward(4)
    n, a, c, o = (torch.empty(1024, device="meta") for _ in range(4))
    out = r(n, a, c, o, validate=False)
    assert out.device.type == "meta" and out.shape == (1024,)
    assert r.bonus(n, a, c, validate=False).device.type == "meta"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_device_preserved():
    r = PARLReward(4)
    n, a, c, o = (torch.tensor([1.0, 3.0], device="cuda") for _ in range(4))
    assert r(n, a, c, o).device.type == "cuda"


# -- checkpointing and config ------------------------------------------------------------------


def test_state_dict_round_trip_weights_only():
    r = PARLReward(4, lambda1=LinearSchedule(0.1, 0.0, horizon=100))
    r.advance_to(37)
    buf = io.BytesIO()
    torch.save(r.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    fresh = PARLReward(4, lambda1=LinearSchedule(0.1, 0.0, horizon=100))
    assert fresh.lambdas() != r.lambdas()
    fresh.load_state_dict(state)
    assert fresh.position == 37 and fresh.lambdas() == r.lambdas()
    with pytest.raises(ValueError, match="position"):
        fresh.load_state_dict({})


def test_built_from_yaml_by_class_path():
    """The config names schedules by class_path, as LightningCLI (jsonargparse) does."""
    jsonargparse = pytest.importorskip("jsonargparse")
    parser = jsonargparse.ArgumentParser()
    parser.add_argument("--reward", type=PARLReward)
    cfg = parser.parse_string(
        """
reward:
  class_path: parlightning.parl.reward.PARLReward
  init_args:
    max_subagents: 6
    lambda1:
      class_path: parlightning.parl.reward.CosineSchedule
      init_args: {start: 0.2, end: 0.0, horizon: 1000, warmup: 100}
    lambda2:
      class_path: parlightning.parl.reward.ConstantSchedule
      init_args: {value: 0.05}
"""
    )
    instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes  # renamed in 4.49
    reward = instantiate(cfg).reward
    assert isinstance(reward, PARLReward) and reward.max_subagents == 6
    assert isinstance(reward.lambda1, CosineSchedule) and reward.lambda1.warmup == 100
    reward.advance_to(600)
    assert reward.lambdas() == pytest.approx((0.1, 0.05))
