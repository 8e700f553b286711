/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ADIOS2 bridge's MPI form (kstage/kstage_adios2_mpi.h) for module kstage_adios2: Fortran
 * hands a communicator as its MPI_Fint handle (module mpi's integer, mpi_f08's comm%MPI_VAL),
 * which MPI_Comm_f2c makes the C MPI_Comm the bridge takes. Built into libkstage_fortran_adios2;
 * where the bridge has no MPI form, kstage_fortran_adios2_has_mpi() is 0 and the layer refuses
 * before it would call the others (which then only say KSTAGE_NOT_SUPPORTED).
 */
#include <kstage/kstage_adios2.h>

#ifdef KSTAGE_FORTRAN_ADIOS2_MPI
#include <kstage/kstage_adios2_mpi.h>
#define KSTAGE_COMM(c) MPI_Comm_f2c((MPI_Fint)(c))
#endif

int kstage_fortran_adios2_has_mpi(void);
kstage_status_t kstage_fortran_adios2_open_mpi(const char* name,
                                               const kstage_adios2_open_desc_t* desc, int comm,
                                               kstage_adios2_stream_t* stream);
kstage_status_t kstage_fortran_adios2_checkpoint_mpi(kstage_stage_t stage, const char* path,
                                                     int comm);
kstage_status_t kstage_fortran_adios2_restart_ex_mpi(kstage_stage_t stage, const char* path,
                                                     const kstage_adios2_restart_desc_t* desc,
                                                     int comm, uint64_t* ordinal);
kstage_status_t kstage_fortran_adios2_checkpoint_latest_mpi(kstage_stage_t stage,
                                                            const char* pointer, int comm);
kstage_status_t kstage_fortran_adios2_restart_latest_mpi(kstage_stage_t stage, const char* pointer,
                                                         int comm, uint64_t* ordinal);

#ifdef KSTAGE_FORTRAN_ADIOS2_MPI

int kstage_fortran_adios2_has_mpi(void) { return 1; }
kstage_status_t kstage_fortran_adios2_open_mpi(const char* name,
                                               const kstage_adios2_open_desc_t* desc, int comm,
                                               kstage_adios2_stream_t* stream) {
  return kstage_adios2_open_mpi(name, desc, KSTAGE_COMM(comm), stream);
}
kstage_status_t kstage_fortran_adios2_checkpoint_mpi(kstage_stage_t stage, const char* path,
                                                     int comm) {
  return kstage_adios2_checkpoint_mpi(stage, path, KSTAGE_COMM(comm));
}
kstage_status_t kstage_fortran_adios2_restart_ex_mpi(kstage_stage_t stage, const char* path,
                                                     const kstage_adios2_restart_desc_t* desc,
                                                     int comm, uint64_t* ordinal) {
  return kstage_adios2_restart_ex_mpi(stage, path, desc, KSTAGE_COMM(comm), ordinal);
}
kstage_status_t kstage_fortran_adios2_checkpoint_latest_mpi(kstage_stage_t stage,
                                                            const char* pointer, int comm) {
  return kstage_adios2_checkpoint_latest_mpi(stage, pointer, KSTAGE_COMM(comm));
}
kstage_status_t kstage_fortran_adios2_restart_latest_mpi(kstage_stage_t stage, const char* pointer,
                                                         int comm, uint64_t* ordinal) {
  return kstage_adios2_restart_latest_mpi(stage, pointer, KSTAGE_COMM(comm), ordinal);
}

#else

int kstage_fortran_adios2_has_mpi(void) { return 0; }
kstage_status_t kstage_fortran_adios2_open_mpi(const char* name,
                                               const kstage_adios2_open_desc_t* desc, int comm,
                                               kstage_adios2_stream_t* stream) {
  (void)name, (void)desc, (void)comm, (void)stream;
  return KSTAGE_NOT_SUPPORTED;
}
kstage_status_t kstage_fortran_adios2_checkpoint_mpi(kstage_stage_t stage, const char* path,
                                                     int comm) {
  (void)stage, (void)path, (void)comm;
  return KSTAGE_NOT_SUPPORTED;
}
kstage_status_t kstage_fortran_adios2_restart_ex_mpi(kstage_stage_t stage, const char* path,
                                                     const kstage_adios2_restart_desc_t* desc,
                                                     int comm, uint64_t* ordinal) {
  (void)stage, (void)path, (void)desc, (void)comm, (void)ordinal;
  return KSTAGE_NOT_SUPPORTED;
}
kstage_status_t kstage_fortran_adios2_checkpoint_latest_mpi(kstage_stage_t stage,
                                                            const char* pointer, int comm) {
  (void)stage, (void)pointer, (void)comm;
  return KSTAGE_NOT_SUPPORTED;
}
kstage_status_t kstage_fortran_adios2_restart_latest_mpi(kstage_stage_t stage, const char* pointer,
                                                         int comm, uint64_t* ordinal) {
  (void)stage, (void)pointer, (void)comm, (void)ordinal;
  return KSTAGE_NOT_SUPPORTED;
}

#endif
