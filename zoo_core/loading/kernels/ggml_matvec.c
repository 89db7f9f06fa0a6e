/* The zoo's own matrix products on llama.cpp's quantised blocks
 * (zoo_core/loading/ggml_kernels.py builds and calls it).
 *
 * Each token's activations are rounded per block of 32 values, as llama.cpp's Q8_0
 * does: a scale da = max|x| / 127 and 32 integers a = round(x / da). Every weight
 * block of 32 values is read as 32 unsigned codes u (0..255) with, per half of 16
 * values, a scale S and an offset M, w = S * u + M; then
 *   sum w * (da * a) = da * (S0 * sum_{half 0} u * a + S1 * sum_{half 1} u * a)
 *                      + M0 * (da * sum_{half 0} a) + M1 * (da * sum_{half 1} a),
 * the integer sums four at a time by one unsigned-by-signed byte dot-product
 * instruction (vpdpbusd: AVX512-VNNI or AVX-VNNI), a plain loop elsewhere. The
 * result is the float product of the file's weights with the rounded activations,
 * up to the order of float32 additions; each row's bytes are read once for up to
 * CHUNK tokens. docs/benchmarks.md ("quantized") measured it against widening the
 * weights to float32 and multiplying unrounded activations (1.5x slower, dropped). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512VNNI__) || defined(__AVXVNNI__) || defined(__AVX512BW__)
#include <immintrin.h>
#endif

typedef uint8_t u8x16 __attribute__((vector_size(16)));

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

/* The K-quants: super-blocks of 256 values. Q4_K and Q5_K are eight sub-blocks of 32,
 * each w = d * scale * q - dmin * min with 6-bit scales and minimums packed in 12 bytes
 * (Q5_K's fifth bits: bit j of its 32 high bytes for sub-block j); Q6_K is sixteen
 * sub-blocks of 16, w = d * scale * (q - 32). */
static inline void k_scale_min(const uint8_t *s, int j, float *scale, float *min) {
    if (j < 4) {
        *scale = s[j] & 63;
        *min = s[j + 4] & 63;
    } else {
        *scale = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

typedef uint8_t u8x32 __attribute__((vector_size(32)));
typedef int8_t i8x32 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef float f32x8 __attribute__((vector_size(32)));

/* Lane i: sum of u[4i + k] * a[4i + k], k = 0..3 (lanes 0-3 cover bytes 0-15, half 0). */
static inline i32x8 dot_bytes(u8x32 u, i8x32 a) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return (i32x8)_mm256_dpbusd_epi32(_mm256_setzero_si256(), (__m256i)u, (__m256i)a);
#elif defined(__AVXVNNI__)
    return (i32x8)_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), (__m256i)u, (__m256i)a);
#else
    i32x8 sum = {0};
    for (int i = 0; i < 32; i++) sum[i / 4] += (int32_t)u[i] * (int32_t)a[i];
    return sum;
#endif
}

/* Bit i of h as byte i: `value` where set, 0 elsewhere. */
static inline u8x32 bits_as_bytes(uint32_t h, uint8_t value) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
    return (u8x32)_mm256_movm_epi8(h) & value;
#else
    u8x32 out;
    for (int i = 0; i < 32; i++) out[i] = (h >> i) & 1 ? value : 0;
    return out;
#endif
}

static inline u8x32 load32(const uint8_t *p) {
    u8x32 v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* A block's 16 bytes as 32 four-bit codes: the low halves first, then the high. */
static inline u8x32 nibbles(const uint8_t *q) {
    u8x16 v;
    memcpy(&v, q, sizeof v);
    u8x16 lo = v & 15, hi = v >> 4;
    return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
                                   20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31);
}

typedef struct {
    u8x32 u;
    float s0, s1, m0, m1;
} codes32;

/* Sub-block `sub` (0 for the 32-value types) of the block at b, as codes32. */
static inline codes32 codes_q4_0(const uint8_t *b, int sub) {
    const float d = half_to_float(b);
    (void)sub;
    return (codes32){nibbles(b + 2), d, d, -8.f * d, -8.f * d};
}

static inline codes32 codes_q4_1(const uint8_t *b, int sub) {
    const float d = half_to_float(b), m = half_to_float(b + 2);
    (void)sub;
    return (codes32){nibbles(b + 4), d, d, m, m};
}

static inline codes32 codes_q5_0(const uint8_t *b, int sub) {
    const float d = half_to_float(b);
    (void)sub;
    return (codes32){nibbles(b + 6) | bits_as_bytes(read_u32(b + 2), 16), d, d, -16.f * d, -16.f * d};
}

static inline codes32 codes_q5_1(const uint8_t *b, int sub) {
    const float d = half_to_float(b), m = half_to_float(b + 2);
    (void)sub;
    return (codes32){nibbles(b + 8) | bits_as_bytes(read_u32(b + 4), 16), d, d, m, m};
}

static inline codes32 codes_q8_0(const uint8_t *b, int sub) {
    const float d = half_to_float(b);
    (void)sub;
    return (codes32){load32(b + 2) ^ 0x80, d, d, -128.f * d, -128.f * d}; /* u = w + 128 */
}

/* Q4_K / Q5_K sub-block `sub` (0..7): chunk sub / 2's low (even sub) or high (odd) nibbles. */
static inline codes32 codes_q45_k(const uint8_t *b, int sub, int five) {
    const float d = half_to_float(b), dmin = half_to_float(b + 2);
    float scale, min;
    k_scale_min(b + 4, sub, &scale, &min);
    u8x32 q = load32(b + (five ? 48 : 16) + 32 * (sub / 2));
    u8x32 u = sub & 1 ? q >> 4 : q & 15;
    if (five) u |= ((load32(b + 16) >> sub) & 1) << 4;
    return (codes32){u, d * scale, d * scale, -dmin * min, -dmin * min};
}

static inline codes32 codes_q4_k(const uint8_t *b, int sub) { return codes_q45_k(b, sub, 0); }
static inline codes32 codes_q5_k(const uint8_t *b, int sub) { return codes_q45_k(b, sub, 1); }

/* Q6_K run `sub` (0..7) of 32 values: half n = sub / 4, run sub % 4. In each half of 128
 * values, value l (0..31) of run r takes its low four bits from byte l (runs 0, 2) or
 * l + 32 (runs 1, 3) of 64, low nibble (runs 0, 1) or high (2, 3), and its top two from
 * bits 2r, 2r + 1 of high byte l; scale k (8-bit signed) covers values 16k..16k+15. */
static inline codes32 codes_q6_k(const uint8_t *b, int sub) {
    const int n = sub / 4, run = sub % 4;
    const int8_t *scales = (const int8_t *)(b + 192);
    const float d = half_to_float(b + 208);
    u8x32 low = load32(b + 64 * n + 32 * (run & 1)), high = load32(b + 128 + 32 * n);
    u8x32 u = (run < 2 ? low & 15 : low >> 4) | (((high >> (2 * run)) & 3) << 4);
    const float s0 = d * scales[8 * n + 2 * run], s1 = d * scales[8 * n + 2 * run + 1];
    return (codes32){u, s0, s1, -32.f * s0, -32.f * s1};
}

/* A token's activations rounded: 32 integers and a scale per block, and per half
 * block da * (sum of its 16 integers). */
typedef struct {
    const int8_t *q;
    const float *scale, *half_sums;
} rounded;

static void round_activations(const float *x, int64_t values, int8_t *q, float *scale, float *half_sums) {
    for (int64_t k = 0; k < values / 32; k++) {
        const float *xb = x + 32 * k;
        float amax = 0.f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xb[i]));
        const float d = amax / 127.f, inverse = amax > 0.f ? 127.f / amax : 0.f;
        int sums[2] = {0, 0};
        for (int i = 0; i < 32; i++) {
            const int v = (int)nearbyintf(xb[i] * inverse); /* to nearest, ties to even */
            q[32 * k + i] = (int8_t)v;
            sums[i / 16] += v;
        }
        scale[k] = d;
        half_sums[2 * k] = d * sums[0];
        half_sums[2 * k + 1] = d * sums[1];
    }
}

#define CHUNK 16 /* tokens whose sums are kept at once: one weight block read for all of them */

#define Q8_KERNEL(NAME, CODES, BLOCK_VALUES, BLOCK_BYTES)                                                    \
    static inline __attribute__((always_inline)) void NAME(const uint8_t *row, const rounded *a, int tokens,  \
                                                           int64_t values, float *out, int64_t stride) {      \
        f32x8 acc[CHUNK] = {{0}};                                                                              \
        float offset[CHUNK] = {0};                                                                             \
        for (int64_t k = 0; k < values / 32; k++) {                                                            \
            const codes32 c = CODES(row + k / ((BLOCK_VALUES) / 32) * (BLOCK_BYTES), k % ((BLOCK_VALUES) / 32)); \
            const f32x8 s = {c.s0, c.s0, c.s0, c.s0, c.s1, c.s1, c.s1, c.s1};                                  \
            for (int t = 0; t < tokens; t++) {                                                                 \
                i8x32 q;                                                                                       \
                memcpy(&q, a[t].q + 32 * k, 32);                                                               \
                acc[t] += __builtin_convertvector(dot_bytes(c.u, q), f32x8) * (s * a[t].scale[k]);             \
                offset[t] += c.m0 * a[t].half_sums[2 * k] + c.m1 * a[t].half_sums[2 * k + 1];                  \
            }                                                                                                  \
        }                                                                                                      \
        for (int t = 0; t < tokens; t++) {                                                                     \
            float sum = offset[t];                                                                             \
            for (int j = 0; j < 8; j++) sum += acc[t][j];                                                      \
            out[t * stride] = sum;                                                                             \
        }                                                                                                      \
    }

Q8_KERNEL(rows_q4_0, codes_q4_0, 32, 18)
Q8_KERNEL(rows_q4_1, codes_q4_1, 32, 20)
Q8_KERNEL(rows_q5_0, codes_q5_0, 32, 22)
Q8_KERNEL(rows_q5_1, codes_q5_1, 32, 24)
Q8_KERNEL(rows_q8_0, codes_q8_0, 32, 34)
Q8_KERNEL(rows_q4_k, codes_q4_k, 256, 144)
Q8_KERNEL(rows_q5_k, codes_q5_k, 256, 176)
Q8_KERNEL(rows_q6_k, codes_q6_k, 256, 210)

/* One token alone is the decoding case: its own copy of the loop, the sums in registers. */
#define Q8_LOOP(KERNEL)                                                                             \
    _Pragma("omp parallel for num_threads(threads) schedule(static)")                               \
    for (int64_t r = 0; r < rows; r++) {                                                            \
        for (int64_t t0 = 0; t0 < tokens; t0 += CHUNK) {                                            \
            const int n = tokens - t0 < CHUNK ? (int)(tokens - t0) : CHUNK;                          \
            if (n == 1)                                                                             \
                KERNEL(weight + r * row_bytes, act + t0, 1, values, out + t0 * rows + r, rows);      \
            else                                                                                    \
                KERNEL(weight + r * row_bytes, act + t0, n, values, out + t0 * rows + r, rows);      \
        }                                                                                           \
    }

/* out[t][r] = row r of the weight (rows of blocks, row_bytes each) . token t of x
 * (tokens x values floats), the activations rounded as above. ggml's type codes: Q4_0 2,
 * Q4_1 3, Q5_0 6, Q5_1 7, Q8_0 8, Q4_K 12, Q5_K 13, Q6_K 14. Returns 0, -1 for another
 * type, -2 where memory ran out. */
int ggml_matvec(int type, const uint8_t *weight, int64_t rows, int64_t row_bytes, const float *x,
                   int64_t tokens, int64_t values, float *out, int threads) {
    if (type != 2 && type != 3 && type != 6 && type != 7 && type != 8 && type != 12 && type != 13 && type != 14)
        return -1;
    int8_t *q = malloc(tokens * values + tokens * (values / 32) * 3 * sizeof(float) + 64);
    rounded *act = malloc(tokens * sizeof(rounded));
    if (q == NULL || act == NULL) {
        free(q);
        free(act);
        return -2;
    }
    float *scales = (float *)(q + ((tokens * values + 63) / 64) * 64);
    for (int64_t t = 0; t < tokens; t++) {
        float *scale = scales + t * (values / 32) * 3;
        round_activations(x + t * values, values, q + t * values, scale, scale + values / 32);
        act[t] = (rounded){q + t * values, scale, scale + values / 32};
    }
    switch (type) {
        case 2: Q8_LOOP(rows_q4_0) break;
        case 3: Q8_LOOP(rows_q4_1) break;
        case 6: Q8_LOOP(rows_q5_0) break;
        case 7: Q8_LOOP(rows_q5_1) break;
        case 8: Q8_LOOP(rows_q8_0) break;
        case 12: Q8_LOOP(rows_q4_k) break;
        case 13: Q8_LOOP(rows_q5_k) break;
        case 14: Q8_LOOP(rows_q6_k) break;
    }
    free(q);
    free(act);
    return 0;
}
