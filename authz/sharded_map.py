"""An immutable mapping whose copy-on-write change costs the size of the change, not of the map.

The ACL index is swapped by one assignment and never changed in place (authz/acl_index.py), so
a change used to copy its top-level dicts (every resource name, every ACL id): 12 ms per
one-ACL change at 100,000 ACLs.  A ``ShardedMap`` splits the keys over a power-of-two number of
plain dicts by hash; a change copies the tuple of shard references and only the shards it
touches.  The shard count follows the size (about ``TARGET`` keys per shard, one shard for a
small map, so thousands of small maps cost no more than dicts); a map that grew to
``4 * TARGET`` keys per shard is re-sharded, which happens each time it quadruples, so its cost
is spread over the changes that grew it.  Lookups stay one C-level dict lookup after
``hash(key) & m.mask`` (strings cache their hash), and the hot path may inline exactly that:
``m.shards[hash(key) & m.mask].get(key)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar, cast, overload

__all__ = ["TARGET", "ShardedMap"]

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")

#: keys per shard a map is built for
TARGET = 128
_MAX_SHARDS = 1 << 14


def _shard_count(size: int) -> int:
    count = 1
    while count * TARGET < size and count < _MAX_SHARDS:
        count <<= 1
    return count


class ShardedMap(Generic[K, V]):
    """Read-only after construction: ``updated`` returns a new map sharing untouched shards."""

    __slots__ = ("shards", "mask", "_size")

    def __init__(self, shards: tuple[dict[K, V], ...], size: int) -> None:
        self.shards = shards
        self.mask = len(shards) - 1
        self._size = size

    @classmethod
    def empty(cls) -> "ShardedMap[K, V]":
        return cast("ShardedMap[K, V]", _EMPTY)

    @classmethod
    def of(cls, items: Mapping[K, V] | Iterable[tuple[K, V]]) -> "ShardedMap[K, V]":
        pairs = list(items.items() if isinstance(items, Mapping) else items)
        count = _shard_count(len(pairs))
        mask = count - 1
        shards: list[dict[K, V]] = [{} for _ in range(count)]
        for key, value in pairs:
            shards[hash(key) & mask][key] = value
        return cls(tuple(shards), sum(len(s) for s in shards))

    def updated(self, sets: Mapping[K, V] | None = None, removes: Iterable[K] = ()) -> "ShardedMap[K, V]":
        """A new map with ``removes`` taken out, then ``sets`` put in (absent removes are ignored)."""
        shards = list(self.shards)
        mask = self.mask
        copied: set[int] = set()
        size = self._size
        for key in removes:
            i = hash(key) & mask
            if key in shards[i]:
                if i not in copied:
                    shards[i] = dict(shards[i])
                    copied.add(i)
                del shards[i][key]
                size -= 1
        for key, value in (sets or {}).items():
            i = hash(key) & mask
            if i not in copied:
                shards[i] = dict(shards[i])
                copied.add(i)
            shard = shards[i]
            if key not in shard:
                size += 1
            shard[key] = value
        if not copied:
            return self
        if size > 4 * TARGET * len(shards) and len(shards) < _MAX_SHARDS:  # grown 4x: re-shard
            return ShardedMap.of(item for shard in shards for item in shard.items())
        return ShardedMap(tuple(shards), size)

    # -- Mapping-like reads --------------------------------------------------------

    @overload
    def get(self, key: K) -> V | None: ...
    @overload
    def get(self, key: K, default: D) -> V | D: ...

    def get(self, key: K, default: Any = None) -> Any:
        return self.shards[hash(key) & self.mask].get(key, default)

    def __getitem__(self, key: K) -> V:
        return self.shards[hash(key) & self.mask][key]

    def __contains__(self, key: Any) -> bool:
        return key in self.shards[hash(key) & self.mask]

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __iter__(self) -> Iterator[K]:
        for shard in self.shards:
            yield from shard

    def keys(self) -> Iterator[K]:
        return iter(self)

    def values(self) -> Iterator[V]:
        for shard in self.shards:
            yield from shard.values()

    def items(self) -> Iterator[tuple[K, V]]:
        for shard in self.shards:
            yield from shard.items()

    def __repr__(self) -> str:
        return f"ShardedMap({self._size} entries)"


_EMPTY: ShardedMap[Any, Any] = ShardedMap(({},), 0)
