"""`PPOModule`: the global policy and the clipped PPO step, one minibatch per `training_step`.

Automatic optimization, so gradient clipping, precision, lr schedulers, gradient
accumulation and DDP all behave as in any Lightning module. The rollout comes from
`RolloutDataModule`; the policy is built in `setup` from the env's spaces, or, in
`PPOModule.load_from_checkpoint(path)`, from the spaces the checkpoint saved (`on_load_checkpoint`).
"""

from __future__ import annotations

import argparse
import contextvars
import inspect
from collections.abc import Mapping
import math
import numbers
import os
from typing import Any, Optional, Sequence, Union

import lightning.pytorch as pl
import torch
from torch import Tensor

from parlightning.buffer import UPDATE_EPOCH_END
from parlightning.callbacks.planner import find_planner
from parlightning.config_types import NonNegativeFinite, PositiveFinite, PositiveInt, check_args
from parlightning.envs.base import ActionSpec, action_mask_of
from parlightning.errors import ArgumentError, ConfigError
from parlightning.method_args import IndexArg, Is, Lifecycle, MappingArg, State, checked_methods, require, vouch
from parlightning.ppo.loss import WEIGHTS, ppo_loss
from parlightning.policies.actor_critic import ACTIVATIONS, ActorCritic, set_action_prior
from parlightning.policies.recurrent import CELLS, RecurrentActorCritic

# the checkpoint's own hyper-parameters while `load_from_checkpoint` runs with overrides (Lightning merges
# them into the checkpoint's before the module sees it): a weights mismatch names what the overrides changed
_SAVED_HPARAMS: contextvars.ContextVar = contextvars.ContextVar("parlightning_saved_hparams", default=None)
_LOAD_ARGS = ("map_location", "hparams_file", "strict", "weights_only")  # Lightning's own arguments, not overrides

_HPARAM_FIX = ("restore the checkpoint's value (it was edited or written by other code) or override it: "
               "load_from_checkpoint(path, {name}=...)")
_MAP_FIX = ("; map the checkpoint to a device this machine has: map_location='cpu' (or leave it out), or a "
            "torch.device / dict / function naming only available devices")


def _constructors(cls: type) -> list:
    """The `__init__`s a `cls(**hparams)` call reaches: `cls`'s own, and those up the MRO while each
    passes `**kwargs` on (a subclass `def __init__(self, extra, **kw): super().__init__(**kw)`)."""
    out = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        out.append(init)
        params = inspect.signature(init).parameters.values()
        if klass is PPOModule or not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return out


def _constructor_args(cls: type) -> set:
    """The names `cls(...)` takes (through `**kwargs` to PPOModule's own)."""
    return {name for init in _constructors(cls) for name, p in inspect.signature(init).parameters.items()
            if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _check_saved_hparams(cls: type, where: str, saved: Mapping, overrides: dict) -> None:
    """The checkpoint's hyper-parameters hold every argument the constructor requires (or an override
    gives it), and each value passes the constructor's typed check: one ConfigError naming the
    checkpoint, `hyper_parameters.<name>` and the fix."""
    given = {k: v for k, v in saved.items() if isinstance(k, str) and k not in overrides}
    for init in _constructors(cls):
        for name, p in inspect.signature(init).parameters.items():
            if (name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.default is p.empty
                    and name not in saved and name not in overrides):
                raise ConfigError(f"{cls.__name__}.load_from_checkpoint({where}): {cls.__name__}'s constructor "
                                  f"requires the argument {name!r}, which the checkpoint's hyper_parameters do not "
                                  f"hold; pass it as a keyword: {cls.__name__}.load_from_checkpoint(path, {name}=...)")
        try:
            check_args("hyper_parameters", init, given)
        except ConfigError as err:
            text = str(err)
            name = text.partition(":")[0].removeprefix("hyper_parameters.")
            raise ConfigError(f"{cls.__name__}.load_from_checkpoint({where}): {text}; "
                              f"{_HPARAM_FIX.format(name=name)}") from None


def _device_unavailable(target: Any) -> Optional[str]:
    """Why the device `target` (a name or torch.device) cannot take tensors on this machine, else None."""
    try:
        device = torch.device(target)
    except (RuntimeError, ValueError, TypeError):
        return f"{target!r} is not a device name"
    if device.type in ("cpu", "meta"):
        return None
    if device.type == "mps":
        backend = getattr(torch.backends, "mps", None)
        available, count = bool(backend is not None and backend.is_available()), 1
    else:
        accelerator = getattr(torch, device.type, None)
        is_available = getattr(accelerator, "is_available", None)
        try:
            available = bool(is_available()) if callable(is_available) else False
            count = int(accelerator.device_count()) if available else 0
        except Exception:  # noqa: BLE001  a backend that cannot even say: not one this run can use
            available, count = False, 0
    if not available:
        return f"{str(device)!r}: this machine has no {device.type} device"
    if device.index is not None and device.index >= count:
        return f"{str(device)!r}: this machine has {count} {device.type} device(s) ({device.type}:0..{count - 1})"
    return None


def check_map_location(location: Any, where: str) -> None:
    """A `map_location` naming a device this machine lacks, as a name, a torch.device or a dict's
    target: one ConfigError naming it (torch's own error is a RuntimeError deep in unpickling). A
    function is checked as it runs (`_MapLocationCall`)."""
    if location is None or callable(location) and not isinstance(location, (str, torch.device)):
        return
    if isinstance(location, Mapping):
        targets = list(location.values())
    elif isinstance(location, (str, torch.device)):
        targets = [location]
    else:
        raise ConfigError(f"PPOModule.load_from_checkpoint({where}): map_location: must be a device name, a "
                          f"torch.device, a dict or a function (as torch.load takes), got {location!r:.60}")
    for target in targets:
        if not isinstance(target, (str, torch.device)):
            raise ConfigError(f"PPOModule.load_from_checkpoint({where}): map_location: {location!r:.80} maps to "
                              f"{target!r:.40}, not a device name{_MAP_FIX}")
        why = _device_unavailable(target)
        if why is not None:
            raise ConfigError(f"PPOModule.load_from_checkpoint({where}): map_location: {why}{_MAP_FIX}")


class _MapLocationFailed(Exception):
    def __init__(self, raised: BaseException) -> None:
        super().__init__(str(raised))
        self.raised = raised


class _MapLocationCall:
    """A user's `map_location` function, whose failure (a storage moved to a device this machine
    lacks) is told apart from the loader's own."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __call__(self, storage: Any, location: str) -> Any:
        try:
            out = self.fn(storage, location)
        except Exception as err:  # noqa: BLE001  the user's function: named as map_location
            raise _MapLocationFailed(err) from err
        if out is not None and getattr(out, "device", None) is not None:
            why = _device_unavailable(out.device)
            if why is not None:
                raise _MapLocationFailed(RuntimeError(f"it returned a storage on {why}"))
        return out


def _instantiator_line(cls: type, where: str, message: str) -> str:
    """Lightning's instantiator (jsonargparse) refusing the checkpoint's hyper-parameters, as one line."""
    import re

    first = " ".join(message.split())
    missing = re.search(r"required: ((?:module\.\w+(?:, )?)+)", first)
    if missing:
        names = [n.removeprefix("module.") for n in missing.group(1).split(", ")]
        return (f"{cls.__name__}.load_from_checkpoint({where}): {cls.__name__}'s constructor requires "
                f"{', '.join(map(repr, names))}, which the checkpoint's hyper_parameters do not hold; pass it as a "
                f"keyword: {cls.__name__}.load_from_checkpoint(path, {names[0]}=...)")
    key = re.search(r'Parser key "module\.([\w.]+)":?\s*(.*)', first)
    if key:
        name = key.group(1).split(".")[0]
        return (f"{cls.__name__}.load_from_checkpoint({where}): hyper_parameters.{name}: {key.group(2)[:160]}; "
                f"{_HPARAM_FIX.format(name=name)}")
    return (f"{cls.__name__}.load_from_checkpoint({where}): hyper_parameters: {first[:200]}; restore the "
            "checkpoint's hyper-parameters or pass the right values as keywords to load_from_checkpoint")


# Lightning's hooks and overrides: Lightning calls them with its own objects (not wrapped)
MODULE_HOOKS = ("setup", "on_load_checkpoint", "on_fit_start", "configure_optimizers", "on_train_epoch_start",
                "configure_gradient_clipping", "training_step", "on_train_batch_end", "on_update_epoch_end",
                "on_train_epoch_end", "on_save_checkpoint", "load_from_checkpoint", "load_state_dict")

LOSS_METRICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "old_approx_kl", "clipfrac")  # logged as losses/*

POLICIES = ("mlp", "slots", *CELLS)  # model.policy


def check_prior(prior: Any) -> None:
    """Refuse a `model.prior` that is not a probability in (0, 1) (or {action, probability})."""
    if prior is None:
        return
    fix = "give a probability in (0, 1), e.g. 0.998, or {action: 0, probability: 0.998}"
    if isinstance(prior, dict):
        unknown = set(prior) - {"action", "probability"}
        if unknown or "probability" not in prior:
            raise ConfigError(f"model.prior: unknown or missing keys in {prior!r}; {fix}")
        action, p = prior.get("action", 0), prior["probability"]
        if isinstance(action, bool) or not isinstance(action, int) or action < 0:
            raise ConfigError(f"model.prior.action: must be an action index >= 0, got {action!r}")
    else:
        p = prior
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p < 1.0 or not math.isfinite(p):
        raise ConfigError(f"model.prior: the probability must lie strictly between 0 and 1, got {p!r}; {fix}")


def apply_prior(policy: Any, prior: Union[float, dict]) -> None:
    """`set_action_prior` from a checked `model.prior`; an action outside a dimension is a ConfigError."""
    action, p = (prior.get("action", 0), prior["probability"]) if isinstance(prior, dict) else (0, prior)
    layer = getattr(policy, "prior_layer", None)
    if not callable(layer):
        raise ConfigError(f"model.prior: {type(policy).__name__} has no prior_layer(); drop model.prior")
    nvec = policy.prior_nvec()
    if not nvec:
        raise ConfigError(f"model.prior: sets the initial probability of a discrete action; {type(policy).__name__} "
                          "has no categories (continuous actions); drop model.prior")
    if action >= min(nvec):
        raise ConfigError(f"model.prior.action: {action} is not an action of every dimension (sizes {list(nvec)}); "
                          f"pick one below {min(nvec) if nvec else 0}")
    set_action_prior(policy, int(action), float(p))


def load_policy_weights(policy: Any, path: str) -> None:
    """The policy weights of a checkpoint (`model.init_from`); another policy's is one ConfigError."""
    from parlightning.runtime.checkpoint import read_torch_file

    ckpt = read_torch_file(path, "model.init_from", "pass one written by python -m parlightning.bc or parlightning.fit")
    sd = ckpt.get("state_dict") if isinstance(ckpt, dict) else None
    state = {k[len("policy."):]: v for k, v in (sd or {}).items() if k.startswith("policy.")}
    if not state:
        raise ConfigError(f"model.init_from: {path} holds no policy weights; pass one written by parlightning.bc or fit")
    bad = [k for k, v in state.items() if isinstance(v, torch.Tensor) and v.is_floating_point()
           and not bool(torch.isfinite(v).all())]
    if bad:  # NaN weights would end the first update as a "non-finite loss" blamed on the rewards
        raise ConfigError(f"model.init_from: {path} holds non-finite policy weights (NaN or inf in {len(bad)} tensors, "
                          f"first policy.{bad[0]}); start from a checkpoint of a run that did not diverge")
    try:
        policy.load_state_dict(state)
    except RuntimeError as err:
        last = str(err).strip().splitlines()[-1].strip()
        raise ConfigError(f"model.init_from: {path} holds another policy ({last}); build this run's model like the "
                          "checkpoint's (model.policy, model.hidden_sizes) and the same world") from None


def delegation_share(buffer: Any) -> Optional[Tensor]:
    """Share of the rollout's live decisions (masked-in action dimensions) whose action is not 0 (in
    SwarmEnv: delegations, 0 being "do it yourself"); None for an unmasked world or a category mask."""
    masks = getattr(buffer, "masks", None)
    if masks is None or masks.shape[-1] != buffer.actions.shape[-1] or buffer.actions.dim() != masks.dim():
        return None
    live = masks.sum()
    return ((buffer.actions != 0) & masks).sum().float() / live.clamp(min=1).float()


def _is_tensor(value: Any) -> bool:
    return isinstance(value, Tensor)


# The minibatch `training_step` reads (the data module's; a hand-made batch must have the same keys): a
# key presence and type check per key, O(1) on the step path (no host read).
TRAINING_BATCH = MappingArg({key: (_is_tensor, "a tensor") for key in ("obs", "actions", "logprobs", "values",
                                                                           "advantages", "returns")},
                            example="the data module's minibatch {'obs', 'actions', 'logprobs', 'values', "
                                    "'advantages', 'returns'} (RolloutDataModule's train_dataloader)")


def weights_mismatch(state: Mapping, own: Mapping, strict: bool = True) -> Optional[str]:
    """Which saved weight does not fit a module's own (`{key} is [..] in the checkpoint, [..] here`; or,
    `strict`, the missing and unexpected keys), or None when every one fits."""
    shapes = [k for k, v in state.items() if k in own and isinstance(v, Tensor) and v.shape != own[k].shape]
    missing = [k for k in own if k not in state] if strict else []
    unexpected = [k for k in state if k not in own] if strict else []
    if shapes:
        return f"{shapes[0]} is {list(state[shapes[0]].shape)} in the checkpoint, {list(own[shapes[0]].shape)} here"
    if missing or unexpected:
        return (f"missing {missing[:3]}" if missing else "") + ("; " if missing and unexpected else "") + (
            f"unexpected {unexpected[:3]}" if unexpected else "")
    return None


@checked_methods(skip=MODULE_HOOKS, annealed_lr={"iteration": IndexArg()}, lifecycle=Lifecycle(
    {"trainer": State("called before the module is attached to a Trainer (it reads trainer.max_epochs); call it "
                      "during trainer.fit(module, datamodule=...)", holds=lambda module: module._trainer is not None),
     "policy": State("called before the policy is built (setup() builds it from the world's spaces, "
                     "load_from_checkpoint from the checkpoint's); train it with trainer.fit(module, datamodule=...)",
                     holds=lambda module: module.policy is not None)},
    requires={"annealed_lr": "trainer"}),
                 build_policy={"action_spec": Is(ActionSpec, "the world's ActionSpec")})
class PPOModule(pl.LightningModule):
    """Clipped PPO with the standard implementation details.

    Args:
        lr: Adam learning rate (eps `adam_eps`). With `anneal_lr` it is set at the start of every
            PPO iteration i (0-based) to `lr * (1 - i / trainer.max_epochs)` (CleanRL's schedule),
            computed from the iteration count in one place (`on_train_epoch_start`), with no lr
            scheduler beside it: an update cut short by `target_kl` still anneals, and a run
            resumed with a larger `max_epochs` continues on the anneal over the new horizon (never
            at lr 0). It is logged as `charts/learning_rate`; for another schedule, set
            anneal_lr: false and override `configure_optimizers`.
        clip_coef, clip_vloss, ent_coef, vf_coef, norm_adv: the PPO loss (see `ppo_loss`).
        max_grad_norm: global grad-norm clip, used when the trainer's `gradient_clip_val` is unset.
        target_kl: after each update epoch (CleanRL), stop the rollout's remaining update epochs
            if the approx-KL of the epoch's last minibatch, averaged over ranks, exceeds it; an
            update epoch is never cut mid-way. None never stops.
        hidden_sizes, activation: the actor and critic MLPs (`relu` is much cheaper than
            `tanh` on CPU); for a recurrent policy, its observation encoder.
        policy: `mlp` (default), or `gru` / `lstm` for a `RecurrentActorCritic` with `rnn_hidden`
            units, trained on whole per-actor chunks of `data.bptt_len` steps.
        prior: the policy's initial action distribution (a serial prior): a probability p, or
            `{action: a, probability: p}` (a defaults to 0, SwarmEnv's "do it yourself"): action a
            starts with probability p in every action dimension, through the actor's output bias (an
            ordinary trainable parameter; `parlightning.policies.actor_critic.set_action_prior`). None (default)
            leaves the initialisation exactly as it was.
        init_from: a checkpoint whose policy weights this run starts from (e.g. one written by
            `python -m parlightning.bc`, behaviour cloning on a scripted policy); only the policy's
            weights are read: the optimizer, the schedules and the counters start fresh.
        fused_adam: use Adam's fused implementation (`torch.optim.Adam(fused=True)`: one kernel per
            parameter tensor instead of a dozen ops each; torch >= 2.4 on CPU). The same update up
            to float rounding (~1e-7), about half the optimizer's time for a small policy on CPU;
            off by default so existing runs keep their exact trajectories.
    """

    def __init__(
        self,
        lr: PositiveFinite = 2.5e-4,
        anneal_lr: bool = True,
        adam_eps: PositiveFinite = 1e-5,
        clip_coef: PositiveFinite = 0.2,
        clip_vloss: bool = True,
        ent_coef: NonNegativeFinite = 0.01,
        vf_coef: NonNegativeFinite = 0.5,
        norm_adv: bool = True,
        max_grad_norm: Optional[PositiveFinite] = 0.5,
        target_kl: Optional[PositiveFinite] = None,
        hidden_sizes: Sequence[PositiveInt] = (64, 64),
        activation: str = "tanh",
        policy: str = "mlp",
        rnn_hidden: PositiveInt = 64,
        fused_adam: bool = False,
        prior: Optional[Union[float, dict]] = None,
        init_from: Optional[str] = None,
    ) -> None:
        super().__init__()
        typed = check_args("model", PPOModule.__init__, locals())  # the annotated ranges (config_types)
        check_prior(prior)
        if init_from is not None:
            if prior is not None:
                raise ConfigError("model.prior / model.init_from: give one; the checkpoint's weights would replace the "
                                  "prior's bias")
            from parlightning.runtime.checkpoint import check_checkpoint_path

            check_checkpoint_path(init_from, "model.init_from", "pass one written by python -m parlightning.bc or "
                                  "parlightning.fit")
        if policy not in POLICIES:
            raise ConfigError(f"model.policy: unknown {policy!r}; choose one of {list(POLICIES)}")
        if activation not in ACTIVATIONS:
            raise ConfigError(f"model.activation: unknown {activation!r}; choose one of {sorted(ACTIVATIONS)}")
        if not typed["hidden_sizes"]:
            raise ConfigError(f"model.hidden_sizes: needs positive integer widths, got {list(hidden_sizes)}")
        self.save_hyperparameters(logger=False)  # the loggers get the whole config once, as `model.lr` etc. (config_log)
        self.hparams.update(typed)  # plain floats and ints (the parser's own subclasses never reach a checkpoint)
        self.policy: Optional[ActorCritic] = None
        self._epoch_kl: list[Tensor] = []
        self._nonfinite_step: Optional[Tensor] = None  # first optimizer step with a NaN/inf loss (-1: none)
        self._nonfinite_parts: Optional[Tensor] = None  # [loss, policy, value, entropy] at that step
        self._loss_sum: Optional[Tensor] = None  # this epoch's LOSS_METRICS x minibatch rows, summed
        self._loss_rows = 0
        self._last_kl: Optional[Tensor] = None  # approx-KL of the latest minibatch (read at update-epoch ends)

    # ------------------------------------------------------------------ model
    def build_policy(self, observation_shape: Sequence[int], action_spec: Any) -> ActorCritic:
        """Make the actor-critic for the env's spaces (subclasses return their own network); with a
        TensorParallel planner it has a per-key table, one row per declared key."""
        hp = self.hparams
        if hp.get("prior") is not None and not getattr(action_spec, "is_discrete", True):
            raise ConfigError(f"model.prior: sets the initial probability of a discrete action; this world's actions are "
                              f"{action_spec.kind} (no categories to weight); drop model.prior")
        planner = find_planner(self._trainer)
        n_keys = planner.n_keys(self._trainer) if planner is not None else 0
        if hp.policy == "slots":  # one network shared across subtask slots (parlightning/policies/slots.py)
            from parlightning.policies.slots import SlotsActorCritic

            if n_keys:
                raise ConfigError("model.policy: slots has no per-key table; TensorParallel needs model.policy: mlp")
            return SlotsActorCritic(observation_shape, action_spec, hp.hidden_sizes, hp.activation)
        if hp.policy != "mlp":
            if n_keys:
                raise ConfigError(f"model.policy: {hp.policy} has no per-key table; TensorParallel needs model.policy: mlp")
            return RecurrentActorCritic(observation_shape, action_spec, hp.hidden_sizes, hp.rnn_hidden, hp.policy,
                                        hp.activation)
        return ActorCritic(observation_shape, action_spec, hp.hidden_sizes, hp.activation, n_keys=n_keys)

    def setup(self, stage: str) -> None:
        if self.policy is None:
            env = self.trainer.datamodule.collector.env
            self.policy = self.build_policy(env.observation_shape, env.action_spec)
            prior = self.hparams.get("prior")
            if prior is not None:
                apply_prior(self.policy, prior)
            if self.hparams.get("init_from") is not None:
                load_policy_weights(self.policy, self.hparams.init_from)
        if getattr(self.policy, "is_recurrent", False):  # the data module carries every actor's hidden state
            self.trainer.datamodule.bind_memory(self.policy)

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: Any, *args: Any, **kwargs: Any) -> Any:
        """Lightning's `load_from_checkpoint`, after the file itself is checked: a missing, truncated,
        damaged or foreign file is one `ConfigError` naming it (not an OSError or unpickling error). The
        hyper-parameter overrides (`lr=...`) are checked first as the constructor checks them (`check_args`):
        a bad value or a name the module does not take is one ConfigError naming it. So are the
        checkpoint's own hyper-parameters (`hyper_parameters.lr` edited to a string), a constructor
        argument the checkpoint does not hold (a subclass's own `extra`: pass it as a keyword), and a
        `map_location` naming a device this machine does not have (`'cuda:0'`, `{'cpu': 'mps'}`, a
        function moving storages to one): one ConfigError naming the checkpoint, the field and the fix."""
        if not isinstance(checkpoint_path, (str, os.PathLike)) and not hasattr(checkpoint_path, "read"):
            raise ArgumentError(f"PPOModule.load_from_checkpoint(checkpoint_path): must be a checkpoint path (str or "
                                f"PathLike) or a file object, got {checkpoint_path!r:.60}")
        overrides = {k: v for k, v in kwargs.items() if k not in _LOAD_ARGS}
        takes = _constructor_args(cls)
        unknown = sorted(set(overrides) - takes)
        if unknown:
            raise ArgumentError(f"PPOModule.load_from_checkpoint({unknown[0]}): not a PPOModule hyper-parameter; the "
                                f"overrides are PPOModule's arguments ({', '.join(sorted(takes))})")
        for init in _constructors(cls):
            check_args("PPOModule.load_from_checkpoint", init, overrides)
        where = (os.fspath(checkpoint_path) if isinstance(checkpoint_path, (str, os.PathLike))
                 else getattr(checkpoint_path, "name", "the checkpoint"))
        saved = None
        if isinstance(checkpoint_path, (str, os.PathLike)) and "://" not in os.fspath(checkpoint_path):
            from parlightning.runtime.checkpoint import load_checkpoint_file
            try:
                checkpoint = load_checkpoint_file(os.fspath(checkpoint_path))
            except ConfigError as err:
                raise ConfigError(str(err).replace("--ckpt_path", "checkpoint_path", 1)) from None
            saved = checkpoint.get("hyper_parameters") if isinstance(checkpoint, dict) else None
            _check_saved_hparams(cls, where, saved if isinstance(saved, Mapping) else {}, overrides)
        location = args[0] if args else kwargs.get("map_location")
        check_map_location(location, where)
        if callable(location) and not isinstance(location, (str, torch.device)):
            wrapped = _MapLocationCall(location)
            args, kwargs = ((wrapped, *args[1:]), kwargs) if args else (args, {**kwargs, "map_location": wrapped})
        # Lightning merges the overrides into the checkpoint's hyper-parameters: keep its own for the weights check
        token = _SAVED_HPARAMS.set(dict(saved) if isinstance(saved, dict) else None)
        try:
            return super().load_from_checkpoint(checkpoint_path, *args, **kwargs)
        except _MapLocationFailed as err:
            raise ConfigError(f"{cls.__name__}.load_from_checkpoint({where}): map_location: the function raised "
                              f"{type(err.raised).__name__}: {str(err.raised).splitlines()[0] if str(err.raised) else ''}"
                              f"{_MAP_FIX}") from None
        except argparse.ArgumentError as err:  # Lightning's instantiator parses the saved hyper-parameters
            raise ConfigError(_instantiator_line(cls, where, str(err))) from None
        except ConfigError as err:  # the constructor refusing a saved value names it as the config's model.<name>
            text = str(err)
            name = text.partition(":")[0].removeprefix("model.")
            if text.startswith("model.") and name in (saved or {}) and name not in overrides:
                raise ConfigError(f"{cls.__name__}.load_from_checkpoint({where}): hyper_parameters.{name}"
                                  f"{text.partition(':')[1]}{text.partition(':')[2]}; {_HPARAM_FIX.format(name=name)}"
                                  ) from None
            raise
        finally:
            _SAVED_HPARAMS.reset(token)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """`PPOModule.load_from_checkpoint(path)` (no trainer, no env): build the policy from the
        checkpoint's `policy_spaces` before Lightning loads the weights. A resumed fit has built it in
        `setup` already; nothing changes then."""
        saved = _SAVED_HPARAMS.get() or checkpoint.get("hyper_parameters")  # named by load_state_dict
        self._checkpoint_hparams = dict(saved) if isinstance(saved, dict) else None  # when the weights do not fit
        if self.policy is not None:
            return
        spaces = checkpoint.get("policy_spaces")
        if spaces is None:
            raise ConfigError("checkpoint: no policy_spaces (observation and action spec), so the policy cannot be "
                              "rebuilt; it was not written by a parlightning.fit PPOModule: resume it once with "
                              "python -m parlightning.fit to save them")
        observation_shape, action_spec = spaces_from_checkpoint(spaces)
        keys = (checkpoint.get("state_dict") or {}).get("policy.key_table.weight")
        if keys is not None and self.hparams.policy == "mlp":  # a TensorParallel policy: one table row per key
            self.policy = ActorCritic(observation_shape, action_spec, self.hparams.hidden_sizes,
                                      self.hparams.activation, n_keys=int(keys.shape[0]))
        else:
            self.policy = self.build_policy(observation_shape, action_spec)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        """`nn.Module.load_state_dict`, after the weights are compared with this module's: a parameter of
        another shape (or, strict, a missing or extra one) is one ConfigError naming the hyper-parameters
        whose checkpoint and current values differ (`hidden_sizes`, `policy`, ...), torch's list as detail."""
        own = super().state_dict()
        if isinstance(state_dict, Mapping):
            detail = weights_mismatch(state_dict, own, strict)
            if detail is not None:
                raise ConfigError(self._weights_mismatch(detail))
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def _weights_mismatch(self, detail: str) -> str:
        saved = getattr(self, "_checkpoint_hparams", None) or {}
        differ = [n for n in saved if n in self.hparams and saved[n] != self.hparams[n]]
        shaping = ("policy", "hidden_sizes", "rnn_hidden")  # the ones that set the network's shapes, first
        differ.sort(key=lambda n: (n not in shaping, n))
        if differ:
            named = "; ".join(f"{n} is {saved[n]!r} in the checkpoint but {self.hparams[n]!r} here" for n in differ[:4])
            return (f"model: the checkpoint's weights do not fit this PPOModule: {named}; load it with the "
                    f"checkpoint's {', '.join(differ[:4])} (drop the override) or start fresh ({detail})")
        return (f"model: the checkpoint's weights do not fit this PPOModule ({detail}); the policy's observation or "
                "action spaces (the world) or its hyper-parameters differ from the run that saved it: load it with "
                "the world and model settings it was trained with")

    def on_fit_start(self) -> None:
        planner = find_planner(self.trainer)
        if planner is not None:  # TensorParallel: this rank's gradient reaches only its section of the key table
            planner.mask_gradients(self.trainer, self.policy)

    def configure_optimizers(self) -> Any:
        if self.policy is None:  # a Lightning hook (not wrapped): its lifecycle requirement, declared above
            require(self, "configure_optimizers", "policy")
        fused = {"fused": True} if self.hparams.get("fused_adam", False) else {}
        try:
            optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr, eps=self.hparams.adam_eps, **fused)
        except RuntimeError as err:  # e.g. torch < 2.4 has no fused Adam on CPU
            raise ConfigError(f"model.fused_adam: not available here ({err}); set it false") from None
        if self.hparams.anneal_lr:
            self._iterations()  # refuse a run without max_epochs before the first rollout
        return optimizer  # the lr: `annealed_lr`, applied at each iteration's start (no scheduler beside it)

    def _iterations(self) -> int:
        iterations = self.trainer.max_epochs
        if not iterations or iterations <= 0:
            raise ConfigError("model.anneal_lr: needs trainer.max_epochs (the number of PPO iterations); set it or anneal_lr: false")
        return iterations

    def annealed_lr(self, iteration: int) -> float:
        """The learning rate of PPO iteration `iteration` (0-based): linear from `lr` towards 0 over
        `trainer.max_epochs` iterations (the first iteration at `lr`, the last at lr / max_epochs)."""
        return self.hparams.lr * max(1.0 - iteration / self._iterations(), 0.0)

    def on_train_epoch_start(self) -> None:
        """The one place the learning rate is set: from the iteration count (`annealed_lr`), so an
        update cut short by target_kl still anneals, a resume continues where it left off, and no
        scheduler's position can disagree with it (a Lightning scheduler would not step after an
        epoch that ended early)."""
        if self.hparams.anneal_lr:
            lr = self.annealed_lr(self.current_epoch)
            for optimizer in self.trainer.optimizers:
                for group in optimizer.param_groups:
                    group["lr"] = lr

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        if gradient_clip_val is None and self.hparams.max_grad_norm is not None:
            gradient_clip_val, gradient_clip_algorithm = self.hparams.max_grad_norm, "norm"
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    # ------------------------------------------------------------------ PPO step
    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        if self.policy is None:  # a Lightning hook (not wrapped): its lifecycle requirement, declared above
            require(self, "training_step", "policy")
        TRAINING_BATCH.check("PPOModule.training_step(batch)", batch, self, {})
        hp = self.hparams
        masked = {"mask": batch["masks"]} if "masks" in batch else {}  # the world's action masks, as stored
        if "state0" in batch:  # recurrent: whole per-actor chunks [B, L, ...], re-run from each chunk's first state
            new_logprob, entropy, new_value = self.policy.evaluate_sequences(
                batch["obs"], batch["actions"], batch["episode_start"], batch["state0"], **masked
            )
        else:
            keyed = {"key": batch["keys"]} if "keys" in batch else {}  # a keyed policy's table rows (TensorParallel)
            new_logprob, entropy, new_value = self.policy.evaluate(batch["obs"], batch["actions"], **keyed, **masked)
        out = ppo_loss(
            new_logprob, entropy, new_value, batch["logprobs"], batch["values"], batch["advantages"],
            batch["returns"], hp.clip_coef, hp.ent_coef, hp.vf_coef, hp.norm_adv, hp.clip_vloss,
            is_weight=_weights(batch.get("is_weights")),  # stale rollouts (data.max_policy_lag > 0) only
            sample_mask=batch.get("sample_mask"),  # per-actor collection: samples within the staleness bound
        )
        self._note_nonfinite(out.loss, out.policy_loss, out.value_loss, out.entropy)
        rows = batch["advantages"].numel()
        parts = torch.stack([out.policy_loss.detach(), out.value_loss.detach(), out.entropy.detach(),
                             out.approx_kl, out.old_approx_kl, out.clip_fraction]) * rows
        self._loss_sum = parts if self._loss_sum is None else self._loss_sum + parts
        self._loss_rows += rows
        if batch_idx == 0:
            self._log_rollout()
        self._last_kl = out.approx_kl
        return out.loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """After the minibatch the loader marks as its update epoch's last (`UPDATE_EPOCH_END`,
        the same minibatch on every rank): `on_update_epoch_end`."""
        if isinstance(batch, dict) and batch.get(UPDATE_EPOCH_END, False):
            self.on_update_epoch_end()

    def on_update_epoch_end(self) -> None:
        """The end of an update epoch (one pass over the rollout): one collective that decides the
        target-KL stop and the non-finite-loss stop together. Never in an epoch-end hook:
        Lightning's progress bar syncs epoch metrics there on rank 0 only, and a collective of ours
        in between would meet a different one on the other ranks (gloo aborts)."""
        hp = self.hparams
        local = self._nonfinite_step is not None and bool(self._nonfinite_step >= 0)
        kl = self._last_kl.detach().float() if self._last_kl is not None else torch.zeros((), device=self.device)
        packed = torch.stack([kl.to(self.device), torch.tensor(float(local), device=self.device)])
        if self.trainer.world_size > 1:
            packed = self.trainer.strategy.reduce(packed, reduce_op="sum")
        mean_kl, anywhere = float(packed[0]) / self.trainer.world_size, bool(packed[1] > 0)
        if anywhere:
            self._raise_nonfinite(local)
        if hp.target_kl is not None and mean_kl > hp.target_kl:
            self.trainer.datamodule.stop_update = True  # the loader ends before the next update epoch

    # ------------------------------------------------------------------ non-finite guard
    def _note_nonfinite(self, loss: Tensor, *parts: Tensor) -> None:
        """Keep, on the device (no host sync per step), the first optimizer step whose loss was NaN
        or inf and its parts; `on_update_epoch_end` reads it after every update epoch, `_raise_if_nonfinite` before every save."""
        parts = torch.stack([p.detach().float() for p in (loss, *parts)])
        if self._nonfinite_step is None:
            self._nonfinite_step = torch.full((), -1, dtype=torch.long, device=parts.device)
            self._nonfinite_parts = torch.zeros_like(parts)
        first = (self._nonfinite_step < 0) & ~torch.isfinite(parts[0])
        self._nonfinite_step = torch.where(first, self.global_step, self._nonfinite_step)
        self._nonfinite_parts = torch.where(first, parts, self._nonfinite_parts)

    def _raise_if_nonfinite(self) -> None:
        """Stop the run (every rank alike) if any rank saw a non-finite loss since the last check;
        called before checkpoints are written, so the last good one stays intact."""
        local = self._nonfinite_step is not None and bool(self._nonfinite_step >= 0)
        if self.trainer.strategy.reduce_boolean_decision(local, all=False):
            self._raise_nonfinite(local)

    def _raise_nonfinite(self, local: bool) -> None:
        where = "on another rank"
        if local:
            _, policy, value, entropy = self._nonfinite_parts.tolist()
            where = (f"first at optimizer step {int(self._nonfinite_step)} (policy {policy}, value {value}, "
                     f"entropy {entropy})")
        overflow = self._returns_overflow() if local else None
        if overflow is not None:
            raise FloatingPointError(f"non-finite PPO loss {where}: {overflow}. Stopped before saving, so the last "
                                     "checkpoint is intact.")
        raise FloatingPointError(
            f"non-finite PPO loss {where}: check rewards/observations for NaN or inf and lower model.lr. "
            "Stopped before saving, so the last checkpoint is intact."
        )

    def _returns_overflow(self) -> Optional[str]:
        """Why the loss overflowed when the world's rewards are finite but so large that the
        discounted returns are not (float32 ends at 3.4e38): the world and its largest reward."""
        dm = getattr(self.trainer, "datamodule", None)
        rollout = getattr(dm, "last_rollout", None)
        buf = getattr(rollout, "buffer", None)
        if buf is None or getattr(buf, "returns", None) is None or not buf.rewards.numel():
            return None
        if not bool(torch.isfinite(buf.rewards).all()) or bool(torch.isfinite(buf.returns).all()):
            return None
        env = getattr(getattr(dm, "collector", None), "env", None)
        largest = float(buf.rewards.abs().max())
        return (f"data.env: {type(env).__name__}'s rewards (largest magnitude {largest:.3g}) are finite, but their "
                "discounted returns overflow float32 (3.4e38); scale the world's rewards down (or wrap it in "
                "parlightning.envs.NormalizeEnv with norm_reward: true)")

    def on_train_epoch_end(self) -> None:
        # No collective here (see on_train_batch_end): the non-finite check already ran at the end
        # of the epoch's last update epoch, before ModelCheckpoint's epoch-end save.
        self._log_losses()

    def _log_losses(self) -> None:
        """The epoch's loss metrics, logged once: row-weighted means over its minibatches (what
        `self.log(on_epoch=True, batch_size=rows)` per minibatch gave, at ~0.6 ms per call on CPU:
        20% of an iteration at N=256, T=32)."""
        if self._loss_sum is None:
            return
        means = (self._loss_sum / self._loss_rows).unbind()
        self.log_dict({f"losses/{k}": v for k, v in zip(LOSS_METRICS, means)}, on_step=False, on_epoch=True,
                      sync_dist=self.trainer.world_size > 1, batch_size=self._loss_rows)
        self._loss_sum, self._loss_rows = None, 0

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Any save (every_n_train_steps, a user's call). A collective, but saves run on every rank
        # after ModelCheckpoint has read (and so synced) the epoch metrics on every rank.
        self._raise_if_nonfinite()
        env = getattr(getattr(self.trainer.datamodule, "collector", None), "env", None)
        if self.policy is not None and env is not None:  # `parlightning.export` rebuilds the policy from these
            spec = self.policy.action_spec
            mask = action_mask_of(env)  # export takes the world's mask as an input when it has one
            checkpoint["policy_spaces"] = {
                "observation_shape": [int(d) for d in env.observation_shape],
                "action_spec": {"kind": spec.kind, "nvec": [int(n) for n in spec.nvec],
                                "shape": [int(d) for d in spec.shape], "low": spec.low, "high": spec.high},
                "action_mask_width": None if mask is None else int(mask.shape[-1]),
            }

    def _log_rollout(self) -> None:
        rollout = self.trainer.datamodule.last_rollout
        if rollout is None:
            return
        sync = self.trainer.world_size > 1
        stats = {k: v.float() for k, v in rollout.stats.items()}
        share = delegation_share(rollout.buffer)
        if share is not None:  # a masked world: collapse to serial is visible as this falling to 0
            stats["rollout/delegation_share"] = share
        once = dict(on_step=False, on_epoch=True, batch_size=1)
        self.log_dict(stats, sync_dist=sync, **once)
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]
        self.log("charts/learning_rate", lr, **once)
        self.log("step", float(rollout.env_steps), **once)  # TensorBoard's x-axis: env steps (CleanRL convention)
        self.log("env_steps", float(rollout.env_steps), prog_bar=True, logger=False, **once)
        if "charts/SPS" in stats:
            self.log("SPS", stats["charts/SPS"], prog_bar=True, logger=False, **once)


def spaces_from_checkpoint(spaces: dict[str, Any]) -> tuple[tuple[int, ...], Any]:
    """The observation shape and `ActionSpec` a checkpoint's `policy_spaces` (written by
    `PPOModule.on_save_checkpoint`) describe; a record that describes no policy is one ConfigError
    naming the entry (`policy_spaces.action_spec.nvec: ...`)."""
    from parlightning.envs.base import ActionSpec

    a = spaces.get("action_spec")
    if not isinstance(a, Mapping) or not {"kind", "nvec", "shape", "low", "high"} <= a.keys():
        raise ConfigError(f"policy_spaces.action_spec: {a!r:.80} is not the record of an ActionSpec (a mapping of kind, "
                          "nvec, shape, low and high)")
    for name, value in (("observation_shape", spaces.get("observation_shape")), ("action_spec.nvec", a["nvec"]),
                        ("action_spec.shape", a["shape"])):
        if (isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, torch.Size))
                or any(isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 1 for d in value)):
            raise ConfigError(f"policy_spaces.{name}: {value!r:.80} is not a list of sizes, each an int >= 1 (a policy "
                              "has at least one input, and one category or number per action dimension)")
    width = spaces.get("action_mask_width")
    if width is not None and (isinstance(width, bool) or not isinstance(width, numbers.Integral) or width < 1):
        raise ConfigError(f"policy_spaces.action_mask_width: {width!r:.40} is not a mask width (null for a world without "
                          "action masks, else an int >= 1: the entries of one actor's mask)")
    try:
        spec = ActionSpec(a["kind"], tuple(a["nvec"]), tuple(a["shape"]), a["low"], a["high"])
    except ConfigError as err:  # ActionSpec.<field>: ... -> policy_spaces.action_spec.<field>: ...
        raise ConfigError(str(err).replace("ActionSpec.", "policy_spaces.action_spec.", 1)) from None
    return tuple(int(d) for d in spaces["observation_shape"]), spec


def _weights(is_weights: Optional[Tensor]) -> Optional[Tensor]:
    """The lag correction's truncated importance weights (>= 0 and finite by construction), vouched so
    `ppo_loss` does not read them back to check."""
    return None if is_weights is None else vouch(is_weights, WEIGHTS)
