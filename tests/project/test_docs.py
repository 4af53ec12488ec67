"""The documentation stays true: every page's examples run and its commands exist.

For the README, every ``docs/*.md`` page and ``benchmarks/README.md``: each ``python``
block executes; each ``kachedb-radix`` command line (in a ``console`` block or opening a
command-table row) is accepted by the real argument parser, so renaming a flag breaks
this test; each relative link and image names a file (and heading) that exists. A
curated handful of the pages' commands run end to end, with small inputs.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest

from kachedb_radix.spec.cli.main import build_parser
from kachedb_radix.spec.conform import profile
from tests.support import docs
from tests.support.paths import ROOT

PAGE_IDS = [docs.relative(page) for page in docs.PAGES]


def test_the_pages_are_the_documentation() -> None:
    """The page list is not empty by accident: the README and the docs it links."""
    names = set(PAGE_IDS)
    assert {"README.md", "benchmarks/README.md", "docs/conformance.md", "docs/simulate.md"} <= names
    assert len(names) >= 9


@pytest.mark.parametrize("page", docs.PAGES, ids=PAGE_IDS)
def test_python_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``python`` block executes as written, each in a fresh namespace."""
    monkeypatch.chdir(tmp_path)  # an example that writes a file leaves the checkout alone
    for number, example in enumerate(docs.blocks(page.read_text(), "python"), 1):
        exec(compile(example, f"{page}, python block {number}", "exec"), {})


def test_the_examples_are_found() -> None:
    """The block reader finds the examples the pages hold (the test above runs them)."""
    found = {docs.relative(page): docs.blocks(page.read_text(), "python") for page in docs.PAGES}
    assert len(found["README.md"]) >= 1
    assert len(found["docs/semantics.md"]) >= 1
    assert sum(len(examples) for examples in found.values()) >= 2


@pytest.mark.parametrize("page", docs.PAGES, ids=PAGE_IDS)
def test_profile_blocks_load(page: Path) -> None:
    """Every ``toml`` block is a deviation profile the kit accepts, word for word."""
    for number, body in enumerate(docs.blocks(page.read_text(), "toml"), 1):
        profile.parse(tomllib.loads(body), f"{page}, toml block {number}")


def test_readme_shows_the_profile_keys() -> None:
    """The README's kit section shows the keys that declare an engine's inputs (issue 21)."""
    (body,) = docs.blocks(_readme(), "toml")
    loaded = profile.parse(tomllib.loads(body))
    assert loaded.token_limit == 2**31 and loaded.match_cap == "last_token"
    assert loaded.namespace_aliases, "the namespaces table folds no name"


def _strict_parser() -> argparse.ArgumentParser:
    """The command line's parser, taking options only as spelled in full.

    argparse accepts any unambiguous prefix of an option, so a page still writing
    ``--timeline`` would pass after a rename to ``--timeline-capacity``; not here.
    """
    parser = build_parser()
    parsers = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            parsers.extend(action.choices.values())
    for each in parsers:
        each.allow_abbrev = False
    return parser


#: Placeholders the pages write for an input file, and a file of the checkout that stands
#: in for them (an option checked where it is parsed refuses a path that is not there);
#: the public Mooncake trace is outside the checkout, its first 300 lines inside.
MOONCAKE_HEAD = str(ROOT / "tests" / "data" / "mooncake_head.jsonl")
INPUT_PLACEHOLDERS = {
    "TRACE": MOONCAKE_HEAD,
    "mooncake_synthetic_trace.jsonl": MOONCAKE_HEAD,
    "path/to/config.json": str(ROOT / "tests" / "data" / "qwen3-0.6b-config.json"),
}


def _parse_error(arguments: list[str]) -> str | None:
    """Why the command line's parser refuses ``arguments``, or None when it accepts them.

    Input files are checked while parsing (issue 32); a page's ``TRACE`` or
    ``my-cache.toml`` (or ``perf/gate.json``'s folder) is the reader's own, so a file or
    folder the checkout lacks is no refusal of the command's spelling (one it has, such
    as a shipped profile, is read)."""
    arguments = [INPUT_PLACEHOLDERS.get(word, word) for word in arguments]
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            _strict_parser().parse_args(arguments)
    except SystemExit as stop:
        if stop.code not in (0, None):  # --help and --version stop with status 0
            refusal = errors.getvalue().strip().splitlines()[-1]
            theirs = (": no such file (", ": no directory ")  # the reader's files and folders
            return None if any(said in refusal for said in theirs) else refusal
    return None


@pytest.mark.parametrize("page", docs.PAGES, ids=PAGE_IDS)
def test_commands_parse(page: Path) -> None:
    """Each ``kachedb-radix`` command a page shows is one the command line accepts."""
    refused = []
    for command in docs.commands(page.read_text()):
        arguments = docs.cli_arguments(docs.argv(command))
        if arguments is not None and (error := _parse_error(arguments)) is not None:
            refused.append(f"{command}\n    {error}")
    assert not refused, f"{docs.relative(page)}: commands the parser refuses:\n" + "\n".join(
        refused
    )


@pytest.mark.parametrize("page", docs.PAGES, ids=PAGE_IDS)
def test_python_modules_exist(page: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ``python -m MODULE`` a page shows names a module that is there (from a clone)."""
    monkeypatch.syspath_prepend(str(ROOT))  # the commands run at the root of a clone
    missing = []
    for command in docs.commands(page.read_text()):
        words = docs.argv(command)
        if words[:2] == ["python", "-m"] and importlib.util.find_spec(words[2]) is None:
            missing.append(command)
    assert not missing, f"{docs.relative(page)}: no such module in {missing}"


def test_commands_are_found() -> None:
    """The command reader sees the pages' commands, prompted, continued and in tables."""
    found = {docs.relative(page): docs.commands(page.read_text()) for page in docs.PAGES}
    cli = [c for page in found.values() for c in page if docs.cli_arguments(docs.argv(c))]
    assert len(cli) >= 40
    assert "kachedb-radix simulate" in found["README.md"]  # the main job, a console block
    assert "kachedb-radix demo" in found["README.md"]  # a command table
    simulate = found["docs/simulate.md"]
    assert any(c.startswith("kachedb-radix simulate mooncake_synthetic") for c in simulate)
    assert not any(c.startswith(("embedded workload", "┏", "│")) for c in simulate)  # output
    continued = "kachedb-radix explain docs/explain/lru-reversed.jsonl --target"
    assert any(c.startswith(continued) for c in found["docs/explain.md"])


def test_the_parser_check_can_fail() -> None:
    """A renamed flag, a missing value, an unknown subcommand: each is refused."""
    assert _parse_error(["simulate", "--capacity", "1000"]) is None
    assert _parse_error(["--version"]) is None
    # (after the trace: a word taken for a missing trace would be the reader's file)
    assert _parse_error(["simulate", "TRACE", "--capacities", "1000"]) is not None
    assert _parse_error(["simulate", "TRACE", "--capac", "1000"]) is not None  # a prefix
    assert _parse_error(["gate", "accel"]) is not None  # --baseline is required
    assert _parse_error(["simulat"]) is not None
    assert _parse_error(["replay", "TRACE"]) is None  # the reader's file
    assert _parse_error(["replay", "docs"]) is not None  # a directory is no trace


def test_the_readers_handle_prompts_continuations_and_comments() -> None:
    """The command reader on a made-up block: what it keeps and what it drops."""
    body = "\n".join(
        [
            "$ kachedb-radix conform accel \\",
            "    --first   # stop early",
            "a line of output",
            "$ FUZZ_RUNS=10 bash accel/fuzz.sh",
        ]
    )
    (first, second) = docs.console_commands(body)
    assert docs.cli_arguments(docs.argv(first)) == ["conform", "accel", "--first"]
    assert docs.cli_arguments(docs.argv(second)) is None
    quoted = 'python -m kachedb_radix.spec conform --cmd "./x --stdio" # x'
    assert docs.cli_arguments(docs.argv(quoted)) == ["conform", "--cmd", "./x --stdio"]
    table = "| command | what |\n| --- | --- |\n| `kachedb-radix gate T --baseline F [-q]` | x |\n"
    assert docs.table_commands(table) == ["kachedb-radix gate T --baseline F -q"]


@pytest.mark.parametrize("page", docs.PAGES, ids=PAGE_IDS)
def test_links_resolve(page: Path) -> None:
    """Every relative link and image names a file that exists, and a heading that does."""
    assert docs.broken_links(page) == []


def test_the_link_check_can_fail(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## Capacity planning: `simulate`\n")
    page.write_text(
        "# Page\n\n[ok](other.md#capacity-planning-simulate) [ok](#page) [web](https://x.invalid)\n"
        "[gone](missing.md) ![gone](img/none.png) [gone](other.md#nowhere) [gone](#nowhere)\n"
        "`[code](ignored.md)`\n"
    )
    assert [problem.split(":")[0] for problem in docs.broken_links(page)] == [
        "missing.md",
        "img/none.png",
        "other.md#nowhere",
        "#nowhere",
    ]


def test_the_readme_links_every_page() -> None:
    """Each docs page is reachable from the README."""
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in docs.links(_readme())}
    missing = [docs.relative(page) for page in docs.PAGES[1:] if page.resolve() not in linked]
    assert not missing, f"README.md does not link {missing}"


def _readme() -> str:
    return (ROOT / "README.md").read_text()


# -- a few commands, run for real ------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One command a page shows, run end to end as a user would type it.

    ``command`` must be on ``page``, word for word, comments aside (so the run tests
    the page, not a command of its own); ``fill`` gives the page's placeholders a
    value; ``small`` is appended to keep the run short. The paths it names that exist
    in the checkout are passed as absolute paths; the rest (its outputs) land in a
    temporary folder.
    """

    page: str
    command: str
    status: int = 0
    fill: tuple[tuple[str, str], ...] = ()
    small: tuple[str, ...] = ()
    prints: str = ""
    writes: tuple[str, ...] = ()
    report_json: bool = False


RUNS = [
    Run("README.md", "kachedb-radix demo", prints="namespace (default)"),
    Run("README.md", "kachedb-radix simulate",
        small=("--requests", "200", "--executor", "serial", "--quiet"),
        prints="embedded workload (seed 0): 200 requests"),
    Run("README.md", "kachedb-radix simulate TRACE --capacity 1000,10k --out DIR",
        fill=(("TRACE", "tests/data/mooncake_head.jsonl"),), small=("--executor", "serial"),
        prints="300 requests (mooncake", writes=("DIR/results.json", "DIR/results.csv")),
    Run("README.md", "kachedb-radix conform reference accel", small=("--examples", "5")),
    Run("docs/explain.md", "kachedb-radix explain --scenario split --html split.html",
        writes=("split.html",)),
    Run("README.md", "kachedb-radix gate accel --baseline benchmarks/baseline-accel.json --quick",
        small=("--only", "memory/one_edge"), prints="GATE PASSED"),
    Run("README.md", "kachedb-radix route --demo",
        small=("--requests", "60", "--workers", "2", "--blocks", "300", "--plain"),
        prints="routed by prefix"),
    Run("docs/events.md", "kachedb-radix route --demo --plain", small=("--requests", "200"),
        prints="the index holds exactly each worker's blocks"),
    Run("docs/conformance.md", "kachedb-radix conform accel --json", small=("--examples", "5"),
        report_json=True),
    Run("docs/conformance.md", "kachedb-radix replay TRACE --target accel",
        fill=(("TRACE", "spec/vectors/full.jsonl"),)),
    Run("docs/conformance.md", "kachedb-radix serve --impl reference"),
    Run("docs/conformance.md", "kachedb-radix conform --index reference accel dynamo",
        status=1, small=("--examples", "60"), prints="R-ROUTE-2 (wrong)"),
    Run("docs/explain.md", "kachedb-radix explain --scenario eviction", prints="evict"),
    Run("docs/explain.md", "kachedb-radix explain spec/vectors/full.jsonl --events xxh3_64",
        prints="+ stored #0 "),
    # The page says it: the planted event bug differs first at the evicting insert.
    Run("docs/explain.md",
        "kachedb-radix explain --scenario events"
        " --target kachedb_radix.spec.mutants.events:EventsNoRemoval",
        status=1, prints="≠ - removed, in this order: #4"),
    Run("docs/explain.md", "kachedb-radix explain --scenario split --svg slides/",
        writes=("slides",)),
    Run("docs/explain.md", "kachedb-radix explain spec/vectors/full.jsonl --html full.html",
        writes=("full.html",)),
    # The page says it: a step where the mutant differs makes the exit status 1.
    Run("docs/explain.md",
        "kachedb-radix explain docs/explain/lru-reversed.jsonl"
        " --target kachedb_radix.spec.mutants.eviction:LruReversed --html lru.html",
        status=1, writes=("lru.html",)),
]  # fmt: skip


def _program(word: str) -> list[str]:
    if word == "kachedb-radix":
        script = shutil.which("kachedb-radix", path=os.path.dirname(sys.executable))
        assert script is not None, "the install did not put kachedb-radix beside python"
        return [script]
    assert word == "python", word
    return [sys.executable]


@pytest.mark.parametrize("run", RUNS, ids=[f"{run.page}: {run.command[:60]}" for run in RUNS])
def test_page_commands_run(run: Run, tmp_path: Path) -> None:
    words = docs.argv(run.command)
    shown = [docs.argv(command) for command in docs.commands((ROOT / run.page).read_text())]
    assert words in shown, f"{run.page} no longer shows {run.command!r}"
    if os.environ.get("KACHEDB_RADIX_PURE") == "1" and "accel" in " ".join(words):
        pytest.skip("KACHEDB_RADIX_PURE=1: accel is not built")
    values = dict(run.fill)
    arguments = []
    for word in words[1:]:
        word = values.get(word, word)
        arguments.append(str(ROOT / word) if (ROOT / word).is_file() else word)
    done = subprocess.run(
        [*_program(words[0]), *arguments, *run.small],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == run.status, done.stdout[-2000:] + done.stderr[-2000:]
    assert run.prints in done.stdout
    for name in run.writes:
        written = tmp_path / name
        made = written.is_file() or (written.is_dir() and any(written.iterdir()))
        assert made, f"{name} was not written"
    if run.report_json:
        schema = json.loads((ROOT / "spec" / "conform" / "report.schema.json").read_text())
        jsonschema.Draft202012Validator(schema).validate(json.loads(done.stdout))
