"""The layering docs/architecture.md states, checked on the source with `ast`:

* imports point one way, broker -> remote -> storage -> protocol, and config below all of them: no module imports a
  layer above its own, at run time or under TYPE_CHECKING;
* a module changes another object's state only through its methods: no assignment to an underscore attribute of
  anything but `self`/`cls` (or an instance the class itself just made with `cls.__new__`), nor a mutating call or
  `del` on one (`log._segments.insert(...)`).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.imports import imported_modules, package_files

REPO = Path(__file__).resolve().parents[2]

# What each top-level package may import of Strata besides itself.
ALLOWED = {
    "config": set(),
    "protocol": set(),
    "storage": {"config", "protocol"},
    "remote": {"config", "protocol", "storage"},
    "broker": {"config", "protocol", "storage", "remote"},
}


def _upward_imports(tops: dict[str, set[str]]) -> list[str]:
    bad = []
    for top, allowed in tops.items():
        for path, package in package_files(REPO, [top]):
            for line, module in imported_modules(path, package):
                parts = module.split(".")
                if parts[0] == "strata" and len(parts) > 1 and parts[1] != top and parts[1] not in allowed:
                    bad.append(f"{path.relative_to(REPO)}:{line}: {module}")
    return bad


def test_imports_point_down() -> None:
    assert _upward_imports(ALLOWED) == []


def test_the_import_check_sees_an_upward_import() -> None:
    """storage -> broker would be found (the check is not vacuous): forbid storage's real dependencies instead."""
    assert any(b.startswith("storage/") for b in _upward_imports({"storage": set()}))


def _foreign_underscore_writes(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            continue
        own = {"self", "cls"}
        for node in ast.walk(fn):  # instances a classmethod makes of its own class: h = cls.__new__(cls)
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr == "__new__"
                and isinstance(node.value.func.value, ast.Name)
                and node.value.func.value.id == "cls"
            ):
                own |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(fn):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "setattr"
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and str(node.args[1].value).startswith("_")
            ):
                found.append((node.lineno, f"setattr(..., {node.args[1].value!r})"))
            elif isinstance(node, ast.Delete):
                targets = node.targets
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in MUTATORS
                and _foreign_private(node.func.value, own)
            ):
                found.append((node.lineno, ast.unparse(node.func)))
            for target in targets:
                while isinstance(target, ast.Subscript):  # log._bases[i] = ...: a write into its state too
                    target = target.value
                for x in ast.walk(target):
                    if _foreign_private(x, own):
                        assert isinstance(node, ast.stmt)  # targets come from statements only
                        found.append((node.lineno, ast.unparse(x)))
    return sorted(set(found))


MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "add", "discard", "setdefault"}


def _foreign_private(x: ast.AST, own: set[str]) -> bool:
    """`x` is `obj._name` with obj neither self/cls nor an instance the class just made."""
    return (
        isinstance(x, ast.Attribute)
        and x.attr.startswith("_")
        and not x.attr.startswith("__")
        and not (isinstance(x.value, ast.Name) and x.value.id in own)
    )


# Writes into a pinned third-party library's internals, not into a Strata module: the rule protects our modules'
# state. Each entry is (file, what the check reports); an entry that no longer matches fails the test.
THIRD_PARTY_PATCHES = {
    # kafka-python 3.0.12's struct codegen: tagged fields decoded without copying the frame (fuzzer finding N6)
    ("protocol/codec_tagged.py", "setattr(..., '_emit_tagged_decode')"),
}


def test_no_module_writes_another_objects_underscore_attributes() -> None:
    found = [
        (str(path.relative_to(REPO)), line, what)
        for path, _ in package_files(REPO, ["broker", "remote", "storage", "protocol", "config", "pipeline"])
        for line, what in _foreign_underscore_writes(ast.parse(path.read_text()))
    ]
    offenders = [f"{f}:{line}: {what}" for f, line, what in found if (f, what) not in THIRD_PARTY_PATCHES]
    assert offenders == []
    assert {(f, what) for f, _, what in found} >= THIRD_PARTY_PATCHES, "a stale THIRD_PARTY_PATCHES entry"


def test_the_write_check_sees_foreign_writes() -> None:
    tree = ast.parse(
        "def f(log, segs):\n"
        "    log._segments = segs\n"
        "    log._bases[0] += 1\n"
        "    setattr(log, '_next', 3)\n"
        "    self._ok = 1\n"
        "    log._segments.insert(0, segs)\n"
        "    del log._bases[1:]\n"
        "    log._read()\n"
        "    n = log._size\n"
        "class C:\n"
        "    @classmethod\n"
        "    def make(cls, f):\n"
        "        h = cls.__new__(cls)\n"
        "        h._f = f\n"
        "        return h\n"
    )
    assert [line for line, _ in _foreign_underscore_writes(tree)] == [2, 3, 4, 6, 7]
