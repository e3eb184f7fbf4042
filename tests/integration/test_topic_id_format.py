"""Topic ids are printed one way everywhere, Kafka's (Uuid.toString: URL-safe base64 without padding, 22
characters): the broker's log lines and `strata topics describe` show the same string, so an operator can grep the
one for the other."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.broker_proc import REPO_ROOT, StrataBroker


def _strata(*args: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "strata", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_log_lines_and_cli_print_the_same_base64_topic_id(broker: StrataBroker) -> None:
    bootstrap = ["--bootstrap-server", broker.bootstrap]
    _strata("topics", *bootstrap, "create", "--topic", "ids", "--partitions", "1")
    described = re.search(r"TopicId: (\S+)", _strata("topics", *bootstrap, "describe", "--topic", "ids"))
    assert described is not None
    topic_id = described.group(1)
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", topic_id), topic_id
    _strata("topics", *bootstrap, "delete", "--topic", "ids")
    out = broker.output()
    created = [line for line in out.splitlines() if "created topic" in line and "topic=ids" in line]
    deleted = [line for line in out.splitlines() if "deleted topic" in line and "topic=ids" in line]
    assert created and deleted, out[-3000:]
    assert f"topic_id={topic_id}" in created[0]
    assert f"topic_id={topic_id}" in deleted[0]
