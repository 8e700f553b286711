# SPDX-License-Identifier: Apache-2.0
"""pytest configuration of the kstage package tests (tests/python_package).

These tests import the `kstage` package that is on sys.path: the installed one (pip install .,
scripts/test.sh's `python` leg) or the build tree's (PYTHONPATH=<build>/python, ctest test
python_package). They never add the source tree's python/ folder to sys.path.

Shared fixtures: `stage` (a fresh kstage.Stage, closed after the test), `paths4` / `q4` (four
prims and their query), `pos` (a sealed float32 x 3 column over them), `emulated` (skips the test when this kstage has no emulated device).
Helpers are in ks_support.py beside this file.
"""
import os

import pytest


def pytest_report_header(config):
    try:
        import kstage
    except ImportError as e:  # the tests say so themselves; keep the header informative
        return f"kstage: not importable ({e})"
    return f"kstage: {os.path.dirname(os.path.abspath(kstage.__file__))}"


@pytest.fixture
def stage():
    import kstage

    s = kstage.Stage()
    yield s
    s.close()


@pytest.fixture
def paths4():
    return [f"/world/p{i}" for i in range(4)]


@pytest.fixture
def q4(stage, paths4):
    return stage.query(paths4)


@pytest.fixture
def pos(stage, q4):
    """pos (float32 x 3) = arange(12).reshape(4, 3), written (copied) and sealed at 1."""
    import numpy as np

    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    stage.write("pos", q4, a, 1)
    stage.seal(1)
    return a


_emulated = None


@pytest.fixture
def emulated():
    """The emulated device's DLPack device type (kDLExtDev = 12); skips the test when this kstage
    build has no emulated device (a pip build: KSTAGE_EMULATED_DEVICE is a test-build option)."""
    global _emulated
    if _emulated is None:
        import ks_support

        _emulated = ks_support.emulated_device_present()
    if not _emulated:
        pytest.skip("this kstage build has no emulated device (KSTAGE_EMULATED_DEVICE=OFF)")
    return 12
