/* Decoder-step ops (issue 42), float32 on the device: RMSNorm, add/mul of equal shapes, gated
 * activations, RoPE, LayerNorm. Arithmetic in float32 as the cpu reference; a reduction's order
 * (the norms' sums in a tree of 256) and contraction into fused multiply-adds may differ from it
 * by float32 roundings, inside the tolerance the tests hold both to against float64. One
 * work-group of 256 per row for the norms and softmax, one work-item per element otherwise. */
#define DEC_BLOCK 256

DEVICE float silu_f(float g) { return g / (1.0f + exp(-g)); }

/* 0.5 g (1 + tanh(z)) written as g / (1 + exp(-2z)): the same function, but without the
 * cancellation of 1 + tanh(z) for large negative z, where a tanh that stops a few ulps short of
 * -1 (PoCL's) left g times a tiny residue (-2.98e22 at g = -1e30) instead of -0. */
DEVICE float gelu_tanh_f(float g) {
    return g / (1.0f + exp(-2.0f * 0.7978845608f * (g + 0.044715f * g * g * g)));
}

/* GELU, 0.5 g (1 + erf(g / sqrt 2)), as the reference writes it. Unlike tanh above, erf is -1
 * far out (float32's rounding of erf(z) is -1 from z = -3.92 on; PoCL's erf returns it, the tests
 * check g = -1e30), so no residue is scaled by g; 1 + erf cancels to an ulp of 1, u |g| in y, as
 * in the reference. */
DEVICE float gelu_erf_f(float g) { return 0.5f * g * (1.0f + ERF(g * 0.70710678f)); }

/* The activations of unary_f32 and glu_f32, by accel.nn.ACTIVATIONS' order: 0 silu, 1 gelu
 * (tanh approximation), 2 gelu (erf) */
DEVICE float act_f(float g, int act) {
    return act == 0 ? silu_f(g) : act == 1 ? gelu_tanh_f(g) : gelu_erf_f(g);
}

/* max that keeps a NaN (fmax drops it): a row holding a NaN logit gives NaNs, as the reference */
DEVICE float max_nan(float a, float b) { return (b != b || b > a) ? b : a; }

/* The sum over the group of each work-item's q, in a tree; every work-item of the group calls
 * it (its barriers). The last barrier lets a kernel call it again on the same part: no work-item
 * overwrites part[0] before all have read it. */
DEVICE float block_sum(LOCAL_PTR float* part, int t, float q) {
    part[t] = q;
    BARRIER();
    for (int h = DEC_BLOCK / 2; h > 0; h >>= 1) {
        if (t < h) part[t] += part[t + h];
        BARRIER();
    }
    float s = part[0];
    BARRIER();
    return s;
}

/* sqrt(mean of the group's row of squares + eps): each work-item brings its partial sum q of
 * squares; every work-item of the group calls it (its barriers) */
DEVICE float rms_root(LOCAL_PTR float* part, int t, float q, int D, float eps) {
    return sqrt(block_sum(part, t, q) / (float)D + eps);
}

/* rms_root of the row xr of D values (the kernels that norm a row they read as it is) */
DEVICE float row_root(LOCAL_PTR float* part, int t, GLOBAL const float* xr, int D, float eps) {
    float q = 0.0f;
    for (int i = t; i < D; i += DEC_BLOCK) q += xr[i] * xr[i];
    return rms_root(part, t, q, D, eps);
}

KERNEL void rms_norm_f32(GLOBAL const float* RESTRICT x, GLOBAL const float* RESTRICT w,
                         GLOBAL float* RESTRICT y, int D, float eps, int has_w) {
    LOCAL float part[DEC_BLOCK];
    int t = LOCAL_ID(0);
    i64 row = GROUP_ID(0);
    GLOBAL const float* xr = x + row * D;
    float root = row_root(part, t, xr, D, eps);
    for (int i = t; i < D; i += DEC_BLOCK) {
        float v = xr[i] / root;
        y[row * D + i] = has_w ? v * w[i] : v;
    }
}

/* s = x + r (the residual stream's next value) and y = rms_norm(s) * w in one pass: a
 * pre-norm block's add and norm, one launch. Each work-item reads back only the s it wrote. */
KERNEL void add_rms_norm_f32(GLOBAL const float* RESTRICT x, GLOBAL const float* RESTRICT r,
                             GLOBAL const float* RESTRICT w, GLOBAL float* RESTRICT s,
                             GLOBAL float* RESTRICT y, int D, float eps, int has_w) {
    LOCAL float part[DEC_BLOCK];
    int t = LOCAL_ID(0);
    i64 row = GROUP_ID(0);
    GLOBAL float* sr = s + row * D;
    float q = 0.0f;
    for (int i = t; i < D; i += DEC_BLOCK) {
        float v = x[row * D + i] + r[row * D + i];
        sr[i] = v;
        q += v * v;
    }
    float root = rms_root(part, t, q, D, eps);
    for (int i = t; i < D; i += DEC_BLOCK) {
        float v = sr[i] / root;
        y[row * D + i] = has_w ? v * w[i] : v;
    }
}

/* As add_rms_norm_f32, with x normed first: s = rms_norm(x) * pw + r, y = rms_norm(s) * w (a
 * sandwich-norm block's branch norm, residual add and next norm, one launch; Gemma's post-norms).
 * The same operations as rms_norm, add and rms_norm, in their order: the same bits. */
KERNEL void norm_add_rms_norm_f32(GLOBAL const float* RESTRICT x, GLOBAL const float* RESTRICT pw,
                                  GLOBAL const float* RESTRICT r, GLOBAL const float* RESTRICT w,
                                  GLOBAL float* RESTRICT s, GLOBAL float* RESTRICT y, int D,
                                  float eps) {
    LOCAL float part[DEC_BLOCK];
    int t = LOCAL_ID(0);
    i64 row = GROUP_ID(0);
    GLOBAL const float* xr = x + row * D;
    GLOBAL float* sr = s + row * D;
    float root = row_root(part, t, xr, D, eps);
    float q = 0.0f;
    for (int i = t; i < D; i += DEC_BLOCK) {
        float v = xr[i] / root;
        v = v * pw[i];  /* its own statement: no FMA with the add, as the two ops round */
        v = v + r[row * D + i];
        sr[i] = v;
        q += v * v;
    }
    root = rms_root(part, t, q, D, eps);
    for (int i = t; i < D; i += DEC_BLOCK) {
        float v = sr[i] / root;
        y[row * D + i] = v * w[i];
    }
}

/* y = (x - mean) / sqrt(var + eps) * w + b over a row (population variance; w, b optional).
 * Two passes over the row, as the reference: the mean, then the mean of (x - mean)^2, which is
 * rms_root of the centred row. One pass of E[x^2] - mean^2 would cancel to noise (or below 0) for
 * a row whose mean is large against its spread. */
KERNEL void layer_norm_f32(GLOBAL const float* RESTRICT x, GLOBAL const float* RESTRICT w,
                           GLOBAL const float* RESTRICT b, GLOBAL float* RESTRICT y, int D,
                           float eps, int has_w, int has_b) {
    LOCAL float part[DEC_BLOCK];
    int t = LOCAL_ID(0);
    i64 row = GROUP_ID(0);
    GLOBAL const float* xr = x + row * D;
    float s = 0.0f;
    for (int i = t; i < D; i += DEC_BLOCK) s += xr[i];
    float mean = block_sum(part, t, s) / (float)D;
    float q = 0.0f;
    for (int i = t; i < D; i += DEC_BLOCK) {
        float c = xr[i] - mean;
        q += c * c;
    }
    float sd = rms_root(part, t, q, D, eps);
    for (int i = t; i < D; i += DEC_BLOCK) {
        float v = (xr[i] - mean) / sd;
        if (has_w) v *= w[i];
        y[row * D + i] = has_b ? v + b[i] : v;
    }
}

/* op 0: a + b, op 1: a * b; b holds nb elements repeated along a's leading dims (nb == n: the
 * same shape; a bias of the last dims; 1: a scalar). Other broadcasts stay on the host path. */
KERNEL void binary_f32(GLOBAL const float* RESTRICT a, GLOBAL const float* RESTRICT b,
                       GLOBAL float* RESTRICT y, int n, int op, int nb) {
    i64 i = (i64)GROUP_ID(0) * DEC_BLOCK + LOCAL_ID(0);
    if (i >= n) return;
    float bi = b[nb == n ? i : i % nb];
    y[i] = op == 0 ? a[i] + bi : a[i] * bi;
}

/* y[r, j] = act(gate[r * stride + j]) * up[r * stride + up_off + j] for j < h (act: act_f's).
 * up may be the gate's own buffer (its second half). Groups: dim 0 the rows, dim 1 blocks of
 * DEC_BLOCK columns (no division per element: a 64-bit one took glu to half torch's speed). */
KERNEL void glu_f32(GLOBAL const float* RESTRICT gate, GLOBAL const float* RESTRICT up,
                    GLOBAL float* RESTRICT y, int rows, int h, int stride, int up_off, int act) {
    const i64 r = GROUP_ID(0);
    const int j = GROUP_ID(1) * DEC_BLOCK + LOCAL_ID(0);
    if (j >= h || r >= rows) return;
    const i64 at = r * stride + j;
    y[r * h + j] = act_f(gate[at], act) * up[at + up_off];
}

/* x [B, H, S, D]; cos/sin [S or B*S, r/2] (angles from the host, as the reference computes
 * them); NEOX halves or GPT-J pairs; dims from r on pass through. */
KERNEL void rope_f32(GLOBAL const float* RESTRICT x, GLOBAL const float* RESTRICT cs,
                     GLOBAL const float* RESTRICT sn, GLOBAL float* RESTRICT y, int H, int S,
                     int D, int r, int interleaved, int per_batch, int n) {
    i64 e = (i64)GROUP_ID(0) * DEC_BLOCK + LOCAL_ID(0);
    if (e >= n) return;
    i64 row = e / D;
    int j = (int)(e % D);
    if (j >= r) { y[e] = x[e]; return; }
    int s = (int)(row % S);
    i64 b = row / ((i64)H * S);
    i64 t = per_batch ? b * S + s : s;
    int h = r / 2;
    int i = interleaved ? j / 2 : j % h;
    float c = cs[t * h + i], si = sn[t * h + i];
    GLOBAL const float* xr = x + row * D;
    int first = interleaved ? (j % 2 == 0) : (j < h);
    int partner = interleaved ? (first ? j + 1 : j - 1) : (first ? j + h : j - h);
    y[e] = first ? xr[j] * c - xr[partner] * si : xr[partner] * si + xr[j] * c;
}

/* rope_f32 of rms_norm_f32(x) * w, one work-group per row of x [B, H, S, D] (D <= NORM_ROPE_D):
 * a QK-norm model's per-head norm and rotation, one launch. The normed row waits in local memory
 * for its partners; the same operations as the two kernels, in their order: the same bits. */
#define NORM_ROPE_D 512
KERNEL void rms_norm_rope_f32(GLOBAL const float* RESTRICT x, GLOBAL const float* RESTRICT w,
                              GLOBAL const float* RESTRICT cs, GLOBAL const float* RESTRICT sn,
                              GLOBAL float* RESTRICT y, int H, int S, int D, float eps, int r,
                              int interleaved, int per_batch) {
    LOCAL float part[DEC_BLOCK];
    LOCAL float xn[NORM_ROPE_D];
    int t = LOCAL_ID(0);
    i64 row = GROUP_ID(0);
    GLOBAL const float* xr = x + row * D;
    float root = row_root(part, t, xr, D, eps);
    for (int i = t; i < D; i += DEC_BLOCK) {
        float v = xr[i] / root;
        xn[i] = v * w[i];
    }
    BARRIER();
    int s = (int)(row % S);
    i64 tb = per_batch ? row / ((i64)H * S) * S + s : s;
    int h = r / 2;
    for (int j = t; j < D; j += DEC_BLOCK) {
        if (j >= r) { y[row * D + j] = xn[j]; continue; }
        int i = interleaved ? j / 2 : j % h;
        float c = cs[tb * h + i], si = sn[tb * h + i];
        int first = interleaved ? (j % 2 == 0) : (j < h);
        int partner = interleaved ? (first ? j + 1 : j - 1) : (first ? j + h : j - h);
        y[row * D + j] = first ? xn[j] * c - xn[partner] * si : xn[partner] * si + xn[j] * c;
    }
}

/* Logit i of a softmax row: z = x * scale (its own rounding, as the reference's: no FMA with the
 * mask's add), then mask 1: keep (bytes, 0: z -> -inf), 2: add (float32, z + add), 0: neither
 * read */
DEVICE float logit(GLOBAL const float* xr, GLOBAL const u8* kr, GLOBAL const float* ar, int i,
                   float scale, int mask) {
    float z = FMUL_RN(xr[i], scale);
    if (mask == 1) return kr[i] ? z : -INF_F;
    return mask == 2 ? z + ar[i] : z;
}

/* Row softmax of x * scale and a mask (logit's) over the last axis (n columns), one work-group
 * per row; a row with no finite logit (max -inf) gives zeros. x's row r reads mask row
 * (r / outer) inner + r % inner (kernels.arguments.softmax_mask_rows): the same shape (1, 1),
 * repeated along leading dims ([Sq, Sk] against [B, H, Sq, Sk]: Sq, all rows), or broadcast
 * along a middle run of dims ([B, 1, Sq, Sk]: Sq, H Sq; [B, 1, 1, Sk]: 1, H Sq). */
KERNEL void softmax_f32(GLOBAL const float* RESTRICT x, GLOBAL const u8* RESTRICT keep,
                        GLOBAL const float* RESTRICT add, GLOBAL float* RESTRICT y, int n,
                        float scale, int mask, int inner, int outer) {
    LOCAL float part[DEC_BLOCK];
    int t = LOCAL_ID(0);
    i64 row = GROUP_ID(0);
    GLOBAL const float* xr = x + row * n;
    i64 mr = mask ? (row / outer * inner + row % inner) * n : 0;
    GLOBAL const u8* kr = keep + mr;
    GLOBAL const float* ar = add + mr;
    float m = -INF_F;
    for (int i = t; i < n; i += DEC_BLOCK) m = max_nan(m, logit(xr, kr, ar, i, scale, mask));
    part[t] = m;
    BARRIER();
    for (int h = DEC_BLOCK / 2; h > 0; h >>= 1) {
        if (t < h) part[t] = max_nan(part[t], part[t + h]);
        BARRIER();
    }
    m = part[0];
    BARRIER();
    int dead = m == -INF_F;
    float base = dead ? 0.0f : m;
    float s = 0.0f;
    for (int i = t; i < n; i += DEC_BLOCK) s += exp(logit(xr, kr, ar, i, scale, mask) - base);
    s = block_sum(part, t, s);
    for (int i = t; i < n; i += DEC_BLOCK)
        y[row * n + i] = dead ? 0.0f : exp(logit(xr, kr, ar, i, scale, mask) - base) / s;
}

/* y[r, j] = table[ids[r], j]: ids checked against the table's rows before the launch. Groups
 * (row, column block): no 64-bit division per element (it halved the copy's speed on PoCL). */
KERNEL void get_rows_f32(GLOBAL const float* RESTRICT table, GLOBAL const int* RESTRICT ids,
                         GLOBAL float* RESTRICT y, int D) {
    i64 r = GROUP_ID(0);
    int j = GROUP_ID(1) * DEC_BLOCK + LOCAL_ID(0);
    if (j < D) y[r * D + j] = table[(i64)ids[r] * D + j];
}

/* y[r, :] = table[ids[r], :] for rows of row_bytes bytes: a quantized table's blocks, which
 * the format's dequantize then reads (ids checked before the launch). */
KERNEL void get_rows_bytes(GLOBAL const u8* RESTRICT table, GLOBAL const int* RESTRICT ids,
                           GLOBAL u8* RESTRICT y, int row_bytes) {
    i64 r = GROUP_ID(0);
    int j = GROUP_ID(1) * DEC_BLOCK + LOCAL_ID(0);
    if (j < row_bytes) y[r * row_bytes + j] = table[(i64)ids[r] * row_bytes + j];
}

/* y = act(x) (act: act_f's) */
KERNEL void unary_f32(GLOBAL const float* RESTRICT x, GLOBAL float* RESTRICT y, int n, int act) {
    i64 i = (i64)GROUP_ID(0) * DEC_BLOCK + LOCAL_ID(0);
    if (i >= n) return;
    float g = x[i];
    y[i] = act_f(g, act);
}
