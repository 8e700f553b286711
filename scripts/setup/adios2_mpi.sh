# shellcheck shell=bash
# scripts/setup/adios2_mpi.sh -- the MPI ADIOS2 and mpi4py (sourced by scripts/setup.sh, not a
# command).
#
# Only with `--adios2-mpi` or KSTAGE_SETUP_ADIOS2_MPI=1 (scripts/test.sh passes it for the
# `adios2-mpi` preset): an MPI build of ADIOS2 for the bridge's MPI form
# (kstage/kstage_adios2_mpi.h), in $KSTAGE_DEPS_DIR/adios2-mpi (626 s of CPU with mpi4py: ~5 min
# on 2 idle cores)
#   - ADIOS2's source distribution from PyPI (the `adios2` sdist, the same version as the
#     wheel), built with CMake against the Open MPI of mpi.sh (adios2.sh's adios2_source_dep:
#     shared, Release, the C and C++ bindings and the BP engines; SST, Python, Fortran, HDF5 and
#     the compressors off); ADIOS2_DIR=$KSTAGE_DEPS_DIR/adios2-mpi/lib/cmake/adios2 (the
#     adios2-mpi preset's). Needs Open MPI (not with --no-mpi); implies --adios2 (its venv's pip
#     downloads the source).
#   - with --python too: mpi4py (its wheel, which loads the machine's MPI at run time) for the
#     python-venv's Python in $KSTAGE_DEPS_DIR/mpi4py, for the Python package's MPI test.

ADIOS2_MPI_RECIPE=1
ADIOS2_MPI_PREFIX=$DEPS_DIR/adios2-mpi

adios2_mpi_dep() {
  local mpi_version
  mpi_version=$(mpirun --version 2>/dev/null | head -n1 || echo none)
  adios2_source_dep adios2-mpi "$ADIOS2_MPI_PREFIX" "recipe=$ADIOS2_MPI_RECIPE MPI: $mpi_version" \
    'set(ADIOS2_HAVE_MPI TRUE)' -DADIOS2_USE_MPI=ON
}

# mpi4py for the Python package's MPI test (tests/python_package/mpi_adios2.py), for the Python of
# the python-venv (--python), in $KSTAGE_DEPS_DIR/mpi4py (a folder for PYTHONPATH): its wheel,
# which loads the machine's MPI library at run time.
MPI4PY_PIN="mpi4py>=4.0"
mpi4py_dep() {
  local py=$DEPS_DIR/python-venv/bin/python pyver key
  if [ ! -x "$py" ]; then
    log "mpi4py: no python-venv (--python): skipped"
    return 0
  fi
  pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  key="mpi4py pin=$MPI4PY_PIN python=$pyver mpi=$(mpirun --version 2>/dev/null | head -n1)"
  if stamp_ok mpi4py "$key" "$DEPS_DIR/mpi4py/mpi4py/__init__.py"; then
    log "mpi4py: cached ($(sed -n 2p "$STAMP_DIR/mpi4py.stamp"))"
    return 0
  fi
  rm -rf "$DEPS_DIR/mpi4py"
  "$py" -m pip install -q --only-binary mpi4py --target "$DEPS_DIR/mpi4py" "$MPI4PY_PIN" >"$LOG_DIR/mpi4py.log" 2>&1 \
    || { tail -n 20 "$LOG_DIR/mpi4py.log" >&2; die "mpi4py: pip install failed (log: $LOG_DIR/mpi4py.log)"; }
  local have
  have=$(PYTHONPATH=$DEPS_DIR/mpi4py "$py" -c 'import mpi4py; from mpi4py import MPI; print("mpi4py", mpi4py.__version__, "on", MPI.Get_library_version().split(",")[0])') \
    || die "mpi4py: it does not import with this machine's MPI"
  printf '%s\n%s\n' "$key" "$have" > "$STAMP_DIR/mpi4py.stamp"
  log "mpi4py: ready ($have)"
}
