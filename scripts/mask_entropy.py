"""How much of a fresh policy's entropy comes from action dimensions the world ignores, without and
with SwarmEnv's action masks (issue 23 item 1).

A freshly initialised policy (the default config's: MLP 2x64 ReLU, or the slots policy) plays the
default world (configs/swarm.yaml: 512 actors, 32 rounds, train split); at every visited
observation each slot's entropy is split into the pending slots' (live: the env reads their entry)
and the others' (ignored: the env drops their entry). Unmasked, the ignored slots carry most of the
entropy and their log-prob gradients are noise; masked, they carry none.

    python scripts/mask_entropy.py            # seeds 0-2, both policies
    python scripts/mask_entropy.py --quick    # one seed, 64 actors x 8 rounds
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from parlightning.cli.entry import refuse_bad_environment  # noqa: E402  stdlib only

refuse_bad_environment()  # before torch and Lightning: torchmetrics reads LOCAL_RANK as it is imported

import torch  # noqa: E402

from parlightning.envs.swarm import SwarmEnv  # noqa: E402
from parlightning.policies.actor_critic import ActorCritic  # noqa: E402
from parlightning.policies.slots import SlotsActorCritic  # noqa: E402


def ignored_share(policy_name: str, seed: int, num_envs: int, rounds: int, masked: bool) -> float:
    """Share of the summed per-slot entropy on ignored (non-pending) slots over one rollout."""
    torch.manual_seed(seed)
    env = SwarmEnv(num_envs=num_envs, seed=seed)
    if policy_name == "mlp":
        policy = ActorCritic(env.observation_shape, env.action_spec, (64, 64), "relu")
    else:
        policy = SlotsActorCritic(env.observation_shape, env.action_spec, (64, 64), "relu")
    obs = env.reset(seed=seed)
    gen = torch.Generator().manual_seed(seed)
    ignored = total = 0.0
    with torch.inference_mode():
        for _ in range(rounds):
            mask = env.action_masks()
            use = mask if masked else None
            kw = {} if use is None else {"mask": use}
            logits = policy.action_logits(obs, **kw) if policy_name == "slots" else policy.action_logits(obs)
            per_dim = policy.head.dimension_entropy(logits, use)  # [N, W]
            ignored += float(per_dim[~mask].sum())
            total += float(per_dim.sum())
            action = policy.act(obs, gen, **kw)[0]
            obs = env.step(action).obs
    return ignored / total


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    return p


def main(argv=None) -> dict:
    a = build_parser().parse_args(argv)
    seeds, N, T = ([0], 64, 8) if a.quick else ([0, 1, 2], 512, 32)
    torch.set_num_threads(1)
    out = {}
    print(f"share of a fresh policy's entropy on ignored (non-pending) slots; default world, {N} actors x {T} rounds, "
          f"seeds {seeds}")
    print(f"{'policy':<8}{'unmasked':>20}{'masked':>20}")
    for name in ("mlp", "slots"):
        row = {}
        for masked in (False, True):
            xs = [ignored_share(name, s, N, T, masked) for s in seeds]
            sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
            row["masked" if masked else "unmasked"] = {"mean": statistics.fmean(xs), "std": sd, "per_seed": xs}
        out[name] = row
        cells = [f"{100 * row[k]['mean']:.1f}% ± {100 * row[k]['std']:.1f}" for k in ("unmasked", "masked")]
        print(f"{name:<8}{cells[0]:>20}{cells[1]:>20}")
    return out


if __name__ == "__main__":
    from parlightning.cli.script_main import run_main

    run_main(main)
