"""Every hook where a component of the config runs x every class of fault it causes (issue 27):
user callbacks (Lightning hooks and the rollout hooks), Lightning's own callbacks, loggers and
CheckpointIO plugins named in `trainer`, each failing in one way: raising in `__init__`, raising at
run time inside Lightning's code because of a bad argument, raising in a hook, mutating what it is
handed (the minibatch, the rollout buffer, the module's weights), changing torch's global state,
`pl_module.log` where Lightning does not allow it, putting into a checkpoint what a resume cannot
read back (or removing its `state_dict`), `on_exception` that raises too, `teardown` that raises.

Each case runs `python -m parlightning.fit`'s `main` in this process on a tiny CartPole run (4
actors x 8 steps, one iteration) and asserts the exact outcome: one `error:` line naming the
config field, the class and the hook (and the fix), no traceback, and nothing half-written (no
temp file, every checkpoint left loads and verifies; a fault before the first rollout or in a
Lightning component's argument leaves no run folder). Two cases go through the real CLI (exit code,
the whole stderr). The mechanism: `parlightning.cli.component_guard`."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import time
from pathlib import Path

import lightning
import pytest
import torch

from parlightning.callbacks.base import RolloutCallback
from parlightning.distribution.strategies import DataParallel

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
ME = Path(__file__).stem
TINY = ["--config", "cartpole_fast", "--trainer.max_epochs", "1", "--data.num_envs", "4", "--data.num_steps", "8",
        "--data.num_minibatches", "2", "--data.update_epochs", "1", "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false", "--model.anneal_lr", "false", "--model.fused_adam", "false"]

SWARM = ["--config", "swarm", "--trainer.max_epochs", "2", "--data.num_envs", "8", "--data.num_steps", "8",
         "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]  # a world with tasks


# ------------------------------------------------------------------------------------ the components
class Raises(lightning.Callback):
    """on_train_batch_start raises (a bug in the user's hook)."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        raise KeyError("label_map")


class InitRaises(lightning.Callback):
    def __init__(self, every: int = 0) -> None:
        raise ValueError(f"every must be positive, got {every}")


class TruncatesBatch(lightning.Callback):
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        batch["obs"] = batch["obs"][:1]


class ReshapesBatch(lightning.Callback):
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        batch["advantages"] = batch["advantages"].reshape(-1, 1)


class DropsKey(lightning.Callback):
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        batch.pop("returns")


class WeightsToNaN(lightning.Callback):
    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        with torch.no_grad():
            next(pl_module.parameters()).fill_(float("nan"))


class WeightsToInfAtEpochStart(lightning.Callback):
    def on_train_epoch_start(self, trainer, pl_module):
        with torch.no_grad():
            next(pl_module.parameters())[0].fill_(float("inf"))


class SetsDefaultDtype(lightning.Callback):
    def on_fit_start(self, trainer, pl_module):
        torch.set_default_dtype(torch.float64)


class SetsDefaultDevice(lightning.Callback):
    def on_train_epoch_start(self, trainer, pl_module):
        torch.set_default_device("meta")


class DisablesGrad(lightning.Callback):
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        torch.set_grad_enabled(False)


class TurnsDeterministicOn(lightning.Callback):
    def on_fit_start(self, trainer, pl_module):
        torch.use_deterministic_algorithms(True)


class LogsInSetup(lightning.Callback):
    def setup(self, trainer, pl_module, stage):
        pl_module.log("user/x", 1.0)


class SaveDropsStateDict(lightning.Callback):
    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        checkpoint.pop("state_dict")


class SaveAddsDatetime(lightning.Callback):
    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        checkpoint["saved_at"] = datetime.datetime(2026, 1, 1)


class SaveAddsMetaTensor(lightning.Callback):
    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        checkpoint["shapes"] = torch.empty(4, device="meta")


class SaveNestsAnObject(lightning.Callback):
    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        checkpoint["callbacks"]["extra"] = {"path": Path("/tmp")}


class StateHoldsDatetime(lightning.Callback):
    def state_dict(self):
        return {"started": datetime.datetime(2026, 1, 1)}


class OnExceptionRaises(lightning.Callback):
    def on_exception(self, trainer, pl_module, exception):
        raise RuntimeError("could not upload the crash report")


class TeardownRaises(lightning.Callback):
    def teardown(self, trainer, pl_module, stage):
        raise OSError("flush thread is gone")


class RolloutStartRaises(RolloutCallback):
    def on_rollout_start(self, trainer, pl_module, round_index):
        raise ValueError("no plan for round 0")


class DropsRolloutBuffer(RolloutCallback):
    def on_rollout_end(self, trainer, pl_module, rollout):
        rollout.buffer = None


class LogsInRolloutHook(RolloutCallback):
    def on_rollout_end(self, trainer, pl_module, rollout):
        pl_module.log("user/rounds", float(rollout.round_index))


class RolloutEndSetsDtype(RolloutCallback):
    def on_rollout_end(self, trainer, pl_module, rollout):
        torch.set_default_dtype(torch.float16)


class PlanSetsDtype(DataParallel):
    def plan(self, n_workers, round_index, keys):
        torch.set_default_dtype(torch.float64)
        return super().plan(n_workers, round_index, keys)


class ObserveDisablesGrad(DataParallel):
    def observe(self, unit, task_id, score):
        torch.set_grad_enabled(False)


class PickSetsDtype:
    """A two-method sampler (pick / record) whose pick changes the default dtype."""

    def pick(self, keys, round_index):
        torch.set_default_dtype(torch.float64)
        return keys[round_index % len(keys)]

    def record(self, task_id, score):
        return None


class SignalsStrings(PickSetsDtype):
    """signals() (logged every round) returns a string, not a number."""

    def pick(self, keys, round_index):
        return keys[0]

    def signals(self):
        return {"mood": "curious"}


class PicksOutsideShard(PickSetsDtype):
    """pick ignores the shard it is given and returns another task of the bank."""

    def pick(self, keys, round_index):
        return "solo-0" if "solo-0" not in keys else "fanout-0"


class FirstTaskOnly(DataParallel):
    """A valid strategy whose shard is smaller than the bank: one task."""

    def plan(self, n_workers, round_index, keys):
        from parlightning.distribution.strategies import WorkUnit

        return [WorkUnit(w, (sorted(keys)[0],)) for w in range(n_workers)]


class UnreachableIO(lightning.pytorch.plugins.io.TorchCheckpointIO):
    """A user's CheckpointIO whose storage is unreachable."""

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        raise ConnectionError("bucket s3://runs is unreachable")


class QuotaLogger(lightning.pytorch.loggers.CSVLogger):
    """A user's logger whose backend refuses the metrics."""

    def log_metrics(self, metrics, step=None):
        raise RuntimeError("metrics quota exceeded")


class PlainFileIO(lightning.pytorch.plugins.io.TorchCheckpointIO):
    """A user's CheckpointIO (e.g. one that writes to remote storage): kept, wrapped in the package's checks."""


def spec(cls: str, **init_args) -> str:
    args = f", init_args: {init_args}" if init_args else ""
    path = cls if "." in cls else f"{ME}.{cls}"
    return f"{{class_path: {path}{args}}}"


L = "lightning.pytorch.callbacks."
BEFORE, AFTER = "before", "after"  # the fault comes before the first rollout (no run folder left) or after
# (id, callbacks, extra arguments, what the one line must contain, when)
CASES = [
    # raising in __init__: the user's own class (its file and line), Lightning's own (its field and arguments)
    ("user-init-raises", [spec("InitRaises", every=0)], [], ["trainer.callbacks", "InitRaises", "every must be"], BEFORE),
    ("lightning-init-grad-accumulation-zero", [spec(L + "GradientAccumulationScheduler", scheduling={0: 0})], [],
     ["trainer.callbacks[0]: GradientAccumulationScheduler", "scheduling"], BEFORE),
    ("lightning-init-early-stopping-mode", [spec(L + "EarlyStopping", monitor="x", mode="sideways")], [],
     ["trainer.callbacks[0]: EarlyStopping", "mode"], BEFORE),
    ("lightning-init-second-of-two", [spec(L + "ModelSummary"), spec(L + "StochasticWeightAveraging", swa_lrs=-1.0)],
     [], ["trainer.callbacks[1]: StochasticWeightAveraging", "swa_lrs"], BEFORE),
    # raising at run time inside Lightning's code because of a bad argument
    ("lightning-model-summary-depth", [spec(L + "ModelSummary", max_depth=-2)], [],
     ["trainer.callbacks[0]: ModelSummary.on_fit_start", "max_depth"], BEFORE),
    ("lightning-csv-logger-flush-zero", [], ["--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
                                             "--trainer.logger.save_dir", "runs",
                                             "--trainer.logger.flush_logs_every_n_steps", "0"],
     ["trainer.logger: CSVLogger flush_logs_every_n_steps: must be >= 1, got 0"], BEFORE),  # up front since round 17
    # raising in a hook
    ("hook-raises", [spec("Raises")], [], ["trainer.callbacks[0]: Raises.on_train_batch_start", "label_map"], AFTER),
    ("rollout-hook-raises", [spec("RolloutStartRaises")], [],
     ["trainer.callbacks[0]: RolloutStartRaises.on_rollout_start", "no plan"], BEFORE),
    ("teardown-raises", [spec("TeardownRaises")], [], ["TeardownRaises.teardown", "flush thread"], AFTER),
    # mutating what the hook is handed
    ("truncates-minibatch", [spec("TruncatesBatch")], [], ["TruncatesBatch.on_train_batch_start", "'obs'"], AFTER),
    ("reshapes-minibatch", [spec("ReshapesBatch")], [], ["ReshapesBatch.on_train_batch_start", "'advantages'"], AFTER),
    ("drops-minibatch-key", [spec("DropsKey")], [], ["DropsKey.on_train_batch_start", "removed 'returns'"], AFTER),
    ("drops-rollout-buffer", [spec("DropsRolloutBuffer")], [], ["DropsRolloutBuffer.on_rollout_end", "buffer"], AFTER),
    ("weights-to-nan", [spec("WeightsToNaN")], [], ["WeightsToNaN.on_before_optimizer_step", "NaN or inf"], AFTER),
    ("weights-to-inf-at-epoch-start", [spec("WeightsToInfAtEpochStart")], [],
     ["WeightsToInfAtEpochStart.on_train_epoch_start", "NaN or inf"], BEFORE),
    # changing torch's global state
    ("sets-default-dtype", [spec("SetsDefaultDtype")], [], ["SetsDefaultDtype.on_fit_start", "default dtype", "float64"],
     BEFORE),
    ("sets-default-device", [spec("SetsDefaultDevice")], [], ["SetsDefaultDevice.on_train_epoch_start", "default device",
                                                               "meta"], BEFORE),
    ("disables-grad", [spec("DisablesGrad")], [], ["DisablesGrad.on_train_batch_start", "grad mode"], AFTER),
    ("turns-deterministic-on", [spec("TurnsDeterministicOn")], [],
     ["TurnsDeterministicOn.on_fit_start", "deterministic"], BEFORE),
    ("rollout-hook-sets-dtype", [spec("RolloutEndSetsDtype")], [], ["RolloutEndSetsDtype.on_rollout_end", "float16"],
     AFTER),
    # self.log where Lightning does not allow it
    ("log-in-rollout-hook", [spec("LogsInRolloutHook")], [],
     ["trainer.callbacks[0]: LogsInRolloutHook.on_rollout_end", "pl_module.log", "rollout.stats"], AFTER),
    ("log-in-setup", [spec("LogsInSetup")], [], ["trainer.callbacks[0]: LogsInSetup.setup", "pl_module.log"], BEFORE),
    # what goes into the checkpoint
    ("checkpoint-without-state-dict", [spec("SaveDropsStateDict")], [],
     ["SaveDropsStateDict.on_save_checkpoint", "state_dict"], AFTER),
    ("checkpoint-holds-datetime", [spec("SaveAddsDatetime")], [],
     ["SaveAddsDatetime.on_save_checkpoint", "checkpoint['saved_at']", "datetime"], AFTER),
    ("checkpoint-holds-meta-tensor", [spec("SaveAddsMetaTensor")], [],
     ["SaveAddsMetaTensor.on_save_checkpoint", "checkpoint['shapes']", "meta"], AFTER),
    ("checkpoint-nests-an-object", [spec("SaveNestsAnObject")], [],
     ["SaveNestsAnObject.on_save_checkpoint", "checkpoint['callbacks']['extra']['path']", "PosixPath"], AFTER),
    ("callback-state-holds-datetime", [spec("StateHoldsDatetime")], [],
     ["StateHoldsDatetime.state_dict", "datetime"], AFTER),
    # samplers' and strategies' calls (the same torch-state boundary, where the package calls them)
    ("strategy-plan-sets-dtype", [spec("parlightning.callbacks.StrategyPlanner", strategy={"class_path": f"{ME}.PlanSetsDtype"})],
     ["SWARM"], ["strategy", "PlanSetsDtype", ".plan changed torch's default dtype"], BEFORE),
    ("strategy-observe-disables-grad",
     [spec("parlightning.callbacks.StrategyPlanner", strategy={"class_path": f"{ME}.ObserveDisablesGrad"})],
     ["SWARM"], ["strategy", "ObserveDisablesGrad.observe changed torch's grad mode"], AFTER),
    ("sampler-pick-sets-dtype", [], ["SWARM", "--data.sampler", f"{ME}.PickSetsDtype"],
     ["data.sampler: PickSetsDtype.pick changed torch's default dtype"], BEFORE),
    ("sampler-signals-strings", [], ["SWARM", "--data.sampler", f"{ME}.SignalsStrings"],
     ["data.sampler: SignalsStrings.signals", "'mood'"], AFTER),
    ("sampler-pick-outside-shard",
     [spec("parlightning.callbacks.StrategyPlanner", strategy={"class_path": f"{ME}.FirstTaskOnly"})],
     ["SWARM", "--data.sampler", f"{ME}.PicksOutsideShard"], ["data.sampler: PicksOutsideShard.pick", "shard"], BEFORE),
    # a user's logger and CheckpointIO plugin raising
    ("user-logger-raises", [], ["--trainer.logger", f"{ME}.QuotaLogger", "--trainer.logger.save_dir", "runs"],
     ["trainer.logger: QuotaLogger.log_metrics", "quota"], AFTER),
    ("user-checkpoint-io-raises", [], ["--trainer.plugins", f"{ME}.UnreachableIO"],
     ["trainer.plugins: UnreachableIO.save_checkpoint", "unreachable"], AFTER),
    # on_exception that raises too: the original error first, the hook's after it
    ("on-exception-raises-too", [spec("Raises"), spec("OnExceptionRaises")], [],
     ["Raises.on_train_batch_start", "label_map", "also: trainer.callbacks[1]: OnExceptionRaises.on_exception",
      "crash report"], AFTER),
]


def _fit(tmp_path: Path, callbacks: list, extra: list, capsys) -> tuple[str, str]:
    from parlightning.cli.fit import main

    os.chdir(tmp_path)
    args = list(SWARM if extra[:1] == ["SWARM"] else TINY)
    extra = [a for a in extra if a != "SWARM"]
    if callbacks:
        (tmp_path / "c.yaml").write_text("trainer:\n  callbacks:\n" + "".join(f"    - {c}\n" for c in callbacks))
        args += ["--config", "c.yaml"]
    dtype = torch.get_default_dtype()
    try:
        with pytest.raises(SystemExit) as exit_:
            main(args + extra)
    finally:  # a failing case must not leave the next one a changed torch (the guard restores it too)
        torch.set_default_dtype(dtype)
        torch.set_default_device(None)
        torch.set_grad_enabled(True)
        torch.use_deterministic_algorithms(False)
    return exit_.value.code, capsys.readouterr().err


def _nothing_half_written(tmp_path: Path, when: str) -> None:
    from parlightning.runtime.checkpoint import load_checkpoint_file

    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".partial")]
    if when == BEFORE:
        assert not [p for p in tmp_path.rglob("*") if p.name.startswith("version_") or p.suffix == ".ckpt"]
    for ckpt in tmp_path.rglob("*.ckpt"):
        load_checkpoint_file(str(ckpt))  # complete, checksummed, loads with weights_only=True


@pytest.mark.parametrize("name,callbacks,extra,expect,when", CASES, ids=[c[0] for c in CASES])
def test_a_component_fault_is_one_line_naming_it(tmp_path, capsys, monkeypatch, name, callbacks, extra, expect, when):
    monkeypatch.chdir(tmp_path)
    code, err = _fit(tmp_path, callbacks, extra, capsys)
    assert isinstance(code, str) and code.startswith("error: ") and "\n" not in code, code
    for part in expect:
        assert part in code, (part, code)
    assert "Traceback" not in err
    assert torch.get_default_dtype() == torch.float32 and torch.is_grad_enabled()
    _nothing_half_written(tmp_path, when)


def test_a_plain_checkpoint_io_plugin_keeps_the_packages_guarantees(tmp_path, capsys, monkeypatch):
    """Lightning's TorchCheckpointIO named as a plugin is written through AtomicCheckpointIO (same
    format, atomic, checksummed); a user's own CheckpointIO is kept and wrapped: each checkpoint is
    checked before it is handed over and carries the checksum resume verifies."""
    from parlightning.cli.fit import main
    from parlightning.runtime.checkpoint import CHECKSUM_KEY, load_checkpoint_file

    monkeypatch.chdir(tmp_path)
    for plugin in ("lightning.pytorch.plugins.io.TorchCheckpointIO", f"{ME}.PlainFileIO"):
        cli = main(TINY + ["--trainer.plugins", plugin, "--trainer.default_root_dir", plugin.rpartition(".")[2]])
        last = next((tmp_path / plugin.rpartition(".")[2]).rglob("last.ckpt"))
        assert CHECKSUM_KEY in load_checkpoint_file(str(last))
        assert "trainer.plugins: " in capsys.readouterr().err
        assert type(cli.trainer.strategy.checkpoint_io).__name__ in ("AtomicCheckpointIO", "CheckedCheckpointIO")
    code, _ = _fit(tmp_path, [spec("SaveAddsDatetime")], ["--trainer.plugins", f"{ME}.PlainFileIO",
                                                          "--trainer.default_root_dir", "bad"], capsys)
    assert "SaveAddsDatetime.on_save_checkpoint" in code and not list((tmp_path / "bad").rglob("*.ckpt"))


def test_the_guard_passes_the_users_hook_through_untouched_when_nothing_is_wrong(tmp_path, monkeypatch):
    """The wrapper is invisible to a correct callback: it trains, its hooks' return values come back."""
    from parlightning.cli.component_guard import ComponentGuard

    class Fine(lightning.Callback):
        calls = 0

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            Fine.calls += 1
            _ = batch["obs"][:1].clone()
            with torch.no_grad():
                torch.set_default_dtype(torch.float64)  # changed and restored inside the hook: allowed
                torch.set_default_dtype(torch.float32)

        def state_dict(self):
            return {"calls": Fine.calls, "when": "2026-01-01", "t": torch.zeros(2)}

    cb = Fine()
    trainer = type("T", (), {"callbacks": [cb], "loggers": []})()
    ComponentGuard.install(trainer)
    batch = {"obs": torch.zeros(4, 3)}
    assert cb.on_train_batch_start(None, torch.nn.Linear(2, 2), batch, 0) is None and Fine.calls == 1
    assert cb.state_dict()["calls"] == 1


def test_the_per_step_boundary_costs_microseconds():
    """A guarded per-step hook (global state, the minibatch's shapes, the weights' version counters)
    adds O(1) host-side work: no tensor data is read, no device sync."""
    from parlightning.cli.component_guard import ComponentGuard

    class Reads(lightning.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            return None

    plain, guarded = Reads(), Reads()
    ComponentGuard.install(type("T", (), {"callbacks": [guarded], "loggers": []})())
    module = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.Linear(64, 64), torch.nn.Linear(64, 3))
    batch = {k: torch.zeros(256, 8) for k in ("obs", "actions", "logprobs", "values", "advantages", "returns")}

    def per_call(cb, n=2000):
        start = time.perf_counter()
        for i in range(n):
            cb.on_train_batch_start(None, module, batch, i)
        return (time.perf_counter() - start) / n

    added = min(per_call(guarded) for _ in range(3)) - min(per_call(plain) for _ in range(3))
    assert added < 100e-6, f"{added * 1e6:.1f} us per hook call"


def test_through_the_cli_one_line_and_the_exit_code(tmp_path):
    """The real program: exit code 1, one `error:` line on stderr, no traceback (a world's own error
    reported first, the on_exception hook that raised too after it)."""
    (tmp_path / "c.yaml").write_text("trainer:\n  callbacks:\n" + "".join(
        f"    - {c}\n" for c in (spec("Raises"), spec("OnExceptionRaises"))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])}
    proc = subprocess.run([sys.executable, "-m", "parlightning.fit", *TINY, "--config", "c.yaml"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert lines[0].index("Raises.on_train_batch_start") < lines[0].index("OnExceptionRaises.on_exception")
    assert "trainer.plugins" not in proc.stderr  # no plugin named: no note
