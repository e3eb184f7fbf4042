"""Certificates generated at test time (trustme): a CA, a broker certificate for 127.0.0.1/localhost, client
certificates with a chosen subject, written as the PEM files Kafka's `ssl.keystore.type=PEM` settings name."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme


@dataclass
class Pki:
    dir: Path
    ca: trustme.CA

    @property
    def ca_pem(self) -> Path:
        return self.dir / "ca.pem"

    def leaf(self, name: str, *identities: str, cn: str | None = None, ou: str | None = None) -> Path:
        """A key + certificate chain PEM file (a PEM keystore) at <dir>/<name>.pem."""
        cert = self.ca.issue_cert(*identities, common_name=cn, organization_unit_name=ou)
        path = self.dir / f"{name}.pem"
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(cert.private_key_pem.bytes() + b"".join(c.bytes() for c in cert.cert_chain_pems))
        tmp.replace(path)  # atomically: a broker watching the file never reads half of it
        return path

    def client(self, name: str, cn: str, ou: str) -> tuple[Path, Path]:
        """(certificate PEM, key PEM) of a client certificate, separate files as librdkafka and kafka-python want."""
        cert = self.ca.issue_cert(common_name=cn, organization_unit_name=ou)
        crt, key = self.dir / f"{name}.crt", self.dir / f"{name}.key"
        crt.write_bytes(b"".join(c.bytes() for c in cert.cert_chain_pems))
        key.write_bytes(cert.private_key_pem.bytes())
        return crt, key


def make_pki(dir: Path, organization: str = "strata-tests") -> Pki:
    dir.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name=organization)
    ca.cert_pem.write_to_path(str(dir / "ca.pem"))
    pki = Pki(dir, ca)
    pki.leaf("broker", "127.0.0.1", "localhost", cn="broker")
    return pki


__all__ = ["Pki", "make_pki"]
