/* The zoo's own matrix-vector products on llama.cpp's quantised blocks
 * (zoo_core/loading/ggml_kernels.py builds and calls it).
 *
 * out[t][r] = sum over the row's blocks of (block scale) * sum_j q_j * x[t][j]
 * (+ the block minimum * sum_j x[t][j] for the types that have one), in float32:
 * the activations are used as they are (never rounded to integers), the weights'
 * integers are widened on the fly, and each row's bytes are read once for all of
 * the ``tokens`` inputs. Compiled with -O3 -march=native and reassociation allowed,
 * so that the compiler vectorises the 32-value inner loops. */
#include <stdint.h>
#include <string.h>

static inline float half_to_float(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    _Float16 f;
    memcpy(&f, &h, 2);
    return (float)f;
}

static inline uint32_t read_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* 16 lanes through GCC's vector extensions: one AVX-512 register, two AVX2 ones. */
typedef float f16x __attribute__((vector_size(64)));
typedef uint8_t u8x __attribute__((vector_size(16)));
typedef int32_t i32x __attribute__((vector_size(64)));
typedef uint32_t u32x __attribute__((vector_size(64)));

static inline f16x load16(const float *x) {
    f16x v;
    memcpy(&v, x, sizeof v);
    return v;
}

static inline u8x bytes16(const uint8_t *q) {
    u8x v;
    memcpy(&v, q, sizeof v);
    return v;
}

/* Bytes to floats through 32-bit integers: gcc vectorises that pair of
 * conversions (vpmovzxbd/vpmovsxbd, vcvtdq2ps), not the direct one. */
static inline f16x widen_u8(u8x q) { return __builtin_convertvector(__builtin_convertvector(q, i32x), f16x); }
static inline f16x widen_i8(u8x q) { return widen_u8(q ^ 0x80) - 128.f; } /* two's complement, offset */

/* Q5's fifth bits of values j0..j0+15, at bit 4, from the block's 32-bit mask. */
static inline i32x fifth_bits(uint32_t h, int j0) {
    const u32x shifts = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    u32x word = (u32x){0} + (h >> j0);
    return (i32x)(((word >> shifts) & 1) << 4);
}

/* One block of 32 values times 32 inputs, added lane by lane into two
 * 16-lane accumulators (summed once per row, not per block). */
static inline void add_q8_0(const uint8_t *b, const float *x, f16x *a0, f16x *a1) {
    const float d = half_to_float(b);
    u8x q0 = bytes16(b + 2), q1 = bytes16(b + 18);
    *a0 += d * (widen_i8(q0) * load16(x));
    *a1 += d * (widen_i8(q1) * load16(x + 16));
}

static inline void add_q4_0(const uint8_t *b, const float *x, f16x *a0, f16x *a1) {
    const float d = half_to_float(b);
    u8x q = bytes16(b + 2);
    f16x lo = widen_u8(q & 15) - 8.f, hi = widen_u8(q >> 4) - 8.f;
    *a0 += d * (lo * load16(x));
    *a1 += d * (hi * load16(x + 16));
}

static inline void add_q4_1(const uint8_t *b, const float *x, f16x *a0, f16x *a1) {
    const float d = half_to_float(b), m = half_to_float(b + 2);
    u8x q = bytes16(b + 4);
    f16x x0 = load16(x), x1 = load16(x + 16);
    *a0 += d * (widen_u8(q & 15) * x0) + m * x0;
    *a1 += d * (widen_u8(q >> 4) * x1) + m * x1;
}

static inline void add_q5_0(const uint8_t *b, const float *x, f16x *a0, f16x *a1) {
    const float d = half_to_float(b);
    const uint32_t h = read_u32(b + 2);
    u8x q = bytes16(b + 6);
    i32x lo = __builtin_convertvector(q & 15, i32x) | fifth_bits(h, 0);
    i32x hi = __builtin_convertvector(q >> 4, i32x) | fifth_bits(h, 16);
    *a0 += d * ((__builtin_convertvector(lo, f16x) - 16.f) * load16(x));
    *a1 += d * ((__builtin_convertvector(hi, f16x) - 16.f) * load16(x + 16));
}

static inline void add_q5_1(const uint8_t *b, const float *x, f16x *a0, f16x *a1) {
    const float d = half_to_float(b), m = half_to_float(b + 2);
    const uint32_t h = read_u32(b + 4);
    u8x q = bytes16(b + 8);
    f16x x0 = load16(x), x1 = load16(x + 16);
    i32x lo = __builtin_convertvector(q & 15, i32x) | fifth_bits(h, 0);
    i32x hi = __builtin_convertvector(q >> 4, i32x) | fifth_bits(h, 16);
    *a0 += d * (__builtin_convertvector(lo, f16x) * x0) + m * x0;
    *a1 += d * (__builtin_convertvector(hi, f16x) * x1) + m * x1;
}


/* The K-quants: super-blocks of 256 values. Q4_K and Q5_K are eight sub-blocks of 32,
 * each w = d * scale * q - dmin * min with 6-bit scales and minimums packed in 12 bytes;
 * Q6_K is sixteen sub-blocks of 16, w = d * scale * (q - 32) with 8-bit signed scales. */
static inline void k_scale_min(const uint8_t *s, int j, float *scale, float *min) {
    if (j < 4) {
        *scale = s[j] & 63;
        *min = s[j + 4] & 63;
    } else {
        *scale = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Q4_K and Q5_K: the 64 values of chunk j are the low nibbles (sub-block 2j) and the
 * high nibbles (sub-block 2j + 1) of 32 bytes; Q5_K's fifth bits are bits 2j and 2j + 1
 * of its 32 high bytes. */
static inline void add_q45_k(const uint8_t *b, const float *x, f16x *a0, f16x *a1, int five) {
    const float d = half_to_float(b), dmin = half_to_float(b + 2);
    const uint8_t *scales = b + 4, *high = b + 16, *qs = b + (five ? 48 : 16);
    for (int j = 0; j < 4; j++) {
        float s0, m0, s1, m1;
        k_scale_min(scales, 2 * j, &s0, &m0);
        k_scale_min(scales, 2 * j + 1, &s1, &m1);
        for (int half = 0; half < 2; half++) {
            u8x q = bytes16(qs + 32 * j + 16 * half);
            i32x lo = __builtin_convertvector(q & 15, i32x), hi = __builtin_convertvector(q >> 4, i32x);
            if (five) {
                i32x h = __builtin_convertvector(bytes16(high + 16 * half), i32x);
                lo |= ((h >> (2 * j)) & 1) << 4;
                hi |= ((h >> (2 * j + 1)) & 1) << 4;
            }
            const float *xl = x + 64 * j + 16 * half, *xh = xl + 32;
            f16x x0 = load16(xl), x1 = load16(xh);
            *a0 += (d * s0) * (__builtin_convertvector(lo, f16x) * x0) - (dmin * m0) * x0;
            *a1 += (d * s1) * (__builtin_convertvector(hi, f16x) * x1) - (dmin * m1) * x1;
        }
    }
}

static inline void add_q4_k(const uint8_t *b, const float *x, f16x *a0, f16x *a1) { add_q45_k(b, x, a0, a1, 0); }
static inline void add_q5_k(const uint8_t *b, const float *x, f16x *a0, f16x *a1) { add_q45_k(b, x, a0, a1, 1); }

/* Q6_K: two halves of 128 values; in each, value l (0..31) of its four runs of 32 takes
 * its low four bits from byte l or l + 32 of 64 (low or high nibble) and its top two
 * from bits 0-1, 2-3, 4-5, 6-7 of high byte l. Scale k covers values 16k..16k+15. */
static inline void add_q6_k(const uint8_t *b, const float *x, f16x *a0, f16x *a1) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *scales = (const int8_t *)(b + 192);
    const float d = half_to_float(b + 208);
    for (int n = 0; n < 2; n++) {
        for (int half = 0; half < 2; half++) {
            const int l = 16 * half;
            u8x low0 = bytes16(ql + 64 * n + l), low1 = bytes16(ql + 64 * n + 32 + l);
            i32x h = __builtin_convertvector(bytes16(qh + 32 * n + l), i32x);
            i32x q[4] = {
                __builtin_convertvector(low0 & 15, i32x) | ((h & 3) << 4),
                __builtin_convertvector(low1 & 15, i32x) | (((h >> 2) & 3) << 4),
                __builtin_convertvector(low0 >> 4, i32x) | (((h >> 4) & 3) << 4),
                __builtin_convertvector(low1 >> 4, i32x) | (((h >> 6) & 3) << 4),
            };
            for (int run = 0; run < 4; run++) {
                const float scale = d * scales[8 * n + 2 * run + half];
                f16x w = __builtin_convertvector(q[run], f16x) - 32.f;
                f16x *a = run & 1 ? a1 : a0;
                *a += scale * (w * load16(x + 128 * n + 32 * run + l));
            }
        }
    }
}

#define ROW_LOOP(ADD, BLOCK_VALUES, BLOCK_BYTES)                                                   \
    _Pragma("omp parallel for num_threads(threads) schedule(static)")                \
    for (int64_t r = 0; r < rows; r++) {                                             \
        const uint8_t *row = weight + r * row_bytes;                                 \
        for (int64_t t = 0; t < tokens; t++) {                                       \
            const float *xt = x + t * values;                                        \
            f16x a0 = {0}, a1 = {0};                                                 \
            for (int64_t k = 0; k < values / (BLOCK_VALUES); k++)                     \
                ADD(row + k * (BLOCK_BYTES), xt + k * (BLOCK_VALUES), &a0, &a1);     \
            a0 += a1;                                                                \
            float sum = 0.f;                                                         \
            for (int j = 0; j < 16; j++) sum += a0[j];                               \
            out[t * rows + r] = sum;                                                 \
        }                                                                            \
    }

/* ggml's type codes: Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7, Q8_0 8, Q4_K 12, Q5_K 13, Q6_K 14. Returns 0, or -1 for another type. */
int ggml_matvec(int type, const uint8_t *weight, int64_t rows, int64_t row_bytes, const float *x,
                int64_t tokens, int64_t values, float *out, int threads) {
    switch (type) {
        case 2: ROW_LOOP(add_q4_0, 32, 18) return 0;
        case 3: ROW_LOOP(add_q4_1, 32, 20) return 0;
        case 6: ROW_LOOP(add_q5_0, 32, 22) return 0;
        case 7: ROW_LOOP(add_q5_1, 32, 24) return 0;
        case 8: ROW_LOOP(add_q8_0, 32, 34) return 0;
        case 12: ROW_LOOP(add_q4_k, 256, 144) return 0;
        case 13: ROW_LOOP(add_q5_k, 256, 176) return 0;
        case 14: ROW_LOOP(add_q6_k, 256, 210) return 0;
        default: return -1;
    }
}
