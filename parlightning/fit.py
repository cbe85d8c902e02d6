"""`python -m parlightning.fit --config configs/swarm.yaml`: a thin LightningCLI over
`PPOModule` and `RolloutDataModule`, with no subcommand.

Everything is a plain class configured from YAML (`class_path` for envs, samplers, rewards
and callbacks); dotted overrides (`--model.lr 1e-3`), `--print_config` and `--ckpt_path` work
as in any LightningCLI program.
"""

from __future__ import annotations

import os
import signal
from argparse import ArgumentError
from typing import Optional, Union

import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.cli import LightningCLI

from parlightning.api import make_callable
from parlightning.checkpoint import (
    check_output_dirs, check_resume, new_output_dirs, remove_new_outputs, use_atomic_checkpoints,
)
from parlightning.config_log import LoggedConfig
from parlightning.data import RolloutDataModule
from parlightning.errors import ConfigError, parser_error_line, root_error_line
from parlightning.module import PPOModule


class ParlCLI(LightningCLI):
    """LightningCLI with `--ckpt_path` (resume) and `--torch_threads` on the top level."""

    def add_default_arguments_to_parser(self, parser) -> None:
        """`--seed N` is an alias of `--seed_everything N`: one seed for init, env, actions, minibatches
        and samplers (a component's own seed, e.g. `data.seed`, overrides it when set)."""
        parser.add_argument(
            "--seed_everything", "--seed", type=Union[bool, int], default=self.seed_everything_default,
            help="one seed for everything (alias --seed); true picks a random one, false does not seed",
        )

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--ckpt_path", type=Optional[str], default=None, help="checkpoint to resume from")
        parser.add_argument(
            "--torch_threads", type=Optional[int], default=1,
            help="intra-op CPU threads per process (small policies run fastest with 1); null keeps torch's default",
        )

    def before_instantiate_classes(self) -> None:
        config = self.config
        ckpt = config.get("ckpt_path")
        if ckpt is not None and not os.path.isfile(ckpt):
            raise SystemExit(f"error: --ckpt_path: no checkpoint file at {ckpt!r}; pass an existing .ckpt file or drop the flag")
        threads = config.get("torch_threads")
        if threads is not None:
            if threads <= 0:
                raise SystemExit(f"error: --torch_threads: must be a positive integer or null, got {threads}")
            torch.set_num_threads(threads)


def main(args: Optional[list[str]] = None) -> ParlCLI:
    """Parse the config, build trainer/module/datamodule, and fit (resuming from `--ckpt_path`).

    A bad value (in the config, an argument or a class's own checks) ends the program with one
    `error: ...` line naming the field, before any rollout and before anything is written.
    """
    try:
        cli = ParlCLI(
            PPOModule,
            RolloutDataModule,
            run=False,
            seed_everything_default=0,
            trainer_defaults={"max_epochs": 50, "log_every_n_steps": 1, "num_sanity_val_steps": 0},
            save_config_callback=LoggedConfig,
            save_config_kwargs={"overwrite": True},
            args=args,
            parser_kwargs={"description": __doc__, "exit_on_error": False},
        )
    except ArgumentError as err:  # the parser: unknown keys, wrong types, bad class paths, bad --config file
        raise SystemExit(f"error: {parser_error_line(str(err))}") from None
    except (ValueError, TypeError, MisconfigurationException) as err:  # __init__ checks (ours and the Trainer's)
        raise SystemExit(f"error: {root_error_line(err)}") from None
    ckpt = cli.config.get("ckpt_path")
    try:
        check_output_dirs(cli.trainer)
        if ckpt is not None:
            check_resume(ckpt, cli.model, cli.datamodule)  # corrupt, truncated, foreign or mismatched
        cli.datamodule.preflight()
    except ConfigError as err:
        raise SystemExit(f"error: {err}") from None
    use_atomic_checkpoints(cli.trainer)
    fresh = new_output_dirs(cli.trainer)
    try:
        cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=ckpt)
    except BaseException as err:
        launcher = cli.trainer.strategy.launcher
        if callable(getattr(launcher, "kill", None)):
            launcher.kill(signal.SIGKILL)  # DDP: the ranks this process launched must not wait for it
        if not isinstance(err, ConfigError):
            raise
        if cli.datamodule.last_rollout is None:  # checks that need the env or the device (setup, before any rollout)
            remove_new_outputs(fresh)  # a failed start leaves nothing behind (logs, config.yaml)
        raise SystemExit(f"error: {err}") from None
    return cli


make_callable(__name__)  # `from parlightning import fit; fit(config=..., overrides=[...])` (parlightning.api)

if __name__ == "__main__":
    main()
