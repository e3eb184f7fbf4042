"""ssl.principal.mapping.rules: Kafka's rule syntax and results (cases from Kafka's documentation and tests)."""

from __future__ import annotations

import datetime

import pytest

from strata.broker.security.ssl_principal import NoMatchingRule, SslPrincipalMapper, certificate_dn


def test_default_is_the_whole_dn() -> None:
    assert SslPrincipalMapper(None).name("CN=alice,OU=eng,O=acme,C=US") == "CN=alice,OU=eng,O=acme,C=US"


def test_rules_in_order_with_case_and_back_references() -> None:
    m = SslPrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,"
        "DEFAULT"
    )
    assert m.name("CN=duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert m.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Palo Alto,ST=CA,C=US") == "duke@javasoft"
    assert m.name("cn=duke,ou=javasoft,dc=sun,dc=com") == "DUKE@JAVASOFT"
    assert m.name("OU=JavaSoft,O=Sun,CN=duke.x") == "DUKE.X"
    assert m.name("OU=nothing") == "OU=nothing"


def test_missing_group_reference_stays_literal_and_no_match_fails() -> None:
    m = SslPrincipalMapper("RULE:^CN=(.*?),OU=(.*)$/$1@$3/")
    assert m.name("CN=a,OU=b") == "a@$3"
    assert SslPrincipalMapper(r"RULE:^CN=(.*)$/[$0] \$1/").name("CN=a") == "[CN=a] $1"
    with pytest.raises(NoMatchingRule):
        m.name("O=x")


@pytest.mark.parametrize("rules", ["DEFAULT,RULE:x", "RULE:^(.*)$/$1/X", "RULE:((/$1/"])
def test_invalid_rules_are_refused(rules: str) -> None:
    with pytest.raises(ValueError, match="Invalid rule"):
        SslPrincipalMapper(rules)


def test_certificate_dn_is_most_specific_first() -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "acme, inc"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
            x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
        ]
    )
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    dn = certificate_dn(cert.public_bytes(serialization.Encoding.DER))
    assert dn == "CN=alice,OU=eng,O=acme\\, inc,C=US"
    assert SslPrincipalMapper("RULE:^CN=([^,]*),.*$/$1/").name(dn) == "alice"
