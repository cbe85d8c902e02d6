"""Observation and reward normalisation with Stable-Baselines3's `VecNormalize` semantics, as a world
around any `BatchedEnv` (composition: the collector, the policies and the learner do not change).

Training (`NormalizeEnv`, in YAML around the world you already have):

    data:
      env:
        class_path: parlightning.envs.NormalizeEnv
        init_args:
          env: {class_path: parlightning.envs.CartPoleEnv}
          norm_obs: true
          norm_reward: true

- observations: running mean and variance per feature over every observation the actors see
  (reset and after each step; Chan et al.'s parallel update, float64), then
  `clip((obs - mean) / sqrt(var + epsilon), -clip_obs, clip_obs)`; `final_obs` with the same stats.
- rewards: each actor's discounted return `R = gamma * R + r` (reset where an episode ends) feeds a
  running variance; the reward is divided by its standard deviation `sqrt(var + epsilon)` and clipped
  to `clip_reward` (no mean subtracted, as SB3).
- the statistics are tensors in the world's `state_dict`, so they are in every checkpoint (per rank,
  as SB3's are per process) and resume exactly.

Inference (`ObsNormalizer`): the frozen observation statistics of rank 0, read from a checkpoint by
`normalizer_from_checkpoint`; `parlightning.evaluate`, `parlightning.load_policy(...).predict` and the
`parlightning.export` program apply it with the same float32 arithmetic as training (rewards are not
normalised at evaluation: the returns reported are the world's own).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Optional

import torch
from torch import Tensor, nn

from parlightning.config_types import ClosedUnitInterval, NonNegativeFinite, PositiveFinite, PositiveInt, Seed, check_args, check_value
from parlightning.envs.base import BatchedEnv, StepResult, world_lifecycle, world_specs
from parlightning.method_args import Passed, TensorArg, check_state, checked_methods, mark
from parlightning.errors import ArgumentError, ConfigError, check_loaded_checkpoint

EnvFactory = Callable[[int, str, int], BatchedEnv]


def normalize_obs(obs: Tensor, mean: Tensor, var: Tensor, epsilon: float, clip: float) -> Tensor:
    """The one copy of the observation transform (training world, evaluate, predict and export):
    float32 stats, `clip((obs - mean) / sqrt(var + eps), -clip, clip)`. `epsilon` >= 0 and `clip` > 0
    (Python numbers: two comparisons, no tensor read)."""
    if not (isinstance(epsilon, (int, float)) and 0 <= epsilon < float("inf")):
        raise ArgumentError(f"normalize_obs(epsilon): must be a finite number >= 0, got {epsilon!r:.40}")
    if not (isinstance(clip, (int, float)) and 0 < clip < float("inf")):
        raise ArgumentError(f"normalize_obs(clip): must be a finite number > 0 (observations are clipped to "
                            f"[-clip, clip]), got {clip!r:.40}")
    return torch.clamp((obs - mean) / torch.sqrt(var + epsilon), -clip, clip)


class RunningMeanStd:
    """Running mean and (population) variance of `shape`-shaped samples, in float64 tensors on
    `device`, started at count `epsilon` (SB3's `RunningMeanStd`). Updates are tensor ops only."""

    def __init__(self, shape: tuple[int, ...], device: torch.device, epsilon: float = 1e-4) -> None:
        if isinstance(shape, int) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape):
            raise ArgumentError(f"RunningMeanStd(shape): must be a tuple of sizes >= 1 (the observation shape, e.g. "
                                f"(4,); () for a scalar), got {shape!r:.60}")
        check_value("RunningMeanStd(epsilon)", NonNegativeFinite, epsilon)
        self.mean = torch.zeros(shape, dtype=torch.float64, device=device)
        self.var = torch.ones(shape, dtype=torch.float64, device=device)
        self.count = torch.full((), epsilon, dtype=torch.float64, device=device)

    def update(self, x: Tensor) -> None:
        """Fold in a batch `x` [B, *shape]."""
        x = x.to(torch.float64)
        self.update_from_moments(x.mean(0), x.var(0, unbiased=False), x.shape[0])

    def update_from_moments(self, batch_mean: Tensor, batch_var: Tensor, batch_count: float | Tensor) -> None:
        delta = batch_mean - self.mean
        total = self.count + batch_count
        self.mean = self.mean + delta * (batch_count / total)
        m2 = self.var * self.count + batch_var * batch_count + delta.square() * (self.count * batch_count / total)
        self.var = m2 / total
        self.count = total

    def state_dict(self) -> dict[str, Tensor]:
        return {"mean": self.mean.clone(), "var": self.var.clone(), "count": self.count.clone()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        device = self.mean.device
        mean, var = state["mean"].to(device, torch.float64), state["var"].to(device, torch.float64)
        if mean.shape != self.mean.shape:
            raise ValueError(f"checkpoint normalisation statistics have shape {tuple(mean.shape)}, this world's "
                             f"observations {tuple(self.mean.shape)}: resume with the env the checkpoint was trained on")
        self.mean, self.var = mean.clone(), var.clone()
        self.count = state["count"].to(device, torch.float64).clone()


def _resolve_env(env: Any) -> EnvFactory:
    """`env` as a factory: a callable, or a `{class_path, init_args}` mapping (as YAML writes it)."""
    if callable(env):
        return env
    if isinstance(env, dict) and isinstance(env.get("class_path"), str):
        module, _, name = env["class_path"].rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError):
            raise ConfigError(f"env: cannot import {env['class_path']!r}; name the world "
                              "NormalizeEnv wraps by its import path") from None
        init_args = dict(env.get("init_args") or {})

        def factory(num_envs: int, device: str, seed: int) -> BatchedEnv:
            return cls(num_envs=num_envs, device=device, seed=seed, **init_args)

        return factory
    raise ConfigError(f"env: expected the world to wrap (a class_path with init_args), got {env!r}")


@checked_methods(**world_specs(Passed("checked by the wrapped world's own step"),
                                normalize={"obs": TensorArg("float", (..., "*observation_shape"))}),
                 lifecycle=world_lifecycle(exact=None, closes=True))
class NormalizeEnv(BatchedEnv):
    """SB3's `VecNormalize` around any `BatchedEnv` (see the module docstring).

    Args:
        num_envs, device, seed: the data module's env factory arguments, passed to `env`.
        env: the world to wrap: a factory `env(num_envs, device, seed)` (a `class_path` in YAML).
        norm_obs, norm_reward: which normalisations to apply (both on by default, as SB3).
        clip_obs, clip_reward: symmetric clips after normalising.
        gamma: discount of the running return whose std scales rewards (set it to data.gamma).
        epsilon: added to the variance before the square root.
        training: update the statistics (True) or apply them frozen (False).

    Attributes the wrapped world has (task bank, `solved_threshold`, `scripted_action`, ...) are
    read through. With a PARL `data.reward`, the bonus is added by the learner after this world, in
    its own units: reward normalisation is meant for worlds trained on their own reward.
    """

    def __init__(self, num_envs: PositiveInt, device: str | torch.device = "cpu", seed: Seed = 0, *, env: EnvFactory,
                 norm_obs: bool = True, norm_reward: bool = True, clip_obs: PositiveFinite = 10.0,
                 clip_reward: PositiveFinite = 10.0, gamma: ClosedUnitInterval = 0.99, epsilon: PositiveFinite = 1e-8,
                 training: bool = True) -> None:
        num_envs, seed, clip_obs, clip_reward, gamma, epsilon = check_args(
            "NormalizeEnv", NormalizeEnv.__init__, locals()).values()
        self.env = _resolve_env(env)(num_envs, str(device), seed)
        if isinstance(self.env, NormalizeEnv):
            raise ConfigError("env: the world is already a NormalizeEnv; wrap the world once")
        self.num_envs = int(self.env.num_envs)
        self.device = torch.device(getattr(self.env, "device", device))
        self.observation_shape = tuple(self.env.observation_shape)
        self.action_spec = self.env.action_spec
        self.norm_obs, self.norm_reward = bool(norm_obs), bool(norm_reward)
        self.clip_obs, self.clip_reward = float(clip_obs), float(clip_reward)
        self.gamma, self.epsilon, self.training = float(gamma), float(epsilon), bool(training)
        self.obs_rms = RunningMeanStd(self.observation_shape, self.device)
        self.ret_rms = RunningMeanStd((), self.device)
        self.returns = torch.zeros(self.num_envs, dtype=torch.float64, device=self.device)

    checkpoint_exact = property(lambda self: getattr(self.env, "checkpoint_exact", True))

    def __getattr__(self, name: str) -> Any:  # only for attributes this wrapper lacks: the world's own
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    def normalize(self, obs: Tensor) -> Tensor:
        """`obs` with the current statistics (unchanged when `norm_obs` is off)."""
        if not self.norm_obs:
            return obs
        return normalize_obs(obs, self.obs_rms.mean.float(), self.obs_rms.var.float(), self.epsilon, self.clip_obs)

    def reset(self, *, seed: Optional[int] = None, task_index: Optional[Tensor] = None) -> Tensor:
        obs = self.env.reset(seed=seed, task_index=task_index) if task_index is not None else self.env.reset(seed=seed)
        self.returns.zero_()
        if self.training and self.norm_obs:
            self.obs_rms.update(obs)
        return self.normalize(obs)

    def step(self, action: Tensor, next_task: Any = None) -> StepResult:
        res = self.env.step(action, next_task) if next_task is not None else self.env.step(action)
        if self.training and self.norm_obs:
            self.obs_rms.update(res.obs)
        reward = res.reward
        if self.norm_reward:
            if self.training:
                self.returns = self.returns * self.gamma + reward.to(torch.float64)
                self.ret_rms.update(self.returns)
            scale = torch.sqrt(self.ret_rms.var + self.epsilon)
            reward = torch.clamp(reward.to(torch.float64) / scale, -self.clip_reward, self.clip_reward).to(reward.dtype)
            self.returns = self.returns * ~(res.terminated | res.truncated)
        return res._replace(obs=self.normalize(res.obs), reward=reward, final_obs=self.normalize(res.final_obs))

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if callable(close):
            close()

    def state_dict(self) -> dict[str, Any]:
        """The wrapped world's state, the statistics and each actor's running return (tensors)."""
        return {"env": self.env.state_dict(), "obs_rms": self.obs_rms.state_dict(), "ret_rms": self.ret_rms.state_dict(),
                "returns": self.returns.clone(), "norm_obs": self.norm_obs, "norm_reward": self.norm_reward,
                "clip_obs": self.clip_obs, "epsilon": self.epsilon}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state("NormalizeEnv", state, self.state_dict(), skip=("env",))  # the wrapped world checks its own
        self.env.load_state_dict(state["env"])
        self.obs_rms.load_state_dict(state["obs_rms"])
        self.ret_rms.load_state_dict(state["ret_rms"])
        self.returns = state["returns"].to(self.device, torch.float64).clone()
        mark(self, "reset", bool(self.checkpoint_exact))  # an exact world's episodes are restored, else reset() again


_MEAN = TensorArg("number", finite=True, shape="same", text="the per-feature running mean")
_VAR = TensorArg("number", finite=True, shape="same", values=(0, None),
                 text="the per-feature running variance: >= 0, the mean's shape")


class ObsNormalizer(nn.Module):
    """The frozen observation transform of a trained run (float32 buffers; exported with the policy)."""

    def __init__(self, mean: Tensor, var: Tensor, epsilon: float = 1e-8, clip: float = 10.0) -> None:
        super().__init__()
        call: dict = {}  # the statistics: read once here (off the step path)
        _MEAN.check("ObsNormalizer(mean)", mean, None, call)
        _VAR.check("ObsNormalizer(var)", var, None, call)
        check_value("ObsNormalizer(epsilon)", PositiveFinite, epsilon)
        check_value("ObsNormalizer(clip)", PositiveFinite, clip)
        self.register_buffer("mean", mean.detach().to(torch.float32).clone())
        self.register_buffer("var", var.detach().to(torch.float32).clone())
        self.epsilon, self.clip = float(epsilon), float(clip)

    def forward(self, obs: Tensor) -> Tensor:
        d = self.mean.dim()  # the observation's shape against the statistics': metadata only (O(1), no host read)
        if not isinstance(obs, Tensor) or obs.dim() < d or tuple(obs.shape[obs.dim() - d:]) != tuple(self.mean.shape):
            raise ArgumentError(f"ObsNormalizer(obs): must be a tensor [..., {', '.join(map(str, self.mean.shape))}] (the "
                                f"observation shape its statistics were kept for: the same world), got "
                                f"{list(obs.shape) if isinstance(obs, Tensor) else type(obs).__name__}")
        return normalize_obs(obs, self.mean, self.var, self.epsilon, self.clip)


def saved_world_state(checkpoint: dict[str, Any]) -> Optional[dict[str, Any]]:
    """Rank 0's world state in a `parlightning.fit` checkpoint (the data module's `ranks[0]["env"]`)."""
    check_loaded_checkpoint("saved_world_state", checkpoint)
    for value in checkpoint.values():
        if isinstance(value, dict) and isinstance(value.get("ranks"), list) and value["ranks"]:
            first = value["ranks"][0]
            if isinstance(first, dict) and isinstance(first.get("env"), dict):
                return first["env"]
    return None


def normalizer_from_checkpoint(checkpoint: dict[str, Any]) -> Optional[ObsNormalizer]:
    """The frozen `ObsNormalizer` of a run trained in a `NormalizeEnv` with `norm_obs` (rank 0's
    statistics), or None when its observations were not normalised."""
    check_loaded_checkpoint("normalizer_from_checkpoint", checkpoint)
    state = saved_world_state(checkpoint)
    if state is None or "obs_rms" not in state or not state.get("norm_obs", True):
        return None
    rms = state["obs_rms"]
    return ObsNormalizer(rms["mean"], rms["var"], state.get("epsilon", 1e-8), state.get("clip_obs", 10.0)).eval()
