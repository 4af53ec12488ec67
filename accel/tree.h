/* _radix.c: the writer (the tree's mutations, each call's preparation and mutation
 * phases), the RadixTree type and the module's init.  What the other units call back:
 * re-filing a leaf in the eviction heap (policy.c's hooks), releasing a lease
 * (objects.c's Lease.release) and reading a block id (events.c's test hook). */
#ifndef ACCEL_TREE_H
#define ACCEL_TREE_H

#include "radix.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

extern PyTypeObject RadixTree_Type;

/* Bring node n's heap entry in line with its state: the heap holds exactly the evictable
 * leaves, keyed by their tails' eviction keys.  O(log h); never fails. */
void heap_update(TreeObject *t, uint32_t n);

/* `arg` as a block id of t's pool, in *out: 0, or -1 with ForeignBlockError. */
int tree_block_id(TreeObject *t, PyObject *arg, uint32_t *out);

/* RadixTree.release(lease). */
PyObject *Tree_release(TreeObject *self, PyObject *lease);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
