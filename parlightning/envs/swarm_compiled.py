"""`SwarmEnv(compile=True)`: `SwarmEnv.step` as two C++ kernels, built with the system compiler on first use.

The eager step makes ~120 torch calls, each a pass over [W, N] planes. Here one kernel runs the round
up to `done` (decode, caps, successes, counts, stages, flags, outcome, the final observation and, where
the episode goes on, the next one) and a second one, after the caller's `next_task` (a Python callable
that needs `done`), the resets (first observations, the next round's state). Both walk blocks of
`BLOCK` actors, the per-slot work as branch-free float loops over contiguous rows (vectorised by the
compiler), so the data stays in L1. What stays eager is exactly what the kernels must not replace: the
random draw (`uniform_` on the env's mt19937 generator: same tensor shape, same order) and its `log_`
(ATen's vectorised log: a 1-ulp difference in a log can flip the floor after it).

Bit-identity with the eager step (tests/test_swarm_compiled.py checks whole trajectories bitwise):
every value is computed by the eager step's operations on the same float32 operands in the same order,
compiled with -ffp-contract=off and without -ffast-math (each +, -, *, / IEEE-rounded: no FMA
contraction, no reciprocal rewrite, no reassociation; -fno-trapping-math only lets the compiler
if-convert, which changes no value). Masks are 0/1 and counts integer-valued floats, so sums over slots
are exact in any order; the inexact values (main time, elapsed, the context row's quotients) are single
IEEE operations on the eager step's operands, and where eager fuses a multiply-add (ATen's add with
alpha, addcmul) the product is exact. floor and ceil are computed exactly without libm (checked against
std::floor and std::ceil on every 7th float bit pattern).

The kernels' source is `swarm_step.cpp` beside this module (package data: edit and diff it as C++).
Every buffer handed to them is checked first (`_checked`: dtype, device, contiguity, element count),
so a caller's mistake is a TypeError naming the buffer, never a read or write outside it. The kernels
are single-threaded (torch's intra-op threads do not apply) and CPU-only. The shared library is cached
under $PARLIGHTNING_CACHE_DIR (default ~/.cache/parlightning), keyed by the source, the compiler's path
and `--version`, and the flags: the first build takes about half a second, later ones load it.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from parlightning.envs.base import EpisodeParts, StepResult, checked_pick
from parlightning.errors import ConfigError
from parlightning.runtime.waits import expected_wait

BLOCK = 64  # actors per block in the kernels
BUILD_TIMEOUT_S = 600.0  # the compiler's bound (a declared wait: DDP's stall check allows it)
FLAGS = ("-O3", "-shared", "-fPIC", "-std=c++14", "-ffp-contract=off", "-fno-fast-math", "-fno-trapping-math")

SOURCE_FILE = Path(__file__).with_name("swarm_step.cpp")  # package data: the kernels' source



class _Tables(ctypes.Structure):
    _fields_ = ([(name, ctypes.c_void_p) for name in
                 ("step_rows", "splits", "stage_work", "present_rows", "slot_table", "first_obs")]
                + [(name, ctypes.c_int64) for name in
                   ("N", "W", "S", "K", "R", "max_episode_steps", "n_cols", "has_budget")]
                + [(name, ctypes.c_float) for name in  # (a Python float rounds to float32 as torch's scalars do)
                   ("budget", "max_sub", "merge", "brief", "spawn", "late_credit", "time_scale", "levels",
                    "work_scale", "inv_log_rel")])


def _compiler() -> Optional[str]:
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _cache_dir() -> Path:
    root = os.environ.get("PARLIGHTNING_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "parlightning")
    return Path(root)


@functools.lru_cache(maxsize=None)
def _compiler_version(cxx: str) -> str:
    """The compiler's own `--version` line (part of the cache key: an upgraded compiler rebuilds)."""
    try:
        proc = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as err:
        return f"unknown ({type(err).__name__})"
    return (proc.stdout or proc.stderr).strip().splitlines()[0] if (proc.stdout or proc.stderr).strip() else "unknown"


def source() -> str:
    """The kernels' C++ source, shipped as package data beside this module (`swarm_step.cpp`)."""
    return SOURCE_FILE.read_text()


def _flags() -> tuple[str, ...]:
    return (*FLAGS, f"-DBLOCK={BLOCK}")


def cache_key(cxx: str) -> str:
    """What the built library depends on: the source, the compiler (path and version) and the flags."""
    return hashlib.sha256("\0".join((source(), cxx, _compiler_version(cxx), *_flags())).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def _library(cxx: str) -> ctypes.CDLL:
    """The kernel's shared library: compiled once per (source, compiler, its version, flags) into the
    cache dir (an atomic rename, so that concurrent processes share it), then loaded."""
    target = _cache_dir() / f"swarm_step-{cache_key(cxx)}.so"
    try:
        return _load(target, cxx)
    except OSError as err:  # the cache folder: a file, unwritable, on a full or noexec filesystem
        why = err.strerror or " ".join(str(err).split())[:160]
        raise ConfigError(f"{_cache_setting()}: the compiled SwarmEnv's kernel cannot be built or loaded in "
                          f"{str(target.parent)!r} ({why}); point it at a writable folder on a filesystem that "
                          "allows executables, or set `compile: false` (the eager step gives the same "
                          "trajectories)") from None


def _cache_setting() -> str:
    """Which setting chose the cache folder, as the error line names it."""
    for name in ("PARLIGHTNING_CACHE_DIR", "XDG_CACHE_HOME"):
        if os.environ.get(name):
            return f"{name}={os.environ[name]!r} in the environment"
    return "the kernel cache folder (~/.cache/parlightning; set PARLIGHTNING_CACHE_DIR to move it)"


def _load(target: Path, cxx: str) -> ctypes.CDLL:
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            out = Path(tmp) / "swarm_step.so"
            try:
                with expected_wait(BUILD_TIMEOUT_S, f"{cxx} building SwarmEnv's C++ kernel"):
                    proc = subprocess.run([cxx, *_flags(), str(SOURCE_FILE), "-o", str(out)], capture_output=True,
                                          text=True, timeout=BUILD_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise ConfigError(f"SwarmEnv: `compile: true`: {cxx} did not build its C++ kernel within "
                                  f"{BUILD_TIMEOUT_S:g} s; set `compile: false` (the eager step gives the same "
                                  "trajectories) or point CXX at a faster C++ compiler") from None
            if proc.returncode != 0:
                tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
                raise ConfigError(f"SwarmEnv: `compile: true` could not build its C++ kernel with {cxx} "
                                  f"(exit {proc.returncode}: {tail}); set `compile: false` (the eager step gives "
                                  "the same trajectories) or point CXX at a working C++ compiler")
            os.replace(out, target)
    lib = ctypes.CDLL(str(target))
    lib.swarm_step_a.restype = None
    lib.swarm_step_b.restype = ctypes.c_int64
    return lib


def compiler_problem(device: torch.device) -> Optional[str]:
    """Why the kernel cannot be built or run here, or None when it can."""
    if device.type != "cpu":
        return f"the compiled step runs on device cpu only, not {device.type}"
    if _compiler() is None:
        return "no C++ compiler was found (looked for $CXX, g++, c++, clang++)"
    return None


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD, TRIM_THRESHOLD = 32 << 20, 64 << 20


@functools.lru_cache(maxsize=None)
def retain_heap() -> bool:
    """Let glibc keep freed memory for reuse: blocks under 32 MiB come from the heap, and at most
    64 MiB of free heap top is kept, not returned to the OS. Each step allocates its observations
    (~2.6 MB at N = 4096); by default glibc may hand such blocks back and page-fault them in again
    on the next step, which costs the compiled step about a fifth of its time. Process-wide, once;
    False where the C library has no `mallopt` (not glibc): nothing changes there."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1


def build(env: Any) -> "CompiledStep":
    problem = compiler_problem(env.device)
    if problem is not None:
        raise ConfigError(f"SwarmEnv: `compile: true` needs a C++ compiler for its CPU kernel, but {problem}; "
                          "set `compile: false` (the eager step gives the same trajectories) or install g++")
    retain_heap()
    return CompiledStep(env)


class CompiledStep:
    """The kernels' tables for one env (kept alive here), its reused buffers, and the glue around the two calls."""

    def __init__(self, env: Any) -> None:
        self.cxx = _compiler()
        _library(self.cxx)  # build (or load) now, so that a failure is a config error at construction
        W, N = env.max_width, env.num_envs
        self.arrays = dict(
            step_rows=env._step_cols.t().contiguous(), splits=env._splits.contiguous(),
            stage_work=env._stage_work.contiguous(), present_rows=env._present_cols.t().contiguous(),
            slot_table=env._slot_table[:env._ctx_index].contiguous(), first_obs=env._first_obs.contiguous())
        self.num_tasks = self.arrays["first_obs"].shape[0]
        self.params = dict(
            N=N, W=W, S=len(env.splits), K=self.num_tasks, R=env._rows_per_task,
            max_episode_steps=env.max_episode_steps, n_cols=self.arrays["step_rows"].shape[1],
            has_budget=int(env.subagent_budget is not None),
            budget=env._budget, max_sub=float(env.max_subagents), merge=env.costs.merge, brief=env.costs.brief,
            spawn=env.costs.spawn, late_credit=env.late_credit, time_scale=env.time_scale,
            levels=float(env.max_levels), work_scale=float(W * env.max_cost), inv_log_rel=env._inv_log_rel)
        self.tables = self._tables()
        # private per-step buffers (nothing in them is returned)
        self.draw = torch.empty(W, N)
        self.left_pending = torch.empty(W, N)
        self.fail_seen = torch.empty(W, N)
        self.next_row = torch.empty(N, dtype=torch.long)
        self.advance = torch.empty(N)
        self.scratch_numel = (5 * W + 28) * BLOCK  # the kernels' per-block rows (see the source)
        self.scratch = torch.empty(self.scratch_numel)

    def _tables(self) -> _Tables:
        """The C struct: pointers into `arrays` (each checked against the shape the kernels index it
        with) and the env's constants (Python floats round to float32 here exactly as torch rounds a
        Python scalar for a float32 op)."""
        p = self.params
        KR, W = p["K"] * p["R"], p["W"]
        numel = dict(step_rows=KR * p["n_cols"], splits=p["S"], stage_work=KR, present_rows=KR * W,
                     slot_table=KR * W * 4 * 6, first_obs=p["K"] * (W + 1) * 6)
        ptrs = {name: _checked(name, a, torch.float32, numel[name]).value for name, a in self.arrays.items()}
        return _Tables(**ptrs, **self.params)

    def __getstate__(self) -> dict:  # (a copy's pointers must point at its own arrays)
        return {k: v for k, v in self.__dict__.items() if k != "tables"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        _library(self.cxx)
        self.tables = self._tables()

    def _state(self, env: Any) -> None:
        """Make the env's state tensors what the kernel reads flat: contiguous, of the step's dtypes."""
        for name, dtype in (("_pend", torch.float32), ("_fail", torch.float32), ("_counts", torch.float32),
                            ("_stage", torch.long), ("_row", torch.long), ("task", torch.long)):
            value = getattr(env, name)
            if value.dtype != dtype or not value.is_contiguous():
                setattr(env, name, value.to(dtype).contiguous())

    def step(self, env: Any, action: Tensor,
             next_task: Optional[Tensor | Callable[[Tensor], Tensor]]) -> StepResult:
        N, W = env.num_envs, env.max_width
        if action.is_floating_point():
            action = action.long()
        action = action.to(torch.int64).contiguous()  # [N, W]: SwarmEnv.step checked the shape
        self._state(env)
        task = env.task
        # the eager step's draws (same generator, shape and order) and its ATen log
        self.draw.uniform_(generator=env.generator).log_()
        # what the step returns is new (never written later); obs and final_obs share one block
        buf = torch.empty(2 * N, W + 1, 6)
        final_obs, obs = buf[:N], buf[N:]
        new_counts = torch.empty(5, N)
        new_stage = torch.empty(2, N, dtype=torch.long)
        outcome = torch.empty(N)
        flags = torch.empty(3, N, dtype=torch.bool)
        terminated, truncated, done = flags.unbind(0)
        f32, i64, b8 = torch.float32, torch.int64, torch.bool
        WN, row_floats = W * N, N * (W + 1) * 6
        lib = _library(self.cxx)
        lib.swarm_step_a(ctypes.byref(self.tables), *_buffers(
            ("action", action, i64, WN), ("draw", self.draw, f32, WN), ("pending", env._pend, f32, WN),
            ("counts", env._counts, f32, 5 * N), ("row", env._row, i64, N), ("stage", env._stage, i64, 2 * N),
            ("scratch", self.scratch, f32, self.scratch_numel), ("final_obs", final_obs, f32, row_floats),
            ("obs", obs, f32, row_floats), ("new_counts", new_counts, f32, 5 * N), ("new_stage", new_stage, i64, 2 * N),
            ("next_row", self.next_row, i64, N), ("advance", self.advance, f32, N),
            ("left_pending", self.left_pending, f32, WN), ("fail_seen", self.fail_seen, f32, WN),
            ("outcome", outcome, f32, N), ("terminated", terminated, b8, N), ("truncated", truncated, b8, N),
            ("done", done, b8, N)))
        if next_task is None:
            next_task = task
        elif callable(next_task):
            next_task = checked_pick("SwarmEnv", next_task(done), N)  # the sampler picks for the actors that reset
        next_task = next_task.to(env.device, torch.long).expand(N).contiguous()
        new_task = torch.empty(N, dtype=torch.long)
        stage = torch.empty(2, N, dtype=torch.long)
        counts = torch.empty(5, N)
        row = torch.empty(N, dtype=torch.long)
        bad = lib.swarm_step_b(ctypes.byref(self.tables), *_buffers(
            ("done", done, b8, N), ("next_task", next_task, i64, N), ("task", task, i64, N),
            ("new_counts", new_counts, f32, 5 * N), ("new_stage", new_stage, i64, 2 * N),
            ("next_row", self.next_row, i64, N), ("advance", self.advance, f32, N),
            ("left_pending", self.left_pending, f32, WN), ("fail_seen", self.fail_seen, f32, WN),
            ("scratch", self.scratch, f32, self.scratch_numel), ("obs", obs, f32, row_floats),
            ("new_task", new_task, i64, N), ("stage_out", stage, i64, 2 * N), ("counts_out", counts, f32, 5 * N),
            ("fail_out", env._fail, f32, WN), ("row_out", row, i64, N), ("pending_out", env._pend, f32, WN)))
        if bad >= 0:
            raise IndexError(f"SwarmEnv.step: next task {int(next_task[bad])} for actor {bad} is outside the "
                             f"task bank (0..{self.num_tasks - 1})")
        env.task, env._stage, env._counts, env._row = new_task, stage, counts, row
        parts = EpisodeParts(task=task, outcome=outcome, n_subagents=new_counts[2], assigned=new_counts[3],
                             completed=new_counts[4], critical_steps=new_counts[0], serial_steps=new_counts[1])
        return StepResult(obs, outcome, terminated, truncated, final_obs, parts)


def _checked(name: str, tensor: Tensor, dtype: torch.dtype, numel: int) -> ctypes.c_void_p:
    """A buffer's address for the kernels, once it is what they index: a contiguous CPU tensor of
    `dtype` with `numel` elements (a mismatch would read or write outside it)."""
    if not isinstance(tensor, Tensor) or tensor.dtype != dtype or tensor.device.type != "cpu" \
            or not tensor.is_contiguous() or tensor.numel() != numel:
        got = (f"{tuple(tensor.shape)} {tensor.dtype} on {tensor.device}"
               f"{'' if tensor.is_contiguous() else ', not contiguous'}") if isinstance(tensor, Tensor) \
            else type(tensor).__name__
        raise TypeError(f"SwarmEnv(compile=True): the kernels' buffer `{name}` must be a contiguous cpu {dtype} "
                        f"tensor of {numel} elements, got {got}")
    return ctypes.c_void_p(tensor.data_ptr())


def _buffers(*specs: tuple[str, Tensor, torch.dtype, int]) -> list[ctypes.c_void_p]:
    """The kernels' arguments in order, each checked by `_checked`."""
    return [_checked(*spec) for spec in specs]
