"""A trained policy rebuilt from a checkpoint's own record (its `hyper_parameters` and
`policy_spaces`), with no config, world or trainer: the one code path of every program that does
so (`parlightning.load_policy`, `python -m parlightning.evaluate --ckpt_path`, `parlightning.export`,
`parlightning.bc --teacher <ckpt>`).

A saved value the module or the policy refuses (a checkpoint edited, or written by other code) is
one `ConfigError` naming the checkpoint flag, the file and `hyper_parameters.<name>` (or
`policy_spaces.<name>`), never the constructor's bare error under a traceback."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Optional

from parlightning.errors import ConfigError

# how training began: the checkpoint's weights replace what they set up (a serial prior, a BC start)
STARTING_ONLY = ("init_from", "prior")

_FIX = ("the checkpoint was edited or written by other code: restore its original value, or use a checkpoint that "
        "python -m parlightning.fit wrote")


def _named(flag: str, path: str, err: BaseException, what: str = "hyper_parameters") -> ConfigError:
    """The module's or policy's refusal (`model.activation: unknown ...`) as the checkpoint's field:
    `{flag}: 'c.ckpt': hyper_parameters.activation: unknown ...`; another refusal (a policy's own,
    `ActorCritic(observation_shape): must ...`) as what the checkpoint's `what` do not build."""
    text = " ".join(str(err).split())
    head, colon, rest = text.partition(":")
    name = head.removeprefix("model.").strip()
    if colon and head.startswith("model.") and name.isidentifier():
        return ConfigError(f"{flag}: {path!r}: hyper_parameters.{name}:{rest}; {_FIX}")
    return ConfigError(f"{flag}: {path!r}: its {what} do not build a policy ({text[:240]}); {_FIX}")


def module_from_checkpoint(checkpoint: Mapping, path: str, flag: str = "--ckpt_path") -> Any:
    """The `PPOModule` of the checkpoint's saved hyper-parameters (those its constructor takes, less
    `STARTING_ONLY`), checked by its own constructor: a saved value it refuses is one ConfigError
    `{flag}: '{path}': hyper_parameters.{name}: ...` (a missing one takes the default)."""
    from parlightning.ppo.module import PPOModule

    saved = checkpoint.get("hyper_parameters")
    if saved is None:
        saved = {}
    if not isinstance(saved, Mapping):
        raise ConfigError(f"{flag}: {path!r}: hyper_parameters is a {type(saved).__name__}, not a mapping of the "
                          f"module's settings; {_FIX}")
    takes = [name for name, p in inspect.signature(PPOModule.__init__).parameters.items()
             if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    kwargs = {name: saved[name] for name in takes if name in saved and name not in STARTING_ONLY}
    try:
        return PPOModule(**kwargs)
    except (ConfigError, TypeError, ValueError) as err:
        raise _named(flag, path, err) from None


def spaces_of_checkpoint(checkpoint: Mapping, path: str, flag: str = "--ckpt_path") -> tuple[tuple[int, ...], Any]:
    """The observation shape and `ActionSpec` of the checkpoint's `policy_spaces`; a record that does
    not describe a policy's spaces is one ConfigError naming `policy_spaces`."""
    from parlightning.ppo.module import spaces_from_checkpoint

    spaces = checkpoint.get("policy_spaces")
    if not isinstance(spaces, Mapping):
        raise ConfigError(f"{flag}: {path!r} has no policy spaces; it was not written by a PPOModule of this version: "
                          "retrain (or resume once) with python -m parlightning.fit")
    try:
        return spaces_from_checkpoint(dict(spaces))
    except ConfigError as err:  # policy_spaces.<entry>: ...
        raise ConfigError(f"{flag}: {path!r}: {' '.join(str(err).split())[:300]}; {_FIX}") from None
    except (TypeError, ValueError, KeyError) as err:
        detail = f"no {err}" if isinstance(err, KeyError) else " ".join(str(err).split())[:240]
        raise ConfigError(f"{flag}: {path!r}: policy_spaces do not describe a policy's spaces ({detail}); "
                          f"{_FIX}") from None


def unfit_weights(flag: str, path: str, checkpoint: Mapping, state: Mapping, own: Mapping) -> Optional[ConfigError]:
    """Saved weights (`state`) that do not fit the policy the checkpoint's own record builds (`own`, its
    state dict): one ConfigError naming the first misfit (`weights_mismatch`) and, for a shape, the
    saved values the policy's shapes follow (the edited one is among them); None when they fit."""
    from parlightning.ppo.module import weights_mismatch

    shape = weights_mismatch(state, own, strict=False)  # a weight of another shape (named first), else None
    detail = shape or weights_mismatch(state, own)  # else a missing or unexpected key
    if detail is None:
        return None
    if shape is not None:
        hp = checkpoint.get("hyper_parameters") or {}
        spaces = checkpoint.get("policy_spaces") or {}
        action = spaces.get("action_spec") if isinstance(spaces.get("action_spec"), Mapping) else {}
        shown = [f"policy_spaces.observation_shape {list(spaces.get('observation_shape', ()))}",
                 f"policy_spaces.action_spec.nvec {list(action.get('nvec') or ())}" if action.get("nvec") else
                 f"policy_spaces.action_spec.shape {list(action.get('shape') or ())}",
                 f"hyper_parameters.hidden_sizes {list(hp.get('hidden_sizes', (64, 64)))}"]
        if hp.get("policy") in ("gru", "lstm"):
            shown.append(f"hyper_parameters.rnn_hidden {hp.get('rnn_hidden', 64)}")
        detail += f"; its shapes follow {', '.join(shown)}"
    return ConfigError(f"{flag}: {path!r}: its weights do not fit the policy its own policy_spaces and hyper_parameters "
                       f"build ({detail}): one of them was edited after the save; use an unedited checkpoint of "
                       "python -m parlightning.fit")


def build_saved_policy(module: Any, checkpoint: Mapping, path: str, flag: str = "--ckpt_path") -> Any:
    """`module.build_policy` for the checkpoint's own spaces (`spaces_of_checkpoint`): a saved
    hyper-parameter the policy refuses is named as `hyper_parameters.<name>`."""
    observation_shape, action_spec = spaces_of_checkpoint(checkpoint, path, flag)
    try:
        return module.build_policy(observation_shape, action_spec)
    except (ConfigError, TypeError, ValueError) as err:
        raise _named(flag, path, err, "hyper_parameters and policy_spaces") from None
