# SPDX-License-Identifier: Apache-2.0
"""pytest configuration of the kstage package tests (tests/python_package).

These tests import the `kstage` package that is on sys.path: the installed one (pip install .,
scripts/test.sh's `python` leg) or the build tree's (PYTHONPATH=<build>/python, ctest test
python_package). They never add the source tree's python/ folder to sys.path.
"""
import os


def pytest_report_header(config):
    try:
        import kstage
    except ImportError as e:  # the tests say so themselves; keep the header informative
        return f"kstage: not importable ({e})"
    return f"kstage: {os.path.dirname(os.path.abspath(kstage.__file__))}"
