"""The protocol fuzzer in the suite: a bounded, seeded run against a broker of its own (issue 21, "Tests").

Passes only with 0 crashes, hangs, stalls, tracebacks, unresponsive checks and bad responses, RSS below the bound
after every batch, and the canary intact after every batch and after a clean and a ``kill -9`` restart. On failure
the message is the run's summary: each distinct finding with the seed and index that regenerate its input
(``python -m tests.fuzz replay --seed S --index I``). ``FUZZ_SEED``, ``FUZZ_CI_INPUTS`` and ``FUZZ_CI_SECONDS``
change the run, ``FUZZ_HANG_S`` (15), ``FUZZ_STALL_S`` (5) and ``FUZZ_RSS_LIMIT_MIB`` (1024) its bounds; ``make fuzz``
runs the same fuzzer for 20 minutes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fuzz.runner import FuzzConfig, Fuzzer
from tests.support.broker_proc import StrataBroker

# ~40 s on a busy 2-core machine (the suite's budget; `make fuzz` runs 20 minutes): the count keeps the inputs the
# same from run to run, the time bounds the run.
CI_INPUTS = int(os.environ.get("FUZZ_CI_INPUTS", "1200"))
CI_SECONDS = float(os.environ.get("FUZZ_CI_SECONDS", "45"))

pytestmark = [pytest.mark.integration, pytest.mark.timeout(int(CI_SECONDS) + 300)]


def test_fuzz_broker_survives_and_keeps_the_canary(tmp_path: Path) -> None:
    broker = StrataBroker(tmp_path / "broker", {"auto.create.topics.enable": "false"}, name="fuzz")
    broker.start()
    try:
        cfg = FuzzConfig(
            seed=int(os.environ.get("FUZZ_SEED", "1")),
            max_inputs=CI_INPUTS,
            max_seconds=CI_SECONDS,
            out_dir=tmp_path / "fuzz-out",
            hang_s=float(os.environ.get("FUZZ_HANG_S", "15")),
            stall_s=float(os.environ.get("FUZZ_STALL_S", "5")),
            rss_limit_mib=int(os.environ.get("FUZZ_RSS_LIMIT_MIB", "1024")),
        )
        fuzzer = Fuzzer(broker, cfg)
        fuzzer.prepare()
        summary = fuzzer.run()
    finally:
        broker.stop()
    print(summary.text())
    assert summary.inputs > 0 and summary.canary_checks >= 3, summary.text()
    assert not summary.failed(), summary.text()
