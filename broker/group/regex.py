"""`subscribed_topic_regex` of KIP-848 consumer groups, with Kafka's semantics: RE2 syntax (Kafka compiles it with
RE2J) and full-match (a topic matches when the whole name matches, as RE2J's `Matcher.matches()`).

RE2 has no backreferences, lookaround or possessive quantifiers and runs in time linear in the topic name, so a
client's pattern cannot make the coordinator backtrack for ever. A pattern RE2 rejects raises InvalidRegex with
RE2's one-line reason; the coordinator answers INVALID_REGULAR_EXPRESSION with it.
"""

from __future__ import annotations

from typing import Any

import re2  # type: ignore[import-untyped]  # google-re2: no type information

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would print every rejected client pattern to stderr


class InvalidRegex(ValueError):
    """The pattern is not valid RE2 syntax (message: RE2's reason, one line)."""


class CompiledRegex:
    """A compiled subscription pattern; `fullmatch` says whether a topic name is subscribed."""

    __slots__ = ("_compiled", "pattern")

    def __init__(self, pattern: str, compiled: Any) -> None:
        self.pattern = pattern
        self._compiled = compiled

    def fullmatch(self, topic: str) -> bool:
        return self._compiled.fullmatch(topic) is not None

    def __repr__(self) -> str:
        return f"CompiledRegex({self.pattern!r})"


def compile_subscription_regex(pattern: str) -> CompiledRegex:
    """Compiles a client's `subscribed_topic_regex`; raises InvalidRegex when RE2 rejects it."""
    try:
        compiled = re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "invalid regular expression"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise InvalidRegex(" ".join(str(reason).split())) from None
    return CompiledRegex(pattern, compiled)
