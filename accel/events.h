/* events.c: KV events (R-EVENT-*), the C twin's side of kachedb_radix.reference.events.
 *
 * A tree with events on keeps, per block id, the block's hash (hashing.c) and the form
 * events carry, and a buffer of the events its operations emitted, already encoded as
 * vLLM's wire bytes (msgpack, R-EVENT-6) with one record per batch.  A call reserves
 * room in its preparation phase and hashes and encodes in its mutation phase, which
 * cannot fail; with events off (t->ev NULL) a call pays one pointer test. */
#ifndef ACCEL_EVENTS_H
#define ACCEL_EVENTS_H

#include "radix.h"

#include "hashing.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* One batch: the events of one operation (R-EVENT-5), encoded at wire[start .. end). */
typedef struct {
    size_t start, end;
    uint64_t clock;
    uint32_t nevents;
} EvBatch;

struct EvState {
    PyObject *hasher;  /* the BlockHasher the tree was built with */
    HsScheme scheme;
    uint32_t B, num_blocks;
    uint8_t *dig;      /* per block: its digest (scheme.dlen bytes) */
    uint64_t *ext;     /* per block: its external hash, an int wire's bits (else NULL) */
    uint64_t *known;   /* bit per block: its hash is known -- exactly the cached blocks */
    uint8_t *wire;     /* the events not yet taken, encoded */
    size_t len, cap;
    size_t mark;       /* len when the current operation began */
    uint32_t open;     /* events the current operation has encoded */
    EvBatch *batches;  /* the batches not yet taken, oldest first */
    size_t nbatches, bcap;
    uint8_t *scratch;  /* a block's serialisation (hashing.c) */
    size_t scratch_cap;
    HsSalt salt;       /* the current insert's namespace (set by ev_prepare_insert) */
};

static inline int ev_known(const struct EvState *ev, uint32_t b) {
    return (int)((ev->known[b >> 6] >> (b & 63)) & 1u);
}

/* Set up t->ev for `events` (None, False, True or a BlockHasher), as the reference's
 * constructor reads it.  -1 with the exception set (InvalidArgumentError for a bad value). */
int ev_init(TreeObject *t, PyObject *events);
void ev_fini(TreeObject *t);

/* Preparation phase of an insert that may evict nevict blocks and caches `needed` new
 * ones in namespace ns (NULL: the default): room for its events and batch, and the
 * namespace's name and seeds.  -1 with the exception set (MemoryError, or
 * UnicodeEncodeError for a name UTF-8 cannot encode); changes nothing observable. */
int ev_prepare_insert(TreeObject *t, PyObject *ns, Py_ssize_t needed, Py_ssize_t nevict);
/* Preparation phase of an eviction of n blocks. */
int ev_prepare_evict(TreeObject *t, Py_ssize_t n);
/* Preparation phase of reset_prefix_cache(): room for one AllBlocksCleared. */
int ev_prepare_clear(TreeObject *t);

/* Mutation phase (room reserved): blocks ids[0..n) holding tok[0 .. n*B) became cached
 * below the cached block `parent` (NIL: at the root of the insert's namespace): hash them
 * and encode one BlockStored (R-EVENT-2, R-EVENT-3). */
void ev_log_store(TreeObject *t, uint32_t parent, const uint32_t *ids, const uint32_t *tok,
                  Py_ssize_t n);
/* Mutation phase (room reserved): blocks ids[0..n) were evicted, in that order: one
 * BlockRemoved (R-EVENT-4). */
void ev_log_remove(TreeObject *t, const uint32_t *ids, Py_ssize_t n);
/* Mutation phase (room reserved): every cached block stopped being cached at once: one
 * AllBlocksCleared, every block's hash forgotten (R-EVENT-7). */
void ev_log_clear(TreeObject *t);
/* The end of an operation: what it encoded becomes one batch at the clock (R-EVENT-5). */
void ev_flush(TreeObject *t);

/* check_invariants()' part (R-EVENT-1, R-EVENT-2, R-EVENT-5): 0, or -1 with the exception
 * set. */
int ev_check(TreeObject *t);
/* dst (NULL) becomes an independent copy of src (a clone's); -1 with MemoryError. */
int ev_copy(struct EvState **dst, const struct EvState *src);
/* Bytes held (memory_bytes()). */
size_t ev_bytes(const struct EvState *ev);

/* RadixTree.take_events(), take_event_payloads(), .events and ._event_hash(block). */
PyObject *Tree_take_events(TreeObject *self, PyObject *unused);
PyObject *Tree_take_event_payloads(TreeObject *self, PyObject *unused);
PyObject *Tree_get_events(TreeObject *self, void *unused);
PyObject *Tree_event_hash(TreeObject *self, PyObject *block);
/* The module's _event_block_hash(hasher, parent, tokens, salt) test hook. */
PyObject *mod_event_block_hash(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);
/* The (internal, external) hash pairs of every whole block of `tokens` (B tokens each)
 * after the block whose internal hash is `parent` (Py_None: from a root, the first block
 * salted by `salt`), under `hasher`'s scheme: a new list.  NULL with an exception set:
 * malformed tokens (R-TOK-*), a namespace not a str, a parent not of the scheme's form,
 * no memory.  O(len(tokens)). */
PyObject *ev_hash_chain(PyObject *hasher, PyObject *parent, PyObject *tokens, uint32_t B,
                        PyObject *salt_obj);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
