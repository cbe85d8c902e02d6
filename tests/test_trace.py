"""`python -m parlightning.evaluate ... --trace out.jsonl`: one JSON object per evaluated episode, round
by round (stages, what each slot did, subagent outcomes), consistent with the evaluated numbers."""

import glob
import json
import os
import re
from pathlib import Path

import pytest

from parlightning.cli.evaluate import main as evaluate_main
from parlightning.cli.fit import main as fit_main

ROOT = Path(__file__).resolve().parents[1]
SWARM = str(ROOT / "configs" / "swarm.yaml")
CARTPOLE = str(ROOT / "configs" / "cartpole_tensor.yaml")


def _lines(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_oracle_trace_adds_up_to_the_evaluated_episodes(tmp_path):
    result = evaluate_main(["--config", SWARM, "--policy", "oracle", "--episodes", "1", "--trace",
                            str(tmp_path / "t.jsonl")])
    episodes = _lines(tmp_path / "t.jsonl")
    assert len(episodes) == result["episodes"] == 64 and [e["episode"] for e in episodes] == list(range(64))
    assert sum(e["solved"] for e in episodes) / 64 == pytest.approx(result["success_rate"])
    assert sum(e["critical_steps"] for e in episodes) / 64 == pytest.approx(result["critical_steps"])
    did, finished = set(), set()
    for e in episodes:
        assert e["policy"] == "oracle" and e["split"] == "heldout" and e["family"] == e["task"].rsplit("-", 1)[0]
        assert sum(r["critical_steps"] for r in e["rounds"]) == pytest.approx(e["critical_steps"], abs=1e-4)
        slots = [s for r in e["rounds"] for s in r["slots"]]
        assert sum(s.get("shards", 0) for s in slots) == e["n_subagents"]  # every subagent is in the trace
        assert [r["stage"] for r in e["rounds"]] == sorted(r["stage"] for r in e["rounds"])  # stages in order
        for s in slots:
            did.add(s["did"])
            if s["did"] == "delegate":
                finished.add(s["finished"])
                assert s["instruction"] == ("briefed" if s["kind"] == "hard" else "generic")  # the oracle briefs HARD
                assert s["kind"] != "local"  # and never delegates LOCAL work
    assert {"own", "delegate"} <= did and finished == {True, False}  # subagents that finished and that failed


def test_serial_trace_shows_every_subtask_done_by_the_main_agent(tmp_path):
    evaluate_main(["--config", SWARM, "--policy", "serial", "--episodes", "1", "--trace", str(tmp_path / "s.jsonl")])
    episodes = _lines(tmp_path / "s.jsonl")
    slots = [s for e in episodes for r in e["rounds"] for s in r["slots"]]
    assert slots and {s["did"] for s in slots} == {"own"}
    assert all(e["n_subagents"] == 0 and e["critical_steps"] == e["serial_steps"] for e in episodes)


def test_trace_of_a_trained_policy_in_a_world_without_tasks(tmp_path):
    fit_main(["--config", CARTPOLE, "--trainer.max_epochs", "1", "--data.num_envs", "8", "--data.num_steps", "16",
              "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
              "--trainer.default_root_dir", str(tmp_path / "fit")])
    (ckpt,) = glob.glob(str(tmp_path / "fit" / "checkpoints" / "*.ckpt"))
    result = evaluate_main(["--config", CARTPOLE, "--ckpt_path", ckpt, "--episodes", "3", "--trace",
                            str(tmp_path / "c.jsonl")])
    episodes = _lines(tmp_path / "c.jsonl")
    assert len(episodes) == 3
    for e in episodes:
        assert e["length"] == len(e["steps"]) and e["return"] == sum(s["reward"] for s in e["steps"])
        assert {s["action"] for s in e["steps"]} <= {0, 1}
    assert sum(e["return"] for e in episodes) / 3 == pytest.approx(result["mean_return"])


def test_trace_into_a_missing_folder_is_one_error_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        evaluate_main(["--config", SWARM, "--policy", "oracle", "--json", str(tmp_path / "e.json"),
                       "--trace", str(tmp_path / "no" / "t.jsonl")])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 2 and re.match(r"^python -m parlightning.evaluate: error: argument --trace: the folder "
                                             r"of .* does not exist", last), last
    assert os.listdir(tmp_path) == []
