"""JAAS config values as Kafka users write them, and SASL/PLAIN's server side."""

from __future__ import annotations

import pytest

from strata.broker.security.jaas import JaasConfigError, parse_jaas_config
from strata.broker.security.plain import (
    PLAIN_LOGIN_MODULE,
    PlainAuthenticationError,
    authenticate_plain,
    jaas_users,
    password_check_from_users,
)

JAAS = (
    f'{PLAIN_LOGIN_MODULE} required username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="al;ice \\"q\\"" \n  user_bob=bare;'
)


def test_parse_kafka_style_plain_entry() -> None:
    [m] = parse_jaas_config(JAAS)
    assert (m.class_name, m.flag) == (PLAIN_LOGIN_MODULE, "required")
    assert jaas_users(m) == {"admin": b"admin-secret", "alice": b'al;ice "q"', "bob": b"bare"}
    assert "admin-secret" not in repr(m)


def test_several_modules() -> None:
    mods = parse_jaas_config('a.B required x="1"; c.D optional;')
    assert [(m.class_name, m.flag, m.options) for m in mods] == [
        ("a.B", "required", {"x": "1"}),
        ("c.D", "optional", {}),
    ]


@pytest.mark.parametrize(
    "text",
    ["", "a.B required", 'a.B maybe x="1";', 'a.B required x "1";', "a.B required x=;", 'a.B required x="open;'],
)
def test_malformed_values_are_refused_without_echoing_them(text: str) -> None:
    with pytest.raises(JaasConfigError) as e:
        parse_jaas_config(text)
    assert '"1"' not in str(e.value)


def test_plain_exchange() -> None:
    check = password_check_from_users(jaas_users(parse_jaas_config(JAAS)[0]))
    assert authenticate_plain(b"\0admin\0admin-secret", check) == "admin"
    assert authenticate_plain(b"admin\0admin\0admin-secret", check) == "admin"
    cases = {
        b"\0admin\0wrong": "Invalid username or password",
        b"\0mallory\0admin-secret": "Invalid username or password",
        b"bob\0admin\0admin-secret": "authorization id that is different",
        b"\0\0pw": "username not specified",
        b"\0admin\0": "password not specified",
        b"admin\0admin-secret": "expected 3 tokens",
        b"\0\xff\0x": "not UTF-8",
    }
    for token, message in cases.items():
        with pytest.raises(PlainAuthenticationError, match=message) as e:
            authenticate_plain(token, check)
        assert "secret" not in str(e.value)
