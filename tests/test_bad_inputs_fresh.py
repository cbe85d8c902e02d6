"""Round four's bad inputs (a fresh corpus written from the docs only, `scripts/bad_inputs_fresh.py`):
one test per class of input that was not clean, each one `error:` line naming the field or the failing
component, nothing written. A user's world, sampler or strategy that raises (in its constructor, the
preflight probe or mid-run); spaces that are not spaces; NaN/inf config values; trainer counts Lightning
takes without a word; broken YAML named by file; damaged checkpoint metadata; output paths of evaluate,
export, bc and plot; a user's unannotated sampler and strategy accepted as documented."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from parlightning.runtime.checkpoint import CHECKSUM_KEY, state_checksum
from parlightning.cli.fit import main

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import bad_inputs_fresh  # noqa: E402

SWARM = str(ROOT / "configs" / "swarm.yaml")
CARTPOLE = ["--data.env", "parlightning.envs.CartPoleEnv", "--data.reward", "null", "--model.hidden_sizes", "[8]",
            "--trainer.max_epochs", "1", "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false",
            "--trainer.enable_model_summary", "false", "--data.num_envs", "4", "--data.num_steps", "8",
            "--data.update_epochs", "1", "--data.num_minibatches", "1"]
TINY_SWARM = ["--config", SWARM, "--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false",
              "--trainer.enable_model_summary", "false", "--data.num_envs", "4", "--data.num_steps", "4",
              "--data.update_epochs", "1", "--data.num_minibatches", "1"]


@pytest.fixture
def user_code(tmp_path, monkeypatch):
    """The corpus' user worlds, samplers, strategies and callbacks as module `uw`, importable by class_path."""
    (tmp_path / "uw.py").write_text(bad_inputs_fresh.USER_WORLDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("uw", None)
    yield tmp_path
    sys.modules.pop("uw", None)


def _one_error_line(capsys, run) -> str:
    """The one error line of a refused command: the package's (`error: ...`, exit 1) or argparse's for
    a bad argument (`prog: error: argument --x: ...`, exit 2)."""
    with pytest.raises(SystemExit) as exit_:
        run()
    message = exit_.value.code
    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr, stderr[-2000:]
    if message == 2:  # argparse refused an argument: its line is the last one on stderr
        lines = [line for line in stderr.splitlines() if "error:" in line]
        assert len(lines) == 1 and ": error: argument --" in lines[0], stderr[-2000:]
        return lines[0]
    assert isinstance(message, str) and message.startswith("error: ") and "\n" not in message, message
    return message


def _written(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if "__pycache__" not in p.parts and p.suffix != ".py")


# ---------------------------------------------------------------------------------- a user's world
@pytest.mark.parametrize("world, says", [
    ("ResetRaises", ["data.env: ResetRaises.reset raised RuntimeError: simulator backend is down", "preflight"]),
    ("StepRaises", ["data.env: StepRaises.step raised RuntimeError", "fix the world's step"]),
    ("RaisesSystemExit", ["RaisesSystemExit.reset raised SystemExit"]),  # exited 0 before: a "successful" run
    ("NoObsShape", ["NoObsShape.observation_shape is None", "tuple of positive ints"]),
    ("NegativeObsShape", ["observation_shape is (-4,)"]),
    ("ZeroCategories", ["ZeroCategories.action_spec.nvec is (0,)", "at least one category"]),
    ("StringSpec", ["StringSpec.action_spec is str", "not an ActionSpec"]),
    ("MetaDevice", ["observations on device meta", "self.device"]),
])
def test_a_world_that_breaks_the_contract_or_raises_in_the_probe_is_one_line(user_code, capsys, world, says):
    message = _one_error_line(capsys, lambda: main([*CARTPOLE, "--data.env", f"uw.{world}"]))
    assert all(s in message for s in says), message
    assert _written(user_code) == []


def test_a_world_whose_constructor_raises_a_runtime_error_is_one_line(user_code, capsys):
    (user_code / "uw2.py").write_text("from uw import Good\n\n\nclass W(Good):\n    def __init__(self, num_envs: int = 4, "
                                      "device: str = 'cpu', seed: int = 0):\n"
                                      "        raise RuntimeError('GPU driver missing')\n")
    sys.modules.pop("uw2", None)
    message = _one_error_line(capsys, lambda: main([*CARTPOLE, "--data.env", "uw2.W"]))
    assert message.startswith("error: data.env: ") and "raised RuntimeError: GPU driver missing" in message, message


def test_a_world_that_raises_mid_run_is_one_line_naming_it_and_the_step(user_code, capsys):
    message = _one_error_line(capsys, lambda: main([*CARTPOLE, "--data.env", "uw.StepRaisesLater"]))
    assert "data.env: StepRaisesLater.step raised RuntimeError: simulator backend went away at step 4" in message


def test_a_factory_named_by_class_path_is_told_to_be_the_value(user_code, capsys):
    cfg = user_code / "c.yaml"
    cfg.write_text("data:\n  env:\n    class_path: uw.make_env_typed\n")
    message = _one_error_line(capsys, lambda: main([*CARTPOLE, "--config", str(cfg)]))
    assert "uw.make_env_typed is a function: name it as the value (data.env: uw.make_env_typed)" in message, message


# ---------------------------------------------------------------------------------- samplers, strategies
def test_a_users_unannotated_sampler_and_strategy_train_as_documented(user_code, tmp_path):
    """The docs' two-method sampler and name+plan strategy, without type annotations: the config parser
    matched them against the protocols' annotations exactly and refused them."""
    (tmp_path / "st.yaml").write_text(textwrap.dedent("""\
        trainer:
          callbacks+:
            - class_path: parlightning.callbacks.StrategyPlanner
              init_args: {strategy: {class_path: uw.UserStrategy}}
        """))
    main([*TINY_SWARM, "--config", str(tmp_path / "st.yaml"), "--data.sampler", "uw.Sampler",
          "--trainer.default_root_dir", str(tmp_path / "run")])
    assert list((tmp_path / "run").rglob("last.ckpt"))


@pytest.mark.parametrize("args, says", [
    (["--data.sampler", "uw.SamplerNoRecord"], ["uw.SamplerNoRecord is not a TaskSampler: it has no record"]),
    (["--data.sampler", "uw.SamplerRaises"], ["data.sampler: SamplerRaises.pick raised RuntimeError"]),
    (["--data.sampler", "uw.SamplerBadId"], ["data.sampler: SamplerBadId.pick returned 'no-such-task-42'"]),
])
def test_a_users_sampler_that_lacks_a_method_or_raises_is_one_line(user_code, capsys, args, says):
    message = _one_error_line(capsys, lambda: main([*TINY_SWARM, *args]))
    assert all(s in message for s in says), message
    assert _written(user_code) == []


def test_a_users_strategy_that_raises_is_one_line_on_its_field(user_code, capsys, tmp_path):
    (tmp_path / "st.yaml").write_text("trainer:\n  callbacks+:\n    - class_path: parlightning.callbacks.StrategyPlanner\n"
                                      "      init_args: {strategy: {class_path: uw.StrategyRaises}}\n")
    message = _one_error_line(capsys, lambda: main([*TINY_SWARM, "--config", str(tmp_path / "st.yaml")]))
    assert "trainer.callbacks.StrategyPlanner.strategy:" in message and "plan raised RuntimeError: planner failed" \
        in message, message


def test_parl_reward_on_a_world_without_tasks_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = _one_error_line(capsys, lambda: main([*CARTPOLE, "--data.reward", "parlightning.parl.reward.PARLReward",
                                                    "--data.reward.init_args.max_subagents", "8"]))
    assert "data.reward: PARLReward" in message and "set data.reward: null" in message, message
    assert _written(tmp_path) == []


# ---------------------------------------------------------------------------------- config values and files
@pytest.mark.parametrize("args, says", [
    (["--model.lr", ".nan"], "model.lr: must be positive (a finite number), got '.nan'"),  # YAML's spelling (a bare `nan` is a string, refused as such)
    (["--model.lr", ".inf"], "model.lr: must be positive (a finite number), got '.inf'"),
    (["--model.vf_coef", ".inf"], "model.vf_coef: must be >= 0 (a finite number)"),
    (["--data.env.init_args.max_episode_steps", "50", "--data.gamma", "nan"], "data.gamma"),
    (["--trainer.log_every_n_steps", "-1"], "trainer.log_every_n_steps: must be an integer >= 1"),
    (["--trainer.accumulate_grad_batches", "0"], "trainer.accumulate_grad_batches: must be an integer >= 1"),
    (["--trainer.check_val_every_n_epoch", "0"], "trainer.check_val_every_n_epoch"),
    (["--trainer.max_time", "forever"], "trainer.max_time: 'forever' is not a duration"),
])
def test_non_finite_values_and_trainer_counts_are_refused_before_anything_is_written(tmp_path, capsys, monkeypatch,
                                                                                   args, says):
    monkeypatch.chdir(tmp_path)
    message = _one_error_line(capsys, lambda: main([*CARTPOLE, *args]))
    assert says in message, message
    assert _written(tmp_path) == []  # ent_coef nan / vf_coef inf used to leave lightning_logs/version_0


@pytest.mark.parametrize("content, says", [
    ("model:\n  hidden_sizes: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    ("model: [\n", "not valid YAML at line 2"),
    ("trainer:\n\tmax_epochs: 1\n", "not valid YAML at line 2"),
])
def test_a_broken_yaml_file_is_named_among_several_configs(tmp_path, capsys, monkeypatch, content, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "good.yaml").write_text("seed_everything: 1\n")
    (tmp_path / "broken.yaml").write_text(content)
    message = _one_error_line(capsys, lambda: main([*CARTPOLE, "--config", "good.yaml", "--config", "broken.yaml"]))
    assert message.startswith("error: --config broken.yaml: ") and says in message, message


def test_a_file_where_the_log_folder_goes_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lightning_logs").write_text("not a folder")
    message = _one_error_line(capsys, lambda: main(CARTPOLE))
    assert "lightning_logs" in message and "is a file" in message, message


def test_a_second_model_checkpoint_is_refused_before_the_run_folder_exists(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = _one_error_line(capsys, lambda: main([*TINY_SWARM, "--trainer.callbacks+=lightning.pytorch.callbacks."
                                                    "ModelCheckpoint", "--trainer.callbacks.dirpath", "other"]))
    assert "trainer.callbacks: two ModelCheckpoint callbacks with the same settings" in message, message
    assert _written(tmp_path) == []


# ---------------------------------------------------------------------------------- checkpoints
@pytest.fixture(scope="module")
def cartpole_ckpt(tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    main([*CARTPOLE, "--trainer.default_root_dir", str(root)])
    return next(root.rglob("last.ckpt"))


def _edited(ckpt_path, tmp_path, edit, checksum=True):
    ckpt = torch.load(ckpt_path, weights_only=True)
    edit(ckpt)
    if checksum:  # re-signed, as an editor who knows the scheme would: the structure check must still catch it
        ckpt[CHECKSUM_KEY] = state_checksum({k: v for k, v in ckpt.items() if k != CHECKSUM_KEY})
    out = tmp_path / "edited.ckpt"
    torch.save(ckpt, out)
    return out


@pytest.mark.parametrize("edit, says", [
    (lambda c: c.__setitem__("epoch", -5), "its epoch is -5"),
    (lambda c: c.__setitem__("loops", {"fit_loop": "broken"}), "its loops are not a mapping"),
    (lambda c: c.__setitem__("callbacks", 12345), "its callbacks state is not a mapping"),
])
def test_edited_checkpoint_metadata_is_refused(tmp_path, capsys, cartpole_ckpt, edit, says):
    path = _edited(cartpole_ckpt, tmp_path, edit)
    message = _one_error_line(capsys, lambda: main([*CARTPOLE, "--trainer.max_epochs", "3", "--ckpt_path", str(path),
                                                    "--trainer.default_root_dir", str(tmp_path / "out")]))
    assert "is damaged or edited" in message and says in message, message
    assert not (tmp_path / "out").exists()


def test_export_verifies_the_checkpoint_and_its_output_path(tmp_path, capsys, cartpole_ckpt):
    from parlightning.cli.export import main as export_main

    nan = _edited(cartpole_ckpt, tmp_path, lambda c: c["state_dict"].update(
        {k: v * float("nan") for k, v in c["state_dict"].items() if v.is_floating_point()}))
    message = _one_error_line(capsys, lambda: export_main(["--ckpt_path", str(nan), "--out", str(tmp_path / "p.pt2")]))
    assert "non-finite weights" in message, message
    (tmp_path / "adir").mkdir()
    message = _one_error_line(capsys, lambda: export_main(["--ckpt_path", str(cartpole_ckpt), "--out",
                                                           str(tmp_path / "adir")]))
    assert "--out:" in message and "is a folder" in message, message  # argparse's line since the typed arguments
    message = _one_error_line(capsys, lambda: export_main(["--ckpt_path", str(cartpole_ckpt), "--out",
                                                           str(tmp_path / "policy.txt")]))
    assert "names neither format" in message, message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "edited.ckpt"]


# ---------------------------------------------------------------------------------- output paths, devices
@pytest.mark.parametrize("args, says", [
    (["--json", "no/such/dir/out.json"], "argument --json: the folder of 'no/such/dir/out.json'"),
    (["--json", "adir"], "argument --json: 'adir' is a folder"),
    (["--gantt", "nope/g.png"], "argument --gantt: the folder of"),
    (["--trace", "afile/t.jsonl"], "is a file, not a folder"),
    (["--device", "toaster"], "argument --device: must be cpu, cuda, cuda:N or mps (got 'toaster')"),
    (["--seed", "-5"], "argument --seed: must be a seed in 0..4294967295 (got -5)"),
])
def test_evaluate_checks_its_outputs_and_device_before_it_runs(tmp_path, capsys, monkeypatch, args, says):
    from parlightning.cli.evaluate import main as evaluate_main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    message = _one_error_line(capsys, lambda: evaluate_main(["--policy", "oracle", "--episodes", "1", *args]))
    assert says in message, message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile"]


def test_plot_names_the_pattern_that_matched_nothing_and_checks_csv(tmp_path, capsys, monkeypatch):
    from parlightning.cli.plot import main as plot_main

    monkeypatch.chdir(tmp_path)
    message = _one_error_line(capsys, lambda: plot_main(["nomatch_*", "--out", "x.png"]))
    assert "runs: no TensorBoard event files: 'nomatch_*' matches no file or folder" in message, message
    (tmp_path / "empty").mkdir()
    message = _one_error_line(capsys, lambda: plot_main(["--group", "g=empty", "--out", "x.png"]))
    assert "--group g: no TensorBoard event files: 'empty' holds none" in message, message


@pytest.mark.parametrize("script, args", [
    ("world_baselines.py", ["--quick", "--seeds", "0"]), ("tune.py", ["--quick", "--trials", "0"]),
    ("bench_world.py", ["--quick", "--n", "0"]), ("bench_throughput.py", ["--warmup", "-1"]),
])
def test_scripts_refuse_bad_counts(script, args):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / script), *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and ("must be a positive integer" in done.stderr or ">= 0" in done.stderr), \
        done.stderr[-2000:]


# ---------------------------------------------------------------------------------- the corpus
def test_the_fresh_corpus_has_at_least_160_cases_over_every_config_level():
    cases = bad_inputs_fresh.all_cases()
    assert len(cases) >= 160 and len({(c.category, c.name) for c in cases}) == len(cases)
    assert {"yaml", "trainer", "model", "data", "data.env", "data.reward", "sampler", "strategy", "callbacks",
            "user-world", "external-world", "checkpoint", "cli-fit", "cli-evaluate", "cli-export", "cli-bc",
            "cli-plot", "scripts", "environment"} <= {c.category for c in cases}


def test_the_classifier_tells_the_outcomes_apart():
    case = bad_inputs_fresh.Case("x", "model", "fit", expect=("model.lr",))
    assert bad_inputs_fresh.classify(case, 1, "warn\nerror: model.lr: must be positive\n", set())[0] == "clean"
    assert bad_inputs_fresh.classify(case, 1, "error: data.env: no\n", set())[0] == "misleading"
    assert bad_inputs_fresh.classify(case, None, "", set())[0] == "hang"
    assert bad_inputs_fresh.classify(case, 0, "", set())[0] == "accepted"
    assert bad_inputs_fresh.classify(case, -9, "", set())[0] == "crash"
    assert bad_inputs_fresh.classify(case, 1, "Traceback (most recent call last):\nValueError\n", set())[0] \
        == "traceback"
    assert bad_inputs_fresh.classify(case, 1, "error: model.lr: a\nerror: b\n", set())[0] == "messy"
    assert bad_inputs_fresh.classify(case, 1, "error: model.lr: a\n", {"lightning_logs"})[0] == "messy"
    assert bad_inputs_fresh.classify(case, 2, "usage: x\nx: error: argument --lr: bad\n", set())[0] == "misleading"


def test_the_quick_fresh_corpus_is_clean(capsys):
    assert bad_inputs_fresh.main(["--quick"]) == 0, capsys.readouterr().out
