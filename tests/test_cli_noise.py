"""What the CLI adds or prints on a normal run: no LightningCLI warning about `args` (the CLI passed
sys.argv[1:] as `args`, which LightningCLI warns about whenever sys.argv has arguments), the env-step
count as an integer in the progress bar, and `last.ckpt` for any config that checkpoints."""

from __future__ import annotations

import sys
import warnings

from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar

from parlightning.api import fit
from parlightning.cli.defaults import EnvStepsProgressBar, LastCheckpoint, default_callbacks


def test_no_lightningcli_args_warning_even_when_sys_argv_has_arguments(tmp_cwd, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["notebook-kernel", "-f", "/tmp/kernel.json"])  # as in Jupyter
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert fit("configs/cartpole_fast.yaml", ["--print_config"]) is None
    assert not [w for w in caught if "args parameter" in str(w.message)], [str(w.message) for w in caught]
    assert "LightningCLI's args parameter" not in capsys.readouterr().err


def test_the_progress_bar_shows_env_steps_and_sps_as_integers(monkeypatch):
    monkeypatch.setattr(TQDMProgressBar, "get_metrics", lambda self, trainer, module: {
        "v_num": 0, "env_steps": 983040.0, "SPS": 18234.7, "loss": 0.25})
    items = EnvStepsProgressBar().get_metrics(None, None)
    assert items == {"v_num": 0, "env_steps": 983040, "SPS": 18235, "loss": 0.25}
    assert isinstance(items["env_steps"], int)


def test_default_callbacks_add_a_bar_and_last_ckpt_only_where_allowed():
    kinds = [type(c) for c in default_callbacks({})]
    assert kinds == [EnvStepsProgressBar, LastCheckpoint] and issubclass(LastCheckpoint, ModelCheckpoint)
    checkpoint = default_callbacks({})[1]
    assert checkpoint.save_last is True and checkpoint.save_top_k == 0  # last.ckpt, one file
    assert default_callbacks({"enable_progress_bar": False, "enable_checkpointing": False}) == []
    bar, mine = TQDMProgressBar(refresh_rate=10), ModelCheckpoint(every_n_epochs=5)
    assert default_callbacks({"callbacks": [bar, mine]}) == [bar, mine]  # the config's own kinds win
    assert [type(c) for c in default_callbacks({"callbacks": mine})] == [ModelCheckpoint, EnvStepsProgressBar]


def test_the_default_checkpoint_writes_last_ckpt_at_every_iteration_end(tmp_path):
    """Lightning 2.6's ModelCheckpoint(save_last=True, save_top_k=0) wrote last.ckpt only when fit
    ended; the CLI's default writes it after every iteration, so a stopped run can be resumed."""
    import lightning.pytorch as pl
    import torch

    from parlightning.ppo.data import RolloutDataModule
    from parlightning.ppo.module import PPOModule

    seen = []

    class Probe(pl.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            last = tmp_path / "checkpoints" / "last.ckpt"
            seen.append(torch.load(last, weights_only=True)["epoch"] if last.exists() else None)

    checkpoint = LastCheckpoint(dirpath=tmp_path / "checkpoints", save_last=True, save_top_k=0)
    pl.Trainer(max_epochs=3, logger=False, enable_progress_bar=False, enable_model_summary=False,
               callbacks=[checkpoint, Probe()], default_root_dir=tmp_path).fit(
        PPOModule(anneal_lr=False), datamodule=RolloutDataModule(num_envs=4, num_steps=4, update_epochs=1,
                                                                 num_minibatches=1))
    assert seen == [None, 0, 1]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["last.ckpt"]
