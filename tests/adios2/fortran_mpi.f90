! SPDX-License-Identifier: Apache-2.0
!
! adios2_mpi_fortran_<P>: module kstage_adios2's MPI form (a `comm` argument: a Fortran MPI
! communicator handle) on P ranks, each rank's stage holding prims of its own:
!   - kstage_checkpoint(comm=) then kstage_restart(comm=, manifest REQUIRED) on the same ranks:
!     each rank gets its own prims and values back, at the checkpoint's ordinal
!   - kstage_checkpoint_latest / kstage_restart_latest with comm
!   - a stream: kstage_stream_open(comm=) to write one step and close; opened again to read it
!     step by step (its prims back on each rank, then the end)
!   - a restart of a folder that is not there: refused on every rank, no stage changed
!   kstage_test_fortran_adios2_mpi <scratch folder>   (under mpiexec; rank 0 empties it first)
program test_fortran_adios2_mpi
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: int64, real64, error_unit
  use kstage
  use kstage_adios2
  implicit none

  interface
    subroutine mpi_start(comm, rank, size) bind(C, name="kstage_test_mpi_start")
      import :: c_int
      integer(c_int), intent(out) :: comm, rank, size
    end subroutine
    subroutine mpi_barrier() bind(C, name="kstage_test_mpi_barrier")
    end subroutine
    function mpi_max(value) bind(C, name="kstage_test_mpi_max") result(most)
      import :: c_int
      integer(c_int), value :: value
      integer(c_int) :: most
    end function
    subroutine mpi_stop() bind(C, name="kstage_test_mpi_stop")
    end subroutine
  end interface

  integer(c_int) :: world, rank, ranks
  character(len=:), allocatable :: dir
  character(len=32) :: names(3)
  integer(int64) :: stage, other, pos, paths(3), query, ordinal, w, r
  real(real64) :: p(3, 3)
  integer :: k, st, failures
  logical :: more

  failures = 0
  call mpi_start(world, rank, ranks)
  call scratch_folder(dir)
  call expect(kstage_has_adios2_mpi(), 'the bridge has its MPI form')

  ! Rank r's prims /part/r<r>/p1..p3, pos = 100 r + the prim's number, sealed at 2.
  do k = 1, 3
    write (names(k), '(a, i0, a, i0)') '/part/r', rank, '/p', k
  end do
  p = reshape([(real(100 * rank + k, real64), k = 1, 9)], [3, 3])
  call kstage_open(stage)
  call kstage_token(stage, 'pos', pos)
  call kstage_paths(stage, names, paths)
  call kstage_query(stage, paths, query)
  call kstage_write(stage, query, pos, 2_int64, p)
  call kstage_seal(stage, 2_int64)

  ! ---- checkpoint and restart on the same ranks ------------------------------------------------
  call kstage_checkpoint(stage, dir // '/ck.bp', comm=world)
  call kstage_open(other)
  call kstage_restart(other, dir // '/ck.bp', ordinal, manifest=KSTAGE_ADIOS2_MANIFEST_REQUIRED, &
                      comm=world)
  call expect(ordinal == 2, 'restart: ordinal 2')
  call check_stage(other, 'restart')
  call kstage_close(other)

  ! ---- the latest pointer ----------------------------------------------------------------------
  call kstage_checkpoint_latest(stage, dir // '/run.latest', comm=world)
  call kstage_open(other)
  call kstage_restart_latest(other, dir // '/run.latest', ordinal, comm=world)
  call expect(ordinal == 2, 'restart_latest: ordinal 2')
  call check_stage(other, 'restart_latest')
  call kstage_close(other)

  ! ---- a stream, written and read by every rank ------------------------------------------------
  call kstage_stream_open(dir // '/stream.bp', w, comm=world)
  call kstage_stream_write_step(w, stage, query)
  call kstage_stream_close(w)
  call kstage_open(other)
  call kstage_stream_open(dir // '/stream.bp', r, mode=KSTAGE_ADIOS2_READ, comm=world)
  more = kstage_stream_read_step(r, other, ordinal)
  call expect(more .and. ordinal == 2, 'stream: a step at 2')
  call check_stage(other, 'stream')
  more = kstage_stream_read_step(r, other, ordinal, stat=st)
  call expect(.not. more .and. st == KSTAGE_OK, 'stream: then the end')
  call kstage_stream_close(r)
  call kstage_close(other)

  ! ---- refused on every rank -------------------------------------------------------------------
  call kstage_open(other)
  call kstage_restart(other, dir // '/missing.bp', comm=world, stat=st)
  call expect(st /= KSTAGE_OK, 'a missing folder: refused')
  call expect(index(kstage_error_message(), 'kstage_restart: ') == 1, &
              'a missing folder: the message: ' // kstage_error_message())
  call expect_empty(other, 'a missing folder')
  call kstage_close(other)

  call kstage_query_free(stage, query)
  call kstage_close(stage)
  failures = mpi_max(failures)
  call mpi_stop()
  deallocate(dir)
  if (failures > 0) then
    write (error_unit, '(a, i0, a)') 'test_fortran_adios2_mpi: a rank had ', failures, &
                                     ' failed check(s)'
    error stop 1
  end if
  if (rank == 0) print '(a, i0, a)', 'test_fortran_adios2_mpi: all checks passed on ', ranks, &
                                     ' ranks'

contains

  subroutine expect(condition, what)
    logical, intent(in) :: condition
    character(len=*), intent(in) :: what
    if (condition) return
    failures = failures + 1
    write (error_unit, '(a, i0, 2a)') 'FAILED (rank ', rank, '): ', what
  end subroutine

  subroutine scratch_folder(folder)
    character(len=:), allocatable, intent(out) :: folder
    integer :: n
    if (command_argument_count() < 1) error stop 'usage: kstage_test_fortran_adios2_mpi <folder>'
    call get_command_argument(1, length=n)
    allocate(character(len=n) :: folder)
    call get_command_argument(1, folder)
    if (rank == 0) then
      call execute_command_line("rm -rf '" // folder // "' && mkdir -p '" // folder // "'", &
                                exitstat=n)
      if (n /= 0) error stop 'test_fortran_adios2_mpi: cannot make the scratch folder'
    end if
    call mpi_barrier()
  end subroutine

  ! The stage holds exactly this rank's three prims, with their values.
  subroutine check_stage(s, what)
    integer(int64), intent(in) :: s
    character(len=*), intent(in) :: what
    integer(int64) :: q, n, read, t, ids(3)
    type(kstage_group) :: group
    real(real64), pointer :: v(:, :)
    integer :: j
    call kstage_query_existing(s, q)
    call kstage_query_size(s, q, n)
    call kstage_query_free(s, q)
    call expect(n == 3, what // ': this rank''s 3 prims')
    call kstage_token(s, 'pos', t)
    call kstage_paths(s, names, ids)
    call kstage_query(s, ids, q)
    call kstage_read_open(s, q, [t], read, compact=.true., host=.true.)
    n = 0
    do while (kstage_read_next(s, read, group))
      call kstage_values(group, v)
      do j = 1, int(group%prim_count)
        call expect(all(v(:, group%rows(j)) == p(:, j)), what // ': pos values')
      end do
      n = n + group%prim_count
      call kstage_group_release(s, group)
    end do
    call expect(n == 3, what // ': 3 values')
    call kstage_read_close(s, read)
    call kstage_query_free(s, q)
  end subroutine

  subroutine expect_empty(s, what)
    integer(int64), intent(in) :: s
    character(len=*), intent(in) :: what
    integer(int64) :: q, n
    call kstage_query_existing(s, q)
    call kstage_query_size(s, q, n)
    call kstage_query_free(s, q)
    call expect(n == 0, what // ': the stage unchanged')
  end subroutine

end program test_fortran_adios2_mpi
