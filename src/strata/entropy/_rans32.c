/* Decoder of order-0 rANS streams with 32 interleaved states (strata.entropy.bytecoder,
 * model ORDER0_32), vectorized: 32 states decoded side by side in SIMD registers.
 *
 * The stream is the one strata.entropy.rans defines (31-bit states in [2^15, 2^31), 16-bit
 * little-endian renormalization words, 2^11 slots a table) with state k % 32 coding byte k and
 * every state's words in one shared stream, in the order a scalar decoder taking the states in
 * turn reads them. A vector of states decodes its symbols with one gather from the packed
 * table (strata.entropy.tables.packed_decode_table), and renormalizes by loading the next words
 * of the stream into the lanes that need one: AVX-512 expand-loads them; AVX2 shuffles them
 * into place with a table indexed by the lanes' mask (after F. Giesen, "Interleaved entropy
 * coders", arXiv:1402.3392, 2014, section 5, and his public-domain rans_word_sse41). The
 * kernels give the same bytes and the same verdict as strata.entropy.rans32's compiled
 * reference for every input, valid or not: reads stay inside the stream, every state is
 * checked on entry (in [2^15, 2^31), which keeps all arithmetic in 32 bits), and the stream
 * must end exactly with every state back at its initial 2^15.
 *
 * A plain CPython extension module with no Python-level API but `kernels()`, which returns
 * the addresses of the kernels this CPU can run; strata.entropy.rans32 hands one to numba.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define STRATA_X86 1
#include <immintrin.h>
#endif

#define LANES 32
#define SCALE_BITS 11
#define SLOT_MASK ((1u << SCALE_BITS) - 1)
#define RANS_L (1u << 15)
#define STATE_MAX (1u << 31)
#define FREQ_SHIFT 8
#define BIAS_SHIFT (8 + SCALE_BITS)
/* Most bytes one round of 32 symbols reads (a word each), plus the widest load past them. */
#define ROUND_BYTES (2 * LANES + 32)

typedef int64_t (*decode_fn)(const uint8_t *, int64_t, const uint32_t *, uint8_t *, int64_t);

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

/* Decode n bytes from src[0 .. len) (32 states, then the words) with the table tab (2^11
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
    __m256i x[4];
    for (int g = 0; g < 4; g++) x[g] = _mm256_loadu_si256((const __m256i *)(st + 8 * g));
    const __m256i mask = _mm256_set1_epi32(SLOT_MASK), one = _mm256_set1_epi32(1);
    const __m256i low = _mm256_set1_epi32(RANS_L);
    const __m256i bytes = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                           0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    int64_t pos = 4 * LANES, k = 0;
    for (; k + LANES <= n && pos + ROUND_BYTES <= len; k += LANES) {
        for (int g = 0; g < 4; g++) {
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
    for (int g = 0; g < 4; g++) _mm256_storeu_si256((__m256i *)(st + 8 * g), x[g]);
    return finish(src, len, pos, tab, st, out, k, n);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi2,popcnt")))
static int64_t decode_avx512(const uint8_t *src, int64_t len, const uint32_t *tab, uint8_t *out, int64_t n) {
    uint32_t st[LANES];
    if (!read_states(src, len, st)) return 1;
    __m512i x0 = _mm512_loadu_si512(st), x1 = _mm512_loadu_si512(st + 16);
    const __m512i mask = _mm512_set1_epi32(SLOT_MASK), one = _mm512_set1_epi32(1);
    const __m512i low = _mm512_set1_epi32(RANS_L);
    int64_t pos = 4 * LANES, k = 0;
#define STRATA_STEP(x, o)                                                                                     \
    {                                                                                                         \
        __m512i e = _mm512_i32gather_epi32(_mm512_and_si512(x, mask), (const int *)tab, 4);                   \
        __m512i f = _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(e, FREQ_SHIFT), mask), one);          \
        __m512i y = _mm512_add_epi32(_mm512_mullo_epi32(f, _mm512_srli_epi32(x, SCALE_BITS)),                 \
                                     _mm512_srli_epi32(e, BIAS_SHIFT));                                       \
        _mm_storeu_si128((__m128i *)(out + k + (o)), _mm512_cvtepi32_epi8(e));                                \
        __mmask16 need = _mm512_cmplt_epu32_mask(y, low);                                                     \
        __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_expandloadu_epi16(need, src + pos));                   \
        x = _mm512_mask_or_epi32(y, need, _mm512_slli_epi32(y, 16), w);                                       \
        pos += 2 * __builtin_popcount((unsigned)need);                                                        \
    }
    for (; k + LANES <= n && pos + ROUND_BYTES <= len; k += LANES) {
        STRATA_STEP(x0, 0)
        STRATA_STEP(x1, 16)
    }
#undef STRATA_STEP
    _mm512_storeu_si512(st, x0);
    _mm512_storeu_si512(st + 16, x1);
    return finish(src, len, pos, tab, st, out, k, n);
}
#endif

static PyObject *kernels(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    PyObject *d = PyDict_New();
    if (d == NULL) return NULL;
    struct { const char *name; decode_fn fn; int ok; } ks[3];
    int n = 0;
    ks[n].name = "scalar"; ks[n].fn = decode_scalar; ks[n++].ok = 1;
#ifdef STRATA_X86
    __builtin_cpu_init();
    ks[n].name = "avx2"; ks[n].fn = decode_avx2; ks[n++].ok = __builtin_cpu_supports("avx2");
    ks[n].name = "avx512"; ks[n].fn = decode_avx512;
    ks[n++].ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
                 && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi2");
#endif
    for (int i = 0; i < n; i++) {
        if (!ks[i].ok) continue;
        PyObject *a = PyLong_FromVoidPtr((void *)ks[i].fn);
        if (a == NULL || PyDict_SetItemString(d, ks[i].name, a) < 0) {
            Py_XDECREF(a);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(a);
    }
    return d;
}

static PyMethodDef methods[] = {
    {"kernels", kernels, METH_NOARGS,
     "Addresses of the ORDER0_32 decoders this CPU runs: {name: address}, names among "
     "'scalar', 'avx2', 'avx512'. Signature: int64 (const uint8 *src, int64 len, const uint32 "
     "*table, uint8 *out, int64 n), returning 0 for a consistent stream."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rans32", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__rans32(void) {
#ifdef STRATA_X86
    make_shuffles();
#endif
    return PyModule_Create(&module);
}
