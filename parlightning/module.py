"""`PPOModule`: the global policy and the clipped PPO step, one minibatch per `training_step`.

Automatic optimization, so gradient clipping, precision, lr schedulers, gradient
accumulation and DDP all behave as in any Lightning module. The rollout comes from
`RolloutDataModule`; the policy is built in `setup` from the env's spaces.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import lightning.pytorch as pl
import torch
from torch import Tensor

from parlightning.errors import ConfigError
from parlightning.loss import ppo_loss
from parlightning.policies import ACTIVATIONS, ActorCritic


class PPOModule(pl.LightningModule):
    """Clipped PPO with the standard implementation details.

    Args:
        lr: Adam learning rate (eps `adam_eps`), annealed linearly to 0 over `trainer.max_epochs`
            PPO iterations when `anneal_lr`.
        clip_coef, clip_vloss, ent_coef, vf_coef, norm_adv: the PPO loss (see `ppo_loss`).
        max_grad_norm: global grad-norm clip, used when the trainer's `gradient_clip_val` is unset.
        target_kl: stop the remaining update epochs of a rollout once the mean approx-KL
            (reduced over ranks) exceeds it; None never stops.
        hidden_sizes, activation: the actor and critic MLPs (`relu` is much cheaper than
            `tanh` on CPU).
    """

    def __init__(
        self,
        lr: float = 2.5e-4,
        anneal_lr: bool = True,
        adam_eps: float = 1e-5,
        clip_coef: float = 0.2,
        clip_vloss: bool = True,
        ent_coef: float = 0.01,
        vf_coef: float = 0.5,
        norm_adv: bool = True,
        max_grad_norm: Optional[float] = 0.5,
        target_kl: Optional[float] = None,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "tanh",
    ) -> None:
        super().__init__()
        if lr <= 0:
            raise ConfigError(f"model.lr: must be positive, got {lr!r}")
        if clip_coef <= 0:
            raise ConfigError(f"model.clip_coef: must be positive, got {clip_coef!r}")
        if activation not in ACTIVATIONS:
            raise ConfigError(f"model.activation: unknown {activation!r}; choose one of {sorted(ACTIVATIONS)}")
        if not hidden_sizes or any((not isinstance(h, int)) or h <= 0 for h in hidden_sizes):
            raise ConfigError(f"model.hidden_sizes: needs positive integer widths, got {list(hidden_sizes)}")
        if target_kl is not None and target_kl <= 0:
            raise ConfigError(f"model.target_kl: must be positive or null, got {target_kl!r}")
        self.save_hyperparameters()
        self.policy: Optional[ActorCritic] = None
        self._epoch_kl: list[Tensor] = []

    # ------------------------------------------------------------------ model
    def build_policy(self, observation_shape: Sequence[int], action_spec: Any) -> ActorCritic:
        """Make the actor-critic for the env's spaces (subclasses return their own network)."""
        hp = self.hparams
        return ActorCritic(observation_shape, action_spec, hp.hidden_sizes, hp.activation)

    def setup(self, stage: str) -> None:
        if self.policy is None:
            env = self.trainer.datamodule.env
            self.policy = self.build_policy(env.observation_shape, env.action_spec)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr, eps=self.hparams.adam_eps)
        if not self.hparams.anneal_lr:
            return optimizer
        iterations = self.trainer.max_epochs if self.trainer.max_epochs and self.trainer.max_epochs > 0 else None
        if iterations is None:
            raise ConfigError("model.anneal_lr: needs trainer.max_epochs (the number of PPO iterations); set it or anneal_lr: false")
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: max(1.0 - epoch / iterations, 0.0))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "epoch"}}

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        if gradient_clip_val is None and self.hparams.max_grad_norm is not None:
            gradient_clip_val, gradient_clip_algorithm = self.hparams.max_grad_norm, "norm"
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    # ------------------------------------------------------------------ PPO step
    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        hp = self.hparams
        new_logprob, entropy, new_value = self.policy.evaluate(batch["obs"], batch["actions"])
        out = ppo_loss(
            new_logprob, entropy, new_value, batch["logprobs"], batch["values"], batch["advantages"],
            batch["returns"], hp.clip_coef, hp.ent_coef, hp.vf_coef, hp.norm_adv, hp.clip_vloss,
        )
        if not torch.isfinite(out.loss):
            raise FloatingPointError(
                f"non-finite PPO loss at optimizer step {self.global_step} (policy {out.policy_loss}, "
                f"value {out.value_loss}, entropy {out.entropy}); check rewards/observations for NaN or inf "
                "and lower model.lr. The last checkpoint was kept."
            )
        sync = self.trainer.world_size > 1
        self.log_dict(
            {
                "losses/policy_loss": out.policy_loss.detach(),
                "losses/value_loss": out.value_loss.detach(),
                "losses/entropy": out.entropy.detach(),
                "losses/approx_kl": out.approx_kl,
                "losses/old_approx_kl": out.old_approx_kl,
                "losses/clip_fraction": out.clip_fraction,
            },
            on_step=False, on_epoch=True, sync_dist=sync, batch_size=batch["advantages"].shape[0],
        )
        if batch_idx == 0:
            self._log_rollout()
        if hp.target_kl is not None:
            self._check_target_kl(out.approx_kl)
        return out.loss

    def _check_target_kl(self, approx_kl: Tensor) -> None:
        """Same decision on every rank: the KL is averaged across ranks before comparing."""
        kl = self.trainer.strategy.reduce(approx_kl.detach(), reduce_op="mean")
        if float(kl) > self.hparams.target_kl:
            self.trainer.datamodule.stop_update = True

    def _log_rollout(self) -> None:
        rollout = self.trainer.datamodule.last_rollout
        if rollout is None:
            return
        sync = self.trainer.world_size > 1
        stats = {k: v.float() for k, v in rollout.stats.items()}
        once = dict(on_step=False, on_epoch=True, batch_size=1)
        self.log_dict(stats, sync_dist=sync, **once)
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]
        self.log("charts/learning_rate", lr, **once)
        self.log("step", float(rollout.env_steps), **once)  # TensorBoard's x-axis: env steps (CleanRL convention)
        self.log("env_steps", float(rollout.env_steps), prog_bar=True, logger=False, **once)
        if "perf/SPS" in stats:
            self.log("SPS", stats["perf/SPS"], prog_bar=True, logger=False, **once)
