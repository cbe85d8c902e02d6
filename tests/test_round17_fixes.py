"""Round 17's classes (`scripts/bad_inputs_round17.py`, measured before these fixes): a class_path that
does not import (or imports the wrong kind) in a union slot such as `trainer.logger`; a logger's
numbers out of range; a re-stamped checkpoint whose optimizer
second moments are negative, whose data-module state lacks a part or whose world counters are out of
range; evaluate's `--gantt` for a world that records no rounds and a misspelt `trainer:` key in its
config; export of a checkpoint with weights its hyper-parameters do not build; a wrapper's world named
after the user's class; completed subtasks above assigned; an AsyncHTTPPool whose endpoint answers
nothing usable; a callback writing NaN gradients; a reward whose state is no dict; a Lightning hook
failing in the user's logger; public functions given a path, a list or a value out of range."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from parlightning.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SWARM = str(ROOT / "configs" / "swarm.yaml")
TINY = ["--data.num_envs", "8", "--data.num_steps", "8", "--trainer.max_epochs", "1",
        "--trainer.enable_model_summary", "false", "--trainer.enable_progress_bar", "false"]


# ---------------------------------------------------------------------------------- config lines
NEPTUNE = '''Parser key "trainer.logger":

  - Expected a path but lightning.pytorch.loggers.NeptuneLogger either not accessible or invalid
  - Does not validate against any of the Union subtypes
  Subtypes: [<class 'lightning.pytorch.loggers.logger.Logger'>, <class 'bool'>, <class 'NoneType'>]
  Errors:
    - Problem with given class_path 'lightning.pytorch.loggers.NeptuneLogger':
        module 'lightning.pytorch.loggers' has no attribute 'NeptuneLogger'
    - Expected a <class 'bool'>
    - Expected a <class 'NoneType'>
  Given value type: <class 'str'>
  Given value: lightning.pytorch.loggers.NeptuneLogger'''


def test_a_class_path_that_does_not_import_in_a_union_slot_is_named_not_read_as_a_bool():
    from parlightning.errors import parser_error_line

    line = parser_error_line(NEPTUNE)
    assert line.startswith("trainer.logger: class_path 'lightning.pytorch.loggers.NeptuneLogger' cannot be imported "
                           "(module 'lightning.pytorch.loggers' has no attribute 'NeptuneLogger')"), line
    wrong_kind = NEPTUNE.replace("    - Problem with given class_path 'lightning.pytorch.loggers.NeptuneLogger':\n"
                                 "        module 'lightning.pytorch.loggers' has no attribute 'NeptuneLogger'",
                                 "    - Import path does not correspond to a subclass of Logger")
    line = parser_error_line(wrong_kind)
    assert line.startswith("trainer.logger: lightning.pytorch.loggers.NeptuneLogger is not a Logger class"), line
    assert "lightning.pytorch.loggers.TensorBoardLogger" in line, line
    nested = ('Parser key "trainer.logger":\n  Does not validate against any of the Union subtypes\n  Errors:\n'
              "    - Expected an instantiatable class, but lightning.pytorch.loggers.Logger is abstract\n"
              "    - Expected a <class 'bool'>\n  Given value type: <class 'jsonargparse._util.NestedArg'>\n"
              "  Given value: NestedArg(key='flush_secs', val='abc')")
    line = parser_error_line(nested)
    assert line.startswith("trainer.logger.init_args.flush_secs: trainer.logger names no class yet"), line


@pytest.mark.parametrize("entry, says", [
    ({"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": {"flush_secs": -5}},
     "trainer.logger: TensorBoardLogger flush_secs: must be > 0, got -5"),
    ({"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": {"flush_secs": 0}},
     "trainer.logger: TensorBoardLogger flush_secs: must be > 0, got 0"),
    ({"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"flush_logs_every_n_steps": 0}},
     "trainer.logger: CSVLogger flush_logs_every_n_steps: must be >= 1, got 0"),
])
def test_a_loggers_numbers_out_of_range_are_refused_up_front(entry, says):
    from parlightning.runtime.preflight import _check_callback_args

    with pytest.raises(ConfigError) as err:
        _check_callback_args(entry, "trainer.logger")
    assert str(err.value) == says
    _check_callback_args({**entry, "init_args": {"flush_secs": 30, "flush_logs_every_n_steps": 10}}, "trainer.logger")


# ---------------------------------------------------------------------------------- checkpoints
def test_a_negative_second_moment_is_refused_at_load():
    from parlightning.runtime.checkpoint import stamp_checkpoint, verify_checkpoint

    state = {0: {"step": torch.tensor(3.0), "exp_avg": torch.zeros(2), "exp_avg_sq": -torch.ones(2)}}
    checkpoint = stamp_checkpoint({"state_dict": {}, "optimizer_states": [{"state": state}]})
    with pytest.raises(ConfigError, match=r"holds a negative second moment .*\(optimizer_states/0/state/0/exp_avg_sq\)"):
        verify_checkpoint(checkpoint, "c.ckpt")
    state[0]["exp_avg_sq"] = torch.ones(2)
    verify_checkpoint(stamp_checkpoint({"state_dict": {}, "optimizer_states": [{"state": state}]}), "c.ckpt")


@pytest.mark.parametrize("edit, says", [
    (lambda dm: dm["ranks"][0].pop("action_generator"),
     "--ckpt_path: the checkpoint's RolloutDataModule.ranks[0] cannot be restored (KeyError: 'action_generator')"),
    (lambda dm: dm.__setitem__("reward", {}),
     "--ckpt_path: the checkpoint's RolloutDataModule.reward cannot be restored (ValueError: PARLReward.load_state_dict:"
     " missing 'position'"),
    (lambda dm: dm["ranks"][0]["env"]["elapsed"].fill_(-50.0),
     "SwarmEnv.load_state_dict(state): state['elapsed'] holds a value outside what a step writes"),
    (lambda dm: dm["ranks"][0]["env"]["task"].fill_(10**6),
     "SwarmEnv.load_state_dict(state): state['task'] holds a value outside what a step writes (it is in 0.."),
])
def test_a_restamped_data_module_state_that_cannot_be_restored_is_one_line(ckpt, tmp_path, monkeypatch, edit, says):
    from parlightning import fit
    from parlightning.runtime.checkpoint import stamp_checkpoint

    ck = torch.load(ckpt, weights_only=True)
    edit(ck["RolloutDataModule"])
    torch.save(stamp_checkpoint(ck), tmp_path / "c.ckpt")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        fit(SWARM, [*TINY, "--trainer.max_epochs", "2", "--ckpt_path", str(tmp_path / "c.ckpt")])
    assert says in str(err.value), str(err.value)


def test_export_names_weights_its_hyper_parameters_do_not_build(ckpt, tmp_path):
    from parlightning.cli.export import load_policy
    from parlightning.runtime.checkpoint import stamp_checkpoint

    ck = torch.load(ckpt, weights_only=True)
    ck["state_dict"]["policy.actor.9.weight"] = torch.zeros(3, 3)
    torch.save(stamp_checkpoint(ck), tmp_path / "c.ckpt")
    with pytest.raises(ConfigError, match=r"its weights do not fit the policy its own policy_spaces and hyper_parameters "
                                          r"build \(unexpected \['actor.9.weight'\]\):"):
        load_policy(str(tmp_path / "c.ckpt"))
    policy, shape = load_policy(ckpt)  # the unedited file still exports
    assert shape == tuple(ck["policy_spaces"]["observation_shape"])


# ---------------------------------------------------------------------------------- evaluate
class _NoRounds:
    """A world with tasks that records no rounds (no last_round): nothing for --gantt to draw."""

    def __init__(self, num_envs, device="cpu", seed=0):
        from parlightning.envs.base import ActionSpec

        self.num_envs, self.device = num_envs, torch.device(device)
        self.observation_shape, self.action_spec = (2,), ActionSpec("discrete", nvec=(2,))
        self.task_ids = ["a", "b"]


def test_evaluate_refuses_a_gantt_of_a_world_without_rounds_and_a_misspelt_trainer_key(tmp_path, monkeypatch):
    import argparse

    from parlightning.cli import evaluate

    monkeypatch.setattr(evaluate, "build_env", lambda cls, init, n, seed, split, device: cls(n, device, seed))
    a = argparse.Namespace(split=None, seed=0, device="cpu", gantt=str(tmp_path / "g.png"))
    with pytest.raises(ConfigError, match=r"^--gantt: _NoRounds does not record its rounds"):
        evaluate.evaluate_one(a, _NoRounds, {})
    (tmp_path / "c.yaml").write_text("trainer: {max_epoch: 3}\n")
    with pytest.raises(ConfigError, match=r"unknown key trainer\.'max_epoch'; did you mean 'max_epochs'\?"):
        evaluate.checked_config(str(tmp_path / "c.yaml"))
    (tmp_path / "ok.yaml").write_text("trainer: {max_epochs: 3}\n")
    assert evaluate.checked_config(str(tmp_path / "ok.yaml")) == {"trainer": {"max_epochs": 3}}


# ---------------------------------------------------------------------------------- worlds and pools
def test_more_completed_than_assigned_subtasks_is_a_parts_problem():
    from parlightning.envs.contract import parts_rows_problem

    ok = torch.tensor([[0.0, 1.0, 2.0, 2.0, 2.0, 3.0, 5.0]])
    assert parts_rows_problem(ok, 4) is None
    over = ok.clone()
    over[0, 4] = 4.0
    field, row, need = parts_rows_problem(torch.cat([ok, over]), 4)
    assert (field, row) == ("completed", 1) and need.startswith("at most assigned"), need
    nan_outcome = over.clone()
    nan_outcome[0, 1] = float("nan")  # an earlier field's fault is reported first
    assert parts_rows_problem(nan_outcome, 4)[0] == "outcome"


def test_the_step_loop_names_the_users_world_inside_a_wrapper():
    from types import SimpleNamespace

    from parlightning.collection.step_loop import StepLoop
    from parlightning.envs.cartpole import CartPoleEnv
    from parlightning.envs.normalize import NormalizeEnv
    from parlightning.errors import ReportedError

    class MyWorld(CartPoleEnv):
        pass

    loop = SimpleNamespace(env=NormalizeEnv(2, env=MyWorld), task_ids=["a", "b"])
    parts = torch.tensor([[[0.0, 2.0, 1.0, 1.0, 1.0, 3.0, 3.0]]])  # [T=1, N=1, fields]: outcome 2
    buf = SimpleNamespace(has_parts=True, parts=parts, done=torch.tensor([[True]]))
    with pytest.raises(ReportedError, match=r"^data.env: NormalizeEnv\(MyWorld\).step returned episode parts with "
                                            r"outcome not in \[0, 1\] in rollout 3"):
        StepLoop.check_parts(loop, buf, 3)


def test_an_async_pool_whose_endpoint_answers_nothing_usable_stops_naming_the_url():
    pytest.importorskip("aiohttp")
    import http.server
    import threading

    from parlightning.subagents.async_http import AsyncHTTPPool, PoolUnreachable

    class Overloaded(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (the standard library's name)
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b'{"error": {"message": "overloaded"}}'
            self.send_response(503)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Overloaded)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    pool = AsyncHTTPPool(f"http://127.0.0.1:{server.server_address[1]}/v1", retries=0, backoff=0.0,
                         max_endpoint_failures=3)
    try:
        for _ in range(2):  # failed subagents, counted
            (result,) = pool.wait([pool.spawn("task")])
            assert not result.success and "HTTP 503" in result.error
        handle = pool.spawn("task")  # the third in a row: the pool stops, naming the URL and the last answer
        with pytest.raises(PoolUnreachable, match=r"3 calls in a row got no usable answer after their retries "
                                                  r"\(last: HTTP 503"):
            pool.wait([handle])
        with pytest.raises(PoolUnreachable):
            pool.spawn("task")
    finally:
        pool.close()
        server.shutdown()


# ---------------------------------------------------------------------------------- user code
def test_a_callback_that_writes_nan_gradients_is_named(tmp_path):
    import lightning

    from parlightning import fit

    (tmp_path / "r17cb.py").write_text(
        "import lightning\n\n\nclass NaNGradients(lightning.Callback):\n"
        "    def on_before_optimizer_step(self, trainer, pl_module, optimizer):\n"
        "        for p in pl_module.parameters():\n"
        "            if p.grad is not None:\n"
        "                p.grad.fill_(float('nan'))\n")
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(Exception) as err:
            fit(SWARM, [*TINY, "--trainer.default_root_dir", str(tmp_path), "--trainer.callbacks+", "r17cb.NaNGradients"])
    finally:
        sys.path.remove(str(tmp_path))
    assert "NaNGradients.on_before_optimizer_step left NaN or inf in the gradients" in str(err.value), str(err.value)
    assert lightning is not None


def test_a_reward_whose_state_is_not_a_dict_is_refused_by_the_probe():
    from parlightning.parl.reward import PARLReward
    from parlightning.ppo.data import RolloutDataModule
    from parlightning.runtime.preflight import check_datamodule

    class ListState(PARLReward):
        def state_dict(self):
            return [0]

    dm = RolloutDataModule(num_envs=4, num_steps=4, reward=ListState(max_subagents=8))
    with pytest.raises(ConfigError, match=r"^data.reward: ListState.state_dict returned a list, not a dict"):
        check_datamodule(dm)


def test_a_lightning_hook_failing_in_the_users_logger_names_the_logger(tmp_path):
    from parlightning.cli.user_code import _field_of
    from parlightning.envs.swarm import SwarmEnv

    class Logger(__import__("lightning").pytorch.loggers.Logger):
        @property
        def name(self):
            raise RuntimeError("no name yet")

        version = experiment = None
        log_hyperparams = log_metrics = None

    # the runtime protocols read attributes (this one raises): the logger's class is found first
    assert _field_of(Logger.__new__(Logger)) == "trainer.logger: "
    assert _field_of(SwarmEnv(num_envs=1)) == "data.env: "


# ---------------------------------------------------------------------------------- the Python API
@pytest.mark.parametrize("call, says", [
    (lambda: __import__("parlightning.runtime.checkpoint", fromlist=["x"]).stamp_checkpoint("swarm.ckpt"),
     r"stamp_checkpoint\(checkpoint\): must be the loaded checkpoint, a dict"),
    (lambda: __import__("parlightning.envs.normalize", fromlist=["x"]).normalizer_from_checkpoint("swarm.ckpt"),
     r"normalizer_from_checkpoint\(checkpoint\): must be the loaded checkpoint"),
    (lambda: __import__("parlightning.envs.normalize", fromlist=["x"]).saved_world_state([1, 2]),
     r"saved_world_state\(checkpoint\): must be the loaded checkpoint, a dict .* got list"),
    (lambda: __import__("parlightning.envs.normalize", fromlist=["x"]).RunningMeanStd((-1,), torch.device("cpu")),
     r"RunningMeanStd\(shape\): must be a tuple of sizes >= 1"),
    (lambda: __import__("parlightning.envs.normalize", fromlist=["x"]).normalize_obs(
        torch.zeros(2, 3), torch.zeros(3), torch.ones(3), 1e-8, -1.0), r"normalize_obs\(clip\): must be a finite number > 0"),
    (lambda: __import__("parlightning.parl.reward", fromlist=["x"]).PARLReward(8).load_state_dict({"position": "x"}),
     r"PARLReward.advance_to\(position\): must be an integer >= 0 .* got 'x'"),
    (lambda: __import__("parlightning.distribution.strategies", fromlist=["x"]).TensorParallel(n_sections=2, keys=[]),
     r"^TensorParallel: keys is empty"),
    (lambda: __import__("parlightning.buffer", fromlist=["x"]).gather_rows({"a": torch.zeros(4, 2)}, torch.tensor([7])),
     r"gather_rows\(idx\): indices must be in 0..3 \(the rows of fields\['a'\]\), got 7..7"),
    (lambda: __import__("parlightning.envs.swarm_tasks", fromlist=["x"]).oracle_split_index(
        torch.ones(4), torch.tensor([], dtype=torch.long)), r"oracle_split_index\(splits\): must be a 1-D tensor of at least one"),
    (lambda: __import__("parlightning.analysis.pipeline", fromlist=["x"]).blame_by_kind([1, 2]),
     r"blame_by_kind\(pairs\): every entry must be a StageBlame"),
])
def test_public_functions_refuse_a_wrong_argument_by_name(call, says):
    with pytest.raises((ConfigError, ValueError)) as err:
        call()
    assert __import__("re").search(says, str(err.value)), str(err.value)


def test_compute_gae_refuses_a_discount_outside_the_unit_interval_and_pipeline_chain_a_missing_policy():
    from parlightning.analysis.pipeline import PipelineChain
    from parlightning.buffer import compute_gae
    from parlightning.envs.swarm import SwarmEnv

    T, N = 3, 2
    z, f = torch.zeros(T, N), torch.zeros(T, N, dtype=torch.bool)
    with pytest.raises(ConfigError, match=r"compute_gae\(gamma\): must be a number in \[0, 1\]"):
        compute_gae(z, z, f, f, z, torch.zeros(N), 1.5, 0.95)
    advantages, returns = compute_gae(z + 1, z, f, f, z, torch.zeros(N), 1.0, 1.0)
    assert torch.equal(advantages[0], torch.full((N,), 3.0))
    with pytest.raises(ConfigError, match=r"PipelineChain: policy must be callable"):
        PipelineChain(SwarmEnv(num_envs=1), None, None)
