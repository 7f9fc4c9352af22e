/* Order-0 rANS with 64 interleaved states (strata.entropy.bytecoder, model ORDER0_64), coded
 * with SIMD: 64 states side by side in vector registers.
 *
 * The stream is the one strata.entropy.rans defines (31-bit states in [2^15, 2^31), 16-bit
 * little-endian renormalization words, 2^11 slots a table) with state k % 64 coding byte k and
 * every state's words in one shared stream, in the order a scalar decoder taking the states in
 * turn reads them (F. Giesen, "Interleaved entropy coders", arXiv:1402.3392, 2014, section 5;
 * his public-domain rans_word_sse41 shuffles words into lanes as decode_avx2 does). Layout:
 * 64 x u32 final state (state 0 first), then the words.
 *
 * Decoders (same bytes, same verdict as strata.entropy.rans64's numba reference for every
 * input, valid or not; reads stay inside the stream; every state is checked on entry to lie in
 * [2^15, 2^31), which keeps all arithmetic in 32 bits; the stream must end exactly with every
 * state back at 2^15):
 *   scalar         one state at a time;
 *   avx2           8 vectors of 8 states, table entries gathered, words shuffled into lanes;
 *   avx512         4 vectors of 16 states, table entries gathered, words expand-loaded;
 *   avx512-ranked  avx512 with the table lookups done by permutes, for tables of at most 64
 *                  symbols (exponent planes): gathers are slow on some CPUs (16 loads each).
 * Encoder (avx512, tables of at most 64 symbols, else it declines): the bytes of
 * strata.entropy.rans64.encode, byte for byte.
 *
 * A plain CPython extension module whose only functions, kernels() and encoders(), return the
 * addresses of the kernels this CPU can run; strata.entropy.rans64 hands them to numba.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define STRATA_X86 1
#include <immintrin.h>
#endif

#define LANES 64
#define SCALE_BITS 11
#define SLOT_MASK ((1u << SCALE_BITS) - 1)
#define RANS_L (1u << 15)
#define STATE_MAX (1u << 31)
#define FREQ_SHIFT 8
#define BIAS_SHIFT (8 + SCALE_BITS)
/* Most bytes one round of 64 symbols reads (a word each), plus the widest load past them. */
#define ROUND_BYTES (2 * LANES + 32)
/* Most symbols a table may have for the permute-based kernels. */
#define RANKED 64
/* The encoder table's fields per symbol (strata.entropy.rans.encoder_table). */
#define ENC_FIELDS 5

static inline uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The states from src[0 .. 4 * LANES); 0 if one is out of range or the stream too short. */
static int read_states(const uint8_t *src, int64_t len, uint32_t *st) {
    if (len < 4 * LANES) return 0;
    for (int j = 0; j < LANES; j++) {
        st[j] = rd32(src + 4 * j);
        if (st[j] < RANS_L || st[j] >= STATE_MAX) return 0;
    }
    return 1;
}

/* Symbols k .. n-1 one at a time, every read checked; returns 0 (valid end) or 1. */
static int64_t finish(const uint8_t *src, int64_t len, int64_t pos, const uint32_t *tab, uint32_t *st,
                      uint8_t *out, int64_t k, int64_t n) {
    for (; k < n; k++) {
        uint32_t x = st[k & (LANES - 1)];
        uint32_t e = tab[x & SLOT_MASK];
        out[k] = (uint8_t)e;
        x = (((e >> FREQ_SHIFT) & SLOT_MASK) + 1) * (x >> SCALE_BITS) + (e >> BIAS_SHIFT);
        if (x < RANS_L) {
            if (pos + 2 > len) return 1;
            x = x << 16 | (uint32_t)src[pos] | (uint32_t)src[pos + 1] << 8;
            pos += 2;
        }
        st[k & (LANES - 1)] = x;
    }
    for (int j = 0; j < LANES; j++)
        if (st[j] != RANS_L) return 1;
    return pos == len ? 0 : 1;
}

/* Decode n bytes from src[0 .. len) (the states, then the words) with the table tab (2^11
 * packed entries of a complete table) into out; 0 if the stream is consistent, else 1. */
static int64_t decode_scalar(const uint8_t *src, int64_t len, const uint32_t *tab, uint8_t *out, int64_t n) {
    uint32_t st[LANES];
    if (!read_states(src, len, st)) return 1;
    return finish(src, len, 4 * LANES, tab, st, out, 0, n);
}

#ifdef STRATA_X86
static uint8_t shuffle_words[256][16];

static void make_shuffles(void) {
    for (int m = 0; m < 256; m++) {
        int k = 0;
        for (int i = 0; i < 8; i++) {
            int on = (m >> i) & 1;
            shuffle_words[m][2 * i] = on ? (uint8_t)(2 * k) : 0x80;
            shuffle_words[m][2 * i + 1] = on ? (uint8_t)(2 * k + 1) : 0x80;
            k += on;
        }
    }
}

__attribute__((target("avx2,popcnt")))
static int64_t decode_avx2(const uint8_t *src, int64_t len, const uint32_t *tab, uint8_t *out, int64_t n) {
    uint32_t st[LANES];
    if (!read_states(src, len, st)) return 1;
    __m256i x[LANES / 8];
    for (int g = 0; g < LANES / 8; g++) x[g] = _mm256_loadu_si256((const __m256i *)(st + 8 * g));
    const __m256i mask = _mm256_set1_epi32(SLOT_MASK), one = _mm256_set1_epi32(1);
    const __m256i low = _mm256_set1_epi32(RANS_L);
    const __m256i bytes = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                           0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    int64_t pos = 4 * LANES, k = 0;
    for (; k + LANES <= n && pos + ROUND_BYTES <= len; k += LANES) {
        for (int g = 0; g < LANES / 8; g++) {
            __m256i e = _mm256_i32gather_epi32((const int *)tab, _mm256_and_si256(x[g], mask), 4);
            __m256i f = _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(e, FREQ_SHIFT), mask), one);
            __m256i y = _mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srli_epi32(x[g], SCALE_BITS)),
                                         _mm256_srli_epi32(e, BIAS_SHIFT));
            __m256i s = _mm256_shuffle_epi8(e, bytes);
            uint32_t lo = (uint32_t)_mm256_extract_epi32(s, 0), hi = (uint32_t)_mm256_extract_epi32(s, 4);
            memcpy(out + k + 8 * g, &lo, 4);
            memcpy(out + k + 8 * g + 4, &hi, 4);
            /* states stay below 2^31: a signed comparison is exact */
            __m256i need = _mm256_cmpgt_epi32(low, y);
            int m = _mm256_movemask_ps(_mm256_castsi256_ps(need));
            __m128i w = _mm_loadu_si128((const __m128i *)(src + pos));
            __m256i w32 = _mm256_cvtepu16_epi32(_mm_shuffle_epi8(w, _mm_loadu_si128((const __m128i *)shuffle_words[m])));
            x[g] = _mm256_blendv_epi8(y, _mm256_or_si256(_mm256_slli_epi32(y, 16), w32), need);
            pos += 2 * __builtin_popcount((unsigned)m);
        }
    }
    for (int g = 0; g < LANES / 8; g++) _mm256_storeu_si256((__m256i *)(st + 8 * g), x[g]);
    return finish(src, len, pos, tab, st, out, k, n);
}

#define AVX512 "avx512f,avx512bw,avx512vl,avx512vbmi2,popcnt"
#define AVX512_RANKED "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2,avx512vpopcntdq,popcnt"

/* The symbols' new states y (before renormalization) and bytes s into out; renormalizes. */
__attribute__((target(AVX512)))
static inline __m512i renormalize512(__m512i y, const uint8_t *src, int64_t *pos) {
    __mmask16 need = _mm512_cmplt_epu32_mask(y, _mm512_set1_epi32(RANS_L));
    __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_expandloadu_epi16(need, src + *pos));
    *pos += 2 * __builtin_popcount((unsigned)need);
    return _mm512_mask_or_epi32(y, need, _mm512_slli_epi32(y, 16), w);
}

__attribute__((target(AVX512)))
static int64_t decode_avx512(const uint8_t *src, int64_t len, const uint32_t *tab, uint8_t *out, int64_t n) {
    uint32_t st[LANES];
    if (!read_states(src, len, st)) return 1;
    __m512i x[LANES / 16];
    for (int g = 0; g < LANES / 16; g++) x[g] = _mm512_loadu_si512(st + 16 * g);
    const __m512i mask = _mm512_set1_epi32(SLOT_MASK), one = _mm512_set1_epi32(1);
    int64_t pos = 4 * LANES, k = 0;
    for (; k + LANES <= n && pos + ROUND_BYTES <= len; k += LANES) {
        for (int g = 0; g < LANES / 16; g++) {
            __m512i e = _mm512_i32gather_epi32(_mm512_and_si512(x[g], mask), (const int *)tab, 4);
            __m512i f = _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(e, FREQ_SHIFT), mask), one);
            __m512i y = _mm512_add_epi32(_mm512_mullo_epi32(f, _mm512_srli_epi32(x[g], SCALE_BITS)),
                                         _mm512_srli_epi32(e, BIAS_SHIFT));
            _mm_storeu_si128((__m128i *)(out + k + 16 * g), _mm512_cvtepi32_epi8(e));
            x[g] = renormalize512(y, src, &pos);
        }
    }
    for (int g = 0; g < LANES / 16; g++) _mm512_storeu_si512(st + 16 * g, x[g]);
    return finish(src, len, pos, tab, st, out, k, n);
}

/* decode_avx512 without gathers. Symbols are ranked in slot order; a slot's rank is the rank
 * owning the first slot of its 32-slot bucket (a 64-entry byte permute) plus the symbols
 * starting in the bucket up to the slot (the popcount of the bucket's bitmap of symbol starts,
 * masked; a 64-entry dword permute); the rank's first slot and the next rank's are 64-entry
 * word permutes. Tables of more symbols: decode_avx512. */
__attribute__((target(AVX512_RANKED)))
static int64_t decode_avx512_ranked(const uint8_t *src, int64_t len, const uint32_t *tab, uint8_t *out, int64_t n) {
    uint8_t sym[RANKED], first[64];
    uint16_t cum[RANKED], next[RANKED];
    uint32_t starts[64];
    int used = 0;
    for (int slot = 0; slot < (1 << SCALE_BITS); slot++) {
        if ((slot & 31) == 0) starts[slot >> 5] = 0;
        if (slot == 0 || (tab[slot] >> BIAS_SHIFT) == 0) { /* a symbol's first slot */
            if (used == RANKED) return decode_avx512(src, len, tab, out, n);
            sym[used] = (uint8_t)tab[slot];
            cum[used++] = (uint16_t)slot;
            if (slot & 31) starts[slot >> 5] |= 1u << (slot & 31);
        }
        if ((slot & 31) == 0) first[slot >> 5] = (uint8_t)(used - 1);
    }
    for (int r = 0; r < RANKED; r++) {
        next[r] = r + 1 < used ? cum[r + 1] : (1 << SCALE_BITS);
        if (r >= used) sym[r] = 0, cum[r] = 0;
    }
    uint32_t st[LANES];
    if (!read_states(src, len, st)) return 1;
    const __m512i t_first = _mm512_loadu_si512(first), t_sym = _mm512_loadu_si512(sym);
    const __m512i cum0 = _mm512_loadu_si512(cum), cum1 = _mm512_loadu_si512(cum + 32);
    const __m512i nx0 = _mm512_loadu_si512(next), nx1 = _mm512_loadu_si512(next + 32);
    const __m512i b0 = _mm512_loadu_si512(starts), b1 = _mm512_loadu_si512(starts + 16);
    const __m512i b2 = _mm512_loadu_si512(starts + 32), b3 = _mm512_loadu_si512(starts + 48);
    const __m512i mask = _mm512_set1_epi32(SLOT_MASK), byte = _mm512_set1_epi32(0xFF);
    const __m512i word = _mm512_set1_epi32(0xFFFF), m31 = _mm512_set1_epi32(31);
    const __m512i ones = _mm512_set1_epi32(-1), b32 = _mm512_set1_epi32(32);
    __m512i x[LANES / 16];
    for (int g = 0; g < LANES / 16; g++) x[g] = _mm512_loadu_si512(st + 16 * g);
    int64_t pos = 4 * LANES, k = 0;
    for (; k + LANES <= n && pos + ROUND_BYTES <= len; k += LANES) {
        for (int g = 0; g < LANES / 16; g++) {
            __m512i slot = _mm512_and_si512(x[g], mask);
            __m512i bucket = _mm512_srli_epi32(slot, 5);
            __m512i r = _mm512_and_si512(_mm512_permutexvar_epi8(bucket, t_first), byte);
            __mmask16 upper = _mm512_test_epi32_mask(bucket, b32);
            __m512i bits = _mm512_mask_blend_epi32(upper, _mm512_permutex2var_epi32(b0, bucket, b1),
                                                   _mm512_permutex2var_epi32(b2, bucket, b3));
            __m512i upto = _mm512_srlv_epi32(ones, _mm512_sub_epi32(m31, _mm512_and_si512(slot, m31)));
            r = _mm512_add_epi32(r, _mm512_popcnt_epi32(_mm512_and_si512(bits, upto)));
            __m512i hi = _mm512_and_si512(_mm512_permutex2var_epi16(nx0, r, nx1), word);
            __m512i lo = _mm512_and_si512(_mm512_permutex2var_epi16(cum0, r, cum1), word);
            __m512i y = _mm512_add_epi32(
                _mm512_mullo_epi32(_mm512_sub_epi32(hi, lo), _mm512_srli_epi32(x[g], SCALE_BITS)),
                _mm512_sub_epi32(slot, lo));
            _mm_storeu_si128((__m128i *)(out + k + 16 * g), _mm512_cvtepi32_epi8(_mm512_permutexvar_epi8(r, t_sym)));
            x[g] = renormalize512(y, src, &pos);
        }
    }
    for (int g = 0; g < LANES / 16; g++) _mm512_storeu_si512(st + 16 * g, x[g]);
    return finish(src, len, pos, tab, st, out, k, n);
}
#endif

/* ------------------------------------------------------------------------------- encoder
 * The scalar encoder (numba, strata.entropy.rans64.encode) walks the bytes backwards and writes
 * words backwards, state 63 of a round first. Here a round's four vectors hold the states in
 * reverse (vector lane i: state 63 - i, 47 - i, ...), so the words of the lanes that renormalize,
 * compressed in lane order, come in that same order; they are appended to a scratch, which is
 * reversed word by word at the end: the same stream, byte for byte. A symbol's constants come
 * from permutes of tables indexed by its rank among the table's symbols (at most 64). */

/* Push the byte of constants e (rans.encode_put_fast) into state x; its word, if any, to w. */
static inline uint32_t push_scalar(uint32_t x, const int64_t *e, uint16_t *w, int64_t *nw) {
    if (x >= (uint32_t)e[0]) {
        w[(*nw)++] = (uint16_t)x;
        x >>= 16;
    }
    uint32_t q = (uint32_t)(((uint64_t)x * (uint64_t)e[1]) >> 32) >> e[2];
    return x + (uint32_t)e[3] + q * (uint32_t)e[4];
}

/* The states and the words (reversed) into the end of buf (cap bytes); returns their start. */
static int64_t place_encoded(const uint32_t *st, const uint16_t *w, int64_t nw, uint8_t *buf, int64_t cap) {
    int64_t start = cap - 2 * nw - 4 * LANES;
    uint8_t *p = buf + start;
    for (int j = 0; j < LANES; j++) {
        p[4 * j] = (uint8_t)st[j];
        p[4 * j + 1] = (uint8_t)(st[j] >> 8);
        p[4 * j + 2] = (uint8_t)(st[j] >> 16);
        p[4 * j + 3] = (uint8_t)(st[j] >> 24);
    }
    p += 4 * LANES;
    for (int64_t i = 0; i < nw; i++) {
        uint16_t v = w[nw - 1 - i];
        p[2 * i] = (uint8_t)v;
        p[2 * i + 1] = (uint8_t)(v >> 8);
    }
    return start;
}

#ifdef STRATA_X86
/* Code data[0 .. n) with the encoder table enc (256 x ENC_FIELDS int64) into the end of buf
 * (cap bytes, at least 2 n + 4 LANES); returns where the coded bytes start, or -1 where the
 * table has more than 64 symbols (or constants outside the ranges the encoder table makes). */
__attribute__((target(AVX512_RANKED)))
static int64_t encode_avx512(const uint8_t *data, int64_t n, const int64_t *enc, uint8_t *buf, int64_t cap) {
    uint8_t rank[256];
    uint32_t packed[RANKED], rcp[RANKED]; /* f | bias << 12 | shift << 24, and the reciprocal */
    int used = 0;
    memset(packed, 0, sizeof packed);
    memset(rcp, 0, sizeof rcp);
    for (int s = 0; s < 256; s++) {
        const int64_t *e = enc + ENC_FIELDS * s;
        int64_t f = (1 << SCALE_BITS) - e[4];
        rank[s] = 0;
        if (f <= 0) continue;
        if (used == RANKED || e[0] != (int64_t)f << 20 || e[3] < 0 || e[3] >= 4096 || e[2] < 0 || e[2] > 15
            || e[1] < 0 || e[1] > 0xFFFFFFFFLL)
            return -1;
        rank[s] = (uint8_t)used;
        packed[used] = (uint32_t)f | (uint32_t)e[3] << 12 | (uint32_t)e[2] << 24;
        rcp[used++] = (uint32_t)e[1];
    }
    if (n < 0 || 2 * n + 4 * LANES > cap) return -1;
    uint16_t *w = (uint16_t *)malloc((size_t)(n + 64) * sizeof(uint16_t));
    if (w == NULL) return -1;
    uint32_t st[LANES];
    for (int j = 0; j < LANES; j++) st[j] = RANS_L;
    int64_t nw = 0, k = n;
    while (k % LANES) { /* the last n % 64 bytes first, one at a time */
        k--;
        st[k % LANES] = push_scalar(st[k % LANES], enc + ENC_FIELDS * data[k], w, &nw);
    }
    const __m512i r0 = _mm512_loadu_si512(rank), r1 = _mm512_loadu_si512(rank + 64);
    const __m512i r2 = _mm512_loadu_si512(rank + 128), r3 = _mm512_loadu_si512(rank + 192);
    const __m512i p0 = _mm512_loadu_si512(packed), p1 = _mm512_loadu_si512(packed + 16);
    const __m512i p2 = _mm512_loadu_si512(packed + 32), p3 = _mm512_loadu_si512(packed + 48);
    const __m512i c0 = _mm512_loadu_si512(rcp), c1 = _mm512_loadu_si512(rcp + 16);
    const __m512i c2 = _mm512_loadu_si512(rcp + 32), c3 = _mm512_loadu_si512(rcp + 48);
    const __m512i m12 = _mm512_set1_epi32(0xFFF), scale = _mm512_set1_epi32(1 << SCALE_BITS);
    const __m512i b32 = _mm512_set1_epi32(32);
    const __m512i rev16 = _mm512_setr_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    uint8_t rev_bytes[64];
    for (int i = 0; i < 64; i++) rev_bytes[i] = (uint8_t)(63 - i);
    const __m512i rev64 = _mm512_loadu_si512(rev_bytes);
    __m512i x[LANES / 16]; /* x[g] lane i: state LANES - 1 - 16 g - i */
    for (int g = 0; g < LANES / 16; g++)
        x[g] = _mm512_permutexvar_epi32(rev16, _mm512_loadu_si512(st + LANES - 16 * (g + 1)));
    while (k > 0) {
        k -= LANES;
        __m512i v = _mm512_permutexvar_epi8(rev64, _mm512_loadu_si512(data + k));
        __m512i lo = _mm512_permutex2var_epi8(r0, v, r1), hi = _mm512_permutex2var_epi8(r2, v, r3);
        __m512i rk = _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi);
        for (int g = 0; g < LANES / 16; g++) {
            __m128i part = g == 0 ? _mm512_extracti32x4_epi32(rk, 0) : g == 1 ? _mm512_extracti32x4_epi32(rk, 1)
                         : g == 2 ? _mm512_extracti32x4_epi32(rk, 2) : _mm512_extracti32x4_epi32(rk, 3);
            __m512i c = _mm512_cvtepu8_epi32(part);
            __mmask16 upper = _mm512_test_epi32_mask(c, b32);
            __m512i pk = _mm512_mask_blend_epi32(upper, _mm512_permutex2var_epi32(p0, c, p1),
                                                 _mm512_permutex2var_epi32(p2, c, p3));
            __m512i rc = _mm512_mask_blend_epi32(upper, _mm512_permutex2var_epi32(c0, c, c1),
                                                 _mm512_permutex2var_epi32(c2, c, c3));
            __m512i f = _mm512_and_si512(pk, m12);
            __m512i bias = _mm512_and_si512(_mm512_srli_epi32(pk, 12), m12);
            __m512i shift = _mm512_srli_epi32(pk, 24);
            __m512i y = x[g];
            __mmask16 need = _mm512_cmpge_epu32_mask(y, _mm512_slli_epi32(f, 20));
            _mm256_storeu_si256((__m256i *)(w + nw), _mm256_maskz_compress_epi16(need, _mm512_cvtepi32_epi16(y)));
            nw += __builtin_popcount((unsigned)need);
            y = _mm512_mask_srli_epi32(y, need, y, 16);
            __m512i even = _mm512_srli_epi64(_mm512_mul_epu32(y, rc), 32);
            __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(y, 32), _mm512_srli_epi64(rc, 32));
            __m512i q = _mm512_srlv_epi32(_mm512_mask_blend_epi32(0xAAAA, even, odd), shift);
            x[g] = _mm512_add_epi32(_mm512_add_epi32(y, bias), _mm512_mullo_epi32(q, _mm512_sub_epi32(scale, f)));
        }
    }
    for (int g = 0; g < LANES / 16; g++)
        _mm512_storeu_si512(st + LANES - 16 * (g + 1), _mm512_permutexvar_epi32(rev16, x[g]));
    int64_t start = place_encoded(st, w, nw, buf, cap);
    free(w);
    return start;
}
#endif

/* ------------------------------------------------------------------------------- module */
struct kernel {
    const char *name;
    void *fn;
    int ok;
};

/* {name: address} of the kernels whose flag is set. */
static PyObject *table(const struct kernel *ks, int n) {
    PyObject *d = PyDict_New();
    if (d == NULL) return NULL;
    for (int i = 0; i < n; i++) {
        if (!ks[i].ok) continue;
        PyObject *a = PyLong_FromVoidPtr(ks[i].fn);
        if (a == NULL || PyDict_SetItemString(d, ks[i].name, a) < 0) {
            Py_XDECREF(a);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(a);
    }
    return d;
}

#ifdef STRATA_X86
/* The CPU runs the AVX-512 kernels (ranked: also the permute and popcount extensions). */
static int has_avx512(int ranked) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
           && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi2")
           && (!ranked || (__builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vpopcntdq")));
}
#endif

static PyObject *kernels(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
#ifdef STRATA_X86
    __builtin_cpu_init();
    struct kernel ks[] = {{"scalar", (void *)decode_scalar, 1},
                          {"avx2", (void *)decode_avx2, __builtin_cpu_supports("avx2")},
                          {"avx512", (void *)decode_avx512, has_avx512(0)},
                          {"avx512-ranked", (void *)decode_avx512_ranked, has_avx512(1)}};
    return table(ks, 4);
#else
    struct kernel ks[] = {{"scalar", (void *)decode_scalar, 1}};
    return table(ks, 1);
#endif
}

static PyObject *encoders(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
#ifdef STRATA_X86
    struct kernel ks[] = {{"avx512", (void *)encode_avx512, has_avx512(1)}};
    return table(ks, 1);
#else
    (void)place_encoded;
    (void)push_scalar;
    return PyDict_New();
#endif
}

static PyMethodDef methods[] = {
    {"kernels", kernels, METH_NOARGS,
     "Addresses of the ORDER0_64 decoders this CPU runs: {name: address}, names among "
     "'scalar', 'avx2', 'avx512', 'avx512-ranked'. Signature: int64 (const uint8 *src, int64 len, "
     "const uint32 *table, uint8 *out, int64 n), returning 0 for a consistent stream."},
    {"encoders", encoders, METH_NOARGS,
     "Addresses of the ORDER0_64 encoders this CPU runs: {name: address}, 'avx512' or none. "
     "Signature: int64 (const uint8 *data, int64 n, const int64 *encoder_table, uint8 *buf, "
     "int64 cap), returning where the coded bytes start in buf, or -1 where the kernel does not "
     "apply (more than 64 symbols)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rans64", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__rans64(void) {
#ifdef STRATA_X86
    make_shuffles();
#endif
    return PyModule_Create(&module);
}
