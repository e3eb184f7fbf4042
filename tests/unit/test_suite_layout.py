"""The suite's own layout: test modules are imported by basename (the test folders are not packages), so two test
files with one name in different folders break collection of the whole suite (CI saw tests/pipeline and
tests/integration each add a test_transactions.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_module_basenames_are_unique() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py") if "node_modules" not in p.parts)
    assert [n for n, c in names.items() if c > 1] == []
