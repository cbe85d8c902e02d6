"""Round 12 of the bad-input corpus (scripts/bad_inputs_round12.py): the runtime's classes.

- every tool output on a full disk: a write that fails without naming a file (`f.write`, `close`
  on ENOSPC/EFBIG) ends in one line naming the flag, the path and the free space, nothing left;
  torch's zip writer no longer aborts the process (export writes through Python).
- a number from a subagent that no step counter can hold (a function's steps, an HTTP reply's
  completion_tokens beyond int64), or a reply's content that is not text: refused, naming the field.
- a user pool's method returning the wrong type (dicts from poll / wait): one error naming the
  pool's class, the method and SubagentResult, before the step counts are built on it.
"""

from __future__ import annotations

import errno
import http.server
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

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


def test_a_step_count_no_counter_can_hold_is_refused_naming_the_field():
    from parlightning.subagents.pool import MAX_STEPS, SubagentResult, chat_reply, normalize

    with pytest.raises(TypeError, match="steps"):
        normalize({"success": True, "steps": 10**30}, 0.0)
    with pytest.raises(TypeError, match="SubagentResult.steps"):
        SubagentResult(True, 2**63, 0.0)
    assert normalize({"success": True, "steps": MAX_STEPS}, 0.0).steps == MAX_STEPS

    def reply(content, tokens):
        return {"choices": [{"message": {"content": content}}], "usage": {"completion_tokens": tokens}}

    with pytest.raises(ValueError, match="usage.completion_tokens"):
        chat_reply(reply("DONE", 10**30))
    with pytest.raises(ValueError, match=r"message.content is int 42"):
        chat_reply(reply(42, 3))
    assert chat_reply(reply(None, 3)) == ("", 3) and chat_reply({"choices": [{"message": {"content": "x"}}]}) == ("x", 1)


def test_http_pools_fail_a_call_whose_reply_no_counter_or_text_can_hold():
    from parlightning.subagents import HTTPPool

    for content, tokens, field in (("DONE: ok", 10**30, "completion_tokens"), (42, 3, "content")):
        body = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
                           "usage": {"completion_tokens": tokens}}).encode()

        class Reply(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Reply)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            pool = HTTPPool(base_url=f"http://127.0.0.1:{server.server_address[1]}/v1", probe=False,
                            max_endpoint_failures=None)
            [result] = pool.wait([pool.spawn({"prompt": "p"})], timeout=60)
            pool.close()
        finally:
            server.shutdown()
            server.server_close()
        assert not result.success and result.steps == 0 and field in result.error


class DictPool:
    """A user's pool whose poll / wait give plain dicts."""

    def __init__(self):
        self.n, self.done = 0, {}

    def spawn(self, instruction):
        self.n += 1
        self.done[self.n] = {"success": True, "steps": 1, "seconds": 0.0}
        return self.n

    def poll(self, handle):
        return self.done.pop(handle, None)

    def wait(self, handles, timeout=None):
        return [self.done.pop(h) for h in handles]

    def cancel(self, handle):
        self.done.pop(handle, None)

    def close(self):
        pass


@pytest.mark.parametrize("world", ["PoolOrchestrationWorld", "AsyncPoolOrchestrationWorld"])
def test_a_user_pool_returning_dicts_is_named_with_its_method(world):
    import asyncio

    from parlightning.subagents import world as worlds

    w = getattr(worlds, world)(pool=DictPool(), families=["fanout"], tasks_per_family=1)
    task = w.tasks[0]
    call = (lambda f, *a: asyncio.run(f(*a))) if world.startswith("Async") else (lambda f, *a: f(*a))
    call(w.reset, task)
    action = [1] * w.action_spec.nvec.__len__()
    method = "poll" if world.startswith("Async") else "wait"
    with pytest.raises(TypeError, match=rf"DictPool\.{method} returned dict .*not a SubagentResult"):
        call(w.step, action)


class TasksNotLoaded:
    """An external world whose `tasks` property raises (its bank is loaded later)."""

    observation_shape = (2,)

    def __init__(self, seed=0, actor=0):
        from parlightning.envs.base import ActionSpec

        self.action_spec = ActionSpec("discrete", nvec=(2,))

    @property
    def tasks(self):
        raise RuntimeError("the task bank is not loaded yet")

    def reset(self, task):
        return [0.0, 0.0]

    def step(self, action):
        return [0.0, 0.0], 0.0, True, False, None


@pytest.mark.parametrize("workers", [None, 1])
def test_a_world_property_that_raises_is_named_with_the_attribute(workers):
    from parlightning.envs.external import ExternalBatchedEnv
    from parlightning.errors import ConfigError

    kwargs = {} if workers is None else {"workers": workers}
    with pytest.raises(ConfigError, match=r"TasksNotLoaded\.tasks raised RuntimeError: the task bank is not loaded"):
        ExternalBatchedEnv(2, world=TasksNotLoaded, **kwargs)


# ---------------------------------------------------------------------------------- signals at start-up
WORLD = '''
import os
import time
import torch
from parlightning.envs.base import ActionSpec, BatchedEnv, StepResult


def _mark():
    with open(os.environ["R12_MARKER"], "a") as f:
        f.write(f"{os.getpid()}\\n")


class SlowToBuild(BatchedEnv):
    """Marks its pid, then takes a minute to construct (a simulator that loads)."""

    observation_shape = (4,)
    action_spec = ActionSpec("discrete", nvec=(3,))

    def __init__(self, num_envs: int, device: str = "cpu", seed: int = 0) -> None:
        self.num_envs = int(num_envs)
        _mark()
        time.sleep(120)

    def reset(self, *, seed=None, task_index=None):
        return torch.zeros(self.num_envs, 4)

    def step(self, action, next_task=None):
        z = torch.zeros(self.num_envs, dtype=torch.bool)
        return StepResult(torch.zeros(self.num_envs, 4), torch.zeros(self.num_envs), z, z, torch.zeros(self.num_envs, 4), None)
'''

CONFIG = """\
seed_everything: 0
torch_threads: 1
trainer: {max_epochs: 1, accelerator: cpu, devices: 1, enable_progress_bar: false, enable_model_summary: false}
model: {hidden_sizes: [16], activation: relu, lr: 0.001}
data:
  env: {class_path: r12slow.SlowToBuild}
  num_envs: 8
  num_steps: 8
  update_epochs: 1
  num_minibatches: 2
  reward: null
"""


def _wait_for(path, timeout=240.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and open(path).read().strip():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_the_world_constructs_ends_fit_with_one_line(tmp_path, signum):
    (tmp_path / "r12slow.py").write_text(WORLD)
    (tmp_path / "c.yaml").write_text(CONFIG)
    marker = tmp_path / "marker"
    env = {**_env(), "R12_MARKER": str(marker)}
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env["PYTHONPATH"]
    # as from a terminal: a suite started under nohup passes SIGHUP down ignored, and the program keeps an
    # ignored SIGHUP ignored (a nohup'd run means it); the world then sleeps on into the stall watch
    proc = subprocess.Popen([sys.executable, "-m", "parlightning.fit", "--config", "c.yaml"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    try:
        assert _wait_for(str(marker)), "the world never started constructing"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    name = signal.Signals(signum).name
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert proc.returncode == 128 + signum, err[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"error: {name}:") and "Traceback" not in err, err[-2000:]
    assert not (tmp_path / "lightning_logs").exists()  # nothing was kept


def test_a_world_constructor_stuck_past_the_stall_timeout_is_one_line(tmp_path):
    """The stall watch's thread prints while the preflight holds sys.stderr redirected (it keeps what a
    world's constructor prints): the line went into that buffer and the process ended 1 without a word."""
    (tmp_path / "r12slow.py").write_text(WORLD)
    (tmp_path / "c.yaml").write_text(CONFIG)
    env = {**_env(), "R12_MARKER": str(tmp_path / "marker")}
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env["PYTHONPATH"]
    done = subprocess.run([sys.executable, "-m", "parlightning.fit", "--config", "c.yaml", "--stall_timeout", "3"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert done.returncode == 1 and len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith("error: the run stopped: hung: its main thread made no progress for ")
    assert "SlowToBuild.__init__" in lines[0] and "--stall_timeout" in lines[0], lines[0]
    assert not (tmp_path / "lightning_logs").exists()


SLEEPER = """
import time


def sleeper(conn, owner_pid):
    time.sleep(300)
"""


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


def test_a_stall_that_ends_the_process_kills_its_stopped_child(tmp_path):
    # the stall watch ends a one-process run with os._exit: a child stopped by SIGSTOP never notices its
    # parent gone (it was left alive); the run's processes are killed (SIGKILL acts on stopped processes)
    (tmp_path / "r12sleeper.py").write_text(SLEEPER)
    script = textwrap.dedent("""
        import os, signal, sys, time
        from parlightning.runtime.processes import Child
        from parlightning.runtime.rank_watch import RankWatch
        watch = RankWatch()
        import r12sleeper
        child = Child(r12sleeper.sleeper, (), name="sleeper", what="a sleeper")
        os.kill(child.pid, signal.SIGSTOP)
        print(child.pid, flush=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with open(f"/proc/{child.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "T":
                    break
            time.sleep(0.01)
        watch._exit({"cause": "hung: (a test)", "code": 1}, os._exit)
    """)
    env = _env()
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env["PYTHONPATH"]
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 1 and "error: the run stopped: hung: (a test)" in proc.stderr, proc.stderr[-2000:]
    pid = int(proc.stdout.split()[0])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _state(pid) not in ("gone", "Z"):
        time.sleep(0.05)
    state = _state(pid)
    if state not in ("gone", "Z"):
        os.kill(pid, signal.SIGKILL)
    assert state in ("gone", "Z"), f"the stopped child was left alive (state {state})"


def test_an_output_file_spelt_as_a_folder_is_refused_whether_or_not_it_exists(tmp_path):
    from parlightning.cli.outputs import check_output_file
    from parlightning.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^--out: '.*policies/' ends in '/', which names a folder; give a file path"):
        check_output_file("--out", str(tmp_path / "policies") + "/")
    check_output_file("--out", str(tmp_path / "policy.pt2"))
