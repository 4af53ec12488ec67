"""``kachedb-radix hash``: the hashes an engine's router matches a prompt's blocks on.

::

    kachedb-radix hash --engine vllm --block-size 16 [--namespace NS] TOKEN...
    kachedb-radix hash --engine dynamo --block-size 4 --namespace t 1 2 3 4
    15267997549211084293

One line per whole block of the tokens, the hash in decimal: what that engine's own
router matches a request on at its defaults (:mod:`kachedb_radix.reference.events.engines`)
-- its events' block hashes for vLLM, SGLang and this project's trees, and for Dynamo
the local block hashes its radix tree walks (``--events``: the hashes its events carry,
Dynamo's sequence hashes).  The first tool to reach for when routing misses: hash a
prompt as the router does, and compare with what a worker's events say it stored
(vLLM at its defaults hashes with ``sha256``, not ``sha256_cbor``; an empty
``--namespace`` is no salt for vLLM and Dynamo).

Exit status: 0 done, 2 a usage error (a message, never a traceback): an unknown
engine, a block size or token out of range, fewer tokens than a block, a LoRA adapter
for an engine whose hashes here do not name one.
"""

from __future__ import annotations

import argparse
import sys

from kachedb_radix.reference.errors import InvalidArgumentError
from kachedb_radix.reference.events import DEFAULT_ENGINE, ENGINE_NAMES, engine_preset
from kachedb_radix.reference.tokens import TOKEN_LIMIT

from ..inputs import LIMITS, count

EXIT_OK = 0
EXIT_USAGE = 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``hash`` subcommand to a CLI's subparsers."""
    block_cap = LIMITS["block_size"]
    parser = subparsers.add_parser(
        "hash",
        help="print the hash an engine's router matches on for each whole block of tokens",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--engine",
        choices=ENGINE_NAMES,
        default=DEFAULT_ENGINE,
        help=f"the engine whose hashes to print (default: {DEFAULT_ENGINE})",
    )
    parser.add_argument(
        "--block-size",
        type=count(1, block_cap.maximum),
        default=None,
        help=f"tokens per block (default: the engine's own; {block_cap.describe()})",
    )
    parser.add_argument(
        "--namespace", default=None, help="the cache salt / namespace (default: none)"
    )
    parser.add_argument(
        "--lora", default=None, help="the LoRA adapter's name (dynamo, whose hashes name it)"
    )
    parser.add_argument(
        "--events",
        action="store_true",
        help="print the hashes the engine's events carry (for dynamo: its sequence hashes)",
    )
    parser.add_argument(
        "tokens",
        nargs="+",
        type=count(0, TOKEN_LIMIT - 1),
        metavar="TOKEN",
        help=f"token ids, 0 to {TOKEN_LIMIT - 1:,}",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print the hashes (see the module docstring); returns the exit status."""
    preset = engine_preset(args.engine)
    size = preset.block_size if args.block_size is None else args.block_size
    tokens: list[int] = args.tokens
    if len(tokens) < size:
        print(
            f"kachedb-radix hash: {len(tokens)} tokens make no whole block of {size} "
            f"(--block-size; {preset.name}'s own is {preset.block_size})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    hashes = preset.event_hashes if args.events else preset.router_hashes
    try:
        found = hashes(tokens, size, args.namespace, args.lora)
    except InvalidArgumentError as exc:
        print(f"kachedb-radix hash: {exc}", file=sys.stderr)
        return EXIT_USAGE
    lines = (f"{h if isinstance(h, int) else int.from_bytes(h, 'big')}\n" for h in found)
    sys.stdout.write("".join(lines))
    return EXIT_OK
