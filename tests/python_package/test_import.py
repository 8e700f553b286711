# SPDX-License-Identifier: Apache-2.0
"""The package imports and its extension runs against the libkstage of this source tree."""
import pathlib
import re


def _project_version():
    """(major, minor, patch) from the top-level CMakeLists.txt's project(kstage VERSION x.y.z)."""
    cmake = pathlib.Path(__file__).resolve().parents[2] / "CMakeLists.txt"
    m = re.search(r"project\(kstage VERSION (\d+)\.(\d+)\.(\d+)", cmake.read_text())
    assert m, f"no project(kstage VERSION x.y.z) in {cmake}"
    return tuple(int(x) for x in m.groups())


def test_import():
    import kstage
    import kstage._kstage as ext

    assert ext.__name__ == "kstage._kstage"
    assert pathlib.Path(ext.__file__).parent == pathlib.Path(kstage.__file__).parent


def test_version_matches_project():
    import kstage._kstage as ext

    major, minor, patch = _project_version()
    # kstage_version() encodes MAJOR*10000 + MINOR*100 + PATCH (include/kstage/kstage.h).
    assert ext.version() == major * 10000 + minor * 100 + patch


def test_build_info():
    """kstage.build_info(): kstage_build_info's lines as a dict, in the C order."""
    import kstage

    major, minor, patch = _project_version()
    info = kstage.build_info()
    assert list(info) == ["kstage", "kokkos_built", "kokkos_running", "host_execution", "host_threads",
                          "backends", "devices"]
    assert info["kstage"] == f"{major}.{minor}.{patch}"
    assert info["backends"].split()[0] == "host"
    assert info["devices"].split()[0] == "host:1"
    kstage.Stage()  # Kokkos is initialised now: the running version and the threads are known
    info = kstage.build_info()
    assert info["kokkos_running"] == info["kokkos_built"]
    assert int(info["host_threads"]) >= 1


def test_distribution_version():
    """An installed kstage (pip) carries the project version as its distribution version."""
    import importlib.metadata

    import pytest

    import kstage

    try:
        dist = importlib.metadata.distribution("kstage")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("kstage is not installed as a distribution (build tree)")
    installed = pathlib.Path(dist.locate_file("kstage")).resolve()
    if installed != pathlib.Path(kstage.__file__).resolve().parent:
        pytest.skip(f"the imported kstage is not the installed distribution's ({installed})")
    assert dist.version == "%d.%d.%d" % _project_version()
