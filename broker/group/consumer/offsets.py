"""Offset requests against a consumer group (Kafka's ConsumerGroup.validateOffsetCommit / validateOffsetFetch): a
member commits and fetches at its current member epoch; the admin client (member epoch -1) only while the group has
no member (commits) or always (fetches)."""

from __future__ import annotations

from strata.protocol.errors import ErrorCode

from .group import ConsumerGroup

E = ErrorCode


def _epoch_error(received: int, expected: int, classic: bool) -> ErrorCode:
    if received == expected:
        return E.NONE
    return E.ILLEGAL_GENERATION if classic else E.STALE_MEMBER_EPOCH


def validate_offset_commit(
    g: ConsumerGroup, member_id: str, member_epoch: int, transactional: bool, api_version: int
) -> ErrorCode:
    if member_epoch < 0 and not g.members:
        return E.NONE
    m = g.member(member_id)
    if m is None:
        return E.UNKNOWN_MEMBER_ID
    if not transactional and not m.uses_classic_protocol and api_version < 9:
        return E.UNSUPPORTED_VERSION  # "OffsetCommit version 9 or above must be used by members using the
        # modern group protocol"
    return _epoch_error(member_epoch, m.member_epoch, m.uses_classic_protocol)


def validate_offset_fetch(g: ConsumerGroup, member_id: str | None, member_epoch: int) -> ErrorCode:
    if member_id is None and member_epoch < 0:
        return E.NONE
    m = g.member(member_id or "")
    if m is None:
        return E.UNKNOWN_MEMBER_ID
    return _epoch_error(member_epoch, m.member_epoch, m.uses_classic_protocol)


__all__ = ["validate_offset_commit", "validate_offset_fetch"]
