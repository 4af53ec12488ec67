/* Result objects, the block-id sequence and leases (reference.results, reference.lease).
 *
 * MatchResult and InsertResult are variable-sized objects that hold their block ids
 * inline as uint32 (one allocation per call, no Python int built).  ``.blocks``,
 * ``.allocated`` and ``.evicted`` are ``Blocks`` views over that storage: a read-only
 * Sequence[int] (len, indexing, slicing, iteration, ``in``, index/count), equal to
 * the tuple of the same ids (and hashing like it), exporting a uint32 buffer so
 * ``numpy.frombuffer(r.blocks, numpy.uint32)`` needs no copy.  Ints are made only
 * when an element is read.  None of these objects is GC-tracked: they cannot be part
 * of a reference cycle.
 *
 * A Lease is GC-tracked (it and its tree refer to each other, as in the reference).
 */
#include "objects.h"

#include "tree.h"

#include <structmember.h>

PyObject *u32_list(const uint32_t *ids, Py_ssize_t n) {
    PyObject *list = PyList_New(n);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromUnsignedLong(ids[i]);
        if (v == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, v);
    }
    return list;
}

static PyObject *u32_tuple(const uint32_t *ids, Py_ssize_t n) {
    PyObject *t = PyTuple_New(n);
    if (t == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromUnsignedLong(ids[i]);
        if (v == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

/* ------------------------------------------------------------------ Blocks */

PyObject *blocks_view(PyObject *owner, const uint32_t *ids, Py_ssize_t n) {
    BlocksObject *b = PyObject_New(BlocksObject, &Blocks_Type);
    if (b == NULL) return NULL;
    Py_INCREF(owner);
    b->owner = owner;
    b->ids = ids;
    b->n = n;
    return (PyObject *)b;
}

static void Blocks_dealloc(BlocksObject *self) {
    Py_DECREF(self->owner);
    PyObject_Free(self);
}

static Py_ssize_t Blocks_len(BlocksObject *self) { return self->n; }

static PyObject *Blocks_item(BlocksObject *self, Py_ssize_t i) {
    if (i < 0 || i >= self->n) {
        PyErr_SetString(PyExc_IndexError, "Blocks index out of range");
        return NULL;
    }
    return PyLong_FromUnsignedLong(self->ids[i]);
}

static PyObject *Blocks_tuple(BlocksObject *self) { return u32_tuple(self->ids, self->n); }

static PyObject *Blocks_subscript(BlocksObject *self, PyObject *key) {
    if (PyIndex_Check(key)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred()) return NULL;
        if (i < 0) i += self->n;
        return Blocks_item(self, i);
    }
    if (PySlice_Check(key)) {
        Py_ssize_t start, stop, step;
        if (PySlice_Unpack(key, &start, &stop, &step) < 0) return NULL;
        Py_ssize_t len = PySlice_AdjustIndices(self->n, &start, &stop, step);
        PyObject *t = PyTuple_New(len);
        if (t == NULL) return NULL;
        for (Py_ssize_t k = 0, i = start; k < len; k++, i += step) {
            PyObject *v = PyLong_FromUnsignedLong(self->ids[i]);
            if (v == NULL) {
                Py_DECREF(t);
                return NULL;
            }
            PyTuple_SET_ITEM(t, k, v);
        }
        return t;
    }
    PyErr_Format(PyExc_TypeError, "Blocks indices must be integers or slices, not %s",
                 Py_TYPE(key)->tp_name);
    return NULL;
}

/* Where value == ids[i], as the tuple's comparison would say, from i = 0: the count of
 * matches (all) or the first match's index (-1 for none), or -2 with an error set.  An
 * exact int is compared by value, with no int made; anything else (a bool, a float, an
 * int subclass, ...) by its own == against the id as an int, like a tuple's element. */
static Py_ssize_t blocks_find(const BlocksObject *self, PyObject *value, int all) {
    Py_ssize_t found = all ? 0 : -1;
    if (PyLong_CheckExact(value)) {
        int overflow = 0;
        long long v = int_value(value, &overflow);
        for (Py_ssize_t i = 0; i < self->n && !overflow; i++) {
            if ((long long)self->ids[i] != v) continue;
            if (!all) return i;
            found++;
        }
        return found;
    }
    for (Py_ssize_t i = 0; i < self->n; i++) {
        PyObject *x = PyLong_FromUnsignedLong(self->ids[i]);
        if (x == NULL) return -2;
        int eq = PyObject_RichCompareBool(x, value, Py_EQ);
        Py_DECREF(x);
        if (eq < 0) return -2;
        if (eq == 0) continue;
        if (!all) return i;
        found++;
    }
    return found;
}

static int Blocks_contains(BlocksObject *self, PyObject *value) {
    Py_ssize_t at = blocks_find(self, value, 0);
    return at == -2 ? -1 : at >= 0;
}

static PyObject *Blocks_index(BlocksObject *self, PyObject *value) {
    Py_ssize_t at = blocks_find(self, value, 0);
    if (at >= 0) return PyLong_FromSsize_t(at);
    if (at == -1) PyErr_Format(PyExc_ValueError, "%R is not in Blocks", value);
    return NULL;
}

static PyObject *Blocks_count(BlocksObject *self, PyObject *value) {
    Py_ssize_t count = blocks_find(self, value, 1);
    return count == -2 ? NULL : PyLong_FromSsize_t(count);
}

/* a is the Blocks: Python calls a type's tp_richcompare with an instance of it first (the
 * reflected comparison swaps the operands). */
static PyObject *Blocks_richcompare(PyObject *a, PyObject *b, int op) {
    if (!PyObject_TypeCheck(b, &Blocks_Type) && !PyTuple_Check(b)) Py_RETURN_NOTIMPLEMENTED;
    if (PyObject_TypeCheck(b, &Blocks_Type) && (op == Py_EQ || op == Py_NE)) {
        BlocksObject *x = (BlocksObject *)a, *y = (BlocksObject *)b;
        int eq = x->n == y->n && (x->n == 0 || memcmp(x->ids, y->ids, (size_t)x->n * 4u) == 0);
        return PyBool_FromLong(op == Py_EQ ? eq : !eq);
    }
    PyObject *ta = Blocks_tuple((BlocksObject *)a);
    if (ta == NULL) return NULL;
    PyObject *tb = PyObject_TypeCheck(b, &Blocks_Type) ? Blocks_tuple((BlocksObject *)b) : Py_NewRef(b);
    if (tb == NULL) {
        Py_DECREF(ta);
        return NULL;
    }
    PyObject *r = PyObject_RichCompare(ta, tb, op);
    Py_DECREF(ta);
    Py_DECREF(tb);
    return r;
}

static Py_hash_t Blocks_hash(BlocksObject *self) {
    PyObject *t = Blocks_tuple(self);
    if (t == NULL) return -1;
    Py_hash_t h = PyObject_Hash(t);
    Py_DECREF(t);
    return h;
}

static PyObject *Blocks_repr(BlocksObject *self) {
    PyObject *t = Blocks_tuple(self);
    if (t == NULL) return NULL;
    PyObject *r = PyObject_Repr(t);
    Py_DECREF(t);
    return r;
}

/* sq_concat: a is the Blocks (Python calls the left operand's). */
static PyObject *Blocks_concat(PyObject *a, PyObject *b) {
    PyObject *ta = Blocks_tuple((BlocksObject *)a);
    if (ta == NULL) return NULL;
    PyObject *tb = PyObject_TypeCheck(b, &Blocks_Type) ? Blocks_tuple((BlocksObject *)b) : Py_NewRef(b);
    if (tb == NULL) {
        Py_DECREF(ta);
        return NULL;
    }
    PyObject *r = PySequence_Concat(ta, tb);
    Py_DECREF(ta);
    Py_DECREF(tb);
    return r;
}

static int Blocks_getbuffer(BlocksObject *self, Py_buffer *view, int flags) {
    if (flags & PyBUF_WRITABLE) {
        PyErr_SetString(PyExc_BufferError, "Blocks is read-only");
        view->obj = NULL;
        return -1;
    }
    static Py_ssize_t itemsize = 4;
    view->buf = (void *)self->ids;
    view->obj = Py_NewRef((PyObject *)self);
    view->len = self->n * 4;
    view->readonly = 1;
    view->itemsize = itemsize;
    view->format = (flags & PyBUF_FORMAT) ? "I" : NULL;
    view->ndim = 1;
    view->shape = (flags & PyBUF_ND) ? &self->n : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? &itemsize : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}

static PyObject *Blocks_iter(BlocksObject *self);

static PyObject *Blocks_tolist(BlocksObject *self, PyObject *unused) {
    (void)unused;
    return u32_list(self->ids, self->n);
}

static PyMethodDef Blocks_methods[] = {
    {"index", (PyCFunction)Blocks_index, METH_O,
     "index($self, value, /)\n--\n\nPosition of the first occurrence of ``value``. O(n)."},
    {"count", (PyCFunction)Blocks_count, METH_O,
     "count($self, value, /)\n--\n\nNumber of occurrences of ``value``. O(n)."},
    {"tolist", (PyCFunction)Blocks_tolist, METH_NOARGS,
     "tolist($self, /)\n--\n\nThe ids as a list of int. O(n)."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods Blocks_as_sequence = {
    .sq_length = (lenfunc)Blocks_len,
    .sq_concat = Blocks_concat,
    .sq_item = (ssizeargfunc)Blocks_item,
    .sq_contains = (objobjproc)Blocks_contains,
};

static PyMappingMethods Blocks_as_mapping = {
    .mp_length = (lenfunc)Blocks_len,
    .mp_subscript = (binaryfunc)Blocks_subscript,
};

static PyBufferProcs Blocks_as_buffer = {
    .bf_getbuffer = (getbufferproc)Blocks_getbuffer,
};

PyTypeObject Blocks_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kachedb_radix.accel._radix.Blocks",
    .tp_basicsize = sizeof(BlocksObject),
    .tp_dealloc = (destructor)Blocks_dealloc,
    .tp_repr = (reprfunc)Blocks_repr,
    .tp_as_sequence = &Blocks_as_sequence,
    .tp_as_mapping = &Blocks_as_mapping,
    .tp_as_buffer = &Blocks_as_buffer,
    .tp_hash = (hashfunc)Blocks_hash,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_SEQUENCE,
    .tp_doc = "An immutable sequence of block ids stored as uint32 (a Sequence[int]).\n\n"
              "Equal to (and hashing like) the tuple of the same ids; exports a read-only\n"
              "uint32 buffer. Ints are built only when elements are read.",
    .tp_richcompare = Blocks_richcompare,
    .tp_iter = (getiterfunc)Blocks_iter,
    .tp_methods = Blocks_methods,
};

typedef struct {
    PyObject_HEAD
    BlocksObject *seq;
    Py_ssize_t pos;
} BlocksIterObject;

static PyObject *Blocks_iter(BlocksObject *self) {
    BlocksIterObject *it = PyObject_New(BlocksIterObject, &BlocksIter_Type);
    if (it == NULL) return NULL;
    Py_INCREF(self);
    it->seq = self;
    it->pos = 0;
    return (PyObject *)it;
}

static void BlocksIter_dealloc(BlocksIterObject *self) {
    Py_DECREF(self->seq);
    PyObject_Free(self);
}

static PyObject *BlocksIter_next(BlocksIterObject *self) {
    if (self->pos >= self->seq->n) return NULL;
    return PyLong_FromUnsignedLong(self->seq->ids[self->pos++]);
}

static PyObject *BlocksIter_length_hint(BlocksIterObject *self, PyObject *unused) {
    (void)unused;
    return PyLong_FromSsize_t(self->seq->n - self->pos); /* pos never passes n */
}

static PyMethodDef BlocksIter_methods[] = {
    {"__length_hint__", (PyCFunction)BlocksIter_length_hint, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

PyTypeObject BlocksIter_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kachedb_radix.accel._radix.BlocksIterator",
    .tp_basicsize = sizeof(BlocksIterObject),
    .tp_dealloc = (destructor)BlocksIter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)BlocksIter_next,
    .tp_methods = BlocksIter_methods,
};

/* ------------------------------------------------------------------ MatchResult */

/* A match makes and drops a result at the rate of the calls, and pymalloc's allocation
 * and free of it cost about what the rest of a short match does: results of up to
 * RESULT_SMALL_IDS ids are allocated in size classes (a power of two of ids, at least 4)
 * and their memory kept on a short free list per class when they die, as CPython keeps
 * its floats and tuples.  A result made for n ids may shrink (a walk found fewer): it is
 * then kept under the class of its size, room to spare.  The GIL guards the lists. */
#define FREE_IDS RESULT_SMALL_IDS
#define FREE_CLASSES 5 /* 4, 8, 16, 32, 64 ids */
#define FREE_DEPTH 4

static void *free_results[FREE_CLASSES][FREE_DEPTH];
static int free_count[FREE_CLASSES];

/* The class of a result of n <= FREE_IDS ids: the least c with 4 << c >= n. */
static inline int size_class(Py_ssize_t nblocks) {
    return nblocks <= 4 ? 0 : 30 - __builtin_clz((unsigned)(nblocks - 1));
}

static inline size_t class_bytes(int c) {
    return (size_t)MatchResult_Type.tp_basicsize + ((size_t)4 << c) * sizeof(uint32_t);
}

MatchResultObject *match_result_new(Py_ssize_t nblocks) {
    MatchResultObject *r;
    if (nblocks <= FREE_IDS) {
        int c = size_class(nblocks);
        void *mem = free_count[c] > 0 ? free_results[c][--free_count[c]] : PyObject_Malloc(class_bytes(c));
        if (mem == NULL) return (MatchResultObject *)PyErr_NoMemory();
        r = (MatchResultObject *)PyObject_InitVar(mem, &MatchResult_Type, nblocks);
    } else {
        r = PyObject_NewVar(MatchResultObject, &MatchResult_Type, nblocks);
        if (r == NULL) return NULL;
    }
    r->length = 0;
    r->lease = Py_NewRef(Py_None);
    return r;
}

static void MatchResult_dealloc(MatchResultObject *self) {
    Py_DECREF(self->lease);
    Py_ssize_t n = Py_SIZE(self);
    if (n <= FREE_IDS) {
        int c = size_class(n);
        if (free_count[c] < FREE_DEPTH) {
            free_results[c][free_count[c]++] = self;
            return;
        }
    }
    PyObject_Free(self);
}

static PyObject *MatchResult_get_length(MatchResultObject *self, void *c) {
    (void)c;
    return PyLong_FromSsize_t(self->length);
}
static PyObject *MatchResult_get_blocks(MatchResultObject *self, void *c) {
    (void)c;
    return blocks_view((PyObject *)self, self->ids, Py_SIZE(self));
}
static PyObject *MatchResult_get_lease(MatchResultObject *self, void *c) {
    (void)c;
    return Py_NewRef(self->lease);
}

static PyObject *MatchResult_repr(MatchResultObject *self) {
    PyObject *blocks = u32_tuple(self->ids, Py_SIZE(self));
    if (blocks == NULL) return NULL;
    PyObject *r = PyUnicode_FromFormat("MatchResult(length=%zd, blocks=%R, lease=%R)",
                                       self->length, blocks, self->lease);
    Py_DECREF(blocks);
    return r;
}

static PyGetSetDef MatchResult_getset[] = {
    {"length", (getter)MatchResult_get_length, NULL,
     "Tokens matched, always a multiple of the block size.", NULL},
    {"blocks", (getter)MatchResult_get_blocks, NULL,
     "The block ids holding those tokens, root first (a ``Blocks`` view, equal to their\n"
     "tuple).", NULL},
    {"lease", (getter)MatchResult_get_lease, NULL,
     "The lease pinning ``blocks`` when ``pin=True`` was asked, else None.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject MatchResult_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kachedb_radix.accel._radix.MatchResult",
    .tp_basicsize = offsetof(MatchResultObject, ids),
    .tp_itemsize = sizeof(uint32_t),
    .tp_dealloc = (destructor)MatchResult_dealloc,
    .tp_repr = (reprfunc)MatchResult_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "What ``match`` found (R-MATCH-1).\n\n"
              "Attributes:\n"
              "    length: tokens matched, always a multiple of the block size.\n"
              "    blocks: the block ids holding those tokens, root first (a ``Blocks`` view,\n"
              "        equal to their tuple).\n"
              "    lease: the lease pinning ``blocks`` when ``pin=True`` was asked, else None.",
    .tp_getset = MatchResult_getset,
};

/* ------------------------------------------------------------------ InsertResult */

InsertResultObject *insert_result_new(Py_ssize_t nblocks, Py_ssize_t nalloc, Py_ssize_t nevict) {
    InsertResultObject *r =
        PyObject_NewVar(InsertResultObject, &InsertResult_Type, nblocks + nalloc + nevict);
    if (r == NULL) return NULL;
    r->length = 0;
    r->reused = 0;
    r->nblocks = nblocks;
    r->nalloc = nalloc;
    r->nevict = nevict;
    r->lease = Py_NewRef(Py_None);
    return r;
}

static void InsertResult_dealloc(InsertResultObject *self) {
    Py_DECREF(self->lease);
    PyObject_Free(self);
}

static PyObject *InsertResult_get_length(InsertResultObject *self, void *c) {
    (void)c;
    return PyLong_FromSsize_t(self->length);
}
static PyObject *InsertResult_get_reused(InsertResultObject *self, void *c) {
    (void)c;
    return PyLong_FromSsize_t(self->reused);
}
static PyObject *InsertResult_get_blocks(InsertResultObject *self, void *c) {
    (void)c;
    return blocks_view((PyObject *)self, self->ids, self->nblocks);
}
static PyObject *InsertResult_get_allocated(InsertResultObject *self, void *c) {
    (void)c;
    return blocks_view((PyObject *)self, self->ids + self->nblocks, self->nalloc);
}
static PyObject *InsertResult_get_evicted(InsertResultObject *self, void *c) {
    (void)c;
    return blocks_view((PyObject *)self, self->ids + self->nblocks + self->nalloc, self->nevict);
}
static PyObject *InsertResult_get_lease(InsertResultObject *self, void *c) {
    (void)c;
    return Py_NewRef(self->lease);
}

static PyObject *InsertResult_repr(InsertResultObject *self) {
    PyObject *b = u32_tuple(self->ids, self->nblocks);
    PyObject *a = u32_tuple(self->ids + self->nblocks, self->nalloc);
    PyObject *e = u32_tuple(self->ids + self->nblocks + self->nalloc, self->nevict);
    PyObject *r = NULL;
    if (b && a && e)
        r = PyUnicode_FromFormat(
            "InsertResult(length=%zd, blocks=%R, reused=%zd, allocated=%R, evicted=%R, lease=%R)",
            self->length, b, self->reused, a, e, self->lease);
    Py_XDECREF(b);
    Py_XDECREF(a);
    Py_XDECREF(e);
    return r;
}

static PyGetSetDef InsertResult_getset[] = {
    {"length", (getter)InsertResult_get_length, NULL,
     "Tokens now cached for the sequence: its full blocks, ``len // B * B``.", NULL},
    {"blocks", (getter)InsertResult_get_blocks, NULL,
     "The block ids of those full blocks, root first (a ``Blocks`` view, equal to their\n"
     "tuple).", NULL},
    {"reused", (getter)InsertResult_get_reused, NULL,
     "How many leading blocks were already cached.", NULL},
    {"allocated", (getter)InsertResult_get_allocated, NULL,
     "The ids given to the new blocks, in path order (R-ALLOC-2) (a ``Blocks`` view).",
     NULL},
    {"evicted", (getter)InsertResult_get_evicted, NULL,
     "Ids freed to make room, in eviction order (R-INS-5) (a ``Blocks`` view).", NULL},
    {"lease", (getter)InsertResult_get_lease, NULL,
     "The lease pinning ``blocks`` when ``pin=True`` was asked, else None.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject InsertResult_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kachedb_radix.accel._radix.InsertResult",
    .tp_basicsize = offsetof(InsertResultObject, ids),
    .tp_itemsize = sizeof(uint32_t),
    .tp_dealloc = (destructor)InsertResult_dealloc,
    .tp_repr = (reprfunc)InsertResult_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "What ``insert`` did (R-INS-1).\n\n"
              "Attributes:\n"
              "    length: tokens now cached for the sequence: its full blocks, ``len // B * B``.\n"
              "    blocks: the block ids of those full blocks, root first (a ``Blocks`` view,\n"
              "        equal to their tuple).\n"
              "    reused: how many leading blocks were already cached.\n"
              "    allocated: the ids given to the new blocks, in path order (R-ALLOC-2) (a\n"
              "        ``Blocks`` view).\n"
              "    evicted: ids freed to make room, in eviction order (R-INS-5) (a ``Blocks``\n"
              "        view).\n"
              "    lease: the lease pinning ``blocks`` when ``pin=True`` was asked, else None.",
    .tp_getset = InsertResult_getset,
};

/* ------------------------------------------------------------------ Lease */

LeaseObject *lease_alloc(void) {
    LeaseObject *l = PyObject_GC_New(LeaseObject, &Lease_Type);
    if (l == NULL) return NULL;
    l->tree = NULL;
    l->lprev = l->lnext = NULL;
    l->linked = 0;
    l->released = 0;
    l->id = 0;
    l->ns = NULL;
    l->B = 1;
    l->count = 0;
    l->store = NULL;
    l->blocks = NULL;
    l->tokens = NULL;
    l->tokens_tuple = NULL;
    PyObject_GC_Track(l);
    return l;
}

static int Lease_traverse(LeaseObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->tree);
    return 0;
}

static int Lease_clear(LeaseObject *self) {
    Py_CLEAR(self->tree);
    return 0;
}

static void Lease_dealloc(LeaseObject *self) {
    PyObject_GC_UnTrack(self);
    /* A linked lease is owned by its tree's list, so it is never deallocated linked. */
    Py_CLEAR(self->tree);
    Py_CLEAR(self->ns);
    Py_CLEAR(self->tokens_tuple);
    if (self->store != NULL && --self->store->rc == 0) PyMem_Free(self->store);
    PyObject_GC_Del(self);
}

static PyObject *Lease_get_id(LeaseObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(self->id);
}
/* A lease reaches Python only linked, so its ns is set (None or an exact str). */
static PyObject *Lease_get_namespace(LeaseObject *self, void *c) {
    (void)c;
    return Py_NewRef(self->ns);
}
static PyObject *Lease_get_tokens(LeaseObject *self, void *c) {
    (void)c;
    if (self->tokens_tuple == NULL) {
        self->tokens_tuple = u32_tuple(self->tokens, (Py_ssize_t)self->count * self->B);
        if (self->tokens_tuple == NULL) return NULL;
    }
    return Py_NewRef(self->tokens_tuple);
}
static PyObject *Lease_get_blocks(LeaseObject *self, void *c) {
    (void)c;
    return blocks_view((PyObject *)self, self->blocks, self->count);
}
static PyObject *Lease_get_length(LeaseObject *self, void *c) {
    (void)c;
    return PyLong_FromSize_t((size_t)self->count * self->B);
}
static PyObject *Lease_get_released(LeaseObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->released);
}

static PyObject *Lease_release(LeaseObject *self, PyObject *unused) {
    (void)unused;
    if (self->tree == NULL) {
        PyErr_Format(G.ForeignLeaseError, "lease %llu has no tree", (unsigned long long)self->id);
        return NULL;
    }
    return Tree_release(self->tree, (PyObject *)self);
}

static PyObject *Lease_enter(LeaseObject *self, PyObject *unused) {
    (void)unused;
    return Py_NewRef((PyObject *)self);
}

static PyObject *Lease_exit(LeaseObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)args;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "__exit__ expected 3 arguments, got %zd", nargs);
        return NULL;
    }
    if (!self->released) {
        PyObject *r = Lease_release(self, NULL);
        if (r == NULL) return NULL;
        Py_DECREF(r);
    }
    Py_RETURN_NONE;
}

static PyObject *Lease_repr(LeaseObject *self) {
    return PyUnicode_FromFormat("<Lease %llu %s: %u blocks, namespace=%R>",
                                (unsigned long long)self->id, self->released ? "released" : "live",
                                self->count, self->ns);
}

static PyMethodDef Lease_methods[] = {
    {"release", (PyCFunction)Lease_release, METH_NOARGS,
     "release($self, /)\n--\n\n"
     "Release the pins; same as ``tree.release(lease)``. O(length).\n\n"
     "Raises:\n    LeaseReleasedError: already released."},
    {"__enter__", (PyCFunction)Lease_enter, METH_NOARGS, "__enter__($self, /)\n--\n\n"},
    {"__exit__", (PyCFunction)(void (*)(void))Lease_exit, METH_FASTCALL,
     "__exit__($self, exc_type, exc, traceback, /)\n--\n\n"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Lease_getset[] = {
    {"id", (getter)Lease_get_id, NULL, "The lease's number, from 1, per tree. O(1).", NULL},
    {"namespace", (getter)Lease_get_namespace, NULL,
     "The namespace of the pinned path. O(1).", NULL},
    {"tokens", (getter)Lease_get_tokens, NULL,
     "The pinned token prefix, a tuple. O(length) the first time, then O(1).", NULL},
    {"blocks", (getter)Lease_get_blocks, NULL,
     "The pinned block ids, root first (a ``Blocks`` view). O(1).", NULL},
    {"length", (getter)Lease_get_length, NULL, "Pinned length in tokens. O(1).", NULL},
    {"released", (getter)Lease_get_released, NULL,
     "Whether the lease has been released. O(1).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject Lease_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kachedb_radix.accel._radix.Lease",
    .tp_basicsize = sizeof(LeaseObject),
    .tp_dealloc = (destructor)Lease_dealloc,
    .tp_repr = (reprfunc)Lease_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A pin on one cached root path; release it exactly once.\n\n"
              "Usable as a context manager: leaving the ``with`` block releases it.",
    .tp_traverse = (traverseproc)Lease_traverse,
    .tp_clear = (inquiry)Lease_clear,
    .tp_methods = Lease_methods,
    .tp_getset = Lease_getset,
};
