"""`python -m parlightning.evaluate`: score a trained policy (`--config --ckpt_path`) or a world's
scripted baseline (`--policy serial|oracle|random`) on held-out tasks, against the serial policy.

Every actor runs one episode of its task (actor i on task i mod K, `--episodes` per task) from
the same seed for every policy, so `speedup_vs_serial` compares the same tasks and draws.
Prints a per-family table; `--json` writes the numbers, `--gantt` one episode as a timeline.
Where the world has a best scripted policy (SwarmEnv: `optimal`, the round-optimal oracle) its
numbers on the same tasks are reported as the ceiling. `--bank_seeds B1 B2 ...` and/or `--seeds
S1 S2 ...` score every (bank, seed) and report the mean and the spread (std over runs and over
banks' means).
Gymnasium worlds report the mean return (and `--video` where the env renders).
`--trace out.jsonl` writes every episode round by round (one JSON object per line; `parlightning.analysis.trace`).
A run trained in a `NormalizeEnv` is scored on the raw world, its frozen observation statistics
applied to the policy's input (`parlightning.envs.normalize`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from parlightning.envs import contract
from parlightning.envs.base import action_mask_of, checked_device, scripted_action, solved_threshold_of, world_label
from parlightning.errors import ConfigError, out_of_memory
from parlightning.cli.arg_types import (bank_seed, config_file, device_name, episode_count, existing_file, output_file,
                                         random_seed, stall_seconds)
from parlightning.envs.swarm_tasks import SPLITS
from parlightning.cli.outputs import check_output_file, outputs_together, raise_write_error, written_whole
from parlightning.cli.stop_signals import UNWRITTEN, Signalled, stop_on_signals, stopped
from parlightning.cli.user_code import stall_watched, user_code_error
from parlightning.runtime.rank_watch import STALL_TIMEOUT_S
from parlightning.runtime.preflight import PROBE_ACTORS, check_config_file, check_env
from parlightning.analysis.trace import WORLD
from parlightning.config_types import Seed
from parlightning.method_args import IndexArg, Is, TensorArg, checked

POLICY = Is(torch.nn.Module, "a policy network (torch.nn.Module, e.g. Policy.network or load_policy's)")

FIELDS = ("outcome", "critical_steps", "serial_steps", "n_subagents", "assigned", "completed")


@dataclass
class Episodes:
    """One finished episode per actor: the task index and the EpisodeParts fields, all [E]."""

    task: Tensor
    parts: dict[str, Tensor]
    length: Tensor
    trace: Optional[list[dict[str, Tensor]]] = None  # per round of actor 0: what ran (see SwarmEnv.trace)


def checked_step(env: Any, t: int, *args: Any) -> Any:
    """`env.step(*args)` at step `t` of an evaluation (or a teacher's rollout), its answer held to the
    contract fit's step loop holds it to (`envs.contract`: types, shapes, dtypes, device) and its
    observations and rewards finite: a world that goes wrong later is one line naming it and the
    step, not a traceback from the policy (host reads are fine here: this is not the hot path)."""
    name = world_label(env)
    res = env.step(*args)
    problem = contract.result_problem(res)
    wrong = next(contract.step_problems(res, env.num_envs, tuple(env.observation_shape), torch.device(env.device)),
                 None) if problem is None else ("the answer", problem, contract.RESULT)
    if wrong is not None:
        field, problem, want = wrong
        raise ConfigError(f"data.env: {name}.step returned {field} {problem.says} at step {t} (its first step in the "
                          f"probe was right); return {want.text}{problem.hint} at every step")
    for field in ("obs", "reward"):
        actor = contract.non_finite(getattr(res, field))
        if actor is not None:
            raise ConfigError(f"data.env: {name}.step returned a non-finite (NaN or inf) StepResult.{field} for actor "
                              f"{actor} at step {t}; return finite values")
    return res


class CheckedMasks:
    """`env.action_masks()` at every step of an evaluation (or a teacher's rollout), held to the contract
    fit's step loop holds it to (`StepLoop._check_mask`): once a world has given a mask it gives one at
    every step, each a dense bool [num_envs, width] tensor on its device with the first mask's width. A
    world whose mask disappears or changes later is one line naming it and the step, not a traceback
    from `torch.cat` or the policy."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.width: Optional[int] = None
        self.seen = False

    def __call__(self, t: int) -> Optional[Tensor]:
        env, name = self.env, type(self.env).__name__
        mask = action_mask_of(env)
        if mask is None and self.width is None:
            return None
        fix = f"return a mask for every observation (a bool [num_envs, {self.width}] tensor) at every step"
        if mask is None:
            raise ConfigError(f"data.env: {name}.action_masks returned None at step {t}, where the first "
                              f"observation had a mask; {fix}")
        if self.width is None:
            self.width = int(mask.shape[1]) if isinstance(mask, Tensor) and mask.dim() == 2 else -1
            fix = f"return a mask for every observation (a bool [num_envs, {self.width}] tensor) at every step"
        problem = contract.tensor_problem(mask, (env.num_envs, self.width), contract.MASK, torch.device(env.device))
        if problem is not None:
            raise ConfigError(f"data.env: {name}.action_masks returned a mask {problem.says} at step {t} (the "
                              f"layout of the first mask is [num_envs, {self.width}]); {fix}{problem.hint}")
        return mask


@checked(env=WORLD, seed=Seed, max_rounds=IndexArg(lo=1), trace=IndexArg(optional=True))
def run_episodes(env: Any, act: Callable[..., Tensor], seed: int, max_rounds: int = 10_000,
                 trace: Optional[int] = None, masked: bool = False) -> Episodes:
    """Reset `env` (actor i on task i mod K) with `seed`, step `act(obs)` until every actor has
    finished one episode, and keep that first episode of each (host reads are fine here: this is
    evaluation, not the training hot path). `trace`: an actor whose rounds to record (`--gantt`).
    `masked`: call `act(obs, mask)` with the world's action mask (`env.action_masks()`, or None)."""
    N = env.num_envs
    task = torch.arange(N, device=env.device) % len(env.task_ids)
    obs = env.reset(seed=seed, task_index=task)
    got = torch.zeros(N, dtype=torch.bool, device=env.device)
    out = {f: torch.zeros(N, device=env.device) for f in FIELDS}
    length = torch.zeros(N, device=env.device)
    rounds: list[dict[str, Tensor]] = []
    env.trace = trace is not None
    env.trace_actor = trace or 0
    masks = CheckedMasks(env)
    try:
        for t in range(max_rounds):
            res = checked_step(env, t, act(obs, masks(t)) if masked else act(obs), task)
            if res.parts is None:  # read at every step here (fit's step loop: once a task world reported them)
                raise ConfigError(f"data.env: {world_label(env)}.step returned parts None at step {t}; return "
                                  "EpisodeParts at every step (read where an episode ends)")
            if trace is not None and not bool(got[trace]):
                rounds.append(env.last_round)
            done = (res.terminated | res.truncated) & ~got
            for f in FIELDS:
                out[f] = torch.where(done, getattr(res.parts, f), out[f])
            length = torch.where(done, torch.full_like(length, t + 1.0), length)
            got |= done
            obs = res.obs
            if bool(got.all()):
                break
    finally:
        env.trace = False
    return Episodes(task, out, length, rounds if trace is not None else None)


def summarise(ep: Episodes, serial: Optional[Episodes], threshold: float) -> dict[str, float]:
    """The headline numbers of a set of episodes (and the serial policy's on the same tasks)."""
    p = ep.parts
    n = max(p["outcome"].numel(), 1)
    row = {
        "episodes": float(p["outcome"].numel()),
        "success_rate": float((p["outcome"] >= threshold).float().sum()) / n,
        "mean_outcome": float(p["outcome"].sum()) / n,
        "critical_steps": float(p["critical_steps"].sum()) / n,
        "subagents_per_episode": float(p["n_subagents"].sum()) / n,
        "finish_rate": float(p["completed"].sum() / p["assigned"].sum().clamp(min=1.0)),
        "rounds_per_episode": float(ep.length.sum()) / n,
    }
    if serial is not None:
        row["serial_critical_steps"] = float(serial.parts["critical_steps"].sum()) / n
        row["serial_success_rate"] = float((serial.parts["outcome"] >= threshold).float().sum()) / n
        row["speedup_vs_serial"] = row["serial_critical_steps"] / max(row["critical_steps"], 1e-9)
    return row


def by_family(ep: Episodes, serial: Optional[Episodes], task_ids: list[str], threshold: float) -> dict[str, dict]:
    """`summarise` per family (the task id up to its last '-')."""
    fam = [t.rsplit("-", 1)[0] for t in task_ids]
    names = list(dict.fromkeys(fam))
    of_task = torch.tensor([names.index(f) for f in fam], device=ep.task.device)[ep.task]
    out = {}
    for i, name in enumerate(names):
        m = of_task == i
        pick = lambda e: Episodes(e.task[m], {k: v[m] for k, v in e.parts.items()}, e.length[m])  # noqa: E731
        out[name] = summarise(pick(ep), pick(serial) if serial is not None else None, threshold)
    return out


# ---------------------------------------------------------------------------------- policies
@checked(policy=POLICY, obs=TensorArg("float", device="same"), mask=TensorArg("bool", device="same", optional=True))
def greedy_action(policy: torch.nn.Module, obs: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """The most likely action of a trained policy (per live dimension, action 0 where `mask` masks
    it; the mean for a Gaussian)."""
    from parlightning.policies.actor_critic import CategoricalHead

    flat = policy.action_logits(obs, mask=mask)
    head = policy.head
    if not isinstance(head, CategoricalHead):
        return flat
    return head.greedy(flat, mask)


@checked(policy=POLICY, obs=TensorArg("float", device="same"), mask=TensorArg("bool", device="same", optional=True))
def policy_action(policy: torch.nn.Module, obs: Tensor, mask: Optional[Tensor], greedy: bool,
                  generator: Optional[torch.Generator] = None) -> Tensor:
    """A trained policy's action for `obs` under the world's mask (None: unmasked)."""
    if greedy:
        return greedy_action(policy, obs, mask)
    return policy.act(obs, generator, **({} if mask is None else {"mask": mask}))[0]


@checked(env=WORLD)
def load_policy(path: str, env: Any) -> torch.nn.Module:
    """The policy of a `parlightning.fit` checkpoint, built for `env`'s spaces; a checkpoint that
    is missing, unreadable, recurrent, keyed or of another world is one ConfigError."""
    from parlightning.runtime.checkpoint import load_checkpoint_file
    from parlightning.ppo.saved_policy import module_from_checkpoint, spaces_of_checkpoint

    if not os.path.isfile(path):
        raise ConfigError(f"--ckpt_path: no checkpoint file at {path!r}; pass a .ckpt written by parlightning.fit")
    ckpt = load_checkpoint_file(path)
    state = {k[len("policy."):]: v for k, v in (ckpt.get("state_dict") or {}).items() if k.startswith("policy.")}
    if not state:
        raise ConfigError(f"--ckpt_path: {path} holds no policy weights; pass a checkpoint written by parlightning.fit")
    module = module_from_checkpoint(ckpt, path)  # a saved value the module refuses: hyper_parameters.<name>, one line
    if ckpt.get("policy_spaces") is not None:  # the file's own record of its world's spaces: this world's, or refused
        shape, spec = spaces_of_checkpoint(ckpt, path)
        if shape != tuple(env.observation_shape) or spec != env.action_spec:
            raise ConfigError(f"--ckpt_path: {path!r}: its policy_spaces record a policy for observations {shape} and "
                              f"{_actions(spec)}, this world's are {tuple(env.observation_shape)} and "
                              f"{_actions(env.action_spec)}: the checkpoint is of another world (or was edited); pass "
                              "the --config it was trained with")
    if module.hparams.policy not in ("mlp", "slots"):
        raise ConfigError(f"--ckpt_path: evaluate runs mlp and slots policies; this checkpoint's is "
                          f"{module.hparams.policy!r}")
    if "key_table.weight" in state:
        raise ConfigError("--ckpt_path: a keyed (TensorParallel) policy needs each task's key; evaluate runs unkeyed policies")
    try:
        policy = module.build_policy(env.observation_shape, env.action_spec)
    except ConfigError as err:  # the world is the config's; a saved setting it cannot take names the checkpoint
        text = str(err)
        if not text.startswith("model."):
            raise
        name, _, rest = text.partition(":")
        raise ConfigError(f"--ckpt_path: {path!r}: hyper_parameters.{name.removeprefix('model.')}:{rest}") from None
    try:
        policy.load_state_dict(state)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[-1].strip()
        raise ConfigError(
            f"--ckpt_path: {path} is a policy for another world (observation {tuple(env.observation_shape)}, "
            f"actions {env.action_spec.nvec or env.action_spec.shape} here; {first}); pass the --config it was trained with"
        ) from None
    return policy.to(env.device).eval()


def _actions(spec: Any) -> str:
    """An ActionSpec in a few words: `multi_discrete actions nvec (7, 7)`."""
    return f"{spec.kind} actions " + (f"nvec {tuple(spec.nvec)}" if spec.nvec else f"shape {tuple(spec.shape)}")


# ---------------------------------------------------------------------------------- config
def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


# the top-level keys `parlightning.fit` reads from a config file (`seed` is its alias of seed_everything)
CONFIG_KEYS = ("seed_everything", "seed", "trainer", "model", "data", "ckpt_path", "torch_threads",
               "heartbeat_timeout", "stall_timeout")


def checked_config(path: str) -> dict:
    """`check_config_file(path)` whose top-level keys, `model:` and `data:` keys (and values) and
    `trainer:` keys are ones `fit` knows: a misspelt key (`modle:`) would otherwise be ignored here while fit refuses
    it. One line naming the file and the key, with the close match."""
    import difflib
    import inspect

    doc = check_config_file(path)  # the one checked YAML reader: not UTF-8, not YAML, not a mapping

    def refuse(key: Any, where: str, known: "tuple[str, ...] | list[str]") -> None:
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(f"--config {path}: unknown key {where}{key!r}; {hint}the keys are {', '.join(known)}")

    for key in doc:
        if key not in CONFIG_KEYS:
            refuse(key, "", CONFIG_KEYS)
    from parlightning.config_types import check_value
    from parlightning.ppo.data import RolloutDataModule
    from parlightning.ppo.module import PPOModule

    for section, cls in (("model", PPOModule), ("data", RolloutDataModule)):
        values = doc.get(section)
        if not isinstance(values, dict) or "class_path" in values:
            continue
        signature = inspect.signature(cls.__init__).parameters
        params = [p for p in signature if p != "self"]
        for key, value in values.items():
            if key not in params:
                refuse(key, f"{section}.", params)
            annotation = signature[key].annotation
            if isinstance(annotation, str):  # postponed annotations: the class's module resolves them
                annotation = inspect.get_annotations(cls.__init__, eval_str=True).get(key, annotation)
            check_value(f"--config {path}: {section}.{key}", annotation, value)  # a range fit would refuse
    trainer = doc.get("trainer")
    if isinstance(trainer, dict):  # evaluate runs no Trainer, but fit would refuse a misspelt one of this file
        from lightning.pytorch import Trainer

        params = [p for p in inspect.signature(Trainer.__init__).parameters if p != "self"]
        for key in trainer:  # (`callbacks+:` appends to a list, as fit reads it)
            if str(key).removesuffix("+") not in params:
                refuse(key, "trainer.", params)
    return doc


def env_spec(configs: list[str]) -> tuple[type, dict]:
    """`data.env` (class and init_args) of the merged `--config` files; SwarmEnv when none names one."""
    import importlib

    merged: dict = {}
    for path in configs:
        if not os.path.isfile(path):
            raise ConfigError(f"--config: no file at {path!r}")
        merged = _merge(merged, checked_config(path))  # checked YAML, and keys fit knows
    spec = (merged.get("data") or {}).get("env") or {"class_path": "parlightning.envs.swarm.SwarmEnv"}
    if isinstance(spec, str):
        spec = {"class_path": spec}
    from parlightning.envs.normalize import NormalizeEnv

    while True:
        module, _, name = spec["class_path"].rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            raise ConfigError(f"data.env: cannot import {spec['class_path']!r}") from None
        init_args = dict(spec.get("init_args") or {})
        if not (isinstance(cls, type) and issubclass(cls, NormalizeEnv) and isinstance(init_args.get("env"), dict)):
            return cls, init_args
        spec = init_args["env"]  # evaluation runs the raw world; the policy applies the frozen statistics


def build_env(cls: type, init_args: dict, num_envs: int, seed: int, split: Optional[str], device: str) -> Any:
    import inspect

    params = inspect.signature(cls.__init__).parameters
    args = {k: v for k, v in init_args.items() if k not in ("num_envs", "device", "seed")}
    if split is not None:
        if "split" not in params:
            raise ConfigError(f"--split: {cls.__name__} has no task splits; drop --split")
        args["split"] = split
    def make(n: int, on: str) -> Any:
        if "num_envs" in params or "env_id" in params:
            return cls(num_envs=n, device=on, seed=seed, **args)
        return cls(n, on, seed, **args)

    try:
        probe = make(PROBE_ACTORS, "cpu")  # the contract fit's preflight checks (types, shapes, dtypes), on a CPU probe
        try:
            check_env(probe, PROBE_ACTORS, seed)
        finally:
            close = getattr(probe, "close", None)
            if callable(close):
                close()
        return make(num_envs, device)
    except ConfigError:
        raise
    except (ValueError, TypeError) as err:  # the world's own checks of the config's data.env.init_args
        text = " ".join(str(err).split())
        raise ConfigError(f"data.env: {cls.__name__}: {text} (in the --config's data.env.init_args)") from None


# ---------------------------------------------------------------------------------- output
def print_table(overall: dict, families: dict[str, dict], name: str) -> None:
    cols = ("success_rate", "serial_success_rate", "critical_steps", "serial_critical_steps", "speedup_vs_serial",
            "subagents_per_episode", "finish_rate")
    heads = ("success", "serial succ", "critical", "serial crit", "speed-up", "subagents", "finish")
    print(f"{name}: {int(overall['episodes'])} episodes")
    print(f"{'family':<10}" + "".join(f"{h:>13}" for h in heads))
    for fam, row in [*families.items(), ("all", overall)]:
        print(f"{fam:<10}" + "".join(f"{row.get(c, float('nan')):>13.3f}" for c in cols))


GANTT_FORMATS = ("png", "pdf", "svg", "jpg", "jpeg", "eps", "ps", "tif", "tiff", "webp")  # matplotlib's savefig


def draw_gantt(rounds: list[dict[str, Tensor]], path: str, title: str) -> None:
    """One episode as a timeline: per round the main agent's time, then each subagent (slot) as a
    bar, green when it finished its subtask and red when it failed; round and stage edges drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    W = int(rounds[0]["sub"].numel()) if rounds else 0
    fig, ax = plt.subplots(figsize=(10, 0.35 * (W + 2) + 1.2))
    t, stage = 0.0, -1
    for r in rounds:
        main = float(r["main"])
        ax.barh(0, main, left=t, color="tab:blue", edgecolor="k", linewidth=0.3)
        longest = 0.0
        for i in range(W):
            if bool(r["delegated"][i]):
                d = float(r["sub"][i])
                ok = bool(r["success"][i])
                ax.barh(i + 1, d, left=t + main, color="tab:green" if ok else "tab:red", edgecolor="k", linewidth=0.3,
                        hatch=None if ok else "//")
                ax.text(t + main + d / 2, i + 1, f"x{int(r['shards'][i])}", ha="center", va="center", fontsize=6)
                longest = max(longest, d)
        if int(r["level"]) != stage:
            stage = int(r["level"])
            ax.axvline(t, color="k", linewidth=1.0)
            ax.text(t, -0.8, f"stage {stage}", fontsize=7)
        t += main + longest
        ax.axvline(t, color="grey", linewidth=0.4, linestyle=":")
    ax.set_yticks(range(W + 1), ["main"] + [f"slot {i}" for i in range(W)])
    ax.invert_yaxis()
    ax.set_xlabel("critical steps (main: orchestrate, own work, briefings, merges; slots: subagents, xk shards)")
    ax.set_title(title + "  (green: finished, red: failed)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def record_video(env_id: str, policy: Optional[torch.nn.Module], path: str, seed: int, greedy: bool,
                 normalize: Callable[[Tensor], Tensor] = lambda obs: obs) -> None:
    """One episode of a Gymnasium env rendered as rgb_array frames, written by imageio."""
    try:
        import imageio
    except ImportError:
        raise ConfigError("--video: needs imageio (pip install imageio); drop --video or install it") from None
    import gymnasium

    env = gymnasium.make(env_id, render_mode="rgb_array")
    obs, _ = env.reset(seed=seed)
    frames, done = [env.render()], False
    while not done:
        x = normalize(torch.as_tensor(obs, dtype=torch.float32).unsqueeze(0))
        with torch.inference_mode():
            a = greedy_action(policy, x) if greedy else policy.act(x)[0]
        obs, _, term, trunc, _ = env.step(a[0].numpy() if a.dim() > 0 else a.item())
        frames.append(env.render())
        done = term or trunc
    env.close()
    imageio.mimsave(path, frames, fps=30)


# ---------------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m parlightning.evaluate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", action="append", default=[], type=config_file, help="the fit config(s) naming data.env (repeatable)")
    p.add_argument("--ckpt_path", type=existing_file, help="a checkpoint written by python -m parlightning.fit")
    p.add_argument("--policy", choices=("serial", "oracle", "optimal", "random"),
                   help="a scripted baseline of the world instead (optimal: the round-optimal oracle, the ceiling)")
    p.add_argument("--split", choices=SPLITS, help="task bank to evaluate on: heldout (default for worlds with splits) or train")
    p.add_argument("--episodes", type=episode_count, default=4, help="episodes per task (Gymnasium worlds: in all)")
    p.add_argument("--seed", type=random_seed, default=0)
    p.add_argument("--bank_seeds", type=bank_seed, nargs="+", help="several task banks (bank_seed each): per-bank rows, "
                   "mean and spread")
    p.add_argument("--seeds", type=random_seed, nargs="+", help="several evaluation seeds (with or without --bank_seeds)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--greedy", dest="greedy", action="store_true", default=True, help="most likely action (default)")
    g.add_argument("--sample", dest="greedy", action="store_false", help="sample actions from the policy")
    p.add_argument("--json", type=output_file, help="write the numbers (overall and per family) to this file")
    p.add_argument("--gantt", type=output_file, help="draw actor 0's episode as a timeline to this .png")
    p.add_argument("--trace", type=output_file, help="write every evaluated episode, round by round, to this .jsonl (one JSON object "
                   "per episode: stages, what each slot did, subagent outcomes)")
    p.add_argument("--video", type=output_file, help="Gymnasium worlds that render: write one episode to this file (needs imageio)")
    p.add_argument("--device", type=device_name, default="cpu")
    p.add_argument("--stall_timeout", type=stall_seconds, default=STALL_TIMEOUT_S,
                   help="seconds the main thread may stay on one line (a world's step that never returns) before "
                        "the evaluation stops with one line naming where (default 30); null turns it off")
    return p


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def check_device(flag: str, device: Any, types: Optional[tuple[str, ...]] = ("cpu", "cuda", "mps")) -> None:
    """`flag` (`--device` on a command line, `device` in the Python API) names a device torch knows and
    this machine has (`envs.base.checked_device`) and, with `types`, one of those kinds."""
    dev = checked_device(flag, device)
    if types is not None and dev.type not in types:
        raise ConfigError(f"{flag}: {device!r}: evaluate runs on cpu or cuda")


def evaluate(a: argparse.Namespace) -> dict[str, Any]:
    if (a.ckpt_path is None) == (a.policy is None):
        raise ConfigError("--ckpt_path / --policy: give exactly one (a trained checkpoint or a scripted baseline)")
    if a.episodes <= 0:
        raise ConfigError(f"--episodes: must be a positive integer, got {a.episodes}")
    if not 0 <= a.seed <= 2**32 - 1:
        raise ConfigError(f"--seed: {a.seed} is outside the seed range 0..{2**32 - 1}; pick a seed in that range")
    check_device("--device", a.device)
    if a.policy is not None and not a.greedy:
        raise ConfigError(f"--sample: the scripted policy {a.policy!r} has no action distribution to sample from (it "
                          "plays its own rule); drop --sample, or evaluate a checkpoint with --ckpt_path ... --sample")
    if a.gantt:
        suffix = os.path.splitext(a.gantt)[1].lstrip(".").lower()
        if suffix not in GANTT_FORMATS:
            raise ConfigError(f"--gantt: cannot draw a timeline as {suffix or 'a file without a suffix'!r} "
                              f"({a.gantt}); name an image file, e.g. episode.png (formats: {', '.join(GANTT_FORMATS)})")
    reads = [("--ckpt_path", a.ckpt_path)] + [("--config", c) for c in (getattr(a, "config", None) or [])]
    outputs = ("json", "gantt", "trace", "video")
    for i, flag in enumerate(outputs):  # every file it will write, before anything runs; none is an input or another
        others = [(f"--{o}", getattr(a, o, None)) for o in outputs[:i]]
        check_output_file(f"--{flag}", getattr(a, flag, None), reads + others)
    banks, seeds = getattr(a, "bank_seeds", None), getattr(a, "seeds", None)
    for flag, values in (("--bank_seeds", banks), ("--seeds", seeds)):
        if values is not None and (not values or any(v < 0 for v in values) or len(set(values)) != len(values)):
            raise ConfigError(f"{flag}: needs distinct integers >= 0, got {values}")
    cls, init_args = env_spec(a.config)
    if a.video:  # checked before anything runs or is written
        if not init_args.get("env_id"):
            raise ConfigError(f"--video: {cls.__name__} does not render; --video needs a Gymnasium world "
                              "(data.env.init_args.env_id)")
        try:
            import imageio  # noqa: F401
        except ImportError:
            raise ConfigError("--video: needs imageio (pip install imageio); drop --video or install it") from None
    import inspect

    params = inspect.signature(cls.__init__).parameters
    if banks is not None and "bank_seed" not in params:
        raise ConfigError(f"--bank_seeds: {cls.__name__} has no task banks (no bank_seed argument); drop --bank_seeds")
    if banks is not None or seeds is not None:
        if a.gantt or a.video:
            raise ConfigError("--gantt / --video: draw one bank and seed; drop --bank_seeds / --seeds for them")
        return evaluate_many(a, cls, init_args, banks, seeds)
    result = evaluate_one(a, cls, init_args)
    if a.json:
        with written_whole(a.json) as tmp, open(tmp, "w") as f:
            json.dump(result, f, indent=2)
    return result


def evaluate_one(a: argparse.Namespace, cls: type, init_args: dict, quiet: bool = False) -> dict[str, Any]:
    """One bank (`init_args`' bank) and one evaluation seed (`a.seed`): the policy, the serial policy
    and, where the world has one, the ceiling (its best scripted policy, `CEILING`) on the same tasks."""
    import inspect

    split = a.split
    if split is None and "split" in inspect.signature(cls.__init__).parameters:
        split = "heldout"  # a world with task splits: score on the tasks it was not trained on
    probe = build_env(cls, init_args, 1, a.seed, split, a.device)
    tasks = getattr(probe, "task_ids", None)
    if a.gantt and not tasks:  # before anything runs: the timeline is of an orchestration episode's rounds
        raise ConfigError(f"--gantt: {cls.__name__} has no tasks and no subagents to draw (a timeline is of an "
                          "orchestration world's rounds, e.g. SwarmEnv); drop --gantt")
    if a.gantt and not isinstance(getattr(probe, "last_round", None), dict):  # SwarmEnv's trace / last_round
        raise ConfigError(f"--gantt: {cls.__name__} does not record its rounds (it has no last_round: the timeline is "
                          "drawn from a world that keeps each round of one actor in last_round when trace is set, "
                          "as SwarmEnv does); drop --gantt for this world")
    n = len(tasks) * a.episodes if tasks else a.episodes
    env = build_env(cls, init_args, n, a.seed, split, a.device)
    policy = load_policy(a.ckpt_path, env) if a.ckpt_path else None
    from parlightning.envs.normalize import normalizer_from_checkpoint

    from parlightning.runtime.checkpoint import load_checkpoint_file

    normalizer = normalizer_from_checkpoint(load_checkpoint_file(a.ckpt_path)) if a.ckpt_path else None
    normalize = normalizer if normalizer is not None else (lambda obs: obs)  # as load_policy(...).predict does
    if a.policy is not None and not callable(getattr(env, "scripted_action", None)):
        raise ConfigError(f"--policy: {cls.__name__} provides no scripted policies; pass --ckpt_path")
    gen = torch.Generator(device=env.device)

    def act(obs: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        if policy is None:
            return scripted_action(env, a.policy, obs, gen)  # its return checked as step's action
        with torch.inference_mode():
            return policy_action(policy, normalize(obs), mask, a.greedy, gen)

    name = a.policy or f"{a.ckpt_path} ({'greedy' if a.greedy else 'sampled'})"

    def save_trace() -> None:
        if a.trace:  # every episode again, from the same seeds and draws, recorded round by round
            from parlightning.analysis.trace import trace_episodes, write_trace

            gen.manual_seed(a.seed + 1)
            replay_env = build_env(cls, init_args, n, a.seed, split, a.device)
            records = trace_episodes(replay_env, act, a.seed, list(tasks) if tasks else None)
            with written_whole(a.trace) as tmp:
                write_trace(records, tmp, policy=name, split=split, seed=a.seed)

    if not tasks:  # a Gymnasium world: mean return
        ep_return = run_returns(env, act, a.seed)
        result = {"policy": name, "episodes": n, "mean_return": float(ep_return.mean()),
                  "std_return": float(ep_return.std()) if n > 1 else 0.0}
        if not quiet:
            print(f"{name}: mean return {result['mean_return']:.2f} ± {result['std_return']:.2f} over {n} episodes")
        if a.video:
            with written_whole(a.video) as tmp:
                record_video(init_args.get("env_id", ""), policy, tmp, a.seed, a.greedy, normalize)
        save_trace()
        return result
    gen.manual_seed(a.seed + 1)
    ep = run_episodes(env, act, a.seed, masked=True)
    serial = ceiling = None
    if callable(getattr(env, "scripted_action", None)):
        def scripted(which: str) -> Episodes:
            senv = build_env(cls, init_args, n, a.seed, split, a.device)
            sgen = torch.Generator(device=senv.device).manual_seed(a.seed + 1)  # the documented call, as --policy's
            return run_episodes(senv, lambda o: scripted_action(senv, which, o, sgen), a.seed)

        serial = ep if a.policy == "serial" else scripted("serial")
        best = getattr(__import__(cls.__module__, fromlist=["CEILING"]), "CEILING", None)
        if best is not None:
            ceiling = ep if a.policy == best else scripted(best)
    threshold = solved_threshold_of(env)
    overall = summarise(ep, serial, threshold)
    if ceiling is not None:
        top = summarise(ceiling, serial, threshold)
        overall["ceiling_success_rate"] = top["success_rate"]
        overall["ceiling_speedup_vs_serial"] = top.get("speedup_vs_serial", float("nan"))
        overall["ceiling_critical_steps"] = top["critical_steps"]
    families = by_family(ep, serial, list(tasks), threshold)
    result = {"policy": name, "split": split, "seed": a.seed, "bank_seed": init_args.get("bank_seed"), **overall,
              "families": families}
    if not quiet:
        print_table(overall, families, f"{name} on {split or 'the'} tasks")
        if ceiling is not None:
            print(f"ceiling (the world's best scripted policy) on the same tasks: success "
                  f"{overall['ceiling_success_rate']:.3f}, speed-up vs serial {overall['ceiling_speedup_vs_serial']:.3f}")
    if a.gantt:  # the busiest episode, replayed from the same seeds with its rounds recorded
        busiest = int(ep.parts["n_subagents"].argmax())
        gen.manual_seed(a.seed + 1)
        replay = run_episodes(build_env(cls, init_args, n, a.seed, split, a.device), act, a.seed, trace=busiest,
                              masked=True)
        outcome = float(replay.parts["outcome"][busiest])
        with written_whole(a.gantt) as tmp:
            draw_gantt(replay.trace or [], tmp, f"{name}: {tasks[busiest % len(tasks)]} ({split}), outcome {outcome:g}")
    save_trace()
    return result


SPREAD_KEYS = ("success_rate", "speedup_vs_serial", "critical_steps", "subagents_per_episode", "finish_rate",
               "serial_success_rate", "ceiling_success_rate", "ceiling_speedup_vs_serial")


def evaluate_many(a: argparse.Namespace, cls: type, init_args: dict, banks: Optional[list[int]],
                  seeds: Optional[list[int]]) -> dict[str, Any]:
    """`evaluate_one` on every (bank seed, evaluation seed); the mean and the spread (std over all
    runs, and over the banks' means) of the headline numbers."""
    import copy
    import statistics

    banks = banks if banks is not None else [init_args.get("bank_seed")]
    seeds = seeds if seeds is not None else [a.seed]
    runs = []
    for bank in banks:
        args = dict(init_args) if bank is None else {**init_args, "bank_seed": bank}
        for seed in seeds:
            one = copy.copy(a)
            one.seed = seed
            runs.append(evaluate_one(one, cls, args, quiet=True))
    keys = [k for k in SPREAD_KEYS if k in runs[0]]
    summary: dict[str, Any] = {}
    for k in keys:
        xs = [r[k] for r in runs]
        bank_means = [statistics.fmean(r[k] for r in runs if r["bank_seed"] == b) for b in banks] if banks else xs
        summary[k] = {"mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0,
                      "std_over_banks": statistics.stdev(bank_means) if len(bank_means) > 1 else 0.0,
                      "min": min(xs), "max": max(xs)}
    name = runs[0]["policy"]
    result = {"policy": name, "split": runs[0]["split"], "bank_seeds": banks, "seeds": seeds, "summary": summary,
              "runs": [{k: v for k, v in r.items() if k != "families"} for r in runs]}
    print(f"{name} on {runs[0]['split']} tasks: {len(banks)} bank(s) x {len(seeds)} evaluation seed(s)")
    cols = [k for k in ("success_rate", "speedup_vs_serial", "subagents_per_episode", "ceiling_success_rate",
                        "ceiling_speedup_vs_serial") if k in summary]
    print(f"{'bank':>8}{'seed':>6}" + "".join(f"{c:>27}" for c in cols))
    for r in runs:
        print(f"{str(r['bank_seed']):>8}{r['seed']:>6}" + "".join(f"{r[c]:>27.3f}" for c in cols))
    print(f"{'mean':>14}" + "".join(f"{summary[c]['mean']:>27.3f}" for c in cols))
    print(f"{'std':>14}" + "".join(f"{summary[c]['std']:>27.3f}" for c in cols))
    print(f"{'std(banks)':>14}" + "".join(f"{summary[c]['std_over_banks']:>27.3f}" for c in cols))
    if a.json:
        with written_whole(a.json) as tmp, open(tmp, "w") as f:
            json.dump(result, f, indent=2)
    return result


@checked(env=WORLD, seed=Seed, max_steps=IndexArg(lo=1))
def run_returns(env: Any, act: Callable[[Tensor], Tensor], seed: int, max_steps: int = 100_000) -> Tensor:
    """The undiscounted return of each actor's first episode (a world without tasks)."""
    obs = env.reset(seed=seed)
    got = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
    ret = torch.zeros(env.num_envs, device=env.device)
    total = torch.zeros_like(ret)
    for t in range(max_steps):
        res = checked_step(env, t, act(obs))
        ret = ret + res.reward * ~got
        done = (res.terminated | res.truncated) & ~got
        total = torch.where(done, ret, total)
        got |= done
        obs = res.obs
        if bool(got.all()):
            break
    return total


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    from parlightning.cli.packaged import resolve_config_args  # `--config swarm`: the packaged file, as in fit

    a = parse_args(resolve_config_args(sys.argv[1:] if argv is None else argv))
    try:  # a world stuck for good, or a signal, ends the evaluation with one line; outputs are written whole,
        # all of --json / --trace / --gantt / --video or none (one that fails leaves none of the others)
        with stop_on_signals(after=UNWRITTEN), outputs_together() as outputs, \
                stall_watched(a.stall_timeout, cleanup=outputs.discard):
            return evaluate(a)
    except ConfigError as err:
        raise SystemExit(f"error: {err}") from None
    except (Signalled, KeyboardInterrupt) as err:
        stopped(err, UNWRITTEN)
    except Exception as err:  # noqa: BLE001  the user's world (or policy class) raised: one line naming it
        line = user_code_error(err)
        if line is not None:
            raise SystemExit(f"error: {line}") from None
        if not isinstance(err, (OSError, RuntimeError, MemoryError)):
            raise
        # an output's write failing after the checks (a full disk)
        if out_of_memory(err):  # the evaluation's buffers: episodes x tasks actors
            raise SystemExit(f"error: --episodes: {a.episodes} episodes per task do not fit in memory "
                             f"({' '.join(str(err).split())[:160]}); lower --episodes") from None
        raise_write_error(err, [(f"--{o}", getattr(a, o, None)) for o in ("json", "gantt", "trace", "video")])


if __name__ == "__main__":
    main()
