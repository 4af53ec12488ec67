/* kachedb_radix.accel._radix: the C twin of reference.RadixTree.
 *
 * Every public call mirrors reference/tree.py step for step (same checks in the same
 * order, same clock, same allocation and eviction order); see radix.h for the layout.
 * See accel/DESIGN.md.
 * A call is split into a fallible preparation phase (argument and token validation,
 * a read-only walk, the out-of-blocks check, allocating the result objects and
 * reserving capacity in every internal array) and an infallible mutation phase, so
 * a failing call changes nothing (R-ERR-2).
 */
#include "tree.h"

#include "alloc.h"
#include "events.h"
#include "inspect.h"
#include "objects.h"
#include "policy.h"
#include "snapshot.h"
#include "tokens.h"
#include "walk.h"
#ifdef KACHEDB_RADIX_TEST_HOOKS
#include "corrupt.h"
#endif

Globals G;

/* ------------------------------------------------------------------ eviction heap */

/* A 4-ary heap: half the depth of a binary one, and a node's children sit side by
 * side in memory, so a sift over a large heap touches half as many cache lines. */
#define HEAP_ARITY 4u

static inline uint32_t node_last_of(const TreeObject *t, uint32_t n);

/* The reference's order: (the tail's eviction key, tail block id); the key is the
 * policy's, packed (pol_rank). */
static inline int heap_less(const TreeObject *t, const HeapEntry *a, const HeapEntry *b) {
    return a->key < b->key ||
           (a->key == b->key && node_last_of(t, a->node) < node_last_of(t, b->node));
}

static inline void heap_set(TreeObject *t, uint32_t pos, HeapEntry e) {
    t->heap[pos] = e;
    t->heap_pos[e.node] = pos;
}

static void sift_up(TreeObject *t, uint32_t pos) {
    HeapEntry e = t->heap[pos];
    while (pos > 0) {
        uint32_t parent = (pos - 1u) / HEAP_ARITY;
        if (!heap_less(t, &e, &t->heap[parent])) break;
        heap_set(t, pos, t->heap[parent]);
        pos = parent;
    }
    heap_set(t, pos, e);
}

static void sift_down(TreeObject *t, uint32_t pos) {
    HeapEntry e = t->heap[pos];
    uint32_t n = t->heap_len;
    for (;;) {
        uint32_t first = HEAP_ARITY * pos + 1u;
        if (first >= n) break;
        uint32_t end = first + HEAP_ARITY < n ? first + HEAP_ARITY : n;
        uint32_t c = first;
        for (uint32_t k = first + 1u; k < end; k++)
            if (heap_less(t, &t->heap[k], &t->heap[c])) c = k;
        if (!heap_less(t, &t->heap[c], &e)) break;
        heap_set(t, pos, t->heap[c]);
        pos = c;
    }
    heap_set(t, pos, e);
}

static void heap_remove(TreeObject *t, uint32_t pos) {
    uint32_t gone = t->heap[pos].node;
    t->heap_len--;
    if (pos < t->heap_len) {
        HeapEntry moved = t->heap[t->heap_len];
        heap_set(t, pos, moved);
        sift_up(t, pos);
        sift_down(t, t->heap_pos[moved.node]);
    }
    t->heap_pos[gone] = NIL;
}

static inline uint32_t node_last_of(const TreeObject *t, uint32_t n) {
    return node_last(t, &t->nodes[n]);
}

/* After a match stamped the path that ends at node n (R-LRU-1) and told the policy: n's
 * tail key can only have grown -- a newer stamp, one more hit, the protected segment; its
 * priority and birth unchanged, and a key the policy lowered meanwhile (an expiry, a
 * demotion) already re-filed by it -- and whether n is an evictable leaf has not changed,
 * so its entry, if it has one, can only sink.  O(log h). */
static void heap_sink(TreeObject *t, uint32_t n) {
    uint32_t pos = t->heap_pos[n];
    if (pos == NIL) return;
    t->heap[pos].key = pol_rank(t, node_last_of(t, n));
    sift_down(t, pos);
}

static inline int is_evictable_leaf(const TreeObject *t, const Node *x) {
    return x->parent < NODE_FREE && x->nblocks > 0 && x->nchildren == 0 &&
           t->pins[node_last(t, x)] == 0;
}

/* Bring node n's heap entry in line with its state (the reference's "offer", made
 * exact: the heap holds precisely the evictable leaves, keyed by their tails). */
void heap_update(TreeObject *t, uint32_t n) {
    Node *x = &t->nodes[n];
    if (is_evictable_leaf(t, x)) {
        uint32_t last = node_last(t, x);
        HeapEntry e = {pol_rank(t, last), n};
        if (t->pol.owner != NULL) t->pol.owner[last] = n;
        if (t->heap_pos[n] == NIL) {
            uint32_t pos = t->heap_len++;
            heap_set(t, pos, e);
            sift_up(t, pos);
        } else {
            uint32_t pos = t->heap_pos[n];
            t->heap[pos] = e;
            sift_up(t, pos);
            sift_down(t, t->heap_pos[n]);
        }
    } else if (t->heap_pos[n] != NIL) {
        heap_remove(t, t->heap_pos[n]);
    }
}

/* ------------------------------------------------------------------ nodes and roots */

static int grow_nodes(TreeObject *t, uint32_t extra) {
    uint64_t need = (uint64_t)t->nodes_len + extra;
    if (need > t->nodes_cap) {
        uint64_t cap = t->nodes_cap ? t->nodes_cap : 64;
        while (cap < need) cap += cap / 4u; /* 1.25x: little slack per cached block */
        if (cap >= NODE_FREE) {
            PyErr_NoMemory();
            return -1;
        }
        Node *p = PyMem_Realloc(t->nodes, (size_t)cap * sizeof(Node));
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        t->nodes = p;
        uint32_t *hp = PyMem_Realloc(t->heap_pos, (size_t)cap * sizeof(uint32_t));
        if (hp == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        t->heap_pos = hp;
        PNode **pp = PyMem_Realloc(t->pub, (size_t)cap * sizeof(PNode *));
        if (pp == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        t->pub = pp;
        t->nodes_cap = (uint32_t)cap;
    }
    /* The heap holds evictable leaves only, and one call adds at most one leaf (a new
     * child; a split adds an inner node, an eviction replaces a leaf by at most its
     * parent), so `leaves + extra` entries always suffice. */
    uint64_t hneed = (uint64_t)t->leaves + extra;
    if (hneed > t->heap_cap) {
        uint64_t cap = t->heap_cap ? t->heap_cap : 64;
        while (cap < hneed) cap += cap / 4u;
        HeapEntry *h = PyMem_Realloc(t->heap, (size_t)cap * sizeof(HeapEntry));
        if (h == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        t->heap = h;
        t->heap_cap = (uint32_t)cap;
    }
    return 0;
}

/* Capacity for the mutation phase of one call: a split, a new child and a root. */
static int reserve(TreeObject *t) {
    if (grow_nodes(t, 3) < 0) return -1;
    if (t->roots_len + 1u > t->roots_cap) {
        uint32_t cap = t->roots_cap ? t->roots_cap * 2u : 8u;
        RootSlot *r = PyMem_Realloc(t->roots, (size_t)cap * sizeof(RootSlot));
        if (r == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        t->roots = r;
        t->roots_cap = cap;
    }
    return 0;
}

static uint32_t node_new(TreeObject *t) {
    uint32_t n;
    if (t->free_node != NIL) {
        n = t->free_node;
        t->free_node = t->nodes[n].off;
    } else {
        n = t->nodes_len++;
    }
    Node *x = &t->nodes[n];
    memset(x, 0, sizeof(Node));
    x->parent = NIL;
    t->heap_pos[n] = NIL;
    t->pub[n] = NULL;
    return n;
}

static void node_free(TreeObject *t, uint32_t n) {
    Node *x = &t->nodes[n];
    chunk_decref(x->chunk);
    memset(x, 0, sizeof(Node));
    x->parent = NODE_FREE;
    t->heap_pos[n] = NIL;
    x->off = t->free_node;
    t->free_node = n;
}

/* Create the (empty) root of ns (NULL: the default namespace). Fallible; call it in
 * the preparation phase after reserve(). */
static uint32_t root_create(TreeObject *t, PyObject *ns) {
    uint32_t r = node_new(t);
    if (ns != NULL) {
        PyObject *idx = PyLong_FromUnsignedLong(r);
        if (idx == NULL || PyDict_SetItem(t->ns_roots, ns, idx) < 0) {
            Py_XDECREF(idx);
            node_free(t, r);
            return NIL;
        }
        Py_DECREF(idx);
        Py_INCREF(ns);
    } else {
        t->default_root = r;
    }
    t->nodes[r].off = t->roots_len;
    t->roots[t->roots_len].ns = ns;
    t->roots[t->roots_len].node = r;
    t->roots_len++;
    sh_root_create(t, r, ns);
    return r;
}

static void root_delete(TreeObject *t, uint32_t r) {
    sh_root_delete(t, r);
    uint32_t slot = t->nodes[r].off;
    PyObject *ns = t->roots[slot].ns;
    if (ns == NULL) {
        t->default_root = NIL;
    } else {
        /* An exact str key known to be present: no Python code runs, cannot fail. */
        if (PyDict_DelItem(t->ns_roots, ns) < 0) PyErr_Clear();
        Py_DECREF(ns);
    }
    t->roots_len--;
    if (slot != t->roots_len) {
        t->roots[slot] = t->roots[t->roots_len];
        t->nodes[t->roots[slot].node].off = slot;
    }
    node_free(t, r);
}

static int path_reserve(TreeObject *t, Py_ssize_t n) {
    size_t need = (size_t)(n ? n : 1);
    if (t->scratch_path_cap >= need) return 0;
    size_t cap = t->scratch_path_cap ? t->scratch_path_cap : 256;
    while (cap < need) cap *= 2;
    uint32_t *p = PyMem_Realloc(t->scratch_path, cap * sizeof(uint32_t));
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    t->scratch_path = p;
    t->scratch_path_cap = cap;
    return 0;
}

/* ------------------------------------------------------------------ mutations (infallible) */

/* Stamp the blocks (R-LRU-1); the caller then tells the policy and re-files `last`. */
static void stamp_path(TreeObject *t, const uint32_t *blocks, Py_ssize_t n, uint64_t now) {
    uint64_t *stamps = t->stamps;
    Py_ssize_t i = 0;
    for (; i + 4 <= n; i += 4) { /* four a step: a 1,024-token match stamps 64 blocks */
        uint32_t a = blocks[i], b = blocks[i + 1], c = blocks[i + 2], d = blocks[i + 3];
        stamps[a] = now;
        stamps[b] = now;
        stamps[c] = now;
        stamps[d] = now;
    }
    for (; i < n; i++) stamps[blocks[i]] = now;
}

static void pin_path(TreeObject *t, const uint32_t *blocks, Py_ssize_t n, uint32_t last, int delta) {
    uint32_t *pins = t->pins;
    if (delta > 0) {
        for (Py_ssize_t i = 0; i < n; i++) t->pinned += pins[blocks[i]]++ == 0;
    } else {
        for (Py_ssize_t i = 0; i < n; i++) t->pinned -= --pins[blocks[i]] == 0;
    }
    if (last != NIL) heap_update(t, last);
}

/* Split node x after its first `at` blocks (0 < at < nblocks) (R-SPLIT-1): a new upper
 * node takes the first `at` blocks and x's place under the parent; x keeps the rest,
 * its children and its heap entry.  Both halves share x's chunk.  Returns the upper
 * node. */
static uint32_t split(TreeObject *t, uint32_t x, uint32_t at) {
    uint32_t u = node_new(t);
    PNode *pu = sh_split(t, x, at, u);
    if (pu != NULL) t->pub[u] = pu;
    Node *X = &t->nodes[x], *U = &t->nodes[u];
    U->parent = X->parent;
    U->chunk = X->chunk;
    U->chunk->rc++;
    U->off = X->off;
    U->nblocks = at;
    U->nchildren = 1;
    X->off += at;
    X->nblocks -= at;
    X->parent = u;
    t->live_nodes++;
    return u;
}

static void remove_leaf(TreeObject *t, uint32_t n, uint32_t protect_root) {
    sh_remove_leaf(t, n);
    uint32_t p = t->nodes[n].parent;
    t->nodes[p].nchildren--;
    t->live_nodes--;
    t->leaves -= t->nodes[p].parent == NIL || t->nodes[p].nchildren > 0; /* p may become one */
    if (t->nodes[p].parent != NIL)
        heap_update(t, p);
    else if (t->nodes[p].nchildren == 0 && p != protect_root)
        root_delete(t, p); /* R-NS-3: an emptied namespace disappears */
}

/* ------------------------------------------------------------------ quarantine (R-EPOCH-*) */

/* Capacity to quarantine `count` more ids in one more batch (fallible; before mutating). */
static int q_reserve(TreeObject *t, size_t count) {
    if (t->qb_head > 0 && t->qb_len + 1u > t->qb_cap) {
        memmove(t->qb, t->qb + t->qb_head, (t->qb_len - t->qb_head) * sizeof(QBatch));
        t->qb_len -= t->qb_head;
        t->qb_head = 0;
    }
    if (t->qb_len + 1u > t->qb_cap) {
        size_t cap = t->qb_cap ? t->qb_cap * 2u : 8u;
        QBatch *q = PyMem_Realloc(t->qb, cap * sizeof(QBatch));
        if (q == NULL) goto oom;
        t->qb = q;
        t->qb_cap = cap;
    }
    if (t->qid_head > 0 && t->qid_len + count > t->qid_cap) {
        memmove(t->qids, t->qids + t->qid_head, (t->qid_len - t->qid_head) * sizeof(uint32_t));
        t->qid_len -= t->qid_head;
        t->qid_head = 0;
    }
    if (t->qid_len + count > t->qid_cap) {
        size_t cap = t->qid_cap ? t->qid_cap : 64u;
        while (cap < t->qid_len + count) cap *= 2u;
        uint32_t *q = PyMem_Realloc(t->qids, cap * sizeof(uint32_t));
        if (q == NULL) goto oom;
        t->qids = q;
        t->qid_cap = cap;
    }
    return 0;
oom:
    PyErr_NoMemory();
    return -1;
}

/* Free evicted blocks, or quarantine them while an earlier reader is inside: every
 * registered reader drew its epoch before this free's. */
static void retire(TreeObject *t, const uint32_t *ids, Py_ssize_t n) {
    uint64_t epoch = ++t->epochs;
    if (t->nreaders > 0) {
        t->qb[t->qb_len++] = (QBatch){epoch, (uint32_t)n};
        memcpy(t->qids + t->qid_len, ids, (size_t)n * sizeof(uint32_t));
        t->qid_len += (size_t)n;
        t->quarantined += (uint64_t)n;
    } else {
        for (Py_ssize_t i = 0; i < n; i++) ba_put(&t->alloc, ids[i]);
    }
}

/* Quarantined blocks whose readers have all left (batches are in epoch order). */
static uint64_t q_reclaimable(const TreeObject *t) {
    uint64_t total = 0;
    for (size_t i = t->qb_head; i < t->qb_len; i++) {
        if (t->nreaders > 0 && t->qb[i].epoch >= t->readers[0]) break;
        total += t->qb[i].n;
    }
    return total;
}

/* Return those blocks to the allocator (t_qids_peek reads their ids first). */
static size_t q_reclaim(TreeObject *t) {
    size_t done = 0;
    while (t->qb_head < t->qb_len &&
           (t->nreaders == 0 || t->qb[t->qb_head].epoch < t->readers[0])) {
        uint32_t n = t->qb[t->qb_head++].n;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t b = t->qids[t->qid_head++];
            ba_put(&t->alloc, b);
            done++;
        }
    }
    if (t->qb_head == t->qb_len) t->qb_head = t->qb_len = t->qid_head = t->qid_len = 0;
    t->quarantined -= done;
    return done;
}

/* The first n quarantined ids, in quarantine order. */
static size_t t_qids_peek(const TreeObject *t, uint32_t *out, size_t n) {
    size_t have = t->qid_len - t->qid_head;
    if (n > have) n = have;
    if (n > 0) memcpy(out, t->qids + t->qid_head, n * sizeof(uint32_t));
    return n;
}

/* Evict up to `count` leaf-tail blocks in (stamp, block id) order; ids go to out.  If
 * any, publish the new version, then retire the ids (R-EPOCH-1).  Precondition: with
 * readers registered, q_reserve(count) succeeded. */
static Py_ssize_t evict_blocks(TreeObject *t, Py_ssize_t count, uint32_t *out,
                               uint32_t protect_root) {
    Py_ssize_t done = 0;
    while (done < count && t->heap_len > 0) {
        uint32_t n = t->heap[0].node;
        Node *x = &t->nodes[n];
        uint32_t b = node_last(t, x); /* its tail */
        /* A leaf loses its blocks one per iteration, then its published version and a
         * parent update: start those loads now, while its tail
         * blocks are trimmed, and the node records of the next victims (heap[0]'s
         * children).  In a tree of a million blocks each is otherwise a cache miss. */
        __builtin_prefetch(&t->nodes[x->parent], 1);
        __builtin_prefetch(x->chunk, 1);
        __builtin_prefetch(t->pub[n], 1);
        __builtin_prefetch(t->pub[x->parent], 1);
        for (uint32_t k = 1; k <= HEAP_ARITY && k < t->heap_len; k++)
            __builtin_prefetch(&t->nodes[t->heap[k].node], 1);
        if (x->nblocks == 1) {
            heap_remove(t, 0);
            remove_leaf(t, n, protect_root);
            node_free(t, n);
        } else {
            x->nblocks--;
            /* With no snapshot alive and no clone sharing the chunk nothing reads past
             * the trimmed edge, so the leaf's next extension may append in place again. */
            if (pctx_sole(t->pctx) && x->off + x->nblocks + 1u == x->chunk->used) x->chunk->used--;
            sh_trim(t, n);
            heap_update(t, n);
        }
        pol_freed(t, b);
        out[done++] = b;
        t->cached--;
    }
    if (done > 0) {
        t->version++; /* readers entering from now on cannot see these blocks */
        retire(t, out, done);
    }
    return done;
}

/* Whether leaf x can take `count` more blocks at the end of its own chunk. */
static inline int grows_in_place(const Node *x, uint64_t count) {
    return x->off + x->nblocks == x->chunk->used && x->chunk->used + count <= x->chunk->cap;
}

/* Reserve the chunks attach() may need, in the preparation phase (fallible; changes
 * nothing).  Without eviction, attach() sees the walked shape: a new child needs a chunk
 * of its own, a leaf extended past the end of its chunk a bigger copy (1.5x, so a chat's
 * next turns append in place), a leaf growing in place nothing.  An eviction first may
 * trim the last node reached or strip its children, so then both are reserved. */
static int chunk_reserve(TreeObject *t, uint32_t last, uint32_t last_used, Py_ssize_t reused,
                         Py_ssize_t needed, Py_ssize_t nevict) {
    int child = 1, copy = 0;
    uint64_t total = 0;
    if (reused > 0) {
        const Node *x = &t->nodes[last];
        int extends = x->nchildren == 0 && last_used == x->nblocks;
        total = (uint64_t)x->nblocks + (uint64_t)needed;
        if (nevict > 0) {
            copy = 1;
        } else {
            child = !extends;
            copy = extends && !grows_in_place(x, (uint64_t)needed);
        }
    }
    if (child && (t->res_new = chunk_new((uint32_t)needed, t->B)) == NULL) goto oom;
    if (copy) {
        uint64_t cap = total + total / 2u;
        if (cap > MAX_POOL) cap = total;
        if ((t->res_ext = chunk_new((uint32_t)cap, t->B)) == NULL) goto oom;
    }
    return 0;
oom:
    PyErr_NoMemory();
    return -1;
}

/* Give back what chunk_reserve() reserved and attach() did not use. */
static void chunk_unreserve(TreeObject *t) {
    PyMem_Free(t->res_new);
    PyMem_Free(t->res_ext);
    t->res_new = t->res_ext = NULL;
}

/* Hang the new blocks ids[0..count) (blocks reused..wanted of tok) off the path.  Their
 * tokens and ids go into the extended leaf's chunk past its end (where no version of
 * any node reads), or into a chunk reserved by chunk_reserve().  Returns the node now
 * holding the path's last block. */
static uint32_t attach(TreeObject *t, uint32_t root, uint32_t last, uint32_t last_used,
                       Py_ssize_t reused, const uint32_t *tok, const uint32_t *ids,
                       Py_ssize_t count) {
    const uint32_t B = t->B;
    const uint32_t *src = tok + (size_t)reused * B;
    uint32_t parent;
    if (reused == 0) {
        parent = root;
    } else {
        parent = last;
        if (last_used < t->nodes[last].nblocks) parent = split(t, last, last_used);
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        t->pins[ids[i]] = 0;
        t->stamps[ids[i]] = 0;
    }
    t->cached += (uint64_t)count;
    Node *P = &t->nodes[parent];
    if (P->parent != NIL && P->nchildren == 0) {
        /* Extending a leaf in place (a chat's next turn) keeps the tree compact. */
        PChunk *ch = P->chunk;
        if (!grows_in_place(P, (uint64_t)count)) {
            PChunk *nc = t->res_ext;
            t->res_ext = NULL;
            memcpy(nc->tok, node_tok(t, P), (size_t)P->nblocks * B * 4u);
            memcpy(chunk_ids(nc, B), node_ids(t, P), (size_t)P->nblocks * 4u);
            nc->used = P->nblocks;
            chunk_decref(ch);
            P->chunk = ch = nc;
            P->off = 0;
        }
        memcpy(ch->tok + (size_t)ch->used * B, src, (size_t)count * B * 4u);
        memcpy(chunk_ids(ch, B) + ch->used, ids, (size_t)count * 4u);
        ch->used += (uint32_t)count;
        P->nblocks += (uint32_t)count;
        sh_extend(t, parent);
        heap_update(t, parent);
        return parent;
    }
    PChunk *nc = t->res_new;
    t->res_new = NULL;
    memcpy(nc->tok, src, (size_t)count * B * 4u);
    memcpy(chunk_ids(nc, B), ids, (size_t)count * 4u);
    nc->used = (uint32_t)count;
    uint32_t c = node_new(t);
    Node *C = &t->nodes[c];
    C->parent = parent;
    C->chunk = nc;
    C->off = 0;
    C->nblocks = (uint32_t)count;
    t->nodes[parent].nchildren++;
    t->live_nodes++;
    t->leaves++; /* the parent is a root or already has children */
    sh_attach(t, parent, c);
    heap_update(t, c);
    return c;
}

/* ------------------------------------------------------------------ argument parsing */

static int kw_is(PyObject *key, PyObject *name) {
    return key == name || PyUnicode_Compare(key, name) == 0;
}

/* (tokens, namespace=None, *, pin=False), and for insert (priority and retain_for not
 * NULL) also priority=None, retain_for=None (left NULL when not given). */
static int parse_call(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames, PyObject **tokens, PyObject **ns, int *pin,
                      PyObject **priority, PyObject **retain_for) {
    PyObject *pin_obj = NULL;
    *tokens = NULL;
    *ns = Py_None;
    if (nargs > 2) {
        PyErr_Format(PyExc_TypeError, "%s() takes from 1 to 2 positional arguments but %zd were given",
                     fname, nargs);
        return -1;
    }
    if (nargs >= 1) *tokens = args[0];
    if (nargs >= 2) *ns = args[1];
    if (kwnames != NULL) {
        Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t i = 0; i < nk; i++) {
            PyObject *key = PyTuple_GET_ITEM(kwnames, i);
            PyObject *val = args[nargs + i];
            if (kw_is(key, G.s_pin)) {
                pin_obj = val;
            } else if (priority != NULL && kw_is(key, G.s_priority)) {
                *priority = val;
            } else if (retain_for != NULL && kw_is(key, G.s_retain_for)) {
                *retain_for = val;
            } else if (kw_is(key, G.s_namespace) && nargs < 2) {
                *ns = val;
            } else if (kw_is(key, G.s_tokens) && nargs < 1) {
                *tokens = val;
            } else {
                PyErr_Format(PyExc_TypeError, "%s() got an unexpected or repeated keyword argument '%U'",
                             fname, key);
                return -1;
            }
        }
    }
    if (*tokens == NULL) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument 'tokens'", fname);
        return -1;
    }
    *pin = 0;
    if (pin_obj != NULL) {
        int truth = PyObject_IsTrue(pin_obj);
        if (truth < 0) return -1;
        *pin = truth;
    }
    return 0;
}

/* None -> NULL; exact str -> new ref; str subclass -> new exact str; else error. */
static int norm_namespace(PyObject *ns, PyObject **out) {
    *out = NULL;
    if (ns == Py_None) return 0;
    if (PyUnicode_CheckExact(ns)) {
        *out = Py_NewRef(ns);
        return 0;
    }
    if (PyUnicode_Check(ns)) {
        *out = PyUnicode_FromObject(ns);
        return *out ? 0 : -1;
    }
    PyErr_Format(G.InvalidArgumentError, "namespace must be None or a str, got %s %R",
                 Py_TYPE(ns)->tp_name, ns);
    return -1;
}

/* ------------------------------------------------------------------ leases */

static int lease_fill(TreeObject *t, LeaseObject *l, const uint32_t *tok, Py_ssize_t count) {
    size_t nb = (size_t)count, nt = (size_t)count * t->B;
    l->store = PyMem_Malloc(sizeof(LeaseStore) + (nb + nt) * sizeof(uint32_t));
    if (l->store == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    l->store->rc = 1;
    l->blocks = l->store->v;
    l->tokens = l->blocks + nb;
    memcpy(l->tokens, tok, nt * sizeof(uint32_t));
    l->count = (uint32_t)count;
    l->B = t->B;
    return 0;
}

static void lease_link(TreeObject *t, LeaseObject *l, PyObject *ns, const uint32_t *blocks) {
    memcpy(l->blocks, blocks, (size_t)l->count * sizeof(uint32_t));
    l->id = ++t->lease_ids;
    l->ns = Py_NewRef(ns ? ns : Py_None);
    l->tree = (TreeObject *)Py_NewRef((PyObject *)t);
    Py_INCREF(l); /* the tree's reference */
    l->lprev = NULL;
    l->lnext = t->lease_head;
    if (t->lease_head) t->lease_head->lprev = l;
    t->lease_head = l;
    l->linked = 1;
    t->nleases++;
}

static void lease_unlink(TreeObject *t, LeaseObject *l) {
    if (l->lprev)
        l->lprev->lnext = l->lnext;
    else
        t->lease_head = l->lnext;
    if (l->lnext) l->lnext->lprev = l->lprev;
    l->lprev = l->lnext = NULL;
    l->linked = 0;
    t->nleases--;
}

/* ------------------------------------------------------------------ RadixTree methods */

static PyObject *Tree_match(TreeObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames) {
    PyObject *tokens_obj, *ns_obj, *ns = NULL;
    int pin = 0;
    if (nargs == 1 && kwnames == NULL) { /* match(tokens): the common call, nothing to parse */
        tokens_obj = args[0];
        ns_obj = Py_None;
    } else if (parse_call("match", args, nargs, kwnames, &tokens_obj, &ns_obj, &pin, NULL, NULL) < 0) {
        return NULL;
    }
    LeaseObject *lease = NULL;
    if (pin && (lease = lease_alloc()) == NULL) return NULL;
    Tokens tk;
    MatchResultObject *res = NULL;
    if (tokens_get(self, tokens_obj, &tk) < 0) goto fail_no_tokens;
    if (norm_namespace(ns_obj, &ns) < 0) goto fail;
    uint32_t root = tree_root_of(self, ns);
    if (shadow_ensure(self) < 0) goto fail;
    Py_ssize_t limit = tk.n / self->B, matched;
    uint32_t last, used;
    if (limit <= RESULT_SMALL_IDS) {
        /* A small result has room for every block the walk can find (objects.c): the walk
         * writes the ids into it, and the result keeps as many as it found. */
        if ((res = match_result_new(limit)) == NULL) goto fail;
        matched = tree_walk(self, root, tk.data, limit, res->ids, &last, &used);
        Py_SET_SIZE(res, matched);
    } else {
        if (path_reserve(self, limit) < 0) goto fail;
        matched = tree_walk(self, root, tk.data, limit, self->scratch_path, &last, &used);
        if ((res = match_result_new(matched)) == NULL) goto fail;
        memcpy(res->ids, self->scratch_path, (size_t)matched * sizeof(uint32_t));
    }
    if (pin && lease_fill(self, lease, tk.data, matched) < 0) goto fail;
    if (pol_reserve(self, matched) < 0) goto fail;
    /* ---- mutation phase: nothing below can fail */
    res->length = matched * (Py_ssize_t)self->B;
    stamp_path(self, res->ids, matched, pol_tick(self));
    if (self->pol.kind != POL_LRU) pol_found(self, res->ids, matched, NULL);
    if (last != NIL) {
        if (pin)
            heap_update(self, last);
        else
            heap_sink(self, last);
    }
    if (pin) {
        pin_path(self, res->ids, matched, last, +1);
        lease_link(self, lease, ns, res->ids);
        Py_SETREF(res->lease, (PyObject *)lease);
    }
    self->version++;
    tokens_release(self, &tk);
    Py_XDECREF(ns);
    return (PyObject *)res;
fail:
    tokens_release(self, &tk);
fail_no_tokens:
    Py_XDECREF(ns);
    Py_XDECREF(res);
    Py_XDECREF(lease);
    return NULL;
}

static PyObject *Tree_insert(TreeObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames) {
    PyObject *tokens_obj, *ns_obj, *ns = NULL, *priority = NULL, *retain_for = NULL;
    int pin;
    if (parse_call("insert", args, nargs, kwnames, &tokens_obj, &ns_obj, &pin, &priority,
                   &retain_for) < 0)
        return NULL;
    LeaseObject *lease = NULL;
    if (pin && (lease = lease_alloc()) == NULL) return NULL;
    Tokens tk;
    InsertResultObject *res = NULL;
    if (tokens_get(self, tokens_obj, &tk) < 0) goto fail_no_tokens;
    if (norm_namespace(ns_obj, &ns) < 0) goto fail;
    Ask ask;
    if (pol_ask(self, priority, retain_for, ns, &ask) < 0) goto fail;
    uint32_t root = tree_root_of(self, ns);
    if (shadow_ensure(self) < 0) goto fail;
    const uint32_t B = self->B;
    Py_ssize_t wanted = tk.n / B;
    if (path_reserve(self, wanted) < 0) goto fail;
    uint32_t *path = self->scratch_path;
    uint32_t last, used;
    Py_ssize_t reused = tree_walk(self, root, tk.data, wanted, path, &last, &used);
    Py_ssize_t needed = wanted - reused;
    Py_ssize_t nevict = 0;
    int short_of_blocks = needed > (Py_ssize_t)self->alloc.free_count;
    if (short_of_blocks) {
        /* R-INS-6, R-EPOCH-3: free + reclaimable + (with no reader inside) the evictable
         * blocks off the path; the reference pins the path before evicting, so its
         * unpinned blocks do not count. No Python code runs from here to the end of
         * the call, so no reader can enter or leave in between. */
        uint64_t reclaimable = q_reclaimable(self), evictable = 0;
        if (self->nreaders == 0) {
            uint64_t extra = 0;
            for (Py_ssize_t i = 0; i < reused; i++) extra += self->pins[path[i]] == 0;
            evictable = self->cached - self->pinned - extra;
        }
        if ((uint64_t)needed > self->alloc.free_count + reclaimable + evictable) {
            PyErr_Format(G.OutOfBlocksError,
                         "insert needs %zd new blocks: %u are free, %llu can be reclaimed and "
                         "only %llu more can be evicted (%llu pinned, %llu quarantined for %zd "
                         "readers)",
                         needed, self->alloc.free_count, (unsigned long long)reclaimable,
                         (unsigned long long)evictable, (unsigned long long)self->pinned,
                         (unsigned long long)self->quarantined, self->nreaders);
            goto fail;
        }
        Py_ssize_t shortfall = needed - (Py_ssize_t)(self->alloc.free_count + reclaimable);
        nevict = shortfall > 0 ? shortfall : 0;
    }
    res = insert_result_new(wanted, needed, nevict);
    if (res == NULL) goto fail;
    if (pin && lease_fill(self, lease, tk.data, wanted) < 0) goto fail;
    if (reserve(self) < 0 || pol_reserve(self, wanted) < 0) goto fail;
    if (self->ev != NULL && ev_prepare_insert(self, ns, needed, nevict) < 0) goto fail;
    if (needed > 0 && chunk_reserve(self, last, used, reused, needed, nevict) < 0) goto fail;
    if (needed > 0 && root == NIL) {
        root = root_create(self, ns);
        if (root == NIL) goto fail;
    }
    /* ---- mutation phase: nothing below can fail */
    uint32_t *out_blocks = res->ids;
    uint32_t *out_alloc = res->ids + wanted;
    uint32_t *out_evict = out_alloc + needed;
    if (short_of_blocks) q_reclaim(self);
    if (nevict > 0) {
        /* No reader is inside (else nothing would be evictable): the ids go straight
         * back to the allocator. */
        pin_path(self, path, reused, last, +1);
        evict_blocks(self, nevict, out_evict, root);
        pin_path(self, path, reused, last, -1);
        if (self->ev != NULL) ev_log_remove(self, out_evict, nevict); /* R-EVENT-4 */
        /* Eviction may have trimmed the unpinned tail of the last edge we reached. */
        reused = tree_walk(self, root, tk.data, wanted, path, &last, &used);
    }
    if (needed > 0) {
        for (Py_ssize_t i = 0; i < needed; i++) out_alloc[i] = ba_take_smallest(&self->alloc);
        last = attach(self, root, last, used, reused, tk.data, out_alloc, needed);
        memcpy(path + reused, out_alloc, (size_t)needed * sizeof(uint32_t));
        if (self->ev != NULL) /* the new blocks end the path (R-EVENT-2, R-EVENT-3) */
            ev_log_store(self, reused > 0 ? path[reused - 1] : NIL, out_alloc,
                         tk.data + (size_t)reused * B, needed);
    }
    memcpy(out_blocks, path, (size_t)wanted * sizeof(uint32_t));
    res->length = wanted * (Py_ssize_t)B;
    res->reused = reused;
    uint64_t now = pol_tick(self);
    stamp_path(self, out_blocks, wanted, now);
    if (self->pol.kind != POL_LRU) {
        pol_found(self, out_blocks, reused, &ask);
        pol_cached(self, out_blocks + reused, wanted - reused, now, &ask);
    }
    if (last != NIL) heap_update(self, last);
    if (pin) {
        pin_path(self, out_blocks, wanted, last, +1);
        lease_link(self, lease, ns, out_blocks);
        Py_SETREF(res->lease, (PyObject *)lease);
    }
    self->version++;
    if (self->ev != NULL) ev_flush(self); /* one batch per operation (R-EVENT-5) */
    chunk_unreserve(self);
    tokens_release(self, &tk);
    Py_XDECREF(ns);
    return (PyObject *)res;
fail:
    chunk_unreserve(self);
    tokens_release(self, &tk);
fail_no_tokens:
    Py_XDECREF(ns);
    Py_XDECREF(res);
    Py_XDECREF(lease);
    return NULL;
}

PyObject *Tree_release(TreeObject *self, PyObject *arg) {
    if (!PyObject_TypeCheck(arg, &Lease_Type) || ((LeaseObject *)arg)->tree != self) {
        PyErr_Format(G.ForeignLeaseError, "%R was not issued by this tree", arg);
        return NULL;
    }
    LeaseObject *l = (LeaseObject *)arg;
    if (l->released) {
        PyErr_Format(G.LeaseReleasedError, "lease %llu was already released",
                     (unsigned long long)l->id);
        return NULL;
    }
    if (path_reserve(self, l->count) < 0 || pol_reserve(self, l->count) < 0) return NULL;
    uint32_t root = tree_root_of(self, l->ns);
    if (shadow_ensure(self) < 0) return NULL;
    uint32_t last, used;
    Py_ssize_t matched = tree_walk(self, root, l->tokens, l->count, self->scratch_path, &last, &used);
    if (matched != (Py_ssize_t)l->count ||
        memcmp(self->scratch_path, l->blocks, (size_t)l->count * sizeof(uint32_t)) != 0) {
        PyErr_Format(G.InvariantViolation, "lease %llu's path is no longer cached",
                     (unsigned long long)l->id);
        return NULL;
    }
    pin_path(self, l->blocks, l->count, last, -1);
    stamp_path(self, l->blocks, l->count, pol_tick(self));
    pol_released(self, l->blocks, l->count);
    if (last != NIL) heap_update(self, last);
    self->version++;
    l->released = 1;
    lease_unlink(self, l);
    Py_DECREF(l); /* the tree's reference; the caller still holds one */
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ evict's preview
 *
 * evict() returns its ids as a tuple of ints, and boxing them may fail: so the ids are
 * found first, without changing anything, boxed, and only then evicted (R-ERR-2: a call
 * that raises changes nothing).  The preview replays evict_blocks' order over the heap as
 * it is: the smallest (stamp, tail id) among the evictable leaves, a trimmed leaf filed
 * again under its new tail, a parent left without children filed in turn.  The heap's
 * entries are visited in key order through a frontier of heap positions (a heap's k
 * smallest in O(k log k)); the nodes the replay has changed -- blocks and children left
 * -- are kept in a small open-addressing table.  A heap entry is never stale when it
 * comes up: a leaf enters the table only once its own entry (or, for a parent the replay
 * made a leaf, no entry at all) has come up.  O(k log k) for k ids. */

typedef struct {
    uint64_t key;
    uint32_t tail;
    uint32_t node;
    uint32_t pos; /* the heap position it stands for, or NIL: a node the replay filed */
} PvCand;

typedef struct {
    uint32_t node; /* NIL: an empty slot */
    uint32_t left; /* blocks left */
    uint32_t kids; /* children left */
} PvNode;

typedef struct {
    PvCand *cand;
    size_t n, cap;
    PvNode *tab;
    size_t mask;
} Preview;

/* The heap's order.  Two candidates never share a key (every policy's key holds the
 * tail's stamp or birth time, and R-LRU-4: two leaf tails are never stamped -- nor born
 * -- by one call, and a node is a candidate once at a time), so the tie-break by tail
 * id, kept to state the order fully, is never reached. */
static inline int pv_less(const PvCand *a, const PvCand *b) {
    if (a->key != b->key) return a->key < b->key;
    return a->tail < b->tail;
}

static int pv_push(Preview *p, PvCand c) {
    if (p->n == p->cap) {
        size_t cap = p->cap * 2u;
        PvCand *g = PyMem_Realloc(p->cand, cap * sizeof(PvCand));
        if (g == NULL) return -1;
        p->cand = g;
        p->cap = cap;
    }
    size_t i = p->n++;
    while (i > 0 && pv_less(&c, &p->cand[(i - 1) / 2])) {
        p->cand[i] = p->cand[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    p->cand[i] = c;
    return 0;
}

static PvCand pv_pop(Preview *p) {
    PvCand top = p->cand[0], last = p->cand[--p->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= p->n) break;
        if (c + 1 < p->n && pv_less(&p->cand[c + 1], &p->cand[c])) c++;
        if (!pv_less(&p->cand[c], &last)) break;
        p->cand[i] = p->cand[c];
        i = c;
    }
    if (p->n > 0) p->cand[i] = last;
    return top;
}

/* Node n's slot in the table (a new one, filled from the node's record, if absent). */
static PvNode *pv_node(Preview *p, const TreeObject *t, uint32_t n) {
    size_t i = (size_t)(n * 0x9E3779B1u) & p->mask;
    while (p->tab[i].node != NIL && p->tab[i].node != n) i = (i + 1) & p->mask;
    if (p->tab[i].node == NIL) p->tab[i] = (PvNode){n, t->nodes[n].nblocks, t->nodes[n].nchildren};
    return &p->tab[i];
}

static int pv_push_heap(Preview *p, const TreeObject *t, uint32_t pos) {
    const HeapEntry *e = &t->heap[pos];
    return pv_push(p, (PvCand){e->key, node_last_of(t, e->node), e->node, pos});
}

/* The ids evict_blocks(t, count, ...) would evict, in its order, into out: count of them
 * (at most the unpinned blocks, all of which are evictable), or -1 with MemoryError set.
 * Changes nothing. */
static Py_ssize_t evict_preview(TreeObject *t, Py_ssize_t count, uint32_t *out) {
    Py_ssize_t done = 0;
    if (count == 0) return 0; /* else an unpinned block exists, so an evictable leaf does */
    /* At most two nodes change per id (the leaf, and its parent when the leaf goes), so a
     * table of twice that many slots stays at most half full. */
    size_t touched = (size_t)count * 2u < t->nodes_len ? (size_t)count * 2u : t->nodes_len;
    size_t slots = 16;
    while (slots < 2u * touched) slots *= 2u;
    Preview p = {PyMem_Malloc(64 * sizeof(PvCand)), 0, 64, PyMem_Malloc(slots * sizeof(PvNode)),
                 slots - 1u};
    if (p.cand == NULL || p.tab == NULL) goto oom;
    for (size_t i = 0; i < slots; i++) p.tab[i].node = NIL;
    const HeapEntry *top = &t->heap[0];
    p.cand[p.n++] = (PvCand){top->key, node_last_of(t, top->node), top->node, 0};
    /* The frontier never runs dry first: each of the count ids is an unpinned leaf tail
     * (a candidate) until it is taken. */
    while (done < count && p.n > 0) {
        PvCand c = pv_pop(&p);
        if (c.pos != NIL) {
            /* A heap entry: its children in the heap come next in key order. */
            for (uint32_t k = 1; k <= HEAP_ARITY; k++) {
                uint64_t child = (uint64_t)HEAP_ARITY * c.pos + k;
                if (child < t->heap_len && pv_push_heap(&p, t, (uint32_t)child) < 0) goto oom;
            }
        }
        PvNode *x = pv_node(&p, t, c.node);
        const uint32_t *ids = node_ids(t, &t->nodes[c.node]);
        out[done++] = ids[--x->left];
        uint32_t next = c.node, tail;
        if (x->left > 0) {
            tail = ids[x->left - 1];
        } else {
            next = t->nodes[c.node].parent; /* the leaf goes: its parent may become one */
            PvNode *y = pv_node(&p, t, next);
            if (--y->kids > 0 || t->nodes[next].parent == NIL) continue;
            tail = node_ids(t, &t->nodes[next])[y->left - 1];
        }
        if (t->pins[tail] == 0 && pv_push(&p, (PvCand){pol_rank(t, tail), tail, next, NIL}) < 0)
            goto oom;
    }
    PyMem_Free(p.cand);
    PyMem_Free(p.tab);
    return done;
oom:
    PyMem_Free(p.cand);
    PyMem_Free(p.tab);
    PyErr_NoMemory();
    return -1;
}

static PyObject *Tree_evict(TreeObject *self, PyObject *arg) {
    if (!PyLong_Check(arg) || PyBool_Check(arg)) goto bad;
    int overflow = 0;
    long long v = int_value(arg, &overflow);
    if (overflow < 0 || (!overflow && v < 0)) goto bad;
    uint64_t count = overflow > 0 ? UINT64_MAX : (uint64_t)v;
    /* Every unpinned cached block is evictable, leaf tail after leaf tail (pins never
     * grow down a path), so the call evicts exactly min(count, unpinned) blocks.  The
     * tuple first: allocating it may run a collection, hence finalizers that change the
     * tree, so its size is checked against the tree once no more Python code can run. */
    PyObject *tuple;
    Py_ssize_t n;
    for (;;) {
        uint64_t evictable = self->cached - self->pinned;
        n = (Py_ssize_t)(count < evictable ? count : evictable);
        if ((tuple = PyTuple_New(n)) == NULL) return NULL;
        evictable = self->cached - self->pinned;
        if ((uint64_t)n == (count < evictable ? count : evictable)) break;
        Py_DECREF(tuple);
    }
    uint32_t *out = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(uint32_t));
    if (out == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    if (evict_preview(self, n, out) < 0) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *id = PyLong_FromUnsignedLong(out[i]);
        if (id == NULL) goto fail;
        PyTuple_SET_ITEM(tuple, i, id);
    }
    if (self->nreaders > 0 && q_reserve(self, (size_t)n) < 0) goto fail;
    if (self->ev != NULL && n > 0 && ev_prepare_evict(self, n) < 0) goto fail;
    /* ---- mutation phase: nothing below can fail; it evicts the very ids boxed above */
    evict_blocks(self, n, out, NIL);
    if (self->ev != NULL && n > 0) {
        ev_log_remove(self, out, n); /* R-EVENT-4 */
        ev_flush(self);              /* R-EVENT-5 */
    }
    PyMem_Free(out);
    return tuple;
fail:
    PyMem_Free(out);
    Py_DECREF(tuple);
    return NULL;
bad:
    PyErr_Format(G.InvalidArgumentError, "evict count must be an int >= 0, got %R", arg);
    return NULL;
}

/* reset_prefix_cache(): with no block in use every cached block goes at once, as an
 * eviction of all of them (every unpinned block is evictable, and with no reader inside
 * their ids go straight back to the allocator); else nothing changes. */
static PyObject *Tree_reset_prefix_cache(TreeObject *self, PyObject *unused) {
    (void)unused;
    if (self->pinned > 0 || self->nreaders > 0 || self->quarantined > 0) Py_RETURN_FALSE;
    Py_ssize_t n = (Py_ssize_t)self->cached;
    uint32_t *out = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(uint32_t));
    if (out == NULL) return PyErr_NoMemory();
    if (self->ev != NULL && ev_prepare_clear(self) < 0) {
        PyMem_Free(out);
        return NULL;
    }
    /* ---- mutation phase: nothing below can fail */
    evict_blocks(self, n, out, NIL); /* R-CLEAR-1; one published version if any */
    if (self->ev != NULL) {
        ev_log_clear(self); /* R-EVENT-7 */
        ev_flush(self);     /* R-EVENT-5 */
    }
    PyMem_Free(out);
    Py_RETURN_TRUE;
}

static PyObject *Tree_stats(TreeObject *self, PyObject *unused) {
    (void)unused;
    PyObject *oldest = self->nreaders > 0 ? PyLong_FromUnsignedLongLong(self->readers[0])
                                          : Py_NewRef(Py_None);
    if (oldest == NULL) return NULL;
    /* R-EPOCH-5: versions published since the oldest reader took its snapshot. */
    PyObject *age = self->nreaders > 0 ? PyLong_FromUnsignedLongLong(
                                             self->version - self->reader_versions[0])
                                       : Py_NewRef(Py_None);
    if (age == NULL) {
        Py_DECREF(oldest);
        return NULL;
    }
    PyObject *kw = Py_BuildValue(
        "{s:I,s:I,s:K,s:K,s:K,s:n,s:K,s:K,s:n,s:N,s:K,s:N}", "num_blocks", self->num_blocks, "free",
        self->alloc.free_count, "cached", (unsigned long long)self->cached, "pinned",
        (unsigned long long)self->pinned, "evictable",
        (unsigned long long)(self->cached - self->pinned), "leases", self->nleases, "clock",
        (unsigned long long)self->clock, "quarantined", (unsigned long long)self->quarantined,
        "readers", self->nreaders, "oldest_reader", oldest, "version",
        (unsigned long long)self->version, "oldest_reader_age", age);
    if (kw == NULL) return NULL;
    PyObject *r = PyObject_VectorcallDict(G.TreeStats, NULL, 0, kw);
    Py_DECREF(kw);
    return r;
}

static PyObject *Tree_namespaces(TreeObject *self, PyObject *unused) {
    (void)unused;
    int gc_was = PyGC_Disable();
    PyObject *names = PyList_New(0);
    PyObject *result = NULL;
    if (names == NULL) goto done;
    for (uint32_t i = 0; i < self->roots_len; i++)
        if (self->roots[i].ns && PyList_Append(names, self->roots[i].ns) < 0) goto done;
    if (PyList_Sort(names) < 0) goto done;
    if (self->default_root != NIL && PyList_Insert(names, 0, Py_None) < 0) goto done;
    result = Py_NewRef(names);
done:
    Py_XDECREF(names);
    if (gc_was) PyGC_Enable();
    return result;
}

static PyObject *Tree_snapshot(TreeObject *self, PyObject *unused) {
    (void)unused;
    return tree_snapshot(self, 0);
}

static PyObject *Tree_reader(TreeObject *self, PyObject *unused) {
    (void)unused;
    return tree_snapshot(self, 1);
}

static PyObject *Tree_drop_published(TreeObject *self, PyObject *unused) {
    (void)unused;
    shadow_drop(self);
    Py_RETURN_NONE;
}

static PyObject *Tree_get_policy(TreeObject *self, void *unused) {
    (void)unused;
    return Py_NewRef(self->pol.name);
}

static PyObject *Tree_get_policy_options(TreeObject *self, void *unused) {
    (void)unused;
    return pol_options_copy(&self->pol);
}

int tree_block_id(TreeObject *t, PyObject *arg, uint32_t *out) {
    int overflow = 0;
    long long v = PyLong_Check(arg) && !PyBool_Check(arg) ? int_value(arg, &overflow) : -1;
    if (overflow || v < 0 || (uint64_t)v >= t->num_blocks) {
        PyErr_Format(G.ForeignBlockError, "%R is not a block id of this pool (ids are 0..%u)",
                     arg, t->num_blocks - 1u);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static PyObject *Tree_eviction_key(TreeObject *self, PyObject *arg) {
    uint32_t b;
    return tree_block_id(self, arg, &b) < 0 ? NULL : pol_key(self, b);
}

static PyObject *Tree_reclaim(TreeObject *self, PyObject *unused) {
    (void)unused;
    size_t n = q_reclaimable(self);
    PyObject *tuple = PyTuple_New((Py_ssize_t)n);
    uint32_t *ids = PyMem_Malloc((n ? n : 1) * sizeof(uint32_t));
    if (tuple == NULL || ids == NULL) {
        Py_XDECREF(tuple);
        PyMem_Free(ids);
        return tuple == NULL ? NULL : PyErr_NoMemory();
    }
    /* Boxing the ids may fail; read them before changing anything. */
    size_t at = t_qids_peek(self, ids, n);
    for (size_t i = 0; i < at; i++) {
        PyObject *v = PyLong_FromUnsignedLong(ids[i]);
        if (v == NULL) {
            Py_DECREF(tuple);
            PyMem_Free(ids);
            return NULL;
        }
        PyTuple_SET_ITEM(tuple, (Py_ssize_t)i, v);
    }
    q_reclaim(self);
    PyMem_Free(ids);
    return tuple;
}

/* ------------------------------------------------------------------ clone
 *
 * A clone shares what never changes once published -- the published shape (PRoots,
 * PNodes, tries), the chunks (tokens and ids, written only past `used`), the hash keys
 * (PCtx) and the leases' ids and tokens -- and copies every table the writer changes in
 * place.  The two trees then see each other as one more holder of the shared shape
 * (PCtx's count, pctx_sole), exactly as a tree sees its snapshots: each path-copies what
 * the other can still reach and neither lowers a chunk's `used`. */

/* A PyMem copy of the first `used` of `cap` elements of src (NULL when cap is 0). */
static int dup_array(void *dst, const void *src, size_t used, size_t cap, size_t size) {
    void *p = NULL;
    if (cap > 0) {
        p = PyMem_Malloc(cap * size);
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        if (used > 0) memcpy(p, src, used * size);
    }
    memcpy(dst, &p, sizeof(p));
    return 0;
}

static PyObject *Tree_clone(TreeObject *self, PyObject *unused) {
    (void)unused;
    LeaseObject **made = NULL;
    Py_ssize_t nmade = 0, cap = 0;
    /* The objects the collector tracks first: allocating one may run a collection, hence
     * finalizers that call into this tree, so no state of it is read before the last. */
    TreeObject *c = (TreeObject *)Py_TYPE(self)->tp_alloc(Py_TYPE(self), 0);
    if (c == NULL) return NULL;
    c->default_root = NIL;
    c->free_node = NIL;
    if ((c->ns_roots = PyDict_New()) == NULL) goto fail;
    while (nmade < self->nleases) { /* one copy per live lease */
        if (nmade == cap) {
            Py_ssize_t ncap = cap ? cap * 2 : 8;
            LeaseObject **m = PyMem_Realloc(made, (size_t)ncap * sizeof(LeaseObject *));
            if (m == NULL) {
                PyErr_NoMemory();
                goto fail;
            }
            made = m;
            cap = ncap;
        }
        if ((made[nmade] = lease_alloc()) == NULL) goto fail;
        nmade++;
    }
    /* From here on no Python code runs and nothing the collector tracks is allocated. */
    if (shadow_ensure(self) < 0) goto fail;
    if (PyDict_Update(c->ns_roots, self->ns_roots) < 0) goto fail;
    /* The tables, copied into the clone's fields; its counts (nodes_len, roots_len, ...)
     * stay 0 until the end, so freeing a half-built clone releases nothing it does not
     * own. */
    const uint32_t NB = self->num_blocks;
    if (dup_array(&c->pins, self->pins, NB, NB, sizeof(uint32_t)) < 0 ||
        dup_array(&c->stamps, self->stamps, NB, NB, sizeof(uint64_t)) < 0 ||
        pol_copy(&c->pol, &self->pol, NB) < 0 ||
        ba_copy(&c->alloc, &self->alloc) < 0 ||
        dup_array(&c->nodes, self->nodes, self->nodes_len, self->nodes_cap, sizeof(Node)) < 0 ||
        dup_array(&c->heap_pos, self->heap_pos, self->nodes_len, self->nodes_cap,
                  sizeof(uint32_t)) < 0 ||
        dup_array(&c->pub, self->pub, self->nodes_len, self->nodes_cap, sizeof(PNode *)) < 0 ||
        dup_array(&c->heap, self->heap, self->heap_len, self->heap_cap, sizeof(HeapEntry)) < 0 ||
        dup_array(&c->roots, self->roots, self->roots_len, self->roots_cap, sizeof(RootSlot)) < 0 ||
        dup_array(&c->readers, self->readers, (size_t)self->nreaders, (size_t)self->readers_cap,
                  sizeof(uint64_t)) < 0 ||
        dup_array(&c->reader_versions, self->reader_versions, (size_t)self->nreaders,
                  (size_t)self->readers_cap, sizeof(uint64_t)) < 0 ||
        dup_array(&c->qb, self->qb + self->qb_head, self->qb_len - self->qb_head,
                  self->qb_len - self->qb_head, sizeof(QBatch)) < 0 ||
        dup_array(&c->qids, self->qids + self->qid_head, self->qid_len - self->qid_head,
                  self->qid_len - self->qid_head, sizeof(uint32_t)) < 0 ||
        ev_copy(&c->ev, self->ev) < 0)
        goto fail;
    /* ---- nothing below fails */
    c->B = self->B;
    c->num_blocks = NB;
    c->seed = self->seed;
    c->nodes_cap = self->nodes_cap;
    c->nodes_len = self->nodes_len;
    c->free_node = self->free_node;
    c->live_nodes = self->live_nodes;
    c->leaves = self->leaves;
    c->heap_len = self->heap_len;
    c->heap_cap = self->heap_cap;
    c->default_root = self->default_root;
    c->roots_cap = self->roots_cap;
    c->roots_len = self->roots_len;
    c->clock = self->clock;
    c->cached = self->cached;
    c->pinned = self->pinned;
    c->lease_ids = self->lease_ids;
    c->version = self->version;
    c->epochs = self->epochs;
    c->nreaders = self->nreaders;
    c->readers_cap = self->readers_cap;
    c->qb_len = c->qb_cap = self->qb_len - self->qb_head;
    c->qid_len = c->qid_cap = self->qid_len - self->qid_head;
    c->quarantined = self->quarantined;
    for (uint32_t n = 0; n < c->nodes_len; n++)
        if (c->nodes[n].parent < NODE_FREE) c->nodes[n].chunk->rc++;
    for (uint32_t i = 0; i < c->roots_len; i++) Py_XINCREF(c->roots[i].ns);
    c->proots = self->proots;
    c->proots->rc++;
    c->pctx = self->pctx;
    c->pctx->rc++;
    c->shadow_ok = 1;
    /* The live leases, oldest first, so the clone's list has the same order. */
    LeaseObject *src = self->lease_head;
    while (src != NULL && src->lnext != NULL) src = src->lnext;
    for (Py_ssize_t i = 0; src != NULL; i++, src = src->lprev) {
        LeaseObject *l = made[i];
        l->store = src->store;
        l->store->rc++;
        l->blocks = src->blocks;
        l->tokens = src->tokens;
        l->count = src->count;
        l->B = src->B;
        l->id = src->id;
        l->ns = Py_NewRef(src->ns);
        l->tokens_tuple = Py_XNewRef(src->tokens_tuple);
        l->tree = (TreeObject *)Py_NewRef((PyObject *)c);
        Py_INCREF(l); /* the clone's reference */
        l->lprev = NULL;
        l->lnext = c->lease_head;
        if (c->lease_head) c->lease_head->lprev = l;
        c->lease_head = l;
        l->linked = 1;
        c->nleases++;
    }
    for (Py_ssize_t i = 0; i < nmade; i++) Py_DECREF(made[i]); /* a copy made in excess dies */
    PyMem_Free(made);
    return (PyObject *)c;
fail:
    for (Py_ssize_t i = 0; i < nmade; i++) Py_DECREF(made[i]);
    PyMem_Free(made);
    Py_DECREF(c);
    return NULL;
}

static PyObject *Tree_dump(TreeObject *self, PyObject *unused) {
    (void)unused;
    return tree_dump(self);
}

static PyObject *Tree_render(TreeObject *self, PyObject *unused) {
    (void)unused;
    PyObject *d = tree_dump(self);
    if (d == NULL) return NULL;
    PyObject *r = PyObject_CallOneArg(G.render_dump, d);
    Py_DECREF(d);
    return r;
}

static PyObject *Tree_check_invariants(TreeObject *self, PyObject *unused) {
    (void)unused;
    if (tree_check(self) < 0 || ev_check(self) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Tree_next_block_ids(TreeObject *self, PyObject *count) {
    return ba_next_ids(&self->alloc, count);
}

static PyObject *Tree_memory_bytes(TreeObject *self, PyObject *unused) {
    (void)unused;
    return tree_memory(self);
}

static PyObject *Tree_get_block_size(TreeObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLong(self->B);
}
static PyObject *Tree_get_num_blocks(TreeObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLong(self->num_blocks);
}
static PyObject *Tree_get_clock(TreeObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(self->clock);
}
static PyObject *Tree_get_version(TreeObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(self->version);
}
static PyObject *Tree_get_hash_seed(TreeObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(self->seed);
}

/* ------------------------------------------------------------------ construction */

/* The sizes a pool accepts (SPEC.md R-LIMIT-*, reference/limits.py), refused in the
 * reference's order -- num_blocks, block_size, their product -- with its error class. */
#define LIMIT_NUM_BLOCKS (1u << 24)
#define LIMIT_BLOCK_SIZE (1u << 16)
#define LIMIT_TOKEN_SLOTS ((uint64_t)1 << 32)

/* 1: obj is an int (not a bool) >= 1; *out its value, or limit + 1 for any larger
 * value (so the caller tells "too large" from "not a size"); 0: it is not. */
static int parse_size(PyObject *obj, uint32_t limit, uint64_t *out) {
    if (!PyLong_Check(obj) || PyBool_Check(obj)) return 0;
    int overflow = 0;
    long long v = int_value(obj, &overflow);
    if (overflow < 0 || (!overflow && v < 1)) return 0;
    *out = overflow || (uint64_t)v > limit ? (uint64_t)limit + 1u : (uint64_t)v;
    return 1;
}

/* Always 0: InvalidArgumentError(message % repr(obj)) set; an int whose repr() is refused
 * (more digits than sys.get_int_max_str_digits()) is described instead, as the reference
 * does, so the refusal keeps its class. */
static int refuse_size(const char *message, PyObject *obj) {
    PyObject *shown = PyObject_Repr(obj);
    if (shown == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError)) return 0;
        PyErr_Clear();
        shown = PyUnicode_FromString("an int of more digits than repr() shows");
        if (shown == NULL) return 0;
    }
    PyErr_Format(G.InvalidArgumentError, message, shown);
    Py_DECREF(shown);
    return 0;
}

/* 1: both sizes within R-LIMIT-1..3, stored; 0 with InvalidArgumentError set. */
static int check_pool(PyObject *n_obj, PyObject *b_obj, uint32_t *n, uint32_t *B) {
    uint64_t blocks = 0, size = 16;
    if (!parse_size(n_obj, LIMIT_NUM_BLOCKS, &blocks))
        return refuse_size("num_blocks must be an int >= 1, got %U", n_obj);
    if (blocks > LIMIT_NUM_BLOCKS)
        return refuse_size("num_blocks must be at most 16,777,216 (2**24, R-LIMIT-1), got %U",
                           n_obj);
    if (b_obj != NULL && !parse_size(b_obj, LIMIT_BLOCK_SIZE, &size))
        return refuse_size("block_size must be an int >= 1, got %U", b_obj);
    if (size > LIMIT_BLOCK_SIZE)
        return refuse_size("block_size must be at most 65,536 (2**16, R-LIMIT-2), got %U", b_obj);
    if (blocks * size > LIMIT_TOKEN_SLOTS) {
        PyErr_Format(G.InvalidArgumentError,
                     "num_blocks * block_size must be at most 4,294,967,296 tokens (2**32, "
                     "R-LIMIT-3), got %llu * %llu",
                     (unsigned long long)blocks, (unsigned long long)size);
        return 0;
    }
    *n = (uint32_t)blocks;
    *B = (uint32_t)size;
    return 1;
}

static PyObject *Tree_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"num_blocks", "block_size", "policy", "policy_options",
                             "events", "_hash_seed", NULL};
    PyObject *n_obj, *b_obj = NULL, *seed_obj = Py_None, *policy = NULL, *policy_options = NULL,
             *events = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O$OOOO:RadixTree", kwlist, &n_obj, &b_obj,
                                     &policy, &policy_options, &events, &seed_obj))
        return NULL;
    uint32_t B = 16, n = 0;
    if (!check_pool(n_obj, b_obj, &n, &B)) return NULL;
    uint64_t seed;
    if (seed_obj == Py_None) {
        PyObject *bytes = PyObject_CallFunction(G.urandom, "i", 8);
        if (bytes == NULL) return NULL;
        memcpy(&seed, PyBytes_AS_STRING(bytes), 8);
        Py_DECREF(bytes);
    } else {
        if (!PyLong_Check(seed_obj)) {
            PyErr_SetString(PyExc_TypeError, "_hash_seed must be an int or None");
            return NULL;
        }
        seed = PyLong_AsUnsignedLongLongMask(seed_obj); /* an int: cannot fail */
    }
    TreeObject *t = (TreeObject *)type->tp_alloc(type, 0);
    if (t == NULL) return NULL;
    t->B = B;
    t->num_blocks = n;
    t->default_root = NIL;
    t->free_node = NIL;
    t->seed = seed;
    t->pins = PyMem_Calloc(n, sizeof(uint32_t));
    t->stamps = PyMem_Calloc(n, sizeof(uint64_t));
    t->ns_roots = PyDict_New();
    if (!t->pins || !t->stamps) {
        Py_DECREF(t);
        return PyErr_NoMemory();
    }
    if (t->ns_roots == NULL || ba_init(&t->alloc, n) < 0 || shadow_init(t, seed) < 0 ||
        pol_init(t, policy, policy_options) < 0 || ev_init(t, events) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    if (reserve(t) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    return (PyObject *)t;
}

static void unlink_all_leases(TreeObject *t) {
    while (t->lease_head) {
        LeaseObject *l = t->lease_head;
        lease_unlink(t, l);
        Py_DECREF(l);
    }
}

static int Tree_traverse(TreeObject *self, visitproc visit, void *arg) {
    for (LeaseObject *l = self->lease_head; l; l = l->lnext) Py_VISIT((PyObject *)l);
    if (self->ev != NULL) Py_VISIT(self->ev->hasher);
    return 0;
}

static int Tree_clear(TreeObject *self) {
    unlink_all_leases(self);
    return 0;
}

static void Tree_dealloc(TreeObject *self) {
    PyObject_GC_UnTrack(self);
    if (self->weakrefs) PyObject_ClearWeakRefs((PyObject *)self);
    unlink_all_leases(self);
    for (uint32_t n = 0; n < self->nodes_len; n++)
        if (self->nodes[n].parent != NODE_FREE) chunk_decref(self->nodes[n].chunk);
    chunk_unreserve(self);
    shadow_fini(self);
    PyMem_Free(self->readers);
    PyMem_Free(self->reader_versions);
    PyMem_Free(self->qb);
    PyMem_Free(self->qids);
    for (uint32_t i = 0; i < self->roots_len; i++) Py_XDECREF(self->roots[i].ns);
    Py_XDECREF(self->ns_roots);
    PyMem_Free(self->pins);
    PyMem_Free(self->stamps);
    pol_fini(&self->pol);
    ev_fini(self);
    PyMem_Free(self->nodes);
    PyMem_Free(self->heap_pos);
    PyMem_Free(self->pub);
    PyMem_Free(self->heap);
    PyMem_Free(self->roots);
    PyMem_Free(self->scratch_tok);
    PyMem_Free(self->scratch_path);
    ba_fini(&self->alloc);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Tree_repr(TreeObject *self) {
    return PyUnicode_FromFormat("<accel.RadixTree B=%u: %llu cached (%llu pinned), %u free of %u, clock=%llu>",
                                self->B, (unsigned long long)self->cached,
                                (unsigned long long)self->pinned, self->alloc.free_count,
                                self->num_blocks, (unsigned long long)self->clock);
}

/* The docstrings repeat reference/tree.py's, word for word wherever the behaviour is the
 * same; tests/accel/test_docstrings.py lists every difference and its reason. */
#define MEMORY_ERROR_REBUILD                                                                  \
    "Raises:\n    MemoryError: the published shape, dropped by an earlier allocation failure,\n" \
    "        could not be rebuilt (an O(N) rebuild, once); nothing changed."

static PyMethodDef Tree_methods[] = {
    {"match", (PyCFunction)(void (*)(void))Tree_match, METH_FASTCALL | METH_KEYWORDS,
     "match($self, tokens, namespace=None, *, pin=False)\n--\n\n"
     "Find the longest cached prefix of ``tokens`` made of whole blocks (R-MATCH-1).\n\n"
     "The matched blocks are stamped with the new clock time (R-LRU-1); with\n"
     "``pin=True`` they are also pinned by the returned lease (R-PIN-1).\n\n"
     "Cost: O(n) for n tokens (validation -- none for a uint32 buffer -- then per node one\n"
     "child lookup, a binary search on first tokens among up to 15 children or a hash-trie\n"
     "lookup among more, and one memcmp over the rest of the edge).\n\n"
     "Raises:\n    InvalidTokensError: ``tokens`` is malformed (R-TOK-*).\n"
     "    InvalidArgumentError: ``namespace`` is not None or a str."},
    {"insert", (PyCFunction)(void (*)(void))Tree_insert, METH_FASTCALL | METH_KEYWORDS,
     "insert($self, tokens, namespace=None, *, pin=False, priority=None, retain_for=None)\n--\n\n"
     "Cache every whole block of ``tokens``, reusing the cached prefix (R-INS-1).\n\n"
     "Blocks already cached are reused (R-INS-2); the rest get fresh ids from the\n"
     "allocator (R-ALLOC-2). A divergence inside an edge splits it (R-SPLIT-1).\n"
     "If the pool is short, quarantined blocks whose readers have all left are\n"
     "reclaimed first (R-EPOCH-2); then, if no reader is inside, exactly the\n"
     "remaining shortfall is evicted, never from the reused path (R-INS-5), and\n"
     "the evicted state is published before the blocks are reused (R-EPOCH-1).\n"
     "The whole path is stamped (R-LRU-1) and, with ``pin=True``, pinned by the\n"
     "returned lease (R-PIN-1). A trailing partial block is ignored (R-INS-3).\n"
     "``priority`` (0 .. 100) and ``retain_for`` (clock ticks) ask the ``priority``\n"
     "policy to keep the path at that priority for that long (R-POL-5); every\n"
     "policy checks them, the others ignore them.\n\n"
     "Cost: O(n + e log h + c * depth * log fan-out) for n tokens, e evicted\n"
     "blocks and c changed nodes.\n\n"
     "Raises:\n    InvalidTokensError: ``tokens`` is malformed (R-TOK-*).\n"
     "    InvalidArgumentError: ``namespace`` is not None or a str, or\n"
     "        ``priority`` / ``retain_for`` is out of range (R-POL-8).\n"
     "    OutOfBlocksError: free, reclaimable and (with no reader inside)\n"
     "        evictable-off-path blocks are fewer than the new blocks needed\n"
     "        (R-INS-6, R-EPOCH-3). Nothing changes."},
    {"release", (PyCFunction)Tree_release, METH_O,
     "release($self, lease, /)\n--\n\n"
     "Release ``lease``: unpin its blocks and stamp them as just used (R-PIN-4, R-LRU-1).\n\n"
     "Cost: O(length of the lease).\n\n"
     "Raises:\n    ForeignLeaseError: ``lease`` was not issued by this tree (R-PIN-5).\n"
     "    LeaseReleasedError: ``lease`` was already released (R-PIN-4)."},
    {"evict", (PyCFunction)Tree_evict, METH_O,
     "evict($self, count, /)\n--\n\n"
     "Free up to ``count`` blocks, the leaf tail with the smallest eviction key first\n"
     "(R-EVICT-1..4, R-POL-1; least recently used under ``lru``).\n\n"
     "Returns the evicted ids in eviction order; fewer than ``count`` when fewer\n"
     "blocks are evictable (R-EVICT-4). An eviction that frees anything publishes\n"
     "a new version (R-SNAP-1); the ids then go to the allocator, or to the\n"
     "quarantine while readers are inside (R-EPOCH-1). The clock does not advance.\n\n"
     "Cost: O(count * (log h + depth * log fan-out)) in the worst case, h the\n"
     "number of evictable leaves: the queue holds no stale entries, so no call pays\n"
     "for earlier ones.\n\n"
     "Raises:\n    InvalidArgumentError: ``count`` is not an int >= 0."},
    {"reset_prefix_cache", (PyCFunction)Tree_reset_prefix_cache, METH_NOARGS,
     "reset_prefix_cache($self, /)\n--\n\n"
     "Drop the whole prefix cache at once, vLLM's ``reset_prefix_cache``: True when it\n"
     "was cleared, False when it was not (nothing changed).\n\n"
     "With no block in use -- none pinned by a live lease, no reader inside, none\n"
     "waiting in quarantine -- every cached block is freed and every namespace goes\n"
     "(R-CLEAR-1, R-NS-3), as one published version when anything was cached\n"
     "(R-SNAP-1), and with events on one ``AllBlocksCleared`` is emitted (R-EVENT-7).\n"
     "While a block is in use nothing changes (R-CLEAR-2): a request may still read\n"
     "it. The clock does not advance; each freed block's policy state goes with it,\n"
     "as an eviction's does (R-POL-7).\n\n"
     "Cost: O(N + k log N) for N nodes and k cached blocks."},
    {"take_events", (PyCFunction)Tree_take_events, METH_NOARGS,
     "take_events($self, /)\n--\n\n"
     "The KV event batches since the last call, oldest first: one per operation\n"
     "that cached or evicted blocks (R-EVENT-1..5). O(size of the batches) here:\n"
     "decoded from the wire bytes the operations encoded (:meth:`take_event_payloads`).\n\n"
     "Raises:\n    InvalidArgumentError: the tree was built without ``events``."},
    {"take_event_payloads", (PyCFunction)Tree_take_event_payloads, METH_NOARGS,
     "take_event_payloads($self, /)\n--\n\n"
     "The KV event batches since the last call, as :meth:`take_events` would return\n"
     "them, each encoded as the msgpack payload vLLM's publisher sends (R-EVENT-6,\n"
     "``encode_batch``). O(size of the batches).\n\n"
     "Raises:\n    InvalidArgumentError: the tree was built without ``events``."},
    {"_event_hash", (PyCFunction)Tree_event_hash, METH_O,
     "_event_hash($self, block_id, /)\n--\n\n"
     "Test hook: the external hash this tree's events name cached block ``block_id`` by,\n"
     "or None if it is not cached (the reference's EventRecorder.hash_of). O(1).\n\n"
     "Raises:\n    InvalidArgumentError: the tree was built without ``events``.\n"
     "    ForeignBlockError: ``block_id`` is not an id of this pool."},
    {"snapshot", (PyCFunction)Tree_snapshot, METH_NOARGS,
     "snapshot($self, /)\n--\n\n"
     "An O(1) immutable view of the latest published version (R-SNAP-2).\n\n"
     "Any thread, never blocks. Its block ids stay correct for its version, but\n"
     "only a :meth:`reader` also keeps the blocks from being reused.\n\n" MEMORY_ERROR_REBUILD},
    {"reader", (PyCFunction)Tree_reader, METH_NOARGS,
     "reader($self, /)\n--\n\n"
     "Enter a reader epoch and take a snapshot (R-EPOCH-1). O(1), any thread.\n\n"
     "Blocks the reader can see are not handed out again until it leaves.\n\n"
     MEMORY_ERROR_REBUILD},
    {"eviction_key", (PyCFunction)Tree_eviction_key, METH_O,
     "eviction_key($self, block_id, /)\n--\n\n"
     "The key eviction orders block ``block_id`` by as an evictable leaf tail: the\n"
     "smallest key goes first (R-POL-1). Under ``lru`` it is ``(stamp, block_id)``,\n"
     "the stamp the block was last used at (R-LRU-1, R-EVICT-2, R-EVICT-3); each\n"
     "policy's key is in :mod:`kachedb_radix.reference.policies`. A block no longer\n"
     "cached keeps the key it had, but for its SLRU segment, which eviction clears. O(1).\n\n"
     "Raises:\n    ForeignBlockError: ``block_id`` is not an id of this pool."},
    {"reclaim", (PyCFunction)Tree_reclaim, METH_NOARGS,
     "reclaim($self, /)\n--\n\n"
     "Return quarantined blocks whose readers have all left to the allocator (R-EPOCH-2).\n\n"
     "``insert`` does this by itself when short; call it to see the pool grow\n"
     "sooner. Returns the reclaimed ids in quarantine order. Cost: O(k) for k blocks\n"
     "(the oldest reader heads a sorted registry; a free is O(1) in the bitmap)."},
    {"clone", (PyCFunction)Tree_clone, METH_NOARGS,
     "clone($self, /)\n--\n\n"
     "An independent copy of the tree in the same state, for dry runs and what-ifs.\n\n"
     "The copy answers every call exactly as this tree would from now on -- same\n"
     "dump, stats, clock, version and epoch numbers, same allocation and eviction\n"
     "order -- and nothing done to either changes the other. Live leases and\n"
     "readers inside are part of that state: the copy keeps their pins and epochs,\n"
     "so it evicts and quarantines as this tree would. The :class:`Lease` and\n"
     ":class:`Reader` objects handed out stay this tree's: releasing or leaving\n"
     "them acts on this tree only (the copy's pins stay held, its readers inside).\n"
     "Snapshots need no copy: a published version never changes.\n\n"
     "Cost: O(num_blocks + nodes + leases + readers + L) for L evictable\n"
     "leaves. The persistent shape is shared, not copied: a shared node version\n"
     "is never changed, and one tree extends a shared edge's chunk in place only\n"
     "past what every version of the other reads (see accel/DESIGN.md),\n"
     "exactly as the live tree does with its snapshots. Everything else the\n"
     "writer changes in place is copied. No ``copy.deepcopy`` of the whole tree."},
    {"_drop_published", (PyCFunction)Tree_drop_published, METH_NOARGS,
     "_drop_published($self, /)\n--\n\n"
     "Test hook: drop the published shape as an allocation failure while mirroring a\n"
     "change would. Until the next match(), insert(), release(), snapshot(), reader() or\n"
     "clone() rebuilds it from the writer's shape, children are found by scanning the node\n"
     "records (O(N) a lookup)."},
#ifdef KACHEDB_RADIX_TEST_HOOKS /* the test build only (corrupt.c) */
    {"_corrupt_check", (PyCFunction)Tree_corrupt_check, METH_O,
     "_corrupt_check($self, kind, /)\n--\n\n"
     "Test hook: break one invariant in place (``kind``, one of ``_corrupt_kinds()``), run\n"
     "check_invariants() (dump() for dump_live_count), undo every change and return the\n"
     "InvariantViolation's message, or None if the check let the break pass (accel/corrupt.c).\n\n"
     "Raises:\n    ValueError: an unknown kind, or one this tree's state cannot show.\n"
     "    TypeError: ``kind`` is not a str."},
#endif
    {"stats", (PyCFunction)Tree_stats, METH_NOARGS,
     "stats($self, /)\n--\n\n"
     "Block counters (R-INV-1, R-EPOCH-3), and how long the oldest reader has been\n"
     "inside, in versions (R-EPOCH-5). O(1): the registry is sorted, oldest first."},
    {"namespaces", (PyCFunction)Tree_namespaces, METH_NOARGS,
     "namespaces($self, /)\n--\n\n"
     "Namespaces holding at least one block, None first then by name. O(r log r)."},
    {"dump", (PyCFunction)Tree_dump, METH_NOARGS,
     "dump($self, /)\n--\n\n"
     "The canonical, JSON-serialisable description of the whole state (R-DUMP-1).\n\n"
     "Two implementations in the same state return equal dumps. Cost: O(N) over\n"
     "all cached tokens and the pool."},
    {"render", (PyCFunction)Tree_render, METH_NOARGS,
     "render($self, /)\n--\n\nThe tree drawn as text, from :meth:`dump`. O(N)."},
    {"check_invariants", (PyCFunction)Tree_check_invariants, METH_NOARGS,
     "check_invariants($self, /)\n--\n\n"
     "Assert every structural invariant (R-INV-*). O(N log N + leases * length): the\n"
     "leaf stamps and the chunks are sorted to find duplicates.\n\n"
     "Raises:\n    InvariantViolation: an invariant is broken (a bug, never bad input)."},
    {"next_block_ids", (PyCFunction)Tree_next_block_ids, METH_O,
     "next_block_ids($self, count, /)\n--\n\n"
     "The ids the next insert that allocates ``count`` blocks without evicting hands out,\n"
     "in path order: the ``count`` smallest free ids, ascending (R-ALLOC-2); fewer when\n"
     "fewer are free (such an insert evicts first, and its ids are not known before).\n"
     "Changes nothing. A caller that fills blocks before the tree names them (the KV\n"
     "cache's disk reads, :class:`~kachedb_radix.reference.tiers.KVCache`) asks this.\n"
     "Cost: O(count + num_blocks / 4096).\n\n"
     "Raises:\n    InvalidArgumentError: ``count`` is not an int >= 0."},
    {"memory_bytes", (PyCFunction)Tree_memory_bytes, METH_NOARGS,
     "memory_bytes($self, /)\n--\n\n"
     "Bytes held by the tree's own C allocations, by part (a dict of int).\n\n"
     "Cost: O(N log N) for N nodes (the chunks shared by several edges are counted once).\n\n"
     "Raises:\n    MemoryError: no room for the list of chunks."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Tree_getset[] = {
    {"block_size", (getter)Tree_get_block_size, NULL, "Tokens per block. O(1).", NULL},
    {"num_blocks", (getter)Tree_get_num_blocks, NULL, "Pool size. O(1).", NULL},
    {"clock", (getter)Tree_get_clock, NULL,
     "The logical clock: successful match, insert and release calls so far. O(1).", NULL},
    {"version", (getter)Tree_get_version, NULL,
     "The number of the latest published version (R-SNAP-1). O(1).", NULL},
    {"policy", (getter)Tree_get_policy, NULL, "The eviction policy's name (R-POL-1). O(1).", NULL},
    {"policy_options", (getter)Tree_get_policy_options, NULL,
     "The eviction policy's options in force, defaults included. O(1).", NULL},
    {"events", (getter)Tree_get_events, NULL,
     "How the tree names blocks in its events, or None when it emits none.", NULL},
    {"_hash_seed", (getter)Tree_get_hash_seed, NULL,
     "The seed the block-hash keys were drawn from (a test hook).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject RadixTree_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kachedb_radix.accel._radix.RadixTree",
    .tp_basicsize = sizeof(TreeObject),
    .tp_dealloc = (destructor)Tree_dealloc,
    .tp_repr = (reprfunc)Tree_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "RadixTree(num_blocks, block_size=16, *, policy='lru', policy_options=None, "
              "events=None, _hash_seed=None)\n--\n\n"
              "A radix tree of whole token blocks over a fixed pool of KV block ids.\n\n"
              "Args:\n"
              "    num_blocks: the pool size, an int from 1 to 2**24 (R-LIMIT-1); block ids are\n"
              "        ``0 .. num_blocks-1``.\n"
              "    block_size: tokens per block B, an int from 1 to 2**16 (default 16; 1 gives a\n"
              "        token-level tree; R-LIMIT-2); ``num_blocks * block_size`` at most 2**32\n"
              "        (R-LIMIT-3).\n"
              "    policy: the eviction policy's name (R-POL-*): ``\"lru\"`` (the default),\n"
              "        ``\"lfu\"``, ``\"fifo\"``, ``\"priority\"`` or ``\"slru\"``; see\n"
              "        :mod:`kachedb_radix.reference.policies`.\n"
              "    policy_options: that policy's options (a mapping), or None for its defaults.\n"
              "    events: None (the default: no events, nothing paid), True for KV events with\n"
              "        the default block hashes, or a :class:`~kachedb_radix.reference.events.BlockHasher`\n"
              "        naming the scheme (R-EVENT-*); :meth:`take_events` returns them.\n"
              "    _hash_seed: a test hook: the seed of the block-hash keys (default: drawn\n"
              "        from ``os.urandom``).\n\n"
              "Raises:\n"
              "    InvalidArgumentError: a size is not an int >= 1 or is above its limit\n"
              "        (R-LIMIT-*), or the policy or one of its options is unknown or out of\n"
              "        range. Also when ``events`` is neither None, True nor a ``BlockHasher``.\n"
              "    MemoryError: the pool's arrays cannot be allocated.\n"
              "    TypeError: ``_hash_seed`` is not an int or None.\n\n"
              "Cost: O(num_blocks / 64) to build (the per-block arrays are calloc'd). One\n"
              "writer thread at a time; ``snapshot()`` and ``reader()`` from any thread (see\n"
              ":mod:`kachedb_radix.reference.snapshot`).",
    .tp_traverse = (traverseproc)Tree_traverse,
    .tp_clear = (inquiry)Tree_clear,
    .tp_weaklistoffset = offsetof(TreeObject, weakrefs),
    .tp_methods = Tree_methods,
    .tp_getset = Tree_getset,
    .tp_new = Tree_new,
};

/* ------------------------------------------------------------------ module helpers */

static PyObject *mod_block_hash(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "_block_hash(seed, block) takes 2 arguments");
        return NULL;
    }
    uint64_t seed = PyLong_AsUnsignedLongLongMask(args[0]);
    if (seed == (uint64_t)-1 && PyErr_Occurred()) return NULL;
    Tokens tk;
    if (tokens_get_plain(args[1], &tk) < 0) return NULL;
    if (tk.n < 1) {
        tokens_release(NULL, &tk);
        PyErr_SetString(PyExc_ValueError, "a block has at least one token");
        return NULL;
    }
    uint32_t *keys = PyMem_Malloc(((size_t)tk.n + 1u) * sizeof(uint32_t));
    if (keys == NULL) {
        tokens_release(NULL, &tk);
        return PyErr_NoMemory();
    }
    uint64_t mix;
    derive_keys(seed, keys, (uint32_t)tk.n + 1u, &mix);
    uint64_t h = nh_hash(tk.data, keys, (uint32_t)tk.n);
    PyMem_Free(keys);
    tokens_release(NULL, &tk);
    return PyLong_FromUnsignedLongLong(h);
}

static PyObject *mod_hash_keys(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "_hash_keys(seed, block_size) takes 2 arguments");
        return NULL;
    }
    uint64_t seed = PyLong_AsUnsignedLongLongMask(args[0]);
    if (seed == (uint64_t)-1 && PyErr_Occurred()) return NULL;
    Py_ssize_t B = PyLong_AsSsize_t(args[1]);
    if (B == -1 && PyErr_Occurred()) return NULL;
    if (B < 1 || B > (1 << 24)) {
        PyErr_SetString(PyExc_ValueError, "block_size out of range");
        return NULL;
    }
    uint32_t *keys = PyMem_Malloc(((size_t)B + 1u) * sizeof(uint32_t));
    if (keys == NULL) return PyErr_NoMemory();
    uint64_t mix;
    derive_keys(seed, keys, (uint32_t)B + 1u, &mix);
    PyObject *list = u32_list(keys, B + 1);
    PyMem_Free(keys);
    if (list == NULL) return NULL;
    PyObject *t = PyList_AsTuple(list);
    Py_DECREF(list);
    return t;
}

static PyMethodDef module_methods[] = {
    {"_block_hash", (PyCFunction)(void (*)(void))mod_block_hash, METH_FASTCALL,
     "_block_hash(seed, block, /)\n--\n\n"
     "Test hook: the NH hash of one block (its tokens) under the keys drawn from\n"
     "``seed``; a tree built with ``_hash_seed=seed`` files two sibling blocks in the\n"
     "same probe sequence exactly when these agree."},
#ifdef KACHEDB_RADIX_TEST_HOOKS /* the test build only (corrupt.c) */
    {"_corrupt_kinds", (PyCFunction)mod_corrupt_kinds, METH_NOARGS,
     "_corrupt_kinds($module, /)\n--\n\n"
     "Test hook: the kinds RadixTree._corrupt_check breaks, in the order the checks run."},
#endif
    {"_event_block_hash", (PyCFunction)(void (*)(void))mod_event_block_hash, METH_FASTCALL,
     "_event_block_hash(hasher, parent, tokens, salt, /)\n--\n\n"
     "Test hook: the (internal, external) hashes of one block of ``tokens`` after the block\n"
     "whose internal hash is ``parent`` (None: a path's first block, salted by ``salt``),\n"
     "hashed by the C twin under ``hasher``'s scheme (accel/hashing.c); the reference's\n"
     "``hasher.block_hash`` and ``hasher.external`` give the same."},
    {"_hash_keys", (PyCFunction)(void (*)(void))mod_hash_keys, METH_FASTCALL,
     "_hash_keys(seed, block_size, /)\n--\n\n"
     "Test hook: the block_size + 1 NH keys (uint32) drawn from ``seed``."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kachedb_radix.accel._radix",
    .m_doc = "The C twin of reference.RadixTree (see accel/DESIGN.md).",
    .m_size = -1,
    .m_methods = module_methods,
};

static PyObject *import_attr(const char *module, const char *name) {
    PyObject *m = PyImport_ImportModule(module);
    if (m == NULL) return NULL;
    PyObject *a = PyObject_GetAttrString(m, name);
    Py_DECREF(m);
    return a;
}

#define IMPORT(field, module, name)                         \
    do {                                                    \
        if ((G.field = import_attr(module, name)) == NULL) \
            return NULL;                                    \
    } while (0)

#define INTERN(field, text)                                  \
    do {                                                     \
        if ((G.field = PyUnicode_InternFromString(text)) == NULL) \
            return NULL;                                     \
    } while (0)

PyMODINIT_FUNC PyInit__radix(void) {
    /* The types first: a type once ready stays ready, so an init that failed on the way
     * (an allocation failure) and is run again does the rest in the same order. */
    PyTypeObject *types[] = {&RadixTree_Type, &Lease_Type,     &MatchResult_Type,
                             &InsertResult_Type, &Blocks_Type, &BlocksIter_Type,
                             &BlockAllocator_Type, &Snapshot_Type, &Reader_Type,
                             &RouterIndex_Type};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (PyType_Ready(types[i]) < 0) return NULL;
    IMPORT(TokenTypeError, "kachedb_radix.reference.errors", "TokenTypeError");
    IMPORT(TokenRangeError, "kachedb_radix.reference.errors", "TokenRangeError");
    IMPORT(TokenLayoutError, "kachedb_radix.reference.errors", "TokenLayoutError");
    IMPORT(InvalidArgumentError, "kachedb_radix.reference.errors", "InvalidArgumentError");
    IMPORT(OutOfBlocksError, "kachedb_radix.reference.errors", "OutOfBlocksError");
    IMPORT(DoubleFreeError, "kachedb_radix.reference.errors", "DoubleFreeError");
    IMPORT(ForeignBlockError, "kachedb_radix.reference.errors", "ForeignBlockError");
    IMPORT(LeaseReleasedError, "kachedb_radix.reference.errors", "LeaseReleasedError");
    IMPORT(ForeignLeaseError, "kachedb_radix.reference.errors", "ForeignLeaseError");
    IMPORT(InvariantViolation, "kachedb_radix.reference.errors", "InvariantViolation");
    IMPORT(ReaderLeftError, "kachedb_radix.reference.errors", "ReaderLeftError");
    IMPORT(as_token_list, "kachedb_radix.reference.tokens", "as_token_list");
    IMPORT(TreeStats, "kachedb_radix.reference.results", "TreeStats");
    IMPORT(render_dump, "kachedb_radix.reference.render", "render_dump");
    IMPORT(urandom, "os", "urandom");
    IMPORT(dump_format, "kachedb_radix.reference.dump", "DUMP_FORMAT");
    IMPORT(check_policy, "kachedb_radix.reference.policies", "check_policy");
    IMPORT(event_hasher, "kachedb_radix.reference.events", "event_hasher");
    IMPORT(decode_batch, "kachedb_radix.reference.events", "decode_batch");
    IMPORT(BlockHasher, "kachedb_radix.reference.events", "BlockHasher");
    IMPORT(KVEventBatch, "kachedb_radix.reference.events", "KVEventBatch");
    IMPORT(BlockStored, "kachedb_radix.reference.events", "BlockStored");
    IMPORT(BlockRemoved, "kachedb_radix.reference.events", "BlockRemoved");
    IMPORT(AllBlocksCleared, "kachedb_radix.reference.events", "AllBlocksCleared");
    IMPORT(decode_for_router, "kachedb_radix.reference.router.wire", "decode_for_router");
    IMPORT(RoutedStored, "kachedb_radix.reference.router.wire", "RoutedStored");
    IMPORT(RoutedRemoved, "kachedb_radix.reference.router.wire", "RoutedRemoved");
    IMPORT(RoutedCleared, "kachedb_radix.reference.router.wire", "RoutedCleared");
    IMPORT(EventDecodeError, "kachedb_radix.reference.events", "EventDecodeError");
    IMPORT(Applied, "kachedb_radix.reference.router", "Applied");
    if (router_init() < 0) return NULL;
    INTERN(s_tokens, "tokens");
    INTERN(s_namespace, "namespace");
    INTERN(s_pin, "pin");
    INTERN(s_priority, "priority");
    INTERN(s_retain_for, "retain_for");
    INTERN(s_policy, "policy");
    INTERN(s_name, "name");
    INTERN(s_options, "options");
    INTERN(s_lru, "lru");
    INTERN(s_format, "format");
    INTERN(s_block_size, "block_size");
    INTERN(s_num_blocks, "num_blocks");
    INTERN(s_clock, "clock");
    INTERN(s_free, "free");
    INTERN(s_namespaces, "namespaces");
    INTERN(s_children, "children");
    INTERN(s_blocks, "blocks");
    INTERN(s_pins, "pins");
    INTERN(s_stamps, "stamps");
    INTERN(s_quarantine, "quarantine");
    INTERN(s_version, "version");
    INTERN(s_cache_salt, "cache_salt"); /* the reference's extra-key tag, interned */

    PyObject *impl = PyUnicode_InternFromString("accel");
    int set = impl != NULL &&
              PyDict_SetItemString(RadixTree_Type.tp_dict, "implementation", impl) == 0 &&
              PyDict_SetItemString(RouterIndex_Type.tp_dict, "implementation", impl) == 0;
    Py_XDECREF(impl);
    if (!set) return NULL;
    PyType_Modified(&RadixTree_Type);
    PyType_Modified(&RouterIndex_Type);

    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    const char *names[] = {"RadixTree", "Lease", "MatchResult", "InsertResult",
                           "Blocks", "BlocksIterator", "BlockAllocator", "Snapshot", "Reader",
                           "RouterIndex"};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        if (PyModule_AddObjectRef(m, names[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    if (PyModule_AddObjectRef(m, "DUMP_FORMAT", G.dump_format) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
