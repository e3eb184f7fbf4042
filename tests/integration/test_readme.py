"""The README's confluent-kafka example, taken from README.md as it is and run against a broker with the defaults
of `make run` (auto-created topic, consumer group, commit): what a new user tries first must work."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.broker_proc import REPO_ROOT, StrataBroker


def readme_example() -> str:
    text = (REPO_ROOT / "README.md").read_text()
    m = re.search(r"Produce, then consume.*?```python\n(.*?)```", text, re.DOTALL)
    assert m, "README.md lost its confluent-kafka example"
    return m.group(1)


def test_readme_confluent_example_produces_and_consumes_in_a_group(broker: StrataBroker) -> None:
    code = readme_example()
    assert "127.0.0.1:9092" in code
    r = subprocess.run(
        [sys.executable, "-c", code.replace("127.0.0.1:9092", broker.bootstrap)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert lines == [f"0 {i} b'k{i}' b'hello {i}'" for i in range(10)], r.stdout
