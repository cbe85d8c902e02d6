"""Task samplers: protocol, concurrency, weight shape, exploration, targeting, checkpoints."""

from __future__ import annotations

import io
import math
import threading

import pytest
import torch

from callbacks.hardest_first import HardestFirst
from reliability_helpers import sync_as_ranks
from parlightning.distribution.samplers import (
    DifficultyWeighted,
    PosteriorSignal,
    RoundRobin,
    SamplingForLearnability,
    TaskSampler,
    as_batched,
    pass_threshold_mismatch,
)

torch.set_num_threads(1)
CPU = torch.device("cpu")


def workload() -> tuple[list[str], torch.Tensor]:
    """40 tasks: 6 informative (pass rates 0.2..0.8), 17 always pass, 17 always fail."""
    rates = torch.cat([torch.linspace(0.2, 0.8, 6), torch.ones(17), torch.zeros(17)])
    return [f"t{i}" for i in range(40)], rates


def simulate(sampler, seed: int, budget: int, noise: float = 0.0, in_flight: int = 1) -> torch.Tensor:
    """Random shard of 8 per round, `in_flight` picks per round recorded after; the picked indices."""
    ids, rates = workload()
    sampler.bind(ids, CPU)
    world, picker = torch.Generator().manual_seed(1000 + seed), torch.Generator().manual_seed(seed)
    mask = torch.ones(in_flight, dtype=torch.bool)
    out = []
    for r in range(budget // in_flight):
        shard = torch.randperm(40, generator=world)[:8]
        task = sampler.pick_batch(shard, r, mask, generator=picker)
        luck, flip = torch.rand(in_flight, generator=world), torch.rand(in_flight, generator=world) < noise
        passed = (luck < rates[task]) ^ flip
        sampler.record_batch(task, passed.float())
        out.append(task)
    return torch.cat(out)


def informative_share(picked: torch.Tensor) -> float:
    return (picked < 6).float().mean().item()


def roundtrip(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


LEARNERS = [lambda: DifficultyWeighted(seed=0), lambda: PosteriorSignal(seed=0),
            lambda: SamplingForLearnability(buffer_size=6, refresh_episodes=50, seed=0)]


# -- concurrency ------------------------------------------------------------------------------
@pytest.mark.parametrize("make", LEARNERS, ids=["dw", "posterior", "sfl"])
def test_threads_hammering_pick_and_record_lose_no_counts_and_never_mutate_keys(make):
    sampler = make()
    keys = [f"k{i}" for i in range(12)]
    frozen = list(keys)
    n_threads, n_ops = 8, 150
    errors = []

    def work(t: int) -> None:
        try:
            for i in range(n_ops):
                task = sampler.pick(keys, i)
                assert task in frozen
                sampler.record(task, float((i + t) % 2))
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert keys == frozen
    assert sampler.attempts.sum().item() == n_threads * n_ops
    assert sampler.picks.sum().item() == n_threads * n_ops
    assert sampler.passes.sum().item() == n_threads * n_ops / 2


def test_threads_on_the_tensor_path_lose_no_counts():
    sampler = PosteriorSignal(seed=0)
    sampler.bind([f"k{i}" for i in range(10)], CPU)
    shard = torch.arange(10)

    def work() -> None:
        for r in range(100):
            task = sampler.pick_batch(shard, r, torch.ones(4, dtype=torch.bool))
            sampler.record_batch(task, torch.ones(4))

    threads = [threading.Thread(target=work) for _ in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sampler.attempts.sum().item() == 6 * 100 * 4
    assert sampler.picks.sum().item() == 6 * 100 * 4


# -- DifficultyWeighted: the weight -----------------------------------------------------------
def dw_with_rates(c: float, rates: dict[str, tuple[int, int]]) -> DifficultyWeighted:
    sampler = DifficultyWeighted(c=c, seed=0)
    for task, (passes, attempts) in rates.items():
        for i in range(attempts):
            sampler.record(task, 1.0 if i < passes else 0.0)
    return sampler


def test_weight_peaks_at_half_vanishes_at_the_extremes_and_untried_sit_at_the_prior():
    s = dw_with_rates(0.0, {"half": (5, 10), "quarter": (1, 4), "solved": (8, 8), "never": (0, 8)})
    w = s.weights(["half", "quarter", "solved", "never", "untried"])
    assert w[0].item() == pytest.approx(1.0, abs=1e-5)  # 4 * .5 * .5
    assert w[1].item() == pytest.approx(0.75, abs=1e-5)  # 4 * .25 * .75
    assert w[2].item() == pytest.approx(0.0, abs=1e-5) and w[3].item() == pytest.approx(0.0, abs=1e-5)
    assert w[4].item() == pytest.approx(1.0, abs=1e-5)  # optimistic prior p = 0.5
    # the signal term is capped at 1; exploration adds c * sqrt(ln(total) / n)
    s = dw_with_rates(0.5, {"half": (2, 4), "solved": (16, 16)})
    w = s.weights(["half", "solved"])
    assert w[0].item() == pytest.approx(1.0 + 0.5 * math.sqrt(math.log(20) / 4), abs=1e-4)
    assert w[1].item() == pytest.approx(0.5 * math.sqrt(math.log(20) / 16), abs=1e-4)


def test_weight_counts_a_pass_at_pass_threshold_for_graded_scores():
    s = DifficultyWeighted(c=0.0, pass_threshold=0.8, seed=0)
    for score in (0.85, 0.8, 0.5, 0.79):
        s.record("graded", score)
    assert s.passes.sum().item() == 2 and s.weights(["graded"])[0].item() == pytest.approx(1.0, abs=1e-5)
    assert s.pass_threshold == 0.8


def test_picks_are_drawn_in_proportion_to_the_score():
    s = dw_with_rates(0.0, {"half": (5, 10), "quarter": (1, 4), "solved": (8, 8)})
    s.bind(["half", "quarter", "solved"], CPU)
    picks = s.pick_batch(torch.arange(3), 0, torch.ones(20_000, dtype=torch.bool), torch.Generator().manual_seed(0))
    freq = torch.bincount(picks, minlength=3).float() / picks.numel()
    assert freq[0].item() == pytest.approx(1.0 / 1.75, abs=0.015)
    assert freq[1].item() == pytest.approx(0.75 / 1.75, abs=0.015)
    assert freq[2].item() < 1e-3


def test_larger_c_explores_more():
    rates = {"half": (10, 20), "solved": (3, 3), "never": (0, 3)}
    ratio = {}
    for c in (0.1, 0.4, 1.4):
        w = dw_with_rates(c, rates).weights(["half", "solved", "never"])
        ratio[c] = (w[1] / w[0]).item()  # weight of a known-uninformative task relative to the informative one
    assert ratio[0.1] < ratio[0.4] < ratio[1.4]
    # and over a whole run: more picks land on uninformative tasks with the larger c
    share = {c: sum(informative_share(simulate(DifficultyWeighted(c=c), s, 400)) for s in range(3)) for c in (0.1, 1.4)}
    assert share[0.1] > share[1.4] + 0.2  # summed over 3 seeds: > ~7 points per run


# -- the new sampler beats DifficultyWeighted --------------------------------------------------
@pytest.mark.parametrize("noise", [0.0, 0.15], ids=["clean", "noisy"])
def test_posterior_signal_beats_difficulty_weighted_on_informative_share(noise):
    seeds, budget = range(4), 600
    dw = sum(informative_share(simulate(DifficultyWeighted(c=0.2), s, budget, noise, in_flight=8)) for s in seeds) / 4
    ps = sum(informative_share(simulate(PosteriorSignal(), s, budget, noise, in_flight=8)) for s in seeds) / 4
    assert ps > dw + 0.1, (ps, dw)  # measured: 0.64 vs 0.34 clean, 0.45 vs 0.21 noisy


def test_posterior_signal_estimates_the_flip_rate():
    sampler = PosteriorSignal()
    simulate(sampler, 0, 1000, noise=0.15, in_flight=8)
    assert 0.10 < sampler.signals()["flip_rate"].item() < 0.20
    clean = PosteriorSignal()
    simulate(clean, 0, 400, noise=0.0, in_flight=8)
    assert clean.signals()["flip_rate"].item() < 0.02


def test_posterior_knows_always_pass_from_informative():
    s = PosteriorSignal(seed=0)
    for i in range(12):
        s.record("mixed", float(i % 2))
        s.record("solved", 1.0)
        s.record("never", 0.0)
    p = s.weights(["mixed", "solved", "never", "untried"]) ** (1 / s.sharpness)
    assert p[0].item() > 0.95 and p[1].item() < 0.05 and p[2].item() < 0.05
    assert 0.05 < p[3].item() < 0.95  # untried: the estimated class prior


def test_in_flight_picks_spread_over_informative_tasks():
    """8 actors resetting together from one shard with two informative tasks use both."""
    for sampler in (DifficultyWeighted(seed=0), PosteriorSignal(seed=0)):
        ids = ["a", "b", "solved", "never"]
        for i in range(20):
            for task, score in (("a", i % 2), ("b", i % 3 == 0), ("solved", 1), ("never", 0)):
                sampler.record(task, float(score))
        sampler.bind(ids, CPU)
        mask = torch.ones(64, dtype=torch.bool)
        picks = sampler.pick_batch(torch.arange(4), 0, mask, torch.Generator().manual_seed(1))
        counts = torch.bincount(picks, minlength=4)
        assert counts[0] > 15 and counts[1] > 15 and counts[2] + counts[3] < 10, (type(sampler).__name__, counts)


# -- tensor path -----------------------------------------------------------------------------
@pytest.mark.parametrize("make", [RoundRobin, *LEARNERS], ids=["rr", "dw", "posterior", "sfl"])
def test_pick_batch_only_returns_ids_from_the_shard(make):
    sampler = make()
    ids, _ = workload()
    sampler.bind(ids, CPU)
    shard = torch.tensor([3, 17, 22, 39, 8])
    mask = torch.rand(500, generator=torch.Generator().manual_seed(0)) < 0.5
    for r in range(5):
        picks = sampler.pick_batch(shard, r, mask, torch.Generator().manual_seed(r))
        assert picks.shape == (500,) and torch.isin(picks, shard).all()
        sampler.record_batch(picks[mask], torch.rand(int(mask.sum())))
    counted = sampler.picks.sum().item()
    assert counted == 5 * int(mask.sum())  # only actors that reset count as picks


@pytest.mark.parametrize("make", LEARNERS, ids=["dw", "posterior", "sfl"])
def test_tensor_path_and_string_path_agree(make):
    ids, rates = workload()
    by_str, by_tensor = make(), make()
    by_str.bind(ids, CPU)
    by_tensor.bind(ids, CPU)
    g = torch.Generator().manual_seed(0)
    for _ in range(30):
        task = torch.randint(0, 40, (5,), generator=g)
        score = (torch.rand(5, generator=g) < rates[task]).float()
        by_tensor.record_batch(task, score)
        for t, s in zip(task.tolist(), score.tolist()):
            by_str.record(ids[t], s)
    for name in ("attempts", "passes"):
        assert torch.equal(getattr(by_str, name), getattr(by_tensor, name))
    shard_ids = ids[::3]
    assert torch.allclose(by_str.weights(shard_ids), by_tensor.weights(shard_ids))
    shard = torch.arange(0, 40, 3)
    one = torch.ones(1, dtype=torch.bool)
    via_str = [by_str.pick(shard_ids, 0) for _ in range(40)]  # both draw from their own seeded generator
    via_tensor = [ids[by_tensor.pick_batch(shard, 0, one).item()] for _ in range(40)]
    assert via_str == via_tensor


@pytest.mark.parametrize("make", LEARNERS, ids=["dw", "posterior", "sfl"])
def test_statistics_learnt_before_bind_carry_over(make):
    sampler = make()
    for _ in range(4):
        sampler.record("b", 1.0)
        sampler.record("zz-not-in-bank", 0.0)
    sampler.bind(["a", "b", "c"], CPU)
    assert sampler.attempts.tolist() == [0.0, 4.0, 0.0] and sampler.passes.tolist() == [0.0, 4.0, 0.0]
    with pytest.raises(ValueError, match="not in the bank"):
        sampler.record("zz-not-in-bank", 1.0)


# -- checkpoints -----------------------------------------------------------------------------
@pytest.mark.parametrize("make", LEARNERS, ids=["dw", "posterior", "sfl"])
@pytest.mark.parametrize("bind_first", [True, False], ids=["load-after-bind", "load-before-bind"])
def test_state_dict_round_trips_through_weights_only_load(make, bind_first):
    ids, _ = workload()
    original = make()
    simulate(original, 0, 200, noise=0.15)
    state = roundtrip(original.state_dict())
    resumed = make()
    if bind_first:
        resumed.bind(ids, CPU)
        resumed.load_state_dict(state)
    else:
        resumed.load_state_dict(state)
        resumed.bind(ids, CPU)
    for name, value in original.signals().items():
        assert torch.allclose(value, resumed.signals()[name]), name
    shard, mask = torch.arange(0, 40, 5), torch.ones(16, dtype=torch.bool)
    for r in range(5):  # same statistics and RNG: the resumed run continues exactly
        a, b = original.pick_batch(shard, r, mask), resumed.pick_batch(shard, r, mask)
        assert torch.equal(a, b)
        original.record_batch(a, (a % 2).float())
        resumed.record_batch(b, (b % 2).float())


def test_round_robin_state_round_trips_in_either_order():
    ids, _ = workload()
    rr = RoundRobin()
    rr.bind(ids, CPU)
    rr.pick_batch(torch.arange(8), 0, torch.ones(5, dtype=torch.bool))
    state = roundtrip(rr.state_dict())
    late = RoundRobin()
    late.load_state_dict(state)
    late.bind(ids, CPU)
    nxt = late.pick_batch(torch.arange(8), 1, torch.ones(3, dtype=torch.bool))
    assert nxt.tolist() == [5, 6, 7] and late.signals()["picks"].item() == 8


def test_loading_a_checkpoint_with_another_pass_threshold_is_refused():
    s = DifficultyWeighted(pass_threshold=0.8)
    s.record("a", 0.9)
    with pytest.raises(ValueError, match="pass_threshold"):
        DifficultyWeighted(pass_threshold=0.999).load_state_dict(s.state_dict())


# -- signals -------------------------------------------------------------------------------
def test_signals_report_informative_share_spread_and_tried_fraction():
    s = DifficultyWeighted(seed=0)
    s.bind(["mixed", "solved", "never", "untried"], CPU)
    for task, score in (("mixed", 1.0), ("mixed", 0.0), ("solved", 1.0), ("never", 0.0)):
        s.record(task, score)
    s.pick_batch(torch.tensor([0]), 0, torch.ones(3, dtype=torch.bool))  # 3 picks on "mixed"
    s.pick_batch(torch.tensor([1]), 0, torch.tensor([True, False]))  # 1 on "solved"
    sig = s.signals()
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in sig.values())
    assert sig["informative_share"].item() == pytest.approx(0.75)
    spread = torch.tensor([0.5, 1.0, 0.0]).std(unbiased=False).item()
    assert sig["pass_rate_spread"].item() == pytest.approx(spread, abs=1e-6)
    assert sig["tried_fraction"].item() == pytest.approx(0.75)
    assert sig["picks"].item() == 4
    rr = RoundRobin()
    rr.pick(["a", "b"], 0)
    assert rr.signals() == {"picks": torch.tensor(1.0)}


def test_pass_threshold_mismatch_names_both_thresholds():
    assert pass_threshold_mismatch(DifficultyWeighted(), 0.999) is None
    assert pass_threshold_mismatch(RoundRobin(), 0.8) is None
    msg = pass_threshold_mismatch(PosteriorSignal(pass_threshold=0.999), 0.8)
    assert "0.999" in msg and "0.8" in msg and "pass_threshold" in msg


# -- bad input -----------------------------------------------------------------------------
def test_bad_input_raises_one_clear_error():
    with pytest.raises(ValueError, match=r"\.c: must"):
        DifficultyWeighted(c=-1)
    with pytest.raises(ValueError, match="pass_threshold"):
        DifficultyWeighted(pass_threshold=0)
    with pytest.raises(ValueError, match="flip_rate"):
        PosteriorSignal(flip_rate=0.7)
    with pytest.raises(ValueError, match="sharpness"):
        PosteriorSignal(sharpness=0)
    s = DifficultyWeighted()
    with pytest.raises(ValueError, match="score"):
        s.record("a", 1.5)
    with pytest.raises(ValueError, match="score"):
        s.record("a", float("nan"))
    with pytest.raises(ValueError, match="empty"):
        s.pick([], 0)
    with pytest.raises(RuntimeError, match="bind"):
        s.pick_batch(torch.arange(3), 0, torch.ones(2, dtype=torch.bool))
    s.bind(["a", "b"], CPU)
    with pytest.raises(ValueError, match="shard"):
        s.pick_batch(torch.zeros(0, dtype=torch.long), 0, torch.ones(2, dtype=torch.bool))
    with pytest.raises(ValueError, match="duplicates"):
        DifficultyWeighted().bind(["a", "a"], CPU)


# -- a user's two-method sampler -------------------------------------------------------------
def test_hardest_first_example_works_through_as_batched():
    user = HardestFirst()
    assert isinstance(user, TaskSampler)
    sampler = as_batched(user, queue_length=4)
    assert sampler is not user
    ids = ["easy", "hard", "mid", "unused"]
    sampler.bind(ids, CPU)
    shard = torch.tensor([0, 1, 2])
    first = sampler.pick_batch(shard, 0, torch.ones(3, dtype=torch.bool))
    assert sorted(first.tolist()) == [0, 1, 2]  # untried first, spread by pick count
    sampler.record_batch(torch.tensor([0, 1, 2, 0]), torch.tensor([1.0, 0.0, 0.5, 1.0]))
    assert user.count == {"easy": 2, "hard": 1, "mid": 1}
    nxt = sampler.pick_batch(shard, 1, torch.ones(2, dtype=torch.bool))  # a new round refills the queue
    assert nxt.tolist() == [1, 1]  # the hardest task of the shard
    restored = as_batched(HardestFirst(), 4)
    restored.load_state_dict(roundtrip(sampler.state_dict()))
    assert restored.sampler.count == user.count
    assert as_batched(DifficultyWeighted(), 4).__class__ is DifficultyWeighted  # built-ins are their own batched path


@pytest.mark.parametrize("make", LEARNERS, ids=["dw", "posterior", "sfl"])
def test_record_batch_with_a_mask_counts_only_finished_episodes(make):
    masked, selected = make(), make()
    ids = ["a", "b", "c"]
    masked.bind(ids, CPU)
    selected.bind(ids, CPU)
    task = torch.tensor([0, 1, 2, 0, 1])
    score = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0])
    done = torch.tensor([True, False, True, True, False])
    masked.record_batch(task, score, mask=done)
    selected.record_batch(task[done], score[done])
    assert masked.attempts.tolist() == [2.0, 0.0, 1.0] and masked.passes.tolist() == [1.0, 0.0, 1.0]
    assert torch.equal(masked.attempts, selected.attempts) and torch.equal(masked.passes, selected.passes)
    adapter = as_batched(HardestFirst(), 2)
    adapter.bind(ids, CPU)
    adapter.record_batch(task, score, mask=done)
    assert adapter.sampler.count == {"a": 2, "c": 1}


@pytest.mark.parametrize("cls", [DifficultyWeighted, PosteriorSignal, SamplingForLearnability])
def test_ranks_resumed_from_their_own_states_agree_again_at_the_next_sync(cls):
    """Issue 22 bug 5. Under DDP with a lag budget each rank picks for rounds in flight after the
    last sync, so the ranks' saved counts differ by those picks. Loaded as if agreed, the
    difference never went away (`picks` apart forever); the agreed part is now saved and the
    picks since are all-reduced at the next sync, so the ranks agree again."""
    ids = [f"fanout-{i}" for i in range(8)]
    cpu = torch.device("cpu")
    ranks = [cls(seed=r) for r in range(2)]
    for s in ranks:
        s.bind(ids, cpu)
    shard, everyone = torch.arange(8), torch.ones(6, dtype=torch.bool)
    for r, s in enumerate(ranks):
        s.pick_batch(shard, 0, everyone, torch.Generator().manual_seed(r))
        s.record_batch(torch.arange(8), torch.tensor([1.0, 0.0] * 4))
    sync_as_ranks(ranks)
    assert torch.equal(ranks[0].picks, ranks[1].picks)
    for r, s in enumerate(ranks):  # rounds in flight: rank r picks r + 1 more actors than agreed
        s.pick_batch(shard, 1, torch.ones(r + 1, dtype=torch.bool), torch.Generator().manual_seed(10 + r))
    saved = [s.state_dict() for s in ranks]  # each rank's own (the data module gathers them all)
    resumed = [cls(seed=r) for r in range(2)]
    for s, state in zip(resumed, saved):
        s.bind(ids, cpu)
        s.load_state_dict(state)
    for r, s in enumerate(resumed):  # training goes on
        s.pick_batch(shard, 2, everyone, torch.Generator().manual_seed(20 + r))
    sync_as_ranks(resumed)
    a, b = resumed
    assert torch.equal(a.picks, b.picks) and torch.equal(a.attempts, b.attempts)
    assert int(a.picks.sum()) == 2 * 6 + (1 + 2) + 2 * 6  # every pick of every rank, counted once


def test_one_rank_resume_keeps_every_count():
    ids = [f"solo-{i}" for i in range(4)]
    s = DifficultyWeighted(seed=0)
    s.bind(ids, torch.device("cpu"))
    s.pick_batch(torch.arange(4), 0, torch.ones(5, dtype=torch.bool), torch.Generator().manual_seed(0))
    state = s.state_dict()
    assert state["synced"] is None  # never synced: nothing agreed yet
    t = DifficultyWeighted(seed=0)
    t.bind(ids, torch.device("cpu"))
    t.load_state_dict(state)
    assert int(t.picks.sum()) == 5 and torch.equal(t.picks, s.picks)


# -- SamplingForLearnability (SFL, Rutherford et al. 2024) ------------------------------------
def _sfl_round(sampler, rates, n, gen):
    """n picks from the whole bank, recorded with pass probability `rates[task]`; the picks."""
    task = sampler.pick_batch(torch.arange(rates.numel()), 0, torch.ones(n, dtype=torch.bool), gen)
    sampler.record_batch(task, (torch.rand(n, generator=gen) < rates[task]).float())
    return task


def test_sfl_buffer_holds_the_most_learnable_tasks_and_mixes_replay_with_uniform():
    ids, rates = workload()  # tasks 0..5 informative, 6..22 always pass, 23..39 always fail
    s = SamplingForLearnability(buffer_size=4, replay_prob=0.5, refresh_episodes=400, seed=0)
    s.bind(ids, CPU)
    g = torch.Generator().manual_seed(0)
    assert torch.allclose(s.weights(ids), torch.full((40,), 1 / 40))  # before the first refresh: uniform
    _sfl_round(s, rates, 399, g)
    s.weights(ids)  # (learns before the next pick, as a pick would)
    assert s.in_buffer.sum() == 0 and s.signals()["refreshes"] == 0  # 399 < refresh_episodes: not yet
    _sfl_round(s, rates, 1, g)
    w = s.weights(ids)
    buffer = set(torch.nonzero(s.in_buffer).flatten().tolist())
    assert s.signals()["refreshes"] == 1 and len(buffer) == 4 and buffer <= set(range(6))
    p = torch.tensor([0.2, 0.32, 0.44, 0.56, 0.68, 0.8])  # the four closest to 0.5 have p(1 - p) highest
    assert buffer.issubset(set(torch.argsort(-(p * (1 - p)))[:5].tolist()))
    inside = torch.tensor([i in buffer for i in range(40)])
    assert torch.allclose(w[inside], torch.full((4,), 0.5 / 4 + 0.5 / 40))
    assert torch.allclose(w[~inside], torch.full((36,), 0.5 / 40)) and math.isclose(float(w.sum()), 1.0, rel_tol=1e-5)
    picks = s.pick_batch(torch.arange(40), 1, torch.ones(4000, dtype=torch.bool), g)
    share = torch.isin(picks, torch.tensor(sorted(buffer))).float().mean()
    assert 0.55 - 0.04 < float(share) < 0.55 + 0.04  # 0.5 replayed + 0.5 x 4/40 uniform
    shard = torch.arange(20, 40)  # a rank's shard without buffer tasks: uniform over it
    assert torch.allclose(s.weights([ids[i] for i in range(20, 40)]), torch.full((20,), 1 / 20))
    assert torch.isin(s.pick_batch(shard, 1, torch.ones(50, dtype=torch.bool), g), shard).all()


def test_sfl_measures_learnability_on_the_window_since_the_last_refresh():
    ids = [f"t{i}" for i in range(4)]
    s = SamplingForLearnability(buffer_size=1, refresh_episodes=8, seed=0)
    s.bind(ids, CPU)
    s.record_batch(torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]), torch.tensor([1.0, 0, 1, 0, 1, 1, 1, 1]))
    s.weights(ids)  # learns: task 0 passes half the time, task 1 always
    assert s.in_buffer.tolist() == [1.0, 0.0, 0.0, 0.0]
    # the policy improved: task 0 now always passes, task 1 half the time; old episodes do not count
    s.record_batch(torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]), torch.tensor([1.0, 1, 1, 1, 1, 0, 1, 0]))
    s.weights(ids)
    assert s.in_buffer.tolist() == [0.0, 1.0, 0.0, 0.0] and s.learnability[1] == 0.25 and s.learnability[0] == 0.0
    assert s.attempts.tolist() == [8.0, 8.0, 0.0, 0.0]  # the counts are cumulative (what sync adds)


def test_sfl_ranks_refresh_to_the_same_buffer_from_the_union_of_their_episodes():
    ids, rates = workload()
    ranks = [SamplingForLearnability(buffer_size=5, refresh_episodes=300, seed=r) for r in range(2)]
    for s in ranks:
        s.bind(ids, CPU)
    for rnd in range(3):
        for r, s in enumerate(ranks):  # disjoint shards, different episodes, each below the threshold alone
            shard = torch.arange(r, 40, 2)
            task = s.pick_batch(shard, rnd, torch.ones(100, dtype=torch.bool), torch.Generator().manual_seed(10 * rnd + r))
            gen = torch.Generator().manual_seed(100 * rnd + r)
            s.record_batch(task, (torch.rand(100, generator=gen) < rates[task]).float())
        sync_as_ranks(ranks)
    a, b = ranks
    assert a.signals()["refreshes"] == 1 and b.signals()["refreshes"] == 1  # 600 union episodes: one refresh
    for name in ("attempts", "passes", "picks", "in_buffer", "learnability", "mark_attempts"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert set(torch.nonzero(a.in_buffer).flatten().tolist()) <= set(range(6))
    assert torch.equal(a.weights(ids), b.weights(ids))


def test_sfl_lands_more_rollouts_on_informative_tasks_than_round_robin():
    share = {}
    for name, make in (("rr", RoundRobin), ("sfl", lambda: SamplingForLearnability(buffer_size=6, refresh_episodes=100,
                                                                                   seed=0))):
        sampler = make()
        if name == "rr":
            sampler.bind(workload()[0], CPU)
        share[name] = informative_share(simulate(sampler, 0, 1000, in_flight=8))
    assert share["rr"] < 0.2 and share["sfl"] > 0.3, share  # 6/40 = 0.15 uniformly; shards of 8 dilute the buffer


def test_sfl_bad_settings_are_one_clear_error():
    for kw, match in (({"buffer_size": 0}, "buffer_size"), ({"refresh_episodes": 1.5}, "refresh_episodes"),
                      ({"replay_prob": 1.2}, "replay_prob"), ({"pass_threshold": 0}, "pass_threshold")):
        with pytest.raises(ValueError, match=match):
            SamplingForLearnability(**kw)
