"""Loggers through LightningCLI on a tiny CartPole fit: CleanRL's tag names on the env-step axis in
the real TensorBoard event file, `--trainer.logger` with CSVLogger and MLflow (local file store),
and the resolved config reaching each logger as hyperparameters."""

import csv
import glob
import os

import pytest
import yaml

from parlightning.cli.fit import main
from parlightning.analysis.logs import read_scalars

ROOT = os.path.join(os.path.dirname(__file__), "..")
TINY = ["--config", os.path.join(ROOT, "configs", "cartpole_tensor.yaml"), "--trainer.max_epochs", "2",
        "--data.num_envs", "8", "--data.num_steps", "16", "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false", "--trainer.enable_checkpointing", "false"]
STEPS = [8 * 16, 2 * 8 * 16]  # env steps after each of the 2 iterations

CLEANRL = {"charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/learning_rate",
           "losses/value_loss", "losses/policy_loss", "losses/entropy", "losses/old_approx_kl",
           "losses/approx_kl", "losses/clipfrac", "losses/explained_variance"}
OWN = {"rollout/episodes", "rollout/SPS"}  # CartPole has no task bank, sampler or PARL parts


def test_tensorboard_event_file_has_cleanrl_tags_on_the_env_step_axis(tmp_cwd):
    main(TINY)
    (run,) = glob.glob(str(tmp_cwd / "lightning_logs" / "version_*"))
    scalars = read_scalars(run)
    assert set(scalars) == CLEANRL | OWN | {"hp_metric"}  # the old names (rollout/episodic_return, ...) are gone
    for tag in (CLEANRL | OWN) - {"charts/SPS"}:
        assert [s for s, _ in scalars[tag]] == STEPS, tag  # x-axis = env steps, not optimizer steps (16 per epoch)
    assert [s for s, _ in scalars["charts/SPS"]] == STEPS[1:]  # whole-iteration SPS needs one finished iteration
    assert [v for _, v in scalars["charts/learning_rate"]] == pytest.approx([2.5e-4, 1.25e-4])
    hparams = yaml.safe_load(open(os.path.join(run, "hparams.yaml")))
    assert (hparams["model.lr"], hparams["data.num_envs"], hparams["trainer.max_epochs"]) == (2.5e-4, 8, 2)
    assert hparams["data.env.class_path"] == "parlightning.envs.CartPoleEnv"
    # one name per hyperparameter: the config's dotted key, not also the module's bare `lr` (logged twice before)
    bare = {k for k in hparams if "." not in k} - {"seed_everything", "ckpt_path", "torch_threads", "heartbeat_timeout",
                                                "stall_timeout"}
    assert bare == set(), bare


def test_csv_logger_through_the_cli_gets_metrics_and_the_resolved_config(tmp_cwd):
    main([*TINY, "--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", "runs/csv"])
    (run,) = glob.glob(str(tmp_cwd / "runs" / "csv" / "lightning_logs" / "version_*"))
    rows = list(csv.DictReader(open(os.path.join(run, "metrics.csv"))))
    assert [int(r["step"]) for r in rows] == STEPS
    assert CLEANRL <= set(rows[0])
    assert 0 < float(rows[1]["charts/episodic_return"]) <= 500
    hparams = yaml.safe_load(open(os.path.join(run, "hparams.yaml")))
    assert (hparams["model.lr"], hparams["data.num_steps"], hparams["seed_everything"]) == (2.5e-4, 16, 0)
    assert hparams["trainer.logger.class_path"] == "lightning.pytorch.loggers.CSVLogger"
    assert os.path.isfile(os.path.join(run, "config.yaml"))


def test_mlflow_logger_writes_a_local_run_read_back_through_mlflow(tmp_cwd, monkeypatch):
    mlflow = pytest.importorskip("mlflow", reason="the mlflow extra: pip install parlightning[mlflow]")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # mlflow 3 keeps the file store behind this switch
    uri = f"file:{tmp_cwd / 'mlruns'}"
    main([*TINY, "--trainer.logger", "lightning.pytorch.loggers.MLFlowLogger", "--trainer.logger.tracking_uri", uri,
          "--trainer.logger.experiment_name", "cartpole"])
    client = mlflow.tracking.MlflowClient(uri)
    experiment = client.get_experiment_by_name("cartpole")
    (run,) = client.search_runs([experiment.experiment_id])
    assert os.path.isdir(tmp_cwd / "mlruns" / experiment.experiment_id / run.info.run_id / "metrics")
    assert (run.data.params["model.lr"], run.data.params["data.num_envs"]) == ("0.00025", "8")
    assert "lr" not in run.data.params  # one name per hyperparameter
    assert CLEANRL <= set(run.data.metrics)
    history = client.get_metric_history(run.info.run_id, "charts/episodic_return")
    assert [m.step for m in history] == STEPS


def test_mlflow_runs_keep_their_own_config_and_the_store_root_gets_none(tmp_cwd, monkeypatch):
    mlflow = pytest.importorskip("mlflow", reason="the mlflow extra: pip install parlightning[mlflow]")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    store = tmp_cwd / "mlruns"
    logger = ["--trainer.logger", "lightning.pytorch.loggers.MLFlowLogger", "--trainer.logger.tracking_uri",
              f"file:{store}", "--trainer.logger.experiment_name", "cartpole"]
    main([*TINY, *logger, "--data.num_envs", "8"])
    main([*TINY, *logger, "--data.num_envs", "4"])  # a second run in the same store must not overwrite the first's
    assert not (store / "config.yaml").exists()  # Lightning's default: trainer.log_dir, the store root for MLflow
    client = mlflow.tracking.MlflowClient(f"file:{store}")
    runs = client.search_runs([client.get_experiment_by_name("cartpole").experiment_id])
    assert len(runs) == 2
    for run in runs:
        (artifact,) = [a.path for a in client.list_artifacts(run.info.run_id)]
        assert artifact == "config.yaml"
        config = yaml.safe_load(open(client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_cwd))))
        assert config["data"]["num_envs"] == int(run.data.params["data.num_envs"])
    assert sorted(int(r.data.params["data.num_envs"]) for r in runs) == [4, 8]


def test_tensorboard_and_csv_together_each_keep_the_config(tmp_cwd):
    main([*TINY, "--trainer.logger+", "lightning.pytorch.loggers.TensorBoardLogger", "--trainer.logger.save_dir", "tb",
          "--trainer.logger+", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", "csv"])
    for name in ("tb", "csv"):
        (run,) = glob.glob(str(tmp_cwd / name / "lightning_logs" / "version_*"))
        assert yaml.safe_load(open(os.path.join(run, "config.yaml")))["data"]["num_envs"] == 8, name


def test_every_logged_tag_is_documented_in_the_logging_guide(tmp_cwd):
    """docs/guides/logging.md names every tag a run logs and says how each relates to CleanRL's."""
    main(["--config", os.path.join(ROOT, "configs", "swarm.yaml"), *TINY[2:-2]])  # swarm.yaml keeps its checkpoints
    (run,) = glob.glob(str(tmp_cwd / "lightning_logs" / "version_*"))
    guide = open(os.path.join(ROOT, "docs", "guides", "logging.md")).read()
    missing = [t for t in read_scalars(run) if f"`{t}`" not in guide and t != "hp_metric"]
    assert missing == [], f"tags logged but not in docs/guides/logging.md: {missing}"

