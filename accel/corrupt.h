/* corrupt.c: the test hooks that break one invariant on purpose, so that each check of
 * check_invariants() is seen to fire.  Compiled into the test build only: with
 * KACHEDB_RADIX_TEST_HOOKS defined (CFLAGS=-DKACHEDB_RADIX_TEST_HOOKS, see accel/DESIGN.md
 * "Test hooks"); the wheel has none of it. */
#ifndef ACCEL_CORRUPT_H
#define ACCEL_CORRUPT_H

#include "radix.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* RadixTree._corrupt_check(kind). */
PyObject *Tree_corrupt_check(TreeObject *self, PyObject *arg);
/* BlockAllocator._corrupt_check(kind), on its bitmaps a. */
PyObject *alloc_corrupt_check(BitAlloc *a, PyObject *arg);
/* The module's _corrupt_kinds(). */
PyObject *mod_corrupt_kinds(PyObject *mod, PyObject *unused);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
