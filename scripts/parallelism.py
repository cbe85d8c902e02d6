"""Who works on what across ranks: DP, the custom block planner, TP without and with route, and CP
for the same budget on 2 CPU ranks (gloo), through the real CLI and Trainer (DDP), one table.

The ranks are started by `torchrun` (the same launch as on a cluster) and run every strategy in
turn with `python -m parlightning.fit`'s `main`, each with `configs/swarm.yaml` plus
`configs/parallel/<strategy>.yaml`, with the default progress bar on. Columns: episodes finished
(all ranks); under TP the per-sample key-table gradient rows of the training minibatches that the
rank's section mask kept (delivered) and rejected (out-of-section), summed over ranks; episodes
that finished in a round on a task outside that round's shard (started under the previous plan,
share of all episodes); keys (distinct tasks rolled out / tasks in the bank); final success (last
rollout, weighted over the ranks' episodes). TP with route must reject nothing.

    python scripts/parallelism.py            # ~5 minutes on 2 loaded cores
    python scripts/parallelism.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from parlightning.cli.arg_types import output_folder, positive_float  # noqa: E402  (stdlib only)

STRATEGIES = {  # row label -> configs/parallel/<file>.yaml
    "DataParallel()": "dp",
    "BlockPlanner() [custom]": "block",
    "TensorParallel(2, keys)": "tp",
    "TensorParallel(2, keys, route)": "tp_route",
    "ClusterParallel()": "cp",
}
WORLD = 2


def budget(quick: bool) -> list[str]:
    """The same budget for every strategy: epochs x ranks x num_envs x num_steps env steps."""
    epochs, envs = (3, 32) if quick else (30, 128)
    return ["--trainer.max_epochs", str(epochs), "--data.num_envs", str(envs), "--data.num_steps", "32",
            "--trainer.enable_model_summary", "false", "--trainer.logger", "false"]


def rank_main(out: str, quick: bool) -> None:
    """One rank (started by torchrun): every strategy through the real CLI; rank 0 writes the rows."""
    sys.path.insert(0, str(ROOT))  # `callbacks.block_planner` for the custom strategy
    from parlightning.callbacks import find_planner
    from parlightning.cli.fit import main

    del sys.argv[1:]  # main() gets its arguments as a list
    rows = []
    for label, name in STRATEGIES.items():
        start = time.perf_counter()
        cli = main([
            "--config", str(ROOT / "configs" / "swarm.yaml"),
            "--config", str(ROOT / "configs" / "parallel" / f"{name}.yaml"),
            *budget(quick), "--trainer.accelerator", "cpu", "--trainer.devices", str(WORLD),
            "--trainer.strategy", "lightning.pytorch.strategies.DDPStrategy", "--trainer.strategy.timeout", "0:02:00",
            "--trainer.default_root_dir", f"{out}/{name}",
        ])
        summary = find_planner(cli.trainer).summary()
        success = cli.trainer.callback_metrics.get("rollout/success_rate")
        rows.append({"label": label, **summary, "success": float(success) if success is not None else float("nan"),
                     "seconds": time.perf_counter() - start})
    if int(os.environ.get("RANK", "0")) == 0:
        Path(out, "rows.json").write_text(json.dumps(rows))


def launch(out: str, quick: bool, timeout: float) -> None:
    """torchrun with 2 local ranks, killed as a group if it outlives `timeout` (a hang)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={WORLD}",
           __file__, "--rank-main", out] + (["--quick"] if quick else [])
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise SystemExit(f"error: the {WORLD}-rank run did not finish within {timeout:.0f} s")
    if code != 0:
        raise SystemExit(f"error: the {WORLD}-rank run failed (exit code {code}); see the messages above")


def table(rows: list[dict]) -> str:
    """The Markdown table of the rows."""
    lines = ["| strategy | episodes | key rows delivered | key rows out-of-section | carried over | keys | "
             "final success | time (s) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        tp = r["label"].startswith("TensorParallel")
        delivered, rejected = (r["updates_delivered"], r["section_violations"]) if tp else ("—", "—")
        carried = f"{r['carried_episodes']} ({100 * r['carried_episodes'] / max(r['episodes'], 1):.1f}%)"
        lines.append(f"| `{r['label']}` | {r['episodes']} | {delivered} | {rejected} | {carried} | "
                     f"{r['keys']}/{r['tasks']} | {r['success']:.3f} | {r['seconds']:.0f} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run (3 iterations, 32 actors per rank)")
    parser.add_argument("--timeout", type=positive_float, default=1800, help="seconds before the ranks are killed")
    parser.add_argument("--rank-main", metavar="DIR", type=output_folder, help=argparse.SUPPRESS)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    if args.rank_main:
        rank_main(args.rank_main, args.quick)
        return
    with TemporaryDirectory() as out:
        launch(out, args.quick, args.timeout)
        rows = json.loads(Path(out, "rows.json").read_text())
    steps = [a for a in budget(args.quick)]
    print(f"{WORLD} ranks (gloo, CPU), same budget each: max_epochs {steps[1]} x num_envs {steps[3]} x "
          f"num_steps {steps[5]} per rank\n")
    print(table(rows))
    tp, route = (next(r for r in rows if r["label"] == label) for label in ("TensorParallel(2, keys)",
                                                                           "TensorParallel(2, keys, route)"))
    ok = route["section_violations"] == 0 and route["updates_delivered"] > 0
    print(f"\nTP with route: {route['updates_delivered']} key rows trained, {route['section_violations']} rejected; "
          f"without route {tp['section_violations']} of {tp['updates_delivered'] + tp['section_violations']} rejected "
          f"(the shared trunk still trains on those samples): {'OK' if ok else 'FAILED'}")
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    from parlightning.cli.script_main import run_main

    run_main(main)
