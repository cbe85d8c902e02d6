"""The boundary between `python -m parlightning.fit` and the components it runs but does not own: the
callbacks of `trainer.callbacks` (a user's, incl. rollout hooks, and Lightning's own, e.g.
ModelSummary), the loggers of `trainer.logger`. A fault there becomes one line naming the config field,
the class and the hook, and the fix.

`ComponentGuard.install(trainer, config)` gives each such component an instance-level wrapper around
each hook its class defines (Lightning and the data module call hooks through `getattr`, so the wrapper
is what they call). Around each call, it checks, in O(1) host-side metadata (no tensor data read, no
device sync):

- an exception raised in the hook: named (`user_code_error` for the user's own code; for a Lightning
  component, its class, hook and the config's init_args it was given: a bad argument is what makes
  Lightning's own code raise at run time), a `pl_module.log` where Lightning does not allow it named
  with the callback and hook;
- torch's global state the run relies on: default dtype, default device, grad mode, deterministic
  algorithms, compared before and after the hook (a hook may use them inside a `with` block);
- what the hook is handed: the minibatch's keys, shapes and dtypes (`batch`), the rollout's buffer
  (`rollout.buffer`), the module's parameters (their in-place version counters: only a changed one
  reads the values, once, to refuse NaN or inf);
- what it puts into a checkpoint (`on_save_checkpoint`, `state_dict`): what a resume could not read
  back (`parlightning.runtime.checkpoint.unsavable`), `checkpoint['state_dict']` removed;
- `on_exception` that raises while another error ends the run: the original error is reported, the
  hook's own error is appended to its line (`notes`).

A fault in a Lightning component is marked `setting=True` (its configured arguments are at fault):
`fit` then takes back what a run that wrote no checkpoint yet created, as for a refused start.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
from typing import Any, Callable, Optional

import torch

from parlightning.cli.user_code import user_code_error
from parlightning.errors import ReportedError, error_text, named_by_package, tracebacks_wanted
from parlightning.runtime.torch_state import global_state, state_change

_LOGGER_METHODS = ("log_metrics", "log_hyperparams", "log_graph", "save", "finalize", "after_save_checkpoint")
_PASS = (KeyboardInterrupt, SystemExit, GeneratorExit)  # ended by the user or the program: never renamed
# Lightning's warning when a ModelCheckpoint's monitor is not among the logged metrics: it saves nothing and
# warns each iteration, as a validation loop might log the key later; a PPO run has none, so fit makes it an error
UNLOGGED_MONITOR = r"`ModelCheckpoint\(monitor=.*\)` could not find the monitored key in the returned metrics"


def logged_examples(listing: str) -> str:
    """A few of the metric names a Lightning message listed as logged (the usual ones first)."""
    logged = re.findall(r"[`']([\w/]+)[`']", listing)
    return ", ".join(m for m in ("charts/episodic_return", "rollout/success_rate", "losses/approx_kl")
                     if m in logged) or ", ".join(logged[:3])


def unlogged_monitor_line(err: BaseException) -> Optional[str]:
    """The one line for a ModelCheckpoint whose monitor this run never logs (UNLOGGED_MONITOR raised as
    an error), or None."""
    found = re.search(r"ModelCheckpoint\(monitor=(.*?)\)` could not find the monitored key in the returned "
                      r"metrics: (\[.*)", str(err), re.S)
    if not isinstance(err, Warning) or found is None:
        return None
    return (f"trainer.callbacks: ModelCheckpoint monitors {found.group(1)}, which this run never logs (it could never "
            f"pick a best checkpoint); monitor a logged metric (e.g. {logged_examples(found.group(2))}; the tags: "
            "docs/guides/logging.md), or drop monitor to keep the latest checkpoints")
_ROLLOUT_HOOKS = ("on_rollout_start", "on_episodes_end", "on_rollout_end")


class ComponentFault(ReportedError):
    """A component of the config (a callback, a logger) failed at a hook; the message names it.
    `setting`: the component is Lightning's (its configured arguments are at fault, not code)."""

    def __init__(self, message: str, setting: bool = False) -> None:
        super().__init__(message)
        self.setting = setting


class ComponentGuard:
    """The boundary checks around a trainer's components (see the module docstring)."""

    def __init__(self, config: Any = None) -> None:
        self.config = config
        self.notes: list[str] = []  # on_exception hooks that raised while another error was reported
        self._params: dict[int, list] = {}  # a module's parameters (listed again at every hook that is not per step)
        self._named: dict[int, list] = {}  # the same, with their names: [(name, parameter)]

    # ------------------------------------------------------------------ install
    @classmethod
    def install(cls, trainer: Any, config: Any = None) -> "ComponentGuard":
        guard = cls(config)
        entries = _config_entries(config, "callbacks")
        used: set[int] = set()
        for cb in trainer.callbacks:
            if _package_own(cb):
                continue  # the package's own callbacks: a fault there is a bug, its traceback is kept
            index = _entry_index(entries, cb, used)
            field = "trainer.callbacks" if index is None else f"trainer.callbacks[{index}]"
            guard._wrap(cb, field, _hooks_of(cb), entries[index] if index is not None else None)
        loggers = list(getattr(trainer, "loggers", []) or [])
        logger_entries = _config_entries(config, "logger")
        for i, logger in enumerate(loggers):
            if _package_own(logger):
                continue
            field = "trainer.logger" if len(loggers) == 1 else f"trainer.logger[{i}]"
            entry = logger_entries[i] if i < len(logger_entries) else None
            guard._wrap(logger, field, [m for m in _LOGGER_METHODS if callable(getattr(logger, m, None))], entry)
        return guard

    def _wrap(self, component: Any, field: str, hooks: list[str], entry: Any) -> None:
        lightning = _lightning_own(component)
        for hook in hooks:
            fn = getattr(component, hook, None)
            if not callable(fn) or getattr(fn, "__parl_guarded__", False):
                continue
            try:
                setattr(component, hook, self._guarded(component, field, hook, fn, lightning, entry))
            except (AttributeError, TypeError):  # a slotted or frozen class: its hooks run unguarded
                return

    def _guarded(self, component: Any, field: str, hook: str, fn: Callable, lightning: bool, entry: Any) -> Callable:
        guard = self
        batch_at = 2 if hook in ("on_train_batch_start", "on_train_batch_end") else None
        if hook == "on_train_batch_end":
            batch_at = 3  # (trainer, pl_module, outputs, batch, batch_idx)
        per_step = hook.startswith(("on_train_batch", "on_before_", "on_after_backward"))

        @functools.wraps(fn)
        def hook_call(*args: Any, **kwargs: Any) -> Any:
            before = global_state()
            batch = _entries(args[batch_at]) if batch_at is not None and len(args) > batch_at else None
            rollout = args[2] if hook == "on_rollout_end" and len(args) > 2 else None
            buffer = getattr(rollout, "buffer", None)
            module = args[1] if len(args) > 1 and isinstance(args[1], torch.nn.Module) else None
            params = guard._parameters(module, refresh=not per_step) if module is not None else None
            versions = [p._version for p in params] if params else None
            trainable = [p.requires_grad for p in params] if params else None
            grads = _grad_marks(params) if params and hook in _GRADIENT_HOOKS else None
            checkpoint = args[2] if hook == "on_save_checkpoint" and len(args) > 2 else None
            kept = dict(checkpoint) if isinstance(checkpoint, dict) else None
            policy = getattr(module, "policy", _ABSENT) if module is not None else _ABSENT
            # Lightning's own callbacks may re-parametrize on purpose (ModelPruning's weight_orig): the user's only
            layout = _layout(guard._named[id(module)]) if params and not lightning else None
            hparams = _hparams_of(module)
            trainer = args[0] if args and not lightning and hasattr(args[0], "strategy") else None
            optimizers = _optimizers_of(trainer)
            datamodule = getattr(trainer, "datamodule", None) if trainer is not None else None
            settings = _settings_of(datamodule)
            try:
                out = fn(*args, **kwargs)
            except BaseException as err:  # noqa: BLE001 (named below, or passed on untouched)
                if hook == "on_exception" and not isinstance(err, _PASS):  # the run's own error is the one to report
                    guard.notes.append(guard._note(component, field, hook, err))
                    return None
                fault = guard._fault(component, field, hook, err, lightning, entry)
                if fault is err:
                    raise
                raise fault from None
            where = f"{field}: {_name(component)}.{hook}"
            changed = state_change(before)  # restored before the line is printed
            if changed is not None:
                raise ComponentFault(f"{where} {changed}", lightning)
            if batch is not None and not _same_entries(batch, args[batch_at]):
                raise ComponentFault(f"{where} changed the minibatch it was handed "
                                     f"({_batch_change(_entry_shapes(batch), _shape_of(args[batch_at]))}); "
                                     "the PPO update reads the "
                                     "same batch after the callbacks, and its rows must stay aligned: read the batch, "
                                     "or work on a copy (batch['obs'][:1].clone())", lightning)
            if policy is not _ABSENT and policy is not None and getattr(module, "policy", _ABSENT) is not policy:
                raise ComponentFault(f"{where} {_policy_change(module)}; the optimizer, the rollout and every "
                                     "checkpoint hold the policy the module built for the world's spaces: leave "
                                     "pl_module.policy in place (change its weights in place, e.g. "
                                     "pl_module.policy.load_state_dict(...))", lightning)
            if rollout is not None and getattr(rollout, "buffer", None) is not buffer:
                raise ComponentFault(f"{where} replaced rollout.buffer (with {type(rollout.buffer).__name__}); the "
                                     "update's minibatches are cut from it after the rollout hooks: leave it in place "
                                     "(read from it; the next round reuses its memory)", lightning)
            if hparams is not None:
                _check_hparams(where, module, hparams, lightning)
            if layout is not None:
                named = guard._named[id(module)] if per_step else guard._relist(module)
                change = _parameter_change(layout, _layout(named))
                if change is not None:
                    raise ComponentFault(f"{where} {change}; the optimizer, the rollout and every checkpoint hold the "
                                         "parameters the module built (their dtype from trainer.precision, their "
                                         "device from trainer.accelerator): leave them in place (change weights in "
                                         "place, e.g. under torch.no_grad(): p.mul_(0.5))", lightning)
            if optimizers is not None and _optimizers_of(trainer) != optimizers:
                now = _optimizers_of(trainer) or []
                raise ComponentFault(f"{where} replaced trainer.optimizers ({len(optimizers)} optimizers before, "
                                     f"{len(now)} now, {sum(1 for o in now if o not in optimizers)} of them new); the "
                                     "PPO update steps the optimizer configure_optimizers built, and checkpoints save "
                                     "its state: leave trainer.optimizers in place (change settings in place, e.g. "
                                     "trainer.optimizers[0].param_groups[0]['lr'])", lightning)
            if settings:
                _check_settings(where, datamodule, settings, per_step, lightning)
            if trainable is not None and [p.requires_grad for p in params] != trainable:
                frozen = sum(1 for p, was in zip(params, trainable) if was and not p.requires_grad)
                if frozen and not any(p.requires_grad for p in params):  # some frozen is fine-tuning; all is no update
                    raise ComponentFault(f"{where} froze every parameter of the module ({frozen} set to "
                                         "requires_grad=False); the PPO loss then has no gradient and the update "
                                         "fails: leave some trainable (freeze layers, not the whole policy)", lightning)
            if versions is not None and [p._version for p in params] != versions:  # it wrote into them: read once
                _check_finite_parameters(where, module, lightning)
            if grads is not None and _grad_marks(params) != grads:  # it wrote (or replaced) gradients: read once
                _check_finite_gradients(where, module, lightning)
            if kept is not None:
                _check_checkpoint(where, kept, checkpoint, lightning)
            if hook == "state_dict":
                why = unsavable_state(out)
                if why is not None:
                    raise ComponentFault(f"{where} returned state that a resume could not read back: {why}; a "
                                         "callback's state holds tensors, numbers, strings and plain containers "
                                         "(checkpoints load with torch.load(weights_only=True))", lightning)
            return out

        hook_call.__parl_guarded__ = True  # type: ignore[attr-defined]
        return hook_call

    def _parameters(self, module: torch.nn.Module, refresh: bool) -> list:
        """The module's parameters, listed once and again at each hook that is not per step (a per-step
        hook reads the cached list: walking the module tree costs more than the check)."""
        key = id(module)
        if refresh or key not in self._params:
            self._relist(module)
        return self._params[key]

    def _relist(self, module: torch.nn.Module) -> list:
        """List the module's (name, parameter) pairs again (cached for the per-step hooks)."""
        try:
            named = [(n, p) for n, p in module.named_parameters() if p._version is not None]
        except RuntimeError:  # inference tensors have no version counter
            named = []
        self._named[id(module)] = named
        self._params[id(module)] = [p for _, p in named]
        return named

    # ------------------------------------------------------------------ messages
    def _fault(self, component: Any, field: str, hook: str, err: BaseException, lightning: bool,
               entry: Any) -> BaseException:
        """The ComponentFault naming `component` for `err`, or `err` itself when it passes untouched: an
        interrupt or exit, one of the package's own named errors, an error outside the user's own code
        raised through a user's hook (a bug: its traceback is kept), PARLIGHTNING_TRACEBACK=1."""
        if isinstance(err, _PASS) or type(err).__name__ in ("SIGTERMException", "Signalled") or named_by_package(err) \
                or tracebacks_wanted():
            return err
        line = self._line(component, field, hook, err, lightning, entry)
        return err if line is None else ComponentFault(line, lightning)

    def _line(self, component: Any, field: str, hook: str, err: BaseException, lightning: bool,
              entry: Any) -> Optional[str]:
        from lightning.fabric.utilities.exceptions import MisconfigurationException

        unlogged = unlogged_monitor_line(err)
        if unlogged is not None:
            return unlogged
        where = f"{field}: {_name(component)}.{hook}"
        text = error_text(err)[:300]
        if isinstance(err, MisconfigurationException) and "self.log" in text:
            if hook in _ROLLOUT_HOOKS:
                fix = ("add the value to rollout.stats in on_rollout_end instead (rollout.stats['user/x'] = "
                       "torch.tensor(x)): the module logs it at the round's env step")
            else:
                fix = "log from a hook Lightning allows it in (e.g. on_train_batch_end or on_train_epoch_end)"
            return f"{where} called pl_module.log, which Lightning does not allow there ({text}); {fix}"
        user = user_code_error(err)  # names the user's own frame; None: not raised in their code
        if not lightning:
            base = field.split("[")[0]  # user_code_error names the field without the entry's index
            if user is None or user.startswith(f"{base}: {_name(component)}."):
                return user if user is None else field + user[len(base):]
            return f"{where}: {user}"  # the user's frame is another object's (a helper the hook called)
        # a Lightning component's hook that failed in the user's code (a logger property it read)
        if user is not None and user.startswith(("trainer.", "data.", "model.")):  # the user's object has a field:
            head, sep, tail = user.partition("; the error is in that code")  # it first, then the hook that reached it
            return f"{head} (called by {where}){sep}{tail}" if sep else f"{user} (called by {where})"
        if user is not None:  # a function of the user's the component was given (a LambdaCallback's)
            return f"{where}: {user}"
        given = _init_args(entry, type(component))
        zeros = [k for k, v in given.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and v == 0]
        if isinstance(err, ZeroDivisionError) and zeros:
            hint = f"; {', '.join(f'{k}=0' for k in zeros)} is the zero it divided by"
        else:
            hint = f"; it was given {', '.join(f'{k}={v!r:.30}' for k, v in given.items())}" if given else ""
        text = text.rstrip(". ")
        return (f"{where} raised {type(err).__name__}{': ' + text if text else ''}{hint}; fix that argument in the "
                "config (Lightning did not refuse it when the class was built)")

    def _note(self, component: Any, field: str, hook: str, err: BaseException) -> str:
        text = error_text(err)[:160]
        return f"also: {field}: {_name(component)}.{hook} raised {type(err).__name__}{': ' + text if text else ''}"

    def with_notes(self, message: str) -> str:
        """The run's one error line with what the `on_exception` hooks raised while it was reported."""
        if not self.notes:
            return message
        return f"{message} ({'; '.join(n for n in self.notes if n)[:400]})"


def unsavable_state(state: Any) -> Optional[str]:
    from parlightning.runtime.checkpoint import unsavable

    return unsavable(state, "state")


def _check_checkpoint(where: str, kept: dict, checkpoint: dict, lightning: bool) -> None:
    """The checkpoint after an `on_save_checkpoint` hook: its `state_dict` still there, and nothing in
    it that a resume could not read back (the whole dict, once per save per hook: what Lightning and
    the earlier hooks put there was checked after them, so a finding is this hook's)."""
    from parlightning.runtime.checkpoint import unsavable

    if "state_dict" in kept and not isinstance(checkpoint.get("state_dict"), dict):
        what = "removed" if "state_dict" not in checkpoint else f"replaced (with {type(checkpoint['state_dict']).__name__})"
        raise ComponentFault(f"{where} {what} checkpoint['state_dict'] (the policy's weights): a checkpoint without them "
                             "cannot resume, evaluate or export; leave it in place (save smaller checkpoints with "
                             "ModelCheckpoint(save_weights_only=True) instead)", lightning)
    gone = [k for k in _RESUME_KEYS if k in kept and k not in checkpoint]
    if gone:
        raise ComponentFault(f"{where} removed checkpoint[{gone[0]!r}] ({_RESUME_KEYS[gone[0]]}): a checkpoint without "
                             "it cannot resume the run; leave it in place (for weights-only files use "
                             "ModelCheckpoint(save_weights_only=True) beside the default one)", lightning)
    weights = checkpoint.get("state_dict")
    poisoned = next((k for k, v in (weights.items() if isinstance(weights, dict) else ())
                     if isinstance(v, torch.Tensor) and v.is_floating_point() and v.layout == torch.strided
                     and not v.is_meta and not bool(torch.isfinite(v).all())), None)
    if poisoned is not None:
        raise ComponentFault(f"{where} left non-finite values (NaN or inf) in checkpoint['state_dict'][{poisoned!r}]: "
                             "every load refuses such a file (resume, evaluate, export) and the run's weights are "
                             "finite; save the weights as they are (work on a copy to store something else)", lightning)
    why = unsavable(checkpoint)
    if why is not None:
        raise ComponentFault(f"{where} put into the checkpoint what a resume could not read back: {why}; "
                             "checkpoints load with torch.load(weights_only=True): store tensors (on a real "
                             "device), numbers, strings and plain containers (e.g. a datetime as .isoformat())",
                             lightning)


# What Lightning's resume reads from a full checkpoint besides the weights (`state_dict`, checked above)
_RESUME_KEYS = {"optimizer_states": "Adam's moments and step counts", "loops": "the fit loop's progress",
                "lr_schedulers": "the schedulers' state", "callbacks": "the callbacks' state",
                "epoch": "the epoch counter", "global_step": "the optimizer step counter"}

_GRADIENT_HOOKS = ("on_after_backward", "on_before_optimizer_step")  # the hooks that see this step's gradients


def _grad_marks(params: list) -> list:
    """Each parameter's gradient as (object id, version counter): host-side ints, no tensor data read."""
    return [(id(p.grad), p.grad._version) if p.grad is not None else None for p in params]


def _check_finite_gradients(where: str, module: torch.nn.Module, lightning: bool) -> None:
    """The module's gradients after a hook wrote into them: one host read."""
    bad = [name for name, p in module.named_parameters()
           if p.grad is not None and p.grad.is_floating_point() and not bool(torch.isfinite(p.grad).all())]
    if bad:
        raise ComponentFault(f"{where} left NaN or inf in the gradients ({len(bad)} tensors, first {bad[0]}) when it "
                             "wrote into them; the optimizer step would turn every weight NaN: fix the hook (clip or "
                             "scale gradients with finite values)", lightning)


def _check_finite_parameters(where: str, module: torch.nn.Module, lightning: bool, quiet: bool = False) -> None:
    """The module's parameters after a hook wrote into them: one host read (never per step unless a hook
    writes them every step)."""
    bad = [name for name, p in module.named_parameters() if p.is_floating_point() and not bool(torch.isfinite(p).all())]
    if bad:
        raise ComponentFault(f"{where} left NaN or inf in the module's parameters ({len(bad)} tensors, first {bad[0]})"
                             f"{'' if quiet else ' when it wrote into them'}; the update would train on them and "
                             "every checkpoint would hold them: fix the hook (never write non-finite values into "
                             "pl_module's weights)", lightning)


def _entries(batch: Any) -> Optional[list]:
    """What a minibatch holds, by reference: (key, value, shape) per entry (no tensor data read)."""
    if not isinstance(batch, dict):
        return None
    return [(k, v, v.shape if isinstance(v, torch.Tensor) else None) for k, v in batch.items()]


def _entry_shapes(entries: list) -> tuple:
    return tuple((k, tuple(shape), v.dtype) if shape is not None else (k, type(v)) for k, v, shape in entries)


def _same_entries(before: list, batch: Any) -> bool:
    """The minibatch still holds what it held (the same keys; each tensor of the same shape and dtype):
    the same objects is the fast path; a replaced tensor of the same shape and dtype is fine."""
    if not isinstance(batch, dict) or len(batch) != len(before):
        return False
    for (key, value, shape), (k, v) in zip(before, batch.items()):
        if key != k:
            return False
        if v is value and (shape is None or v.shape == shape):
            continue
        if not (isinstance(v, torch.Tensor) and isinstance(value, torch.Tensor) and v.shape == shape
                and v.dtype == value.dtype):
            return False
    return True


def _shape_of(batch: Any) -> Any:
    if isinstance(batch, dict):
        return tuple((k, tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else (k, type(v))
                     for k, v in batch.items())
    if isinstance(batch, torch.Tensor):
        return (tuple(batch.shape), batch.dtype)
    return None


def _batch_change(before: tuple, after: Any) -> str:
    if after is None:
        return "it is no longer a dict of tensors"
    old, new = {e[0]: e for e in before}, {e[0]: e for e in after}
    for key in old:
        if key not in new:
            return f"removed {key!r}"
        if old[key] != new[key]:
            shape = lambda e: f"{list(e[1])} {str(e[2]).replace('torch.', '')}" if len(e) == 3 else e[1].__name__  # noqa: E731
            return f"{key!r} went from {shape(old[key])} to {shape(new[key])}"
    added = [k for k in new if k not in old]
    return f"added {added[0]!r}" if added else "its entries changed"


_ABSENT = object()


def _layout(named: list) -> list:
    """The module's parameters as host metadata: (name, object id, dtype, device, shape); no data read."""
    return [(n, id(p), p.dtype, p.device, p.shape) for n, p in named]


def _parameter_change(before: list, after: list) -> Optional[str]:
    """How a hook changed the module's parameters (removed, converted, moved, resized, replaced), or None;
    parameters it added are its own (the optimizer does not hold them, and they change nothing it holds)."""
    new = {e[0]: e for e in after}
    removed = [e[0] for e in before if e[0] not in new]
    if removed:
        return f"removed {len(removed)} of the module's parameters (first {removed[0]})"
    for name, pid, dtype, device, shape in before:
        _, now_id, now_dtype, now_device, now_shape = new[name]
        if now_dtype != dtype:
            return f"converted the module's parameters to {now_dtype} (they were {dtype}; first {name})"
        if now_device != device:
            return f"moved the module's parameters to {now_device} (they were on {device}; first {name})"
        if now_shape != shape:
            return f"resized {name} from {list(shape)} to {list(now_shape)}"
        if now_id != pid:
            return f"replaced the parameter {name} with a new tensor (the optimizer still steps the old one)"
    return None


def _differs(old: Any, new: Any, same_type: bool) -> bool:
    """Whether a hook changed a value: another object that is not equal (`same_type`: or of another type);
    a tensor, or an object whose == raises, compared by identity."""
    if new is old:
        return False
    try:
        return not (bool(old == new) and (not same_type or type(old) is type(new)))
    except Exception:  # noqa: BLE001
        return True


def _hparams_of(module: Any) -> Optional[dict]:
    """A shallow copy of the module's hyper-parameters (what a hook may set), or None."""
    hparams = getattr(module, "hparams", None) if module is not None else None
    try:
        return dict(hparams) if hparams is not None else None
    except (TypeError, ValueError):
        return None


def _check_hparams(where: str, module: Any, before: dict, lightning: bool) -> None:
    """A hyper-parameter a hook set must be one the module's constructor accepts (it is read at every
    iteration: a bad one would fail there, naming no hook)."""
    from parlightning.config_types import check_args
    from parlightning.errors import ConfigError

    now = getattr(module, "hparams", None)
    changed = {}
    for key, value in (now.items() if hasattr(now, "items") else ()):
        if _differs(before.get(key, _ABSENT), value, same_type=False):
            changed[key] = value
    if not changed:
        return
    try:
        check_args("", type(module).__init__, changed)
    except ConfigError as err:
        name = str(err).split(":", 1)[0]
        raise ComponentFault(f"{where} set pl_module.hparams.{name} to {changed.get(name)!r}, which the module does "
                             f"not accept ({str(err).split(': ', 1)[-1]}); model.{name} is read at every iteration: "
                             "set a value its config accepts, or leave hparams alone", lightning) from None


@functools.lru_cache(maxsize=16)
def _setting_names(cls: type) -> tuple[str, ...]:
    """The constructor arguments of a data module class (its settings: `num_envs`, `gamma`, `sampler`, ...)."""
    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return ()
    return tuple(n for n, p in params.items() if n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))


def _settings_of(datamodule: Any) -> Optional[dict]:
    """The data module's settings as they are now (the attributes named by its constructor), or None."""
    if datamodule is None:
        return None
    names = _setting_names(type(datamodule))
    return {n: v for n in names if (v := getattr(datamodule, n, _ABSENT)) is not _ABSENT}


# read at each iteration's start (the update's minibatches): a hook between iterations may change them
_LIVE_SETTINGS = ("update_epochs", "num_minibatches")


def _check_settings(where: str, datamodule: Any, before: dict, per_step: bool, lightning: bool) -> None:
    """A data module setting a hook changed: `update_epochs` / `num_minibatches` outside a per-step hook
    to a value the constructor accepts is the next iteration's; any other change (another value, another
    object) would be ignored (the worlds, buffer and collector were built from it) or break a rollout."""
    from parlightning.config_types import check_args
    from parlightning.errors import ConfigError

    for name, was in before.items():
        now = getattr(datamodule, name, _ABSENT)
        if not _differs(was, now, same_type=True):
            continue
        now = None if now is _ABSENT else now
        head = f"{where} set trainer.datamodule.{name} to {now!r:.60} (it was {was!r:.60})"
        if name in _LIVE_SETTINGS and not per_step:
            try:
                check_args("data", type(datamodule).__init__, {name: now})
                continue
            except ConfigError as err:
                raise ComponentFault(f"{head}, which the data module does not accept ({str(err).split(': ', 1)[-1]}); "
                                     f"data.{name} is read at each iteration's start: set a value its config accepts",
                                     lightning) from None
        when = ("during an update (the minibatches of the iteration are cut already)" if name in _LIVE_SETTINGS else
                "once, when the run builds its worlds, rollout buffer and collector")
        raise ComponentFault(f"{head}; the data module reads it {when}, so the change would be ignored or break the "
                             f"next rollout: set data.{name} in the config (update_epochs and num_minibatches may "
                             "change between iterations, e.g. in on_train_epoch_start)", lightning)


def _optimizers_of(trainer: Any) -> Optional[list]:
    """The trainer's optimizers (the objects), or None without a trainer."""
    if trainer is None:
        return None
    try:
        return list(trainer.optimizers or [])
    except Exception:  # noqa: BLE001 (a trainer not yet set up)
        return None


def _policy_change(module: Any) -> str:
    new = getattr(module, "policy", _ABSENT)
    if new is _ABSENT:
        return "deleted pl_module.policy"
    if new is None:
        return "replaced pl_module.policy with None"
    if not isinstance(new, torch.nn.Module):
        return f"replaced pl_module.policy with a {type(new).__name__} (not a torch.nn.Module)"
    return f"replaced pl_module.policy with another {type(new).__name__} object"


def _name(component: Any) -> str:
    return type(component).__qualname__


def _package_own(component: Any) -> bool:
    return type(component).__module__.split(".")[0] == "parlightning"


def _lightning_own(component: Any) -> bool:
    return type(component).__module__.split(".")[0] in ("lightning", "pytorch_lightning")


def _hooks_of(cb: Any) -> list[str]:
    """The hooks of `cb`'s class that differ from the no-op defaults of lightning.Callback (and of
    RolloutCallback), plus `state_dict`: those are the ones that run its code."""
    from lightning.pytorch import Callback

    from parlightning.callbacks.base import RolloutCallback

    hooks = []
    for name in dir(type(cb)):
        if not (name.startswith("on_") or name in ("setup", "teardown", "state_dict", "load_state_dict")):
            continue
        own = inspect.getattr_static(type(cb), name, None)
        if own is None or own is inspect.getattr_static(Callback, name, None) or \
                own is inspect.getattr_static(RolloutCallback, name, None):
            continue
        hooks.append(name)
    try:  # hooks set on the instance (LambdaCallback(on_train_start=fn) stores fn as an attribute)
        own = vars(cb)
    except TypeError:
        own = {}
    for name, fn in own.items():
        if name not in hooks and callable(fn) and callable(getattr(Callback, name, None)) and \
                (name.startswith("on_") or name in ("setup", "teardown")):
            hooks.append(name)
    return hooks


def _config_entries(config: Any, key: str) -> list:
    """The config's `trainer.<key>` entries (a list of class_path specs; one spec as a list of one)."""
    try:
        trainer = config.get("trainer") if config is not None else None
        value = trainer.get(key) if trainer is not None else None
    except Exception:  # noqa: BLE001
        return []
    if value is None or isinstance(value, bool):
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _class_path(entry: Any) -> str:
    try:
        path = entry.get("class_path") if hasattr(entry, "get") else getattr(entry, "class_path", None)
    except Exception:  # noqa: BLE001
        path = None
    return str(path or "")


def _entry_index(entries: list, component: Any, used: set) -> Optional[int]:
    """The position in the config's list of the entry that built `component` (by its class's name,
    in order), or None for one the program added (the progress bar, last.ckpt)."""
    name = type(component).__name__
    for i, entry in enumerate(entries):
        if i not in used and _class_path(entry).rpartition(".")[2] == name:
            used.add(i)
            return i
    return None


def _init_args(entry: Any, cls: Any = None) -> dict:
    """The init_args of a config entry; with `cls`, only those that differ from its signature's defaults
    (the parser fills in every default)."""
    try:
        args = entry.get("init_args") if hasattr(entry, "get") else None
        items = dict(vars(args)) if args is not None and not isinstance(args, dict) else dict(args or {})
    except Exception:  # noqa: BLE001
        return {}
    items = {k: v for k, v in items.items() if not k.startswith("_")}
    if cls is not None:
        try:
            defaults = {k: p.default for k, p in inspect.signature(cls).parameters.items()}
        except (TypeError, ValueError):
            defaults = {}
        items = {k: v for k, v in items.items() if k not in defaults or not _same(defaults[k], v)}
    return items


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
    except Exception:  # noqa: BLE001
        return False


def probe_loggers(trainer: Any, config: Any) -> None:
    """Before anything is written: each local-file logger the config names (Lightning's CSVLogger,
    TensorBoardLogger) is built again with the same arguments in a scratch folder and given the calls
    the run makes (hyper-parameters, two steps of metrics, save, finalize) through the component guard,
    so an argument that breaks one of them (CSVLogger(flush_logs_every_n_steps=0) divides by it at the
    first log) is one ConfigError now, not a fault after the first iteration was written."""
    import shutil
    import tempfile

    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    loggers = list(getattr(trainer, "loggers", []) or [])
    entries = _config_entries(config, "logger")
    for i, logger in enumerate(loggers):
        if type(logger) not in (CSVLogger, TensorBoardLogger) or i >= len(entries):
            continue
        given = _init_args(entries[i])
        scratch = tempfile.mkdtemp(prefix="parlightning-logger-probe-")
        try:
            try:
                probe = type(logger)(**{**given, "save_dir": scratch})
            except Exception:  # noqa: BLE001 (arguments the probe cannot pass again: the run itself will tell)
                continue
            guard = ComponentGuard(config)
            field = "trainer.logger" if len(loggers) == 1 else f"trainer.logger[{i}]"
            guard._wrap(probe, field, [m for m in _LOGGER_METHODS if callable(getattr(probe, m, None))], entries[i])
            try:
                probe.log_hyperparams({"probe": 1})
                for step in range(2):
                    probe.log_metrics({"probe": 0.0}, step=step)
                probe.save()
                probe.finalize("success")
            except ComponentFault as fault:
                raise ReportedError(f"{fault} (found before the run, on a scratch copy of the logger)") from None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def component_of_error(err: BaseException, config: Any) -> Optional[str]:
    """One line for an error raised while a Lightning component of `trainer` (a callback, a logger, a
    plugin) was built from the config: its field (`trainer.callbacks[i]`), class and arguments. None when
    no such component's `__init__` is on the traceback."""
    from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO
    from lightning.pytorch import Callback
    from lightning.pytorch.loggers import Logger
    from lightning.pytorch.plugins import LayerSync, Precision
    from lightning.fabric.plugins.environments import ClusterEnvironment

    kinds = ((Callback, "callbacks"), (Logger, "logger"), (CheckpointIO, "plugins"), (Precision, "plugins"),
             (ClusterEnvironment, "plugins"), (LayerSync, "plugins"))
    found, seen = None, set()
    while err is not None and found is None and id(err) not in seen:  # the config parser wraps the class's error
        seen.add(id(err))
        tb = err.__traceback__
        while tb is not None and found is None:  # the outermost __init__ of such a class: the one the config named
            frame = tb.tb_frame
            owner = frame.f_locals.get("self") if frame.f_code.co_name == "__init__" else None
            key = next((k for kind, k in kinds if isinstance(owner, kind)), None) if owner is not None else None
            if key is not None:
                found = (owner, key, err)
            tb = tb.tb_next
        if found is None:
            err = err.__cause__ or err.__context__
    if found is None:
        return None
    owner, key, err = found
    if not _lightning_own(owner):  # the user's own class: `user_code_error` names its file and line
        return None
    entries = _config_entries(config, key)
    index = _entry_index(entries, owner, set())
    many = key in ("callbacks", "plugins") or len(entries) > 1
    field = f"trainer.{key}[{index}]" if index is not None and many else f"trainer.{key}"
    given = _init_args(entries[index], type(owner)) if index is not None else {}
    args = f"({', '.join(f'{k}={v!r:.40}' for k, v in given.items())})" if given else ""
    text = error_text(err)[:300].rstrip(". ")
    return (f"{field}: {type(owner).__name__}{args} refused its arguments: {text}; fix its init_args in the config")


__all__ = ["ComponentFault", "ComponentGuard", "component_of_error", "global_state", "probe_loggers"]
