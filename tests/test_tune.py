"""scripts/tune.py: an Optuna study over `parlightning.fit(config, overrides)`; `--quick` runs two real
trials, each a fit in its own run folder with the suggested values in its resolved config."""

import json
import runpy
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_quick_study_runs_real_fits_with_the_suggested_values(tmp_path, monkeypatch):
    pytest.importorskip("optuna", reason="the tune extra: pip install '.[tune]'")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    tune = runpy.run_path(str(ROOT / "scripts" / "tune.py"))
    result = tune["main"](["--quick", "--out", str(tmp_path / "study")])
    assert json.loads((tmp_path / "study" / "study.json").read_text()) == result
    assert [t["number"] for t in result["trials"]] == [0, 1]
    for trial in result["trials"]:
        run = tmp_path / "study" / f"trial_{trial['number']}" / "lightning_logs" / "version_0"
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        assert cfg["model"]["lr"] == pytest.approx(trial["params"]["model.lr"])  # the suggestion reached the fit
        assert cfg["data"]["gae_lambda"] == trial["params"]["data.gae_lambda"]
        assert cfg["trainer"]["max_epochs"] == 2 and cfg["data"]["num_envs"] == 8
        assert 1e-4 <= trial["params"]["model.lr"] <= 3e-3 and 5 < trial["value"] < 500  # a CartPole return
    assert len({t["params"]["model.lr"] for t in result["trials"]}) == 2
    assert result["best"]["value"] == max(t["value"] for t in result["trials"])


def test_without_optuna_the_error_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "optuna", None)
    monkeypatch.setattr(sys, "path", list(sys.path))
    tune = runpy.run_path(str(ROOT / "scripts" / "tune.py"))
    with pytest.raises(SystemExit, match=r"^error: scripts/tune.py needs Optuna: pip install '\.\[tune\]'"):
        tune["main"](["--quick", "--out", str(tmp_path / "s")])
    assert not (tmp_path / "s").exists()
