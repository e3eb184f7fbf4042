"""`pip install .` puts one top-level package, `strata`, into site-packages (and its dist-info), never `broker`,
`config`, `protocol`, ... of their own, which would collide with any other library of those names.

The wheel is built from the checkout once per module (the strata/ links are followed, so it holds real files) and
installed without dependencies into an empty venv; the installed tree is compared with the checkout's packages.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tests.support.broker_proc import REPO_ROOT

PACKAGES = ("broker", "protocol", "storage", "remote", "config", "pipeline")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str]]:
    """(the empty venv's site-packages after the install, the names the install added to it)"""
    tmp = tmp_path_factory.mktemp("pkg")
    wheels = tmp / "wheels"
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO_ROOT))
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=False)  # installed into by this pip (--python): no ensurepip run, seconds less
    py = env_dir / "bin" / "python"
    before = set(_site(py).iterdir())
    wheel = next(wheels.glob("strata_broker-*.whl"))
    _run(sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index", str(wheel))
    site = _site(py)
    return site, {p.name for p in set(site.iterdir()) - before}


def _run(*cmd: str) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def _site(py: Path) -> Path:
    return Path(_run(str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())


def test_only_strata_is_added(installed: tuple[Path, set[str]]) -> None:
    site, added = installed
    assert sysconfig.get_paths()["purelib"] != str(site)  # the empty venv, not the one running the tests
    assert {n for n in added if not n.endswith(".dist-info")} == {"strata"}
    assert len([n for n in added if n.endswith(".dist-info")]) == 1


def test_every_package_of_the_checkout_is_installed(installed: tuple[Path, set[str]]) -> None:
    """A sub-package missing from the wheel would only show when a user imports it."""
    site_packages, _ = installed
    for top in PACKAGES:
        src = REPO_ROOT / top
        for init in src.rglob("__init__.py"):
            rel = init.relative_to(REPO_ROOT)
            assert (site_packages / "strata" / rel).is_file(), f"{rel} is not in the wheel"
        assert not (site_packages / "strata" / top).is_symlink()
    assert (site_packages / "strata" / "__main__.py").is_file()
    own = [d for d in (REPO_ROOT / "strata").iterdir() if d.is_dir() and not d.is_symlink()]  # strata/cli
    assert own
    for d in own:
        for init in d.rglob("__init__.py"):
            assert (site_packages / init.relative_to(REPO_ROOT)).is_file(), f"{init} is not in the wheel"
