"""Fixtures for the attack tests; helpers live in ``securitykit``."""

from __future__ import annotations

from pathlib import Path

import pytest
from securitykit import Org


@pytest.fixture
def org(tmp_path: Path) -> Org:
    return Org.create(tmp_path / "org")
