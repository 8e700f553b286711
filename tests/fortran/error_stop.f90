! SPDX-License-Identifier: Apache-2.0
! A failure without `stat` stops the program with the message (fortran_error_stop test, driven by
! run_error_stop.cmake, which checks the exit status and what is printed).
program error_stop
  use, intrinsic :: iso_fortran_env, only: int64
  use kstage
  implicit none
  integer(int64) :: stage, token
  call kstage_open(stage)
  call kstage_close(stage)
  call kstage_token(stage, 'velocity', token)   ! a destroyed stage: stops here
  print '(a)', 'error_stop: still running after a failed call without stat'
end program error_stop
