"""External worlds: the per-episode contract behind `BatchedEnv`, concurrency, clear errors for
worlds that raise or hang, and the subagent pools (simulated, worker processes, local HTTP)."""

import asyncio
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from parlightning.envs.base import ActionSpec, BatchedEnv
from parlightning.envs.external import ExternalBatchedEnv, ExternalWorldError
from parlightning.errors import ConfigError
from parlightning.subagents import HTTPPool, PoolOrchestrationWorld, ProcessPool, SimulatedPool, SubagentPool

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class CountWorld:
    """Task `t-k` lasts k + 1 steps; obs [steps taken, k]; reward 1 at the end if the last action is 1."""

    tasks = ["t-0", "t-1", "t-2"]
    observation_shape = (2,)
    action_spec = ActionSpec("discrete", nvec=(2,))
    fail_at = None  # (actor, step): raise there
    hang_at = None
    retryable = (ValueError,)  # its failure happens before the step moves the world: safe to repeat

    def __init__(self, seed=0, actor=0, sleep=0.0, fail_at=None, hang_at=None):
        self.actor, self.sleep, self.calls = actor, sleep, 0
        if fail_at is not None:  # set per instance: worker processes do not see a monkeypatched class
            self.fail_at = tuple(fail_at)
        if hang_at is not None:
            self.hang_at = tuple(hang_at)

    def reset(self, task):
        self.length, self.t = int(task.split("-")[1]) + 1, 0
        return [0.0, float(self.length - 1)]

    def _step(self, action):
        self.calls += 1
        if self.fail_at == (self.actor, self.calls):
            raise ValueError("the tool call failed")
        self.t += 1
        done = self.t >= self.length
        reward = float(done and action == 1)
        parts = {"outcome": reward, "n_subagents": 2.0, "assigned": 2.0, "completed": 1.0,
                 "critical_steps": float(self.t), "serial_steps": 2.0 * self.t} if done else None
        return [float(self.t), float(self.length - 1)], reward, done, False, parts

    def step(self, action):
        if self.hang_at == (self.actor, self.calls + 1):
            time.sleep(30)
        time.sleep(self.sleep)
        return self._step(action)


class AsyncCountWorld(CountWorld):
    async def reset(self, task):
        return CountWorld.reset(self, task)

    async def step(self, action):
        await asyncio.sleep(self.sleep)
        return self._step(action)


@pytest.mark.parametrize("world, workers", [(CountWorld, 0), (AsyncCountWorld, 0), (CountWorld, 2),
                                            (AsyncCountWorld, 2)])
def test_worlds_step_as_one_batched_env_with_parts_and_auto_reset(world, workers):
    env = ExternalBatchedEnv(3, world=world, workers=workers)
    try:
        if workers:  # actors 0 | 1, 2 live in two other processes
            assert env._runner.blocks == [[0], [1, 2]] and len(set(env.worker_pids) - {os.getpid()}) == 2
        assert isinstance(env, BatchedEnv) and env.task_ids == ["t-0", "t-1", "t-2"]
        obs = env.reset(task_index=torch.tensor([0, 1, 2]))
        assert obs.tolist() == [[0, 0], [0, 1], [0, 2]]
        asked = []

        def next_task(done):
            asked.append(done.tolist())
            return torch.tensor([2, 2, 2])

        r = env.step(torch.tensor([1, 0, 1]), next_task)  # actor 0 (1 step) ends, rewarded
        assert r.terminated.tolist() == [True, False, False] and r.reward.tolist() == [1.0, 0.0, 0.0]
        assert r.final_obs[0].tolist() == [1, 0] and r.obs[0].tolist() == [0, 2]  # reset to task 2
        assert r.parts.task.tolist() == [0, 1, 2] and r.parts.outcome[0] == 1.0
        assert r.parts.critical_steps[0] == 1.0 and r.parts.serial_steps[0] == 2.0 and r.parts.completed[0] == 1.0
        r = env.step(torch.tensor([0, 0, 0]), next_task)  # actor 1 ends unrewarded
        assert r.terminated.tolist() == [False, True, False] and r.reward.tolist() == [0.0, 0.0, 0.0]
        assert asked == [[True, False, False], [False, True, False]]
        assert r.parts.task.tolist() == [2, 1, 2]
    finally:
        env.close()


@pytest.mark.parametrize("world", [CountWorld, AsyncCountWorld])
def test_worlds_wait_concurrently(world):
    env = ExternalBatchedEnv(8, world=world, world_kwargs={"sleep": 0.1})
    try:
        env.reset()
        start = time.perf_counter()
        env.step(torch.zeros(8, dtype=torch.long))
        assert time.perf_counter() - start < 0.5  # 8 x 0.1 s one after another would be 0.8 s
    finally:
        env.close()


@pytest.mark.parametrize("world", [CountWorld, AsyncCountWorld])
def test_a_world_that_raises_names_actor_and_task_and_retries_help(world, monkeypatch):
    monkeypatch.setattr(CountWorld, "fail_at", (2, 1))
    env = ExternalBatchedEnv(3, world=world)
    env.reset(task_index=torch.tensor([0, 0, 1]))
    with pytest.raises(ExternalWorldError, match=r"actor 2 on task 't-1': step raised ValueError: the tool call failed"):
        env.step(torch.zeros(3, dtype=torch.long))
    env.close()
    env = ExternalBatchedEnv(3, world=world, retries=1)  # a transient failure: the repeated call succeeds
    env.reset(task_index=torch.tensor([0, 0, 1]))
    assert env.step(torch.zeros(3, dtype=torch.long)).obs[2].tolist() == [1, 1]
    env.close()


def test_a_hanging_world_is_an_error_after_step_timeout(monkeypatch):
    monkeypatch.setattr(CountWorld, "hang_at", (1, 1))
    env = ExternalBatchedEnv(2, world=CountWorld, step_timeout=0.3)
    env.reset(task_index=torch.tensor([0, 2]))
    start = time.perf_counter()
    with pytest.raises(ExternalWorldError, match=r"actor 1 on task 't-2': step did not return within step_timeout=0.3s"):
        env.step(torch.zeros(2, dtype=torch.long))
    assert time.perf_counter() - start < 2.0
    env.close()


def test_bad_world_config_is_one_clear_error():
    with pytest.raises(ConfigError, match="data.env.world"):
        ExternalBatchedEnv(2, world="parlightning.subagents:NoSuchWorld")
    with pytest.raises(ConfigError, match="step_timeout"):
        ExternalBatchedEnv(2, world=CountWorld, step_timeout=0)
    with pytest.raises(ConfigError, match=r"shared.pool: needs class_path .*got keys \['init_args.fn'\]"):
        ExternalBatchedEnv(2, world=CountWorld, shared={"pool": {"init_args.fn": "x:y"}})  # a dotted CLI override
    with pytest.raises(ConfigError, match="shared.pool: ProcessPool: fn 'nosuch:fn' is not importable"):
        ExternalBatchedEnv(2, world=CountWorld, shared={"pool": {"class_path": "parlightning.subagents.ProcessPool",
                                                                  "init_args": {"fn": "nosuch:fn"}}})


def test_late_answers_to_a_failed_call_never_reach_the_next_one(monkeypatch):
    """Actor 0 raises at once while the others are still sleeping: their late answers belong to the
    abandoned call, and the next step sees only its own (each world's obs counts its own steps)."""
    monkeypatch.setattr(CountWorld, "fail_at", (0, 1))
    env = ExternalBatchedEnv(4, world=CountWorld, world_kwargs={"sleep": 0.05})
    try:
        env.reset(task_index=torch.tensor([2, 2, 2, 2]))
        with pytest.raises(ExternalWorldError, match="actor 0 on task 't-2': step raised ValueError"):
            env.step(torch.zeros(4, dtype=torch.long))
        r = env.step(torch.zeros(4, dtype=torch.long))  # actor 0's second call succeeds (its first raised)
        assert r.obs[:, 0].tolist() == [1.0, 2.0, 2.0, 2.0]  # the others' first answers were not taken for these
        monkeypatch.setattr(CountWorld, "fail_at", None)
        many = ExternalBatchedEnv(32, world=CountWorld, world_kwargs={"sleep": 0.01})
        many.reset(task_index=torch.zeros(32, dtype=torch.long))  # every episode lasts one step: all reset together
        for _ in range(5):
            r = many.step(torch.ones(32, dtype=torch.long))
            assert r.terminated.all() and r.reward.tolist() == [1.0] * 32 and r.obs[:, 0].tolist() == [0.0] * 32
        many.close()
    finally:
        env.close()


def test_worlds_in_worker_processes_name_the_actor_retry_time_out_and_drop_late_answers():
    """The thread runner's error contract holds across processes (failures are set per instance:
    a worker process does not see a monkeypatched class)."""
    env = ExternalBatchedEnv(4, world=CountWorld, workers=2, world_kwargs={"fail_at": (2, 1), "sleep": 0.05})
    try:
        env.reset(task_index=torch.tensor([2, 2, 1, 2]))
        with pytest.raises(ExternalWorldError, match=r"actor 2 on task 't-1': step raised ValueError: the tool call "
                                                     r"failed"):
            env.step(torch.zeros(4, dtype=torch.long))
        r = env.step(torch.zeros(4, dtype=torch.long))  # actor 2's second call succeeds (its first raised)
        # the others' answers to the abandoned call (step 1) were dropped, not taken for these (step 2)
        assert r.obs[:, 0].tolist() == [2.0, 2.0, 1.0, 2.0]
    finally:
        env.close()
    retried = ExternalBatchedEnv(3, world=CountWorld, workers=2, retries=1, world_kwargs={"fail_at": (2, 1)})
    retried.reset(task_index=torch.tensor([0, 0, 1]))
    assert retried.step(torch.zeros(3, dtype=torch.long)).obs[2].tolist() == [1, 1]
    retried.close()
    hung = ExternalBatchedEnv(2, world=CountWorld, workers=2, step_timeout=0.3, world_kwargs={"hang_at": (1, 1)})
    pids = hung.worker_pids
    hung.reset(task_index=torch.tensor([0, 2]))
    start = time.perf_counter()
    with pytest.raises(ExternalWorldError, match=r"actor 1 on task 't-2': step did not return within step_timeout"):
        hung.step(torch.zeros(2, dtype=torch.long))
    assert time.perf_counter() - start < 2.0
    hung.close()  # the hung world's process is ended, not waited for
    assert time.perf_counter() - start < 8.0 and not any(_alive(p) for p in pids)


def test_a_worker_process_that_dies_or_is_orphaned_ends_cleanly(tmp_path):
    env = ExternalBatchedEnv(4, world=CountWorld, workers=2)
    env.reset(task_index=torch.zeros(4, dtype=torch.long))
    os.kill(env.worker_pids[1], signal.SIGKILL)
    with pytest.raises(ExternalWorldError, match=r"actor 2 on task 't-0': step worker process 1 \(actors 2-3\) died"):
        env.step(torch.zeros(4, dtype=torch.long))
    env.close()
    # a trainer killed with SIGKILL cannot close its env: its worker processes notice and exit by themselves
    script = tmp_path / "owner.py"
    script.write_text(
        "import sys, time, torch\n"
        f"sys.path.insert(0, {os.path.join(ROOT, 'tests')!r})\n"
        "from test_external_env import CountWorld\n"
        "from parlightning.envs.external import ExternalBatchedEnv\n"
        "if __name__ == '__main__':\n"
        "    env = ExternalBatchedEnv(2, world=CountWorld, workers=2)\n"
        "    print(*env.worker_pids, flush=True)\n"
        "    time.sleep(60)\n")
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in owner.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)


def test_bad_worker_process_config_is_one_clear_error():
    with pytest.raises(ConfigError, match=r"workers: must be an integer >= 0"):
        ExternalBatchedEnv(2, world=CountWorld, workers=-1)
    capped = ExternalBatchedEnv(2, world=CountWorld, workers=3)  # e.g. the data module's 2-actor probe
    assert capped.workers == 2 and capped._runner.blocks == [[0], [1]]
    capped.close()
    with pytest.raises(ConfigError, match=r"shared.pool: with workers > 0 .* give it as \{class_path, init_args\}"):
        ExternalBatchedEnv(2, world=PoolOrchestrationWorld, workers=1, shared={"pool": SimulatedPool()})

    class Local(CountWorld):  # not importable by a worker process
        pass

    with pytest.raises(ConfigError, match=r"data.env.init_args.world: cannot be sent to worker processes"):
        ExternalBatchedEnv(2, world=Local, workers=1)
    with pytest.raises(ConfigError, match=r"data.env.world: CountWorld\(\*\*world_kwargs\) failed for actor 0: "
                                          r"TypeError"):
        ExternalBatchedEnv(2, world=CountWorld, workers=2, world_kwargs={"fail_at": 3})  # tuple(3) raises


def test_simulated_pool_latency_and_instruction_matching():
    pool = SimulatedPool(reliability=1.0, seconds_per_step=0.02)
    assert isinstance(pool, SubagentPool)
    right = pool.spawn({"skill": 1, "instruction": 1, "cost": 2})
    wrong = pool.spawn({"skill": 1, "instruction": 0, "cost": 1})
    assert pool.poll(right) is None  # 3 steps x 20 ms: not yet
    start = time.perf_counter()
    a, b = pool.wait([right, wrong])
    assert 0.03 < time.perf_counter() - start < 0.5
    assert (a.success, a.steps, b.success, b.steps) == (True, 3, False, 2)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:  # a zombie is dead too
            return f.read().split()[2] != "Z"
    except OSError:  # it went away between the two reads (ESRCH while reading, or no file)
        return False


def test_process_pool_runs_the_users_function_kills_hung_subagents_and_closes():
    pool = ProcessPool("tests.subagent_fns:solve", workers=2, timeout=1.0, on_error="fail")
    try:
        handles = [pool.spawn({"skill": 0, "instruction": i % 2, "cost": 2}) for i in range(4)]
        hung = pool.spawn({"hang": True})
        boom = pool.spawn({"raise": True})
        # generous waits: a spawned worker's start-up (seconds under load) never counts against `timeout`,
        # which runs from when a ready worker takes the call, so only the hung call can time out
        results = pool.wait(handles + [hung, boom], timeout=300)
        assert [(r.success, r.steps) for r in results[:4]] == [(True, 3), (False, 3)] * 2
        assert not results[4].success and "timed out after 1s" in results[4].error
        assert not results[5].success and "tests.subagent_fns:solve raised RuntimeError: subagent crashed" in results[5].error
        again = pool.wait([pool.spawn({"skill": 1, "instruction": 1, "cost": 1})], timeout=300)[0]
        assert again.success and again.steps == 2  # the killed worker was replaced
        pids = pool.pids
    finally:
        pool.close()
    assert not any(_alive(p) for p in pids)


def test_env_close_ends_every_pool_worker_process():
    env = ExternalBatchedEnv(
        4, world=PoolOrchestrationWorld,
        shared={"pool": {"class_path": "parlightning.subagents.ProcessPool",
                         "init_args": {"fn": "parlightning.subagents.examples:skill_matcher", "workers": 2}}},
    )
    pids = env.shared["pool"].pids
    env.reset()
    nvec = env.action_spec.nvec
    r = env.step(torch.ones(4, len(nvec), dtype=torch.long))  # delegate every slot
    assert r.obs.shape == (4, *env.observation_shape)
    assert all(_alive(p) for p in pids)
    env.close()
    assert not any(_alive(p) for p in pids)


class _ChatHandler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][-1]["content"]
        if "fail" in prompt:
            self.send_response(500)
            self.end_headers()
            return
        reply = {"choices": [{"message": {"role": "assistant", "content": f"DONE: {prompt}"}}],
                 "usage": {"completion_tokens": len(prompt.split())}}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_http_pool_against_a_local_openai_compatible_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ChatHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    pool = HTTPPool(f"http://127.0.0.1:{server.server_address[1]}/v1", workers=2, timeout=5, success_marker="DONE")
    try:
        ok, bad = pool.wait([pool.spawn({"prompt": "split the list in two"}), pool.spawn("please fail")], timeout=10)
        assert ok.success and ok.steps == 5 and ok.output == "DONE: split the list in two"
        assert not bad.success and "500" in bad.error
    finally:
        pool.close()
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("workers", [0, 3])
def test_the_external_config_trains(tmp_cwd, workers):
    from parlightning.cli.fit import main

    cli = main(["--config", os.path.join(ROOT, "configs", "external.yaml"), "--trainer.max_epochs", "2",
                "--trainer.enable_progress_bar", "false", "--data.num_envs", "8", "--data.num_steps", "8",
                "--data.env.init_args.workers", str(workers)])
    dm = cli.datamodule
    pids = dm.collector.env.worker_pids
    assert len(pids) == workers and not any(_alive(p) for p in pids)  # the run's end closed them
    assert dm.round_index == 2 and dm.env_steps == 2 * 8 * 8
    stats = dm.last_rollout.stats
    assert float(stats["rollout/episodes"]) > 0 and "perf/policy_lag" in stats
    assert dm.collector.env._closed  # teardown closed the worlds and the pool


# ---------------------------------------------------------------------------------- malformed values, retries
class BadValueWorld(CountWorld):
    """Actor 1's first step returns `field` replaced by `value` (and ends the episode, so parts are read)."""

    field, value = "reward", None

    def _step(self, action):
        obs, reward, done, trunc, parts = super()._step(action)
        if self.actor != 1:
            return obs, reward, done, trunc, parts
        parts = {"outcome": 1.0, "n_subagents": 1.0}
        out = {"obs": obs, "reward": reward, "terminated": True, "truncated": False, "parts": parts}
        if self.field.startswith("parts."):
            parts[self.field.split(".", 1)[1]] = self.value
        else:
            out[self.field] = self.value
        return out["obs"], out["reward"], out["terminated"], out["truncated"], out["parts"]


@pytest.mark.parametrize("field, value, says", [
    ("obs", [1.0, 2.0, 3.0], "observation [1.0, 2.0, 3.0] (list); field obs must be 2 numbers"),
    ("obs", "ready", "observation 'ready' (str); field obs"),
    ("obs", None, "observation None (NoneType); field obs"),
    ("reward", None, "reward None (NoneType); field reward must be a finite number"),
    ("reward", "1.0", "reward '1.0' (str); field reward"),
    ("reward", [1.0], "reward [1.0] (list); field reward"),
    ("reward", float("inf"), "reward inf (float); field reward must be a finite number"),
    ("terminated", "yes", "terminated 'yes' (str); field terminated must be a bool"),
    ("parts", [1.0], "parts [1.0] (list); field parts must be None or a mapping"),
    ("parts.outcome", float("nan"), "parts['outcome'] nan (float); field parts['outcome'] must be a finite number"),
    ("parts.n_subagents", float("inf"), "parts['n_subagents'] inf"),
    ("parts.completed", "two", "parts['completed'] 'two' (str)"),
])
def test_a_malformed_value_from_a_world_names_world_actor_task_and_field(monkeypatch, field, value, says):
    monkeypatch.setattr(BadValueWorld, "field", field)
    monkeypatch.setattr(BadValueWorld, "value", value)
    env = ExternalBatchedEnv(3, world=BadValueWorld)
    try:
        env.reset(task_index=torch.tensor([0, 2, 1]))
        with pytest.raises(ExternalWorldError) as err:
            env.step(torch.zeros(3, dtype=torch.long))
        message = str(err.value)
        assert message.startswith("external world ") and "BadValueWorld actor 1 on task 't-2': step returned" in message
        assert says in message, message
        assert "\n" not in message
    finally:
        env.close()


class HalfStepWorld(CountWorld):
    """Actor 1's step moves its state, then raises KeyError; stepping it again raises another error."""

    def _step(self, action):
        if self.actor == 1:
            self.t += 1
            if self.t == 1:
                raise KeyError("tool result missing 'id'")
            raise IndexError("step past the end")  # what a blind retry would report
        return super()._step(action)


@pytest.mark.parametrize("retryable", [(), (KeyError, IndexError)])
def test_retries_report_the_first_error_and_repeat_only_what_the_world_declares(monkeypatch, retryable):
    monkeypatch.setattr(HalfStepWorld, "retryable", retryable)
    env = ExternalBatchedEnv(3, world=HalfStepWorld, retries=2)
    try:
        env.reset(task_index=torch.tensor([2, 2, 2]))
        with pytest.raises(ExternalWorldError) as err:
            env.step(torch.zeros(3, dtype=torch.long))
        message = str(err.value)
        assert "actor 1" in message and "step raised KeyError: \"tool result missing 'id'\"" in message, message
        if retryable:  # repeated (declared retryable), still the first error first
            assert "the first error; retried 2 times; the last raised IndexError" in message, message
        else:
            assert "not retried: KeyError is not in the world's `retryable`" in message, message
            assert "IndexError" not in message
    finally:
        env.close()


def test_a_pool_times_calls_from_when_a_ready_worker_takes_them():
    # every worker (and every replacement) takes 2 s to import the function: longer than the 1 s timeout
    pool = ProcessPool("tests.subagent_fns_slow:solve", workers=1, timeout=1.0)
    try:
        hung = pool.spawn({"hang": True})
        quick = [pool.spawn({"skill": 0, "instruction": 0, "cost": 1}) for _ in range(3)]  # queued behind it
        results = pool.wait([hung, *quick], timeout=300)
        assert "timed out after 1s" in results[0].error
        assert all(r.success and r.steps == 2 for r in results[1:]), results  # the cold replacement took them
    finally:
        pool.close()


@pytest.mark.parametrize("instruction, says", [
    ({"exit": True}, "tests.subagent_fns:solve ended its worker process (exit code 3; os._exit, a crash or a signal"),
    ({"steps": float("nan")}, "tests.subagent_fns:solve returned steps=nan; steps must be a whole number"),
    ({"steps": "three"}, "returned steps='three'"),
    ({"raise": True}, "tests.subagent_fns:solve raised RuntimeError: subagent crashed"),
])
@pytest.mark.parametrize("on_error", ["raise", "fail"])
def test_a_failing_subagent_function_is_reported_for_what_it_is(instruction, says, on_error):
    from parlightning.subagents.process import SubagentError

    pool = ProcessPool("tests.subagent_fns:solve", workers=1, timeout=60, on_error=on_error)
    try:
        handle = pool.spawn(dict(instruction, prompt="subtask fanout-1/0/2"))
        if on_error == "raise":  # the default: the run ends, naming the subagent and the function's own error
            with pytest.raises(SubagentError) as err:
                pool.wait([handle], timeout=300)
            assert f"subagent {handle} (subtask fanout-1/0/2)" in str(err.value) and says in str(err.value), err.value
        else:  # counted as a failed subagent, and said once
            with pytest.warns(RuntimeWarning, match="subtask fanout-1/0/2"):
                (result,) = pool.wait([handle], timeout=300)
            assert not result.success and says in result.error, result.error
        again = pool.wait([pool.spawn({"skill": 1, "instruction": 1, "cost": 1})], timeout=300)[0]
        assert again.success  # the pool lives on
    finally:
        pool.close()


def test_a_failing_subagent_function_in_a_world_names_world_actor_task_subagent_and_its_error():
    env = ExternalBatchedEnv(
        2, world=PoolOrchestrationWorld, world_kwargs={"families": ["fanout"], "tasks_per_family": 2},
        shared={"pool": {"class_path": "parlightning.subagents.ProcessPool",
                         "init_args": {"fn": "tests.subagent_fns:crash", "workers": 1}}},
    )
    try:
        env.reset()
        delegate = torch.ones((2, *env.action_spec.action_shape), dtype=torch.long)  # every slot delegated
        with pytest.raises(ExternalWorldError) as err:
            env.step(delegate)
        text = str(err.value)
        assert "external world PoolOrchestrationWorld actor" in text and "on task 'fanout-" in text, text
        assert "ProcessPool subagent" in text and "(subtask fanout-" in text, text
        assert "tests.subagent_fns:crash raised ValueError: cannot parse" in text, text
    finally:
        env.close()


def test_pool_workers_are_capped_with_an_error_naming_the_cap():
    with pytest.raises(ValueError, match=r"workers=300 is above the cap of 64 worker processes"):
        ProcessPool("tests.subagent_fns:solve", workers=300)


def test_an_http_pool_at_a_closed_port_is_one_error_naming_it():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens there
    with pytest.raises(ValueError, match=rf"HTTPPool: nothing answers at 127.0.0.1:{port} \(ConnectionRefusedError"):
        HTTPPool(f"http://127.0.0.1:{port}/v1")
    HTTPPool(f"http://127.0.0.1:{port}/v1", probe=False).close()  # the opt-out: an endpoint that starts later
