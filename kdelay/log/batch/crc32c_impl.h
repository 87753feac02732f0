/* CRC-32C (Castagnoli), as the crc32c package computes it: reflected polynomial 0x82F63B78,
 * initial value and final XOR 0xFFFFFFFF. The compiled readers and writers check and seal
 * every batch with it without a Python call per batch (a test holds it equal to the package
 * on any bytes).
 *
 * x86-64 CPUs with SSE4.2 have an instruction for it (8 bytes a step), chosen at run time,
 * so the module builds and runs on any x86-64 (and elsewhere) with the table method. The
 * instruction takes 3 cycles to give its result and can start one a cycle, so a long
 * buffer is taken as three streams at once, joined by the CRC of a run of zero bytes
 * (linear in the CRC: four table look-ups, the tables made at set-up). */

#ifndef KDELAY_CRC32C_IMPL_H
#define KDELAY_CRC32C_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static uint32_t kd_crc_table[8][256];
static int kd_crc_mode = 0; /* 0: not set up yet, 1: tables, 2: the SSE4.2 instruction */

/* the three-stream blocks: long ones, then short ones for what is left */
#define KD_LONG_BLOCK 1024
#define KD_SHORT_BLOCK 128
/* kd_crc_zeros[b][k][v]: the CRC state after the byte v at byte k of a state, then a block
 * of zero bytes (b 0: long, 1: short), the state's other bytes 0 */
static uint32_t kd_crc_zeros[2][4][256];

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define KD_CRC_HARDWARE 1

__attribute__((target("sse4.2")))
static inline uint32_t kd_crc_hardware(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c = crc;
    uint64_t word;
    for (; n >= 8; n -= 8, p += 8) {
        memcpy(&word, p, 8); /* unaligned load: x86-64 is little-endian, as the CRC wants */
        c = _mm_crc32_u64(c, word);
    }
    crc = (uint32_t)c;
    for (; n; n--, p++)
        crc = _mm_crc32_u8(crc, *p);
    return crc;
}

/* the state `crc` carried over a block of zero bytes (b: which block) */
static inline uint32_t kd_crc_over_zeros(int b, uint32_t crc)
{
    return kd_crc_zeros[b][0][crc & 0xFF] ^ kd_crc_zeros[b][1][(crc >> 8) & 0xFF]
           ^ kd_crc_zeros[b][2][(crc >> 16) & 0xFF] ^ kd_crc_zeros[b][3][crc >> 24];
}

/* three blocks of `block` bytes a step, each its own stream, while they last */
__attribute__((target("sse4.2")))
static inline uint32_t kd_crc_three(int b, size_t block, uint32_t crc, const uint8_t **p,
                                    size_t *n)
{
    uint64_t c0, c1, c2, w0, w1, w2;
    size_t k;
    while (*n >= 3 * block) {
        c0 = crc;
        c1 = c2 = 0;
        for (k = 0; k < block; k += 8) {
            memcpy(&w0, *p + k, 8);
            memcpy(&w1, *p + block + k, 8);
            memcpy(&w2, *p + 2 * block + k, 8);
            c0 = _mm_crc32_u64(c0, w0);
            c1 = _mm_crc32_u64(c1, w1);
            c2 = _mm_crc32_u64(c2, w2);
        }
        crc = kd_crc_over_zeros(b, kd_crc_over_zeros(b, (uint32_t)c0) ^ (uint32_t)c1)
              ^ (uint32_t)c2;
        *p += 3 * block;
        *n -= 3 * block;
    }
    return crc;
}

static void kd_crc_zero_tables(void)
{
    static const uint8_t zeros[KD_LONG_BLOCK];
    size_t blocks[2] = {KD_LONG_BLOCK, KD_SHORT_BLOCK};
    int b, k;
    uint32_t v;
    for (b = 0; b < 2; b++)
        for (k = 0; k < 4; k++)
            for (v = 0; v < 256; v++)
                kd_crc_zeros[b][k][v] = kd_crc_hardware(v << (8 * k), zeros, blocks[b]);
}
#endif

static inline void kd_crc_setup(void)
{
    uint32_t i, k, c;
    for (i = 0; i < 256; i++) {
        c = i;
        for (k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        kd_crc_table[0][i] = c;
    }
    for (i = 0; i < 256; i++)
        for (k = 1; k < 8; k++)
            kd_crc_table[k][i] = (kd_crc_table[k - 1][i] >> 8)
                                 ^ kd_crc_table[0][kd_crc_table[k - 1][i] & 0xFF];
#ifdef KD_CRC_HARDWARE
    kd_crc_mode = __builtin_cpu_supports("sse4.2") ? 2 : 1;
    if (kd_crc_mode == 2)
        kd_crc_zero_tables();
#else
    kd_crc_mode = 1;
#endif
}

/* slicing by 8: one table look-up per byte, eight bytes a step */
static inline uint32_t kd_crc_tables(uint32_t crc, const uint8_t *p, size_t n)
{
    uint32_t lo, hi;
    for (; n >= 8; n -= 8, p += 8) {
        lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16
                    | (uint32_t)p[3] << 24);
        hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        crc = kd_crc_table[7][lo & 0xFF] ^ kd_crc_table[6][(lo >> 8) & 0xFF]
              ^ kd_crc_table[5][(lo >> 16) & 0xFF] ^ kd_crc_table[4][lo >> 24]
              ^ kd_crc_table[3][hi & 0xFF] ^ kd_crc_table[2][(hi >> 8) & 0xFF]
              ^ kd_crc_table[1][(hi >> 16) & 0xFF] ^ kd_crc_table[0][hi >> 24];
    }
    for (; n; n--, p++)
        crc = (crc >> 8) ^ kd_crc_table[0][(crc ^ *p) & 0xFF];
    return crc;
}

/* The CRC-32C of n bytes at p. Set up on first use (under the GIL: callers hold it then). */
static inline uint32_t kd_crc32c(const uint8_t *p, size_t n)
{
    if (kd_crc_mode == 0)
        kd_crc_setup();
#ifdef KD_CRC_HARDWARE
    uint32_t crc = 0xFFFFFFFFu;
    if (kd_crc_mode == 2) {
        crc = kd_crc_three(0, KD_LONG_BLOCK, crc, &p, &n);
        crc = kd_crc_three(1, KD_SHORT_BLOCK, crc, &p, &n);
        return ~kd_crc_hardware(crc, p, n);
    }
#endif
    return ~kd_crc_tables(0xFFFFFFFFu, p, n);
}

/* a times b modulo the polynomial, both as reflected CRC-32C states (x^0 is the top bit) */
static inline uint32_t kd_crc_multiply(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, product = 0;
    for (;;) {
        if (a & m) {
            product ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = (b & 1) ? (b >> 1) ^ 0x82F63B78u : b >> 1;
    }
    return product;
}

/* The CRC-32C of A then B from the CRC-32C of each and B's length: the state after A
 * carried over len2 bytes (a product by x^(8 * len2), by squaring: O(log len2), no pass over
 * the bytes), XOR B's (the initial and final XORs cancel, as in zlib's crc32_combine).
 * Linear in crc1: crc(A1 B) ^ crc(A2 B) = combine(crc(A1) ^ crc(A2), 0, |B|), whatever |A1|
 * and |A2| (broker/served_header.pyx uses this). */
static inline uint32_t kd_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
{
    uint32_t power = 1u << 30; /* x^1, squared: x^2, x^4, ... */
    uint32_t shift = 1u << 31; /* x^0 */
    uint64_t bits = len2 * 8;
    while (bits) {
        if (bits & 1)
            shift = kd_crc_multiply(power, shift);
        power = kd_crc_multiply(power, power);
        bits >>= 1;
    }
    return kd_crc_multiply(shift, crc1) ^ crc2;
}

/* The table method whatever the CPU: for the test that holds both methods to the package. */
static inline uint32_t kd_crc32c_tables(const uint8_t *p, size_t n)
{
    if (kd_crc_mode == 0)
        kd_crc_setup();
    return ~kd_crc_tables(0xFFFFFFFFu, p, n);
}

#endif
