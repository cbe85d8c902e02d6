"""The built-in PARL callbacks: `PARLAnnealing` moves λ1, λ2 along their schedules and logs the
reward terms; `CriticalStepsMonitor` logs critical steps and the speed-up over serial execution.

Both are `RolloutCallback`s, so they act while the data module collects (before the rollout's
rewards are shaped) and add 0-dim tensors to `rollout.stats`, which the module logs on the
env-step axis. Neither reads a tensor back to the host during the step loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Optional

import lightning.pytorch as pl
import torch
from torch import Tensor

from parlightning.callbacks.base import RolloutCallback
from parlightning.config_types import is_count
from parlightning.envs.base import EpisodeParts
from parlightning.errors import ConfigError
from parlightning.parl.metrics import CriticalSteps
from parlightning.parl.reward import PARLReward, RewardValueError, check_reward_output

if TYPE_CHECKING:
    from parlightning.rollout import Rollout

UNITS = ("env_steps", "optimizer_steps")
TERMS = ("r_parallel", "r_finish", "r_perf")


class PARLAnnealing(RolloutCallback):
    """Advance the data module's `PARLReward` to the current position before every rollout and log
    `parl/lambda1`, `parl/lambda2` and the mean of each reward term over the rollout's episodes (every
    rank's under DDP: weighted by episodes).

    Without this callback λ stays at its schedules' initial value (the never-annealed arm).

    Args:
        unit: what the schedules' position counts: `env_steps` (global, all ranks; the data
            module's counter) or `optimizer_steps` (`trainer.global_step`).
    """

    def __init__(self, unit: Literal["env_steps", "optimizer_steps"] = "env_steps") -> None:
        if unit not in UNITS:
            raise ConfigError(f"PARLAnnealing.unit: unknown {unit!r}; choose one of {list(UNITS)}")
        self.unit = unit
        self.position = 0
        self._reward: Optional[PARLReward] = None
        self._sums: Optional[Tensor] = None  # [3]: Σ r_parallel, Σ r_finish, Σ r_perf over this rollout
        self._count = 0

    @staticmethod
    def _reward_of(trainer: "pl.Trainer") -> PARLReward:
        reward = getattr(trainer.datamodule, "reward", None)
        if not isinstance(reward, PARLReward):
            raise ConfigError(
                "PARLAnnealing: the data module has no PARLReward to anneal (data.reward is "
                f"{type(reward).__name__ if reward is not None else 'null'}); set data.reward to a "
                "parlightning.parl.reward.PARLReward or drop PARLAnnealing from trainer.callbacks"
            )
        return reward

    def setup(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        self._reward = self._reward_of(trainer)
        self._reward.advance_to(self.position)

    def _current(self, trainer: "pl.Trainer") -> int:
        return int(trainer.datamodule.env_steps) if self.unit == "env_steps" else int(trainer.global_step)

    def on_rollout_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", round_index: int) -> None:
        self.position = self._current(trainer)
        self._reward_of(trainer).advance_to(self.position)
        self._sums, self._count = None, 0

    def on_episodes_end(
        self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", task_ids: Tensor, parts: EpisodeParts
    ) -> None:
        reward = self._reward_of(trainer)
        terms = reward.terms(parts.n_subagents, parts.assigned, parts.completed, parts.outcome, validate=False)
        if type(reward).terms is not PARLReward.terms:  # a user's terms(): what it returns, checked (metadata only)
            if not isinstance(terms, (tuple, list)) or len(terms) != 3:
                raise RewardValueError(f"data.reward: {type(reward).__qualname__}.terms returned a "
                                       f"{type(terms).__name__}; it must return three tensors (r_parallel, r_finish, "
                                       "r_perf), one value per finished episode")
            for term in terms:
                check_reward_output(reward, "terms", term, parts.outcome, parts.outcome.device, finite=False)
        sums = torch.stack([t.sum() for t in terms])
        self._sums = sums if self._sums is None else self._sums + sums
        self._count += parts.outcome.numel()

    def on_rollout_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", rollout: "Rollout") -> None:
        lam1, lam2 = self._reward_of(trainer).lambdas()
        device = rollout.buffer.rewards.device
        rollout.stats["parl/lambda1"] = torch.tensor(lam1, device=device)
        rollout.stats["parl/lambda2"] = torch.tensor(lam2, device=device)
        # Same keys on every rank whatever finished; means over no episodes read 0. Under DDP the means
        # are over every rank's episodes (sums and counts summed over ranks, one collective on every
        # rank every rollout), never a mean of per-rank means.
        sums = self._sums.float().to(device) if self._sums is not None else torch.zeros(3, device=device)
        packed = torch.cat([sums, torch.tensor([float(self._count)], device=device)])
        if trainer.world_size > 1:
            packed = trainer.strategy.reduce(packed.to(trainer.strategy.root_device), reduce_op="sum").to(device)
        means = packed[:3] / packed[3].clamp(min=1.0)
        for name, value in zip(TERMS, means.unbind()):
            rollout.stats[f"parl/{name}"] = value.float()
        self._sums, self._count = None, 0

    def state_dict(self) -> dict[str, Any]:
        return {"position": int(self.position), "unit": self.unit}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        unit = state_dict.get("unit", self.unit) if isinstance(state_dict, dict) else None
        if unit != self.unit:
            raise ConfigError(f"--ckpt_path: the checkpoint's PARLAnnealing counted its position in {unit!r}, but this "
                              f"config's PARLAnnealing.unit is {self.unit!r}: the schedules would resume at another "
                              f"point; resume with unit: {unit} (trainer.callbacks, PARLAnnealing's init_args), or "
                              "start fresh without --ckpt_path")
        position = state_dict.get("position")
        if not is_count(position):
            raise ConfigError(f"--ckpt_path: the checkpoint's PARLAnnealing position is {position!r}, not a count "
                              f"of {self.unit} (an integer >= 0): it was edited or damaged; resume from an unedited "
                              "checkpoint, or start fresh without --ckpt_path")
        self.position = int(position)
        if self._reward is not None:
            self._reward.advance_to(self.position)


class CriticalStepsMonitor(RolloutCallback):
    """Log `critical_steps/mean` (mean critical steps per finished episode) and
    `critical_steps/speedup` (Σ serial / Σ critical steps) for every rollout.

    Holds a `CriticalSteps` metric on the env's device (kept off the module, so precision casts
    never touch its float64 sums). Under DDP `compute()` reduces over all ranks: every rank calls
    it at each rollout end, so both values are global. A rollout with no finished episode anywhere
    logs 0 for both.
    """

    def __init__(self) -> None:
        self.metric = CriticalSteps()

    def setup(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        env = getattr(trainer.datamodule, "env", None)
        device = getattr(env, "device", None) or trainer.strategy.root_device
        self.metric = self.metric.to(device)
        self.metric.reset()

    def on_episodes_end(
        self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", task_ids: Tensor, parts: EpisodeParts
    ) -> None:
        self.metric.update_totals(parts.critical_steps, parts.serial_steps)

    def on_rollout_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", rollout: "Rollout") -> None:
        if self.metric.update_count == 0:  # no episode on this rank: still join the reduction
            empty = torch.zeros(0, device=self.metric.device)
            self.metric.update_totals(empty, empty)
        out = self.metric.compute()  # a collective under DDP: every rank gets here every rollout
        self.metric.reset()
        device = rollout.buffer.rewards.device
        for key, name in (("critical_steps", "mean"), ("speedup", "speedup")):
            rollout.stats[f"critical_steps/{name}"] = torch.nan_to_num(out[key], nan=0.0).float().to(device)
