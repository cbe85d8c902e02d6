"""Starting a program for `python -m parlightning.<program>`: `run_program(name)` imports it, then
calls its `main()`.

Two things can go wrong before the program's own error handling exists:
- `python -m` puts the working folder first on `sys.path`, so a user's `yaml.py`, `torch.py`,
  `random.py` or `numpy/` there is imported instead of the real module, and the program fails deep in
  an import with a traceback that never says why. When the import fails, or succeeds with such a file
  loaded, the program ends with one `error:` line naming the file, the module it hides and the fix. A
  file shadows a module when a module of that name also exists elsewhere on the path (or in the
  standard library); a user's own module (`my_world.py`) does not.
- The import takes seconds (torch, Lightning); a SIGTERM, SIGHUP, SIGUSR1/2 or Ctrl-C meanwhile ends it
  with one line saying nothing was written, not silently or with an import traceback.
Before either, a value of the package's own environment variables that means neither on nor off
(`PARLIGHTNING_TRACEBACK=maybe`) is one line, and so is a distributed variable torch or Lightning
reads at start-up that is not an integer in its range (`LOCAL_RANK=abc`, `RANK` >= `WORLD_SIZE`,
`MASTER_PORT=70000`: `parlightning.runtime.launch_env`)."""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import signal
import sys
from types import TracebackType
from typing import NoReturn, Optional

from parlightning.cli.stdout_guard import run_guarded
from parlightning.cli.stop_signals import KILLING, Signalled, stop_on_signals, stopped
from parlightning.errors import package_environment_error
from parlightning.runtime.launch_env import distributed_environment_error


def _folder() -> Optional[str]:
    """The folder `python -m` put first on the path (the working folder), or None."""
    if not sys.path:
        return None
    return os.path.abspath(sys.path[0] or os.getcwd())


def _top_level_file(path: str, folder: str) -> Optional[str]:
    """The top-level module name a file in `folder` defines (`yaml.py`, `numpy/__init__.py`), else None."""
    path = os.path.abspath(path)
    parent, base = os.path.split(path)
    if parent == folder and base.endswith(".py"):
        return base[:-3]
    if os.path.dirname(parent) == folder and base == "__init__.py":
        return os.path.basename(parent)
    return None


def _hides(name: str, path: str, folder: str) -> bool:
    """The file `path` in `folder` hides a module `name` that exists elsewhere (or is in the standard library)."""
    if name == "parlightning" or name == "__main__":
        return False
    if name in sys.stdlib_module_names:
        return True
    others = [p for p in sys.path[1:] if os.path.abspath(p or os.getcwd()) != folder]
    try:
        spec = importlib.machinery.PathFinder.find_spec(name, others)
    except (ImportError, ValueError):
        return False
    origin = getattr(spec, "origin", None) if spec is not None else None
    return origin is not None and os.path.abspath(origin) != os.path.abspath(path)


def shadowing_files(tb: Optional[TracebackType] = None) -> list[tuple[str, str]]:
    """(module name, file) for every file of the working folder that hides a real module: those
    imported (in `sys.modules`) and those in the frames of the traceback `tb`."""
    folder = _folder()
    if folder is None:
        return []
    found: dict[str, str] = {}
    candidates = [(n, getattr(m, "__file__", None)) for n, m in list(sys.modules.items()) if "." not in n]
    while tb is not None:
        candidates.append((None, tb.tb_frame.f_code.co_filename))
        tb = tb.tb_next
    for name, path in candidates:
        if not path:
            continue
        defined = _top_level_file(path, folder)
        if defined is None or (name is not None and name != defined) or defined in found:
            continue
        if _hides(defined, path, folder):
            found[defined] = os.path.abspath(path)
    return sorted(found.items())


def shadow_line(found: list[tuple[str, str]]) -> str:
    name, path = found[0]
    shown = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else path
    more = f" (and {', '.join(n for n, _ in found[1:])})" if len(found) > 1 else ""
    return (f"error: {shown} in the working folder hides the module {name!r}{more}: `python -m` imports the "
            f"working folder's files first, so parlightning gets that file instead of the real {name}; rename it "
            "(and its __pycache__ entry) or run from another folder")


STARTING = "; it was still starting: nothing was written"


def check_working_folder() -> None:
    """The working folder still exists (a shell in a folder another process removed): relative
    paths, the default output folder and the config search all start there."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise SystemExit("error: the working folder no longer exists (it was deleted or moved after this shell "
                         "entered it); cd to an existing folder and run it again") from None


def refuse_bad_environment() -> None:
    """End the process with one `error:` line when a variable of the package's own environment, or a
    distributed variable torch or Lightning read at start-up, is wrong. Call it before importing torch,
    Lightning or torchmetrics: torchmetrics reads `LOCAL_RANK` as it is imported. The programs ask it
    in `run_program`, the scripts in `run_main` and, those that import Lightning at the top, first."""
    wrong = package_environment_error(os.environ) or distributed_environment_error(os.environ)
    if wrong is not None:
        raise SystemExit(f"error: {wrong}")


def run_program(name: str) -> None:
    """Import the program `name` (e.g. `parlightning.cli.fit`) and call its `main()`. A file of the
    working folder hiding a module it needs, or a signal or Ctrl-C during the import, ends the process
    with one line instead of an import traceback (or a silent death)."""
    check_working_folder()
    refuse_bad_environment()  # before the import: torchmetrics reads LOCAL_RANK as it is imported
    try:
        with stop_on_signals(after=STARTING):
            try:
                module = importlib.import_module(name)
            except (Signalled, KeyboardInterrupt):
                raise
            except Exception as err:  # noqa: BLE001  the import failed: say why when a file of the folder is to blame
                found = shadowing_files(err.__traceback__)
                if found:
                    raise SystemExit(shadow_line(found)) from None
                _refuse_library_environment(err)
                raise
    except (Signalled, KeyboardInterrupt) as err:
        stopped(err, STARTING)
    found = shadowing_files()
    if found:
        raise SystemExit(shadow_line(found))
    _quiet_thread_write_failures()
    try:
        run_guarded(module.main)  # a standard output that fails on write (> /dev/full, | head -1) is one line
    except SystemExit as done:
        if _stopped_by_a_signal(done.code):
            exit_now(done.code)
        if done.code not in (None, 0) and _threads_left():  # a thread the user's code started (a world's) must
            _print_exit(done.code)  # not keep the process alive after its one line
            exit_now(done.code if isinstance(done.code, int) else 1)
        raise
    except Exception as err:  # noqa: BLE001  a library refusing an environment variable's value: one line
        _refuse_library_environment(err)
        raise


WRITE_FAILURES = ("ENOSPC", "EDQUOT", "EFBIG", "EROFS")  # a full disk or quota, a file-size limit, a read-only mount


def _quiet_thread_write_failures() -> None:
    """A library's writer thread (TensorBoard's event writer) that dies on a full disk prints its
    traceback from the thread, then the program's main thread meets the same failure and prints its
    one line: the thread's traceback is left out for those write failures (other errors keep it)."""
    import errno
    import threading

    codes = {getattr(errno, name) for name in WRITE_FAILURES if hasattr(errno, name)}
    default = threading.excepthook

    def hook(args: "threading.ExceptHookArgs") -> None:
        if isinstance(args.exc_value, OSError) and args.exc_value.errno in codes:
            return
        default(args)

    threading.excepthook = hook


def _refuse_library_environment(err: BaseException) -> None:
    from parlightning.errors import tracebacks_wanted
    from parlightning.runtime.launch_env import library_environment_error

    line = None if tracebacks_wanted() else library_environment_error(err, os.environ)
    if line is not None:
        raise SystemExit(f"error: {line}") from None


def _threads_left() -> bool:
    """A non-daemon thread other than the main one is alive: the interpreter would wait for it at exit."""
    import threading

    return any(t.is_alive() and not t.daemon and t is not threading.main_thread() for t in threading.enumerate())


def _print_exit(code: object) -> None:
    """What the interpreter prints for SystemExit(code): a message to stderr (an int prints nothing)."""
    if code is not None and not isinstance(code, int):
        try:
            print(code, file=sys.stderr)
        except Exception:  # noqa: BLE001
            pass


def _stopped_by_a_signal(code: object) -> bool:
    return isinstance(code, int) and not isinstance(code, bool) and code - 128 in (signal.SIGINT, *KILLING)


def exit_now(code: int) -> NoReturn:
    """End a program a signal stopped (its one line is out, what it kept is written whole) without the
    interpreter's shutdown: that restores the default signal actions and then waits for the run's
    threads and libraries (a world step still sleeping in the collector thread), so a second Ctrl-C
    or SIGTERM meanwhile (pressed twice, a scheduler signalling again) killed the process by the
    signal instead of the exit code its line promised."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 (a closed or failing stream: nothing more to say)
            pass
    os._exit(code)


def fit_console() -> None:
    """The `parlightning-fit` console script: `python -m parlightning.fit`, with the same checks before
    the program is imported (environment variables, shadowing files, a signal during the import, a
    failing standard output)."""
    run_program("parlightning.cli.fit")


def export_console() -> None:
    """The `parlightning-export` console script: `python -m parlightning.export`, likewise."""
    run_program("parlightning.cli.export")
