/* inspect.c: read-only views of the whole tree -- dump() (reference.dump),
 * check_invariants() (reference.invariants) and memory_bytes(). */
#ifndef ACCEL_INSPECT_H
#define ACCEL_INSPECT_H

#include "radix.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* The canonical dump (R-DUMP-1); NULL with an exception set. */
PyObject *tree_dump(TreeObject *t);
/* Every structural invariant of the writer and the published shape: 0, or -1 with
 * InvariantViolation (or MemoryError) set. */
int tree_check(TreeObject *t);
/* Bytes held by the tree's own C allocations, by part (a dict). */
PyObject *tree_memory(TreeObject *t);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
