"""Subagent calls in flight from one process: `AsyncHTTPPool` (one event loop, aiohttp) beside the
thread-based `HTTPPool` (urllib, one thread per call in flight) on the same work, against a local
OpenAI-compatible server (`parlightning.subagents.chat_server`, its own process) that answers each
call after a fixed latency.

    python scripts/bench_http_pool.py             # latency 200 ms, then 2 s; 1,000 and 2,000 calls in flight
    python scripts/bench_http_pool.py --quick     # seconds: 100 in flight, 50 ms
    python scripts/bench_http_pool.py --latency 0.5 --rows async:4000:20000

Each row runs in a fresh child process (its peak RSS is its own): it keeps `workers` calls
outstanding (closed loop: one finishes, the next is spawned, until `calls` are done) through the
pool's `spawn`/`poll` interface, as orchestration worlds do. Columns: calls/s over the whole run;
the server's peak and mean requests in flight (over the whole run, and steady: from the first
round's end to the last spawn, before the drain); the
calls per second the latency allows at that concurrency (`workers / latency`); client CPU seconds
per 1,000 calls; peak threads; peak RSS and its growth between the run's first half and its end
(bounded memory: ~0); TCP connections the server accepted (keep-alive reuses them). Prints a
table and the load average; writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from parlightning.cli.arg_types import ScriptParser, comma_list, non_negative_float, positive_float, text_item  # noqa: E402
from parlightning.cli.script_main import sub_run_failed  # noqa: E402

ROW_MAX = 1_000_000  # in-flight calls or calls per row: past this a row exhausts file handles or memory


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child(kind: str, url: str, workers: int, calls: int, timeout: float) -> dict:
    """One row: keep `workers` calls outstanding until `calls` finished; the client's numbers."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 4 * workers + 256), hard), hard))
    if kind == "async":
        from parlightning.subagents.async_http import AsyncHTTPPool

        pool = AsyncHTTPPool(url, workers=workers, timeout=timeout, success_marker="DONE")
    else:
        from parlightning.subagents.http import HTTPPool

        pool = HTTPPool(url, workers=workers, timeout=timeout, success_marker="DONE")
    rss_start = rss_mb()
    cpu0, t0 = os.times(), time.perf_counter()
    spawned, ok, failed, threads, rss_half = 0, 0, 0, threading.active_count(), None
    window: list[dict] = []  # server stats when the steady phase starts (a round done) and ends (the last spawn)
    errors: dict[str, int] = {}
    outstanding: list[int] = []
    while spawned < min(workers, calls):
        outstanding.append(pool.spawn(f"subtask {spawned}"))
        spawned += 1
    while outstanding:
        time.sleep(0.01)  # the same sweep for both pools; its cost is in the client CPU column
        still = []
        for h in outstanding:
            r = pool.poll(h)
            if r is None:
                still.append(h)
                continue
            if r.success:
                ok += 1
            else:
                failed += 1
                key = (r.error or "?")[:80]
                errors[key] = errors.get(key, 0) + 1
            if spawned < calls:
                still.append(pool.spawn(f"subtask {spawned}"))
                spawned += 1
        outstanding = still
        if (len(window) == 0 and ok + failed >= workers) or (len(window) == 1 and spawned == calls):
            window.append(server_call(url, "/stats"))
        threads = max(threads, threading.active_count())
        if rss_half is None and ok + failed >= calls // 2:
            rss_half = rss_mb()
    wall = time.perf_counter() - t0
    cpu1 = os.times()
    pool.close()
    steady = None
    if len(window) == 2 and window[1]["clock"] > window[0]["clock"]:
        steady = (window[1]["in_flight_seconds"] - window[0]["in_flight_seconds"]) / (
            window[1]["clock"] - window[0]["clock"])
    return {"ok": ok, "steady": steady, "failed": failed, "errors": errors, "wall": wall, "threads": threads,
            "cpu": (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system), "rss_start": rss_start,
            "rss_half": rss_half if rss_half is not None else rss_mb(), "rss_end": rss_mb(),
            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


DEFAULT_ROWS = {  # latency -> rows: at 200 ms the CPUs bound calls/s; at 2 s the pools can hold every call in flight
    0.2: "async:1000:10000,threads:1000:10000,async:2000:20000,async:1000:20000",
    2.0: "async:1000:4000,threads:1000:4000,async:2000:8000,threads:2000:8000",
}


def server_call(base_url: str, path: str, method: str = "GET") -> dict:
    """The local server's /stats (or /stats/reset), over a connection of its own."""
    request = urllib.request.Request(base_url.rstrip("/") + path, data=b"" if method == "POST" else None,
                                     method=method)
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _row(spec: str) -> str:
    """One row: kind:workers:calls, kind async or threads, counts 1..ROW_MAX."""
    parts = spec.split(":")
    if len(parts) != 3 or parts[0] not in ("async", "threads") or not all(
            p.isdigit() and 0 < int(p) <= ROW_MAX for p in parts[1:]):
        raise argparse.ArgumentTypeError(f"must be kind:workers:calls (kind async or threads, counts 1..{ROW_MAX}; "
                                         f"e.g. async:1000:10000), got {spec!r}")
    return spec


def _rows(text: str) -> str:
    """argparse type: comma-separated rows (`_row`), kept as text."""
    comma_list(_row)(text)
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = ScriptParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="seconds: 100 in flight, 50 ms latency")
    parser.add_argument("--latency", type=non_negative_float, nargs="+", default=None,
                        help="server seconds per call, one table each (default 0.2 2.0)")
    parser.add_argument("--rows", type=_rows, default=None,
                        help="comma-separated kind:workers:calls, kind async or threads (default: "
                             + "; ".join(f"{k} s: {v}" for k, v in DEFAULT_ROWS.items()) + ")")
    parser.add_argument("--timeout", type=positive_float, default=60.0, help="per-call timeout of both pools")
    parser.add_argument("--child", nargs=4, type=text_item, metavar=("KIND", "URL", "WORKERS", "CALLS"), help=argparse.SUPPRESS)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    if args.child:
        kind, url, workers, calls = args.child
        print(json.dumps(child(kind, url, int(workers), int(calls), args.timeout)))
        return
    latencies = args.latency or ([0.05] if args.quick else list(DEFAULT_ROWS))
    plans = {}
    for latency in latencies:
        rows = args.rows or ("async:100:500,threads:100:500" if args.quick else
                             DEFAULT_ROWS.get(latency, DEFAULT_ROWS[0.2]))
        plans[latency] = []
        for spec in rows.split(","):
            kind, workers, calls = _row(spec).split(":")
            plans[latency].append((kind, int(workers), int(calls)))
    load_before = os.getloadavg()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} CPUs; python "
          f"{sys.version.split()[0]}; command: python scripts/bench_http_pool.py {' '.join(sys.argv[1:])}".rstrip())
    for latency, plan in plans.items():
        table(latency, plan, args.timeout)
    load_after = os.getloadavg()
    print(f"load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load_before)}; "
          f"after: {', '.join(f'{x:.2f}' for x in load_after)}")


def table(latency: float, plan: list, timeout: float) -> None:
    """One server at `latency`, one row per (kind, workers, calls), each in its own child process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    server = subprocess.Popen([sys.executable, "-m", "parlightning.subagents.chat_server", "--latency", str(latency)],
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = server.stdout.readline().strip()
        if not line.startswith("listening on "):
            raise SystemExit(f"error: the local chat server did not start (it printed {line!r})")
        base_url = line.removeprefix("listening on ")
        print(f"\nserver latency {latency * 1000:g} ms\n")
        print("| pool | workers | calls | failed | wall s | calls/s | latency bound calls/s | server peak in flight "
              "| server mean in flight: run / steady | client CPU s / 1k calls | peak threads | peak RSS MB "
              "| RSS growth 2nd half MB | connections |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for kind, workers, calls in plan:
            server_call(base_url, "/stats/reset", "POST")
            out = subprocess.run([sys.executable, __file__, "--timeout", str(timeout), "--child", kind, base_url,
                                  str(workers), str(calls)], capture_output=True, text=True, env=env)
            if out.returncode != 0:
                raise sub_run_failed(f"the {kind} row", out.returncode, out.stderr)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            s = server_call(base_url, "/stats")
            name = "AsyncHTTPPool" if kind == "async" else "HTTPPool"
            steady = "-" if r["steady"] is None else f"{r['steady']:.0f}"
            print(f"| {name} | {workers} | {calls} | {r['failed']} | {r['wall']:.2f} | {calls / r['wall']:.0f} "
                  f"| {workers / latency:.0f} | {s['peak_in_flight']} | {s['busy_seconds'] / r['wall']:.0f} / {steady} "
                  f"| {1000 * r['cpu'] / calls:.2f} | {r['threads']} | {r['peak_rss']:.0f} "
                  f"| {r['rss_end'] - r['rss_half']:+.1f} | {s['connections']} |", flush=True)
            for error, n in sorted(r["errors"].items(), key=lambda e: -e[1])[:3]:
                print(f"#   {n} x {error}")
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    from parlightning.cli.script_main import run_main

    run_main(main)
