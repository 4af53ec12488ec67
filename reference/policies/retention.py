"""What an insert asks of the blocks it caches: a retention priority and how long it
holds (R-POL-5), checked under every policy (R-POL-8).

Every policy accepts and checks ``insert(..., priority=, retain_for=)``, so the same
client runs under any policy; only ``priority`` reads them. A priority is an int
``0 .. 100`` (TensorRT-LLM's range: higher is kept longer); ``retain_for`` is a
number of logical clock ticks >= 1 after which the priority falls back to the
namespace's default, and needs a priority. Checked before the call changes anything
(R-ERR-2).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidArgumentError

#: The largest retention priority (TensorRT-LLM's scale is 0 .. 100).
MAX_PRIORITY = 100


@dataclass(frozen=True, slots=True)
class Retention:
    """An insert's retention request: ``priority`` (None: the namespace's default) held
    for ``retain_for`` ticks (None: for as long as the block stays cached)."""

    priority: int | None = None
    retain_for: int | None = None


#: An insert that asks for nothing.
NO_RETENTION = Retention()


def check_retention(priority: object, retain_for: object) -> Retention:
    """The checked request; O(1).

    Raises:
        InvalidArgumentError: ``priority`` is not None or an int in ``0 .. 100``;
            ``retain_for`` is not None or an int >= 1; or ``retain_for`` is given
            without a priority.
    """
    if priority is None and retain_for is None:
        return NO_RETENTION
    if priority is not None and (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or not 0 <= priority <= MAX_PRIORITY
    ):
        raise InvalidArgumentError(
            f"priority must be None or an int in 0 .. {MAX_PRIORITY}, got {priority!r}"
        )
    if retain_for is not None:
        if isinstance(retain_for, bool) or not isinstance(retain_for, int) or retain_for < 1:
            raise InvalidArgumentError(
                f"retain_for must be None or an int >= 1 (clock ticks), got {retain_for!r}"
            )
        if priority is None:
            raise InvalidArgumentError("retain_for needs a priority to retain the blocks at")
    return Retention(priority, retain_for)
