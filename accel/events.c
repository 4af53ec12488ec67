/* kachedb_radix.accel._radix -- KV events (R-EVENT-*), the C twin's side of
 * kachedb_radix.reference.events.
 *
 * The division of labour: the C tree *logs* what changed, in its mutation phase, into a
 * buffer of uint32 words reserved in the preparation phase (so logging never fails);
 * the reference's EventRecorder *names* it -- hashes the blocks (SHA-256 of CBOR, or
 * XXH3) and builds vLLM's KVEventBatch structs -- when the events are taken.  One
 * definition of the block hash serves both twins, and an operation with events on pays
 * only a memcpy of its new blocks' ids and tokens; with events off (ev.recorder NULL) it
 * pays one pointer test per call.
 *
 * The log, in operation order (word layout):
 *
 *   EV_STORE   n, parent, ns (a pointer in two words), ids[n], tokens[n * B]
 *              blocks ids[] holding tokens[] became cached below the cached block
 *              `parent` (NIL: at the root of namespace ns; NULL ns: the default one)
 *   EV_REMOVE  n, ids[n]          blocks stopped being cached, in eviction order
 *   EV_CLEAR                      every cached block stopped being cached (R-EVENT-7)
 *   EV_FLUSH   clock (two words)  the operation ended: its records form one batch
 *
 * A STORE record holds a strong reference to its namespace (a str), dropped when the
 * record is named or the tree dies.  Records before `head` were named already (a take
 * that failed part way resumes there). */

#include "events.h"

#include "inspect.h"
#include "objects.h"

enum { EV_STORE = 1, EV_REMOVE = 2, EV_FLUSH = 3, EV_CLEAR = 4 };

static inline PyObject *ev_ns_get(const uint32_t *w) {
    uintptr_t p = (uintptr_t)w[0] | ((uintptr_t)w[1] << 16 << 16);
    return (PyObject *)p;
}

static inline void ev_ns_put(uint32_t *w, PyObject *ns) {
    uintptr_t p = (uintptr_t)ns;
    w[0] = (uint32_t)p;
    w[1] = (uint32_t)(p >> 16 >> 16);
}

/* The words of the record starting at w. */
static inline size_t ev_record_words(const uint32_t *w, uint32_t B) {
    switch (w[0]) {
    case EV_STORE:
        return EV_STORE_HEADER + (size_t)w[1] * (1u + B);
    case EV_REMOVE:
        return 2u + w[1];
    case EV_CLEAR:
        return 1u;
    default:
        return 3u;
    }
}

/* Set up the log for `events` (None, False, True or a BlockHasher), as the reference's
 * constructor reads it.  -1 with the exception set (InvalidArgumentError for a bad value). */
int ev_init(TreeObject *t, PyObject *events) {
    if (events == NULL || events == Py_None) return 0;
    PyObject *hasher = PyObject_CallOneArg(G.event_hasher, events);
    if (hasher == NULL) return -1;
    if (hasher == Py_None) {
        Py_DECREF(hasher);
        return 0;
    }
    PyObject *B = PyLong_FromUnsignedLong(t->B);
    if (B == NULL) {
        Py_DECREF(hasher);
        return -1;
    }
    t->ev.recorder = PyObject_CallFunctionObjArgs(G.EventRecorder, hasher, B, NULL);
    Py_DECREF(B);
    Py_DECREF(hasher);
    return t->ev.recorder == NULL ? -1 : 0;
}

/* Drop the namespace references of records [from, to). */
static void ev_release_records(EvLog *ev, uint32_t B, size_t from, size_t to) {
    for (size_t at = from; at < to; at += ev_record_words(ev->log + at, B))
        if (ev->log[at] == EV_STORE) Py_XDECREF(ev_ns_get(ev->log + at + 3));
}

void ev_fini(TreeObject *t) {
    EvLog *ev = &t->ev;
    ev_release_records(ev, t->B, ev->head, ev->len);
    PyMem_Free(ev->log);
    ev->log = NULL;
    ev->len = ev->cap = ev->head = ev->mark = 0;
    Py_CLEAR(ev->recorder);
}

/* Make room for `words` more words (preparation phase; changes nothing observable).
 * Records already named are dropped from the front first. */
int ev_reserve(TreeObject *t, size_t words) {
    EvLog *ev = &t->ev;
    /* Never while the records are being named: ev_drain holds an index into them. */
    if (ev->draining) {
    } else if (ev->head > 0 && ev->head == ev->len) {
        ev->len = ev->mark = ev->head = 0;
    } else if (ev->head > 0 && ev->len + words > ev->cap) {
        memmove(ev->log, ev->log + ev->head, (ev->len - ev->head) * sizeof(uint32_t));
        ev->len -= ev->head;
        ev->mark -= ev->head;
        ev->head = 0;
    }
    if (ev->len + words <= ev->cap) return 0;
    size_t cap = ev->cap ? ev->cap : 256u;
    while (cap < ev->len + words) cap *= 2u;
    uint32_t *log = PyMem_Realloc(ev->log, cap * sizeof(uint32_t));
    if (log == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    ev->log = log;
    ev->cap = cap;
    return 0;
}

/* Mutation phase (room reserved): blocks ids[0..n) holding tok[0 .. n*B) became cached
 * below `parent` in namespace ns (NULL or None: the default one). */
void ev_log_store(TreeObject *t, PyObject *ns, uint32_t parent, const uint32_t *ids,
                  const uint32_t *tok, Py_ssize_t n) {
    EvLog *ev = &t->ev;
    uint32_t *w = ev->log + ev->len;
    if (ns == Py_None) ns = NULL;
    w[0] = EV_STORE;
    w[1] = (uint32_t)n;
    w[2] = parent;
    ev_ns_put(w + 3, Py_XNewRef(ns));
    memcpy(w + EV_STORE_HEADER, ids, (size_t)n * sizeof(uint32_t));
    memcpy(w + EV_STORE_HEADER + n, tok, (size_t)n * t->B * sizeof(uint32_t));
    ev->len += EV_STORE_HEADER + (size_t)n * (1u + t->B);
}

/* Mutation phase (room reserved): blocks ids[0..n) were evicted, in that order. */
void ev_log_remove(TreeObject *t, const uint32_t *ids, Py_ssize_t n) {
    EvLog *ev = &t->ev;
    uint32_t *w = ev->log + ev->len;
    w[0] = EV_REMOVE;
    w[1] = (uint32_t)n;
    memcpy(w + 2, ids, (size_t)n * sizeof(uint32_t));
    ev->len += 2u + (size_t)n;
}

/* Mutation phase (room reserved): every cached block stopped being cached at once. */
void ev_log_clear(TreeObject *t) {
    t->ev.log[t->ev.len++] = EV_CLEAR;
}

/* The end of an operation (room reserved): what it logged becomes one batch stamped with
 * the clock (R-EVENT-5); an operation that logged nothing emits no batch. */
void ev_flush(TreeObject *t) {
    EvLog *ev = &t->ev;
    if (ev->len == ev->mark) return;
    uint32_t *w = ev->log + ev->len;
    w[0] = EV_FLUSH;
    w[1] = (uint32_t)t->clock;
    w[2] = (uint32_t)(t->clock >> 32);
    ev->len += 3u;
    ev->mark = ev->len;
}

/* Name the records from head on through the recorder (Python code runs).  -1 with the
 * exception set; the records named so far stay named (head moves past them). */
static int ev_drain(TreeObject *t) {
    EvLog *ev = &t->ev;
    const uint32_t B = t->B;
    if (ev->draining) {
        PyErr_SetString(PyExc_RuntimeError, "take_events() called while events are being named");
        return -1;
    }
    ev->draining = 1;
    int status = 0;
    while (ev->head < ev->len) {
        /* Re-read through ev each time: the recorder's code may run a finalizer that calls
         * into this tree and appends to (and so moves) the log. */
        size_t at = ev->head;
        const uint32_t *w = ev->log + at;
        PyObject *r = NULL;
        if (w[0] == EV_STORE) {
            Py_ssize_t n = (Py_ssize_t)w[1];
            PyObject *ns = ev_ns_get(w + 3); /* the record's reference keeps it alive */
            PyObject *parent = w[2] == NIL ? Py_NewRef(Py_None) : PyLong_FromUnsignedLong(w[2]);
            PyObject *ids = u32_list(ev->log + at + EV_STORE_HEADER, n);
            PyObject *tok = ids == NULL ? NULL
                                        : u32_list(ev->log + at + EV_STORE_HEADER + n,
                                                   n * (Py_ssize_t)B);
            if (parent != NULL && ids != NULL && tok != NULL)
                r = PyObject_CallMethod(ev->recorder, "stored_run", "OOOO", ns ? ns : Py_None,
                                        parent, tok, ids);
            Py_XDECREF(parent);
            Py_XDECREF(ids);
            Py_XDECREF(tok);
        } else if (w[0] == EV_REMOVE) {
            PyObject *ids = u32_list(w + 2, (Py_ssize_t)w[1]);
            if (ids != NULL) r = PyObject_CallMethod(ev->recorder, "removed", "O", ids);
            Py_XDECREF(ids);
        } else if (w[0] == EV_CLEAR) {
            r = PyObject_CallMethod(ev->recorder, "cleared", NULL);
        } else {
            uint64_t clock = (uint64_t)w[1] | ((uint64_t)w[2] << 32);
            r = PyObject_CallMethod(ev->recorder, "flush", "K", (unsigned long long)clock);
        }
        if (r == NULL) {
            status = -1;
            break;
        }
        Py_DECREF(r);
        size_t words = ev_record_words(ev->log + at, B);
        ev_release_records(ev, B, at, at + words);
        ev->head = at + words;
    }
    if (ev->head == ev->len) ev->head = ev->len = ev->mark = 0;
    ev->draining = 0;
    return status;
}

/* take_events(): the batches since the last call, oldest first. */
PyObject *Tree_take_events(TreeObject *self, PyObject *unused) {
    (void)unused;
    if (self->ev.recorder == NULL) {
        PyErr_SetString(G.InvalidArgumentError,
                        "this tree emits no events: build it with events=True");
        return NULL;
    }
    if (ev_drain(self) < 0) return NULL;
    return PyObject_CallMethod(self->ev.recorder, "take", NULL);
}

/* The _event_recorder test hook: the recorder, every logged record named first. */
PyObject *Tree_get_event_recorder(TreeObject *self, void *unused) {
    (void)unused;
    if (self->ev.recorder == NULL) Py_RETURN_NONE;
    if (ev_drain(self) < 0) return NULL;
    return Py_NewRef(self->ev.recorder);
}

PyObject *Tree_get_events(TreeObject *self, void *unused) {
    (void)unused;
    if (self->ev.recorder == NULL) Py_RETURN_NONE;
    return PyObject_GetAttrString(self->ev.recorder, "hasher");
}

/* check_invariants()' part: the recorder knows exactly the cached blocks, each under the
 * hash its path gives it (EventRecorder.check against the dump). */
int ev_check(TreeObject *t) {
    if (t->ev.recorder == NULL) return 0;
    if (t->ev.len != t->ev.mark) {
        PyErr_SetString(G.InvariantViolation, "R-EVENT-5: events logged outside an operation");
        return -1;
    }
    if (ev_drain(t) < 0) return -1;
    PyObject *d = tree_dump(t);
    if (d == NULL) return -1;
    PyObject *r = PyObject_CallMethod(t->ev.recorder, "check", "O", d);
    Py_DECREF(d);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* A clone's log: the recorder copied (Python code: call it before any state is read) and,
 * later, ev_copy_log for the records not yet named. */
int ev_copy_log(EvLog *dst, const EvLog *src, uint32_t B) {
    size_t n = src->len - src->head;
    dst->len = dst->cap = dst->mark = dst->head = 0;
    dst->log = NULL;
    if (n == 0) return 0;
    if ((dst->log = PyMem_Malloc(n * sizeof(uint32_t))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(dst->log, src->log + src->head, n * sizeof(uint32_t));
    dst->len = dst->cap = n;
    dst->mark = src->mark - src->head;
    for (size_t at = 0; at < n; at += ev_record_words(dst->log + at, B))
        if (dst->log[at] == EV_STORE) Py_XINCREF(ev_ns_get(dst->log + at + 3));
    return 0;
}
