"""Generate a development CA, a broker certificate and (optionally) client certificates as PEM files, for the
SSL / SASL_SSL examples (config/server-sasl-ssl.properties), with `cryptography` (a broker dependency). A development
CA: for production use your organisation's CA.

    python scripts/gen_certs.py certs                 # certs/ca.pem (truststore), certs/broker.pem (key + chain)
    python scripts/gen_certs.py certs --host kafka1 --client alice    # + certs/alice.crt, certs/alice.key
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 825


def _name(cn: str, ou: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "strata-dev")]
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _issue(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    signer: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
    sans: list[x509.GeneralName] | None = None,
    usage: list[x509.ObjectIdentifier] | None = None,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if usage:
        b = b.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    return b.sign(signer, hashes.SHA256())


def _write(path: Path, data: bytes, private: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path, help="output directory")
    ap.add_argument("--host", action="append", default=[], help="extra broker host name or IP (repeatable)")
    ap.add_argument("--client", action="append", default=[], help="client certificate CN, OU=clients (repeatable)")
    args = ap.parse_args()
    generate(args.dir, args.host, args.client)
    print(f"wrote {args.dir}/ca.pem (truststore) and {args.dir}/broker.pem (keystore)")


def generate(dir: Path, hosts: list[str], clients: list[str]) -> None:
    """A new CA in `dir`/ca.pem, a broker key + chain for 127.0.0.1, localhost and `hosts` in `dir`/broker.pem
    (0600), and `dir`/<cn>.crt / .key per client CN."""
    dir.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("strata-dev CA")
    ca = _issue(ca_name, ca_key, ca_name, ca_key, ca=True)
    _write(dir / "ca.pem", _pem(ca))
    key = ec.generate_private_key(ec.SECP256R1())
    sans = [_san(h) for h in ["127.0.0.1", "localhost", *hosts]]
    usage = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]  # brokers are clients of each other
    cert = _issue(_name("broker"), key, ca_name, ca_key, ca=False, sans=sans, usage=usage)
    _write(dir / "broker.pem", _pem_key(key) + _pem(cert) + _pem(ca), private=True)
    for cn in clients:
        ckey = ec.generate_private_key(ec.SECP256R1())
        c = _issue(_name(cn, "clients"), ckey, ca_name, ca_key, ca=False, usage=[ExtendedKeyUsageOID.CLIENT_AUTH])
        _write(dir / f"{cn}.crt", _pem(c) + _pem(ca))
        _write(dir / f"{cn}.key", _pem_key(ckey), private=True)


if __name__ == "__main__":
    main()
