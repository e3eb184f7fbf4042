"""`make cluster-secure` (scripts/cluster.py --secure) as a newcomer runs it: three brokers whose EXTERNAL and
INTERNAL listeners speak SASL_SSL, the documented admin user's client properties in
<data-dir>/secure/admin.properties working with the strata CLI (--command-config) and with librdkafka, replication
between brokers over SASL_SSL, a plaintext client refused, and the passwords in 0600 files only (never on a command
line)."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from strata.cli.admin_client import AdminClient, AdminError
from strata.cli.command_config import client_security, read_properties
from strata.config import parse_properties
from tests.support.cluster_script import ClusterScript
from tests.support.waiting import wait_until


def _strata(repo: Path, *args: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "strata", *args], cwd=repo, capture_output=True, text=True, timeout=90, check=False
    )
    assert r.returncode == 0, f"strata {' '.join(args)}: {r.stdout}{r.stderr}"
    return r.stdout


def test_make_cluster_secure_serves_sasl_ssl_with_the_admin_user(tmp_path: Path) -> None:
    cluster = ClusterScript(tmp_path, "--secure")
    repo, data = cluster.repo, cluster.data
    try:
        text = cluster.start()
        bs = cluster.bootstrap
        admin = data / "secure" / "admin.properties"
        assert f"--command-config {admin}" in text and "admin user: admin" in text

        # the passwords: in 0600 files, on no command line and in no output
        passwords = parse_properties((data / "secure" / "passwords.properties").read_text())
        for path in [admin, data / "secure" / "passwords.properties", *data.glob("broker*/server.properties")]:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        ps = subprocess.run(["ps", "-efww"], capture_output=True, text=True, check=True).stdout
        for secret in passwords.values():
            assert secret not in ps and secret not in text

        # the admin's file as documented: a topic replicated 3 ways (replication over SASL_SSL between brokers)
        cfg = ["--bootstrap-server", bs, "--command-config", str(admin)]
        _strata(repo, "topics", *cfg, "create", "--topic", "demo", "--partitions", "1", "--replication-factor", "3")
        wait_until(
            lambda: (
                "Isr: " in (d := _strata(repo, "topics", *cfg, "describe", "--topic", "demo"))
                and len(d.split("Isr: ")[1].split()[0].split(",")) == 3
            ),
            timeout=60,
            message="the ISR never reached 3 brokers",
        )

        # the authorizer is on: admin is a super user, a user added by admin may do nothing until an ACL allows it
        user = data / "etl.properties"
        user.write_text(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=etl\nsasl.password=etl-pw-1\n"
            f"ssl.ca.location={data / 'secure' / 'ca.pem'}\n"
        )
        r = subprocess.run(
            [sys.executable, "-m", "strata", "users", "scram", "add", *cfg, "--user", "etl"]
            + ["--mechanism", "SCRAM-SHA-512", "--password-stdin"],
            cwd=repo, input="etl-pw-1\n", capture_output=True, text=True, timeout=90, check=False,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        _strata(repo, "acls", *cfg, "--list")
        refused = subprocess.run(
            [sys.executable, "-m", "strata", "acls", "--bootstrap-server", bs, "--command-config", str(user), "--list"],
            cwd=repo, capture_output=True, text=True, timeout=90, check=False,
        )  # fmt: skip
        assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr, refused.stderr

        # a stock client (librdkafka) with the same properties, translated as the pipeline does
        conf = {
            "bootstrap.servers": bs,
            "log_level": 0,
            **client_security(dict(read_properties(str(admin)))).librdkafka_config(),
        }
        p = Producer({**conf, "acks": "all"})
        for i in range(20):
            p.produce("demo", f"m{i}".encode())
        assert p.flush(60) == 0
        c = Consumer({**conf, "group.id": "secure-demo", "auto.offset.reset": "earliest"})
        got: list[bytes | None] = []

        def all_20() -> bool:
            got.extend(m.value() for m in c.consume(20, timeout=0.5) if m.error() is None)
            return len(got) >= 20

        try:
            c.subscribe(["demo"])
            wait_until(all_20, timeout=60, message=lambda: f"consumed {len(got)} of 20")
        finally:
            c.close()
        assert sorted(v or b"" for v in got) == sorted(f"m{i}".encode() for i in range(20))

        # EXTERNAL is not plaintext any more: a plaintext client's ApiVersions is not answered
        with pytest.raises(AdminError, match=r"closed the connection|timed out"):
            AdminClient(bs.split(",")[0], 20.0)
    finally:
        code = cluster.stop()
    assert code == 0, cluster.out.read_text()[-3000:]
