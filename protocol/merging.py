"""Merging a partly denied request's answers back together, in request order.

When only part of a request may be forwarded, the upstream answers the allowed
entries and kgw answers the denied ones; the client must get one response with
an entry per request entry, in the order it asked.  Entries the upstream added
on its own (rare) are kept at the end.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

__all__ = ["merge_in_request_order", "pop_first"]


def pop_first(entries: list[Any], pred: Callable[[Any], bool]) -> Any:
    """Remove and return the first of ``entries`` matching ``pred`` (None if none does)."""
    for i, e in enumerate(entries):
        if pred(e):
            return entries.pop(i)
    return None


def merge_in_request_order(
    items: Iterable[Any],
    upstream: Sequence[Any],
    *,
    denied_entry: Callable[[Any], Any | None],
    same: Callable[[Any, Any], bool],
) -> tuple[Any, ...]:
    """One response entry per request item, in request order.

    Args:
        items: the request's entries.
        upstream: the upstream's response entries for the forwarded items.
        denied_entry: ``item -> error entry`` for an item kgw answers, or None if it was forwarded.
        same: ``(upstream entry, item) -> bool``: does this upstream entry answer this item?
    """
    left = list(upstream)
    merged = []
    for item in items:
        entry = denied_entry(item)
        if entry is None:
            entry = pop_first(left, lambda e: same(e, item))
        if entry is not None:
            merged.append(entry)
    merged.extend(left)
    return tuple(merged)
