import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "build"


@pytest.fixture(scope="session")
def chain_binary() -> Path:
    subprocess.run(["make", "-s", "-C", str(ROOT / "fixtures")], check=True)
    return FIXTURES / "chain"


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Symbol tables go to a per-test cache, never the user's."""
    monkeypatch.setenv("JITPROF_CACHE_DIR", str(tmp_path / "cache"))
