# shellcheck shell=bash
# scripts/setup/python.sh -- what building the Python package needs (sourced by
# scripts/setup.sh, not a command).
#
# Only with `--python` or KSTAGE_SETUP_PYTHON=1 (scripts/test.sh passes it for the `default`,
# `python` and `adios2-mpi` legs): what building the Python package kstage (pyproject.toml,
# python/) needs
#   - python3's C headers (Python.h): Debian's python3-dev, installed with apt-get when missing
#     (a python3 that is not Debian's, e.g. pyenv's, must bring its own);
#   - a Python virtual environment in $KSTAGE_DEPS_DIR/python-venv, made as the others
#     (common.sh), with numpy, pytest, nanobind, scikit-build-core, matplotlib, jax[cpu] (the
#     pinned jax, jax.sh's JAX_PIN), pyarrow, nanoarrow, polars, duckdb (the Arrow tests) and
#     warp-lang (the Warp tests), usd-core (kstage.usd) from the machine's configured pip index: for a developer build
#     of the extension
#     (cmake -DKSTAGE_BUILD_PYTHON=ON -DPython_EXECUTABLE=$KSTAGE_DEPS_DIR/python-venv/bin/python)
#     and for `pip install --no-build-isolation` (docs/python.md).

# What building the Python package needs: python3's headers, and a venv with the build backend
# (scikit-build-core, nanobind) and what the package, its tests, examples and benchmark use.
# The lower bounds of scikit-build-core and nanobind are pyproject.toml's build requirements.
python3_headers_present() {
  python3 - <<'PY' >/dev/null 2>&1
import os, sys, sysconfig
sys.exit(0 if os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)
PY
}

ensure_python_headers() {
  python3_headers_present && return 0
  local py
  py=$(command -v python3)
  case $(readlink -f "$py") in
    /usr/bin/*) ;;
    *) die "python-venv: $py has no C headers (Python.h) and is not Debian's python3; install its development files" ;;
  esac
  log "installing python3-dev (Python.h for the Python package's extension)"
  system_apt_install python3-dev
  python3_headers_present || die "python3-dev is installed but Python.h is still missing"
}

# The Arrow consumers tests/python_package/test_arrow.py checks kstage's export with (the PyCapsule
# interface with device arrays: pyarrow >= 16, nanoarrow >= 0.6), DuckDB (the Python example and
# the tests query kstage columns with it), and NVIDIA Warp (test_warp.py: kernels on its CPU device).
INTEROP_PINS="pyarrow>=16 nanoarrow>=0.6 polars>=1.0 duckdb>=1.1 warp-lang>=1.5"
# OpenUSD for Python (kstage.usd; pyproject.toml's `usd` extra pins the same).
USD_PIN="usd-core>=25.5"

python_package_venv() {
  # shellcheck disable=SC2086  # INTEROP_PINS is a list of requirement words
  python_venv python-venv "$DEPS_DIR/python-venv" 1 \
    'import numpy, pytest, nanobind, scikit_build_core, matplotlib, jax, pyarrow, nanoarrow, polars, duckdb, warp, pxr.Usd; print("numpy", numpy.__version__, "nanobind", nanobind.__version__, "scikit-build-core", scikit_build_core.__version__, "jax", jax.__version__, "pyarrow", pyarrow.__version__, "usd", pxr.Usd.GetVersion())' \
    "numpy>=2.1" pytest "nanobind>=2.4" "scikit-build-core>=0.10" matplotlib "$JAX_PIN" $INTEROP_PINS "$USD_PIN"
}
