# shellcheck shell=bash
# scripts/setup/mpi.sh -- Open MPI (sourced by scripts/setup.sh, not a command).
#
# By default, into the system (small: ~55 MB installed, ~10 s): Open MPI from Debian's
# libopenmpi-dev and openmpi-bin (mpicc, mpirun), installed with apt-get when missing, for the MPI
# example and its tests (examples/mpi, CMake option KSTAGE_WITH_MPI, on in the `default` preset)
# and the MPI ADIOS2 (adios2_mpi.sh). The library itself never links MPI.
# `--no-mpi` or KSTAGE_SETUP_MPI=0 skips it (configure with -DKSTAGE_WITH_MPI=OFF then).

mpi_present() {
  command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 \
    && dpkg -s libopenmpi-dev >/dev/null 2>&1
}

ensure_mpi() {
  if ! mpi_present; then
    log "installing Open MPI for the MPI example: libopenmpi-dev openmpi-bin"
    system_apt_install libopenmpi-dev openmpi-bin
  fi
  mpi_present || die "Open MPI (mpicc, mpirun, libopenmpi-dev) is still missing"
  log "MPI: $(mpirun --version 2>/dev/null | head -n1)"
}
