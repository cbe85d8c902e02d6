"""Parallelism strategies on 2 gloo ranks through the real CLI and Trainer (DDP on CPU).

One launch runs every override of configs/parallel/ (DP, block, CP, TP, TP with route), a user
strategy with `observe`, and a strategy that plans differently per rank, one after another in the
same two rank processes, with the progress bar on (as a user runs them)
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
from typing import Sequence

import pytest
import torch

from parlightning.callbacks import RolloutCallback, find_planner
from parlightning.distribution.strategies import TensorParallel, WorkUnit, family_of

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
CONFIG = str(ROOT / "configs" / "swarm.yaml")
WORLD = 2
EPOCHS, UPDATE_EPOCHS, MINIBATCHES = 2, 2, 2
TINY = [
    "--trainer.enable_model_summary", "false", "--trainer.max_epochs", str(EPOCHS), "--data.num_envs", "16", "--data.num_steps", "8",
    "--data.update_epochs", str(UPDATE_EPOCHS), "--data.num_minibatches", str(MINIBATCHES),
]
DDP = [
    "--trainer.accelerator", "cpu", "--trainer.devices", str(WORLD),
    "--trainer.strategy", "lightning.pytorch.strategies.DDPStrategy", "--trainer.strategy.timeout", "0:01:00",
]
PLANNER_YAML = ("trainer:\n  callbacks+:\n    - class_path: parlightning.callbacks.StrategyPlanner\n"
                "      init_args:\n        strategy: {{class_path: test_strategies_ddp.{}}}\n")
SCENARIOS = {  # name -> extra arguments; DP also stops each rollout's update early on a tiny target KL
    "dp": ["--config", "configs/parallel/dp.yaml", "--model.target_kl", "1e-6"],
    "block": ["--config", "configs/parallel/block.yaml", "--data.sampler", "parlightning.distribution.samplers.PosteriorSignal"],
    "cp": ["--config", "configs/parallel/cp.yaml"],
    "tp": ["--config", "configs/parallel/tp.yaml"],
    "tp_route": ["--config", "configs/parallel/tp_route.yaml"],
    "user": ["--config", "{out}/user.yaml"],
    # TP resumed from the last checkpoint of "tp" for one more epoch: every rank's counters survive
    "tp_resume": ["--config", "configs/parallel/tp.yaml", "--ckpt_path", "{out}/tp/lightning_logs/version_0/checkpoints/last.ckpt"],
    "rank_dependent": ["--config", "{out}/rank_dependent.yaml"],  # must fail: last
}
DUMPED = [name for name in SCENARIOS if name != "rank_dependent"]


class FewestFirst:
    """A user's strategy (`plan` + `observe`): each rank leases the families with the fewest
    observed episodes so far, so its plan depends on what `observe` saw; it keeps every call."""

    name = "fewest-first"

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.observed: list[list] = []

    def plan(self, n_workers: int, round_index: int, keys: Sequence[str]) -> list[WorkUnit]:
        families = sorted({family_of(k) for k in keys}, key=lambda f: (self.counts.get(f, 0), f))
        return [WorkUnit(w, tuple(k for k in keys if family_of(k) == families[w % len(families)]))
                for w in range(n_workers)]

    def observe(self, unit, task_id, score):
        self.counts[family_of(task_id)] = self.counts.get(family_of(task_id), 0) + 1
        self.observed.append([unit.worker, task_id, score])

    def state_dict(self):
        return {"observed": self.observed}


class RankDependent(FewestFirst):
    """Plans from rank-local state: the ranks disagree from round 0."""

    def plan(self, n_workers: int, round_index: int, keys: Sequence[str]) -> list[WorkUnit]:
        units = super().plan(n_workers, round_index, keys)
        if os.environ.get("LOCAL_RANK") != "1":
            return units
        return [WorkUnit(u.worker, units[-1 - i].keys) for i, u in enumerate(units)]  # the shards swapped
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
        self.keys_trained = []  # every minibatch's key-table rows (TP)
        self.returns, self.logged = [], []  # per round: this rank's episode returns; the logged stats

    def setup(self, trainer, pl_module, stage) -> None:
        picks = trainer.datamodule.collector.picks
        pick = picks.pick

        def recording_pick(context, reset_mask):
            picked = pick(context, reset_mask)
            self.started[-1].index_add_(0, picked, reset_mask.long())
            return picked

        picks.pick = recording_pick  # counts the tasks actors start, step by step

    def on_fit_start(self, trainer, pl_module) -> None:  # runs before PPOModule registers the TP mask
        self.initial = {k: v.detach().clone() for k, v in pl_module.policy.state_dict().items()}
        table = getattr(pl_module.policy, "key_table", None)
        if table is not None:
            table.weight.register_hook(lambda g: self.raw.append(g.detach().clone()))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if "keys" in batch:
            self.keys_trained.append(batch["keys"].clone())

    def on_rollout_end(self, trainer, pl_module, rollout) -> None:
        self.shards.append(rollout.context.shard.tolist())  # the round's own, from its context
        self.plans.append([list(u.keys) for u in rollout.context.plan])
        self.returns.append(rollout.episode_return.clone())
        self.logged.append({k: float(v) for k, v in rollout.stats.items() if not k.startswith("perf/")})

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:  # after DDP's all-reduce
        self.batches += 1
        table = getattr(pl_module.policy, "key_table", None)
        if table is not None:
            self.reduced.append(table.weight.grad.detach().clone())

    def on_rollout_start(self, trainer, pl_module, round_index) -> None:
        dm = trainer.datamodule
        started = torch.zeros(len(dm.collector.task_ids), dtype=torch.long)
        if round_index == 0:  # the first reset happened in build, under round 0's plan
            started.index_add_(0, dm.collector.current_task, torch.ones_like(dm.collector.current_task))
        self.started.append(started)
        self.finished.append([])

    def on_episodes_end(self, trainer, pl_module, task_ids, parts) -> None:
        self.finished[-1].extend(task_ids.tolist())

    def on_fit_end(self, trainer, pl_module) -> None:
        planner = find_planner(trainer)
        torch.save(
            {
                "shards": self.shards, "plans": self.plans, "started": torch.stack(self.started),
                "finished": self.finished, "raw": self.raw, "keys_trained": self.keys_trained,
                "returns": self.returns, "logged": self.logged, "reduced": self.reduced, "batches": self.batches,
                "params": {k: v.detach().clone() for k, v in pl_module.policy.state_dict().items()},
                "initial": self.initial,
                "summary": planner.summary(), "strategy": planner.strategy.state_dict()
                if hasattr(planner.strategy, "state_dict") else {},
                "task_ids": list(trainer.datamodule.collector.task_ids), "rank": trainer.global_rank,
            },
            f"{self.out}_rank{trainer.global_rank}.pt",
        )


def _rank_main(out: str) -> None:
    """One rank: every scenario through the real CLI, in order (the process group is reused)."""
    from parlightning.cli.fit import main

    del sys.argv[1:]  # main() gets its arguments as a list
    rank = os.environ["LOCAL_RANK"]
    for name, cls in (("user", "FewestFirst"), ("rank_dependent", "RankDependent")):
        Path(f"{out}/{name}.yaml.{rank}").write_text(PLANNER_YAML.format(cls))  # per rank: no write race
        os.replace(f"{out}/{name}.yaml.{rank}", f"{out}/{name}.yaml")
    for name, extra in SCENARIOS.items():
        args = ["--config", CONFIG, *[a.format(out=out) for a in extra], *TINY, *DDP,
                "--trainer.default_root_dir", f"{out}/{name}",
                "--trainer.callbacks+=test_strategies_ddp.Recorder", f"--trainer.callbacks.out={out}/{name}"]
        if name == "tp_resume":
            args += ["--trainer.max_epochs", str(EPOCHS + 1)]
        if name != "rank_dependent":
            main(args)
            continue
        try:
            main(args)
        except SystemExit as stop:
            Path(f"{out}/{name}_rank{rank}.txt").write_text(str(stop.code))


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
    dumps = {name: [torch.load(out / f"{name}_rank{r}.pt", weights_only=True) for r in range(WORLD)]
             for name in DUMPED}
    dumps["rank_dependent"] = [(out / f"rank_dependent_rank{r}.txt").read_text() for r in range(WORLD)]
    return dumps


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
    for name in DUMPED:
        a, b = runs[name]
        assert a["params"].keys() == b["params"].keys()
        for k in a["params"]:
            assert torch.equal(a["params"][k], b["params"][k]), (name, k)
        assert not torch.equal(a["params"]["actor.0.weight"], a["initial"]["actor.0.weight"]), name  # it trained


def test_every_rank_yields_the_same_number_of_minibatches(runs):
    for name in DUMPED:
        a, b = runs[name]
        assert a["batches"] == b["batches"], name
    full = EPOCHS * UPDATE_EPOCHS * MINIBATCHES
    assert runs["cp"][0]["batches"] == full
    assert runs["dp"][0]["batches"] < full  # target-KL stopped the update, on both ranks alike


def test_cluster_plans_identical_across_ranks(runs):
    a, b = runs["cp"]
    assert a["plans"] == b["plans"]
    assert torch.equal(a["strategy"]["stats"], b["strategy"]["stats"])  # statistics agreed by all-reduce
    assert int(a["strategy"]["stats"][:, 0].sum()) == a["summary"]["episodes"] > 0
    assert torch.equal(a["strategy"]["task_stats"], b["strategy"]["task_stats"])
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


def test_section_violations_count_the_trained_key_rows_the_mask_rejects(runs):
    """TP counts, per trained sample, the key-table gradient rows each rank's mask keeps
    (`updates_delivered`) and rejects (`section_violations`), summed over ranks, not episodes."""
    sections = _sections()
    owner = torch.tensor([next(s for s, sec in enumerate(sections) if k in sec) for k in KEYS])
    for name in ("tp", "tp_route"):
        a, b = runs[name]
        assert a["summary"] == b["summary"]  # all-reduced every round and at the end
        s = a["summary"]
        rejected = sum(int((owner[k] != d["rank"]).sum()) for d in (a, b) for k in d["keys_trained"])
        trained = sum(k.numel() for d in (a, b) for k in d["keys_trained"])
        assert trained == WORLD * a["batches"] * 16 * 8 // MINIBATCHES > 0  # every row of every minibatch
        assert (s["updates_delivered"], s["section_violations"]) == (trained - rejected, rejected)
        assert s["episodes"] == sum(len(r) for d in (a, b) for r in d["finished"]) > 0
    assert runs["tp"][0]["summary"]["section_violations"] > 0
    route = runs["tp_route"][0]["summary"]
    assert route["section_violations"] == 0
    assert route["keys"] == route["tasks"]  # every task of the bank was rolled out by its owner


def test_tp_counters_of_every_rank_survive_a_resume(runs):
    """The checkpoint is written by rank 0, after the last epoch's updates were counted but before
    the end-of-training sync: every rank's counts since the last sync must be in it, so the resumed
    run's totals are those of both runs (rank 0's alone were saved before: rank 1's were lost)."""
    sections = _sections()
    owner = torch.tensor([next(s for s, sec in enumerate(sections) if k in sec) for k in KEYS])
    dumps = [*runs["tp"], *runs["tp_resume"]]
    rejected = sum(int((owner[k] != d["rank"]).sum()) for d in dumps for k in d["keys_trained"])
    trained = sum(k.numel() for d in dumps for k in d["keys_trained"])
    a, b = runs["tp_resume"]
    assert a["summary"] == b["summary"]
    assert a["summary"]["rounds"] == EPOCHS + 1
    assert (a["summary"]["updates_delivered"], a["summary"]["section_violations"]) == (trained - rejected, rejected)
    first = runs["tp"][0]["summary"]
    assert first["episodes"] < a["summary"]["episodes"]


def test_rollout_statistics_are_weighted_by_episodes_over_all_ranks(runs):
    for name in ("dp", "cp"):
        a, b = runs[name]
        for r in range(EPOCHS):
            returns = torch.cat([a["returns"][r], b["returns"][r]])
            for dump in (a, b):
                logged = dump["logged"][r]
                assert logged["rollout/episodes"] == returns.numel() > 0
                assert logged["charts/episodic_return"] == pytest.approx(float(returns.mean()), rel=1e-5)


def test_a_user_strategys_observe_sees_every_ranks_episodes_and_plans_agree(runs):
    a, b = runs["user"]
    assert a["plans"] == b["plans"]  # the digest check passed every round
    observed = a["strategy"]["observed"]
    assert observed == b["strategy"]["observed"]  # the same calls, in the same order, on both ranks
    finished = [[d["task_ids"][t] for t in d["finished"][r]] for r in range(EPOCHS) for d in (a, b)]
    assert [task for _, task, _ in observed] == [t for chunk in finished for t in chunk]  # round by round, rank order
    assert {w for w, _, _ in observed} == {0, 1}  # each episode with the unit of the rank that ran it


def test_ranks_that_plan_differently_stop_with_one_error_naming_the_strategy(runs):
    """Every rank meets the check; rank 0 prints the job's one error line, the others exit 1 after a
    "(rank N stopped too: ...)" note, so the job's output has one `error:` line, not one per rank."""
    message, *others = runs["rank_dependent"]
    assert message.startswith("error: ") and "\n" not in message, message
    assert "RankDependent" in message or "different plans on different ranks" in message, message
    assert "round 0" in message and "union" in message, message
    assert others == ["1"] * (WORLD - 1), others


def test_episodes_finishing_outside_their_rounds_shard_are_counted(runs):
    """DP's shards rotate: each round some actors finish an episode started under the last plan."""
    for name in ("dp", "block"):
        a, b = runs[name]
        outside = sum(t not in set(d["shards"][r]) for d in (a, b) for r in range(1, EPOCHS) for t in d["finished"][r])
        assert a["summary"]["carried_episodes"] == b["summary"]["carried_episodes"] == outside
        assert [d["logged"][1]["parallel/carried_episodes"] for d in (a, b)] == [outside, outside]
    assert runs["dp"][0]["summary"]["carried_episodes"] > 0 and runs["block"][0]["summary"]["carried_episodes"] == 0


def test_posterior_signal_sync_keeps_its_share_a_probability_under_ddp(runs):
    a, b = runs["block"]
    for r in range(EPOCHS):
        shares = [d["logged"][r]["sampler/posterior_informative_share"] for d in (a, b)]
        assert all(0.0 <= x <= 1.0 for x in shares), shares


# --------------------------------------------------------------------------------------- one process
def test_keyed_policy_adds_its_row_and_is_the_plain_policy_at_init():
    from parlightning.envs.base import ActionSpec
    from parlightning.policies.actor_critic import ActorCritic

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
    from parlightning.cli.fit import main

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


def test_posterior_signal_sync_adds_counts_and_refits_on_the_union():
    """Two 'ranks' (threads meeting in an all-reduce) sync a PosteriorSignal: counts add, the
    posterior is refit from the union (equal to one sampler that saw every episode), and its
    informative share stays a probability (adding probabilities as counts logged -0.655)."""
    from parlightning.distribution.samplers import PosteriorSignal
    from reliability_helpers import sync_as_ranks

    ids = [f"solo-{i}" for i in range(6)]
    ranks = [PosteriorSignal(pass_threshold=1.0, seed=r) for r in range(WORLD)]
    union = PosteriorSignal(pass_threshold=1.0, seed=0)
    for sampler in (*ranks, union):
        sampler.bind(ids, torch.device("cpu"))
    outcomes = [torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0]), torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])]
    for rank, sampler in enumerate(ranks):
        sampler.pick_batch(torch.arange(6), 0, torch.ones(5, dtype=torch.bool), torch.Generator().manual_seed(rank))
        sampler.record_batch(torch.arange(6), outcomes[rank])
        union.record_batch(torch.arange(6), outcomes[rank])
    sync_as_ranks(ranks)
    union.weights(ids)  # fits its posterior
    picks = ranks[0].picks + 0
    assert torch.equal(ranks[1].picks, picks) and int(picks.sum()) == WORLD * 5
    expected = float((picks * union.p_informative).sum() / picks.sum())
    for sampler in ranks:
        assert torch.equal(sampler.attempts, union.attempts) and torch.equal(sampler.passes, union.passes)
        torch.testing.assert_close(sampler.p_informative, union.p_informative)
        share = float(sampler.signals()["posterior_informative_share"])
        assert 0.0 <= share <= 1.0 and share == pytest.approx(expected, rel=1e-5)


# --------------------------------------------------------------------------------------- refusals
PLANNER = "parlightning.callbacks.StrategyPlanner"
FAMILIES = "[solo, fanout, pipeline, locked]"


def _refused(tmp_path, strategy_yaml: str) -> str:
    from parlightning.cli.fit import main

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
        ("{class_path: parlightning.distribution.strategies.TensorParallel, init_args: {n_sections: 1}}",
         ["no declared key space", "keys=", "['solo', 'fanout', 'pipeline', 'locked']"]),
        ("{class_path: parlightning.distribution.strategies.TensorParallel, init_args: {n_sections: 2, keys: [solo]}}",
         ["n_sections=2 is greater than the 1 declared keys", "n_sections <= 1"]),
        (f"{{class_path: parlightning.distribution.strategies.TensorParallel, init_args: {{n_sections: 2, keys: {FAMILIES}}}}}",
         ["n_sections=2 but there are 1 workers", "n_sections=1"]),
        ("{class_path: parlightning.distribution.strategies.TensorParallel, init_args: {n_sections: 1, keys: [solo, fanout]}}",
         ["data.artifact_key", "'pipeline'", "not a declared key"]),
        ("{class_path: parlightning.distribution.strategies.PipelineParallel}",
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
