"""The Python API (`from parlightning import fit; fit(config=..., overrides=[...])`) and the console
entry points declared in pyproject.toml."""

import importlib
import os
import sys
import tomllib

import pytest

import parlightning.api as api
from parlightning.errors import ConfigError

ROOT = os.path.join(os.path.dirname(__file__), "..")
CARTPOLE = os.path.join(ROOT, "configs", "cartpole_tensor.yaml")


def test_overrides_take_key_value_items_or_cli_tokens():
    assert api.cli_args("a.yaml", ["model.lr=1e-3", "--data.num_envs", "8"]) == [
        "--config", "a.yaml", "--model.lr=1e-3", "--data.num_envs", "8"]
    assert api.cli_args(["a.yaml", "b.yaml"]) == ["--config", "a.yaml", "--config", "b.yaml"]
    assert api.cli_args(None, ["--print_config"]) == ["--print_config"]
    with pytest.raises(ConfigError, match="overrides"):
        api.cli_args("a.yaml", [3])


def test_fit_from_python_returns_the_fitted_trainer(tmp_cwd):
    from parlightning import fit

    trainer = fit(config=CARTPOLE, overrides=["trainer.max_epochs=2", "data.num_envs=8", "data.num_steps=16",
                                              "trainer.enable_progress_bar=false", "trainer.logger=false",
                                              "trainer.enable_checkpointing=false", "seed=1"])
    assert trainer.current_epoch == 2 and trainer.datamodule.env_steps == 2 * 8 * 16
    assert trainer.datamodule.seed == 1
    metrics = trainer.callback_metrics
    assert float(metrics["step"]) == 256 and 0 < float(metrics["charts/episodic_return"]) <= 500
    assert trainer.lightning_module.policy.action_spec.kind == "discrete"
    assert os.listdir(tmp_cwd) == ["config.yaml"]  # logger and checkpoints off: only the resolved config


def test_fit_from_python_raises_config_error_naming_the_field(tmp_cwd):
    from parlightning import fit

    with pytest.raises(ConfigError, match=r"model\.lr"):
        fit(config=CARTPOLE, overrides=["model.lr=-1"])
    assert fit(config=CARTPOLE, overrides=["--print_config"]) is None
    assert not os.listdir(tmp_cwd)


def test_console_scripts_resolve_and_exit_zero_after_a_fit(monkeypatch):
    scripts = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]["scripts"]
    assert set(scripts) == {"parlightning-fit", "parlightning-export"}
    for target in scripts.values():
        module, name = target.split(":")
        assert callable(getattr(importlib.import_module(module), name))
    # the console scripts start the programs as `python -m` does: the environment checked before the import
    assert scripts == {"parlightning-fit": "parlightning.cli.entry:fit_console",
                       "parlightning-export": "parlightning.cli.entry:export_console"}
    seen = []
    monkeypatch.setattr("parlightning.fit.main", lambda args: seen.append(args) or object())  # a finished fit
    monkeypatch.setattr(sys, "argv", ["parlightning-fit", "--config", "x.yaml"])
    assert api.fit_cli() is None  # console scripts call sys.exit(fit_cli()): None is exit status 0
    assert seen == [["--config", "x.yaml"]]


@pytest.mark.parametrize("console, program", [("fit_console", "parlightning.cli.fit"),
                                              ("export_console", "parlightning.cli.export")])
def test_console_scripts_check_the_environment_before_importing_the_program(monkeypatch, capsys, console, program):
    from parlightning.cli import entry

    started = []
    monkeypatch.setattr(entry, "run_guarded", lambda main: started.append(main))
    monkeypatch.setenv("LOCAL_RANK", "abc")
    with pytest.raises(SystemExit) as info:
        getattr(entry, console)()
    assert str(info.value).startswith("error: LOCAL_RANK") and started == []
    monkeypatch.delenv("LOCAL_RANK")
    getattr(entry, console)()
    assert started == [importlib.import_module(program).main]
