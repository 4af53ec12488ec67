"""The gate's second look, in a fresh process: a failing figure's cases measured again by
a new interpreter, so that the figure does not rest on one process's luck.

Why a process and not a second pass in the same one: on a quiet 2-core VM a case's
median is largely a property of the process it is timed in -- where its trees, the
allocator's arenas and the anchor's lists landed -- more than of the minute. The C twin's
``insert/shared/1024`` read 1.75-4.72 us in twenty processes (1.1-1.5x within one), and
the first eviction from 10^6 blocks 483-1,086 ns a block in twenty-nine, with its memory
anchor at 66-155 us that did not follow it. A second pass in the same process repeats
the same layout; a real regression is slow in every process.

Two sides, one module:

* :func:`remeasure` (the parent, ``kachedb-radix gate``): runs
  ``python -m kachedb_radix.spec.cli.gate_fresh`` on the same target and mode with the
  cases to measure, and reads their measurements back. A child that cannot run -- it
  fails, is killed or hangs past its limit, or writes no answer -- raises
  :class:`FreshError`; the gate then measures in its own process, as it did before,
  and says so.
* :func:`main` (the child): builds the plan of the same target and mode, times the cases
  asked for, in plan order, in one pass, and writes them as JSON. Exit 2 on a usage error
  (an unknown target or case).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..conform.candidate import CandidateFailure
from ..conform.targets import TargetError
from ..gate.cases import Plan, build_plan
from ..gate.run import is_measurement, measure_case
from ..gate.timing import FULL_POLICY, QUICK_POLICY
from ..gate.trees import gate_target
from ..gate.verdicts import Measurement
from .options import add_timeout, timeouts

#: Seconds a child may take per case it measures (a quick case takes under a second, a
#: full one a few; a first eviction from 10^6 blocks builds its tree first), and for its
#: start (the interpreter, the imports, the target).
SECONDS_PER_CASE, SECONDS_TO_START = 60.0, 60.0


class FreshError(RuntimeError):
    """The child could not measure; the message says why (one line)."""


@dataclass(frozen=True)
class TargetWords:
    """How the child names the target the parent times: the words of its command line."""

    target: str | None
    cmd: str | None
    timeout: float | None

    def argv(self) -> list[str]:
        """The child's target arguments. O(1)."""
        words = ["--cmd", self.cmd] if self.cmd is not None else [str(self.target)]
        if self.timeout is not None:
            words += ["--timeout", repr(self.timeout)]
        return words


def remeasure(target: TargetWords, quick: bool, names: Sequence[str]) -> dict[str, Measurement]:
    """Measure the cases ``names`` of ``target`` (quick or full mode) once each, in one
    pass of a fresh interpreter. Cost: a process start plus the cases' own time.

    Raises:
        FreshError: the child failed, timed out, or answered something other than one
            measurement per case asked for.
    """
    with tempfile.TemporaryDirectory(prefix="kachedb-radix-gate-") as folder:
        out = Path(folder) / "measured.json"
        command = [sys.executable, "-m", __name__, *target.argv(), "--out", str(out)]
        command += ["--quick"] if quick else []
        command += [word for name in names for word in ("--case", name)]
        limit = SECONDS_TO_START + SECONDS_PER_CASE * len(names)
        try:
            done = subprocess.run(
                command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=limit
            )
        except subprocess.TimeoutExpired:
            raise FreshError(f"the fresh process took over {limit:g} s") from None
        except OSError as exc:
            raise FreshError(f"the fresh process did not start: {exc}") from None
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise FreshError(f"the fresh process exited {done.returncode}: {last}")
        try:
            answer = json.loads(out.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise FreshError(f"the fresh process wrote no answer: {exc}") from None
    if not isinstance(answer, dict) or set(answer) != set(names):
        raise FreshError("the fresh process did not answer for exactly the cases asked")
    if not all(is_measurement(value) for value in answer.values()):
        raise FreshError("the fresh process answered something that is not a measurement")
    return {name: Measurement(**answer[name]) for name in names}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kachedb_radix.spec.cli.gate_fresh",
        description="Measure some of the gate's cases once, in this process, as JSON "
        "(the gate's fresh-process re-measure; not a command for users).",
    )
    parser.add_argument("target", nargs="?", metavar="TARGET")
    parser.add_argument("--cmd")
    add_timeout(parser, "per answer of --cmd")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--case", action="append", required=True, dest="cases", metavar="NAME")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The child: time the cases asked for, in plan order, and write them to ``--out``.
    Returns 0, or 2 for a usage error (the target, or a case the plan does not have)."""
    args = _parser().parse_args(argv)
    if (args.target is None) == (args.cmd is None):
        print("gate_fresh: give a TARGET or --cmd, not both", file=sys.stderr)
        return 2
    try:
        target = gate_target(args.target, args.cmd, timeouts(args.timeout))
    except (TargetError, CandidateFailure) as exc:
        print(f"gate_fresh: {exc}", file=sys.stderr)
        return 2
    try:
        plan: Plan = build_plan(target, args.quick)
        by_name = {case.name: case for case in plan.cases}
        unknown = [name for name in args.cases if name not in by_name]
        if unknown:
            print(f"gate_fresh: no {plan.mode} case named {unknown[0]!r}", file=sys.stderr)
            return 2
        policy = QUICK_POLICY if args.quick else FULL_POLICY
        wanted = set(args.cases)
        measured = {
            case.name: vars(measure_case(case, policy))
            for case in plan.cases
            if case.name in wanted
        }
    finally:
        target.close()
    args.out.write_text(json.dumps(measured) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover - run as a child process
    sys.exit(main())
