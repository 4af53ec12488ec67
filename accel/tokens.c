/* Token input (reference.tokens, R-TOK-*): validation in the reference's exact order,
 * exposing the tokens as contiguous uint32 without copying where possible.
 *
 *   list / tuple (and subclasses): one pass over the items that checks each in index
 *       order (non-int or bool -> TokenTypeError, outside [0, 2**32) ->
 *       TokenRangeError) and stores it as uint32 in the tree's scratch buffer.  The
 *       spec validates the whole input on every call (R-TOK-5), so every item is read
 *       anyway; storing it as it is checked costs one 4-byte write, and gives the walk
 *       contiguous blocks to hash and memcmp.
 *   buffers: the format (uint32 / int32 / int64, native order) -> TokenTypeError,
 *       then the layout (1-D, C-contiguous) -> TokenLayoutError, then the values.
 *       A uint32 buffer is used in place (no scan at all); an int32 buffer is scanned
 *       for negatives and then used in place; int64 is range-checked while it is
 *       narrowed into scratch.  A misaligned buffer is copied first.
 *   anything else: reference.tokens.as_token_list (raises the reference's errors, or
 *       returns a list of int that is then converted as above).
 */
#include "tokens.h"

#define TOKEN_LIMIT 4294967296LL

enum { FMT_BAD = 0, FMT_U32, FMT_I32, FMT_I64 };

static int classify_format(const char *fmt, Py_ssize_t itemsize) {
    if (fmt != NULL && fmt[0] == 'I' && fmt[1] == 0 && itemsize == 4) return FMT_U32; /* NumPy's */
    if (fmt == NULL) fmt = "B";
    size_t len = strlen(fmt);
    if (len == 0) return FMT_BAD;
    if (len == 2) {
        char order = fmt[0];
#if PY_LITTLE_ENDIAN
        const char native = '<';
#else
        const char native = '>';
#endif
        if (order != '@' && order != '=' && order != native) return FMT_BAD;
    } else if (len != 1) {
        return FMT_BAD;
    }
    char c = fmt[len - 1];
    if (itemsize == 4 && (c == 'I' || c == 'L')) return FMT_U32;
    if (itemsize == 4 && (c == 'i' || c == 'l')) return FMT_I32;
    if (itemsize == 8 && (c == 'l' || c == 'q')) return FMT_I64;
    return FMT_BAD;
}

static void range_error_value(Py_ssize_t index, long long v);

/* Narrow `count` int64 tokens at src (any alignment) into dst; returns the OR of their
 * high halves (nonzero: one of them is out of range). */
static inline uint64_t narrow_block(uint32_t *dst, const char *src, uint32_t count) {
    uint64_t high = 0;
    uint32_t i = 0;
#if defined(__SSE2__)
    /* Four tokens a step: the low halves of two pairs packed into one store, the high
     * halves OR-ed together. */
    __m128i hi = _mm_setzero_si128();
    for (; i + 4 <= count; i += 4) {
        __m128i a = _mm_loadu_si128((const __m128i *)(src + (size_t)i * 8));
        __m128i b = _mm_loadu_si128((const __m128i *)(src + (size_t)i * 8 + 16));
        __m128i lo = _mm_castps_si128(
            _mm_shuffle_ps(_mm_castsi128_ps(a), _mm_castsi128_ps(b), _MM_SHUFFLE(2, 0, 2, 0)));
        hi = _mm_or_si128(hi, _mm_castps_si128(_mm_shuffle_ps(
                                  _mm_castsi128_ps(a), _mm_castsi128_ps(b), _MM_SHUFFLE(3, 1, 3, 1))));
        _mm_storeu_si128((__m128i *)(dst + i), lo);
    }
    uint64_t lanes[2];
    _mm_storeu_si128((__m128i *)lanes, hi);
    high = lanes[0] | lanes[1];
#endif
    for (; i < count; i++) {
        uint64_t x;
        memcpy(&x, src + (size_t)i * 8, 8);
        high |= x >> 32;
        dst[i] = (uint32_t)x;
    }
    return high;
}

/* Narrow n int64 tokens at src (any alignment) into dst, range-checking each (R-TOK-5):
 * 0, or -1 with TokenRangeError naming the first bad one.  Blocks of 64 tokens are
 * narrowed with one range test each (no branch per token, so the speed does not hang on
 * how the loop happens to be laid out); a failing block is searched for its first bad
 * token. */
static int narrow_i64(uint32_t *dst, const char *src, Py_ssize_t n) {
    enum { STEP = 64 };
    for (Py_ssize_t at = 0; at < n; at += STEP) {
        Py_ssize_t count = n - at < STEP ? n - at : STEP;
        if (narrow_block(dst + at, src + at * 8, (uint32_t)count) == 0) continue;
        for (Py_ssize_t i = at; i < at + count; i++) {
            int64_t x;
            memcpy(&x, src + i * 8, 8);
            if ((uint64_t)x >= (uint64_t)TOKEN_LIMIT) {
                range_error_value(i, (long long)x);
                return -1;
            }
        }
    }
    return 0;
}

static uint32_t *claim(TreeObject *tree, Py_ssize_t n, Tokens *out) {
    size_t need = (size_t)(n ? n : 1);
    if (tree != NULL && !tree->tok_busy) {
        if (tree->scratch_tok_cap < need) {
            size_t cap = tree->scratch_tok_cap ? tree->scratch_tok_cap : 256;
            while (cap < need) cap *= 2;
            uint32_t *p = PyMem_Realloc(tree->scratch_tok, cap * sizeof(uint32_t));
            if (p == NULL) {
                PyErr_NoMemory();
                return NULL;
            }
            tree->scratch_tok = p;
            tree->scratch_tok_cap = cap;
        }
        tree->tok_busy = 1;
        out->scratch = 1;
        return tree->scratch_tok;
    }
    uint32_t *p = PyMem_Malloc(need * sizeof(uint32_t));
    if (p == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    out->owned = p;
    return p;
}

static void type_error_at(Py_ssize_t index, PyObject *item) {
    PyErr_Format(G.TokenTypeError, "token %zd is %R (%s): token ids must be int", index, item,
                 Py_TYPE(item)->tp_name);
}

static void range_error_at(Py_ssize_t index, PyObject *item) {
    PyErr_Format(G.TokenRangeError, "token %zd is %R: token ids must be in [0, 2**32)", index,
                 item);
}

static void range_error_value(Py_ssize_t index, long long v) {
    PyErr_Format(G.TokenRangeError, "token %zd is %lld: token ids must be in [0, 2**32)", index,
                 v);
}

/* Check and convert items[0..n) into dst. */
static int convert_items(PyObject *const *items, Py_ssize_t n, uint32_t *dst) {
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = items[i];
#if PY_VERSION_HEX < 0x030C0000
        if (PyLong_CheckExact(item)) {
            /* CPython 3.11 int layout: sign in ob_size, 30-bit digits. */
            Py_ssize_t size = Py_SIZE(item);
            const digit *d = ((PyLongObject *)item)->ob_digit;
            if (size == 1) {
                dst[i] = (uint32_t)d[0];
                continue;
            }
            if (size == 0) {
                dst[i] = 0;
                continue;
            }
            if (size == 2) {
                uint64_t v = (uint64_t)d[0] | ((uint64_t)d[1] << PyLong_SHIFT);
                if (v < (uint64_t)TOKEN_LIMIT) {
                    dst[i] = (uint32_t)v;
                    continue;
                }
            }
            range_error_at(i, item);
            return -1;
        }
#endif
        if (!PyLong_Check(item) || PyBool_Check(item)) {
            type_error_at(i, item);
            return -1;
        }
        int overflow = 0;
        long long v = int_value(item, &overflow);
        if (overflow || v < 0 || v >= TOKEN_LIMIT) {
            range_error_at(i, item);
            return -1;
        }
        dst[i] = (uint32_t)v;
    }
    return 0;
}

static int from_items(TreeObject *tree, PyObject *seq, Tokens *out) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *const *items = (PyObject *const *)PySequence_Fast_ITEMS(seq);
    uint32_t *dst = claim(tree, n, out);
    if (dst == NULL) return -1;
    out->data = dst;
    out->n = n;
    return convert_items(items, n, dst);
}

/* The tuple of n Py_ssize_t (a buffer's shape or strides), or NULL with MemoryError. */
static PyObject *u_ssize_tuple(const Py_ssize_t *values, int n) {
    PyObject *t = PyTuple_New(n);
    for (int d = 0; t != NULL && d < n; d++) {
        PyObject *v = PyLong_FromSsize_t(values[d]);
        if (v == NULL) Py_CLEAR(t);
        else PyTuple_SET_ITEM(t, d, v);
    }
    return t;
}

/* `contiguous`: the export was asked for a C-contiguous buffer, so it is one. */
static inline int from_buffer(TreeObject *tree, Tokens *out, int contiguous) {
    Py_buffer *v = &out->view;
    int kind = classify_format(v->format, v->itemsize);
    if (kind == FMT_BAD) {
        PyErr_Format(G.TokenTypeError,
                     "token buffer has item format '%s' of %zd bytes: expected uint32, int32 or "
                     "int64 in native byte order",
                     v->format ? v->format : "B", v->itemsize);
        return -1;
    }
    /* PyBUF_FULL_RO asks for the shape and the strides: an exporter fills both. */
    if (v->ndim != 1 || !(contiguous || PyBuffer_IsContiguous(v, 'C'))) {
        PyObject *shape = u_ssize_tuple(v->shape, v->ndim);
        PyObject *strides = shape ? u_ssize_tuple(v->strides, v->ndim) : NULL;
        if (strides != NULL)
            PyErr_Format(G.TokenLayoutError,
                         "token buffer must be one-dimensional and C-contiguous, got ndim=%d, "
                         "shape=%R, strides=%R",
                         v->ndim, shape, strides);
        Py_XDECREF(shape);
        Py_XDECREF(strides);
        return -1;
    }
    Py_ssize_t n = v->shape[0];
    out->n = n;
    uintptr_t addr = (uintptr_t)v->buf;
    if (kind == FMT_I64) {
        uint32_t *dst = claim(tree, n, out);
        if (dst == NULL) return -1;
        if (narrow_i64(dst, (const char *)v->buf, n) < 0) return -1;
        out->data = dst;
        return 0;
    }
    const uint32_t *src;
    if ((addr & 3u) == 0) {
        src = (const uint32_t *)v->buf;
    } else {
        uint32_t *dst = claim(tree, n, out);
        if (dst == NULL) return -1;
        memcpy(dst, v->buf, (size_t)n * 4u);
        src = dst;
    }
    if (kind == FMT_I32) {
        /* int32 and uint32 share a representation for values >= 0. */
        uint32_t any_negative = 0;
        for (Py_ssize_t i = 0; i < n; i++) any_negative |= src[i];
        if (any_negative & 0x80000000u) {
            for (Py_ssize_t i = 0; i < n; i++) {
                if (src[i] & 0x80000000u) {
                    range_error_value(i, (long long)(int32_t)src[i]);
                    return -1;
                }
            }
        }
    }
    out->data = src;
    return 0;
}

static inline int tokens_get_impl(TreeObject *tree, PyObject *obj, Tokens *out) {
    out->data = NULL; /* the view is the exporter's to fill */
    out->n = 0;
    out->has_view = out->scratch = 0;
    out->owned = NULL;
    if (PyList_Check(obj) || PyTuple_Check(obj)) return from_items(tree, obj, out);
    PyBufferProcs *procs = Py_TYPE(obj)->tp_as_buffer;
    if (procs != NULL && procs->bf_getbuffer != NULL) { /* PyObject_CheckBuffer, inline */
        /* First the request a token array meets (its format, C-contiguous: no contiguity
         * to check); an exporter that refuses it is asked again as before, for the shape
         * and strides the reference's order of checks and messages needs. */
        if (PyObject_GetBuffer(obj, &out->view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) == 0) {
            out->has_view = 1;
            return from_buffer(tree, out, 1);
        }
        PyErr_Clear();
        if (PyObject_GetBuffer(obj, &out->view, PyBUF_FULL_RO) == 0) {
            out->has_view = 1;
            return from_buffer(tree, out, 0);
        }
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) return -1;
        PyErr_Clear();
    }
    /* Other sequences, and every error for non-containers: the reference decides. */
    PyObject *list = PyObject_CallOneArg(G.as_token_list, obj);
    if (list == NULL) return -1;
    if (!PyList_Check(list)) {
        Py_DECREF(list);
        PyErr_SetString(PyExc_SystemError, "as_token_list did not return a list");
        return -1;
    }
    int rc = from_items(tree, list, out);
    Py_DECREF(list);
    return rc;
}

int tokens_get(TreeObject *tree, PyObject *obj, Tokens *out) {
    if (tokens_get_impl(tree, obj, out) < 0) {
        tokens_release(tree, out);
        return -1;
    }
    return 0;
}

int tokens_get_plain(PyObject *obj, Tokens *out) { return tokens_get(NULL, obj, out); }

void tokens_release_slow(TreeObject *tree, Tokens *tk) {
    if (tk->has_view) {
        PyBuffer_Release(&tk->view);
        tk->has_view = 0;
    }
    if (tk->scratch) { /* only a call on a tree claims its scratch */
        tree->tok_busy = 0;
        tk->scratch = 0;
    }
    if (tk->owned) {
        PyMem_Free(tk->owned);
        tk->owned = NULL;
    }
    tk->data = NULL;
}
