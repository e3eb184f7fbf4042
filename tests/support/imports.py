"""Static import scans of the source tree with `ast`: which strata modules each file imports (relative imports
resolved), for the layering tests."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path


def imported_modules(path: Path, package: str) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in one file of `package` (relative ones resolved)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            yield node.lineno, module
            for alias in node.names:  # `from strata import cli`, `from .. import cli`
                yield node.lineno, f"{module}.{alias.name}"


def package_files(repo: Path, tops: Iterable[str]) -> Iterator[tuple[Path, str]]:
    """(path, the package its relative imports start from) of every module under the top-level folders `tops`."""
    for top in tops:
        for path in sorted((repo / top).rglob("*.py")):
            rel = path.relative_to(repo).with_suffix("")
            # relative imports start from the file's package: strata.broker for broker/x.py and broker/__init__.py
            yield path, ".".join(["strata", *rel.parts[:-1]])
