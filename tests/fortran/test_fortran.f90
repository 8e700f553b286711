! SPDX-License-Identifier: Apache-2.0
!
! The Fortran module's tests (ctest fortran_api): the constants and struct layouts against C, and
! the Fortran layer -- dense, strided, index_map and mask writes, ragged writes, reads, change
! ranges, maps, deletes -- with every error path the layer adds. Each check that fails prints
! what it saw; the program exits non-zero if any did.
module checks
  use, intrinsic :: iso_fortran_env, only: int64, error_unit
  use kstage
  implicit none
  integer :: failures = 0

contains

  subroutine check(condition, what)
    logical, intent(in) :: condition
    character(len=*), intent(in) :: what
    if (.not. condition) then
      failures = failures + 1
      write(error_unit, '(2a)') 'FAILED: ', what
    end if
  end subroutine

  ! A call that must fail with `expected` and a message that contains `fragment`.
  subroutine expect_failure(stat, expected, fragment, what)
    integer, intent(in) :: stat, expected
    character(len=*), intent(in) :: fragment, what
    character(len=:), allocatable :: message
    message = kstage_error_message()
    if (stat /= expected) then
      failures = failures + 1
      write(error_unit, '(4a, 2a)') 'FAILED: ', what, ': status ', kstage_status_name(stat), &
        ', expected ', kstage_status_name(expected)
      write(error_unit, '(2a)') '  message: ', message
    else if (index(message, fragment) == 0) then
      failures = failures + 1
      write(error_unit, '(5a)') 'FAILED: ', what, ': the message "', message, '"'
      write(error_unit, '(3a)') '  does not contain "', fragment, '"'
    end if
  end subroutine

  subroutine expect_ok(stat, what)
    integer, intent(in) :: stat
    character(len=*), intent(in) :: what
    if (stat /= KSTAGE_OK) then
      failures = failures + 1
      write(error_unit, '(4a)') 'FAILED: ', what, ': ', kstage_status_name(stat)
      write(error_unit, '(2a)') '  message: ', kstage_error_message()
    end if
  end subroutine
end module checks

! A log callback written in Fortran (kstage_set_log_callback): counts the messages it is given
! and keeps the last one's channel and text.
module log_counter
  use, intrinsic :: iso_c_binding
  use kstage
  implicit none
  integer :: calls = 0
  integer(c_int32_t) :: last_severity = -1
  character(len=:), allocatable :: last_channel, last_message
contains
  subroutine on_log(severity, channel, message, user_data) bind(C)
    integer(c_int32_t), value :: severity
    type(c_ptr), value :: channel, message, user_data
    calls = calls + 1
    last_severity = severity
    last_channel = kstage_string(channel)
    last_message = kstage_string(message)
  end subroutine
end module log_counter

! The float32 x 3 values of every prim of `query` for `attribute`, in query order, read back
! through the layer (latest sealed state); 0 where a prim does not hold it.
module readback
  use, intrinsic :: iso_fortran_env, only: int64, real32
  use kstage
  use checks
  implicit none
contains
  subroutine read_float3(stage, query, attribute, out, present_count)
    integer(int64), intent(in) :: stage, query, attribute
    real(real32), intent(out) :: out(:, :)
    integer(int64), intent(out), optional :: present_count
    integer(int64) :: read, i, n, k
    integer(int64), allocatable :: prims(:)
    type(kstage_group) :: group
    real(real32), pointer :: values(:, :)
    out = 0
    call kstage_query_prims(stage, query, prims)
    call kstage_read_open(stage, query, [attribute], read)
    n = 0
    do while (kstage_read_next(stage, read, group))
      call kstage_values(group, values)
      do i = 1, group%prim_count
        k = findloc(prims, group%prims(i), 1)
        out(:, k) = values(:, group%rows(i))
      end do
      n = n + group%prim_count
      call kstage_group_release(stage, group)
    end do
    call kstage_read_close(stage, read)
    if (present(present_count)) present_count = n
  end subroutine
end module readback

program test_fortran
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: int8, int32, int64, real32, real64, error_unit
  use kstage
  use kstage_constants_table
  use layout_check
  use checks
  use readback
  implicit none

  interface
    function c_constant(name, length, value) bind(C, name="kstage_test_c_constant") result(found)
      import :: c_char, c_size_t, c_int64_t, c_int
      character(kind=c_char), intent(in) :: name(*)
      integer(c_size_t), value :: length
      integer(c_int64_t), intent(out) :: value
      integer(c_int) :: found
    end function
    function c_misaligned_stride_status() bind(C, name="kstage_test_misaligned_stride") &
        result(status)
      import :: c_int32_t
      integer(c_int32_t) :: status
    end function
  end interface

  integer, parameter :: n = 10
  integer(int64) :: stage, pos, vel, ids, nbrs, mass, mapped, ragged_map
  integer(int64) :: paths(n), qall, first5, query, read, map, count
  integer :: stat, i, j
  real(real32), target :: p(3, n), q(3, n), got(3, n), before(3, n)
  type(kstage_group) :: group
  real(real32), pointer :: v2(:, :), v1(:)

  call test_constants()
  call check_layout(failures)
  call test_c_api()
  call test_log()

  call kstage_open(stage)
  call kstage_token(stage, 'position', pos)
  call kstage_token(stage, 'velocity', vel)
  call kstage_token(stage, 'ids', ids)
  call kstage_token(stage, 'neighbours', nbrs)
  call kstage_token(stage, 'mass', mass)
  call kstage_token(stage, 'mapped', mapped)
  call kstage_token(stage, 'ragged_map', ragged_map)
  call kstage_paths(stage, [character(len=16) :: '/p/a0', '/p/a1', '/p/a2', '/p/a3', '/p/a4', &
                    '/p/a5', '/p/a6', '/p/a7', '/p/a8', '/p/a9'], paths)
  call kstage_query(stage, paths, qall)
  call kstage_query(stage, paths(1:5), first5)
  do j = 1, n
    do i = 1, 3
      p(i, j) = real(10 * j + i, real32)
    end do
  end do

  call test_dense()
  call test_strided()
  call test_index_maps()
  call test_masks()
  call test_ragged()
  call test_change_ranges_and_deletes()
  call test_maps()
  call test_errors()
  call test_names()
  call test_world_transforms()
  call test_semantics()
  call test_clone()
  call test_hierarchy()
  call test_device_columns()

  call kstage_close(stage)
  if (failures /= 0) then
    write(error_unit, '(i0, a)') failures, ' checks failed'
    error stop 1
  end if
  print '(a)', 'test_fortran: OK'

contains

  ! Every constant of module kstage_constants equals its C value.
  subroutine test_constants()
    integer :: k
    integer(c_int64_t) :: value
    do k = 1, constant_count
      if (c_constant(trim(constant_names(k)), int(len_trim(constant_names(k)), c_size_t), &
                     value) == 0) then
        call check(.false., 'constant ' // trim(constant_names(k)) // ' is unknown to C')
      else
        call check(value == constant_values(k), 'constant ' // trim(constant_names(k)) // &
                   ' differs from C')
      end if
    end do
    call check(constant_count > 60, 'the constants table is complete')
  end subroutine

  ! The semantics that fix a column's layout: their constants, a TIME_CODE, a FRAME and an
  ! ASSET_PATH_ID column written and described, and a TIME_CODE of the wrong dtype refused;
  ! kstage_op_sync on a host op.
  subroutine test_semantics()
    integer(int64) :: s, pair(2), q, tc, fr, asset, op
    real(real64) :: times(2), frames(4, 4, 2)
    real(real32) :: times32(2)
    integer(int64) :: assets(2, 2)
    type(kstage_attribute_info_t) :: info
    integer :: st
    call check(KSTAGE_SEMANTIC_ASSET_PATH_ID == 11 .and. KSTAGE_SEMANTIC_PATH_EXPRESSION_ID == 12 &
               .and. KSTAGE_SEMANTIC_RELATIONSHIP_PATH_ID == 13 .and. &
               KSTAGE_SEMANTIC_CONNECTION_PATH_ID == 14 .and. KSTAGE_SEMANTIC_TIME_CODE == 15 &
               .and. KSTAGE_SEMANTIC_FRAME == 16, 'the semantic constants')
    call kstage_open(s)
    call kstage_token(s, 'time', tc)
    call kstage_token(s, 'frame', fr)
    call kstage_token(s, 'asset', asset)
    call kstage_paths(s, [character(len=8) :: '/s0', '/s1'], pair)
    call kstage_query(s, pair, q)
    times = [1.5_real64, 2.5_real64]
    call kstage_write(s, q, tc, 1_int64, times, semantic=KSTAGE_SEMANTIC_TIME_CODE)
    frames = 0
    frames(1, 1, :) = 1
    call kstage_write(s, q, fr, 1_int64, frames, semantic=KSTAGE_SEMANTIC_FRAME)
    assets = reshape([3_int64, 4_int64, 0_int64, 0_int64], [2, 2])
    call kstage_write(s, q, asset, 1_int64, assets, semantic=KSTAGE_SEMANTIC_ASSET_PATH_ID, &
                      unsigned=.true.)
    call kstage_seal(s, 1_int64)
    info = kstage_attribute_info_init()
    call check(kstage_attribute_info(s, tc, info) == KSTAGE_OK .and. &
               info%semantic == KSTAGE_SEMANTIC_TIME_CODE .and. info%dtype%bits == 64, &
               'semantics: TIME_CODE')
    call check(kstage_attribute_info(s, fr, info) == KSTAGE_OK .and. &
               info%semantic == KSTAGE_SEMANTIC_FRAME .and. info%dtype%lanes == 16, &
               'semantics: FRAME')
    call check(kstage_attribute_info(s, asset, info) == KSTAGE_OK .and. &
               info%semantic == KSTAGE_SEMANTIC_ASSET_PATH_ID .and. info%dtype%lanes == 2 .and. &
               info%dtype%code == kDLUInt, 'semantics: ASSET_PATH_ID')
    times32 = [1, 2]
    call kstage_write(s, q, tc, 2_int64, times32, semantic=KSTAGE_SEMANTIC_TIME_CODE, stat=st)
    call expect_failure(st, KSTAGE_INVALID_ARGUMENT, 'float32', 'semantics: a float32 TIME_CODE')
    ! kstage_op_sync through its C interface: a delete is a host op, which takes {0, 0} only.
    call check(kstage_delete_attributes(s, q, [asset], 1_int64, 2_int64, op) == KSTAGE_OK, &
               'kstage_delete_attributes')
    call check(kstage_op_sync(s, op, kstage_device_sync_t(0, 0)) == KSTAGE_OK, &
               'kstage_op_sync: a host op, {0, 0}')
    call check(kstage_op_sync(s, op, kstage_device_sync_t(1, 0)) == KSTAGE_INVALID_ARGUMENT, &
               'kstage_op_sync: a host op, a stream')
    call check(kstage_release_op(s, op) == KSTAGE_OK, 'kstage_release_op')
    call check(kstage_op_sync(s, op, kstage_device_sync_t(0, 0)) == KSTAGE_INVALID_HANDLE, &
               'kstage_op_sync: a released op')
    call kstage_close(s)
  end subroutine

  ! World transforms through the layer: a chain /arm -> /arm/hand, the translation in
  ! m(1:3, 4, j); the reserved names as character constants; an error with stat.
  subroutine test_world_transforms()
    integer(int64) :: s, local, world, chain(2), q, read
    real(real64) :: m(4, 4, 2)
    real(real64), pointer :: w(:, :)
    type(kstage_group) :: g
    integer :: st, k
    call check(KSTAGE_LOCAL_MATRIX == 'omni:xform' .and. &
               KSTAGE_WORLD_MATRIX == 'omni:fabric:worldMatrix' .and. &
               KSTAGE_RESET_XFORM_STACK == 'omni:resetXformStack' .and. &
               KSTAGE_PRIM_TYPE == 'usd-prim-type' .and. KSTAGE_APPLIED_SCHEMAS == 'usd-schemas', &
               'the reserved names')
    call kstage_open(s)
    call kstage_token(s, KSTAGE_LOCAL_MATRIX, local)
    call kstage_token(s, KSTAGE_WORLD_MATRIX, world)
    call kstage_paths(s, [character(len=16) :: '/arm', '/arm/hand'], chain)
    call kstage_query(s, chain, q)
    call kstage_world_transforms(s, 1_int64, stat=st)
    call expect_failure(st, KSTAGE_NOT_FOUND, 'omni:xform', 'kstage_world_transforms: no locals')
    m = 0
    do k = 1, 4
      m(k, k, :) = 1
    end do
    m(1:3, 4, 1) = [1, 0, 0]
    m(1:3, 4, 2) = [0, 2, 0]
    call kstage_write(s, q, local, 1_int64, m, semantic=KSTAGE_SEMANTIC_MATRIX)
    call kstage_seal(s, 1_int64)
    call kstage_world_transforms(s, 2_int64)
    call kstage_seal(s, 2_int64)
    call kstage_read_open(s, q, [world], read)
    do while (kstage_read_next(s, read, g))
      call kstage_values(g, w)
      do k = 1, int(g%prim_count)
        if (g%prims(k) == chain(2)) then
          call check(all(w(13:15, g%rows(k)) == [1, 2, 0]), 'the hand''s world translation')
        end if
      end do
      call kstage_group_release(s, g)
    end do
    call kstage_read_close(s, read)
    call kstage_world_transforms(s, 2_int64, mode=KSTAGE_TRANSFORM_FULL, stat=st)
    call expect_failure(st, KSTAGE_WRITE_FLOOR_VIOLATION, 'write floor 2', &
                        'kstage_world_transforms at the floor')
    call kstage_world_transforms(s, 3_int64, local=world, world=world, stat=st)
    call expect_failure(st, KSTAGE_INVALID_ARGUMENT, 'desc.local and desc.world', &
                        'kstage_world_transforms: one column twice')
    call kstage_close(s)
  end subroutine

  ! Clone through the layer (kstage_clone_to, kstage_clone_to_range): /src and /src/a copied to
  ! two listed targets and to members 1 and 2 of a path range, seen once sealed; the refusals
  ! with stat, each leaving the stage unchanged.
  subroutine test_clone()
    integer(int64) :: s, pos, src(2), t(4), q, n, first, ghost, nothing, member(8)
    real(real32) :: v(3, 2), out(3, 8)
    integer :: st, k
    call kstage_open(s)
    call kstage_token(s, 'pos', pos)
    call kstage_paths(s, [character(len=8) :: '/src', '/src/a'], src)
    call kstage_query(s, src, q)
    v = reshape([1, 2, 3, 4, 5, 6], [3, 2])
    call kstage_write(s, q, pos, 1_int64, v)
    call kstage_seal(s, 1_int64)
    call kstage_query_free(s, q)

    call kstage_paths(s, [character(len=8) :: '/t1', '/t1/a', '/t2', '/t2/a'], t)
    call kstage_query(s, t, q)
    call kstage_clone_to(s, src(1), [t(1), t(3)], 2_int64)
    call read_float3(s, q, pos, out(:, 1:4), n)
    call check(n == 0, 'kstage_clone_to: nothing before the seal')
    call kstage_seal(s, 2_int64)
    call read_float3(s, q, pos, out(:, 1:4), n)
    call check(n == 4, 'kstage_clone_to: four prims made')
    call check(all(out(:, 1) == v(:, 1)) .and. all(out(:, 2) == v(:, 2)) .and. &
               all(out(:, 3) == v(:, 1)) .and. all(out(:, 4) == v(:, 2)), &
               'kstage_clone_to: the values copied')
    call kstage_query_free(s, q)

    ! Refusals, with stat: an existing target (the other target is not made either), no
    ! source, a target below the source, the write floor.
    call kstage_path(s, '/t3', ghost)
    call kstage_clone_to(s, src(1), [ghost, t(1)], 3_int64, stat=st)
    call expect_failure(st, KSTAGE_ALREADY_EXISTS, "'/t1' already exists", &
                        'kstage_clone_to: an existing target')
    call kstage_path(s, '/nothing', nothing)
    call kstage_clone_to(s, nothing, [ghost], 3_int64, stat=st)
    call expect_failure(st, KSTAGE_NOT_FOUND, "'/nothing' does not exist", &
                        'kstage_clone_to: no source')
    call kstage_clone_to(s, src(1), [src(2)], 3_int64, stat=st)
    call expect_failure(st, KSTAGE_INVALID_ARGUMENT, 'lies below the source', &
                        'kstage_clone_to: the source''s child')
    call kstage_clone_to(s, src(1), [ghost], 2_int64, stat=st)
    call expect_failure(st, KSTAGE_WRITE_FLOOR_VIOLATION, 'write floor 2', &
                        'kstage_clone_to at the floor')
    call kstage_seal(s, 3_int64)
    call kstage_query(s, [ghost], q)
    call read_float3(s, q, pos, out(:, 1:1), n)
    call check(n == 0, 'kstage_clone_to: nothing of the refused clones')
    call kstage_query_free(s, q)

    ! Members 1 and 2 (from 0) of a range of eight, then from 6 to the end.
    call kstage_path_range(s, '/envs', 'e', 0_int64, 8_int64, first)
    member = [(first + k, k = 0, 7)]
    call kstage_clone_to_range(s, src(2), first, 4_int64, start=1_int64, count=2_int64)
    call kstage_clone_to_range(s, src(2), first, 4_int64, start=6_int64)
    call kstage_seal(s, 4_int64)
    call kstage_query(s, member, q)
    call read_float3(s, q, pos, out, n)
    call check(n == 4, 'kstage_clone_to_range: four members made')
    do k = 1, 8
      if (k == 2 .or. k == 3 .or. k >= 7) then
        call check(all(out(:, k) == v(:, 2)), 'kstage_clone_to_range: a member''s copy')
      else
        call check(all(out(:, k) == 0), 'kstage_clone_to_range: a member left out')
      end if
    end do
    call kstage_query_free(s, q)
    call kstage_clone_to_range(s, src(2), first, 5_int64, start=7_int64, count=2_int64, stat=st)
    call expect_failure(st, KSTAGE_INVALID_ARGUMENT, 'beyond the range', &
                        'kstage_clone_to_range: beyond the range')
    call kstage_clone_to_range(s, src(2), member(2), 5_int64, stat=st)
    call expect_failure(st, KSTAGE_INVALID_ARGUMENT, 'not the first path of a path range', &
                        'kstage_clone_to_range: not a range''s first id')
    call kstage_close(s)
  end subroutine

  ! The query of one predicate, built in a named array (see test_hierarchy).
  subroutine where1(s, op, attribute, values, found, st)
    integer(int64), intent(in) :: s, attribute
    integer, intent(in) :: op
    integer(int64), intent(in) :: values(:)
    integer(int64), intent(out) :: found
    integer, intent(out), optional :: st
    type(kstage_predicate) :: one(1)
    one(1)%op = op
    one(1)%attribute = attribute
    one(1)%values = values
    call kstage_query_where(s, one, found, st)
  end subroutine

  ! The scene's hierarchy and filters (docs/scene.md): a small tree with a gap (/w/a holds
  ! nothing, so /w/a/c is a child of /w), a missing prim, a path range's members as one span,
  ! filters by parent and by prim type, and the refusals.
  subroutine test_hierarchy()
    integer(int64) :: s, mass, ptype, parent, path_attr, xform, cube, tree(4), ghost, first
    integer(int64) :: q, qr, found
    type(kstage_predicate), allocatable :: preds(:)
    integer, allocatable :: status(:)
    integer(int64), allocatable :: start(:), span_first(:), span_count(:), prims(:)
    integer :: st
    call check(KSTAGE_PATH_ATTRIBUTE == 'usd-path' .and. KSTAGE_PARENT_ATTRIBUTE == 'usd-parent' &
               .and. KSTAGE_CHILDREN_ATTRIBUTE == 'usd-children', 'the hierarchy''s names')
    call kstage_open(s)
    call kstage_token(s, 'mass', mass)
    call kstage_token(s, KSTAGE_PRIM_TYPE, ptype)
    call kstage_token(s, KSTAGE_PARENT_ATTRIBUTE, parent)
    call kstage_token(s, KSTAGE_PATH_ATTRIBUTE, path_attr)
    call kstage_token(s, 'Xform', xform)
    call kstage_token(s, 'Cube', cube)
    call kstage_paths(s, [character(len=8) :: '/w', '/w/a/c', '/w/b', '/x'], tree)
    call kstage_path(s, '/ghost', ghost)   ! interned, never a prim
    call kstage_query(s, tree, q)
    call kstage_write(s, q, ptype, 1_int64, [xform, cube, cube, xform], &
                      semantic=KSTAGE_SEMANTIC_TOKEN_ID, unsigned=.true.)
    call kstage_seal(s, 1_int64)
    call kstage_query_free(s, q)

    ! Children: one item per prim, in query order; /ghost's item alone fails.
    call kstage_query(s, [tree(1), ghost, tree(2), tree(4)], q)
    call kstage_hierarchy(s, q, KSTAGE_RELATION_CHILDREN, status, start, span_first, span_count)
    call check(size(status) == 4 .and. size(start) == 5, 'hierarchy: one item per prim')
    call check(all(status == [KSTAGE_OK, KSTAGE_NOT_FOUND, KSTAGE_OK, KSTAGE_OK]), &
               'hierarchy: the missing prim''s item fails alone')
    call check(start(1) == 1 .and. start(5) == size(span_first) + 1, 'hierarchy: item_start')
    call check(all(kstage_span_paths(span_first(start(1):start(2) - 1), &
                                     span_count(start(1):start(2) - 1)) == tree(2:3)), &
               'hierarchy: /w''s children, across the gap')
    call check(all(start(2:5) == start(2)), 'hierarchy: no spans for the missing prim, the leaves')
    ! Parents and siblings.
    call kstage_hierarchy(s, q, KSTAGE_RELATION_PARENT, status, start, span_first, span_count)
    call check(start(2) == 1, 'hierarchy: /w is a root')
    call check(start(4) - start(3) == 1 .and. span_first(start(3)) == tree(1) .and. &
               span_count(start(3)) == 1, 'hierarchy: /w/a/c''s parent is /w')
    call kstage_hierarchy(s, q, KSTAGE_RELATION_SIBLINGS, status, start, span_first, span_count)
    call check(all(kstage_span_paths(span_first(start(1):start(2) - 1), &
                                     span_count(start(1):start(2) - 1)) == [tree(4)]), &
               'hierarchy: the siblings of a root are the other roots')
    call check(all(kstage_span_paths(span_first(start(3):start(4) - 1), &
                                     span_count(start(3):start(4) - 1)) == [tree(3)]), &
               'hierarchy: /w/a/c''s sibling')
    call kstage_hierarchy(s, q, 7, status, start, span_first, span_count, stat=st)
    call expect_failure(st, KSTAGE_INVALID_ARGUMENT, 'relation', 'hierarchy: a bad relation')
    call check(size(status) == 0 .and. size(start) == 1, 'hierarchy: nothing on failure')
    call kstage_query_free(s, q)

    ! A path range's 100 members under /w: one span.
    call kstage_path_range(s, '/w', 'e_', 0_int64, 100_int64, first)
    call kstage_query_of_range(s, first, qr)
    call kstage_write(s, qr, mass, 2_int64, [(1.0_real32, st = 1, 100)])
    call kstage_seal(s, 2_int64)
    call kstage_query(s, [tree(1)], q)
    call kstage_hierarchy(s, q, KSTAGE_RELATION_CHILDREN, status, start, span_first, span_count)
    call check(size(span_first) == 3, 'hierarchy: the range is one span')
    call check(all(span_first == [tree(2), tree(3), first]) .and. &
               all(span_count == [1_int64, 1_int64, 100_int64]), 'hierarchy: the spans')
    call check(size(kstage_span_paths(span_first, span_count)) == 102, 'kstage_span_paths')
    call kstage_query_free(s, q)

    ! Filters: by parent, by prim type, combined, and every prim. (The predicates are named
    ! arrays: gfortran 12 leaks the allocatable components of an array constructor's
    ! temporaries, `[kstage_predicate(..., [x])]`, which a program that filters every tick
    ! would notice.)
    call where1(s, KSTAGE_FILTER_IN, parent, [tree(1)], found)
    call kstage_query_prims(s, found, prims)
    call check(size(prims) == 102 .and. all(prims(1:2) == tree(2:3)) .and. prims(3) == first, &
               'query_where: the children of /w')
    call kstage_query_free(s, found)
    call where1(s, KSTAGE_FILTER_IN, ptype, [cube], found)
    call kstage_query_prims(s, found, prims)
    call check(size(prims) == 2 .and. all(prims == tree(2:3)), 'query_where: the cubes')
    call kstage_query_free(s, found)
    allocate(preds(2))
    preds(1)%op = KSTAGE_FILTER_IN
    preds(1)%attribute = ptype
    preds(1)%values = [xform]
    preds(2)%op = KSTAGE_FILTER_PREFIX
    preds(2)%attribute = path_attr
    preds(2)%values = [tree(1)]
    call kstage_query_where(s, preds, found)
    call kstage_query_prims(s, found, prims)
    call check(size(prims) == 1 .and. prims(1) == tree(1), 'query_where: AND')
    call kstage_query_free(s, found)
    deallocate(preds)
    allocate(preds(2))
    preds(1)%attribute = mass   ! (op: KSTAGE_FILTER_HAS by default, no values)
    preds(2)%attribute = parent
    call kstage_query_where(s, preds, found)
    call kstage_query_size(s, found, qr)
    call check(qr == 100, 'query_where: HAS without values')
    call kstage_query_free(s, found)
    ! Refusals, with stat.
    call where1(s, KSTAGE_FILTER_LT, mass, [1_int64], found, st)
    call expect_failure(st, KSTAGE_NOT_SUPPORTED, 'not supported', 'query_where: LT')
    preds(2)%op = KSTAGE_FILTER_IN
    preds(2)%attribute = mass
    preds(2)%values = [1_int64]
    call kstage_query_where(s, preds, found, st)
    call expect_failure(st, KSTAGE_NOT_SUPPORTED, 'predicates[1]', 'query_where: IN on mass')
    deallocate(preds)
    call where1(s, KSTAGE_FILTER_HAS, mass, [1_int64], found, st)
    call expect_failure(st, KSTAGE_INVALID_ARGUMENT, 'HAS takes no values', &
                        'query_where: values on HAS')
    call kstage_close(s)
  end subroutine

  ! The C interfaces, called directly.
  subroutine test_c_api()
    type(c_ptr) :: text
    integer(int64) :: s, token
    type(kstage_config_t) :: config
    call check(kstage_version() == KSTAGE_VERSION_MAJOR * 10000 + KSTAGE_VERSION_MINOR * 100 + &
               KSTAGE_VERSION_PATCH, 'kstage_version')
    call check(kstage_build_info(text) == KSTAGE_OK, 'kstage_build_info')
    call check(index(kstage_string(text), 'kstage: ') == 1, 'kstage_build_info text')
    call check(kstage_string(kstage_status_string(KSTAGE_NOT_FOUND)) == 'KSTAGE_NOT_FOUND', &
               'kstage_status_string')
    config = kstage_config_init()
    call check(config%struct_size == 16, 'kstage_config_init sets struct_size')
    call check(kstage_create(config, s) == KSTAGE_OK, 'kstage_create')
    call check(kstage_intern_token(s, 'x' // c_null_char, KSTAGE_NUL_TERMINATED, token) == &
               KSTAGE_OK, 'kstage_intern_token, NUL-terminated')
    call check(kstage_intern_token(s, '', 0_c_size_t, token) == KSTAGE_INVALID_ARGUMENT, &
               'kstage_intern_token of an empty name')
    call check(index(kstage_string(kstage_last_error()), 'empty') > 0, 'kstage_last_error')
    call check(kstage_destroy(s) == KSTAGE_OK, 'kstage_destroy')
    call check(kstage_destroy(s) == KSTAGE_INVALID_HANDLE, 'kstage_destroy twice')
  end subroutine

  ! The log through its bind(C) interfaces: a Fortran callback, a channel filter, a refused
  ! filter that keeps it, flush, removal.
  subroutine test_log()
    use log_counter
    call check(kstage_set_log_callback(c_funloc(on_log), c_null_ptr, KSTAGE_LOG_WARNING, &
               'device=debug' // c_null_char) == KSTAGE_OK, 'kstage_set_log_callback')
    call check(kstage_set_log_callback(c_funloc(on_log), c_null_ptr, KSTAGE_LOG_WARNING, &
               'device=loud' // c_null_char) == KSTAGE_INVALID_ARGUMENT, &
               'kstage_set_log_callback with a bad level')
    call check(index(kstage_string(kstage_last_error()), "'device=loud'") > 0, &
               'the refused filter entry is named')
    call check(kstage_log_message(KSTAGE_LOG_INFO, 'api' // c_null_char, 'below' // c_null_char) &
               == KSTAGE_OK, 'kstage_log_message below the threshold')
    call check(kstage_log_message(KSTAGE_LOG_DEBUG, 'device' // c_null_char, &
               'from Fortran' // c_null_char) == KSTAGE_OK, 'kstage_log_message')
    call check(kstage_flush_log() == KSTAGE_OK, 'kstage_flush_log')
    call check(calls == 1, 'one message delivered')
    if (calls == 1) then
      call check(last_severity == KSTAGE_LOG_DEBUG, 'its severity')
      call check(last_channel == 'device', 'its channel')
      call check(last_message == 'from Fortran', 'its text')
    end if
    call check(kstage_set_log_callback(c_null_funptr, c_null_ptr, KSTAGE_LOG_OFF) == KSTAGE_OK, &
               'kstage_set_log_callback removing it (no filter)')
    call check(kstage_log_message(KSTAGE_LOG_ERROR, 'api' // c_null_char, 'after' // c_null_char) &
               == KSTAGE_OK, 'kstage_log_message after removal')
    call check(kstage_flush_log() == KSTAGE_OK, 'kstage_flush_log after removal')
    call check(calls == 1, 'nothing delivered after removal')
    call check(KSTAGE_LOG_CHANNELS == 'stage,device,adios2,api', 'KSTAGE_LOG_CHANNELS')
  end subroutine

  ! Dense writes of each kind and rank; a Fortran pos(3, n) is n rows of 3 lanes.
  subroutine test_dense()
    real(real64), target :: m(n)
    integer(int32), target :: k(n)
    integer(int64), target :: w(2, n)
    real(real64), pointer :: m1(:)
    integer(int32), pointer :: k1(:)
    integer(int64), pointer :: w2(:, :)
    integer(int64) :: seen
    call kstage_write(stage, qall, pos, 1_int64, p, mode=KSTAGE_PRIM_MODE_INSERT, &
                      semantic=KSTAGE_SEMANTIC_POINT)
    m = [(real(j, real64) / 4, j = 1, n)]
    call kstage_write(stage, qall, mass, 1_int64, m)
    k = [(-j, j = 1, n)]
    call kstage_write(stage, qall, ids, 1_int64, k)
    call kstage_seal(stage, 1_int64)

    call read_float3(stage, qall, pos, got, seen)
    call check(seen == n, 'dense: every prim read')
    call test_describe()
    call check(all(got == p), 'dense: pos(:, j) is row j')

    call kstage_read_open(stage, qall, [pos], read)
    call check(kstage_read_next(stage, read, group), 'dense: a group')
    call check(group%dtype%code == kDLFloat .and. group%dtype%bits == 32 .and. &
               group%dtype%lanes == 3, 'dense: float32 x 3')
    call check(group%semantic == KSTAGE_SEMANTIC_POINT, 'dense: the semantic')
    call check(group%ordinal == 1 .and. group%prim_count == n, 'dense: ordinal and prims')
    call check(all(group%prims == paths), 'dense: the prims in query order')
    call kstage_values(group, v2)
    call check(size(v2, 1) == 3, 'dense: the pointer is (lanes, rows)')
    call kstage_values(group, v1, prim=4_int64)
    call check(size(v1) == 3 .and. all(v1 == p(:, 4)), 'dense: prim 4 alone')
    call check(.not. kstage_read_next(stage, read, group), 'dense: one group')
    call kstage_group_release(stage, group)
    call kstage_read_close(stage, read)

    call kstage_read_open(stage, qall, [mass, ids], read, compact=.true.)
    do while (kstage_read_next(stage, read, group))
      if (group%attribute == mass) then
        call kstage_values(group, m1)
        call check(all(m1 == m), 'dense: real64 rank 1')
      else
        call kstage_values(group, k1)
        call check(all(k1 == k), 'dense: int32 rank 1')
        call check(all(group%rows == [(j, j = 1, n)]), 'dense: compact rows in prim order')
      end if
      call kstage_group_release(stage, group)
    end do
    call kstage_read_close(stage, read)

    w(1, :) = [(int(j, int64) * 2**40, j = 1, n)]
    w(2, :) = -w(1, :)
    call kstage_write(stage, qall, ids, 2_int64, w, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'ids', 'dense: another dtype for a column')
    call kstage_token(stage, 'wide', query)
    call kstage_write(stage, qall, query, 2_int64, w)
    call kstage_seal(stage, 2_int64)
    call kstage_read_open(stage, qall, [query], read)
    call check(kstage_read_next(stage, read, group), 'dense: int64 x 2 group')
    call kstage_values(group, w2)
    call check(all(w2(:, group%rows) == w), 'dense: int64 rank 2')
    call kstage_group_release(stage, group)
    call kstage_read_close(stage, read)
  end subroutine

  ! The C interfaces of kstage_list_attributes and kstage_attribute_info.
  subroutine test_describe()
    integer(int64) :: listed(8), count
    type(kstage_attribute_info_t) :: info
    call check(kstage_list_attributes(stage, listed, 8_int64, count) == KSTAGE_OK, &
               'kstage_list_attributes')
    call check(count == 3 .and. all(listed(1:3) == [pos, ids, mass]), &
               'kstage_list_attributes: the columns, in token order')
    call check(kstage_list_attributes(stage, capacity=0_int64, count=count) == KSTAGE_OK &
               .and. count == 3, 'kstage_list_attributes: the count alone')
    info = kstage_attribute_info_init()
    call check(kstage_attribute_info(stage, pos, info) == KSTAGE_OK, 'kstage_attribute_info')
    call check(info%dtype%code == kDLFloat .and. info%dtype%lanes == 3 .and. &
               info%semantic == KSTAGE_SEMANTIC_POINT .and. info%write_floor == 1 .and. &
               info%prim_count == n .and. .not. info%is_array, 'kstage_attribute_info: pos')
    call check(kstage_attribute_info(stage, vel, info) == KSTAGE_NOT_FOUND, &
               'kstage_attribute_info: no column')
  end subroutine

  ! Array sections with strides are written through their strides; a stride DLPack cannot
  ! state is refused.
  subroutine test_strided()
    type :: particle
      real(real32) :: x, y, z, w
    end type
    type :: odd
      real(real32) :: a
      complex(real32) :: c
    end type
    type(particle), target :: parts(n)
    type(odd), target :: odds(n)
    real(real32), target :: wide(4, 2 * n)
    integer(int64) :: q2, q3
    do j = 1, 2 * n
      wide(:, j) = [real(j, real32), real(100 + j, real32), real(200 + j, real32), -1.0]
    end do
    ! every second row, lanes 1..3 of 4: strides (8, 1) elements
    call kstage_write(stage, qall, vel, 3_int64, wide(1:3, 1:2 * n:2))
    call kstage_seal(stage, 3_int64)
    call read_float3(stage, qall, vel, got)
    call check(all(got == wide(1:3, 1:2 * n:2)), 'strided: every second row, 3 of 4 lanes')
    ! reversed rows
    call kstage_write(stage, qall, vel, 4_int64, p(:, n:1:-1))
    call kstage_seal(stage, 4_int64)
    call read_float3(stage, qall, vel, got)
    call check(all(got == p(:, n:1:-1)), 'strided: reversed rows')
    ! a component of an array of a derived type: stride 4 elements, 1 lane
    parts%x = [(real(j, real32), j = 1, n)]
    parts%y = 0
    parts%z = 0
    parts%w = 0
    call kstage_token(stage, 'x_only', q2)
    call kstage_write(stage, qall, q2, 5_int64, parts%x)
    call kstage_seal(stage, 5_int64)
    call kstage_read_open(stage, qall, [q2], read)
    call check(kstage_read_next(stage, read, group), 'strided: component group')
    call kstage_values(group, v1)
    call check(all(v1(group%rows) == parts%x), 'strided: a component of a derived type')
    call kstage_group_release(stage, group)
    call kstage_read_close(stage, read)
    ! a complex component of a derived type with a real one before it
    odds%a = 1
    odds%c = [(cmplx(j, -j, real32), j = 1, n)]
    call kstage_token(stage, 'odd', q3)
    call kstage_write(stage, qall, q3, 6_int64, odds%c)
    call kstage_seal(stage, 6_int64)
    call kstage_read_open(stage, qall, [q3], read)
    call check(kstage_read_next(stage, read, group), 'strided: complex group')
    call check(group%dtype%code == kDLComplex .and. group%dtype%bits == 64, 'strided: complex64')
    call kstage_group_release(stage, group)
    call kstage_read_close(stage, read)
    ! a stride that is not a whole number of elements (6 bytes between 4-byte reals: a packed
    ! record no Fortran compiler here lays out, so the descriptor is made in C)
    call check(c_misaligned_stride_status() == KSTAGE_INVALID_ARGUMENT, &
               'strided: a stride DLPack cannot state is refused')
    call check(index(kstage_error_message(), 'not a whole number of its 4-byte elements') > 0, &
               'strided: the message says why')
  end subroutine

  ! Index maps count source rows from 1, at both ends; bad entries are refused and change
  ! nothing.
  subroutine test_index_maps()
    real(real32) :: src(3, 4)
    integer(int64) :: map64(5)
    integer(int32) :: map32(5)
    src(:, 1) = [1, 2, 3]
    src(:, 2) = [4, 5, 6]
    src(:, 3) = [7, 8, 9]
    src(:, 4) = [10, 11, 12]
    ! prims 1..5 take rows 4, 1, 1, 2, 4 (the last row and the first)
    map32 = [4, 1, 1, 2, 4]
    call kstage_write(stage, first5, pos, 10_int64, src, index_map=map32, &
                      semantic=KSTAGE_SEMANTIC_POINT)
    call kstage_seal(stage, 10_int64)
    call read_float3(stage, qall, pos, got)
    call check(all(got(:, 1) == src(:, 4)) .and. all(got(:, 2) == src(:, 1)) .and. &
               all(got(:, 3) == src(:, 1)) .and. all(got(:, 4) == src(:, 2)) .and. &
               all(got(:, 5) == src(:, 4)), 'index_map: 1-based rows, first and last')
    call check(all(got(:, 6:) == p(:, 6:)), 'index_map: other prims unchanged')
    ! int64 maps, and a map over fewer prims than the query (the leading ones)
    map64(1:2) = [3_int64, 2_int64]
    call kstage_write(stage, qall, pos, 11_int64, src, index_map=map64(1:2), &
                      semantic=KSTAGE_SEMANTIC_POINT)
    call kstage_seal(stage, 11_int64)
    call read_float3(stage, qall, pos, got)
    call check(all(got(:, 1) == src(:, 3)) .and. all(got(:, 2) == src(:, 2)), &
               'index_map: int64 entries')
    before = got
    ! 0 and rows + 1 are not rows
    map32 = [1, 2, 0, 1, 1]
    call kstage_write(stage, first5, pos, 12_int64, src, index_map=map32, &
                      semantic=KSTAGE_SEMANTIC_POINT, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'index_map(3) = 0', 'index_map: entry 0')
    call check(index(kstage_error_message(), 'numbered from 1') > 0, &
               'index_map: the message says how rows are counted')
    map64 = [1, 2, 3, 4, 5]
    call kstage_write(stage, first5, pos, 12_int64, src, index_map=map64, &
                      semantic=KSTAGE_SEMANTIC_POINT, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'index_map(5) = 5', &
                        'index_map: entry rows + 1')
    call kstage_write(stage, first5, pos, 12_int64, src, index_map=map32(1:2), &
                      semantic=KSTAGE_SEMANTIC_POINT, count=3_int64, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'count is 3 but index_map has 2', &
                        'index_map: count disagrees')
    call kstage_write(stage, first5, pos, 12_int64, src, index_map=map32(1:0), &
                      semantic=KSTAGE_SEMANTIC_POINT, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'index_map is empty', 'index_map: empty')
    call kstage_write(stage, first5, pos, 12_int64, src, index_map=[1.0, 2.0], &
                      semantic=KSTAGE_SEMANTIC_POINT, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'not an integer array', &
                        'index_map: real entries')
    call kstage_write(stage, first5, pos, 12_int64, src, index_map=reshape([1, 2], [1, 2]), &
                      semantic=KSTAGE_SEMANTIC_POINT, &
                      stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'must be a vector', 'index_map: rank 2')
    call kstage_seal(stage, 12_int64)
    call read_float3(stage, qall, pos, got)
    call check(all(got == before), 'index_map: refused writes changed nothing')
  end subroutine

  ! Masks select prims; row i belongs to prim i.
  subroutine test_masks()
    logical :: mask(n)
    mask = .false.
    mask(1) = .true.
    mask(n) = .true.
    mask(4) = .true.
    call read_float3(stage, qall, pos, before)
    q = -p
    call kstage_write(stage, qall, pos, 13_int64, q, mask=mask, &
                      semantic=KSTAGE_SEMANTIC_POINT)
    call kstage_seal(stage, 13_int64)
    call read_float3(stage, qall, pos, got)
    do j = 1, n
      if (mask(j)) then
        call check(all(got(:, j) == q(:, j)), 'mask: a selected prim is written')
      else
        call check(all(got(:, j) == before(:, j)), 'mask: an unselected prim keeps its values')
      end if
    end do
    call kstage_write(stage, qall, pos, 14_int64, q, mask=mask, count=4_int64, &
                      semantic=KSTAGE_SEMANTIC_POINT, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'count is 4 but mask has 10', &
                        'mask: count disagrees')
    call kstage_write(stage, qall, pos, 14_int64, q, mask=mask, index_map=[1], &
                      semantic=KSTAGE_SEMANTIC_POINT, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'exclusive', 'mask and index_map')
    call kstage_write(stage, qall, pos, 14_int64, q, mask=mask(1:0), &
                      semantic=KSTAGE_SEMANTIC_POINT, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'mask is empty', 'mask: empty')
    ! 70 prims: the mask's second word
    call test_wide_mask()
  end subroutine

  subroutine test_wide_mask()
    integer(int64) :: many(70), qm, tok, seen
    real(real32) :: vals(3, 70), back(3, 70)
    logical :: mask(70)
    character(len=16) :: names(70)
    do j = 1, 70
      write(names(j), '(a, i0)') '/wide/m', j
      vals(:, j) = real(j, real32)
    end do
    call kstage_paths(stage, names, many)
    call kstage_query(stage, many, qm)
    call kstage_token(stage, 'wide_mask', tok)
    mask = .false.
    mask(64:66) = .true.
    mask(70) = .true.
    call kstage_write(stage, qm, tok, 14_int64, vals, mask=mask)
    call kstage_seal(stage, 14_int64)
    call read_float3(stage, qm, tok, back, seen)
    call check(seen == 4, 'mask: bits in the second word select exactly those prims')
    call check(all(back(:, 64:66) == vals(:, 64:66)) .and. all(back(:, 70) == vals(:, 70)), &
               'mask: rows 64..66 and 70')
    call kstage_query_free(stage, qm)
  end subroutine

  ! Ragged attributes: one array per prim, or packed values with row counts.
  subroutine test_ragged()
    integer(int32), target :: r1(2), r2(0), r3(4), packed(7)
    real(real32), target :: lanes2(2, 5)
    type(kstage_row) :: rows(3)
    integer(int32), pointer :: e1(:)
    real(real32), pointer :: e2(:, :)
    integer(int64) :: q3, poly
    integer :: k
    r1 = [5, 6]
    r3 = [7, 8, 9, 10]
    rows(1) = kstage_row_of(r1)
    rows(2) = kstage_row_of(r2)
    rows(3) = kstage_row_of(r3)
    call kstage_query(stage, paths(1:3), q3)
    call kstage_write_rows(stage, q3, nbrs, 20_int64, rows)
    call kstage_seal(stage, 20_int64)
    call kstage_read_open(stage, q3, [nbrs], read)
    call check(kstage_read_next(stage, read, group), 'ragged: a group')
    call check(group%is_array .and. group%prim_count == 3, 'ragged: an array group of 3 prims')
    call kstage_values(group, e1, prim=1_int64)
    call check(size(e1) == 2 .and. all(e1 == r1), 'ragged: row 1')
    call kstage_values(group, e1, prim=2_int64)
    call check(size(e1) == 0, 'ragged: an empty row')
    call kstage_values(group, e1, prim=3_int64)
    call check(size(e1) == 4 .and. all(e1 == r3), 'ragged: row 3')
    call kstage_values(group, e1, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'name it (prim = i)', &
                        'ragged: values without a prim')
    call kstage_values(group, e1, prim=4_int64, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'prim = 4, but the group has 3', &
                        'ragged: a prim past the end')
    call kstage_group_release(stage, group)
    call kstage_read_close(stage, read)

    ! packed, with an index map (rows named from 1) and a row stride
    packed = [1, 2, 3, 4, 5, 6, 7]
    call kstage_write_packed(stage, q3, nbrs, 21_int64, packed, [3, 0, 4], index_map=[3, 1, 2])
    call kstage_seal(stage, 21_int64)
    call kstage_read_open(stage, q3, [nbrs], read)
    call check(kstage_read_next(stage, read, group), 'packed: a group')
    call kstage_values(group, e1, prim=1_int64)
    call check(all(e1 == [4, 5, 6, 7]), 'packed: prim 1 takes row 3')
    call kstage_values(group, e1, prim=2_int64)
    call check(all(e1 == [1, 2, 3]), 'packed: prim 2 takes row 1')
    call kstage_values(group, e1, prim=3_int64)
    call check(size(e1) == 0, 'packed: prim 3 takes the empty row 2')
    call kstage_group_release(stage, group)
    call kstage_read_close(stage, read)

    ! rows of 2 lanes (polylines), from a strided section
    do k = 1, 5
      lanes2(:, k) = [real(k, real32), real(-k, real32)]
    end do
    call kstage_token(stage, 'polyline', poly)
    call kstage_write_packed(stage, q3, poly, 22_int64, lanes2(:, 5:1:-1), [1, 2, 2])
    call kstage_seal(stage, 22_int64)
    call kstage_read_open(stage, q3, [poly], read)
    call check(kstage_read_next(stage, read, group), 'packed lanes: a group')
    call check(group%dtype%lanes == 2, 'packed lanes: 2 lanes')
    call kstage_values(group, e2, prim=2_int64)
    call check(size(e2, 1) == 2 .and. size(e2, 2) == 2, 'packed lanes: (lanes, elements)')
    call check(all(e2 == lanes2(:, 4:3:-1)), 'packed lanes: reversed rows 4 and 3')
    call kstage_group_release(stage, group)
    call kstage_read_close(stage, read)

    call kstage_write_packed(stage, q3, nbrs, 23_int64, packed, [3, 1, 1], stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'sum to 5 elements, but the values hold 7', &
                        'packed: counts short of the values')
    call kstage_write_packed(stage, q3, nbrs, 23_int64, packed, [3, 9, 1], stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'row_counts(2) = 9', &
                        'packed: counts past the values')
    call kstage_write_packed(stage, q3, nbrs, 23_int64, packed, [3, -1, 1], stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'row_counts(2) = -1', &
                        'packed: a negative count')
    call kstage_write_packed(stage, q3, nbrs, 23_int64, packed, [integer ::], stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'row_counts is empty', 'packed: no rows')
    call kstage_write_rows(stage, q3, nbrs, 23_int64, rows(1:0), stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'no rows', 'rows: none')
    call kstage_write_rows(stage, q3, nbrs, 23_int64, rows(1:2), stat=stat)
    call check(stat == KSTAGE_INVALID_ARGUMENT, 'rows: 2 rows for 3 prims')
    rows(1) = kstage_row_of(reshape([1, 2, 3, 4, 5, 6, 7, 8], [2, 2, 2]), stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'rank 3', 'rows: rank 3')
    call kstage_write_packed(stage, q3, nbrs, 23_int64, reshape(packed(1:6), [1, 2, 3]), &
                             [1, 1, 1], stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'packed rows are rank 1', 'packed: rank 3')
    call kstage_write_packed(stage, q3, nbrs, 23_int64, packed, [3.0, 4.0], stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'row_counts: not an integer array', &
                        'packed: real row counts')
    call kstage_query_free(stage, q3)
  end subroutine

  ! Change-range reads see exactly the prims written in the range; deletes give tombstones.
  subroutine test_change_ranges_and_deletes()
    integer(int64) :: q2, changed, tombstones, existing, floor, qe
    logical :: saw_delete
    call kstage_query(stage, [paths(2), paths(7)], q2)
    call kstage_write(stage, q2, pos, 30_int64, p(:, 1:2), &
                      semantic=KSTAGE_SEMANTIC_POINT)
    call kstage_seal(stage, 30_int64)
    call kstage_read_open(stage, qall, [pos], read, range=[30_int64, 30_int64])
    changed = 0
    do while (kstage_read_next(stage, read, group))
      call check(.not. group%is_delete, 'change range: no tombstones yet')
      call kstage_values(group, v2)
      do i = 1, int(group%prim_count)
        if (group%prims(i) == paths(2)) call check(all(v2(:, group%rows(i)) == p(:, 1)), &
                                                   'change range: prim 2 values')
        if (group%prims(i) == paths(7)) call check(all(v2(:, group%rows(i)) == p(:, 2)), &
                                                   'change range: prim 7 values')
      end do
      changed = changed + group%prim_count
      call kstage_group_release(stage, group)
    end do
    call kstage_read_close(stage, read)
    call check(changed == 2, 'change range: exactly the two written prims')

    ! delete position from prim 7, and prim 2 altogether
    call kstage_delete(stage, q2, 31_int64, attributes=[pos])
    call kstage_query_free(stage, q2)
    call kstage_query(stage, [paths(2)], q2)
    call kstage_delete_prims(stage, q2, 32_int64)
    call kstage_seal(stage, 32_int64)
    call kstage_read_open(stage, qall, [pos], read, range=[31_int64, 32_int64])
    tombstones = 0
    saw_delete = .false.
    do while (kstage_read_next(stage, read, group))
      if (group%is_delete) then
        saw_delete = .true.
        tombstones = tombstones + group%prim_count
        call check(.not. allocated(group%rows), 'delete: a tombstone group has no rows')
        call kstage_values(group, v2, stat=stat)
        call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'tombstone', 'delete: no values')
      end if
      call kstage_group_release(stage, group)
    end do
    call kstage_read_close(stage, read)
    call check(saw_delete .and. tombstones == 2, 'delete: two tombstones in the range')
    call kstage_query_existing(stage, qe, has=[pos])
    call kstage_query_size(stage, qe, existing)
    call check(existing == n - 2, 'delete: the prims without position')
    call kstage_query_free(stage, qe)
    call kstage_query_existing(stage, qe, prefix=paths(2))
    call kstage_query_size(stage, qe, existing)
    call check(existing == 0, 'delete: prim 2 is gone')
    call kstage_query_free(stage, qe)
    call kstage_floor(stage, floor, attribute=pos)
    call check(floor == 32, 'kstage_floor')
    call kstage_write(stage, q2, pos, 32_int64, p(:, 1:1), &
                      semantic=KSTAGE_SEMANTIC_POINT, stat=stat)
    call expect_failure(stat, KSTAGE_WRITE_FLOOR_VIOLATION, '', 'a write at the floor')
    call kstage_query_free(stage, q2)
  end subroutine

  ! Maps: a Fortran pointer over the buffers kstage hands out, filled, committed, read back.
  subroutine test_maps()
    type(kstage_group) :: g
    real(real32), pointer :: buffer(:, :)
    integer(int64), pointer :: ragged(:)
    integer(int64) :: k
    call kstage_map_open(stage, qall, mapped, 40_int64, kstage_dtype(kDLFloat, 32, 3), map, &
                         semantic=KSTAGE_SEMANTIC_VECTOR)
    count = 0
    do while (kstage_map_next(stage, map, g))
      call kstage_values(g, buffer)
      do k = 1, g%prim_count
        buffer(:, g%rows(k)) = p(:, findloc(paths, g%prims(k), 1))
      end do
      count = count + g%prim_count
      call kstage_group_release(stage, g, stat=stat)
      call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'a map group', 'map: release a map group')
    end do
    call check(count == n, 'map: every prim')
    call kstage_map_commit(stage, map)
    call kstage_seal(stage, 40_int64)
    call read_float3(stage, qall, mapped, got)
    call check(all(got == p), 'map: the values filled through the pointer')

    call kstage_map_open(stage, first5, ragged_map, 41_int64, kstage_dtype(kDLInt, 64), map, &
                         element_counts=[1_int64, 0_int64, 2_int64, 3_int64, 1_int64])
    do while (kstage_map_next(stage, map, g))
      do k = 1, g%prim_count
        call kstage_values(g, ragged, prim=k)
        ragged = k * 100 + [(int(i, int64), i = 1, size(ragged))]
      end do
    end do
    call kstage_map_commit(stage, map)
    call kstage_seal(stage, 41_int64)
    call kstage_read_open(stage, first5, [ragged_map], read)
    do while (kstage_read_next(stage, read, group))
      do k = 1, group%prim_count
        call kstage_values(group, ragged, prim=k)
        call check(all(ragged == k * 100 + [(int(i, int64), i = 1, size(ragged))]), &
                   'map: ragged rows')
      end do
      call kstage_group_release(stage, group)
    end do
    call kstage_read_close(stage, read)

    call kstage_map_open(stage, qall, mapped, 42_int64, kstage_dtype(kDLFloat, 32, 3), map, &
                         semantic=KSTAGE_SEMANTIC_VECTOR)
    call kstage_map_discard(stage, map)
    call kstage_seal(stage, 42_int64)
    call read_float3(stage, qall, mapped, got)
    call check(all(got == p), 'map: a discarded map writes nothing')
    call kstage_map_open(stage, qall, mapped, 43_int64, kstage_dtype(kDLInt, 32, 3), map, &
                         semantic=KSTAGE_SEMANTIC_VECTOR, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'dtype', 'map: another dtype for a column')

    ! No dtype and no semantic: the column's (float32 x 3, VECTOR).
    call kstage_map_open(stage, qall, mapped, 43_int64, kstage_dtype(0, 0, 0), map)
    do while (kstage_map_next(stage, map, g))
      call check(g%semantic == KSTAGE_SEMANTIC_VECTOR, 'map: an unset dtype takes the column''s')
      call kstage_values(g, buffer)
      buffer = 7
    end do
    call kstage_map_commit(stage, map)
    call kstage_seal(stage, 43_int64)
    call read_float3(stage, qall, mapped, got)
    call check(all(got == 7), 'map: an unset dtype maps the existing column')
    ! FORCE: the prims take the int32 x 3 schema at 44; one group, of int32.
    call kstage_write(stage, qall, mapped, 44_int64, int(got, int32), &
                      attribute_mode=KSTAGE_ATTRIBUTE_MODE_FORCE)
    call kstage_seal(stage, 44_int64)
    call kstage_read_open(stage, qall, [mapped], read)
    count = 0
    do while (kstage_read_next(stage, read, g))
      call check(g%dtype%code == kDLInt .and. g%prim_count == n, 'write: FORCE replaces a schema')
      count = count + 1
      call kstage_group_release(stage, g)
    end do
    call kstage_read_close(stage, read)
    call check(count == 1, 'write: FORCE leaves one group')
  end subroutine

  ! The layer's own errors and kstage's, through stat, with messages that name the input.
  subroutine test_errors()
    integer(int64), pointer :: wrong(:)
    real(real64), pointer :: wrong2(:, :)
    integer(int64) :: none(0)
    integer(int64) :: dead, t
    character(len=4), target :: chars(n)
    call kstage_write(stage, qall, pos, 50_int64, 1.0_real32, &
                      semantic=KSTAGE_SEMANTIC_POINT, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'a scalar', 'a scalar array')
    chars = 'abcd'
    call kstage_write(stage, qall, pos, 50_int64, chars, &
                      semantic=KSTAGE_SEMANTIC_POINT, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'has no DLPack dtype', 'character data')
    call kstage_write(stage, qall, pos, 50_int64, p, unsigned=.true., &
                      semantic=KSTAGE_SEMANTIC_POINT, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'integer arrays only', 'unsigned reals')
    call kstage_write(stage, qall, pos, 50_int64, p, count=-1_int64, &
                      semantic=KSTAGE_SEMANTIC_POINT, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'count is negative', 'a negative count')
    call kstage_write(stage, qall, pos, 50_int64, p(:, 1:3), &
                      semantic=KSTAGE_SEMANTIC_POINT, stat=stat)
    call check(stat == KSTAGE_INVALID_ARGUMENT, '3 rows for 10 prims')
    call write_assumed_size(p, stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'an assumed-size array', &
                        'an assumed-size array')
    call kstage_delete(stage, qall, 50_int64, none, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'attributes is empty', 'delete of no attributes')
    call kstage_seal(stage, 50_int64, attributes=none, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'attributes is empty', 'seal of no attributes')
    call kstage_write(stage, 999_int64, pos, 50_int64, p, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_HANDLE, 'kstage_write', 'a stale query')
    call kstage_read_open(stage, qall, [integer(int64) ::], read, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'no attributes', 'a read of nothing')

    call kstage_read_open(stage, qall, [pos], read)
    call check(kstage_read_next(stage, read, group), 'errors: a group')
    call kstage_values(group, wrong, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'dtype is float32 x 3, the pointer''s int64', &
                        'a pointer of another type')
    call kstage_values(group, wrong2, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'float64', 'a pointer of another kind')
    call kstage_values(group, v1, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'use a rank-2 pointer', &
                        'a rank-1 pointer over 3 lanes')
    call kstage_group_release(stage, group)
    call kstage_values(group, v2, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_HANDLE, 'released', 'values of a released group')
    call kstage_group_release(stage, group, stat=stat)
    call check(stat == KSTAGE_INVALID_HANDLE, 'a group released twice')
    call kstage_read_close(stage, read)
    call kstage_read_close(stage, read, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_HANDLE, 'kstage_read_close', 'a read closed twice')

    call kstage_paths(stage, ['/a', '/b'], paths(1:1), stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'kstage_paths', 'paths of another size')
    call kstage_paths(stage, ['/ok ', 'bad '], paths(1:2), stat=stat)
    call check(stat == KSTAGE_INVALID_ARGUMENT, 'a relative path')
    call kstage_path(stage, '/ok', t, stat=stat)
    call expect_ok(stat, 'kstage_path')
    call kstage_token(stage, '', t, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_ARGUMENT, 'kstage_token("")', 'an empty token')

    call kstage_open(dead)
    call kstage_close(dead)
    call kstage_token(dead, 'x', t, stat=stat)
    call expect_failure(stat, KSTAGE_INVALID_HANDLE, 'kstage_token("x")', 'a destroyed stage')
    call kstage_close(dead, stat=stat)
    call check(stat == KSTAGE_INVALID_HANDLE, 'a stage closed twice')
    call kstage_seal(stage, 60_int64, stat=stat)
    call expect_ok(stat, 'stat is KSTAGE_OK after a success')
    call check(kstage_error_message() /= '', 'the last message stays until the next failure')
  end subroutine

  ! Columns on a device (the emulated one, in builds with KSTAGE_EMULATED_DEVICE: the test is
  ! run with --emulated there): host arrays go up through the same writes; a group of device
  ! memory gives no Fortran pointer, and host = .true. brings it down.
  subroutine test_device_columns()
    character(len=16) :: arg
    type(kstage_config_t) :: config
    integer(int64) :: dstage, dpos, dpaths(n), dq
    character(len=16) :: dnames(n)
    call get_command_argument(1, arg)
    if (arg /= '--emulated') then
      print '(a)', 'test_fortran: no emulated device in this build: device columns not tested'
      return
    end if
    config = kstage_config_init()
    config%residency = DLDevice(kDLExtDev, 0)
    call check(kstage_create(config, dstage) == KSTAGE_OK, 'device: a stage on the emulated device')
    call kstage_token(dstage, 'position', dpos)
    do j = 1, n
      write(dnames(j), '(a, i0)') '/d/p', j
    end do
    call kstage_paths(dstage, dnames, dpaths)
    call kstage_query(dstage, dpaths, dq)
    call kstage_write(dstage, dq, dpos, 1_int64, p, index_map=[(n + 1 - j, j = 1, n)])
    call kstage_seal(dstage, 1_int64)
    call kstage_read_open(dstage, dq, [dpos], read)
    call check(kstage_read_next(dstage, read, group), 'device: a group')
    call kstage_values(group, v2, stat=stat)
    call expect_failure(stat, KSTAGE_NOT_SUPPORTED, 'host = .true.', 'device: no pointer')
    call kstage_group_release(dstage, group)
    call kstage_read_close(dstage, read)
    call kstage_read_open(dstage, dq, [dpos], read, host=.true.)
    call check(kstage_read_next(dstage, read, group), 'device: a host group')
    call kstage_values(group, v2)
    do j = 1, n
      call check(all(v2(:, group%rows(j)) == p(:, n + 1 - j)), 'device: values read to the host')
    end do
    call kstage_group_release(dstage, group)
    call kstage_read_close(dstage, read)
    call kstage_close(dstage)
  end subroutine

  ! An assumed-size dummy: its last extent is unknown, so it cannot be written.
  subroutine write_assumed_size(a, st)
    real(real32), intent(in), target :: a(3, *)
    integer, intent(out) :: st
    call kstage_write(stage, qall, pos, 50_int64, a, semantic=KSTAGE_SEMANTIC_POINT, stat=st)
  end subroutine

  ! Names, ranges and queries of ranges.
  subroutine test_names()
    character(len=:), allocatable :: name
    integer(int64) :: first, qr, member, prims(3), begin
    type(c_ptr) :: cparent, cprefix
    integer(int64), allocatable :: got_prims(:)
    call kstage_token_name(stage, pos, name)
    call check(name == 'position', 'kstage_token_name')
    call kstage_path_name(stage, paths(3), name)
    call check(name == '/p/a2', 'kstage_path_name')
    call kstage_path_range(stage, '/cells', 'c', 0_int64, 100_int64, first)
    call kstage_path_name(stage, first + 42, name)
    call check(name == '/cells/c42', 'kstage_path_range')
    call kstage_path(stage, '/cells/c7', member)
    call check(member == first + 7, 'a range member by its string')
    call check(kstage_path_range_definition(stage, first, parent=cparent, prefix=cprefix, &
                                            begin=begin) == KSTAGE_OK, &
               'kstage_path_range_definition')
    call check(kstage_string(cparent) == '/cells' .and. kstage_string(cprefix) == 'c' .and. &
               begin == 0, 'kstage_path_range_definition: parent, prefix, begin')
    call kstage_query_of_range(stage, first, qr, start=10_int64, count=3_int64, stride=5_int64)
    call kstage_query_prims(stage, qr, got_prims)
    prims = [first + 10, first + 15, first + 20]
    call check(size(got_prims) == 3, 'kstage_query_of_range: 3 prims')
    if (size(got_prims) == 3) call check(all(got_prims == prims), 'kstage_query_of_range')
    call kstage_query_free(stage, qr)
    call kstage_query_free(stage, qr, stat=stat)
    call check(stat == KSTAGE_INVALID_HANDLE, 'a query released twice')
  end subroutine
end program test_fortran
