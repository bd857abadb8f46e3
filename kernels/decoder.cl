/* Decoder-step ops (issue 42): RMSNorm, LayerNorm, add/mul, gated activations, RoPE, softmax,
 * embedding rows. Defines: IN_DT (F32, F16, BF16), the dtype of every float operand and of the
 * output, but for RoPE's cos/sin tables (float32) and softmax's bool mask (bytes). Arithmetic in
 * float32 and one rounding to the output dtype, as the cpu reference; a reduction's order (the
 * norms' sums in a tree of 256) and contraction into fused multiply-adds may differ from it by
 * float32 roundings, inside the tolerance the tests hold both to against float64. One
 * work-group of 256 per row for the norms and softmax, one work-item per element otherwise. */
#define OUT_DT IN_DT
#define DEC_BLOCK 256
#define IN(p, i) LOAD_IN(p, i)

/* v rounded to the dtype and widened again: what a fused kernel reads of its first op's output
 * (the reference rounds between the ops) */
DEVICE float rounded(float v) {
    OUT_T b;
    STORE_OUT(&b, 0, v);
    return IN(&b, 0);
}

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

/* The activations of unary and glu, by accel.nn.ACTIVATIONS' order: 0 silu, 1 gelu
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
DEVICE float row_root(LOCAL_PTR float* part, int t, GLOBAL const IN_T* xr, int D, float eps) {
    float q = 0.0f;
    for (int i = t; i < D; i += DEC_BLOCK) {
        float v = IN(xr, i);
        q += v * v;
    }
    return rms_root(part, t, q, D, eps);
}

KERNEL void rms_norm(GLOBAL const IN_T* RESTRICT x, GLOBAL const IN_T* RESTRICT w,
                     GLOBAL OUT_T* RESTRICT y, int D, float eps, int has_w) {
    LOCAL float part[DEC_BLOCK];
    int t = LOCAL_ID(0);
    i64 row = GROUP_ID(0);
    GLOBAL const IN_T* xr = x + row * D;
    float root = row_root(part, t, xr, D, eps);
    for (int i = t; i < D; i += DEC_BLOCK) {
        float v = IN(xr, i) / root;
        STORE_OUT(y, row * D + i, has_w ? v * IN(w, i) : v);
    }
}

/* s = x + r (the residual stream's next value) and y = rms_norm(s) * w in one pass: a
 * pre-norm block's add and norm, one launch. Each work-item reads back only the s it wrote. */
KERNEL void add_rms_norm(GLOBAL const IN_T* RESTRICT x, GLOBAL const IN_T* RESTRICT r,
                         GLOBAL const IN_T* RESTRICT w, GLOBAL OUT_T* RESTRICT s,
                         GLOBAL OUT_T* RESTRICT y, int D, float eps, int has_w) {
    LOCAL float part[DEC_BLOCK];
    int t = LOCAL_ID(0);
    i64 row = GROUP_ID(0);
    GLOBAL OUT_T* sr = s + row * D;
    float q = 0.0f;
    for (int i = t; i < D; i += DEC_BLOCK) {
        float v = rounded(IN(x, row * D + i) + IN(r, row * D + i));
        STORE_OUT(sr, i, v);
        q += v * v;
    }
    float root = rms_root(part, t, q, D, eps);
    for (int i = t; i < D; i += DEC_BLOCK) {
        float v = IN(sr, i) / root;
        STORE_OUT(y, row * D + i, has_w ? v * IN(w, i) : v);
    }
}

/* As add_rms_norm, with x normed first: s = rms_norm(x) * pw + r, y = rms_norm(s) * w (a
 * sandwich-norm block's branch norm, residual add and next norm, one launch; Gemma's post-norms).
 * The same operations and roundings as rms_norm, add and rms_norm, in their order: the same bits. */
KERNEL void norm_add_rms_norm(GLOBAL const IN_T* RESTRICT x, GLOBAL const IN_T* RESTRICT pw,
                              GLOBAL const IN_T* RESTRICT r, GLOBAL const IN_T* RESTRICT w,
                              GLOBAL OUT_T* RESTRICT s, GLOBAL OUT_T* RESTRICT y, int D, float eps) {
    LOCAL float part[DEC_BLOCK];
    int t = LOCAL_ID(0);
    i64 row = GROUP_ID(0);
    GLOBAL const IN_T* xr = x + row * D;
    GLOBAL OUT_T* sr = s + row * D;
    float root = row_root(part, t, xr, D, eps);
    float q = 0.0f;
    for (int i = t; i < D; i += DEC_BLOCK) {
        float v = IN(xr, i) / root;
        v = rounded(v * IN(pw, i));  /* its own statement: no FMA with the add, as the two ops round */
        v = rounded(v + IN(r, row * D + i));
        STORE_OUT(sr, i, v);
        q += v * v;
    }
    root = rms_root(part, t, q, D, eps);
    for (int i = t; i < D; i += DEC_BLOCK) {
        float v = IN(sr, i) / root;
        STORE_OUT(y, row * D + i, v * IN(w, i));
    }
}

/* y = (x - mean) / sqrt(var + eps) * w + b over a row (population variance; w, b optional).
 * Two passes over the row, as the reference: the mean, then the mean of (x - mean)^2, which is
 * rms_root of the centred row. One pass of E[x^2] - mean^2 would cancel to noise (or below 0) for
 * a row whose mean is large against its spread. */
KERNEL void layer_norm(GLOBAL const IN_T* RESTRICT x, GLOBAL const IN_T* RESTRICT w,
                       GLOBAL const IN_T* RESTRICT b, GLOBAL OUT_T* RESTRICT y, int D,
                       float eps, int has_w, int has_b) {
    LOCAL float part[DEC_BLOCK];
    int t = LOCAL_ID(0);
    i64 row = GROUP_ID(0);
    GLOBAL const IN_T* xr = x + row * D;
    float s = 0.0f;
    for (int i = t; i < D; i += DEC_BLOCK) s += IN(xr, i);
    float mean = block_sum(part, t, s) / (float)D;
    float q = 0.0f;
    for (int i = t; i < D; i += DEC_BLOCK) {
        float c = IN(xr, i) - mean;
        q += c * c;
    }
    float sd = rms_root(part, t, q, D, eps);
    for (int i = t; i < D; i += DEC_BLOCK) {
        float v = (IN(xr, i) - mean) / sd;
        if (has_w) v *= IN(w, i);
        STORE_OUT(y, row * D + i, has_b ? v + IN(b, i) : v);
    }
}

/* y = a + b (op 0) or a * b (op 1) with numpy's broadcasting. The output's dims, merged where
 * both operands walk them alike (kernels.arguments.broadcast_runs), are [n / (n1 n2 n3), n1, n2,
 * n3]; a and b step sa* and sb* elements along them (0 where one repeats). Where the last dim is
 * all of them (same shapes, a scalar) no index is divided. */
KERNEL void binary(GLOBAL const IN_T* RESTRICT a, GLOBAL const IN_T* RESTRICT b,
                   GLOBAL OUT_T* RESTRICT y, int n, int op, int n1, int n2, int n3, int sa0,
                   int sa1, int sa2, int sa3, int sb0, int sb1, int sb2, int sb3) {
    i64 e = (i64)GROUP_ID(0) * DEC_BLOCK + LOCAL_ID(0);
    if (e >= n) return;
    int i = (int)e;
    i64 ia = (i64)i * sa3, ib = (i64)i * sb3;
    if (n3 != n) {
        int i3 = i % n3, r = i / n3;
        int i2 = r % n2;
        r /= n2;
        int i1 = r % n1, i0 = r / n1;
        ia = (i64)i0 * sa0 + (i64)i1 * sa1 + (i64)i2 * sa2 + (i64)i3 * sa3;
        ib = (i64)i0 * sb0 + (i64)i1 * sb1 + (i64)i2 * sb2 + (i64)i3 * sb3;
    }
    float ai = IN(a, ia), bi = IN(b, ib);
    STORE_OUT(y, i, op == 0 ? ai + bi : ai * bi);
}

/* y[r, j] = act(gate[r * stride + j]) * up[r * stride + up_off + j] for j < h (act: act_f's).
 * up may be the gate's own buffer (its second half). Groups: dim 0 the rows, dim 1 blocks of
 * DEC_BLOCK columns (no division per element: a 64-bit one took glu to half torch's speed). */
KERNEL void glu(GLOBAL const IN_T* RESTRICT gate, GLOBAL const IN_T* RESTRICT up,
                GLOBAL OUT_T* RESTRICT y, int rows, int h, int stride, int up_off, int act) {
    const i64 r = GROUP_ID(0);
    const int j = GROUP_ID(1) * DEC_BLOCK + LOCAL_ID(0);
    if (j >= h || r >= rows) return;
    const i64 at = r * stride + j;
    STORE_OUT(y, r * h + j, act_f(IN(gate, at), act) * IN(up, at + up_off));
}

/* Output j < r of a rotated row reads dim *partner with j and the tables' column *col; NEOX
 * halves (i, i + r/2) or GPT-J pairs (2i, 2i + 1). Returns whether j is its pair's first. */
DEVICE int rope_pair(int j, int r, int interleaved, int* partner, int* col) {
    int h = r / 2;
    int first = interleaved ? (j % 2 == 0) : (j < h);
    *col = interleaved ? j / 2 : j % h;
    *partner = interleaved ? (first ? j + 1 : j - 1) : (first ? j + h : j - h);
    return first;
}

/* x_j's rotated value, xp its partner's (the reference's two products and a sum, in its order) */
DEVICE float rope_turn(float xj, float xp, float c, float s, int first) {
    return first ? xj * c - xp * s : xp * s + xj * c;
}

/* x [B, H, S, D]; cos/sin [S or B*S, r/2] (angles from the host, as the reference computes
 * them); dims from r on pass through (copied bits). */
KERNEL void rope(GLOBAL const IN_T* RESTRICT x, GLOBAL const float* RESTRICT cs,
                 GLOBAL const float* RESTRICT sn, GLOBAL OUT_T* RESTRICT y, int H, int S,
                 int D, int r, int interleaved, int per_batch, int n) {
    i64 e = (i64)GROUP_ID(0) * DEC_BLOCK + LOCAL_ID(0);
    if (e >= n) return;
    i64 row = e / D;
    int j = (int)(e % D);
    if (j >= r) { y[e] = x[e]; return; }
    int s = (int)(row % S);
    i64 t = per_batch ? row / ((i64)H * S) * S + s : s;
    int partner, col;
    int first = rope_pair(j, r, interleaved, &partner, &col);
    GLOBAL const IN_T* xr = x + row * D;
    STORE_OUT(y, e, rope_turn(IN(xr, j), IN(xr, partner), cs[t * (r / 2) + col], sn[t * (r / 2) + col], first));
}

/* rope of rms_norm(x) * w, one work-group per row of x [B, H, S, D] (D <= NORM_ROPE_D): a
 * QK-norm model's per-head norm and rotation, one launch. The normed row, rounded to the dtype
 * as rms_norm's output, waits in local memory for its partners; the same operations as the two
 * kernels, in their order: the same bits. */
#define NORM_ROPE_D 512
KERNEL void rms_norm_rope(GLOBAL const IN_T* RESTRICT x, GLOBAL const IN_T* RESTRICT w,
                          GLOBAL const float* RESTRICT cs, GLOBAL const float* RESTRICT sn,
                          GLOBAL OUT_T* RESTRICT y, int H, int S, int D, float eps, int r,
                          int interleaved, int per_batch) {
    LOCAL float part[DEC_BLOCK];
    LOCAL float xn[NORM_ROPE_D];
    int t = LOCAL_ID(0);
    i64 row = GROUP_ID(0);
    GLOBAL const IN_T* xr = x + row * D;
    float root = row_root(part, t, xr, D, eps);
    for (int i = t; i < D; i += DEC_BLOCK) {
        float v = IN(xr, i) / root;
        xn[i] = rounded(v * IN(w, i));
    }
    BARRIER();
    int s = (int)(row % S);
    i64 tb = (per_batch ? row / ((i64)H * S) * S + s : s) * (r / 2);
    for (int j = t; j < D; j += DEC_BLOCK) {
        float v = xn[j];
        if (j < r) {
            int partner, col;
            int first = rope_pair(j, r, interleaved, &partner, &col);
            v = rope_turn(v, xn[partner], cs[tb + col], sn[tb + col], first);
        }
        STORE_OUT(y, row * D + j, v);
    }
}

/* Logit i of a softmax row: z = x * scale (its own rounding, as the reference's: no FMA with the
 * mask's add), then by kernels.arguments.SOFTMAX_MASK_CODE: 1 keep (bytes, 0: z -> -inf), 2, 3,
 * 4: add a float32, float16 or bfloat16 value (any of them with any x, as the reference); 0: no
 * mask read. mr: the mask row's first element. */
DEVICE float logit(GLOBAL const IN_T* xr, GLOBAL const u8* mask, i64 mr, int i, float scale, int code) {
    float z = FMUL_RN(IN(xr, i), scale);
    if (code == 1) return mask[mr + i] ? z : -INF_F;
    if (code == 2) return z + LOAD_F32((GLOBAL const float*)mask, mr + i);
    if (code == 3) return z + LOAD_F16((GLOBAL const T_F16*)mask, mr + i);
    return code == 4 ? z + LOAD_BF16((GLOBAL const T_BF16*)mask, mr + i) : z;
}

/* Row softmax of x * scale and a mask (logit's) over the last axis (n columns), one work-group
 * per row; a row with no finite logit (max -inf) gives zeros. x's row r reads mask row
 * (r / outer) inner + r % inner (kernels.arguments.softmax_mask_rows): the same shape (1, 1),
 * repeated along leading dims ([Sq, Sk] against [B, H, Sq, Sk]: Sq, all rows), or broadcast
 * along a middle run of dims ([B, 1, Sq, Sk]: Sq, H Sq; [B, 1, 1, Sk]: 1, H Sq). */
KERNEL void softmax(GLOBAL const IN_T* RESTRICT x, GLOBAL const u8* RESTRICT mask,
                    GLOBAL OUT_T* RESTRICT y, int n, float scale, int code, int inner, int outer) {
    LOCAL float part[DEC_BLOCK];
    int t = LOCAL_ID(0);
    i64 row = GROUP_ID(0);
    GLOBAL const IN_T* xr = x + row * n;
    i64 mr = code ? (row / outer * inner + row % inner) * n : 0;
    float m = -INF_F;
    for (int i = t; i < n; i += DEC_BLOCK) m = max_nan(m, logit(xr, mask, mr, i, scale, code));
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
    for (int i = t; i < n; i += DEC_BLOCK) s += exp(logit(xr, mask, mr, i, scale, code) - base);
    s = block_sum(part, t, s);
    for (int i = t; i < n; i += DEC_BLOCK)
        STORE_OUT(y, row * n + i, dead ? 0.0f : exp(logit(xr, mask, mr, i, scale, code) - base) / s);
}

/* y[r, j] = table[ids[r], j], the element's bits copied: ids checked against the table's rows
 * before the launch. Groups (row, column block): no 64-bit division per element (it halved the
 * copy's speed on PoCL). */
KERNEL void get_rows(GLOBAL const IN_T* RESTRICT table, GLOBAL const int* RESTRICT ids,
                     GLOBAL OUT_T* RESTRICT y, int D) {
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
KERNEL void unary(GLOBAL const IN_T* RESTRICT x, GLOBAL OUT_T* RESTRICT y, int n, int act) {
    i64 i = (i64)GROUP_ID(0) * DEC_BLOCK + LOCAL_ID(0);
    if (i >= n) return;
    STORE_OUT(y, i, act_f(IN(x, i), act));
}
