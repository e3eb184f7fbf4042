"""`strata serve` with a bad configuration, run as a user runs it: one line on stderr naming the setting, exit code
2, no traceback (docs/configuration.md). Unknown property names are warned about in Kafka's words and the broker
carries on, as Kafka does."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.broker_proc import REPO_ROOT, StrataBroker, free_port


def _serve(tmp: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    """`python -m strata serve` on free loopback ports with its data under `tmp`, plus `overrides`."""
    base = [
        f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
        f"metrics.listener=http://127.0.0.1:{free_port()}/metrics",
        f"log.dirs={tmp / 'data'}",
    ]
    cmd = [sys.executable, "-m", "strata", "serve"]
    for o in (*base, *overrides):
        cmd += ["--override", o]
    return subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)


def _one_line(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    assert "Traceback" not in r.stdout + r.stderr, r.stderr[-3000:]
    lines = [line for line in (r.stdout + r.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


CASES: list[tuple[str, Callable[[Path], list[str]], str]] = [
    (
        "log.dirs is a file",
        lambda tmp: [f"log.dirs={_file(tmp)}"],
        "strata: log.dirs: cannot use {tmp}/file: not a directory",
    ),
    (
        "log.dirs under a file",
        lambda tmp: [f"log.dirs={_file(tmp)}/logs"],
        "strata: log.dirs: cannot use {tmp}/file/logs: not a directory",
    ),
    (
        "unknown RSM alias",
        lambda tmp: ["remote.log.storage.manager.class.name=nope"],
        "strata: remote.log.storage.manager.class.name: cannot load 'nope': remote storage manager class 'nope' is "
        "not an alias or a module path",
    ),
    (
        "RSM module missing",
        lambda tmp: ["remote.log.storage.manager.class.name=no_such_pkg.rsm:Storage"],
        "strata: remote.log.storage.manager.class.name: cannot load 'no_such_pkg.rsm:Storage': No module named "
        "'no_such_pkg'",
    ),
    (
        "metrics.listener port not a number",
        lambda tmp: ["metrics.listener=http://127.0.0.1:metrics/metrics"],
        "strata: configuration error: Invalid value 'http://127.0.0.1:metrics/metrics' for configuration "
        "metrics.listener: 'http://127.0.0.1:metrics/metrics' has no valid port (expected http://host:port/metrics)",
    ),
    (
        "metrics.listener port out of range",
        lambda tmp: ["metrics.listener=http://127.0.0.1:70000/metrics"],
        "strata: configuration error: Invalid value 'http://127.0.0.1:70000/metrics' for configuration "
        "metrics.listener: 'http://127.0.0.1:70000/metrics' has no valid port (expected http://host:port/metrics)",
    ),
    (
        "metrics.listener not http",
        lambda tmp: ["metrics.listener=tcp://127.0.0.1:9464"],
        "strata: configuration error: Invalid value 'tcp://127.0.0.1:9464' for configuration metrics.listener: "
        "'tcp://127.0.0.1:9464' is not of the form http://host:port/metrics",
    ),
    (
        "listener port out of range",
        lambda tmp: ["listeners=PLAINTEXT://127.0.0.1:65536"],
        "strata: configuration error: listener 'PLAINTEXT://127.0.0.1:65536': port 65536 is not between 0 and 65535",
    ),
    (
        "RSM settings incomplete",
        lambda tmp: ["remote.log.storage.manager.class.name=s3"],
        "strata: remote storage manager: rsm.config.s3.bucket.name is required",
    ),
    (
        "host that does not resolve",
        lambda tmp: ["listeners=PLAINTEXT://no-such-host.invalid:0"],
        "strata: listeners: cannot bind PLAINTEXT no-such-host.invalid:0: name or service not known",
    ),
    (
        "SASL listener with Kafka's default mechanism, GSSAPI",
        lambda tmp: ["listeners=SASL_PLAINTEXT://127.0.0.1:0"],
        "strata: configuration error: sasl.enabled.mechanisms: listener SASL_PLAINTEXT: GSSAPI is not supported "
        "(supported: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)",
    ),
    (
        "SSL listener without a keystore",
        lambda tmp: ["listeners=SSL://127.0.0.1:0"],
        "strata: listener SSL: ssl.keystore.location (or ssl.keystore.key) is required for an SSL listener",
    ),
    (
        "listener without a security protocol",
        lambda tmp: ["listeners=CLIENTS://127.0.0.1:0"],
        "strata: configuration error: listeners: listener CLIENTS is not in listener.security.protocol.map",
    ),
    (
        "two listeners of one name",
        lambda tmp: ["listeners=PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0"],
        "strata: configuration error: listeners: each listener must have a different name, got PLAINTEXT, PLAINTEXT",
    ),
    (
        "advertised listener that is not a listener",
        lambda tmp: ["advertised.listeners=EXTERNAL://127.0.0.1:9092"],
        "strata: configuration error: advertised.listeners: EXTERNAL is not a listener name in listeners",
    ),
    (
        "inter-broker listener that is not advertised",
        lambda tmp: ["inter.broker.listener.name=INTERNAL"],
        "strata: configuration error: inter.broker.listener.name must be a listener name defined in "
        "advertised.listeners: INTERNAL is not one of PLAINTEXT",
    ),
    (
        "metadata store that is not etcd",
        lambda tmp: ["metadata.store.connect=zookeeper://127.0.0.1:2181"],
        "strata: configuration error: Invalid value 'zookeeper://127.0.0.1:2181' for configuration "
        "metadata.store.connect: 'zookeeper://127.0.0.1:2181' must start with etcd://",
    ),
    (
        "etcd nobody answers at",
        lambda tmp: [f"metadata.store.connect=etcd://127.0.0.1:{_refused_port()}"],
        "strata: metadata.store.connect: cannot reach etcd at etcd://127.0.0.1:{port}: ",
    ),
    (
        "authorizer that is not Kafka's",
        lambda tmp: ["authorizer.class.name=com.example.OpaAuthorizer"],
        "strata: configuration error: Invalid value 'com.example.OpaAuthorizer' for configuration "
        "authorizer.class.name: Class com.example.OpaAuthorizer cannot be found: Strata's authorizer is "
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer (also accepted as "
        "kafka.security.authorizer.AclAuthorizer); leave it empty for none",
    ),
    (
        "not a number",
        lambda tmp: ["num.partitions=x"],
        "strata: configuration error: Invalid value 'x' for configuration num.partitions: expected a number, got 'x'",
    ),
]


_REFUSED: list[int] = []


def _refused_port() -> int:
    """A loopback port nothing listens on (free a moment ago)."""
    _REFUSED[:] = [free_port()]
    return _REFUSED[0]


def _file(tmp: Path) -> Path:
    f = tmp / "file"
    f.write_text("not a directory\n")
    return f


@pytest.mark.parametrize(("overrides", "expected"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_bad_setting_ends_with_one_line_naming_it_and_exit_2(
    tmp_path: Path, overrides: Callable[[Path], list[str]], expected: str
) -> None:
    r = _serve(tmp_path, "remote.log.storage.system.enable=true", *overrides(tmp_path))
    line = _one_line(r)
    want = expected.format(tmp=tmp_path, port=_REFUSED[0] if _REFUSED else 0)
    assert line.startswith(want) if want.endswith(": ") else line == want


def test_taken_port_names_the_listener(tmp_path: Path) -> None:
    other = StrataBroker(tmp_path / "other").start()
    try:
        r = _serve(tmp_path, f"listeners=PLAINTEXT://127.0.0.1:{other.port}")
        taken = f"127.0.0.1:{other.port}"
        assert _one_line(r) == f"strata: listeners: cannot bind PLAINTEXT {taken}: address already in use"
        r = _serve(tmp_path, f"metrics.listener=http://127.0.0.1:{other.metrics_port}/metrics")
        assert _one_line(r) == (
            f"strata: metrics.listener: cannot bind http://127.0.0.1:{other.metrics_port}/metrics: "
            "address already in use"
        )
    finally:
        other.stop()


def test_unknown_property_is_warned_about_as_kafka_does_and_the_broker_serves(tmp_path: Path) -> None:
    secret = "s3cr3t-value-never-logged"
    b = StrataBroker(
        tmp_path,
        {"log.segment.byte": 1048576, "no.such.password": secret, "rsm.config.s3.region": "eu-west-1"},
    ).start()
    try:
        out = b.output()
    finally:
        b.stop()
    assert "The configuration 'log.segment.byte' was supplied but isn't a known config." in out
    assert "The configuration 'no.such.password' was supplied but isn't a known config." in out
    assert "rsm.config.s3.region" not in out.split("===== start #1:")[-1].split("\n", 1)[1]  # plugin keys: known
    assert secret not in out.split("===== start #1:")[-1].split("\n", 1)[1]  # values are never logged
