/* The floors the C twin is measured against (benchmarks/floor.py builds this file with
 * the extension's compiler and flags, as the module _kachedb_floor).
 *
 * A floor is the least a call can do and still do the job: called from Python the way
 * the twin is (one C function, its argument a uint32 array), it does only the work the
 * answer needs, on data laid out for nothing else.
 *
 *   walk(query)         the matcher's floor: the query's buffer taken and its format checked
 *                       (uint32, one dimension: what any matcher must know), then the
 *                       walk down the least tree that holds the shape -- per level a
 *                       binary search of a node's children's first tokens, the block's
 *                       comparison and the child's pointer followed (one memcmp over the
 *                       rest of a long edge) -- the matched ids copied out; returns the
 *                       count (a small int: nothing allocated).  load(levels, siblings,
 *                       tokens, ids, path) sets the shape up.
 *   walk_stamp(query), walk_stamp_result(query)
 *                       the walk and what a match must also do: stamp the matched blocks
 *                       (R-LRU-1), and return the ids in a new object -- to tell how much
 *                       of the twin's cost beyond the floor those are.
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
 * The shape, as the least a tree can be: a node per level holding its children's first
 * tokens, their blocks and ids inline, sorted by first token, and a pointer to each
 * child's node (NULL: a leaf), so each level is found through the one before it, as in
 * any tree; or, with siblings == 0, one edge of `levels` blocks (tokens contiguous).
 * B = 16. */

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

/* A node: its n children's first tokens, ids and nodes, then their blocks -- all in one
 * record, the records of a path in one allocation, in path order (the tree at its most
 * compact: a level's search touches its keys' line and the found block's). */
typedef struct FNode {
    uint32_t n;
    uint32_t keys[8];             /* sorted */
    uint32_t ids[8];
    const struct FNode *child[8]; /* NULL: a leaf */
    uint32_t tok[8 * B];
} FNode;

static FNode *arena;
static const FNode *root;
static uint32_t *edge, *edge_ids, edge_blocks;
static uint32_t out[1u << 16];

/* load(levels, siblings, tokens, ids, path): level l's `siblings` children (tokens and
 * ids in sorted order, at most 8), the path going on through child path[l]; siblings ==
 * 0: one edge of `levels` blocks. */
static PyObject *floor_load(PyObject *mod, PyObject *args) {
    (void)mod;
    unsigned int levels, siblings;
    Py_buffer tok, ids, path;
    if (!PyArg_ParseTuple(args, "IIy*y*y*", &levels, &siblings, &tok, &ids, &path)) return NULL;
    size_t per = siblings ? siblings : 1u;
    int ok = levels >= 1 && levels <= (1u << 16) && siblings <= 8 &&
             (size_t)tok.len == (size_t)levels * per * B * 4u &&
             (size_t)ids.len == (size_t)levels * per * 4u && (size_t)path.len == (size_t)levels * 4u;
    PyMem_Free(arena);
    PyMem_Free(edge);
    PyMem_Free(edge_ids);
    arena = NULL;
    root = NULL;
    edge = edge_ids = NULL;
    const uint32_t *t = tok.buf, *d = ids.buf, *p = path.buf;
    if (ok && siblings == 0) {
        edge = PyMem_Malloc((size_t)tok.len);
        edge_ids = PyMem_Malloc((size_t)ids.len);
        ok = edge && edge_ids;
        if (ok) {
            memcpy(edge, t, (size_t)tok.len);
            memcpy(edge_ids, d, (size_t)ids.len);
            edge_blocks = levels;
        }
    } else if (ok) {
        arena = PyMem_Calloc(levels, sizeof(FNode));
        ok = arena != NULL;
        for (uint32_t l = 0; ok && l < levels; l++) {
            FNode *node = &arena[l];
            node->n = siblings;
            for (uint32_t s = 0; s < siblings; s++) {
                const uint32_t *blk = t + ((size_t)l * siblings + s) * B;
                memcpy(node->tok + (size_t)s * B, blk, B * 4u);
                node->keys[s] = blk[0];
                node->ids[s] = d[(size_t)l * siblings + s];
            }
            if (l + 1 < levels) node->child[p[l] < siblings ? p[l] : 0] = &arena[l + 1];
        }
        root = arena;
    }
    PyBuffer_Release(&tok);
    PyBuffer_Release(&ids);
    PyBuffer_Release(&path);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "load(levels, siblings, tokens, ids, path): sizes disagree");
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
    size_t limit = (size_t)view.shape[0] / B, matched = 0;
    if (edge != NULL) { /* one edge: a first block, then one memcmp over the rest */
        if (limit > edge_blocks) limit = edge_blocks;
        if (limit > 0 && block_equal(edge, q)) {
            matched = limit;
            if (limit > 1 && memcmp(edge + B, q + B, (limit - 1) * B * 4u) != 0) {
                matched = 1;
                while (block_equal(edge + matched * B, q + matched * B)) matched++;
            }
            memcpy(out, edge_ids, matched * 4u);
        }
    } else {
        for (const FNode *node = root; node != NULL && matched < limit; matched++) {
            const uint32_t *blk = q + matched * B, key = blk[0];
            uint32_t lo = 0, hi = node->n;
            while (lo < hi) { /* the children's first tokens */
                uint32_t mid = (lo + hi) / 2;
                if (node->keys[mid] < key) lo = mid + 1;
                else hi = mid;
            }
            if (lo == node->n || node->keys[lo] != key || !block_equal(node->tok + lo * B, blk))
                break;
            out[matched] = node->ids[lo];
            node = node->child[lo];
        }
    }
    PyBuffer_Release(&view);
    return PyLong_FromSize_t(matched);
}

/* The walk, then what a match must also do and the bare walk leaves out: stamp the matched
 * blocks with a new clock time (R-LRU-1; an array of stamps by block id, as the twin's),
 * and, for walk_stamp_result, hand the ids back in a new object (a bytes of them). */
static uint64_t stamps[1u << 16], clock_now;

static PyObject *floor_walk_stamp(PyObject *mod, PyObject *query) {
    PyObject *found = floor_walk(mod, query);
    if (found == NULL) return NULL;
    size_t matched = PyLong_AsSize_t(found);
    uint64_t now = ++clock_now;
    for (size_t i = 0; i < matched; i++) stamps[out[i]] = now;
    return found;
}

static PyObject *floor_walk_stamp_result(PyObject *mod, PyObject *query) {
    PyObject *found = floor_walk_stamp(mod, query);
    if (found == NULL) return NULL;
    size_t matched = PyLong_AsSize_t(found);
    Py_DECREF(found);
    return PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)(matched * 4u));
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
    {"walk_stamp", floor_walk_stamp, METH_O, "walk(query), the matched blocks stamped."},
    {"walk_stamp_result", floor_walk_stamp_result, METH_O,
     "walk_stamp(query), the ids returned in a new bytes object."},
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
