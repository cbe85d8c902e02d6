"""Round 13's component findings (scripts/bad_inputs_round13.py), each as its class of input: a
user's subclass of a package class whose `__init__` never reaches the base's (every documented base:
rewards, λ schedules, samplers, strategies, worlds, rollout callbacks), a LambdaCallback given a
function that does not take Lightning's arguments, Lightning's tuner callbacks on a PPO loop, non-finite
or wrong-typed values from a user's reward or schedule, a hook that replaces the module's policy, the
line a signal prints at each phase of a fit, built-in worlds stepped with actions out of range.

Each case asserts the exact outcome: one `error:` line naming the field, the class and method, and the
fix; no traceback; nothing half-written or left behind."""

from __future__ import annotations

import os
from pathlib import Path

import lightning
import lightning.pytorch.callbacks
import pytest
import torch

from parlightning.callbacks.base import RolloutCallback
from parlightning.callbacks.parl import CriticalStepsMonitor
from parlightning.distribution.samplers import DifficultyWeighted
from parlightning.distribution.strategies import ClusterParallel
from parlightning.envs.swarm import SwarmEnv
from parlightning.parl.reward import LinearSchedule, PARLReward, Schedule

ME = Path(__file__).stem
TINY = ["--config", "swarm", "--trainer.max_epochs", "1", "--data.num_envs", "8", "--data.num_steps", "4",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def _fit(tmp_path: Path, args: list, capsys, yaml: str = "") -> tuple:
    from parlightning.cli.fit import main

    os.chdir(tmp_path)
    if yaml:
        (tmp_path / "c.yaml").write_text(yaml)
        args = args + ["--config", "c.yaml"]
    with pytest.raises(SystemExit) as exit_:
        main(TINY + args)
    return exit_.value.code, capsys.readouterr().err


def _one_line(code, err: str, *parts: str) -> str:
    assert isinstance(code, str) and code.startswith("error: ") and "\n" not in code, (code, err[-2000:])
    for part in parts:
        assert part in code, (part, code)
    assert "Traceback" not in err, err[-3000:]
    return code


def _nothing_left(tmp_path: Path) -> None:
    left = [p.name for p in tmp_path.rglob("*") if p.name not in ("c.yaml",)]
    assert not left, left


# ------------------------------------------------------------------------------ 1. forgets super().__init__
class RewardForgetsSuper(PARLReward):
    def __init__(self, max_subagents: int, scale: float = 1.0):
        self.scale = scale


class ScheduleForgetsSuper(LinearSchedule):
    def __init__(self, slope: float = 1.0):
        self.slope = slope


class SamplerForgetsSuper(DifficultyWeighted):
    def __init__(self, c: float = 0.2):
        self.mine = c


class ClusterForgetsSuper(ClusterParallel):
    def __init__(self, label: str = "mine"):
        self.label = label


class SwarmForgetsSuper(SwarmEnv):
    def __init__(self, num_envs: int = 8, device: str = "cpu", seed: int = 0):
        self.mine = num_envs


class MonitorForgetsSuper(CriticalStepsMonitor):
    def __init__(self, every: int = 1):
        self.every = every


class SwarmCallsBase(SwarmEnv):  # correct: reaches the base through SwarmEnv.__init__(self, ...)
    def __init__(self, num_envs: int = 8, device: str = "cpu", seed: int = 0):
        SwarmEnv.__init__(self, num_envs=num_envs, device=device, seed=seed)


REWARD = "data:\n  reward:\n    class_path: {cls}\n    init_args:\n      max_subagents: 128\n{more}"
FORGETS = [
    ("reward", REWARD.format(cls=f"{ME}.RewardForgetsSuper", more=""), [], "data.reward",
     "RewardForgetsSuper.__init__"),
    ("lambda-schedule", REWARD.format(cls="parlightning.parl.reward.PARLReward",
                                      more=f"      lambda1:\n        class_path: {ME}.ScheduleForgetsSuper\n"), [],
     "data.reward.lambda1", "ScheduleForgetsSuper.__init__"),
    ("sampler", "", ["--data.sampler", f"{ME}.SamplerForgetsSuper"], "data.sampler", "SamplerForgetsSuper.__init__"),
    ("strategy", "trainer:\n  callbacks+:\n    - class_path: parlightning.callbacks.StrategyPlanner\n"
                 f"      init_args:\n        strategy: {{class_path: {ME}.ClusterForgetsSuper}}\n", [],
     "trainer.callbacks[", "ClusterForgetsSuper.__init__"),
    ("world", "", ["--data.env", f"{ME}.SwarmForgetsSuper"], "data.env", "SwarmForgetsSuper.__init__"),
    ("rollout-callback", "", ["--trainer.callbacks+", f"{ME}.MonitorForgetsSuper"], "trainer.callbacks[",
     "MonitorForgetsSuper.__init__"),
]


@pytest.mark.parametrize("name,yaml,args,field,owner", FORGETS, ids=[c[0] for c in FORGETS])
def test_a_subclass_that_forgets_super_init_is_one_line(tmp_path, capsys, monkeypatch, name, yaml, args, field, owner):
    monkeypatch.chdir(tmp_path)
    code, err = _fit(tmp_path, args, capsys, yaml)
    line = _one_line(code, err, field, owner, "super().__init__(")
    assert line.count("super().__init__") >= 1
    _nothing_left(tmp_path)


def test_a_subclass_calling_the_base_by_name_is_accepted():
    from parlightning.runtime.subclass_init import base_init_error

    assert base_init_error("data.env", SwarmCallsBase) is None
    assert base_init_error("data.env", SwarmEnv) is None
    assert base_init_error("data.reward.lambda1", type("S", (Schedule,), {"value": lambda self, p: 0.1})) is None


# ------------------------------------------------------------------------------ 2. LambdaCallback's hooks
def takes_trainer_only(trainer):
    return None


def setup_without_stage(trainer, pl_module):
    return None


async def async_start(trainer, pl_module):
    return None


def start_raises(trainer, pl_module):
    raise KeyError("label_map")


LAMBDA = ("trainer:\n  callbacks+:\n    - class_path: lightning.pytorch.callbacks.LambdaCallback\n"
          "      init_args: {{{hook}: {fn}}}\n")
LAMBDAS = [
    ("builtin-no-args", "on_train_start", "os.getcwd", ["on_train_start does not take (trainer, pl_module)",
                                                        "posix.getcwd"]),
    ("one-arg", "on_fit_end", f"{ME}.takes_trainer_only", ["on_fit_end does not take (trainer, pl_module)",
                                                           "takes_trainer_only"]),
    ("setup-without-stage", "setup", f"{ME}.setup_without_stage", ["setup does not take (trainer, pl_module, stage=...)"]),
    ("async", "on_train_start", f"{ME}.async_start", ["async def", "async_start"]),
]


@pytest.mark.parametrize("name,hook,fn,parts", LAMBDAS, ids=[c[0] for c in LAMBDAS])
def test_a_lambda_callback_hook_of_the_wrong_shape_is_one_line(tmp_path, capsys, monkeypatch, name, hook, fn, parts):
    monkeypatch.chdir(tmp_path)
    code, err = _fit(tmp_path, [], capsys, LAMBDA.format(hook=hook, fn=fn))
    _one_line(code, err, "trainer.callbacks[", "LambdaCallback(", *parts)
    _nothing_left(tmp_path)


def test_a_lambda_callback_hook_that_raises_is_named_by_the_guard(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, err = _fit(tmp_path, [], capsys, LAMBDA.format(hook="on_train_start", fn=f"{ME}.start_raises"))
    _one_line(code, err, "trainer.callbacks[", "LambdaCallback.on_train_start: start_raises (test_round13_components.py:",
              "raised KeyError", "label_map")
    _nothing_left(tmp_path)


# ------------------------------------------------------------------------------ 3. Lightning's tuner callbacks
class MyLRFinder(lightning.pytorch.callbacks.LearningRateFinder):
    pass


class WritesTunerFileThenRaises(lightning.Callback):
    """stands for a tuner failing inside its own search: its temporary checkpoint is on disk."""

    def on_fit_start(self, trainer, pl_module):
        Path(trainer.default_root_dir, ".lr_find_0000.ckpt").write_bytes(b"x")
        Path(trainer.default_root_dir, ".scale_batch_size_0000.ckpt").write_bytes(b"x")
        raise KeyError("label_map")


TUNERS = [("lr-finder", "lightning.pytorch.callbacks.LearningRateFinder", "LearningRateFinder", "model.lr"),
          ("batch-size-finder", "lightning.pytorch.callbacks.BatchSizeFinder", "BatchSizeFinder", "data.num_envs"),
          ("lr-finder-subclass", f"{ME}.MyLRFinder", "MyLRFinder", "model.lr")]


@pytest.mark.parametrize("name,path,cls,setting", TUNERS, ids=[c[0] for c in TUNERS])
def test_a_tuner_callback_is_refused_up_front(tmp_path, capsys, monkeypatch, name, path, cls, setting):
    monkeypatch.chdir(tmp_path)
    code, err = _fit(tmp_path, ["--trainer.callbacks+", path], capsys)
    _one_line(code, err, "trainer.callbacks[4]: ", f"{cls} cannot tune a PPO run", setting)
    _nothing_left(tmp_path)  # no .lr_find_*.ckpt, no run folder


def test_a_failed_fit_leaves_no_tuner_checkpoint(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, err = _fit(tmp_path, ["--trainer.callbacks+", f"{ME}.WritesTunerFileThenRaises"], capsys)
    _one_line(code, err, "WritesTunerFileThenRaises.on_fit_start", "label_map")
    _nothing_left(tmp_path)


# ------------------------------------------------------------------------------ 5. a hook replacing the policy
class ReplacesPolicy(RolloutCallback):
    """replaces (or deletes) pl_module.policy in `hook` with `what`."""

    def __init__(self, what: str = "none", hook: str = "on_rollout_end"):
        self.what, self.hook = what, hook

    def _act(self, pl_module):
        if self.what == "delete":
            del pl_module.policy
        else:
            pl_module.policy = {"none": None, "module": torch.nn.Linear(2, 2)}[self.what]

    def on_rollout_end(self, trainer, pl_module, rollout):
        if self.hook == "on_rollout_end":
            self._act(pl_module)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.hook == "on_train_batch_start":
            self._act(pl_module)


POLICY = [("none", "on_rollout_end", "replaced pl_module.policy with None"),
          ("delete", "on_rollout_end", "deleted pl_module.policy"),
          ("module", "on_train_batch_start", "replaced pl_module.policy with another Linear object")]


@pytest.mark.parametrize("what,hook,says", POLICY, ids=[c[0] for c in POLICY])
def test_a_hook_replacing_the_policy_is_named(tmp_path, capsys, monkeypatch, what, hook, says):
    monkeypatch.chdir(tmp_path)
    yaml = (f"trainer:\n  callbacks+:\n    - class_path: {ME}.ReplacesPolicy\n"
            f"      init_args: {{what: {what}, hook: {hook}}}\n")
    code, err = _fit(tmp_path, [], capsys, yaml)
    _one_line(code, err, f"trainer.callbacks[4]: ReplacesPolicy.{hook} {says}", "leave pl_module.policy in place")
    if hook == "on_rollout_end":  # before the first rollout was handed over: the run folder goes too
        _nothing_left(tmp_path)
    assert not [p for p in tmp_path.rglob("*") if p.suffix in (".ckpt", ".partial")]  # stopped before any save


# ------------------------------------------------------------------------------ 4. values a user's reward returns
class ScheduleReturns(Schedule):
    """a λ schedule whose value is `what`."""

    def __init__(self, what: str = "nan"):
        self.what = what

    def value(self, position):
        return {"nan": float("nan"), "inf": float("inf"), "string": "0.1", "none": None,
                "two-values": torch.tensor([0.1, 0.2]), "bool": True}[self.what]


class ScheduleReturnsTensor(Schedule):
    """correct: a one-element tensor reads as its number."""

    def value(self, position):
        return torch.tensor(0.05)


class BonusReturns(PARLReward):
    """a reward whose bonus() returns `what` instead of the float tensor."""

    def __init__(self, max_subagents: int, what: str = "int64"):
        super().__init__(max_subagents)
        self.what = what

    def bonus(self, n_subagents, assigned, completed, *, validate=True):
        good = super().bonus(n_subagents, assigned, completed, validate=validate)
        return {"int64": good.long(), "bool": good > 0, "nan": good * float("nan"), "inf": good + float("inf"),
                "float": 0.1, "shape": good[None], "scalar": good.sum(), "meta": good.to("meta")}[self.what]


class TermsReturns(PARLReward):
    """a reward whose terms() returns integer tensors, or two of them."""

    def __init__(self, max_subagents: int, what: str = "int64"):
        super().__init__(max_subagents)
        self.what = what

    def terms(self, n_subagents, assigned, completed, outcome, *, validate=True):
        terms = super().terms(n_subagents, assigned, completed, outcome, validate=validate)
        return tuple(t.long() for t in terms) if self.what == "int64" else terms[:2]


SCHEDULES = [("nan", "returned nan"), ("inf", "returned inf"), ("string", "returned '0.1'"),
             ("none", "returned a NoneType"), ("two-values", "returned a Tensor"), ("bool", "returned True")]


@pytest.mark.parametrize("what,says", SCHEDULES, ids=[c[0] for c in SCHEDULES])
def test_a_schedule_value_that_is_not_a_finite_number_is_named(tmp_path, capsys, monkeypatch, what, says):
    monkeypatch.chdir(tmp_path)
    yaml = REWARD.format(cls="parlightning.parl.reward.PARLReward",
                         more=f"      lambda1:\n        class_path: {ME}.ScheduleReturns\n        init_args: {{what: {what}}}\n")
    code, err = _fit(tmp_path, [], capsys, yaml)
    _one_line(code, err, "data.reward.lambda1: ScheduleReturns.value(position=0) ", says, "finite real number")
    _nothing_left(tmp_path)


BONUSES = [("int64", "returned an int64 tensor", "truncates"), ("bool", "returned a bool tensor", "floating"),
           ("nan", "returned NaN or inf", "finite"), ("inf", "returned NaN or inf", "finite"),
           ("float", "returned a float;", "floating tensor"), ("shape", "returned shape [1, ", "floating tensor"),
           ("scalar", "returned shape []", "floating tensor"), ("meta", "returned a tensor on meta", "on cpu")]


@pytest.mark.parametrize("what,says,fix", BONUSES, ids=[c[0] for c in BONUSES])
def test_a_reward_bonus_of_the_wrong_kind_is_named(tmp_path, capsys, monkeypatch, what, says, fix):
    monkeypatch.chdir(tmp_path)
    yaml = REWARD.format(cls=f"{ME}.BonusReturns", more=f"      what: {what}\n")
    code, err = _fit(tmp_path, [], capsys, yaml)
    _one_line(code, err, "data.reward: BonusReturns.bonus ", says, fix)
    _nothing_left(tmp_path)


@pytest.mark.parametrize("what,says", [("int64", "terms returned an int64 tensor"), ("two", "terms returned a tuple")])
def test_a_reward_terms_of_the_wrong_kind_is_named(tmp_path, capsys, monkeypatch, what, says):
    monkeypatch.chdir(tmp_path)
    code, err = _fit(tmp_path, [], capsys, REWARD.format(cls=f"{ME}.TermsReturns", more=f"      what: {what}\n"))
    _one_line(code, err, f"data.reward: TermsReturns.{says}")
    _nothing_left(tmp_path)


def test_a_schedule_returning_a_one_element_tensor_trains(tmp_path, capsys, monkeypatch):
    from parlightning.parl.reward import schedule_value

    assert schedule_value("lambda1", ScheduleReturnsTensor(), 0) == pytest.approx(0.05)


# ------------------------------------------------------------------------------ 7. a built-in world's step(action) range
def _worlds():
    from parlightning.envs import CartPoleEnv

    return {"swarm": lambda: SwarmEnv(num_envs=4), "cartpole": lambda: CartPoleEnv(4)}


STEPS = [("swarm", lambda a: a.fill_(9), "0..6", "got 9 at [0, 0]"),
         ("swarm", lambda a: a.index_fill_(0, torch.tensor([2]), -1), "0..6", "got -1 at [2, 0]"),
         ("cartpole", lambda a: a.fill_(5), "0..1", "got 5 at [0]"),
         ("cartpole", lambda a: a.index_fill_(0, torch.tensor([3]), -2), "0..1", "got -2 at [3]")]


@pytest.mark.parametrize("world,spoil,range_,got", STEPS, ids=[f"{s[0]}-{s[3]}" for s in STEPS])
def test_a_builtin_world_step_refuses_actions_out_of_range(world, spoil, range_, got):
    from parlightning.errors import ArgumentError

    env = _worlds()[world]()
    env.reset(seed=0)
    spec = env.action_spec
    action = spoil(torch.zeros((env.num_envs, *spec.action_shape), dtype=torch.long))
    with pytest.raises(ArgumentError) as err:
        env.step(action)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"{type(env).__name__}.step(action): every entry must lie in {range_}"), text
    assert got in text, text


@pytest.mark.parametrize("world", ["swarm", "cartpole"])
def test_a_vouched_action_is_not_read_and_a_changed_one_is_checked_again(world):
    from parlightning.envs.base import vouch_actions
    from parlightning.errors import ArgumentError

    env = _worlds()[world]()
    env.reset(seed=0)
    action = torch.zeros((env.num_envs, *env.action_spec.action_shape), dtype=torch.long)
    env.step(vouch_actions(action, env.action_spec))  # in range and vouched: accepted without a read
    action.fill_(99)  # changed in place after the vouch: its version moved, so it is read again
    with pytest.raises(ArgumentError, match="every entry must lie in"):
        env.step(action)


@pytest.mark.parametrize("world", ["swarm", "cartpole"])
def test_wrong_dtype_or_shape_actions_stay_refused(world):
    from parlightning.errors import ArgumentError

    env = _worlds()[world]()
    env.reset(seed=0)
    shape = (env.num_envs, *env.action_spec.action_shape)
    for bad in (torch.zeros(shape), torch.zeros((env.num_envs + 1, *shape[1:]), dtype=torch.long),
                torch.zeros(shape, dtype=torch.bool)):
        with pytest.raises(ArgumentError, match=r"step\(action\)"):
            env.step(bad)


# ------------------------------------------------------------------------------ 6. a signal at each phase of a fit
SLEEPER = '''
import os, time
import lightning


class SleepAt(lightning.Callback):
    """marks its pid at `hook` (in iteration `epoch`; -1: any) and sleeps there: a moment for the signal."""

    def __init__(self, hook: str = "teardown", epoch: int = -1, seconds: float = 4.0):
        self.hook, self.epoch, self.seconds = hook, epoch, seconds

    def _at(self, name, trainer):
        if name == self.hook and self.epoch in (-1, trainer.current_epoch):
            with open(os.environ["R13_MARKER"], "a") as f:
                f.write(f"{os.getpid()}\\n")
            time.sleep(self.seconds)

    def setup(self, trainer, pl_module, stage):
        self._at("setup", trainer)

    def teardown(self, trainer, pl_module, stage):
        self._at("teardown", trainer)

    def on_train_epoch_start(self, trainer, pl_module):
        self._at("on_train_epoch_start", trainer)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._at("on_train_batch_start", trainer)
'''

PHASES = [  # (phase, hook, epoch, max_epochs, signal, what the line says, run folder kept, a checkpoint kept)
    ("setup", "setup", -1, 1, "SIGTERM", "before the run's first rollout; nothing was kept", False, False),
    ("first-iteration", "on_train_batch_start", 0, 2, "SIGTERM", "before its first checkpoint was written", True,
     False),
    ("later-iteration", "on_train_epoch_start", 1, 3, "SIGTERM", "is intact: resume with --ckpt_path ", True, True),
    ("teardown", "teardown", -1, 1, "SIGTERM", "after training finished", True, True),
    ("teardown-sighup", "teardown", -1, 1, "SIGHUP", "after training finished", True, True),
]


@pytest.mark.parametrize("phase,hook,epoch,epochs,signame,says,folder,ckpt", PHASES, ids=[p[0] for p in PHASES])
def test_a_signal_says_what_its_phase_kept(tmp_path, phase, hook, epoch, epochs, signame, says, folder, ckpt):
    import signal
    import subprocess
    import sys
    import time

    root = Path(__file__).resolve().parents[1]
    (tmp_path / "r13sleep.py").write_text(SLEEPER)
    (tmp_path / "c.yaml").write_text(f"trainer:\n  callbacks+:\n    - class_path: r13sleep.SleepAt\n"
                                     f"      init_args: {{hook: {hook}, epoch: {epoch}, seconds: 4}}\n")
    marker = tmp_path / "mark"
    env = {**os.environ, "R13_MARKER": str(marker),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root), os.environ.get("PYTHONPATH", "")])}
    args = [a if a != "1" or i != 3 else str(epochs) for i, a in enumerate(TINY)]
    proc = subprocess.Popen([sys.executable, "-m", "parlightning.fit", *args, "--config", "c.yaml"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 180
        while not (marker.exists() and marker.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the run never reached the phase"
        proc.send_signal(getattr(signal, signame))
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert proc.returncode == 128 + getattr(signal, signame), err[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"error: {signame}: ") and "Traceback" not in err, err[-2000:]
    assert says in lines[0], lines[0]
    assert (tmp_path / "lightning_logs").exists() == folder, lines[0]
    ckpts = list(tmp_path.rglob("*.ckpt"))
    assert bool(ckpts) == ckpt, (ckpts, lines[0])
    assert not list(tmp_path.rglob("*.partial"))
    if ckpt and "--ckpt_path " in lines[0]:
        named = lines[0].split("--ckpt_path ", 1)[1].split()[0]
        assert os.path.isfile(named) or os.path.isfile(tmp_path / named), named  # the file the line names exists


def _keeps(fn):
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


class RewardDecoratedInit(PARLReward):  # correct: a decorated __init__ that calls super().__init__
    @_keeps
    def __init__(self, max_subagents: int):
        super().__init__(max_subagents)


class RewardAssignsBaseInit(PARLReward):  # correct: the base's own __init__ under the subclass's name
    __init__ = PARLReward.__init__


def test_a_decorated_or_inherited_init_reaching_the_base_is_accepted():
    from parlightning.runtime.subclass_init import base_init_error

    assert base_init_error("data.reward", RewardDecoratedInit) is None
    assert base_init_error("data.reward", RewardAssignsBaseInit) is None
    assert "RewardForgetsSuper.__init__ never calls super().__init__" in base_init_error("data.reward",
                                                                                        RewardForgetsSuper)


def test_a_signal_after_the_run_folder_is_claimed_and_before_the_fit_leaves_nothing(tmp_path, capsys, monkeypatch):
    import signal

    import parlightning.cli.fit as fit_cli
    from parlightning.cli.stop_signals import Signalled

    def signalled(*args, **kwargs):  # the moment between claiming version_N and Lightning's own handling
        assert list(tmp_path.rglob("version_*")), "the run's folder is claimed by now"
        raise Signalled(signal.SIGTERM, fit_cli.NOT_STARTED)

    monkeypatch.setattr(fit_cli, "_end_cleanly_when_a_rank_fails", signalled)
    monkeypatch.chdir(tmp_path)
    code, err = _fit(tmp_path, [], capsys)
    assert code == 128 + signal.SIGTERM
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert lines == ["error: SIGTERM: stopped by a signal (from a scheduler, a shell, or user code such as a world) "
                     "before the run's first rollout; nothing was kept"], err[-2000:]
    _nothing_left(tmp_path)
