/* Test hooks: RadixTree._corrupt_check(kind) and BlockAllocator._corrupt_check(kind).
 *
 * check_invariants() (inspect.c, shadow_check in snapshot.c, ba_check in alloc.c) can
 * only fail on a broken tree, which no sequence of public calls makes.  These hooks show
 * each check firing: they break one invariant in place (`kind`, one of KINDS below),
 * run the check (or, for "dump_live_count", dump()), undo every byte they changed, and
 * return the InvariantViolation's message -- None if the check let the break pass.  A
 * kind this tree's state cannot show (a quarantine check on a tree without one, say)
 * raises ValueError and changes nothing.  Kinds marked "dropped" first drop the
 * published shape (as an allocation failure would: the next call rebuilds it) so that
 * the writer's checks, which come after the published shape's, are reached; kinds
 * marked "sole" write into chunks or counts a snapshot or a clone could see, and need
 * the tree to be their only holder.
 *
 * Compiled into the test build only (KACHEDB_RADIX_TEST_HOOKS; accel/DESIGN.md "Test
 * hooks"): in any other build this unit is empty, and the methods are not in the types'
 * tables.  It reads the published shape's encoding through shape.h. */
#ifdef KACHEDB_RADIX_TEST_HOOKS

#include "corrupt.h"

#include "alloc.h"
#include "events.h"
#include "inspect.h"
#include "policy.h"
#include "shape.h"
#include "snapshot.h"
#include "walk.h"

/* Mark block b free (or, with take, allocated) in `a`, consistently: bits, summary, hint
 * and count agree, so only the tree's own checks can tell. */
static void flip_block(Undo *u, BitAlloc *a, uint32_t b, int take) {
    uint32_t w = b >> 6;
    uint64_t word = take ? a->bits[w] & ~((uint64_t)1 << (b & 63)) : a->bits[w] | ((uint64_t)1 << (b & 63));
    uint64_t flag = (uint64_t)1 << (w & 63);
    PUT(u, a->bits[w], word);
    PUT(u, a->summary[w >> 6], word ? a->summary[w >> 6] | flag : a->summary[w >> 6] & ~flag);
    if (!take && (w >> 6) < a->hint) PUT(u, a->hint, w >> 6);
    PUT(u, a->free_count, take ? a->free_count - 1u : a->free_count + 1u);
}

/* Break allocator a by `kind`, for its check to catch; the caller undoes it.  1 done, 0 not
 * an allocator kind, -1 this allocator cannot show it (ValueError set). */
static int corrupt_alloc(BitAlloc *a, const char *kind, Undo *u) {
    if (strcmp(kind, "alloc_summary") == 0) {
        PUT(u, a->summary[0], a->summary[0] ^ 1u); /* word 0 flagged the wrong way */
    } else if (strcmp(kind, "alloc_hint") == 0) {
        if (a->free_count == 0) goto cannot;
        PUT(u, a->hint, a->nsummary); /* past every free id */
    } else if (strcmp(kind, "alloc_pad") == 0) {
        if ((a->num_blocks & 63u) == 0) goto cannot;
        uint64_t *last = &a->bits[a->nwords - 1];
        PUT(u, *last, *last | ((uint64_t)1 << 63)); /* an id past the pool, free */
    } else if (strcmp(kind, "alloc_count") == 0) {
        PUT(u, a->free_count, a->free_count + 1u);
    } else {
        return 0;
    }
    return 1;
cannot:
    PyErr_Format(PyExc_ValueError, "this allocator cannot show %s", kind);
    return -1;
}

/* The kind a hook was given, as UTF-8; NULL with TypeError (or UnicodeEncodeError). */
static const char *kind_of(PyObject *arg) {
    const char *kind = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    if (kind == NULL && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "kind must be a str");
    return kind;
}

PyObject *alloc_corrupt_check(BitAlloc *a, PyObject *arg) {
    const char *kind = kind_of(arg);
    if (kind == NULL) return NULL;
    Undo u = {.n = 0, .temp = NULL};
    int done = corrupt_alloc(a, kind, &u);
    if (done <= 0) {
        if (done == 0) PyErr_Format(PyExc_ValueError, "unknown kind %R", arg);
        return NULL;
    }
    const char *msg = ba_check(a);
    if (msg) PyErr_SetString(G.InvariantViolation, msg);
    undo(&u);
    return violation_message();
}

/* ------------------------------------------------------------------ finding what to break */

static inline int live(const TreeObject *t, uint32_t n) { return t->nodes[n].parent < NODE_FREE; }

/* The first non-root node with no children and at least min blocks; queued: one in the
 * eviction heap.  NIL if none. */
static uint32_t find_leaf(const TreeObject *t, uint32_t min, int queued) {
    for (uint32_t n = 0; n < t->nodes_len; n++)
        if (live(t, n) && t->nodes[n].nchildren == 0 && t->nodes[n].nblocks >= min &&
            (!queued || t->heap_pos[n] != NIL))
            return n;
    return NIL;
}

/* A queued leaf other than `not`. */
static uint32_t find_other_leaf(const TreeObject *t, uint32_t not) {
    for (uint32_t n = 0; n < t->nodes_len; n++)
        if (n != not && live(t, n) && t->heap_pos[n] != NIL) return n;
    return NIL;
}

static uint32_t find_inner(const TreeObject *t) {
    for (uint32_t n = 0; n < t->nodes_len; n++)
        if (live(t, n) && t->nodes[n].nchildren > 0) return n;
    return NIL;
}

/* The last queued leaf whose parent has other children too. */
static uint32_t find_sibling_leaf(const TreeObject *t) {
    for (uint32_t n = t->nodes_len; n-- > 0;)
        if (live(t, n) && t->heap_pos[n] != NIL && t->nodes[t->nodes[n].parent].nchildren > 1)
            return n;
    return NIL;
}

/* A non-root node whose parent (a non-root node) and grandparent both have higher
 * indices -- a split's lower half in a namespace made after it, say: the published
 * shape's node loop reaches it before any node whose checks look at its parent. */
static uint32_t find_split_lower(const TreeObject *t) {
    for (uint32_t n = 0; n < t->nodes_len; n++) {
        uint32_t p = t->nodes[n].parent;
        if (live(t, n) && p > n && live(t, p) && t->nodes[p].parent > n) return n;
    }
    return NIL;
}

/* A chunk other than c, of some live edge; NULL if every edge lies in c. */
static PChunk *other_chunk(const TreeObject *t, const PChunk *c) {
    for (uint32_t n = 0; n < t->nodes_len; n++)
        if (live(t, n) && t->nodes[n].chunk != c) return t->nodes[n].chunk;
    return NULL;
}

/* A root with exactly one child, of the default namespace (named = 0) or another. */
static uint32_t find_lone_root(const TreeObject *t, int named) {
    for (uint32_t i = 0; i < t->roots_len; i++) {
        uint32_t r = t->roots[i].node;
        if ((t->roots[i].ns != NULL) == named && t->nodes[r].nchildren == 1) return r;
    }
    return NIL;
}

static uint32_t only_child(const TreeObject *t, uint32_t parent) {
    for (uint32_t n = 0; n < t->nodes_len; n++)
        if (t->nodes[n].parent == parent) return n;
    return NIL;
}

/* A node whose published children are a trie (trie != 0) or an array of at least two
 * children, all of higher indices. */
static uint32_t find_kids_owner(const TreeObject *t, int trie) {
    for (uint32_t n = 0; n < t->nodes_len; n++) {
        if (t->nodes[n].parent == NODE_FREE) continue;
        const PNode *p = t->pub[n];
        if (trie ? kids_in_trie(p) : (!kids_in_trie(p) && pn_nkids(p) >= 2)) {
            if (trie) return n;
            PNode *const *k = arr_nodes(kids_ptr(kids_word(p)));
            if (k[0]->nid > n && k[1]->nid > n) return n;
        }
    }
    return NIL;
}

/* In the trie below h (at depth), a node at `want` depth; with pair, one of two child
 * PNode entries exactly.  NULL if none. */
static HNode *find_hnode(HNode *h, uint32_t depth, uint32_t want, int pair) {
    if (depth == want && (!pair || (h->n == 2 && depth < H_LEVELS && h->leafmap == h->bitmap)))
        return h;
    uint32_t rest = h->bitmap;
    for (uint32_t i = 0; i < h->n; i++) {
        if (hn_next_is_leaf(h, depth, &rest)) continue;
        HNode *found = find_hnode(h->e[i], depth + 1u, want, pair);
        if (found != NULL) return found;
    }
    return NULL;
}

/* The first two child PNode entries of trie node h (at depth < H_LEVELS); -1 if fewer. */
static int leaf_entries(const HNode *h, uint32_t depth, uint32_t *first, uint32_t *second) {
    uint32_t rest = h->bitmap, found = 0;
    for (uint32_t i = 0; i < h->n && found < 2; i++) {
        if (!hn_next_is_leaf(h, depth, &rest)) continue;
        if (found++ == 0) *first = i;
        else *second = i;
    }
    return found == 2 ? 0 : -1;
}

/* ------------------------------------------------------------------ the tree's */

/* Every kind, in the order the checks run: tests/accel/test_invariants.py lists what each
 * must make check_invariants() say. */
static const char *const KINDS[] = {
    "alloc_summary", "alloc_hint", "alloc_pad", "alloc_count",
    "parent_foreign", "parent_free", "live_count", "free_list_foreign", "free_list_live",
    "free_list_cycle", "free_list_short", "dump_live_count",
    "roots_count", "registry", "root_index", "root_parent", "root_slot", "root_edge",
    "empty_default_root", "empty_named_root", "root_lookup", "nchildren",
    "no_blocks", "edge_past_used", "used_past_cap", "chunk_rc", "wrong_key",
    "foreign_id", "cached_twice", "cached_free", "pins_increase", "stamps_increase",
    "heap_pos_past", "heap_other_node", "heap_stamp", "queued_inner", "unreachable",
    "leaf_count", "heap_len_over", "heap_cap_under", "cached_count",
    "batches_order", "batch_future", "batch_size", "quarantined_count",
    "quarantine_foreign", "quarantine_cached", "quarantine_twice", "quarantine_free",
    "readers_order", "allocated_count", "chunk_refs", "pinned_count", "tail_stamps",
    "heap_node_foreign", "heap_pos_stale", "heap_order",
    "policy_hits", "policy_born", "policy_priority", "policy_until",
    "policy_protected_uncached", "policy_protected_count", "policy_heap_order",
    "policy_heap_block", "policy_heap_live",
    "lease_released", "lease_unlinked", "lease_path", "lease_blocks", "lease_count",
    "pins_vs_leases",
    "trie_rc_zero", "trie_shared", "trie_empty", "trie_overfull", "trie_total",
    "trie_bitmap", "trie_lone", "collision_bitmap", "collision_small",
    "trie_child_no_edge", "trie_child_no_chunk", "trie_wrong_hash", "trie_not_current_nid",
    "trie_not_current_parent", "trie_not_current_pub",
    "roots_shared", "published_roots_count", "roots_unsorted", "root_stale_ns",
    "root_stale_node", "root_has_count", "root_has_chunk",
    "pub_missing", "pub_rc_zero", "pub_shared", "pub_count", "pub_nkids", "pub_empty_kids",
    "pub_trie_count", "array_child_no_edge", "array_child_no_chunk", "array_key",
    "array_unsorted", "pub_nid", "pub_chunk", "pub_off", "pub_parent_missing",
    "pub_not_found",
    "events_open", "events_hash", "events_known",
    NULL,
};

#define NEED(cond, what)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            PyErr_Format(PyExc_ValueError, "this tree has no %s to show %s", what, kind); \
            return -1;                                                            \
        }                                                                         \
    } while (0)

#define IS(name) (strcmp(kind, name) == 0)

/* The writer's records (inspect.c's tree_check).  1 done, 0 not one of these kinds. */
/* A cached block that is no leaf's tail (its key is in no heap entry), or NIL. */
static uint32_t find_inner_block(const TreeObject *t) {
    for (uint32_t n = 0; n < t->nodes_len; n++) {
        const Node *x = &t->nodes[n];
        if (!live(t, n) || x->nblocks == 0) continue;
        if (x->nchildren > 0) return node_ids(t, x)[0];
        if (x->nblocks > 1) return node_ids(t, x)[0];
    }
    return NIL;
}

/* The eviction policy's state (policy.c's pol_check). */
static int corrupt_policy(TreeObject *t, const char *kind, Undo *u) {
    Policy *p = &t->pol;
    uint32_t inner = find_inner_block(t);
    if (IS("policy_hits")) {
        NEED(p->kind == POL_LFU && inner != NIL, "lfu block inside an edge");
        PUT(u, p->hits[inner], HITS_CAP + 1u);
    } else if (IS("policy_born")) {
        NEED(p->kind == POL_FIFO && inner != NIL, "fifo block inside an edge");
        PUT(u, p->born[inner], (uint64_t)0);
    } else if (IS("policy_priority")) {
        NEED(p->kind == POL_PRIORITY && inner != NIL, "priority block inside an edge");
        PUT(u, p->prio[inner], (uint8_t)101);
    } else if (IS("policy_until")) {
        NEED(p->kind == POL_PRIORITY && inner != NIL && t->clock > 0, "priority block");
        PUT(u, p->until[inner], t->clock);
    } else if (IS("policy_protected_uncached")) {
        NEED(p->kind == POL_SLRU && t->alloc.free_count > 0, "slru tree with a free block");
        uint32_t w = 0;
        while (t->alloc.bits[w] == 0) w++;
        PUT(u, p->prot[w * 64u + (uint32_t)__builtin_ctzll(t->alloc.bits[w])], (uint8_t)1);
    } else if (IS("policy_protected_count")) {
        NEED(p->kind == POL_SLRU, "slru tree");
        PUT(u, p->prot_count, p->prot_count + 1u);
    } else if (IS("policy_heap_order")) {
        NEED((p->kind == POL_SLRU || p->kind == POL_PRIORITY) && p->pending.n >= 2 &&
                 ke_less(&p->pending.e[0], &p->pending.e[1]),
             "policy heap of two distinct entries");
        KEntry a = p->pending.e[0], b = p->pending.e[1];
        PUT(u, p->pending.e[0], b);
        PUT(u, p->pending.e[1], a);
    } else if (IS("policy_heap_block")) {
        NEED((p->kind == POL_SLRU || p->kind == POL_PRIORITY) && p->pending.n >= 1,
             "policy heap entry");
        PUT(u, p->pending.e[p->pending.n - 1u].block, t->num_blocks + 5u);
    } else if (IS("policy_heap_live")) {
        NEED((p->kind == POL_SLRU && p->prot_count > 0) ||
                 (p->kind == POL_PRIORITY && p->pending.n > 0),
             "protected block or pending expiry");
        PUT(u, p->pending.n, (size_t)0);
    } else {
        return 0;
    }
    return 1;
}

static int corrupt_records(TreeObject *t, const char *kind, Undo *u, int *dump) {
    const uint32_t N = t->nodes_len, NB = t->num_blocks;
    uint32_t leaf = find_leaf(t, 1, 1), leaf2 = find_leaf(t, 2, 0);
    const int sole = pctx_sole(t->pctx);
    if (IS("parent_foreign")) {
        NEED(leaf != NIL, "leaf");
        PUT(u, t->nodes[leaf].parent, N + 5u);
    } else if (IS("parent_free")) {
        NEED(leaf != NIL && t->free_node != NIL, "leaf and free node record");
        PUT(u, t->nodes[leaf].parent, t->free_node);
    } else if (IS("live_count")) {
        PUT(u, t->live_nodes, t->live_nodes + 1u);
    } else if (IS("free_list_foreign")) {
        PUT(u, t->free_node, N + 1u);
    } else if (IS("free_list_live")) {
        NEED(leaf != NIL, "leaf");
        PUT(u, t->free_node, leaf);
    } else if (IS("free_list_cycle")) {
        NEED(t->free_node != NIL, "free node record");
        PUT(u, t->nodes[t->free_node].off, t->free_node);
    } else if (IS("free_list_short")) {
        NEED(t->free_node != NIL, "free node record");
        PUT(u, t->free_node, NIL);
    } else if (IS("dump_live_count")) {
        NEED(t->live_nodes > 0, "node");
        PUT(u, t->live_nodes, t->live_nodes - 1u);
        *dump = 1;
    } else if (IS("roots_count")) {
        NEED(t->roots_len > 0, "namespace");
        PUT(u, t->roots_len, t->roots_len - 1u);
    } else if (IS("registry")) {
        NEED(t->default_root != NIL, "default namespace");
        PUT(u, t->default_root, NIL);
    } else if (IS("root_index") || IS("root_parent") || IS("root_slot") || IS("root_edge")) {
        NEED(t->roots_len > 0 && leaf != NIL, "namespace and leaf");
        /* The first namespace made and the last: in the tests, the default one and a named. */
        uint32_t last = t->roots_len - 1u, first = t->roots[0].node;
        if (IS("root_index")) PUT(u, t->roots[last].node, N + 1u);
        if (IS("root_parent")) PUT(u, t->roots[0].node, leaf);
        if (IS("root_slot")) PUT(u, t->nodes[first].off, t->roots_len + 7u);
        if (IS("root_edge")) PUT(u, t->nodes[t->roots[last].node].nblocks, 1u);
    } else if (IS("empty_default_root") || IS("empty_named_root")) {
        uint32_t r = find_lone_root(t, IS("empty_named_root"));
        uint32_t other = r == NIL ? NIL : t->roots[(t->nodes[r].off + 1u) % t->roots_len].node;
        NEED(r != NIL && other != r, "one-child root beside another namespace");
        PUT(u, t->nodes[only_child(t, r)].parent, other);
    } else if (IS("root_lookup")) {
        uint32_t named = t->roots_len > 1 ? t->roots[t->nodes[t->default_root].off == 0].node : NIL;
        NEED(t->default_root != NIL && named != NIL, "default and named namespace");
        PUT(u, t->default_root, named);
    } else if (IS("nchildren")) {
        NEED(leaf != NIL, "leaf");
        PUT(u, t->nodes[leaf].nchildren, 1u);
    } else if (IS("no_blocks")) {
        NEED(leaf != NIL, "leaf");
        PUT(u, t->nodes[leaf].nblocks, 0u);
    } else if (IS("edge_past_used") || IS("used_past_cap") || IS("chunk_rc")) {
        NEED(leaf != NIL, "leaf");
        PChunk *c = t->nodes[leaf].chunk;
        if (IS("edge_past_used")) PUT(u, c->used, 0u);
        if (IS("used_past_cap")) PUT(u, c->used, c->cap + 1u);
        if (IS("chunk_rc")) PUT(u, c->rc, 0u);
    } else if (IS("wrong_key")) {
        uint32_t x = find_sibling_leaf(t), first = x == NIL ? NIL : only_child(t, t->nodes[x].parent);
        NEED(x != NIL && first != x, "leaf with an older sibling");
        PUT(u, t->nodes[x].chunk, t->nodes[first].chunk); /* the older one's first block */
        PUT(u, t->nodes[x].off, t->nodes[first].off);
        PUT(u, t->nodes[x].nblocks, 1u);
    } else if (IS("foreign_id") || IS("cached_twice")) {
        NEED(sole && leaf2 != NIL, "two-block leaf (and no snapshot or clone)");
        uint32_t *ids = chunk_ids(t->nodes[leaf2].chunk, t->B) + t->nodes[leaf2].off;
        PUT(u, ids[1], IS("foreign_id") ? NB + 3u : ids[0]);
    } else if (IS("cached_free")) {
        NEED(leaf != NIL, "leaf");
        flip_block(u, &t->alloc, node_last(t, &t->nodes[leaf]), 0);
    } else if (IS("pins_increase") || IS("stamps_increase")) {
        NEED(leaf2 != NIL, "two-block leaf");
        const uint32_t *ids = node_ids(t, &t->nodes[leaf2]);
        if (IS("pins_increase")) PUT(u, t->pins[ids[1]], t->pins[ids[0]] + 1u);
        else PUT(u, t->stamps[ids[1]], t->stamps[ids[0]] + 1u);
    } else if (IS("heap_pos_past") || IS("heap_stamp")) {
        NEED(leaf != NIL, "queued leaf");
        if (IS("heap_pos_past")) PUT(u, t->heap_pos[leaf], t->heap_len + 1u);
        else PUT(u, t->heap[t->heap_pos[leaf]].key, t->heap[t->heap_pos[leaf]].key + 1u);
    } else if (IS("heap_other_node")) {
        uint32_t other = leaf == NIL ? NIL : find_other_leaf(t, leaf);
        NEED(other != NIL, "two queued leaves");
        uint32_t a = t->heap_pos[leaf], b = t->heap_pos[other];
        PUT(u, t->heap_pos[leaf], b);
        PUT(u, t->heap_pos[other], a);
    } else if (IS("queued_inner")) {
        uint32_t inner = find_inner(t);
        NEED(inner != NIL, "inner node");
        PUT(u, t->heap_pos[inner], 0u);
    } else if (IS("unreachable")) {
        uint32_t x = find_sibling_leaf(t);
        NEED(x != NIL, "leaf with a sibling");
        uint32_t p = t->nodes[x].parent;
        PUT(u, t->nodes[p].nchildren, t->nodes[p].nchildren - 1u);
        PUT(u, t->nodes[x].parent, x); /* its own child: out of every root's reach */
        PUT(u, t->nodes[x].nchildren, 1u);
    } else if (IS("leaf_count")) {
        PUT(u, t->leaves, t->leaves + 1u);
    } else if (IS("heap_len_over")) {
        NEED(t->heap_cap > t->leaves, "room in the heap");
        PUT(u, t->heap_len, t->leaves + 1u);
    } else if (IS("heap_cap_under")) {
        NEED(t->leaves > 0, "leaf");
        PUT(u, t->heap_cap, t->leaves - 1u);
    } else if (IS("cached_count")) {
        PUT(u, t->cached, t->cached + 1u);
    } else {
        return 0;
    }
    return 1;
}

/* Quarantine, readers, counts, heap order and leases (tree_check, continued). */
static int corrupt_epochs(TreeObject *t, const char *kind, Undo *u) {
    const uint32_t N = t->nodes_len, NB = t->num_blocks;
    const size_t qb = t->qb_head, qi = t->qid_head;
    const int batches = t->qb_len - qb >= 2, ids = t->qid_len - qi >= 2;
    uint32_t leaf = find_leaf(t, 1, 1);
    if (IS("batches_order")) {
        NEED(batches, "two quarantine batches");
        PUT(u, t->qb[qb].epoch, t->qb[qb + 1].epoch);
    } else if (IS("batch_future")) {
        NEED(batches, "quarantine batch");
        PUT(u, t->qb[t->qb_len - 1].epoch, t->epochs + 1u);
    } else if (IS("batch_size")) {
        NEED(batches, "quarantine batch");
        PUT(u, t->qb[qb].n, t->qb[qb].n + 1u);
    } else if (IS("quarantined_count")) {
        PUT(u, t->quarantined, t->quarantined + 1u);
    } else if (IS("quarantine_foreign") || IS("quarantine_cached") || IS("quarantine_twice") ||
               IS("quarantine_free")) {
        NEED(ids && leaf != NIL, "two quarantined ids and a leaf");
        if (IS("quarantine_foreign")) PUT(u, t->qids[qi], NB + 1u);
        if (IS("quarantine_cached")) PUT(u, t->qids[qi], node_last(t, &t->nodes[leaf]));
        if (IS("quarantine_twice")) PUT(u, t->qids[qi + 1], t->qids[qi]);
        if (IS("quarantine_free")) flip_block(u, &t->alloc, t->qids[qi], 0);
    } else if (IS("readers_order")) {
        NEED(t->nreaders >= 2, "two readers");
        PUT(u, t->readers[1], t->readers[0]);
    } else if (IS("allocated_count")) {
        NEED(t->alloc.free_count > 0, "free block");
        uint32_t w = 0;
        while (t->alloc.bits[w] == 0) w++;
        flip_block(u, &t->alloc, w * 64u + (uint32_t)__builtin_ctzll(t->alloc.bits[w]), 1);
    } else if (IS("chunk_refs")) {
        NEED(pctx_sole(t->pctx) && leaf != NIL, "leaf (and no snapshot or clone)");
        PUT(u, t->nodes[leaf].chunk->rc, t->nodes[leaf].chunk->rc + 1u);
    } else if (IS("pinned_count")) {
        PUT(u, t->pinned, t->pinned + 1u);
    } else if (IS("tail_stamps")) {
        uint32_t other = leaf == NIL ? NIL : find_other_leaf(t, leaf);
        NEED(other != NIL, "two queued leaves");
        uint32_t older = t->heap[t->heap_pos[leaf]].key < t->heap[t->heap_pos[other]].key
                             ? leaf
                             : other,
                 newer = older == leaf ? other : leaf;
        uint64_t stamp = t->stamps[node_last(t, &t->nodes[older])];
        PUT(u, t->stamps[node_last(t, &t->nodes[newer])], stamp);
        PUT(u, t->heap[t->heap_pos[newer]].key, stamp);
    } else if (IS("heap_node_foreign") || IS("heap_pos_stale")) {
        NEED(leaf != NIL && t->heap_len < t->leaves && t->heap_len < t->heap_cap,
             "queued leaf beside a pinned one");
        PUT(u, t->heap[t->heap_len].key, t->stamps[node_last(t, &t->nodes[leaf])]);
        PUT(u, t->heap[t->heap_len].node, IS("heap_pos_stale") ? leaf : N + 5u);
        PUT(u, t->heap_len, t->heap_len + 1u);
    } else if (IS("heap_order")) {
        NEED(t->heap_len >= 2, "two queued leaves");
        HeapEntry a = t->heap[0], b = t->heap[1];
        PUT(u, t->heap[0], b);
        PUT(u, t->heap[1], a);
        PUT(u, t->heap_pos[a.node], 1u);
        PUT(u, t->heap_pos[b.node], 0u);
    } else if (IS("lease_count")) {
        PUT(u, t->nleases, t->nleases + 1);
    } else if (strncmp(kind, "policy_", 7) == 0) {
        return corrupt_policy(t, kind, u);
    } else if (strncmp(kind, "lease_", 6) == 0 || IS("pins_vs_leases")) {
        LeaseObject *l = t->lease_head;
        while (l != NULL && l->count == 0) l = l->lnext;
        NEED(l != NULL, "lease on a cached block");
        if (IS("lease_released")) PUT(u, l->released, 1);
        else if (IS("lease_unlinked")) PUT(u, l->linked, 0);
        else if (IS("lease_path")) PUT(u, l->ns, G.s_tokens); /* a namespace with nothing */
        else if (IS("lease_blocks")) PUT(u, l->blocks[0], l->blocks[0] ^ 0x40000000u);
        else if (IS("pins_vs_leases")) PUT(u, t->pins[l->blocks[0]], t->pins[l->blocks[0]] + 1u);
        else return 0;
    } else {
        return 0;
    }
    return 1;
}

/* The published shape (snapshot.c's shadow_check). */
static int corrupt_published(TreeObject *t, const char *kind, Undo *u) {
    const int sole = pctx_sole(t->pctx);
    PRoots *R = t->proots;
    if (IS("roots_shared")) {
        NEED(sole, "sole holder");
        PUT(u, R->rc, 2);
    } else if (IS("published_roots_count")) {
        NEED(R->n > 0, "namespace");
        PUT(u, R->n, R->n - 1u);
    } else if (IS("roots_unsorted")) {
        NEED(R->n >= 2, "two namespaces");
        PRoot a = R->r[0], b = R->r[1];
        PUT(u, R->r[0], b);
        PUT(u, R->r[1], a);
    } else if (IS("root_stale_ns") || IS("root_stale_node") || IS("root_has_count") ||
               IS("root_has_chunk")) {
        NEED(R->n > 0 && t->live_nodes > 0, "namespace");
        PRoot *last = &R->r[R->n - 1];
        uint32_t r = tree_root_of(t, last->ns), other = find_leaf(t, 1, 0);
        if (IS("root_stale_ns")) PUT(u, last->ns, G.s_tokens); /* sorts last, holds nothing */
        if (IS("root_stale_node")) PUT(u, t->pub[r], t->pub[other]);
        if (IS("root_has_count")) PUT(u, last->root->count, 1u);
        if (IS("root_has_chunk")) PUT(u, last->root->chunk, t->nodes[other].chunk);
    } else if (strncmp(kind, "trie_", 5) == 0 || strncmp(kind, "collision_", 10) == 0 ||
               IS("pub_empty_kids") || IS("pub_trie_count")) {
        uint32_t owner = find_kids_owner(t, 1);
        NEED(owner != NIL, "trie of children");
        HNode *top = t->pub[owner]->kids;
        uint32_t i = 0, j = 0;
        if (IS("trie_rc_zero")) {
            PUT(u, top->rc, 0u);
        } else if (IS("trie_shared")) {
            NEED(sole, "sole holder");
            PUT(u, top->rc, 2u);
        } else if (IS("trie_overfull")) {
            PUT(u, top->cap, (uint16_t)(top->n - 1u));
        } else if (IS("trie_bitmap")) {
            NEED(~top->bitmap != 0, "free trie slot");
            PUT(u, top->leafmap, top->leafmap | (~top->bitmap & (top->bitmap + 1u)));
        } else if (IS("trie_empty") || IS("trie_total") || IS("trie_lone")) {
            HNode *s = find_hnode(top, 0, 1, IS("trie_lone"));
            NEED(s != NULL, IS("trie_lone") ? "trie node of two children" : "trie node below the top");
            if (IS("trie_empty")) PUT(u, s->n, (uint16_t)0);
            if (IS("trie_total")) PUT(u, s->total, 1u);
            if (IS("trie_lone")) { /* keep only its first child: one bit, one leaf */
                uint32_t bit = s->bitmap & -s->bitmap;
                PUT(u, s->n, (uint16_t)1);
                PUT(u, s->bitmap, bit);
                PUT(u, s->leafmap, bit);
            }
        } else if (strncmp(kind, "collision_", 10) == 0) {
            HNode *c = find_hnode(top, 0, H_LEVELS, 0);
            NEED(c != NULL, "collision list");
            if (IS("collision_bitmap")) PUT(u, c->bitmap, 1u);
            else PUT(u, c->n, (uint16_t)1);
        } else if (IS("pub_empty_kids") || IS("pub_trie_count")) {
            int empty = IS("pub_empty_kids");
            PUT(u, top->total, empty ? 0u : top->total + 1u);
            PUT(u, t->nodes[owner].nchildren, empty ? 0u : t->nodes[owner].nchildren + 1u);
        } else {
            NEED(leaf_entries(top, 0, &i, &j) == 0, "two children at the trie's top");
            PNode *k = top->e[i];
            if (IS("trie_child_no_edge")) PUT(u, k->count, 0u);
            else if (IS("trie_child_no_chunk")) PUT(u, k->chunk, (PChunk *)NULL);
            else if (IS("trie_wrong_hash")) {
                PUT(u, top->e[i], top->e[j]);
                PUT(u, top->e[j], (void *)k);
            } else if (IS("trie_not_current_nid")) PUT(u, k->nid, t->nodes_len + 1u);
            else if (IS("trie_not_current_parent")) PUT(u, k->nid, owner);
            else if (IS("trie_not_current_pub")) PUT(u, t->pub[k->nid], (PNode *)NULL);
            else return 0;
        }
    } else if (strncmp(kind, "array_", 6) == 0) {
        uint32_t owner = find_kids_owner(t, 0);
        NEED(owner != NIL, "array of children");
        void *arr = kids_ptr(kids_word(t->pub[owner]));
        uint32_t n = pn_nkids(t->pub[owner]);
        PNode **k = arr_nodes(arr);
        uint32_t *keys = arr_keys(arr, n);
        if (IS("array_child_no_edge")) PUT(u, k[0]->count, 0u);
        else if (IS("array_child_no_chunk")) PUT(u, k[0]->chunk, (PChunk *)NULL);
        else if (IS("array_key")) PUT(u, keys[0], keys[0] + 1u);
        else if (IS("array_unsorted")) {
            PNode *a = k[0], *b = k[1];
            uint32_t ka = keys[0], kb = keys[1];
            PUT(u, k[0], b);
            PUT(u, k[1], a);
            PUT(u, keys[0], kb);
            PUT(u, keys[1], ka);
        } else return 0;
    } else if (strncmp(kind, "pub_", 4) == 0) {
        uint32_t x = find_split_lower(t);
        PChunk *other = x == NIL ? NULL : other_chunk(t, t->nodes[x].chunk);
        NEED(other != NULL, "split node in a later namespace, beside another edge");
        PNode *p = t->pub[x];
        uint32_t parent = t->nodes[x].parent;
        if (IS("pub_missing")) PUT(u, t->pub[x], (PNode *)NULL);
        else if (IS("pub_rc_zero")) PUT(u, p->rc, 0u);
        else if (IS("pub_shared")) {
            NEED(sole, "sole holder");
            PUT(u, p->rc, 2u);
        } else if (IS("pub_count")) PUT(u, p->count, p->count + 1u);
        else if (IS("pub_nkids")) PUT(u, t->nodes[x].nchildren, t->nodes[x].nchildren + 1u);
        else if (IS("pub_nid")) PUT(u, p->nid, x + 1u);
        else if (IS("pub_chunk")) PUT(u, p->chunk, other);
        else if (IS("pub_off")) PUT(u, p->off, p->off + 1u);
        else if (IS("pub_parent_missing")) PUT(u, t->pub[parent], (PNode *)NULL);
        else if (IS("pub_not_found")) { /* an equal copy: the parent still holds the original */
            u->temp = pn_new();
            if (u->temp == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            *u->temp = *p;
            PUT(u, t->pub[x], u->temp);
        } else return 0;
    } else {
        return 0;
    }
    return 1;
}

/* The events' state (events.c's ev_check): an operation left open, a cached block's hash
 * changed, a cached block's hash forgotten. */
static PyObject *corrupt_events(TreeObject *self, const char *kind, PyObject *arg) {
    struct EvState *ev = self->ev;
    if (ev == NULL) {
        PyErr_Format(PyExc_ValueError, "this tree emits no events: it cannot show %s", kind);
        return NULL;
    }
    uint32_t leaf = find_leaf(self, 1, 0), b = leaf == NIL ? NIL : node_last(self, &self->nodes[leaf]);
    Undo u = {.n = 0, .temp = NULL};
    if (IS("events_open")) {
        PUT(&u, ev->open, ev->open + 1u);
    } else if (IS("events_hash") || IS("events_known")) {
        if (b == NIL) {
            PyErr_Format(PyExc_ValueError, "this tree has no cached block to show %s", kind);
            return NULL;
        }
        if (IS("events_hash")) PUT(&u, ev->dig[(size_t)b * ev->scheme.dlen], (uint8_t)~ev->dig[(size_t)b * ev->scheme.dlen]);
        else PUT(&u, ev->known[b >> 6], ev->known[b >> 6] & ~((uint64_t)1 << (b & 63)));
    } else {
        PyErr_Format(PyExc_ValueError, "unknown kind %R", arg);
        return NULL;
    }
    int failed = ev_check(self) < 0;
    undo(&u);
    if (!failed) Py_RETURN_NONE;
    return violation_message();
}

PyObject *Tree_corrupt_check(TreeObject *self, PyObject *arg) {
    const char *kind = kind_of(arg);
    if (kind == NULL) return NULL;
    static const char *const dropped[] = {
        "roots_count", "registry", "root_edge", "empty_default_root", "empty_named_root",
        "root_lookup", "nchildren", "no_blocks", "wrong_key", "unreachable", NULL,
    };
    int writer = 1, drop = 0, dump = 0;
    for (const char *const *k = dropped; *k != NULL; k++) drop |= strcmp(*k, kind) == 0;
    writer = strncmp(kind, "trie_", 5) != 0 && strncmp(kind, "collision_", 10) != 0 &&
             strncmp(kind, "array_", 6) != 0 && strncmp(kind, "pub_", 4) != 0 &&
             !IS("roots_shared") && !IS("published_roots_count") && !IS("roots_unsorted") &&
             strncmp(kind, "root_stale", 10) != 0 && strncmp(kind, "root_has", 8) != 0;
    if (!writer && !self->shadow_ok) {
        PyErr_Format(PyExc_ValueError, "the published shape is dropped: it cannot show %s", kind);
        return NULL;
    }
    if (strncmp(kind, "events_", 7) == 0) return corrupt_events(self, kind, arg);
    if (drop) shadow_drop(self);
    Undo u = {.n = 0, .temp = NULL};
    int done = corrupt_alloc(&self->alloc, kind, &u);
    if (done == 0 && writer) done = corrupt_records(self, kind, &u, &dump);
    if (done == 0 && writer) done = corrupt_epochs(self, kind, &u);
    if (done == 0 && !writer) done = corrupt_published(self, kind, &u);
    if (done <= 0) {
        undo(&u);
        if (done == 0) PyErr_Format(PyExc_ValueError, "unknown kind %R", arg);
        return NULL;
    }
    int failed;
    if (dump) {
        PyObject *d = tree_dump(self);
        failed = d == NULL;
        Py_XDECREF(d);
    } else {
        failed = tree_check(self) < 0;
    }
    undo(&u);
    if (!failed) Py_RETURN_NONE;
    return violation_message();
}

PyObject *mod_corrupt_kinds(PyObject *mod, PyObject *unused) {
    (void)mod;
    (void)unused;
    PyObject *names = PyList_New(0);
    for (const char *const *k = KINDS; names != NULL && *k != NULL; k++) {
        PyObject *name = PyUnicode_FromString(*k);
        if (name == NULL || PyList_Append(names, name) < 0) Py_CLEAR(names);
        Py_XDECREF(name);
    }
    return names;
}

#else
/* ISO C wants a declaration in every unit. */
typedef int corrupt_c_is_empty_without_test_hooks;
#endif
