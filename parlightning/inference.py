"""Act with a trained policy: `policy = parlightning.load_policy("last.ckpt"); policy.predict(obs)`.

`load_policy` rebuilds the network from the checkpoint alone (its saved spaces and hyperparameters;
no config, env or trainer) and the frozen observation normalisation of a run trained in a
`NormalizeEnv`. `predict` runs what `python -m parlightning.evaluate` runs for every step (the
frozen normalisation, then `evaluate.greedy_action` or the policy's sampler), so its actions are
evaluate's actions; the `parlightning.export` program computes the same greedy actions.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

import numpy as np
import torch
from torch import Tensor, nn

from parlightning.envs.base import ActionSpec, check_action_mask
from parlightning.envs.normalize import ObsNormalizer, normalizer_from_checkpoint
from parlightning.errors import ArgumentError, ConfigError
from parlightning.cli.evaluate import check_device, greedy_action
from parlightning.method_args import Is, TensorArg, checked, checked_methods
from parlightning.policies.actor_critic import check_observation_shape, observation_fault

Observation = Union[Tensor, np.ndarray]


def actor_output(policy: nn.Module, obs: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """The policy's flat action-head input [B, n]: logits (sum(nvec) of them, per dimension in order)
    for discrete actions, the Gaussian mean for continuous ones (`action_logits`, under `mask`)."""
    return policy.action_logits(obs, mask=mask)


def _value(policy: nn.Module, obs: Tensor, mask: Optional[Tensor]) -> Tensor:
    """V(obs); a policy whose features pool over the mask (slots) gets it."""
    import inspect

    takes_mask = "mask" in inspect.signature(policy.value).parameters
    return policy.value(obs, mask=mask) if takes_mask and mask is not None else policy.value(obs)


@checked_methods(
    predict={"obs": Is((Tensor, np.ndarray), "a float tensor or array [B, *observation_shape] (or one observation)"),
             "mask": Is((Tensor, np.ndarray), "a bool tensor or array [B, M] (the world's action_masks())",
                        optional=True)},
    normalize={"obs": TensorArg("float", (..., "*observation_shape"))})
class Policy:
    """A trained policy for inference (recurrent policies are refused by `load_policy`).

    Attributes: `network` (the actor-critic, eval mode), `normalizer` (the frozen `ObsNormalizer`, or
    None), `observation_shape`, `action_spec`, `device`.
    """

    def __init__(self, network: nn.Module, normalizer: Optional[ObsNormalizer] = None,
                 observation_shape: Optional[tuple[int, ...]] = None) -> None:
        if not isinstance(network, nn.Module) or not isinstance(getattr(network, "action_spec", None), ActionSpec):
            what = "None" if network is None else type(network).__name__
            raise ConfigError(f"Policy(network): {what} is not a parlightning policy network (a torch module with an "
                              "action_spec, e.g. PPOModule.build_policy(...) or load_policy(path).network); load a "
                              "trained one with parlightning.load_policy(path)")
        if getattr(network, "is_recurrent", False):
            raise ConfigError("--ckpt_path: a recurrent policy (model.policy: gru/lstm) needs its hidden state "
                              "carried between calls; load_policy supports mlp and slots policies")
        if getattr(network, "key_table", None) is not None:
            raise ConfigError("--ckpt_path: a keyed (TensorParallel) policy needs each task's key; load_policy "
                              "supports unkeyed policies")
        if normalizer is not None and not isinstance(normalizer, ObsNormalizer):
            raise ArgumentError(f"Policy(normalizer): must be an ObsNormalizer (load_policy's, or "
                                f"normalizer_from_checkpoint's), or None, got {type(normalizer).__name__}")
        # the sizes the caller declares against the network's own: one line naming the argument
        if observation_shape is not None:
            observation_shape = check_observation_shape("Policy(observation_shape)", observation_shape)
        fault = None if observation_shape is None else observation_fault(network, observation_shape)
        if fault is not None:
            raise ArgumentError(f"Policy(observation_shape): must be {fault}, got {tuple(observation_shape)}")
        if normalizer is not None:
            kept = tuple(normalizer.mean.shape)
            fault = (observation_fault(network, kept) if observation_shape is None
                     else None if kept == tuple(observation_shape) else f"of observation_shape {tuple(observation_shape)}")
            if fault is not None:
                raise ArgumentError(f"Policy(normalizer): its statistics must be {fault}, got statistics of shape "
                                    f"{kept} (a normalizer of another world)")
        self.network = network.eval()
        self.device = next(network.parameters()).device
        self.normalizer = normalizer.to(self.device) if normalizer is not None else None
        self.action_spec: ActionSpec = network.action_spec
        self.observation_shape = tuple(observation_shape) if observation_shape is not None else None

    def normalize(self, obs: Tensor) -> Tensor:
        return obs if self.normalizer is None else self.normalizer(obs)

    def predict(self, obs: Observation, deterministic: bool = True, *, mask: Optional[Observation] = None,
                generator: Optional[torch.Generator] = None, return_logits: bool = False,
                return_value: bool = False) -> Any:
        """Actions for a batch of observations `obs` [B, *observation_shape] (a tensor or a numpy
        array; one unbatched observation works too and gives one action).

        `deterministic`: the most likely action (per dimension; the Gaussian mean), else sampled with
        `generator`. `mask`: the world's action mask for `obs` (`env.action_masks()`, [B, M] bool) for
        a masked world such as SwarmEnv, as training and evaluate apply it (masked dimensions take
        action 0; the slots policy pools over live slots only). Returns the actions ([B] discrete, [B, D] multi-discrete, [B, *shape] continuous,
        0-based as the policy sees them), as the input's type; with `return_logits` / `return_value` a
        tuple `(actions, logits, value)` of what was asked (logits: `actor_output`, value: V(obs) [B]).
        """
        # the arguments' kinds (obs, deterministic, mask, generator, the flags): checked at entry
        as_numpy = isinstance(obs, np.ndarray)
        if obs.dtype.is_complex if isinstance(obs, Tensor) else obs.dtype.kind == "c":  # (the kind: checked at entry)
            raise ArgumentError(f"Policy.predict(obs): must be a float tensor or array (real numbers), got a complex "
                                f"{obs.dtype} one")
        try:
            x = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ArgumentError(f"Policy.predict(obs): must be a float tensor or array [B, {', '.join(map(str, self.observation_shape or ()))}]"
                             f", got {type(obs).__name__} that is not one ({' '.join(str(err).split())[:120]})") from None
        single = self.observation_shape is not None and tuple(x.shape) == self.observation_shape
        if single:
            x = x.unsqueeze(0)
        if self.observation_shape is not None and tuple(x.shape[1:]) != self.observation_shape:
            raise ArgumentError(f"Policy.predict(obs): must be [B, {', '.join(map(str, self.observation_shape))}] (or one observation), "
                             f"got {list(x.shape)}")
        fault = None if self.observation_shape is not None or x.dim() < 1 else observation_fault(self.network, x.shape[1:])
        if fault is not None:
            raise ArgumentError(f"Policy.predict(obs): must be [B, ...] with each observation {fault}, got {list(x.shape)}")
        if x.numel() and not bool(torch.isfinite(x).all()):  # the greedy action of NaN is an arbitrary index
            row = int((~torch.isfinite(x.reshape(len(x), -1))).any(1).nonzero()[0])
            raise ArgumentError(f"Policy.predict(obs): row {row} holds NaN or inf; the policy needs finite observations (the world's raw "
                             "observations, as in training)")
        m = None if mask is None else torch.as_tensor(mask, dtype=torch.bool, device=self.device)
        if m is not None and single:
            m = m.unsqueeze(0)
        if m is not None:  # a mask the policy cannot use (the wrong layout, a dimension with no live category): one
            try:           # line naming it (reads the mask once: predict reads its observations on the host too)
                check_action_mask(m, self.action_spec, len(x), where="Policy.predict(mask)", device=self.device)
            except ValueError as err:  # (the world contract's words: an actor is a row here)
                raise ArgumentError(str(err).replace("actor ", "row ", 1).replace("num_envs", "B")) from None
        with torch.inference_mode():
            x = self.normalize(x)
            masked = {} if m is None else {"mask": m}
            action = greedy_action(self.network, x, m) if deterministic else self.network.act(x, generator, **masked)[0]
            out = [action]
            if return_logits:
                out.append(actor_output(self.network, x, m))
            if return_value:
                out.append(_value(self.network, x, m))
        out = [o[0] if single else o for o in out]
        if as_numpy:
            out = [o.cpu().numpy() for o in out]
        return out[0] if len(out) == 1 else tuple(out)

    __call__ = predict


@checked(path=Is((str, os.PathLike), "a checkpoint path (str or PathLike)"))
def load_policy(path: Union[str, os.PathLike], device: Union[str, torch.device] = "cpu") -> Policy:
    """The trained policy of a `parlightning.fit` checkpoint, ready to `predict`: rebuilt with
    `PPOModule`'s own loading (`on_load_checkpoint`), with the run's observation normalisation.
    A missing, unreadable, recurrent or keyed checkpoint is one `ConfigError`."""
    from parlightning.runtime.checkpoint import load_checkpoint_file
    from parlightning.ppo.saved_policy import module_from_checkpoint, spaces_of_checkpoint, unfit_weights

    path = os.fspath(path)
    if isinstance(device, (str, torch.device)) and str(device) == "meta":  # a meta tensor has a shape and no values: no weights, no actions
        raise ConfigError("load_policy: device='meta' holds no data (the weights would not be loaded and predict "
                          "could not compute an action); use cpu or cuda")
    check_device("device", device, types=None)
    checkpoint = load_checkpoint_file(path)
    module = module_from_checkpoint(checkpoint, path, "load_policy(path)")  # a refused saved value: one line naming it
    if module.hparams.policy not in ("mlp", "slots"):
        raise ConfigError(f"--ckpt_path: load_policy runs mlp and slots policies; {path} holds a "
                          f"{module.hparams.policy!r} policy (its hidden state would have to travel between calls)")
    spaces_of_checkpoint(checkpoint, path, "load_policy(path)")  # saved spaces that describe no policy: one line
    module.on_load_checkpoint(checkpoint)  # builds the policy from the saved policy_spaces
    unfit = unfit_weights("load_policy(path)", path, checkpoint, checkpoint["state_dict"], module.state_dict())
    if unfit is not None:  # the module loader's line advises other settings: here only the file decides
        raise unfit
    module.load_state_dict(checkpoint["state_dict"])
    spaces = checkpoint["policy_spaces"]
    return Policy(module.policy.to(device), normalizer_from_checkpoint(checkpoint), spaces["observation_shape"])
