"""SCRAM credentials from the YAML and from the metadata image, as one lookup table.

:class:`MetadataCredentialStore` is the :class:`~authz.credentials.CredentialStore` a
SASL listener uses: PLAIN users from the YAML, SCRAM lookups in the YAML first and then
in the image (``UserScramCredentialRecord``, KRaft's record, as AlterUserScramCredentials
wrote it), read on every login, so a credential altered over the wire is usable by the
very next SaslAuthenticate (and a deleted one is refused by it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from authz.credentials import CredentialStore, SaslMechanism, ScramCredential
from metadata.records import UserScramCredentialRecord

__all__ = ["MECHANISM_CODES", "MECHANISM_CODE_OF", "MetadataCredentialStore", "ScramCredentialView", "credential_from_record", "image_scram"]

#: Kafka ScramMechanism type codes (0 is UNKNOWN)
MECHANISM_CODES: Mapping[int, SaslMechanism] = {1: SaslMechanism.SCRAM_SHA_256, 2: SaslMechanism.SCRAM_SHA_512}
MECHANISM_CODE_OF = {str(m): c for c, m in MECHANISM_CODES.items()}


def credential_from_record(record: UserScramCredentialRecord) -> ScramCredential:
    return ScramCredential(name=record.name, mechanism=MECHANISM_CODES[record.mechanism], salt=bytes(record.salt),
                           iterations=record.iterations, stored_key=bytes(record.stored_key),
                           server_key=bytes(record.server_key))


def image_scram(image: Any) -> Mapping[tuple[str, int], UserScramCredentialRecord]:
    return getattr(image, "scram", None) or {}


class ScramCredentialView(Mapping[tuple[str, str], ScramCredential]):
    """``(name, mechanism text) -> ScramCredential``: YAML credentials, then the image's.

    What :class:`~gateway.auth.sasl.ScramServer` looks credentials up in.  The image
    is fetched through ``image_source`` on every lookup (it is created after the
    listeners, and its table changes with every AlterUserScramCredentials).
    """

    __slots__ = ("static", "_image_source", "_cache")

    def __init__(self, static: Mapping[tuple[str, str], ScramCredential], image_source: Callable[[], Any]) -> None:
        self.static = static
        self._image_source = image_source
        # record object -> its ScramCredential (records are immutable; a new record is a new object)
        self._cache: dict[int, tuple[UserScramCredentialRecord, ScramCredential]] = {}

    def _dynamic(self) -> Mapping[tuple[str, int], UserScramCredentialRecord]:
        return image_scram(self._image_source())

    def __getitem__(self, key: tuple[str, str]) -> ScramCredential:
        hit = self.static.get(key)
        if hit is not None:
            return hit
        name, mechanism = key
        code = MECHANISM_CODE_OF.get(str(mechanism))
        record = None if code is None else self._dynamic().get((name, code))
        if record is None:
            raise KeyError(key)
        cached = self._cache.get(id(record))
        if cached is not None and cached[0] is record:
            return cached[1]
        credential = credential_from_record(record)
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[id(record)] = (record, credential)
        return credential

    def __iter__(self) -> Iterator[tuple[str, str]]:
        yield from self.static
        for name, code in list(self._dynamic()):
            key = (name, str(MECHANISM_CODES.get(code, code)))
            if key not in self.static and code in MECHANISM_CODES:
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, key: object) -> bool:
        try:
            self[key]  # type: ignore[index]
        except (KeyError, TypeError, ValueError):
            return False
        return True


class MetadataCredentialStore(CredentialStore):
    """The listener's credential store: PLAIN and SCRAM from the YAML, plus SCRAM from the metadata image.

    ``MetadataCredentialStore(gateway.config.users, lambda: gateway.image)``.
    """

    __slots__ = ("static_scram",)

    def __init__(self, users: Any, image_source: Callable[[], Any]) -> None:  # noqa: D107 (no super().__init__)
        base = CredentialStore.of(users)
        self.plain = base.plain
        self.static_scram = base.scram
        self.scram = ScramCredentialView(base.scram, image_source)
