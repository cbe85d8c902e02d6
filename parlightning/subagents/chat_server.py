"""`LocalChatServer`: a small OpenAI-compatible `POST /v1/chat/completions` server on 127.0.0.1
(standard library asyncio, HTTP/1.1 with keep-alive), for tests, benchmarks and dry runs of a
config without a model: it answers every prompt with `DONE: <prompt>` after a latency you choose,
and misbehaves on request, so a pool's retries, timeouts and limits can be checked offline.

Latency: `latency` seconds per request, lognormal with median `latency` when `latency_sigma > 0`
(seeded). Faults are asked for inside the prompt, so one server serves every case at once:

    @status=500        always answer HTTP 500 (any status)
    @flaky=2:503       the first 2 requests carrying this prompt get 503, later ones succeed
    @ratelimit=2:1     the first 2 get 429 with `Retry-After: 1` (seconds), later ones succeed
    @hang              never answer (until the client gives up and closes the connection)
    @drop              close the connection without an answer
    @garbage           answer 200 with a body that is not JSON
    @hold              wait until `release()` is called, then answer (for counting calls in flight)

`GET /stats` answers the counters as JSON (requests, peak and current requests in flight, busy
seconds summed over requests, the integral of requests in flight over time and its clock,
connections opened, attempts per prompt); `POST /stats/reset`
zeroes them. In a thread: `with LocalChatServer(latency=0.05) as server: server.base_url`. As a
process (benchmarks): `python -m parlightning.subagents.chat_server --latency 0.2` prints
`listening on http://127.0.0.1:PORT/v1` and serves until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import random
import re
import threading
import time
from typing import Any, Optional

from parlightning.config_types import NonNegativeFinite, PositiveInt, Seed, check_args, restricted_number_type
from parlightning.errors import ConfigError

PortNumber = restricted_number_type("PortNumber", int, [(">=", 0), ("<=", 65535)],
                                    docstring="a TCP port in 0..65535 (0: a free one)")
MAX_SIGMA = 10.0  # a lognormal sigma past this spreads latencies over e^+-30 (and lognormvariate can overflow)
LatencySigma = restricted_number_type("LatencySigma", float, [(">=", 0.0), ("<=", MAX_SIGMA)],
                                      docstring=f"a lognormal sigma in [0, {MAX_SIGMA:g}]")

_DIRECTIVE = re.compile(r"@(status|flaky|ratelimit)=(\d+)(?::(\d+(?:\.\d+)?))?|@(hang|drop|garbage|hold)\b")
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error",
            502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


class LocalChatServer:
    """See the module docstring. `port=0` picks a free port; `base_url` is `http://127.0.0.1:PORT/v1`.
    The arguments are checked here (`check_args`): a latency that is negative or not finite, a sigma
    outside [0, 10], a port outside 0..65535, a seed outside 0..2**32 - 1 or a backlog below 1 is one
    ConfigError naming `LocalChatServer.<argument>`."""

    def __init__(self, latency: NonNegativeFinite = 0.0, latency_sigma: LatencySigma = 0.0, port: PortNumber = 0,
                 seed: Seed = 0, backlog: PositiveInt = 4096) -> None:
        latency, latency_sigma, port, seed, backlog = check_args(
            "LocalChatServer", LocalChatServer.__init__, locals()).values()
        self.latency, self.latency_sigma, self.backlog = latency, latency_sigma, backlog
        self._rng = random.Random(seed)
        self._requested_port = port
        self.port: Optional[int] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._server: Optional[asyncio.AbstractServer] = None
        self._writers: set = set()
        self._released: Optional[asyncio.Event] = None
        self.reset_stats()

    # ------------------------------------------------------------------ counters
    def reset_stats(self) -> None:
        self.requests = self.in_flight = self.peak_in_flight = self.connections = 0
        self.busy_seconds = 0.0
        self._area, self._since = 0.0, time.monotonic()  # integral of requests in flight over time, and its clock
        self.attempts: collections.Counter = collections.Counter()  # prompt -> requests seen
        self.arrivals: dict[str, list[float]] = collections.defaultdict(list)  # prompt -> monotonic arrival times

    def _tick(self) -> None:
        now = time.monotonic()
        self._area += self.in_flight * (now - self._since)
        self._since = now

    def stats(self) -> dict[str, Any]:
        """The counters; `in_flight_seconds` (the integral of requests in flight over time) at `clock`
        (monotonic seconds): the mean in flight over a window is their change's ratio."""
        self._tick()
        return {"requests": self.requests, "in_flight": self.in_flight, "peak_in_flight": self.peak_in_flight,
                "busy_seconds": self.busy_seconds, "connections": self.connections, "attempts": dict(self.attempts),
                "in_flight_seconds": self._area, "clock": self._since}

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # ------------------------------------------------------------------ HTTP
    def _delay(self) -> float:
        if self.latency_sigma > 0 and self.latency > 0:
            return self._rng.lognormvariate(0.0, self.latency_sigma) * self.latency
        return self.latency

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path = (lines[0].split(" ") + ["", ""])[:2]
                fields = (line.partition(":") for line in lines[1:] if line)
                headers = {k.strip().lower(): v.strip() for k, _, v in fields}
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                keep = headers.get("connection", "").lower() != "close"
                if not await self._answer(method, path, body, reader, writer, keep):
                    return
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _send(self, writer: asyncio.StreamWriter, status: int, payload: bytes, keep: bool,
                    extra: tuple[tuple[str, str], ...] = ()) -> None:
        head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}", "Content-Type: application/json",
                f"Content-Length: {len(payload)}", f"Connection: {'keep-alive' if keep else 'close'}"]
        head += [f"{k}: {v}" for k, v in extra]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
        await writer.drain()

    async def _answer(self, method: str, path: str, body: bytes, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter, keep: bool) -> bool:
        """Answer one request; False when the connection must end (dropped or hung)."""
        if method == "GET" and path.endswith("/stats"):
            await self._send(writer, 200, json.dumps(self.stats()).encode(), keep)
            return True
        if method == "POST" and path.endswith("/stats/reset"):
            self.reset_stats()
            await self._send(writer, 200, b"{}", keep)
            return True
        if method != "POST" or not path.endswith("/chat/completions"):
            await self._send(writer, 404, json.dumps({"error": f"no route {method} {path}"}).encode(), keep)
            return True
        try:
            request = json.loads(body)
            prompt = str(request["messages"][-1]["content"])
        except (ValueError, KeyError, IndexError, TypeError):
            await self._send(writer, 400, b'{"error": "body must be a chat completion request"}', keep)
            return True
        start = time.monotonic()
        self.requests += 1
        self.attempts[prompt] += 1
        self.arrivals[prompt].append(start)
        seen = self.attempts[prompt]
        self._tick()
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            for m in _DIRECTIVE.finditer(prompt):
                kind, number, arg, flag = m.groups()
                if flag == "hang":
                    try:
                        await reader.read()  # until the client gives up and closes the connection
                    except ConnectionError:
                        pass
                    return False
                if flag == "drop":
                    return False
                if flag == "hold":
                    if self._released is None:
                        self._released = asyncio.Event()
                    await self._released.wait()
                if flag == "garbage":
                    await self._send(writer, 200, b"not json", keep)
                    return True
                if kind == "status":
                    await self._send(writer, int(number), b'{"error": "injected"}', keep)
                    return True
                if kind == "flaky" and seen <= int(number):
                    await self._send(writer, int(float(arg or 503)), b'{"error": "injected flake"}', keep)
                    return True
                if kind == "ratelimit" and seen <= int(number):
                    await self._send(writer, 429, b'{"error": "rate limited"}', keep, (("Retry-After", arg or "1"),))
                    return True
            delay = self._delay()
            if delay > 0:
                await asyncio.sleep(delay)
            reply = {"object": "chat.completion", "model": request.get("model", "default"),
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": f"DONE: {prompt}"},
                                  "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(prompt.split())}}
            await self._send(writer, 200, json.dumps(reply).encode(), keep)
            return True
        finally:
            self._tick()
            self.in_flight -= 1
            self.busy_seconds += time.monotonic() - start

    def release(self) -> None:
        """Let every `@hold` request (waiting now or later) answer."""
        def go() -> None:
            if self._released is None:
                self._released = asyncio.Event()
            self._released.set()

        if self._loop is not None:
            self._loop.call_soon_threadsafe(go)

    # ------------------------------------------------------------------ lifecycle
    async def serve(self) -> None:
        """Open the socket (sets `port`); serving continues on the running loop."""
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self._requested_port,
                                                  backlog=self.backlog)
        self.port = self._server.sockets[0].getsockname()[1]

    def start(self) -> "LocalChatServer":
        """Serve from a daemon thread with its own event loop; returns once the port is open."""
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        failed: list[OSError] = []

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(self.serve())
            except OSError as err:  # the port is taken, or not ours to bind: told by start(), not a thread traceback
                failed.append(err)
                ready.set()
                self._loop.close()
                return
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="local-chat-server", daemon=True)
        self._thread.start()
        if not ready.wait(10.0):
            raise RuntimeError("LocalChatServer: the server thread did not open its socket within 10 s")
        if failed:
            self._thread.join()
            self._loop, self._thread = None, None
            why = failed[0].strerror or type(failed[0]).__name__
            raise ConfigError(f"LocalChatServer(port): cannot listen on 127.0.0.1:{self._requested_port} ({why}); "
                              "pass port=0 for a free port, or stop what holds this one")
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):
                writer.close()
            if self._server is not None:
                await self._server.wait_closed()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout=5.0)
        except Exception:
            pass
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self._loop = None

    def __enter__(self) -> "LocalChatServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: Optional[list[str]] = None) -> None:
    from parlightning.cli.arg_types import bounded_float, non_negative_float, port_number, random_seed

    parser = argparse.ArgumentParser(prog="python -m parlightning.subagents.chat_server", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=port_number, default=0, help="the port to listen on (default 0: a free one)")
    parser.add_argument("--latency", type=non_negative_float, default=0.2,
                        help="seconds per request (median when lognormal)")
    parser.add_argument("--latency-sigma", type=bounded_float(0.0, MAX_SIGMA), default=0.0,
                        help=f"lognormal sigma in [0, {MAX_SIGMA:g}] (0: fixed latency)")
    parser.add_argument("--seed", type=random_seed, default=0, help="seeds the lognormal latencies")
    args = parser.parse_args(argv)
    server = LocalChatServer(args.latency, args.latency_sigma, args.port, args.seed)

    async def run() -> None:
        try:
            await server.serve()
        except OSError as err:  # the port is taken, or not ours to bind
            raise ConfigError(f"--port: cannot listen on 127.0.0.1:{args.port} ({err.strerror or type(err).__name__}); "
                              "pass --port 0 for a free port, or stop what holds this one") from None
        print(f"listening on {server.base_url}", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    from parlightning.cli.script_main import run_main

    run_main(main)
