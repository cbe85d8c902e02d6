"""Round 7 of the bad-input corpus (scripts/bad_inputs_round7.py), its --quick subset: one case per
class of input the round found unclean on the code before its fixes (a world without num_envs /
device, an ActionSpec nvec given as an int, a world calling sys.exit mid-run, non-finite episode
parts, a task_ids property raising, a family listed twice, world_kwargs of the wrong plain type, a
strategy name that is not a string, a rollout hook without its arguments, an async hook, a
ModelCheckpoint filename that does not parse, a bad map_location, a pool spawn without a mapping, a
bad --override in scripts/tune.py). Every case must end with one `error:` line naming the field or
component, a non-zero exit, no traceback and nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.corpus_check import assert_quick_subset_clean

ROOT = Path(__file__).resolve().parents[1]


def test_round7_quick_subset_is_clean() -> None:
    assert_quick_subset_clean("bad_inputs_round7.py", min_cases=12)


def test_action_spec_refuses_a_number_for_nvec_and_keeps_tuples() -> None:
    from parlightning.envs.base import ActionSpec

    with pytest.raises(ValueError, match=r"nvec=\(3,\)"):
        ActionSpec("discrete", nvec=3)
    with pytest.raises(ValueError, match="shape"):
        ActionSpec("continuous", shape=2)
    assert ActionSpec("multi_discrete", nvec=[2, 3]).nvec == (2, 3)


def test_parts_check_flags_one_non_finite_field() -> None:
    """The counts-and-steps check flags a row where any one field is NaN or negative (it used to
    need all of them bad); the check is `envs.contract.parts_rows_problem`, the step loop's and the probe's."""
    from parlightning.envs.contract import parts_rows_problem

    good = [1.0, 1.0, 2.0, 2.0, 2.0, 5.0, 9.0]  # task, outcome, n_subagents, assigned, completed, critical, serial
    for col, bad_value, field in ((5, float("nan"), "critical_steps"), (2, -1.0, "n_subagents")):
        row = list(good)
        row[col] = bad_value
        assert parts_rows_problem(torch.tensor([good, row]), 4) == (field, 1, "finite and >= 0")
    assert parts_rows_problem(torch.tensor([good, good]), 4) is None


def test_strategy_name_must_be_a_string() -> None:
    from parlightning.distribution.planning import checked_strategy
    from parlightning.errors import ConfigError

    class Nameless:
        name = 3

        def plan(self, n_workers, round_index, keys):
            return []

    with pytest.raises(ConfigError, match="name"):
        checked_strategy(Nameless())


def test_callback_hooks_are_checked() -> None:
    from parlightning.callbacks import RolloutCallback
    from parlightning.cli.fit import check_callbacks
    from parlightning.errors import ConfigError

    class NoRound(RolloutCallback):
        def on_rollout_start(self, trainer, pl_module):
            pass

    class Async(RolloutCallback):
        async def on_rollout_end(self, trainer, pl_module, rollout):
            pass

    class Fine(RolloutCallback):
        def on_episodes_end(self, trainer, pl_module, task_ids, parts):
            pass

    with pytest.raises(ConfigError, match="round_index"):
        check_callbacks([NoRound()])
    with pytest.raises(ConfigError, match="async"):
        check_callbacks([Async()])
    check_callbacks([Fine(), RolloutCallback()])


def test_simulated_pool_spawn_needs_a_mapping() -> None:
    from parlightning.subagents import SimulatedPool

    with pytest.raises(TypeError, match="mapping"):
        SimulatedPool().spawn(None)


def test_a_clean_sys_exit_from_user_code_passes_through_and_a_failing_one_is_one_line() -> None:
    """sys.exit() / sys.exit(0) in a user's code (a script's deliberate early stop, e.g.
    scripts/bench_throughput.py's) ends fit as an exit; sys.exit(3) is reported like any error."""
    from parlightning.cli.fit import user_code_error

    lines = {}
    for code in (None, 0, 3):
        try:
            raise SystemExit(code)
        except SystemExit as err:
            lines[code] = user_code_error(err)
    assert lines[None] is None and lines[0] is None
    assert lines[3] is not None and "SystemExit" in lines[3] and "test_bad_inputs_round7.py" in lines[3], lines[3]
