"""A bug inside the kit: reported as a kit error, never as a pass nor as the candidate's fault.

The kit judges candidates; when the kit itself raises -- a lookup its oracle cannot
answer, a choice it failed to anticipate -- nothing was judged, and saying "pass" or
"disagreement" would be a lie. :class:`KitError` carries what a maintainer needs to fix
it: the exception and its traceback, the steps run up to and including the one that
raised, and the example of the search that led there. ``conform`` and ``replay`` report
it with an exit status of its own (3; a disagreement is 1, a usage error 2) and save the
trace and the traceback (:meth:`KitError.save`).

A candidate that raises something other than a
:class:`~kachedb_radix.spec.conform.candidate.CandidateError` broke the Candidate protocol: that
is a :class:`~kachedb_radix.spec.conform.candidate.CandidateFailure` (its fault), not a kit
error (see :func:`kachedb_radix.spec.conform.steps.apply_step`).
"""

from __future__ import annotations

import json
import traceback
from pathlib import Path
from typing import Any

#: The exit status of a command that met a kit error.
EXIT_KIT_ERROR = 3


class KitError(Exception):
    """An exception inside the kit (see the module docstring).

    Attributes:
        error: the exception, as ``Type: message``.
        traceback: its formatted traceback.
        trace: the steps run, the last one the step that raised (when one did).
        example: the search's example it happened in (1-based), None outside a search.
        where: what the kit was doing (``"a step"``, ``"drawing a step"``, ``"shrinking"``).
    """

    def __init__(
        self,
        error: str,
        trace_text: str,
        trace: list[dict[str, Any]],
        *,
        where: str = "a step",
        example: int | None = None,
    ) -> None:
        super().__init__(f"kit error while {where}: {error}")
        self.error = error
        self.traceback = trace_text
        self.trace = trace
        self.where = where
        self.example = example

    @classmethod
    def of(
        cls, exc: BaseException, trace: list[dict[str, Any]], *, where: str = "a step"
    ) -> KitError:
        """The kit error of ``exc``, raised with ``trace`` run. O(traceback)."""
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(f"{type(exc).__name__}: {exc}", text, [dict(step) for step in trace],
                   where=where)  # fmt: skip

    def headline(self) -> str:
        """One line: what raised, where, in which example."""
        example = f" (example {self.example})" if self.example is not None else ""
        steps = f" at step {len(self.trace)}" if self.trace else ""
        return f"KIT ERROR while {self.where}{steps}{example}: {self.error}"

    def explain(self) -> str:
        """The headline, that it is the kit's bug, and the trace as JSON lines."""
        lines = [
            self.headline(),
            "  this is a bug in kachedb-radix's kit, not a finding on the candidate: nothing "
            "was judged; please report it with the trace and traceback",
        ]
        if self.trace:
            lines.append("trace (JSON lines):")
            lines.extend(json.dumps(step, default=repr) for step in self.trace)
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The kit error as JSON data (``#/$defs/kit_error`` of ``report.schema.json``)."""
        return {
            "error": self.error,
            "where": self.where,
            "example": self.example,
            "trace": json.loads(json.dumps(self.trace, default=repr)),
            "traceback": self.traceback,
        }

    def save(self, directory: Path, stem: str = "kit-error") -> list[Path]:
        """Write the trace (``STEM.jsonl``, replayable) and the traceback with the headline
        (``STEM.txt``) into ``directory`` (made if missing); their paths. O(trace).

        Raises:
            OSError: the files cannot be written.
        """
        directory.mkdir(parents=True, exist_ok=True)
        trace = directory / f"{stem}.jsonl"
        trace.write_text(
            "".join(json.dumps(step, default=repr) + "\n" for step in self.trace),
            encoding="utf-8",
        )
        text = directory / f"{stem}.txt"
        text.write_text(f"{self.headline()}\n\n{self.traceback}", encoding="utf-8")
        return [trace, text]
