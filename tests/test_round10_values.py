"""Round 10's classes of bad values, one test per class (not per corpus case): each asserts the
package's exception type, that the message is one line, and the field it names.

1 container annotations (constructor and dataclass), 2 required instruction keys and sync pools'
functions, 3 load_state_dict's key set and per-key dtype/shape, 4 a module's weights of another
configuration, 5 ActionSpec's own consistency and the world facts the package reads, 6 tensors on
the meta device (masks, state_dicts), 7 a batched sampler's out-of-range picks at the first reset,
8 dangling symlinks where outputs go, 9 a resume into another world names the init args."""

from __future__ import annotations

import os

import pytest
import torch

from parlightning.errors import ArgumentError, ConfigError, ReportedError


def _one_line(err: pytest.ExceptionInfo, *names: str) -> str:
    message = str(err.value)
    assert "\n" not in message, message
    for name in names:
        assert name in message, (name, message)
    return message


# ------------------------------------------------------------------ 1 containers
@pytest.mark.parametrize("build, names", [
    (lambda: __import__("parlightning.envs.external", fromlist=["x"]).ExternalBatchedEnv(
        2, world="parlightning.subagents.PoolOrchestrationWorld", world_kwargs=[1]),
     ("ExternalBatchedEnv.world_kwargs", "mapping")),
    (lambda: __import__("parlightning.distribution.strategies", fromlist=["x"]).WorkUnit(worker=0, keys=None),
     ("WorkUnit.keys", "list")),
    (lambda: __import__("parlightning.distribution.strategies", fromlist=["x"]).WorkUnit(worker=0, keys=[1, 2]),
     ("WorkUnit.keys",)),
    (lambda: __import__("parlightning.envs.swarm", fromlist=["x"]).SwarmEnv(num_envs=2, family_tasks=["solo"]),
     ("SwarmEnv.family_tasks", "mapping")),
    (lambda: __import__("parlightning.envs.gym", fromlist=["x"]).GymVectorEnv(2, env_id="CartPole-v1", wrappers="abc"),
     ("GymVectorEnv.wrappers", "list")),
], ids=["ext-world-kwargs-list", "workunit-keys-none", "workunit-keys-ints", "swarm-family-tasks-list",
        "gym-wrappers-string"])
def test_1_container_annotations_are_checked(build, names) -> None:
    with pytest.raises(ConfigError) as err:
        build()
    _one_line(err, *names)


# ------------------------------------------------------------------ 2 instructions and sync functions
async def async_fn(instruction):  # a subagent function a sync pool cannot call
    return {"success": True, "steps": 1}


def generator_fn(instruction):
    yield True


def test_2_required_keys_and_sync_functions() -> None:
    from parlightning.subagents import ProcessPool, SimulatedPool
    from parlightning.subagents.pool import normalize

    with pytest.raises(ArgumentError) as err:
        SimulatedPool().spawn({"skill": 0, "instruction": 0})
    _one_line(err, "SimulatedPool.spawn(instruction)", "'cost'")
    with pytest.raises(ArgumentError) as err:
        SimulatedPool().spawn({"skill": 0, "instruction": 0, "cost": "2"})
    _one_line(err, "['cost']", "finite number")
    for fn, says in ((async_fn, "async"), (generator_fn, "generator")):
        with pytest.raises(ConfigError) as err:
            ProcessPool(fn=f"{__name__}:{fn.__name__}")
        _one_line(err, "ProcessPool.fn", says, "plain `def`")
    coroutine = async_fn({})
    with pytest.raises(TypeError, match="returned a coroutine"):
        normalize(coroutine, 0.0)


# ------------------------------------------------------------------ 3 load_state_dict
def test_3_load_state_dict_checks_keys_dtypes_and_shapes() -> None:
    from parlightning.distribution.samplers import DifficultyWeighted, RoundRobin
    from parlightning.envs import CartPoleEnv
    from parlightning.envs.swarm import SwarmEnv

    with pytest.raises(ConfigError) as err:
        CartPoleEnv(8).load_state_dict(SwarmEnv(num_envs=8).state_dict())
    _one_line(err, "CartPoleEnv.load_state_dict(state)", "missing keys", "'num_envs'", "unexpected keys", "'task'")
    state = {**CartPoleEnv(8).state_dict(), "state": torch.zeros(8, 4, dtype=torch.float64)}
    with pytest.raises(ConfigError) as err:
        CartPoleEnv(8).load_state_dict(state)
    _one_line(err, "state['state']", "float64", "float32")
    swarm = SwarmEnv(num_envs=8)
    with pytest.raises(ConfigError) as err:
        swarm.load_state_dict(SwarmEnv(num_envs=4).state_dict())
    _one_line(err, "SwarmEnv.load_state_dict(state)", "state['task']", "num_envs=8")
    with pytest.raises(ConfigError) as err:
        RoundRobin().load_state_dict(DifficultyWeighted().state_dict())
    _one_line(err, "RoundRobin.load_state_dict(state)", "missing keys", "'cursor'")
    with pytest.raises(ConfigError) as err:
        DifficultyWeighted().load_state_dict(RoundRobin().state_dict())
    _one_line(err, "DifficultyWeighted.load_state_dict(state)", "'task_ids'")


# ------------------------------------------------------------------ 4 weights of another configuration
def test_4_module_weights_of_other_hparams_name_them() -> None:
    from parlightning.envs.base import ActionSpec
    from parlightning.ppo.module import PPOModule

    spec = ActionSpec("discrete", nvec=(3,))
    saved = PPOModule(hidden_sizes=[64, 64])
    saved.policy = saved.build_policy((4,), spec)
    here = PPOModule(hidden_sizes=[8])
    here.policy = here.build_policy((4,), spec)
    here.on_load_checkpoint({"hyper_parameters": dict(saved.hparams)})  # what load_from_checkpoint hands it
    with pytest.raises(ConfigError) as err:
        here.load_state_dict(saved.state_dict())
    _one_line(err, "hidden_sizes", "[64, 64] in the checkpoint", "[8] here")
    other = PPOModule(hidden_sizes=[64, 64])  # same hparams, another world: the shapes are named instead
    other.policy = other.build_policy((6,), spec)
    with pytest.raises(ConfigError) as err:
        other.load_state_dict(saved.state_dict())
    _one_line(err, "do not fit", "in the checkpoint")


# ------------------------------------------------------------------ 5 ActionSpec and world facts
@pytest.mark.parametrize("kw, field", [
    (dict(kind="discrete", nvec=(3,), shape=(2,)), "ActionSpec.shape"),
    (dict(kind="discrete", nvec=(3,), low=0.0), "ActionSpec.low"),
    (dict(kind="discrete", nvec=(2, 3)), "multi_discrete"),
    (dict(kind="continuous", shape=(2,), nvec=(3,)), "ActionSpec.nvec"),
    (dict(kind="multi_discrete", nvec=(2, 3), shape=(2,)), "ActionSpec.shape"),
    (dict(kind="continuous", shape=(2,), low=1.0, high=-1.0), "low=1.0"),
    (dict(kind="continuous", shape=(2,), high=float("inf")), "ActionSpec.high"),
])
def test_5_action_spec_fields_fit_its_kind(kw, field) -> None:
    from parlightning.envs.base import ActionSpec

    with pytest.raises(ConfigError) as err:
        ActionSpec(**kw)
    _one_line(err, field)


@pytest.mark.parametrize("attr, value", [("solved_threshold", 2.0), ("solved_threshold", "high"),
                                         ("solved_threshold", float("nan")), ("solved_threshold", True),
                                         ("max_subagents", 0), ("max_subagents", 2.5)])
def test_5_world_facts_are_checked_when_probed(attr, value) -> None:
    from parlightning.envs import CartPoleEnv
    from parlightning.runtime.preflight import check_env

    env = CartPoleEnv(2)
    setattr(env, attr, value)
    with pytest.raises(ConfigError) as err:
        check_env(env, 2, 0)
    _one_line(err, f"CartPoleEnv.{attr}: must be")


# ------------------------------------------------------------------ 6 meta tensors
def test_6_meta_tensors_are_named_with_their_component() -> None:
    from parlightning.envs.base import ActionSpec, check_action_mask
    from parlightning.method_args import check_real_tensors
    from parlightning.runtime.preflight import check_state

    spec = ActionSpec("discrete", nvec=(3,))
    with pytest.raises(ValueError) as err:
        check_action_mask(torch.ones(4, 3, dtype=torch.bool, device="meta"), spec, 4, "MyWorld.action_masks()")
    _one_line(err, "MyWorld.action_masks()", "meta")

    class MetaState:
        def state_dict(self):
            return {"t": torch.zeros(3), "inner": {"counts": torch.zeros(2, device="meta")}}

    with pytest.raises(ConfigError) as err:
        check_state("data.sampler", "MetaState", MetaState())  # the preflight probe
    _one_line(err, "data.sampler", "MetaState.state_dict()['inner']['counts']", "meta")
    with pytest.raises(ConfigError) as err:
        check_real_tensors("data.env", "MyWorld", {"t": torch.zeros(2, device="meta")})  # at each save
    _one_line(err, "data.env", "MyWorld.state_dict()['t']")


# ------------------------------------------------------------------ 7 out-of-range picks at the first reset
class OutOfBank:
    """A batched sampler whose picks are outside the bank (999), from the first reset on."""

    def bind(self, task_ids, device):
        self.n = len(task_ids)

    def pick_batch(self, shard, round_index, reset_mask, generator=None):
        return torch.full((reset_mask.shape[0],), 999, dtype=torch.long, device=reset_mask.device)

    def record_batch(self, task_index, score):
        pass


@pytest.mark.parametrize("value", [999, -1])
def test_7_out_of_range_first_picks_name_the_sampler(value) -> None:
    from parlightning.collection.collector import make_collector
    from parlightning.envs.swarm import SwarmEnv

    sampler = OutOfBank()
    sampler.pick_batch = lambda shard, r, mask, generator=None: torch.full((mask.shape[0],), value, dtype=torch.long)
    collector = make_collector(lambda num_envs, device, seed: SwarmEnv(num_envs=num_envs, device=device, seed=seed),
                               4, 4, 0, torch.device("cpu"))
    try:
        with pytest.raises(ReportedError) as err:
            collector.start(sampler)
        _one_line(err, "data.sampler", "OutOfBank.pick_batch", "outside the task bank")
    finally:
        collector.close()


# ------------------------------------------------------------------ 8 dangling links where outputs go
def test_8_dangling_links_are_refused_where_outputs_go(tmp_path) -> None:
    import argparse

    from parlightning.cli.arg_types import output_file, output_folder, output_path
    from parlightning.cli.outputs import check_output_file
    from parlightning.runtime.preflight import check_output_links

    link = tmp_path / "r.json"
    os.symlink(tmp_path / "missing" / "r.json", link)
    with pytest.raises(ConfigError) as err:
        check_output_file("--json", str(link))
    _one_line(err, "--json", "a link to", "does not exist")
    for arg_type in (output_file, output_folder, output_path):
        with pytest.raises(argparse.ArgumentTypeError, match="does not exist"):
            arg_type(str(link))
    below = tmp_path / "folder"
    os.symlink(tmp_path / "gone", below)
    trainer = {"default_root_dir": str(tmp_path), "logger": None,
               "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                              "init_args": {"dirpath": str(below / "ckpts")}}]}
    with pytest.raises(ConfigError) as err:
        check_output_links(trainer)
    _one_line(err, "ModelCheckpoint.dirpath", "goes through")
    trainer = {"default_root_dir": str(tmp_path),
               "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": str(link)}}}
    with pytest.raises(ConfigError) as err:
        check_output_links(trainer)
    _one_line(err, "trainer.logger.save_dir")


# ------------------------------------------------------------------ 9 a resume into another world
def test_9_resume_into_another_world_names_the_init_args() -> None:
    from parlightning.envs.swarm import SwarmEnv
    from parlightning.runtime.checkpoint import check_env_signature
    from parlightning.runtime.preflight import env_signature

    saved = env_signature(SwarmEnv(num_envs=2))
    ours = env_signature(SwarmEnv(num_envs=2, max_width=8, max_cost=5))
    with pytest.raises(ConfigError) as err:
        check_env_signature("last.ckpt", saved, ours)
    message = _one_line(err, "data.env.init_args.max_cost is 10 in the checkpoint but 5 here",
                        "data.env.init_args.max_width is 12 in the checkpoint but 8 here", "action_spec")
    assert message.startswith("data.env.init_args.max_cost:"), message
