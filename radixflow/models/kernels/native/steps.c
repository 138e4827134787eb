/* Fused one-token decode steps over contiguous float32 buffers (RadixFlow native kernels).
 *
 * Built at first use by radixflow/models/kernels/native/build.py with the system C compiler and
 * loaded with ctypes: no Python or torch headers. Each function does, per row and head, what the
 * eager torch step does in several passes over the recurrent state, in one or two passes while
 * that row's state is in the core's L1/L2 cache. Compiled without -ffast-math: NaN and inf
 * propagate as in the eager path; the only reassociation is the explicit `omp simd reduction`
 * of dot products.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

int rf_abi_version(void) { return 13; }

/* Depthwise causal conv of one row's new input: see rf_conv_step. Inlined with `keep` a
 * constant for the usual window lengths, so the loop over channels vectorises. */
static inline __attribute__((always_inline)) void conv_row(int64_t channels, int64_t keep,
                                                           const float *xr, float *w,
                                                           const float *weight, const float *bias,
                                                           float *o) {
    const int64_t taps = keep + 1;
#pragma omp simd
    for (int64_t ch = 0; ch < channels; ch++) {
        float *wc = w + ch * keep;
        const float *wt = weight + ch * taps;
        const float xin = xr[ch];
        float acc = keep > 0 ? wc[0] * wt[0] : xin * wt[0];
        for (int64_t j = 1; j < keep; j++) acc += wc[j] * wt[j];
        if (keep > 0) acc += xin * wt[keep];
        if (bias != NULL) acc += bias[ch];
        o[ch] = acc;
        for (int64_t j = 0; j + 1 < keep; j++) wc[j] = wc[j + 1];
        if (keep > 0) wc[keep - 1] = xin;
    }
}

/* Depthwise causal conv of one new input per row: x [rows, channels] with row stride x_stride,
 * window [rows, channels, taps-1] (oldest first; shifted in place), weight [channels, taps],
 * bias [channels] or NULL, out [rows, channels]. Taps are added oldest first, as the eager step
 * does. */
void rf_conv_step(int64_t rows, int64_t channels, int64_t taps, const float *x, int64_t x_stride,
                  float *window, const float *weight, const float *bias, float *out) {
    const int64_t keep = taps - 1;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * x_stride;
        float *w = window + r * channels * keep, *o = out + r * channels;
        if (keep == 3)
            conv_row(channels, 3, xr, w, weight, bias, o);
        else if (keep == 2)
            conv_row(channels, 2, xr, w, weight, bias, o);
        else
            conv_row(channels, keep, xr, w, weight, bias, o);
    }
}

/* No software prefetch anywhere in this file: every stream here (a row's state, head after head;
 * a row's K, then its V, position after position) is read in ascending order, which the core's
 * hardware prefetchers follow. Emitted software prefetches (1 to 16 positions or 1 to 4 heads
 * ahead, read or write intent) made each kernel 7-60% slower on a Zen 4 core, and a plain
 * sequential read too (docs/real-models.md, "Memory-level changes to the decode kernels"). */

/* One SIMD register of floats as a value (GCC/Clang vector extension): 256 bits with AVX (also
 * on AVX-512 machines: these loops read and write memory, and GCC's 512-bit reductions measured
 * slower here), 128 bits otherwise; a type wider than the registers would be split and spilled.
 * Element-wise +, * round each lane as the scalar operation does. */
#if defined(__AVX__)
#define VL 8
#else
#define VL 4
#endif
typedef float vf __attribute__((vector_size(VL * sizeof(float))));

static inline vf loadv(const float *p) {
    vf v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}

static inline void storev(float *p, vf v) { __builtin_memcpy(p, &v, sizeof v); }

/* The lanes of v added pairwise (lane i + VL/2, then halves again), by lane subscripts: taking
 * the vector's address would keep a caller's accumulator in memory. */
static inline float hsumv(vf v) {
#if VL == 8
    const float a0 = v[0] + v[4], a1 = v[1] + v[5], a2 = v[2] + v[6], a3 = v[3] + v[7];
    return (a0 + a2) + (a1 + a3);
#else
    return (v[0] + v[2]) + (v[1] + v[3]);
#endif
}

typedef int32_t vi __attribute__((vector_size(VL * sizeof(int32_t))));

/* exp of each lane of x (vector type T, its int32 lanes TI), Cephes' expf: exp(x) = 2^k exp(r),
 * |r| <= ln2/2, a degree-6 polynomial; within a few ulp of expf), so the activations and softmax
 * run a register at a time where libm's expf would run one float at a time. NaN stays NaN; above
 * 88.72 gives inf, below -87.34 gives 0 (expf would give a subnormal there). Written once for
 * both register widths below: every lane runs the same operations at either width. */
/* a where mask, else b (mask lanes all ones or all zeros, as vector comparisons give) */
#define SELECT(T, TI, mask, a, b) ((T)(((TI)(a) & (mask)) | ((TI)(b) & ~(mask))))
#define EXP_LANES(T, TI, x)                                                                     \
    do {                                                                                        \
        const T zero_ = {0};                                                                    \
        const TI over = x > 88.72283905f, under = x < -87.33654475f;                            \
        const T xc =                                                                            \
            SELECT(T, TI, over, zero_ + 88.72283905f, SELECT(T, TI, under, zero_ - 87.33654475f, x)); \
        const T k = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */ \
        T r = xc - k * 0.693359375f;                                                            \
        r = r - k * -2.12194440e-4f;                                                            \
        const T z = r * r;                                                                      \
        T y = 1.9875691500e-4f * r + 1.3981999507e-3f;                                          \
        y = y * r + 8.3334519073e-3f;                                                           \
        y = y * r + 4.1665795894e-2f;                                                           \
        y = y * r + 1.6666665459e-1f;                                                           \
        y = y * r + 5.0000001201e-1f;                                                           \
        y = y * z + r + 1.0f;                                                                   \
        const TI ki = __builtin_convertvector(k, TI), half = ki >> 1; /* 2^k in two factors */  \
        y = y * (T)((half + 127) << 23) * (T)((ki - half + 127) << 23);                         \
        return SELECT(T, TI, over, zero_ + INFINITY, SELECT(T, TI, under, zero_, y));           \
    } while (0)

static inline vf expv(vf x) { EXP_LANES(vf, vi, x); }

/* The element-wise silu runs WL floats a register: 512 bits where AVX-512 is (no reduction
 * here, and each lane's result is the same at any width: equal to the bit to VL lanes; 0.9 → 0.6
 * ns a float on this machine's AVX-512 core), VL otherwise. */
#if defined(__AVX512F__)
#define WL 16
#else
#define WL VL
#endif
typedef float vw __attribute__((vector_size(WL * sizeof(float))));
typedef int32_t vwi __attribute__((vector_size(WL * sizeof(int32_t))));

static inline vw expw(vw x) { EXP_LANES(vw, vwi, x); }

/* out = x / (1 + exp(-x)) over n floats (out may be x): a register at a time, the tail padded. */
static void silu_into(int64_t n, const float *x, float *out) {
    int64_t i = 0;
    vw v;
    for (; i + WL <= n; i += WL) {
        __builtin_memcpy(&v, x + i, sizeof v);
        v = v / (1.0f + expw(-v));
        __builtin_memcpy(out + i, &v, sizeof v);
    }
    if (i == n) return;
    float tail[WL] = {0};
    for (int64_t j = i; j < n; j++) tail[j - i] = x[j];
    __builtin_memcpy(&v, tail, sizeof v);
    v = v / (1.0f + expw(-v));
    __builtin_memcpy(tail, &v, sizeof v);
    for (int64_t j = i; j < n; j++) out[j] = tail[j - i];
}

/* x <- exp(x - top) over n floats, as silu_into runs them. */
static void exp_shifted(int64_t n, float *x, float top) {
    int64_t i = 0;
    for (; i + VL <= n; i += VL) storev(x + i, expv(loadv(x + i) - top));
    if (i == n) return;
    float tail[VL] = {0};
    for (int64_t j = i; j < n; j++) tail[j - i] = x[j];
    storev(tail, expv(loadv(tail) - top));
    for (int64_t j = i; j < n; j++) x[j] = tail[j - i];
}

/* Value columns per register block of the delta rule's passes: DV_REGS registers per
 * accumulator, two accumulators, held in registers while a pass walks the state's rows (8 each
 * where AVX-512 gives 32 registers, 4 where there are 16). Each element is still computed by
 * the same operations in the same order as a plain loop over j. */
#if defined(__AVX512F__) || defined(__aarch64__)
#define DV_REGS 8
#else
#define DV_REGS 4
#endif
#define DV_BLOCK (DV_REGS * VL)

/* recall = S^T k and readout = S^T q over the state's dk rows, for columns j0..j0+DV_BLOCK-1. */
static inline void delta_reads_block(int64_t dk, int64_t dv, const float *s, const float *ki,
                                     const float *qi, float *recall, float *readout) {
    vf rc[DV_REGS] = {{0}}, rd[DV_REGS] = {{0}};
    for (int64_t i = 0; i < dk; i++) {
        const float a = ki[i], c = qi[i];
        for (int b = 0; b < DV_REGS; b++) {
            const vf r = loadv(s + i * dv + VL * b);
            rc[b] += r * a;
            rd[b] += r * c;
        }
    }
    for (int b = 0; b < DV_REGS; b++) {
        storev(recall + VL * b, rc[b]);
        storev(readout + VL * b, rd[b]);
    }
}

/* recall = S^T k and readout = S^T q, S [dk, dv] (the first pass of a delta-rule step). */
static void delta_reads(int64_t dk, int64_t dv, const float *s, const float *ki, const float *qi,
                        float *recall, float *readout) {
    int64_t j0 = 0;
    for (; j0 + DV_BLOCK <= dv; j0 += DV_BLOCK)
        delta_reads_block(dk, dv, s + j0, ki, qi, recall + j0, readout + j0);
    if (j0 == dv) return;
    for (int64_t j = j0; j < dv; j++) recall[j] = readout[j] = 0.0f;
    for (int64_t i = 0; i < dk; i++) {
        const float a = ki[i], c = qi[i];
        const float *row = s + i * dv;
#pragma omp simd
        for (int64_t j = j0; j < dv; j++) {
            recall[j] += row[j] * a;
            readout[j] += row[j] * c;
        }
    }
}

/* S <- S decay + k u^T, S [dk, dv] (the second pass). */
static void delta_update(int64_t dk, int64_t dv, float *s, const float *ki, const float *u,
                         float decay) {
    int64_t j0 = 0;
    for (; j0 + DV_BLOCK <= dv; j0 += DV_BLOCK) {
        vf uu[DV_REGS];
        for (int b = 0; b < DV_REGS; b++) uu[b] = loadv(u + j0 + VL * b);
        for (int64_t i = 0; i < dk; i++) {
            const float a = ki[i];
            float *row = s + i * dv + j0;
            for (int b = 0; b < DV_REGS; b++)
                storev(row + VL * b, loadv(row + VL * b) * decay + uu[b] * a);
        }
    }
    for (int64_t i = 0; i < dk && j0 < dv; i++) {
        const float a = ki[i];
        float *row = s + i * dv;
#pragma omp simd
        for (int64_t j = j0; j < dv; j++) row[j] = row[j] * decay + a * u[j];
    }
}

/* One (row, head) of the gated delta rule: s [dk, dv] updated in place, o [dv] written; scratch
 * holds 2 dv floats. */
static void delta_head(int64_t dk, int64_t dv, const float *qi, const float *ki, const float *vi,
                       float g, float beta, float *s, float *o, float *scratch) {
    float *recall = scratch, *readout = scratch + dv;
    const float decay = expf(g), gain_decay = beta * decay;
    float kq = 0.0f;
#pragma omp simd reduction(+ : kq)
    for (int64_t i = 0; i < dk; i++) kq += ki[i] * qi[i];
    delta_reads(dk, dv, s, ki, qi, recall, readout);
    for (int64_t j = 0; j < dv; j++) {
        const float u = beta * vi[j] - gain_decay * recall[j];
        recall[j] = u;
        o[j] = decay * readout[j] + kq * u;
    }
    delta_update(dk, dv, s, ki, recall, decay);
}

/* Gated delta rule, one token per row: q, k [rows, heads, dk] (contiguous), v [rows, heads, dv],
 * g, beta [rows, heads], state [rows, heads, dk, dv] (updated in place), out [rows, heads, dv].
 * S <- exp(g) S; u = beta (v - S^T k); S <- S + k u^T; o = S^T q, the readout taken from the old
 * state as exp(g) S^T q + (k.q) u. Returns 0, or 1 when its scratch cannot be allocated. */
int rf_gated_delta_step(int64_t rows, int64_t heads, int64_t dk, int64_t dv, const float *q,
                        const float *k, const float *v, const float *g, const float *beta,
                        float *state, float *out) {
    float *scratch = malloc(sizeof(float) * 2 * (size_t)dv);
    if (scratch == NULL) return 1;
    for (int64_t rh = 0; rh < rows * heads; rh++)
        delta_head(dk, dv, q + rh * dk, k + rh * dk, v + rh * dv, g[rh], beta[rh],
                   state + rh * dk * dv, out + rh * dv, scratch);
    free(scratch);
    return 0;
}

/* One run of consecutive tokens of one (sequence, head) of the gated delta rule, token after
 * token: q, k (dk floats per token, token stride qk_stride), v, o (dv floats, stride v_stride),
 * g, beta (stride g_stride), s [dk, dv] the running state (updated in place, in L1 for the whole
 * run); scratch holds 3 dv floats. Per token the arithmetic of delta_head, in the same order;
 * the decay and rank-1 update of one token and the recall and readout of the next are one pass
 * over the state. */
static void delta_run(int64_t n, int64_t dk, int64_t dv, const float *q, const float *k,
                      int64_t qk_stride, const float *v, float *o, int64_t v_stride,
                      const float *g, const float *beta, int64_t g_stride, float *s,
                      float *scratch) {
    float *recall = scratch, *readout = scratch + dv, *u = scratch + 2 * dv;
    for (int64_t j = 0; j < dv; j++) recall[j] = readout[j] = 0.0f;
    for (int64_t i = 0; i < dk; i++) { /* the first token's S^T k and S^T q */
        const float a = k[i], c = q[i];
        const float *row = s + i * dv;
#pragma omp simd
        for (int64_t j = 0; j < dv; j++) {
            recall[j] += row[j] * a;
            readout[j] += row[j] * c;
        }
    }
    for (int64_t t = 0; t < n; t++) {
        const float *qt = q + t * qk_stride, *kt = k + t * qk_stride, *vt = v + t * v_stride;
        float *ot = o + t * v_stride;
        const float bt = beta[t * g_stride], decay = expf(g[t * g_stride]), gain_decay = bt * decay;
        float kq = 0.0f;
#pragma omp simd reduction(+ : kq)
        for (int64_t i = 0; i < dk; i++) kq += kt[i] * qt[i];
        for (int64_t j = 0; j < dv; j++) {
            u[j] = bt * vt[j] - gain_decay * recall[j];
            ot[j] = decay * readout[j] + kq * u[j];
        }
        if (t + 1 == n) { /* the last token: decay and update only */
            for (int64_t i = 0; i < dk; i++) {
                const float a = kt[i];
                float *row = s + i * dv;
#pragma omp simd
                for (int64_t j = 0; j < dv; j++) row[j] = row[j] * decay + a * u[j];
            }
            break;
        }
        const float *qn = qt + qk_stride, *kn = kt + qk_stride;
        for (int64_t j = 0; j < dv; j++) recall[j] = readout[j] = 0.0f;
        for (int64_t i = 0; i < dk; i++) { /* this token's update, the next one's reads */
            const float a = kt[i], b = kn[i], c = qn[i];
            float *row = s + i * dv;
#pragma omp simd
            for (int64_t j = 0; j < dv; j++) {
                const float next = row[j] * decay + a * u[j];
                row[j] = next;
                recall[j] += next * b;
                readout[j] += next * c;
            }
        }
    }
}

/* Gated delta rule over runs of consecutive tokens (a prefill's segments), token by token:
 * q, k [T, key_heads, dk] (normalised, q scaled), v [T, heads, dv], g, beta [T, heads], all
 * contiguous over the round's token rows; value head h reads key head h / (heads / key_heads).
 * Run r covers token rows lo[r]..hi[r]-1 (hi > lo) of the sequence whose state is
 * states[seq[r]] [heads, dk, dv], updated in place (a sequence's runs come in order); after run
 * r its state is copied to saves[save[r]] when save[r] >= 0. out [T, heads, dv]. Each head's
 * state stays in cache for the whole run. Returns 0, or 1 when its scratch cannot be allocated. */
int rf_gated_delta_scan(int64_t runs, int64_t key_heads, int64_t heads, int64_t dk, int64_t dv,
                        const float *q, const float *k, const float *v, const float *g,
                        const float *beta, const int64_t *lo, const int64_t *hi,
                        const int64_t *seq, const int64_t *save, float *states, float *saves,
                        float *out) {
    const int64_t per_key = heads / key_heads, per_state = heads * dk * dv;
    float *scratch = malloc(sizeof(float) * 3 * (size_t)dv);
    if (scratch == NULL) return 1;
    for (int64_t r = 0; r < runs; r++) {
        const int64_t t0 = lo[r], n = hi[r] - lo[r];
        for (int64_t h = 0; h < heads; h++) {
            const int64_t kh = h / per_key;
            float *s = states + seq[r] * per_state + h * dk * dv;
            delta_run(n, dk, dv, q + (t0 * key_heads + kh) * dk, k + (t0 * key_heads + kh) * dk,
                      key_heads * dk, v + (t0 * heads + h) * dv, out + (t0 * heads + h) * dv,
                      heads * dv, g + t0 * heads + h, beta + t0 * heads + h, heads, s, scratch);
            if (save[r] >= 0) {
                float *dst = saves + save[r] * per_state + h * dk * dv;
                for (int64_t i = 0; i < dk * dv; i++) dst[i] = s[i];
            }
        }
    }
    free(scratch);
    return 0;
}

static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* torch's softplus (beta 1, threshold 20) */
static inline float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* Nemotron-H's MLP activation relu(x)^2 in place over n floats, one pass where torch makes two
 * (clamp_min_ then pow_(2), which torch computes as x * x): the same product, one rounding.
 * `x < 0 ? 0 : x` keeps NaN (and -0, whose square is +0) as clamp_min does. */
void rf_relu2(int64_t n, float *x) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i] < 0.0f ? 0.0f : x[i];
        x[i] = v * v;
    }
}

/* RMSNorm of each of `vectors` vectors of dim floats, times (offset + weight): x, out
 * [vectors, dim], weight [dim]. */
void rf_rms_norm(int64_t vectors, int64_t dim, const float *x, const float *weight, float offset,
                 float eps, float *out) {
    for (int64_t v = 0; v < vectors; v++) {
        const float *xv = x + v * dim;
        float *ov = out + v * dim;
        float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
        for (int64_t i = 0; i < dim; i++) sq += xv[i] * xv[i];
        const float inv = 1.0f / sqrtf(sq / (float)dim + eps);
#pragma omp simd
        for (int64_t i = 0; i < dim; i++) ov[i] = xv[i] * inv * (offset + weight[i]);
    }
}

/* The residual stream's next value and the next layer's input in one pass over each vector:
 * sum = x + delta, then out = rf_rms_norm(sum) (the same arithmetic as the add and the norm
 * called one after the other). x, delta, sum, out [vectors, dim], weight [dim]. */
void rf_add_rms_norm(int64_t vectors, int64_t dim, const float *x, const float *delta,
                     const float *weight, float offset, float eps, float *sum, float *out) {
    for (int64_t v = 0; v < vectors; v++) {
        const float *xv = x + v * dim, *dv = delta + v * dim;
        float *sv = sum + v * dim;
#pragma omp simd
        for (int64_t i = 0; i < dim; i++) sv[i] = xv[i] + dv[i];
        rf_rms_norm(1, dim, sv, weight, offset, eps, out + v * dim);
    }
}

/* RMSNorm of each of `vectors` vectors of dim floats, times weight, times silu(gate):
 * x, gate, out [vectors, dim], weight [dim]. */
void rf_gated_rms_norm(int64_t vectors, int64_t dim, const float *x, const float *gate,
                       const float *weight, float eps, float *out) {
    for (int64_t v = 0; v < vectors; v++) {
        const float *xv = x + v * dim, *gv = gate + v * dim;
        float *ov = out + v * dim;
        float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
        for (int64_t i = 0; i < dim; i++) sq += xv[i] * xv[i];
        const float inv = 1.0f / sqrtf(sq / (float)dim + eps);
        silu_into(dim, gv, ov);
        for (int64_t i = 0; i < dim; i++) ov[i] = xv[i] * inv * weight[i] * ov[i];
    }
}

/* x / sqrt(sum(x^2) + eps) * scale over n floats, in place (the FLA l2norm, eps 1e-6). */
static void l2norm(int64_t n, float *x, float scale) {
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t i = 0; i < n; i++) sq += x[i] * x[i];
    const float inv = 1.0f / sqrtf(sq + 1e-6f);
    for (int64_t i = 0; i < n; i++) x[i] = x[i] * inv * scale;
}

/* Depthwise causal conv (then silu when asked) over the prefill tokens of several sequences
 * (the Gated DeltaNet, Mamba2 and short-conv prefills' front end): token p of the list reads row
 * rows[p] of x [*, channels] (row stride x_stride); sequence s is tokens lo[s]..hi[s]-1, behind
 * its window windows[s] [channels, taps-1] (oldest first; not modified); weight [channels,
 * taps]; bias [channels] or NULL, added after the taps; out [tokens, channels], token p at row
 * p. Taps are added oldest first, as the eager packed conv adds them; the weight is read
 * tap-major from a transposed copy, so each tap's pass over the channels is one vector stream.
 * Returns 0, or 1 when that copy cannot be allocated. */
int rf_conv_runs(int64_t seqs, int64_t channels, int64_t taps, const float *x, int64_t x_stride,
                 const int64_t *rows, const int64_t *lo, const int64_t *hi, const float *windows,
                 const float *weight, const float *bias, int64_t silu, float *out) {
    const int64_t keep = taps - 1;
    float *wt = malloc(sizeof(float) * (size_t)(channels * taps));
    if (wt == NULL) return 1;
    for (int64_t c = 0; c < channels; c++)
        for (int64_t j = 0; j < taps; j++) wt[j * channels + c] = weight[c * taps + j];
    for (int64_t s = 0; s < seqs; s++) {
        const float *win = windows + s * channels * keep;
        for (int64_t p = lo[s]; p < hi[s]; p++) {
            float *o = out + p * channels;
            for (int64_t j = 0; j < taps; j++) { /* tap j reads the input keep - j tokens back */
                const int64_t q = p - keep + j, col = q - lo[s] + keep;
                const float *in = q >= lo[s] ? x + rows[q] * x_stride : NULL;
                const float *wj = wt + j * channels;
                if (in != NULL && j == 0) {
#pragma omp simd
                    for (int64_t c = 0; c < channels; c++) o[c] = in[c] * wj[c];
                } else if (in != NULL) {
#pragma omp simd
                    for (int64_t c = 0; c < channels; c++) o[c] += in[c] * wj[c];
                } else if (j == 0) { /* from the window: column col of each channel */
                    for (int64_t c = 0; c < channels; c++) o[c] = win[c * keep + col] * wj[c];
                } else {
                    for (int64_t c = 0; c < channels; c++) o[c] += win[c * keep + col] * wj[c];
                }
            }
            if (bias != NULL) {
#pragma omp simd
                for (int64_t c = 0; c < channels; c++) o[c] += bias[c];
            }
            if (silu) silu_into(channels, o, o);
        }
    }
    free(wt);
    return 0;
}

/* Gated DeltaNet decode, one token per row, from the projection to the heads' readout:
 * qkv [rows, 2 key_dim + value_dim] with row stride qkv_stride (the conv's input), window
 * [rows, conv_dim, taps-1] and weight [conv_dim, taps] (the depthwise conv, no bias; window
 * shifted in place), then silu; q and k split into key_heads heads of dk, l2-normalised (q also
 * scaled by dk^-1/2), value head h reading key head h / (heads / key_heads); the gates from
 * the raw projections b, a [rows, heads] (row strides gate_stride): beta = sigmoid(b),
 * g = -exp(a_log) softplus(a + dt_bias) per head; state [rows, heads, dk, dv] updated in place;
 * out [rows, heads, dv].
 * Returns 0, or 1 when its scratch cannot be allocated. */
int rf_deltanet_decode(int64_t rows, int64_t key_heads, int64_t heads, int64_t dk, int64_t dv,
                       int64_t taps, const float *qkv, int64_t qkv_stride, float *window,
                       const float *weight, const float *b, const float *a, int64_t gate_stride,
                       const float *a_log, const float *dt_bias, float *state, float *out) {
    const int64_t key_dim = key_heads * dk, conv_dim = 2 * key_dim + heads * dv;
    const int64_t per_key = heads / key_heads;
    float *mixed = malloc(sizeof(float) * (size_t)(conv_dim + 2 * dv));
    if (mixed == NULL) return 1;
    float *scratch = mixed + conv_dim;
    const float q_scale = 1.0f / sqrtf((float)dk);
    for (int64_t r = 0; r < rows; r++) {
        rf_conv_step(1, conv_dim, taps, qkv + r * qkv_stride, qkv_stride,
                     window + r * conv_dim * (taps - 1), weight, NULL, mixed);
        silu_into(conv_dim, mixed, mixed);
        for (int64_t kh = 0; kh < key_heads; kh++) {
            l2norm(dk, mixed + kh * dk, q_scale);
            l2norm(dk, mixed + key_dim + kh * dk, 1.0f);
        }
        for (int64_t h = 0; h < heads; h++) {
            const int64_t rh = r * heads + h, kh = h / per_key;
            const float beta = sigmoid(b[r * gate_stride + h]);
            const float g = -expf(a_log[h]) * softplus(a[r * gate_stride + h] + dt_bias[h]);
            delta_head(dk, dv, mixed + kh * dk, mixed + key_dim + kh * dk,
                       mixed + 2 * key_dim + h * dv, g, beta, state + rh * dk * dv,
                       out + rh * dv, scratch);
        }
    }
    free(mixed);
    return 0;
}

/* One state row of the Mamba2 step: row <- row decay + xdt b; returns row . c (n a multiple
 * of VL, one register at a time, the lanes summed by hsumv). */
static inline float ssd_row_v(int64_t n, float *row, float decay, float xdt, const float *bb,
                              const float *cc) {
    vf acc = {0};
    for (int64_t j = 0; j < n; j += VL) {
        const vf next = loadv(row + j) * decay + loadv(bb + j) * xdt;
        storev(row + j, next);
        acc += next * loadv(cc + j);
    }
    return hsumv(acc);
}

/* Two state rows at once (n a multiple of 2 VL): B and C read once for both, each readout in
 * two partial sums (even and odd registers), so four additions run side by side instead of
 * one chain per row. out[0], out[1] = the rows' readouts. */
static inline void ssd_rows2_v(int64_t n, float *r0, float *r1, float decay, float xdt0,
                               float xdt1, const float *bb, const float *cc, float *out) {
    vf a0 = {0}, a1 = {0}, b0 = {0}, b1 = {0};
    for (int64_t j = 0; j < n; j += 2 * VL) {
        const vf be = loadv(bb + j), bo = loadv(bb + j + VL);
        const vf ce = loadv(cc + j), co = loadv(cc + j + VL);
        const vf n0e = loadv(r0 + j) * decay + be * xdt0, n0o = loadv(r0 + j + VL) * decay + bo * xdt0;
        const vf n1e = loadv(r1 + j) * decay + be * xdt1, n1o = loadv(r1 + j + VL) * decay + bo * xdt1;
        storev(r0 + j, n0e);
        storev(r0 + j + VL, n0o);
        storev(r1 + j, n1e);
        storev(r1 + j + VL, n1o);
        a0 += n0e * ce;
        a1 += n0o * co;
        b0 += n1e * ce;
        b1 += n1o * co;
    }
    out[0] = hsumv(a0 + a1);
    out[1] = hsumv(b0 + b1);
}

/* The same for any n, one float at a time in the compiler's vector reduction. */
static inline float ssd_row(int64_t n, float *row, float decay, float xdt, const float *bb,
                            const float *cc) {
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int64_t j = 0; j < n; j++) {
        const float next = row[j] * decay + xdt * bb[j];
        row[j] = next;
        acc += next * cc[j];
    }
    return acc;
}

/* One head of the Mamba2 step: its state hh [p, n] decayed and updated row by row (row i with
 * x_i dt, B and C shared), y[i] = row_i . c. */
static void ssd_head(int64_t p, int64_t n, float *hh, float decay, float step, const float *xh,
                     const float *bb, const float *cc, float *yh) {
    int64_t i = 0;
    if (n % (2 * VL) == 0)
        for (; i + 2 <= p; i += 2)
            ssd_rows2_v(n, hh + i * n, hh + (i + 1) * n, decay, xh[i] * step, xh[i + 1] * step,
                        bb, cc, yh + i);
    for (; i < p; i++) {
        const float xdt = xh[i] * step;
        float *row = hh + i * n;
        yh[i] = n % VL == 0 ? ssd_row_v(n, row, decay, xdt, bb, cc) : ssd_row(n, row, decay, xdt, bb, cc);
    }
}

/* Mamba2 recurrence, one token per row: x [rows, heads, p], dt [rows, heads], a [heads],
 * b, c [rows, groups, n] (head h reads group h / (heads / groups)), h [rows, heads, p, n]
 * (updated in place), y [rows, heads, p]. h <- exp(dt a) h + (dt x) b^T; y = h c. One pass
 * over each state row. */
void rf_ssd_step(int64_t rows, int64_t heads, int64_t groups, int64_t p, int64_t n,
                 const float *x, const float *dt, const float *a, const float *b, const float *c,
                 float *h, float *y) {
    const int64_t per_group = heads / groups;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t hd = 0; hd < heads; hd++) {
            const int64_t rh = r * heads + hd, grp = r * groups + hd / per_group;
            const float step = dt[rh], decay = expf(step * a[hd]);
            const float *bb = b + grp * n, *cc = c + grp * n;
            ssd_head(p, n, h + rh * p * n, decay, step, x + rh * p, bb, cc, y + rh * p);
        }
    }
}

/* Softmax of each head's scores [heads, width] over its first len entries, in place: the max,
 * then exp and sum in order; sums[h] gets head h's sum. */
static void softmax_rows(int64_t heads, int64_t width, int64_t len, float *scores, float *sums) {
    for (int64_t h = 0; h < heads; h++) {
        float *se = scores + h * width;
        float top = se[0];
        /* !(s <= top): a NaN score becomes the max, so it reaches every weight */
        for (int64_t t = 1; t < len; t++)
            if (!(se[t] <= top)) top = se[t];
        exp_shifted(len, se, top);
        float sum = 0.0f;
        for (int64_t t = 0; t < len; t++) sum += se[t];
        sums[h] = sum;
    }
}

/* a . b over dim floats (a multiple of VL), in two interleaved partial sums (even and odd
 * registers), so consecutive additions do not wait on each other. */
static inline float dotv(int64_t dim, const float *a, const float *b) {
    vf even = {0}, odd = {0};
    int64_t d = 0;
    for (; d + 2 * VL <= dim; d += 2 * VL) {
        even += loadv(a + d) * loadv(b + d);
        odd += loadv(a + d + VL) * loadv(b + d + VL);
    }
    if (d < dim) even += loadv(a + d) * loadv(b + d);
    return hsumv(even + odd);
}

/* Each head's output: the sum over positions of its softmax weights times V (one pass over the
 * positions, each V row read once for every head), divided by the
 * head's sum. */
static void weighted_values(int64_t heads, int64_t group, int64_t dim, int64_t span,
                            int64_t width, int64_t len, const float *vc, const int64_t *sl,
                            const float *scores, const float *sums, float *orow) {
    for (int64_t i = 0; i < heads * dim; i++) orow[i] = 0.0f;
    for (int64_t t = 0; t < len; t++) {
        const float *vr = vc + sl[t] * span;
        for (int64_t h = 0; h < heads; h++) {
            const float wgt = scores[h * width + t], *vh = vr + (h / group) * dim;
            float *oe = orow + h * dim;
#pragma omp simd
            for (int64_t d = 0; d < dim; d++) oe[d] += wgt * vh[d];
        }
    }
    for (int64_t h = 0; h < heads; h++) {
        const float inv = 1.0f / sums[h];
        float *oe = orow + h * dim;
#pragma omp simd
        for (int64_t d = 0; d < dim; d++) oe[d] *= inv;
    }
}

/* q . k over dim floats, scaled: register-wide (dotv) when dim is a multiple of VL, else in
 * the compiler's vector reduction. */
static inline float score(int64_t dim, const float *q, const float *k, float scale) {
    if (dim % VL == 0) return dotv(dim, q, k) * scale;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t d = 0; d < dim; d++) dot += q[d] * k[d];
    return dot * scale;
}

/* One row of rf_decode_attention: the scores position by position (K read as one stream), the
 * softmax, the weighted sum of V. */
static void attention_row(int64_t heads, int64_t group, int64_t dim, int64_t span, int64_t width,
                          int64_t len, const float *qr, const float *kc, const float *vc,
                          const int64_t *sl, float scale, float *scores, float *sums,
                          float *orow) {
    for (int64_t t = 0; t < len; t++) {
        const float *kr = kc + sl[t] * span;
        for (int64_t h = 0; h < heads; h++)
            scores[h * width + t] = score(dim, qr + h * dim, kr + (h / group) * dim, scale);
    }
    softmax_rows(heads, width, len, scores, sums);
    weighted_values(heads, group, dim, span, width, len, vc, sl, scores, sums, orow);
}

/* One query token per row over its paged context, read where it lies: q [rows, heads, dim],
 * kc, vc [slots, kv_heads, dim] (the KV pool), slots [rows, width] (KV slot of each position),
 * lengths [rows] (positions 0..length-1 are the row's context, length >= 1), out [rows, heads,
 * dim]. Query head h reads KV head h / (heads / kv_heads). Softmax per head in two passes over
 * the scores (max, then exp and sum), the weighted sum of V divided by the sum at the end.
 * Returns 0, or 1 when its scratch cannot be allocated. */
int rf_decode_attention(int64_t rows, int64_t heads, int64_t kv_heads, int64_t dim, int64_t width,
                        const float *q, const float *kc, const float *vc, const int64_t *slots,
                        const int64_t *lengths, float scale, float *out) {
    const int64_t group = heads / kv_heads, span = kv_heads * dim;
    float *scores = malloc(sizeof(float) * (size_t)(heads * width + heads));
    if (scores == NULL) return 1;
    float *sums = scores + heads * width;
    for (int64_t r = 0; r < rows; r++) {
        const float *qr = q + r * heads * dim;
        const int64_t *sl = slots + r * width;
        attention_row(heads, group, dim, span, width, lengths[r], qr, kc, vc, sl, scale, scores,
                      sums, out + r * heads * dim);
    }
    free(scores);
    return 0;
}

/* Mamba2 decode, one token per row, from the projection to the heads' output: xbc [rows,
 * conv_dim] (row stride xbc_stride; conv_dim = heads p + 2 groups n) through the depthwise conv
 * (window [rows, conv_dim, taps-1] shifted in place, conv_w [conv_dim, taps], conv_b
 * [conv_dim] or NULL) and silu, split into x [heads, p], B, C [groups, n]; the raw dt [rows,
 * heads] (row stride dt_stride) to clamp(softplus(dt + dt_bias), dt_min, dt_max); then per head
 * the recurrence of rf_ssd_step with A = -exp(a_log) (h [rows, heads, p, n] updated in place)
 * and the D skip: y [rows, heads p] = h c + d x. Returns 0, or 1 when its scratch cannot be
 * allocated. */
int rf_mamba2_decode(int64_t rows, int64_t heads, int64_t groups, int64_t p, int64_t n,
                     int64_t taps, const float *xbc, int64_t xbc_stride, const float *dt,
                     int64_t dt_stride, float *window, const float *conv_w, const float *conv_b,
                     const float *dt_bias, const float *a_log, const float *d, float dt_min,
                     float dt_max, float *h, float *y) {
    const int64_t inner = heads * p, conv_dim = inner + 2 * groups * n, per_group = heads / groups;
    float *mixed = malloc(sizeof(float) * (size_t)conv_dim);
    if (mixed == NULL) return 1;
    for (int64_t r = 0; r < rows; r++) {
        rf_conv_step(1, conv_dim, taps, xbc + r * xbc_stride, xbc_stride,
                     window + r * conv_dim * (taps - 1), conv_w, conv_b, mixed);
        silu_into(conv_dim, mixed, mixed);
        const float *xs = mixed, *bs = mixed + inner, *cs = bs + groups * n;
        for (int64_t hd = 0; hd < heads; hd++) {
            float step = softplus(dt[r * dt_stride + hd] + dt_bias[hd]);
            step = step < dt_min ? dt_min : (step > dt_max ? dt_max : step); /* NaN stays NaN */
            const float a = -expf(a_log[hd]), decay = expf(step * a);
            const float *bb = bs + (hd / per_group) * n, *cc = cs + (hd / per_group) * n;
            const float *xh = xs + hd * p;
            float *hh = h + (r * heads + hd) * p * n, *yh = y + r * inner + hd * p;
            ssd_head(p, n, hh, decay, step, xh, bb, cc, yh);
            for (int64_t i = 0; i < p; i++) yh[i] = yh[i] + d[hd] * xh[i];
        }
    }
    free(mixed);
    return 0;
}

/* Mamba2 prefill scan over runs of consecutive tokens (a wave's segments), token by token:
 * conv [T, heads p + 2 groups n] the activated conv output (x, B, C of each token, contiguous),
 * dt [T, heads] raw (row stride dt_stride: a view of the projection's columns read where it lies). Per token and head the arithmetic of
 * rf_mamba2_decode after its conv (dt to clamp(softplus(dt + dt_bias)), A = -exp(a_log), the
 * rf_ssd_step recurrence, the D skip), so a scan equals the decode step token by token to the
 * bit. Run r covers rows lo[r]..hi[r]-1 (hi > lo) of sequence seq[r]; a sequence's runs come
 * consecutive and in order. Its state before them is read (never written) at the address
 * starts[seq] ([heads, p, n] contiguous floats, where it lies in the state pool; 0: zeros), and
 * each head's state runs in a scratch row that stays in cache across all of the sequence's
 * runs. After run r the state goes to saves[save[r]] [heads, p, n] when save[r] >= 0.
 * y [T, heads p]. Returns 0, or 1 when its scratch cannot be allocated. */
int rf_mamba2_scan(int64_t runs, int64_t heads, int64_t groups, int64_t p, int64_t n,
                   const float *conv, const float *dt, int64_t dt_stride, const float *dt_bias,
                   const float *a_log,
                   const float *d, float dt_min, float dt_max, const int64_t *lo,
                   const int64_t *hi, const int64_t *seq, const int64_t *save,
                   const int64_t *starts, float *saves, float *y) {
    const int64_t inner = heads * p, conv_dim = inner + 2 * groups * n, per_group = heads / groups;
    const int64_t per_state = heads * p * n;
    float *hh = malloc(sizeof(float) * (size_t)(p * n));
    if (hh == NULL) return 1;
    for (int64_t r0 = 0, r1; r0 < runs; r0 = r1) {
        for (r1 = r0 + 1; r1 < runs && seq[r1] == seq[r0]; r1++) {}
        const float *start = (const float *)(intptr_t)starts[seq[r0]];
        for (int64_t hd = 0; hd < heads; hd++) {
            const float a = -expf(a_log[hd]), bias = dt_bias[hd], skip = d[hd];
            for (int64_t i = 0; i < p * n; i++) hh[i] = start == NULL ? 0.0f : start[hd * p * n + i];
            for (int64_t r = r0; r < r1; r++) {
                for (int64_t t = lo[r]; t < hi[r]; t++) {
                    const float *row = conv + t * conv_dim;
                    float step = softplus(dt[t * dt_stride + hd] + bias);
                    step = step < dt_min ? dt_min : (step > dt_max ? dt_max : step); /* NaN stays */
                    const float decay = expf(step * a);
                    const float *xh = row + hd * p, *bb = row + inner + (hd / per_group) * n;
                    const float *cc = row + inner + groups * n + (hd / per_group) * n;
                    float *yh = y + t * inner + hd * p;
                    ssd_head(p, n, hh, decay, step, xh, bb, cc, yh);
                    for (int64_t i = 0; i < p; i++) yh[i] = yh[i] + skip * xh[i];
                }
                if (save[r] >= 0) {
                    float *dst = saves + save[r] * per_state + hd * p * n;
                    for (int64_t i = 0; i < p * n; i++) dst[i] = hh[i];
                }
            }
        }
    }
    free(hh);
    return 0;
}

/* RMSNorm over `groups` equal slices of each of `vectors` vectors of dim floats, times weight,
 * gated by silu(gate) after the norm (before_gate != 0) or before it: x, out [vectors, dim],
 * gate [vectors, dim] with row stride gate_stride, weight [dim]. The gate goes into the slice
 * before its sum of squares when it comes first, as the eager grouped norm multiplies it in
 * first. */
void rf_group_gated_rms_norm(int64_t vectors, int64_t dim, int64_t groups, int before_gate,
                             const float *x, const float *gate, int64_t gate_stride,
                             const float *weight, float eps, float *out) {
    const int64_t span = dim / groups;
    for (int64_t v = 0; v < vectors; v++) {
        const float *xv = x + v * dim, *gv = gate + v * gate_stride;
        float *ov = out + v * dim;
        if (!before_gate) {
            silu_into(dim, gv, ov);
            for (int64_t i = 0; i < dim; i++) ov[i] = xv[i] * ov[i];
        }
        for (int64_t g = 0; g < groups; g++) {
            const float *src = (before_gate ? xv : ov) + g * span;
            float *dst = ov + g * span;
            float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
            for (int64_t i = 0; i < span; i++) sq += src[i] * src[i];
            const float inv = 1.0f / sqrtf(sq / (float)span + eps);
            const float *wg = weight + g * span, *gg = gv + g * span;
            if (before_gate) {
                silu_into(span, gg, dst);
                for (int64_t i = 0; i < span; i++) dst[i] = src[i] * inv * wg[i] * dst[i];
            } else
                for (int64_t i = 0; i < span; i++) dst[i] = src[i] * inv * wg[i];
        }
    }
}

/* Rotary embedding (rotate-half) of the first `rot` dims of each head: x [tokens, heads, dim]
 * (token stride x_stride, heads contiguous), cos, sin [tokens, rot] (each half repeated, as the
 * eager tables are), out [tokens, heads, dim]; dims past rot are copied. The eager arithmetic:
 * out = x cos + rotate_half(x) sin, each product rounded, then the sum. */
void rf_rotary(int64_t tokens, int64_t heads, int64_t dim, int64_t rot, const float *x,
               int64_t x_stride, const float *cos_t, const float *sin_t, float *out) {
    const int64_t half = rot / 2;
    for (int64_t t = 0; t < tokens; t++) {
        const float *c = cos_t + t * rot, *s = sin_t + t * rot;
        for (int64_t h = 0; h < heads; h++) {
            const float *xh = x + t * x_stride + h * dim;
            float *oh = out + (t * heads + h) * dim;
            for (int64_t i = 0; i < half; i++) oh[i] = xh[i] * c[i] + -xh[i + half] * s[i];
            for (int64_t i = half; i < rot; i++) oh[i] = xh[i] * c[i] + xh[i - half] * s[i];
            for (int64_t i = rot; i < dim; i++) oh[i] = xh[i];
        }
    }
}

/* A per-head RMSNorm and the rotary embedding after it (Qwen3's q/k norm), one call where there
 * were two: a token's heads normed by rf_rms_norm into a scratch row, then rotated from it by
 * rf_rotary (the same functions, so the same arithmetic). x [tokens, heads, dim] read where it
 * lies (token stride x_stride, head stride h_stride: a view of a wider projection is not copied),
 * weight [dim], cos_t, sin_t [tokens, rot], out [tokens, heads, dim]. Returns 1 when there is no
 * memory for the scratch row (nothing written), else 0. */
int rf_rms_norm_rotary(int64_t tokens, int64_t heads, int64_t dim, int64_t rot, const float *x,
                       int64_t x_stride, int64_t h_stride, const float *weight, float offset,
                       float eps, const float *cos_t, const float *sin_t, float *out) {
    float *normed = malloc(sizeof(float) * (size_t)(heads * dim)); /* one token's heads */
    if (normed == NULL) return 1;
    for (int64_t t = 0; t < tokens; t++) {
        for (int64_t h = 0; h < heads; h++)
            rf_rms_norm(1, dim, x + t * x_stride + h * h_stride, weight, offset, eps, normed + h * dim);
        rf_rotary(1, heads, dim, rot, normed, heads * dim, cos_t + t * rot, sin_t + t * rot,
                  out + t * heads * dim);
    }
    free(normed);
    return 0;
}

/* The new tokens' K and V into the paged pool: k, v [n, span] (contiguous), rows slots[i] of
 * kc, vc [slots, span]. A pool row is written whole and read again only in later rounds (or once
 * by this round's attention), so with AVX it goes past the cache (streaming stores, when 32-byte
 * aligned): no read of the cold line it replaces. */
void rf_kv_write(int64_t n, int64_t span, const float *k, const float *v, const int64_t *slots,
                 float *kc, float *vc) {
    for (int64_t i = 0; i < n; i++) {
        const float *src[2] = {k + i * span, v + i * span};
        float *dst[2] = {kc + slots[i] * span, vc + slots[i] * span};
        for (int j = 0; j < 2; j++) {
#if defined(__AVX__)
            if (span % 8 == 0 && ((uintptr_t)dst[j] & 31) == 0) {
                for (int64_t d = 0; d < span; d += 8) _mm256_stream_ps(dst[j] + d, _mm256_loadu_ps(src[j] + d));
                continue;
            }
#endif
            for (int64_t d = 0; d < span; d++) dst[j][d] = src[j][d];
        }
    }
#if defined(__AVX__)
    _mm_sfence(); /* the streamed rows visible before anything reads them */
#endif
}

/* a . b over k floats in four register partial sums (then a register at a time, then one float
 * at a time): consecutive additions do not wait on each other. */
static inline float row_dot(int64_t k, const float *a, const float *b) {
    vf s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    int64_t d = 0;
    for (; d + 4 * VL <= k; d += 4 * VL) {
        s0 += loadv(a + d) * loadv(b + d);
        s1 += loadv(a + d + VL) * loadv(b + d + VL);
        s2 += loadv(a + d + 2 * VL) * loadv(b + d + 2 * VL);
        s3 += loadv(a + d + 3 * VL) * loadv(b + d + 3 * VL);
    }
    for (; d + VL <= k; d += VL) s0 += loadv(a + d) * loadv(b + d);
    float sum = hsumv((s0 + s1) + (s2 + s3));
    for (; d < k; d++) sum += a[d] * b[d];
    return sum;
}

/* y [m, n] = x [m, k] (row stride x_stride) times w [n, k] transposed, plus bias [n] (or NULL):
 * the few rows of a lone decode round. One weight row at a time, read from memory as one stream
 * and dotted with every row of x while it is in L1: a GEMM library's blocking for many rows reads
 * the weights at a fraction of the memory's speed when there are one to four. */
void rf_linear_rows(int64_t m, int64_t n, int64_t k, const float *x, int64_t x_stride,
                    const float *w, const float *bias, float *y) {
    for (int64_t i = 0; i < n; i++) {
        const float *wi = w + i * k;
        for (int64_t r = 0; r < m; r++) {
            float v = row_dot(k, x + r * x_stride, wi);
            if (bias != NULL) v += bias[i];
            y[r * n + i] = v;
        }
    }
}
