"""strata.cli is a client of the Kafka protocol that the server never imports: the server packages must not depend
on it (scanned with ast, relative imports resolved), the CLI loads none of them until `serve` runs, and its
registry of subcommands stays consistent."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from strata.cli.main import COMMANDS, USAGE, build_parser
from tests.support.imports import imported_modules, package_files

REPO = Path(__file__).resolve().parents[2]
SERVER_PACKAGES = ("broker", "remote", "storage", "protocol", "config")


def test_server_packages_never_import_the_cli() -> None:
    scanned = list(package_files(REPO, SERVER_PACKAGES))
    assert len(scanned) > 50, "the scan found too few files: did the layout change?"
    offenders = [
        f"{path.relative_to(REPO)}:{line}: {module}"
        for path, package in scanned
        for line, module in imported_modules(path, package)
        if module == "strata.cli" or module.startswith("strata.cli.")
    ]
    assert offenders == []


def test_the_scan_sees_relative_and_absolute_imports(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("from .. import cli\nfrom strata.cli.admin_client import AdminClient\nimport strata.cli\n")
    found = set(imported_modules(f, "strata.broker"))
    assert {(1, "strata.cli"), (2, "strata.cli.admin_client"), (3, "strata.cli")} <= found


def test_usage_names_every_registered_command() -> None:
    names = [c.NAME for c in COMMANDS]
    assert sorted(USAGE.strip("{}").split(",")) == sorted(names)
    sub = argparse.ArgumentParser().add_subparsers()
    for command in COMMANDS:
        command.register(sub)
    assert list(sub.choices) == names
    build_parser().parse_args(["dump-log"])  # the real parser builds


def test_building_the_cli_loads_no_server_package() -> None:
    """`strata topics` must not pay for the broker, storage or remote stack; only `serve` imports them."""
    code = (
        "import sys; from strata.cli.main import build_parser; build_parser(); "
        "print(sorted(m for m in sys.modules if m.split('.')[:2] in "
        "(['strata', 'broker'], ['strata', 'storage'], ['strata', 'remote'])))"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
