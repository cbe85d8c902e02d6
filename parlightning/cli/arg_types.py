"""argparse types shared by the commands and the scripts: a bad value is argparse's one
`prog: error: argument --x: ...` line (exit 2), naming what the argument accepts, before anything
runs or is written (instead of a run that does nothing, loops forever or fails on a huge allocation).

Counts: `positive_int`, `non_negative_int`, `bounded_int(low, high)`; counts that size an allocation:
`actor_count`, `step_count`, `episode_count`; processes: `job_count`, `worker_count`; `port_number`. Numbers:
`finite_float`, `positive_float`, `non_negative_float`, `unit_interval`, `open_unit_interval`,
`positive_fraction`, `bounded_float`. Seeds: `random_seed`, `bank_seed`. Paths: `existing_file`,
`existing_folder`, `config_file`, `output_file`, `output_path`, `output_folder`, `as_path`. Lists and
names: `comma_list(item_type)` (no repeated item), `one_of(*names)`, `text_item`;
`ScriptParser` (argparse's parser refusing a repeated value in a list-valued option); `device_name`, `boolean`.
Everything here imports only the standard library at module level (a script checks its arguments
before it imports torch)."""

from __future__ import annotations

import argparse
import math
import os
from typing import Callable, TypeVar

T = TypeVar("T")

INT64_MAX = 2**63 - 1  # counts and seeds are stored as int64 (torch, numpy): a larger one overflows there
COUNT_MAX = 10**9  # a count (seeds, epochs, trials, steps in all) past this is a typo, not a plan
ALLOC_MAX = 1_000_000  # a count that sizes a tensor (actors, rollout steps, episodes per task)
MAX_PROCESSES = 1024  # processes, threads, worker pools: more than this machine could run
SEED_MAX = 2**32 - 1  # numpy's and Lightning's seed_everything's range (torch.manual_seed's is wider)


def _refuse(requirement: str, got: object) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"must be {requirement} (got {got})")


def _typed(name: str, check: Callable[[str], T], doc: str) -> Callable[[str], T]:
    """`check` under `name` (argparse names a type by its __name__ in its own messages)."""
    check.__name__ = check.__qualname__ = name
    check.__doc__ = doc
    return check


# ---- integers ----

def _integer(text: str, requirement: str) -> int:
    try:
        return int(text.strip().replace("_", ""))
    except (ValueError, AttributeError):
        raise _refuse(requirement, repr(text)) from None


def _int_requirement(low: int, high: int, what: str | None) -> str:
    if what is not None:
        return what
    if low == 1:
        return f"a positive integer up to {high}"
    if low == 0:
        return f"an integer >= 0 up to {high}"
    return f"an integer in {low}..{high}"


def bounded_int(low: int, high: int, what: str | None = None) -> Callable[[str], int]:
    """An integer in low..high; the refusal says `must be a positive integer up to HIGH (got X)`
    (or `what`, a phrase saying what is accepted)."""
    requirement = _int_requirement(low, high, what)

    def check(text: str) -> int:
        value = _integer(text, requirement)
        if not low <= value <= high:
            raise _refuse(requirement, value)
        return value

    return _typed(f"int_{low}_{high}", check, f"An integer in {low}..{high}.")


positive_int = _typed("positive_int", bounded_int(1, COUNT_MAX), "An integer >= 1 (seeds per cell, trials, epochs).")
non_negative_int = _typed("non_negative_int", bounded_int(0, COUNT_MAX), "An integer >= 0 (warm-up iterations, a delay).")
actor_count = _typed("actor_count", bounded_int(1, ALLOC_MAX), "Actors (num_envs): sizes every buffer, so bounded.")
step_count = _typed("step_count", bounded_int(1, ALLOC_MAX), "Rollout steps per actor: sizes the rollout buffer.")
episode_count = _typed("episode_count", bounded_int(1, ALLOC_MAX), "Episodes (per task): sizes the evaluation's actors.")
job_count = _typed("job_count", bounded_int(1, MAX_PROCESSES), "Processes or threads started (--jobs, --threads).")
worker_count = _typed("worker_count", bounded_int(0, MAX_PROCESSES), "World worker processes (0: none, in-process).")
random_seed = _typed("random_seed", bounded_int(0, SEED_MAX, f"a seed in 0..{SEED_MAX}"),
                     "A training/evaluation seed: numpy and Lightning's seed_everything accept 0..2**32 - 1.")
bank_seed = _typed("bank_seed", bounded_int(0, INT64_MAX, f"a bank seed in 0..{INT64_MAX}"),
                   "A task bank's seed: an integer in 0..2**63 - 1 (stored as int64).")
port_number = _typed("port_number", bounded_int(0, 65535, "a port in 1..65535, or 0 for a free one"),
                     "A TCP port to listen on: 1..65535, or 0 for a free one the system picks.")


# ---- numbers ----

def _interval(low: float, high: float, low_open: bool, high_open: bool) -> str:
    if math.isinf(low) and math.isinf(high):
        return "a finite number"
    if math.isinf(high):
        return f"a finite number {'>' if low_open else '>='} {low:g}"
    if math.isinf(low):
        return f"a finite number {'<' if high_open else '<='} {high:g}"
    return f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


def bounded_float(low: float = -math.inf, high: float = math.inf, low_open: bool = False,
                  high_open: bool = False) -> Callable[[str], float]:
    """A finite number between low and high (each end open or closed); nan and inf are refused."""
    requirement = _interval(low, high, low_open, high_open)

    def check(text: str) -> float:
        try:
            value = float(text)
        except (ValueError, TypeError):
            raise _refuse(requirement, repr(text)) from None
        inside = (low < value if low_open else low <= value) and (value < high if high_open else value <= high)
        if not math.isfinite(value) or not inside:
            raise _refuse(requirement, text)
        return value

    return _typed("bounded_float", check, f"A finite number in {requirement}.")


finite_float = _typed("finite_float", bounded_float(), "Any finite number (not nan or inf).")
positive_float = _typed("positive_float", bounded_float(0.0, low_open=True), "A finite number > 0 (seconds, a rate).")
non_negative_float = _typed("non_negative_float", bounded_float(0.0), "A finite number >= 0 (a latency, a coefficient).")
unit_interval = _typed("unit_interval", bounded_float(0.0, 1.0), "A fraction in [0, 1].")
open_unit_interval = _typed("open_unit_interval", bounded_float(0.0, 1.0, True, True), "A fraction in (0, 1).")
positive_fraction = _typed("positive_fraction", bounded_float(0.0, 1.0, low_open=True),
                           "A share in (0, 1] (of a budget, of the run).")


def stall_seconds(text: str) -> "float | None":
    """--stall_timeout: seconds in [3, 604800] (a week), or null / none / off to turn the watch off."""
    if text.strip().lower() in ("null", "none", "off"):
        return None
    return _stall_range(text)


_stall_range = bounded_float(3.0, 7 * 24 * 3600.0)
stall_seconds = _typed("stall_seconds", stall_seconds, stall_seconds.__doc__)


def boolean(text: str) -> bool:
    """true/false, yes/no, 1/0, on/off (any case)."""
    value = {"true": True, "yes": True, "1": True, "on": True,
             "false": False, "no": False, "0": False, "off": False}.get(text.strip().lower())
    if value is None:
        raise _refuse("true or false (also yes/no, 1/0, on/off)", repr(text))
    return value


# ---- lists ----

def comma_list(item_type: Callable[[str], T], name: str | None = None, distinct: bool = True) -> Callable[[str], list[T]]:
    """`a,b,c`: every item checked by `item_type`; an empty list or an empty item (`a,,b`, `a,`) is
    refused, and an item's refusal names the item. With `distinct` (the default: a list of seeds,
    arms or sizes run once each), an item equal to an earlier one (`0,0`, `0.1,0.10`) is refused too."""

    def check(text: str) -> list[T]:
        items = [item.strip() for item in text.split(",")]
        if not text.strip() or any(not item for item in items):
            raise argparse.ArgumentTypeError(f"must be a comma-separated list with no empty item, e.g. a,b (got {text!r})")
        out = []
        for i, item in enumerate(items, 1):
            try:
                out.append(item_type(item))
            except (argparse.ArgumentTypeError, ValueError, TypeError) as err:
                raise argparse.ArgumentTypeError(f"item {i} ({item!r}): {err}") from None
            if distinct and out[-1] in out[:-1]:
                raise argparse.ArgumentTypeError(f"item {i} ({item!r}) repeats item {out.index(out[-1]) + 1}: each "
                                                 "value would run the same thing twice; give each value once")
        return out

    return _typed(name or f"comma_list_of_{getattr(item_type, '__name__', 'str')}", check,
                  f"Comma-separated values, each a {getattr(item_type, '__name__', 'str')}.")


def repeated_item(values: object) -> "tuple[int, int] | None":
    """(first, second) 0-based positions of the first item of `values` equal to an earlier one, else None."""
    if not isinstance(values, (list, tuple)):
        return None
    for j, value in enumerate(values):
        for i in range(j):
            if values[i] == value:
                return i, j
    return None


class ScriptParser(argparse.ArgumentParser):
    """The scripts' parser: an `argparse.ArgumentParser` that also refuses a repeated value in a
    list-valued option (`nargs="+"` / `"*"`: `--seeds 0 0`, `--policies mlp mlp`, `--num-envs 256 256`)
    with argparse's one line naming the flag and the value (exit 2): each value would run or measure the
    same thing twice, and a script keying its outputs by the value would overwrite or miss one. An option
    whose repeats mean something (a layer-width list `--hidden-sizes 64 64`) is named in
    `repeats_allowed` (its dest)."""

    def __init__(self, *args: object, repeats_allowed: "tuple[str, ...]" = (), **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.repeats_allowed = set(repeats_allowed)

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[no-untyped-def]
        parsed, extras = super().parse_known_args(args, namespace)
        for action in self._actions:
            if action.nargs not in ("+", "*") or action.dest in self.repeats_allowed:
                continue
            values = getattr(parsed, action.dest, None)
            found = repeated_item(values)
            if found is not None and values is not action.default:
                i, j = found
                flag = "/".join(action.option_strings) or action.metavar or action.dest
                self.error(f"argument {flag}: {values[j]!r} is given twice (values "
                           f"{i + 1} and {j + 1}): each would run the same thing; give each value once")
        return parsed, extras


def one_of(*names: str) -> Callable[[str], str]:
    """One of `names` (an item of a comma list; a single option uses argparse's choices=)."""

    def check(text: str) -> str:
        if text not in names:
            raise _refuse(f"one of {', '.join(names)}", repr(text))
        return text

    return _typed("one_of", check, f"One of {', '.join(names)}.")


def text_item(text: str) -> str:
    """A non-empty word (an item of a comma list of names)."""
    if not text.strip():
        raise _refuse("a non-empty name", repr(text))
    return text.strip()


# ---- devices and paths ----

def device_name(text: str) -> str:
    """A torch device name this program can run on: cpu, cuda, cuda:N or mps (cpu:N and mps:N as torch
    reads them); checked without importing torch (whether this machine has it is the program's check)."""
    import re

    if not re.fullmatch(r"(cpu|cuda|mps)(:\d+)?", text):
        raise _refuse("cpu, cuda, cuda:N or mps", repr(text))
    return text


def existing_file(text: str) -> str:
    """A file the program reads: it exists, is a regular file (not a folder, pipe or device) and is readable."""
    if not text:
        raise _refuse("the path of an existing, readable file", "an empty path")
    path = os.path.expanduser(text)
    if not os.path.exists(path):
        raise argparse.ArgumentTypeError(f"no file at {text!r}; must be the path of an existing, readable file")
    if not os.path.isfile(path):
        kind = "a folder" if os.path.isdir(path) else "not a regular file (a pipe, device or socket)"
        raise argparse.ArgumentTypeError(f"{text!r} is {kind}; must be the path of an existing, readable file")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"{text!r} cannot be read (permissions); must be a readable file")
    return text


def existing_folder(text: str) -> str:
    """A folder the program reads (a run folder): it exists and is a folder."""
    if not text or not os.path.isdir(os.path.expanduser(text)):
        raise argparse.ArgumentTypeError(f"no folder at {text!r}; must be the path of an existing folder")
    return text


def config_file(text: str) -> str:
    """A fit config: a packaged name (`swarm`, `parallel/cp`) or a path to an existing UTF-8 YAML
    mapping (the fit's own check, `check_config_file`); returns the file's path."""
    from parlightning.cli.packaged import config_path
    from parlightning.errors import ConfigError
    from parlightning.runtime.preflight import check_config_file

    path = existing_file(config_path(text) or text)
    try:
        check_config_file(path)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err).replace(f"--config {path}: ", f"{text!r}: ", 1)) from None
    return path


def output_folder(text: str) -> str:
    """A folder the program will write into: an existing folder, or one it can create (no part of
    the path is a file or a device such as /dev/null, and not under /proc or /sys)."""
    if not text:
        raise _refuse("a folder path (created if missing)", "an empty path")
    path = os.path.abspath(os.path.expanduser(text))
    from parlightning.paths import dangling_link_error

    dangling = dangling_link_error("", text)  # a link to nothing: makedirs fails on it ("File exists")
    if dangling is not None:
        raise argparse.ArgumentTypeError(str(dangling).lstrip(": "))
    if os.path.isdir(path):
        if not os.access(path, os.W_OK):
            raise argparse.ArgumentTypeError(f"{text!r} is a folder this user cannot write into; name a writable folder")
        return text
    if os.path.exists(path):
        raise argparse.ArgumentTypeError(f"{text!r} is a file, not a folder; name a folder (it is created if missing)")
    parent = path
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or parent.split(os.sep)[1:2] in (["proc"], ["sys"]) or not os.access(parent, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text!r} cannot be created: {parent!r} is not a folder it can write into; "
                                         "name a folder under an existing writable one")
    return text


def output_file(text: str) -> str:
    """A file the program will write: not a folder, in an existing writable folder (checked before it runs)."""
    from parlightning.cli.outputs import check_output_file
    from parlightning.errors import ConfigError

    if not text:
        raise _refuse("a file path to write", "an empty path")
    try:
        check_output_file("", text)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err).lstrip(": ")) from None
    return text


def output_path(text: str) -> str:
    """A file the program writes into a folder it creates if missing (a results page and its images)."""
    path = os.path.abspath(os.path.expanduser(text)) if text else ""
    if not text or os.path.isdir(path):
        raise _refuse("a file path to write (its folder is created if missing)", repr(text) if text else "an empty path")
    if os.path.isdir(os.path.dirname(path)):
        return output_file(text)
    try:
        output_folder(os.path.dirname(path))
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: its folder {err}") from None
    return text


def as_path(check: Callable[[str], str]) -> Callable[[str], "os.PathLike[str]"]:
    """`check` whose value is returned as a pathlib.Path (for scripts that use Path arguments)."""
    from pathlib import Path

    return _typed(getattr(check, "__name__", "path"), lambda text: Path(check(text)), check.__doc__ or "")
