"""Round 10 of the bad-input corpus (scripts/bad_inputs_round10.py, written blind from the docs): its
--quick subset, one case per class of input the round found unclean on the code before its fixes
(containers in constructor arguments, a pool instruction's required keys, state dicts of another
component, module weights of other hyper-parameters, a contradictory ActionSpec, world facts out of
range, tensors on the meta device, a batched sampler's first picks out of the bank, dangling output
links, a resume into another world naming its settings, a hung user strategy before the first rollout,
a worker's unpicklable answer). The unit tests of those classes are tests/test_round10_values.py and
tests/test_round10_hangs.py."""

from __future__ import annotations

from tests.corpus_check import assert_quick_subset_clean


def test_round10_quick_subset_is_clean() -> None:
    assert_quick_subset_clean("bad_inputs_round10.py", min_cases=14)
