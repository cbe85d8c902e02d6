"""Parallelism strategies on 2 gloo ranks through the real CLI and Trainer (DDP on CPU).

One launch runs DP, CP, TP and TP with route one after another in the same two rank processes
(`parlightning.fit.main` per strategy; the ranks are started the way Lightning's own launcher
starts its children: LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT), with a deadline so a hang fails
instead of blocking. A `Recorder` callback dumps what each rank planned, started and learned;
the tests compare the ranks. Refusals run in-process on one rank: they must stop before any rollout.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from parlightning.callbacks import RolloutCallback, find_planner
from parlightning.parallel import TensorParallel, family_of

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
CONFIG = str(ROOT / "configs" / "swarm.yaml")
WORLD = 2
EPOCHS, UPDATE_EPOCHS, MINIBATCHES = 2, 2, 2
TINY = [
    "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
    "--trainer.max_epochs", str(EPOCHS), "--data.num_envs", "16", "--data.num_steps", "8",
    "--data.update_epochs", str(UPDATE_EPOCHS), "--data.num_minibatches", str(MINIBATCHES),
]
DDP = [
    "--trainer.accelerator", "cpu", "--trainer.devices", str(WORLD),
    "--trainer.strategy", "lightning.pytorch.strategies.DDPStrategy", "--trainer.strategy.timeout", "0:01:00",
]
SCENARIOS = {  # name -> extra arguments; DP also stops each rollout's update early on a tiny target KL
    "dp": ["--config", "configs/parallel/dp.yaml", "--model.target_kl", "1e-6"],
    "cp": ["--config", "configs/parallel/cp.yaml"],
    "tp": ["--config", "configs/parallel/tp.yaml"],
    "tp_route": ["--config", "configs/parallel/tp_route.yaml"],
}
DEADLINE_S = 420  # the whole two-rank launch; a hang fails here (the machine is shared and loaded)


class Recorder(RolloutCallback):
    """Test probe (append after the planner): per round this rank's shard, the full plan and the
    tasks its actors started; the key table's local (pre-mask) and all-reduced gradients; the
    optimizer steps; final parameters and the planner's summary. Dumped to `out`_rank<r>.pt."""

    def __init__(self, out: str) -> None:
        self.out = out
        self.shards, self.plans, self.started, self.finished = [], [], [], []
        self.raw, self.reduced = [], []
        self.batches = 0

    def setup(self, trainer, pl_module, stage) -> None:
        dm = trainer.datamodule
        pick = dm._pick

        def recording_pick(reset_mask):
            picked = pick(reset_mask)
            self.started[-1].index_add_(0, picked, reset_mask.long())
            return picked

        dm._pick = recording_pick  # counts the tasks actors start, step by step

    def on_fit_start(self, trainer, pl_module) -> None:  # runs before PPOModule registers the TP mask
        self.initial = {k: v.detach().clone() for k, v in pl_module.policy.state_dict().items()}
        table = getattr(pl_module.policy, "key_table", None)
        if table is not None:
            table.weight.register_hook(lambda g: self.raw.append(g.detach().clone()))

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:  # after DDP's all-reduce
        self.batches += 1
        table = getattr(pl_module.policy, "key_table", None)
        if table is not None:
            self.reduced.append(table.weight.grad.detach().clone())

    def on_rollout_start(self, trainer, pl_module, round_index) -> None:
        dm, planner = trainer.datamodule, find_planner(trainer)
        self.shards.append(dm.shard.tolist())
        self.plans.append([list(u.keys) for u in planner.plan])
        started = torch.zeros(len(dm.task_ids), dtype=torch.long)
        if round_index == 0:  # the first reset happened in build, under round 0's plan
            started.index_add_(0, dm.current_task, torch.ones_like(dm.current_task))
        self.started.append(started)

    def on_episodes_end(self, trainer, pl_module, task_ids, parts) -> None:
        self.finished.extend(task_ids.tolist())

    def on_fit_end(self, trainer, pl_module) -> None:
        planner = find_planner(trainer)
        torch.save(
            {
                "shards": self.shards, "plans": self.plans, "started": torch.stack(self.started),
                "finished": self.finished, "raw": self.raw, "reduced": self.reduced, "batches": self.batches,
                "params": {k: v.detach().clone() for k, v in pl_module.policy.state_dict().items()},
                "initial": self.initial,
                "summary": planner.summary(), "strategy": planner.strategy.state_dict()
                if hasattr(planner.strategy, "state_dict") else {},
                "task_ids": list(trainer.datamodule.task_ids), "rank": trainer.global_rank,
            },
            f"{self.out}_rank{trainer.global_rank}.pt",
        )


def _rank_main(out: str) -> None:
    """One rank: every scenario through the real CLI, in order (the process group is reused)."""
    from parlightning.fit import main

    del sys.argv[1:]  # main() gets its arguments as a list
    for name, extra in SCENARIOS.items():
        main([
            "--config", CONFIG, *extra, *TINY, *DDP, "--trainer.default_root_dir", f"{out}/{name}",
            "--trainer.callbacks+=test_strategies_ddp.Recorder", f"--trainer.callbacks.out={out}/{name}",
        ])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(out: Path) -> list[str]:
    """Start the two ranks, wait (deadline: kill both and fail) and return the stderr of each that failed."""
    port, deadline = str(_free_port()), time.monotonic() + DEADLINE_S
    path = os.pathsep.join([str(TESTS), str(ROOT), os.environ.get("PYTHONPATH", "")])
    procs = []
    for rank in range(WORLD):
        env = dict(os.environ, LOCAL_RANK=str(rank), NODE_RANK="0", WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port, PYTHONPATH=path)
        with open(out / f"stderr{rank}.txt", "w") as err:  # a file, not a pipe: a full pipe would stall a rank
            procs.append(subprocess.Popen([sys.executable, __file__, str(out)], cwd=ROOT, env=env,
                                          stdout=subprocess.DEVNULL, stderr=err))
    try:
        for p in procs:
            p.wait(timeout=max(deadline - time.monotonic(), 1.0))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"the 2-rank DDP run did not finish within {DEADLINE_S} s (a hang?)")
    return [(out / f"stderr{r}.txt").read_text() for r, p in enumerate(procs) if p.returncode != 0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Launch the two ranks once; {scenario: [rank0 dump, rank1 dump]}."""
    out = tmp_path_factory.mktemp("ddp")
    failed = _launch(out)
    if any("EADDRINUSE" in err or "Address already in use" in err for err in failed):  # port taken meanwhile: retry
        failed = _launch(out)
    assert not failed, failed[0][-3000:]
    return {name: [torch.load(out / f"{name}_rank{r}.pt", weights_only=True) for r in range(WORLD)]
            for name in SCENARIOS}


# --------------------------------------------------------------------------------------- DDP
def test_ranks_roll_out_disjoint_shards_from_the_first_step(runs):
    a, b = runs["dp"]
    assert len(a["shards"]) == EPOCHS
    every = set(range(len(a["task_ids"])))
    for r in range(EPOCHS):
        sa, sb = set(a["shards"][r]), set(b["shards"][r])
        assert not sa & sb and sa | sb == every  # DP: disjoint shards covering the bank
        if r:
            assert a["shards"][r] == b["shards"][r - 1]  # rotating: a rank takes the other's shard next round
        started_a = set(a["started"][r].nonzero().flatten().tolist())
        started_b = set(b["started"][r].nonzero().flatten().tolist())
        assert started_a and started_b
        assert started_a <= sa and started_b <= sb  # round 0 includes the initial reset


def test_parameters_identical_on_every_rank_after_training(runs):
    for name, (a, b) in runs.items():
        assert a["params"].keys() == b["params"].keys()
        for k in a["params"]:
            assert torch.equal(a["params"][k], b["params"][k]), (name, k)
        assert not torch.equal(a["params"]["actor.0.weight"], a["initial"]["actor.0.weight"]), name  # it trained


def test_every_rank_yields_the_same_number_of_minibatches(runs):
    for name, (a, b) in runs.items():
        assert a["batches"] == b["batches"], name
    full = EPOCHS * UPDATE_EPOCHS * MINIBATCHES
    assert runs["cp"][0]["batches"] == full
    assert runs["dp"][0]["batches"] < full  # target-KL stopped the update, on both ranks alike


def test_cluster_plans_identical_across_ranks(runs):
    a, b = runs["cp"]
    assert a["plans"] == b["plans"]
    assert torch.equal(a["strategy"]["stats"], b["strategy"]["stats"])  # statistics agreed by all-reduce
    assert int(a["strategy"]["stats"][:, 0].sum()) == a["summary"]["episodes"] > 0
    leased = set()
    for plan in a["plans"]:
        units = [{family_of(t) for t in unit} for unit in plan]
        assert len(units) == WORLD and not units[0] & units[1]  # one whole cluster per rank
        leased |= units[0] | units[1]
    assert leased == {"solo", "fanout", "pipeline", "locked"}  # untried clusters keep an exploration bonus


KEYS = ["solo", "fanout", "pipeline", "locked"]  # configs/parallel/tp*.yaml


def _sections():
    return TensorParallel(WORLD, keys=KEYS).sections


def test_tp_ranks_change_only_their_own_rows_and_agree_on_the_union(runs):
    sections = _sections()
    for name in ("tp", "tp_route"):
        a, b = runs[name]
        assert len(a["raw"]) == len(a["reduced"]) == a["batches"] > 0
        for step, reduced in enumerate(a["reduced"]):
            assert torch.equal(reduced, b["reduced"][step])
            for rank, dump in enumerate((a, b)):
                own = [KEYS.index(k) for k in sections[rank]]
                # every row's all-reduced gradient is exactly its owner's local gradient
                torch.testing.assert_close(reduced[own], dump["raw"][step][own], rtol=1e-6, atol=0.0)
        table = a["params"]["key_table.weight"]
        assert torch.equal(table, b["params"]["key_table.weight"])  # the same union on every rank
        assert (table.abs().sum(1) > 0).all()  # every section was trained by its owner
    # without route, ranks computed gradients for other ranks' rows, and the mask rejected them
    a, b = runs["tp"]
    assert sum(float(g[2:].abs().sum()) for g in a["raw"]) > 0 and sum(float(g[:2].abs().sum()) for g in b["raw"]) > 0
    a, b = runs["tp_route"]  # with route nothing outside the section is even computed
    assert sum(float(g[2:].abs().sum()) for g in a["raw"]) == 0 and sum(float(g[:2].abs().sum()) for g in b["raw"]) == 0


def test_section_violations_counted_without_route_and_zero_with_route(runs):
    sections = _sections()
    for name in ("tp", "tp_route"):
        a, b = runs[name]
        assert a["summary"] == b["summary"]  # all-reduced every round
        s = a["summary"]
        outside = sum(family_of(d["task_ids"][t]) not in sections[d["rank"]] for d in (a, b) for t in d["finished"])
        assert s["episodes"] == len(a["finished"]) + len(b["finished"]) > 0
        assert s["section_violations"] == outside
        assert s["updates_delivered"] + s["section_violations"] == s["episodes"]
    assert runs["tp"][0]["summary"]["section_violations"] > 0
    route = runs["tp_route"][0]["summary"]
    assert route["section_violations"] == 0 and route["updates_delivered"] == route["episodes"]
    assert route["keys"] == route["tasks"]  # every task of the bank was rolled out by its owner


# --------------------------------------------------------------------------------------- one process
def test_keyed_policy_adds_its_row_and_is_the_plain_policy_at_init():
    from parlightning.envs.base import ActionSpec
    from parlightning.policies import ActorCritic

    spec = ActionSpec("multi_discrete", nvec=(3, 2))
    torch.manual_seed(0)
    plain = ActorCritic((5,), spec, (8, 8), "relu")
    torch.manual_seed(0)
    keyed = ActorCritic((5,), spec, (8, 8), "relu", n_keys=4)
    assert not hasattr(plain, "key_table") or plain.key_table is None
    obs, key = torch.randn(6, 5), torch.tensor([0, 1, 2, 3, 0, 1])
    action = torch.zeros(6, 2, dtype=torch.long)
    assert all(torch.equal(x, y) for x, y in zip(plain.evaluate(obs, action), keyed.evaluate(obs, action, key=key)))
    with torch.no_grad():
        keyed.key_table.weight[2] += 1.0
    moved = keyed.value(obs, key=key) != plain.value(obs)
    assert moved.tolist() == [False, False, True, False, False, False]  # only the samples of key 2
    with pytest.raises(ValueError, match="no key table"):
        plain.value(obs, key=key)


def test_strategy_statistics_are_checkpointed_and_resumed(tmp_path):
    from parlightning.fit import main

    args = ["--config", CONFIG, "--config", str(ROOT / "configs" / "parallel" / "cp.yaml"), *TINY,
            "--trainer.default_root_dir", str(tmp_path)]
    first = main([*args, "--trainer.max_epochs", "2"])
    last = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    saved = torch.load(last, weights_only=True)["StrategyPlanner"]
    assert saved["rounds"] == 2 and saved["strategy"]["clusters"] == ["fanout", "locked", "pipeline", "solo"]
    stats = saved["strategy"]["stats"]
    episodes = find_planner(first.trainer).summary()["episodes"]
    assert int(stats[:, 0].sum()) == int(saved["episodes"].sum()) == episodes > 0
    resumed = main([*args, "--trainer.max_epochs", "3", "--ckpt_path", str(last)])
    planner = find_planner(resumed.trainer)
    assert planner.rounds == 3
    after = planner.strategy.state_dict()["stats"]
    assert (after[:, 0] >= stats[:, 0]).all() and after[:, 0].sum() > stats[:, 0].sum()
    assert int(after[:, 0].sum()) == planner.summary()["episodes"]  # restored, then counted on


# --------------------------------------------------------------------------------------- refusals
PLANNER = "parlightning.callbacks.StrategyPlanner"
FAMILIES = "[solo, fanout, pipeline, locked]"


def _refused(tmp_path, strategy_yaml: str) -> str:
    from parlightning.fit import main

    override = tmp_path / "strategy.yaml"
    override.write_text(f"trainer:\n  callbacks+:\n    - class_path: {PLANNER}\n      init_args:\n"
                        f"        strategy: {strategy_yaml}\n")
    root = tmp_path / "run"
    with pytest.raises(SystemExit) as err:
        main(["--config", CONFIG, "--config", str(override), *TINY, "--trainer.default_root_dir", str(root)])
    assert not (root / "lightning_logs").exists()  # stopped before any rollout, nothing left behind
    return str(err.value.code)


@pytest.mark.parametrize(
    "strategy, says",
    [
        ("{class_path: parlightning.parallel.TensorParallel, init_args: {n_sections: 1}}",
         ["no declared key space", "keys=", "['solo', 'fanout', 'pipeline', 'locked']"]),
        ("{class_path: parlightning.parallel.TensorParallel, init_args: {n_sections: 2, keys: [solo]}}",
         ["n_sections=2 is greater than the 1 declared keys", "n_sections <= 1"]),
        (f"{{class_path: parlightning.parallel.TensorParallel, init_args: {{n_sections: 2, keys: {FAMILIES}}}}}",
         ["n_sections=2 but there are 1 workers", "n_sections=1"]),
        ("{class_path: parlightning.parallel.TensorParallel, init_args: {n_sections: 1, keys: [solo, fanout]}}",
         ["data.artifact_key", "'pipeline'", "not a declared key"]),
        ("{class_path: parlightning.parallel.PipelineParallel}",
         ["PipelineParallel is refused", "one artifact", "DataParallel()"]),
    ],
    ids=["tp-no-keys", "tp-sections-over-keys", "tp-sections-not-ranks", "tp-undeclared-key", "pp"],
)
def test_refusals_are_one_clean_error_before_any_rollout(tmp_path, strategy, says):
    message = _refused(tmp_path, strategy)
    assert message.startswith("error: ") and "\n" not in message
    for part in says:
        assert part in message, message


if __name__ == "__main__":  # one rank of the `runs` launch
    _rank_main(sys.argv[1])
