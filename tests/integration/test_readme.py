"""The README's newcomer path, taken from README.md as it is: its confluent-kafka example against a broker with the
defaults of `make run` (auto-created topic, consumer group, commit), and the whole path -- `make run` in a fresh
copy of the checkout, the example and `strata groups describe` with the .venv it built: what a new user tries first
must work."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.broker_proc import REPO_ROOT, StrataBroker, free_port
from tests.support.checkout import copy_checkout
from tests.support.kafka_wire import WireClient
from tests.support.waiting import wait_until


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


def test_make_run_then_the_readme_commands_as_written(tmp_path: Path) -> None:
    """The newcomer path with its real dependencies: `make run` in a fresh copy of the checkout builds .venv (the
    broker and the `client` extra, from the package index), passes ARGS overrides to the broker, and the README's
    confluent-kafka example and `strata groups ... describe` then run with that .venv as written (only the port
    differs: the machine is shared). Ctrl-C stops the broker cleanly."""
    repo = copy_checkout(tmp_path / "repo")
    port, metrics_port = free_port(), free_port()
    args = f"--override listeners=PLAINTEXT://127.0.0.1:{port} "
    args += f"--override metrics.listener=http://127.0.0.1:{metrics_port}/metrics"
    out = tmp_path / "make-run.out"
    with open(out, "wb") as f:
        make = subprocess.Popen(
            ["make", "run", f"ARGS={args}"],
            cwd=repo,
            stdout=f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: Ctrl-C below reaches make and the broker only
        )
    try:
        wait_until(
            lambda: make.poll() is not None or _answers(port),
            timeout=900,  # a fresh .venv: pip installs the broker's dependencies first
            message=lambda: out.read_text(errors="replace")[-3000:],
        )
        assert make.poll() is None, out.read_text(errors="replace")[-3000:]
        venv = repo / ".venv" / "bin"
        code = readme_example().replace("127.0.0.1:9092", f"127.0.0.1:{port}")
        r = subprocess.run([venv / "python", "-c", code], capture_output=True, text=True, timeout=120, check=False)
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.splitlines() == [f"0 {i} b'k{i}' b'hello {i}'" for i in range(10)], r.stdout
        describe = readme_command(".venv/bin/strata groups --bootstrap-server 127.0.0.1:9092 describe --group readme")
        argv = describe.replace("127.0.0.1:9092", f"127.0.0.1:{port}").split()
        r = subprocess.run(argv, cwd=repo, capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 0, r.stderr
        assert re.search(r"^readme\s+greetings\s+0\s+10\s+10\s+0\s", r.stdout, re.MULTILINE), r.stdout
        assert (repo / "strata-data" / "greetings-0").is_dir()  # config/server.properties' log.dirs, as documented
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGINT)  # Ctrl-C, as the README says
        make.wait(timeout=60)
    assert "shut down cleanly" in out.read_text(errors="replace")


def readme_command(command: str) -> str:
    """`command` as the README writes it (in backticks or a code block), so the test breaks when the README
    changes it."""
    assert command in (REPO_ROOT / "README.md").read_text(), f"README.md no longer says {command!r}"
    return command


def _answers(port: int) -> bool:
    try:
        with WireClient("127.0.0.1", port, timeout=2.0) as w:
            return bool(w.api_versions(0).error_code == 0)
    except OSError:
        return False
