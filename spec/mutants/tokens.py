"""Mutants of token validation (R-TOK-*) and of the order errors are reported in."""

from __future__ import annotations

from kachedb_radix.reference.errors import TokenRangeError, TokenTypeError
from kachedb_radix.reference.namespaces import check_namespace
from kachedb_radix.reference.tokens import TOKEN_LIMIT, as_token_list

from .base import MutantTree, mutant


@mutant("no_trailing_validation", "R-TOK-5")
class NoTrailingValidation(MutantTree):
    """Tokens in the trailing partial block are never validated."""

    def _validate(self, tokens: object, namespace: object) -> list[int]:
        if isinstance(tokens, list):
            whole = len(tokens) // self._block_size * self._block_size
            return super()._validate(tokens[:whole], namespace)
        return super()._validate(tokens, namespace)


@mutant("bool_token_accepted", "R-TOK-2")
class BoolTokenAccepted(MutantTree):
    """``True``/``False`` are accepted as the tokens 1 and 0."""

    def _validate(self, tokens: object, namespace: object) -> list[int]:
        if isinstance(tokens, list):
            tokens = [int(token) if isinstance(token, bool) else token for token in tokens]
        return super()._validate(tokens, namespace)


@mutant("token_limit_off_by_one", "R-TOK-1", "R-TOK-3")
class TokenLimitOffByOne(MutantTree):
    """The range check admits 2**32 (``<=`` instead of ``<``)."""

    def _validate(self, tokens: object, namespace: object) -> list[int]:
        if isinstance(tokens, list) and TOKEN_LIMIT in tokens:
            super()._validate([0 if token == TOKEN_LIMIT else token for token in tokens], namespace)
            return list(tokens)
        return super()._validate(tokens, namespace)


@mutant("range_reported_as_type", "R-TOK-3", "R-ERR-3")
class RangeReportedAsType(MutantTree):
    """An out-of-range token is reported with the wrong kind (token_type)."""

    def _validate(self, tokens: object, namespace: object) -> list[int]:
        try:
            return super()._validate(tokens, namespace)
        except TokenRangeError as exc:
            raise TokenTypeError(str(exc)) from None


@mutant("namespace_checked_first", "R-TOK-5", "R-ERR-1")
class NamespaceCheckedFirst(MutantTree):
    """The namespace is validated before the tokens, so the wrong error wins."""

    def _validate(self, tokens: object, namespace: object) -> list[int]:
        check_namespace(namespace)
        return as_token_list(tokens)
