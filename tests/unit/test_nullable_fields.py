"""Nulls where Kafka's schema forbids them are refused at decode (issue 21), from a table generated from Kafka's
message JSON: the committed table is what scripts/gen_request_nulls.py builds, it covers every advertised API, and
a request with a null in each non-nullable field of each advertised version is refused naming that field, while
the same requests without the null decode."""

from __future__ import annotations

import pytest

from scripts.gen_request_nulls import build, default_message_dir
from strata.protocol.registry import (
    REQUEST_CLASSES,
    RESPONSE_CLASSES,
    SUPPORTED_VERSIONS,
    decode_request,
    invalid_request_response,
)
from strata.protocol.request_nulls import NullFieldError, has_top_level_error
from strata.protocol.request_nulls_table import REQUEST_FIELDS, TOP_LEVEL_ERROR_CODE
from tests.support.null_requests import NullCase, null_cases, null_request

CASES = null_cases()


def test_committed_table_is_what_the_generator_builds() -> None:
    assert build(default_message_dir()) == (REQUEST_FIELDS, TOP_LEVEL_ERROR_CODE)


def test_table_covers_every_advertised_api() -> None:
    # and every other API of the codec, so that advertising one more (AlterConfigs, ...) needs no regeneration
    assert set(SUPPORTED_VERSIONS) <= set(REQUEST_FIELDS) == set(REQUEST_CLASSES)
    for key, fields in REQUEST_FIELDS.items():
        slots = set(REQUEST_CLASSES[key].__slots__)
        assert {f[0] for f in fields} <= slots, key  # attribute names as the codec decodes them
    # every advertised API has a field to check except those whose requests have none that can be null
    # (InitProducerId, DescribeCluster; DescribeAcls: every string of its filter is nullable)
    assert {k for k, f in REQUEST_FIELDS.items() if not f and k in SUPPORTED_VERSIONS} == {22, 29, 60}
    assert len({c.api_key for c in CASES}) == len(SUPPORTED_VERSIONS) - 3


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.api_key}v{c.version}:{c.field}")
def test_null_is_refused_naming_the_field(case: NullCase) -> None:
    frame = null_request(case)
    with pytest.raises(NullFieldError) as e:
        decode_request(frame[4:], case.api_key, case.version)
    assert e.value.field == case.field
    assert e.value.client_id == "strata-it-null"


@pytest.mark.parametrize("key", sorted(SUPPORTED_VERSIONS))
def test_requests_without_nulls_decode(key: int) -> None:
    lo, hi = SUPPORTED_VERSIONS[key]
    for v in range(lo, hi + 1):
        req = REQUEST_CLASSES[key][v]()
        req.with_header(correlation_id=3, client_id="c")
        decode_request(bytes(req.encode(header=True, framed=False)), key, v)


@pytest.mark.parametrize("key", sorted(SUPPORTED_VERSIONS))
def test_invalid_request_response_where_the_response_has_an_error_code(key: int) -> None:
    lo, hi = SUPPORTED_VERSIONS[key]
    for v in range(lo, hi + 1):
        frame = invalid_request_response(key, v, 77)
        if not has_top_level_error(key, v):
            assert frame is None
            continue
        assert frame is not None
        resp = RESPONSE_CLASSES[key].decode(frame[4:], version=v, header=True)
        assert resp.error_code == 42
