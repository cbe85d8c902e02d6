"""Parallelism strategies: DP shards, CP leases and cross-rank agreement, TP sections, PP refusal."""

from __future__ import annotations

import io
import threading
import time

import pytest
import torch

from callbacks.block_planner import BlockPlanner
from parlightning.distribution.strategies import (
    ClusterParallel,
    DataParallel,
    ParallelStrategy,
    PipelineParallel,
    TensorParallel,
    WorkUnit,
    assign_key_sections,
    checked_plan,
    family_of,
    unit_for,
)

torch.set_num_threads(1)

TASKS = [f"{fam}-{i}" for fam in ("alpha", "beta", "gamma", "delta") for i in range(3)]  # 4 families x 3


def roundtrip(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


# -- interface ---------------------------------------------------------------------------------


def test_workunit_normalises_keys_and_rejects_a_bare_string():
    assert WorkUnit(0, ["a-0", "a-1"]).keys == ("a-0", "a-1")
    with pytest.raises(TypeError, match="sequence of task ids"):
        WorkUnit(0, "a-0")


def test_user_class_with_only_name_and_plan_is_accepted_structurally():
    class EveryoneEverything:
        name = "all"

        def plan(self, n_workers, round_index, keys):
            return [WorkUnit(w, list(keys)) for w in range(n_workers)]

    s = EveryoneEverything()
    assert isinstance(s, ParallelStrategy)
    assert unit_for(s, 3, 0, TASKS, worker=2) == WorkUnit(2, tuple(TASKS))


def test_bad_plans_are_refused_naming_the_strategy():
    class Missing:
        name = "missing"

        def plan(self, n_workers, round_index, keys):
            return [WorkUnit(0, keys[:1])]

    class Stray:
        name = "stray"

        def plan(self, n_workers, round_index, keys):
            return [WorkUnit(w, ("nope-0",)) for w in range(n_workers)]

    class Empty:
        name = "empty"

        def plan(self, n_workers, round_index, keys):
            return [WorkUnit(w, tuple(keys) if w == 0 else ()) for w in range(n_workers)]

    with pytest.raises(ValueError, match=r"Missing\(name='missing'\).*workers \[0\]"):
        unit_for(Missing(), 2, 0, TASKS, 0)
    with pytest.raises(ValueError, match=r"Stray.*not in this round's keys"):
        unit_for(Stray(), 2, 0, TASKS, 0)
    with pytest.raises(ValueError, match=r"Empty.*worker 1 no tasks"):
        unit_for(Empty(), 2, 0, TASKS, 0)
    with pytest.raises(TypeError, match="not a ParallelStrategy"):
        unit_for(object(), 2, 0, TASKS, 0)
    with pytest.raises(ValueError, match="n_workers"):
        unit_for(DataParallel(), 0, 0, TASKS, 0)
    with pytest.raises(ValueError, match="worker: 2"):
        unit_for(DataParallel(), 2, 0, TASKS, 2)
    with pytest.raises(ValueError, match="unique"):
        unit_for(DataParallel(), 2, 0, TASKS + TASKS[:1], 0)


def test_family_of():
    assert family_of("web-search-12") == "web-search"
    with pytest.raises(ValueError, match="cluster_of="):
        family_of("nodash")


# -- DP ----------------------------------------------------------------------------------------


def test_dp_shards_are_disjoint_covering_and_rotate():
    dp = DataParallel()
    plans = [checked_plan(dp, 3, r, TASKS) for r in range(4)]
    for plan in plans:
        flat = [k for u in plan for k in u.keys]
        assert sorted(flat) == sorted(TASKS) and len(flat) == len(TASKS)  # disjoint and covering
    assert plans[0][0].keys == tuple(TASKS[0::3])
    assert plans[1][0].keys == tuple(TASKS[1::3])  # worker 0 moved to the next shard
    assert plans[1][2].keys == tuple(TASKS[0::3])
    assert plans[3] == plans[0]  # period n_workers


def test_dp_with_fewer_tasks_than_workers_repeats_one_task_each():
    plan = checked_plan(DataParallel(), 4, 1, ["a-0", "a-1"])
    assert [u.keys for u in plan] == [("a-1",), ("a-0",), ("a-1",), ("a-0",)]


# -- the example custom strategy --------------------------------------------------------------


def test_block_planner_contiguous_sorted_balanced_not_rotating():
    keys = [f"t-{i}" for i in (6, 0, 5, 1, 4, 2, 3)]  # shuffled; 7 tasks over 3 workers
    p0 = checked_plan(BlockPlanner(), 3, 0, keys)
    assert [u.keys for u in p0] == [("t-0", "t-1", "t-2"), ("t-3", "t-4"), ("t-5", "t-6")]
    assert checked_plan(BlockPlanner(), 3, 5, keys) == p0
    assert unit_for(BlockPlanner(), 3, 0, keys, 1).keys == ("t-3", "t-4")
    assert [u.keys for u in checked_plan(BlockPlanner(), 3, 0, ["t-1", "t-0"])] == [("t-0",), ("t-1",), ("t-0",)]


# -- CP ----------------------------------------------------------------------------------------


def feed(cp, family, scores):
    for i, s in enumerate(scores):
        cp.observe(None, f"{family}-{i % 3}", s)


def test_cp_leases_whole_clusters_by_family_one_per_worker():
    cp = ClusterParallel()
    plan = checked_plan(cp, 2, 0, TASKS)
    assert cp.clusters == ["alpha", "beta", "delta", "gamma"]  # registry: sorted
    for u in plan:
        assert len(cp.leased_clusters(u)) == 1  # a whole cluster, nothing else
        assert len(u.keys) == 3
    assert set(plan[0].keys).isdisjoint(plan[1].keys)
    # untried clusters tie; ties break by registry order
    assert [cp.leased_clusters(u) for u in plan] == [["alpha"], ["beta"]]


def test_cp_difficulty_filter_ranks_informative_above_all_pass_and_all_fail():
    cp = ClusterParallel()
    cp.bind(TASKS)
    feed(cp, "alpha", [1.0] * 12)  # all pass
    feed(cp, "beta", [0.0] * 12)  # all fail
    feed(cp, "gamma", [0.0, 1.0] * 6)  # half solved: the learning signal
    feed(cp, "delta", [1.0, 1.0, 1.0, 0.0] * 3)  # mostly solved
    cp.sync()
    score = dict(zip(cp.clusters, cp.scores().tolist()))
    bonus = 1.4 * (torch.log1p(torch.tensor(48.0)) / 13).sqrt().item()
    assert score["gamma"] == pytest.approx(1.0 + bonus)
    assert score["delta"] == pytest.approx(0.75 + bonus)
    assert score["alpha"] == pytest.approx(bonus) and score["beta"] == pytest.approx(bonus)
    plan = checked_plan(cp, 2, 1, TASKS)
    assert [cp.leased_clusters(u) for u in plan] == [["gamma"], ["delta"]]


def test_cp_difficulty_filter_reads_outcome_spread_not_mean_score():
    """Graded scores: a cluster whose episodes all score 0.5, or one always-solved plus one
    never-solved task, gives every rollout of a task the same advantage (no gradient): signal 0.
    A mean-score filter (4 m (1 - m) of the cluster mean) scored both 1, above a really mixed one."""
    cp = ClusterParallel()
    cp.bind(TASKS)
    feed(cp, "alpha", [0.5] * 12)  # every episode the same partial score
    for i in range(6):  # beta-0 always solved, beta-1 never: the cluster mean is 0.5
        cp.observe(None, "beta-0", 1.0)
        cp.observe(None, "beta-1", 0.0)
    feed(cp, "gamma", [0.25, 0.75] * 6)  # each task's episodes differ: spread 0.0625 per task
    cp.sync()
    score = dict(zip(cp.clusters, cp.scores().tolist()))
    bonus = 1.4 * (torch.log1p(torch.tensor(36.0)) / 13).sqrt().item()
    assert score["alpha"] == pytest.approx(bonus) and score["beta"] == pytest.approx(bonus)
    assert score["gamma"] == pytest.approx(4 * 0.0625 + bonus)
    assert score["delta"] > score["gamma"]  # untried: optimistic
    plan = checked_plan(cp, 2, 1, TASKS)
    assert [cp.leased_clusters(u) for u in plan] == [["delta"], ["gamma"]]


def test_cp_unobserved_cluster_keeps_an_exploration_bonus():
    cp = ClusterParallel()
    cp.bind(TASKS)
    feed(cp, "alpha", [0.0, 1.0] * 30)  # lots of evidence, maximally informative
    feed(cp, "beta", [0.0, 1.0] * 30)
    feed(cp, "gamma", [1.0] * 60)
    cp.sync()
    score = dict(zip(cp.clusters, cp.scores().tolist()))
    assert score["delta"] > score["alpha"] > score["gamma"]  # never tried beats well-known
    assert cp.leased_clusters(checked_plan(cp, 1, 1, TASKS)[0]) == ["delta"]


def test_cp_plans_identical_across_ranks_after_merging_stats():
    rank0, rank1 = ClusterParallel(), ClusterParallel()
    for cp in (rank0, rank1):
        cp.bind(TASKS)
        assert checked_plan(cp, 2, 0, TASKS)  # round 0 registers the same clusters
    feed(rank0, "alpha", [1.0] * 8)  # different local observations on each rank
    feed(rank0, "gamma", [0.0, 1.0])
    feed(rank1, "gamma", [1.0, 0.0] * 4)
    feed(rank1, "delta", [0.0] * 5)
    # before sync the plans use only agreed statistics, so they already agree
    assert checked_plan(rank0, 2, 1, TASKS) == checked_plan(rank1, 2, 1, TASKS)
    summed = rank0.stats_tensor() + rank1.stats_tensor()  # what all_reduce(SUM) hands back
    rank0.merge_stats(summed.clone())
    rank1.merge_stats(summed.clone())
    p0, p1 = checked_plan(rank0, 2, 1, TASKS), checked_plan(rank1, 2, 1, TASKS)
    assert p0 == p1
    assert torch.equal(rank0.scores(), rank1.scores())
    # the merged plan differs from what either rank would plan alone
    alone = ClusterParallel()
    alone.bind(TASKS)
    feed(alone, "alpha", [1.0] * 8)
    feed(alone, "gamma", [0.0, 1.0])
    alone.sync()
    assert [alone.leased_clusters(u) for u in checked_plan(alone, 2, 1, TASKS)] != [
        rank0.leased_clusters(u) for u in p0
    ]
    # after the sync the pending increments are retired: a second sync adds nothing
    assert torch.count_nonzero(rank0.stats_tensor()) == 0


def test_cp_observation_between_stats_tensor_and_merge_is_kept():
    cp = ClusterParallel()
    cp.bind(TASKS)
    feed(cp, "alpha", [1.0])
    inc = cp.stats_tensor()
    feed(cp, "beta", [0.0])  # arrives while the all_reduce is in flight
    cp.merge_stats(inc)
    assert cp.stats_tensor()[cp.tasks.index("beta-0")].tolist() == [1.0, 1.0, 1.0]  # (episodes, room, room^2)


def test_cp_new_clusters_planned_while_a_sync_is_in_flight():
    cp = ClusterParallel()
    cp.bind(TASKS[:6])  # alpha, beta
    feed(cp, "alpha", [0.0])
    inc = cp.stats_tensor()
    checked_plan(cp, 2, 1, TASKS)  # registers gamma, delta: the stats grow to 4 rows
    cp.merge_stats(inc)
    assert cp.state_dict()["stats"].tolist() == [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
    assert torch.count_nonzero(cp.stats_tensor()) == 0


def test_cp_load_keeps_the_saved_registry_order():
    cp = ClusterParallel()
    cp.bind(["zeta-0"])
    cp.bind(TASKS)  # registry: zeta, then alpha beta delta gamma
    fresh = ClusterParallel()
    fresh.load_state_dict(roundtrip(cp.state_dict()))
    assert fresh.clusters == cp.clusters == ["zeta", "alpha", "beta", "delta", "gamma"]
    assert checked_plan(fresh, 2, 0, TASKS + ["zeta-0"]) == checked_plan(cp, 2, 0, TASKS + ["zeta-0"])


def test_cp_observe_batch_matches_observe_and_needs_bind():
    one, batch, named = ClusterParallel(), ClusterParallel(), ClusterParallel()
    for cp in (one, batch, named):
        cp.bind(TASKS)
    idx = torch.tensor([0, 4, 4, 11, 7])
    scores = torch.tensor([1.0, 0.25, 0.5, 0.0, 1.5])  # 1.5 is clamped to 1 on the tensor path
    for i, s in zip(idx.tolist(), scores.clamp(0, 1).tolist()):
        one.observe(None, TASKS[i], s)
    batch.observe_batch(idx, scores)
    named.observe_batch([TASKS[i] for i in idx.tolist()], scores)
    assert torch.equal(one.stats_tensor(), batch.stats_tensor())
    assert torch.equal(one.stats_tensor(), named.stats_tensor())
    beta = [batch.tasks.index(t) for t in ("beta-0", "beta-1")]  # bank 4 twice: beta-1
    assert batch.stats_tensor()[beta].tolist() == [[0.0, 0.0, 0.0], [2.0, 1.25, 0.5625 + 0.25]]
    with pytest.raises(RuntimeError, match="bind"):
        ClusterParallel().observe_batch(idx, scores)


def test_cp_refuses_bad_input():
    cp = ClusterParallel()
    with pytest.raises(ValueError, match="never planned"):
        cp.observe(None, "alpha-0", 1.0)  # registration is bind/plan only, never observe
    cp.bind(TASKS)
    with pytest.raises(ValueError, match="score"):
        cp.observe(None, "alpha-0", 1.5)
    with pytest.raises(ValueError, match="c:"):
        ClusterParallel(c=-1.0)
    with pytest.raises(ValueError, match="clusters_per_worker"):
        ClusterParallel(clusters_per_worker=0)
    other = ClusterParallel()
    other.bind(TASKS[:3])
    with pytest.raises(ValueError, match="same task ids"):
        other.merge_stats(cp.stats_tensor())


def test_cp_fewer_clusters_than_workers_and_several_per_worker():
    cp = ClusterParallel(cluster_of=lambda t: t[0])  # custom axis: first letter
    plan = checked_plan(cp, 3, 0, ["a-0", "a-1", "b-0"])
    assert [u.keys for u in plan] == [("a-0", "a-1"), ("b-0",), ("a-0", "a-1")]
    cp2 = ClusterParallel(clusters_per_worker=2)
    plan2 = checked_plan(cp2, 2, 0, TASKS)
    assert [cp2.leased_clusters(u) for u in plan2] == [["alpha", "delta"], ["beta", "gamma"]]


def test_cp_thread_safe_observe_loses_no_counts():
    cp = ClusterParallel()
    cp.bind(TASKS)
    n_threads, per_thread = 6, 400

    def observer(t):
        for i in range(per_thread):
            cp.observe(None, TASKS[(t + i) % len(TASKS)], 0.5)
            if i % 40 == 0:
                cp.observe_batch(torch.tensor([t % len(TASKS)]), torch.tensor([0.0]))

    def planner():  # grows the registry (replacing the stats tensors) and syncs while others observe
        for i in range(60):
            checked_plan(cp, 2, i, TASKS + [f"new{i}-0"])
            inc = cp.stats_tensor()
            cp.merge_stats(inc)

    threads = [threading.Thread(target=observer, args=(t,)) for t in range(n_threads)]
    threads.append(threading.Thread(target=planner))
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    total = cp.state_dict()["stats"].sum(0)
    assert total.tolist() == [n_threads * (per_thread + 10), n_threads * (per_thread * 0.5 + 10)]
    assert cp.state_dict()["task_stats"][:, 2].sum() == n_threads * (per_thread * 0.25 + 10)


def test_cp_state_dict_round_trip_weights_only():
    """A rank's state is exact: agreed statistics, and its increments since the last sync stay
    pending (all-reduced at the next sync, once: each rank reloads its own)."""
    cp = ClusterParallel()
    cp.bind(TASKS)
    feed(cp, "gamma", [0.0, 1.0, 1.0])
    cp.sync()
    feed(cp, "alpha", [0.0])  # pending at checkpoint time
    state = roundtrip(cp.state_dict())
    fresh = ClusterParallel()
    fresh.load_state_dict(state)
    fresh.bind(TASKS)
    assert torch.equal(fresh.scores(), cp.scores())  # plans read the agreed part only
    assert torch.equal(fresh.stats_tensor(), cp.stats_tensor())  # the same increments to hand out
    cp.sync()
    fresh.sync()
    assert fresh.clusters == cp.clusters
    assert torch.equal(fresh.scores(), cp.scores())
    assert checked_plan(fresh, 2, 3, TASKS) == checked_plan(cp, 2, 3, TASKS)
    assert torch.count_nonzero(fresh.stats_tensor()) == 0


def test_strategy_states_of_every_rank_combine_for_another_number_of_ranks():
    """Resuming on another number of ranks: every saved rank's pending increments are folded into
    the agreed statistics once (none lost, none counted twice)."""
    ranks = [ClusterParallel() for _ in range(2)]
    for cp in ranks:
        cp.bind(TASKS)
    feed(ranks[0], "gamma", [0.0, 1.0])
    summed = ranks[0].stats_tensor() + ranks[1].stats_tensor()
    for cp in ranks:
        cp.merge_stats(summed.clone())
    feed(ranks[0], "alpha", [0.0])
    feed(ranks[1], "beta", [1.0, 0.0])
    combined = ClusterParallel.combine_states([roundtrip(cp.state_dict()) for cp in ranks])
    fresh = ClusterParallel()
    fresh.load_state_dict(combined)
    fresh.bind(TASKS)
    assert torch.count_nonzero(fresh.stats_tensor()) == 0
    assert int(fresh.state_dict()["task_stats"][:, 0].sum()) == 2 + 1 + 2
    tps = [TensorParallel(2, keys=KEYS) for _ in range(2)]
    tps[0].record_updates(torch.tensor([0, 2]), 0)
    tps[1].record_updates(torch.tensor([1, 2, 3]), 1)
    one = TensorParallel(2, keys=KEYS)
    one.load_state_dict(TensorParallel.combine_states([roundtrip(tp.state_dict()) for tp in tps]))
    assert (one.updates_delivered, one.section_violations) == (1 + 2, 1 + 1)


def test_stats_can_be_fed_inside_the_rollouts_inference_mode():
    with torch.inference_mode():  # the data module calls hooks while collecting
        cp = ClusterParallel()
        cp.bind(TASKS)
        cp.observe_batch(torch.tensor([0, 4]), torch.tensor([1.0, 0.0]))
        tp = TensorParallel(2, keys=["alpha", "beta", "gamma", "delta"])
        tp.record_updates(torch.tensor([0, 3]), 0)
    cp.observe(None, "alpha-0", 0.5)  # in-place updates outside it must still work
    cp.sync()
    tp.record_updates(torch.tensor([1]), 0)
    tp.sync()
    assert cp.state_dict()["stats"].sum(0).tolist() == [3.0, 1.5]
    assert (tp.updates_delivered, tp.section_violations) == (2, 1)


# -- TP ----------------------------------------------------------------------------------------

KEYS = ["alpha", "beta", "gamma", "delta"]  # the artifact key space: rows of a per-key table


def test_assign_key_sections_is_a_balanced_deterministic_partition():
    keys = [f"k{i}" for i in range(10)]
    parts = assign_key_sections(keys, 4)
    assert [len(p) for p in parts] == [3, 3, 2, 2]
    assert [k for p in parts for k in p] == keys  # covering, disjoint, declared order
    assert assign_key_sections(keys, 4) == parts
    assert all(len(p) == 1 for p in assign_key_sections(keys, 10))
    with pytest.raises(ValueError, match="owning nothing"):
        assign_key_sections(keys, 11)


def test_tp_refusals_name_the_fix():
    with pytest.raises(ValueError, match="no declared key space.*keys="):
        TensorParallel(2).validate(2)
    with pytest.raises(ValueError, match="no declared key space"):
        unit_for(TensorParallel(2), 2, 0, TASKS, 0)  # checked before planning
    with pytest.raises(ValueError, match="n_sections=5 is greater than the 4 declared keys"):
        TensorParallel(5, keys=KEYS).validate(5)
    with pytest.raises(ValueError, match="set n_sections=2"):
        unit_for(TensorParallel(4, keys=KEYS), 2, 0, TASKS, 0)
    with pytest.raises(ValueError, match="unique"):
        TensorParallel(2, keys=["a", "a"])
    tp = TensorParallel(2, keys=KEYS, route=lambda t: "omega")
    with pytest.raises(ValueError, match="'omega', which is not a declared key"):
        tp.plan(2, 0, TASKS)
    starved = TensorParallel(2, keys=KEYS, route=family_of)
    with pytest.raises(ValueError, match="no task routes to section 1"):
        starved.plan(2, 0, [t for t in TASKS if family_of(t) in ("alpha", "beta")])


def test_tp_rows_and_masks():
    tp = TensorParallel(2, keys=KEYS)
    assert tp.sections == [("alpha", "beta"), ("gamma", "delta")]
    assert tp.section_rows(1) == [2, 3]
    assert tp.key_index("gamma") == 2 and tp.section_of_key("beta") == 0
    rows = torch.tensor([[0, 3], [2, 1]])
    assert tp.violation_mask(rows, 0).tolist() == [[False, True], [True, False]]
    with pytest.raises(ValueError, match=r"TensorParallel.section_rows\(section\): must be an integer in 0..1 .*got 2"):
        tp.section_rows(2)
    with pytest.raises(ValueError, match="'omega' is not in the declared key space"):
        tp.key_index("omega")


def tp_episodes(tp, n_workers=2):
    """Every worker rolls out each task in its unit once; count the table rows it updates."""
    for unit in checked_plan(tp, n_workers, 0, TASKS):
        rows = torch.tensor([tp.key_index(family_of(t)) for t in unit.keys])
        tp.record_updates(rows, unit.section)
    tp.sync()
    return tp.updates_delivered, tp.section_violations


def test_tp_route_delivers_everything_and_no_route_counts_violations():
    routed = TensorParallel(2, keys=KEYS, route=family_of)
    plan = checked_plan(routed, 2, 0, TASKS)
    assert [u.section for u in plan] == [0, 1]
    assert {family_of(t) for t in plan[0].keys} == {"alpha", "beta"}  # tasks go to their section's owner
    assert tp_episodes(routed) == (12, 0)
    # without route the tasks are DP-sharded: TASKS[0::2] = alpha0 alpha2 beta1 gamma0 gamma2 delta1, so
    # worker 0 (alpha, beta) violates on 3 and worker 1 (gamma, delta) on 3
    unrouted = TensorParallel(2, keys=KEYS)
    assert [u.keys for u in checked_plan(unrouted, 2, 0, TASKS)] == [tuple(TASKS[0::2]), tuple(TASKS[1::2])]
    assert tp_episodes(unrouted) == (6, 6)


def test_tp_record_updates_returns_in_section_mask():
    tp = TensorParallel(2, keys=KEYS)
    inside = tp.record_updates(torch.tensor([0, 1, 2, 3, 3]), section=1)
    assert inside.tolist() == [False, False, True, True, True]
    assert (tp.updates_delivered, tp.section_violations) == (3, 2)


def test_tp_gradient_mask_keeps_only_owned_rows():
    tp = TensorParallel(2, keys=KEYS)
    table = torch.nn.Parameter(torch.zeros(4, 3))
    handle = tp.register_gradient_mask(table, section=1, world_size=2)
    (table * torch.arange(1.0, 5.0).unsqueeze(1)).sum().backward()
    assert table.grad[:, 0].tolist() == [0.0, 0.0, 6.0, 8.0]  # owned rows x world_size
    handle.remove()
    with pytest.raises(ValueError, match="one row per key"):
        tp.register_gradient_mask(torch.nn.Parameter(torch.zeros(5, 3)), 0)


def test_tp_counters_state_dict_round_trip():
    tp = TensorParallel(2, keys=KEYS)
    tp.record_updates(torch.tensor([0, 2]), 0)
    fresh = TensorParallel(2, keys=KEYS)
    fresh.load_state_dict(roundtrip(tp.state_dict()))
    assert (fresh.updates_delivered, fresh.section_violations) == (1, 1)
    assert fresh.stats_tensor().tolist() == [1, 1]  # still this rank's to all-reduce at the next sync
    fresh.sync()
    assert (fresh.updates_delivered, fresh.section_violations) == (1, 1)
    assert torch.count_nonzero(fresh.stats_tensor()) == 0
    old = TensorParallel(2, keys=KEYS)  # a checkpoint of an older release: one agreed [2] tensor
    old.load_state_dict({"counters": torch.tensor([4, 2])})
    assert (old.updates_delivered, old.section_violations) == (4, 2)


# -- PP ----------------------------------------------------------------------------------------


def test_pp_is_refused_with_the_reason_and_the_alternative():
    with pytest.raises(ValueError, match="one artifact per stage.*no stage chain.*DataParallel"):
        PipelineParallel(n_stages=2)
    with pytest.raises(ValueError, match="refused"):
        PipelineParallel.plan(object.__new__(PipelineParallel), 2, 0, TASKS)


# -- two real gloo ranks: the wiring the Lightning callbacks use ---------------------------------


class _Keyed(torch.nn.Module):
    """A shared trunk over a per-key table (one row per artifact key)."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = torch.nn.Linear(3, 1)
        self.table = torch.nn.Embedding(4, 3)

    def forward(self, rows):
        return self.trunk(self.table(rows))


def _ddp_worker(rank: int, world: int, store: str, out: dict) -> None:
    import datetime

    import torch.distributed as dist

    torch.set_num_threads(1)
    # a file store, not a TCP port: no free-port race with the other tests running beside this one
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    try:
        # CP: different local observations, all_reduce(SUM) of the increments, identical plans
        cp = ClusterParallel()
        cp.bind(TASKS)
        cp.observe_batch(torch.tensor([rank * 3, rank * 3 + 1]), torch.tensor([float(rank), 0.5]))
        inc = cp.stats_tensor()
        dist.all_reduce(inc, op=dist.ReduceOp.SUM)
        cp.merge_stats(inc)
        plan = [u.keys for u in checked_plan(cp, world, 1, TASKS)]

        # TP: a shared trunk + per-key table; the hook masks before DDP's mean all-reduce
        tp = TensorParallel(world, keys=KEYS, route=family_of)
        unit = unit_for(tp, world, 0, TASKS, rank)
        torch.manual_seed(0)
        model = _Keyed()
        before = model.table.weight.detach().clone()
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        tp.register_gradient_mask(model.table.weight, unit.section, world)  # after wrapping, as in Lightning
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        rows = torch.arange(4)  # every rank touches every row: half are out of section
        tp.record_updates(rows, unit.section)
        loss = ddp(rows).sum() * (rank + 1)
        loss.backward()
        opt.step()
        changed = (model.table.weight.detach() != before).any(1)
        params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        counters = tp.stats_tensor()
        dist.all_reduce(counters, op=dist.ReduceOp.SUM)
        tp.merge_stats(counters)
        out.put((rank, plan, changed.tolist(), params.tolist(), tp.section_violations))  # plain data: no shared memory
        # DDP's reducer holds the process group: freed first, and no rank tears the group down while the other is
        # still in a collective (a rank that did died once in gloo's teardown: "terminate called without an
        # active exception", SIGABRT)
        del ddp, opt, loss
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _owner_only_table_update():
    """The same step by one process: each row gets exactly its owner's gradient (rank + 1 scale)."""
    torch.manual_seed(0)
    model = _Keyed()
    w = model.trunk.weight.detach()
    scale = torch.tensor([1.0, 1.0, 2.0, 2.0]).unsqueeze(1)  # rows 0-1 owned by rank 0, 2-3 by rank 1
    return model.table.weight.detach() - 0.1 * scale * w


def test_two_gloo_ranks_agree_on_cp_plan_and_tp_union(tmp_path):
    import torch.multiprocessing as mp

    # spawn, not fork: forking a pytest process that may hold threads can deadlock the children
    out = mp.get_context("spawn").SimpleQueue()
    ctx = mp.start_processes(_ddp_worker, args=(2, str(tmp_path / "store"), out), nprocs=2, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + 120
    while not ctx.join(timeout=1):  # re-raises a rank's exception
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail("the 2-rank gloo run did not finish in 120 s")
    results = dict((r[0], r[1:]) for r in (out.get(), out.get()))
    (plan0, changed0, params0, viol0), (plan1, changed1, params1, viol1) = results[0], results[1]
    params0, params1 = torch.tensor(params0), torch.tensor(params1)
    assert plan0 == plan1
    assert torch.equal(params0, params1)  # every rank holds the same union
    assert changed0 == changed1 == [True, True, True, True]  # each row updated, by its owner only
    assert viol0 == viol1 == 4  # 2 rows outside its section per rank, summed across ranks
    # parameters() order: trunk.weight [1, 3], trunk.bias [1], table.weight [4, 3]
    assert torch.allclose(params0[4:].reshape(4, 3), _owner_only_table_update(), atol=1e-6)
