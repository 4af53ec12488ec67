/* Read-only views of the whole tree: dump() (reference.dump), check_invariants()
 * (reference.invariants, every check listed there, in C) and memory_bytes().
 *
 * Both traversals first build the children of every node as one CSR array from the
 * writer's parent links (they hold whether or not the published shape is kept); the
 * dump sorts each child list by its first block's tokens.  Both are
 * iterative: a deep tree cannot overflow the C stack.
 */
#include "inspect.h"

#include <stdlib.h>

#include "alloc.h"
#include "events.h"
#include "objects.h"
#include "policy.h"
#include "snapshot.h"
#include "walk.h"

typedef struct {
    uint32_t *start; /* nodes_len + 1 offsets into list */
    uint32_t *list;
} Kids;

static void kids_free(Kids *k) {
    PyMem_Free(k->start);
    PyMem_Free(k->list);
    k->start = k->list = NULL;
}

static inline uint32_t kids_count(const Kids *k, uint32_t n) { return k->start[n + 1] - k->start[n]; }

/* Sorting context: the GIL serialises every caller. */
static const TreeObject *g_tree;

static int cmp_first_block(const void *a, const void *b) {
    const uint32_t *x = node_tok(g_tree, &g_tree->nodes[*(const uint32_t *)a]);
    const uint32_t *y = node_tok(g_tree, &g_tree->nodes[*(const uint32_t *)b]);
    for (uint32_t i = 0; i < g_tree->B; i++)
        if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
    return 0;
}

/* Precondition: every live non-root node's parent is a live node below nodes_len. */
static int kids_build(TreeObject *t, Kids *k, int sorted) {
    uint32_t n = t->nodes_len;
    k->start = PyMem_Calloc((size_t)n + 2u, sizeof(uint32_t));
    k->list = PyMem_Malloc(((size_t)t->live_nodes + 1u) * sizeof(uint32_t));
    uint32_t *fill = PyMem_Malloc(((size_t)n + 1u) * sizeof(uint32_t));
    if (k->start == NULL || k->list == NULL || fill == NULL) {
        PyMem_Free(fill);
        kids_free(k);
        PyErr_NoMemory();
        return -1;
    }
    uint32_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t p = t->nodes[i].parent;
        if (p < NODE_FREE) {
            k->start[p + 1]++;
            total++;
        }
    }
    if (total > t->live_nodes) {
        PyMem_Free(fill);
        kids_free(k);
        PyErr_Format(G.InvariantViolation, "node counter %u != recount %u", t->live_nodes, total);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) k->start[i + 1] += k->start[i];
    memcpy(fill, k->start, (size_t)n * sizeof(uint32_t));
    for (uint32_t i = 0; i < n; i++) {
        uint32_t p = t->nodes[i].parent;
        if (p < NODE_FREE) k->list[fill[p]++] = i;
    }
    PyMem_Free(fill);
    if (sorted) {
        g_tree = t;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t c = kids_count(k, i);
            if (c > 1) qsort(k->list + k->start[i], c, sizeof(uint32_t), cmp_first_block);
        }
    }
    return 0;
}

/* Namespace roots in dump order: the default first, then by name. */
static int cmp_root_names(const void *a, const void *b) {
    PyObject *x = ((const RootSlot *)a)->ns, *y = ((const RootSlot *)b)->ns;
    if (x == NULL) return y == NULL ? 0 : -1;
    if (y == NULL) return 1;
    return PyUnicode_Compare(x, y);
}

/* ------------------------------------------------------------------ dump */

static PyObject *edge_dict(TreeObject *t, const Kids *k, uint32_t n, uint32_t *end) {
    const uint32_t B = t->B;
    size_t total = 0;
    uint32_t m = n;
    for (;;) {
        total += t->nodes[m].nblocks;
        if (kids_count(k, m) != 1) break;
        m = k->list[k->start[m]];
    }
    *end = m;
    PyObject *tokens = PyList_New((Py_ssize_t)(total * B));
    PyObject *blocks = PyList_New((Py_ssize_t)total);
    PyObject *pins = PyList_New((Py_ssize_t)total);
    PyObject *stamps = PyList_New((Py_ssize_t)total);
    PyObject *children = PyList_New(0);
    PyObject *d = NULL;
    /* The edge's ids, for the policy's per-block fields (R-POL-1); lru has none. */
    uint32_t *edge_ids = t->pol.kind != POL_LRU ? PyMem_Malloc((total + 1u) * sizeof(uint32_t)) : NULL;
    if (t->pol.kind != POL_LRU && edge_ids == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (!tokens || !blocks || !pins || !stamps || !children) goto done;
    Py_ssize_t i = 0;
    m = n;
    for (;;) {
        const Node *x = &t->nodes[m];
        const uint32_t *ids = node_ids(t, x);
        for (uint32_t j = 0; j < x->nblocks; j++, i++) {
            uint32_t b = ids[j];
            const uint32_t *tk = node_tok(t, x) + (size_t)j * B;
            for (uint32_t q = 0; q < B; q++) {
                PyObject *v = PyLong_FromUnsignedLong(tk[q]);
                if (v == NULL) goto done;
                PyList_SET_ITEM(tokens, i * (Py_ssize_t)B + q, v);
            }
            PyObject *bv = PyLong_FromUnsignedLong(b);
            if (bv == NULL) goto done;
            PyList_SET_ITEM(blocks, i, bv);
            if (edge_ids != NULL) edge_ids[i] = b;
            PyObject *pv = PyLong_FromUnsignedLong(t->pins[b]);
            if (pv == NULL) goto done;
            PyList_SET_ITEM(pins, i, pv);
            PyObject *sv = PyLong_FromUnsignedLongLong(t->stamps[b]);
            if (sv == NULL) goto done;
            PyList_SET_ITEM(stamps, i, sv);
        }
        if (m == *end) break;
        m = k->list[k->start[m]];
    }
    d = PyDict_New();
    if (d == NULL) goto done;
    if (PyDict_SetItem(d, G.s_tokens, tokens) < 0 || PyDict_SetItem(d, G.s_blocks, blocks) < 0 ||
        PyDict_SetItem(d, G.s_pins, pins) < 0 || PyDict_SetItem(d, G.s_stamps, stamps) < 0 ||
        PyDict_SetItem(d, G.s_children, children) < 0 ||
        (edge_ids != NULL && pol_dump_fields(t, d, edge_ids, (Py_ssize_t)total) < 0))
        Py_CLEAR(d);
done:
    PyMem_Free(edge_ids);
    /* Unfilled list slots are NULL, which list deallocation tolerates. */
    Py_XDECREF(tokens);
    Py_XDECREF(blocks);
    Py_XDECREF(pins);
    Py_XDECREF(stamps);
    Py_XDECREF(children);
    return d;
}

typedef struct {
    uint32_t node;
    PyObject *target; /* borrowed: owned by the result being built */
} DumpItem;

static PyObject *dump_impl(TreeObject *t) {
    PyObject *result = NULL, *spaces = NULL, *freelist = NULL, *quarantine = NULL;
    Kids k = {NULL, NULL};
    DumpItem *stack = NULL;
    RootSlot *roots = NULL;
    if (kids_build(t, &k, 1) < 0) return NULL;
    stack = PyMem_Malloc(((size_t)t->live_nodes + 1u) * sizeof(DumpItem));
    roots = PyMem_Malloc(((size_t)t->roots_len + 1u) * sizeof(RootSlot));
    if (stack == NULL || roots == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(roots, t->roots, (size_t)t->roots_len * sizeof(RootSlot));
    qsort(roots, t->roots_len, sizeof(RootSlot), cmp_root_names);
    spaces = PyList_New(0);
    freelist = ba_free_ids(&t->alloc);
    if (spaces == NULL || freelist == NULL) goto done;
    for (uint32_t r = 0; r < t->roots_len; r++) {
        PyObject *children = PyList_New(0);
        PyObject *space = children ? Py_BuildValue("{s:O,s:O}", "namespace",
                                                   roots[r].ns ? roots[r].ns : Py_None,
                                                   "children", children)
                                   : NULL;
        if (space == NULL || PyList_Append(spaces, space) < 0) {
            Py_XDECREF(children);
            Py_XDECREF(space);
            goto done;
        }
        Py_DECREF(space);
        size_t top = 0;
        uint32_t root = roots[r].node;
        for (uint32_t i = kids_count(&k, root); i-- > 0;)
            stack[top++] = (DumpItem){k.list[k.start[root] + i], children};
        Py_DECREF(children); /* still owned by space */
        while (top > 0) {
            DumpItem item = stack[--top];
            uint32_t end;
            PyObject *d = edge_dict(t, &k, item.node, &end);
            if (d == NULL || PyList_Append(item.target, d) < 0) {
                Py_XDECREF(d);
                goto done;
            }
            PyObject *sub = PyDict_GetItem(d, G.s_children);
            Py_DECREF(d);
            for (uint32_t i = kids_count(&k, end); i-- > 0;)
                stack[top++] = (DumpItem){k.list[k.start[end] + i], sub};
        }
    }
    quarantine = t->qids != NULL
                     ? u32_list(t->qids + t->qid_head, (Py_ssize_t)(t->qid_len - t->qid_head))
                     : PyList_New(0);
    if (quarantine == NULL) goto done;
    result = Py_BuildValue("{s:O,s:I,s:I,s:K,s:O,s:O,s:O}", "format", G.dump_format,
                           "block_size", t->B, "num_blocks", t->num_blocks, "clock",
                           (unsigned long long)t->clock, "free", freelist, "quarantine",
                           quarantine, "namespaces", spaces);
    if (result != NULL && t->pol.kind != POL_LRU) {
        /* R-POL-1: a policy other than lru is part of the state. */
        PyObject *policy = pol_dump_entry(t);
        if (policy == NULL || PyDict_SetItem(result, G.s_policy, policy) < 0) Py_CLEAR(result);
        Py_XDECREF(policy);
    }
done:
    Py_XDECREF(spaces);
    Py_XDECREF(freelist);
    Py_XDECREF(quarantine);
    PyMem_Free(stack);
    PyMem_Free(roots);
    kids_free(&k);
    return result;
}

PyObject *tree_dump(TreeObject *t) {
    /* No collection (hence no finalizer that could touch this tree) while we read it. */
    int gc_was = PyGC_Disable();
    PyObject *r = dump_impl(t);
    if (gc_was) PyGC_Enable();
    return r;
}

/* ------------------------------------------------------------------ invariants */

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)*(void *const *)a, y = (uintptr_t)*(void *const *)b;
    return x < y ? -1 : x > y;
}

/* The chunks of every live edge, sorted by address, so a chunk shared by k writer nodes
 * appears k times in a row.  *n gets the count; NULL with MemoryError set on failure.
 * O(N log N). */
static PChunk **edge_chunks(TreeObject *t, size_t *n) {
    PChunk **all = PyMem_Malloc(((size_t)t->live_nodes + 1u) * sizeof(PChunk *));
    if (all == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    size_t k = 0;
    for (uint32_t i = 0; i < t->nodes_len && k < t->live_nodes; i++)
        if (t->nodes[i].parent < NODE_FREE) all[k++] = t->nodes[i].chunk;
    qsort(all, k, sizeof(PChunk *), cmp_ptr);
    *n = k;
    return all;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    uint32_t node;
    uint32_t pin_above;
    uint64_t stamp_above;
} CheckItem;

#define FAIL(...)                                         \
    do {                                                  \
        PyErr_Format(G.InvariantViolation, __VA_ARGS__);  \
        goto out;                                         \
    } while (0)

int tree_check(TreeObject *t) {
    int rc = -1;
    Kids k = {NULL, NULL};
    uint8_t *seen = NULL;
    uint32_t *expected = NULL, *path = NULL;
    uint64_t *leaf_stamps = NULL;
    CheckItem *stack = NULL;
    PChunk **chunks = NULL;
    const uint32_t NB = t->num_blocks, N = t->nodes_len;

    const char *msg = ba_check(&t->alloc);
    if (msg) FAIL("%s", msg);

    /* Node records: every live non-root node hangs off a live node (8: counters). */
    uint32_t live = 0, roots_seen = 0, free_seen = 0;
    for (uint32_t n = 0; n < N; n++) {
        const Node *x = &t->nodes[n];
        if (x->parent == NODE_FREE) {
            free_seen++;
            continue;
        }
        if (x->parent == NIL) {
            roots_seen++;
            continue;
        }
        live++;
        if (x->parent >= N || t->nodes[x->parent].parent == NODE_FREE)
            FAIL("node %u hangs off a free or foreign node", n);
    }
    if (live != t->live_nodes) FAIL("node counter %u != recount %u", t->live_nodes, live);
    uint32_t chain = 0;
    for (uint32_t f = t->free_node; f != NIL; f = t->nodes[f].off) {
        if (f >= N || t->nodes[f].parent != NODE_FREE || ++chain > free_seen)
            FAIL("node free list is corrupt");
    }
    if (chain != free_seen) FAIL("node free list misses %u free records", free_seen - chain);
    if (kids_build(t, &k, 0) < 0) return -1;
    /* The published shape equals the writer's node by node, and finds every child (the
     * walks below use it). */
    if (shadow_check(t) < 0) goto out;

    /* 1. Roots: no edge, at least one child, filed under their own namespace. */
    if (roots_seen != t->roots_len) FAIL("%u root records for %u namespaces", roots_seen, t->roots_len);
    Py_ssize_t registered = PyDict_GET_SIZE(t->ns_roots) + (t->default_root != NIL);
    if (registered != (Py_ssize_t)t->roots_len) FAIL("namespace registry disagrees with the roots");
    for (uint32_t i = 0; i < t->roots_len; i++) {
        uint32_t r = t->roots[i].node;
        PyObject *ns = t->roots[i].ns;
        if (r >= N || t->nodes[r].parent != NIL || t->nodes[r].off != i)
            FAIL("root of %R misfiled", ns ? ns : Py_None);
        if (t->nodes[r].nblocks != 0) FAIL("root has an edge");
        if (kids_count(&k, r) == 0) FAIL("namespace %R has an empty root", ns ? ns : Py_None);
        if (tree_root_of(t, ns) != r) FAIL("root of %R misfiled", ns ? ns : Py_None);
    }
    for (uint32_t n = 0; n < N; n++)
        if (t->nodes[n].parent != NODE_FREE && t->nodes[n].nchildren != kids_count(&k, n))
            FAIL("node %u counts %u children but has %u", n, t->nodes[n].nchildren, kids_count(&k, n));

    seen = PyMem_Calloc((size_t)NB + 1u, 1);
    expected = PyMem_Calloc((size_t)NB + 1u, sizeof(uint32_t));
    leaf_stamps = PyMem_Malloc(((size_t)live + 1u) * sizeof(uint64_t));
    stack = PyMem_Malloc(((size_t)live + 1u) * sizeof(CheckItem));
    if (!seen || !expected || !leaf_stamps || !stack) {
        PyErr_NoMemory();
        goto out;
    }

    /* 2-4, 6, 7: edges, keys, blocks, monotone paths, queue coverage, leaf stamps. */
    uint64_t blocks_seen = 0, pinned = 0;
    uint32_t visited = 0, leaves = 0;
    for (uint32_t i = 0; i < t->roots_len; i++) {
        size_t top = 0;
        stack[top++] = (CheckItem){t->roots[i].node, UINT32_MAX, t->clock};
        while (top > 0) {
            CheckItem item = stack[--top];
            for (uint32_t q = k.start[item.node]; q < k.start[item.node + 1]; q++) {
                uint32_t c = k.list[q];
                const Node *x = &t->nodes[c];
                visited++;
                if (x->nblocks < 1) FAIL("a non-root node has no blocks");
                const PChunk *ch = x->chunk;
                if ((uint64_t)x->off + x->nblocks > ch->used || ch->used > ch->cap || ch->rc < 1)
                    FAIL("edge of node %u lies outside its chunk", c);
                /* R-EDGE-2: the child lookup (the published shape, or a scan without
                 * it) finds this child by its first block -- so no sibling shares it. */
                if (tree_find_child(t, item.node, node_tok(t, x)) != c)
                    FAIL("child filed under a wrong key");
                const uint32_t *ids = node_ids(t, x);
                uint32_t last_pin = item.pin_above;
                uint64_t last_stamp = item.stamp_above;
                for (uint32_t j = 0; j < x->nblocks; j++) {
                    uint32_t b = ids[j];
                    if (b >= NB) FAIL("node %u holds a foreign block id", c);
                    if (seen[b]) FAIL("block %u cached twice", b);
                    seen[b] = 1;
                    blocks_seen++;
                    if (ba_is_free(&t->alloc, b)) FAIL("cached block %u is free", b);
                    if (t->pins[b] > last_pin) FAIL("pins increase or go negative at %u", b);
                    if (t->stamps[b] > last_stamp) FAIL("stamps increase at block %u", b);
                    pinned += t->pins[b] > 0;
                    last_pin = t->pins[b];
                    last_stamp = t->stamps[b];
                }
                uint32_t tail = ids[x->nblocks - 1];
                if (kids_count(&k, c) == 0) leaf_stamps[leaves++] = t->stamps[tail];
                int evictable = x->nchildren == 0 && t->pins[tail] == 0;
                if (evictable) {
                    uint32_t pos = t->heap_pos[c];
                    if (pos >= t->heap_len || t->heap[pos].node != c ||
                        t->heap[pos].key != pol_rank(t, tail))
                        FAIL("evictable leaf ending in block %u not queued", tail);
                } else if (t->heap_pos[c] != NIL) {
                    FAIL("node %u is queued but is not an evictable leaf", c);
                }
                stack[top++] = (CheckItem){c, last_pin, last_stamp};
            }
        }
    }
    if (visited != live) FAIL("%u nodes are not reachable from a root", live - visited);
    if (leaves != t->leaves) FAIL("leaf counter %u != recount %u", t->leaves, leaves);
    if (t->heap_len > t->leaves || t->heap_cap < t->leaves)
        FAIL("eviction heap of %u entries (room for %u) for %u leaves", t->heap_len, t->heap_cap,
             t->leaves);
    if (blocks_seen != t->cached)
        FAIL("cached counter %llu != %llu blocks", (unsigned long long)t->cached, (unsigned long long)blocks_seen);
    /* Quarantine (R-EPOCH-2): allocated, not cached, once each, batches in epoch order. */
    uint64_t qcount = 0;
    for (size_t i = t->qb_head; i < t->qb_len; i++) {
        if (i > t->qb_head && t->qb[i].epoch <= t->qb[i - 1].epoch)
            FAIL("quarantine batches out of epoch order");
        if (t->qb[i].epoch > t->epochs) FAIL("quarantine batch from a future epoch");
        qcount += t->qb[i].n;
    }
    if (qcount != t->qid_len - t->qid_head || qcount != t->quarantined)
        FAIL("quarantined counter is wrong");
    for (size_t i = t->qid_head; i < t->qid_len; i++) {
        uint32_t b = t->qids[i];
        if (b >= NB) FAIL("quarantined id %u is foreign", b);
        if (seen[b] == 1) FAIL("a quarantined block is cached");
        if (seen[b] == 2) FAIL("a block quarantined twice");
        if (ba_is_free(&t->alloc, b)) FAIL("a quarantined block is free");
        seen[b] = 2;
    }
    for (Py_ssize_t i = 1; i < t->nreaders; i++)
        if (t->readers[i] <= t->readers[i - 1]) FAIL("reader registry out of order");
    if ((uint64_t)(NB - t->alloc.free_count) != t->cached + t->quarantined)
        FAIL("%u blocks allocated but %llu cached and %llu quarantined", NB - t->alloc.free_count,
             (unsigned long long)t->cached, (unsigned long long)t->quarantined);
    /* Chunks: with no snapshot alive and no clone, a chunk's references are exactly its
     * writer nodes and (when kept) their published versions. */
    if (pctx_sole(t->pctx)) {
        size_t nchunks;
        chunks = edge_chunks(t, &nchunks);
        if (chunks == NULL) goto out;
        for (size_t i = 0, run; i < nchunks; i += run) {
            for (run = 1; i + run < nchunks && chunks[i + run] == chunks[i];) run++;
            if (chunks[i]->rc != run * (t->shadow_ok ? 2u : 1u))
                FAIL("a chunk has %u references for %zu users", chunks[i]->rc, run);
        }
    }
    if (pinned != t->pinned)
        FAIL("pinned counter %llu != recount %llu", (unsigned long long)t->pinned, (unsigned long long)pinned);
    qsort(leaf_stamps, leaves, sizeof(uint64_t), cmp_u64);
    for (uint32_t i = 1; i < leaves; i++)
        if (leaf_stamps[i] == leaf_stamps[i - 1]) FAIL("two leaf tails share a stamp");

    /* The heap itself: positions, order, nothing else queued. */
    for (uint32_t pos = 0; pos < t->heap_len; pos++) {
        const HeapEntry *e = &t->heap[pos];
        if (e->node >= N || t->heap_pos[e->node] != pos) FAIL("eviction heap position %u is stale", pos);
        if (pos > 0) {
            const HeapEntry *p = &t->heap[(pos - 1) / 4];
            if (e->key < p->key ||
                (e->key == p->key && node_last(t, &t->nodes[e->node]) <
                                             node_last(t, &t->nodes[p->node])))
                FAIL("eviction heap out of order at %u", pos);
        }
    }

    /* 6. The policy's own state (R-POL-1). */
    char pbuf[160];
    const char *pmsg = pol_check(t, seen, pbuf, sizeof(pbuf));
    if (pmsg) FAIL("policy %U: %s", t->pol.name, pmsg);

    /* 5. Pins are exact: each block's pin count equals the live leases covering it. */
    Py_ssize_t nleases = 0;
    for (LeaseObject *l = t->lease_head; l; l = l->lnext) {
        nleases++;
        if (l->released || !l->linked) FAIL("released lease %llu still registered", (unsigned long long)l->id);
        PyMem_Free(path);
        path = PyMem_Malloc(((size_t)l->count + 1u) * sizeof(uint32_t));
        if (path == NULL) {
            PyErr_NoMemory();
            goto out;
        }
        uint32_t root = tree_root_of(t, l->ns), last, used;
        Py_ssize_t matched = tree_walk(t, root, l->tokens, l->count, path, &last, &used);
        if (matched != (Py_ssize_t)l->count) FAIL("lease %llu's path is no longer cached", (unsigned long long)l->id);
        if (memcmp(path, l->blocks, (size_t)l->count * sizeof(uint32_t)) != 0)
            FAIL("lease %llu's blocks changed", (unsigned long long)l->id);
        for (uint32_t i = 0; i < l->count; i++) expected[l->blocks[i]]++;
    }
    if (nleases != t->nleases) FAIL("lease counter %zd != %zd live leases", t->nleases, nleases);
    for (uint32_t b = 0; b < NB; b++)
        if (seen[b] && t->pins[b] != expected[b])
            FAIL("block %u has %u pins but %u live leases", b, t->pins[b], expected[b]);
    rc = 0;
out:
    kids_free(&k);
    PyMem_Free(chunks);
    PyMem_Free(seen);
    PyMem_Free(expected);
    PyMem_Free(path);
    PyMem_Free(leaf_stamps);
    PyMem_Free(stack);
    return rc;
}

/* ------------------------------------------------------------------ memory */

PyObject *tree_memory(TreeObject *t) {
    const uint32_t B = t->B;
    size_t NB = t->num_blocks;
    /* The token bytes proper: 4 * B per cached block, stored once. */
    size_t tokens = (size_t)t->cached * B * sizeof(uint32_t);
    /* The chunks around them: headers, block ids, room not (or no longer) used. */
    size_t edges = 0, nchunks;
    PChunk **chunks = edge_chunks(t, &nchunks);
    if (chunks == NULL) return NULL;
    for (size_t i = 0; i < nchunks; i++)
        if (i == 0 || chunks[i] != chunks[i - 1]) edges += chunk_bytes(chunks[i]->cap, B);
    PyMem_Free(chunks);
    edges -= tokens;
    size_t per_block = NB * (sizeof(uint32_t) + sizeof(uint64_t)) + pol_bytes(t);
    size_t allocator = ba_bytes(&t->alloc);
    size_t nodes = (size_t)t->nodes_cap * (sizeof(Node) + sizeof(uint32_t) + sizeof(PNode *));
    size_t heap = (size_t)t->heap_cap * sizeof(HeapEntry);
    size_t roots = (size_t)t->roots_cap * sizeof(RootSlot);
    size_t scratch = (t->scratch_tok_cap + t->scratch_path_cap) * sizeof(uint32_t);
    size_t leases = 0;
    for (LeaseObject *l = t->lease_head; l; l = l->lnext)
        leases += sizeof(LeaseObject) + (size_t)l->count * (B + 1u) * sizeof(uint32_t);
    size_t object = sizeof(TreeObject);
    size_t published = shadow_bytes(t);
    size_t quarantine = t->qb_cap * sizeof(QBatch) + t->qid_cap * sizeof(uint32_t) +
                        (size_t)t->readers_cap * sizeof(uint64_t) + t->anc_cap * sizeof(uint32_t);
    size_t events = ev_bytes(t->ev); /* hashes and encoded events (events.c) */
    size_t total = tokens + edges + per_block + allocator + nodes + heap + roots + scratch +
                   leases + object + published + quarantine + events;
    return Py_BuildValue("{s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:K,s:I}",
                         "tokens", (Py_ssize_t)tokens, "edges", (Py_ssize_t)edges,
                         "published_shape", (Py_ssize_t)published, "quarantine",
                         (Py_ssize_t)quarantine, "per_block", (Py_ssize_t)per_block,
                         "allocator", (Py_ssize_t)allocator, "nodes", (Py_ssize_t)nodes,
                         "eviction_heap", (Py_ssize_t)heap,
                         "roots", (Py_ssize_t)roots, "scratch", (Py_ssize_t)scratch, "leases",
                         (Py_ssize_t)leases, "object", (Py_ssize_t)object, "events",
                         (Py_ssize_t)events, "total",
                         (Py_ssize_t)total, "cached_blocks", (unsigned long long)t->cached,
                         "live_nodes", t->live_nodes);
}

/* For the test hooks (corrupt.c's and router.c's): a check's message. */
PyObject *violation_message(void) {
    if (!PyErr_Occurred()) Py_RETURN_NONE;
    if (!PyErr_ExceptionMatches(G.InvariantViolation)) return NULL;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *message = PyObject_Str(value);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return message;
}
