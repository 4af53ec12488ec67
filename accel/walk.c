/* The writer's lookups (walk.h): a namespace's root, a node's child, the cached path of a
 * token sequence.
 *
 * The writer finds a node's children through the published shape (snapshot.c): each
 * node's current PNode lists its children, sorted or in a hash trie, and names the
 * writer's node (`nid`).  When an allocation failure has dropped the published shape,
 * the rest of that call finds children by scanning the node records (below), and the
 * next writer call that walks rebuilds the shape first.  Nothing here writes. */
#include "walk.h"

#include "snapshot.h"

uint32_t tree_root_of(TreeObject *t, PyObject *ns) {
    if (ns == NULL || ns == Py_None) return t->default_root;
    PyObject *v = PyDict_GetItemWithError(t->ns_roots, ns);
    if (v == NULL) return NIL;
    return (uint32_t)PyLong_AsUnsignedLong(v);
}

/* The child of `parent` whose first block is blk, from the node records alone: O(N).
 * Only while the published shape is dropped. */
static uint32_t scan_child(const TreeObject *t, uint32_t parent, const uint32_t *blk) {
    for (uint32_t n = 0; n < t->nodes_len; n++) {
        const Node *x = &t->nodes[n];
        if (x->parent == parent && tokens_equal(node_tok(t, x), blk, t->B)) return n;
    }
    return NIL;
}

uint32_t tree_find_child(TreeObject *t, uint32_t parent, const uint32_t *blk) {
    return t->shadow_ok ? pub_child(t, parent, blk) : scan_child(t, parent, blk);
}

/* Without a published shape (after an allocation failure, until rebuilt) each lookup
 * scans the node records: O(N).  (With it, tree_walk is snapshot.c's pub_walk: per node a
 * child lookup, a binary search on first tokens or a trie lookup past 15 children, that
 * compares the edge's first block, then one memcmp over the rest of the edge.) */
Py_ssize_t tree_walk_scan(TreeObject *t, uint32_t root, const uint32_t *tok, Py_ssize_t limit,
                          uint32_t *out, uint32_t *last_node, uint32_t *last_used) {
    const uint32_t B = t->B;
    Py_ssize_t matched = 0;
    uint32_t node = root;
    *last_node = NIL;
    *last_used = 0;
    while (node != NIL && matched < limit) {
        const uint32_t *blk = tok + (size_t)matched * B;
        uint32_t child = scan_child(t, node, blk);
        if (child == NIL) break;
        const Node *c = &t->nodes[child];
        const uint32_t *edge = node_tok(t, c);
        Py_ssize_t usable = limit - matched, taken = 1;
        if ((Py_ssize_t)c->nblocks < usable) usable = c->nblocks;
        while (taken < usable && tokens_equal(edge + (size_t)taken * B, blk + (size_t)taken * B, B))
            taken++;
        memcpy(out + matched, node_ids(t, c), (size_t)taken * sizeof(uint32_t));
        matched += taken;
        *last_node = child;
        *last_used = (uint32_t)taken;
        node = taken == (Py_ssize_t)c->nblocks ? child : NIL;
    }
    return matched;
}
