"""Build the TypeScript client (sdk/js) for the tests that load it.

``built_module()`` returns sdk/js/dist/durablecache.min.js, running
``npm ci`` and ``npm run build`` first when dist is missing or older than
any source of it. Without npm the caller's test is skipped with the
reason, unless DURABLECACHE_REQUIRE_BROWSER is set (CI), where it fails.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.harness import ROOT

SDK = ROOT / "sdk" / "js"
MODULE = SDK / "dist" / "durablecache.min.js"
# What the bundle is made from: a change to any of these makes dist stale.
SOURCES = ["src", "scripts", "package.json", "package-lock.json", "tsconfig.json"]
NPM_TIMEOUT_S = 300


def _newest(paths: list[Path]) -> float:
    times = []
    for path in paths:
        files = path.rglob("*") if path.is_dir() else [path]
        times.extend(f.stat().st_mtime for f in files if f.is_file())
    return max(times)


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        message = "npm is missing: the TypeScript client cannot be built"
        if os.environ.get("DURABLECACHE_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)
    return npm


def _run(npm: str, *args: str) -> None:
    result = subprocess.run(
        [npm, *args, "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=SDK,
        capture_output=True,
        text=True,
        timeout=NPM_TIMEOUT_S,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"npm {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")


def build(*, force: bool = False) -> Path:
    """Build dist/ when it is stale (always with ``force``); return the
    minified ES module."""
    npm = _npm()
    lock = SDK / "package-lock.json"
    installed = SDK / "node_modules" / ".package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        _run(npm, "ci")
    sources = _newest([SDK / name for name in SOURCES])
    if force or not MODULE.exists() or MODULE.stat().st_mtime < sources:
        _run(npm, "run", "build")
    return MODULE


def built_module() -> Path:
    """The built minified ES module, fresh with respect to its sources."""
    return build()
