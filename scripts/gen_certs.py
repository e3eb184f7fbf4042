"""Generate a development CA, a broker certificate and (optionally) client certificates as PEM files, for the
SASL_SSL / SSL examples (config/server-sasl-ssl.properties). Uses `trustme` (a test-CA library; a development CA,
not for production).

    python scripts/gen_certs.py certs                 # certs/ca.pem, certs/broker.pem (key + chain)
    python scripts/gen_certs.py certs --host kafka1 --client alice
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import trustme


def _write(path: Path, data: bytes, private: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path, help="output directory")
    ap.add_argument("--host", action="append", default=[], help="extra broker host name or IP (repeatable)")
    ap.add_argument("--client", action="append", default=[], help="client certificate CN (OU=clients; repeatable)")
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="strata-dev")
    _write(args.dir / "ca.pem", ca.cert_pem.bytes())
    broker = ca.issue_cert("127.0.0.1", "localhost", *args.host, common_name="broker")
    chain = b"".join(c.bytes() for c in broker.cert_chain_pems)
    _write(args.dir / "broker.pem", broker.private_key_pem.bytes() + chain, private=True)
    for cn in args.client:
        cert = ca.issue_cert(common_name=cn, organization_unit_name="clients")
        _write(args.dir / f"{cn}.crt", b"".join(c.bytes() for c in cert.cert_chain_pems))
        _write(args.dir / f"{cn}.key", cert.private_key_pem.bytes(), private=True)
    print(f"wrote {args.dir}/ca.pem (truststore), {args.dir}/broker.pem (keystore)")


if __name__ == "__main__":
    main()
