/* kachedb_radix.accel._radix -- eviction policies (R-POL-*), the C twin of
 * kachedb_radix.reference.policies.  Its hooks re-file leaves through the tree's
 * heap_update (tree.h); the inline ones are in policy.h.
 *
 * Each policy keeps its per-block state in arrays of num_blocks entries, allocated for
 * the tree's policy only, and orders leaf tails by a key packed in one uint64 whose order
 * is the reference's tuple order (the tail block id, the tuple's last item, breaks ties
 * in heap_less):
 *
 *   lru       stamp                           (stamp, block)
 *   lfu       hits << 44 | stamp              (hits, stamp, block)      hits <= 2**20 - 1
 *   fifo      born                            (born, block)
 *   priority  priority << 56 | stamp          (priority, stamp, block)  priority <= 100
 *   slru      protected << 63 | stamp         (protected, stamp, block)
 *
 * The packing needs the clock below 2**44 (lfu): 1.7e13 calls, five centuries at a
 * million calls a second.
 *
 * The hooks run in the reference's order (reference/policies/base.py): pol_tick when the
 * clock advances, before anything the call does at the new time; then pol_cached /
 * pol_found / pol_released for the call's blocks, whose stamps are already the new time;
 * pol_freed for each evicted block.  Blocks other than the call's path whose keys change
 * (a priority that falls back, an SLRU demotion) are re-filed through pol_requeue: the
 * owner table names the node last filed under a tail block, checked before use (a node
 * record may have been freed or may have a new tail since).
 *
 * Nothing here fails inside a mutation: pol_reserve, called in a call's preparation
 * phase, makes room in the lazy heap for every entry the call can push. */
#include "policy.h"

#include "tree.h"

/* ---- the lazy heap of (key, block) */

static void kh_sift_down(KHeap *h, size_t i) {
    KEntry e = h->e[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && ke_less(&h->e[c + 1], &h->e[c])) c++;
        if (!ke_less(&h->e[c], &e)) break;
        h->e[i] = h->e[c];
        i = c;
    }
    h->e[i] = e;
}

/* Precondition: room (kh_reserve). */
static void kh_push(KHeap *h, uint64_t key, uint32_t block) {
    KEntry e = {key, block};
    size_t i = h->n++;
    while (i > 0 && ke_less(&e, &h->e[(i - 1) / 2])) {
        h->e[i] = h->e[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->e[i] = e;
}

static KEntry kh_pop(KHeap *h) {
    KEntry top = h->e[0];
    h->e[0] = h->e[--h->n];
    if (h->n > 0) kh_sift_down(h, 0);
    return top;
}

static int kh_reserve(KHeap *h, size_t extra) {
    if (h->n + extra <= h->cap) return 0;
    size_t cap = h->cap ? h->cap : 64;
    while (cap < h->n + extra) cap *= 2;
    KEntry *e = PyMem_Realloc(h->e, cap * sizeof(KEntry));
    if (e == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    h->e = e;
    h->cap = cap;
    return 0;
}

/* ---- re-filing */

/* Re-file the queued leaf whose tail is b, if there is one (its key changed). */
static void pol_requeue(TreeObject *t, uint32_t b) {
    uint32_t n = t->pol.owner[b];
    if (n >= t->nodes_len || t->heap_pos[n] == NIL) return;
    const Node *x = &t->nodes[n];
    if (x->parent >= NODE_FREE || x->nblocks == 0 || node_last(t, x) != b) return;
    heap_update(t, n);
}

/* ---- the hooks */

/* Room for the entries one call may push: one per block of its path. */
int pol_reserve_heap(TreeObject *t, Py_ssize_t blocks) {
    return kh_reserve(&t->pol.pending, (size_t)blocks);
}

/* Under priority, at time `now`: priorities whose time has come fall back (R-POL-5). */
void pol_expire(TreeObject *t, uint64_t now) {
    Policy *p = &t->pol;
    while (p->pending.n > 0 && p->pending.e[0].key <= now) {
        KEntry e = kh_pop(&p->pending);
        if (p->until[e.block] != e.key) continue; /* stale: re-set, extended or evicted */
        p->prio[e.block] = p->fallback[e.block];
        p->until[e.block] = 0;
        pol_requeue(t, e.block);
    }
}

static void prio_set(Policy *p, uint32_t b, uint8_t q, uint64_t until) {
    p->prio[b] = q;
    p->until[b] = until;
    if (until) kh_push(&p->pending, until, b);
}

static void slru_compact(TreeObject *t) {
    Policy *p = &t->pol;
    KHeap *h = &p->pending;
    if (h->n <= 2 * p->prot_count + 64) return;
    size_t kept = 0;
    for (size_t i = 0; i < h->n; i++) {
        uint32_t b = h->e[i].block;
        if (p->prot[b] && t->stamps[b] == h->e[i].key) h->e[kept++] = h->e[i];
    }
    h->n = kept;
    for (size_t i = kept / 2; i-- > 0;) kh_sift_down(h, i);
}

/* An insert at `now` cached the new blocks ids[0..n). */
void pol_cached(TreeObject *t, const uint32_t *ids, Py_ssize_t n, uint64_t now, const Ask *ask) {
    Policy *p = &t->pol;
    switch (p->kind) {
    case POL_LFU:
        for (Py_ssize_t i = 0; i < n; i++) p->hits[ids[i]] = 0;
        break;
    case POL_FIFO:
        for (Py_ssize_t i = 0; i < n; i++) p->born[ids[i]] = now;
        break;
    case POL_PRIORITY:
        for (Py_ssize_t i = 0; i < n; i++) {
            p->fallback[ids[i]] = ask->fallback;
            prio_set(p, ids[i], ask->q, ask->until);
        }
        break;
    case POL_SLRU:
        for (Py_ssize_t i = 0; i < n; i++) p->prot[ids[i]] = 0;
        break;
    default:
        break;
    }
}

/* A match (ask NULL) or an insert found ids[0..n) cached: a hit on each (R-POL-3). */
void pol_found(TreeObject *t, const uint32_t *ids, Py_ssize_t n, const Ask *ask) {
    Policy *p = &t->pol;
    switch (p->kind) {
    case POL_LFU:
        for (Py_ssize_t i = 0; i < n; i++) p->hits[ids[i]] += p->hits[ids[i]] < HITS_CAP;
        break;
    case POL_PRIORITY:
        if (ask == NULL) break;
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t b = ids[i];
            if (ask->q > p->prio[b] ||
                (ask->q == p->prio[b] && p->until[b] != 0 &&
                 (ask->until == 0 || ask->until > p->until[b])))
                prio_set(p, b, ask->q, ask->until);
        }
        break;
    case POL_SLRU:
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t b = ids[i];
            if (!p->prot[b]) {
                p->prot[b] = 1;
                p->prot_count++;
            }
            kh_push(&p->pending, t->stamps[b], b);
            if (p->prot_count > p->prot_cap) {
                /* Demote the least recently used protected block (any block). */
                for (;;) {
                    KEntry e = kh_pop(&p->pending);
                    if (p->prot[e.block] && t->stamps[e.block] == e.key) {
                        p->prot[e.block] = 0;
                        p->prot_count--;
                        pol_requeue(t, e.block);
                        break;
                    }
                }
            }
        }
        slru_compact(t);
        break;
    default:
        break;
    }
}

/* Under slru, a lease over ids[0..n) was released: protected blocks move up their recency. */
void pol_released_slru(TreeObject *t, const uint32_t *ids, Py_ssize_t n) {
    Policy *p = &t->pol;
    for (Py_ssize_t i = 0; i < n; i++)
        if (p->prot[ids[i]]) kh_push(&p->pending, t->stamps[ids[i]], ids[i]);
    slru_compact(t);
}

/* ---- arguments */

/* The retention an insert asks for (R-POL-5), checked as the reference's
 * check_retention; for the priority policy also resolved against the namespace's
 * default.  `ns` is NULL for the default namespace.  -1 with InvalidArgumentError. */
int pol_ask(TreeObject *t, PyObject *priority, PyObject *retain_for, PyObject *ns, Ask *ask) {
    long long q = -1, d = 0;
    int overflow = 0;
    if (priority != NULL && priority != Py_None) {
        q = PyLong_Check(priority) && !PyBool_Check(priority) ? int_value(priority, &overflow) : -1;
        if (overflow || q < 0 || q > 100) {
            PyErr_Format(G.InvalidArgumentError,
                         "priority must be None or an int in 0 .. 100, got %R", priority);
            return -1;
        }
    }
    if (retain_for != NULL && retain_for != Py_None) {
        d = PyLong_Check(retain_for) && !PyBool_Check(retain_for) ? int_value(retain_for, &overflow)
                                                                  : -1;
        if (overflow || d < 1) {
            PyErr_Format(G.InvalidArgumentError,
                         "retain_for must be None or an int >= 1 (clock ticks), got %R", retain_for);
            return -1;
        }
        if (q < 0) {
            PyErr_SetString(G.InvalidArgumentError,
                            "retain_for needs a priority to retain the blocks at");
            return -1;
        }
    }
    const Policy *p = &t->pol;
    ask->fallback = (uint8_t)p->default_prio;
    if (p->kind == POL_PRIORITY && ns != NULL && p->ns_prio != NULL) {
        PyObject *v = PyDict_GetItemWithError(p->ns_prio, ns);
        if (v == NULL && PyErr_Occurred()) return -1;
        if (v != NULL) ask->fallback = (uint8_t)PyLong_AsLong(v);
    }
    ask->q = q < 0 ? ask->fallback : (uint8_t)q;
    /* The clock's next value is the insert's time: its retention holds d ticks from it. */
    ask->until = d ? t->clock + 1u + (uint64_t)d : 0;
    return 0;
}

/* ---- construction, copies, teardown */

static const char *const POLICY_NAMES[] = {"lru", "lfu", "fifo", "priority", "slru"};

/* Set up t->pol for `name` with `options` (either may be NULL: lru, no options),
 * checked by reference.policies.check_policy (the default, lru without options, needs
 * no check).  -1 with an exception set. */
int pol_init(TreeObject *t, PyObject *name, PyObject *options) {
    Policy *p = &t->pol;
    int plain = (name == NULL || (PyUnicode_CheckExact(name) &&
                                  PyUnicode_CompareWithASCIIString(name, "lru") == 0)) &&
                (options == NULL || options == Py_None);
    if (plain) {
        /* The default needs no checking, and no Python code runs: a tree is built the
         * same way whatever the interpreter can allocate for a frame. */
        p->kind = POL_LRU;
        p->name = Py_NewRef(G.s_lru);
        p->options = PyDict_New();
        return p->options == NULL ? -1 : 0;
    }
    PyObject *checked = PyObject_CallFunctionObjArgs(G.check_policy, name ? name : G.s_lru,
                                                     options ? options : Py_None, NULL);
    if (checked == NULL) return -1;
    p->name = Py_NewRef(PyTuple_GET_ITEM(checked, 0));
    p->options = Py_NewRef(PyTuple_GET_ITEM(checked, 1));
    Py_DECREF(checked);
    p->kind = -1;
    for (int k = 0; k < (int)(sizeof(POLICY_NAMES) / sizeof(POLICY_NAMES[0])); k++)
        if (PyUnicode_CompareWithASCIIString(p->name, POLICY_NAMES[k]) == 0) p->kind = k;
    if (p->kind < 0) {
        PyErr_Format(PyExc_SystemError, "check_policy returned an unknown policy %R", p->name);
        return -1;
    }
    size_t n = t->num_blocks;
    switch (p->kind) {
    case POL_LFU:
        if ((p->hits = PyMem_Calloc(n, sizeof(uint32_t))) == NULL) goto oom;
        break;
    case POL_FIFO:
        if ((p->born = PyMem_Calloc(n, sizeof(uint64_t))) == NULL) goto oom;
        break;
    case POL_PRIORITY: {
        PyObject *d = PyDict_GetItemString(p->options, "default");
        PyObject *ns = PyDict_GetItemString(p->options, "namespaces");
        if (d == NULL || ns == NULL || !PyDict_Check(ns)) {
            PyErr_SetString(PyExc_SystemError, "check_policy returned malformed priority options");
            return -1;
        }
        p->default_prio = (uint32_t)PyLong_AsLong(d);
        p->ns_prio = PyDict_Copy(ns);
        if (p->ns_prio == NULL) return -1;
        p->prio = PyMem_Calloc(n, 1);
        p->fallback = PyMem_Calloc(n, 1);
        p->until = PyMem_Calloc(n, sizeof(uint64_t));
        if (!p->prio || !p->fallback || !p->until) goto oom;
        break;
    }
    case POL_SLRU: {
        PyObject *v = PyDict_GetItemString(p->options, "protected_percent");
        if (v == NULL) {
            PyErr_SetString(PyExc_SystemError, "check_policy returned malformed slru options");
            return -1;
        }
        p->prot_cap = (uint64_t)n * (uint64_t)PyLong_AsLong(v) / 100u;
        if ((p->prot = PyMem_Calloc(n, 1)) == NULL) goto oom;
        break;
    }
    default:
        break;
    }
    if (p->kind == POL_PRIORITY || p->kind == POL_SLRU) {
        if ((p->owner = PyMem_Malloc(n * sizeof(uint32_t))) == NULL) goto oom;
        memset(p->owner, 0xFF, n * sizeof(uint32_t));
    }
    return 0;
oom:
    PyErr_NoMemory();
    return -1;
}

void pol_fini(Policy *p) {
    Py_CLEAR(p->name);
    Py_CLEAR(p->options);
    Py_CLEAR(p->ns_prio);
    PyMem_Free(p->hits);
    PyMem_Free(p->born);
    PyMem_Free(p->prio);
    PyMem_Free(p->fallback);
    PyMem_Free(p->until);
    PyMem_Free(p->prot);
    PyMem_Free(p->owner);
    PyMem_Free(p->pending.e);
    memset(p, 0, sizeof(Policy));
}

static int dup_block_array(void *dst, const void *src, size_t n, size_t size) {
    if (src == NULL) return 0;
    void *copy = PyMem_Malloc(n * size > 0 ? n * size : 1);
    if (copy == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(copy, src, n * size);
    *(void **)dst = copy;
    return 0;
}

/* dst (zeroed) becomes an independent copy of src; -1 with MemoryError (dst then holds
 * what was copied so far, freed by pol_fini). */
int pol_copy(Policy *dst, const Policy *src, size_t n) {
    dst->kind = src->kind;
    dst->name = Py_XNewRef(src->name);
    dst->options = Py_XNewRef(src->options); /* never mutated: policy_options copies it */
    dst->ns_prio = Py_XNewRef(src->ns_prio); /* never mutated */
    dst->default_prio = src->default_prio;
    dst->prot_count = src->prot_count;
    dst->prot_cap = src->prot_cap;
    if (dup_block_array(&dst->hits, src->hits, n, sizeof(uint32_t)) < 0 ||
        dup_block_array(&dst->born, src->born, n, sizeof(uint64_t)) < 0 ||
        dup_block_array(&dst->prio, src->prio, n, 1) < 0 ||
        dup_block_array(&dst->fallback, src->fallback, n, 1) < 0 ||
        dup_block_array(&dst->until, src->until, n, sizeof(uint64_t)) < 0 ||
        dup_block_array(&dst->prot, src->prot, n, 1) < 0 ||
        dup_block_array(&dst->owner, src->owner, n, sizeof(uint32_t)) < 0)
        return -1;
    if (src->pending.n > 0) {
        if (kh_reserve(&dst->pending, src->pending.n) < 0) return -1;
        memcpy(dst->pending.e, src->pending.e, src->pending.n * sizeof(KEntry));
        dst->pending.n = src->pending.n;
    }
    return 0;
}

size_t pol_bytes(const TreeObject *t) {
    const Policy *p = &t->pol;
    size_t n = t->num_blocks, per = 0;
    per += p->hits ? sizeof(uint32_t) : 0;
    per += p->born ? sizeof(uint64_t) : 0;
    per += p->prio ? 2u + sizeof(uint64_t) : 0;
    per += p->prot ? 1u : 0;
    per += p->owner ? sizeof(uint32_t) : 0;
    return n * per + p->pending.cap * sizeof(KEntry);
}

/* ---- reads */

/* eviction_key(b): the reference's tuple. */
PyObject *pol_key(const TreeObject *t, uint32_t b) {
    const Policy *p = &t->pol;
    unsigned long long s = t->stamps[b];
    switch (p->kind) {
    case POL_LFU:
        return Py_BuildValue("(IKI)", p->hits[b], s, b);
    case POL_FIFO:
        return Py_BuildValue("(KI)", (unsigned long long)p->born[b], b);
    case POL_PRIORITY:
        return Py_BuildValue("(IKI)", (unsigned int)p->prio[b], s, b);
    case POL_SLRU:
        return Py_BuildValue("(IKI)", (unsigned int)p->prot[b], s, b);
    default:
        return Py_BuildValue("(KI)", s, b);
    }
}

/* The policy's per-block dump fields of an edge's blocks ids[0..n), set in edge dict d
 * (R-POL-1).  -1 with an exception set. */
int pol_dump_fields(const TreeObject *t, PyObject *d, const uint32_t *ids, Py_ssize_t n) {
    const Policy *p = &t->pol;
    const char *names[2] = {NULL, NULL};
    switch (p->kind) {
    case POL_LFU: names[0] = "hits"; break;
    case POL_FIFO: names[0] = "born"; break;
    case POL_PRIORITY: names[0] = "priority"; names[1] = "until"; break;
    case POL_SLRU: names[0] = "protected"; break;
    default: return 0;
    }
    for (int f = 0; f < 2 && names[f]; f++) {
        PyObject *list = PyList_New(n);
        if (list == NULL) return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t b = ids[i];
            unsigned long long v = 0;
            switch (p->kind) {
            case POL_LFU: v = p->hits[b]; break;
            case POL_FIFO: v = p->born[b]; break;
            case POL_PRIORITY: v = f == 0 ? p->prio[b] : p->until[b]; break;
            default: v = p->prot[b]; break;
            }
            PyObject *o = PyLong_FromUnsignedLongLong(v);
            if (o == NULL) {
                Py_DECREF(list);
                return -1;
            }
            PyList_SET_ITEM(list, i, o);
        }
        int rc = PyDict_SetItemString(d, names[f], list);
        Py_DECREF(list);
        if (rc < 0) return -1;
    }
    return 0;
}

/* A copy of the options in force (a dict, nested dicts copied too). */
PyObject *pol_options_copy(const Policy *p) {
    PyObject *copy = PyDict_Copy(p->options);
    if (copy == NULL) return NULL;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(p->options, &pos, &key, &value)) {
        if (!PyDict_Check(value)) continue;
        PyObject *inner = PyDict_Copy(value);
        if (inner == NULL || PyDict_SetItem(copy, key, inner) < 0) {
            Py_XDECREF(inner);
            Py_DECREF(copy);
            return NULL;
        }
        Py_DECREF(inner);
    }
    return copy;
}

/* The dump's "policy" entry, {"name", "options"} (a tree under another policy than lru:
 * an lru dump has none, R-POL-1); NULL with an exception set. */
PyObject *pol_dump_entry(const TreeObject *t) {
    PyObject *opts = pol_options_copy(&t->pol);
    if (opts == NULL) return NULL;
    PyObject *d = Py_BuildValue("{sOsN}", "name", t->pol.name, "options", opts);
    return d;
}

/* The policy's own invariants over the cached blocks (cached[b] == 1: check_invariants'
 * marks), or NULL. */
const char *pol_check(const TreeObject *t, const uint8_t *cached, char *buf, size_t len) {
    const Policy *p = &t->pol;
    uint64_t protected = 0, pending = 0;
    for (uint32_t b = 0; b < t->num_blocks; b++) {
        if (p->kind == POL_SLRU && p->prot[b]) {
            if (cached[b] != 1) {
                snprintf(buf, len, "block %u is protected but not cached", b);
                return buf;
            }
            protected++;
        }
        if (cached[b] != 1) continue;
        if (p->kind == POL_LFU && p->hits[b] > HITS_CAP) {
            snprintf(buf, len, "block %u has %u hits", b, p->hits[b]);
            return buf;
        }
        if (p->kind == POL_FIFO &&
            (p->born[b] < 1 || p->born[b] > t->stamps[b] || p->born[b] > t->clock)) {
            snprintf(buf, len, "block %u was born at %llu, after its last use", b,
                     (unsigned long long)p->born[b]);
            return buf;
        }
        if (p->kind == POL_PRIORITY) {
            if (p->prio[b] > 100) {
                snprintf(buf, len, "block %u has priority %u", b, p->prio[b]);
                return buf;
            }
            if (p->until[b] != 0) {
                if (p->until[b] <= t->clock) {
                    snprintf(buf, len, "block %u holds until %llu, which is past", b,
                             (unsigned long long)p->until[b]);
                    return buf;
                }
                pending++;
            }
        }
    }
    if (p->kind == POL_SLRU && (protected != p->prot_count || protected > p->prot_cap)) {
        snprintf(buf, len, "%llu protected blocks, counted %llu, capacity %llu",
                 (unsigned long long)protected, (unsigned long long)p->prot_count,
                 (unsigned long long)p->prot_cap);
        return buf;
    }
    if (p->kind == POL_SLRU || p->kind == POL_PRIORITY) {
        /* Every protected block, and every pending expiry, has a live heap entry. */
        uint64_t live = 0;
        for (size_t i = 0; i < p->pending.n; i++) {
            const KEntry *e = &p->pending.e[i];
            if (i > 0 && ke_less(e, &p->pending.e[(i - 1) / 2])) {
                snprintf(buf, len, "the policy's heap is out of order at %zu", i);
                return buf;
            }
            uint32_t b = e->block;
            if (b >= t->num_blocks) {
                snprintf(buf, len, "the policy's heap names block %u", b);
                return buf;
            }
            int is_live = p->kind == POL_SLRU ? p->prot[b] && t->stamps[b] == e->key
                                              : cached[b] == 1 && p->until[b] == e->key;
            live += is_live;
        }
        uint64_t want = p->kind == POL_SLRU ? protected : pending;
        if (live < want) {
            snprintf(buf, len, "%llu blocks but %llu live entries in the policy's heap",
                     (unsigned long long)want, (unsigned long long)live);
            return buf;
        }
    }
    return NULL;
}
