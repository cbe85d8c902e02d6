"""GAE against a plain per-actor reference loop; minibatch indices."""

import torch

from parlightning.buffer import RolloutBuffer, compute_gae


def _reference_gae(rewards, values, term, trunc, trunc_values, next_value, gamma, lam):
    """One actor at a time, one step at a time, in plain Python floats."""
    T, N = rewards.shape
    adv = torch.zeros(T, N, dtype=torch.float64)
    for n in range(N):
        running = 0.0
        for t in reversed(range(T)):
            if term[t, n]:
                nxt, running = 0.0, 0.0
            elif trunc[t, n]:
                nxt, running = float(trunc_values[t, n]), 0.0
            else:
                nxt = float(next_value[n]) if t == T - 1 else float(values[t + 1, n])
            delta = float(rewards[t, n]) + gamma * nxt - float(values[t, n])
            running = delta + gamma * lam * running
            adv[t, n] = running
    return adv


def test_gae_matches_reference_with_terminations_and_truncations():
    g = torch.Generator().manual_seed(0)
    T, N = 17, 6
    rewards, values = torch.randn(T, N, generator=g), torch.randn(T, N, generator=g)
    u = torch.rand(T, N, generator=g)
    term, trunc = u < 0.15, (u >= 0.15) & (u < 0.25)
    trunc_values, next_value = torch.randn(T, N, generator=g), torch.randn(N, generator=g)
    adv, ret = compute_gae(rewards, values, term, trunc, trunc_values, next_value, 0.97, 0.9)
    ref = _reference_gae(rewards, values, term, trunc, trunc_values, next_value, 0.97, 0.9)
    assert term.any() and trunc.any()
    torch.testing.assert_close(adv.double(), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ret, adv + values)


def test_truncation_bootstraps_and_termination_does_not():
    ones = torch.ones(1, 1)
    zeros_b = torch.zeros(1, 1, dtype=torch.bool)
    adv_term, _ = compute_gae(ones, torch.zeros(1, 1), ~zeros_b, zeros_b, torch.full((1, 1), 5.0), torch.full((1,), 9.0), 0.5, 1.0)
    adv_trunc, _ = compute_gae(ones, torch.zeros(1, 1), zeros_b, ~zeros_b, torch.full((1, 1), 5.0), torch.full((1,), 9.0), 0.5, 1.0)
    adv_live, _ = compute_gae(ones, torch.zeros(1, 1), zeros_b, zeros_b, torch.full((1, 1), 5.0), torch.full((1,), 9.0), 0.5, 1.0)
    assert adv_term.item() == 1.0  # no bootstrap
    assert adv_trunc.item() == 1.0 + 0.5 * 5.0  # V(final obs of the cut episode)
    assert adv_live.item() == 1.0 + 0.5 * 9.0  # V(next obs)


def test_actors_never_mix():
    T, N = 8, 3
    rewards = torch.zeros(T, N)
    rewards[:, 1] = 1.0  # only actor 1 is rewarded
    z = torch.zeros(T, N, dtype=torch.bool)
    adv, _ = compute_gae(rewards, torch.zeros(T, N), z, z, torch.zeros(T, N), torch.zeros(N), 0.99, 0.95)
    assert (adv[:, 0] == 0).all() and (adv[:, 2] == 0).all() and (adv[:, 1] > 0).all()


def test_minibatch_indices_cover_each_epoch_once():
    buf = RolloutBuffer(4, 6, (3,), (), torch.device("cpu"))
    seen = {}
    for epoch, idx in buf.minibatch_indices(3, 4, torch.Generator().manual_seed(0)):
        seen.setdefault(epoch, []).append(idx)
    assert sorted(seen) == [0, 1, 2]
    for batches in seen.values():
        assert len(batches) == 4 and all(b.numel() == 6 for b in batches)
        assert torch.equal(torch.cat(batches).sort().values, torch.arange(24))
    assert not torch.equal(torch.cat(seen[0]), torch.cat(seen[1]))  # reshuffled per epoch


def test_a_per_step_field_is_one_line_in_the_table(monkeypatch):
    """STEP_FIELDS drives allocation, writes and minibatches: a new optional batch column (an action
    mask, say) is allocated by its first write and reaches `flat` without any other change."""
    from parlightning.buffer import STEP_FIELDS, Field

    monkeypatch.setitem(STEP_FIELDS, "action_mask", Field("action", torch.bool, batch=True, optional=True))
    buf = RolloutBuffer(3, 2, (4,), (5,), torch.device("cpu"))
    assert buf.action_mask is None and "action_mask" not in buf.flat()
    with torch.inference_mode():  # as the step loop writes
        for t in range(3):
            buf.write(t, obs=torch.full((2, 4), float(t)), actions=torch.zeros(2, 5, dtype=torch.long),
                      logprobs=torch.zeros(2), values=torch.zeros(2), action_mask=torch.ones(2, 5, dtype=torch.bool),
                      versions=t)
    assert not buf.action_mask.is_inference()  # a normal tensor, usable by the update
    flat = buf.flat()
    assert flat["action_mask"].shape == (6, 5) and bool(flat["action_mask"].all())
    assert flat["versions"].tolist() == [0, 0, 1, 1, 2, 2] and flat["obs"][:, 0].tolist() == [0, 0, 1, 1, 2, 2]
    assert set(flat) == {"obs", "actions", "logprobs", "values", "action_mask", "versions", "advantages", "returns"}
