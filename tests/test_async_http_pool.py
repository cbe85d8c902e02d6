"""AsyncHTTPPool against a local OpenAI-compatible server on 127.0.0.1 that each test starts
(LocalChatServer: latency, 5xx, 429 with Retry-After, hangs and dropped connections injected).
Never an outside address. Assertions are on counts and outcomes (server-side request counts,
results), never on which of two timers fires first; the few time bounds are one-sided and follow
from what was asked (a Retry-After of 1 s means the retry arrives at least ~1 s later)."""

import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time

import pytest
import torch

from parlightning.envs.external import ExternalBatchedEnv, ExternalWorldError
from parlightning.envs.world_runner import build_shared
from parlightning.errors import ConfigError
from parlightning.subagents import PoolOrchestrationWorld
from parlightning.subagents.async_http import AsyncHTTPPool, PoolUnreachable, retry_after_seconds
from parlightning.subagents.chat_server import LocalChatServer

try:
    import aiohttp  # noqa: F401

    HAVE_AIOHTTP = True
except ImportError:
    HAVE_AIOHTTP = False

needs_aiohttp = pytest.mark.skipif(not HAVE_AIOHTTP, reason="aiohttp not installed (pip install .[http])")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POOL = "parlightning.subagents.async_http.AsyncHTTPPool"


@pytest.fixture
def server():
    with LocalChatServer(latency=0.0) as s:
        yield s


def until(condition, timeout=60.0):
    """Wait for something that must happen (generous bound: a loaded machine is slow, not wrong)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when the block ends: nothing listens there


@needs_aiohttp
def test_calls_succeed_within_the_concurrency_limit_on_reused_connections():
    with LocalChatServer(latency=0.02) as server:
        with AsyncHTTPPool(server.base_url, workers=8, timeout=30, success_marker="DONE") as pool:
            results = pool.wait([pool.spawn({"prompt": f"task {i} of many"}) for i in range(120)], timeout=120)
            assert [r.output for r in results] == [f"DONE: task {i} of many" for i in range(120)]
            assert all(r.success and r.steps == 4 and r.error is None for r in results)
            stats = server.stats()
            assert stats["requests"] == 120
            assert stats["peak_in_flight"] <= 8 and pool.stats["peak_in_flight"] <= 8  # the limit holds
            assert stats["connections"] <= 8 + 1  # keep-alive: at most one connection per slot (+ the probe)
            assert pool.stats["succeeded"] == 120 and pool.stats["failed"] == pool.stats["retries"] == 0
            assert pool.stats["in_flight"] == 0


@needs_aiohttp
def test_a_reply_without_the_marker_fails_and_the_request_is_openai_shaped():
    seen = []

    class Recording(LocalChatServer):
        async def _answer(self, method, path, body, reader, writer, keep):
            if path.endswith("/chat/completions"):
                seen.append(json.loads(body))
            return await super()._answer(method, path, body, reader, writer, keep)

    with Recording() as server:
        with AsyncHTTPPool(server.base_url, model="m1", api_key="k", system="be brief", success_marker="NOPE",
                           max_tokens=7, extra_body={"temperature": 0.0}) as pool:
            (r,) = pool.wait([pool.spawn("hello")], timeout=60)
    assert not r.success and r.output == "DONE: hello" and r.error is None
    assert seen == [{"temperature": 0.0, "model": "m1", "max_tokens": 7,
                     "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]}]


@needs_aiohttp
def test_more_than_a_thousand_calls_in_flight_on_one_loop_without_a_thread_each():
    n = 1200
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * n + 256  # client and server sockets live in this one process
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"needs {need} open files, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    with LocalChatServer() as server:
        threads_before = set(threading.enumerate())
        with AsyncHTTPPool(server.base_url, workers=n, timeout=300, success_marker="DONE") as pool:
            handles = [pool.spawn(f"@hold {i}") for i in range(n)]
            assert until(lambda: server.in_flight == n, timeout=120), server.stats()
            assert pool.stats["in_flight"] == n
            new = [t.name for t in threading.enumerate() if t not in threads_before]
            assert new == ["async-http-pool"]  # the pool's loop thread, nothing per call
            server.release()
            results = pool.wait(handles, timeout=300)
        assert all(r.success for r in results) and server.stats()["requests"] == n


@needs_aiohttp
def test_429_is_retried_after_the_servers_retry_after(server):
    with AsyncHTTPPool(server.base_url, retries=3, backoff=0.001, max_backoff=0.001, timeout=30) as pool:
        (r,) = pool.wait([pool.spawn("@ratelimit=2:1 slow down")], timeout=60)
    assert r.success and r.output == "DONE: @ratelimit=2:1 slow down"
    assert server.attempts["@ratelimit=2:1 slow down"] == 3
    assert pool.stats["http_429"] == 2 and pool.stats["retries"] == 2
    t = server.arrivals["@ratelimit=2:1 slow down"]
    assert t[1] - t[0] >= 0.9 and t[2] - t[1] >= 0.9  # the backoff alone would have waited 1 ms


@needs_aiohttp
def test_a_longer_retry_after_than_max_retry_after_is_cut(server):
    with AsyncHTTPPool(server.base_url, retries=1, backoff=0.001, max_retry_after=0.01, timeout=30) as pool:
        start = time.monotonic()
        (r,) = pool.wait([pool.spawn("@ratelimit=1:600 come back in ten minutes")], timeout=120)
    assert r.success and time.monotonic() - start < 60  # it did not wait 600 s


def test_retry_after_headers_are_read_in_seconds_milliseconds_and_dates():
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # a date in the past
    later = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 3600))
    assert 3000 < retry_after_seconds({"retry-after": later}) <= 3600
    assert retry_after_seconds({}) is None and retry_after_seconds({"retry-after": "soon"}) is None


@needs_aiohttp
def test_5xx_and_dropped_connections_are_retried_other_4xx_and_garbage_are_not(server):
    with AsyncHTTPPool(server.base_url, retries=2, backoff=0.001, timeout=30) as pool:
        flaky, broken, dropped, missing, garbage = pool.wait(
            [pool.spawn(p) for p in ("@flaky=2:503 a", "@status=500 b", "@drop c", "@status=404 d", "@garbage e")],
            timeout=120)
    assert flaky.success and server.attempts["@flaky=2:503 a"] == 3
    assert not broken.success and broken.error.startswith("HTTP 500 from ") and "(after 2 retries)" in broken.error
    assert server.attempts["@status=500 b"] == 3
    assert not dropped.success and "Disconnected" in dropped.error and server.attempts["@drop c"] == 3
    assert not missing.success and "HTTP 404" in missing.error and server.attempts["@status=404 d"] == 1
    assert not garbage.success and "not JSON" in garbage.error and server.attempts["@garbage e"] == 1
    assert pool.stats["http_5xx"] == 2 + 3 and pool.stats["failed"] == 4 and pool.stats["succeeded"] == 1


@needs_aiohttp
def test_a_hung_call_times_out_per_attempt_and_does_not_hold_up_the_others(server):
    with AsyncHTTPPool(server.base_url, workers=4, retries=1, backoff=0.001, timeout=2.0) as pool:
        hung, *fine = pool.wait([pool.spawn("@hang")] + [pool.spawn(f"quick {i}") for i in range(6)], timeout=120)
    assert not hung.success and hung.error == "no answer within timeout=2s (after 1 retries)"
    assert server.attempts["@hang"] == 2 and pool.stats["timeouts"] == 2
    assert all(r.success for r in fine)
    assert until(lambda: server.in_flight == 0)  # the abandoned attempts' connections were closed


@needs_aiohttp
def test_cancel_and_a_wait_timeout_abandon_the_request_on_the_wire(server):
    with AsyncHTTPPool(server.base_url, timeout=300) as pool:
        a, b = pool.spawn("@hang one"), pool.spawn("@hang two")
        assert until(lambda: server.in_flight == 2)
        pool.cancel(a)
        with pytest.raises(KeyError):
            pool.poll(a)
        assert until(lambda: server.in_flight == 1)  # the cancelled coroutine closed its connection
        (r,) = pool.wait([b], timeout=0.2)
        assert not r.success and r.error == "no result within 0.2s"
        assert until(lambda: server.in_flight == 0)
        assert pool.stats["failed"] == 0  # cancelled, not retried into failures


@needs_aiohttp
def test_async_worlds_await_acall_from_their_own_loop(server):
    with AsyncHTTPPool(server.base_url, workers=16, success_marker="DONE") as pool:
        async def many():
            return await asyncio.gather(*(pool.acall(f"async {i}") for i in range(50)))

        results = asyncio.run(many())
    assert [r.output for r in results] == [f"DONE: async {i}" for i in range(50)] and all(r.success for r in results)


@needs_aiohttp
def test_a_closed_port_is_one_error_naming_the_url_when_the_pool_is_built():
    port = closed_port()
    url = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(ConfigError) as err:
        build_shared({"pool": {"class_path": POOL, "init_args": {"base_url": url}}})
    message = str(err.value)
    assert message.startswith("data.env.init_args.shared.pool: AsyncHTTPPool: cannot connect to "
                              f"{url}/chat/completions")
    assert "ConnectionRefusedError" in message and "\n" not in message


@needs_aiohttp
def test_consecutive_connection_failures_end_in_one_error_naming_the_url():
    url = f"http://127.0.0.1:{closed_port()}/v1"
    pool = AsyncHTTPPool(url, probe=False, retries=1, backoff=0.001, max_connect_failures=4)
    try:
        with pytest.raises(PoolUnreachable) as err:
            pool.wait([pool.spawn(f"call {i}") for i in range(4)], timeout=120)
        assert str(err.value).startswith(f"AsyncHTTPPool: {url}/chat/completions is unreachable: ")
        assert "connection attempts in a row failed" in str(err.value) and "\n" not in str(err.value)
        assert pool.stats["connect_errors"] >= 4
        with pytest.raises(PoolUnreachable):
            pool.spawn("again")
    finally:
        pool.close()


@needs_aiohttp
def test_an_answer_resets_the_connection_failure_count(server):
    with AsyncHTTPPool(server.base_url, retries=0, max_connect_failures=2) as pool:
        for _ in range(3):  # errors with an answer are not connection failures
            (r,) = pool.wait([pool.spawn("@status=503")], timeout=60)
            assert not r.success
        assert pool.stats["connect_errors"] == 0 and pool._unreachable is None


@needs_aiohttp
def test_orchestration_worlds_on_the_pool_and_a_server_that_goes_away_mid_run():
    server = LocalChatServer().start()
    env = ExternalBatchedEnv(
        4, world=PoolOrchestrationWorld, step_timeout=120,
        shared={"pool": {"class_path": POOL, "init_args": {"base_url": server.base_url, "success_marker": "DONE",
                                                            "retries": 1, "backoff": 0.001,
                                                            "max_connect_failures": 3}}})
    try:
        pool = env.shared["pool"]
        env.reset()
        width = len(env.action_spec.nvec)
        r = env.step(torch.ones(4, width, dtype=torch.long))  # delegate every slot
        assert r.obs.shape == (4, *env.observation_shape)
        assert server.stats()["requests"] == pool.stats["succeeded"] > 0
        server.stop()
        with pytest.raises(ExternalWorldError) as err:
            for _ in range(10):  # an episode may end (no delegation left) before every actor asks again
                env.step(torch.ones(4, width, dtype=torch.long))
        message = str(err.value)
        assert "PoolUnreachable" in message and f"{server.base_url}/chat/completions is unreachable" in message
        assert "\n" not in message
    finally:
        env.close()
        server.stop()
    assert pool._closed and not pool._thread.is_alive()  # the env closed the pool it built


def test_without_aiohttp_the_pool_is_one_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "aiohttp", None)  # `import aiohttp` raises ImportError
    with pytest.raises(ConfigError) as err:
        build_shared({"pool": {"class_path": POOL, "init_args": {"base_url": "http://127.0.0.1:9/v1"}}})
    message = str(err.value)
    assert message.startswith("data.env.init_args.shared.pool: AsyncHTTPPool needs aiohttp")
    assert "pip install .[http]" in message and "\n" not in message


@needs_aiohttp
@pytest.mark.parametrize("bad", [{"workers": 0}, {"timeout": 0}, {"retries": -1}, {"base_url": "127.0.0.1:80"}])
def test_bad_arguments_are_one_error_naming_the_field(bad):
    args = {"base_url": "http://127.0.0.1:9/v1", "probe": False, **bad}
    with pytest.raises(ConfigError) as err:
        build_shared({"pool": {"class_path": POOL, "init_args": args}})
    assert next(iter(bad)) in str(err.value)


@needs_aiohttp
def test_used_after_close_is_an_error(server):
    pool = AsyncHTTPPool(server.base_url)
    pool.close()
    pool.close()  # idempotent
    with pytest.raises(RuntimeError, match=r"AsyncHTTPPool.spawn: the pool is closed \(close\(\) was called\)"):
        pool.spawn("late")


@needs_aiohttp
def test_the_external_config_switches_to_the_async_pool_by_class_path(tmp_cwd):
    from parlightning.cli.fit import main

    with LocalChatServer() as server:
        shared = {"pool": {"class_path": POOL, "init_args": {"base_url": server.base_url, "success_marker": "DONE"}}}
        cli = main(["--config", os.path.join(ROOT, "configs", "external.yaml"), "--trainer.max_epochs", "1",
                    "--trainer.enable_progress_bar", "false", "--data.num_envs", "4", "--data.num_steps", "4",
                    "--data.env.init_args.shared", json.dumps(shared)])
        assert cli.datamodule.env_steps == 16 and server.stats()["requests"] > 0


@needs_aiohttp
def test_the_benchmark_runs_quick():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench_http_pool.py"), "--quick"],
                         capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    header = next(line for line in lines if line.startswith("| pool |"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    rows = [dict(zip(columns, (c.strip() for c in line.strip("|").split("|"))))
            for line in lines if line.startswith("| ") and "Pool |" in line]
    assert [row["pool"] for row in rows] == ["AsyncHTTPPool", "HTTPPool"]
    for row in rows:  # every call answered, and the server saw calls overlap
        assert row["calls"] == "500" and row["failed"] == "0" and int(row["server peak in flight"]) > 1
    assert rows[0]["peak threads"] == "2" and int(rows[1]["peak threads"]) > 2  # main + loop; a thread per call
    assert any(line.startswith("load average") for line in lines)
