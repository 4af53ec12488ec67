"""KV events in ``explain`` (R-EVENT-*): each step of a recording carries the batches each
side emitted during it, read through the kit's ``events`` operation, compared as the kit
compares them, and named by the blocks of each side's own dump.

The recording beside the C twin (both twins' batches, equal and named alike), beside the
planted event bugs of ``spec/mutants/events.py`` (each finding on the step whose events
are wrong, the differing event marked on both sides), beside a target whose *outcome*
differs (each batch still shown on the step that emitted it, and the kit still gets the
whole stream), the text mode, the command line's ``--events``, the playground's toggle,
and the page in real headless Chromium: the panel, the marks, the rule named, and the
blocks an event names lit up in the tree and the pool on hover.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kachedb_radix import accel
from kachedb_radix.reference import RadixTree
from kachedb_radix.reference.errors import InvalidArgumentError
from kachedb_radix.reference.events import dump_hashes
from kachedb_radix.spec.cli.main import main
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.events import hasher_of
from kachedb_radix.spec.explain import build_page, frame_views, record, scenario, text_report
from kachedb_radix.spec.explain.events import (
    Names,
    Place,
    Tap,
    batches_of,
    event_lines,
    short,
    with_events,
    without_events,
)
from kachedb_radix.spec.explain.model import KeySpace, index_dump
from kachedb_radix.spec.explain.page import page_data
from kachedb_radix.spec.explain.record import Recording
from kachedb_radix.spec.explain.serve import PlayError, PlayServer, Session, form_step
from kachedb_radix.spec.explain.view import View
from kachedb_radix.spec.mutants.base import MutantTree
from kachedb_radix.spec.mutants.events import EventsNoRemoval, EventsWrongParentAfterSplit
from kachedb_radix.spec.mutants.queues import ReversedQueue
from tests.explain.test_browser import VIEWPORT, Page

SCHEME = {"scheme": "sha256_cbor", "seed": "vllm-none-hash"}


def steps_of(note: str) -> int:
    """The index of the events scenario's step whose note starts with ``note``."""
    steps = scenario("events").steps
    return next(i for i, step in enumerate(steps) if step.get("note", "").startswith(note))


def beside(target: Any, steps: list[dict[str, Any]] | None = None) -> Recording:
    chosen = scenario("events")
    return record(steps or chosen.steps, target, title=chosen.title, source="events")


def kinds(view: View) -> list[list[str]]:
    return [[line["k"] for line in batch["lines"]] for batch in view["events"]]


class LruReversedWithEvents(MutantTree):
    """LruReversed (most recently used leaf tail first), built with events too."""

    def __init__(self, num_blocks: int, block_size: int = 16, **options: Any) -> None:
        super().__init__(num_blocks, block_size, **options)
        self._queue = ReversedQueue()


# ---------------------------------------------------------------------- the recording


def test_both_twins_carry_the_batches_they_emitted_at_each_step() -> None:
    """Beside accel every step carries both sides' batches, equal; each event names the
    blocks whose hashes it carries (the side's own dump hashed), the store after a split
    only the new blocks under the last shared one, a match nothing, a namespace its salt,
    an evicting insert its removal (in eviction order) before its store in one batch, an
    eviction under a reader its removal at once. The reference alone records the same."""
    recording = beside(TreeAdapter(accel.RadixTree, "accel"))
    alone = beside(None)
    views = frame_views(recording)
    assert recording.first_difference is None
    for frame, row, own in zip(recording.frames, views, alone.frames, strict=True):
        reference, twin = frame.sides
        assert frame.events == SCHEME and frame.events_differ is None
        assert reference.events is not None and reference.events == twin.events
        assert own.sides[0].events == reference.events
        assert [line["t"] for batch in row[0]["events"] for line in batch["lines"]] == [
            line["t"] for batch in row[1]["events"] for line in batch["lines"]
        ]
    ref = [row[0] for row in views]
    assert kinds(ref[0]) == [] and kinds(ref[1]) == [["stored"]]
    split = steps_of("shares two blocks")
    (stored,) = recording.frames[split].sides[0].events or []
    assert stored["events"][0]["stored"]["tokens"] == [20, 21, 22, 23]
    line = ref[split]["events"][0]["lines"][0]
    hashes = dump_hashes(recording.frames[split].sides[0].dump or {}, hasher_of(SCHEME))
    by_block = {block: value for value, block in hashes.items()}
    assert line["b"] == [3, 4] and line["n"] == ["k5"]
    assert line["t"].startswith(
        f"stored #3 {short(by_block[3])} (tokens 4-5: 20 21), #4 {short(by_block[4])} "
        f"(tokens 6-7: 22 23) · parent #1 {short(by_block[1])} · GPU"
    )
    assert kinds(ref[steps_of("a match")]) == []
    salted = ref[steps_of("the same tokens for tenant alice")]["events"][0]["lines"][0]["t"]
    assert "namespace 'alice' · extra keys (the cache salt): #5 ('alice',)" in salted
    assert short(by_block[0]) not in salted  # the same tokens, another hash
    evicting = ref[steps_of("three new blocks, one free")]["events"]
    assert kinds({"events": evicting}) == [["removed", "stored"]]  # one batch, removal first
    removed = evicting[0]["lines"][0]
    assert removed["b"] == [4, 3] and removed["t"].startswith("removed, in this order: #4 ")
    assert removed["n"] == ["g5"]  # the ghost drawn where they hung
    under_reader = ref[steps_of("evict(1) under the reader")]["events"][0]["lines"][0]
    assert under_reader["k"] == "removed" and under_reader["b"] == [2]


@pytest.mark.parametrize(
    ("mutant", "note", "rules", "marked"),
    [
        (EventsNoRemoval, "three new blocks, one free", {"R-EVENT-4"}, "removed"),
        (EventsWrongParentAfterSplit, "shares two blocks", {"R-EVENT-2", "R-EVENT-3"}, "stored"),
    ],
)
def test_an_event_mutant_is_found_on_the_step_whose_events_are_wrong(
    mutant: type, note: str, rules: set[str], marked: str
) -> None:
    """A planted event bug beside the reference: the first difference is the step that
    emitted the wrong batch, its finding named by the rule (at the kit's events read),
    the differing event marked on both sides, the steps before it clean."""
    recording = beside(TreeAdapter(mutant, "mutant"))
    views = frame_views(recording)
    step = steps_of(note)
    assert recording.first_difference == step
    frame = recording.frames[step]
    assert frame.finding is not None and rules & set(frame.finding.rules)
    assert frame.difference is not None and frame.difference.startswith("events.ok.batches[0]")
    assert frame.events_differ is not None and not frame.minor
    lines = [line for batch in views[step][0]["events"] for line in batch["lines"]]
    assert [line["k"] for line in lines if line["x"]] == [marked]  # the reference's side
    assert all(frame.events_differ is None for frame in recording.frames[:step])
    text = text_report(recording, views)
    assert f"parts ways with the reference at {frame.difference}" in text
    if mutant is EventsWrongParentAfterSplit:
        theirs = views[step][1]["events"][0]["lines"][0]
        assert theirs["x"] and "parent #2 " in theirs["t"] and "#3≠ " in theirs["t"]
        assert theirs["b"] == [3, 4]  # still put beside the blocks it should name


def test_a_step_whose_outcome_differs_still_shows_its_own_batches() -> None:
    """The kit stops a step at its first finding, before reading events: explain reads them
    itself, shows each batch on the step that emitted it, and hands them to the kit's next
    read (so its index still sees the whole stream); the finding the kit makes there on
    them says it is about the earlier step."""
    recording = beside(TreeAdapter(LruReversedWithEvents, "reversed"))
    views = frame_views(recording)
    step = steps_of("three new blocks, one free")
    frame = recording.frames[step]
    assert frame.difference == "outcome.ok.blocks[0]"  # the eviction itself differs
    mine, theirs = (kinds(view) for view in views[step])
    assert mine == theirs == [["removed", "stored"]]
    assert views[step][1]["events"][0]["lines"][0]["b"] == [6, 5]  # its own victims
    after = recording.frames[step + 1]  # a reader: it emits nothing, on either side
    assert kinds(views[step + 1][0]) == kinds(views[step + 1][1]) == []
    assert after.events_late == step + 1 and after.difference is not None
    assert "R-EVENT-4" in (after.finding.rules if after.finding else ())
    assert f"compared step {step + 1}'s KV events only here" in text_report(recording, views)


def test_a_declared_step_shows_the_specs_own_batches_and_the_adopted_ones() -> None:
    """Under a profile the kit adopts a whole-leaf evictor's choice: the spec's side shows
    the batch the spec itself emits (one block removed, R-EVENT-4), the adopted state the
    batch the kit's reference emitted following the choice (both blocks), as the target's;
    nothing differs."""
    from tests.explain.test_profile import STEPS
    from tests.kit.test_profile import WHOLE_NODES, WholeLeafEviction

    steps = with_events(STEPS, SCHEME)
    target = TreeAdapter(WholeLeafEviction, "whole")
    recording = record(steps, target, title="t", source="s", profile=WHOLE_NODES)
    frame = recording.frames[2]
    spec, theirs = frame.sides
    assert frame.declared and frame.events_differ is None and spec.adopted is not None

    def removed(batches: list[dict[str, Any]] | None) -> list[Any]:
        return [event["removed"]["hashes"] for batch in batches or [] for event in batch["events"]
                if "removed" in event]  # fmt: skip

    assert len(removed(spec.events)[0]) == 1
    assert len(removed(spec.adopted.events)[0]) == 2 == len(removed(theirs.events)[0])
    view = frame_views(recording)[2][0]
    assert view["events"][0]["lines"][0]["b"] == [1]
    assert view["adopted"]["events"][0]["lines"][0]["b"] == [1, 0]
    data = page_data(recording, frame_views(recording))
    assert data["frames"][2]["sides"][0]["adopted"]["events"] == view["adopted"]["events"]
    text = text_report(recording, frame_views(recording))
    assert "  the kit then adopts: cached 1 tokens: reused 0, allocated 0, evicted 1,0\n" in text
    assert "      - removed, in this order: #1 da296709 (token 1), #0 7ec42673 (token 0)" in text


def test_events_answers_that_are_not_batches_are_said_so() -> None:
    """A refused call, a malformed answer, a payload that is no KVEventBatch: a note each,
    never a crash; a tap hands held payloads to the next read, once."""
    assert batches_of({"error": "invalid_argument"}) == [
        {"events": [], "note": "the events call was refused: invalid_argument"}
    ]
    assert batches_of({"ok": {"batches": "x"}})[0]["note"].startswith("not an events answer")
    (bad,) = batches_of({"ok": {"batches": ["AAAA"]}})
    assert bad["events"] == [] and bad["note"].startswith("undecodable")
    answers = iter([{"batches": ["b"]}, {"batches": ["c"]}, {"batches": []}])
    tap = Tap(lambda: next(answers))
    tap.read_now(hold=True)
    assert tap.holding and tap.call() == {"batches": ["b", "c"]} and tap.delivered == 1
    tap.start()
    assert tap.call() == {"batches": []} and tap.answers == [{"ok": {"batches": []}}]
    steps: list[dict[str, Any]] = [
        {"op": "reset", "levels": ["core"], "events": {"scheme": "xxh3_64"}},
        {"op": "x"},
    ]
    assert with_events(steps, SCHEME)[0]["events"] == {"scheme": "xxh3_64"}
    assert with_events(steps, SCHEME, replace=True)[0] == {
        "op": "reset", "levels": ["core", "events"], "events": SCHEME
    }  # fmt: skip
    assert without_events(steps)[0] == {"op": "reset", "levels": ["core"]}


class Refusing(RadixTree):
    """Refuses every events call (R-EVENT-1: a tree built without events does)."""

    def take_events(self) -> Any:
        raise InvalidArgumentError("this tree emits no events")


class Garbled(RadixTree):
    """Answers the events call with something that is not a list of batches."""


class GarbledAdapter(TreeAdapter):
    def events(self) -> Any:
        return {"batches": "not a list"}


def test_a_refused_or_garbled_events_answer_is_shown_as_such() -> None:
    """A target whose events call is refused, or answers garbage: its panel says so (a
    note, no crash), the kit's finding is on the first step, and the reference's batches
    are shown as usual."""
    for target, note in (
        (TreeAdapter(Refusing, "refusing"), "the events call was refused: invalid_argument"),
        (GarbledAdapter(Garbled, "garbled"), "not an events answer: {'batches': 'not a list'}"),
    ):
        recording = beside(target)
        views = frame_views(recording)
        frame = recording.frames[1]
        assert frame.sides[1].events == [{"events": [], "note": note}], target.name
        assert frame.events_differ is not None and recording.first_difference == 0
        assert views[1][1]["events"] == [{"ts": None, "lines": [], "x": False, "note": note}]
        assert kinds(views[1][0]) == [["stored"]]
        assert f"events, batch 1 of 1: -- {note}" in text_report(recording, views)


def test_every_kind_of_event_is_one_line() -> None:
    """A clear, LoRA fields, a digest sent as bytes (hex), a hash no block carries, a
    block the dumps no longer hold: each said in its line."""
    recording = beside(None, scenario("events").steps[:3])
    frame = recording.frames[2]
    keys = KeySpace()
    before = index_dump(recording.frames[1].sides[0].dump or {}, keys)
    after = index_dump(frame.sides[0].dump or {}, keys)
    names = Names(SCHEME)
    place = Place(names.of(after), names.of(before), after, before, {}, {}, [9])
    stored = {"hashes": ["ab" * 16], "parent": 5, "medium": "CPU", "tokens": [1, 2],
              "block_size": 2, "extra_keys": None, "lora_id": 3, "lora_name": "ada"}  # fmt: skip
    removed = {"hashes": [next(iter(names.of(after)))], "medium": "GPU"}
    batches = [{"events": [{"cleared": {}}, {"stored": stored}, {"removed": removed}],
                "ts": 4.0, "note": "read as a router reads it"}]  # fmt: skip
    (row,) = event_lines(batches, place, {(0, -1)})
    assert row["x"] and row["note"] == "read as a router reads it"
    cleared, store, removal = row["lines"]
    assert cleared == {"t": "all blocks cleared (AllBlocksCleared)", "k": "cleared", "b": [],
                       "n": [], "x": False}  # fmt: skip
    assert store["t"] == (
        "stored #? abababab (no cached block has this hash) · parent ? (no block of this "
        "tree) 00000000 · CPU · lora_id 3 · lora_name 'ada'"
    )
    assert removal["k"] == "removed" and removal["b"] and removal["t"].startswith("removed, in")


# ---------------------------------------------------------------------- the command line


def test_text_and_the_events_option(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``explain --scenario events`` prints each step's events; ``--events SCHEME`` turns
    them on for any trace (its resets name the scheme); a target's wrong events exit 1;
    an unknown scheme, or a target with no events level, is a usage error (exit 2)."""
    assert main(["explain", "--scenario", "events"]) == 0
    out = capsys.readouterr().out
    assert "  events: none: a fresh cache has nothing to report" in out
    assert "  events: none: no block became cached or stopped being cached (R-EVENT-1)" in out
    assert "    - removed, in this order: #4 " in out and "    + stored #0 " in out
    trace = tmp_path / "trace.jsonl"
    steps = without_events(scenario("events").steps)
    trace.write_text("".join(json.dumps(step) + "\n" for step in steps))
    assert main(["explain", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "  events: none" not in out and "+ stored" not in out  # events off
    assert main(["explain", str(trace), "--events", "xxh3_64"]) == 0
    out = capsys.readouterr().out
    assert '"scheme": "xxh3_64"' in out and "    + stored #0 " in out
    mutant = "kachedb_radix.spec.mutants.events:EventsNoRemoval"
    assert main(["explain", str(trace), "--events", "--target", mutant]) == 1
    out = capsys.readouterr().out
    assert "≠ - removed, in this order: #4" in out and "R-EVENT-4" in out
    with pytest.raises(SystemExit) as stop:  # refused while parsing (issue 32)
        main(["explain", str(trace), "--events", "md5"])
    assert stop.value.code == 2 and "--events: invalid choice: 'md5'" in capsys.readouterr().err


class Quiet(RadixTree):
    """The reference without ``take_events``: a target that declares no events level."""

    take_events = None  # type: ignore[assignment]


def test_a_target_without_the_events_level_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--events beside a target that declares no events level: a clear message, exit 2."""
    target = "tests.explain.test_events:Quiet"
    assert main(["explain", "--scenario", "split", "--events", "--target", target]) == 2
    assert "does not declare the events level" in capsys.readouterr().err


# ---------------------------------------------------------------------- the playground


def test_the_playground_turns_events_on_and_off() -> None:
    """Events on: the session's resets name the scheme, each step carries the batches, the
    saved trace keeps it; off again: none; an unknown scheme is refused, unchanged."""
    session = Session()
    session.apply(form_step({"op": "insert", "tokens": "abcdefgh", "input": "text"}))
    data = session.set_events("xxh3_64")
    assert data["eventsScheme"] == "xxh3_64" and data["frames"][0]["events"].startswith("xxh3_64")
    (batch,) = data["frames"][1]["sides"][0]["events"]
    assert batch["lines"][0]["t"].startswith("stored #0 ")
    session.apply(form_step({"op": "reset", "number": 8, "block_size": 2}))
    assert all(json.loads(line)["events"]["scheme"] == "xxh3_64"
               for line in session.trace().splitlines() if '"reset"' in line)  # fmt: skip
    with pytest.raises(PlayError, match="unknown events scheme 'md5'"):
        session.set_events("md5")
    assert session.events == {"scheme": "xxh3_64", "seed": "vllm-none-hash"}
    data = session.set_events("")
    assert data["eventsScheme"] is None and data["frames"][1]["events"] is None
    assert '"events"' not in session.trace()
    opened = Session(scenario("split").steps[:2], events=SCHEME)  # --serve --events TRACE
    assert opened.data["frames"][1]["sides"][0]["events"][0]["lines"][0]["k"] == "stored"


# ---------------------------------------------------------------------- the page


def test_the_page_shows_each_steps_events_marks_and_lights_up_their_blocks(
    browser: Any, tmp_path: Path
) -> None:
    """The events scenario beside EventsNoRemoval in Chromium: every step's panel lists
    each side's events as the Python side computes them; ``d`` goes to the evicting insert,
    where the reference's removal is marked, the mutant's panel names R-EVENT-4 (a link to
    its text), and pointing at the removal lights up the removed blocks' ghost and pool
    cells; the legend explains the marks."""
    recording = beside(TreeAdapter(EventsNoRemoval, "no-removal"))
    views = frame_views(recording)
    path = tmp_path / "events.html"
    path.write_text(build_page(recording, views), encoding="utf-8")
    page = Page(browser, path, views)
    lines = "box => Array.from(box.querySelectorAll('li.event')).map(li => li.textContent)"
    for step in range(len(views)):
        if step:
            page.page.keyboard.press("ArrowRight")
        page.check(step)
        for view in views[step]:
            box = page.page.locator(f'section.side[data-side="{view["name"]}"] .events-box')
            assert box.is_visible()
            want = [("≠ " if line["x"] else "") + {"stored": "+ ", "removed": "\u2212 "}[line["k"]]
                    + line["t"] for batch in view["events"] for line in batch["lines"]]  # fmt: skip
            assert box.evaluate(lines) == want, (step, view["name"])
    page.page.keyboard.press("d")
    step = steps_of("three new blocks, one free")
    page.check(step)
    spec = 'section.side[data-side="reference"]'
    theirs = 'section.side[data-side="no-removal"]'
    head = page.text(f"{theirs} .events-head")
    assert head.startswith("≠ R-EVENT-4") and "(marked ≠;" in head
    assert page.page.locator(f'{theirs} .events-head a.rule[data-rule="R-EVENT-4"]').count() == 1
    removal = page.page.locator(f"{spec} li.event.removed")
    assert "differs" in (removal.get_attribute("class") or "")
    assert page.page.locator(f"{theirs} li.event.removed").count() == 0
    removal.hover()
    lit = page.svg("reference").locator("g.node.event-hover")
    assert lit.evaluate_all("gs => gs.map(g => g.dataset.kind + ':' + g.dataset.blocks)") == [
        "ghost:3 4"
    ]
    cells = page.page.locator(f"{spec} svg.pool rect.cell.event-hover")
    assert sorted(cells.evaluate_all("cs => cs.map(c => +c.dataset.block)")) == [3, 4]
    page.shot("events-no-removal-step-6.png")
    page.page.mouse.move(1, 1)
    assert page.svg("reference").locator("g.node.event-hover").count() == 0
    page.page.click("#legend summary")
    legend = page.text("#legend .events-legend")
    assert "removed, in eviction order" in legend and "#5≠ 7bf09471" in legend
    page.close()


def test_the_playground_page_turns_events_on(browser: Any) -> None:
    """In the browser: choosing a hash scheme in the form records the session again with
    events; an insert typed then lists its store; the legend row appears."""
    server = PlayServer(Session(), 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        page = browser.new_page(viewport=VIEWPORT)
        page.set_default_timeout(30_000)  # a loaded two-core CI machine
        page.goto(server.url)
        assert page.locator(".events-box").is_hidden()
        assert page.locator("#legend .events-legend").is_hidden()
        page.select_option("#play-events", "sha256_cbor")
        page.wait_for_function("!document.querySelector('.events-box').hidden")
        assert page.locator(".events-head").inner_text().startswith("none: a fresh cache")
        page.fill("#play-tokens", "hello world!")
        page.click("#play-go")
        page.wait_for_function("document.body.dataset.live === '2'")
        assert page.locator("li.event.stored").inner_text().startswith("+ stored #0 ")
        assert page.locator("#legend .events-legend").is_visible()
        page.close()
        bad = urllib.request.Request(server.url + "api/events", data=b'{"scheme": 1}')
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(bad, timeout=5)
        assert json.loads(refused.value.read())["error"].startswith('send {"scheme": NAME}')
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_events_scheme_refuses_a_scheme_the_hasher_does_not_know() -> None:
    """The command line refuses one while parsing; the function itself still says why."""
    from kachedb_radix.spec.cli.explain import UsageError, events_scheme
    from kachedb_radix.spec.conform.profile import Profile

    with pytest.raises(UsageError, match="md5"):
        events_scheme("md5", Profile())
    assert events_scheme("", Profile())["scheme"] == "sha256_cbor"
