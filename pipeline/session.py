"""A SparkSession set up for the ``strata`` data source, with the usual PySpark traps handled.

* pyarrow is required (Python data sources exchange Arrow batches with the JVM): checked up front, with the
  install hint, instead of a Py4J stack trace from the first task.
* ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` default to the running interpreter, so the Python workers import
  the same packages (the strata package, confluent-kafka, aiobotocore) as the driver.
* Local mode (``local[*]``) by default; the driver binds to 127.0.0.1 there, so a host name that resolves to a
  loopback or unreachable address does not matter. ``--master spark://...`` or ``STRATA_SPARK_MASTER`` for a cluster;
  under ``spark-submit`` the submitted master is kept.
* Nothing needs ``--packages``: the source is pure Python, so no Maven download happens (and none is configured).
* The data source is registered under the name ``strata``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

DEFAULT_MASTER = "local[*]"


class SparkSetupError(RuntimeError):
    pass


def check_requirements() -> None:
    missing = []
    for mod in ("pyspark", "pyarrow"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        raise SparkSetupError(
            f"{' and '.join(missing)} not installed: install the Spark extra "
            "(pip install 'strata-broker[spark]', i.e. pyspark>=4.0 and pyarrow)"
        )
    import pyspark

    major = int(pyspark.__version__.split(".")[0])
    if major < 4:
        raise SparkSetupError(f"pyspark {pyspark.__version__} has no Python Data Source API; pyspark>=4.0 is needed")


def prepare_environment(master: str) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def register(spark: Any) -> None:
    """Register the ``strata`` and ``strata-iceberg`` formats on a SparkSession (idempotent). Filter pushdown to
    Python data sources is switched on (Spark refuses a reader that prunes by filters without it)."""
    from .source import StrataDataSource
    from .table_source import StrataIcebergDataSource

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(StrataDataSource)
    spark.dataSource.register(StrataIcebergDataSource)


def get_spark(
    app_name: str = "strata-pipeline", master: str | None = None, conf: Mapping[str, str] | None = None
) -> Any:
    """Get (or create) a SparkSession with the ``strata`` format registered."""
    check_requirements()
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # launched by spark-submit: its --master wins
    master = master or os.environ.get("STRATA_SPARK_MASTER") or ("" if submitted else DEFAULT_MASTER)
    prepare_environment(master)
    from pyspark.sql import SparkSession

    b = SparkSession.builder.appName(app_name)
    if master:
        b = b.master(master)
    defaults: dict[str, str] = {"spark.sql.session.timeZone": "UTC"}
    if not submitted:
        defaults["spark.executorEnv.PYSPARK_PYTHON"] = os.environ["PYSPARK_PYTHON"]
    if master.startswith("local"):
        defaults.update(
            {
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.ui.enabled": "false",
                "spark.sql.shuffle.partitions": "4",
                "spark.sql.streaming.stateStore.maintenanceInterval": "600s",
            }
        )
    for k, v in {**defaults, **(conf or {})}.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("STRATA_SPARK_LOG_LEVEL", "WARN"))
    register(spark)
    return spark


__all__ = ["DEFAULT_MASTER", "SparkSetupError", "check_requirements", "get_spark", "register"]
