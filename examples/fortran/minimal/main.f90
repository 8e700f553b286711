! SPDX-License-Identifier: Apache-2.0
! The README's Fortran quick start, as a program that runs as a test (scripts/check_docs.py
! checks that the README shows exactly the lines below).
program minimal
  use, intrinsic :: iso_fortran_env, only: int64, real32
  use kstage
  implicit none
  integer(int64) :: stage, pos, paths(4), query, read
  real(real32) :: p(3, 4)             ! 4 rows of 3 lanes: p(:, j) is row j
  real(real32), pointer :: values(:, :)
  type(kstage_group) :: group
  integer :: i

  call kstage_open(stage)
  call kstage_token(stage, 'pos', pos)
  call kstage_paths(stage, ['/world/p0', '/world/p1', '/world/p2', '/world/p3'], paths)
  call kstage_query(stage, paths, query)
  p = reshape([(real(i, real32), i = 1, 12)], [3, 4])
  call kstage_write(stage, query, pos, 1_int64, p, semantic=KSTAGE_SEMANTIC_POINT)
  ! prim i takes row index_map(i), counted from 1: the rows in reverse
  call kstage_write(stage, query, pos, 2_int64, p, index_map=[4, 3, 2, 1], &
                    semantic=KSTAGE_SEMANTIC_POINT)
  call kstage_seal(stage, 2_int64)    ! ordinals 1 and 2 become visible

  call kstage_read_open(stage, query, [pos], read)
  do while (kstage_read_next(stage, read, group))
    call kstage_values(group, values) ! a pointer over the stage's memory: (lanes, rows)
    do i = 1, int(group%prim_count)   ! prim i is row group%rows(i)
      print '(a, 3f6.1)', 'prim ', values(:, group%rows(i))
      if (any(values(:, group%rows(i)) /= p(:, 5 - i))) error stop 'minimal: wrong values'
    end do
    call kstage_group_release(stage, group)
  end do
  call kstage_read_close(stage, read)
  call kstage_close(stage)
end program minimal
