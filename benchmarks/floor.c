/* The floors the C twin is measured against (benchmarks/floor.py builds this file with
 * the extension's compiler and flags, as the module _kachedb_floor).
 *
 * A floor is the least a call can do and still do the job: called from Python the way
 * the twin is (one C function, its argument a uint32 array), it does only the work the
 * answer needs, on data laid out for nothing else.
 *
 *   walk(query)         the matcher's floor: the query's buffer taken and its format checked
 *                       (uint32, one dimension: what any matcher must know), then
 *                       the shape's walk over a flat copy of its cached path -- per level
 *                       a binary search of the siblings' first tokens and the block's
 *                       comparison (one memcmp over the rest of a long edge) -- the matched
 *                       ids copied out; returns the count (a small int: nothing allocated).
 *                       load(levels, siblings, tokens, ids) sets the shape up.
 *   noop(x)             a METH_O call that does nothing: the price of a C call.
 *   sha256_each(msgs), xxh3_64_each(msgs, seed), xxh3_128_each(msgs)
 *                       the bare hash of each bytes object of a list (the events' floor:
 *                       the same bytes the twin hashes, OpenSSL's and xxHash's code). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>

#define XXH_INLINE_ALL
#include "xxhash.h"

/* ------------------------------------------------------------------ the matcher's floor
 *
 * The shape: `levels` levels, each with `siblings` one-block children sorted by first
 * token (level l's children: first tokens first[l][s], blocks tok[l][s][B], ids); or, with
 * siblings == 0, one edge of `levels` blocks (tokens contiguous). B = 16. */

#define B 16u

/* Two blocks equal: branch-free SSE2 (as the twin compares a block), else a loop. */
static inline int block_equal(const uint32_t *a, const uint32_t *b) {
#if defined(__SSE2__)
    __m128i d = _mm_setzero_si128();
    for (unsigned i = 0; i < B; i += 4)
        d = _mm_or_si128(d, _mm_xor_si128(_mm_loadu_si128((const __m128i *)(a + i)),
                                          _mm_loadu_si128((const __m128i *)(b + i))));
    return _mm_movemask_epi8(_mm_cmpeq_epi8(d, _mm_setzero_si128())) == 0xFFFF;
#else
    uint32_t d = 0;
    for (unsigned i = 0; i < B; i++) d |= a[i] ^ b[i];
    return d == 0;
#endif
}

static uint32_t n_levels, n_siblings;
static uint32_t *first_tokens; /* [levels][siblings] */
static uint32_t *blocks;       /* [levels][siblings][B], or the edge's levels * B */
static uint32_t *block_ids;    /* [levels][siblings], or the edge's levels */
static uint32_t out[1u << 16];

static PyObject *floor_load(PyObject *mod, PyObject *args) {
    (void)mod;
    unsigned int levels, siblings;
    Py_buffer tok, ids;
    if (!PyArg_ParseTuple(args, "IIy*y*", &levels, &siblings, &tok, &ids)) return NULL;
    size_t per = siblings ? siblings : 1u;
    int ok = levels <= (1u << 16) && (size_t)tok.len == (size_t)levels * per * B * 4u &&
             (size_t)ids.len == (size_t)levels * per * 4u;
    if (ok) {
        PyMem_Free(first_tokens);
        PyMem_Free(blocks);
        PyMem_Free(block_ids);
        first_tokens = PyMem_Malloc((size_t)levels * per * 4u);
        blocks = PyMem_Malloc((size_t)tok.len);
        block_ids = PyMem_Malloc((size_t)ids.len);
        ok = first_tokens && blocks && block_ids;
    }
    if (ok) {
        memcpy(blocks, tok.buf, (size_t)tok.len);
        memcpy(block_ids, ids.buf, (size_t)ids.len);
        for (size_t i = 0; i < (size_t)levels * per; i++) first_tokens[i] = blocks[i * B];
        n_levels = levels;
        n_siblings = siblings;
    }
    PyBuffer_Release(&tok);
    PyBuffer_Release(&ids);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "load(levels, siblings, tokens, ids): sizes disagree");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *floor_walk(PyObject *mod, PyObject *query) {
    (void)mod;
    Py_buffer view;
    /* The least a call must ask of its argument to know it holds uint32 tokens in one
     * dimension (R-TOK-*): the format and the shape (no strides: C-contiguous asked for). */
    if (PyObject_GetBuffer(query, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return NULL;
    const char *f = view.format;
    if (view.ndim != 1 || view.itemsize != 4 || f == NULL || (f[0] != 'I' && f[1] != 'I')) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "a one-dimensional uint32 array");
        return NULL;
    }
    const uint32_t *q = view.buf;
    size_t limit = (size_t)view.shape[0] / B;
    if (limit > n_levels) limit = n_levels;
    size_t matched = 0;
    if (n_siblings == 0) { /* one edge: a first block, then one memcmp over the rest */
        if (limit > 0 && block_equal(blocks, q)) {
            matched = limit;
            if (limit > 1 && memcmp(blocks + B, q + B, (limit - 1) * B * 4u) != 0) {
                matched = 1;
                while (block_equal(blocks + matched * B, q + matched * B)) matched++;
            }
            memcpy(out, block_ids, matched * 4u);
        }
    } else {
        for (; matched < limit; matched++) {
            const uint32_t *keys = first_tokens + matched * n_siblings;
            const uint32_t *blk = q + matched * B, key = blk[0];
            uint32_t lo = 0, hi = n_siblings;
            while (lo < hi) { /* the siblings' first tokens */
                uint32_t mid = (lo + hi) / 2;
                if (keys[mid] < key) lo = mid + 1;
                else hi = mid;
            }
            size_t at = matched * n_siblings + lo;
            if (lo == n_siblings || keys[lo] != key || !block_equal(blocks + at * B, blk))
                break;
            out[matched] = block_ids[at];
        }
    }
    PyBuffer_Release(&view);
    return PyLong_FromSize_t(matched);
}

static PyObject *floor_noop(PyObject *mod, PyObject *arg) {
    (void)mod;
    (void)arg;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ the hashes' floor */

static unsigned char sink[32];

static int each(PyObject *list, void (*fn)(const void *, size_t, uint64_t), uint64_t seed) {
    if (!PyList_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "a list of bytes");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
        PyObject *b = PyList_GET_ITEM(list, i);
        if (!PyBytes_Check(b)) {
            PyErr_SetString(PyExc_TypeError, "a list of bytes");
            return -1;
        }
        fn(PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b), seed);
    }
    return 0;
}

static void sha256_one(const void *d, size_t n, uint64_t seed) {
    (void)seed;
    SHA256_CTX c;
    SHA256_Init(&c);
    SHA256_Update(&c, d, n);
    SHA256_Final(sink, &c);
}

static void xxh3_64_one(const void *d, size_t n, uint64_t seed) {
    uint64_t h = XXH3_64bits_withSeed(d, n, seed);
    memcpy(sink, &h, 8);
}

static void xxh3_128_one(const void *d, size_t n, uint64_t seed) {
    (void)seed;
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(d, n));
    memcpy(sink, c.digest, 16);
}

static PyObject *floor_sha256_each(PyObject *mod, PyObject *list) {
    (void)mod;
    if (each(list, sha256_one, 0) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *floor_xxh3_64_each(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *list;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OK", &list, &seed)) return NULL;
    if (each(list, xxh3_64_one, seed) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *floor_xxh3_128_each(PyObject *mod, PyObject *list) {
    (void)mod;
    if (each(list, xxh3_128_one, 0) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"load", floor_load, METH_VARARGS, "load(levels, siblings, tokens, ids): the shape."},
    {"walk", floor_walk, METH_O, "walk(query): the matcher's floor; the blocks matched."},
    {"noop", floor_noop, METH_O, "noop(x): a C call that does nothing."},
    {"sha256_each", floor_sha256_each, METH_O, "sha256_each(list of bytes)."},
    {"xxh3_64_each", floor_xxh3_64_each, METH_VARARGS, "xxh3_64_each(list of bytes, seed)."},
    {"xxh3_128_each", floor_xxh3_128_each, METH_O, "xxh3_128_each(list of bytes)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kachedb_floor", "The C twin's floors (benchmarks/floor.py).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__kachedb_floor(void) { return PyModule_Create(&module); }
