"""The bad-input corpus (`scripts/bad_inputs.py --quick`): a subset of every kind (arguments,
config files, checkpoints, faulty worlds) through the real CLI, each one clean: one `error:` line,
a non-zero exit, no traceback, nothing written, no hang."""

import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import bad_inputs  # noqa: E402


def test_the_corpus_has_at_least_150_cases_of_every_kind():
    cases = bad_inputs.corpus()
    assert len(cases) >= 150 and len({(c.kind, c.name) for c in cases}) >= 150
    kinds = {c.kind for c in cases}
    assert kinds == {"argument", "config", "checkpoint", "world"}
    assert {c.kind for c in cases if c.quick} == kinds


def test_the_classifier_tells_the_outcomes_apart():
    assert bad_inputs.classify(1, "warning\nerror: model.lr: must be positive\n", []) == "clean"
    assert bad_inputs.classify(None, "", []) == "hang"
    assert bad_inputs.classify(0, "", []) == "accepted"
    assert bad_inputs.classify(1, "Traceback (most recent call last):\nValueError: x\n", []) == "traceback"
    assert bad_inputs.classify(1, "error: a\nerror: b\n", []) == "traceback"
    assert bad_inputs.classify(1, "error: a\n", ["lightning_logs/version_0"]) == "messy"
    assert bad_inputs.classify(1, "Killed\n", []) == "messy"


def test_the_quick_corpus_is_clean(capsys):
    counts = bad_inputs.main(["--quick", "--timeout", "120"])
    out = capsys.readouterr().out
    assert sum(counts.values()) >= 15
    assert counts == {"clean": sum(counts.values())}, out
