"""The router index across workers (R-ROUTE-*): :class:`RouterIndex`."""

from .index import APPLIED, COUNTERS, GAP, MALFORMED, REPEAT, RESTART, Applied, RouterIndex

__all__ = ["APPLIED", "COUNTERS", "GAP", "MALFORMED", "REPEAT", "RESTART", "Applied", "RouterIndex"]
