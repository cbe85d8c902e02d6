"""What the CLI adds or prints on a normal run: no LightningCLI warning about `args` (the CLI passed
sys.argv[1:] as `args`, which LightningCLI warns about whenever sys.argv has arguments), the env-step
count as an integer in the progress bar, and `last.ckpt` for any config that checkpoints."""

from __future__ import annotations

import sys
import warnings

from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar

from parlightning.api import fit
from parlightning.cli.defaults import EnvStepsProgressBar, default_callbacks


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
    assert kinds == [EnvStepsProgressBar, ModelCheckpoint]
    checkpoint = default_callbacks({})[1]
    assert checkpoint.save_last is True and checkpoint.save_top_k == 0  # last.ckpt, one file
    assert default_callbacks({"enable_progress_bar": False, "enable_checkpointing": False}) == []
    bar, mine = TQDMProgressBar(refresh_rate=10), ModelCheckpoint(every_n_epochs=5)
    assert default_callbacks({"callbacks": [bar, mine]}) == [bar, mine]  # the config's own kinds win
    assert [type(c) for c in default_callbacks({"callbacks": mine})] == [ModelCheckpoint, EnvStepsProgressBar]
