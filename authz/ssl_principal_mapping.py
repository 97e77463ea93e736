"""Kafka's ``ssl.principal.mapping.rules``: parse once, map a certificate DN to a name.

Theory of operation
-------------------
The setting is a list of rules, tried in order; the first rule that yields a
value wins (Kafka ``SslPrincipalMapper``)::

    RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/, DEFAULT

* ``DEFAULT`` yields the DN unchanged.
* ``RULE:<regex>/<replacement>/[L|U]`` applies when ``<regex>`` matches the
  **whole** DN (Java ``Matcher.matches``).  The result is Java's
  ``dn.replaceAll(regex, replacement)``, then lower-cased (``/L``) or
  upper-cased (``/U``).  ``\\`` escapes a character, so ``\\/`` can appear
  inside the regex or the replacement.
* No rule matches: :class:`NoMatchingRule`.  Kafka closes the connection in
  that case; the principal builder propagates the error.  (With the default
  rules, ``DEFAULT``, every DN matches.)

Splitting follows Kafka's structure-aware regex, not a plain ``split(",")``,
so commas may appear inside a rule's regex; empty items (``,,``) are ignored.
kgw additionally accepts a newline as a separator, which lets YAML block
scalars list one rule per line; a comma-separated value splits exactly as in
Kafka.

Java versus Python
------------------
The regex is compiled with Python's :mod:`re` after one translation, Java's
named groups ``(?<name>…)`` to ``(?P<name>…)``.  Constructs Python lacks
(``\\p{…}`` classes, ``\\Q…\\E``) are refused at parse time with a
``ValueError`` naming the rule.  The replacement is *not* handed to
:func:`re.sub` (whose syntax differs); it is parsed here with Java's rules:

* ``\\c`` is the literal ``c``;
* ``$n`` refers to group *n*; digits after the first are taken while the number
  stays a valid group (``$12`` with 3 groups is group 1 then ``"2"``);
* ``${name}`` refers to a named group;
* a ``$n`` whose first digit already exceeds the group count is kept as the
  literal text ``$n`` (Kafka's ``escapeLiteralBackReferences``).  A rule with
  no groups at all that uses ``$n`` fails in Kafka when it is applied; kgw
  refuses it when parsing, as it does every malformed replacement.

Parsing happens once, at configuration time; :meth:`SslPrincipalMapper.get_name`
only runs the compiled regexes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["NoMatchingRule", "SslPrincipalMapper", "MappingRule", "parse_rules"]

# Kafka SslPrincipalMapper.RULE_PATTERN, verbatim modulo Java string escaping.
# Groups: 1 DEFAULT, 2 regex, 4 replacement, 6 L|U, 7 anything else (invalid).
_RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE_PATTERN)
_JAVA_NAMED_GROUP = re.compile(r"(?<!\\)\(\?<(?![=!])")


class NoMatchingRule(LookupError):
    """No mapping rule applies to a DN (Kafka ``NoMatchingRule``)."""


# A compiled replacement part: literal text (str) or a group number (int).
_Part = str | int


@dataclass(frozen=True, slots=True)
class MappingRule:
    """One parsed rule; ``source is None`` means ``DEFAULT``."""

    source: str | None
    """The regex as written in the configuration (None for DEFAULT)."""
    replacement: str = ""
    """The replacement as written (Java syntax)."""
    case: str = ""
    """"L", "U" or ""."""
    pattern: re.Pattern[str] | None = None
    parts: tuple[_Part, ...] = ()
    """The replacement compiled to literal text and group numbers (named groups resolved)."""

    @property
    def is_default(self) -> bool:
        return self.source is None

    def apply(self, dn: str) -> str | None:
        """The mapped name, or None when this rule does not match ``dn``."""
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        # Java replaceAll: every find-style match is replaced, exactly like re.sub
        # (including an empty match at the end for patterns such as "(.*)").
        result = self.pattern.sub(self._expand, dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result

    def _expand(self, match: re.Match[str]) -> str:
        return "".join(p if isinstance(p, str) else (match.group(p) or "") for p in self.parts)

    def __str__(self) -> str:
        # Kafka's Rule.toString, so splitting can be checked against Kafka's tests.
        if self.source is None:
            return "DEFAULT"
        return f"RULE:{self.source}/{self.replacement}" + {"L": "/L", "U": "/U"}.get(self.case, "")


_DEFAULT_RULE = MappingRule(source=None)


class SslPrincipalMapper:
    """Maps a subject DN (RFC 2253 text) to a principal name with the configured rules.

    >>> SslPrincipalMapper("RULE:^CN=([^,]+),.*$/$1/L,DEFAULT").get_name("CN=Alice,O=Example")
    'alice'
    """

    __slots__ = ("rules", "text")

    def __init__(self, rules: str | None = "DEFAULT") -> None:
        self.text = "DEFAULT" if rules is None else rules
        self.rules: tuple[MappingRule, ...] = parse_rules(self.text)

    def get_name(self, dn: str) -> str:
        """The first rule's result for ``dn``.

        :raises NoMatchingRule: no rule applies.
        """
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRule(f"No rules apply to {dn}, rules {self._rules_text()}")

    def _rules_text(self) -> str:
        return "[" + ", ".join(str(r) for r in self.rules) + "]"

    def __repr__(self) -> str:
        return f"SslPrincipalMapper(rules = {self._rules_text()})"


def parse_rules(text: str) -> tuple[MappingRule, ...]:
    """Parse a rules setting.

    :raises ValueError: naming the first invalid rule.
    """
    return tuple(rule for item in _split(text) if (rule := _parse_one(item)) is not None)


def _split(text: str) -> list[str]:
    """Kafka's splitRules, after turning newline separators into commas."""
    lines = [line.strip() for line in text.splitlines()]
    joined = ",".join(line for line in lines if line)
    return [m.group(1) for m in _RULE_SPLITTER.finditer(joined.strip())]


def _parse_one(item: str) -> MappingRule | None:
    m = _RULE_PARSER.match(item)
    if m is None or m.end() != len(item):
        unmatched = item[m.end():] if m is not None else item
        raise ValueError(f"Invalid rule: `{item}`, unmatched substring: `{unmatched}`")
    if m.group(1) is not None:
        return _DEFAULT_RULE
    if m.group(2) is None:
        return None  # an empty item: ignored, as in Kafka
    source, replacement, case = m.group(2), m.group(4), m.group(6)
    pattern = _compile(item, source)
    parts = _parse_replacement(item, replacement, pattern)
    return MappingRule(source=source, replacement=replacement, case=case, pattern=pattern, parts=parts)


def _compile(item: str, source: str) -> re.Pattern[str]:
    translated = _JAVA_NAMED_GROUP.sub("(?P<", source)
    try:
        return re.compile(translated)
    except re.error as exc:
        raise ValueError(f"Invalid rule: `{item}`: bad regular expression {source!r}: {exc}") from None


def _parse_replacement(item: str, text: str, pattern: re.Pattern[str]) -> tuple[_Part, ...]:
    """Compile a Java replacement string into literal and group parts."""
    groups = pattern.groups
    parts: list[_Part] = []
    literal: list[str] = []
    i = 0

    def bad(why: str) -> ValueError:
        return ValueError(f"Invalid rule: `{item}`: replacement {text!r}: {why}")

    def flush() -> None:
        if literal:
            parts.append("".join(literal))
            literal.clear()

    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 >= len(text):
                raise bad("character to be escaped is missing")
            literal.append(text[i + 1])
            i += 2
        elif c != "$":
            literal.append(c)
            i += 1
        elif i + 1 < len(text) and text[i + 1] == "{":
            end = text.find("}", i + 2)
            name = text[i + 2:end] if end > 0 else ""
            if not name or name not in pattern.groupindex:
                raise bad(f"no group named {name!r}")
            flush()
            parts.append(pattern.groupindex[name])
            i = end + 1
        elif i + 1 < len(text) and text[i + 1].isdigit():
            first = int(text[i + 1])
            if groups == 0:
                raise bad(f"${first} refers to a group but the regex has none")
            if first > groups:  # Kafka escapeLiteralBackReferences: literal text
                literal.append(f"${first}")
                i += 2
                continue
            number, i = first, i + 2
            while i < len(text) and text[i].isdigit() and number * 10 + int(text[i]) <= groups:
                number, i = number * 10 + int(text[i]), i + 1
            flush()
            parts.append(number)
        else:
            raise bad("illegal group reference ('$' must be followed by a digit or {name}; escape it as \\$)")
    flush()
    return tuple(parts)
