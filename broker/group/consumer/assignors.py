"""The server-side assignors and the subscription regex, as the consumer group coordinator calls them.

They live in strata.broker.group.assignors and strata.broker.group.regex (built beside this package). Until those
modules are in the tree, a minimal sticky round-robin assignor and Python's `re` stand in for them, so that the
protocol works end to end; nothing else here depends on which one runs.
"""

from __future__ import annotations

import importlib
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


# -- the stand-ins (used only while strata.broker.group.assignors / .regex are missing) -------------------------------
@dataclass(frozen=True)
class _MemberSpec:
    member_id: str
    rack: str | None
    subscribed_topic_ids: frozenset[uuid.UUID]
    owned: Mapping[uuid.UUID, frozenset[int]]
    instance_id: str | None = None


@dataclass(frozen=True)
class _TopicSpec:
    topic_id: uuid.UUID
    name: str
    partitions: int
    partition_racks: Mapping[int, frozenset[str]]


class _StickyUniform:
    """Balanced and sticky: each member keeps what it owns up to its fair share, the rest goes to the members
    with the fewest partitions among those subscribed."""

    name = "uniform"

    def assign(
        self, members: Mapping[str, _MemberSpec], topics: Mapping[uuid.UUID, _TopicSpec]
    ) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
        out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
        taken: set[tuple[uuid.UUID, int]] = set()
        count = dict.fromkeys(members, 0)
        subscribers = {t: sorted(m for m, s in members.items() if t in s.subscribed_topic_ids) for t in topics}
        total = sum(topics[t].partitions for t in topics if subscribers[t])
        quota, extra = divmod(total, max(len(members), 1))
        for bonus in (0, 1):  # keep up to the floor quota first, then one more while the remainder lasts
            for mid in sorted(members):
                spec = members[mid]
                for tid in sorted(spec.owned, key=str):
                    if tid not in topics or tid not in spec.subscribed_topic_ids:
                        continue
                    for p in sorted(spec.owned[tid]):
                        if p >= topics[tid].partitions or (tid, p) in taken or count[mid] >= quota + bonus:
                            continue
                        if bonus and extra <= 0:
                            break
                        out[mid].setdefault(tid, set()).add(p)
                        taken.add((tid, p))
                        count[mid] += 1
                        extra -= bonus
        for tid in sorted(topics, key=lambda t: topics[t].name):
            subs = subscribers[tid]
            if not subs:
                continue
            for p in range(topics[tid].partitions):
                if (tid, p) in taken:
                    continue
                mid = min(subs, key=lambda m: (count[m], m))
                out[mid].setdefault(tid, set()).add(p)
                count[mid] += 1
        return {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in out.items()}


class _StandinModule:
    MemberSubscriptionSpec = _MemberSpec
    TopicSpec = _TopicSpec
    ASSIGNOR_NAMES = ("uniform", "range")

    @staticmethod
    def assignor_by_name(name: str) -> Any:
        return _StickyUniform() if name in _StandinModule.ASSIGNOR_NAMES else None


class _InvalidRegex(ValueError):
    pass


class _Regex:
    def __init__(self, pattern: str) -> None:
        try:
            self._re = re.compile(pattern)
        except re.error as e:
            raise _InvalidRegex(str(e)) from None

    def fullmatch(self, topic: str) -> bool:
        return self._re.fullmatch(topic) is not None


class _RegexStandin:
    InvalidRegex = _InvalidRegex

    @staticmethod
    def compile_subscription_regex(pattern: str) -> _Regex:
        return _Regex(pattern)


def _load(name: str, standin: Any) -> Any:
    """(Nothing is logged: this runs at import, before the broker's logging is configured.)"""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:
        return standin


_assignors: Any = _load("strata.broker.group.assignors", _StandinModule)
_regex: Any = _load("strata.broker.group.regex", _RegexStandin)

MemberSubscriptionSpec: Any = _assignors.MemberSubscriptionSpec
TopicSpec: Any = _assignors.TopicSpec
ASSIGNOR_NAMES: tuple[str, ...] = tuple(_assignors.ASSIGNOR_NAMES)
InvalidRegex: type[ValueError] = _regex.InvalidRegex


def assignor_by_name(name: str) -> Any:
    return _assignors.assignor_by_name(name)


def compile_subscription_regex(pattern: str) -> Any:
    """A compiled RE2J-syntax pattern (`fullmatch(topic)`); InvalidRegex (a ValueError) if it does not compile."""
    return _regex.compile_subscription_regex(pattern)


__all__ = [
    "ASSIGNOR_NAMES",
    "InvalidRegex",
    "MemberSubscriptionSpec",
    "TopicSpec",
    "assignor_by_name",
    "compile_subscription_regex",
]
