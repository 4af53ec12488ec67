"""Schemathesis hooks for the toolbox's HTTP services (``SCHEMATHESIS_HOOKS``): the
checks the issue asks for beyond Schemathesis's own -- no empty reply, and every JSON
answer strict JSON (no ``NaN`` or ``Infinity``, which Python's ``json`` would accept)."""

from __future__ import annotations

import json
import os

import requests
import schemathesis


def _refuse(name: str) -> float:
    raise AssertionError(f"the answer holds {name}, which is not JSON")


@schemathesis.check
def strict_json_answer(ctx: object, response: schemathesis.Response, case: object) -> None:
    """A non-empty body; strict JSON when it says it is JSON."""
    if not response.content:
        raise AssertionError("an empty reply")
    kind = ",".join(response.headers.get("content-type", []))
    if kind.startswith("application/json"):
        try:
            json.loads(response.content, parse_constant=_refuse)
        except ValueError as exc:
            raise AssertionError(f"not JSON: {exc}") from None


#: With ``KACHEDB_RADIX_PLAYGROUND_FRESH=N``, the playground's session is replaced by a
#: one-step trace every N calls: the playground records the whole session again after
#: each change, so a session grown by thousands of generated steps would spend the run's
#: time budget recording (a full session is tested on its own, tests/explain).
_FRESH_EVERY = int(os.environ.get("KACHEDB_RADIX_PLAYGROUND_FRESH", "0"))
_calls = 0


@schemathesis.hook
def after_call(ctx: object, case: object, response: schemathesis.Response) -> None:
    """Keep the playground's session short (see ``_FRESH_EVERY``)."""
    global _calls
    if not _FRESH_EVERY:
        return
    _calls += 1
    if _calls % _FRESH_EVERY == 0:
        scheme, _, rest = str(response.request.url).partition("://")
        base = f"{scheme}://{rest.split('/', 1)[0]}"
        fresh = '{"op": "reset", "num_blocks": 24, "block_size": 4}\n'
        requests.post(f"{base}/api/load", data=fresh, timeout=30)
