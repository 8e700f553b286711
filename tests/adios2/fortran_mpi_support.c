/* SPDX-License-Identifier: Apache-2.0 */
/*
 * MPI for fortran_mpi.f90 through C (no MPI Fortran bindings needed): the world communicator's
 * Fortran handle, which module kstage_adios2's `comm` arguments take, and the collectives the
 * test agrees its outcome with.
 */
#include <mpi.h>

void kstage_test_mpi_start(int* comm, int* rank, int* size) {
  MPI_Init(NULL, NULL);
  *comm = (int)MPI_Comm_c2f(MPI_COMM_WORLD);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
}
void kstage_test_mpi_barrier(void) { MPI_Barrier(MPI_COMM_WORLD); }
int kstage_test_mpi_max(int value) {
  int most = value;
  MPI_Allreduce(&value, &most, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return most;
}
void kstage_test_mpi_stop(void) { MPI_Finalize(); }
