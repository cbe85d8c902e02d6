"""Programs that run the user's code (fit, evaluate, bc): an error raised in it becomes one line
naming it, and a main thread stuck in it ends the program with one line naming where.

`user_code_error(err)` attributes an exception to the innermost frame of the user's own code (not
parlightning, not an installed package, not the standard library) and names the config field of the
object it belongs to (a world, a sampler, a strategy, a callback). `stall_watched(seconds)` runs the
one-process stall watch of `parlightning.runtime.rank_watch` around a block: a main thread that stays
on one line for `seconds` (outside a wait the code declares) ends the program with one `error:` line
naming the file, line and function, instead of hanging."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

from parlightning.errors import error_text, tracebacks_wanted


def user_code_error(err: BaseException) -> Optional[str]:
    """One line for an exception raised in the user's own code (a callback, world, sampler or reward
    class from their module) while a program runs it: the innermost frame outside parlightning, the installed
    packages and the standard library, with the object's config field where it is one."""
    import sysconfig

    import lightning
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    if isinstance(err, (KeyboardInterrupt, SIGTERMException, MemoryError)) or tracebacks_wanted():
        return None
    if isinstance(err, SystemExit) and err.code in (None, 0):  # a deliberate clean exit (e.g. a script's
        return None  # early stop) passes through; sys.exit(3) from a callback is reported like any error
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    library = {os.path.abspath(sysconfig.get_paths()[k]) for k in ("stdlib", "purelib", "platlib")}
    tb, user = err.__traceback__, None
    while tb is not None:
        path = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if not (path.startswith(package + os.sep) or path.startswith("<")
                or any(path.startswith(lib + os.sep) for lib in library)
                or f"{os.sep}site-packages{os.sep}" in path or f"{os.sep}dist-packages{os.sep}" in path):
            user = tb
        tb = tb.tb_next
    if user is None:
        return None
    frame = user.tb_frame
    owner = frame.f_locals.get("self")
    where = f"{type(owner).__qualname__}.{frame.f_code.co_name}" if owner is not None else frame.f_code.co_name
    from parlightning.distribution.planning import FIELD as STRATEGY
    from parlightning.distribution.samplers import TaskSampler
    from parlightning.distribution.strategies import ParallelStrategy
    from parlightning.envs.base import BatchedEnv

    from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO
    from lightning.pytorch.loggers import Logger

    kinds = ((lightning.Callback, "trainer.callbacks"), (BatchedEnv, "data.env"), (TaskSampler, "data.sampler"),
             (ParallelStrategy, STRATEGY), (Logger, "trainer.logger"), (CheckpointIO, "trainer.plugins"))
    try:  # the runtime protocols read the object's attributes: one that raises names no field
        field = next((f"{name}: " for kind, name in kinds if owner is not None and isinstance(owner, kind)), "")
    except Exception:  # noqa: BLE001
        field = ""
    text = error_text(err)[:300]
    return (f"{field}{where} ({os.path.basename(frame.f_code.co_filename)}:{user.tb_lineno}) raised "
            f"{type(err).__name__}{': ' + text if text else ''}; the error is in that code, not in parlightning: "
            "fix it there (PARLIGHTNING_TRACEBACK=1 shows the traceback)")


@contextmanager
def stall_watched(seconds: Optional[float], cleanup: Optional[Callable[[], Any]] = None) -> Iterator[None]:
    """Watch this process's main thread for the block (`seconds` None: no watch). A stall ends the
    process with one `error: the run stopped: ...` line naming where it is stuck (after `cleanup`,
    e.g. removing what the program started to write)."""
    if seconds is None:
        yield
        return
    from parlightning.runtime.rank_watch import RankWatch

    watch = RankWatch(heartbeat_timeout=None, stall_timeout=seconds)
    watch.cleanup = cleanup
    watch.watch_from_start()
    try:
        yield
    finally:
        watch.stop_watching_alone()
