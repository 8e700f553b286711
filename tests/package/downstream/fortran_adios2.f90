! SPDX-License-Identifier: Apache-2.0
! Downstream use of an installed kstage's module kstage_adios2 (find_package(kstage COMPONENTS
! fortran fortran_adios2)): a checkpoint made the latest, restarted into a new stage.
!   kstage_downstream_fortran_adios2 [pointer]   (default: downstream.latest)
program downstream_fortran_adios2
  use, intrinsic :: iso_fortran_env, only: int64, real64
  use kstage
  use kstage_adios2
  implicit none
  integer(int64) :: stage, other, mass, paths(2), query, ordinal
  character(len=4096) :: pointer
  call get_command_argument(1, pointer)
  if (len_trim(pointer) == 0) pointer = 'downstream.latest'
  call kstage_open(stage)
  call kstage_token(stage, 'mass', mass)
  call kstage_paths(stage, ['/downstream/a', '/downstream/b'], paths)
  call kstage_query(stage, paths, query)
  call kstage_write(stage, query, mass, 1_int64, [1.0_real64, 2.0_real64])
  call kstage_seal(stage, 1_int64)
  call kstage_checkpoint_latest(stage, pointer)
  call kstage_open(other)
  call kstage_restart_latest(other, pointer, ordinal)
  if (ordinal /= 1) error stop 'downstream_fortran_adios2: wrong ordinal'
  call kstage_close(other)
  call kstage_close(stage)
end program downstream_fortran_adios2
