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

The kernels are single-threaded (torch's intra-op threads do not apply) and CPU-only. The shared
library is cached under $PARLIGHTNING_CACHE_DIR (default ~/.cache/parlightning), keyed by source,
compiler and flags: the first build takes about half a second, later ones load it.
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
from typing import TYPE_CHECKING, Callable, Optional

import torch
from torch import Tensor

from parlightning.envs.base import EpisodeParts, StepResult
from parlightning.errors import ConfigError

if TYPE_CHECKING:
    from parlightning.envs.swarm import SwarmEnv

BLOCK = 64  # actors per block in the kernels
FLAGS = ("-O3", "-shared", "-fPIC", "-std=c++14", "-ffp-contract=off", "-fno-fast-math", "-fno-trapping-math")

_SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>

struct Tables {
    const float* step_rows;     // [K*R, 3W+5]: the env's _step_cols, one row per stage row
    const float* splits;        // [S]
    const float* stage_work;    // [K*R]
    const float* present_rows;  // [K*R, W]: the env's _present_cols, one row per stage row
    const float* slot_table;    // [K*R*W*4, F]: the slot codes' rows
    const float* first_obs;     // [K, W+1, F]
    int64_t N, W, S, K, R, max_episode_steps, n_cols, has_budget;
    float budget, max_sub, merge, brief, spawn, late_credit, time_scale, levels, work_scale, inv_log_rel;
};

static const int64_t F = 6;   // features per observation row
static const int64_t B = __BLOCK__;  // actors per block

// min / max: no value here is NaN (the draws' floors lie in [0, inf], everything else is finite)
static inline float tmin(float a, float b) { return a < b ? a : b; }
static inline float tmax(float a, float b) { return a > b ? a : b; }
// std::floor's and std::ceil's values for every float, without a libm call (vectorisable): truncation,
// then one down (up) where it rounded the other way, with x's sign (a zero result keeps it, as
// std::floor(-0.0) = -0.0 and std::ceil(-0.5) = -0.0); |x| >= 2^23 (and inf, NaN) is already integral.
static inline float exact_floor(float x) {
    const bool small = std::fabs(x) < 8388608.0f;
    const float t = (float)(int32_t)(small ? x : 0.0f);
    return small ? std::copysign(t > x ? t - 1.0f : t, x) : x;
}
static inline float exact_ceil(float x) {
    const bool small = std::fabs(x) < 8388608.0f;
    const float t = (float)(int32_t)(small ? x : 0.0f);
    return small ? std::copysign(t < x ? t + 1.0f : t, x) : x;
}

// One round up to `done`, for blocks of B actors. Per block: (1) each actor's action and stage-row
// table entries (contiguous per actor) are copied slot-major into `scratch`; (2) every slot's dynamics
// run over the block as branch-free float code on contiguous rows (the compiler vectorises it: lane-wise
// IEEE ops, the same values), the per-actor sums over slots accumulating lane-wise in slot order;
// (3) per actor: counts, stage, flags, outcome, and the final observation (and the next one where the
// episode goes on). The [W, N] planes are only walked slot-major within a block.
extern "C" void swarm_step_a(
        const Tables* __restrict__ t, const int64_t* __restrict__ action, const float* __restrict__ draw,
        const float* __restrict__ pend, const float* __restrict__ counts, const int64_t* __restrict__ row,
        const int64_t* __restrict__ stage, float* __restrict__ scratch, float* __restrict__ final_obs,
        float* __restrict__ obs, float* __restrict__ new_counts, int64_t* __restrict__ new_stage,
        int64_t* __restrict__ next_row, float* __restrict__ advance_out, float* __restrict__ left_pending,
        float* __restrict__ fail_seen, float* __restrict__ outcome, bool* __restrict__ terminated,
        bool* __restrict__ truncated, bool* __restrict__ done) {
    const int64_t N = t->N, W = t->W, S = t->S, C = t->n_cols, row_floats = (W + 1) * F;
    const float two_s = (float)(2 * S), briefed_from = (float)(S + 2);
    const float max_sub = t->max_sub, budget_all = t->budget, inv_log_rel = t->inv_log_rel;
    const float merge = t->merge, brief = t->brief, spawn = t->spawn, late_credit = t->late_credit;
    const float time_scale = t->time_scale, levels = t->levels, work_scale = t->work_scale;
    const bool has_budget = t->has_budget;
    const int64_t max_steps = t->max_episode_steps;
    const float* __restrict__ step_rows = t->step_rows;
    float* __restrict__ a_act = scratch;
    float* __restrict__ a_size = scratch + W * B;
    float* __restrict__ a_plain = scratch + 2 * W * B;
    float* __restrict__ a_hard = scratch + 3 * W * B;
    float* __restrict__ a_spawned = scratch + 4 * W * B;
    float* __restrict__ a_cap = a_spawned + B;
    float* __restrict__ a_pieces = a_spawned + 2 * B;
    float* __restrict__ a_briefed = a_spawned + 3 * B;
    float* __restrict__ a_own = a_spawned + 4 * B;
    float* __restrict__ a_done = a_spawned + 5 * B;
    float* __restrict__ a_longest = a_spawned + 6 * B;
    float* __restrict__ a_pmax = a_spawned + 7 * B;
    float* __restrict__ a_work = a_spawned + 8 * B;
    float* __restrict__ a_entry = a_spawned + 9 * B;
    float* __restrict__ a_k = a_spawned + 10 * B;
    float* __restrict__ a_budget = a_spawned + 11 * B;   // the stage row's task values (1) and the
    float* __restrict__ a_limit = a_spawned + 12 * B;    // per-actor results of (3a)
    float* __restrict__ a_levels = a_spawned + 13 * B;
    float* __restrict__ a_serial = a_spawned + 14 * B;
    float* __restrict__ a_work_next = a_spawned + 15 * B;
    float* __restrict__ a_level = a_spawned + 16 * B;
    float* __restrict__ a_stage_done = a_spawned + 17 * B;
    float* __restrict__ a_advance = a_spawned + 18 * B;
    float* __restrict__ a_all_done = a_spawned + 19 * B;
    float* __restrict__ a_abandoned = a_spawned + 20 * B;
    float* __restrict__ a_elapsed = a_spawned + 21 * B;
    float* __restrict__ a_ctx = a_spawned + 22 * B;       // [F][B]
    float* __restrict__ a_code = a_ctx + F * B;           // [W][B]: pending + failed per slot
    for (int64_t n0 = 0; n0 < N; n0 += B) {
        const int64_t nb = N - n0 < B ? N - n0 : B;
        for (int64_t j = 0; j < nb; j++) {  // (1)
            const int64_t* act = action + (n0 + j) * W;
            const float* cols = step_rows + row[n0 + j] * C;
            for (int64_t w = 0; w < W; w++) {
                a_act[w * B + j] = (float)act[w];  // the eager step's copy of the action into float
                a_size[w * B + j] = cols[w];
                a_plain[w * B + j] = cols[W + w];
                a_hard[w * B + j] = cols[2 * W + w];
            }
            a_spawned[j] = a_pieces[j] = a_briefed[j] = a_own[j] = a_done[j] = 0.0f;
            a_longest[j] = a_pmax[j] = a_work[j] = 0.0f;
            a_cap[j] = tmin(budget_all - counts[2 * N + n0 + j], max_sub);
            a_budget[j] = cols[3 * W];
            a_limit[j] = cols[3 * W + 1];
            a_levels[j] = cols[3 * W + 3];
            a_serial[j] = cols[3 * W + 4];
            // the next stage row's work (row + 1 always exists: a task's last row is an empty stage);
            // it is read only where the stage is done (elsewhere it is multiplied by advance = 0)
            a_work_next[j] = t->stage_work[row[n0 + j] + 1];
            a_level[j] = (float)stage[n0 + j];  // (exact: small integers)
        }
        for (int64_t w = 0; w < W; w++) {  // (2)
            const float* __restrict__ p_w = pend + w * N + n0;
            const float* __restrict__ draw_w = draw + w * N + n0;
            float* __restrict__ left_w = left_pending + w * N + n0;
            float* __restrict__ fail_w = fail_seen + w * N + n0;
            const float* __restrict__ act_w = a_act + w * B;
            const float* __restrict__ size_w = a_size + w * B;
            const float* __restrict__ plain_w = a_plain + w * B;
            const float* __restrict__ hard_w = a_hard + w * B;
            for (int64_t j = 0; j < nb; j++) {
                // the decoded entry: 0 nothing to do, 1 do it yourself, 2..S+1 generic, S+2..2S+1 briefed
                const float p = p_w[j];
                a_entry[j] = p + (1.0f * tmin(tmax(act_w[j], -1.0f), two_s)) * p;
                a_k[j] = 0.0f;
            }
            for (int64_t s = 0; s < S; s++) {  // shards: splits[(entry - 2) % S] (one term is non-zero: exact)
                const float generic = (float)(2 + s), briefed = (float)(2 + S + s), shards = t->splits[s];
                for (int64_t j = 0; j < nb; j++)
                    a_k[j] += (a_entry[j] == generic) | (a_entry[j] == briefed) ? shards : 0.0f;
            }
            for (int64_t j = 0; j < nb; j++) {
                const float size = size_w[j], p = p_w[j], entry = a_entry[j];
                const float bc = entry >= briefed_from ? 1.0f : 0.0f;
                const float own = entry == 1.0f ? 1.0f : 0.0f;
                // The caps: delegations past them (in slot order) wait. `spawned` is the slots' cumulative
                // shards before any is capped (the eager step's tri @ k); applied always: where the eager
                // step skips it (no cap can bind) the factor is exactly 1.
                a_spawned[j] = a_spawned[j] + a_k[j];
                const float k = a_k[j] * tmin(tmax(a_cap[j] - a_spawned[j] + 1.0f, 0.0f), 1.0f);
                const float deleg = tmin(k, 1.0f);
                const float briefed = deleg * bc;
                const float ok = deleg * plain_w[j] + (1.0f * briefed) * hard_w[j];
                const float nonempty = tmin(k, size);
                const float in_a_row = exact_floor(draw_w[j] * inv_log_rel);
                const float success = (in_a_row >= nonempty ? 1.0f : 0.0f) * ok;
                a_pieces[j] += k;
                a_briefed[j] += briefed;
                a_own[j] += size * own;
                a_done[j] += tmin(in_a_row, nonempty) * ok;
                a_longest[j] = tmax(a_longest[j], (size / tmax(k, 1.0f)) * deleg);  // = amax: all values >= +0
                const float left = (p - own) - success;
                a_pmax[j] = tmax(a_pmax[j], left);  // (0/1 values)
                a_work[j] += size * left;
                left_w[j] = left;
                fail_w[j] = deleg - success;
                a_code[w * B + j] = left + (deleg - success);  // (exact: 0, 1 or 2)
            }
        }
        const float* __restrict__ c_elapsed = counts + n0;
        const float* __restrict__ c_serial = counts + N + n0;
        const float* __restrict__ c_spawned = counts + 2 * N + n0;
        const float* __restrict__ c_assigned = counts + 3 * N + n0;
        const float* __restrict__ c_completed = counts + 4 * N + n0;
        float* __restrict__ o_elapsed = new_counts + n0;
        float* __restrict__ o_serial = new_counts + N + n0;
        float* __restrict__ o_spawned = new_counts + 2 * N + n0;
        float* __restrict__ o_assigned = new_counts + 3 * N + n0;
        float* __restrict__ o_completed = new_counts + 4 * N + n0;
        float* __restrict__ o_outcome = outcome + n0;
        for (int64_t j = 0; j < nb; j++) {  // (3a) per actor, float values (vectorised)
            const float main = ((a_own[j] + 1.0f) + a_pieces[j] * merge) + a_briefed[j] * brief;
            const float round_longest = exact_ceil(a_longest[j]) + tmin(a_pieces[j], 1.0f) * spawn;
            const float elapsed = (c_elapsed[j] + main) + round_longest;
            const float stage_done = 1.0f - a_pmax[j];
            const float n_subagents = c_spawned[j] + a_pieces[j];
            o_elapsed[j] = elapsed;
            o_serial[j] = c_serial[j] + (1.0f * a_serial[j]) * stage_done;
            o_spawned[j] = n_subagents;
            o_assigned[j] = c_assigned[j] + a_pieces[j];
            o_completed[j] = c_completed[j] + a_done[j];
            const float left = a_levels[j] - (a_level[j] + stage_done);  // stages left: n_levels - new level
            const float all_done = left <= 0.0f ? 1.0f : 0.0f;
            const float advance = stage_done * (1.0f - all_done);
            const float abandoned = elapsed > a_limit[j] ? 1.0f : 0.0f;
            o_outcome[j] = (elapsed <= a_budget[j] ? 1.0f : late_credit) * (all_done * (1.0f - abandoned));
            a_stage_done[j] = stage_done;
            a_advance[j] = advance;
            a_all_done[j] = all_done;
            a_abandoned[j] = abandoned;
            a_elapsed[j] = elapsed;
            const float work = a_work[j] + (1.0f * a_work_next[j]) * advance;
            // the context row: time left to the budget and to the hard limit, elapsed (each / the time
            // scale), stages left, the episode's subagent budget left, pending work of the stage
            a_ctx[j] = (a_budget[j] + (1.0f * elapsed) * -1.0f) / time_scale;
            a_ctx[B + j] = (a_limit[j] + (1.0f * elapsed) * -1.0f) / time_scale;
            a_ctx[2 * B + j] = (0.0f + (1.0f * elapsed) * 1.0f) / time_scale;
            a_ctx[3 * B + j] = left / levels;
            a_ctx[4 * B + j] = has_budget ? tmax(1.0f - n_subagents / budget_all, 0.0f) : 1.0f;
            a_ctx[5 * B + j] = work / work_scale;
        }
        for (int64_t j = 0; j < nb; j++) {  // (3b) per actor, integer values and flags
            const int64_t n = n0 + j;
            const int64_t step = (int64_t)a_stage_done[j];
            const int64_t attempts = stage[N + n] + 1;
            new_stage[n] = stage[n] + step;
            new_stage[N + n] = attempts;
            next_row[n] = row[n] + step;
            advance_out[n] = a_advance[j];
            const bool all_done = a_all_done[j] > 0.0f, abandoned = a_abandoned[j] > 0.0f;
            const bool term = all_done || abandoned;
            const bool time_out = attempts >= max_steps;
            terminated[n] = term;
            truncated[n] = time_out && !term;
            done[n] = term || time_out;
        }
        for (int64_t j = 0; j < nb; j++) {  // (3c) the final observation (and the next, where not done)
            const int64_t n = n0 + j;
            // the slot rows by code: 0 nothing pending, 1 pending, 2 failed last round, 3 the stage just
            // began (the eager step sums these exact small integers in float; here in int64: the same row)
            float* out = final_obs + n * row_floats;
            const int64_t base = next_row[n] * 4 * W + 3 * (int64_t)a_advance[j];
            for (int64_t w = 0; w < W; w++) {
                const int64_t index = base + 4 * w + (int64_t)a_code[w * B + j];
                std::memcpy(out + w * F, t->slot_table + index * F, F * sizeof(float));
            }
            for (int64_t f = 0; f < F; f++) out[W * F + f] = a_ctx[f * B + j];
            if (!done[n]) std::memcpy(obs + n * row_floats, out, row_floats * sizeof(float));
        }
    }
}

// The resets, after the caller picked `next_task` for the actors that are done: their first
// observation and the state of the next round. Returns -1, or the first actor whose next task lies
// outside the bank (then nothing is written).
extern "C" int64_t swarm_step_b(
        const Tables* __restrict__ t, const bool* __restrict__ done, const int64_t* __restrict__ next_task,
        const int64_t* __restrict__ task, const float* __restrict__ new_counts,
        const int64_t* __restrict__ new_stage, const int64_t* __restrict__ next_row,
        const float* __restrict__ advance, const float* __restrict__ left_pending,
        const float* __restrict__ fail_seen, float* __restrict__ scratch, float* __restrict__ obs,
        int64_t* __restrict__ new_task, int64_t* __restrict__ stage_out, float* __restrict__ counts_out,
        float* __restrict__ fail_out, int64_t* __restrict__ row_out, float* __restrict__ pend_out) {
    const int64_t N = t->N, W = t->W, row_floats = (t->W + 1) * F;
    for (int64_t n = 0; n < N; n++)
        if (done[n] && (next_task[n] < 0 || next_task[n] >= t->K)) return n;
    float* __restrict__ a_fresh = scratch;  // [W][B]: the next round's stage row, slot-major
    float* __restrict__ a_keep = scratch + W * B;
    float* __restrict__ a_weight = a_keep + B;
    for (int64_t n0 = 0; n0 < N; n0 += B) {
        const int64_t nb = N - n0 < B ? N - n0 : B;
        for (int64_t j = 0; j < nb; j++) {
            const int64_t n = n0 + j;
            const bool d = done[n];
            const int64_t nt = d ? next_task[n] : task[n];
            new_task[n] = nt;
            if (d) std::memcpy(obs + n * row_floats, t->first_obs + nt * row_floats, row_floats * sizeof(float));
            const int64_t keep = d ? 0 : 1;
            const float keepf = d ? 0.0f : 1.0f;
            stage_out[n] = new_stage[n] * keep;
            stage_out[N + n] = new_stage[N + n] * keep;
            for (int64_t c = 0; c < 5; c++) counts_out[c * N + n] = new_counts[c * N + n] * keepf;
            const int64_t srow = d ? nt * t->R : next_row[n];
            row_out[n] = srow;
            a_keep[j] = keepf;
            a_weight[j] = d ? 1.0f : advance[n];
            const float* fresh = t->present_rows + srow * W;
            for (int64_t w = 0; w < W; w++) a_fresh[w * B + j] = fresh[w];
        }
        for (int64_t w = 0; w < W; w++) {
            const float* __restrict__ left_w = left_pending + w * N + n0;
            const float* __restrict__ seen_w = fail_seen + w * N + n0;
            const float* __restrict__ fresh_w = a_fresh + w * B;
            float* __restrict__ fail_w = fail_out + w * N + n0;
            float* __restrict__ pend_w = pend_out + w * N + n0;
            for (int64_t j = 0; j < nb; j++) {
                fail_w[j] = seen_w[j] * a_keep[j];
                // pending next round: torch.lerp(left, fresh, weight)'s formula (0/1 weights: one side, exactly)
                const float self = left_w[j], end = fresh_w[j], weight = a_weight[j];
                pend_w[j] = std::fabs(weight) < 0.5f ? self + weight * (end - self)
                                                     : end - (end - self) * (1.0f - weight);
            }
        }
    }
    return -1;
}
"""
SOURCE = _SOURCE.replace("__BLOCK__", str(BLOCK))


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
def _library(cxx: str) -> ctypes.CDLL:
    """The kernel's shared library: compiled once per (source, compiler, flags) into the cache dir
    (an atomic rename, so that concurrent processes share it), then loaded."""
    key = hashlib.sha256("\0".join((SOURCE, cxx, *FLAGS)).encode()).hexdigest()[:16]
    target = _cache_dir() / f"swarm_step-{key}.so"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            src, out = Path(tmp) / "swarm_step.cpp", Path(tmp) / "swarm_step.so"
            src.write_text(SOURCE)
            proc = subprocess.run([cxx, *FLAGS, str(src), "-o", str(out)], capture_output=True, text=True)
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


def build(env: "SwarmEnv") -> "CompiledStep":
    problem = compiler_problem(env.device)
    if problem is not None:
        raise ConfigError(f"SwarmEnv: `compile: true` needs a C++ compiler for its CPU kernel, but {problem}; "
                          "set `compile: false` (the eager step gives the same trajectories) or install g++")
    retain_heap()
    return CompiledStep(env)


class CompiledStep:
    """The kernels' tables for one env (kept alive here), its reused buffers, and the glue around the two calls."""

    def __init__(self, env: "SwarmEnv") -> None:
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
        self.scratch = torch.empty((5 * W + 28) * BLOCK)  # the kernels' per-block rows (see the source)

    def _tables(self) -> _Tables:
        """The C struct: pointers into `arrays` and the env's constants (Python floats round to float32
        here exactly as torch rounds a Python scalar for a float32 op)."""
        return _Tables(**{name: a.data_ptr() for name, a in self.arrays.items()}, **self.params)

    def __getstate__(self) -> dict:  # (a copy's pointers must point at its own arrays)
        return {k: v for k, v in self.__dict__.items() if k != "tables"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        _library(self.cxx)
        self.tables = self._tables()

    def _state(self, env: "SwarmEnv") -> None:
        """Make the env's state tensors what the kernel reads flat: contiguous, of the step's dtypes."""
        for name, dtype in (("_pend", torch.float32), ("_fail", torch.float32), ("_counts", torch.float32),
                            ("_stage", torch.long), ("_row", torch.long), ("task", torch.long)):
            value = getattr(env, name)
            if value.dtype != dtype or not value.is_contiguous():
                setattr(env, name, value.to(dtype).contiguous())

    def step(self, env: "SwarmEnv", action: Tensor,
             next_task: Optional[Tensor | Callable[[Tensor], Tensor]]) -> StepResult:
        N, W = env.num_envs, env.max_width
        if action.is_floating_point():
            action = action.long()
        if tuple(action.shape) != (N, W):  # the eager step's copy_ (it broadcasts), then [N, W]
            full = torch.empty(W, N, dtype=action.dtype)
            full.copy_(action.t())
            action = full.t()
        action = action.to(torch.int64).contiguous()
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
        ptr = _pointers
        lib = _library(self.cxx)
        lib.swarm_step_a(ctypes.byref(self.tables), *ptr(
            action, self.draw, env._pend, env._counts, env._row, env._stage, self.scratch, final_obs, obs,
            new_counts, new_stage, self.next_row, self.advance, self.left_pending, self.fail_seen, outcome,
            terminated, truncated, done))
        if next_task is None:
            next_task = task
        elif callable(next_task):
            next_task = next_task(done)  # the data module's sampler picks for the actors that reset
        next_task = next_task.to(env.device, torch.long).expand(N).contiguous()
        new_task = torch.empty(N, dtype=torch.long)
        stage = torch.empty(2, N, dtype=torch.long)
        counts = torch.empty(5, N)
        row = torch.empty(N, dtype=torch.long)
        bad = lib.swarm_step_b(ctypes.byref(self.tables), *ptr(
            done, next_task, task, new_counts, new_stage, self.next_row, self.advance, self.left_pending,
            self.fail_seen, self.scratch, obs, new_task, stage, counts, env._fail, row, env._pend))
        if bad >= 0:
            raise IndexError(f"SwarmEnv.step: next task {int(next_task[bad])} for actor {bad} is outside the "
                             f"task bank (0..{self.num_tasks - 1})")
        env.task, env._stage, env._counts, env._row = new_task, stage, counts, row
        parts = EpisodeParts(task=task, outcome=outcome, n_subagents=new_counts[2], assigned=new_counts[3],
                             completed=new_counts[4], critical_steps=new_counts[0], serial_steps=new_counts[1])
        return StepResult(obs, outcome, terminated, truncated, final_obs, parts)


def _pointers(*tensors: Tensor) -> list[ctypes.c_void_p]:
    return [ctypes.c_void_p(t.data_ptr()) for t in tensors]
