"""The text formats of Kafka's console tools: LineMessageReader (a stdin line -> headers, key, value) and
DefaultMessageFormatter (a record -> one output line), with their ``--property`` names and defaults."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


class FormatError(ValueError):
    """A property combination Kafka refuses, or a line that does not parse (message as Kafka's)."""


def _true(props: dict[str, str], key: str, default: bool) -> bool:
    return props[key].strip().lower() == "true" if key in props else default


@dataclass
class LineReader:
    """kafka-console-producer's reader: ``[headers<headers.delimiter>][key<key.separator>]value`` per line."""

    parse_key: bool = False
    key_separator: str = "\t"
    parse_headers: bool = False
    headers_delimiter: str = "\t"
    headers_separator: str = ","
    headers_key_separator: str = ":"
    null_marker: str | None = None
    ignore_error: bool = False

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> LineReader:
        r = cls(
            parse_key=_true(props, "parse.key", False),
            key_separator=props.get("key.separator", "\t"),
            parse_headers=_true(props, "parse.headers", False),
            headers_delimiter=props.get("headers.delimiter", "\t"),
            headers_separator=props.get("headers.separator", ","),
            headers_key_separator=props.get("headers.key.separator", ":"),
            null_marker=props.get("null.marker"),
            ignore_error=_true(props, "ignore.error", False),
        )
        pairs = [
            ("headers.delimiter", r.headers_delimiter, "headers.separator", r.headers_separator),
            ("headers.delimiter", r.headers_delimiter, "headers.key.separator", r.headers_key_separator),
            ("headers.separator", r.headers_separator, "headers.key.separator", r.headers_key_separator),
        ]
        if r.null_marker is not None:
            for name, value in (
                ("key.separator", r.key_separator),
                ("headers.separator", r.headers_separator),
                ("headers.delimiter", r.headers_delimiter),
                ("headers.key.separator", r.headers_key_separator),
            ):
                pairs.append(("null.marker", r.null_marker, name, value))
        for a, av, b, bv in pairs:
            if av == bv:
                raise FormatError(f"{a} and {b} may not be equal")
        return r

    def _cut(self, enabled: bool, line: str, start: int, sep: str, what: str, line_no: int) -> str | None:
        if not enabled:
            return None
        i = line.find(sep, start)
        if i < 0:
            if self.ignore_error:
                return None
            raise FormatError(f"No {what} found on line number {line_no}: '{line}'")
        return line[start:i]

    def _bytes(self, s: str | None) -> bytes | None:
        return None if s is None or s == self.null_marker else s.encode("utf-8")

    def parse(self, line: str, line_no: int) -> tuple[list[tuple[str, bytes | None]], bytes | None, bytes | None]:
        """(headers, key, value) of one line (without its line ending)."""
        headers_text = self._cut(self.parse_headers, line, 0, self.headers_delimiter, "headers delimiter", line_no)
        at = 0 if headers_text is None else len(headers_text) + len(self.headers_delimiter)
        key = self._cut(self.parse_key, line, at, self.key_separator, "key separator", line_no)
        at += 0 if key is None else len(key) + len(self.key_separator)
        headers: list[tuple[str, bytes | None]] = []
        if headers_text is not None and headers_text != self.null_marker:
            for pair in re.split(self.headers_separator, headers_text):
                k, sep, v = pair.partition(self.headers_key_separator)
                if not sep:
                    if not self.ignore_error:
                        raise FormatError(f"No header key separator found in pair '{pair}' on line number {line_no}")
                    headers.append((pair, None))
                    continue
                if k == self.null_marker:
                    raise FormatError(
                        f"Header keys should not be equal to the null marker '{self.null_marker}' as they can't be null"
                    )
                headers.append((k, self._bytes(v)))
        return headers, self._bytes(key), self._bytes(line[at:])


@dataclass
class MessageFormatter:
    """kafka-console-consumer's DefaultMessageFormatter: the fields asked for, in Kafka's order, separated by
    key.separator, the line ended by line.separator; nulls printed as null.literal."""

    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    null_literal: bytes = b"null"

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> MessageFormatter:
        def sep(key: str, default: bytes) -> bytes:
            return props[key].encode("utf-8") if key in props else default

        return cls(
            print_timestamp=_true(props, "print.timestamp", False),
            print_partition=_true(props, "print.partition", False),
            print_offset=_true(props, "print.offset", False),
            print_headers=_true(props, "print.headers", False),
            print_key=_true(props, "print.key", False),
            print_value=_true(props, "print.value", True),
            key_separator=sep("key.separator", b"\t"),
            line_separator=sep("line.separator", b"\n"),
            headers_separator=sep("headers.separator", b","),
            null_literal=sep("null.literal", b"null"),
        )

    def format(self, record: Any) -> bytes:
        """One record (kafka-python's ConsumerRecord: timestamp_type 0 CreateTime, 1 LogAppendTime, -1 none)."""
        fields: list[bytes] = []
        if self.print_timestamp:
            kind = {0: "CreateTime", 1: "LogAppendTime"}.get(record.timestamp_type)
            fields.append(f"{kind}:{record.timestamp}".encode() if kind and record.timestamp >= 0 else b"NO_TIMESTAMP")
        if self.print_partition:
            fields.append(b"Partition:%d" % record.partition)
        if self.print_offset:
            fields.append(b"Offset:%d" % record.offset)
        if self.print_headers:
            hs = [k.encode("utf-8") + b":" + self._value(v) for k, v in record.headers or []]
            fields.append(self.headers_separator.join(hs) if hs else b"NO_HEADERS")
        if self.print_key:
            fields.append(self._value(record.key))
        if self.print_value:
            fields.append(self._value(record.value))
        if not fields:
            return b""
        line = self.key_separator.join(fields)
        # Kafka ends the line after the value only; without a value the last field ends with line.separator too
        return line + self.line_separator

    def _value(self, b: bytes | None) -> bytes:
        return self.null_literal if b is None else bytes(b)
