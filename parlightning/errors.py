"""`ConfigError`: bad configuration, reported as one clear message naming the field and the fix."""

import itertools
import math
import re
import sys
from typing import Any

_PARSER_NOISE = (
    "Does not validate against any of the Union subtypes", "Subtypes:", "Errors:", "Given value type:",
    "Given value:", "Expected a <class 'NoneType'>", "Expected a path but",
)


class ConfigError(ValueError):
    """Raised before any rollout for a bad config value; the CLI prints it without a traceback."""


class ArgumentError(ConfigError, TypeError):
    """A public method or function called with a bad argument (`parlightning.method_args`): the message
    names `Class.method(arg)` and what it must be. A ConfigError (one `error:` line from the CLIs) and a
    TypeError (what such a call raised before its arguments were checked)."""


class ReportedError(RuntimeError):
    """A fault during the run (a user's world, a full disk) whose message already names the
    component and the fix: the CLI prints it as one `error:` line, without a traceback."""


class NonFiniteError(ReportedError, FloatingPointError):
    """NaN or inf where the run needs finite numbers (a world's rewards or observations): a ReportedError
    (one `error:` line, a package exception from the Python API) and a FloatingPointError (what the
    check raised before it had its own class)."""


class LifecycleError(ReportedError):
    """An object used in the wrong state (a pool after its `close()`, a world stepped before its
    `reset()`, a sampler's tensor path before `bind`): the message names `Class.method` and what to
    call first (`parlightning.method_args.Lifecycle`)."""


class LifecycleValueError(LifecycleError, ValueError):
    """A LifecycleError that is also a ValueError: what the method raised in that state before its
    lifecycle was declared (TensorParallel without a key space, ClusterParallel before its tasks are
    registered), so callers that caught the ValueError still do."""


class WorldCloseWarning(RuntimeWarning):
    """A user's world (or shared resource) whose `close()` raised: warned at the end of a run, whose
    results are complete; the preflight turns the probe env's into a `ConfigError`."""


TRACEBACK_ENV = "PARLIGHTNING_TRACEBACK"  # 1: keep the traceback of an error in the user's code (debugging)
_ON, _OFF = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def tracebacks_wanted() -> bool:
    """PARLIGHTNING_TRACEBACK is on (1 / true / yes / on); 0, false, no, off or unset is off (the
    CLIs refuse any other value before they start: `tracebacks_setting_error`)."""
    import os

    return os.environ.get(TRACEBACK_ENV, "").strip().lower() in _ON


def package_environment_error(environ: Any) -> "str | None":
    """The one line for a value of the package's own environment variables that is neither on nor
    off (PARLIGHTNING_TRACEBACK; PARLIGHTNING_UNCHECKED_CHECKPOINTS, which is 1 or 0), else None."""
    value = environ.get(TRACEBACK_ENV)
    if value is not None and value.strip().lower() not in _ON + _OFF:
        return (f"{TRACEBACK_ENV}={value!r} in the environment: it is 1 (show the traceback of an error in your "
                "code) or 0 / unset (one line); nothing else is read as either")
    unchecked = environ.get("PARLIGHTNING_UNCHECKED_CHECKPOINTS")
    if unchecked is not None and unchecked.strip() not in ("", "0", "1"):
        return (f"PARLIGHTNING_UNCHECKED_CHECKPOINTS={unchecked!r} in the environment: it is 1 (load a checkpoint "
                "without a checksum) or 0 / unset (refuse one); nothing else is read as either")
    return None


def named_by_package(err: BaseException) -> bool:
    """`err` is one of the package's one-line errors (ConfigError, ReportedError) raised by the
    package itself (its innermost frame is in parlightning), so its message already names the
    component; the same class raised by a user's own code (a world raising ConfigError) is not."""
    import os

    if not isinstance(err, (ConfigError, ReportedError)):
        return False
    tb = err.__traceback__
    if tb is None:
        return True
    while tb.tb_next is not None:
        tb = tb.tb_next
    package = os.path.dirname(os.path.abspath(__file__))
    return os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(package + os.sep)


def is_stop_signal(err: BaseException) -> bool:
    """Whether `err` is a signal arriving, not a fault: Lightning's `SIGTERMException` or an exception
    carrying the signal number (a rank's `RankSignal`). Read through `sys.modules`, so a process
    that never imported Lightning (a collector child) does not import it for this check."""
    exceptions = sys.modules.get("lightning.pytorch.utilities.exceptions")
    if exceptions is not None and isinstance(err, exceptions.SIGTERMException):
        return True
    return isinstance(getattr(err, "signum", None), int)


def check_loaded_checkpoint(function: str, checkpoint: Any) -> None:
    """A function that takes a loaded checkpoint given a path (or anything but the dict): one ArgumentError."""
    if not isinstance(checkpoint, dict):
        raise ArgumentError(f"{function}(checkpoint): must be the loaded checkpoint, a dict (torch.load(path, "
                            f"weights_only=True) or parlightning.runtime.checkpoint.load_checkpoint_file(path)), got "
                            f"{type(checkpoint).__name__} {checkpoint!r:.60}")


def error_text(err: BaseException) -> str:
    """`str(err)` on one line; an exception whose own `__str__` fails (user code) is named instead of
    raising a second error from the report."""
    try:
        return " ".join(str(err).split())
    except Exception as inner:  # noqa: BLE001
        return f"<its message cannot be printed: {type(err).__name__}.__str__ raised {type(inner).__name__}>"


def out_of_memory(err: BaseException) -> bool:
    """A failed allocation: MemoryError, torch's OutOfMemoryError or its CPU allocator's RuntimeError."""
    if isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError":
        return True
    text = str(err) if isinstance(err, RuntimeError) else ""
    return "can't allocate memory" in text or "DefaultCPUAllocator" in text or "out of memory" in text.lower()


def root_error_line(err: BaseException) -> str:
    """The innermost cause of `err` (a class's own check, not the config parser's union wrapper
    around it) as one line."""
    while err.__cause__ is not None:
        err = err.__cause__
    return " ".join(line.strip() for line in str(err).splitlines() if line.strip())


_BOUND = re.compile(r"v(>=|<=|>|<)(-?[0-9.e+-]+|-?inf)")
_NOT_OF_TYPE = re.compile(r"Not of type (\w+): ?(.*)")


def _number(text: str) -> str:
    value = float(text)
    return str(int(value)) if value.is_integer() else repr(value)


def requirement(expression: str, integer: bool = False) -> str:
    """A restricted number type's expression (`v>0 and v<inf`, jsonargparse's) as what a value
    must be: `must be a positive integer`, `must be >= 0 (a finite number)`, `must lie in [0, 1]`."""
    bounds = _BOUND.findall(expression)
    if " or " in expression or len(bounds) != expression.count("v"):
        return f"must satisfy {expression}"
    lo = [(float(v), op == ">") for op, v in bounds if op in (">", ">=")]
    hi = [(float(v), op == "<") for op, v in bounds if op in ("<", "<=")]
    finite = any(math.isinf(v) for v, _ in hi)
    hi = [(v, strict) for v, strict in hi if not math.isinf(v)]
    if len(lo) > 1 or len(hi) > 1:
        return f"must satisfy {expression}"
    kind = "an integer" if integer else "a finite number" if finite else "a number"
    if lo and hi:
        (a, a_strict), (b, b_strict) = lo[0], hi[0]
        interval = f"{'(' if a_strict else '['}{_number(str(a))}, {_number(str(b))}{')' if b_strict else ']'}"
        return f"must be an integer in {interval}" if integer else f"must lie in {interval}"
    if lo:
        a, strict = lo[0]
        if integer:
            if strict and a == 0:
                return "must be a positive integer"
            return f"must be an integer {'>' if strict else '>='} {_number(str(a))}"
        head = "must be positive" if strict and a == 0 else f"must be {'>' if strict else '>='} {_number(str(a))}"
        return f"{head} ({kind})" if finite else head
    if hi:
        b, strict = hi[0]
        return f"must be {kind} {'<' if strict else '<='} {_number(str(b))}"
    return f"must be {kind}"


def _constrained(name: str) -> "tuple[str, bool] | None":
    """(expression, integer) of the restricted number type registered as `name` (jsonargparse's)."""
    from jsonargparse.typing import registered_types

    for tp in registered_types.values():
        if getattr(tp, "__name__", None) == name and hasattr(tp, "_expression"):
            return tp._expression, tp._type is int
    return None


def _restriction_line(key: str, message: str) -> "str | None":
    """A value refused by a constrained type (`parlightning.config_types`) as `key: must ..., got V`."""
    inner = list(re.finditer(r'( *)Parser key "([^"]+)":', message))[1:]  # class_path arguments: their own keys
    if inner:
        key += "".join(f".init_args.{m.group(2)}" for m in inner)
        depth = len(inner[-1].group(1))
        block = []  # the innermost key's own lines (deeper indented than it)
        for line in message[inner[-1].end():].splitlines()[1:]:
            if len(line) - len(line.lstrip(" ")) <= depth:
                break
            block.append(line)
        message = "\n".join(block).split("Got value: Namespace(")[0]
    found = _NOT_OF_TYPE.search(message)
    constrained = _constrained(found.group(1)) if found is not None else None
    if constrained is None:
        return None
    reason = found.group(2).strip().rstrip(".")
    value = None
    outside = re.match(r"(.*?) ?does not conform to restriction", reason)
    if outside is not None and outside.group(1):
        value = outside.group(1)
    elif outside is None:  # not a number at all: "could not convert string to float: 'abc'", "invalid literal ..."
        quoted = re.search(r":\s*(.+)$", reason)
        value = quoted.group(1) if quoted else None
    given = re.search(r"Given value: (.*)", message)
    if value is None and given is not None:
        value = given.group(1).strip()
    value = value.strip().rstrip(".") if value is not None else None
    text = requirement(*constrained)
    if "Expected a <class 'NoneType'>" in message:
        text += ", or null"
    return f"{key}: {text}" + (f", got {value}" if value is not None else "")


def parser_error_line(message: str) -> str:
    """A config parser (jsonargparse) error as one line: the key, then its most specific reasons
    (drops the union bookkeeping and repeated lines)."""
    lines = [line.strip().lstrip("-").strip() for line in str(message).splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return "invalid arguments; see --help"
    match = re.match(r'Parser key "([^"]+)":\s*(.*)', lines[0])
    if match is None:
        group = re.match(r"Group '([^']+)' does not accept option '([^']+)'", lines[0])
        if group is not None:  # a misspelt key under a section (model.learning_rate)
            example = {"model": " (e.g. model.lr)", "data": " (e.g. data.num_envs)",
                       "trainer": " (e.g. trainer.max_epochs)"}.get(group.group(1), "")
            return (f"{group.group(1)}.{group.group(2)}: {group.group(1)} has no option {group.group(2)!r}; check the "
                    f"spelling: python -m parlightning.fit --help lists {group.group(1)}'s options{example}")
        if lines[0].rstrip(":") == "Unexpected config":  # --config ''
            return "--config: an empty path; pass a YAML file or a packaged config's name (e.g. --config swarm)"
        if lines[0].startswith("Problems parsing config"):
            return f"--config: {' '.join(lines)} (--config needs a YAML file)"
        hint = " (not a known option: --help lists them)" if lines[0].startswith("unrecognized") else ""
        return " ".join(lines) + hint
    key, rest = match.groups()
    unknown = re.search(r"Option '([^']+)' is not accepted", message)
    if unknown is not None:  # a misspelt argument of a class named by class_path: name it and the class's own
        return _unknown_option(key, unknown.group(1), message)
    protocol = re.search(r"Import path (?:(\S+) )?does not implement protocol (\w+)", message)
    if protocol is not None:  # a user's class named by class_path lacks a method: say which
        given = re.search(r"class_path='([^']+)'", message) or re.search(r"Given value: (\S+)", message)
        path = protocol.group(1) or (given.group(1) if given else "the class")
        return _not_protocol(key, path, protocol.group(2))
    if "arguments are required: num_envs, device, seed" in message:  # a factory function named by class_path
        path = re.search(r"class_path='([^']+)'", message)
        name = path.group(1) if path else "the function"
        return (f"{key}: {name} is a function: name it as the value ({key}: {name}), not as class_path (class_path "
                "builds a class from init_args; the data module calls a factory with num_envs, device, seed)")
    factory = re.search(r"Expected '([^']+)' to be a function that returns", message)
    if factory is not None:  # jsonargparse reads the return annotation to know a factory builds the right thing
        path = factory.group(1)
        return (f"{key}: {path} must declare that it returns a BatchedEnv: annotate it "
                f"`def {path.rpartition('.')[2]}(num_envs: int, device: str, seed: int) -> BatchedEnv:` "
                "(from parlightning.envs import BatchedEnv), or name a BatchedEnv class")
    unusable = _unusable_class_path(key, message)
    if unusable is not None:  # a union slot (a logger: a Logger, a list, a bool or null) given a class it cannot use
        return unusable
    restricted = _restriction_line(key, message)
    if restricted is not None:  # a value outside a constrained type: the range it must lie in
        return restricted
    plain = _plain_type_line(key, message)
    if plain is not None:  # a class_path argument of the wrong plain type (bool, int, float, str)
        return plain
    reasons: list[str] = []
    for line in [rest, *lines[1:]]:
        if line and not line.startswith(_PARSER_NOISE) and line not in reasons:
            reasons.append(line)
    text = f"{key}: {' '.join(reasons) or 'invalid value'}"
    if key == "seed_everything":  # "Expected a <class 'bool'> Expected a <class 'int'>": say it plainly
        given = re.search(r"Given value: (.*)", message) or re.search(r"Got value: (.*)", message)
        text = (f"seed_everything (--seed): must be an integer seed (e.g. 42){', got ' + given.group(1).strip() if given else ''}"
                "; true draws a random one")
    elif key == "config":
        text += " (pass the path of an existing YAML file)"
    elif any(s in text for s in ("has no attribute", "No module named", "not accessible", "Import")):
        text += " (a class_path must name an importable class, e.g. package.module.Class)"
    return text


_IMPORT_FAILURE = re.compile(r"has no attribute|No module named|cannot import|not accessible|Error")


def _unusable_class_path(key: str, message: str) -> "str | None":
    """A class_path that does not import, or imports something of the wrong kind, as one line naming the
    path and why; jsonargparse buries it among a union's other members (`must be true or false`)."""
    problem = re.search(r"Problem with given class_path '([^']+)':\s*(.+)", message)
    if problem is not None and _IMPORT_FAILURE.search(problem.group(2)) and not problem.group(2).startswith("Parser key"):
        return (f"{key}: class_path {problem.group(1)!r} cannot be imported ({problem.group(2).strip().rstrip('.')}); "
                "a class_path must name an importable class, e.g. package.module.Class (is its package installed?)")
    nested = re.search(r"Given value: NestedArg\(key='([^']+)', val=(.*)\)\s*$", message, re.M)
    abstract = re.search(r"but (\S+) is abstract", message)
    if nested is not None and abstract is not None:  # --trainer.logger.init_args.X where no class is named yet
        arg = nested.group(1)
        return (f"{key}.init_args.{arg}: {key} names no class yet to give {arg} to (only the abstract "
                f"{abstract.group(1)}); name the class first: --{key} package.module.Class --{key}.init_args.{arg} "
                f"{nested.group(2).strip(chr(39))} (or set class_path and init_args in the config)")
    kind = re.search(r"Import path does not correspond to a subclass of (\w+)", message)
    given = re.search(r"Given value: (\S+)", message)
    if kind is not None and given is not None:
        example = {"Logger": ", e.g. lightning.pytorch.loggers.TensorBoardLogger",
                   "Callback": ", e.g. lightning.pytorch.callbacks.ModelCheckpoint"}.get(kind.group(1), "")
        return (f"{key}: {given.group(1)} is not a {kind.group(1)} class (it imports, but {key} takes a subclass of "
                f"{kind.group(1)}); name one{example}")
    return None


_PLAIN_NEEDS = {"bool": "true or false", "int": "an integer", "float": "a number", "str": "a string"}


def _plain_type_line(key: str, message: str) -> "str | None":
    """A value refused for its plain type (`Expected a <class 'bool'>`), a class_path argument's too, as
    `key[.init_args.name]: must be true or false, got V`, without the union bookkeeping."""
    inner = list(re.finditer(r'Parser key "([^"]+)":', message))[1:]
    own = message
    if inner:  # the innermost key's own lines: deeper indented than the line that names it
        head = message[message.rfind("\n", 0, inner[-1].start()) + 1:]
        depth = len(head) - len(head.lstrip(" "))
        lines = message[inner[-1].end():].splitlines()
        own = "\n".join([lines[0], *itertools.takewhile(lambda x: len(x) - len(x.lstrip(" ")) > depth, lines[1:])])
    named = re.findall(r"Expected a <class '(\w+)'>", own)
    expected = [t for t in named if t != "NoneType"]
    if not expected or any(t not in _PLAIN_NEEDS for t in expected):
        return None
    field = key + "".join(f".init_args.{m.group(1)}" for m in inner)
    got = (re.search(r"Got value: (.*?)\.? Got value: Namespace", own) or re.search(r"Got value: ([^\n]*)", own)
           or re.search(r"Given value: ([^\n]*)", own))
    need = " or ".join(dict.fromkeys(_PLAIN_NEEDS[t] for t in expected)) + (", or null" if "NoneType" in named else "")
    return f"{field}: must be {need}" + (f", got {got.group(1).strip().rstrip('.')}" if got else "")


def _unknown_option(key: str, option: str, message: str) -> str:
    path = re.search(r"class_path='([^']+)'", message)
    if path is None:
        return f"{key}.init_args.{option}: not an argument of {key}; check the spelling (--help lists them)"
    import difflib
    import importlib
    import inspect

    module, _, name = path.group(1).rpartition(".")
    try:
        params = [p for p in inspect.signature(getattr(importlib.import_module(module), name)).parameters
                  if p not in ("self", "args", "kwargs", "num_envs", "device", "seed")]
    except (ImportError, AttributeError, TypeError, ValueError):
        params = []
    close = difflib.get_close_matches(option, params, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    listed = f" (its arguments: {', '.join(params)})" if params else ""
    return f"{key}.init_args.{option}: {path.group(1)} takes no argument {option!r}; {hint}fix the name{listed}"


PROTOCOL_MEMBERS = {  # what each seam's protocol needs (parlightning.distribution.samplers, .parallel, .subagents.pool)
    "TaskSampler": ("pick(keys, round_index) -> task_id", "record(task_id, score)"),
    "ParallelStrategy": ("name", "plan(n_workers, round_index, keys) -> list[WorkUnit]"),
    "SubagentPool": ("spawn(instruction) -> handle", "poll(handle)", "cancel(handle)", "close()"),
}


def _not_protocol(key: str, path: str, protocol: str) -> str:
    """`key: path` does not implement `protocol`: name the members it lacks (or whose call shape differs)."""
    import importlib

    members = PROTOCOL_MEMBERS.get(protocol, ())
    module, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        cls = None
    missing = [m for m in members if cls is not None and not hasattr(cls, m.split("(")[0])]
    needs = f"a {protocol} needs {', '.join(members)}" if members else f"it must implement {protocol}"
    if missing:
        return f"{key}: {path} is not a {protocol}: it has no {', '.join(m.split('(')[0] for m in missing)}; {needs}"
    return (f"{key}: {path} does not match {protocol}: a method takes other arguments than the protocol's; "
            f"{needs} (same argument names and order)")


def check_call_shape(field: str, owner: str, method: str, fn: Any, args: "tuple[str, ...]" = (),
                     kwargs: "tuple[str, ...]" = (), caller: str = "the package", define: str = "") -> None:
    """The one probe of a call into the user's code, run once before anything is written: refuse
    with a ConfigError unless `fn` (a bound method or a function) accepts the positional `args` and
    the keywords `kwargs` (their names, in the order the package passes them), e.g.
    `data.env: MyWorld.step does not take (action, next_task): it is defined as step(self, action);
    the step loop calls it as step(action, next_task): define step(self, action, next_task=None)`.
    `define` replaces the suggested definition. A callable without a readable signature (a builtin)
    is let through: the call itself will tell."""
    import inspect

    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*args, **dict.fromkeys(kwargs))
    except TypeError:
        pass
    else:
        return
    self_ = "self, " if inspect.ismethod(fn) else ""
    shown = str(signature).replace("(", f"({self_}", 1) if self_ and str(signature) != "()" else (
        "(self)" if self_ else str(signature))
    wanted = ", ".join([*args, *(f"{k}=..." for k in kwargs)])
    define = define or f"{method}({', '.join([*(('self',) if self_ else ()), *args, *(f'{k}=None' for k in kwargs)])})"
    raise ConfigError(f"{field}: {owner}.{method} does not take ({wanted}): it is defined as {method}{shown}; "
                      f"{caller} calls it as {method}({wanted}): define {define}")
