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
    packages and the standard library, with the object's config field where it is one. With no such
    frame, an error parlightning's code raised on a user's object (`_user_object_error`)."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    if isinstance(err, (KeyboardInterrupt, SIGTERMException, MemoryError)) or tracebacks_wanted():
        return None
    if isinstance(err, SystemExit) and err.code in (None, 0):  # a deliberate clean exit (e.g. a script's
        return None  # early stop) passes through; sys.exit(3) from a callback is reported like any error
    tb, user = err.__traceback__, None
    while tb is not None:
        if _user_file(tb.tb_frame.f_code.co_filename):
            user = tb
        tb = tb.tb_next
    if user is None:
        return _user_object_error(err)
    frame = user.tb_frame
    owner = frame.f_locals.get("self")
    where = f"{type(owner).__qualname__}.{frame.f_code.co_name}" if owner is not None else frame.f_code.co_name
    text = error_text(err)[:300]
    return (f"{_field_of(owner)}{where} ({os.path.basename(frame.f_code.co_filename)}:{user.tb_lineno}) raised "
            f"{type(err).__name__}{': ' + text if text else ''}; the error is in that code, not in parlightning: "
            "fix it there (PARLIGHTNING_TRACEBACK=1 shows the traceback)")


def _user_file(path: str) -> bool:
    """A file of the user's own code: not parlightning, an installed package or the standard library."""
    import sysconfig

    path = os.path.abspath(path)
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    library = {os.path.abspath(sysconfig.get_paths()[k]) for k in ("stdlib", "purelib", "platlib")}
    return not (path.startswith(package + os.sep) or path.startswith("<")
                or any(path.startswith(lib + os.sep) for lib in library)
                or f"{os.sep}site-packages{os.sep}" in path or f"{os.sep}dist-packages{os.sep}" in path)


def _user_class(obj: Any) -> bool:
    """`obj` is an instance of a class the user wrote (its module's file is user code)."""
    import sys

    module = sys.modules.get(getattr(type(obj), "__module__", "") or "")
    path = getattr(module, "__file__", None)
    return bool(path) and _user_file(path)


def _user_object_error(err: BaseException) -> Optional[str]:
    """One line for an error raised in parlightning's code on behalf of a user's object, when no frame
    of the user's code is in the traceback: a base class's method the user's subclass inherits and
    did not override as documented (`Schedule.value` raising NotImplementedError), or a call to the
    user's method that failed before its first line ran (a `scripted_action(name, obs)` without the
    documented `generator`: Python's TypeError names the method). Innermost frame first."""
    text = error_text(err)
    tb, frames = err.__traceback__, []
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    for tb in reversed(frames):
        frame = tb.tb_frame
        try:
            values = list(frame.f_locals.items())
        except Exception:  # noqa: BLE001  (a frame whose locals cannot be read)
            continue
        for name, value in values:
            owner = getattr(value, "__self__", value) if callable(value) and hasattr(value, "__self__") else value
            if owner is None or isinstance(owner, type) or not _user_class(owner):
                continue
            kind = type(owner).__qualname__
            if name == "self":  # the method runs in parlightning's base class, on the user's instance
                where = (f"{kind}.{frame.f_code.co_name} (inherited from parlightning's "
                         f"{_defining_class(type(owner), frame.f_code.co_name)}, not overridden)")
            elif f"{kind}." in text:  # Python's own call error names the user's method
                where = kind
            else:
                continue
            shown = text[:300]
            return (f"{_field_of(owner)}{where} raised {type(err).__name__}{': ' + shown if shown else ''}; the "
                    f"error is in how the class {kind} ({_file_of(type(owner))}) is written: check it against the base "
                    "class's documented methods and signatures (PARLIGHTNING_TRACEBACK=1 shows the traceback)")
    return None


def _defining_class(kind: type, method: str) -> str:
    """The class of `kind`'s MRO whose body defines `method` (the base the user's class inherits it from)."""
    for base in kind.__mro__:
        if method in vars(base):
            return base.__qualname__
    return "base class"


def _file_of(kind: type) -> str:
    import sys

    path = getattr(sys.modules.get(kind.__module__), "__file__", None) or kind.__module__
    return os.path.basename(path)


def _field_of(owner: Any) -> str:
    """The config field of the user's object (`data.env: `), or "" when it is none of the run's parts."""
    if owner is None:
        return ""
    import lightning
    from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO
    from lightning.pytorch.loggers import Logger

    from parlightning.distribution.planning import FIELD as STRATEGY
    from parlightning.distribution.samplers import TaskSampler
    from parlightning.distribution.strategies import ParallelStrategy
    from parlightning.envs.base import BatchedEnv

    # classes first, then the runtime protocols, which read the object's attributes (one that raises is
    # that protocol's miss, not the end of the search)
    kinds = ((lightning.Callback, "trainer.callbacks"), (Logger, "trainer.logger"), (CheckpointIO, "trainer.plugins"),
             (BatchedEnv, "data.env"), (TaskSampler, "data.sampler"), (ParallelStrategy, STRATEGY))
    for kind, name in kinds:
        try:
            if isinstance(owner, kind):
                return f"{name}: "
        except Exception:  # noqa: BLE001
            continue
    return ""


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
