"""`python -m parlightning.export --ckpt_path last.ckpt --out policy.pt2`: a trained policy as a
`torch.export` program (or ONNX) that maps an observation batch to its greedy action and runs with
plain torch, no parlightning import:

    policy = torch.export.load("policy.pt2").module()
    actions = policy(obs)            # obs [B, *observation_shape] float32
    actions = policy(obs, mask)      # a masked world (e.g. SwarmEnv): mask [B, M] bool, as its action_masks()

A run trained in a `NormalizeEnv` (observation normalisation) exports with its frozen statistics
inside the program: it takes the world's raw observations, as `parlightning.load_policy` does.

Greedy = the most likely category per action dimension (discrete, multi-discrete; 0-based, as the
policy sees it) or the Gaussian mean (continuous; the env's bounds apply as in training).
Supported: the MLP policy (`model.policy: mlp`) without a per-key table; recurrent and keyed
(TensorParallel) policies are refused with the reason.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

import torch
from torch import Tensor, nn

from parlightning.runtime.checkpoint import load_checkpoint_file
from parlightning.envs.normalize import ObsNormalizer, normalizer_from_checkpoint
from parlightning.errors import ArgumentError, ConfigError
from parlightning.cli.arg_types import existing_file, output_file
from parlightning.cli.outputs import check_output_file, raise_write_error, written_whole
from parlightning.cli.stop_signals import UNWRITTEN, Signalled, stop_on_signals, stopped
from parlightning.policies.actor_critic import ActorCritic, CategoricalHead, check_observation_shape, observation_fault
from parlightning.method_args import IndexArg, Is, OneOf, checked
from parlightning.ppo.saved_policy import build_saved_policy, module_from_checkpoint, spaces_of_checkpoint, unfit_weights

PATH = Is((str, os.PathLike), "a path (str or PathLike)")

FORMATS = ("pt2", "onnx")


class GreedyPolicy(nn.Module):
    """obs [B, ...] (and, for a masked world, its action mask [B, M] bool) -> greedy action: [B]
    discrete, [B, D] multi-discrete (0 on masked dimensions), [B, *shape] continuous; with
    `normalizer` the raw observation is normalised first (the run's frozen statistics)."""

    def __init__(self, policy: ActorCritic, normalizer: Optional[ObsNormalizer] = None) -> None:
        super().__init__()
        if getattr(policy, "is_recurrent", False):
            raise ConfigError("--ckpt_path: a recurrent policy (model.policy: gru/lstm) needs its hidden state as an "
                              "input and output, which export does not support yet; export an MLP policy")
        if getattr(policy, "key_table", None) is not None:
            raise ConfigError("--ckpt_path: a keyed policy (TensorParallel's per-key table) needs each row's key as "
                              "an input, which export does not support yet; export an MLP policy without keys")
        self.policy = policy
        self.spec = policy.action_spec
        self.normalizer = normalizer

    def forward(self, obs: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        if self.normalizer is not None:
            obs = self.normalizer(obs)
        out = self.policy.actor(obs.flatten(1))
        head = self.policy.head
        if isinstance(head, CategoricalHead):
            return head.greedy(out, mask)  # padding and masked categories never win
        return out.reshape(obs.shape[0], *self.spec.shape)


@checked(ckpt_path=PATH)
def load_policy(ckpt_path: str | os.PathLike) -> tuple[ActorCritic, tuple[int, ...]]:
    """Rebuild the trained policy and its observation shape from a `PPOModule` checkpoint
    (`torch.load(weights_only=True)`), without building the env. `policy.mask_width` is the
    width of the world's action mask (None: an unmasked world)."""
    if not os.path.isfile(ckpt_path):
        raise ConfigError(f"--ckpt_path: no checkpoint file at {str(ckpt_path)!r}; pass a .ckpt written by "
                          "python -m parlightning.fit (e.g. lightning_logs/version_0/checkpoints/last.ckpt)")
    ckpt = load_checkpoint_file(str(ckpt_path))  # truncated, corrupt, edited (checksum) or non-finite: one line
    spaces = ckpt.get("policy_spaces")
    if spaces is None or "state_dict" not in ckpt:
        raise ConfigError(f"--ckpt_path: {str(ckpt_path)!r} has no policy spaces; it was not written by a PPOModule "
                          "of this version: retrain (or resume once) with python -m parlightning.fit")
    # the saved hyper-parameters, checked by the module's own constructor (one line naming hyper_parameters.<name>)
    module = module_from_checkpoint(ckpt, str(ckpt_path))
    policy_kind = module.hparams.policy
    weights = {k.removeprefix("policy."): v for k, v in ckpt["state_dict"].items() if k.startswith("policy.")}
    if policy_kind != "mlp":
        what = "recurrent" if policy_kind in ("gru", "lstm") else policy_kind
        raise ConfigError(f"--ckpt_path: the checkpoint holds a {what} policy (model.policy: {policy_kind}); "
                          "export supports the MLP policy only (a recurrent one would need the hidden state as an input)")
    if "key_table.weight" in weights:
        raise ConfigError("--ckpt_path: the checkpoint holds a keyed policy (TensorParallel's per-key table); "
                          "export supports MLP policies without keys only")
    obs_shape = spaces_of_checkpoint(ckpt, str(ckpt_path))[0]
    policy = build_saved_policy(module, ckpt, str(ckpt_path))
    unfit = unfit_weights("--ckpt_path", str(ckpt_path), ckpt, weights, policy.state_dict())
    if unfit is not None:  # a key or shape the checkpoint's own record does not build
        raise unfit
    policy.load_state_dict(weights)
    policy.mask_width = spaces.get("action_mask_width")
    return policy.eval(), obs_shape


@checked(ckpt_path=PATH)
def load_normalizer(ckpt_path: str | os.PathLike) -> Optional[ObsNormalizer]:
    """The frozen observation normalisation of the run in `ckpt_path` (None when it had none)."""
    return normalizer_from_checkpoint(load_checkpoint_file(str(ckpt_path)))  # the checked loader: one line


@checked(policy=Is(nn.Module, "a policy network (torch.nn.Module), as load_policy returns it"), out=PATH,
         fmt=OneOf(*FORMATS), normalizer=Is(ObsNormalizer, "an ObsNormalizer (load_normalizer's)", optional=True),
         mask_width=IndexArg(lo=1, optional=True))
def export_policy(policy: ActorCritic, observation_shape: Sequence[int], out: str | os.PathLike,
                  fmt: str = "pt2", normalizer: Optional[ObsNormalizer] = None,
                  mask_width: Optional[int] = None) -> Path:
    """Write `GreedyPolicy(policy)` to `out` with a dynamic batch dimension; nothing is left at
    `out` if export fails. `mask_width` (default: `policy.mask_width` when set): the program
    takes the world's action mask [B, mask_width] as a second input."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format: unknown {fmt!r}; choose one of {list(FORMATS)}")
    if fmt == "onnx":
        try:
            import onnx  # noqa: F401
            import onnxscript  # noqa: F401
        except ImportError:
            raise ConfigError("--format onnx: needs the onnx extra (onnx, onnxscript): "
                              "pip install 'parlightning[onnx]', or export --format pt2") from None
    observation_shape = check_observation_shape("export_policy(observation_shape)", observation_shape)
    fault = observation_fault(policy, observation_shape)  # a traced program for another input would fail deep in it
    if fault is not None:
        raise ArgumentError(f"export_policy(observation_shape): must be {fault}, got {tuple(observation_shape)}")
    model = GreedyPolicy(policy, normalizer).eval()
    if mask_width is None:
        mask_width = getattr(policy, "mask_width", None)
    example: tuple[Tensor, ...] = (torch.zeros(4, *observation_shape),)
    batch = torch.export.Dim("batch")
    dynamic: dict[str, dict] = {"obs": {0: batch}}
    names = ["obs"]
    if mask_width is not None:
        example = (*example, torch.ones(4, int(mask_width), dtype=torch.bool))
        dynamic["mask"] = {0: batch}
        names.append("mask")
    out = Path(out)
    with written_whole(str(out)) as tmp, torch.no_grad():  # same suffix: torch.export.save wants .pt2
        if fmt == "pt2":
            program = torch.export.export(model, example, dynamic_shapes=dynamic)
            # into memory first, then written by Python: torch's zip writer aborts the process
            # (SIGABRT, no line) when the disk fills under it; a Python write raises ENOSPC
            buffer = io.BytesIO()
            torch.export.save(program, buffer)
            with open(tmp, "wb") as f:
                f.write(buffer.getbuffer())
        else:
            onnx_program = torch.onnx.export(model, example, dynamo=True, dynamic_shapes=dynamic,
                                             input_names=names, output_names=["action"], verbose=False)
            onnx_program.save(tmp)
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m parlightning.export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt_path", required=True, type=existing_file, help="a checkpoint written by python -m parlightning.fit")
    parser.add_argument("--out", required=True, type=output_file, help="the file to write (policy.pt2, policy.onnx)")
    parser.add_argument("--format", choices=FORMATS, default=None,
                        help="pt2 (torch.export, default) or onnx (needs the onnx extra); default from --out's suffix")
    return parser


def main(argv: Optional[list[str]] = None) -> None:
    a = build_parser().parse_args(argv)
    fmt = a.format or ("onnx" if a.out.endswith(".onnx") else "pt2")
    try:
        suffix = Path(a.out).suffix
        if a.format is None and suffix not in ("", ".pt2", ".onnx", ".pt"):
            raise ConfigError(f"--out: {a.out!r} ends in {suffix}, which names neither format; write policy.pt2 "
                              "(torch.export) or policy.onnx, or pass --format pt2|onnx")
        implied = {".pt2": "pt2", ".pt": "pt2", ".onnx": "onnx"}.get(suffix)
        if a.format is not None and implied is not None and implied != a.format:
            raise ConfigError(f"--format {a.format}: --out {a.out!r} ends in {suffix}, a {implied} file; drop --format "
                              f"or name the file policy.{'onnx' if a.format == 'onnx' else 'pt2'}")
        check_output_file("--out", a.out, [("--ckpt_path", a.ckpt_path)])  # before the checkpoint is read or anything is traced
        with stop_on_signals(after=UNWRITTEN):  # a signal or Ctrl-C: one line; --out is written whole or not at all
            policy, obs_shape = load_policy(a.ckpt_path)
            normalizer = load_normalizer(a.ckpt_path)
            out = export_policy(policy, obs_shape, a.out, fmt, normalizer)
    except ConfigError as err:
        raise SystemExit(f"error: {err}") from None
    except (Signalled, KeyboardInterrupt) as err:
        stopped(err, UNWRITTEN)
    except (OSError, RuntimeError) as err:  # the write failing after the checks (a full disk)
        raise_write_error(err, [("--out", a.out)])
    masked = "" if policy.mask_width is None else f" and action masks [B, {policy.mask_width}] (bool)"
    normalised = "; observations normalised inside" if normalizer is not None else ""
    print(f"wrote {out} ({fmt}): observations [B, {', '.join(map(str, obs_shape))}]{masked} -> greedy actions "
          f"({policy.action_spec.kind}){normalised}", file=sys.stderr)


if __name__ == "__main__":
    main()
