/* walk.c: the writer's lookups -- a namespace's root, a node's child, the cached path of
 * a token sequence -- through the published shape (snapshot.c) while it is kept, else
 * (after an allocation failure dropped it, until rebuilt) by scanning the node records.
 * Read-only: used by the writer's calls and by check_invariants() (inspect.c). */
#ifndef ACCEL_WALK_H
#define ACCEL_WALK_H

#include "radix.h"

#include "snapshot.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* ns's root node, or NIL when the namespace holds nothing; ns is None, NULL (both the
 * default namespace) or an exact str.  Cannot fail: the registry's keys are exact strs,
 * whose hashing and comparison run no code and raise nothing. */
uint32_t tree_root_of(TreeObject *t, PyObject *ns);

/* The child of writer node `parent` whose first block is blk, or NIL. */
uint32_t tree_find_child(TreeObject *t, uint32_t parent, const uint32_t *blk);

/* The walk over the node records alone, while the published shape is dropped. */
Py_ssize_t tree_walk_scan(TreeObject *t, uint32_t root, const uint32_t *tok, Py_ssize_t limit,
                          uint32_t *out, uint32_t *last_node, uint32_t *last_used);

/* Follow the cached path of tok's first `limit` blocks from `root` (NIL: none).  Writes
 * the matched block ids to out, returns how many; *last_node is the last node visited
 * (NIL if none) and *last_used how many of its blocks matched.  O(limit * B) through the
 * published shape (snapshot.c's pub_walk), O(N) a lookup while it is dropped. */
static inline Py_ssize_t tree_walk(TreeObject *t, uint32_t root, const uint32_t *tok,
                                   Py_ssize_t limit, uint32_t *out, uint32_t *last_node,
                                   uint32_t *last_used) {
    if (t->shadow_ok) return pub_walk(t, root, tok, limit, out, last_node, last_used);
    return tree_walk_scan(t, root, tok, limit, out, last_node, last_used);
}

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
