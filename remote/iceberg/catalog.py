"""The Iceberg catalog the tables live in (pyiceberg): an embedded SQL catalog (SQLite under the broker's data dir
by default) or a REST catalog, with the warehouse in the remote storage. Credentials are kept out of reprs and logs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.table import Table

from strata.config.iceberg import CATALOG_PROP_PREFIX, REST, SQL, PartitionField

from .schema import iceberg_schema, partition_spec

TARGET_FILE_SIZE = "write.target-file-size-bytes"
# pyiceberg redoes a refused commit itself with the snapshot summary it computed before: that would carry stale
# offsets of the other partitions forward. The translator redoes commits itself (commit.py), so pyiceberg must not.
NO_COMMIT_RETRIES = {"commit.retry.num-retries": "0"}


@dataclass(frozen=True, repr=False)
class CatalogSettings:
    """Where the tables are: the catalog (type, uri, secrets) and the warehouse with its FileIO properties."""

    type: str
    uri: str
    namespace: str
    warehouse: str
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)  # credential, token, s3 keys
    properties: Mapping[str, str] = field(default_factory=dict)

    def catalog_properties(self) -> dict[str, str]:
        props: dict[str, str] = {"type": self.type, "uri": self.uri, "warehouse": self.warehouse}
        props.update(self.properties)
        props.update(self.secrets)
        return props

    def __repr__(self) -> str:
        return f"CatalogSettings({self.describe()})"

    def describe(self) -> str:
        """For logs and errors: no secret, and no password inside the URI."""
        uri = self.uri
        if "@" in uri and "://" in uri:
            scheme, rest = uri.split("://", 1)
            uri = f"{scheme}://***@{rest.split('@', 1)[1]}"
        return f"{self.type} catalog {uri}, warehouse {self.warehouse}, namespace {self.namespace}"


def catalog_settings(values: Mapping[str, Any], data_dir: Path) -> CatalogSettings:
    """The catalog of a broker's configuration (`iceberg.catalog.*`), with the defaults docs/iceberg.md gives: a
    SQLite catalog at <data dir>/iceberg/catalog.db, the warehouse in the remote storage (the S3 bucket under the
    RSM's key prefix, or beside LocalTieredStorage's directory) or under the data dir without tiered storage."""
    ctype = values.get("iceberg.catalog.type") or SQL
    uri = values.get("iceberg.catalog.uri") or ""
    secrets: dict[str, str] = {}
    props: dict[str, str] = {}
    if ctype == SQL and not uri:
        uri = f"sqlite:///{data_dir / 'iceberg' / 'catalog.db'}"
    if ctype == REST:
        if values.get("iceberg.catalog.credential"):
            secrets["credential"] = str(values["iceberg.catalog.credential"])
        if values.get("iceberg.catalog.token"):
            secrets["token"] = str(values["iceberg.catalog.token"])
    warehouse = values.get("iceberg.catalog.warehouse") or ""
    rsm = str(values.get("remote.log.storage.manager.class.name") or "")
    tiered = bool(values.get("remote.log.storage.system.enable"))
    if tiered and rsm == "s3":
        bucket = values.get("rsm.config.s3.bucket.name") or ""
        prefix = values.get("rsm.config.key.prefix") or ""
        if not warehouse:
            warehouse = f"s3://{bucket}/{prefix}iceberg/"
        s3 = {
            "s3.endpoint": values.get("rsm.config.s3.endpoint.url"),
            "s3.region": values.get("rsm.config.s3.region"),
        }
        props.update({k: str(v) for k, v in s3.items() if v})
        keys = {
            "s3.access-key-id": values.get("rsm.config.aws.access.key.id"),
            "s3.secret-access-key": values.get("rsm.config.aws.secret.access.key"),
            "s3.session-token": values.get("rsm.config.aws.session.token"),
        }
        secrets.update({k: str(v) for k, v in keys.items() if v})
    elif not warehouse:
        base = Path(values.get("rsm.config.dir") or data_dir) if tiered else data_dir / "iceberg"
        warehouse = f"file://{(base / ('iceberg' if tiered else 'warehouse')).resolve()}"
    for k, v in values.items():
        if k.startswith(CATALOG_PROP_PREFIX):
            props[k[len(CATALOG_PROP_PREFIX) :]] = str(v)
    return CatalogSettings(
        str(ctype), str(uri), str(values.get("iceberg.catalog.namespace") or "strata"), warehouse, secrets, props
    )


def open_catalog(settings: CatalogSettings) -> Catalog:
    """Blocking (SQL: creates the catalog's tables; REST: fetches its config): call from a worker thread."""
    if settings.type == SQL and settings.uri.startswith("sqlite:///"):
        Path(settings.uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    if settings.warehouse.startswith("file://"):
        Path(settings.warehouse[len("file://") :]).mkdir(parents=True, exist_ok=True)
    return load_catalog("strata", **settings.catalog_properties())


def ensure_table(
    catalog: Catalog,
    identifier: tuple[str, str],
    schema: pa.Schema,
    spec: list[PartitionField],
    properties: Mapping[str, str],
) -> Table:
    """Load the table, or create it (and its namespace) with `schema` and `spec`. Blocking. Another broker may
    create it at the same moment: then its table is loaded."""
    try:
        return without_commit_retries(catalog.load_table(identifier))
    except NoSuchTableError:
        pass
    try:
        catalog.create_namespace(identifier[0])
    except NamespaceAlreadyExistsError:
        pass
    except Exception:
        # a SQL catalog may report a concurrent creation as an integrity error instead
        if not catalog.namespace_exists(identifier[0]):
            raise
    ischema = iceberg_schema(schema)
    try:
        return catalog.create_table(
            identifier,
            schema=ischema,
            partition_spec=partition_spec(ischema, spec),
            properties={**properties, **NO_COMMIT_RETRIES},
        )
    except TableAlreadyExistsError:
        return without_commit_retries(catalog.load_table(identifier))


def without_commit_retries(table: Table) -> Table:
    """A table made elsewhere (another tool) gets NO_COMMIT_RETRIES before the translator commits to it."""
    if all(table.properties.get(k) == v for k, v in NO_COMMIT_RETRIES.items()):
        return table
    with table.transaction() as tx:
        tx.set_properties(NO_COMMIT_RETRIES)
    return table


__all__ = [
    "NO_COMMIT_RETRIES",
    "CatalogSettings",
    "TARGET_FILE_SIZE",
    "catalog_settings",
    "ensure_table",
    "open_catalog",
    "without_commit_retries",
]
