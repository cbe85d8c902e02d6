// SwarmEnv's step as two C++ kernels (see parlightning/envs/swarm_compiled.py, which builds and calls them).
// BLOCK (actors per block) is defined by the build (-DBLOCK=...). Every value is the eager step's operation on
// the same float32 operands in the same order: build with -ffp-contract=off and without -ffast-math.
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
static const int64_t B = BLOCK;  // actors per block (set by the build)

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
