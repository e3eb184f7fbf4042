"""strata.cli is a client of the Kafka protocol that the server never imports: the server packages must not depend
on it (scanned with ast, relative imports resolved), the CLI loads none of them until `serve` runs, and its
registry of subcommands stays consistent."""
from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from strata.cli.main import COMMANDS, USAGE, build_parser

REPO = Path(__file__).resolve().parents[2]
SERVER_PACKAGES = ("broker", "remote", "storage", "protocol", "config")


def _imported_modules(path: Path, package: str) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in one file of `package` (relative ones resolved)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            yield node.lineno, module
            for alias in node.names:        # `from strata import cli`, `from .. import cli`
                yield node.lineno, f"{module}.{alias.name}"


def _server_files() -> Iterator[tuple[Path, str]]:
    for top in SERVER_PACKAGES:
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).with_suffix("")
            # relative imports start from the file's package: strata.broker for broker/x.py and broker/__init__.py
            yield path, ".".join(["strata", *rel.parts[:-1]])


def test_server_packages_never_import_the_cli() -> None:
    scanned = list(_server_files())
    assert len(scanned) > 50, "the scan found too few files: did the layout change?"
    offenders = [f"{path.relative_to(REPO)}:{line}: {module}"
                 for path, package in scanned
                 for line, module in _imported_modules(path, package)
                 if module == "strata.cli" or module.startswith("strata.cli.")]
    assert offenders == []


def test_the_scan_sees_relative_and_absolute_imports(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("from .. import cli\nfrom strata.cli.admin_client import AdminClient\nimport strata.cli\n")
    found = set(_imported_modules(f, "strata.broker"))
    assert {(1, "strata.cli"), (2, "strata.cli.admin_client"), (3, "strata.cli")} <= found


def test_usage_names_every_registered_command() -> None:
    names = [c.NAME for c in COMMANDS]
    assert sorted(USAGE.strip("{}").split(",")) == sorted(names)
    sub = argparse.ArgumentParser().add_subparsers()
    for command in COMMANDS:
        command.register(sub)
    assert list(sub.choices) == names
    build_parser().parse_args(["dump-log"])        # the real parser builds


def test_building_the_cli_loads_no_server_package() -> None:
    """`strata topics` must not pay for the broker, storage or remote stack; only `serve` imports them."""
    code = ("import sys; from strata.cli.main import build_parser; build_parser(); "
            "print(sorted(m for m in sys.modules if m.split('.')[:2] in "
            "(['strata', 'broker'], ['strata', 'storage'], ['strata', 'remote'])))")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
