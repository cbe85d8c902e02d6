"""One toolkit for every place that starts a process: the start method, the message protocol, the
parent-death watch, stopping (ask, then terminate, then kill) and the errors a run ends with.

Why one: each process stack used to carry its own copy of these five pieces (and imported the
others' private helpers), and each copy had its own gap. Here each piece is written once:

- `start_method(requested, field)` / `context(method, preload)`: `forkserver` where the platform
  has it (children fork from a clean server process, not from a threaded trainer), else `spawn`;
  an unknown method is one `ConfigError` naming the field. `preload` modules are imported once by
  the server, so each child starts without importing torch again.
- `send(conn, message)` / `receive(conn)`: one pickled message per call (the standard pickler,
  highest protocol; tensors by value: no shared-memory handles to leak). Both ends use these, so
  the protocol is the same everywhere: a tuple whose first item names the message.
- `watch_parent(owner)`: a daemon thread in the child that exits it when the process that owns it
  is gone (a killed trainer leaves no children; under forkserver the OS parent is the server, so
  the owner is checked by pid too).
- `stop(processes, connections)`: ask each child to exit (a `None` message), join for a grace
  period, then terminate and at last kill; idempotent, safe from a `weakref.finalize`.
- `Child`: one process and its duplex pipe, with the start handshake (the child's first message is
  `("ready", facts)` or `("error", exception)`), `send` / `receive` that turn a dead child into a
  named error, and `close`. A child that reported an error and exited is never reported as "died
  (exit code 0)": `send` and `receive` read what the child said before it went (`reported`), and
  raise that.
- `ProcessDied` / `ProcessStartError`: the named errors (the first a RuntimeError with the pid and
  exit code, the second a ConfigError: a child that cannot start is a configuration problem);
  `sendable_error(err)` makes any exception cross the pipe with its type and message.

Users: the collector's process transport (`parlightning.collection.transports`) and the external
worlds' worker processes (`parlightning.envs.world_processes`). A pool of subagent processes can use
`Child` the same way (one `Child` per worker, `stop` over all of them).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any, Callable, Optional, Sequence

from parlightning.errors import ConfigError
from parlightning.runtime import waits


def exit_text(code: Optional[int]) -> str:
    """A child's exit status in words: "exit code 3", or "killed by SIGTERM, exit code -15" for a
    process a signal ended (multiprocessing's negative code)."""
    if isinstance(code, int) and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}, exit code {code}"
        except ValueError:
            return f"killed by signal {-code}, exit code {code}"
    return f"exit code {code}"


class ProcessDied(RuntimeError):
    """A child process went away without saying why: `what` (pid N) died (exit code X, or the signal)."""

    def __init__(self, what: str, pid: Optional[int], exitcode: Optional[int]) -> None:
        super().__init__(f"{what} (pid {pid}) died ({exit_text(exitcode)})")
        self.what, self.pid, self.exitcode = what, pid, exitcode


class ProcessStartError(ConfigError):
    """A child process could not start (it exited, or did not report ready in time)."""


def start_method(requested: Optional[str] = None, field: str = "start_method") -> str:
    """`requested`, or forkserver where available, else spawn; an unknown one is a ConfigError on `field`."""
    available = mp.get_all_start_methods()
    method = requested or ("forkserver" if "forkserver" in available else "spawn")
    if method not in available:
        raise ConfigError(f"{field}: {method!r} is not one of {available}")
    return method


def context(method: str, preload: Sequence[str] = ()) -> Any:
    """The multiprocessing context of `method`; under forkserver the server imports `preload` once."""
    ctx = mp.get_context(method)
    if method == "forkserver" and preload:
        ctx.set_forkserver_preload(list(preload))
    return ctx


def send(conn: Connection, message: Any) -> None:
    """One message: pickled here (in C, no GIL hand-offs per tensor), one write."""
    conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


def receive(conn: Connection) -> Any:
    """The next message (blocks); EOFError / OSError when the other end has gone."""
    return pickle.loads(conn.recv_bytes())


def sendable_error(err: BaseException, where: str = "child process") -> BaseException:
    """`err` if it survives pickling (its type and message reach the parent), else a RuntimeError
    with its type, message and traceback."""
    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:  # the innermost frame, not the whole traceback: the parent reports it in one line
        frames = traceback.extract_tb(err.__traceback__)
        at = f" (at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
        try:
            text = " ".join(str(err).split())[:300]
        except Exception:  # noqa: BLE001 (an exception whose __str__ fails)
            text = "?"
        return RuntimeError(f"{where}: {type(err).__name__}: {text}{at}")


def _watch(owner: int, interval: float) -> None:
    parent = os.getppid()
    while True:
        time.sleep(interval)
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            os._exit(1)
        except PermissionError:
            pass
        if os.getppid() != parent:
            os._exit(1)


def watch_parent(owner: int, interval: float = 1.0) -> threading.Thread:
    """Exit this (child) process when process `owner` is gone or this process is re-parented."""
    thread = threading.Thread(target=_watch, args=(owner, interval), name="owner-watch", daemon=True)
    thread.start()
    return thread


def stop(processes: Sequence[Any], connections: Sequence[Connection], grace: float = 2.0) -> None:
    """Ask every child to exit (a None message), wait `grace` seconds in all, then terminate (and at
    last kill) the ones still running with the processes they started, and close the connections.
    Idempotent."""
    for conn in connections:
        try:
            send(conn, None)
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + grace
    for proc in processes:
        proc.join(timeout=max(deadline - time.monotonic(), 0.05))
    for proc in processes:
        if not proc.is_alive():
            continue
        left = started_processes(0, root=proc.pid)  # what a stuck child started (a world's program): ended with it
        if _stopped(proc.pid):  # SIGSTOP'd: SIGTERM would wait for a SIGCONT that never comes; SIGKILL acts now
            proc.kill()
        else:
            proc.terminate()
        proc.join(timeout=1.0)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=1.0)
        end_processes(left)
    for conn in connections:
        conn.close()


def _child_main(target: Callable[..., None], wait_slot: Any, conn: Connection, *args: Any) -> None:
    """The child's entry: its declared waits are published to its parent, then `target` runs. A child
    never prints a traceback of its own (the run's one line is its parent's): an exception that
    escapes `target` (a bug, a message that cannot be pickled) is sent to the parent as
    `("error", exc)`, which `Child` reports, and the child exits with status 1 without a word."""
    waits.serve_in_child(wait_slot)
    try:
        target(conn, *args)
    except SystemExit:
        raise
    except BaseException as err:  # noqa: BLE001 (KeyboardInterrupt too: the parent reports the run's end)
        try:
            send(conn, ("error", sendable_error(err, f"{mp.current_process().name} process")))
        except Exception:  # noqa: BLE001 (the parent has gone: nobody to tell)
            pass
        os._exit(1)


class Child:
    """One child process and its duplex pipe (see the module docstring).

    Args:
        target: the child's entry point, called as `target(conn, owner_pid, *args)`; it reports
            `("ready", facts)` (or `("error", exc)`) first, then answers messages until `None`.
        args: picklable arguments after the connection and the owner's pid.
        name: the process name, also how errors name it (e.g. "the collector process").
        method: a start method (`start_method` picks the default); `preload`: forkserver preloads.
        daemon: a daemonic process (ended with this one; it cannot start processes of its own).
    """

    def __init__(self, target: Callable[..., None], args: Sequence[Any], name: str, what: str,
                 method: Optional[str] = None, preload: Sequence[str] = (), daemon: bool = False) -> None:
        ctx = context(start_method(method), preload)
        self.what = what
        self.conn, theirs = ctx.Pipe(duplex=True)
        # [the latest deadline of the child's declared waits (0: none), its progress count]: see waits
        self.wait_slot = ctx.RawArray("d", 2)
        self.process = ctx.Process(target=_child_main, name=name, daemon=daemon,
                                   args=(target, self.wait_slot, theirs, os.getpid(), *args))
        # under forkserver the first start launches the server, which imports its preloads (torch): seconds on a
        # loaded machine, not a hang (the stall watch allowed 5 s here and ended a healthy run)
        with waits.expected_wait(START_S, f"{what} to start (the fork server)"):
            self.process.start()
        theirs.close()
        waits.register_child(self)  # a parent waiting for it allows for the child's own declared waits
        self.reported: Optional[BaseException] = None  # what the child said before it went, if anything
        self.reader: Optional[threading.Thread] = None  # the thread that reads `conn`, once one does
        self._send_lock = threading.Lock()  # several threads may send; one message at a time
        self.closed = False

    @property
    def pid(self) -> Optional[int]:
        return self.process.pid

    def wait_ready(self, timeout: float) -> Any:
        """The child's facts once it reports ready; its own error (raised here) or a
        `ProcessStartError` when it exits or stays silent for `timeout` seconds."""
        with waits.expected_wait(timeout, f"{self.what} to start"):
            ready = self.conn.poll(timeout)
        if not ready:
            self.close()
            raise ProcessStartError(f"{self.what} did not start within {timeout:g}s")
        try:
            message = receive(self.conn)
        except (EOFError, OSError):
            self.process.join(timeout=5.0)
            self.close()
            raise ProcessStartError(f"{self.what} exited while starting (exit code {self.process.exitcode}; "
                                    "its output above says why)") from None
        if message[0] == "error":
            self.close()
            raise message[1]
        return message[1]

    def died(self) -> BaseException:
        """The error for a child that has gone: what it reported before exiting, else `ProcessDied`."""
        reader = self.reader
        if reader is not None and reader is not threading.current_thread():
            reader.join(timeout=5.0)  # it reads what the child said before it went, up to the end of the pipe
        elif self.reported is None:
            try:  # a child that reported its error and exited: the report may still be in the pipe
                while self.conn.poll(0):
                    message = receive(self.conn)
                    if isinstance(message, tuple) and message and message[0] == "error":
                        self.reported = message[1]
                        break
            except (EOFError, OSError, ValueError, pickle.UnpicklingError):
                pass
        if self.reported is not None:
            return self.reported
        self.process.join(timeout=2.0)
        return ProcessDied(self.what, self.process.pid, self.process.exitcode)

    def send(self, message: Any) -> None:
        """A message to the child; a child that has gone raises `died()`."""
        try:
            with self._send_lock:
                send(self.conn, message)
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            raise self.died() from None

    def receive(self) -> Any:
        """The child's next message; one that has gone raises `died()`. An `("error", exc)` message
        is remembered as what it reported (the caller decides when to raise it)."""
        try:
            message = receive(self.conn)
        except (EOFError, OSError):
            raise self.died() from None
        if isinstance(message, tuple) and message and message[0] == "error":
            self.reported = message[1]
        return message

    def close(self, grace: float = 10.0) -> None:
        """Ask the child to exit, wait up to `grace` seconds, then terminate it; idempotent."""
        if self.closed:
            return
        self.closed = True
        with self._send_lock:  # not in the middle of another thread's message
            stop([self.process], [self.conn], grace)


# ---------------------------------------------------------------------------------- a whole program
OWNED = "import sys; from parlightning.runtime.processes import run_owned; run_owned(int(sys.argv[1]), sys.argv[2:])"


def run_module_as_main(name: str) -> None:
    """`python -m NAME` in this process. A name already imported as an alias of another module (the
    thin entry modules: `parlightning.fit` is `parlightning.cli.fit` once imported, e.g. preloaded
    by a forkserver) runs the module it stands for; runpy refuses the alias's loader."""
    import runpy
    import sys

    loaded = sys.modules.get(name)
    spec = getattr(loaded, "__spec__", None)
    runpy.run_module(spec.name if spec is not None else name, run_name="__main__", alter_sys=True)


def run_owned(owner: int, args: Sequence[str]) -> None:
    """In a child: run a program, `["-m", module, *argv]` or `[script.py, *argv]`, as `python ARGS`
    would, exiting when process `owner` is gone (`watch_parent`): a killed study leaves no runs behind."""
    import runpy
    import sys

    watch_parent(owner)
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        run_module_as_main(args[1])
    else:
        sys.argv = list(args)
        runpy.run_path(args[0], run_name="__main__")


def owned_command(cmd: Sequence[str], owner: Optional[int] = None) -> list[str]:
    """`cmd` (`[python, -m, module, ...]` or `[python, script.py, ...]`) as a fresh interpreter that runs
    it through `run_owned`, owned by `owner` (default: this process)."""
    return [cmd[0], "-c", OWNED, str(owner if owner is not None else os.getpid()), *cmd[1:]]


def stop_helpers() -> None:
    """Stop multiprocessing's fork server and resource tracker if this process started them, and
    reap them: a run that fails leaves no helper process behind it (left to exit at interpreter
    shutdown, they outlive the run by seconds on a loaded machine, as zombies their new parent
    reaps late). They start again on the next use."""
    import multiprocessing.forkserver as forkserver
    import multiprocessing.resource_tracker as resource_tracker

    for helper in (getattr(forkserver, "_forkserver", None), getattr(resource_tracker, "_resource_tracker", None)):
        stop = getattr(helper, "_stop", None)
        if callable(stop):
            try:
                stop()
            except Exception:  # noqa: BLE001  (a private API of CPython's: best effort)
                pass


START_S = 300.0  # the longest a child's start (and the fork server's, with its preloads) may take


def _stopped(pid: Any) -> bool:
    """The process is stopped (SIGSTOP, job control) or held by a debugger: state T or t in /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError, ValueError):
        return False


def _proc_stat(pid: Any) -> Optional[tuple[int, int]]:
    """(parent pid, start time in clock ticks since boot) of a process, from /proc (Linux), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def clock_ticks() -> Optional[int]:
    """Now, in the clock ticks since boot that /proc's start times use (None off Linux)."""
    try:
        with open("/proc/uptime") as f:
            return int(float(f.read().split()[0]) * os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def started_processes(since: Optional[int], root: Optional[int] = None) -> list[tuple[int, int]]:
    """(pid, start time) of every descendant of `root` (this process) started at or after `since`
    (`clock_ticks()` when the run began): the processes a run started, its worlds' and workers'
    children included (under forkserver the workers descend from the server, which descends from
    us). Read before anything is stopped: a stopped parent's children move to init and out of the
    tree. [] off Linux or without `since`."""
    if since is None:
        return []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    children: dict[int, list[tuple[int, int]]] = {}
    for pid in pids:
        stat = _proc_stat(pid)
        if stat is not None:
            children.setdefault(stat[0], []).append((pid, stat[1]))
    out, todo = [], [os.getpid() if root is None else root]
    while todo:
        for pid, start in children.get(todo.pop(), []):
            todo.append(pid)
            if start >= since - 1:  # (the tick the run began may round down)
                out.append((pid, start))
    return out


def end_processes(processes: Sequence[tuple[int, int]]) -> None:
    """SIGKILL each (pid, start time) of `started_processes` still running as the same process (a
    pid reused by another program since has another start time and is left alone)."""
    import signal

    for pid, start in processes:
        stat = _proc_stat(pid)
        if stat is not None and stat[1] == start:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
