! SPDX-License-Identifier: Apache-2.0
!
! fortran_adios2: module kstage_adios2 (fortran/kstage_adios2.f90), the ADIOS2 bridge's
! checkpoints, restarts and streams from Fortran.
!   - the descriptors' layouts and the constants against C (c_adios2_layout.c)
!   - a checkpoint restarted into a new stage exactly (values, ordinal)
!   - a copy with one byte of data.0 flipped: restart refused (KSTAGE_OP_FAILED naming data.0),
!     the stage unchanged; the same through the C interface kstage_adios2_restart_ex
!   - a copy without its manifest: refused with KSTAGE_INVALID_ARGUMENT when the manifest is
!     required, restarted exactly when it is not
!   - the latest pointer: two checkpoint_latest calls name <pointer>.0 then <pointer>.1, and
!     restart_latest restarts the second exactly; a missing pointer is KSTAGE_INVALID_ARGUMENT
!   - a path with a NUL, an empty path: KSTAGE_INVALID_ARGUMENT, before C is called
!   - streams: a BP5 stream of a full and an incremental step read back step by step into a new
!     stage (ordinals, values after each step, the end of the stream), its folder sealed; the
!     Inline engine (a writer and a reader in one process) through the C interfaces too; an
!     engine ADIOS2 does not have (KSTAGE_NOT_SUPPORTED naming it), parameters not in pairs or
!     holding a NUL, a reader used to write and a writer to read (KSTAGE_INVALID_ARGUMENT), a
!     closed stream (KSTAGE_INVALID_HANDLE): refused, stream and stage unchanged
!   - a `comm` where the bridge has no MPI form: KSTAGE_NOT_SUPPORTED, the stage unchanged
!
!   kstage_test_fortran_adios2 <scratch folder>   (emptied first)
program test_fortran_adios2
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: int8, int64, real64, error_unit
  use kstage
  use kstage_adios2
  implicit none

  interface
    subroutine adios2_layout(values) bind(C, name="kstage_test_adios2_layout")
      import :: c_int32_t
      integer(c_int32_t), intent(out) :: values(22)
    end subroutine
  end interface

  character(len=:), allocatable :: dir
  character(kind=c_char), target :: inline_engine(7) = ['I', 'n', 'l', 'i', 'n', 'e', c_null_char]
  integer(int64) :: stage, other, pos, mass, paths(5), query, ordinal
  real(real64) :: p1(3, 5), m1(5), p2(3, 5), m2(5)
  integer :: i, st, failures
  type(kstage_adios2_restart_desc_t) :: desc

  failures = 0
  call scratch_folder(dir)

  call check_layout()

  ! ---- a stage with two columns, sealed at 3 -------------------------------------------------
  p1 = reshape([(real(i, real64) * 1.5_real64, i = 1, 15)], [3, 5])
  m1 = [(12345.7_real64 + i, i = 1, 5)]
  call kstage_open(stage)
  call kstage_token(stage, 'pos', pos)
  call kstage_token(stage, 'mass', mass)
  call kstage_paths(stage, ['/w/a', '/w/b', '/w/c', '/w/d', '/w/e'], paths)
  call kstage_query(stage, paths, query)
  call kstage_write(stage, query, pos, 2_int64, p1, semantic=KSTAGE_SEMANTIC_POINT)
  call kstage_write(stage, query, mass, 3_int64, m1)
  call kstage_seal(stage, 3_int64)

  ! ---- checkpoint, restart exactly -----------------------------------------------------------
  call kstage_checkpoint(stage, dir // '/ck.bp')
  call kstage_open(other)
  call kstage_restart(other, dir // '/ck.bp', ordinal, manifest=KSTAGE_ADIOS2_MANIFEST_REQUIRED)
  call expect(ordinal == 3, 'restart: ordinal 3')
  call check_stage(other, p1, m1, 'restart')
  call kstage_close(other)

  ! ---- a copy with a byte of data.0 flipped --------------------------------------------------
  call kstage_checkpoint(stage, dir // '/flipped.bp')
  call flip_byte(dir // '/flipped.bp/data.0')
  call kstage_open(other)
  call kstage_restart(other, dir // '/flipped.bp', ordinal, stat=st)
  call expect(st == KSTAGE_OP_FAILED, 'flipped byte: KSTAGE_OP_FAILED, got ' // kstage_status_name(st))
  call expect(index(kstage_error_message(), 'data.0') > 0, &
              'flipped byte: the message names data.0: ' // kstage_error_message())
  call expect(index(kstage_error_message(), 'kstage_restart: ') == 1, &
              'flipped byte: the message starts with the routine: ' // kstage_error_message())
  call expect_empty(other, 'flipped byte')
  ! the C interface, with the descriptor: the same refusal
  desc = kstage_adios2_restart_desc_init()
  desc%manifest = KSTAGE_ADIOS2_MANIFEST_REQUIRED
  st = kstage_adios2_restart_ex(other, dir // '/flipped.bp' // c_null_char, desc, ordinal)
  call expect(st == KSTAGE_OP_FAILED, 'flipped byte (C interface): KSTAGE_OP_FAILED, got ' // &
              kstage_status_name(st))
  call expect(index(kstage_string(kstage_adios2_last_error()), 'data.0') > 0, &
              'flipped byte (C interface): the message names data.0')
  call expect_empty(other, 'flipped byte (C interface)')
  ! plain kstage_adios2_restart (the manifest checked where there is one) refuses it too
  st = kstage_adios2_restart(other, dir // '/flipped.bp' // c_null_char)
  call expect(st == KSTAGE_OP_FAILED, 'flipped byte (kstage_adios2_restart): KSTAGE_OP_FAILED')
  call expect_empty(other, 'flipped byte (kstage_adios2_restart)')
  call kstage_close(other)

  ! ---- a copy without its manifest -----------------------------------------------------------
  call kstage_checkpoint(stage, dir // '/bare.bp')
  call delete_file(dir // '/bare.bp/kstage.manifest')
  call kstage_open(other)
  call kstage_restart(other, dir // '/bare.bp', manifest=KSTAGE_ADIOS2_MANIFEST_REQUIRED, stat=st)
  call expect(st == KSTAGE_INVALID_ARGUMENT, 'no manifest, required: KSTAGE_INVALID_ARGUMENT, got ' &
              // kstage_status_name(st))
  call expect(index(kstage_error_message(), 'bare.bp') > 0, &
              'no manifest: the message names the folder: ' // kstage_error_message())
  call expect_empty(other, 'no manifest, required')
  call kstage_restart(other, dir // '/bare.bp', ordinal, manifest=KSTAGE_ADIOS2_MANIFEST_IF_PRESENT)
  call expect(ordinal == 3, 'no manifest, if present: ordinal 3')
  call check_stage(other, p1, m1, 'no manifest, if present')
  call kstage_close(other)

  ! ---- the latest pointer --------------------------------------------------------------------
  call kstage_restart_latest(stage, dir // '/none.latest', stat=st)
  call expect(st == KSTAGE_INVALID_ARGUMENT, 'no pointer: KSTAGE_INVALID_ARGUMENT, got ' // &
              kstage_status_name(st))
  call expect(index(kstage_error_message(), 'none.latest') > 0, &
              'no pointer: the message names it: ' // kstage_error_message())
  call kstage_checkpoint_latest(stage, dir // '/run.latest')
  call expect(pointer_names(dir // '/run.latest') == 'run.latest.0', &
              'first checkpoint_latest: the pointer names run.latest.0, not ' // &
              pointer_names(dir // '/run.latest'))
  p2 = -p1
  m2 = m1 * 2
  call kstage_write(stage, query, pos, 4_int64, p2, semantic=KSTAGE_SEMANTIC_POINT)
  call kstage_write(stage, query, mass, 5_int64, m2)
  call kstage_seal(stage, 5_int64)
  call kstage_checkpoint_latest(stage, dir // '/run.latest')
  call expect(pointer_names(dir // '/run.latest') == 'run.latest.1', &
              'second checkpoint_latest: the pointer names run.latest.1, not ' // &
              pointer_names(dir // '/run.latest'))
  call kstage_open(other)
  call kstage_restart_latest(other, dir // '/run.latest', ordinal)
  call expect(ordinal == 5, 'restart_latest: ordinal 5')
  call check_stage(other, p2, m2, 'restart_latest')
  call kstage_close(other)
  ! the latest damaged: refused, the stage unchanged
  call flip_byte(dir // '/run.latest.1/data.0')
  call kstage_open(other)
  call kstage_restart_latest(other, dir // '/run.latest', stat=st)
  call expect(st == KSTAGE_OP_FAILED, 'latest damaged: KSTAGE_OP_FAILED, got ' // kstage_status_name(st))
  call expect_empty(other, 'latest damaged')
  st = kstage_adios2_restart_latest(other, dir // '/run.latest' // c_null_char)
  call expect(st == KSTAGE_OP_FAILED, 'latest damaged (C interface): KSTAGE_OP_FAILED')
  call kstage_close(other)

  ! ---- paths C cannot take -------------------------------------------------------------------
  call kstage_checkpoint(stage, '   ', stat=st)
  call expect(st == KSTAGE_INVALID_ARGUMENT, 'empty path: KSTAGE_INVALID_ARGUMENT')
  call kstage_checkpoint(stage, dir // '/x' // c_null_char // 'y.bp', stat=st)
  call expect(st == KSTAGE_INVALID_ARGUMENT, 'a NUL in the path: KSTAGE_INVALID_ARGUMENT')
  call expect(index(kstage_error_message(), 'NUL') > 0, 'a NUL in the path: the message says so')
  ! a failure of C's (a folder that cannot be made) through the layer
  call kstage_checkpoint(stage, dir // '/ck.bp/data.0/inside.bp', stat=st)
  call expect(st /= KSTAGE_OK, 'a checkpoint inside a file: fails')
  call expect(index(kstage_error_message(), 'kstage_checkpoint: ') == 1, &
              'a checkpoint inside a file: the message: ' // kstage_error_message())

  call check_streams()

  ! ---- `comm` where the bridge has no MPI form (the MPI form itself: tests/adios2, under mpiexec)
  if (.not. kstage_has_adios2_mpi()) then
    call kstage_checkpoint(stage, dir // '/mpi.bp', comm=0, stat=st)
    call expect(st == KSTAGE_NOT_SUPPORTED, 'comm without the MPI form: KSTAGE_NOT_SUPPORTED, got ' &
                // kstage_status_name(st))
    call expect(index(kstage_error_message(), 'kstage_checkpoint: comm') == 1 .and. &
                index(kstage_error_message(), 'MPI') > 0, &
                'comm without the MPI form: the message: ' // kstage_error_message())
    call kstage_open(other)
    call kstage_restart(other, dir // '/ck.bp', comm=0, stat=st)
    call expect(st == KSTAGE_NOT_SUPPORTED, 'restart with comm: KSTAGE_NOT_SUPPORTED')
    call expect_empty(other, 'restart with comm')
    call kstage_close(other)
    call kstage_stream_open(dir // '/mpi-stream.bp', other, comm=0, stat=st)
    call expect(st == KSTAGE_NOT_SUPPORTED .and. other == 0, 'a stream with comm: KSTAGE_NOT_SUPPORTED')
    call kstage_checkpoint_latest(stage, dir // '/mpi.latest', comm=0, stat=st)
    call expect(st == KSTAGE_NOT_SUPPORTED, 'checkpoint_latest with comm: KSTAGE_NOT_SUPPORTED')
    call kstage_restart_latest(stage, dir // '/run.latest', comm=0, stat=st)
    call expect(st == KSTAGE_NOT_SUPPORTED, 'restart_latest with comm: KSTAGE_NOT_SUPPORTED')
  end if

  call kstage_close(stage)
  deallocate(dir)   ! (a main program's allocatables are never freed: LeakSanitizer would say so)
  if (failures > 0) then
    write (error_unit, '(a, i0, a)') 'test_fortran_adios2: ', failures, ' check(s) failed'
    error stop 1
  end if
  print '(a)', 'test_fortran_adios2: all checks passed'

contains

  subroutine expect(condition, what)
    logical, intent(in) :: condition
    character(len=*), intent(in) :: what
    if (condition) return
    failures = failures + 1
    write (error_unit, '(2a)') 'FAILED: ', what
  end subroutine

  subroutine scratch_folder(folder)
    character(len=:), allocatable, intent(out) :: folder
    integer :: n
    if (command_argument_count() < 1) error stop 'usage: kstage_test_fortran_adios2 <scratch folder>'
    call get_command_argument(1, length=n)
    allocate(character(len=n) :: folder)
    call get_command_argument(1, folder)
    ! a fresh folder each run (the pointer's first checkpoint is <pointer>.0)
    call execute_command_line("rm -rf '" // folder // "' && mkdir -p '" // folder // "'", &
                              exitstat=n)
    if (n /= 0) error stop 'test_fortran_adios2: cannot make the scratch folder ' // folder
  end subroutine

  subroutine check_layout()
    integer(c_int32_t) :: c(22)
    type(kstage_adios2_restart_desc_t) :: d
    type(kstage_adios2_open_desc_t), target :: o
    type(kstage_adios2_step_desc_t), target :: t
    call adios2_layout(c)
    o = kstage_adios2_open_desc_init()
    t = kstage_adios2_step_desc_init()
    call expect(c(8) == c_sizeof(o), 'sizeof(kstage_adios2_open_desc_t)')
    call expect(c(9) == offset(c_loc(o), c_loc(o%mode)), 'offset of open mode')
    call expect(c(10) == offset(c_loc(o), c_loc(o%engine)), 'offset of engine')
    call expect(c(11) == offset(c_loc(o), c_loc(o%parameters)), 'offset of parameters')
    call expect(c(12) == offset(c_loc(o), c_loc(o%inline_writer)), 'offset of inline_writer')
    call expect(c(13) == offset(c_loc(o), c_loc(o%manifest)), 'offset of open manifest')
    call expect(c(14) == o%struct_size .and. o%mode == KSTAGE_ADIOS2_WRITE .and. &
                .not. c_associated(o%engine) .and. .not. c_associated(o%parameters) .and. &
                o%inline_writer == 0 .and. o%manifest == 0, 'kstage_adios2_open_desc_init')
    call expect(c(15) == c_sizeof(t), 'sizeof(kstage_adios2_step_desc_t)')
    call expect(c(16) == offset(c_loc(t), c_loc(t%change_range)), 'offset of change_range')
    call expect(c(17) == offset(c_loc(t), c_loc(t%reserved)), 'offset of reserved')
    call expect(c(18) == offset(c_loc(t), c_loc(t%range_begin)), 'offset of range_begin')
    call expect(c(19) == offset(c_loc(t), c_loc(t%range_end)), 'offset of range_end')
    call expect(c(20) == t%struct_size .and. .not. t%change_range .and. all(t%reserved == 0), &
                'kstage_adios2_step_desc_init')
    call expect(c(21) == KSTAGE_ADIOS2_WRITE, 'KSTAGE_ADIOS2_WRITE')
    call expect(c(22) == KSTAGE_ADIOS2_READ, 'KSTAGE_ADIOS2_READ')
    d = kstage_adios2_restart_desc_init()
    call expect(c(1) == c_sizeof(d), 'sizeof(kstage_adios2_restart_desc_t)')
    call expect(c(2) == 0, 'offset of struct_size')
    call expect(c(3) == 4, 'offset of manifest')
    call expect(c(4) == KSTAGE_ADIOS2_MANIFEST_DEFAULT, 'KSTAGE_ADIOS2_MANIFEST_DEFAULT')
    call expect(c(5) == KSTAGE_ADIOS2_MANIFEST_IF_PRESENT, 'KSTAGE_ADIOS2_MANIFEST_IF_PRESENT')
    call expect(c(6) == KSTAGE_ADIOS2_MANIFEST_REQUIRED, 'KSTAGE_ADIOS2_MANIFEST_REQUIRED')
    call expect(c(7) == d%struct_size .and. d%manifest == KSTAGE_ADIOS2_MANIFEST_DEFAULT, &
                'kstage_adios2_restart_desc_init')
  end subroutine

  integer function offset(base, field)
    type(c_ptr), intent(in) :: base, field
    offset = int(transfer(field, 0_c_intptr_t) - transfer(base, 0_c_intptr_t))
  end function

  ! Steps through streams: a BP5 folder written step by step and read back, the Inline engine,
  ! and what each refuses.
  subroutine check_streams()
    integer(int64) :: src, dst, w, r, q, qe, tpos, tmass, ids(5), ord, kept
    real(real64) :: p3(3, 5)
    type(kstage_adios2_open_desc_t) :: od
    integer :: st
    logical :: more
    ! A source stage at 3 (p1, m1), written as a full step; then pos again at 4 (p3), written as
    ! the incremental step of [4, 4].
    call kstage_open(src)
    call kstage_token(src, 'pos', tpos)
    call kstage_token(src, 'mass', tmass)
    call kstage_paths(src, ['/w/a', '/w/b', '/w/c', '/w/d', '/w/e'], ids)
    call kstage_query(src, ids, q)
    call kstage_write(src, q, tpos, 2_int64, p1, semantic=KSTAGE_SEMANTIC_POINT)
    call kstage_write(src, q, tmass, 3_int64, m1)
    call kstage_seal(src, 3_int64)
    call kstage_stream_open(dir // '/stream.bp', w, parameters=['NumAggregators', '1             '])
    call kstage_stream_write_step(w, src, q)
    p3 = p1 + 100
    call kstage_write(src, q, tpos, 4_int64, p3, semantic=KSTAGE_SEMANTIC_POINT)
    call kstage_query(src, ids(5:5), qe)
    call kstage_delete(src, qe, 4_int64, [tmass])   ! /w/e loses its mass at 4
    call kstage_query_free(src, qe)
    call kstage_seal(src, 4_int64)
    call kstage_stream_write_step(w, src, q, [tpos, tmass], range=[4_int64, 4_int64])
    ! a writer cannot read
    call kstage_open(dst)
    more = kstage_stream_read_step(w, dst, ord, stat=st)
    call expect(.not. more .and. st == KSTAGE_INVALID_ARGUMENT, &
                'a writer read: KSTAGE_INVALID_ARGUMENT, got ' // kstage_status_name(st))
    call expect(index(kstage_error_message(), 'kstage_stream_read_step: ') == 1 .and. &
                index(kstage_error_message(), 'writer') > 0, &
                'a writer read: the message: ' // kstage_error_message())
    call kstage_stream_close(w)
    call kstage_stream_close(w, stat=st)
    call expect(st == KSTAGE_INVALID_HANDLE, 'closed twice: KSTAGE_INVALID_HANDLE, got ' // &
                kstage_status_name(st))
    call kstage_stream_write_step(w, src, q, stat=st)
    call expect(st == KSTAGE_INVALID_HANDLE, 'a closed stream written: KSTAGE_INVALID_HANDLE')
    call expect_empty(dst, 'a writer read')
    ! Read back step by step, the folder checked against the manifest the close wrote.
    call kstage_stream_open(dir // '/stream.bp', r, mode=KSTAGE_ADIOS2_READ, &
                            manifest=KSTAGE_ADIOS2_MANIFEST_REQUIRED)
    call kstage_stream_write_step(r, src, q, stat=st)
    call expect(st == KSTAGE_INVALID_ARGUMENT, 'a reader written: KSTAGE_INVALID_ARGUMENT, got ' &
                // kstage_status_name(st))
    more = kstage_stream_read_step(r, dst, ord)
    call expect(more .and. ord == 3, 'stream: the first step, at 3')
    call check_stage(dst, p1, m1, 'stream, first step')
    call expect(holders(dst, 'mass') == 5, 'stream, first step: 5 prims hold mass')
    more = kstage_stream_read_step(r, dst, ord)
    call expect(more .and. ord == 4, 'stream: the second step, at 4')
    call check_stage(dst, p3, m1, 'stream, second step')
    call expect(holders(dst, 'mass') == 4, 'stream, second step: /w/e lost its mass')
    more = kstage_stream_read_step(r, dst, ord, stat=st)
    call expect(.not. more .and. st == KSTAGE_OK, 'stream: the end (.false., KSTAGE_OK)')
    call check_stage(dst, p3, m1, 'stream, after its end')
    call kstage_stream_close(r)
    call kstage_close(dst)

    ! The Inline engine: a reader coupled to its writer in this process.
    call kstage_stream_open('f-inline', w, engine='Inline')
    call kstage_stream_open('f-inline-reader', r, mode=KSTAGE_ADIOS2_READ, inline_writer=w)
    call kstage_stream_write_step(w, src, q, [tpos, tmass])
    call kstage_open(dst)
    more = kstage_stream_read_step(r, dst, ord, timeout_ns=0_int64)
    call expect(more .and. ord == 4, 'Inline: the step, at 4')
    call check_stage(dst, p3, m1, 'Inline')
    call kstage_stream_close(r)
    call kstage_stream_close(w)
    call kstage_close(dst)
    ! the same through the C interfaces
    od = kstage_adios2_open_desc_init()
    od%engine = c_loc(inline_engine)
    st = kstage_adios2_open('f-inline-c' // c_null_char, od, w)
    call expect(st == KSTAGE_OK, 'Inline (C interface): the writer opens')
    od%mode = KSTAGE_ADIOS2_READ
    od%inline_writer = w
    st = kstage_adios2_open('f-inline-c-reader' // c_null_char, od, r)
    call expect(st == KSTAGE_OK, 'Inline (C interface): the reader opens')
    st = kstage_adios2_write_step(w, src, q, n=0_c_int64_t)
    call expect(st == KSTAGE_OK, 'Inline (C interface): a step written')
    call kstage_open(dst)
    st = kstage_adios2_read_step(r, dst, KSTAGE_TIMEOUT_INFINITE, ord)
    call expect(st == KSTAGE_OK .and. ord == 4, 'Inline (C interface): the step read, at 4')
    call check_stage(dst, p3, m1, 'Inline (C interface)')
    call expect(kstage_adios2_close(r) == KSTAGE_OK .and. kstage_adios2_close(w) == KSTAGE_OK, &
                'Inline (C interface): closed')
    call kstage_close(dst)

    ! Refusals: nothing opened, `stream` 0.
    call kstage_stream_open(dir // '/x.bp', kept, engine='NoSuchEngine', stat=st)
    call expect(st == KSTAGE_NOT_SUPPORTED .and. kept == 0, &
                'an unknown engine: KSTAGE_NOT_SUPPORTED, got ' // kstage_status_name(st))
    call expect(index(kstage_error_message(), 'NoSuchEngine') > 0, &
                'an unknown engine: the message names it: ' // kstage_error_message())
    call kstage_stream_open(dir // '/x.bp', kept, parameters=['NumAggregators'], stat=st)
    call expect(st == KSTAGE_INVALID_ARGUMENT .and. kept == 0, &
                'parameters not in pairs: KSTAGE_INVALID_ARGUMENT')
    call expect(index(kstage_error_message(), 'NumAggregators') > 0, &
                'parameters not in pairs: the message names the key: ' // kstage_error_message())
    call kstage_stream_open(dir // '/x.bp', kept, parameters=[character(len=14) :: 'NumAggregators', '1' // c_null_char // '2'], &
                            stat=st)
    call expect(st == KSTAGE_INVALID_ARGUMENT .and. kept == 0, &
                'a parameter with a NUL: KSTAGE_INVALID_ARGUMENT')
    call expect(index(kstage_error_message(), 'parameters(2)') > 0, &
                'a parameter with a NUL: the message names it: ' // kstage_error_message())
    call kstage_stream_open(dir // '/x.bp', kept, mode=7, stat=st)
    call expect(st == KSTAGE_INVALID_ARGUMENT .and. kept == 0, 'mode 7: KSTAGE_INVALID_ARGUMENT')
    call kstage_stream_open(dir // '/x.bp', kept, engine=' ', stat=st)
    call expect(st == KSTAGE_INVALID_ARGUMENT .and. kept == 0, 'an empty engine: refused')
    call kstage_stream_open('', kept, stat=st)
    call expect(st == KSTAGE_INVALID_ARGUMENT .and. kept == 0, 'an empty name: refused')

    call kstage_query_free(src, q)
    call kstage_close(src)
  end subroutine

  ! How many of /w/a../w/e hold `attribute`.
  integer function holders(s, attribute)
    integer(int64), intent(in) :: s
    character(len=*), intent(in) :: attribute
    integer(int64) :: q, read, token, ids(5)
    type(kstage_group) :: group
    call kstage_token(s, attribute, token)
    call kstage_paths(s, ['/w/a', '/w/b', '/w/c', '/w/d', '/w/e'], ids)
    call kstage_query(s, ids, q)
    call kstage_read_open(s, q, [token], read)
    holders = 0
    do while (kstage_read_next(s, read, group))
      holders = holders + int(group%prim_count)
      call kstage_group_release(s, group)
    end do
    call kstage_read_close(s, read)
    call kstage_query_free(s, q)
  end function

  ! The stage holds exactly /w/a../w/e with pos = p and mass = m.
  subroutine check_stage(s, p, m, what)
    integer(int64), intent(in) :: s
    real(real64), intent(in) :: p(:, :), m(:)
    character(len=*), intent(in) :: what
    integer(int64) :: q, n, read, t_pos, t_mass, ids(5)
    type(kstage_group) :: group
    real(real64), pointer :: v2(:, :), v1(:)
    integer :: j
    call kstage_query_existing(s, q)
    call kstage_query_size(s, q, n)
    call kstage_query_free(s, q)
    call expect(n == 5, what // ': 5 prims')
    call kstage_token(s, 'pos', t_pos)
    call kstage_token(s, 'mass', t_mass)
    call kstage_paths(s, ['/w/a', '/w/b', '/w/c', '/w/d', '/w/e'], ids)
    call kstage_query(s, ids, q)
    call kstage_read_open(s, q, [t_pos, t_mass], read, compact=.true., host=.true.)
    do while (kstage_read_next(s, read, group))
      if (group%attribute == t_pos) then
        call expect(group%semantic == KSTAGE_SEMANTIC_POINT, what // ': pos is POINT')
        call kstage_values(group, v2)
        do j = 1, int(group%prim_count)
          call expect(all(v2(:, group%rows(j)) == p(:, j)), what // ': pos values')
        end do
      else
        call kstage_values(group, v1)
        do j = 1, int(group%prim_count)
          call expect(v1(group%rows(j)) == m(j), what // ': mass values')
        end do
      end if
      call kstage_group_release(s, group)
    end do
    call kstage_read_close(s, read)
    call kstage_query_free(s, q)
  end subroutine

  ! A stage a refused restart left as it was: no prims, its global write floor 0.
  subroutine expect_empty(s, what)
    integer(int64), intent(in) :: s
    character(len=*), intent(in) :: what
    integer(int64) :: q, n, floor
    call kstage_query_existing(s, q)
    call kstage_query_size(s, q, n)
    call kstage_query_free(s, q)
    call kstage_floor(s, floor)
    call expect(n == 0 .and. floor == 0, what // ': the stage unchanged')
  end subroutine

  ! One byte in the middle of a file, flipped (a copy damaged the way disks damage them).
  subroutine flip_byte(file)
    character(len=*), intent(in) :: file
    integer :: u
    integer(int64) :: size, at
    integer(int8) :: b
    inquire (file=file, size=size)
    if (size <= 0) error stop 'flip_byte: no file ' // file
    at = size / 2 + 1
    open (newunit=u, file=file, access='stream', form='unformatted', status='old', &
          action='readwrite')
    read (u, pos=at) b
    b = not(b)
    write (u, pos=at) b
    close (u)
  end subroutine

  subroutine delete_file(file)
    character(len=*), intent(in) :: file
    integer :: u
    open (newunit=u, file=file, status='old')
    close (u, status='delete')
  end subroutine

  ! The name a pointer file holds (its first line).
  function pointer_names(file) result(name)
    character(len=*), intent(in) :: file
    character(len=:), allocatable :: name
    character(len=4096) :: line
    integer :: u, ios
    line = ''
    open (newunit=u, file=file, status='old', action='read', iostat=ios)
    if (ios /= 0) then
      name = '(no pointer)'
      return
    end if
    read (u, '(a)', iostat=ios) line
    close (u)
    name = trim(line)
  end function

end program test_fortran_adios2
