"""Round 6 of the bad-input corpus (scripts/bad_inputs_round6.py), its --quick subset: one case per
class of input the round found unclean on the code before its fixes (an action spec that
contradicts itself, a world's step without next_task, episode parts from a world without a task
bank, rollout hooks on a callback that is not a RolloutCallback, a non-finite value from an external
world, an external world's task bank given as one string, start_method without workers, a
world_kwargs key that a shared resource overrides, untyped shared-resource arguments, evaluate's
--gantt format and --sample with a scripted policy, the public constructors, the scripts' arguments).
Every case must end with one `error:` line naming the field or component, a non-zero exit, no
traceback and nothing written."""

from __future__ import annotations

from tests.corpus_check import assert_quick_subset_clean


def test_round6_quick_subset_is_clean() -> None:
    assert_quick_subset_clean("bad_inputs_round6.py", min_cases=12)
