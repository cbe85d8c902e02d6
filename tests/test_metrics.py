"""CriticalSteps and stage_critical_steps against a plain Python loop; DDP (gloo) reduction."""

import io
import os
import socket
import time
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from parlightning.parl.metrics import CriticalSteps, stage_critical_steps

torch.set_num_threads(1)


def ragged(seed: int, e: int = 7, s: int = 5, a: int = 4):
    """Random ragged episodes: variable stage counts, empty stages, garbage (NaN, huge, negative) padding."""
    g = torch.Generator().manual_seed(seed)
    main = torch.randint(1, 3, (e, s), generator=g).double()
    sub = torch.randint(0, 9, (e, s, a), generator=g).double()
    n_stages = torch.randint(0, s + 1, (e,), generator=g)
    n_stages[0] = 0  # an episode with no stage at all
    stage_mask = torch.arange(s) < n_stages[:, None]
    sub_mask = torch.rand(e, s, a, generator=g) < 0.5
    sub_mask[:, 0] = False  # every episode's first stage has no subagent
    garbage = torch.tensor([float("nan"), 1e9, -7.0], dtype=torch.float64)
    pad = garbage[torch.randint(0, 3, (e, s, a), generator=g)]
    sub = torch.where(sub_mask & stage_mask[..., None], sub, pad)
    main = torch.where(stage_mask, main, garbage[torch.randint(0, 3, (e, s), generator=g)])
    return main, sub, stage_mask, sub_mask


def loop_reference(main, sub, stage_mask, sub_mask):
    """Per-episode (critical, serial) by plain Python loops over lists."""
    critical, serial = [], []
    for ep in range(main.shape[0]):
        c = s_ = 0.0
        for st in range(main.shape[1]):
            if not stage_mask[ep, st]:
                continue
            steps = [float(sub[ep, st, i]) for i in range(sub.shape[2]) if sub_mask[ep, st, i]]
            c += float(main[ep, st]) + (max(steps) if steps else 0.0)
            s_ += float(main[ep, st]) + sum(steps)
        critical.append(c)
        serial.append(s_)
    return critical, serial


def expected(critical, serial):
    return {
        "critical_steps": sum(critical) / len(critical),
        "serial_steps": sum(serial) / len(serial),
        "speedup": sum(serial) / sum(critical),
        "episodes": len(critical),
    }


def assert_result(result, want):
    for key, value in want.items():
        assert float(result[key]) == pytest.approx(value, rel=1e-12), key


def test_stage_critical_steps_hand_computed():
    main = torch.tensor([1.0, 1.0, 2.0])
    sub = torch.tensor([[3.0, 5.0, 99.0], [float("nan"), 0.0, 0.0], [4.0, 1.0, 2.0]])
    mask = torch.tensor([[True, True, False], [False, False, False], [True, True, True]])
    torch.testing.assert_close(stage_critical_steps(main, sub, mask), torch.tensor([6.0, 1.0, 6.0]))


def test_stage_critical_steps_without_subagent_slots_and_on_meta():
    main = torch.tensor([[1.0, 2.0]])
    out = stage_critical_steps(main, torch.zeros(1, 2, 0), torch.zeros(1, 2, 0, dtype=torch.bool))
    torch.testing.assert_close(out, main)
    # meta tensors raise on any host read: the per-step function must not need one
    m = stage_critical_steps(
        torch.empty(512, device="meta"), torch.empty(512, 8, device="meta"), torch.empty(512, 8, device="meta", dtype=torch.bool)
    )
    assert m.shape == (512,) and m.device.type == "meta"


@pytest.mark.parametrize("seed", range(5))
def test_critical_steps_matches_python_loop_on_ragged_data(seed):
    data = ragged(seed)
    critical, serial = loop_reference(*data)
    assert any(c == 0.0 for c in critical), "the generator must produce episodes with no stages"
    metric = CriticalSteps()
    metric.update(*data)
    assert_result(metric.compute(), expected(critical, serial))


def test_critical_steps_hand_computed_episode():
    # stage 0: main 1, no subagents; stage 1: main 1, subagents 3 and 5; stage 2 padding
    main = torch.tensor([[1.0, 1.0, 0.0]])
    sub = torch.tensor([[[0.0, 0.0], [3.0, 5.0], [7.0, 7.0]]])
    stage_mask = torch.tensor([[True, True, False]])
    sub_mask = torch.tensor([[[False, False], [True, True], [True, True]]])
    metric = CriticalSteps()
    metric.update(main, sub, stage_mask, sub_mask)
    out = metric.compute()
    assert float(out["critical_steps"]) == 1 + (1 + 5)
    assert float(out["serial_steps"]) == 1 + (1 + 3 + 5)
    assert float(out["speedup"]) == pytest.approx(10 / 7)


def test_update_and_update_totals_accumulate_together_and_mask_selects():
    a, b = ragged(10), ragged(11)
    ca, sa = loop_reference(*a)
    cb, sb = loop_reference(*b)
    metric = CriticalSteps()
    metric.update(*a)
    done = torch.tensor([i % 3 != 0 for i in range(len(cb))])
    # entries where done is False hold garbage the mask must drop
    crit = torch.where(done, torch.tensor(cb, dtype=torch.float64), float("nan"))
    ser = torch.where(done, torch.tensor(sb, dtype=torch.float64), 1e9)
    metric.update_totals(crit, ser, mask=done)
    keep = [i for i in range(len(cb)) if done[i]]
    assert_result(metric.compute(), expected(ca + [cb[i] for i in keep], sa + [sb[i] for i in keep]))
    # compute() is cached by torchmetrics until the next update: update_totals must invalidate it
    metric.update_totals(torch.tensor([1000.0]), torch.tensor([1000.0]))
    assert int(metric.compute()["episodes"]) == len(ca) + len(keep) + 1
    metric.reset()
    metric.update_totals(torch.tensor(cb), torch.tensor(sb))
    assert_result(metric.compute(), expected(cb, sb))


def test_compute_before_any_episode_is_nan():
    metric = CriticalSteps()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = metric.compute()
    assert torch.isnan(out["critical_steps"]) and int(out["episodes"]) == 0


def test_bad_shapes_and_masks_are_refused():
    main, sub, stage_mask, sub_mask = ragged(0)
    metric = CriticalSteps()
    with pytest.raises(ValueError, match="stage_mask"):
        metric.update(main, sub, stage_mask.float(), sub_mask)
    with pytest.raises(ValueError, match="sub_mask"):
        metric.update(main, sub, stage_mask, sub_mask[..., :2])
    with pytest.raises(ValueError, match="sub_steps"):
        metric.update(main, sub[:, :2], stage_mask, sub_mask)
    with pytest.raises(ValueError, match="main_steps"):
        metric.update(main[0], sub, stage_mask, sub_mask)
    with pytest.raises(ValueError, match=r"update_totals\(serial\): .*with E = 3 as in critical"):
        metric.update_totals(torch.ones(3), torch.ones(4))
    with pytest.raises(ValueError, match="mask"):
        metric.update_totals(torch.ones(3), torch.ones(3), mask=torch.ones(3))
    with pytest.raises(ValueError, match="not both"):
        metric.update(main, sub, stage_mask, sub_mask, critical=torch.ones(7), serial=torch.ones(7))


def test_metric_state_round_trip_weights_only():
    metric = CriticalSteps()
    metric.persistent(True)
    metric.update(*ragged(3))
    buf = io.BytesIO()
    torch.save(metric.state_dict(), buf)
    buf.seek(0)
    fresh = CriticalSteps()
    fresh.persistent(True)
    fresh.load_state_dict(torch.load(buf, weights_only=True))
    assert int(fresh.episodes) == 7
    for name in ("critical_sum", "serial_sum", "episodes"):
        torch.testing.assert_close(getattr(fresh, name), getattr(metric, name))


# -- DDP reduction (gloo, two processes) --------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_data(rank: int):
    # uneven shares: rank 0 holds 7 episodes, rank 1 holds 12 (update) + 5 totals
    return ragged(100 + rank, e=7 + 5 * rank)


def _worker(rank: int, port: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        metric = CriticalSteps()
        metric.update(*_rank_data(rank))
        if rank == 1:
            metric.update_totals(torch.arange(1.0, 6.0), torch.arange(2.0, 12.0, 2.0))
        torch.save({k: v.clone() for k, v in metric.compute().items()}, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed unavailable")
def test_ddp_reduction_equals_single_process_on_the_union(tmp_path):
    # fork (Linux) starts the ranks in well under a second; spawn re-imports torch + torchmetrics
    # per rank (5-20 s on a busy 2-core box). A deadline turns any hang into a failure.
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    ctx = mp.start_processes(_worker, args=(_free_port(), str(tmp_path)), nprocs=2, join=False, start_method=method)
    deadline = time.monotonic() + 120
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail("gloo ranks did not finish within 120 s")
    critical, serial = [], []
    for rank in range(2):
        c, s = loop_reference(*_rank_data(rank))
        critical += c
        serial += s
    critical += [1.0, 2.0, 3.0, 4.0, 5.0]
    serial += [2.0, 4.0, 6.0, 8.0, 10.0]
    want = expected(critical, serial)
    single = CriticalSteps()  # the same union in one process
    for rank in range(2):
        single.update(*_rank_data(rank))
    single.update_totals(torch.arange(1.0, 6.0), torch.arange(2.0, 12.0, 2.0))
    assert_result(single.compute(), want)
    for rank in range(2):
        assert_result(torch.load(tmp_path / f"rank{rank}.pt", weights_only=True), want)
