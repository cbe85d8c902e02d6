"""Round 5 of the bad-input corpus (scripts/bad_inputs_round5.py), its --quick subset: one case per
class of input the round found unclean on the code before its fixes (a world that changes its
answers after the preflight probe, state a checkpoint cannot load back, trainer precisions the
rollout cannot run, an output that is a device, a rank variable left in the environment, ...).
Every case must end with one `error:` line naming the field or component, a non-zero exit, no
traceback and nothing written."""

from __future__ import annotations

import pytest

from tests.corpus_check import assert_quick_subset_clean


def test_round5_quick_subset_is_clean() -> None:
    assert_quick_subset_clean("bad_inputs_round5.py", min_cases=10)


def test_a_failed_write_of_an_output_is_one_line_and_anything_else_keeps_its_traceback(tmp_path) -> None:
    """`raise_write_error`, which evaluate / export / bc / plot call when a write fails after their
    checks: the output's flag, the file, the reason and the free space; any other error re-raised as is."""
    import errno

    from parlightning.cli.outputs import raise_write_error

    out = str(tmp_path / "policy.pt2")
    with pytest.raises(SystemExit) as exit_:
        raise_write_error(OSError(errno.ENOSPC, "No space left on device", out), [("--json", None), ("--out", out)])
    line = str(exit_.value.code)
    assert line.startswith(f"error: --out: writing {out!r} failed (No space left on device; ") and "MiB free there" in line
    assert line.endswith("free some space or write it elsewhere") and "\n" not in line
    other = OSError(errno.EACCES, "Permission denied", str(tmp_path / "somewhere_else" / "x"))
    with pytest.raises(OSError) as kept:
        raise_write_error(other, [("--out", out)])
    assert kept.value is other
    zip_fail = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")
    with pytest.raises(SystemExit, match=r"^error: --out: writing .* failed \(\[enforce fail"):
        raise_write_error(zip_fail, [("--out", out)])
