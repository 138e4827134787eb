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

int rf_abi_version(void) { return 1; }

/* Gated delta rule, one token per row: q, k [rows, heads, dk] (contiguous), v [rows, heads, dv],
 * g, beta [rows, heads], state [rows, heads, dk, dv] (updated in place), out [rows, heads, dv].
 * S <- exp(g) S; u = beta (v - S^T k); S <- S + k u^T; o = S^T q, the readout taken from the old
 * state as exp(g) S^T q + (k.q) u. Returns 0, or 1 when its scratch cannot be allocated. */
int rf_gated_delta_step(int64_t rows, int64_t heads, int64_t dk, int64_t dv, const float *q,
                        const float *k, const float *v, const float *g, const float *beta,
                        float *state, float *out) {
    float *recall = malloc(sizeof(float) * 2 * (size_t)dv);
    if (recall == NULL) return 1;
    float *readout = recall + dv;
    for (int64_t rh = 0; rh < rows * heads; rh++) {
        const float *qi = q + rh * dk, *ki = k + rh * dk, *vi = v + rh * dv;
        float *s = state + rh * dk * dv, *o = out + rh * dv;
        const float decay = expf(g[rh]), gain = beta[rh], gain_decay = gain * decay;
        float kq = 0.0f;
#pragma omp simd reduction(+ : kq)
        for (int64_t i = 0; i < dk; i++) kq += ki[i] * qi[i];
        for (int64_t j = 0; j < dv; j++) recall[j] = readout[j] = 0.0f;
        for (int64_t i = 0; i < dk; i++) { /* pass 1: S^T k and S^T q */
            const float a = ki[i], c = qi[i];
            const float *row = s + i * dv;
#pragma omp simd
            for (int64_t j = 0; j < dv; j++) {
                recall[j] += row[j] * a;
                readout[j] += row[j] * c;
            }
        }
        for (int64_t j = 0; j < dv; j++) {
            const float u = gain * vi[j] - gain_decay * recall[j];
            recall[j] = u;
            o[j] = decay * readout[j] + kq * u;
        }
        for (int64_t i = 0; i < dk; i++) { /* pass 2: decay and rank-1 update */
            const float a = ki[i];
            float *row = s + i * dv;
#pragma omp simd
            for (int64_t j = 0; j < dv; j++) row[j] = row[j] * decay + a * recall[j];
        }
    }
    free(recall);
    return 0;
}

/* Mamba2 recurrence, one token per row: x [rows, heads, p], dt [rows, heads], a [heads],
 * b, c [rows, groups, n] (head h reads group h / (heads / groups)), h [rows, heads, p, n]
 * (updated in place), y [rows, heads, p]. h <- exp(dt a) h + (dt x) b^T; y = h c. */
void rf_ssd_step(int64_t rows, int64_t heads, int64_t groups, int64_t p, int64_t n,
                 const float *x, const float *dt, const float *a, const float *b, const float *c,
                 float *h, float *y) {
    const int64_t per_group = heads / groups;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t hd = 0; hd < heads; hd++) {
            const int64_t rh = r * heads + hd, grp = r * groups + hd / per_group;
            const float step = dt[rh], decay = expf(step * a[hd]);
            const float *bb = b + grp * n, *cc = c + grp * n;
            for (int64_t i = 0; i < p; i++) {
                const float xdt = x[rh * p + i] * step;
                float *row = h + (rh * p + i) * n;
                float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
                for (int64_t j = 0; j < n; j++) {
                    const float next = row[j] * decay + xdt * bb[j];
                    row[j] = next;
                    acc += next * cc[j];
                }
                y[rh * p + i] = acc;
            }
        }
    }
}

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

/* One query token per row over its paged context, read where it lies: q [rows, heads, dim],
 * kc, vc [slots, kv_heads, dim] (the KV pool), slots [rows, width] (KV slot of each position),
 * lengths [rows] (positions 0..length-1 are the row's context, length >= 1), out [rows, heads,
 * dim]. Query head h reads KV head h / (heads / kv_heads). Softmax per head in two passes over
 * the scores (max, then exp and sum), the weighted sum of V divided by the sum at the end.
 * Returns 0, or 1 when its scratch cannot be allocated. */
int rf_decode_attention(int64_t rows, int64_t heads, int64_t kv_heads, int64_t dim, int64_t width,
                        const float *q, const float *kc, const float *vc, const int64_t *slots,
                        const int64_t *lengths, float scale, float *out) {
    const int64_t group = heads / kv_heads;
    float *scores = malloc(sizeof(float) * (size_t)(group * width + group));
    if (scores == NULL) return 1;
    float *sums = scores + group * width;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t len = lengths[r];
        const int64_t *sl = slots + r * width;
        for (int64_t kh = 0; kh < kv_heads; kh++) {
            const float *qh = q + (r * heads + kh * group) * dim;
            float *oh = out + (r * heads + kh * group) * dim;
            for (int64_t t = 0; t < len; t++) {
                const float *kr = kc + (sl[t] * kv_heads + kh) * dim;
                for (int64_t e = 0; e < group; e++) {
                    const float *qe = qh + e * dim;
                    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                    for (int64_t d = 0; d < dim; d++) dot += qe[d] * kr[d];
                    scores[e * width + t] = dot * scale;
                }
            }
            for (int64_t e = 0; e < group; e++) {
                float *se = scores + e * width;
                float top = se[0];
                /* !(s <= top): a NaN score becomes the max, so it reaches every weight */
                for (int64_t t = 1; t < len; t++)
                    if (!(se[t] <= top)) top = se[t];
                float sum = 0.0f;
                for (int64_t t = 0; t < len; t++) {
                    se[t] = expf(se[t] - top);
                    sum += se[t];
                }
                sums[e] = sum;
                for (int64_t d = 0; d < dim; d++) oh[e * dim + d] = 0.0f;
            }
            for (int64_t t = 0; t < len; t++) {
                const float *vr = vc + (sl[t] * kv_heads + kh) * dim;
                for (int64_t e = 0; e < group; e++) {
                    const float wgt = scores[e * width + t];
                    float *oe = oh + e * dim;
#pragma omp simd
                    for (int64_t d = 0; d < dim; d++) oe[d] += wgt * vr[d];
                }
            }
            for (int64_t e = 0; e < group; e++) {
                const float inv = 1.0f / sums[e];
                float *oe = oh + e * dim;
#pragma omp simd
                for (int64_t d = 0; d < dim; d++) oe[d] *= inv;
            }
        }
    }
    free(scores);
    return 0;
}
