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

#define ROW_LOOP(ADD, BLOCK_BYTES)                                                   \
    _Pragma("omp parallel for num_threads(threads) schedule(static)")                \
    for (int64_t r = 0; r < rows; r++) {                                             \
        const uint8_t *row = weight + r * row_bytes;                                 \
        for (int64_t t = 0; t < tokens; t++) {                                       \
            const float *xt = x + t * values;                                        \
            f16x a0 = {0}, a1 = {0};                                                 \
            for (int64_t k = 0; k < values / 32; k++)                                \
                ADD(row + k * (BLOCK_BYTES), xt + k * 32, &a0, &a1);                 \
            a0 += a1;                                                                \
            float sum = 0.f;                                                         \
            for (int j = 0; j < 16; j++) sum += a0[j];                               \
            out[t * rows + r] = sum;                                                 \
        }                                                                            \
    }

/* ggml's type codes: Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7, Q8_0 8. Returns 0, or -1 for another type. */
int ggml_matvec(int type, const uint8_t *weight, int64_t rows, int64_t row_bytes, const float *x,
                int64_t tokens, int64_t values, float *out, int threads) {
    switch (type) {
        case 2: ROW_LOOP(add_q4_0, 18) return 0;
        case 3: ROW_LOOP(add_q4_1, 20) return 0;
        case 6: ROW_LOOP(add_q5_0, 22) return 0;
        case 7: ROW_LOOP(add_q5_1, 24) return 0;
        case 8: ROW_LOOP(add_q8_0, 34) return 0;
        default: return -1;
    }
}
