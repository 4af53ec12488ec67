"""Engine presets (issue 33): each engine's block naming at its defaults, checked against
that engine's own code from its pinned wheel -- vLLM 0.33.0 (its request block hasher
and its config's defaults), SGLang 0.5.23 (its own event recording), Dynamo
(``ai-dynamo-runtime`` 1.6.1: its ``compute_block_hash_for_seq`` and its ``RadixTree``)
-- and this project's trees; the ``hash`` command and ``route --engine``."""

from __future__ import annotations

import ast
import base64
import importlib.metadata
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kachedb_radix.reference import InvalidArgumentError, RadixTree
from kachedb_radix.reference.events import (
    DEFAULT_ENGINE,
    ENGINE_NAMES,
    ENGINES,
    AllBlocksCleared,
    BlockHasher,
    BlockRemoved,
    BlockStored,
    ExternalHash,
    KVEventBatch,
    dynamo_scheme,
    engine_preset,
)
from kachedb_radix.reference.router import RouterIndex
from kachedb_radix.reference.router.wire import decode_for_router
from kachedb_radix.spec.cli.main import build_parser, main
from kachedb_radix.spec.peers.vllm import load_vllm, vllm_block_hashes
from tests.support.dynamo import require_dynamo
from tests.support.vllm import require_vllm

pytestmark = pytest.mark.quick

TOKENS = [7, 0, 2**32 - 1, *range(100, 161)]


def test_the_presets_are_one_table() -> None:
    """Four engines, vLLM's the default; an unknown name is refused, naming them."""
    assert ENGINE_NAMES == ("vllm", "sglang", "dynamo", "kachedb") == tuple(ENGINES)
    assert DEFAULT_ENGINE == "vllm" and engine_preset("dynamo") is ENGINES["dynamo"]
    for bad in ("vLLM", "", None):
        with pytest.raises(InvalidArgumentError, match="engines are vllm, sglang, dynamo"):
            engine_preset(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="block_size must be an int >= 1"):
        ENGINES["vllm"].event_hashes([1, 2], 0)
    with pytest.raises(InvalidArgumentError, match="does not name LoRA adapters"):
        ENGINES["sglang"].router_hashes([1, 2], 1, lora="adapter")
    with pytest.raises(InvalidArgumentError, match="empty_is_none is a bool"):
        BlockHasher(empty_is_none=1)  # type: ignore[arg-type]


def test_rank_keying_follows_the_engine() -> None:
    """Dynamo files a batch under (worker, data-parallel rank), None as rank 0; the
    others publish a rank a port and name the stream the worker."""
    dynamo, vllm = ENGINES["dynamo"], ENGINES["vllm"]
    assert dynamo.worker_key("w0", 1) == ("w0", 1) and dynamo.worker_key("w0", None) == ("w0", 0)
    assert [vllm.worker_key("w0", rank) for rank in (None, 3)] == ["w0", "w0"]
    assert {p.name for p in ENGINES.values() if p.rank_keying == "worker_rank"} == {"dynamo"}


# ---------------------------------------------------------------------------- vLLM


def _default(path: Path, name: str) -> Any:
    """The literal a class attribute or a module-level assignment ``name`` of a file is
    given, read from the file (the engine's own source, not imported)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == name
            and node.value is not None
        ):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path} gives {name} no literal")


def _wheel_file(distribution: str, relative: str) -> Path:
    return Path(str(importlib.metadata.distribution(distribution).locate_file(relative)))


def test_the_vllm_preset_is_what_vllm_ships(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM 0.33.0's own defaults: the hash algorithm (sha256, not sha256_cbor), the
    block size, int hashes in events, and the root seed when PYTHONHASHSEED is unset."""
    vllm = require_vllm()
    preset = ENGINES["vllm"]
    cache = _wheel_file("vllm", "vllm/config/cache.py")
    assert _default(cache, "prefix_caching_hash_algo") == preset.scheme == "sha256"
    assert _default(cache, "DEFAULT_BLOCK_SIZE") == preset.block_size
    envs = _wheel_file("vllm", "vllm/envs.py").read_text(encoding="utf-8")
    assert 'os.getenv("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES", "1")' in envs
    assert preset.wire == "int"
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    hash_fn = vllm.hashing.get_hash_fn_by_name(preset.scheme)
    assert vllm.kv_cache_utils.resolve_none_hash_seed(hash_fn) == preset.seed


@pytest.mark.parametrize("salt", [None, "", "tenant-a"])
def test_the_vllm_preset_hashes_as_vllm_does(salt: str | None) -> None:
    """R-EVENT-2: the preset's hashes are vLLM's own request block hasher's at its
    defaults, as its events carry them -- an empty salt hashed as none, as vLLM does."""
    vllm = require_vllm()
    preset = ENGINES["vllm"]
    theirs = vllm_block_hashes(TOKENS, preset.block_size, preset.scheme, preset.seed, salt)
    convert = vllm.kv_cache_utils.maybe_convert_block_hash
    assert preset.event_hashes(TOKENS, namespace=salt) == [convert(h) for h in theirs]
    assert preset.router_hashes(TOKENS, namespace=salt) == [convert(h) for h in theirs]
    if salt == "":
        assert preset.event_hashes(TOKENS, namespace="") == preset.event_hashes(TOKENS)


@pytest.mark.parametrize("salt", [None, "", "tenant-a"])
def test_a_router_at_its_defaults_hits_what_vllm_stored(salt: str | None) -> None:
    """Issue 33's silent miss, gone: an index told nothing but the engine (vLLM) matches
    the blocks vLLM's own hasher named, salted or not; the old default (sha256_cbor)
    matched none of them."""
    require_vllm()
    preset = ENGINES["vllm"]
    theirs = vllm_block_hashes(TOKENS, 16, preset.scheme, preset.seed, salt)
    convert = load_vllm().kv_cache_utils.maybe_convert_block_hash
    stored = BlockStored([convert(h) for h in theirs], None, TOKENS[:64], 16, None, "GPU", None)
    for hasher, depth in ((preset.hasher(), 4), (BlockHasher("sha256_cbor"), 0)):
        index = RouterIndex(hasher, preset.block_size)
        index.apply("w0", 0, KVEventBatch(0.0, [stored]))
        assert index.query_tokens(TOKENS, salt).get("w0", 0) == depth


# ---------------------------------------------------------------------------- SGLang


def _page_size_default(path: Path) -> int:
    """The page size SGLang's ``_page_size_default`` gives off MUSA (CUDA), read from
    its source: the ``return {"page_size": N}`` under ``if not ...is_musa``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "_page_size_default":
            for branch in ast.walk(node):
                if isinstance(branch, ast.If) and "is_musa" in ast.unparse(branch.test):
                    returned = branch.body[0]
                    assert isinstance(returned, ast.Return) and returned.value is not None
                    value: int = ast.literal_eval(returned.value)["page_size"]
                    return value
    raise AssertionError(f"{path} has no _page_size_default of that shape")


def _sglang() -> Any:
    from kachedb_radix.spec.peers import sglang

    try:
        sglang.load(events=True)
    except ImportError as exc:
        if os.environ.get("KACHEDB_RADIX_REQUIRE_SGLANG") == "1":
            raise
        pytest.skip(f"SGLang's event recording cannot run here: {exc}")
    return sglang


def test_the_sglang_preset_hashes_as_sglang_does() -> None:
    """SGLang 0.5.23's own recorder (its C++ page hash built from the wheel), at its
    default page size (1, read from its own overrides), names pages as the preset does
    -- the namespace left out of the hashes (``namespaced`` False)."""
    sglang = _sglang()
    preset = ENGINES["sglang"]
    overrides = _wheel_file("sglang", "sglang/srt/arg_groups/overrides.py")
    assert _page_size_default(overrides) == preset.block_size == 1
    candidate = sglang.SGLangCandidate()
    candidate.reset(256, preset.block_size, events={"scheme": preset.scheme})
    for tokens, namespace in ((TOKENS[:9], None), ([5, 6, 7, 8], "tenant")):
        candidate.insert(tokens, namespace, False)
        stored: list[int] = []
        for payload in candidate.events()["batches"]:
            for event in decode_for_router(base64.b64decode(payload)).events:
                stored += getattr(event, "block_hashes", [])
        assert stored == preset.event_hashes(tokens, namespace=namespace)
        assert stored == preset.event_hashes(tokens, namespace=None)  # not namespaced
    assert not preset.namespaced


# ---------------------------------------------------------------------------- Dynamo


def test_dynamo_s_own_test_vector() -> None:
    """Issue 33's repro: with a namespace, Dynamo seeds every block's hash; the old
    ``xxh3_64`` scheme salts the first block only, differently, so it misses."""
    core = require_dynamo()
    theirs = core.compute_block_hash_for_seq([1, 2, 3, 4], 4, cache_namespace="t")
    assert theirs[0] == 15267997549211084293
    assert ENGINES["dynamo"].router_hashes([1, 2, 3, 4], 4, "t") == theirs
    assert BlockHasher("xxh3_64").chain([1, 2, 3, 4], 4, "t")[0] == 785558795882857882


NAMES = st.none() | st.sampled_from(["", "t", "tenant-é"]) | st.text(max_size=4)


@settings(max_examples=60, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 2**32 - 1), max_size=24),
    block_size=st.integers(1, 6),
    namespace=NAMES,
    lora=NAMES,
)
def test_dynamo_local_hashes_are_dynamos_own(
    tokens: list[int], block_size: int, namespace: str | None, lora: str | None
) -> None:
    """Every block's local hash, seeded by the LoRA name and the namespace ("" as
    none), is what Dynamo's ``compute_block_hash_for_seq`` gives."""
    core = require_dynamo()
    theirs = core.compute_block_hash_for_seq(
        tokens, block_size, lora_name=lora, cache_namespace=namespace
    )
    assert ENGINES["dynamo"].router_hashes(tokens, block_size, namespace, lora) == theirs
    assert dynamo_scheme.local_hashes(tokens, block_size, namespace, lora) == theirs


#: Prompts of 3 blocks of B = 2: the first two share their first block.
PROMPTS = [[1, 2, 3, 4, 5, 6], [1, 2, 9, 9, 8, 8], [4, 4, 4, 4, 4, 4]]
OPS = st.lists(
    st.tuples(
        st.integers(0, 2),  # worker
        st.integers(0, 1),  # data-parallel rank
        st.sampled_from(["store", "store", "trim", "clear"]),
        st.integers(0, len(PROMPTS) - 1),
        st.sampled_from([None, "t"]),
    ),
    max_size=14,
)


@settings(max_examples=40, deadline=None)
@given(ops=OPS)
def test_an_index_on_the_dynamo_preset_answers_as_dynamos_radix_tree(
    ops: list[tuple[int, int, str, int, str | None]],
) -> None:
    """Dynamo's own ``RadixTree`` fed events naming blocks by the preset's sequence
    hashes and Dynamo's own local hashes, and a router index fed the same blocks under
    the preset's worker keys, give every worker (and rank) the same depth for every
    prompt: the sequence chain names prefixes as Dynamo's tree does, and the ranks stay
    apart.  (Stores name only the blocks a worker lacks, and removals drop a prompt's
    last block: Dynamo counts no copies, R-ROUTE-5.)"""
    core = require_dynamo()
    preset = ENGINES["dynamo"]
    tree = core.RadixTree()
    index = RouterIndex(preset.hasher(), 2)
    held: dict[tuple[int, int], set[ExternalHash]] = {}  # per (worker, rank): sequence hashes
    seqs: dict[Any, int] = {}
    event_id = 0

    def send(worker: int, rank: int, dynamo_data: Any, ours: Any) -> None:
        nonlocal event_id
        event_id += 1
        event = {"event_id": event_id, "data": dynamo_data, "dp_rank": rank}
        tree.apply_event(worker, json.dumps(event).encode())
        key = preset.worker_key(worker, rank)
        seq = seqs.get(key, 0)
        seqs[key] = seq + 1
        assert index.apply(key, seq, KVEventBatch(0.0, [ours], rank)).outcome == "applied"

    for worker, rank, op, prompt, namespace in ops:
        tokens = PROMPTS[prompt]
        sequence: list[ExternalHash] = [int(h) for h in preset.event_hashes(tokens, 2, namespace)]
        local = core.compute_block_hash_for_seq(tokens, 2, cache_namespace=namespace)
        mine = held.setdefault((worker, rank), set())
        if op == "store":
            start = 0
            while start < len(sequence) and sequence[start] in mine:
                start += 1
            if start == len(sequence):
                continue
            parent = sequence[start - 1] if start else None
            blocks = [
                {"block_hash": sequence[i], "tokens_hash": local[i]}
                for i in range(start, len(sequence))
            ]
            ours = BlockStored(sequence[start:], parent, tokens[2 * start :], 2, None, "GPU", None)
            send(worker, rank, {"stored": {"parent_hash": parent, "blocks": blocks}}, ours)
            mine.update(sequence[start:])
        elif op == "trim" and sequence[-1] in mine:
            removed = BlockRemoved([sequence[-1]], "GPU")
            send(worker, rank, {"removed": {"block_hashes": [sequence[-1]]}}, removed)
            mine.discard(sequence[-1])
        elif op == "clear":
            send(worker, rank, "cleared", AllBlocksCleared())
            mine.clear()
        for other in range(len(PROMPTS)):
            for space in (None, "t"):
                query = core.compute_block_hash_for_seq(PROMPTS[other], 2, cache_namespace=space)
                assert index.query_tokens(PROMPTS[other], space) == tree.find_matches(query).scores
    index.check_invariants()


# ---------------------------------------------------------------------------- kachedb


@pytest.mark.parametrize("namespace", [None, "", "tenant"])
def test_the_kachedb_preset_is_what_this_project_s_trees_emit(namespace: str | None) -> None:
    """The project's trees at their defaults (events=True) name blocks as the preset
    does, and keep "" a namespace of its own."""
    preset = ENGINES["kachedb"]
    tree = RadixTree(64, 4, events=True)
    tree.insert(TOKENS[:12], namespace)
    (batch,) = tree.take_events()
    (stored,) = batch.events
    assert isinstance(stored, BlockStored)
    assert stored.block_hashes == preset.event_hashes(TOKENS[:12], 4, namespace)
    empty = preset.event_hashes(TOKENS[:12], 4, "")
    assert (empty == preset.event_hashes(TOKENS[:12], 4)) == preset.empty_is_none is False


# ---------------------------------------------------------------------------- commands


def test_hash_prints_what_each_engine_s_router_matches_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One decimal line per whole block: the issue's Dynamo vector, vLLM's default, the
    events' hashes with --events, LoRA for Dynamo."""
    vector = ["--engine", "dynamo", "--block-size", "4", "--namespace", "t", "1", "2", "3", "4"]
    assert main(["hash", *vector]) == 0
    assert capsys.readouterr().out == "15267997549211084293\n"
    words = [str(t) for t in TOKENS[:40]]
    for engine in ENGINE_NAMES:
        preset = ENGINES[engine]
        size = 4
        assert main(["hash", "--engine", engine, "--block-size", str(size), *words]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert [int(x) for x in lines] == preset.router_hashes(TOKENS[:40], size)
        assert main(["hash", "--engine", engine, "--block-size", "4", "--events", *words]) == 0
        events = [int(x) for x in capsys.readouterr().out.splitlines()]
        assert events == [int(h) for h in preset.event_hashes(TOKENS[:40], size)]
    assert main(["hash", *(str(t) for t in TOKENS[:32])]) == 0  # vLLM, B = 16
    assert len(capsys.readouterr().out.splitlines()) == 2
    lora = ["--engine", "dynamo", "--block-size", "2", "--lora", "adapter", "1", "2", "3", "4"]
    assert main(["hash", *lora]) == 0
    assert [int(x) for x in capsys.readouterr().out.split()] == dynamo_scheme.local_hashes(
        [1, 2, 3, 4], 2, None, "adapter"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["hash", "1", "2", "3"], "3 tokens make no whole block of 16"),
        (["hash", "--block-size", "2", "--lora", "x", "1", "2"], "does not name LoRA adapters"),
    ],
)
def test_hash_refuses_in_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["hash", "--block-size", "0", "1"],
        ["hash", "--block-size", str((1 << 24) + 1), "1"],
        ["hash", "--engine", "trtllm", "1"],
        ["hash", "-1"],
        ["hash", str(2**32)],
        ["hash"],
    ],
)
def test_hash_refuses_bad_options(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2


def test_route_defaults_to_vllm_s_engine() -> None:
    """``route`` at its defaults assumes vLLM: its scheme and block size come from the
    preset unless given."""
    args = build_parser().parse_args(["route", "--demo"])
    assert args.engine == "vllm" and args.hash is None and args.block_size is None


@pytest.mark.parametrize("engine", ["sglang", "dynamo"])
def test_route_s_demo_runs_on_each_engine_s_hashes(
    engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's workers hash as the engine does and the router with them."""
    argv = ["route", "--demo", "--plain", "--engine", engine, "--workers", "2"]
    assert main([*argv, "--requests", "40", "--blocks", "400", "--block-size", "4"]) == 0
    assert "the index holds exactly each worker's blocks" in capsys.readouterr().out
