"""`python -m parlightning.bc`: behaviour cloning on a scripted or checkpointed policy before PPO,
the closer analogue of a pretrained orchestrator's prior (PARL's orchestrator does the work itself
before RL teaches it to delegate).

    python -m parlightning.bc --config configs/swarm.yaml --teacher serial --out bc.ckpt
    python -m parlightning.fit --config configs/swarm.yaml --model.init_from bc.ckpt

The teacher (`serial`, `oracle`, `optimal`, `random`: the world's scripted policies; or a
checkpoint written by `parlightning.fit`, greedy) plays the training tasks; the policy that
`model:` in the config describes is fitted to its actions on the live action dimensions (the
world's action masks) by cross-entropy, with optional label smoothing (`--label_smoothing e`
leaves about e of the probability on the other actions, so PPO can still explore). The written
checkpoint holds the policy's weights, the model's hyper-parameters, the spaces and the report
(BC loss per epoch, agreement with the teacher, the resulting action distribution); PPO starts
from it with `model.init_from`. Only the actor is cloned: the critic stays at its initialisation.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from pathlib import Path
from typing import Any, Optional

import torch
from torch import Tensor

from parlightning.envs.base import action_mask_of, scripted_action
from parlightning.errors import ConfigError, out_of_memory
from parlightning.cli.arg_types import (actor_count, bounded_float, config_file, existing_file, output_file, positive_float, positive_int,
                                         random_seed, stall_seconds, step_count)
from parlightning.cli.outputs import check_output_file, outputs_together, raise_write_error, written_whole
from parlightning.cli.stop_signals import UNWRITTEN, Signalled, stop_on_signals, stopped
from parlightning.cli.user_code import stall_watched, user_code_error
from parlightning.runtime.rank_watch import STALL_TIMEOUT_S
from parlightning.cli.evaluate import CheckedMasks, build_env, checked_config, checked_step, env_spec, greedy_action, load_policy
from parlightning.policies.actor_critic import padding_logit

BC_POLICIES = ("mlp", "slots")
TEACHERS = ("serial", "oracle", "optimal", "random")  # the worlds' scripted policies (evaluate's --policy)


def model_config(configs: list[str]) -> dict[str, Any]:
    """`model:` of the merged `--config` files (the PPOModule arguments), plus `seed_everything`."""
    merged: dict = {"model": {}}
    for path in configs:
        doc = checked_config(path)  # the one checked YAML reader, and keys fit knows (a misspelt `modle:`)
        merged.update({k: v for k, v in doc.items() if k != "model"})
        merged["model"].update(doc.get("model") or {})
    return merged


def teacher_for(name: str, env: Any) -> Any:
    """`act(obs, mask) -> action` of the teacher: a scripted policy of the world or a checkpoint."""
    scripted = getattr(env, "scripted_action", None)
    if name.endswith(".ckpt") or os.sep in name:
        try:
            policy = load_policy(name, env)
        except ConfigError as err:  # evaluate's loader names its own flag
            raise ConfigError(str(err).replace("--ckpt_path", "--teacher", 1)) from None
        return lambda obs, mask: greedy_action(policy, obs, mask)
    if not callable(scripted):
        raise ConfigError(f"--teacher: {type(env).__name__} has no scripted policies; pass a checkpoint (.ckpt)")
    names = getattr(sys.modules[type(env).__module__], "SCRIPTED", ())
    if names and name not in names:
        raise ConfigError(f"--teacher: unknown {name!r}; choose one of {list(names)} or pass a checkpoint (.ckpt)")
    gen = torch.Generator(device=env.device).manual_seed(0)
    return lambda obs, mask: scripted_action(env, name, obs, gen)  # its return checked as step's action


def collect(env: Any, teacher: Any, rounds: int, seed: int) -> tuple[Tensor, Optional[Tensor], Tensor]:
    """The teacher's observations, masks and actions over `rounds` steps of every actor."""
    obs = env.reset(seed=seed)
    xs, ms, acts = [], [], []
    masks = CheckedMasks(env)  # every step's mask held to fit's contract (it disappears: one line, not torch.cat's)
    with torch.inference_mode():
        for t in range(rounds):
            mask = masks(t)
            action = teacher(obs, mask)
            xs.append(obs.clone())
            ms.append(None if mask is None else mask.clone())
            acts.append(action.clone())
            obs = checked_step(env, t, action).obs
    masks = None if ms[0] is None else torch.cat(ms)
    return torch.cat(xs), masks, torch.cat(acts)


def bc_loss(policy: Any, obs: Tensor, mask: Optional[Tensor], action: Tensor, smoothing: float) -> Tensor:
    """Cross-entropy of the teacher's action on the live dimensions (label-smoothed over each
    dimension's valid categories), averaged over live decisions."""
    logits = policy.action_logits(obs, mask=mask)
    head = policy.head
    logp = head.log_probabilities(logits, mask)  # [B, D, C]
    a = action.long().reshape(action.shape[0], -1)
    chosen = logp.gather(2, a.unsqueeze(-1)).squeeze(-1)  # [B, D]
    valid = logp > padding_logit(logp.dtype) / 2  # the dimension's categories, less padding and masked ones
    live = head.dimension_live(mask) if mask is not None else torch.ones_like(chosen, dtype=torch.bool)
    spread = torch.where(valid, logp, torch.zeros_like(logp)).sum(-1) / valid.sum(-1).clamp(min=1)
    per = -((1.0 - smoothing) * chosen + smoothing * spread)
    return torch.where(live, per, torch.zeros_like(per)).sum() / live.sum().clamp(min=1)


def distribution(policy: Any, obs: Tensor, mask: Optional[Tensor], action: Tensor) -> dict[str, Any]:
    """The cloned policy's mean action probabilities over live decisions, and its greedy agreement."""
    with torch.no_grad():
        logits = policy.action_logits(obs, mask=mask)
        probs = policy.head.probabilities(logits, mask)  # [B, D, C]
        live = policy.head.dimension_live(mask) if mask is not None else torch.ones(probs.shape[:2], dtype=torch.bool)
        mean = probs[live].mean(0)
        greedy = policy.head.greedy(logits, mask).reshape(action.shape[0], -1)
        agree = (greedy == action.reshape(action.shape[0], -1))[live].float().mean()
        teacher = torch.bincount(action.reshape(action.shape[0], -1)[live].long(), minlength=probs.shape[-1])
    return {"mean_action_probability": [round(float(p), 6) for p in mean],
            "teacher_action_share": [round(float(c) / max(int(live.sum()), 1), 6) for c in teacher],
            "greedy_agreement": float(agree), "live_decisions": int(live.sum())}


def clone(configs: list[str], teacher: str, out: str, rounds: int = 32, num_envs: int = 256, epochs: int = 30,
          lr: float = 1e-3, minibatch: int = 4096, label_smoothing: float = 0.0, seed: Optional[int] = None,
          device: str = "cpu") -> dict[str, Any]:
    """Behaviour-clone `teacher` into the configured policy; write `out`; return the report."""
    import inspect

    from parlightning.ppo.module import PPOModule

    for name, value, low in (("--rounds", rounds, 1), ("--num_envs", num_envs, 1), ("--epochs", epochs, 1),
                             ("--minibatch", minibatch, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{name}: must be a positive integer, got {value!r}")
    if not 0 < lr < float("inf"):
        raise ConfigError(f"--lr: must be a finite positive number, got {lr!r}")
    if seed is not None and not 0 <= seed <= 2**32 - 1:
        raise ConfigError(f"--seed: {seed} is outside the seed range 0..{2**32 - 1}; pick a seed in that range")
    if not 0.0 <= label_smoothing < 1.0:
        raise ConfigError(f"--label_smoothing: must lie in [0, 1), got {label_smoothing!r}")
    if not Path(out).parent.is_dir():
        raise ConfigError(f"--out: the folder {str(Path(out).parent)!r} does not exist; create it or pick another path")
    for path in configs:
        if not os.path.isfile(path):
            raise ConfigError(f"--config: no file at {path!r}")
    cfg = model_config(configs)
    hp = dict(cfg.get("model") or {})
    if hp.get("policy", "mlp") not in BC_POLICIES:
        raise ConfigError(f"model.policy: behaviour cloning runs {list(BC_POLICIES)} policies, not {hp['policy']!r}")
    for key in ("init_from", "prior"):
        if hp.get(key) is not None:
            raise ConfigError(f"model.{key}: behaviour cloning starts from a fresh policy; drop model.{key}")
    seed = int(cfg.get("seed_everything", 0) or 0) if seed is None else seed
    cls, init_args = env_spec(configs)
    split = "train" if "split" in inspect.signature(cls.__init__).parameters else None  # clone on training tasks
    env = build_env(cls, init_args, num_envs, seed, split, device)
    if not env.action_spec.is_discrete:
        raise ConfigError("data.env: behaviour cloning here needs discrete actions")
    act = teacher_for(teacher, env)
    torch.manual_seed(seed)
    module = PPOModule(**hp)
    policy = module.build_policy(env.observation_shape, env.action_spec).to(env.device)
    obs, masks, actions = collect(env, act, rounds, seed)
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    gen = torch.Generator(device=env.device).manual_seed(seed)
    B, losses = obs.shape[0], []
    for _ in range(epochs):
        perm = torch.randperm(B, generator=gen, device=env.device)
        total = 0.0
        for i in range(0, B, minibatch):
            idx = perm[i:i + minibatch]
            loss = bc_loss(policy, obs[idx], None if masks is None else masks[idx], actions[idx], label_smoothing)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * idx.numel()
        losses.append(total / B)
    policy.eval()
    report = {"teacher": teacher, "samples": B, "epochs": epochs, "label_smoothing": label_smoothing,
              "bc_loss_first_epoch": losses[0], "bc_loss": losses[-1], "loss_per_epoch": losses,
              **distribution(policy, obs, masks, actions)}
    spec = env.action_spec
    mask = action_mask_of(env)
    ckpt = {"state_dict": {f"policy.{k}": v.detach().cpu() for k, v in policy.state_dict().items()},
            "hyper_parameters": hp,
            "policy_spaces": {"observation_shape": [int(d) for d in env.observation_shape],
                              "action_spec": {"kind": spec.kind, "nvec": [int(n) for n in spec.nvec],
                                              "shape": [int(d) for d in spec.shape], "low": spec.low, "high": spec.high},
                              "action_mask_width": None if mask is None else int(mask.shape[-1])},
            "bc": dict(report)}
    buffer = io.BytesIO()  # into memory first, then written by Python: on a full disk torch's zip writer
    torch.save(ckpt, buffer)  # raises an "enforce fail" with no path; a Python write raises ENOSPC (one line)
    with written_whole(str(out)) as tmp, open(tmp, "wb") as f:
        f.write(buffer.getbuffer())
    return report


def teacher_name(text: str) -> str:
    """--teacher: a scripted policy's name or a checkpoint file."""
    if text in TEACHERS:
        return text
    if text.endswith(".ckpt") or os.path.sep in text:
        return existing_file(text)
    raise argparse.ArgumentTypeError(f"must be one of {', '.join(TEACHERS)} or a .ckpt file (got {text!r})")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m parlightning.bc", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", action="append", default=[], required=True, type=config_file, help="the fit config(s) (repeatable)")
    p.add_argument("--teacher", type=teacher_name, default="serial", help="serial | oracle | optimal | random | a .ckpt (default serial)")
    p.add_argument("--out", required=True, type=output_file, help="the checkpoint to write (start PPO with --model.init_from OUT)")
    p.add_argument("--rounds", type=step_count, default=32, help="teacher steps per actor")
    p.add_argument("--num_envs", type=actor_count, default=256)
    p.add_argument("--epochs", type=positive_int, default=30)
    p.add_argument("--lr", type=positive_float, default=1e-3)
    p.add_argument("--minibatch", type=positive_int, default=4096)
    p.add_argument("--label_smoothing", type=bounded_float(0.0, 1.0, high_open=True), default=0.0)
    p.add_argument("--seed", type=random_seed, default=None, help="default: the config's seed_everything")
    p.add_argument("--json", type=output_file, help="also write the report here")
    p.add_argument("--stall_timeout", type=stall_seconds, default=STALL_TIMEOUT_S,
                   help="seconds the main thread may stay on one line (a world's step that never returns) before "
                        "the run stops with one line naming where (default 30); null turns it off")
    return p


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    from parlightning.cli.packaged import resolve_config_args  # `--config swarm`: the packaged file, as in fit

    a = build_parser().parse_args(resolve_config_args(sys.argv[1:] if argv is None else argv))
    try:
        reads = [("--config", c) for c in a.config] + [("--teacher", a.teacher)]
        check_output_file("--out", a.out, reads)  # before the teacher plays or anything is written
        check_output_file("--json", a.json, reads + [("--out", a.out)])
        # a world stuck for good, or a signal, ends the run with one line; --out and --json are written whole,
        # both or neither (a failed --json write leaves no --out checkpoint either)
        with stop_on_signals(after=UNWRITTEN), outputs_together() as outputs, \
                stall_watched(a.stall_timeout, cleanup=outputs.discard):
            report = clone(a.config, a.teacher, a.out, a.rounds, a.num_envs, a.epochs, a.lr, a.minibatch,
                           a.label_smoothing, a.seed)
            if a.json:
                with written_whole(a.json) as tmp:
                    Path(tmp).write_text(json.dumps(report, indent=2))
    except ConfigError as err:
        raise SystemExit(f"error: {err}") from None
    except (Signalled, KeyboardInterrupt) as err:
        stopped(err, UNWRITTEN)
    except Exception as err:  # noqa: BLE001  the user's world raised: one line naming it
        line = user_code_error(err)
        if line is not None:
            raise SystemExit(f"error: {line}") from None
        if not isinstance(err, (OSError, RuntimeError, MemoryError)):
            raise
        # the write failing after the checks (a full disk)
        if out_of_memory(err):  # the teacher's rollout buffers: num_envs x rounds observations
            raise SystemExit(f"error: --num_envs / --rounds: {a.num_envs} actors x {a.rounds} rounds do not fit in "
                             f"memory ({' '.join(str(err).split())[:160]}); lower --num_envs or --rounds") from None
        raise_write_error(err, [("--out", a.out), ("--json", a.json)])
    dist = ", ".join(f"{p:.4f}" for p in report["mean_action_probability"])
    print(f"behaviour cloning on {a.teacher}: {report['samples']} observations x {report['epochs']} epochs; "
          f"BC loss {report['bc_loss_first_epoch']:.4f} -> {report['bc_loss']:.4f}; greedy agreement "
          f"{report['greedy_agreement']:.4f} on {report['live_decisions']} live decisions")
    print(f"action distribution on live decisions (mean probability per action): [{dist}]")
    print(f"wrote {a.out}; start PPO from it: python -m parlightning.fit ... --model.init_from {a.out}")
    return report


if __name__ == "__main__":
    main()
