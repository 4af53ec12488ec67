"""``kachedb-radix explain``: step through a trace or a scenario, on the reference and
beside it another implementation.

``explain [TRACE | --scenario NAME] [--html OUT.html] [--svg DIR] [--text] [--target T | --cmd
'PROGRAM ARGS'] [--profile FILE] [--events [SCHEME]]``. Without an output option the steps are
printed (``--text``).
``explain --serve [TRACE | --scenario NAME] [--port N]`` starts the playground instead
(:mod:`kachedb_radix.spec.explain.serve`): a local web server on the reference, until Ctrl-C.
``--target``/``--cmd`` name another implementation the way ``conform`` does
(:mod:`kachedb_radix.spec.conform.targets`); it runs beside the reference and every step where it
parts ways is marked. ``--profile`` compares it under a deviation profile, as ``conform --profile``
does (a peer such as ``sglang`` brings its own; ``--profile strict`` for none): its declared policy
differences are followed rather than marked. ``--events`` shows each step's KV event batches
(every reset names the hash scheme, the target's own by default, as ``conform --events`` does; a
trace whose reset names one shows them without it).

Exit status: 0 done (and the target agrees), 1 the target differs or failed,
2 a usage error (unknown scenario, unreadable or empty trace, bad target, unwritable
output). Every option is checked when the command line is parsed
(:mod:`kachedb_radix.spec.inputs`), its caps stated in ``--help``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kachedb_radix.reference.events import SCHEMES

from ..conform.candidate import Candidate, CandidateFailure
from ..conform.operations import BY_NAME
from ..conform.profile import Profile, ProfileError
from ..conform.profile import parse as parse_profile
from ..conform.replay import TraceError, read_trace, refusal
from ..conform.steps import Step
from ..conform.targets import ProfileSpec, TargetError, command, resolve
from ..explain import (
    SCENARIOS,
    RecordError,
    Recording,
    build_page,
    frame_views,
    record,
    scenario,
    slide,
    text_report,
)
from ..explain.events import with_events
from ..explain.view import exit_differs
from ..inputs import LIMITS, count, input_path, output_dir, output_file
from .options import add_timeout, profile_option, timeouts

EXIT_OK = 0
EXIT_DIFFERS = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """A command line that cannot be carried out; the message says why."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``explain`` subcommand to a CLI's subparsers."""
    parser = subparsers.add_parser(
        "explain",
        help="step through a trace or a scenario: the tree, what changed and which rule decided",
        description="Run TRACE (the kit's JSON lines) or a built-in scenario on the reference "
        "(and a target beside it) and show every step: an HTML page to step through, one SVG "
        "per step, or text.",
    )
    parser.add_argument(
        "trace",
        nargs="?",
        type=input_path,
        metavar="TRACE",
        help=f"a JSON-lines trace ({LIMITS['trace_bytes'].describe()}, "
        f"{LIMITS['trace_steps'].describe()}, each pool "
        f"{LIMITS['explain_pool_blocks'].describe()})",
    )
    parser.add_argument(
        "--scenario", choices=list(SCENARIOS), help="a built-in scenario instead of a trace"
    )
    parser.add_argument("--html", type=output_file, metavar="OUT.html", help="write the page here")
    parser.add_argument("--svg", type=output_dir, metavar="DIR", help="write one SVG per step here")
    parser.add_argument("--text", action="store_true", help="print the steps (the default)")
    parser.add_argument(
        "--save-trace",
        type=output_file,
        metavar="FILE",
        help="also write the steps as a JSON-lines trace",
    )
    parser.add_argument("--target", help="run beside the reference: accel or module:attribute")
    parser.add_argument("--cmd", metavar="'PROGRAM ARGS'", help="... or a stdio program")
    parser.add_argument(
        "--profile",
        type=profile_option,
        metavar="FILE",
        help="compare the target under this deviation profile (TOML, spec/conform/profile.py; "
        "'strict' for none; default: the target's own, e.g. sglang's)",
    )
    parser.add_argument(
        "--events",
        nargs="?",
        const="",
        default=None,
        choices=("", *SCHEMES),
        metavar="SCHEME",
        help="show the KV event batches each side emits per step (R-EVENT-*): every reset "
        "names the hash scheme SCHEME (default: the target's profile's [events], else "
        "sha256_cbor), as conform --events does",
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        help="start the playground: a local web server on the reference (Ctrl-C stops it)",
    )
    parser.add_argument(
        "--port",
        type=count(0, 65535),
        default=8765,
        help="the playground's port on 127.0.0.1, 0 to 65535 (default 8765; 0 for any free one)",
    )
    add_timeout(parser, "per answer of --target or --cmd")
    parser.set_defaults(handler=run_explain)


def run_explain(args: argparse.Namespace) -> int:
    """The ``explain`` subcommand. Returns the exit status."""
    if args.serve:
        return _serve(args)
    try:
        steps, title, source, lesson = _steps(args)
        target, profile = open_target(args.target, args.cmd, args.timeout, args.profile)
        try:
            if args.events is not None:
                steps = with_events(steps, events_scheme(args.events, profile), replace=True)
                if target is not None and "events" not in target.levels:
                    raise UsageError(
                        f"--events: {target.name} does not declare the events level "
                        "(it emits no KV events the kit can read)"
                    )
            if target is not None:
                _builds(target, steps)
            recording = record(
                steps,
                target,
                title=title,
                source=source if profile.strict else f"{source} (profile {profile.name})",
                lesson=lesson,
                profile=None if profile.strict else profile,
            )
        finally:
            if target is not None:
                target.close()
        views = frame_views(recording)
        _write(args, recording, steps, views)
    except (UsageError, RecordError) as exc:
        print(f"explain: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # The steps' rulings (the kit's finding list, spec/explain/ruling.py) decide, as the page says.
    return EXIT_DIFFERS if exit_differs(views) else EXIT_OK


def _builds(target: Candidate, steps: list[Step]) -> None:
    """A target that builds an optional part at its first reset naming KV events (SGLang's
    event hashes, built with pybind11 and a C++ compiler) and cannot: a one-line message,
    before anything is recorded (the kit would file it as the target failing). Cost: one
    reset of the target.

    Raises:
        UsageError: the part cannot be built (the target's own message says what is missing).
    """
    first = next((step for step in steps if BY_NAME[step["op"]].resets and step.get("events")),
                 None)  # fmt: skip
    if first is None:
        return
    try:
        target.reset(first["num_blocks"], first["block_size"], events=first["events"])
    except ImportError as exc:
        raise UsageError(f"{target.name}: {exc}") from None
    except (Exception, CandidateFailure):
        return  # the recording says how the target answers it


def _serve(args: argparse.Namespace) -> int:
    """``explain --serve``: the playground until Ctrl-C (or SIGTERM). Returns the exit status."""
    import signal

    from ..explain.serve import PlayError, PlayServer, Session

    if args.target is not None or args.cmd is not None or args.profile is not None:
        print("explain: --serve runs the reference alone (no --target, --cmd or --profile)",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    try:
        steps = None
        title = "playground"
        if args.trace is not None or args.scenario is not None:
            steps, title, _, _ = _steps(args)
        events = None if args.events is None else events_scheme(args.events, Profile())
        session = Session(steps, title, events=events)
    except (UsageError, PlayError) as exc:
        print(f"explain: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        server = PlayServer(session, args.port)
    except OSError as exc:
        taken = "is taken (another server?)" if exc.errno == 98 else f"cannot be used ({exc})"
        print(
            f"explain: port {args.port} on 127.0.0.1 {taken}: choose another with --port, "
            "or --port 0 for any free one",
            file=sys.stderr,
        )
        return EXIT_USAGE
    # Ctrl-C and SIGTERM stop it alike (SIGINT too where a shell started it ignored).
    previous = signal.signal(signal.SIGTERM, _stop), signal.signal(signal.SIGINT, _stop)
    print(f"playground: {server.url}  (the reference; Ctrl-C stops it)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
        server.server_close()
    print("playground stopped", flush=True)
    return EXIT_OK


def _stop(_signal: int, _frame: object) -> None:
    """SIGTERM ends the playground as Ctrl-C does: the server closes, no traceback."""
    raise KeyboardInterrupt


def _steps(args: argparse.Namespace) -> tuple[list[Step], str, str, str]:
    if (args.trace is None) == (args.scenario is None):
        raise UsageError("give a TRACE file or --scenario NAME (one of them)")
    if args.scenario is not None:
        chosen = scenario(args.scenario)
        return chosen.steps, chosen.title, f"--scenario {chosen.name}", chosen.lesson
    try:
        steps = read_trace(args.trace)
    except TraceError as exc:
        raise UsageError(f"cannot read the trace: {exc}") from None
    _check_pools(steps, str(args.trace), compared=args.target is not None or args.cmd is not None)
    return steps, args.trace.name, str(args.trace), ""


def _check_pools(steps: list[Step], source: str, *, compared: bool) -> None:
    """What explain can draw: every reset's pool at most ``LIMITS["explain_pool_blocks"]``
    blocks (each block is drawn), and no step after a reset the reference refuses (it has
    no tree to run on; the refusal itself is shown, alone: with a target ``compared``
    beside it there is nothing to compare). Cost: building each reset's tree.

    Raises:
        UsageError: naming the step.
    """
    cap = LIMITS["explain_pool_blocks"].maximum
    refused: str | None = None
    for number, step in enumerate(steps, 1):
        if step["op"] == "reset":
            blocks = step["num_blocks"]
            if isinstance(blocks, int) and not isinstance(blocks, bool) and blocks > cap:
                raise UsageError(
                    f"{source}: step {number}: a pool of {blocks:,} blocks; explain draws "
                    f"every block, {LIMITS['explain_pool_blocks'].describe()}"
                )
            refused = refusal(step)
            if refused is not None and compared:
                raise UsageError(
                    f"{source}: step {number}: the reference refuses this reset ({refused}): "
                    "there is no tree to compare the target with"
                )
        elif refused is not None:
            raise UsageError(
                f"{source}: step {number} follows a reset the reference refuses ({refused}): "
                "there is no tree to run it on"
            )


def events_scheme(scheme: str, profile: Profile) -> dict[str, str]:
    """The events scheme ``--events [SCHEME]`` names: ``scheme`` ("" for the profile's
    own, else sha256_cbor) with the profile's seed, checked as a profile's ``[events]``
    is. O(1).

    Raises:
        UsageError: a scheme the hasher does not know.
    """
    spec = dict(profile.events)
    if scheme:
        spec["scheme"] = scheme
    try:
        return dict(parse_profile({"events": spec}, "--events").events)
    except ProfileError as exc:
        raise UsageError(str(exc)) from None


def open_target(
    target: str | None, cmd: str | None, timeout: float | None, profile: ProfileSpec = None
) -> tuple[Candidate | None, Profile]:
    """The candidate named by ``--target`` or ``--cmd`` (None for neither), resolved as the kit
    resolves them (:mod:`kachedb_radix.spec.conform.targets`), and the deviation profile to compare
    it under: ``profile`` (a file or ``"strict"``), else the target's own. Cost: an import, or
    starting the program; reading the profile. ``timeout`` None means the defaults
    (:func:`~kachedb_radix.spec.cli.options.timeouts`).

    Raises:
        UsageError: both given, a profile without a target, an unknown target, a bad
            profile, or a program that does not start.
    """
    if target is not None and cmd is not None:
        raise UsageError("give --target or --cmd, not both")
    if profile is not None and target is None and cmd is None:
        raise UsageError("--profile needs a --target or --cmd to compare")
    try:
        per_call, startup = timeouts(timeout)
        if cmd is not None:
            resolved = command(cmd, timeout=per_call, profile=profile, startup_timeout=startup)
        elif target is not None:
            resolved = resolve(target, profile=profile)
        else:
            return None, Profile()
        return resolved.open(), resolved.profile
    except (TargetError, ProfileError) as exc:
        raise UsageError(str(exc)) from None
    except CandidateFailure as exc:
        raise UsageError(f"--cmd {cmd}: {exc}") from None


def _write(
    args: argparse.Namespace, recording: Recording, steps: list[Step], views: list[Any]
) -> None:
    try:
        if args.save_trace is not None:
            lines = [json.dumps(step) for step in steps]
            args.save_trace.write_text("\n".join(lines) + "\n", encoding="utf-8")
        if args.html is not None:
            args.html.write_text(build_page(recording, views), encoding="utf-8")
            print(f"wrote {args.html} ({len(recording.frames)} steps)")
        if args.svg is not None:
            args.svg.mkdir(parents=True, exist_ok=True)
            digits = len(str(len(recording.frames)))
            for frame, row in zip(recording.frames, views, strict=True):
                heading = [f"{recording.title}: step {frame.number}/{len(recording.frames)}"]
                if frame.step.get("note"):
                    heading.append(str(frame.step["note"]))
                for view in row:
                    name = f"step-{frame.number:0{digits}d}-{_safe(view['name'])}.svg"
                    (args.svg / name).write_text(slide(view, heading, frame.number - 1))
            print(f"wrote {len(recording.frames)} steps as SVG to {args.svg}")
    except OSError as exc:
        raise UsageError(f"cannot write: {exc}") from None
    if args.text or (args.html is None and args.svg is None):
        print(text_report(recording, views))


def _safe(name: str) -> str:
    return "".join(char if char.isalnum() or char in "-_." else "_" for char in name)
