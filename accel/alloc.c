/* The block allocator: smallest-free-id-first (reference.allocator, R-ALLOC-*).
 *
 * A bitmap of free ids (1 bit per block) plus a summary bitmap (1 bit per bitmap
 * word that still has a free id) and a hint: the lowest summary word that may be
 * nonzero.  Taking the smallest free id is a couple of count-trailing-zeros; freeing
 * sets two bits and lowers the hint.  About 0.13 bytes per block.
 */
#include "alloc.h"

#ifdef KACHEDB_RADIX_TEST_HOOKS
#include "corrupt.h"
#endif

static inline unsigned ctz64(uint64_t x) { return (unsigned)__builtin_ctzll(x); }

int ba_init(BitAlloc *a, uint32_t n) {
    a->num_blocks = n;
    a->nwords = (n + 63u) / 64u;
    a->nsummary = (a->nwords + 63u) / 64u;
    a->bits = PyMem_Calloc(a->nwords, sizeof(uint64_t));
    a->summary = PyMem_Calloc(a->nsummary, sizeof(uint64_t));
    if (a->bits == NULL || a->summary == NULL) {
        ba_fini(a);
        PyErr_NoMemory();
        return -1;
    }
    for (uint32_t w = 0; w < a->nwords; w++) {
        uint32_t lo = w * 64u;
        uint32_t count = n - lo >= 64u ? 64u : n - lo;
        a->bits[w] = count == 64u ? ~(uint64_t)0 : (((uint64_t)1 << count) - 1u);
        a->summary[w >> 6] |= (uint64_t)1 << (w & 63);
    }
    a->free_count = n;
    a->hint = 0;
    return 0;
}

int ba_copy(BitAlloc *dst, const BitAlloc *src) {
    *dst = *src;
    dst->bits = PyMem_Malloc((size_t)src->nwords * sizeof(uint64_t));
    dst->summary = PyMem_Malloc((size_t)src->nsummary * sizeof(uint64_t));
    if (dst->bits == NULL || dst->summary == NULL) {
        ba_fini(dst);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(dst->bits, src->bits, (size_t)src->nwords * sizeof(uint64_t));
    memcpy(dst->summary, src->summary, (size_t)src->nsummary * sizeof(uint64_t));
    return 0;
}

void ba_fini(BitAlloc *a) {
    PyMem_Free(a->bits);
    PyMem_Free(a->summary);
    a->bits = NULL;
    a->summary = NULL;
}

uint32_t ba_take_smallest(BitAlloc *a) {
    uint32_t s = a->hint;
    while (a->summary[s] == 0) s++;
    a->hint = s;
    uint32_t w = s * 64u + ctz64(a->summary[s]);
    uint64_t word = a->bits[w];
    uint32_t id = w * 64u + ctz64(word);
    word &= word - 1u;
    a->bits[w] = word;
    if (word == 0) a->summary[s] &= ~((uint64_t)1 << (w & 63));
    a->free_count--;
    return id;
}

void ba_put(BitAlloc *a, uint32_t id) {
    uint32_t w = id >> 6;
    a->bits[w] |= (uint64_t)1 << (id & 63);
    a->summary[w >> 6] |= (uint64_t)1 << (w & 63);
    if ((w >> 6) < a->hint) a->hint = w >> 6;
    a->free_count++;
}

size_t ba_bytes(const BitAlloc *a) {
    return ((size_t)a->nwords + a->nsummary) * sizeof(uint64_t);
}

const char *ba_check(const BitAlloc *a) {
    uint64_t count = 0;
    for (uint32_t w = 0; w < a->nwords; w++) {
        uint64_t word = a->bits[w];
        count += (uint64_t)__builtin_popcountll(word);
        int flagged = (int)((a->summary[w >> 6] >> (w & 63)) & 1u);
        if (flagged != (word != 0)) return "allocator: summary bitmap disagrees with the free bitmap";
        if ((w >> 6) < a->hint && word != 0) return "allocator: a free id lies below the search hint";
    }
    if (a->num_blocks & 63u) { /* the last word's ids past the pool */
        uint64_t pad = ~(((uint64_t)1 << (a->num_blocks & 63u)) - 1u);
        if (a->bits[a->nwords - 1] & pad) return "allocator: an id outside the pool is free";
    }
    if (count != a->free_count) return "allocator: free + allocated != num_blocks";
    return NULL;
}

/* ------------------------------------------------------------------ BlockAllocator type */

typedef struct {
    PyObject_HEAD
    BitAlloc a;
} AllocObject;

/* 1: an int (not bool) in [0, limit), stored in *out; 0: not. */
static int exact_index(PyObject *obj, uint64_t limit, uint32_t *out) {
    if (!PyLong_Check(obj) || PyBool_Check(obj)) return 0;
    int overflow = 0;
    long long v = int_value(obj, &overflow);
    if (overflow || v < 0 || (uint64_t)v >= limit) return 0;
    *out = (uint32_t)v;
    return 1;
}

/* Parse a count argument: an int >= 0 (bool refused). Huge ints saturate. */
static int parse_count(PyObject *obj, const char *what, uint64_t *out) {
    if (!PyLong_Check(obj) || PyBool_Check(obj)) goto bad;
    int overflow = 0;
    long long v = int_value(obj, &overflow);
    if (overflow < 0 || (!overflow && v < 0)) goto bad;
    *out = overflow > 0 ? UINT64_MAX : (uint64_t)v;
    return 0;
bad:
    PyErr_Format(G.InvalidArgumentError, "%s must be an int >= 0, got %R", what, obj);
    return -1;
}

static PyObject *Alloc_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"num_blocks", NULL};
    PyObject *n_obj;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:BlockAllocator", kwlist, &n_obj)) return NULL;
    uint32_t n = 0;
    /* R-LIMIT-1 (reference/limits.py): the reference's cap, with its error class. */
    if (!exact_index(n_obj, (1u << 24) + 1u, &n) || n < 1) {
        PyErr_Format(G.InvalidArgumentError,
                     "num_blocks must be an int from 1 to 16,777,216 (2**24, R-LIMIT-1), got %R",
                     n_obj);
        return NULL;
    }
    AllocObject *self = (AllocObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    if (ba_init(&self->a, n) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void Alloc_dealloc(AllocObject *self) {
    ba_fini(&self->a);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Alloc_get_num_blocks(AllocObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLong(self->a.num_blocks);
}
static PyObject *Alloc_get_free_count(AllocObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLong(self->a.free_count);
}
static PyObject *Alloc_get_allocated_count(AllocObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLong(self->a.num_blocks - self->a.free_count);
}

static int check_id(AllocObject *self, PyObject *obj, uint32_t *out) {
    if (!exact_index(obj, self->a.num_blocks, out)) {
        PyErr_Format(G.ForeignBlockError,
                     "%R is not a block id of this pool (ids are 0..%u)", obj,
                     self->a.num_blocks - 1u);
        return -1;
    }
    return 0;
}

static PyObject *Alloc_is_allocated(AllocObject *self, PyObject *arg) {
    uint32_t id;
    if (check_id(self, arg, &id) < 0) return NULL;
    return PyBool_FromLong(!ba_is_free(&self->a, id));
}

static PyObject *Alloc_allocate(AllocObject *self, PyObject *arg) {
    uint64_t count;
    if (parse_count(arg, "block count", &count) < 0) return NULL;
    if (count > self->a.free_count) {
        PyErr_Format(G.OutOfBlocksError, "asked for %R blocks but only %u of %u are free", arg,
                     self->a.free_count, self->a.num_blocks);
        return NULL;
    }
    PyObject *list = PyList_New((Py_ssize_t)count);
    if (list == NULL) return NULL;
    /* Build every int first so a MemoryError takes nothing. */
    uint32_t *ids = PyMem_Malloc((size_t)(count ? count : 1) * sizeof(uint32_t));
    if (ids == NULL) {
        Py_DECREF(list);
        return PyErr_NoMemory();
    }
    for (uint64_t i = 0; i < count; i++) ids[i] = ba_take_smallest(&self->a);
    for (uint64_t i = 0; i < count; i++) {
        PyObject *v = PyLong_FromUnsignedLong(ids[i]);
        if (v == NULL) {
            for (uint64_t j = 0; j < count; j++) ba_put(&self->a, ids[j]);
            PyMem_Free(ids);
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, v);
    }
    PyMem_Free(ids);
    return list;
}

static PyObject *Alloc_free(AllocObject *self, PyObject *arg) {
    PyObject *ids = PySequence_List(arg);
    if (ids == NULL) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(ids);
    uint32_t *vals = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(uint32_t));
    if (vals == NULL) {
        Py_DECREF(ids);
        return PyErr_NoMemory();
    }
    /* Check every id first (R-ALLOC-4). Tentatively mark each checked id free, so an id
     * given twice is caught as "already free" exactly like the reference's seen-set;
     * on error the marks are undone. */
    Py_ssize_t i = 0;
    for (; i < n; i++) {
        uint32_t id;
        if (check_id(self, PyList_GET_ITEM(ids, i), &id) < 0) goto undo;
        if (ba_is_free(&self->a, id)) {
            PyErr_Format(G.DoubleFreeError, "block %u is already free", id);
            goto undo;
        }
        vals[i] = id;
        ba_put(&self->a, id);
    }
    PyMem_Free(vals);
    Py_DECREF(ids);
    Py_RETURN_NONE;
undo:
    /* Re-take exactly the ids marked: clear their bits again. */
    for (Py_ssize_t j = 0; j < i; j++) {
        uint32_t id = vals[j];
        uint32_t w = id >> 6;
        self->a.bits[w] &= ~((uint64_t)1 << (id & 63));
        if (self->a.bits[w] == 0) self->a.summary[w >> 6] &= ~((uint64_t)1 << (w & 63));
        self->a.free_count--;
    }
    PyMem_Free(vals);
    Py_DECREF(ids);
    return NULL;
}

/* Take one free id out of the bitmap (the caller checked it is free). */
static void ba_take_id(BitAlloc *a, uint32_t id) {
    uint32_t w = id >> 6;
    a->bits[w] &= ~((uint64_t)1 << (id & 63));
    if (a->bits[w] == 0) a->summary[w >> 6] &= ~((uint64_t)1 << (w & 63));
    a->free_count--; /* the hint stays a lower bound of the lowest free word */
}

static PyObject *Alloc_take(AllocObject *self, PyObject *arg) {
    PyObject *ids = PySequence_List(arg);
    if (ids == NULL) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(ids);
    uint32_t *vals = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(uint32_t));
    if (vals == NULL) {
        Py_DECREF(ids);
        return PyErr_NoMemory();
    }
    /* Check every id first (R-ALLOC-1): take each as it is checked, so an id given twice
     * is caught as "not free" exactly like the reference's seen-set; on error the ids
     * taken are put back. */
    Py_ssize_t i = 0;
    for (; i < n; i++) {
        uint32_t id;
        if (check_id(self, PyList_GET_ITEM(ids, i), &id) < 0) goto undo;
        if (!ba_is_free(&self->a, id)) {
            PyErr_Format(G.OutOfBlocksError, "block %u is not free to take", id);
            goto undo;
        }
        vals[i] = id;
        ba_take_id(&self->a, id);
    }
    PyMem_Free(vals);
    return ids;
undo:
    for (Py_ssize_t j = 0; j < i; j++) ba_put(&self->a, vals[j]);
    PyMem_Free(vals);
    Py_DECREF(ids);
    return NULL;
}

static PyObject *Alloc_clone(AllocObject *self, PyObject *unused) {
    (void)unused;
    AllocObject *twin = (AllocObject *)Py_TYPE(self)->tp_alloc(Py_TYPE(self), 0);
    if (twin == NULL) return NULL;
    if (ba_copy(&twin->a, &self->a) < 0) {
        Py_DECREF(twin);
        return NULL;
    }
    return (PyObject *)twin;
}

static PyObject *free_ids_list(const BitAlloc *a) {
    PyObject *list = PyList_New(a->free_count);
    if (list == NULL) return NULL;
    Py_ssize_t k = 0;
    for (uint32_t w = 0; w < a->nwords; w++) {
        uint64_t word = a->bits[w];
        while (word) {
            uint32_t id = w * 64u + ctz64(word);
            word &= word - 1u;
            PyObject *v = PyLong_FromUnsignedLong(id);
            if (v == NULL) {
                Py_DECREF(list);
                return NULL;
            }
            PyList_SET_ITEM(list, k++, v);
        }
    }
    return list;
}

/* The `count` smallest free ids (fewer when fewer are free), ascending: what
 * ba_take_smallest would take next, read without taking.  O(count + nwords / 64). */
static PyObject *smallest_list(const BitAlloc *a, Py_ssize_t count) {
    Py_ssize_t n = count < (Py_ssize_t)a->free_count ? count : (Py_ssize_t)a->free_count;
    PyObject *list = PyList_New(n);
    if (list == NULL) return NULL;
    Py_ssize_t k = 0;
    for (uint32_t s = a->hint; k < n && s < a->nsummary; s++) {
        uint64_t words = a->summary[s];
        while (k < n && words) {
            uint32_t w = s * 64u + ctz64(words);
            words &= words - 1u;
            uint64_t word = a->bits[w];
            while (k < n && word) {
                PyObject *v = PyLong_FromUnsignedLong(w * 64u + ctz64(word));
                if (v == NULL) {
                    Py_DECREF(list);
                    return NULL;
                }
                word &= word - 1u;
                PyList_SET_ITEM(list, k++, v);
            }
        }
    }
    return list;
}

PyObject *ba_next_ids(const BitAlloc *a, PyObject *count) {
    uint64_t n;
    if (parse_count(count, "block count", &n) < 0) return NULL;
    return smallest_list(a, n < a->free_count ? (Py_ssize_t)n : (Py_ssize_t)a->free_count);
}

static PyObject *Alloc_next_ids(AllocObject *self, PyObject *count) {
    return ba_next_ids(&self->a, count);
}

static PyObject *Alloc_free_ids(AllocObject *self, PyObject *unused) {
    (void)unused;
    return free_ids_list(&self->a);
}

static PyObject *Alloc_check_invariants(AllocObject *self, PyObject *unused) {
    (void)unused;
    const char *msg = ba_check(&self->a);
    if (msg) {
        PyErr_SetString(G.InvariantViolation, msg);
        return NULL;
    }
    Py_RETURN_NONE;
}

#ifdef KACHEDB_RADIX_TEST_HOOKS /* the test build only */
static PyObject *Alloc_corrupt_check(AllocObject *self, PyObject *arg) {
    return alloc_corrupt_check(&self->a, arg);
}
#endif

static PyObject *Alloc_repr(AllocObject *self) {
    return PyUnicode_FromFormat("<accel.BlockAllocator %u free of %u>", self->a.free_count,
                                self->a.num_blocks);
}

static PyMethodDef Alloc_methods[] = {
    {"is_allocated", (PyCFunction)Alloc_is_allocated, METH_O,
     "is_allocated($self, block_id, /)\n--\n\n"
     "Whether ``block_id`` is currently allocated. O(1).\n\n"
     "Raises:\n    ForeignBlockError: ``block_id`` is not an id of this pool."},
    {"allocate", (PyCFunction)Alloc_allocate, METH_O,
     "allocate($self, count, /)\n--\n\n"
     "Take the ``count`` smallest free ids, in ascending order (R-ALLOC-2).\n\n"
     "All or nothing: on error no id is taken. Cost: O(count + num_blocks / 4096)\n"
     "(a two-level bitmap of the free ids).\n\n"
     "Raises:\n    InvalidArgumentError: ``count`` is not an int >= 0.\n"
     "    OutOfBlocksError: fewer than ``count`` ids are free."},
    {"take", (PyCFunction)Alloc_take, METH_O,
     "take($self, block_ids, /)\n--\n\n"
     "Take exactly these free ids, in the order given (for a tree that follows\n"
     "another's allocation, :meth:`RadixTree.choose_new_blocks`).\n\n"
     "All or nothing: every id is checked before any is taken (R-ALLOC-1). Cost:\n"
     "O(k) for k ids (a bitmap of the free ids).\n\n"
     "Raises:\n    ForeignBlockError: an id is not an int in ``[0, num_blocks)``.\n"
     "    OutOfBlocksError: an id is already allocated, or appears twice."},
    {"free", (PyCFunction)Alloc_free, METH_O,
     "free($self, block_ids, /)\n--\n\n"
     "Return ``block_ids`` to the pool.\n\n"
     "All or nothing (R-ALLOC-4): every id is checked before any is freed.\n"
     "Cost: O(k) for k ids.\n\n"
     "Raises:\n    ForeignBlockError: an id is not an int in ``[0, num_blocks)``.\n"
     "    DoubleFreeError: an id is already free, or appears twice."},
    {"clone", (PyCFunction)Alloc_clone, METH_NOARGS,
     "clone($self, /)\n--\n\nAn independent allocator in the same state. O(num_blocks / 64)."},
    {"next_ids", (PyCFunction)Alloc_next_ids, METH_O,
     "next_ids($self, count, /)\n--\n\n"
     "The ids ``allocate(count)`` would take: the ``count`` smallest free ids, ascending\n"
     "(R-ALLOC-2), fewer when fewer are free. Takes nothing. Cost: O(count + num_blocks /\n"
     "4096).\n\n"
     "Raises:\n    InvalidArgumentError: ``count`` is not an int >= 0."},
    {"free_ids", (PyCFunction)Alloc_free_ids, METH_NOARGS,
     "free_ids($self, /)\n--\n\nThe free ids, ascending. O(num_blocks / 64 + f) for f free ids."},
#ifdef KACHEDB_RADIX_TEST_HOOKS /* the test build only (corrupt.c) */
    {"_corrupt_check", (PyCFunction)Alloc_corrupt_check, METH_O,
     "_corrupt_check($self, kind, /)\n--\n\n"
     "Test hook: break one invariant (``kind``: alloc_summary, alloc_hint, alloc_pad or\n"
     "alloc_count), run check_invariants()'s check, undo the break and return the check's\n"
     "message (None if it let the break pass).\n\n"
     "Raises:\n    ValueError: an unknown kind, or one this allocator cannot show."},
#endif
    {"check_invariants", (PyCFunction)Alloc_check_invariants, METH_NOARGS,
     "check_invariants($self, /)\n--\n\n"
     "Assert the invariants of :mod:`kachedb_radix.reference.allocator`'s module docstring,\n"
     "and that the summary bitmap and the search hint agree with the free bitmap.\n"
     "O(num_blocks / 64).\n\n"
     "Raises:\n    InvariantViolation: an invariant is broken."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Alloc_getset[] = {
    {"num_blocks", (getter)Alloc_get_num_blocks, NULL, "Pool size. O(1).", NULL},
    {"free_count", (getter)Alloc_get_free_count, NULL, "Number of free blocks. O(1).", NULL},
    {"allocated_count", (getter)Alloc_get_allocated_count, NULL,
     "Number of allocated blocks. O(1).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject BlockAllocator_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kachedb_radix.accel._radix.BlockAllocator",
    .tp_basicsize = sizeof(AllocObject),
    .tp_dealloc = (destructor)Alloc_dealloc,
    .tp_repr = (reprfunc)Alloc_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "BlockAllocator(num_blocks)\n--\n\n"
              "A fixed pool of block ids, handed out smallest-first.\n\n"
              "Args:\n    num_blocks: pool size, an int from 1 to 2**24 (R-LIMIT-1).\n\n"
              "Raises:\n    InvalidArgumentError: ``num_blocks`` is not an int from 1 to 2**24.\n\n"
              "Cost: O(num_blocks / 64) to build (a bitmap of the free ids).",
    .tp_methods = Alloc_methods,
    .tp_getset = Alloc_getset,
    .tp_new = Alloc_new,
};

PyObject *ba_free_ids(const BitAlloc *a) { return free_ids_list(a); }
