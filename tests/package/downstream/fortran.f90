! SPDX-License-Identifier: Apache-2.0
! Downstream use of an installed kstage from Fortran (module kstage): a pos(3, n) array is
! written, sealed and read back as a Fortran pointer over the stage's memory, with no copy on
! either side. Built by CMake (find_package(kstage COMPONENTS fortran)) and by the plain Makefile
! of tests/package/make (pkg-config kstage-fortran).
program downstream_fortran
  use, intrinsic :: iso_c_binding, only: c_associated, c_loc, c_f_pointer
  use, intrinsic :: iso_fortran_env, only: int64, real32
  use kstage
  implicit none
  integer, parameter :: n = 64
  integer(int64) :: stage, pos, paths(n), query, read, i
  real(real32), target :: p(3, n)
  real(real32), pointer :: values(:, :)
  type(kstage_group) :: group
  type(DLTensor), pointer :: tensor
  character(len=24) :: names(n)
  logical :: ok

  do i = 1, n
    write(names(i), '(a, i0)') '/downstream/p', i
    p(:, i) = [real(i, real32), real(2 * i, real32), real(-i, real32)]
  end do
  call kstage_open(stage)
  call kstage_token(stage, 'position', pos)
  call kstage_paths(stage, names, paths)
  call kstage_query(stage, paths, query)
  call kstage_write(stage, query, pos, 1_int64, p, semantic=KSTAGE_SEMANTIC_POINT)
  call kstage_seal(stage, 1_int64)
  call kstage_read_open(stage, query, [pos], read)
  ok = kstage_read_next(stage, read, group)
  if (.not. ok) error stop 'downstream_fortran: no group'
  call kstage_values(group, values)
  do i = 1, n
    if (any(values(:, group%rows(i)) /= p(:, i))) error stop 'downstream_fortran: wrong values'
  end do
  ! The pointer is the group's tensor itself (zero-copy): the same address.
  call c_f_pointer(group%data%tensors, tensor)
  if (.not. c_associated(c_loc(values), tensor%data)) &
    error stop 'downstream_fortran: the pointer is not the group''s memory'
  call kstage_group_release(stage, group)
  call kstage_read_close(stage, read)
  call kstage_close(stage)
  print '(a, i0, a)', 'kstage downstream (Fortran): ', n, ' rows written and read: OK'
end program downstream_fortran
