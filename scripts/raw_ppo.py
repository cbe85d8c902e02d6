"""A plain-torch PPO loop on SwarmEnv: the no-Lightning reference that `bench_throughput.py`
measures `python -m parlightning.fit` against.

Same pieces as the package (SwarmEnv, ActorCritic, RolloutBuffer/GAE, ppo_loss, RoundRobin,
PARLReward), with the settings read from configs/swarm.yaml (model, data, env and reward
sections) so the two paths cannot drift apart; only the loop is written out, CleanRL style,
top to bottom. Timing points are recorded per iteration so a benchmark can split rollout and
update time.

    python scripts/raw_ppo.py --num-envs 1024 --num-steps 128 --iterations 5
    python scripts/raw_ppo.py --quick      # 2 iterations of 64 actors x 16 steps: checks it runs
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from parlightning.cli.entry import refuse_bad_environment  # noqa: E402  stdlib only

refuse_bad_environment()  # before torch and Lightning: torchmetrics reads LOCAL_RANK as it is imported

import torch  # noqa: E402
import yaml  # noqa: E402
from torch import nn  # noqa: E402
from parlightning.buffer import RolloutBuffer, gather_rows  # noqa: E402
from parlightning.envs.swarm import SwarmEnv  # noqa: E402
from parlightning.ppo.loss import ppo_loss  # noqa: E402
from parlightning.policies.actor_critic import ACTIVATIONS, ActorCritic  # noqa: E402
from parlightning.cli.arg_types import (  # noqa: E402
    ScriptParser,
    actor_count, as_path, boolean, bounded_int, config_file, device_name, job_count, non_negative_float, positive_float,
    positive_int, random_seed, step_count, unit_interval,
)
from parlightning.parl.reward import LinearSchedule, PARLReward  # noqa: E402
from parlightning.distribution.samplers import RoundRobin  # noqa: E402


CONFIG = Path(__file__).resolve().parents[1] / "configs" / "swarm.yaml"


@dataclass
class Args:
    """The loop's settings; `from_config` fills them from a parlightning.fit YAML config."""

    num_envs: int = 512
    num_steps: int = 32
    update_epochs: int = 4
    num_minibatches: int = 4
    iterations: int = 60
    lr: float = 2.5e-4
    anneal_lr: bool = True
    adam_eps: float = 1e-5
    clip_coef: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    norm_adv: bool = True
    clip_vloss: bool = True
    max_grad_norm: float = 0.5
    gamma: float = 0.99
    gae_lambda: float = 0.95
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    env_kwargs: dict = field(default_factory=dict)  # SwarmEnv(**env_kwargs)
    max_subagents: int = 8  # the PARL reward's cap (must equal the env's)
    lambda_start: float = 0.1
    lambda_end: float = 0.0
    lambda_horizon: int = 1_000_000
    seed: int = 0
    device: str = "cpu"
    threads: Optional[int] = 1

    @classmethod
    def from_config(cls, path: Path = CONFIG, **overrides) -> "Args":
        """Settings of a `python -m parlightning.fit --config` file (SwarmEnv, RoundRobin, PARLReward with
        linear schedules), then `overrides`."""
        cfg = yaml.safe_load(Path(path).read_text())
        model, data = cfg.get("model") or {}, cfg.get("data") or {}
        env, reward = data.get("env") or {}, (data.get("reward") or {}).get("init_args") or {}
        if not str(env.get("class_path", "SwarmEnv")).endswith("SwarmEnv"):
            raise SystemExit(f"error: {path}: raw_ppo runs SwarmEnv only, got data.env {env.get('class_path')}")
        names = {f for f in cls.__dataclass_fields__}
        found = {k: v for k, v in {**model, **data}.items() if k in names and not isinstance(v, dict)}
        if "hidden_sizes" in found:
            found["hidden_sizes"] = tuple(found["hidden_sizes"])
        found["env_kwargs"] = dict(env.get("init_args") or {})
        if "max_subagents" in reward:
            found["max_subagents"] = reward["max_subagents"]
        lam = (reward.get("lambda1") or {}).get("init_args") or {}
        found.update({f"lambda_{k}": lam[k] for k in ("start", "end", "horizon") if k in lam})
        if cfg.get("seed_everything") is not None:
            found["seed"] = cfg["seed_everything"]
        if "torch_threads" in cfg:
            found["threads"] = cfg["torch_threads"]
        return cls(**{**found, **overrides})


def now() -> tuple[float, float]:
    """(wall-clock, process CPU time) in seconds; CPU time is what to compare on a shared machine."""
    return time.perf_counter(), time.process_time()


@dataclass
class Timings:
    """`now()` stamps per iteration: rollout_start[i], rollout_end[i] (after GAE), update_end[i]."""

    rollout_start: list[tuple[float, float]] = field(default_factory=list)
    rollout_end: list[tuple[float, float]] = field(default_factory=list)
    update_end: list[tuple[float, float]] = field(default_factory=list)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(args: Args, verbose: bool = False, on_iteration: Optional[Callable[[int], None]] = None) -> Timings:
    """Run `args.iterations` PPO iterations; returns the timing stamps of each. `on_iteration(i)` is
    called as iteration i begins (a profiler's hook)."""
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    N, T = args.num_envs, args.num_steps

    # --- the world, the task sampler, the shaped reward
    env = SwarmEnv(num_envs=N, device=device, seed=args.seed, **args.env_kwargs)
    sampler = RoundRobin()
    sampler.bind(env.task_ids, device)
    shard = torch.arange(len(env.task_ids), device=device)
    schedule = (args.lambda_start, args.lambda_end, args.lambda_horizon)
    reward = PARLReward(args.max_subagents, LinearSchedule(*schedule), LinearSchedule(*schedule))

    # --- the policy, the optimizer, the buffer
    policy = ActorCritic(env.observation_shape, env.action_spec, args.hidden_sizes, args.activation).to(device)
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.lr, eps=args.adam_eps)
    spec = env.action_spec
    buf = RolloutBuffer(T, N, tuple(env.observation_shape), spec.action_shape, device, torch.long)
    action_gen = torch.Generator(device=device).manual_seed(args.seed)
    minibatch_gen = torch.Generator(device=device).manual_seed(args.seed + 7919)

    iteration = 0

    def pick(reset_mask: torch.Tensor) -> torch.Tensor:
        return sampler.pick_batch(shard, iteration, reset_mask, action_gen)

    obs = env.reset(seed=args.seed, task_index=pick(torch.ones(N, dtype=torch.bool, device=device)))
    ep_return = torch.zeros(N, device=device)
    ep_length = torch.zeros(N, device=device)
    env_steps = 0
    timings = Timings()

    for iteration in range(args.iterations):
        if on_iteration is not None:
            on_iteration(iteration)
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = args.lr * (1.0 - iteration / args.iterations)

        # --- rollout: N actors x T steps, one batched policy call and env step per step
        _sync(device)
        timings.rollout_start.append(now())
        with torch.inference_mode():
            for t in range(T):
                mask = env.action_masks()  # the live subtask slots (the Lightning path masks them too)
                action, logprob, value = policy.act(obs, action_gen, mask=mask)
                buf.write(t, obs=obs, actions=action, logprobs=logprob, values=value, masks=mask)
                res = env.step(action, pick)
                ep_return += res.reward
                ep_length += 1
                buf.write(t, rewards=res.reward, terminated=res.terminated, truncated=res.truncated,
                          final_obs=res.final_obs, episode_return=ep_return, episode_length=ep_length, parts=res.parts)
                alive = ~(res.terminated | res.truncated)
                ep_return *= alive
                ep_length *= alive
                obs = res.obs
            next_value = policy.value(obs)
            truncated_values = torch.zeros_like(buf.values)
            where = buf.truncated.nonzero(as_tuple=True)
            if where[0].numel():
                truncated_values[where] = policy.value(buf.final_obs[where])

        # --- episode ends: sampler statistics, PARL shaping, then GAE
        done = buf.done
        episodes = buf.finished_parts()
        if episodes is not None and episodes.task.numel():
            sampler.record_batch(episodes.task, episodes.outcome)
            buf.rewards[done] += reward.bonus(episodes.n_subagents, episodes.assigned, episodes.completed,
                                              validate=False)
        buf.compute_advantages(next_value, truncated_values, args.gamma, args.gae_lambda)
        env_steps += N * T
        success = (episodes.outcome >= env.solved_threshold).float().mean() if episodes is not None else None
        _sync(device)
        timings.rollout_end.append(now())

        # --- PPO update: update_epochs x num_minibatches clipped steps
        flat = buf.flat()
        for _, idx in buf.minibatch_indices(args.update_epochs, args.num_minibatches, minibatch_gen):
            batch = gather_rows(flat, idx)
            new_logprob, entropy, new_value = policy.evaluate(batch["obs"], batch["actions"], mask=batch["masks"])
            out = ppo_loss(
                new_logprob, entropy, new_value, batch["logprobs"], batch["values"], batch["advantages"],
                batch["returns"], args.clip_coef, args.ent_coef, args.vf_coef, args.norm_adv, args.clip_vloss,
            )
            optimizer.zero_grad()
            out.loss.backward()
            nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
            optimizer.step()
        _sync(device)
        timings.update_end.append(now())

        if verbose:  # what a CleanRL loop prints; reads tensors once per iteration, after the update
            sps = N * T / (timings.update_end[-1][0] - timings.rollout_start[-1][0])
            rate = float(success) if success is not None and episodes.task.numel() else float("nan")
            print(f"iter {iteration:3d}  env_steps {env_steps:9d}  success {rate:.3f}  "
                  f"loss {float(out.loss.detach()):.4f}  SPS {sps:,.0f}")
    return timings


WIDTH_MAX = 65_536  # a hidden layer's width: its weights are allocated
FIELD_TYPES: dict[str, Callable[[str], object]] = {  # every plain `Args` field's argparse type (a new field needs one)
    "num_envs": actor_count, "num_steps": step_count, "update_epochs": positive_int, "num_minibatches": positive_int,
    "iterations": positive_int, "lr": positive_float, "anneal_lr": boolean, "adam_eps": positive_float,
    "clip_coef": positive_float, "ent_coef": non_negative_float, "vf_coef": non_negative_float, "norm_adv": boolean,
    "clip_vloss": boolean, "max_grad_norm": positive_float, "gamma": unit_interval, "gae_lambda": unit_interval,
    "hidden_sizes": bounded_int(1, WIDTH_MAX), "max_subagents": positive_int, "lambda_start": non_negative_float,
    "lambda_end": non_negative_float, "lambda_horizon": positive_int, "seed": random_seed, "device": device_name,
    "threads": job_count,
}


def _config_parser() -> argparse.ArgumentParser:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", type=as_path(config_file), default=CONFIG, help="a parlightning.fit YAML config")
    pre.add_argument("--quick", action="store_true", help="smoke run: 2 iterations of 64 actors x 16 steps")
    return pre


def build_parser(config: Path = CONFIG) -> argparse.ArgumentParser:
    """`--config`, `--quick`, then a flag for every plain `Args` field (defaults from `config`)."""
    fields = vars(Args.from_config(config))
    parser = ScriptParser(description=__doc__, parents=[_config_parser()],
                          formatter_class=argparse.RawDescriptionHelpFormatter,
                          repeats_allowed=tuple(n for n, v in fields.items() if isinstance(v, tuple)))  # widths 64 64
    for name, value in fields.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, dict):
            continue
        if name == "activation":
            parser.add_argument(flag, choices=sorted(ACTIVATIONS), default=value)
        else:
            parser.add_argument(flag, type=FIELD_TYPES[name], nargs="+" if isinstance(value, tuple) else None,
                                default=value)
    return parser


def parse_args(argv: Optional[list[str]] = None) -> Args:
    """`--config` (default configs/swarm.yaml), then a flag for every plain `Args` field (dashes for underscores)."""
    known, _ = _config_parser().parse_known_args(argv)
    ns = vars(build_parser(known.config).parse_args(argv))
    ns.pop("config")
    if ns.pop("quick"):
        ns.update(iterations=2, num_envs=64, num_steps=16)
    ns["hidden_sizes"] = tuple(ns["hidden_sizes"])
    return Args(**{**vars(Args.from_config(known.config)), **ns})


def main(argv: Optional[list[str]] = None) -> None:
    train(parse_args(argv), verbose=True)


if __name__ == "__main__":
    from parlightning.cli.script_main import run_main

    run_main(main)
