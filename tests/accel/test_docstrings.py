"""The C twin says what the reference says: its docstrings are the reference's, word for
word, except where the C code behaves or costs differently -- and every such difference
is listed below, with its reason.

Every public class of both packages is covered: every name of
``kachedb_radix.accel.__all__`` or ``kachedb_radix.reference.__all__`` is compared, or listed
with its reason -- a name only one package exports in :data:`ONLY_ONE`, one not compared in
:data:`NOT_COMPARED`. For each name compared (the trees, the router index, the tiered tree,
the KV cache, the block pool, the results and handles) the test compares the class
docstring and the docstring of every public member: methods, properties, attributes and
the context manager's ``__enter__``/``__exit__``. The reference is the spec
(reference/*.py): the C twin copies its docstrings by hand (accel/_radix.c, alloc.c,
objects.c, snapshot.c), so they drift, and this test is what stops that. Where a twin's
docstring is its own -- the GPU block pool's, which states its device costs and its
asynchrony, and the GPU KV cache's class, which defers to the reference's for the rest --
the member is listed in :data:`OWN`, with the reason.

How a pair is compared: both docstrings are split into paragraphs at blank lines and the
whitespace inside a paragraph is collapsed (line wrapping is presentation); then each
:class:`Diff` listed for the member replaces its ``reference`` text (which must occur
exactly once) by its ``accel`` text, in order, and the result must equal the C twin's
docstring. A reference member without a docstring of its own (a dataclass field, a
slot) is documented by its class's ``Attributes:`` entry, capitalised; where the
reference documents it nowhere, its text is "" and the C docstring is a listed
difference. A listed difference that no longer applies fails the test too.
"""

from __future__ import annotations

import inspect
import os
import re
from dataclasses import dataclass
from typing import Any

import pytest

from kachedb_radix import reference

if os.environ.get("KACHEDB_RADIX_PURE") == "1":
    pytest.skip("KACHEDB_RADIX_PURE=1: the C twin is not under test", allow_module_level=True)

from kachedb_radix import accel

#: In the quick suite (``python -m pytest -m quick``), run on the installed wheel in CI.
pytestmark = pytest.mark.quick


@dataclass(frozen=True)
class Diff:
    """One allowed difference: the C twin says ``accel`` where the reference says
    ``reference`` ("" where the reference says nothing), because ``why``."""

    reference: str
    accel: str
    why: str


#: Names both packages export that this test does not compare, and why.
NOT_COMPARED = {
    "DUMP_FORMAT": "a constant, not documented: compared by value below",
}

SHARED = (
    "the C twin raises, returns and calls the reference's own (accel/_radix.c imports it at "
    "module init: one definition serves both twins), so there is no second one to compare"
)

#: Names only one package exports, and why.
ONLY_ONE = {
    **{
        name: f"an error class: {SHARED}"
        for name in (
            "AllocatorError", "DoubleFreeError", "ForeignBlockError", "ForeignLeaseError",
            "InvalidArgumentError", "InvalidTokensError", "InvariantViolation", "LeaseError",
            "LeaseReleasedError", "OutOfBlocksError", "RadixError", "ReaderLeftError",
            "TokenLayoutError", "TokenRangeError", "TokenTypeError",
        )
    },
    "ERROR_KINDS": f"the error kinds' table: {SHARED}",
    "TreeStats": f"stats()'s result: {SHARED}",
    "TOKEN_LIMIT": f"the token range (R-TOK-1): {SHARED}",
    "TokenInput": "a type alias of the reference's token inputs, for annotations only",
    "as_token_list": f"the slow path of token validation: {SHARED}",
    "render_dump": f"render(): {SHARED}",
    "__version__": "the one version string lives in the reference (reference/_version.py)",
    "Blocks": (
        "the C results' read-only view of their uint32 ids, equal to and hashing like the "
        "tuple the reference returns (DESIGN.md, 'Known differences')"
    ),
}  # fmt: skip

GPU = (
    "the block pool's GPU twin is Python over CuPy (accel/blockpool): its calls launch "
    "kernels and copy on streams, asynchronously, in device memory, so its docstring states "
    "those costs and errors where the NumPy reference's are synchronous host ones; "
    "tests/blockpool checks the two behave alike"
)

#: Members whose twin docstring is its own (the reference's does not describe it), and why.
OWN = {
    **{
        f"BlockPool{member}": GPU
        for member in (
            "", ".alloc_host_buffer", ".arrays", ".copy", ".copy_pairs", ".from_canonical",
            ".gather", ".load", ".offload", ".read_block", ".restore", ".scatter",
            ".synchronize", ".to_numpy", ".write_block",
        )
    },
    "KVCache": (
        "the GPU KV cache says what it changes (a CuPy device pool, pinned host memory, C "
        "trees, asynchronous host-to-device restores) and defers to the reference's class "
        "for the API, behaviour and cost notes, which it inherits member for member"
    ),
}  # fmt: skip

#: Public members only the C twin has, and why.
EXTRA_MEMBERS = {
    "BlockPool.check_device_ids": (
        "the GPU twin checks ids on the device, inside its kernels, and raises at the next "
        "synchronize (accel/blockpool); the NumPy reference checks them before every call"
    ),
    "BlockPool.tile_major": (
        "the GPU twin's choice of kernel tiling for its layout; the reference copies with "
        "NumPy and has none"
    ),
    "RadixTree.memory_bytes": (
        "the C allocations by part (benchmarks/ACCEL.md); the reference's memory is "
        "Python objects, measured with tracemalloc instead"
    ),
    "RouterIndex.memory_bytes": (
        "the C table's bytes by part (benchmarks/router.py: bytes per holder-block); the "
        "reference's memory is Python dicts and sets"
    ),
    "RouterIndex.hasher": (
        "an instance attribute of the reference (its constructor's argument, set in "
        "__init__, so not a class member); a read-only getter here"
    ),
    "RouterIndex.block_size": (
        "an instance attribute of the reference (its constructor's argument, set in "
        "__init__, so not a class member); a read-only getter here"
    ),
}

#: Public members of the reference the C twin does not have, and why.
REFERENCE_ONLY = {
    "RadixTree.choose_victims": (
        "an extension point for subclasses of the reference (the kit's oracle, planted bugs); "
        "the C twin is not subclassed, its eviction is the queue's alone"
    ),
    "RadixTree.choose_new_blocks": (
        "an extension point for subclasses of the reference (the kit's oracle); the C twin's "
        "allocation is the allocator's alone"
    ),
}

BLOCKS_VIEW = (
    "C results hold their ids inline as uint32; ``Blocks`` is a read-only Sequence equal to "
    "and hashing like the tuple (DESIGN.md, 'Known differences')"
)
REBUILD = (
    "only the C twin keeps a published shape beside its records, dropped by an allocation "
    "failure while mirroring a change and rebuilt by the next call that needs it (DESIGN.md, "
    "'Allocation failure while mirroring')"
)
SORTED_READERS = (
    "the C reader registry is an array sorted by epoch (the oldest first), the reference's "
    "a dict (min over it: O(readers))"
)
BITMAP = (
    "the C allocator is a free bitmap plus a summary bitmap searched with "
    "count-trailing-zeros (DESIGN.md, 'Layout'); the reference's is a binary heap"
)
UNDOCUMENTED = (
    "a plain slot attribute in the reference, documented nowhere there (its class has no "
    "Attributes section); the C getter carries its own docstring"
)
GIL_FREE = (
    "the C snapshot walk releases the GIL for long inputs (DESIGN.md, 'Snapshot match'); "
    "the reference never does"
)
MADE_BY = "the C type has no constructor (DESIGN.md, 'Known differences')"

TABLE = (
    "the C index is one open-addressing table of (hash, medium) -> holders (accel/router.c): "
    "clearing or listing one worker visits the home regions of the fingerprints it keeps, "
    "where the reference keeps a dict of entries per worker"
)
MASKS = (
    "a query ANDs 64-worker mask words per block (one probe per medium), the words of the "
    "workers still matching, where the reference intersects Python sets of workers"
)
WORKER_CAP = "a C slot names a worker in 12 bits, a mask up to 64 words (accel/router.c)"

#: The allowed differences, by ``Class`` (its docstring) or ``Class.member``.
ALLOWED: dict[str, tuple[Diff, ...]] = {
    "TieredTree": (
        Diff(
            "One prefix index over up to three tiers of KV block ids.",
            "One prefix index over up to three tiers of KV block ids, each tier a C tree "
            "(:class:`kachedb_radix.accel.RadixTree`).",
            "the tier layer is the reference's, composed over C trees (accel/tiers.py)",
        ),
    ),
    "RouterIndex": (
        Diff(
            "Cost: applying an event is O(its blocks); a query O(n * w) for n hashes and the "
            "w workers still matching.",
            "Cost: applying an event is O(its blocks) expected, one probe of an "
            "open-addressing table a block; a query O(n * m) probes for n hashes on m media "
            "plus their holder sets; clearing or removing a worker O(what it holds). At most "
            "4,096 workers.",
            MASKS,
        ),
    ),
    "RouterIndex.apply": (
        Diff("(nothing changes).", "(nothing changes). Also for a 4,097th worker.", WORKER_CAP),
    ),
    "RouterIndex.lost": (
        Diff(
            "starts stale. O(its entries).",
            "starts stale. O(its fingerprints * probe length).",
            TABLE,
        ),
        Diff("(nothing changes).", "(nothing changes). Also for a 4,097th worker.", WORKER_CAP),
    ),
    "RouterIndex.remove_worker": (
        Diff("O(its entries).", "O(its fingerprints * probe length).", TABLE),
    ),
    "RouterIndex.holdings": (
        Diff("O(its entries).", "O(its fingerprints * probe length).", TABLE),
    ),
    "RouterIndex.check_invariants": (
        Diff(
            "O(entries).",
            "O(slots * probe length + fingerprints log fingerprints).",
            "the C check walks every slot's probe sequence (Robin Hood order), its holder set "
            "and the fingerprints that must name it",
        ),
    ),
    "RouterIndex.query_hashes": (
        Diff(
            "O(n * w).",
            "O(n * m) probes for m media, plus each hash's holder set; the workers still "
            "matching ANDed 64 a word.",
            MASKS,
        ),
    ),
    "RouterIndex.query_tokens": (Diff("O(n * w) for n tokens.", "O(n * m) for n tokens.", MASKS),),
    "RouterIndex.workers": (
        Diff(
            "O(w).",
            "O(w log w).",
            "the C workers sit in reusable slots, sorted by when first seen; the reference's "
            "dict keeps insertion order",
        ),
    ),
    "RadixTree": (
        Diff(
            ":meth:`take_events` returns them.",
            ":meth:`take_events` returns them. _hash_seed: a test hook: the seed of the "
            "block-hash keys (default: drawn from ``os.urandom``).",
            "the C twin files children past 15 in a hash trie keyed per tree; the hook fixes "
            "the keys for the crafted-collision tests (DESIGN.md, 'Hash')",
        ),
        Diff(
            "``BlockHasher``.",
            "``BlockHasher``. MemoryError: the pool's arrays cannot be allocated.",
            "the C twin's per-block arrays are allocated in C, where a failure is reported "
            "(tests/accel/test_alloc_failures.py); the reference's lists fail as any "
            "Python object does",
        ),
        Diff(
            "MemoryError: the pool's arrays cannot be allocated.",
            "MemoryError: the pool's arrays cannot be allocated. TypeError: ``_hash_seed`` is "
            "not an int or None.",
            "the test hook's own error (see _hash_seed above)",
        ),
        Diff(
            "Cost: O(num_blocks) to build.",
            "Cost: O(num_blocks / 64) to build (the per-block arrays are calloc'd).",
            "calloc'd pin and stamp arrays and a bitmap of the free ids, where the reference "
            "fills lists of num_blocks entries",
        ),
    ),
    "RadixTree.match": (
        Diff(
            "(validation, then one map probe per node and one comparison per matched "
            "token; the key is never re-sliced per hop)",
            "(validation -- none for a uint32 buffer -- then per node one child lookup, a "
            "binary search on first tokens among up to 15 children or a hash-trie lookup "
            "among more, and one memcmp over the rest of the edge)",
            "the C twin is indexed differently: its children are a sorted array (no hashing) "
            "or a hash trie, and an edge's tokens lie contiguously in its chunk (DESIGN.md, "
            "'Snapshots, versions, readers'); the reference probes an immutables.Map per node",
        ),
    ),
    "RadixTree.take_events": (
        Diff(
            "O(1).",
            "O(size of the batches) here: decoded from the wire bytes the operations "
            "encoded (:meth:`take_event_payloads`).",
            "the C twin hashes and encodes its events while it mutates (accel/events.c) and "
            "builds vLLM's structs only when asked for them; the reference keeps the structs",
        ),
    ),
    "RadixTree.check_invariants": (
        Diff(
            "O(N + h + leases * length).",
            "O(N log N + leases * length): the leaf stamps and the chunks are sorted to find "
            "duplicates.",
            "the C check sorts where the reference builds sets, and checks the chunks' "
            "reference counts besides",
        ),
    ),
    "RadixTree.clone": (
        Diff(
            "extends a shared edge's lists in place only past what every version of the "
            "other reads (see :mod:`kachedb_radix.reference.node`)",
            "extends a shared edge's chunk in place only past what every version of the "
            "other reads (see accel/DESIGN.md)",
            "a C edge's tokens and ids lie in one reference-counted chunk, written only past "
            "its used mark (DESIGN.md, 'Chunks and the writer'), not in two Python lists",
        ),
    ),
    "RadixTree.snapshot": (
        Diff(
            "also keeps the blocks from being reused.",
            "also keeps the blocks from being reused.\n\nRaises: MemoryError: the published "
            "shape, dropped by an earlier allocation failure, could not be rebuilt (an O(N) "
            "rebuild, once); nothing changed.",
            REBUILD,
        ),
    ),
    "RadixTree.reader": (
        Diff(
            "not handed out again until it leaves.",
            "not handed out again until it leaves.\n\nRaises: MemoryError: the published "
            "shape, dropped by an earlier allocation failure, could not be rebuilt (an O(N) "
            "rebuild, once); nothing changed.",
            REBUILD,
        ),
    ),
    "RadixTree.reclaim": (
        Diff(
            "Cost: O(r + k log N) for r readers and k blocks.",
            "Cost: O(k) for k blocks (the oldest reader heads a sorted registry; a free is "
            "O(1) in the bitmap).",
            f"{SORTED_READERS}; and {BITMAP}",
        ),
    ),
    "RadixTree.stats": (
        Diff("O(readers).", "O(1): the registry is sorted, oldest first.", SORTED_READERS),
    ),
    "BlockAllocator": (
        Diff(
            "Cost: O(num_blocks) to build.",
            "Cost: O(num_blocks / 64) to build (a bitmap of the free ids).",
            BITMAP,
        ),
    ),
    "BlockAllocator.allocate": (
        Diff(
            "Cost: O(count log num_blocks).",
            "Cost: O(count + num_blocks / 4096) (a two-level bitmap of the free ids).",
            BITMAP,
        ),
    ),
    "BlockAllocator.free": (Diff("O(k log num_blocks)", "O(k)", BITMAP),),
    "BlockAllocator.next_ids": (
        Diff("O(f log count) for f free ids.", "O(count + num_blocks / 4096).", BITMAP),
    ),
    "RadixTree.next_block_ids": (
        Diff(
            "(R-ALLOC-2, with :meth:`choose_new_blocks` at its default)",
            "(R-ALLOC-2)",
            "the C twin has no extension points",
        ),
        Diff("O(f log count) for f free ids.", "O(count + num_blocks / 4096).", BITMAP),
    ),
    "BlockAllocator.take": (
        Diff(
            "O(k + f) for k ids and f free ids (the free heap is rebuilt without them).",
            "O(k) for k ids (a bitmap of the free ids).",
            BITMAP,
        ),
    ),
    "BlockAllocator.free_ids": (Diff("O(f log f)", "O(num_blocks / 64 + f)", BITMAP),),
    "BlockAllocator.clone": (Diff("O(num_blocks).", "O(num_blocks / 64).", BITMAP),),
    "BlockAllocator.check_invariants": (
        Diff(
            "Assert the invariants in the module docstring. O(num_blocks).",
            "Assert the invariants of :mod:`kachedb_radix.reference.allocator`'s module "
            "docstring, and that the summary bitmap and the search hint agree with the free "
            "bitmap. O(num_blocks / 64).",
            f"the invariants are listed in the reference's module, not in the C twin's; {BITMAP}",
        ),
    ),
    "Snapshot": (
        Diff(
            "Safe to use from any thread.",
            "Safe to use from any thread. Made only by ``RadixTree.snapshot()``.",
            MADE_BY,
        ),
    ),
    "Snapshot.match": (
        Diff(
            "Cost: O(n).",
            "Cost: O(n). From 4,096 tokens on, the walk runs without the GIL (other "
            "threads, readers and the writer, run meanwhile); do not change a token buffer "
            "during the call.",
            GIL_FREE,
        ),
    ),
    "Snapshot.namespaces": (
        Diff(
            "O(r log r).",
            "O(r): they are kept sorted.",
            "the published roots are a sorted array in C",
        ),
    ),
    "Reader": (
        Diff(
            "leaves by itself (R-EPOCH-5).",
            "leaves by itself (R-EPOCH-5). Made only by ``RadixTree.reader()``.",
            MADE_BY,
        ),
    ),
    "Reader.match": (
        Diff(
            "Cost: O(n).",
            "Cost: O(n). From 4,096 tokens on, the walk runs without the GIL (other "
            "threads, readers and the writer, run meanwhile); do not change a token buffer "
            "during the call.",
            GIL_FREE,
        ),
    ),
    "Reader.namespaces": (
        Diff(
            "O(r log r).",
            "O(r): they are kept sorted.",
            "the published roots are a sorted array in C",
        ),
    ),
    "Reader.leave": (
        Diff(
            "O(1).",
            "O(readers): the registry is an array sorted by epoch (a binary search, then the "
            "later entries move).",
            SORTED_READERS,
        ),
    ),
    "Reader.epoch": (
        Diff("", "The epoch number this reader entered (read-only). O(1).", UNDOCUMENTED),
    ),
    "MatchResult": (
        Diff("root first.", "root first (a ``Blocks`` view, equal to their tuple).", BLOCKS_VIEW),
    ),
    "MatchResult.blocks": (
        Diff("root first.", "root first (a ``Blocks`` view, equal to their tuple).", BLOCKS_VIEW),
    ),
    "InsertResult": (
        Diff("root first.", "root first (a ``Blocks`` view, equal to their tuple).", BLOCKS_VIEW),
        Diff("(R-ALLOC-2).", "(R-ALLOC-2) (a ``Blocks`` view).", BLOCKS_VIEW),
        Diff("(R-INS-5).", "(R-INS-5) (a ``Blocks`` view).", BLOCKS_VIEW),
    ),
    "InsertResult.blocks": (
        Diff("root first.", "root first (a ``Blocks`` view, equal to their tuple).", BLOCKS_VIEW),
    ),
    "InsertResult.allocated": (
        Diff("(R-ALLOC-2).", "(R-ALLOC-2) (a ``Blocks`` view).", BLOCKS_VIEW),
    ),
    "InsertResult.evicted": (Diff("(R-INS-5).", "(R-INS-5) (a ``Blocks`` view).", BLOCKS_VIEW),),
    "Lease.id": (Diff("", "The lease's number, from 1, per tree. O(1).", UNDOCUMENTED),),
    "Lease.namespace": (Diff("", "The namespace of the pinned path. O(1).", UNDOCUMENTED),),
    "Lease.tokens": (
        Diff(
            "",
            "The pinned token prefix, a tuple. O(length) the first time, then O(1).",
            f"{UNDOCUMENTED}; C builds the tuple from its uint32 copy on first use",
        ),
    ),
    "Lease.blocks": (
        Diff(
            "",
            "The pinned block ids, root first (a ``Blocks`` view). O(1).",
            f"{UNDOCUMENTED}; {BLOCKS_VIEW}",
        ),
    ),
}

#: The names compared: every name both packages export, but those not compared.
COMPARED = sorted(set(accel.__all__) & set(reference.__all__) - set(NOT_COMPARED))


def normalize(doc: str | None) -> str:
    """Paragraphs (split at blank lines), each with its whitespace collapsed."""
    if not doc:
        return ""
    return "\n\n".join(" ".join(part.split()) for part in re.split(r"\n\s*\n", doc.strip()))


def public_members(cls: type) -> set[str]:
    """The public members of a class: every name without a leading underscore, and the
    context manager's methods."""
    return {
        name
        for name in dir(cls)
        if not name.startswith("_") or (name in ("__enter__", "__exit__") and name in vars_of(cls))
    }


def vars_of(cls: type) -> set[str]:
    """Names defined by the class or a base of it other than ``object``."""
    return {name for base in cls.__mro__ if base is not object for name in vars(base)}


def attribute_entry(cls: type, name: str) -> str:
    """``name``'s entry in ``cls``'s ``Attributes:`` section, capitalised; "" if none."""
    lines = inspect.cleandoc(cls.__doc__ or "").splitlines()
    if "Attributes:" not in lines:
        return ""
    entry: list[str] = []
    for line in lines[lines.index("Attributes:") + 1 :]:
        if entry and line.startswith(" " * 8):
            entry.append(line.strip())
        elif line.startswith(f"    {name}: "):
            entry.append(line.split(": ", 1)[1])
        elif entry or not line.strip():
            break
    text = " ".join(entry)
    return text[:1].upper() + text[1:]


def member_doc(cls: type, name: str) -> str:
    """A member's own docstring, or, for an attribute without one, its class's
    ``Attributes:`` entry."""
    raw: Any = inspect.getattr_static(cls, name)
    own = raw.__doc__ if callable(raw) or hasattr(raw, "__get__") else None
    # A plain class attribute (``implementation``, or a class held as ``tree_type``): its
    # value's docstring is not the member's.
    if isinstance(raw, (str, int, type)):
        own = None
    return normalize(own) or normalize(attribute_entry(cls, name))


def expected(key: str, text: str) -> str:
    """The reference's normalized ``text`` with ``key``'s allowed differences applied."""
    for diff in ALLOWED.get(key, ()):
        old, new = normalize(diff.reference), normalize(diff.accel)
        if old == "":
            assert text == "", f"{key}: the reference documents it, the Diff says it does not"
            text = new
            continue
        assert text.count(old) == 1, f"{key}: allowed difference no longer applies: {old!r}"
        assert old != new, f"{key}: a listed difference that changes nothing"
        text = text.replace(old, new)
    return text


def compared_keys() -> list[str]:
    """Every class and member compared, as ``Class`` or ``Class.member``."""
    keys = []
    for name in COMPARED:
        keys.append(name)
        ours, theirs = getattr(accel, name), getattr(reference, name)
        keys.extend(f"{name}.{m}" for m in sorted(public_members(ours) & public_members(theirs)))
    return keys


def test_every_public_name_of_both_packages_is_compared_or_listed() -> None:
    """Every name either package exports is compared, or listed with its reason: one only
    one package exports in ONLY_ONE, one not compared in NOT_COMPARED -- and a listed name
    is still exported (by exactly one package, for ONLY_ONE)."""
    ours, theirs = set(accel.__all__), set(reference.__all__)
    assert sorted(ours ^ theirs) == sorted(ONLY_ONE)
    assert set(NOT_COMPARED) <= ours & theirs
    assert set(COMPARED) | set(NOT_COMPARED) == ours & theirs
    assert {"RadixTree", "BlockAllocator", "Snapshot", "Reader", "MatchResult"} <= set(COMPARED)
    assert {"InsertResult", "Lease", "KVCache", "BlockPool", "TieredTree"} <= set(COMPARED)
    assert {"RouterIndex"} <= set(COMPARED)
    assert all(isinstance(getattr(accel, name), type) for name in COMPARED)
    assert accel.DUMP_FORMAT == reference.DUMP_FORMAT
    # What SHARED says: the C twin raises and returns the reference's own classes.
    with pytest.raises(reference.InvalidArgumentError):
        accel.RadixTree(0, 1)
    assert type(accel.RadixTree(1, 1).stats()) is reference.TreeStats


@pytest.mark.parametrize("name", COMPARED)
def test_the_twins_have_the_same_public_members(name: str) -> None:
    """Every public member of the reference exists in the C twin (``clone`` included),
    and the C twin has no other but those listed in EXTRA_MEMBERS."""
    ours, theirs = public_members(getattr(accel, name)), public_members(getattr(reference, name))
    assert sorted(f"{name}.{m}" for m in theirs - ours) == sorted(
        key for key in REFERENCE_ONLY if key.startswith(f"{name}.")
    )
    assert sorted(f"{name}.{m}" for m in ours - theirs) == sorted(
        key for key in EXTRA_MEMBERS if key.startswith(f"{name}.")
    )


@pytest.mark.parametrize("key", compared_keys())
def test_docstring_is_the_references(key: str) -> None:
    name, _, member = key.partition(".")
    ours, theirs = getattr(accel, name), getattr(reference, name)
    if member:
        got, spec = member_doc(ours, member), member_doc(theirs, member)
    else:
        got, spec = normalize(ours.__doc__), normalize(theirs.__doc__)
    if key in OWN:  # its own, for the reason listed; listing one that is the same is stale
        assert got and got != spec, f"{key}: listed in OWN, yet it says what the reference says"
        return
    assert got == expected(key, spec)


def test_every_allowed_difference_names_a_compared_docstring() -> None:
    """A difference for a member that no longer exists (or is not compared) is stale."""
    keys = set(compared_keys())
    assert sorted(set(ALLOWED) - keys) == []
    assert sorted(set(OWN) - keys) == [] and not set(OWN) & set(ALLOWED)
    assert all(diff.why for diffs in ALLOWED.values() for diff in diffs)
    assert all(OWN.values()) and all(ONLY_ONE.values())


def test_the_comparison_can_fail() -> None:
    """The machinery is not vacuous: an unlisted difference, a stale listed one and a
    wrong attribute entry are all caught."""
    assert normalize("a  b\n c\n\n\n d") == "a b c\n\nd"
    assert attribute_entry(reference.MatchResult, "lease").startswith("The lease pinning")
    assert attribute_entry(reference.Lease, "id") == ""
    assert member_doc(reference.MatchResult, "length") == (
        "Tokens matched, always a multiple of the block size."
    )
    assert expected("RadixTree.stats", "x O(readers).") == (
        "x O(1): the registry is sorted, oldest first."
    )
    with pytest.raises(AssertionError, match="no longer applies"):
        expected("RadixTree.stats", "O(n)")
    assert expected("RadixTree.dump", "any text") == "any text"  # nothing listed: verbatim
