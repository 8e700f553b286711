! SPDX-License-Identifier: Apache-2.0
!
! Particles, in Fortran: the C example (examples/c/particles) through module kstage. A producer
! moves a subset of N particles every tick and hands the new "position" (float32 x 3, POINT) and
! "velocity" (float32 x 3, VECTOR) to a stage; a consumer asks the stage what changed at that tick
! and checks it against the plain Fortran arrays that model the simulation.
!
!   kstage_example_fortran_particles [-n N] [-t T] [-f PERCENT]
!
! Ordinal 1 holds the initial state (every particle, INSERT). Tick k = 1..T moves about
! PERCENT % of the particles (default 5) and writes them at ordinal k + 1, then seals it. Two
! ways to send a sparse update alternate:
!   - mask ticks (odd k): the whole pos(3, n) and vel(3, n) arrays, with a logical mask over the
!     query of all particles that selects the moved ones;
!   - index_map ticks (even k): a query over just the moved particles (in particle order) and the
!     arrays themselves, with index_map(i) = the particle (row, counted from 1) of query prim i:
!     no compact copy of the moved rows is made.
! The consumer reads the change range [k + 1, k + 1] of "position" over all particles: exactly
! the moved ones must come back, with exactly the producer's values. At the end every particle's
! latest position and velocity are checked, and a report is printed.
program particles
  use, intrinsic :: iso_fortran_env, only: int64, real32, real64, error_unit
  use kstage
  implicit none

  integer(int64) :: n = 100000, ticks = 50, percent = 5
  integer(int64) :: stage, position, velocity, all_particles, moved_query, read
  integer(int64) :: k, i, j, m, ordinal, seen, rows_written = 0, rows_read = 0
  integer(int64) :: mask_ticks = 0, map_ticks = 0, tmp
  real(real32), allocatable :: pos(:, :), vel(:, :)
  integer(int64), allocatable :: paths(:), perm(:), sorted(:)
  logical, allocatable :: moved(:)
  character(len=32), allocatable :: names(:)
  type(kstage_group) :: group
  real(real32), pointer :: values(:, :)
  integer(int64) :: clock_start, clock_end, clock_rate
  real(real64) :: t_write = 0, t_read = 0
  real(real32) :: r(3)

  call parse_arguments()
  m = max(1_int64, n * percent / 100)
  allocate(pos(3, n), vel(3, n), paths(n), perm(n), sorted(m), moved(n), names(n))

  ! ---- the stage, the names, the initial state at ordinal 1 ------------------------------------
  call kstage_open(stage)
  call kstage_token(stage, 'position', position)
  call kstage_token(stage, 'velocity', velocity)
  do i = 1, n
    write(names(i), '(a, i0)') '/particles/p', i - 1
    perm(i) = i
  end do
  call kstage_paths(stage, names, paths)
  call random_seed_fixed()
  call random_number(pos)
  pos = 10 * pos
  call random_number(vel)
  vel = vel - 0.5
  call kstage_query(stage, paths, all_particles)
  call kstage_write(stage, all_particles, position, 1_int64, pos, mode=KSTAGE_PRIM_MODE_INSERT, &
                    semantic=KSTAGE_SEMANTIC_POINT)
  ! (the prims exist once the position write is submitted: velocity joins them, UPSERT)
  call kstage_write(stage, all_particles, velocity, 1_int64, vel, semantic=KSTAGE_SEMANTIC_VECTOR)
  call kstage_seal(stage, 1_int64)

  ! ---- the ticks -------------------------------------------------------------------------------
  do k = 1, ticks
    ordinal = k + 1
    ! Pick m distinct particles (partial Fisher-Yates): perm(1:m).
    do i = 1, m
      call random_number(r(1))
      j = i + min(n - i, int(r(1) * real(n - i + 1, real32), int64))
      tmp = perm(i)
      perm(i) = perm(j)
      perm(j) = tmp
    end do
    ! Move them: a small kick to the velocity, then a step.
    moved = .false.
    do i = 1, m
      j = perm(i)
      call random_number(r)
      vel(3, j) = vel(3, j) - 0.0981
      vel(:, j) = vel(:, j) + 0.01 * (r - 0.5)
      pos(:, j) = pos(:, j) + 0.1 * vel(:, j)
      moved(j) = .true.
    end do
    sorted = pack([(i, i = 1, n)], moved)   ! the moved ones, in particle order

    call system_clock(clock_start, clock_rate)
    if (mod(k, 2_int64) == 1) then
      ! The whole arrays; the mask selects the moved particles of the query of all.
      call kstage_write(stage, all_particles, position, ordinal, pos, mask=moved, &
                        mode=KSTAGE_PRIM_MODE_UPDATE, semantic=KSTAGE_SEMANTIC_POINT)
      call kstage_write(stage, all_particles, velocity, ordinal, vel, mask=moved, &
                        mode=KSTAGE_PRIM_MODE_UPDATE, semantic=KSTAGE_SEMANTIC_VECTOR)
      mask_ticks = mask_ticks + 1
    else
      ! A query over just the moved particles; query prim i takes particle sorted(i)'s row.
      call kstage_query(stage, paths(sorted), moved_query)
      call kstage_write(stage, moved_query, position, ordinal, pos, index_map=sorted, &
                        mode=KSTAGE_PRIM_MODE_UPDATE, semantic=KSTAGE_SEMANTIC_POINT)
      call kstage_write(stage, moved_query, velocity, ordinal, vel, index_map=sorted, &
                        mode=KSTAGE_PRIM_MODE_UPDATE, semantic=KSTAGE_SEMANTIC_VECTOR)
      call kstage_query_free(stage, moved_query)
      map_ticks = map_ticks + 1
    end if
    call kstage_seal(stage, ordinal)
    call system_clock(clock_end)
    t_write = t_write + real(clock_end - clock_start, real64) / real(clock_rate, real64)
    rows_written = rows_written + 2 * m

    ! Consumer: what changed at this ordinal? Exactly the moved particles, in particle order.
    call system_clock(clock_start)
    call kstage_read_open(stage, all_particles, [position], read, range=[ordinal, ordinal])
    seen = 0
    do while (kstage_read_next(stage, read, group))
      if (group%is_delete .or. group%ordinal /= ordinal .or. group%dtype%lanes /= 3 .or. &
          group%semantic /= KSTAGE_SEMANTIC_POINT) then
        write(error_unit, '(a, i0, a)') 'particles: tick ', k, ': an unexpected group'
        error stop 1
      end if
      call kstage_values(group, values)
      do i = 1, group%prim_count
        if (seen + i > m) then
          write(error_unit, '(a, i0, a)') 'particles: tick ', k, ': more changes than moves'
          error stop 1
        end if
        j = sorted(seen + i)
        if (group%prims(i) /= paths(j)) then
          write(error_unit, '(a, i0, a, i0, a, i0)') 'particles: tick ', k, ': change ', &
            seen + i, ' is not moved particle ', j
          error stop 1
        end if
        if (any(values(:, group%rows(i)) /= pos(:, j))) then
          write(error_unit, '(a, i0, a, i0, a)') 'particles: tick ', k, ': particle ', j, &
            ' does not read back the values written'
          error stop 1
        end if
      end do
      seen = seen + group%prim_count
      call kstage_group_release(stage, group)
    end do
    call kstage_read_close(stage, read)
    call system_clock(clock_end)
    t_read = t_read + real(clock_end - clock_start, real64) / real(clock_rate, real64)
    rows_read = rows_read + seen
    if (seen /= m) then
      write(error_unit, '(a, i0, a, i0, a, i0)') 'particles: tick ', k, ': ', seen, &
        ' particles reported as changed, moved ', m
      error stop 1
    end if
  end do

  ! ---- the final state: every particle, both attributes ----------------------------------------
  call kstage_read_open(stage, all_particles, [position, velocity], read)
  seen = 0
  do while (kstage_read_next(stage, read, group))
    call kstage_values(group, values)
    if (group%prim_count /= n .or. group%ordinal /= ticks + 1) then
      write(error_unit, '(a)') 'particles: the final read is not every particle at the last tick'
      error stop 1
    end if
    do i = 1, n
      if (group%prims(i) /= paths(i)) error stop 'particles: the final read is out of order'
      if (group%attribute == position) then
        if (any(values(:, group%rows(i)) /= pos(:, i))) error stop 'particles: a final position'
      else
        if (any(values(:, group%rows(i)) /= vel(:, i))) error stop 'particles: a final velocity'
      end if
    end do
    seen = seen + 1
    call kstage_group_release(stage, group)
  end do
  call kstage_read_close(stage, read)
  if (seen /= 2) error stop 'particles: the final read did not return two groups'
  call kstage_query_free(stage, all_particles)
  call kstage_close(stage)
  deallocate(pos, vel, paths, perm, sorted, moved, names)

  print '(a, i0, ".", i0, ".", i0, a)', 'kstage ', KSTAGE_VERSION_MAJOR, KSTAGE_VERSION_MINOR, &
    KSTAGE_VERSION_PATCH, ' particles example (Fortran)'
  print '(a, i0)', '  particles          ', n
  print '(a, i0, a, i0, a, i0, a)', '  ticks              ', ticks, ' (', mask_ticks, &
    ' mask writes, ', map_ticks, ' index_map writes)'
  print '(a, i0)', '  moved per tick     ', m
  print '(a, i0, a, f0.4, a)', '  producer           ', rows_written, &
    ' rows written (position + velocity) in ', t_write, ' s'
  print '(a, i0, a, f0.4, a)', '  consumer           ', rows_read, &
    ' rows read (position change ranges) in ', t_read, ' s'
  print '(a, i0, a)', '  final state        ', n, ' positions and velocities match the model'
  print '(a)', 'particles: OK'

contains

  subroutine parse_arguments()
    character(len=64) :: arg, value
    integer :: a, status
    integer(int64) :: v
    a = 1
    do while (a <= command_argument_count())
      call get_command_argument(a, arg)
      if (arg == '-h' .or. arg == '--help') then
        print '(a)', 'usage: kstage_example_fortran_particles [-n particles] [-t ticks] [-f percent]'
        stop
      end if
      call get_command_argument(a + 1, value, status=status)
      read(value, *, iostat=status) v
      if (status /= 0 .or. v <= 0 .or. a + 1 > command_argument_count()) then
        write(error_unit, '(3a)') 'particles: ', trim(arg), ' needs a positive number'
        error stop 2
      end if
      select case (arg)
      case ('-n')
        n = v
      case ('-t')
        ticks = v
      case ('-f')
        percent = min(v, 100_int64)
      case default
        write(error_unit, '(2a)') 'particles: unknown option ', trim(arg)
        error stop 2
      end select
      a = a + 2
    end do
  end subroutine

  ! The same particles on every run.
  subroutine random_seed_fixed()
    integer :: size, s
    integer, allocatable :: seed(:)
    call random_seed(size=size)
    allocate(seed(size))
    seed = [(104729 * s, s = 1, size)]
    call random_seed(put=seed)
  end subroutine
end program particles
