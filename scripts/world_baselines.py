"""SwarmEnv's scripted baselines on held-out tasks: serial, oracle, optimal and random, per family.

`optimal` is the round-optimal oracle (SwarmEnv.scripted_action: per round the subagent-phase length
that makes the round shortest), the ceiling comparisons use; `--banks` also prints, per task bank
and split, its paired difference to the built-in `oracle` over seeds.

Every policy plays the same tasks from the same seeds (actor i on task i mod K), so speed-ups
are against the serial policy on the same tasks and draws. Seeds vary the world's draws (and the
random policy); the table gives mean ± std over seeds and a 95% t-interval of the speed-up.

    python scripts/world_baselines.py                    # default config, 5 seeds x 4 episodes per task
    python scripts/world_baselines.py --wide             # configs/swarm_wide.yaml
    python scripts/world_baselines.py --quick            # 2 seeds x 1 episode
    python scripts/world_baselines.py --banks 4          # + optimal - oracle on 4 banks x both splits
Writes nothing unless --json is given.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from parlightning.cli.entry import refuse_bad_environment  # noqa: E402  stdlib only

refuse_bad_environment()  # before Lightning: torchmetrics reads LOCAL_RANK as it is imported
from parlightning.cli.evaluate import build_env, by_family, env_spec, run_episodes, summarise  # noqa: E402
from parlightning.cli.arg_types import episode_count, non_negative_int, output_file, positive_int  # noqa: E402

T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}


def mean_ci(xs: list[float]) -> tuple[float, float, float]:
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, 0.0, 0.0
    s = statistics.stdev(xs)
    return m, s, T95.get(len(xs) - 1, 1.96) * s / len(xs) ** 0.5


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wide", action="store_true", help="configs/swarm_wide.yaml instead of configs/swarm.yaml")
    p.add_argument("--seeds", type=positive_int, default=5)
    p.add_argument("--episodes", type=episode_count, default=4, help="episodes per task per seed")
    p.add_argument("--split", default="heldout", choices=("heldout", "train"))
    p.add_argument("--quick", action="store_true", help="2 seeds x 1 episode per task")
    p.add_argument("--json", type=output_file, help="also write the results here")
    p.add_argument("--banks", type=non_negative_int, default=0, help="also compare optimal with oracle on this many banks")
    return p


def main(argv=None) -> dict:
    a = build_parser().parse_args(argv)
    if a.quick:
        a.seeds, a.episodes = 2, 1
    configs = [str(ROOT / "configs" / "swarm.yaml")] + ([str(ROOT / "configs" / "swarm_wide.yaml")] if a.wide else [])
    cls, init_args = env_spec(configs)
    probe = build_env(cls, init_args, 1, 0, a.split, "cpu")
    n = len(probe.task_ids) * a.episodes
    rows: dict[str, list[dict]] = {"serial": [], "oracle": [], "optimal": [], "random": []}
    fams: dict[str, list[dict]] = {k: [] for k in rows}
    for seed in range(a.seeds):
        episodes = {}
        for name in rows:
            env = build_env(cls, init_args, n, seed, a.split, "cpu")
            import torch

            g = torch.Generator().manual_seed(seed + 1)
            episodes[name] = run_episodes(env, lambda o, env=env, name=name: env.scripted_action(name, o, g), seed)
        for name in rows:
            rows[name].append(summarise(episodes[name], episodes["serial"], env.solved_threshold))
            fams[name].append(by_family(episodes[name], episodes["serial"], probe.task_ids, env.solved_threshold))
    print(f"SwarmEnv {'wide' if a.wide else 'default'} config, {a.split} tasks ({len(probe.task_ids)}), "
          f"{a.seeds} seeds x {a.episodes} episodes per task; mean ± std over seeds")
    keys = ("success_rate", "critical_steps", "speedup_vs_serial", "subagents_per_episode", "finish_rate",
            "rounds_per_episode")
    print(f"{'policy':<8}" + "".join(f"{k:>26}" for k in keys) + f"{'speed-up 95% CI':>22}")
    out: dict = {"config": "wide" if a.wide else "default", "split": a.split, "seeds": a.seeds, "policies": {}}
    for name, rs in rows.items():
        cells, res = [], {}
        for k in keys:
            m, s, _ = mean_ci([r[k] for r in rs])
            cells.append(f"{m:>17.3f} ± {s:<6.3f}")
            res[k] = {"mean": m, "std": s}
        m, s, h = mean_ci([r["speedup_vs_serial"] for r in rs])
        print(f"{name:<8}" + "".join(cells) + f"{f'[{m - h:.2f}, {m + h:.2f}]':>22}")
        res["families"] = {f: {k: statistics.fmean(fr[f][k] for fr in fams[name]) for k in keys}
                           for f in fams[name][0]}
        out["policies"][name] = res
    print("\nper family (mean over seeds): success / critical steps / speed-up vs serial")
    families = list(out["policies"]["serial"]["families"])
    print(f"{'policy':<8}" + "".join(f"{f:>24}" for f in families))
    for name in rows:
        fr = out["policies"][name]["families"]
        print(f"{name:<8}" + "".join(
            f"{fr[f]['success_rate']:>9.2f} /{fr[f]['critical_steps']:>7.1f} /{fr[f]['speedup_vs_serial']:>5.2f}"
            for f in families))
    if a.banks:
        out["optimal_minus_oracle"] = compare_banks(cls, init_args, a)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return out


def compare_banks(cls, init_args: dict, a) -> list[dict]:
    """optimal - oracle, paired on the same tasks and seeds, per bank seed and split."""
    import torch

    print(f"\noptimal - oracle per task bank (paired, {a.seeds} seeds x {a.episodes} episodes per task; mean [95% CI])")
    print(f"{'bank':>6} {'split':<8}{'oracle succ':>12}{'optimal succ':>13}{'diff success':>24}{'diff speed-up':>24}")
    table = []
    for b in range(a.banks):
        bank = 1234 + 1000 * b
        for split in ("train", "heldout"):
            args = {**init_args, "bank_seed": bank}
            probe = build_env(cls, args, 1, 0, split, "cpu")
            n = len(probe.task_ids) * a.episodes
            diffs: dict[str, list[float]] = {"success_rate": [], "speedup_vs_serial": []}
            base = {"oracle": [], "optimal": []}
            for seed in range(a.seeds):
                eps = {}
                for name in ("serial", "oracle", "optimal"):
                    env = build_env(cls, args, n, seed, split, "cpu")
                    g = torch.Generator().manual_seed(seed + 1)
                    eps[name] = run_episodes(env, lambda o, env=env, name=name: env.scripted_action(name, o, g), seed)
                r = {k: summarise(eps[k], eps["serial"], env.solved_threshold) for k in ("oracle", "optimal")}
                for k in diffs:
                    diffs[k].append(r["optimal"][k] - r["oracle"][k])
                for k in base:
                    base[k].append(r[k]["success_rate"])
            row = {"bank_seed": bank, "split": split}
            cells = []
            for k, xs in diffs.items():
                m, _, h = mean_ci(xs)
                row[k] = {"mean": m, "ci": [m - h, m + h]}
                cells.append(f"{m:+.3f} [{m - h:+.3f}, {m + h:+.3f}]")
            print(f"{bank:>6} {split:<8}{statistics.fmean(base['oracle']):>12.3f}{statistics.fmean(base['optimal']):>13.3f}"
                  + "".join(f"{c:>24}" for c in cells))
            table.append(row)
    return table


if __name__ == "__main__":
    from parlightning.cli.script_main import run_main

    run_main(main)
