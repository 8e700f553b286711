! SPDX-License-Identifier: Apache-2.0
!
! module kstage_adios2: the checkpoints and restarts of kstage's ADIOS2 bridge
! (include/kstage/kstage_adios2.h) for Fortran 2018 programs.
!
!   use kstage
!   use kstage_adios2
!
! Built, into libkstage_fortran_adios2 (CMake: kstage::fortran_adios2), where the Fortran module
! kstage and the ADIOS2 bridge are both built; a build without ADIOS2 has neither this module nor
! the library. Two modules, as for the core API:
! - kstage_adios2_c: the C API of the bridge as it is -- BIND(C) interfaces under the C names
!   (the checkpoints and restarts: kstage_adios2_checkpoint, kstage_adios2_restart,
!   kstage_adios2_restart_ex, kstage_adios2_checkpoint_latest, kstage_adios2_restart_latest; the
!   streams: kstage_adios2_open, kstage_adios2_close, kstage_adios2_write_step,
!   kstage_adios2_read_step; kstage_adios2_last_error), the descriptors
!   kstage_adios2_restart_desc_t, kstage_adios2_open_desc_t and kstage_adios2_step_desc_t and
!   their initialisers, the constants KSTAGE_ADIOS2_WRITE, _READ and KSTAGE_ADIOS2_MANIFEST_*.
!   C's documentation applies word for word; paths are NUL-terminated (trim(path) //
!   c_null_char); a pointer C lets be NULL is OPTIONAL. (The MPI form, kstage_adios2_mpi.h, takes
!   a C MPI_Comm: module kstage_adios2 reaches it through `comm` arguments instead.)
! - kstage_adios2: the same calls in the conventions of module kstage's layer (an optional
!   `stat`; without it a failure stops the program with its message; kstage_error_message()
!   gives the message; Fortran strings, trailing blanks not part of them), and the bridge's MPI
!   form through an optional `comm`: a Fortran MPI communicator handle (module mpi's integer,
!   mpi_f08's comm%MPI_VAL), turned into C's by fortran/adios2_mpi.c where the bridge has an MPI
!   form (kstage_has_adios2_mpi()); elsewhere a `comm` is KSTAGE_NOT_SUPPORTED.
!
! tests/fortran (fortran_adios2) checks the descriptors' layouts and the constants against C.
module kstage_adios2_c
  use, intrinsic :: iso_c_binding
  implicit none

  ! kstage_adios2_manifest_t: whether a restart checks a BP5 folder's manifest.
  integer(c_int32_t), parameter :: KSTAGE_ADIOS2_MANIFEST_DEFAULT = 0
  integer(c_int32_t), parameter :: KSTAGE_ADIOS2_MANIFEST_IF_PRESENT = 1
  integer(c_int32_t), parameter :: KSTAGE_ADIOS2_MANIFEST_REQUIRED = 2

  ! kstage_adios2_mode_t: what a stream does.
  integer(c_int32_t), parameter :: KSTAGE_ADIOS2_WRITE = 0
  integer(c_int32_t), parameter :: KSTAGE_ADIOS2_READ = 1

  type, bind(C) :: kstage_adios2_restart_desc_t
    integer(c_int32_t) :: struct_size = 0   ! uint32_t
    integer(c_int32_t) :: manifest = 0      ! kstage_adios2_manifest_t
  end type

  type, bind(C) :: kstage_adios2_open_desc_t
    integer(c_int32_t) :: struct_size = 0                ! uint32_t
    integer(c_int32_t) :: mode = KSTAGE_ADIOS2_WRITE     ! kstage_adios2_mode_t
    type(c_ptr) :: engine = c_null_ptr                   ! const char* (NULL: "BP5")
    type(c_ptr) :: parameters = c_null_ptr               ! const char* const* (key, value, ..., NULL)
    integer(c_int64_t) :: inline_writer = 0              ! kstage_adios2_stream_t
    integer(c_int32_t) :: manifest = 0                   ! kstage_adios2_manifest_t
  end type

  type, bind(C) :: kstage_adios2_step_desc_t
    integer(c_int32_t) :: struct_size = 0     ! uint32_t
    logical(c_bool) :: change_range = .false. ! bool
    integer(c_int8_t) :: reserved(3) = 0      ! must be zero
    integer(c_int64_t) :: range_begin = 0     ! uint64_t
    integer(c_int64_t) :: range_end = 0       ! uint64_t
  end type

  interface
    function kstage_adios2_last_error() bind(C, name="kstage_adios2_last_error") result(str)
      import :: c_ptr
      type(c_ptr) :: str
    end function
    function kstage_adios2_checkpoint(stage, path) bind(C, name="kstage_adios2_checkpoint") &
        result(status)
      import :: c_int32_t, c_int64_t, c_char
      integer(c_int64_t), value :: stage
      character(kind=c_char), intent(in) :: path(*)   ! NUL-terminated
      integer(c_int32_t) :: status
    end function
    function kstage_adios2_restart(stage, path, ordinal) bind(C, name="kstage_adios2_restart") &
        result(status)
      import :: c_int32_t, c_int64_t, c_char
      integer(c_int64_t), value :: stage
      character(kind=c_char), intent(in) :: path(*)   ! NUL-terminated
      integer(c_int64_t), intent(out), optional :: ordinal
      integer(c_int32_t) :: status
    end function
    function kstage_adios2_restart_ex(stage, path, desc, ordinal) &
        bind(C, name="kstage_adios2_restart_ex") result(status)
      import :: c_int32_t, c_int64_t, c_char, kstage_adios2_restart_desc_t
      integer(c_int64_t), value :: stage
      character(kind=c_char), intent(in) :: path(*)   ! NUL-terminated
      type(kstage_adios2_restart_desc_t), intent(in), optional :: desc
      integer(c_int64_t), intent(out), optional :: ordinal
      integer(c_int32_t) :: status
    end function
    function kstage_adios2_checkpoint_latest(stage, pointer) &
        bind(C, name="kstage_adios2_checkpoint_latest") result(status)
      import :: c_int32_t, c_int64_t, c_char
      integer(c_int64_t), value :: stage
      character(kind=c_char), intent(in) :: pointer(*)   ! NUL-terminated
      integer(c_int32_t) :: status
    end function
    function kstage_adios2_restart_latest(stage, pointer, ordinal) &
        bind(C, name="kstage_adios2_restart_latest") result(status)
      import :: c_int32_t, c_int64_t, c_char
      integer(c_int64_t), value :: stage
      character(kind=c_char), intent(in) :: pointer(*)   ! NUL-terminated
      integer(c_int64_t), intent(out), optional :: ordinal
      integer(c_int32_t) :: status
    end function
    function kstage_adios2_open(name, desc, stream) bind(C, name="kstage_adios2_open") &
        result(status)
      import :: c_int32_t, c_int64_t, c_char, kstage_adios2_open_desc_t
      character(kind=c_char), intent(in) :: name(*)   ! NUL-terminated
      type(kstage_adios2_open_desc_t), intent(in), optional :: desc
      integer(c_int64_t), intent(out) :: stream
      integer(c_int32_t) :: status
    end function
    function kstage_adios2_close(stream) bind(C, name="kstage_adios2_close") result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stream
      integer(c_int32_t) :: status
    end function
    function kstage_adios2_write_step(stream, stage, query, attributes, n, desc) &
        bind(C, name="kstage_adios2_write_step") result(status)
      import :: c_int32_t, c_int64_t, kstage_adios2_step_desc_t
      integer(c_int64_t), value :: stream, stage, query
      integer(c_int64_t), intent(in), optional :: attributes(*)   ! kstage_token_t
      integer(c_int64_t), value :: n
      type(kstage_adios2_step_desc_t), intent(in), optional :: desc
      integer(c_int32_t) :: status
    end function
    function kstage_adios2_read_step(stream, stage, timeout_ns, ordinal) &
        bind(C, name="kstage_adios2_read_step") result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stream, stage, timeout_ns
      integer(c_int64_t), intent(out) :: ordinal
      integer(c_int32_t) :: status
    end function
  end interface

contains

  ! kstage_adios2_restart_desc_init(): the defaults (the manifest checked where there is one).
  function kstage_adios2_restart_desc_init() result(desc)
    type(kstage_adios2_restart_desc_t) :: desc
    desc%struct_size = int(c_sizeof(desc), c_int32_t)
    desc%manifest = KSTAGE_ADIOS2_MANIFEST_DEFAULT
  end function

  ! kstage_adios2_open_desc_init(): write BP5.
  function kstage_adios2_open_desc_init() result(desc)
    type(kstage_adios2_open_desc_t) :: desc
    desc%struct_size = int(c_sizeof(desc), c_int32_t)
  end function

  ! kstage_adios2_step_desc_init(): a full step.
  function kstage_adios2_step_desc_init() result(desc)
    type(kstage_adios2_step_desc_t) :: desc
    desc%struct_size = int(c_sizeof(desc), c_int32_t)
  end function

end module kstage_adios2_c

module kstage_adios2
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: int64
  use kstage, only: kstage_error_message, kstage_status_name, kstage_string, KSTAGE_OK, &
                    KSTAGE_INVALID_ARGUMENT, KSTAGE_NOT_SUPPORTED, KSTAGE_END_OF_ITERATION, &
                    KSTAGE_TIMEOUT_INFINITE
  use kstage_layer_c, only: fortran_set_error
  use kstage_adios2_c
  implicit none
  private :: int64, kstage_error_message, kstage_status_name, kstage_string, KSTAGE_OK, &
             KSTAGE_INVALID_ARGUMENT, KSTAGE_NOT_SUPPORTED, KSTAGE_END_OF_ITERATION, &
             KSTAGE_TIMEOUT_INFINITE, fortran_set_error, bridge_ok, c_path, c_text, refuse, &
             mpi_form, has_mpi, open_mpi, checkpoint_mpi, restart_ex_mpi, checkpoint_latest_mpi, &
             restart_latest_mpi

  ! fortran/adios2_mpi.c: the MPI form with a Fortran communicator handle (MPI_Fint).
  interface
    function has_mpi() bind(C, name="kstage_fortran_adios2_has_mpi") result(yes)
      import :: c_int
      integer(c_int) :: yes
    end function
    function open_mpi(name, desc, comm, stream) bind(C, name="kstage_fortran_adios2_open_mpi") &
        result(status)
      import :: c_int, c_int32_t, c_int64_t, c_char, kstage_adios2_open_desc_t
      character(kind=c_char), intent(in) :: name(*)
      type(kstage_adios2_open_desc_t), intent(in) :: desc
      integer(c_int), value :: comm
      integer(c_int64_t), intent(out) :: stream
      integer(c_int32_t) :: status
    end function
    function checkpoint_mpi(stage, path, comm) &
        bind(C, name="kstage_fortran_adios2_checkpoint_mpi") result(status)
      import :: c_int, c_int32_t, c_int64_t, c_char
      integer(c_int64_t), value :: stage
      character(kind=c_char), intent(in) :: path(*)
      integer(c_int), value :: comm
      integer(c_int32_t) :: status
    end function
    function restart_ex_mpi(stage, path, desc, comm, ordinal) &
        bind(C, name="kstage_fortran_adios2_restart_ex_mpi") result(status)
      import :: c_int, c_int32_t, c_int64_t, c_char, kstage_adios2_restart_desc_t
      integer(c_int64_t), value :: stage
      character(kind=c_char), intent(in) :: path(*)
      type(kstage_adios2_restart_desc_t), intent(in) :: desc
      integer(c_int), value :: comm
      integer(c_int64_t), intent(out) :: ordinal
      integer(c_int32_t) :: status
    end function
    function checkpoint_latest_mpi(stage, pointer, comm) &
        bind(C, name="kstage_fortran_adios2_checkpoint_latest_mpi") result(status)
      import :: c_int, c_int32_t, c_int64_t, c_char
      integer(c_int64_t), value :: stage
      character(kind=c_char), intent(in) :: pointer(*)
      integer(c_int), value :: comm
      integer(c_int32_t) :: status
    end function
    function restart_latest_mpi(stage, pointer, comm, ordinal) &
        bind(C, name="kstage_fortran_adios2_restart_latest_mpi") result(status)
      import :: c_int, c_int32_t, c_int64_t, c_char
      integer(c_int64_t), value :: stage
      character(kind=c_char), intent(in) :: pointer(*)
      integer(c_int), value :: comm
      integer(c_int64_t), intent(out) :: ordinal
      integer(c_int32_t) :: status
    end function
  end interface

contains

  ! A checkpoint of every attribute of every existing prim of `stage` into a new BP5 folder at
  ! `path` (replaced if it exists), flushed to stable storage and sealed by its manifest
  ! (kstage_adios2_checkpoint): complete when this returns without a failure.
  ! With `comm`, on every rank of it (collective; kstage_adios2_checkpoint_mpi): each rank's
  ! stage its block of the step.
  subroutine kstage_checkpoint(stage, path, comm, stat)
    integer(int64), intent(in) :: stage
    character(len=*), intent(in) :: path
    integer, intent(in), optional :: comm
    integer, intent(out), optional :: stat
    integer(c_int32_t) :: status
    if (present(stat)) stat = KSTAGE_OK
    if (.not. c_path(path, 'kstage_checkpoint', stat)) return
    if (present(comm)) then
      if (.not. mpi_form('kstage_checkpoint', stat)) return
      status = checkpoint_mpi(stage, trim(path) // c_null_char, int(comm, c_int))
    else
      status = kstage_adios2_checkpoint(stage, trim(path) // c_null_char)
    end if
    if (.not. bridge_ok(status, 'kstage_checkpoint', stat)) return
  end subroutine

  ! A restart: every step of the BP5 folder at `path` read into `stage`, in order
  ! (kstage_adios2_restart_ex). Before ADIOS2 opens anything the folder is checked against its
  ! manifest; `manifest` (default KSTAGE_ADIOS2_MANIFEST_DEFAULT) says what a folder without one
  ! gets: read unchecked with a WARNING (DEFAULT), silently (IF_PRESENT), or refused with
  ! KSTAGE_INVALID_ARGUMENT (REQUIRED: verified restarts only). A folder that does not match its
  ! manifest is KSTAGE_OP_FAILED naming the file and what differs. `ordinal`: the last step's.
  ! The stage is unchanged by a restart that fails. With `comm`, on every rank of it
  ! (collective; kstage_adios2_restart_ex_mpi): each rank reads its share of the writers' blocks.
  subroutine kstage_restart(stage, path, ordinal, manifest, comm, stat)
    integer(int64), intent(in) :: stage
    character(len=*), intent(in) :: path
    integer(int64), intent(out), optional :: ordinal
    integer, intent(in), optional :: manifest
    integer, intent(in), optional :: comm
    integer, intent(out), optional :: stat
    type(kstage_adios2_restart_desc_t) :: desc
    integer(c_int64_t) :: last
    integer(c_int32_t) :: status
    if (present(stat)) stat = KSTAGE_OK
    if (.not. c_path(path, 'kstage_restart', stat)) return
    desc = kstage_adios2_restart_desc_init()
    if (present(manifest)) desc%manifest = int(manifest, c_int32_t)
    last = 0
    if (present(comm)) then
      if (.not. mpi_form('kstage_restart', stat)) return
      status = restart_ex_mpi(stage, trim(path) // c_null_char, desc, int(comm, c_int), last)
    else
      status = kstage_adios2_restart_ex(stage, trim(path) // c_null_char, desc, last)
    end if
    if (.not. bridge_ok(status, 'kstage_restart', stat)) return
    if (present(ordinal)) ordinal = last
  end subroutine

  ! A checkpoint made the latest, durably (kstage_adios2_checkpoint_latest; docs/adios2.md, "A
  ! checkpoint that survives a crash"): written to `<pointer>.0` or `<pointer>.1`, the one
  ! `pointer` does not name, flushed and sealed, then `pointer` replaced atomically to name it.
  ! With `comm`, on every rank of it (collective; kstage_adios2_checkpoint_latest_mpi).
  subroutine kstage_checkpoint_latest(stage, pointer, comm, stat)
    integer(int64), intent(in) :: stage
    character(len=*), intent(in) :: pointer
    integer, intent(in), optional :: comm
    integer, intent(out), optional :: stat
    integer(c_int32_t) :: status
    if (present(stat)) stat = KSTAGE_OK
    if (.not. c_path(pointer, 'kstage_checkpoint_latest', stat)) return
    if (present(comm)) then
      if (.not. mpi_form('kstage_checkpoint_latest', stat)) return
      status = checkpoint_latest_mpi(stage, trim(pointer) // c_null_char, int(comm, c_int))
    else
      status = kstage_adios2_checkpoint_latest(stage, trim(pointer) // c_null_char)
    end if
    if (.not. bridge_ok(status, 'kstage_checkpoint_latest', stat)) return
  end subroutine

  ! A restart from the checkpoint `pointer` names (kstage_adios2_restart_latest), its manifest
  ! required. `ordinal`: the checkpoint's. With `comm`, on every rank of it (collective;
  ! kstage_adios2_restart_latest_mpi: every rank reads the checkpoint rank 0 finds named).
  subroutine kstage_restart_latest(stage, pointer, ordinal, comm, stat)
    integer(int64), intent(in) :: stage
    character(len=*), intent(in) :: pointer
    integer(int64), intent(out), optional :: ordinal
    integer, intent(in), optional :: comm
    integer, intent(out), optional :: stat
    integer(c_int64_t) :: last
    integer(c_int32_t) :: status
    if (present(stat)) stat = KSTAGE_OK
    if (.not. c_path(pointer, 'kstage_restart_latest', stat)) return
    last = 0
    if (present(comm)) then
      if (.not. mpi_form('kstage_restart_latest', stat)) return
      status = restart_latest_mpi(stage, trim(pointer) // c_null_char, int(comm, c_int), last)
    else
      status = kstage_adios2_restart_latest(stage, trim(pointer) // c_null_char, last)
    end if
    if (.not. bridge_ok(status, 'kstage_restart_latest', stat)) return
    if (present(ordinal)) ordinal = last
  end subroutine

  ! Opens `name` (a BP5 folder's path; a stream's name for SST and Inline) with ADIOS2's engine
  ! `engine` (default 'BP5'), to write steps (`mode` KSTAGE_ADIOS2_WRITE, the default) or to
  ! read them in order (KSTAGE_ADIOS2_READ) (kstage_adios2_open). `parameters`: the engine's
  ! parameters as key, value, key, value, ... (ADIOS2's IO::SetParameter; trailing blanks are not
  ! part of them). `inline_writer`: for a reader of the Inline engine, the writer's stream, which
  ! couples the two in this process (the reader is opened under a name of its own). `manifest`:
  ! whether a reader of a BP5 folder has it checked against its manifest first (default
  ! KSTAGE_ADIOS2_MANIFEST_DEFAULT: not checked). `stream` is 0 (never a stream) on failure. A
  ! writer's BP5 folder is flushed and sealed by its manifest at kstage_stream_close. With
  ! `comm`, on every rank of it (collective; kstage_adios2_open_mpi): the ranks then write each
  ! step together (each rank's stage its block of it) or read it (each its share), and close.
  subroutine kstage_stream_open(name, stream, mode, engine, parameters, inline_writer, &
                                manifest, comm, stat)
    character(len=*), intent(in) :: name
    integer(int64), intent(out) :: stream
    integer, intent(in), optional :: mode
    character(len=*), intent(in), optional :: engine
    character(len=*), intent(in), optional :: parameters(:)
    integer(int64), intent(in), optional :: inline_writer
    integer, intent(in), optional :: manifest
    integer, intent(in), optional :: comm
    integer, intent(out), optional :: stat
    type(kstage_adios2_open_desc_t) :: desc
    character(kind=c_char), allocatable, target :: engine_text(:), parameter_text(:)
    type(c_ptr), allocatable, target :: parameter_list(:)
    integer(c_int64_t) :: opened
    integer(c_int32_t) :: status
    character(len=12) :: number
    integer :: i, at
    if (present(stat)) stat = KSTAGE_OK
    stream = 0
    if (.not. c_path(name, 'kstage_stream_open', stat)) return
    desc = kstage_adios2_open_desc_init()
    if (present(mode)) desc%mode = int(mode, c_int32_t)
    if (present(inline_writer)) desc%inline_writer = inline_writer
    if (present(manifest)) desc%manifest = int(manifest, c_int32_t)
    if (present(engine)) then
      if (len_trim(engine) == 0 .or. index(trim(engine), c_null_char) /= 0) then
        call refuse('kstage_stream_open: the engine "' // trim(engine) // &
                    '" is empty or holds a NUL character', stat)
        return
      end if
      call c_text([engine], engine_text)
      desc%engine = c_loc(engine_text(1))
    end if
    if (present(parameters)) then
      if (mod(size(parameters), 2) /= 0) then
        call refuse('kstage_stream_open: parameters come in pairs (key, value, ...); the last '// &
                    'key, "' // trim(parameters(size(parameters))) // '", has no value', stat)
        return
      end if
      do i = 1, size(parameters)
        if (index(trim(parameters(i)), c_null_char) /= 0) then
          write (number, '(i0)') i
          call refuse('kstage_stream_open: parameters(' // trim(number) // &
                      ') holds a NUL character (C would end it there)', stat)
          return
        end if
      end do
      call c_text(parameters, parameter_text)
      allocate(parameter_list(size(parameters) + 1))
      at = 1
      do i = 1, size(parameters)
        parameter_list(i) = c_loc(parameter_text(at))
        at = at + len_trim(parameters(i)) + 1
      end do
      parameter_list(size(parameters) + 1) = c_null_ptr
      desc%parameters = c_loc(parameter_list(1))
    end if
    opened = 0
    if (present(comm)) then
      if (.not. mpi_form('kstage_stream_open', stat)) return
      status = open_mpi(trim(name) // c_null_char, desc, int(comm, c_int), opened)
    else
      status = kstage_adios2_open(trim(name) // c_null_char, desc, opened)
    end if
    if (.not. bridge_ok(status, 'kstage_stream_open', stat)) return
    stream = opened
  end subroutine

  ! Closes a stream (kstage_adios2_close): a writer's last step is complete, and a writer's BP5
  ! folder flushed to stable storage and sealed by its manifest, when this returns without a
  ! failure. The handle is then stale (closing it again is KSTAGE_INVALID_HANDLE).
  subroutine kstage_stream_close(stream, stat)
    integer(int64), intent(in) :: stream
    integer, intent(out), optional :: stat
    if (present(stat)) stat = KSTAGE_OK
    if (.not. bridge_ok(kstage_adios2_close(stream), 'kstage_stream_close', stat)) return
  end subroutine

  ! Writes one step of a writer's stream (kstage_adios2_write_step): the sealed state of
  ! `attributes` (tokens, distinct; absent or empty: every attribute with a column) for the
  ! query's prims -- every value (a full step), or with `range` = [first, last] only what
  ! changed at a sealed ordinal in it, with the prims that lost an attribute (an incremental
  ! step). The step's ordinal is the highest write floor among its attributes.
  subroutine kstage_stream_write_step(stream, stage, query, attributes, range, stat)
    integer(int64), intent(in) :: stream, stage, query
    integer(int64), intent(in), optional :: attributes(:)
    integer(int64), intent(in), optional :: range(2)
    integer, intent(out), optional :: stat
    type(kstage_adios2_step_desc_t) :: desc
    integer(c_int64_t) :: n
    integer(c_int32_t) :: status
    if (present(stat)) stat = KSTAGE_OK
    desc = kstage_adios2_step_desc_init()
    if (present(range)) then
      desc%change_range = .true.
      desc%range_begin = range(1)
      desc%range_end = range(2)
    end if
    n = 0
    if (present(attributes)) n = size(attributes)
    if (n > 0) then
      status = kstage_adios2_write_step(stream, stage, query, attributes, n, desc)
    else  ! (every attribute: attributes NULL)
      status = kstage_adios2_write_step(stream, stage, query, n=n, desc=desc)
    end if
    if (.not. bridge_ok(status, 'kstage_stream_write_step', stat)) return
  end subroutine

  ! Reads the next step of a reader's stream into `stage` (kstage_adios2_read_step): .true. with
  ! `ordinal` the step's, .false. at the end of the stream (no more steps; stat KSTAGE_OK).
  ! `timeout_ns` (default: wait as long as it takes) bounds the wait for a stream's next step:
  ! KSTAGE_TIMEOUT when it is not ready by then. The stage is unchanged by a step that fails.
  !
  !   do while (kstage_stream_read_step(stream, stage, ordinal))
  logical function kstage_stream_read_step(stream, stage, ordinal, timeout_ns, stat) result(got)
    integer(int64), intent(in) :: stream, stage
    integer(int64), intent(out), optional :: ordinal
    integer(int64), intent(in), optional :: timeout_ns
    integer, intent(out), optional :: stat
    integer(c_int64_t) :: step_ordinal, wait
    integer(c_int32_t) :: status
    if (present(stat)) stat = KSTAGE_OK
    got = .false.
    wait = KSTAGE_TIMEOUT_INFINITE
    if (present(timeout_ns)) wait = timeout_ns
    step_ordinal = 0
    status = kstage_adios2_read_step(stream, stage, wait, step_ordinal)
    if (status == KSTAGE_END_OF_ITERATION) return
    if (.not. bridge_ok(status, 'kstage_stream_read_step', stat)) return
    got = .true.
    if (present(ordinal)) ordinal = step_ordinal
  end function

  ! `texts` (trailing blanks aside) one after another, each NUL-terminated, as C characters.
  subroutine c_text(texts, out)
    character(len=*), intent(in) :: texts(:)
    character(kind=c_char), allocatable, intent(out) :: out(:)
    integer :: i, j, at
    allocate(out(sum(len_trim(texts)) + size(texts)))
    at = 1
    do i = 1, size(texts)
      do j = 1, len_trim(texts(i))
        out(at) = texts(i)(j:j)
        at = at + 1
      end do
      out(at) = c_null_char
      at = at + 1
    end do
  end subroutine

  ! Whether this kstage's ADIOS2 bridge has its MPI form (built against an MPI ADIOS2), which a
  ! `comm` argument needs.
  logical function kstage_has_adios2_mpi()
    kstage_has_adios2_mpi = has_mpi() /= 0
  end function

  ! true if a `comm` can be honoured; otherwise refuses it (KSTAGE_NOT_SUPPORTED).
  logical function mpi_form(context, stat)
    character(len=*), intent(in) :: context
    integer, intent(inout), optional :: stat
    mpi_form = kstage_has_adios2_mpi()
    if (.not. mpi_form) &
      call refuse(context // ': comm was given, but this kstage''s ADIOS2 bridge has no MPI ' // &
                  'form (build it against an MPI ADIOS2: scripts/setup.sh --adios2-mpi)', stat, &
                  KSTAGE_NOT_SUPPORTED)
  end function

  ! The layer's refusal of an argument: `status` (default KSTAGE_INVALID_ARGUMENT: one C would
  ! misread) with `message`, through stat, or a stop.
  subroutine refuse(message, stat, status)
    character(len=*), intent(in) :: message
    integer, intent(inout), optional :: stat
    integer(c_int32_t), intent(in), optional :: status
    integer(c_int32_t) :: code
    code = KSTAGE_INVALID_ARGUMENT
    if (present(status)) code = status
    call fortran_set_error(message, int(len(message), c_size_t))
    if (present(stat)) then
      stat = int(code)
    else
      error stop 'kstage: ' // kstage_status_name(int(code)) // ': ' // message
    end if
  end subroutine

  ! true if the bridge's call succeeded; otherwise keeps kstage_adios2_last_error() (after
  ! `context`) as the layer's message and reports the status through stat, or stops.
  logical function bridge_ok(status, context, stat)
    integer(c_int32_t), intent(in) :: status
    character(len=*), intent(in) :: context
    integer, intent(inout), optional :: stat
    character(len=:), allocatable :: message
    bridge_ok = status == KSTAGE_OK
    if (bridge_ok) return
    message = context // ': ' // kstage_string(kstage_adios2_last_error())
    call fortran_set_error(message, int(len(message), c_size_t))
    if (present(stat)) then
      stat = int(status)
    else
      error stop 'kstage: ' // kstage_status_name(int(status)) // ': ' // kstage_error_message()
    end if
  end function

  ! true if `path` can be passed to C: not empty (trailing blanks aside), no NUL inside.
  logical function c_path(path, context, stat)
    character(len=*), intent(in) :: path
    character(len=*), intent(in) :: context
    integer, intent(inout), optional :: stat
    character(len=:), allocatable :: message
    c_path = len_trim(path) > 0 .and. index(trim(path), c_null_char) == 0
    if (c_path) return
    if (len_trim(path) == 0) then
      message = context // ': the path is empty'
    else
      message = context // ': the path "' // path(1:index(path, c_null_char) - 1) // &
                '" is followed by a NUL character (C would end it there)'
    end if
    call refuse(message, stat)
  end function

end module kstage_adios2
