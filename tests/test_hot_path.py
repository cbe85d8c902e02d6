"""Hot-path hygiene: no host synchronisation inside the rollout's step loop.

Every Tensor method and torch function that reads values onto the host (`item`, `tolist`, `cpu`,
`numpy`, bool/int/float conversion, printing, data-dependent shapes such as `nonzero` or a boolean
mask index) is wrapped to count its calls while the step loop (`StepLoop.run_steps`) runs. A real
collection must make none; an env that reads one value per step must be caught.
"""

from collections import Counter

import lightning.pytorch as pl
import pytest
import torch

from parlightning.collection import StepLoop
from parlightning.ppo.data import RolloutDataModule
from parlightning.envs.swarm import SwarmEnv
from parlightning.ppo.module import PPOModule
from parlightning.distribution.samplers import DifficultyWeighted, PosteriorSignal, RoundRobin, SamplingForLearnability

TENSOR_SYNCS = ("item", "tolist", "cpu", "numpy", "nonzero", "masked_select", "unique",
                "__bool__", "__int__", "__float__", "__index__", "__repr__", "__format__")
TORCH_SYNCS = ("nonzero", "masked_select", "unique", "equal", "is_nonzero", "argwhere")


class SyncCounter:
    """Counts host-reading calls, only while `active` (set around the step loop)."""

    def __init__(self) -> None:
        self.calls: Counter = Counter()
        self.active = False
        self.loops = 0
        self.env_steps = 0

    def wrap(self, name, fn):
        def counted(*args, **kwargs):
            if self.active:
                self.calls[name] += 1
            return fn(*args, **kwargs)

        return counted

    def wrap_index(self, name, fn):
        """Indexing with a boolean mask has a data-dependent shape: a sync on CUDA."""

        def counted(tensor, index, *rest):
            if self.active:
                parts = index if isinstance(index, tuple) else (index,)
                if any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts):
                    self.calls[name + "[bool mask]"] += 1
            return fn(tensor, index, *rest)

        return counted


@pytest.fixture
def counter(monkeypatch):
    c = SyncCounter()
    for name in TENSOR_SYNCS:
        monkeypatch.setattr(torch.Tensor, name, c.wrap(f"Tensor.{name}", getattr(torch.Tensor, name)))
    for name in TORCH_SYNCS:
        monkeypatch.setattr(torch, name, c.wrap(f"torch.{name}", getattr(torch, name)))
    for name in ("__getitem__", "__setitem__"):
        monkeypatch.setattr(torch.Tensor, name, c.wrap_index(f"Tensor.{name}", getattr(torch.Tensor, name)))

    run_steps = StepLoop.run_steps

    def counted_steps(self, *args, **kwargs):
        c.active, c.loops = True, c.loops + 1
        try:
            return run_steps(self, *args, **kwargs)
        finally:
            c.active = False

    monkeypatch.setattr(StepLoop, "run_steps", counted_steps)
    step = SwarmEnv.step

    def counted_env_step(self, *args, **kwargs):
        c.env_steps += c.active
        return step(self, *args, **kwargs)

    monkeypatch.setattr(SwarmEnv, "step", counted_env_step)
    return c


def _collect(env_class, sampler, rounds):
    """`rounds` rollouts of 8 steps through a real Trainer (each after a policy update)."""
    env = lambda n, device, seed: env_class(num_envs=n, device=device, seed=seed)  # noqa: E731
    dm = RolloutDataModule(env=env, num_envs=16, num_steps=8, update_epochs=1, num_minibatches=2, sampler=sampler)
    trainer = pl.Trainer(max_epochs=rounds, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(PPOModule(anneal_lr=False), datamodule=dm)


@pytest.mark.parametrize(
    "sampler", [RoundRobin(), DifficultyWeighted(pass_threshold=1.0, seed=0), PosteriorSignal(pass_threshold=1.0, seed=0),
                SamplingForLearnability(pass_threshold=1.0, refresh_episodes=8, seed=0)],
    ids=["round_robin", "difficulty_weighted", "posterior_signal", "sampling_for_learnability"],
)
def test_the_step_loop_never_reads_a_tensor_on_the_host(counter, sampler):
    _collect(SwarmEnv, sampler, rounds=2)
    assert counter.loops == 2 and counter.env_steps == 2 * 8  # the counted region is the whole step loop
    assert counter.calls == Counter(), f"host syncs inside the step loop: {dict(counter.calls)}"


class ChattyEnv(SwarmEnv):
    """Reads one number on the host per step, as a debugging print or a Python branch would."""

    def step(self, action, next_task=None):
        res = super().step(action, next_task)
        if res.reward.sum() > 1e9:  # Tensor.__bool__: a sync
            raise AssertionError("unreachable")
        return res


def test_a_sync_in_the_env_step_is_caught(counter):
    _collect(ChattyEnv, RoundRobin(), rounds=1)
    assert counter.calls == Counter({"Tensor.__bool__": 8})


def _bool_mask_write(t, mask):
    t[mask] = 0.0


HOST_READS = [
    (lambda t, m: t.sum().item(), "Tensor.item"),
    (lambda t, m: t.tolist(), "Tensor.tolist"),
    (lambda t, m: float(t[0]), "Tensor.__float__"),
    (lambda t, m: bool(t[1]), "Tensor.__bool__"),
    (lambda t, m: t.cpu(), "Tensor.cpu"),
    (lambda t, m: torch.nonzero(t), "torch.nonzero"),
    (lambda t, m: t[m], "Tensor.__getitem__[bool mask]"),
    (_bool_mask_write, "Tensor.__setitem__[bool mask]"),
    (lambda t, m: str(t), "Tensor.__repr__"),  # what print() calls
]


@pytest.mark.parametrize("read, name", HOST_READS, ids=[name for _, name in HOST_READS])
def test_the_counter_sees_each_kind_of_host_read(counter, read, name):
    t, mask = torch.arange(4.0), torch.tensor([True, False, True, False])
    read(t, mask)  # inactive: not counted
    assert counter.calls == Counter()
    counter.active = True
    read(t, mask)
    counter.active = False
    assert counter.calls[name] >= 1


def test_the_fast_categorical_head_samples_each_dimension_from_its_softmax():
    """The rollout's sampler (inverse CDF over a [category, dim, batch] layout) draws every
    dimension of a padded multi-discrete action from its own softmax and never picks padding."""
    from parlightning.envs.base import ActionSpec
    from parlightning.policies.actor_critic import ActorCritic

    nvec = (3, 5, 2)
    net = ActorCritic((2,), ActionSpec("multi_discrete", nvec=nvec), (8,), "relu")
    bias = torch.tensor([0.0, 1.0, 2.0, 2.0, 0.0, -1.0, 0.5, 1.0, -3.0, 3.0])
    with torch.no_grad():
        net.actor[-1].bias.copy_(bias)
        net.actor[-1].weight.zero_()
    n = 40000
    action, logprob, _ = net.act(torch.zeros(n, 2), torch.Generator().manual_seed(1))
    assert action.shape == (n, 3) and action.is_contiguous()
    for d, logits in enumerate(bias.split(nvec)):
        freq = torch.bincount(action[:, d], minlength=nvec[d]).float() / n
        assert freq.numel() == nvec[d]  # nothing past the dimension's last category
        torch.testing.assert_close(freq, torch.softmax(logits, 0), atol=0.012, rtol=0)
    expected = sum(torch.log_softmax(z, 0)[action[:, d]] for d, z in enumerate(bias.split(nvec)))
    torch.testing.assert_close(logprob, expected, atol=1e-5, rtol=1e-5)
