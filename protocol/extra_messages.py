"""Codec classes for APIs the pinned kafka-python (3.0.12) does not ship: KIP-848's ConsumerGroupHeartbeat (68) and
ConsumerGroupDescribe (69), from Apache Kafka 4.2's message JSON vendored in strata.protocol.messages.

kafka-python's JsonSchemaData metaclass loads a class's schema by its name from the package given as `load_json`, so
a subclass of ApiMessage is all a new API needs; the registry picks these up as it walks ApiMessage's subclasses.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.api_message import ApiMessage

_PACKAGE = "strata.protocol.messages"


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=_PACKAGE):  # type: ignore[call-arg]
    pass


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=_PACKAGE):  # type: ignore[call-arg]
    pass


class ConsumerGroupDescribeRequest(ApiMessage, load_json=_PACKAGE):  # type: ignore[call-arg]
    pass


class ConsumerGroupDescribeResponse(ApiMessage, load_json=_PACKAGE):  # type: ignore[call-arg]
    @classmethod
    def json_patch(cls, json: dict[str, Any]) -> dict[str, Any]:
        """AuthorizedOperations as kafka-python's other responses carry it: a set of operation codes (None: not
        requested, INT32_MIN on the wire)."""
        for group_field in json["fields"]:
            if group_field["name"] == "Groups":
                for f in group_field["fields"]:
                    if f["name"] == "AuthorizedOperations":
                        f["type"] = "bitfield"
        return json


__all__ = [
    "ConsumerGroupDescribeRequest",
    "ConsumerGroupDescribeResponse",
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResponse",
]
