"""A copy of this checkout as a newcomer gets it from git: tracked and untracked-but-not-ignored files, symlinks kept
(strata/broker -> ../broker, ...), nothing git ignores (.venv, strata-data, node_modules). Tests of `make run` and
`make cluster` run in such a copy so that what they create (.venv, data dirs) stays out of the real checkout."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .broker_proc import REPO_ROOT


def copy_checkout(dest: Path, exclude: tuple[str, ...] = ()) -> Path:
    """Copy the checkout to `dest`, leaving out the top-level folders in `exclude`; returns `dest`."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout
    for rel in filter(None, out.decode().split("\0")):
        if rel.split("/", 1)[0] in exclude:
            continue
        src, dst = REPO_ROOT / rel, dest / rel
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the work tree, not yet in the index
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst, follow_symlinks=False)
    return dest
