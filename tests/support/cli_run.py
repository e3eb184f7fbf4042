"""Running the real ``strata`` command (a ``python -m strata`` subprocess, cwd = the repository) for the
tests/integration/test_cli_*.py files, and checking its exit code and one-line errors."""

from __future__ import annotations

import subprocess
import sys

from tests.support.broker_proc import REPO_ROOT


def strata(*args: str, stdin: str | None = None, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strata", *args],
        cwd=REPO_ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    assert "Traceback" not in r.stderr, r.stderr
    return r.stdout


def fails(r: subprocess.CompletedProcess[str], code: int | None = None) -> str:
    """The one stderr line of a refused command (exit code `code`, or any non-zero)."""
    assert r.returncode != 0 if code is None else r.returncode == code, (
        f"exit {r.returncode}, expected {code or 'non-zero'}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    )
    err = r.stderr.strip()
    assert err and "\n" not in err and "Traceback" not in err, f"not a one-line error: {r.stderr!r}"
    return err
