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

A rank stuck in Python code (not stopped) is still ended by the process group's timeout
(`--trainer.strategy.timeout`), as a rank cannot tell a stuck peer from a slow one.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sys
import threading
import traceback
from datetime import timedelta
from typing import Any, Optional

import lightning.pytorch as pl
from lightning.pytorch.utilities.exceptions import SIGTERMException

from parlightning.errors import ConfigError

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


class RankWatch(pl.Callback):
    """See the module docstring. `config` is the rank's `flat_config`; inactive on one process."""

    def __init__(self, config: Optional[dict[str, str]] = None) -> None:
        self.config = config or {}
        self.store: Any = None
        self.rank, self.world_size = 0, 1
        self.trainer: Optional[pl.Trainer] = None
        self._stop = threading.Event()
        self._stopping = threading.Event()  # the main thread reached stop_job
        self._exit_lock = threading.Lock()
        self._shares_terminal = False  # a child of rank 0 (Lightning's launcher): rank 0 speaks for it
        self._handled: set[int] = set()

    @property
    def active(self) -> bool:
        return self.store is not None

    # ------------------------------------------------------------------ Lightning hooks
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        import torch.distributed as dist

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
                self._shares_terminal = int(self.store.get(RANK0_KEY).decode()) == os.getppid()
        except (RuntimeError, ValueError, OSError):
            pass
        self._install_handlers()
        threading.Thread(target=self._watch, name="parlightning-rank-watch", daemon=True).start()
        self._compare_configs()

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.active:
            self._install_handlers()  # Lightning installed its own SIGTERM handler after setup: replace it

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._stop.set()  # a normal end: rank 0's store may close before this rank exits, that is no fault

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
        while not self._stop.wait(POLL_S):
            record = self._read()
            if record is not None and record.get("rank") != self.rank:
                if self._stopping.wait(GRACE_S):
                    return  # the main thread is reporting (it met the peer's end in a collective, or failed itself)
                self._exit(record, os._exit)

    # ------------------------------------------------------------------ stopping
    def stop_job(self, err: BaseException, message: Optional[str] = None) -> None:
        """The rank's main thread failed with `err` (`message`: the CLI's own one-line text for it,
        if it has one): report (rank 0) and end this rank; never returns."""
        self._stopping.set()
        self._stop.set()
        record = self._read()
        symptom = _is_peer_symptom(err)
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

    def _exit(self, record: dict, leave: Any) -> None:
        if not self._exit_lock.acquire(blocking=True):
            return
        code = int(record.get("code") or 1)
        # rank 0 speaks; another rank too when its stderr is its own (not a child of rank 0) or rank 0 is gone
        speak = self.rank == 0 or record.get("rank") is None or not self._shares_terminal
        who = f"rank {record['rank']} (pid {record['pid']})" if record.get("rank") is not None else "a rank"
        resume = ("; the last checkpoint (the end of the last finished iteration) is intact: resume with "
                  "--ckpt_path <log_dir>/checkpoints/last.ckpt") if code > 128 else ""
        here = "" if self.rank == 0 else f" (seen by rank {self.rank})"
        line = (f"error: {who} stopped the {self.world_size}-rank run: {record['cause']}{here}; every rank "
                f"stopped{resume}")
        launcher = getattr(getattr(self.trainer, "strategy", None), "launcher", None)
        if callable(getattr(launcher, "kill", None)):
            try:
                launcher.kill(signal.SIGKILL)  # the ranks this process launched
            except Exception:  # noqa: BLE001
                pass
        if speak and leave is _raise_exit and code == 1:
            raise SystemExit(line)  # printed by Python; `parlightning.fit(...)` turns it into a ConfigError
        if speak:
            print(line, file=sys.stderr)
        sys.stderr.flush()
        sys.stdout.flush()
        leave(code)


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
