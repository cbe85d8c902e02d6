"""`HTTPPool`: every subagent is one chat completion from an OpenAI-compatible endpoint
(`POST {base_url}/chat/completions`), run on a thread pool (the call waits on the socket, which
releases the GIL). Standard library only; no network is touched unless you point it somewhere.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import itertools
import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Optional

from parlightning.config_types import PositiveFinite, PositiveInt, check_args
from parlightning.method_args import checked_methods
from parlightning.subagents.pool import (MAX_REPLY_BYTES, POOL_SPECS, PoolBase, PoolClosedError, SubagentResult,
                                         chat_reply)


def prompt_of(instruction: Any) -> str:
    """The user message for an instruction: its `prompt` field, a string as is, else JSON."""
    if isinstance(instruction, dict) and "prompt" in instruction:
        return str(instruction["prompt"])
    return instruction if isinstance(instruction, str) else json.dumps(instruction, sort_keys=True)


def _probe(base_url: str, timeout: float) -> None:
    """One TCP connection to the endpoint's host and port, or a ValueError naming them."""
    import socket
    import urllib.parse

    parts = urllib.parse.urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout).close()
    except OSError as err:
        raise ValueError(f"HTTPPool: nothing answers at {parts.hostname}:{port} ({type(err).__name__}: {err}); start "
                         "the endpoint or fix base_url (probe: false skips this check)") from None


class EndpointFailing(RuntimeError):
    """`max_endpoint_failures` requests in a row got no usable answer from the endpoint."""


def _through_proxy(url: str) -> str:
    """Words naming the proxy the standard library sends `url` through (HTTP_PROXY / HTTPS_PROXY in
    the environment, not bypassed by NO_PROXY), or ""."""
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return ""
    return (f", sent through the proxy {proxy} ({parts.scheme.upper()}_PROXY in the environment: unset it, or add "
            f"{parts.hostname} to NO_PROXY, if the server is reached directly)")


def check_request_text(pool: str, **values: Any) -> None:
    """The strings a pool puts into every request: `model` a non-empty string; `api_key` one token
    (no whitespace or control characters: a newline would end the Authorization header, and every
    call would fail with a header error instead of reaching the server); `system` and
    `success_marker` strings or None; `api_key` and `success_marker` not empty (an empty marker is in
    every reply, an empty key is no key: null says either)."""
    for name, value in values.items():
        if value is None and name != "model":
            continue
        if not isinstance(value, str) or (name == "model" and not value.strip()):
            raise ValueError(f"{pool}: {name} must be a {'non-empty ' if name == 'model' else ''}string"
                             f"{'' if name == 'model' else ' or null'}, got {value!r:.60}")
        if value == "" and name == "success_marker":
            raise ValueError(f"{pool}: success_marker is '', which every reply contains, so every answer would count "
                             "as a success (an unset environment variable?); give the text a successful reply holds, "
                             "or null to count every answer")
        if value == "" and name == "api_key":
            raise ValueError(f"{pool}: api_key is '' (an unset environment variable?): the requests would go without "
                             "a key; give the key, or null for a server that needs none")
        if name == "api_key" and any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value):
            raise ValueError(f"{pool}: api_key holds whitespace or a control character (e.g. a newline copied with "
                             "it); give the key alone, one line with no spaces")
        if name == "api_key" and not value.isascii():  # an HTTP header is latin-1 at most; keys are ASCII
            bad = next(c for c in value if not c.isascii())
            raise ValueError(f"{pool}: api_key holds {bad!r}, which is not ASCII (a key pasted with a typographic "
                             "character such as '…' or a curly quote?); give the key exactly as issued")


@checked_methods(**POOL_SPECS)
class HTTPPool(PoolBase):
    """Subagents as chat completions; see the module docstring.

    Args:
        base_url: e.g. `http://127.0.0.1:8000/v1`.
        model: the `model` field of each request.
        workers: concurrent requests.
        timeout: seconds per request (a slower answer is a failed subagent).
        api_key: sent as `Authorization: Bearer ...` when given.
        system: an optional system message.
        success_marker: the reply counts as a success only if it contains this string (None:
            any well-formed reply succeeds).
        max_tokens: the request's `max_tokens`.
        probe: open (and close) one TCP connection to the endpoint at construction, so a closed
            port or a wrong host is one error before any rollout rather than every subagent
            failing quietly; false skips it (an endpoint that starts later).
        max_endpoint_failures: requests in a row that got no usable answer (no connection, a
            timeout, an HTTP error status, a body that is not a chat completion) after which the
            pool raises `EndpointFailing` naming the URL and the last error, instead of training on
            with every subagent failing (a wrong path, a server that hangs or answers garbage);
            null tolerates any number.
    A result's `steps` are the reply's `usage.completion_tokens` (1 when absent); `output` its text.
    """

    def __init__(self, base_url: str, model: str = "default", workers: PositiveInt = 4, timeout: PositiveFinite = 30.0,
                 api_key: Optional[str] = None, system: Optional[str] = None,
                 success_marker: Optional[str] = None, max_tokens: PositiveInt = 256, probe: bool = True,
                 max_endpoint_failures: Optional[PositiveInt] = 8) -> None:
        workers, timeout, max_tokens, max_endpoint_failures = check_args("HTTPPool", HTTPPool.__init__,
                                                                         locals()).values()
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"HTTPPool: base_url must start with http:// or https://, got {base_url!r}")
        check_request_text("HTTPPool", model=model, api_key=api_key, system=system, success_marker=success_marker)
        import urllib.parse
        try:
            urllib.parse.urlsplit(base_url).port
        except ValueError as err:
            raise ValueError(f"HTTPPool: base_url {base_url!r}: {err}; give a port in 1..65535") from None
        if probe:
            _probe(base_url, min(float(timeout), 10.0))
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.timeout, self.api_key, self.system = model, timeout, api_key, system
        self.success_marker, self.max_tokens = success_marker, max_tokens
        self._executor = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="http-subagent")
        self._futures: dict[int, concurrent.futures.Future] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._closed = False
        self.max_endpoint_failures, self._failures_in_a_row = max_endpoint_failures, 0

    def _request(self, instruction: Any) -> SubagentResult:
        start = time.perf_counter()
        messages = ([{"role": "system", "content": self.system}] if self.system else []) + [
            {"role": "user", "content": prompt_of(instruction)}]
        body = json.dumps({"model": self.model, "messages": messages, "max_tokens": self.max_tokens}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                reply = json.loads(self._read_whole(response, start))
            text, steps = chat_reply(reply)  # content a string, completion_tokens a count: else ValueError
        except (urllib.error.URLError, http.client.HTTPException, TimeoutError, OSError, ValueError, KeyError,
                IndexError, TypeError) as err:  # HTTPException: a port that speaks another protocol, a cut reply
            with self._lock:
                self._failures_in_a_row += 1
                failing = self.max_endpoint_failures is not None and self._failures_in_a_row >= self.max_endpoint_failures
            if failing:
                shown = " ".join(f"{type(err).__name__}: {err}".split())[:200]
                raise EndpointFailing(f"HTTPPool: {self.url}: {self._failures_in_a_row} requests in a row got no usable "
                                      f"answer (last: {shown}){_through_proxy(self.url)}; fix base_url / model or the "
                                      "server (max_endpoint_failures: null tolerates this)") from None
            return SubagentResult(False, 0, time.perf_counter() - start, error=f"{type(err).__name__}: {err}")
        with self._lock:
            self._failures_in_a_row = 0
        success = self.success_marker is None or self.success_marker in text
        return SubagentResult(success, steps, time.perf_counter() - start, text)

    def _read_whole(self, response: Any, start: float) -> bytes:
        """The reply's body within `timeout` of the request's start (a server that drips a byte at a
        time fails the call at most one socket timeout later) and at most MAX_REPLY_BYTES."""
        chunks, size = [], 0
        while True:
            if time.perf_counter() - start > self.timeout:
                raise TimeoutError(f"no whole reply within timeout={self.timeout:g}s (the server sent {size} bytes)")
            chunk = response.read1(65536)
            if not chunk:
                if getattr(response, "length", None):  # the server closed before the body it declared
                    raise ValueError(f"the reply's body was cut off (incomplete: {size} bytes of the "
                                     f"{size + response.length} its Content-Length declared)")
                return b"".join(chunks)
            size += len(chunk)
            if size > MAX_REPLY_BYTES:
                raise ValueError(f"the reply is larger than {MAX_REPLY_BYTES >> 20} MiB; a chat completion is not")
            chunks.append(chunk)

    def spawn(self, instruction: Any) -> int:
        with self._lock:
            if self._closed:
                raise PoolClosedError("HTTPPool.spawn: the pool is closed (close() was called); build a new HTTPPool")
            handle = next(self._ids)
            self._futures[handle] = self._executor.submit(self._request, instruction)
        return handle

    def poll(self, handle: int) -> Optional[SubagentResult]:
        with self._lock:
            future = self._futures.get(handle)
            if future is None:
                raise self._unknown(handle, "poll")
            if not future.done():
                return None
            del self._futures[handle]
        return future.result() if not future.cancelled() else SubagentResult(False, 0, 0.0, error="cancelled")

    def cancel(self, handle: int) -> None:
        with self._lock:
            future = self._futures.pop(handle, None)
        if future is not None:
            future.cancel()  # a request already on the wire finishes and is ignored

    def close(self) -> None:
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)
