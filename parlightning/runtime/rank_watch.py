"""One rank's fault ends every rank within seconds, with one line naming the rank and the cause.

Under DDP a rank that stops (a signal, an exception, a non-finite loss) used to leave the others
waiting in a gloo collective for the process group's timeout (30 minutes by default): gloo cannot
be interrupted from Python, and Lightning's SIGTERM handler itself issues a broadcast from inside
the handler, which on any rank but 0 meets a different collective on rank 0 and hangs both.

`RankWatch` (a Lightning callback the CLI adds to every DDP run) uses the side channel every
torch.distributed job already has: the rendezvous TCPStore at MASTER_ADDR:MASTER_PORT (hosted by
rank 0, or by torchrun's agent). Nothing new is launched and no port is opened.

- A rank that fails writes one record, `rank R (pid P): cause`, under one key (first writer wins),
  then leaves. SIGTERM / SIGINT / SIGHUP are handled on every rank by writing the record and
  raising (no collective in the handler; Lightning's handler is replaced once it is installed).
- Every rank runs a daemon thread that polls that key (a non-blocking `check`, every 0.2 s). When
  another rank's record appears, the thread ends its own process with `os._exit` (a rank blocked
  inside a gloo collective can be ended no other way); its collector and world processes watch
  their parent and exit with it, and rank 0 kills the ranks it launched.
- A rank whose gloo call fails because a peer vanished reports the peer's record; a peer that
  left none (SIGKILL, the OOM killer) is named from the exit status of the ranks rank 0 launched.
- Rank 0 prints the line. Ranks Lightning's launcher started (children of rank 0, sharing its
  terminal) stay silent; ranks with their own stderr (torchrun, SLURM) print it too, once each. A
  rank's own unexpected exception keeps its traceback above the line. The watcher waits a few
  seconds before ending a rank whose main thread is already reporting.

Before the first rollout the same store compares every rank's resolved config and env signature:
ranks launched with different `max_epochs`, `data.num_envs` or `hidden_sizes` would hang, train
on a wrong step count or fail inside DDP; they are refused with one error naming the keys and ranks.

A rank that hangs without stopping is found too, so no fault waits out the process group's
timeout (30 minutes by default):

- **Liveness heartbeat** (`--heartbeat_timeout`, default 20 s). The watcher thread of every rank
  writes a beat counter to the store every second and reads its peers'. A peer whose counter has
  not moved for the timeout is frozen (SIGSTOP, a debugger holding it, a C call that never gives
  the GIL back): the rank that sees it writes the record naming it and the frozen process's state
  (read from /proc on the same host), and the frozen rank is killed (SIGKILL works on a stopped
  process). When the store itself stops answering (it lives in rank 0 under Lightning's launcher,
  so a frozen rank 0 freezes it), a second thread, which never touches the store, ends the rank
  with its own line and kills a frozen rank 0 that launched it. A rank that was paused itself
  (the whole job stopped with Ctrl-Z and resumed) restarts its clocks instead of blaming a peer.
- **Progress stall** (`--stall_timeout`, default 30 s). A rank is making progress while its
  Lightning and rollout hooks run (every minibatch, every rollout start and end) or while the
  stack of its main thread or collector threads (`collector-*`, `trajectories-*`) changes between
  two samples a second apart. A
  rank whose main thread sits on the same line for the timeout while not waiting for its peers (a
  torch.distributed collective, DDP's backward) is stuck: its own watcher names it with the file,
  line and function where it is stuck. When every rank has been without progress for the timeout
  (ranks waiting in different collectives), the lowest rank names where each one waits.
  A wait the code declared (`parlightning.runtime.waits.expected_wait(seconds, what)`: an external
  world's step, a child process starting or answering, the compiled step's C++ build, a checkpoint
  write) is not a stall until its own deadline plus `waits.GRACE_S` has passed: while one is open
  the rank may go `max(stall_timeout, deadline + grace)` without progress. One that overruns is
  named with what it waited for.

Either way every rank ends within the timeout plus a few seconds, with one line.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import sys
import sysconfig
import threading
import time
import traceback
from datetime import timedelta
from typing import Any, Optional

import lightning.pytorch as pl
from lightning.pytorch.utilities.exceptions import SIGTERMException

from parlightning.callbacks.base import RolloutCallback
from parlightning.errors import ConfigError
from parlightning.runtime import waits
from parlightning.runtime.processes import clock_ticks, end_processes, started_processes

KEY = "stopped"
CONFIG_KEY = "config/{}"
RANK0_KEY = "rank0_pid"
POLL_S = 0.2
GRACE_S = 3.0  # a rank whose own main thread is already stopping (a gloo error, its own raise) reports itself
_FITS = 0
CONFIG_WAIT_S = 300.0  # every rank has passed rendezvous when it compares: this only covers a slow preflight
SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")
# keys whose values may differ per rank (paths on each node's own disk)
LOCAL_KEYS = ("config", "ckpt_path", "trainer.default_root_dir")
BEAT_KEY = "beat/{}"
BEAT_S = 1.0  # how often a rank writes its beat and samples its own stacks
HEARTBEAT_TIMEOUT_S = 20.0  # a peer whose beat has not moved this long is frozen
STALL_TIMEOUT_S = 30.0  # a main thread on the same line this long, not waiting for peers nor in a declared wait, is stuck
SAME_ERROR_WAIT_S = 2.0  # a rank other than 0 failing with a one-line error waits this long for rank 0 meeting the same
PAUSED_S = 5.0  # a watch loop that slept this much longer than asked was paused itself (Ctrl-Z, load)
# besides the main thread: threads whose stacks count as progress (the thread and process transports'
# collector and link threads, the per-actor asynchronous collector's thread)
WATCHED_THREADS = ("collector-", "trajectories-")
# a main thread inside one of these is waiting for its peers (a collective, DDP's backward all-reduce)
WAITING = tuple(os.path.join("torch", *p) + os.sep for p in (("distributed",), ("nn", "parallel"), ("autograd",)))


class RankSignal(SIGTERMException):
    """A signal received by one DDP rank (raised from the handler, on that rank only)."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


def flat_config(config: Any, env_signature: Optional[dict] = None) -> dict[str, str]:
    """The resolved config as `{dotted.key: json}` (without the per-node paths), plus the env's
    signature under `env.`: what every rank of one job must agree on."""
    as_dict = config.as_dict() if hasattr(config, "as_dict") else dict(config)
    flat: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, list) and value and any(isinstance(v, dict) for v in value):  # e.g. callbacks
            for i, v in enumerate(value):
                walk(f"{prefix}[{i}]", v)
        elif prefix not in LOCAL_KEYS:
            flat[prefix] = json.dumps(value, sort_keys=True, default=_portable)

    walk("", as_dict)
    for k, v in (env_signature or {}).items():
        flat[f"env.{k}"] = json.dumps(v, sort_keys=True, default=_portable)
    return flat


def _portable(value: Any) -> str:
    """A value as text that is the same in every process (a function by its import path, never an address)."""
    name = getattr(value, "__qualname__", None)
    if callable(value) and name is not None:
        return f"{getattr(value, '__module__', '')}.{name}"
    return re.sub(r" at 0x[0-9a-fA-F]+", "", str(value))


def config_differences(configs: list[dict[str, str]]) -> list[str]:
    """'key: a on rank 0, b on rank 1' for every key whose value differs between ranks."""
    keys = sorted(set().union(*configs))
    out = []
    for key in keys:
        values = [c.get(key, "<unset>") for c in configs]
        if len(set(values)) > 1:
            groups: dict[str, list[int]] = {}
            for rank, v in enumerate(values):
                groups.setdefault(v, []).append(rank)
            parts = [f"{_short(v)} on rank{'s' if len(r) > 1 else ''} {','.join(map(str, r))}" for v, r in groups.items()]
            out.append(f"{key}: {' vs '.join(parts)}")
    return out


def _short(value: str) -> str:
    return value if len(value) <= 60 else value[:57] + "..."


def _describe_status(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (the OOM killer or a scheduler sends this)" if -code == signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with status {code}"


class RankWatch(RolloutCallback):
    """See the module docstring. `config` is the rank's `flat_config`; inactive on one process.
    `heartbeat_timeout` / `stall_timeout`: seconds (None turns that check off)."""

    def __init__(self, config: Optional[dict[str, str]] = None, heartbeat_timeout: Optional[float] = HEARTBEAT_TIMEOUT_S,
                 stall_timeout: Optional[float] = STALL_TIMEOUT_S) -> None:
        self.config = config or {}
        self.heartbeat_timeout, self.stall_timeout = heartbeat_timeout, stall_timeout
        self.store: Any = None
        self.rank, self.world_size = 0, 1
        self.trainer: Optional[pl.Trainer] = None
        self._stop = threading.Event()
        self._stopping = threading.Event()  # the main thread reached stop_job
        self._exit_lock = threading.Lock()
        self._shares_terminal = False  # a child of rank 0 (Lightning's launcher): rank 0 speaks for it
        self._rank0_pid: Optional[int] = None
        self._handled: set[int] = set()
        self._events = 0  # hooks run (minibatches, rollouts): progress
        self._main_ident = threading.main_thread().ident
        self._done = False
        self.cleanup: Optional[Any] = None  # what to remove when the watch ends the run (set by the CLI)
        self._from_start = False  # started by `watch_from_start` (the CLI): watches the whole run
        self._alone: list[threading.Thread] = []
        self.began: Optional[int] = clock_ticks()  # the processes started from then on are the run's

    @property
    def active(self) -> bool:
        """Watching a DDP job (a store shared by the ranks); a one-process run's stall watch is not."""
        return self.store is not None and not isinstance(self.store, _LocalStore)

    # ------------------------------------------------------------------ Lightning hooks
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        import torch.distributed as dist

        if isinstance(self.store, _LocalStore) and not self._done:  # the CLI's watch, started before the classes
            if trainer.world_size <= 1:
                self.trainer = trainer  # it goes on watching this process
                return
            self._end_early_watch()  # DDP: the ranks' own watch takes over from here
        if trainer.world_size <= 1 and self.stall_timeout is not None and self.store is None:
            self._watch_alone(trainer)  # one process: only its own main thread can be stuck
            return
        if trainer.world_size <= 1 or not (dist.is_available() and dist.is_initialized()) or self.active:
            return
        self.trainer, self.rank, self.world_size = trainer, trainer.global_rank, trainer.world_size
        self.store = self._connect()
        if self.store is None:
            return
        try:
            if self.rank == 0:
                self.store.set(RANK0_KEY, str(os.getpid()))
            else:
                self.store.wait([RANK0_KEY], timedelta(seconds=CONFIG_WAIT_S))
                self._rank0_pid = int(self.store.get(RANK0_KEY).decode())
                self._shares_terminal = self._rank0_pid == os.getppid()
        except (RuntimeError, ValueError, OSError):
            pass
        self._install_handlers()
        self._beats = _Beats(self)
        try:
            self.store.set(BEAT_KEY.format(self.rank), json.dumps({"n": 0, "pid": os.getpid()}))
        except (RuntimeError, ValueError, OSError):
            pass
        threading.Thread(target=self._watch, name="parlightning-rank-watch", daemon=True).start()
        threading.Thread(target=self._watch_store, name="parlightning-rank-watchdog", daemon=True).start()
        self._compare_configs()
        self._beats.compared = True  # every rank has written its first beat: a missing one is now a fault

    def setup_before_data(self, trainer: pl.Trainer) -> None:
        """`setup`, called by the data module before its own setup (Lightning sets the data module up
        before any callback): a rank's fault there (its sampler, world or strategy) is then recorded and
        ends every rank with its line, not a peer's gloo traceback. Idempotent: Lightning's own call to
        `setup` afterwards does nothing more."""
        self.setup(trainer, trainer.lightning_module, "fit")

    def _watch_alone(self, trainer: Optional[pl.Trainer]) -> None:
        """A one-process run: the same progress rules as a rank's (hooks, declared waits, a moving
        stack or child), judged on this process alone, so a main thread stuck for good (a deadlocked
        sampler, callback or world) ends the run with one line naming where, instead of hanging. No
        signal handlers are installed and no peers are read."""
        self.trainer, self.rank, self.world_size = trainer, 0, 1
        self.store = _LocalStore()
        self._beats = _Beats(self)
        self._beats.compared = True
        self._alone = [threading.Thread(target=self._watch, name="parlightning-stall-watch", daemon=True),
                       threading.Thread(target=self._tick_alone, name="parlightning-stall-tick", daemon=True)]
        for thread in self._alone:
            thread.start()

    def watch_from_start(self) -> None:
        """Start the one-process stall watch now, before the trainer exists (the CLI calls this before
        it builds any class of the config): a main thread stuck anywhere in the run (a user class's
        constructor, the preflight probe, the data module's setup, a strategy's `plan`, teardown and
        the worlds' `close`) ends it with one line naming where. `setup` keeps it for a one-process
        fit and hands over to the ranks' own watch under DDP; `stop_watching_alone` ends it."""
        if self.stall_timeout is not None and self.store is None:
            self._from_start = True
            self._watch_alone(None)

    def _end_early_watch(self) -> None:
        """(DDP setup) stop the one-process watch started by `watch_from_start`, so the ranks' watch
        starts from a clean state (its threads are joined: none of them judges this rank alone again)."""
        self._stop.set()
        for thread in getattr(self, "_alone", ()):
            if thread is not threading.current_thread():
                thread.join(timeout=5 * BEAT_S)
        self._alone = []
        self._stop = threading.Event()
        self.store, self._beats, self._from_start = None, None, False

    def _tick_alone(self) -> None:
        """The second thread of a one-process watch: it only notes that the process runs (a beat
        that finds it silent knows the process was paused or starved, and restarts its clocks)."""
        while not self._stop.wait(BEAT_S):
            self._beats.store_silent_for()

    def stop_watching_alone(self) -> None:
        """End a one-process run's stall watch (the fit is over, however it ended): a watcher left
        running would judge whatever the process does next (a test waiting on a child, a notebook)."""
        if isinstance(self.store, _LocalStore):
            self._done = True
            self._stop.set()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if not self._from_start:  # the CLI's watch goes on through the data module's on_exception (closing the
            self.stop_watching_alone()  # worlds) and the CLI's report; it stops it itself

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.active:
            self._install_handlers()  # Lightning installed its own SIGTERM handler after setup: replace it

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._from_start and isinstance(self.store, _LocalStore):
            return  # the CLI's one-process watch ends when the CLI is done (after the worlds are closed)
        self._done = True
        self._stop.set()  # a normal end: rank 0's store may close before this rank exits, that is no fault
        if self.active:
            try:  # peers stop expecting this rank's beat
                self.store.set(BEAT_KEY.format(self.rank), json.dumps({"n": -1, "done": True}))
            except (RuntimeError, ValueError, OSError):
                pass

    # progress: every hook the trainer and the data module run on the main sequence
    def _progress(self, *args: Any, **kwargs: Any) -> None:
        self._events += 1

    on_train_batch_start = on_train_batch_end = on_train_epoch_start = on_train_epoch_end = _progress
    on_rollout_start = on_episodes_end = on_rollout_end = on_save_checkpoint = _progress

    # ------------------------------------------------------------------ the store
    def _connect(self) -> Any:
        from torch.distributed import PrefixStore, TCPStore

        addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if not addr or not port:
            return None
        try:
            store = TCPStore(addr, int(port), is_master=False, timeout=timedelta(seconds=30), wait_for_workers=False)
        except (RuntimeError, ValueError, OSError):
            return None  # no side channel: the process group's timeout still ends a hang
        global _FITS
        _FITS += 1  # every rank runs the same fits in the same order: the n-th fit of each shares a namespace
        run = os.environ.get("TORCHELASTIC_RUN_ID", "")
        return PrefixStore(f"parlightning/{run}/{_FITS}/", store)

    def _read(self) -> Optional[dict]:
        try:
            if not self.store.check([KEY]):
                return None
            return json.loads(self.store.get(KEY).decode())
        except (RuntimeError, ValueError, OSError):
            return None

    def _wait_for_record(self, seconds: float) -> Optional[dict]:
        """The job's record once another rank writes it within `seconds`, else None."""
        deadline = time.monotonic() + seconds
        while True:
            record = self._read()
            if record is not None or time.monotonic() >= deadline:
                return record
            time.sleep(0.05)

    def _claim(self, cause: str, code: int) -> dict:
        """Write this rank's record unless another rank wrote first; returns the one that stands."""
        mine = {"rank": self.rank, "pid": os.getpid(), "host": socket.gethostname(), "cause": cause, "code": code}
        try:
            stored = self.store.compare_set(KEY, "", json.dumps(mine))
            return json.loads(stored.decode())
        except (RuntimeError, ValueError, OSError):
            return mine

    def _compare_configs(self) -> None:
        try:
            self.store.set(CONFIG_KEY.format(self.rank), json.dumps(self.config))
            keys = [CONFIG_KEY.format(r) for r in range(self.world_size)]
            with waits.expected_wait(CONFIG_WAIT_S, "every rank's config (a peer still setting up)"):
                self.store.wait(keys, timedelta(seconds=CONFIG_WAIT_S))
            configs = [json.loads(self.store.get(k).decode()) for k in keys]
        except (RuntimeError, ValueError, OSError):
            return  # the store went away: the process group itself will fail next
        diffs = config_differences(configs)
        if diffs:
            more = f" (and {len(diffs) - 4} more keys)" if len(diffs) > 4 else ""
            raise ConfigError(f"the {self.world_size} ranks were launched with different configs: "
                              f"{'; '.join(diffs[:4])}{more}; launch every rank with the same config and arguments")

    # ------------------------------------------------------------------ signals and the watcher
    def _install_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for name in SIGNALS:
            signum = getattr(signal, name, None)
            if signum is not None:
                signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if signum in self._handled:
            return  # a second signal while stopping: keep stopping
        self._handled.add(signum)
        raise RankSignal(signum)

    def _watch(self) -> None:
        next_beat = 0.0
        while not self._stop.wait(POLL_S):
            record = self._read()
            if record is not None and record.get("by", record.get("rank")) != self.rank:
                if self._stopping.wait(GRACE_S):
                    return  # the main thread is reporting (it met the peer's end in a collective, or failed itself)
                self._exit(record, os._exit)
            if time.monotonic() >= next_beat and not self._stop.is_set():
                next_beat = time.monotonic() + BEAT_S
                found = self._beats.beat()
                if found is not None and not self._stop.is_set():
                    self._exit(self._claim_record(found), os._exit)

    def _watch_store(self) -> None:
        """The second thread: never touches the store, so it sees the store (rank 0) freeze."""
        while not self._stop.wait(BEAT_S):
            silent = self._beats.store_silent_for()
            if self.heartbeat_timeout is not None and silent > self.heartbeat_timeout and not self._done:
                self._store_lost(silent)

    def _claim_record(self, found: dict) -> dict:
        """Write `found` (a hung rank this rank found) unless another record stands; kill a frozen
        rank on this host (nothing else ends a stopped process)."""
        found = {"by": self.rank, "host": socket.gethostname(), "code": 1, **found}
        try:
            stored = json.loads(self.store.compare_set(KEY, "", json.dumps(found)).decode())
        except (RuntimeError, ValueError, OSError):
            stored = found
        if found.get("frozen") and found.get("pid") and found.get("host") == socket.gethostname():
            _kill(found["pid"])
        return stored

    def _store_lost(self, silent: float) -> None:
        """The store has not answered for `silent` seconds: its host is frozen or gone."""
        agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
        where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
        frozen_pid = self._rank0_pid if self._shares_terminal and not agent else None
        state = f" ({_process_state(frozen_pid)})" if frozen_pid else ""
        host = "torchrun's agent" if agent else f"rank 0 (pid {self._rank0_pid})" if self._rank0_pid else "rank 0"
        line = (f"error: {host} stopped the {self.world_size}-rank run: hung: the rendezvous store at {where} it "
                f"hosts has not answered for {silent:.0f} s{state} (seen by rank {self.rank}); every rank stopped")
        if not self._exit_lock.acquire(blocking=False):
            return
        if frozen_pid:
            _kill(frozen_pid)  # it launched this rank and cannot end by itself
        if self.rank == 1 or not self._shares_terminal:
            _say(line)
        _flush()
        os._exit(1)

    # ------------------------------------------------------------------ stopping
    def stop_job(self, err: BaseException, message: Optional[str] = None) -> None:
        """The rank's main thread failed with `err` (`message`: the CLI's own one-line text for it,
        if it has one): report (rank 0) and end this rank; never returns."""
        self._stopping.set()
        self._stop.set()
        record = self._read()
        symptom = _is_peer_symptom(err)
        if record is None and not symptom and self.rank != 0 and message is not None:
            record = self._wait_for_record(SAME_ERROR_WAIT_S)  # a check every rank runs: rank 0's line comes
        if record is not None and self.rank != 0 and message is not None and _same_error(record.get("cause"), message):
            _stderr().write(f"(rank {self.rank} stopped too: {message[:160]})\n")  # one write: every rank met this error,
            _flush()                                                                  # rank 0 prints the job's line
            raise SystemExit(1)
        if record is None and not symptom:
            cause, code = self._cause(err, message)
            if message is None and not isinstance(err, (SystemExit, KeyboardInterrupt, FloatingPointError)):
                traceback.print_exception(err, file=sys.stderr)  # a bug in this rank's code: keep where it was
                sys.stderr.flush()
            record = self._claim(cause, code)
        if record is None:
            record = self._silent_peer(err)
        self._exit(record, _raise_exit)

    def _cause(self, err: BaseException, message: Optional[str]) -> tuple[str, int]:
        if isinstance(err, RankSignal):
            name = signal.Signals(err.signum).name
            return f"received {name}", 128 + err.signum
        if isinstance(err, SIGTERMException):
            return "received SIGTERM", 128 + signal.SIGTERM
        if isinstance(err, KeyboardInterrupt):
            return "received SIGINT", 128 + signal.SIGINT
        if message is not None:
            return message, 1
        text = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
        return f"{type(err).__name__}: {text[:400]}", 1

    def _silent_peer(self, err: BaseException) -> dict:
        """A peer vanished without a record: name it from the exit status of the ranks this process
        launched (rank 0 under Lightning's launcher), else say which connection broke."""
        launcher = getattr(getattr(self.trainer, "strategy", None), "launcher", None)
        for i, proc in enumerate(getattr(launcher, "procs", None) or []):
            try:
                code = proc.wait(timeout=2.0)
            except Exception:  # noqa: BLE001 (still running: not the one that vanished)
                continue
            return {"rank": i + 1, "pid": proc.pid, "cause": f"{_describe_status(code)} without a word",
                    "code": 1, "host": socket.gethostname()}
        text = " ".join(str(err).split())[:200]
        return {"rank": None, "pid": None, "cause": f"a peer rank vanished ({type(err).__name__}: {text})",
                "code": 1, "host": socket.gethostname()}

    def wait_for_launched_ranks(self, timeout: float) -> None:
        """Rank 0 after its fit returned: the ranks it launched (Lightning's script launcher) may still be
        in their end-of-fit hooks. Wait for them (the job's store, which rank 0 holds, stays up meanwhile)
        so a rank that fails there (an `on_train_end` that raises) ends the job non-zero with its one
        line, instead of rank 0 exiting 0 and the rank losing the store mid-report. Returns when every
        launched rank ended with 0 (or is still running after `timeout` s: it is left to finish)."""
        launcher = getattr(getattr(self.trainer, "strategy", None), "launcher", None)
        procs = list(getattr(launcher, "procs", None) or [])
        deadline = time.monotonic() + timeout
        for rank, proc in enumerate(procs, start=1):
            try:
                code = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 (still running at the deadline)
                continue
            if code:
                self.launched_rank_ended(rank, proc.pid, code, len(procs) + 1)

    def launched_rank_ended(self, rank: int, pid: int, code: int, world_size: int) -> None:
        """Lightning's child observer on rank 0 found launched rank `rank` (pid `pid`) ended with
        status `code`: end the job with the same one line the main thread would print, whichever of
        the two sees it first. The rank's own record (it reported its cause before exiting) wins over
        its exit status. Before this watch runs (a rank that failed in its own start-up), a rank that
        exited with a status printed its own line; one killed by a signal is named here. Returns only
        when another thread of this process is already ending it."""
        record = self._read() if self.active else None
        if record is None and not self.active and code > 0:
            sys.stderr.flush()  # it printed its own `error:` line (its preflight): rank 0 says nothing more
            os._exit(1)
        if record is None:
            record = {"rank": rank, "pid": pid, "cause": f"{_describe_status(code)} without a word", "code": 1,
                      "host": socket.gethostname()}
        if not self.active:
            self.rank, self.world_size = 0, world_size
        self._exit(record, os._exit)

    def _exit(self, record: dict, leave: Any) -> None:
        if not self._exit_lock.acquire(blocking=leave is not os._exit):
            return  # another thread of this rank is already ending it
        code = int(record.get("code") or 1)
        # rank 0 speaks; another rank too when its stderr is its own (not a child of rank 0) or rank 0 is gone
        speak = self.rank == 0 or (record.get("rank") is None and "who" not in record) or not self._shares_terminal
        who = f"rank {record['rank']} (pid {record['pid']})" if record.get("rank") is not None else "a rank"
        resume = ("; the last checkpoint (the end of the last finished iteration) is intact: resume with "
                  "--ckpt_path <log_dir>/checkpoints/last.ckpt") if code > 128 else ""
        here = "" if self.rank == 0 else f" (seen by rank {self.rank})"
        line = (f"error: {who} stopped the {self.world_size}-rank run: {record['cause']}{here}; every rank "
                f"stopped{resume}")
        if self.world_size == 1:
            line = f"error: the run stopped: {record['cause']}{resume}"
        if callable(self.cleanup):  # stopped before its first rollout finished (any rank's fault, its setup's
            try:                    # too): nothing of the run is kept (the CLI's cleanup checks that)
                self.cleanup()
            except Exception:  # noqa: BLE001
                pass
        if "who" in record:
            line = f"error: the {self.world_size}-rank run stopped: {record['cause']}{here}; every rank stopped"
        launcher = getattr(getattr(self.trainer, "strategy", None), "launcher", None)
        if callable(getattr(launcher, "kill", None)):
            try:
                launcher.kill(signal.SIGKILL)  # the ranks this process launched
            except Exception:  # noqa: BLE001
                pass
        if leave is os._exit:  # nothing after this ends the run's processes: a stopped child (SIGSTOP) would
            end_processes(started_processes(self.began))  # never notice its parent gone; SIGKILL ends it anyway
        if speak and leave is _raise_exit and code == 1:
            raise SystemExit(line)  # printed by Python; `parlightning.fit(...)` turns it into a ConfigError
        if speak:
            _say(line)
        _flush()
        leave(code)


class _LocalStore:
    """The part of a TCPStore the watcher uses, in this process (a one-process run has no store)."""

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def set(self, key: str, value: str) -> None:
        with self._lock:
            self._data[key] = value.encode() if isinstance(value, str) else value

    def get(self, key: str) -> bytes:
        with self._lock:
            return self._data[key]

    def check(self, keys: list[str]) -> bool:
        with self._lock:
            return all(k in self._data for k in keys)

    def compare_set(self, key: str, expected: str, value: str) -> bytes:
        with self._lock:
            if key not in self._data or self._data[key] == expected.encode():
                self._data[key] = value.encode()
            return self._data[key]


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # an object's repr: its address differs per process


def _same_error(a: Any, b: Any) -> bool:
    """Two ranks' one-line errors are the same error (read without objects' addresses)."""
    return isinstance(a, str) and isinstance(b, str) and _ADDRESS.sub("", a) == _ADDRESS.sub("", b)


def _stderr() -> Any:
    """Where this thread's line goes: `sys.stderr`, except on a watcher thread while the main thread
    holds it redirected (the preflight keeps what a world's constructor prints in a buffer while it
    runs): the process's own stderr then, or a line printed before `os._exit` would vanish with the
    buffer."""
    stream = sys.stderr
    real = sys.__stderr__
    if threading.current_thread() is not threading.main_thread() and real is not None and stream is not real and \
            isinstance(stream, io.StringIO) and not getattr(real, "closed", False):
        return real
    return stream


def _say(line: str) -> None:
    print(line, file=_stderr())


def _flush() -> None:
    for stream in (_stderr(), sys.stderr, sys.stdout):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed by user code: nothing left to flush
            pass


def _raise_exit(code: int) -> None:
    raise SystemExit(code)


def _is_peer_symptom(err: BaseException) -> bool:
    """An error a rank gets because a peer vanished (gloo's closed connection, a store that went away)."""
    import torch.distributed as dist

    if isinstance(err, getattr(dist, "DistError", ())):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and any(s in text for s in (
        "Connection closed by peer", "Connection reset by peer", "gloo", "Broken pipe", "recvBytes", "sendBytes"))


# ---------------------------------------------------------------------------------- heartbeat and progress
class _Beats:
    """One rank's heartbeat and progress bookkeeping (run by its watcher thread, once a second):
    writes `{n, stalled, waiting, where}` under `beat/<rank>`, reads every peer's, and answers
    which rank (if any) is hung. Clocks are this process's own monotonic clock; peers' beats are
    compared by their counter, so hosts' clocks never need to agree."""

    def __init__(self, watch: RankWatch) -> None:
        self.watch = watch
        now = time.monotonic()
        self.n = 0
        self.store_ok = now  # the last time a beat round trip to the store completed
        self.resumed = now  # the last time this process was found paused itself (clocks restart there)
        self.loop_at = now
        self.progress_at, self.signature = now, None
        self.top: Optional[tuple] = None  # the innermost frames' signature, read when the counters stood still
        self.stack: Optional[tuple] = None  # the whole stacks', read when the innermost frames stood still too
        self.peers: dict[int, tuple[int, float]] = {}  # rank -> (last counter seen, when it last moved)
        self.compared = False
        self.host = socket.gethostname()
        self.pids: dict[int, int] = {}  # peers' pids from their first beat (a missing beat has none)

    def store_silent_for(self) -> float:
        """Seconds since the store last answered (called by the watchdog thread once a second,
        which also notices when this process itself was paused)."""
        now = time.monotonic()
        if now - self.loop_at > BEAT_S + PAUSED_S:
            self.resumed = now  # stopped and resumed (Ctrl-Z and fg), or starved: nobody else is to blame
        self.loop_at = now
        return now - max(self.store_ok, self.resumed)

    def beat(self) -> Optional[dict]:
        """Write this rank's beat, read the peers'; the record of a hung rank, or None."""
        watch, now = self.watch, time.monotonic()
        if now - self.loop_at > BEAT_S + PAUSED_S:  # the watchdog (which never blocks) has not run: we were paused
            self.resumed = now
        self.n += 1
        # progress: hooks, waits opened or closed, a child process moving, a stack that changed. The
        # stacks are read only when the counters stood still since the last beat: reading them makes
        # CPython build frame objects for the running frames, and a frame object that outlives its
        # call keeps the call's locals (a minibatch's activations) alive; read every second through
        # training, that was ~700 MB more peak memory at N = 4096 (1.26 -> 1.94 GB)
        # Likewise only the innermost frames are read while they move; the whole stacks only once they
        # stood still for a beat (a loop below them may still be moving)
        counters = (watch._events, waits.changes(), waits.children_progress())
        if counters != self.signature:
            self.signature, self.progress_at, self.top, self.stack = counters, now, None, None
        else:
            top = _stack_signature(watch._main_ident, depth=1)
            if top != self.top:  # (the first read after the counters moved is the reference, not progress)
                if self.top is not None:
                    self.progress_at = now
                self.top, self.stack = top, None
            else:
                stack = _stack_signature(watch._main_ident)
                if self.stack is not None and stack != self.stack:
                    self.progress_at = now
                self.stack = stack
        stalled = now - max(self.progress_at, self.resumed)
        frames = sys._current_frames().get(watch._main_ident) if stalled > BEAT_S else None
        waiting = _waiting(frames)  # both matter only to a rank that has stood still for a while
        where = _where(frames) if stalled > 2 * BEAT_S else ""
        del frames
        mine = {"n": self.n, "stalled": round(stalled, 1), "waiting": waiting, "where": where, "pid": os.getpid(),
                "host": socket.gethostname(), **self.allowance(now)}
        try:
            watch.store.set(BEAT_KEY.format(watch.rank), json.dumps(mine))
            beats = {}
            for r in range(watch.world_size):
                key = BEAT_KEY.format(r)
                if r != watch.rank and watch.store.check([key]):
                    beats[r] = json.loads(watch.store.get(key).decode())
                    self.pids.setdefault(r, beats[r].get("pid"))
                elif r != watch.rank and self.compared:
                    beats[r] = {"n": None}
        except (RuntimeError, ValueError, OSError):
            return None  # the store is gone or slow: the watchdog judges that
        self.store_ok = now = time.monotonic()
        beats[watch.rank] = mine
        return self._judge(beats, now)

    def allowance(self, now: float) -> dict:
        """While a declared wait is open: how long this rank may go without progress (`allowed`:
        `max(stall_timeout, its deadline + grace)` counted from the last progress) and what it
        waits for (`wait`); nothing when no wait is open or the stall check is off."""
        timeout, wait = self.watch.stall_timeout, waits.latest()
        if timeout is None or wait is None:
            return {}
        since = max(self.progress_at, self.resumed)
        allowed = max(timeout, wait.deadline + waits.GRACE_S - since)
        bound = f"{wait.seconds:g} s + {waits.GRACE_S:g} s grace" if wait.seconds else f"+ {waits.GRACE_S:g} s grace"
        return {"allowed": round(allowed, 1), "wait": f"{wait.what} ({bound})"}

    def _judge(self, beats: dict[int, dict], now: float) -> Optional[dict]:
        watch = self.watch
        live = {r: b for r, b in beats.items() if not b.get("done")}
        for r, b in live.items():
            if r == watch.rank:
                continue
            if r not in self.peers or b.get("n") != self.peers[r][0]:
                self.peers[r] = (b.get("n"), now)
                continue
            silent = now - max(self.peers[r][1], self.resumed)
            if watch.heartbeat_timeout is not None and silent > watch.heartbeat_timeout:
                pid = b.get("pid") or self.pids.get(r)
                state = _process_state(pid) if pid and b.get("host", self.host) == self.host else "on another host"
                return {"rank": r, "pid": pid, "frozen": True, "cause": f"hung: no heartbeat for {silent:.0f} s ({state})"}
        timeout = watch.stall_timeout
        if timeout is None:
            return None
        mine = beats[watch.rank]
        limit = mine.get("allowed", timeout)
        if mine["stalled"] > limit and mine["waiting"] is None:
            if "wait" in mine:  # a declared wait that overran its own deadline
                return {"rank": watch.rank, "pid": os.getpid(), "cause": (
                    f"hung: its main thread made no progress for {limit:.0f} s, stuck at {mine['where']}, past the "
                    f"end of its declared wait for {mine['wait']} (raise --stall_timeout, or the bound its "
                    "expected_wait declares, if it can legitimately take longer)")}
            return {"rank": watch.rank, "pid": os.getpid(), "cause": (
                f"hung: its main thread made no progress for {timeout:g} s, stuck at {mine['where']} (raise "
                "--stall_timeout if one step can take longer, or declare the wait with "
                "parlightning.runtime.waits.expected_wait)")}
        # every rank waits for the others (a rank stuck elsewhere names itself, above); one process alone
        # waiting in torch.distributed is a DDP rank before its own watch took over (the rendezvous)
        if watch.active and len(live) == watch.world_size and watch.rank == min(live) and all(
                b.get("stalled", 0) > b.get("allowed", timeout) and b.get("waiting") for b in live.values()):
            each = "; ".join(f"rank {r} at {b.get('where') or '?'}" + (f" ({b['waiting']})" if b.get("waiting") else "")
                             for r, b in sorted(live.items()))
            return {"rank": None, "pid": None, "who": "every rank", "cause": (
                f"hung: no rank made progress for {timeout:g} s, each waiting for the others ({each}): the ranks "
                "wait in different collectives")}
        return None


def _stack_signature(main_ident: Optional[int], depth: Optional[int] = None) -> tuple:
    """Where the main thread and the collector threads are (code and line of every frame, or of the
    innermost `depth`)."""
    idents = {main_ident} | {t.ident for t in threading.enumerate() if t.name.startswith(WATCHED_THREADS)}
    frames = sys._current_frames()
    out = []
    for ident in sorted(i for i in idents if i is not None):
        frame, seen = frames.get(ident), 0
        while frame is not None and (depth is None or seen < depth):
            out.append((id(frame.f_code), frame.f_lineno))
            frame, seen = frame.f_back, seen + 1
        out.append(None)
    del frames, frame  # no frame object of another thread kept past this read
    return tuple(out)


def _waiting(frame: Any) -> Optional[str]:
    """'in a collective' when the main thread waits for its peers (torch.distributed, DDP, backward)."""
    while frame is not None:
        name = frame.f_code.co_filename
        if any(part in name for part in WAITING):
            return f"waiting in {os.path.basename(name)}:{frame.f_lineno} {frame.f_code.co_name}"
        frame = frame.f_back
    return None


_STDLIB = tuple(p for p in {sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib")} if p)


def _where(frame: Any) -> str:
    """`file:line in function` of the innermost frame that is not the standard library (the
    innermost one too, when that is elsewhere)."""
    inner, own = frame, frame
    while own is not None and own.f_code.co_filename.startswith(_STDLIB) and "site-packages" not in own.f_code.co_filename:
        own = own.f_back
    own = own or inner

    def text(f: Any) -> str:
        name = f.f_code.co_filename
        try:
            rel = os.path.relpath(name)
            name = rel if not rel.startswith("..") else os.path.join(*name.split(os.sep)[-2:])
        except ValueError:
            pass
        qualname = getattr(f.f_code, "co_qualname", f.f_code.co_name).rsplit(".<locals>.", 1)[-1]  # Class.method
        return f"{name}:{f.f_lineno} in {qualname}"

    if inner is None:
        return "?"
    return text(own) + (f" (inside {text(inner)})" if inner is not own else "")


def _process_state(pid: Optional[int]) -> str:
    """What /proc says about a process on this host: stopped, in uninterruptible I/O, running..."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError, TypeError):
        return "its state is unknown"
    return {"T": "its process is stopped (SIGSTOP or job control)", "t": "its process is held by a debugger",
            "D": "its process is blocked in uninterruptible I/O", "Z": "its process has exited",
            }.get(state, f"its process is alive (state {state}) but its watcher is silent: a C call holding the GIL?")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, TypeError):
        pass
