"""`python -m parlightning.fit --config configs/swarm.yaml`: a thin LightningCLI over
`PPOModule` and `RolloutDataModule`, with no subcommand.

Everything is a plain class configured from YAML (`class_path` for envs, samplers, rewards
and callbacks); dotted overrides (`--model.lr 1e-3`), `--print_config` and `--ckpt_path` work
as in any LightningCLI program. LightningCLI's `--optimizer` / `--lr_scheduler` are not offered:
PPOModule owns its optimizer and lr annealing (subclass it to change them).
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
import types
import warnings
from argparse import ArgumentError
from typing import Any, Callable, Optional, Sequence, Union

import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.utilities.exceptions import SIGTERMException

from parlightning.runtime.checkpoint import (
    check_checkpoint_path, check_output_dirs, check_resume, claim_version, clean_stale_partials, new_output_dirs,
    remove_new_outputs, use_atomic_checkpoints,
)
from parlightning.cli.config_log import LoggedConfig
from parlightning.cli.run_folders import check_logger_folders, full_disk_place, remote_path_error, run_places
from parlightning.config_types import size_text
from parlightning.ppo.data import RolloutDataModule
from parlightning.method_args import one_at_a_time
from parlightning.errors import (
    ConfigError, ReportedError, check_call_shape, named_by_package, parser_error_line, root_error_line,
)
from parlightning.ppo.module import PPOModule
from parlightning.cli.packaged import moved_hint, resolve_config_args
from parlightning.cli.entry import check_working_folder
from parlightning.cli.stop_signals import KILLING, Signalled, holding_signals, stop_on_signals
from parlightning.cli.user_code import user_code_error
from parlightning.cli.component_guard import (
    UNLOGGED_MONITOR, ComponentFault, ComponentGuard, component_of_error, logged_examples, probe_loggers,
    unlogged_monitor_line,
)
from parlightning.callbacks.base import RolloutCallback
from parlightning.cli.defaults import default_callbacks
from parlightning.runtime.preflight import check_arguments, check_config, check_policy_memory, estimate_iteration
from parlightning.runtime.processes import end_processes, started_processes, stop_helpers
from parlightning.runtime.rank_watch import BEAT_S, HEARTBEAT_TIMEOUT_S, STALL_TIMEOUT_S, RankWatch, flat_config
from parlightning.runtime.waits import GRACE_S


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
        parser.add_argument(
            "--heartbeat_timeout", type=Optional[float], default=HEARTBEAT_TIMEOUT_S,
            help="DDP: seconds without a heartbeat after which a rank is declared frozen (SIGSTOP, a debugger) "
                 "and every rank stops; null turns it off",
        )
        parser.add_argument(
            "--stall_timeout", type=Optional[float], default=STALL_TIMEOUT_S,
            help="DDP: seconds a rank's main thread may stay on one line, not waiting for its peers, before it "
                 "is declared stuck and every rank stops (default 30); a wait the code declares (an external "
                 "world's step_timeout, a child process, the C++ build, a checkpoint write; "
                 "parlightning.runtime.waits.expected_wait) is allowed its own bound plus "
                 f"{GRACE_S:g} s; raised to 3x the longest call the preflight estimate predicts; null turns it off",
        )

    def parse_arguments(self, parser, args) -> None:
        # `args` is always the full argument list (main() reads sys.argv itself), so parse it as is:
        # LightningCLI.parse_arguments warns whenever `args` is given while sys.argv has arguments.
        self.config = parser.parse_args(args)
        check_config(self.config)  # cross-field checks and seed ranges, before LightningCLI seeds or builds anything

    def instantiate_trainer(self, **kwargs):
        trainer_config = {**(self.config_init.get("trainer") or {}), **kwargs}
        return super().instantiate_trainer(**kwargs, callbacks=default_callbacks(trainer_config))  # progress bar, last.ckpt

    def instantiate_classes(self) -> None:
        """A Lightning component of `trainer` (a callback, a logger, a plugin) whose own `__init__` refuses
        its arguments is named with its field and class (`trainer.callbacks[1]: GradientAccumulationScheduler`)."""
        try:
            super().instantiate_classes()
        except (ValueError, TypeError, ZeroDivisionError, MisconfigurationException) as err:
            named = None if isinstance(err, ConfigError) else component_of_error(err, self.config)
            if named is None:
                raise
            raise ConfigError(named) from None

    def before_instantiate_classes(self) -> None:
        config = self.config
        remote = remote_path_error(config)  # s3://... without s3fs: the Trainer's ImportError names no field
        if remote is not None:
            raise SystemExit(f"error: {remote}")
        ckpt = config.get("ckpt_path")
        if ckpt is not None:
            try:
                check_checkpoint_path(ckpt, "--ckpt_path", "pass an existing .ckpt file or drop the flag")
            except ConfigError as err:
                raise SystemExit(f"error: {err}") from None
        threads = config.get("torch_threads")
        if threads is not None:
            if threads <= 0:
                raise SystemExit(f"error: --torch_threads: must be a positive integer or null, got {threads}")
            most = max(64, 8 * (os.cpu_count() or 1))
            if threads > most:  # OpenMP allocates per thread: 100,000 threads end in 'libgomp: Out of memory'
                raise SystemExit(f"error: --torch_threads: {threads} threads on a machine with {os.cpu_count()} CPUs; "
                                 f"use at most {most} (intra-op threads per process; 1 suits small policies)")
            torch.set_num_threads(threads)
        from parlightning.runtime.subclass_init import check_subclasses

        # a user's subclass whose __init__ never reaches the package base's, or that never defines a method
        # the base leaves to it (Schedule.value): one line before anything is built or written
        skipped = check_subclasses(config)
        if skipped is not None:
            raise SystemExit(f"error: {skipped}")
        for name, least in (("heartbeat_timeout", 3 * BEAT_S), ("stall_timeout", 3 * BEAT_S)):
            value = config.get(name)
            if value is not None and not value >= least:  # NaN too
                raise SystemExit(f"error: --{name}: must be at least {least:g} seconds or null (off), got {value}")
        watch = _STARTING.get("watch")
        if watch is not None:  # from here on user code runs (the config's classes): a main thread stuck
            watch.heartbeat_timeout = config.get("heartbeat_timeout")  # anywhere ends the run with one line
            watch.stall_timeout = config.get("stall_timeout")
            watch.watch_from_start()


@one_at_a_time("fit", "a fit", "start the next fit after this one returns, or run it in a process of its own "
                "(python -m parlightning.fit)")
def main(args: Optional[list[str]] = None) -> ParlCLI:
    """Parse the config, build trainer/module/datamodule, and fit (resuming from `--ckpt_path`).

    A bad value (in the config, an argument, a class's own checks, the env's contract, the
    rollout's memory or the checkpoint) ends the program with one `error: ...` line naming the
    field, before any rollout and before anything is written.
    """
    check_working_folder()
    args = resolve_config_args(sys.argv[1:] if args is None else args)  # `--config swarm`: the packaged file
    watch = RankWatch()  # started once the arguments are parsed, before any class of the config is built
    _STARTING["watch"] = watch
    began = watch.began  # the processes started from here on are the run's
    try:
        # a signal at any moment of start-up (the config's classes, the preflight's probe world, the worlds'
        # worker processes starting) ends the program with one line; SIGTERM until Lightning's own handler
        # takes over inside fit (it then ends the fit as a preemption), SIGHUP / SIGUSR1 / SIGUSR2 throughout
        with stop_on_signals(after=NOT_STARTED):
            return _main(args, watch, began)
    except Signalled as err:  # outside the fit's own handling (between the preflight and the fit)
        _end_started(began)
        _reopen_stderr()
        stopped = _STARTING.pop("stopped", None)  # the run's folders exist: what this phase kept (or removed)
        print(f"error: {err if stopped is None else Signalled(err.signum, stopped())}", file=sys.stderr)
        raise SystemExit(err.code) from None
    finally:
        _STARTING.pop("stopped", None)
        _STARTING.pop("watch", None)
        watch.stop_watching_alone()  # the one-process stall watch covers the whole run, teardown included


_STARTING: dict[str, Any] = {}  # the watch `main` made (for `ParlCLI.before_instantiate_classes`); "stopped": see _main


NOT_STARTED = " before the run's first rollout; nothing was kept"


def _end_started(began: Optional[int]) -> None:
    """End what the run started since `began` and the fork server / resource tracker; the tree is read
    first (a stopped parent's children move to init and out of it)."""
    started = started_processes(began)
    stop_helpers()
    end_processes(started)


def _main(args: list[str], watch: RankWatch, began: Optional[int]) -> ParlCLI:
    """`began`: the processes started from then on are the run's (ended with it when it fails)."""
    cli = None
    try:
        cli = build_cli(args)
        ckpt = cli.config.get("ckpt_path")
        check_environment_for_ddp(cli.trainer)
        probe = preflight(cli, ckpt)
    except KeyboardInterrupt:  # Ctrl-C before anything was written
        print("error: interrupted (KeyboardInterrupt) before the run started; nothing was written", file=sys.stderr)
        raise SystemExit(128 + signal.SIGINT) from None
    except Signalled:  # a signal during start-up: main's one line and the signal's exit code
        raise
    except Exception as err:  # ReportedError: e.g. a user's world failing the probe step
        message = _start_error(err, run_places(cli.trainer) if cli is not None else None)
        if message is None:  # a bug: its traceback is kept
            raise
        _end_started(began)  # a probe world's stuck step may have left a program running
        raise SystemExit(f"error: {message}") from None
    stall = cli.config.get("stall_timeout")
    estimate = (probe or {}).get("iteration_estimate")
    if stall is not None and estimate:  # one step (a minibatch's backward) may not look stuck: 3x its estimate
        stall = max(stall, 3 * estimate["longest_call_seconds"])
    watch.config = flat_config(cli.config, (probe or {}).get("env_signature"))  # DDP: one rank's fault stops all
    watch.heartbeat_timeout, watch.stall_timeout = cli.config.get("heartbeat_timeout"), stall
    cli.trainer.callbacks.append(watch)
    plugins = (cli.config.get("trainer") or {}).get("plugins")
    plugin_note = use_atomic_checkpoints(cli.trainer, named=bool(plugins))  # a CheckpointIO plugin keeps the checks
    if plugin_note is not None and cli.trainer.is_global_zero:
        print(plugin_note, file=sys.stderr)
    guard = ComponentGuard.install(cli.trainer, cli.config)  # callbacks and loggers: a fault names its field
    claimed: list = []
    _STARTING["stopped"] = lambda: _stopped_between(cli, claimed, ckpt)  # a signal from here until fit's own handling
    claimed += claim_version(cli.trainer)  # an atomic mkdir: runs started together get their own version_N
    fresh = new_output_dirs(cli.trainer) + claimed  # deepest first: the run's folders, then new parents
    _STARTING["stopped"] = lambda: _stopped_between(cli, fresh, ckpt)
    loose = os.path.join(cli.trainer.default_root_dir, "config.yaml")  # with no logger, config.yaml goes here
    if not cli.trainer.loggers and not os.path.exists(loose):
        fresh = [(loose, True)] + fresh  # a refused start removes it too
    _end_cleanly_when_a_rank_fails(lambda: remove_new_outputs(fresh) if cli.datamodule.last_rollout is None else None,
                                   watch)
    watch.cleanup = lambda: remove_new_outputs(fresh) if cli.datamodule.last_rollout is None else None
    fit_began = time.time()
    try:
        # SIGHUP, SIGUSR1, SIGALRM... end the fit with one line (Lightning handles SIGTERM and SIGINT); fit() from the
        # Python API leaves the caller's handlers as they were
        with stop_on_signals([s for s in KILLING if s != signal.SIGTERM], after=KEPT), \
                warnings.catch_warnings():
            # Lightning only warns (each iteration, saving nothing) when a ModelCheckpoint's monitor is never logged
            # and a validation loop might log it later; a PPO run has none, so it is the config's error
            warnings.filterwarnings("error", message=UNLOGGED_MONITOR)
            cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=ckpt)
    except BaseException as err:
        with holding_signals(err):  # a second Ctrl-C / SIGTERM while this one is handled must not cut it short
            started = started_processes(began)  # read before anything stops: a stopped parent's children leave the tree
            _remove_tuner_leftovers(cli.trainer, fit_began)  # a tuner's temporary checkpoint a failed fit left
            _reopen_stderr()  # user code that closed sys.stderr must not swallow the one error line
            if getattr(getattr(cli.trainer, "_signal_connector", None), "received_sigterm", False) is True and \
                    not isinstance(err, (SIGTERMException, Signalled)):
                err = SIGTERMException()  # a SIGTERM to the process group also ended a child (the collector process)
            err = _reported_first(err)
            message = _start_error(err)
            if message is None:
                message = user_code_error(err)
            if message is None and ckpt is not None and cli.datamodule.last_rollout is None and _is_size_mismatch(err):
                text = " ".join(str(err).split())[:200]
                message = (f"--ckpt_path: the state saved in {ckpt!r} does not fit this run ({text}): a tensor of the "
                           "checkpoint was resized or comes from another config (e.g. data.num_envs); resume with the "
                           "config that wrote it, or start fresh without --ckpt_path")
            if isinstance(err, OSError) and message is not None:  # a full disk: the run's folder it filled, by field
                message = _environment_error(err, run_places(cli.trainer)) or message
            if message is not None:
                message = guard.with_notes(message)  # on_exception hooks that raised too: after the run's own error
            before_any = cli.datamodule.last_rollout is None  # failed in setup, before any rollout; or a Lightning
            setting = (isinstance(err, ComponentFault) and err.setting and  # component's setting failed in the first
                       getattr(cli.trainer, "current_epoch", 1) == 0 and not _wrote_checkpoint(fresh))  # iteration, unsaved
            if message is not None and (before_any or setting):
                remove_new_outputs(fresh)  # a failed start leaves nothing behind (logs, config.yaml)
            try:
                if watch.active:  # DDP: record this rank's cause, stop every rank, rank 0 prints one line
                    watch.stop_job(err, message)  # never returns: the helpers and children still end below
                launcher = cli.trainer.strategy.launcher
                if callable(getattr(launcher, "kill", None)):
                    launcher.kill(signal.SIGKILL)  # DDP: the ranks this process launched must not wait for it
            finally:
                stop_helpers()  # the fork server and resource tracker of a collector or world process end with the run
                end_processes(started)  # what the run's worlds started and left running (a stuck step's child program)
            stopped_by = (err.signum if isinstance(err, Signalled) else signal.SIGTERM if isinstance(err, SIGTERMException)
                          else signal.SIGINT if message is None and _interrupted(err, cli.trainer) else None)
            if stopped_by is not None:  # a signal (or Ctrl-C) at any phase of the fit: the line says what that phase kept
                if cli.datamodule.last_rollout is None:
                    remove_new_outputs(fresh)  # stopped before its first rollout: nothing worth keeping
                kept = _what_was_kept(cli.trainer, cli.datamodule, fresh, ckpt)
                if stopped_by == signal.SIGINT:
                    print(f"error: interrupted (KeyboardInterrupt: Ctrl-C, or raised by user code){kept}", file=sys.stderr)
                elif isinstance(err, Signalled):  # SIGHUP, SIGUSR1 / SIGUSR2, or SIGTERM once Lightning's handler is gone
                    print(f"error: {Signalled(err.signum, kept)}", file=sys.stderr)
                else:  # preempted: never report success, so a scheduler requeues
                    print(f"error: SIGTERM: stopped{kept}", file=sys.stderr)
                raise SystemExit(128 + stopped_by) from None  # the shell's code for "killed by" that signal
            if message is None:
                raise
            rank = getattr(cli.trainer, "global_rank", 0)
            if rank and not watch.active and cli.trainer.world_size > 1:  # every rank met the same setup error:
                sys.stderr.write(f"(rank {rank} stopped too: {message[:160]})\n")  # one write, not split by rank 0's line
                raise SystemExit(1) from None
            raise SystemExit(f"error: {message}") from None
    if watch.active and getattr(cli.trainer, "global_rank", 0) == 0:
        watch.wait_for_launched_ranks(STALL_TIMEOUT_S if stall is None else stall)  # a rank failing in its last hooks
    return cli


def _reported_first(err: BaseException) -> BaseException:
    """The package's own named error that `err` was raised while handling (Lightning's teardown failing
    on what a fault left behind, e.g. a module a callback moved to the meta device), else `err`."""
    if isinstance(err, (KeyboardInterrupt, SystemExit, SIGTERMException, Signalled, ConfigError, ReportedError)):
        return err
    seen, inner = {id(err)}, err.__context__
    while inner is not None and id(inner) not in seen:
        if isinstance(inner, (ConfigError, ReportedError)) and named_by_package(inner):
            return inner
        seen.add(id(inner))
        inner = inner.__context__
    return err


KEPT = ("; the last checkpoint (written at the end of the last finished iteration) is intact: resume with "
        "--ckpt_path <log_dir>/checkpoints/last.ckpt")


def _stopped_between(cli: Any, fresh: list[tuple[str, bool]], ckpt: Optional[str]) -> str:
    """A signal outside the fit's own handling once the run's folders exist (claimed before the fit, or
    the moment after it returned): the new folders go when no rollout ran; the line says what was kept."""
    if cli.datamodule.last_rollout is None:
        remove_new_outputs(fresh)
    return _what_was_kept(cli.trainer, cli.datamodule, fresh, ckpt)


def _what_was_kept(trainer: Any, datamodule: Any, fresh: list[tuple[str, bool]], ckpt: Optional[str]) -> str:
    """What a fit stopped by a signal (or Ctrl-C) kept, true for the phase it stopped in: before the first
    rollout nothing (its new folders were removed); after the last iteration (its end-of-fit hooks, the
    worlds' close) the finished run; in a later iteration the last checkpoint; in the first iteration,
    before any save, the run's logs and no checkpoint."""
    if datamodule.last_rollout is None:
        return NOT_STARTED
    last = getattr(getattr(trainer, "checkpoint_callback", None), "last_model_path", "") or ""
    where = last if last and os.path.isfile(last) else "<log_dir>/checkpoints/last.ckpt"
    saved = _wrote_checkpoint(fresh) or (last and os.path.isfile(last))
    if saved and bool(getattr(getattr(trainer, "fit_loop", None), "done", False)):
        return (f" after training finished (in its end-of-run hooks or the worlds' close): the run is complete and "
                f"kept; its last checkpoint ({where}, written at the end of the last iteration) is intact")
    if saved or ckpt is not None:
        return ("; the last checkpoint (written at the end of the last finished iteration) is intact: resume with "
                f"--ckpt_path {where if saved else ckpt}")
    return ("; stopped in the run's first iteration, before its first checkpoint was written: the run's folder keeps "
            "its logs and config.yaml, and there is no checkpoint to resume from (start the run again)")


def _remove_tuner_leftovers(trainer: Any, since: float) -> None:
    """Lightning's tuners (`.lr_find_<uuid>.ckpt`, `.scale_batch_size_<uuid>.ckpt`) save the run's state
    to a temporary checkpoint in `default_root_dir` and restore it when they finish: a fit that failed
    inside one leaves it behind. Those this fit wrote (modified since `since`) are removed."""
    import glob

    root = getattr(trainer, "default_root_dir", None) or os.getcwd()
    for pattern in (".lr_find_*.ckpt", ".scale_batch_size_*.ckpt"):
        for path in glob.glob(os.path.join(glob.escape(str(root)), pattern)):
            try:
                if os.path.getmtime(path) >= since - 1:
                    os.remove(path)
            except OSError:
                pass


def _wrote_checkpoint(fresh: list[tuple[str, bool]]) -> bool:
    """A `.ckpt` file in one of the run's own new folders (a finished save)."""
    for path, own in fresh:
        if own and os.path.isdir(path):
            for _, _, files in os.walk(path):
                if any(f.endswith(".ckpt") for f in files):
                    return True
    return False


def _reopen_stderr() -> None:
    """A closed `sys.stderr` (user code called `sys.stderr.close()`) is replaced by a new stream on
    file descriptor 2, which Python's standard streams never close."""
    if getattr(sys.stderr, "closed", False):
        sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115


def _interrupted(err: BaseException, trainer: Any) -> bool:
    """A KeyboardInterrupt (Ctrl-C or user code raising it): Lightning stops gracefully and calls
    sys.exit(1), which carries no message."""
    if isinstance(err, KeyboardInterrupt):
        return True
    return isinstance(err, SystemExit) and err.code == 1 and bool(getattr(trainer, "interrupted", False)) and isinstance(
        err.__context__, KeyboardInterrupt)


def _end_cleanly_when_a_rank_fails(cleanup: Callable[[], None], watch: RankWatch) -> None:
    """DDP with Lightning's script launcher: a launched rank that exits non-zero before its rank
    watch runs (e.g. its own preflight probe failed: it printed the one `error:` line) makes
    Lightning's child observer on rank 0 kill every rank and then SIGKILL itself, so the job ends
    by signal 9 with rank 0's new log folder left behind. Here rank 0 instead kills the other
    ranks, removes what this run created before any rollout (`cleanup`), and exits 1. The observer
    also sees a rank that ends later (killed by SIGKILL, or failing after reporting its cause): it
    polls every few seconds, so it may see the end before rank 0's main thread meets it in a
    collective; it then ends the job through `watch`, with the same one line naming the rank."""
    try:
        from lightning.fabric.strategies.launchers import subprocess_script
    except ImportError:  # another Lightning layout: its own behaviour stands
        return
    observer = getattr(subprocess_script, "_ChildProcessObserver", None)
    if observer is None or not hasattr(observer, "_terminate_all"):
        return

    def terminate_all(self: Any) -> None:
        ended = [(rank, proc) for rank, proc in enumerate(self._child_processes, start=1) if proc.returncode]
        for proc in self._child_processes:
            try:
                proc.send_signal(self._termination_signal)
            except OSError:
                pass
        try:
            cleanup()
        except Exception:  # noqa: BLE001 (the run ends either way; its line matters more)
            pass
        if ended:
            rank, proc = ended[0]
            watch.launched_rank_ended(rank, proc.pid, proc.returncode, len(self._child_processes) + 1)
            return  # another thread of this process is ending the run with its line
        sys.stderr.flush()
        os._exit(1)

    observer._terminate_all = terminate_all


def build_cli(args: list[str]) -> ParlCLI:
    """The LightningCLI over PPOModule and RolloutDataModule (no --optimizer / --lr_scheduler:
    PPOModule makes its own Adam and lr annealing); parser and __init__ errors as one line."""
    try:
        check_arguments(args)
        return ParlCLI(
            PPOModule,
            RolloutDataModule,
            run=False,
            seed_everything_default=0,
            trainer_defaults={"max_epochs": 50, "log_every_n_steps": 1, "num_sanity_val_steps": 0},
            save_config_callback=LoggedConfig,
            save_config_kwargs={"overwrite": True},
            auto_configure_optimizers=False,
            args=args,
            parser_kwargs={"description": __doc__, "exit_on_error": False},
        )
    except ArgumentError as err:  # the parser: unknown keys, wrong types, bad class paths, bad --config file
        raise SystemExit(f"error: {moved_hint(parser_error_line(str(err)))}") from None
    except (ValueError, TypeError, MisconfigurationException) as err:  # __init__ checks (ours and the Trainer's)
        raise SystemExit(f"error: {_construction_error(err)}") from None
    except ImportError as err:  # an accelerator, strategy or logger whose package is not installed (torch_xla, ...)
        raise SystemExit(f"error: trainer: {_choices(args)}needs a package that is not installed "
                         f"({root_error_line(err)[:200]}); install it or pick another (e.g. trainer.accelerator: "
                         "cpu or gpu, trainer.strategy: ddp)") from None
    except RuntimeError as err:  # the Trainer's callback check: two stateful callbacks with one state key
        if "more than one stateful callback" not in str(err):
            raise
        kind = re.search(r"type `(\w+)`", str(err))
        name = kind.group(1) if kind else "callback"
        raise SystemExit(f"error: trainer.callbacks: two {name} callbacks with the same settings (state key); "
                         "Lightning cannot save both in a checkpoint: drop one (the config may list one already) or "
                         "give it another monitor / every_n_epochs") from None


def _construction_error(err: BaseException) -> str:
    """One line for a class that failed to build from the config: the package's own check (a
    ConfigError, the Trainer's) as it is; an exception raised in the user's own `__init__` (a sampler,
    callback or reward class of theirs) named with its class, file and line (`user_code_error`)."""
    root = err
    while root.__cause__ is not None:
        root = root.__cause__
    if not isinstance(root, (ConfigError, MisconfigurationException)):
        user = user_code_error(root)
        if user is not None:
            return user
    return root_error_line(err)


def _choices(args: list[str]) -> str:
    """The trainer.accelerator / strategy / logger values given on the command line, as a prefix."""
    shown = []
    for i, arg in enumerate(args):
        key, _, value = arg.partition("=")
        if key in ("--trainer.accelerator", "--trainer.strategy", "--trainer.logger", "--trainer.precision"):
            value = value or (args[i + 1] if i + 1 < len(args) else "")
            shown.append(f"{key[2:]}={value[:60]}")
    return (", ".join(shown) + " ") if shown else ""


def preflight(cli: ParlCLI, ckpt: Optional[str]) -> dict:
    """Everything checked before the trainer writes: output folders, the env's contract and the
    rollout's memory (on a small probe of the env), and the checkpoint to resume from."""
    trainer = cli.trainer
    check_output_dirs(trainer)
    check_logger_folders(trainer)  # two loggers writing one save_dir/name/version folder
    check_callbacks(trainer.callbacks, cli.config)
    probe_loggers(trainer, cli.config)  # a logger argument that breaks its first log, on a scratch copy
    device = trainer.strategy.root_device
    ranks_here = trainer.num_devices if device.type == "cpu" else 1  # CPU ranks share this machine's memory
    if device.type == "cuda" and getattr(trainer.strategy.launcher, "_start_method", None) == "fork":
        device = torch.device("cpu")  # reading GPU memory would initialise CUDA before ddp_fork forks (not allowed)
    recurrent = getattr(getattr(cli.model, "hparams", None), "policy", "mlp") in ("gru", "lstm")
    if recurrent and getattr(cli.datamodule, "max_policy_lag", 0):  # before any collector thread or process starts
        if getattr(cli.datamodule, "collect_mode", "rounds") == "trajectories":
            raise ConfigError("data.collect: trajectories does not support recurrent policies; use model.policy: mlp "
                              "or data.collect: rounds")
        raise ConfigError("data.max_policy_lag: asynchronous collection does not support recurrent policies; use "
                          "model.policy: mlp or data.max_policy_lag: 0")
    probe = cli.datamodule.preflight(device, ranks_here)
    check_policy_memory(cli.model, probe, device, ranks_here)  # the policy's weights, gradients and Adam moments
    estimate = estimate_iteration(cli.model, cli.datamodule, probe, device, ranks_here)  # activations; time on CPU
    if estimate is not None and estimate["line"] and trainer.is_global_zero:
        print(estimate["line"], file=sys.stderr)
    probe["iteration_estimate"] = estimate
    if ckpt is not None:
        check_resume(ckpt, cli.model, cli.datamodule, probe, trainer.max_epochs, trainer.max_steps)  # corrupt, foreign, mismatched, done
        clean_stale_partials(os.path.dirname(os.path.abspath(ckpt)))  # saves of the run being resumed that were killed
    return probe


ROLLOUT_HOOKS = ("on_rollout_start", "on_episodes_end", "on_rollout_end")


def check_callbacks(callbacks: Sequence[Any], config: Any = None) -> None:
    """A callback that defines rollout hooks but is not a `RolloutCallback` would never have them
    called (the data module calls them on RolloutCallbacks only): one line naming it and the fix."""
    from parlightning.cli.component_guard import _config_entries, _entry_index
    from parlightning.distribution.planning import FIELD as STRATEGY
    from parlightning.runtime.preflight import check_state, check_sync_methods

    entries, used = _config_entries(config, "callbacks"), set()
    for cb in callbacks:
        index = _entry_index(entries, cb, used)
        _check_instance_hooks(cb, "trainer.callbacks" if index is None else f"trainer.callbacks[{index}]")
        _check_tuner(cb, "trainer.callbacks" if index is None else f"trainer.callbacks[{index}]")
        if index is not None:  # (trainer.max_time's own Timer is checked with the trainer's settings)
            _check_timer(cb, f"trainer.callbacks[{index}]")
        check_sync_methods("trainer.callbacks", cb)  # Lightning and the data module never await a hook
        strategy = getattr(cb, "strategy", None)
        if strategy is not None:  # a StrategyPlanner's strategy: plan / observe are called as plain methods
            check_sync_methods(STRATEGY, strategy)
        _check_hook_signatures(cb)
        _check_checkpoint_filename(cb)
        if type(cb).__module__.split(".")[0] not in ("lightning", "pytorch_lightning", "parlightning"):
            cls = type(cb)  # a user's callback: its state goes into every checkpoint
            check_state("trainer.callbacks", f"{cls.__module__}.{cls.__qualname__}", cb)
        if isinstance(cb, RolloutCallback):
            continue
        hooks = [h for h in ROLLOUT_HOOKS if callable(getattr(cb, h, None))]
        if hooks:
            cls = type(cb)
            raise ConfigError(f"trainer.callbacks: {cls.__module__}.{cls.__qualname__} defines {', '.join(hooks)} but "
                              "is not a parlightning.callbacks.RolloutCallback, so the rollout would never call "
                              f"{'them' if len(hooks) > 1 else 'it'}: subclass RolloutCallback (class "
                              f"{cls.__name__}(RolloutCallback): ...)")


# the arguments after (trainer, pl_module) that the data module passes to each rollout hook
_ROLLOUT_HOOK_ARGS = {"on_rollout_start": ("round_index",), "on_episodes_end": ("task_ids", "parts"),
                      "on_rollout_end": ("rollout",)}


def _check_hook_signatures(cb: Any) -> None:
    """A callback's own hooks must be plain methods that take what their caller passes: an
    `async def` hook would never be awaited (it would silently do nothing), and a rollout hook
    without its third argument, or a Lightning hook without Lightning's arguments (e.g.
    `on_train_epoch_end(self, trainer)`), fails at its first call, after an iteration was written."""
    import inspect

    cls = type(cb)
    where = f"trainer.callbacks: {cls.__module__}.{cls.__qualname__}"
    for name in dir(cls):
        if not name.startswith("on_") and name not in ("setup", "teardown"):
            continue
        fn = getattr(cls, name, None)
        if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
            raise ConfigError(f"{where}.{name} is an async def, which Lightning and the rollout never await (it would "
                              f"silently do nothing): make it a plain def (run async work with asyncio.run inside it)")
        if inspect.isgeneratorfunction(fn):  # calling it only makes a generator: the body never runs
            raise ConfigError(f"{where}.{name} is a generator function (it has a yield), so calling it only builds a "
                              "generator and its body never runs: remove the yield (return instead)")
    owner = f"{cls.__module__}.{cls.__qualname__}"
    for hook, rest in _ROLLOUT_HOOK_ARGS.items():
        method = getattr(cb, hook, None)
        if not callable(method) or getattr(type(cb), hook, None) is getattr(RolloutCallback, hook, None):
            continue
        check_call_shape("trainer.callbacks", owner, hook, method, ("trainer", "pl_module", *rest),
                         caller="the rollout")
    from lightning.pytorch import Callback

    if cls.__module__.split(".")[0] in ("lightning", "pytorch_lightning"):
        return
    for hook in dir(Callback):  # Lightning's own hooks a user's class overrides: the arguments Lightning passes
        base = getattr(Callback, hook)
        if not (hook.startswith("on_") or hook in ("setup", "teardown")) or getattr(cls, hook, base) is base:
            continue
        params = [p for p in inspect.signature(base).parameters if p != "self"]
        keywords = ("stage",) if hook in ("setup", "teardown") else ()  # Lightning passes stage by keyword
        check_call_shape("trainer.callbacks", owner, hook, getattr(cb, hook),
                         tuple(p for p in params if p not in keywords), keywords, caller="Lightning")


def _check_instance_hooks(cb: Any, field: str) -> None:
    """Hooks set on the instance rather than defined by the class (LambdaCallback(on_train_start=fn)
    stores `fn` as the instance's attribute; Lightning calls it as fn(trainer, pl_module, ...)): each
    must take the arguments Lightning passes, or it fails at its first call, after the run started."""
    import inspect

    from lightning.pytorch import Callback

    try:
        own = dict(vars(cb))
    except TypeError:
        return
    for hook, fn in own.items():
        base = getattr(Callback, hook, None)
        if not callable(fn) or not callable(base) or not (hook.startswith("on_") or hook in ("setup", "teardown")):
            continue
        params = tuple(p for p in inspect.signature(base).parameters if p != "self")
        name = getattr(fn, "__qualname__", None) or type(fn).__name__
        module = getattr(fn, "__module__", None)
        shown = f"{module}.{name}" if module and module != "builtins" else name
        if inspect.iscoroutinefunction(fn):
            raise ConfigError(f"{field}: {type(cb).__name__}({hook}={shown}) is an async def, which Lightning never "
                              "awaits (it would silently do nothing): pass a plain function")
        keywords = ("stage",) if hook in ("setup", "teardown") else ()  # Lightning passes stage by keyword
        positional = tuple(p for p in params if p not in keywords)
        check_call_shape(field, f"{type(cb).__name__}({hook}={shown})", hook, fn, positional, keywords,
                         caller="Lightning", define=f"a function def {hook}({', '.join(params)}) and pass that")


def _check_tuner(cb: Any, field: str) -> None:
    """Lightning's tuner callbacks (LearningRateFinder, BatchSizeFinder) fit a supervised loop: they
    scale a dataloader's batch size or sweep the learning rate over a supervised loss, then restore a
    temporary checkpoint. A PPO run has neither a dataloader to scale nor a supervised loss: refused
    before anything is written (they would fail at on_fit_start and leave `.lr_find_*.ckpt` behind)."""
    from lightning.pytorch.callbacks import BatchSizeFinder, LearningRateFinder

    if isinstance(cb, (LearningRateFinder, BatchSizeFinder)):
        what = "learning rate" if isinstance(cb, LearningRateFinder) else "batch size"
        setting = ("model.lr (with model.anneal_lr)" if isinstance(cb, LearningRateFinder)
                   else "data.num_envs, data.num_steps and data.num_minibatches")
        raise ConfigError(f"{field}: {type(cb).__name__} cannot tune a PPO run: Lightning's tuner searches the "
                          f"{what} over a supervised loss and a dataloader, and PPO's minibatches are cut from "
                          f"fresh rollouts with a loss that changes with the policy; remove it and set {setting} "
                          "in the config")


def _check_timer(cb: Any, field: str) -> None:
    """A Timer callback whose duration is not positive (`{days: -1}`, `00:00:00:00`, a negative string
    or timedelta) stops the run before its first iteration and exits 0: refused like trainer.max_time."""
    from lightning.pytorch.callbacks import Timer

    seconds = getattr(cb, "_duration", None) if isinstance(cb, Timer) else None
    if isinstance(seconds, (int, float)) and not seconds > 0:
        raise ConfigError(f"{field}: Timer duration is {seconds:g} s, no time at all: the run would stop before its "
                          "first iteration; give a positive duration (e.g. {hours: 12} or 00:12:00:00) or drop the "
                          "Timer")


def _check_checkpoint_filename(cb: Any) -> None:
    """A ModelCheckpoint's `filename` is a str.format template (`{epoch}`, `{step}`, a metric):
    one that does not parse would fail at the first save, after an iteration of training."""
    import string

    from lightning.pytorch.callbacks import ModelCheckpoint

    name = getattr(cb, "filename", None) if isinstance(cb, ModelCheckpoint) else None
    if not isinstance(name, str):
        return
    try:
        list(string.Formatter().parse(name))
    except ValueError as err:
        raise ConfigError(f"trainer.callbacks: ModelCheckpoint.filename {name!r} is not a valid template ({err}); "
                          "balance its braces, e.g. 'run-{epoch}-{step}' (double a literal brace: '{{')") from None


def _is_size_mismatch(err: BaseException) -> bool:
    """A tensor of the wrong size met while restoring a checkpoint's state (torch's own wording)."""
    text = str(err)
    return isinstance(err, (RuntimeError, ValueError, IndexError)) and any(s in text for s in (
        "The size of tensor", "size mismatch", "shape mismatch", "must match the size", "out of bounds"))


def _start_error(err: BaseException, places: Optional[list[tuple[str, str]]] = None) -> Optional[str]:
    """The one-line message for an error raised by fit: a ConfigError from setup, a ReportedError
    (a user's world, a full disk), the non-finite-loss stop, or Lightning's size-mismatch when a
    checkpoint's weights do not fit; None for anything else (a bug: its traceback is kept).
    `places`: the run's folders by field (`run_places`), to name the one a failed write was in."""
    if isinstance(err, (ConfigError, ReportedError)):
        return " ".join(str(err).split())
    if type(err).__module__.startswith("parlightning.") and isinstance(err, RuntimeError) and str(err):
        return " ".join(str(err).split())  # the package's own named runtime errors (ProcessDied, ...): already one line
    if isinstance(err, MisconfigurationException):  # Lightning refusing a setting when fit starts (a callback's needs)
        return f"trainer: {' '.join(str(err).split())} (a Lightning setting in trainer or trainer.callbacks)"
    text = str(err)
    if isinstance(err, FloatingPointError) and text.startswith("non-finite"):  # the module's own guard
        return text
    monitored = re.search(r"(\w+) conditioned on metric `([^`]*)` which is not available", text)
    if isinstance(err, RuntimeError) and monitored is not None:  # EarlyStopping(strict=True) on a metric never logged
        return (f"trainer.callbacks: EarlyStopping monitors {monitored.group(2)!r}, which this run never logs; monitor "
                f"a logged metric (e.g. {logged_examples(text.split('following:', 1)[-1])}; the tags: "
                "docs/guides/logging.md) or drop the callback")
    unlogged = unlogged_monitor_line(err)  # a ModelCheckpoint's monitor never logged (see UNLOGGED_MONITOR)
    if unlogged is not None:
        return unlogged
    if isinstance(err, RuntimeError) and "Error(s) in loading state_dict" in text:
        first = next((line.strip() for line in text.splitlines()[1:] if line.strip()), "")
        return (f"--ckpt_path: the checkpoint's weights do not fit this config ({first[:200]}); resume with the "
                "config (env and model) that wrote it, or start fresh without --ckpt_path")
    return _environment_error(err, places)


def check_environment_for_ddp(trainer: Any) -> None:
    """A multi-process run's rendezvous variables, before any rank starts: `MASTER_ADDR` must
    resolve and `MASTER_PORT` must be a port number that is free on the first node (gloo's or NCCL's
    store would otherwise wait 30 minutes for a host that does not exist, or fail with a traceback)."""
    import socket

    if getattr(trainer, "world_size", 1) <= 1:
        return
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
        raise ConfigError(f"MASTER_PORT: {port!r} is not a port number; set 1..65535 or unset it")
    if addr:
        try:
            socket.getaddrinfo(addr, None)
        except (socket.gaierror, UnicodeError) as err:
            raise ConfigError(f"MASTER_ADDR: host {addr!r} does not resolve ({err.args[-1] if err.args else err}); "
                              "set it to the first node's address (or unset it for one machine)") from None
    first = os.environ.get("NODE_RANK", "0") == "0" and os.environ.get("LOCAL_RANK") is None
    if port is not None and first and (not addr or addr in ("127.0.0.1", "localhost", socket.gethostname())):
        with socket.socket() as probe:  # this process's store will listen here: is the port free now?
            try:
                probe.bind((addr or "", int(port)))
            except OSError as err:
                raise ConfigError(f"MASTER_PORT {port}: cannot listen on it ({err.strerror}: another job or process "
                                  "holds it); pick a free port or unset MASTER_PORT (Lightning then finds one)") from None


def _environment_error(err: BaseException, places: Optional[list[tuple[str, str]]] = None) -> Optional[str]:
    """The one-line message for a failure that comes from the process's environment, not from the
    package or the config: a warning turned into an error, a resource limit (threads, address space,
    file size), a DDP address or port, a scheduler's variables Lightning refuses. None otherwise. A
    full disk names the run's folder it filled (`places`: (field, folder), `full_disk_place`)."""
    import errno

    text = " ".join(str(err).split())[:240]
    if isinstance(err, Warning):  # PYTHONWARNINGS=error / python -W error turned a library's warning into an error
        return (f"{type(err).__name__} raised as an error ({text[:160]}): PYTHONWARNINGS=error or python -W error "
                "makes every warning an exception; run without it, or ignore this one "
                f"(-W ignore::{type(err).__name__})")
    if isinstance(err, RuntimeError) and "can't start new thread" in text:
        return ("the process cannot start a thread: its address-space or process limit is too low (ulimit -v / "
                "ulimit -u); raise the limit (a run needs a few GB of address space)")
    if isinstance(err, MemoryError):
        return ("out of memory (MemoryError): the process's memory or address-space limit (ulimit -v) is too low "
                "for this run; raise it, or make the run smaller (data.num_envs, model.hidden_sizes)")
    if isinstance(err, OSError) and err.errno in (errno.EFBIG, errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        where = f" {err.filename}" if err.filename else ""
        why = {errno.EFBIG: "larger than the file-size limit (ulimit -f)", errno.ENOSPC: "the disk is full",
               errno.EDQUOT: "the disk quota is used up", errno.EROFS: "the file system is read-only"}[err.errno]
        place = full_disk_place(err, places or []) if err.errno != errno.EFBIG else None
        if place is not None:  # the run's folder (by its config field) the write was in, with its free space
            field, folder, free = place
            room = f", {size_text(free)} free there" if free is not None else ""
            into = f" into {field} {folder!r}" if not err.filename else f" ({field} {folder!r})"
            fix = ("free space there, or point {} at a folder on a disk with room" if err.errno != errno.EROFS
                   else "make it writable, or point {} at a writable folder").format(field)
            return f"writing{where}{into} failed: {why}{room}; {fix}"
        return (f"writing{where} failed: {why}; raise the limit or free space, or point "
                "--trainer.default_root_dir elsewhere")
    if type(err).__name__ == "DistNetworkError" or "EADDRINUSE" in text:
        port = os.environ.get("MASTER_PORT")
        if "EADDRINUSE" in text or "address already in use" in text:
            return (f"MASTER_PORT {port}: the address is already in use (another job or process listens on it); "
                    "pick a free port or unset MASTER_PORT (Lightning then finds one)")
        return (f"DDP rendezvous at MASTER_ADDR {os.environ.get('MASTER_ADDR')!r} MASTER_PORT {port!r} failed "
                f"({text[:160]}); check both variables")
    if isinstance(err, RuntimeError) and "SLURM" in text:  # Lightning's own refusal of a scheduler's settings
        return f"SLURM: {text}"
    return None


# ---------------------------------------------------------------------- the Python API
# `from parlightning import fit; fit(config=..., overrides=[...])` runs exactly what `python -m
# parlightning.fit` runs and returns the fitted Trainer: this module is callable (its class is
# swapped for one with `__call__`); `parlightning.api` re-exports these names.

Config = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]], None]


def cli_args(config: Config = None, overrides: Sequence[str] = ()) -> list[str]:
    """`--config` for each file, then the overrides: CLI tokens (`"--model.lr", "1e-3"`) or
    `key=value` items (`"model.lr=1e-3"`, `"trainer.max_epochs=2"`)."""
    if config is not None and not isinstance(config, (str, os.PathLike, list, tuple)):
        raise ConfigError(f"config: expected a YAML path (or a list of them), got {type(config).__name__} "
                          f"{config!r:.60}; e.g. fit(config='configs/swarm.yaml')")
    files = [] if config is None else [config] if isinstance(config, (str, os.PathLike)) else list(config)
    for f in files:
        if not isinstance(f, (str, os.PathLike)):
            raise ConfigError(f"config: every item must be a YAML path, got {type(f).__name__} {f!r:.60}")
    args = [token for f in files for token in ("--config", os.fspath(f))]
    if isinstance(overrides, (str, bytes)) or not isinstance(overrides, (list, tuple)):
        raise ConfigError(f"overrides: expected a list of strings like ['model.lr=1e-3'], got {type(overrides).__name__} "
                          f"{overrides!r:.60}; wrap a single override in a list")
    for item in overrides:
        if not isinstance(item, str):
            raise ConfigError(f"overrides: expected strings like 'model.lr=1e-3' or '--model.lr', got {item!r}")
        if not item.startswith("-") and "=" in item and not item.split("=", 1)[0].strip():
            raise ConfigError(f"overrides: {item!r} names no key; write 'section.key=value' (e.g. 'model.lr=1e-3')")
        args.append(item if item.startswith("-") or "=" not in item else f"--{item}")
    return args


def fit(config: Config = None, overrides: Sequence[str] = ()):  # -> lightning.pytorch.Trainer
    """Train as `python -m parlightning.fit --config CONFIG OVERRIDES...` would, in this process.

    Returns the fitted `Trainer` (`trainer.callback_metrics` holds the last logged values,
    `trainer.lightning_module.policy` the trained policy, `trainer.datamodule` the rollout state),
    or None for `--print_config` / `--help`. A bad config raises `ConfigError` naming the field.
    """
    try:
        cli = main(cli_args(config, overrides))
    except SystemExit as exit_:
        message = exit_.code
        if message in (0, None):
            return None
        if isinstance(message, str) and message.startswith("error: "):
            raise ConfigError(message.removeprefix("error: ")) from None
        raise
    return cli.trainer


def fit_cli() -> None:
    """The `parlightning-fit` console script (its exit status is 0 after a finished fit)."""
    main(sys.argv[1:])


class CallableModule(types.ModuleType):
    """Lets `from parlightning import fit` be called: calling the module calls `fit` above."""

    def __call__(self, config: Config = None, overrides: Sequence[str] = ()) -> Optional[object]:
        return fit(config, overrides)


sys.modules[__name__].__class__ = CallableModule

if __name__ == "__main__":
    main()
