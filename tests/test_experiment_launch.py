"""scripts/experiment.py starts its runs through parlightning.runtime.processes (one way to start
processes): both launches (a fresh interpreter, a child of the preloaded fork server) run the program
with its output in the log and its exit status, and a run exits when the study that owns it is killed."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import experiment  # noqa: E402

from parlightning.runtime.processes import OWNED, owned_command  # noqa: E402


def _wait(proc, timeout=120.0):
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc.poll()


@pytest.mark.parametrize("launch", ["exec", "fork"])
def test_both_launches_run_the_program_with_its_log_and_exit_status(tmp_path, launch):
    script = tmp_path / "prog.py"
    script.write_text("import sys\nprint('hello', sys.argv[1:])\nsys.exit(int(sys.argv[1]))\n")
    ok = experiment.spawn([sys.executable, str(script), "0"], tmp_path / "ok.log", launch)
    bad = experiment.spawn([sys.executable, str(script), "3"], tmp_path / "bad.log", launch)
    assert _wait(ok) == 0 and _wait(bad) == 3
    assert "hello ['0']" in (tmp_path / "ok.log").read_text()
    assert "hello ['3']" in (tmp_path / "bad.log").read_text()
    assert (tmp_path / "command.txt").read_text().splitlines()[0] == f"{sys.executable} {script} 0"


def test_owned_command_runs_a_module_as_python_dash_m_would(tmp_path):
    cmd = owned_command([sys.executable, "-m", "json.tool", "--help"])
    assert cmd[:3] == [sys.executable, "-c", OWNED] and cmd[3] == str(os.getpid())
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0 and "json.tool" in done.stdout


@pytest.mark.parametrize("launch", ["exec", "fork"])
def test_a_run_exits_when_its_study_is_killed(tmp_path, launch):
    """The study (a process that spawns a run sleeping for an hour, prints its pid and waits) is
    SIGKILLed; the run notices its owner is gone and exits."""
    study = tmp_path / "study.py"
    study.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT / "scripts")!r})
        import experiment
        from pathlib import Path
        if __name__ == "__main__":  # the fork server imports this main module too
            prog = Path({str(tmp_path)!r}) / "sleep.py"
            prog.write_text("import os, time\\nprint(os.getpid(), flush=True)\\ntime.sleep(3600)\\n")
            run = experiment.spawn([sys.executable, str(prog)], Path({str(tmp_path)!r}) / "run.log", {launch!r})
            print("started", flush=True)
            time.sleep(3600)
    """))
    proc = subprocess.Popen([sys.executable, str(study)], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert proc.stdout.readline().strip() == "started"
        log = tmp_path / "run.log"
        deadline = time.monotonic() + 120
        while not (log.exists() and log.read_text().strip()) and time.monotonic() < deadline:  # its pid first
            time.sleep(0.05)
        pid = int(log.read_text().split()[0])
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
            pytest.fail(f"the run (pid {pid}) outlived its killed study by 60 s")
    finally:
        if proc.poll() is None:
            proc.kill()


def _job(tmp_path, script, launch="exec"):
    def phase(job):
        return "fit", [sys.executable, str(script), str(job.work)]

    def finish(job):
        return {"id": job.spec["id"], "ran": (job.work / "ran").read_text()}

    return lambda spec: experiment.Job(spec, tmp_path / "out", [phase], finish, launch)


def test_a_run_killed_by_a_signal_is_run_again_once_and_says_so(tmp_path, capsys):
    """A crash (SIGSEGV here) of one run in a long study costs that run, not the study: it is run again
    from scratch once, and its result records the restart; a second crash ends the study with one line."""
    script = tmp_path / "crashy.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, sys
        from pathlib import Path
        count = Path({str(tmp_path)!r}) / ("count-" + Path(sys.argv[1]).name)
        n = int(count.read_text()) if count.exists() else 0
        count.write_text(str(n + 1))
        if n < int(Path(sys.argv[1]).name[-1]):  # run "a1" crashes once, "a2" twice
            os.kill(os.getpid(), signal.SIGSEGV)
        (Path(sys.argv[1]) / "ran").write_text(str(n + 1))
    """))
    make = _job(tmp_path, script)
    experiment.run_jobs([{"id": "a0"}, {"id": "a1"}], tmp_path / "out", 1, make)
    results = {p.stem: __import__("json").loads(p.read_text()) for p in (tmp_path / "out" / "results").glob("*.json")}
    assert results["a0"]["ran"] == "1" and "restarts" not in results["a0"]
    assert results["a1"]["ran"] == "2" and results["a1"]["restarts"] == 1
    assert "a1: fit killed by SIGSEGV; running it again from scratch (restart 1 of 1)" in capsys.readouterr().out
    with pytest.raises(SystemExit, match=r"^error: a2: fit failed \(exit -11; "):
        experiment.run_jobs([{"id": "a2"}], tmp_path / "out", 1, make)
    assert (tmp_path / "count-a2").read_text() == "2"  # one restart, then the study stops


def test_a_run_that_fails_with_its_own_error_is_not_run_again(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        from pathlib import Path
        count = Path({str(tmp_path)!r}) / "count"
        count.write_text(str(int(count.read_text()) + 1 if count.exists() else 1))
        sys.exit("error: data.num_envs: bad")
    """))
    with pytest.raises(SystemExit, match=r"^error: b: fit failed \(exit 1; .*\): data.num_envs: bad"):
        experiment.run_jobs([{"id": "b"}], tmp_path / "out", 1, _job(tmp_path, script))
    assert (tmp_path / "count").read_text() == "1"
