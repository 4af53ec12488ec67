/* The published shape, snapshots and readers (reference/snapshot.py; accel/DESIGN.md).
 *
 * The writer's fast structures (per-block-id token array, global children table) are
 * overwritten by later writes, so snapshots cannot point into them.  Beside them the
 * tree keeps a *published shape*: a persistent, reference-counted tree of PNodes
 * (edge = a range of an immutable-once-written PChunk of tokens and block ids, plus a
 * child array sorted by first-block tokens) under a PRoots (namespace -> root PNode).
 *
 * Every change of the writer's shape is mirrored here by a sh_* call.  A PNode, its
 * child array or PRoots is changed in place only when the writer owns the whole path
 * to it (every reference count on it is 1); otherwise the path is copied first
 * (pn_unique).  With no snapshot object alive every count is 1, so the writer skips the
 * path walk entirely.  A chunk is only ever appended to past its `used` mark, which no
 * range of any PNode covers, so appends never disturb a reader.
 *
 * snapshot() increfs the current PRoots: O(1).  All reference counting happens under
 * the GIL; a snapshot match that runs without the GIL only reads PNodes and chunks
 * (never their counts), and its snapshot keeps everything it can reach alive.
 *
 * An allocation failure while mirroring never fails the writer's call: the published
 * shape is dropped (shadow_ok = 0) and rebuilt from the writer's structures by the next
 * snapshot() or reader(), which may then raise MemoryError.
 */
#include "radix.h"

#include <stdlib.h>

/* Token counts from which a snapshot match releases the GIL. */
#define NOGIL_MIN_TOKENS 4096

/* ------------------------------------------------------------------ chunks and nodes */

static inline size_t chunk_bytes(uint32_t cap, uint32_t B) {
    return sizeof(PChunk) + ((size_t)cap * B + cap) * sizeof(uint32_t);
}

static PChunk *chunk_new(uint32_t cap, uint32_t B) {
    PChunk *c = PyMem_Malloc(chunk_bytes(cap, B));
    if (c == NULL) return NULL;
    c->rc = 1;
    c->used = 0;
    c->cap = cap;
    c->mark = 0;
    c->ids = c->tok + (size_t)cap * B;
    return c;
}

static void chunk_decref(PChunk *c) {
    if (c != NULL && --c->rc == 0) PyMem_Free(c);
}

static PNode *pn_new(void) {
    PNode *p = PyMem_Malloc(sizeof(PNode));
    if (p == NULL) return NULL;
    memset(p, 0, sizeof(PNode));
    p->rc = 1;
    return p;
}

/* Drop one reference; frees what becomes unreachable, iteratively (deep trees). */
static void pn_decref(PNode *p) {
    if (p == NULL || --p->rc > 0) return;
    PNode *stack = p;
    p->link = NULL;
    while (stack != NULL) {
        PNode *x = stack;
        stack = x->link;
        for (uint32_t i = 0; i < x->nkids; i++) {
            PNode *c = x->kids[i].node;
            if (--c->rc == 0) {
                c->link = stack;
                stack = c;
            }
        }
        chunk_decref(x->chunk);
        PyMem_Free(x->kids);
        PyMem_Free(x);
    }
}

static inline int block_cmp(const uint32_t *a, const uint32_t *b, uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    return 0;
}

/* The index of p's child whose first block is blk, or -(insertion point) - 1. */
static inline Py_ssize_t kid_find(const PNode *p, const uint32_t *blk, uint32_t B) {
    Py_ssize_t lo = 0, hi = p->nkids;
    const uint32_t key = blk[0];
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        const PChild *k = &p->kids[mid];
        int c = k->key != key ? (k->key < key ? -1 : 1)
                              : block_cmp(pn_tokens(k->node, B) + 1, blk + 1, B - 1);
        if (c == 0) return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -lo - 1;
}

static int kids_grow(PNode *p) {
    if (p->nkids < p->capkids) return 0;
    uint32_t cap = p->capkids ? p->capkids * 2u : 2u;
    PChild *k = PyMem_Realloc(p->kids, (size_t)cap * sizeof(PChild));
    if (k == NULL) return -1;
    p->kids = k;
    p->capkids = cap;
    return 0;
}

/* A new version of p owned by the writer: shares the chunk and the children. */
static PNode *pn_copy(const PNode *p) {
    PNode *c = pn_new();
    if (c == NULL) return NULL;
    if (p->nkids > 0) {
        c->kids = PyMem_Malloc((size_t)p->nkids * sizeof(PChild));
        if (c->kids == NULL) {
            PyMem_Free(c);
            return NULL;
        }
        memcpy(c->kids, p->kids, (size_t)p->nkids * sizeof(PChild));
        for (uint32_t i = 0; i < p->nkids; i++) p->kids[i].node->rc++;
    }
    c->nkids = c->capkids = p->nkids;
    c->count = p->count;
    c->off = p->off;
    c->chunk = p->chunk;
    if (c->chunk) c->chunk->rc++;
    return c;
}

/* ------------------------------------------------------------------ roots */

static PRoots *proots_new(uint32_t cap) {
    PRoots *r = PyMem_Malloc(sizeof(PRoots));
    if (r == NULL) return NULL;
    r->rc = 1;
    r->n = 0;
    r->cap = cap ? cap : 1;
    r->r = PyMem_Malloc((size_t)r->cap * sizeof(PRoot));
    if (r->r == NULL) {
        PyMem_Free(r);
        return NULL;
    }
    return r;
}

static void proots_decref(PRoots *r) {
    if (r == NULL || --r->rc > 0) return;
    for (uint32_t i = 0; i < r->n; i++) {
        Py_XDECREF(r->r[i].ns);
        pn_decref(r->r[i].root);
    }
    PyMem_Free(r->r);
    PyMem_Free(r);
}

/* Namespace order: the default (NULL) first, then by code points. Exact strs only, so
 * PyUnicode_Compare runs no Python code and cannot fail. */
static int ns_cmp(PyObject *a, PyObject *b) {
    if (a == NULL) return b == NULL ? 0 : -1;
    if (b == NULL) return 1;
    return PyUnicode_Compare(a, b);
}

static PRoots *proots_unique(TreeObject *t) {
    PRoots *R = t->proots;
    if (R->rc == 1) return R;
    PRoots *c = proots_new(R->n + 1u);
    if (c == NULL) return NULL;
    for (uint32_t i = 0; i < R->n; i++) {
        c->r[i].ns = R->r[i].ns;
        Py_XINCREF(c->r[i].ns);
        c->r[i].root = R->r[i].root;
        c->r[i].root->rc++;
    }
    c->n = R->n;
    R->rc--;
    t->proots = c;
    return c;
}

/* ------------------------------------------------------------------ lifecycle */

int shadow_init(TreeObject *t) {
    t->pctx = PyMem_Malloc(sizeof(PCtx));
    t->proots = proots_new(4);
    if (t->pctx == NULL || t->proots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    t->pctx->rc = 1;
    t->pctx->live = 0;
    t->shadow_ok = 1;
    return 0;
}

static void pctx_decref(PCtx *c) {
    if (c != NULL && --c->rc == 0) PyMem_Free(c);
}

void shadow_fini(TreeObject *t) {
    proots_decref(t->proots);
    t->proots = NULL;
    t->shadow_ok = 0;
    pctx_decref(t->pctx);
    t->pctx = NULL;
    PyMem_Free(t->anc);
    t->anc = NULL;
}

void shadow_drop(TreeObject *t) {
    proots_decref(t->proots);
    t->proots = NULL;
    t->shadow_ok = 0;
}

static uint32_t g_sort_B;

static int cmp_pchild(const void *a, const void *b) {
    const PChild *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return block_cmp(pn_tokens(x->node, g_sort_B), pn_tokens(y->node, g_sort_B), g_sort_B);
}

static int cmp_proot(const void *a, const void *b) {
    return ns_cmp(((const PRoot *)a)->ns, ((const PRoot *)b)->ns);
}

/* Build the published shape afresh from the writer's structures (after a drop). */
int shadow_rebuild(TreeObject *t) {
    const uint32_t N = t->nodes_len, B = t->B;
    PNode **made = PyMem_Calloc((size_t)N + 1u, sizeof(PNode *));
    PRoots *R = proots_new(t->roots_len + 1u);
    if (made == NULL || R == NULL) goto oom;
    for (uint32_t n = 0; n < N; n++) {
        const Node *x = &t->nodes[n];
        if (x->parent == NODE_FREE) continue;
        PNode *p = made[n] = pn_new();
        if (p == NULL) goto oom;
        if (x->nchildren > 0) {
            p->kids = PyMem_Malloc((size_t)x->nchildren * sizeof(PChild));
            if (p->kids == NULL) goto oom;
            p->capkids = x->nchildren;
        }
        if (x->parent == NIL) continue;
        p->chunk = chunk_new(x->nblocks, B);
        if (p->chunk == NULL) goto oom;
        uint32_t b = x->first;
        for (uint32_t i = 0; i < x->nblocks; i++, b = t->next[b]) {
            p->chunk->ids[i] = b;
            memcpy(p->chunk->tok + (size_t)i * B, t->tok + (size_t)b * B, (size_t)B * 4u);
        }
        p->chunk->used = p->count = x->nblocks;
    }
    /* ---- linking: nothing below fails */
    for (uint32_t n = 0; n < N; n++) {
        const Node *x = &t->nodes[n];
        if (x->parent >= NODE_FREE) continue;
        PNode *parent = made[x->parent];
        parent->kids[parent->nkids++] = (PChild){pn_tokens(made[n], B)[0], made[n]};
    }
    g_sort_B = B;
    for (uint32_t n = 0; n < N; n++) {
        if (made[n] == NULL) continue;
        if (made[n]->nkids > 1) qsort(made[n]->kids, made[n]->nkids, sizeof(PChild), cmp_pchild);
        t->nodes[n].p = made[n];
    }
    for (uint32_t i = 0; i < t->roots_len; i++) {
        R->r[i].ns = t->roots[i].ns;
        Py_XINCREF(R->r[i].ns);
        R->r[i].root = made[t->roots[i].node];
    }
    R->n = t->roots_len;
    qsort(R->r, R->n, sizeof(PRoot), cmp_proot);
    PyMem_Free(made);
    t->proots = R;
    t->shadow_ok = 1;
    return 0;
oom:
    if (made != NULL) {
        for (uint32_t n = 0; n < N; n++) {
            if (made[n] == NULL) continue;
            chunk_decref(made[n]->chunk);
            PyMem_Free(made[n]->kids);
            PyMem_Free(made[n]);
        }
        PyMem_Free(made);
    }
    if (R != NULL) {
        PyMem_Free(R->r);
        PyMem_Free(R);
    }
    PyErr_NoMemory();
    return -1;
}

/* ------------------------------------------------------------------ mirroring changes */

static PRoot *proot_entry(PRoots *R, const PNode *root) {
    for (uint32_t i = 0; i < R->n; i++)
        if (R->r[i].root == root) return &R->r[i];
    return NULL;
}

/* The writer-owned version of writer node n's PNode, path-copying from the roots down
 * where anything on the path is shared; *parent_out (optional) gets the parent's
 * writer-owned version (NULL for a root).  NULL: the published shape is not kept. */
static PNode *pn_unique(TreeObject *t, uint32_t n, PNode **parent_out) {
    if (!t->shadow_ok) return NULL;
    if (t->pctx->live == 0) {
        /* No snapshot alive: every count is 1 (shadow_check verifies this). */
        if (parent_out != NULL) {
            uint32_t pa = t->nodes[n].parent;
            *parent_out = pa == NIL ? NULL : t->nodes[pa].p;
        }
        return t->nodes[n].p;
    }
    const uint32_t B = t->B;
    size_t depth = 0;
    for (uint32_t m = n; m != NIL; m = t->nodes[m].parent) {
        if (depth == t->anc_cap) {
            size_t cap = t->anc_cap ? t->anc_cap * 2u : 64u;
            uint32_t *a = PyMem_Realloc(t->anc, cap * sizeof(uint32_t));
            if (a == NULL) goto oom;
            t->anc = a;
            t->anc_cap = cap;
        }
        t->anc[depth++] = m;
    }
    PRoots *R = proots_unique(t);
    if (R == NULL) goto oom;
    uint32_t root = t->anc[depth - 1];
    PNode *cur = t->nodes[root].p;
    if (cur->rc > 1) {
        PRoot *entry = proot_entry(R, cur);
        PNode *c = pn_copy(cur);
        if (c == NULL) goto oom;
        cur->rc--;
        entry->root = c;
        t->nodes[root].p = cur = c;
    }
    PNode *parent = NULL;
    for (size_t i = depth - 1; i-- > 0;) {
        uint32_t m = t->anc[i];
        PNode *old = t->nodes[m].p;
        if (old->rc > 1) {
            Py_ssize_t idx = kid_find(cur, pn_tokens(old, B), B);
            PNode *c = pn_copy(old);
            if (c == NULL) goto oom;
            old->rc--;
            cur->kids[idx].node = c;
            t->nodes[m].p = old = c;
        }
        parent = cur;
        cur = old;
    }
    if (parent_out != NULL) *parent_out = parent;
    return cur;
oom:
    shadow_drop(t);
    return NULL;
}

void sh_root_create(TreeObject *t, uint32_t r, PyObject *ns) {
    if (!t->shadow_ok) return;
    PRoots *R = proots_unique(t);
    if (R == NULL) goto oom;
    if (R->n == R->cap) {
        uint32_t cap = R->cap * 2u;
        PRoot *e = PyMem_Realloc(R->r, (size_t)cap * sizeof(PRoot));
        if (e == NULL) goto oom;
        R->r = e;
        R->cap = cap;
    }
    PNode *p = pn_new();
    if (p == NULL) goto oom;
    uint32_t at = 0;
    while (at < R->n && ns_cmp(R->r[at].ns, ns) < 0) at++;
    memmove(R->r + at + 1, R->r + at, (size_t)(R->n - at) * sizeof(PRoot));
    R->r[at].ns = ns;
    Py_XINCREF(ns);
    R->r[at].root = p;
    R->n++;
    t->nodes[r].p = p;
    return;
oom:
    shadow_drop(t);
}

void sh_root_delete(TreeObject *t, uint32_t r) {
    if (!t->shadow_ok) return;
    PRoots *R = proots_unique(t);
    if (R == NULL) {
        shadow_drop(t);
        return;
    }
    PRoot *e = proot_entry(R, t->nodes[r].p);
    PyObject *ns = e->ns;
    PNode *root = e->root;
    size_t at = (size_t)(e - R->r);
    memmove(R->r + at, R->r + at + 1, (size_t)(R->n - at - 1u) * sizeof(PRoot));
    R->n--;
    pn_decref(root);
    Py_XDECREF(ns);
}

void sh_attach(TreeObject *t, uint32_t parent, uint32_t c, const uint32_t *tok,
               const uint32_t *ids, uint32_t count) {
    const uint32_t B = t->B;
    PNode *P = pn_unique(t, parent, NULL);
    if (P == NULL) return;
    PNode *C = pn_new();
    if (C == NULL || kids_grow(P) < 0 || (C->chunk = chunk_new(count, B)) == NULL) {
        PyMem_Free(C);
        shadow_drop(t);
        return;
    }
    memcpy(C->chunk->tok, tok, (size_t)count * B * 4u);
    memcpy(C->chunk->ids, ids, (size_t)count * 4u);
    C->chunk->used = C->count = count;
    Py_ssize_t at = -kid_find(P, tok, B) - 1;
    memmove(P->kids + at + 1, P->kids + at, (size_t)(P->nkids - (uint32_t)at) * sizeof(PChild));
    P->kids[at] = (PChild){tok[0], C};
    P->nkids++;
    t->nodes[c].p = C;
}

void sh_extend(TreeObject *t, uint32_t n, const uint32_t *tok, const uint32_t *ids,
               uint32_t count) {
    const uint32_t B = t->B;
    PNode *P = pn_unique(t, n, NULL);
    if (P == NULL) return;
    PChunk *ch = P->chunk;
    if (P->off + P->count == ch->used && (uint64_t)ch->used + count <= ch->cap) {
        /* Past `used`: no version of any node reads there. */
        memcpy(ch->tok + (size_t)ch->used * B, tok, (size_t)count * B * 4u);
        memcpy(ch->ids + ch->used, ids, (size_t)count * 4u);
        ch->used += count;
    } else {
        uint64_t total = (uint64_t)P->count + count;
        uint64_t cap = total + total / 2u; /* a chat's next turns append in place */
        if (cap > MAX_POOL) cap = total;
        PChunk *nc = chunk_new((uint32_t)cap, B);
        if (nc == NULL) {
            shadow_drop(t);
            return;
        }
        memcpy(nc->tok, pn_tokens(P, B), (size_t)P->count * B * 4u);
        memcpy(nc->tok + (size_t)P->count * B, tok, (size_t)count * B * 4u);
        memcpy(nc->ids, pn_ids(P), (size_t)P->count * 4u);
        memcpy(nc->ids + P->count, ids, (size_t)count * 4u);
        nc->used = (uint32_t)total;
        chunk_decref(ch);
        P->chunk = nc;
        P->off = 0;
    }
    P->count += count;
}

PNode *sh_split(TreeObject *t, uint32_t x, uint32_t at) {
    const uint32_t B = t->B;
    PNode *PP = NULL;
    PNode *X = pn_unique(t, x, &PP);
    if (X == NULL) return NULL;
    PNode *U = pn_new();
    if (U == NULL || kids_grow(U) < 0) {
        PyMem_Free(U);
        shadow_drop(t);
        return NULL;
    }
    Py_ssize_t idx = kid_find(PP, pn_tokens(X, B), B);
    U->chunk = X->chunk;
    U->chunk->rc++;
    U->off = X->off;
    U->count = at;
    X->off += at;
    X->count -= at;
    U->kids[0] = (PChild){pn_tokens(X, B)[0], X};
    U->nkids = 1;
    PP->kids[idx].node = U; /* same first block: same key, same place */
    return U;
}

void sh_trim(TreeObject *t, uint32_t n) {
    PNode *N = pn_unique(t, n, NULL);
    if (N != NULL) N->count--;
}

void sh_remove_leaf(TreeObject *t, uint32_t n) {
    if (!t->shadow_ok) return;
    PNode *P = pn_unique(t, t->nodes[n].parent, NULL);
    if (P == NULL) return;
    PNode *old = t->nodes[n].p;
    Py_ssize_t idx = kid_find(P, pn_tokens(old, t->B), t->B);
    memmove(P->kids + idx, P->kids + idx + 1, (size_t)(P->nkids - (uint32_t)idx - 1u) * sizeof(PChild));
    P->nkids--;
    pn_decref(old);
}

/* ------------------------------------------------------------------ checks and memory */

#define CHECK(cond, ...)                                      \
    do {                                                      \
        if (!(cond)) {                                        \
            PyErr_Format(G.InvariantViolation, __VA_ARGS__);  \
            return -1;                                        \
        }                                                     \
    } while (0)

/* The published shape equals the writer's shape (R-SNAP-1), node by node; with no
 * snapshot alive every reference count is 1 (what lets the writer skip path copying). */
int shadow_check(TreeObject *t) {
    if (!t->shadow_ok) return 0; /* dropped after an allocation failure: rebuilt on demand */
    const uint32_t B = t->B;
    const int sole = t->pctx->live == 0;
    PRoots *R = t->proots;
    CHECK(!sole || R->rc == 1, "published roots shared with no snapshot alive");
    CHECK(R->n == t->roots_len, "published shape has %u namespaces, the tree %u", R->n,
          t->roots_len);
    for (uint32_t i = 0; i < R->n; i++) {
        if (i > 0) CHECK(ns_cmp(R->r[i - 1].ns, R->r[i].ns) < 0, "published namespaces unsorted");
        uint32_t r = tree_root_of(t, R->r[i].ns);
        if (r == NIL && PyErr_Occurred()) return -1;
        CHECK(r != NIL && t->nodes[r].p == R->r[i].root, "published root of %R is stale",
              R->r[i].ns ? R->r[i].ns : Py_None);
        CHECK(R->r[i].root->count == 0 && R->r[i].root->chunk == NULL, "published root has an edge");
    }
    for (uint32_t n = 0; n < t->nodes_len; n++) {
        const Node *x = &t->nodes[n];
        if (x->parent == NODE_FREE) continue;
        const PNode *p = x->p;
        CHECK(p != NULL && p->rc >= 1, "node %u has no published version", n);
        CHECK(!sole || p->rc == 1, "node %u's published version is shared with no snapshot alive", n);
        CHECK(p->count == x->nblocks, "node %u: published edge of %u blocks, writer %u", n, p->count,
              x->nblocks);
        CHECK(p->nkids == x->nchildren, "node %u: %u published children, writer %u", n, p->nkids,
              x->nchildren);
        for (uint32_t i = 0; i < p->nkids; i++) {
            const PNode *k = p->kids[i].node;
            CHECK(k->count >= 1 && p->kids[i].key == pn_tokens(k, B)[0], "node %u: bad child key", n);
            if (i > 0)
                CHECK(block_cmp(pn_tokens(p->kids[i - 1].node, B), pn_tokens(k, B), B) < 0,
                      "node %u: published children unsorted", n);
            uint32_t c = tree_find_child(t, n, pn_tokens(k, B));
            CHECK(c != NIL && t->nodes[c].p == k, "node %u: published child is not current", n);
        }
        if (x->parent == NIL) continue;
        CHECK(p->chunk != NULL && (uint64_t)p->off + p->count <= p->chunk->used &&
                  p->chunk->used <= p->chunk->cap,
              "node %u: published edge outside its chunk", n);
        uint32_t b = x->first;
        for (uint32_t i = 0; i < x->nblocks; i++, b = t->next[b]) {
            CHECK(pn_ids(p)[i] == b, "node %u: published block %u is %u, writer %u", n, i,
                  pn_ids(p)[i], b);
            CHECK(block_cmp(pn_tokens(p, B) + (size_t)i * B, t->tok + (size_t)b * B, B) == 0,
                  "node %u: published tokens of block %u differ", n, b);
        }
    }
    return 0;
}

static uint32_t g_mark;

/* Bytes of the shape the writer currently publishes (shared parts counted once). */
size_t shadow_bytes(TreeObject *t, size_t *token_bytes) {
    *token_bytes = 0;
    if (!t->shadow_ok) return 0;
    const uint32_t B = t->B;
    size_t total = sizeof(PRoots) + (size_t)t->proots->cap * sizeof(PRoot) + sizeof(PCtx);
    uint32_t mark = ++g_mark;
    for (uint32_t n = 0; n < t->nodes_len; n++) {
        const Node *x = &t->nodes[n];
        if (x->parent == NODE_FREE) continue;
        const PNode *p = x->p;
        total += sizeof(PNode) + (size_t)p->capkids * sizeof(PChild);
        if (p->chunk != NULL && p->chunk->mark != mark) {
            p->chunk->mark = mark;
            total += chunk_bytes(p->chunk->cap, B);
            *token_bytes += (size_t)p->chunk->cap * B * sizeof(uint32_t);
        }
    }
    return total;
}

/* ------------------------------------------------------------------ Snapshot and Reader */

typedef struct {
    PyObject_HEAD
    PRoots *roots;
    PCtx *ctx;
    uint32_t B;
    uint64_t version;
    uint64_t clock;
} SnapshotObject;

typedef struct {
    SnapshotObject snap;
    TreeObject *tree; /* strong, as in the reference */
    uint64_t epoch;
    int left;
} ReaderObject;

static int readers_reserve(TreeObject *t) {
    if (t->nreaders < t->readers_cap) return 0;
    Py_ssize_t cap = t->readers_cap ? t->readers_cap * 2 : 8;
    uint64_t *r = PyMem_Realloc(t->readers, (size_t)cap * sizeof(uint64_t));
    if (r == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    t->readers = r;
    uint64_t *v = PyMem_Realloc(t->reader_versions, (size_t)cap * sizeof(uint64_t));
    if (v == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    t->reader_versions = v;
    t->readers_cap = cap;
    return 0;
}

PyObject *tree_snapshot(TreeObject *t, int reader) {
    if (!t->shadow_ok && shadow_rebuild(t) < 0) return NULL;
    if (reader && readers_reserve(t) < 0) return NULL;
    PyTypeObject *type = reader ? &Reader_Type : &Snapshot_Type;
    SnapshotObject *s = PyObject_New(SnapshotObject, type);
    if (s == NULL) return NULL;
    /* ---- nothing below fails or runs Python code */
    if (reader) {
        /* Draw the epoch and register first, then load the published version. */
        ReaderObject *r = (ReaderObject *)s;
        r->epoch = ++t->epochs;
        t->reader_versions[t->nreaders] = t->version;
        t->readers[t->nreaders++] = r->epoch;
        r->tree = (TreeObject *)Py_NewRef((PyObject *)t);
        r->left = 0;
    }
    s->roots = t->proots;
    s->roots->rc++;
    s->ctx = t->pctx;
    s->ctx->rc++;
    s->ctx->live++;
    s->B = t->B;
    s->version = t->version;
    s->clock = t->clock;
    return (PyObject *)s;
}

void reader_leave(TreeObject *t, uint64_t epoch) {
    Py_ssize_t lo = 0, hi = t->nreaders;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (t->readers[mid] < epoch)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < t->nreaders && t->readers[lo] == epoch) {
        memmove(t->readers + lo, t->readers + lo + 1,
                (size_t)(t->nreaders - lo - 1) * sizeof(uint64_t));
        memmove(t->reader_versions + lo, t->reader_versions + lo + 1,
                (size_t)(t->nreaders - lo - 1) * sizeof(uint64_t));
        t->nreaders--;
    }
}

static void Snapshot_dealloc(SnapshotObject *self) {
    if (self->ctx != NULL) {
        self->ctx->live--;
        pctx_decref(self->ctx);
    }
    proots_decref(self->roots);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static void Reader_dealloc(ReaderObject *self) {
    /* An unreferenced reader leaves by itself (R-EPOCH-5), like the reference's
     * finalizer. This runs in whichever thread drops the last reference, possibly inside
     * a writer call's preparation phase (a collection triggered by an allocation there
     * can free a cycle holding the reader), and at interpreter shutdown. reader_leave is
     * plain C on the tree this reader keeps alive: no Python code, no allocation, no
     * lock, nothing that can fail, and every writer step that reads the registry reads
     * it after its last allocation (DESIGN.md, "Readers and quarantine"). */
    if (self->tree != NULL && !self->left) {
        self->left = 1;
        reader_leave(self->tree, self->epoch);
    }
    Py_XDECREF(self->tree);
    Snapshot_dealloc(&self->snap);
}

/* Follow tok's first `limit` blocks down one published version; ids go to out. Reads
 * only immutable data, so it runs without the GIL. */
static Py_ssize_t pn_walk(const PNode *node, const uint32_t *tok, Py_ssize_t limit, uint32_t B,
                          uint32_t *out) {
    Py_ssize_t matched = 0;
    while (node != NULL && matched < limit) {
        const uint32_t *blk = tok + (size_t)matched * B;
        Py_ssize_t idx = kid_find(node, blk, B);
        if (idx < 0) break;
        const PNode *c = node->kids[idx].node;
        Py_ssize_t usable = limit - matched;
        if ((Py_ssize_t)c->count < usable) usable = c->count;
        const uint32_t *edge = pn_tokens(c, B);
        Py_ssize_t taken = usable;
        if (usable > 1 && memcmp(edge + B, blk + B, (size_t)(usable - 1) * B * 4u) != 0) {
            taken = 1;
            while (tokens_equal(edge + (size_t)taken * B, blk + (size_t)taken * B, B)) taken++;
        }
        memcpy(out + matched, pn_ids(c), (size_t)taken * sizeof(uint32_t));
        matched += taken;
        node = taken == (Py_ssize_t)c->count ? c : NULL;
    }
    return matched;
}

static PNode *snap_root(SnapshotObject *self, PyObject *ns) {
    PRoots *R = self->roots;
    for (uint32_t i = 0; i < R->n; i++) {
        PyObject *name = R->r[i].ns;
        if (ns == Py_None ? name == NULL : (name != NULL && PyUnicode_Compare(name, ns) == 0))
            return R->r[i].root;
    }
    return NULL;
}

static PyObject *Snapshot_match(SnapshotObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
    PyObject *tokens_obj = NULL, *ns = Py_None;
    if (nargs > 2) {
        PyErr_Format(PyExc_TypeError,
                     "match() takes from 1 to 2 positional arguments but %zd were given", nargs);
        return NULL;
    }
    if (nargs >= 1) tokens_obj = args[0];
    if (nargs >= 2) ns = args[1];
    if (kwnames != NULL) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
            PyObject *key = PyTuple_GET_ITEM(kwnames, i);
            if (nargs < 2 && PyUnicode_Compare(key, G.s_namespace) == 0) {
                ns = args[nargs + i];
            } else if (nargs < 1 && PyUnicode_Compare(key, G.s_tokens) == 0) {
                tokens_obj = args[nargs + i];
            } else {
                PyErr_Format(PyExc_TypeError,
                             "match() got an unexpected or repeated keyword argument '%U'", key);
                return NULL;
            }
        }
    }
    if (tokens_obj == NULL) {
        PyErr_SetString(PyExc_TypeError, "match() missing required argument 'tokens'");
        return NULL;
    }
    Tokens tk;
    if (tokens_get_plain(tokens_obj, &tk) < 0) return NULL;
    if (ns != Py_None && !PyUnicode_Check(ns)) {
        tokens_release(NULL, &tk);
        PyErr_Format(G.InvalidArgumentError, "namespace must be None or a str, got %s %R",
                     Py_TYPE(ns)->tp_name, ns);
        return NULL;
    }
    const uint32_t B = self->B;
    Py_ssize_t limit = tk.n / B;
    uint32_t *out = PyMem_Malloc((size_t)(limit ? limit : 1) * sizeof(uint32_t));
    if (out == NULL) {
        tokens_release(NULL, &tk);
        return PyErr_NoMemory();
    }
    const PNode *root = snap_root(self, ns);
    Py_ssize_t matched;
    if (tk.n >= NOGIL_MIN_TOKENS) {
        /* The snapshot (held by this call) keeps every PNode it reaches alive and
         * unchanged; the tokens are owned or a held buffer view. */
        Py_INCREF(self);
        Py_BEGIN_ALLOW_THREADS
        matched = pn_walk(root, tk.data, limit, B, out);
        Py_END_ALLOW_THREADS
        Py_DECREF(self);
    } else {
        matched = pn_walk(root, tk.data, limit, B, out);
    }
    tokens_release(NULL, &tk);
    MatchResultObject *res = match_result_new(matched);
    if (res != NULL) {
        memcpy(res->ids, out, (size_t)matched * sizeof(uint32_t));
        res->length = matched * (Py_ssize_t)B;
    }
    PyMem_Free(out);
    return (PyObject *)res;
}

static PyObject *Snapshot_namespaces(SnapshotObject *self, PyObject *unused) {
    (void)unused;
    PyObject *names = PyList_New(self->roots->n);
    if (names == NULL) return NULL;
    for (uint32_t i = 0; i < self->roots->n; i++) {
        PyObject *ns = self->roots->r[i].ns;
        PyList_SET_ITEM(names, i, Py_NewRef(ns ? ns : Py_None));
    }
    return names;
}

/* One canonical edge: n's blocks and those of its one-child chain; *end its last node. */
static PyObject *pedge(const PNode *n, uint32_t B, const PNode **end) {
    size_t total = 0;
    const PNode *m = n;
    for (;;) {
        total += m->count;
        if (m->nkids != 1) break;
        m = m->kids[0].node;
    }
    *end = m;
    PyObject *tokens = PyList_New((Py_ssize_t)(total * B));
    PyObject *blocks = PyList_New((Py_ssize_t)total);
    PyObject *children = PyList_New(0);
    PyObject *d = NULL;
    if (!tokens || !blocks || !children) goto done;
    Py_ssize_t i = 0;
    for (m = n;; m = m->kids[0].node) {
        const uint32_t *tk = pn_tokens(m, B), *ids = pn_ids(m);
        for (uint32_t j = 0; j < m->count; j++, i++) {
            for (uint32_t q = 0; q < B; q++) {
                PyObject *v = PyLong_FromUnsignedLong(tk[(size_t)j * B + q]);
                if (v == NULL) goto done;
                PyList_SET_ITEM(tokens, i * (Py_ssize_t)B + q, v);
            }
            PyObject *bv = PyLong_FromUnsignedLong(ids[j]);
            if (bv == NULL) goto done;
            PyList_SET_ITEM(blocks, i, bv);
        }
        if (m == *end) break;
    }
    d = PyDict_New();
    if (d == NULL) goto done;
    if (PyDict_SetItem(d, G.s_tokens, tokens) < 0 || PyDict_SetItem(d, G.s_blocks, blocks) < 0 ||
        PyDict_SetItem(d, G.s_children, children) < 0)
        Py_CLEAR(d);
done:
    Py_XDECREF(tokens);
    Py_XDECREF(blocks);
    Py_XDECREF(children);
    return d;
}

typedef struct {
    const PNode *node;
    PyObject *target; /* borrowed: owned by the result being built */
} PDumpItem;

static PyObject *Snapshot_dump(SnapshotObject *self, PyObject *unused) {
    (void)unused;
    const uint32_t B = self->B;
    PyObject *spaces = PyList_New(0), *result = NULL;
    PDumpItem *stack = NULL;
    size_t top = 0, cap = 0;
    if (spaces == NULL) return NULL;
    for (uint32_t r = 0; r < self->roots->n; r++) {
        const PRoot *e = &self->roots->r[r];
        PyObject *children = PyList_New(0);
        PyObject *space = children ? Py_BuildValue("{s:O,s:O}", "namespace",
                                                   e->ns ? e->ns : Py_None, "children", children)
                                   : NULL;
        Py_XDECREF(children); /* owned by space */
        if (space == NULL || PyList_Append(spaces, space) < 0) {
            Py_XDECREF(space);
            goto done;
        }
        Py_DECREF(space);
        const PNode *from = e->root;
        PyObject *into = children;
        for (;;) {
            size_t need = top + from->nkids;
            if (need > cap) {
                size_t ncap = cap ? cap : 64;
                while (ncap < need) ncap *= 2;
                PDumpItem *s = PyMem_Realloc(stack, ncap * sizeof(PDumpItem));
                if (s == NULL) {
                    PyErr_NoMemory();
                    goto done;
                }
                stack = s;
                cap = ncap;
            }
            for (uint32_t i = from->nkids; i-- > 0;)
                stack[top++] = (PDumpItem){from->kids[i].node, into};
            if (top == 0) break;
            PDumpItem item = stack[--top];
            const PNode *end;
            PyObject *d = pedge(item.node, B, &end);
            if (d == NULL || PyList_Append(item.target, d) < 0) {
                Py_XDECREF(d);
                goto done;
            }
            into = PyDict_GetItem(d, G.s_children);
            Py_DECREF(d);
            from = end;
        }
    }
    result = Py_BuildValue("{s:O,s:I,s:K,s:K,s:O}", "format", G.dump_format, "block_size", B,
                           "version", (unsigned long long)self->version, "clock",
                           (unsigned long long)self->clock, "namespaces", spaces);
done:
    PyMem_Free(stack);
    Py_DECREF(spaces);
    return result;
}

static PyObject *Snapshot_get_version(SnapshotObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(self->version);
}
static PyObject *Snapshot_get_clock(SnapshotObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(self->clock);
}
static PyObject *Snapshot_get_block_size(SnapshotObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLong(self->B);
}

static PyObject *Snapshot_repr(SnapshotObject *self) {
    return PyUnicode_FromFormat("<accel.Snapshot version=%llu clock=%llu>",
                                (unsigned long long)self->version, (unsigned long long)self->clock);
}

#define SNAPSHOT_THREADS "Any thread, any time; never waits for the writer."

static PyMethodDef Snapshot_methods[] = {
    {"match", (PyCFunction)(void (*)(void))Snapshot_match, METH_FASTCALL | METH_KEYWORDS,
     "match($self, tokens, namespace=None)\n--\n\n"
     "The longest whole-block prefix cached at this version (R-SNAP-2, R-MATCH-1).\n\n"
     "Stamps nothing and pins nothing; ``lease`` is always None. Cost: O(n). "
     SNAPSHOT_THREADS "\nFrom 4,096 tokens on, the walk runs without the GIL (other threads,\n"
     "readers and the writer, run meanwhile); do not change a token buffer during the call.\n\n"
     "Raises:\n    InvalidTokensError: ``tokens`` is malformed (R-TOK-*).\n"
     "    InvalidArgumentError: ``namespace`` is not None or a str."},
    {"namespaces", (PyCFunction)Snapshot_namespaces, METH_NOARGS,
     "namespaces($self, /)\n--\n\n"
     "Namespaces holding blocks at this version, None first. O(r). " SNAPSHOT_THREADS},
    {"dump", (PyCFunction)Snapshot_dump, METH_NOARGS,
     "dump($self, /)\n--\n\n"
     "The canonical dump of this version's shape (R-SNAP-2, R-DUMP-2): format, block_size,\n"
     "version, clock and the namespaces' edges (tokens, blocks, children). Equal to the\n"
     "reference snapshot's dump. O(cached tokens). " SNAPSHOT_THREADS},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Snapshot_getset[] = {
    {"version", (getter)Snapshot_get_version, NULL, "The version number this snapshot shows. O(1).",
     NULL},
    {"clock", (getter)Snapshot_get_clock, NULL, "The tree's logical clock at this version. O(1).",
     NULL},
    {"block_size", (getter)Snapshot_get_block_size, NULL, "Tokens per block. O(1).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject Snapshot_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "accel._radix.Snapshot",
    .tp_basicsize = sizeof(SnapshotObject),
    .tp_dealloc = (destructor)Snapshot_dealloc,
    .tp_repr = (reprfunc)Snapshot_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "An immutable view of one published version of a tree (R-SNAP-2); from\n"
              "``RadixTree.snapshot()`` only. Cost to take: O(1). Every method may be called\n"
              "from any thread at any time and never waits for the writer. It keeps the\n"
              "version it shows alive (reference counts), also after the tree is gone.",
    .tp_methods = Snapshot_methods,
    .tp_getset = Snapshot_getset,
};

static PyObject *Reader_leave(ReaderObject *self, PyObject *unused) {
    (void)unused;
    if (self->left) {
        PyErr_Format(G.ReaderLeftError, "reader %llu already left", (unsigned long long)self->epoch);
        return NULL;
    }
    self->left = 1;
    reader_leave(self->tree, self->epoch);
    Py_RETURN_NONE;
}

static PyObject *Reader_enter(ReaderObject *self, PyObject *unused) {
    (void)unused;
    return Py_NewRef((PyObject *)self);
}

static PyObject *Reader_exit(ReaderObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)args;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "__exit__ takes 3 arguments");
        return NULL;
    }
    if (!self->left) return Reader_leave(self, NULL);
    Py_RETURN_NONE;
}

static PyObject *Reader_get_epoch(ReaderObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(self->epoch);
}
static PyObject *Reader_get_left(ReaderObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->left);
}

static PyObject *Reader_repr(ReaderObject *self) {
    return PyUnicode_FromFormat("<Reader epoch=%llu version=%llu %s>",
                                (unsigned long long)self->epoch,
                                (unsigned long long)self->snap.version,
                                self->left ? "left" : "inside");
}

static PyMethodDef Reader_methods[] = {
    {"leave", (PyCFunction)Reader_leave, METH_NOARGS,
     "leave($self, /)\n--\n\n"
     "Leave the epoch; quarantined blocks may return to the allocator. O(log readers). "
     SNAPSHOT_THREADS "\n\nRaises:\n    ReaderLeftError: the reader already left (R-EPOCH-4)."},
    {"__enter__", (PyCFunction)Reader_enter, METH_NOARGS, "__enter__($self, /)\n--\n\nThe reader."},
    {"__exit__", (PyCFunction)(void (*)(void))Reader_exit, METH_FASTCALL,
     "__exit__($self, exc_type, exc, traceback, /)\n--\n\nLeave unless already left."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Reader_getset[] = {
    {"epoch", (getter)Reader_get_epoch, NULL, "The epoch number this reader entered. O(1).", NULL},
    {"left", (getter)Reader_get_left, NULL, "Whether the reader has left. O(1).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject Reader_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "accel._radix.Reader",
    .tp_basicsize = sizeof(ReaderObject),
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_repr = (reprfunc)Reader_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_base = &Snapshot_Type,
    .tp_doc = "A snapshot inside a reader epoch (R-EPOCH-1); from ``RadixTree.reader()`` only.\n\n"
              "Blocks it can see are not handed out again until it leaves: use it as a\n"
              "context manager or call ``leave()`` exactly once. A reader that is no longer\n"
              "referenced leaves by itself, as in the reference (R-EPOCH-5). Every method\n"
              "may be called from any thread at any time and never waits for the writer.",
    .tp_methods = Reader_methods,
    .tp_getset = Reader_getset,
};
