"""Generate protocol/request_nulls_table.py from Apache Kafka's message JSON specs.

For every request API of the codec (strata.protocol.registry.REQUEST_CLASSES: the APIs Strata advertises in
SUPPORTED_VERSIONS and those it may advertise next, so that advertising one needs no regeneration), over its
`validVersions` and any advertised version, it writes from `<Name>Request.json` the fields that may hold a null on
the wire (strings, bytes, records, arrays, structs) with the versions they exist in and the versions in which Kafka
allows a null (`nullableVersions`), nested as the schema nests them; and, from `<Name>Response.json`, the versions
whose response has a top-level ErrorCode.

    python scripts/gen_request_nulls.py [MESSAGE_DIR]

MESSAGE_DIR is a directory of Kafka's `clients/src/main/resources/common/message/*.json`; by default the copy
that the pinned kafka-python ships (the same files at the Kafka release whose versions Strata advertises, which
the request codec itself is generated from, so the field names and versions match what it decodes).
`tests/unit/test_nullable_fields.py` checks that the committed table holds what this script generates.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from strata.protocol.registry import REQUEST_CLASSES, SUPPORTED_VERSIONS

OUT = ROOT / "protocol" / "request_nulls_table.py"
NO_VERSIONS = (-1, -1)
MAX_VERSION = 0x7FFF
_REFERENCE_TYPES = ("string", "bytes", "records")
_COMMENT = re.compile(r"^\s*//.*$", re.MULTILINE)


def default_message_dir() -> Path:
    import kafka.protocol.schemas as schemas

    return Path(schemas.__file__).parent / "resources"


VENDORED = ROOT / "protocol" / "messages"  # the APIs kafka-python lacks (strata.protocol.extra_messages)


def spec_path(message_dir: Path, file_name: str) -> Path:
    """A message's JSON in `message_dir`, else the copy Strata vendors for the APIs kafka-python lacks."""
    path = message_dir / file_name
    return path if path.exists() else VENDORED / file_name


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_COMMENT.sub("", path.read_text()))
    return data


def versions(spec: str | None) -> tuple[int, int]:
    """Kafka's version syntax: "3", "3-5", "3+", "none" (or absent)."""
    if spec is None or spec.strip() in ("", "none"):
        return NO_VERSIONS
    spec = spec.strip()
    if spec.endswith("+"):
        return int(spec[:-1]), MAX_VERSION
    lo, _, hi = spec.partition("-")
    return int(lo), int(hi or lo)


def attribute(name: str) -> str:
    """The attribute kafka-python gives a JSON field name: CamelCase to snake_case, one underscore per capital."""
    return "".join(("_" + c.lower()) if c.isupper() and i else c.lower() for i, c in enumerate(name))


def clamp(rng: tuple[int, int], lo: int, hi: int) -> tuple[int, int]:
    a, b = max(rng[0], lo), min(rng[1], hi)
    return (a, b) if a <= b else NO_VERSIONS


def fields(
    specs: list[dict[str, Any]], common: dict[str, list[dict[str, Any]]], lo: int, hi: int
) -> tuple[tuple[Any, ...], ...]:
    """(attribute, kind, versions, nullable versions, children) of each field that can be null, within [lo, hi].

    kind: "v" a string/bytes/records value, "s" a struct, "a" an array of structs, "p" an array of strings/bytes
    (whose elements Kafka never allows to be null)."""
    out = []
    for f in specs:
        present = clamp(versions(f.get("versions")), lo, hi)
        if present == NO_VERSIONS:
            continue
        nullable = clamp(versions(f.get("nullableVersions")), *present)
        if "taggedVersions" in f:
            # an absent tagged field decodes as its default, None for structs: absence is not a null on the wire
            nullable = present
        t: str = f["type"]
        is_array = t.startswith("[]")
        inner = t[2:] if is_array else t
        sub = f.get("fields") or common.get(inner)
        children = fields(sub, common, *present) if sub else ()
        if inner in _REFERENCE_TYPES:
            kind = "p" if is_array else "v"
        elif sub is not None:
            kind = "a" if is_array else "s"
        elif is_array:
            kind = "n"  # an array of numbers: the array itself may be null, its elements cannot
        else:
            continue  # a number, boolean or uuid: never null
        if nullable == present and not children and kind != "p":
            continue  # nothing to check
        out.append((attribute(f["name"]), kind, present, nullable, children))
    return tuple(out)


def build(message_dir: Path) -> tuple[dict[int, Any], dict[int, tuple[int, int]]]:
    """(REQUEST_FIELDS, TOP_LEVEL_ERROR_CODE) as the specs in `message_dir` define them."""
    requests: dict[int, Any] = {}
    errors: dict[int, tuple[int, int]] = {}
    for key in sorted(REQUEST_CLASSES):
        name = REQUEST_CLASSES[key].name.removesuffix("Request")
        req = load(spec_path(message_dir, f"{name}Request.json"))
        lo, hi = versions(req["validVersions"])
        if key in SUPPORTED_VERSIONS:
            lo, hi = min(lo, SUPPORTED_VERSIONS[key][0]), max(hi, SUPPORTED_VERSIONS[key][1])
        common = {s["name"]: s["fields"] for s in req.get("commonStructs", [])}
        requests[key] = fields(req["fields"], common, lo, hi)
        resp = load(spec_path(message_dir, f"{name}Response.json"))
        for f in resp["fields"]:
            if f["name"] == "ErrorCode" and f["type"] == "int16" and "taggedVersions" not in f:
                rng = clamp(versions(f.get("versions")), lo, hi)
                if rng != NO_VERSIONS:
                    errors[key] = rng
    return requests, errors


def render(requests: dict[int, Any], errors: dict[int, tuple[int, int]]) -> str:
    lines = [
        '"""Generated by scripts/gen_request_nulls.py from Apache Kafka\'s message JSON specs: do not edit.',
        "",
        "REQUEST_FIELDS: api key -> fields that can hold a null, each (attribute, kind, (first, last version present),",
        "(first, last version Kafka allows null; (-1, -1): never), children). Kind: v value (string, bytes, records),",
        "s struct, a array of structs, p array of strings/bytes (elements never null), n array of numbers.",
        "TOP_LEVEL_ERROR_CODE: api key -> versions whose response has a top-level ErrorCode.",
        '"""',
        "",
        "from typing import Any",
        "",
        "REQUEST_FIELDS: dict[int, tuple[Any, ...]] = {",
    ]
    for key, table in requests.items():
        lines.append(f"    {key}: {table!r},")
    lines += ["}", "", "TOP_LEVEL_ERROR_CODE: dict[int, tuple[int, int]] = {"]
    for key, rng in errors.items():
        lines.append(f"    {key}: {rng!r},")
    lines += ["}", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    message_dir = Path(argv[1]) if len(argv) > 1 else default_message_dir()
    OUT.write_text(render(*build(message_dir)))
    # the project's formatter (line length): the unit test compares the values, not the text
    subprocess.run([sys.executable, "-m", "ruff", "format", "--quiet", str(OUT)], check=False)
    print(f"wrote {OUT.relative_to(ROOT)} from {message_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
