"""Round 5 of the bad-input corpus (scripts/bad_inputs_round5.py), its --quick subset: one case per
class of input the round found unclean on the code before its fixes (a world that changes its
answers after the preflight probe, state a checkpoint cannot load back, trainer precisions the
rollout cannot run, an output that is a device, a rank variable left in the environment, ...).
Every case must end with one `error:` line naming the field or component, a non-zero exit, no
traceback and nothing written."""

from __future__ import annotations

from tests.corpus_check import assert_quick_subset_clean


def test_round5_quick_subset_is_clean() -> None:
    assert_quick_subset_clean("bad_inputs_round5.py", min_cases=10)
