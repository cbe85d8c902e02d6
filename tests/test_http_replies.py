"""Both HTTP pools bound what a server can do to a call: a reply dripped a byte at a time fails the
call (the sync pool within about twice its `timeout`; the async pool's own total timeout), and a reply
larger than MAX_REPLY_BYTES fails it instead of filling memory. Each is that subagent's failure,
named in its `error`, and the pool goes on."""

import socket
import threading
import time

import pytest

from parlightning.subagents.async_http import AsyncHTTPPool
from parlightning.subagents.http import HTTPPool
from parlightning.subagents.pool import MAX_REPLY_BYTES

REPLY = b'{"choices": [{"message": {"content": "done"}}], "usage": {"completion_tokens": 3}}'


class RawServer:
    """Answers every POST with `mode`: "drip" (the reply a byte every 0.3 s, ~30 s in all), "huge"
    (a body over MAX_REPLY_BYTES, declared and sent) or "ok"."""

    def __init__(self, mode: str) -> None:
        self.mode, self.sock = mode, socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                got = conn.recv(65536)
                if not got:
                    return
                data += got
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(next((ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(
                b"content-length")), b"0"))
            while len(body) < length:
                body += conn.recv(65536)
            if self.mode == "banner":  # another protocol on the port
                conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
                return
            payload = b"x" * (MAX_REPLY_BYTES + 1024) if self.mode == "huge" else REPLY + b" " * 100
            declared = len(payload) + (400 if self.mode == "partial" else 0)  # partial: the body is cut short
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                         + str(declared).encode() + b"\r\nConnection: close\r\n\r\n")
            if self.mode == "drip":
                for byte in payload:
                    if self.stop.wait(0.3):
                        return
                    conn.sendall(bytes([byte]))
            else:
                conn.sendall(payload)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def _one_call(pool, deadline_s: float):
    try:
        handle = pool.spawn("add 2 and 3")
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            result = pool.poll(handle)
            if result is not None:
                return result
            time.sleep(0.05)
        raise AssertionError(f"no result within {deadline_s} s")
    finally:
        pool.close()


@pytest.mark.parametrize("pool_cls", [HTTPPool, AsyncHTTPPool])
@pytest.mark.parametrize("mode,said", [("drip", "timeout=2s"), ("huge", "larger than 16 MiB")])
def test_a_dripping_or_huge_reply_is_that_subagents_failure(pool_cls, mode, said):
    server = RawServer(mode)
    try:
        extra = {"retries": 0} if pool_cls is AsyncHTTPPool else {}
        result = _one_call(pool_cls(server.url, timeout=2.0, workers=1, **extra), deadline_s=25.0)
    finally:
        server.close()
    assert result.success is False and said in (result.error or ""), result


@pytest.mark.parametrize("pool_cls", [HTTPPool, AsyncHTTPPool])
def test_a_well_formed_reply_still_succeeds(pool_cls):
    server = RawServer("ok")
    try:
        result = _one_call(pool_cls(server.url, timeout=10.0, workers=1), deadline_s=25.0)
    finally:
        server.close()
    assert result.success is True and result.steps == 3 and result.output == "done", result


@pytest.mark.parametrize("mode,said", [("partial", "cut off (incomplete"), ("banner", "BadStatusLine")])
def test_a_cut_reply_or_another_protocol_is_the_sync_pools_failed_call(mode, said):
    server = RawServer(mode)
    try:
        result = _one_call(HTTPPool(server.url, timeout=5.0, workers=1), deadline_s=25.0)
    finally:
        server.close()
    assert result.success is False and said in (result.error or ""), result
