"""`AsyncHTTPPool`: every subagent is one chat completion from an OpenAI-compatible endpoint
(`POST {base_url}/chat/completions`), like `HTTPPool`, but all calls run as coroutines on ONE
asyncio event loop in one background thread (aiohttp), not one OS thread per call: thousands of
calls in flight cost a coroutine and a socket each.

Same interface and arguments as `HTTPPool` (`spawn`/`poll`/`wait`/`cancel`/`close`; `base_url`,
`model`, `workers`, `timeout`, `api_key`, `system`, `success_marker`, `max_tokens`), so a config
switches pools by `class_path` alone; `workers` here is the number of requests in flight at once
(a semaphore on the loop), not threads. On top:

- retries with backoff on 429, 5xx, timeouts and dropped connections (`retries`, `backoff`,
  `max_backoff`: exponential with jitter), honouring the server's `retry-after-ms` / `Retry-After`
  (seconds or an HTTP date; at most `max_retry_after`); other 4xx fail at once;
- `timeout` per attempt, counted from when the request may go out (waiting for a free slot under
  `workers` does not count); a timed-out attempt is retried like a 5xx;
- connection reuse: one `aiohttp.ClientSession` with a keep-alive connection pool (`workers`
  connections at most);
- an unreachable endpoint is one clear error naming the URL, never thousands of silent failures:
  `probe` (default on) opens a TCP connection to the host when the pool is built (a config error
  before any rollout), and `max_connect_failures` consecutive failed connection attempts (no answer
  of any kind in between) make every later `poll`/`wait`/`spawn` raise `PoolUnreachable`, and so do
  `max_endpoint_failures` calls in a row that got no usable answer after their retries (a server
  answering 503 to everything, a wrong path);
- `stats`: counters read at any time (calls, retries, 429s, 5xx, timeouts, in flight, peak).

`async def` worlds can `await pool.acall(instruction)` from any event loop (no handle, no thread).
aiohttp is an optional extra: `pip install 'parlightning[http]'` (or `pip install .[http]`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import email.utils
import itertools
import json
import random
import threading
import time
import urllib.parse
from typing import Any, Iterable, Mapping, Optional

from parlightning.config_types import NonNegativeFinite, NonNegativeInt, PositiveFinite, PositiveInt, check_args
from parlightning.errors import ConfigError
from parlightning.subagents.http import check_request_text, prompt_of
from parlightning.method_args import Lifecycle, State, checked_methods
from parlightning.subagents.pool import (
    MAX_REPLY_BYTES, POOL_LIFECYCLE, POOL_SPECS, PoolBase, PoolClosedError, SubagentResult, chat_reply, checked_timeout,
)

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})  # the statuses OpenAI's own client retries (5xx all)


def import_aiohttp() -> Any:
    """aiohttp, or one ConfigError naming the extra to install."""
    try:
        import aiohttp
    except ImportError:
        raise ConfigError("AsyncHTTPPool needs aiohttp, which is not installed: pip install 'parlightning[http]' "
                          "(in a checkout: pip install .[http]), or use parlightning.subagents.HTTPPool "
                          "(standard library, one thread per call)") from None
    return aiohttp


class PoolUnreachable(RuntimeError):
    """The endpoint refused or dropped `max_connect_failures` connection attempts in a row."""


def retry_after_seconds(headers: Any) -> Optional[float]:
    """The wait a 429/503 answer asks for: `retry-after-ms` (OpenAI), else `Retry-After` in seconds
    or as an HTTP date; None when absent or unreadable."""
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return max(float(value) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _on_own_loop(pool: Any) -> bool:
    try:
        return asyncio.get_running_loop() is pool._loop
    except RuntimeError:  # no loop running: not awaited from a coroutine
        return False


# the pool's lifecycle, and `call`: a coroutine of the pool's own loop (its session lives there)
ASYNC_POOL_LIFECYCLE = Lifecycle({**POOL_LIFECYCLE.states, "loop": State(
    "awaited outside the pool's own event loop (its connections live there); from another event loop await "
    "pool.acall(instruction), from a thread use spawn and wait", holds=_on_own_loop)}, requires={"call": "loop"},
    closes="close", closed=POOL_LIFECYCLE.states["open"])


@checked_methods(**POOL_SPECS, acall=POOL_SPECS["spawn"], call=POOL_SPECS["spawn"], lifecycle=ASYNC_POOL_LIFECYCLE)
class AsyncHTTPPool(PoolBase):
    """Subagents as chat completions on one event loop; see the module docstring.

    Args:
        base_url: e.g. `http://127.0.0.1:8000/v1`.
        model: the `model` field of each request.
        workers: requests in flight at once (more spawns wait their turn on the loop).
        timeout: seconds per attempt (a slower answer is retried, then a failed subagent).
        api_key: sent as `Authorization: Bearer ...` when given.
        system: an optional system message.
        success_marker: the reply counts as a success only if it contains this string (None: any
            well-formed reply succeeds).
        max_tokens: the request's `max_tokens`.
        retries: further attempts after a 429, 5xx, timeout or dropped connection.
        backoff, max_backoff: the wait before retry r is `min(max_backoff, backoff * 2**r)` (half
            fixed, half random), unless the server said how long (`Retry-After`).
        max_retry_after: the longest server-requested wait honoured (seconds; longer ones are cut to it).
        max_connect_failures: consecutive failed connection attempts after which the pool reports
            the endpoint unreachable (`PoolUnreachable`, naming the URL).
        probe: open a TCP connection to the endpoint when the pool is built (fails fast on a wrong
            port or host; `false` for an endpoint that comes up later).
        extra_body: more fields for every request (e.g. `{temperature: 0.0}`).
        max_endpoint_failures: calls in a row that ended without a usable answer after their retries (an
            HTTP error status, timeouts, a reply that is not a chat completion) after which every later
            `poll`/`wait`/`spawn` raises `PoolUnreachable` naming the URL and the last error (as the
            threaded `HTTPPool`); null tolerates any number.
    A result's `steps` are the reply's `usage.completion_tokens` (1 when absent); `output` its text.
    """

    def __init__(self, base_url: str, model: str = "default", workers: PositiveInt = 256,
                 timeout: PositiveFinite = 30.0, api_key: Optional[str] = None, system: Optional[str] = None,
                 success_marker: Optional[str] = None, max_tokens: PositiveInt = 256, retries: NonNegativeInt = 3,
                 backoff: NonNegativeFinite = 0.5, max_backoff: NonNegativeFinite = 8.0,
                 max_retry_after: NonNegativeFinite = 60.0, max_connect_failures: PositiveInt = 8, probe: bool = True,
                 extra_body: Optional[dict[str, Any]] = None,
                 max_endpoint_failures: Optional[PositiveInt] = 8) -> None:
        typed = check_args("AsyncHTTPPool", AsyncHTTPPool.__init__, locals())  # the annotated ranges (config_types)
        workers, timeout, max_tokens, retries, backoff, max_backoff, max_retry_after, max_connect_failures = (
            typed[k] for k in ("workers", "timeout", "max_tokens", "retries", "backoff", "max_backoff",
                               "max_retry_after", "max_connect_failures"))
        max_endpoint_failures = typed["max_endpoint_failures"]
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"AsyncHTTPPool: base_url must start with http:// or https://, got {base_url!r}")
        if max_backoff < backoff:
            raise ValueError(f"AsyncHTTPPool: max_backoff={max_backoff!r} is below backoff={backoff!r}; the wait "
                             "before retry r is min(max_backoff, backoff * 2**r): raise max_backoff or lower backoff")
        if extra_body is not None and not isinstance(extra_body, Mapping):
            raise ValueError(f"AsyncHTTPPool: extra_body must be a mapping of extra request fields (e.g. "
                             f"{{temperature: 0.2}}), got {type(extra_body).__name__} {extra_body!r:.60}")
        if extra_body is not None:  # sent as JSON with every request: a value JSON cannot hold fails every call
            try:
                json.dumps(dict(extra_body), allow_nan=False)
            except (TypeError, ValueError) as err:
                raise ValueError(f"AsyncHTTPPool: extra_body cannot be sent as JSON ({err}); give numbers, strings, "
                                 "booleans, null, lists and mappings of them") from None
        check_request_text("AsyncHTTPPool", model=model, api_key=api_key, system=system, success_marker=success_marker)
        self._aiohttp = import_aiohttp()
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.workers, self.timeout, self.api_key, self.system = model, workers, timeout, api_key, system
        self.success_marker, self.max_tokens, self.retries = success_marker, max_tokens, retries
        self.backoff, self.max_backoff, self.max_retry_after = backoff, max_backoff, max_retry_after
        self.max_connect_failures, self.extra_body = max_connect_failures, dict(extra_body or {})
        self.stats = dict.fromkeys(("calls", "succeeded", "failed", "retries", "http_429", "http_5xx", "timeouts",
                                    "connect_errors", "in_flight", "peak_in_flight"), 0)
        self._rng = random.Random()
        self._consecutive_connect_failures = 0
        self.max_endpoint_failures, self._failed_calls_in_a_row = max_endpoint_failures, 0
        self._unreachable: Optional[str] = None
        self._futures: dict[int, concurrent.futures.Future] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="async-http-pool", daemon=True)
        self._thread.start()
        try:
            self._run(self._open(), 30.0)
            if probe:
                self._run(self._probe(), timeout + 5.0)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ on the loop
    def _run(self, coro: Any, timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _open(self) -> None:
        aiohttp = self._aiohttp
        connector = aiohttp.TCPConnector(limit=self.workers, limit_per_host=self.workers, ttl_dns_cache=300,
                                         keepalive_timeout=30.0)
        self._session = aiohttp.ClientSession(connector=connector, headers=self._headers(),
                                              json_serialize=json.dumps, raise_for_status=False)
        self._slots = asyncio.Semaphore(self.workers)
        self._timeout = aiohttp.ClientTimeout(total=self.timeout)  # per attempt, from when a slot is free

    async def _probe(self) -> None:
        parts = urllib.parse.urlsplit(self.url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(parts.hostname, port), self.timeout)
        except (OSError, asyncio.TimeoutError) as err:
            why = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
            raise ValueError(f"AsyncHTTPPool: cannot connect to {self.url} ({why}); start the server or fix "
                             "base_url (probe: false skips this check for an endpoint that comes up later)") from None
        writer.close()

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _body(self, instruction: Any) -> bytes:
        messages = ([{"role": "system", "content": self.system}] if self.system else []) + [
            {"role": "user", "content": prompt_of(instruction)}]
        return json.dumps({**self.extra_body, "model": self.model, "messages": messages,
                           "max_tokens": self.max_tokens}).encode()

    def _delay(self, attempt: int, asked: Optional[float]) -> float:
        if asked is not None:
            return min(asked, self.max_retry_after)
        cap = min(self.max_backoff, self.backoff * 2 ** attempt)
        return cap / 2 + self._rng.uniform(0.0, cap / 2)

    def _connect_failed(self, err: BaseException) -> None:
        self.stats["connect_errors"] += 1
        self._consecutive_connect_failures += 1
        if self._consecutive_connect_failures >= self.max_connect_failures and self._unreachable is None:
            self._unreachable = (f"AsyncHTTPPool: {self.url} is unreachable: {self._consecutive_connect_failures} "
                                 f"connection attempts in a row failed (last: {type(err).__name__}: {err}); start the "
                                 "server or fix base_url")

    async def _attempt(self, body: bytes) -> tuple[Optional[int], Any, Optional[float], str]:
        """One request: (status or None, reply json or text, retry-after, error text)."""
        aiohttp = self._aiohttp
        async with self._slots:
            self.stats["in_flight"] += 1
            self.stats["peak_in_flight"] = max(self.stats["peak_in_flight"], self.stats["in_flight"])
            try:
                async with self._session.post(self.url, data=body, timeout=self._timeout) as response:
                    chunks, size = [], 0
                    async for chunk in response.content.iter_chunked(65536):
                        size += len(chunk)
                        if size > MAX_REPLY_BYTES:  # the server answered: another try would not help
                            return 200, None, None, f"the reply is larger than {MAX_REPLY_BYTES >> 20} MiB"
                        chunks.append(chunk)
                    raw = b"".join(chunks)
                    self._consecutive_connect_failures = 0  # an answer of any kind: the endpoint is there
                    status = response.status
                    if status != 200:
                        return status, raw[:200].decode("utf-8", "replace"), retry_after_seconds(response.headers), ""
                    try:
                        return status, json.loads(raw), None, ""
                    except ValueError:
                        return status, None, None, f"reply is not JSON: {raw[:100]!r}"
            except asyncio.TimeoutError:
                self.stats["timeouts"] += 1
                return None, None, None, f"no answer within timeout={self.timeout:g}s"
            except aiohttp.ClientConnectorError as err:
                self._connect_failed(err)
                return None, None, None, f"cannot connect: {err}"
            except aiohttp.ClientError as err:  # dropped connection, bad framing: worth another try
                return None, None, None, f"{type(err).__name__}: {err}"
            finally:
                self.stats["in_flight"] -= 1

    async def call(self, instruction: Any) -> SubagentResult:
        """One subagent, with retries (a coroutine on the pool's loop; see `acall` from elsewhere)."""
        start = time.perf_counter()
        body = self._body(instruction)
        self.stats["calls"] += 1
        error, made = "not attempted", 0
        for attempt in range(self.retries + 1):
            if self._unreachable is not None:
                error = self._unreachable
                break
            status, reply, asked, error = await self._attempt(body)
            if status == 200:
                if error:  # a reply that is not JSON: the server answered, another try would not help
                    break
                try:
                    text, steps = chat_reply(reply)  # content a string, completion_tokens a count
                except ValueError as err:
                    error = f"{self.url}: {err}"
                    break
                self.stats["succeeded"] += 1
                self._failed_calls_in_a_row = 0  # a usable answer: the endpoint works
                success = self.success_marker is None or self.success_marker in text
                return SubagentResult(success, steps, time.perf_counter() - start, text)
            if status is not None:
                if status == 429:
                    self.stats["http_429"] += 1
                elif status >= 500:
                    self.stats["http_5xx"] += 1
                error = f"HTTP {status} from {self.url}: {reply}"
                if status not in RETRY_STATUS and status < 500:
                    break  # a request the server will never accept (400, 401, 404, ...): no retry
            if attempt < self.retries:
                self.stats["retries"] += 1
                made += 1
                await asyncio.sleep(self._delay(attempt, asked))
        self.stats["failed"] += 1
        self._call_failed(error)
        return SubagentResult(False, 0, time.perf_counter() - start,
                              error=f"{error} (after {made} retries)" if made else error)

    def _call_failed(self, error: str) -> None:
        """A call that ended, after its retries, without a usable answer; `max_endpoint_failures` of them in
        a row (any status, timeout or unreadable reply, no usable answer in between) make the pool refuse
        every later call naming the URL, instead of training on with every subagent failing."""
        self._failed_calls_in_a_row += 1
        limit = self.max_endpoint_failures
        if limit is not None and self._failed_calls_in_a_row >= limit and self._unreachable is None:
            shown = " ".join(str(error).split())[:200]
            self._unreachable = (f"AsyncHTTPPool: {self.url}: {self._failed_calls_in_a_row} calls in a row got no usable "
                                 f"answer after their retries (last: {shown}); fix base_url / model or the server "
                                 "(max_endpoint_failures: null tolerates this)")

    async def acall(self, instruction: Any) -> SubagentResult:
        """`await pool.acall(instruction)` from any event loop (an `async def` world's)."""
        self._check_open()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.call(instruction), self._loop))

    # ------------------------------------------------------------------ the pool interface
    def _check_open(self) -> None:
        if self._closed:
            raise PoolClosedError("AsyncHTTPPool: used after close(); build a new AsyncHTTPPool")
        if self._unreachable is not None:
            raise PoolUnreachable(self._unreachable)

    def spawn(self, instruction: Any) -> int:
        self._check_open()
        future = asyncio.run_coroutine_threadsafe(self.call(instruction), self._loop)
        with self._lock:
            handle = next(self._ids)
            self._futures[handle] = future
        return handle

    def _take(self, handle: int) -> SubagentResult:
        with self._lock:
            future = self._futures.pop(handle)
        if future.cancelled():
            return SubagentResult(False, 0, 0.0, error="cancelled")
        return future.result()

    def poll(self, handle: int) -> Optional[SubagentResult]:
        if self._unreachable is not None:
            raise PoolUnreachable(self._unreachable)
        with self._lock:
            future = self._futures.get(handle)
        if future is None:
            raise self._unknown(handle, "poll")
        return self._take(handle) if future.done() else None

    def wait(self, handles: Iterable[int], timeout: Optional[float] = None) -> list[SubagentResult]:
        """Block (no polling) until every handle finished, or `timeout` seconds passed (then the
        unfinished ones are cancelled and reported as failures)."""
        timeout = checked_timeout("AsyncHTTPPool", timeout)
        handles = list(handles)
        with self._lock:
            unknown = [h for h in handles if h not in self._futures]
            if unknown:
                raise self._unknown(unknown[0], "wait")
            futures = [self._futures[h] for h in handles]
        concurrent.futures.wait(futures, timeout)
        if self._unreachable is not None:
            raise PoolUnreachable(self._unreachable)
        results = []
        for h, future in zip(handles, futures):
            if future.done():
                results.append(self._take(h))
            else:
                self.cancel(h)
                results.append(SubagentResult(False, 0, timeout or 0.0, error=f"no result within {timeout:g}s"))
        return results

    def cancel(self, handle: int) -> None:
        with self._lock:
            future = self._futures.pop(handle, None)
        if future is not None:
            future.cancel()  # cancels the coroutine on the loop: an attempt on the wire is abandoned

    def close(self) -> None:
        """Cancel what is in flight, close the connections and stop the loop thread; idempotent."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            futures, self._futures = list(self._futures.values()), {}
        for future in futures:
            future.cancel()
        loop = self._loop
        if threading.current_thread() is self._thread:  # closed from a callback on the loop itself
            loop.stop()
            return
        session = getattr(self, "_session", None)
        if session is not None and loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(session.close(), loop).result(5.0)
            except Exception:
                pass
        if loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout=5.0)
        if not loop.is_running():
            loop.close()

    def __del__(self) -> None:  # a forgotten close() must not leave a loop thread and sockets behind
        try:
            self.close()
        except Exception:
            pass
