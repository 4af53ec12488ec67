/* objects.c: the result objects (MatchResult, InsertResult), the Blocks views of their
 * ids and the Lease type; their layouts are in radix.h (the tree fills them in). */
#ifndef ACCEL_OBJECTS_H
#define ACCEL_OBJECTS_H

#include "radix.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

extern PyTypeObject Lease_Type;
extern PyTypeObject MatchResult_Type;
extern PyTypeObject InsertResult_Type;
extern PyTypeObject Blocks_Type;
extern PyTypeObject BlocksIter_Type;

/* A MatchResult of up to this many ids has room for the ids of its size class (a power
 * of two, at least 4): one made for a walk's limit can shrink to what the walk found
 * (Py_SET_SIZE). */
#define RESULT_SMALL_IDS 64

PyObject *blocks_view(PyObject *owner, const uint32_t *ids, Py_ssize_t n);
MatchResultObject *match_result_new(Py_ssize_t nblocks);
InsertResultObject *insert_result_new(Py_ssize_t nblocks, Py_ssize_t nalloc, Py_ssize_t nevict);
LeaseObject *lease_alloc(void);
PyObject *u32_list(const uint32_t *ids, Py_ssize_t n);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
