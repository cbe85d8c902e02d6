"""Round 12 of the bad-input corpus (scripts/bad_inputs_round12.py): the runtime's classes.

- every tool output on a full disk: a write that fails without naming a file (`f.write`, `close`
  on ENOSPC/EFBIG) ends in one line naming the flag, the path and the free space, nothing left;
  torch's zip writer no longer aborts the process (export writes through Python).
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap

import pytest

from parlightning.cli.outputs import raise_write_error, written_whole

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_a_write_that_fails_without_a_file_name_is_named_as_the_output(tmp_path):
    out = str(tmp_path / "t.jsonl")
    with pytest.raises(SystemExit) as info:
        try:
            with written_whole(out) as tmp, open(tmp, "w") as f:
                f.write("x")
                raise OSError(errno.ENOSPC, "No space left on device")  # as f.write / close raise it: no filename
        except OSError as err:
            raise_write_error(err, [("--trace", out)])
    line = str(info.value)
    assert line.startswith("error: --trace:") and repr(out) in line and "MiB free there" in line
    assert "free some space" in line
    assert os.listdir(tmp_path) == []  # nothing half-written


def test_export_on_a_file_size_limit_ends_in_one_line_not_an_abort(tmp_path):
    # a file-size limit (RLIMIT_FSIZE) stands in for a full disk: writes fail with EFBIG (Python
    # ignores SIGXFSZ); torch.export.save's zip writer used to abort the process (SIGABRT) there
    script = textwrap.dedent(f"""
        import resource
        from parlightning.cli.export import export_policy
        from parlightning.cli.outputs import raise_write_error
        from parlightning.envs.base import ActionSpec
        from parlightning.policies.actor_critic import ActorCritic
        policy = ActorCritic((4,), ActionSpec("discrete", nvec=(2,)))
        resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))
        try:
            export_policy(policy, (4,), {str(tmp_path / 'p.pt2')!r})
        except OSError as err:
            raise_write_error(err, [("--out", {str(tmp_path / 'p.pt2')!r})])
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "--out" in lines[0] and "p.pt2" in lines[0] and "Traceback" not in proc.stderr
    assert os.listdir(tmp_path) == []
