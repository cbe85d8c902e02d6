"""Round 20's classes (`scripts/bad_inputs_round20.py`, measured before these fixes): a re-stamped
checkpoint whose optimizer state has no parameter groups, whose loop progress no run writes
(negative, out of order, a `current` above its `total`), whose `policy_spaces.action_mask_width` is
no width, or whose `policy_spaces` record another world than the config's while the weights happen
to fit (evaluate, bc's teacher); a callback that leaves NaN weights in the checkpoint it saves; a
cue count that sizes every observation past any use (`CueMemoryEnv.n_cues`,
`recurrent_vs_mlp.py --n_cues`); and the corpus harness passing `{tmp}` through a case's environment."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import lightning
import pytest
import torch

from parlightning.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SWARM = str(ROOT / "configs" / "swarm.yaml")
TINY = ["--data.num_envs", "8", "--data.num_steps", "8", "--trainer.max_epochs", "1",
        "--trainer.enable_model_summary", "false", "--trainer.enable_progress_bar", "false"]


# ------------------------------------------------------------------ optimizer groups and loop progress
@pytest.mark.parametrize("groups", [[], None, "adam", [1, 2]])
def test_optimizer_state_without_parameter_groups_is_named(ckpt, groups):
    from parlightning.runtime.checkpoint import check_optimizer_state

    states = torch.load(ckpt, weights_only=True)["optimizer_states"]
    params = [torch.zeros_like(states[0]["state"][i]["exp_avg"]) for i in sorted(states[0]["state"])]  # the shapes
    check_optimizer_state("c.ckpt", states, params)  # the saved state itself loads
    states[0]["param_groups"] = groups
    with pytest.raises(ConfigError, match=r"^--ckpt_path: 'c.ckpt': optimizer_states\[0\]\.param_groups is .*, not the "
                                          r"optimizer's parameter groups"):
        check_optimizer_state("c.ckpt", states, params)


def _batch(ck: dict, part: str) -> dict:
    return ck["loops"]["fit_loop"]["epoch_loop.batch_progress"][part]


@pytest.mark.parametrize("edit, says", [
    (lambda ck: _batch(ck, "total").__setitem__("ready", -5),
     "loops.fit_loop.epoch_loop.batch_progress.total.ready = -5 (a count: an int >= 0)"),
    (lambda ck: _batch(ck, "current").__setitem__("started", 2.5), "batch_progress.current.started = 2.5"),
    (lambda ck: _batch(ck, "total").__setitem__("completed", 10**6), "batch_progress.total.processed = 16 is below "
                                                                     "completed = 1000000"),
    (lambda ck: [_batch(ck, "current").__setitem__(k, 99) for k in ("ready", "started", "processed", "completed")],
     "batch_progress.current.ready = 99 is above loops.fit_loop.epoch_loop.batch_progress.total.ready = 16"),
])
def test_loop_progress_no_run_writes_is_named(ckpt, edit, says):
    from parlightning.runtime.checkpoint import _check_counters

    ck = torch.load(ckpt, weights_only=True)
    _check_counters("c.ckpt", copy.deepcopy(ck))  # Lightning's own progress passes
    edit(ck)
    with pytest.raises(ConfigError) as err:
        _check_counters("c.ckpt", ck)
    assert str(err.value).startswith("--ckpt_path: 'c.ckpt' holds loop progress no run writes: ") and says in \
        str(err.value), str(err.value)


def test_a_resume_from_negative_loop_progress_is_one_line(restamped, tmp_path, monkeypatch):
    from parlightning import fit

    path = restamped(lambda ck: [_batch(ck, p).__setitem__(k, -5) for p in ("total", "current")
                                               for k in ("ready", "started", "processed", "completed")])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"holds loop progress no run writes: loops\.fit_loop\.epoch_loop\.batch_progress"):
        fit(SWARM, [*TINY, "--trainer.max_epochs", "2", "--ckpt_path", path])
    assert not (tmp_path / "lightning_logs").exists()


# ------------------------------------------------------------------ policy_spaces
@pytest.mark.parametrize("width", [-12, 0, True, "12", 1.5])
def test_a_mask_width_that_is_no_width_is_named(restamped, width):
    from parlightning import load_policy
    from parlightning.cli.export import load_policy as export_load

    path = restamped(lambda ck: ck["policy_spaces"].__setitem__("action_mask_width", width))
    for load, flag in ((export_load, "--ckpt_path"), (load_policy, "load_policy(path)")):
        with pytest.raises(ConfigError) as err:
            load(path)
        assert str(err.value).startswith(f"{flag}: {path!r}: policy_spaces.action_mask_width: {width!r} is not a mask "
                                         "width"), str(err.value)


def test_evaluate_and_bc_refuse_a_record_of_another_world_even_when_the_weights_fit(ckpt, restamped, tmp_path):
    from parlightning.cli.bc import clone
    from parlightning.cli.evaluate import build_env, load_policy
    from parlightning.envs.swarm import SwarmEnv

    env = build_env(SwarmEnv, {}, 2, 0, None, "cpu")
    load_policy(ckpt, env)  # its own record: this world's
    path = restamped(lambda ck: ck["policy_spaces"]["action_spec"].__setitem__("nvec", [8] * 12))
    with pytest.raises(ConfigError) as err:
        load_policy(path, env)
    assert str(err.value).startswith(f"--ckpt_path: {path!r}: its policy_spaces record a policy for observations (13, 6) "
                                     "and multi_discrete actions nvec (8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8), this world's "
                                     "are (13, 6) and multi_discrete actions nvec (7, 7,"), str(err.value)
    with pytest.raises(ConfigError, match=r"^--teacher: .*its policy_spaces record a policy"):
        clone([SWARM], path, str(tmp_path / "b.ckpt"), rounds=2, num_envs=8, epochs=1)
    assert not (tmp_path / "b.ckpt").exists()


# ------------------------------------------------------------------ a callback poisoning the saved weights
class PoisonsTheSavedWeights(lightning.Callback):
    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        for key in list(checkpoint["state_dict"]):
            checkpoint["state_dict"][key] = torch.full_like(checkpoint["state_dict"][key], float("nan"))


def test_a_callback_leaving_nan_weights_in_its_checkpoint_is_named(tmp_path, monkeypatch):
    from parlightning import fit

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        fit(SWARM, [*TINY, "--trainer.callbacks+", f"{__name__}.PoisonsTheSavedWeights"])
    text = str(err.value)
    assert "PoisonsTheSavedWeights.on_save_checkpoint left non-finite values (NaN or inf) in " \
           "checkpoint['state_dict']['policy." in text, text
    assert not list(tmp_path.glob("lightning_logs/*/checkpoints/*.ckpt"))  # no poisoned file written


# ------------------------------------------------------------------ cue counts
def test_a_cue_count_past_any_use_is_refused_by_the_world_and_the_script():
    from parlightning.envs.memory import CueMemoryEnv

    with pytest.raises(ConfigError, match=r"^CueMemoryEnv\.n_cues: must be an integer in \[2, 1000000\], got 1000000000"):
        CueMemoryEnv(2, n_cues=10**9)
    assert CueMemoryEnv(2, n_cues=10**6).observation_shape == (10**6 + 1,)
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "recurrent_vs_mlp.py"), "--n_cues", "1000000000"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == (
        "recurrent_vs_mlp.py: error: argument --n_cues: must be an integer in 2..1000000 (got 1000000000)"), done.stderr


def test_the_corpus_harness_fills_in_a_cases_environment(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import bad_inputs_round5 as r5
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    assert r5._subst({"MARK": "{tmp}/mark", "FX": "{fx}/a"}, tmp_path, Path("/fx")) == {
        "MARK": f"{tmp_path}/mark", "FX": "/fx/a"}
