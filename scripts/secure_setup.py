"""The secure profile's setup, for `make cluster-secure` (scripts/cluster.py --secure) and the compose file
docker-compose.secure.yml: SASL_SSL between clients and brokers and between brokers, with

- a development CA and a broker certificate (scripts/gen_certs.py; host names 127.0.0.1, localhost and --host),
- two PLAIN users with random passwords: `admin`, the documented administrator, and `broker`, the brokers' own
  user on the inter-broker listener, both super users of the authorizer (Kafka's StandardAuthorizer: any other
  user is allowed only what ACLs grant, `strata acls --command-config DIR/admin.properties`); SCRAM-SHA-256/512
  are enabled too, for users added later with `strata users scram add --command-config DIR/admin.properties`,

written into DIR:

    ca.pem, broker.pem         truststore and keystore (PEM)
    security.properties        the brokers' security settings (listeners INTERNAL and EXTERNAL), 0600
    admin.properties           the admin's client properties: `strata ... --command-config DIR/admin.properties`,
                               Kafka's tools (--command-config), Spark (as kafka.* options), 0600
    node.properties            with --node FILE: FILE plus security.properties (one file per broker command), 0600

    python scripts/secure_setup.py DIR [--host broker1 ...] [--node config/cluster-node.properties] [--owner USER]

Run again, it keeps the CA, the certificates and the passwords it made (a restarted cluster keeps its users);
passwords are only ever written to 0600 files, never printed nor put on a command line.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scripts.gen_certs import generate
from strata.config.broker_config import parse_properties

ADMIN_USER = "admin"
BROKER_USER = "broker"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)  # also when it existed with other bits


def _passwords(dir: Path) -> dict[str, str]:
    """The users' passwords: those of an earlier run, else new random ones (kept in DIR/passwords.properties)."""
    path = dir / "passwords.properties"
    if path.exists():
        known = parse_properties(path.read_text())
        if known.get(ADMIN_USER) and known.get(BROKER_USER):
            return known
    made = {ADMIN_USER: secrets.token_urlsafe(18), BROKER_USER: secrets.token_urlsafe(18)}
    _write_private(path, "".join(f"{u}={p}\n" for u, p in made.items()))
    return made


def broker_settings(dir: Path, passwords: dict[str, str]) -> dict[str, str]:
    """The brokers' security settings (Kafka's names), listeners INTERNAL (between brokers) and EXTERNAL."""
    users = " ".join(f'user_{u}="{p}"' for u, p in passwords.items())
    me = f'username="{BROKER_USER}" password="{passwords[BROKER_USER]}"'
    admin = f'user_{ADMIN_USER}="{passwords[ADMIN_USER]}"'
    return {
        "listener.security.protocol.map": "INTERNAL:SASL_SSL,EXTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": MECHANISMS,
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(dir / "broker.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(dir / "ca.pem"),
        "listener.name.internal.plain.sasl.jaas.config": f"{PLAIN_MODULE} required {me} {users};",
        "listener.name.external.plain.sasl.jaas.config": f"{PLAIN_MODULE} required {admin};",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{ADMIN_USER};User:{BROKER_USER}",
    }


def admin_client_properties(dir: Path, passwords: dict[str, str]) -> dict[str, str]:
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": f'{PLAIN_MODULE} required username="{ADMIN_USER}" password="{passwords[ADMIN_USER]}";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(dir / "ca.pem"),
    }


def _properties_text(props: dict[str, str], header: str) -> str:
    return f"# {header}\n" + "".join(f"{k}={v}\n" for k, v in props.items())


def setup(dir: Path, hosts: list[str], node: Path | None = None) -> dict[str, str]:
    """Make (or keep) DIR's certificates, users and files; returns the brokers' security settings."""
    dir = dir.resolve() if not dir.is_absolute() else dir
    dir.mkdir(parents=True, exist_ok=True)
    if not (dir / "ca.pem").exists() or not (dir / "broker.pem").exists():
        generate(dir, hosts, [])
    passwords = _passwords(dir)
    settings = broker_settings(dir, passwords)
    _write_private(
        dir / "security.properties", _properties_text(settings, "brokers' SASL_SSL settings (scripts/secure_setup.py)")
    )
    _write_private(
        dir / "admin.properties",
        _properties_text(admin_client_properties(dir, passwords), f"client properties of the {ADMIN_USER} user"),
    )
    if node is not None:
        base = node.read_text()
        kept = "".join(
            line + "\n" for line in base.splitlines() if line.partition("=")[0].strip() not in settings
        )  # the node file's own listener map and inter-broker listener give way to the secure ones
        _write_private(dir / "node.properties", kept + _properties_text(settings, "SASL_SSL (secure profile)"))
    return settings


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path, help="output directory (as the brokers see it)")
    ap.add_argument("--host", action="append", default=[], help="broker host name for the certificate (repeatable)")
    ap.add_argument("--node", type=Path, help="node properties to extend into DIR/node.properties")
    ap.add_argument("--owner", help="user that runs the brokers: given the files (when run as root)")
    args = ap.parse_args(argv)
    setup(args.dir, args.host, args.node)
    if args.owner:
        for path in [args.dir, *args.dir.iterdir()]:
            shutil.chown(path, args.owner)
    print(f"secure profile files in {args.dir}: admin client properties in {args.dir}/admin.properties")
    return 0


if __name__ == "__main__":
    sys.exit(main())
