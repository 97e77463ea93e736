"""An immutable mapping whose copy-on-write change costs the size of the change, not of the map.

The ACL index is swapped by one assignment and never changed in place (authz/acl_index.py), so
a change used to copy its top-level dicts (every resource name, every ACL id): 12 ms per
one-ACL change at 100,000 ACLs.  A ``ShardedMap`` splits the keys over ``SHARDS`` plain dicts
by hash; a change copies the tuple of shard references and only the shards it touches, so at
100,000 keys one change copies about 400 entries.  Lookups stay one C-level dict lookup after
``hash(key) & MASK`` (strings cache their hash), and the hot path may inline exactly that:
``m.shards[hash(key) & MASK].get(key)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

__all__ = ["MASK", "SHARDS", "ShardedMap"]

SHARDS = 256
MASK = SHARDS - 1


class ShardedMap:
    """Read-only after construction: ``updated`` returns a new map sharing untouched shards."""

    __slots__ = ("shards", "_size")

    def __init__(self, shards: tuple[dict, ...], size: int) -> None:
        self.shards = shards
        self._size = size

    @classmethod
    def empty(cls) -> "ShardedMap":
        return _EMPTY

    @classmethod
    def of(cls, items: Mapping[Any, Any] | Iterable[tuple[Any, Any]]) -> "ShardedMap":
        shards: list[dict] = [{} for _ in range(SHARDS)]
        for key, value in (items.items() if isinstance(items, Mapping) else items):
            shards[hash(key) & MASK][key] = value
        return cls(tuple(shards), sum(len(s) for s in shards))

    def updated(self, sets: Mapping[Any, Any] | None = None, removes: Iterable[Any] = ()) -> "ShardedMap":
        """A new map with ``removes`` taken out, then ``sets`` put in (absent removes are ignored)."""
        shards = list(self.shards)
        copied: set[int] = set()
        size = self._size
        for key in removes:
            i = hash(key) & MASK
            if key in shards[i]:
                if i not in copied:
                    shards[i] = dict(shards[i])
                    copied.add(i)
                del shards[i][key]
                size -= 1
        for key, value in (sets or {}).items():
            i = hash(key) & MASK
            if i not in copied:
                shards[i] = dict(shards[i])
                copied.add(i)
            shard = shards[i]
            if key not in shard:
                size += 1
            shard[key] = value
        if not copied:
            return self
        return ShardedMap(tuple(shards), size)

    # -- Mapping-like reads --------------------------------------------------------

    def get(self, key: Any, default: Any = None) -> Any:
        return self.shards[hash(key) & MASK].get(key, default)

    def __getitem__(self, key: Any) -> Any:
        return self.shards[hash(key) & MASK][key]

    def __contains__(self, key: Any) -> bool:
        return key in self.shards[hash(key) & MASK]

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __iter__(self) -> Iterator[Any]:
        for shard in self.shards:
            yield from shard

    def keys(self) -> Iterator[Any]:
        return iter(self)

    def values(self) -> Iterator[Any]:
        for shard in self.shards:
            yield from shard.values()

    def items(self) -> Iterator[tuple[Any, Any]]:
        for shard in self.shards:
            yield from shard.items()

    def __repr__(self) -> str:
        return f"ShardedMap({self._size} entries)"


_EMPTY = ShardedMap(tuple({} for _ in range(SHARDS)), 0)
