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
! - kstage_adios2_c: the C API of the bridge's checkpoints and restarts as it is -- BIND(C)
!   interfaces under the C names (kstage_adios2_checkpoint, kstage_adios2_restart,
!   kstage_adios2_restart_ex, kstage_adios2_checkpoint_latest, kstage_adios2_restart_latest,
!   kstage_adios2_last_error), the descriptor kstage_adios2_restart_desc_t and its initialiser,
!   the constants KSTAGE_ADIOS2_MANIFEST_*. C's documentation applies word for word; paths are
!   NUL-terminated (trim(path) // c_null_char); a pointer C lets be NULL is OPTIONAL.
! - kstage_adios2: the same calls in the conventions of module kstage's layer (an optional
!   `stat`; without it a failure stops the program with its message; kstage_error_message()
!   gives the message; Fortran strings, trailing blanks not part of them).
!
! tests/fortran (fortran_adios2) checks the descriptor's layout and the constants against C.
module kstage_adios2_c
  use, intrinsic :: iso_c_binding
  implicit none

  ! kstage_adios2_manifest_t: whether a restart checks a BP5 folder's manifest.
  integer(c_int32_t), parameter :: KSTAGE_ADIOS2_MANIFEST_DEFAULT = 0
  integer(c_int32_t), parameter :: KSTAGE_ADIOS2_MANIFEST_IF_PRESENT = 1
  integer(c_int32_t), parameter :: KSTAGE_ADIOS2_MANIFEST_REQUIRED = 2

  type, bind(C) :: kstage_adios2_restart_desc_t
    integer(c_int32_t) :: struct_size = 0   ! uint32_t
    integer(c_int32_t) :: manifest = 0      ! kstage_adios2_manifest_t
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
  end interface

contains

  ! kstage_adios2_restart_desc_init(): the defaults (the manifest checked where there is one).
  function kstage_adios2_restart_desc_init() result(desc)
    type(kstage_adios2_restart_desc_t) :: desc
    desc%struct_size = int(c_sizeof(desc), c_int32_t)
    desc%manifest = KSTAGE_ADIOS2_MANIFEST_DEFAULT
  end function

end module kstage_adios2_c

module kstage_adios2
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: int64
  use kstage, only: kstage_error_message, kstage_status_name, kstage_string, KSTAGE_OK, &
                    KSTAGE_INVALID_ARGUMENT
  use kstage_layer_c, only: fortran_set_error
  use kstage_adios2_c
  implicit none
  private :: int64, kstage_error_message, kstage_status_name, kstage_string, KSTAGE_OK, &
             KSTAGE_INVALID_ARGUMENT, fortran_set_error, bridge_ok, c_path

contains

  ! A checkpoint of every attribute of every existing prim of `stage` into a new BP5 folder at
  ! `path` (replaced if it exists), flushed to stable storage and sealed by its manifest
  ! (kstage_adios2_checkpoint): complete when this returns without a failure.
  subroutine kstage_checkpoint(stage, path, stat)
    integer(int64), intent(in) :: stage
    character(len=*), intent(in) :: path
    integer, intent(out), optional :: stat
    if (present(stat)) stat = KSTAGE_OK
    if (.not. c_path(path, 'kstage_checkpoint', stat)) return
    if (.not. bridge_ok(kstage_adios2_checkpoint(stage, trim(path) // c_null_char), &
                        'kstage_checkpoint', stat)) return
  end subroutine

  ! A restart: every step of the BP5 folder at `path` read into `stage`, in order
  ! (kstage_adios2_restart_ex). Before ADIOS2 opens anything the folder is checked against its
  ! manifest; `manifest` (default KSTAGE_ADIOS2_MANIFEST_DEFAULT) says what a folder without one
  ! gets: read unchecked with a WARNING (DEFAULT), silently (IF_PRESENT), or refused with
  ! KSTAGE_INVALID_ARGUMENT (REQUIRED: verified restarts only). A folder that does not match its
  ! manifest is KSTAGE_OP_FAILED naming the file and what differs. `ordinal`: the last step's.
  ! The stage is unchanged by a restart that fails.
  subroutine kstage_restart(stage, path, ordinal, manifest, stat)
    integer(int64), intent(in) :: stage
    character(len=*), intent(in) :: path
    integer(int64), intent(out), optional :: ordinal
    integer, intent(in), optional :: manifest
    integer, intent(out), optional :: stat
    type(kstage_adios2_restart_desc_t) :: desc
    integer(c_int64_t) :: last
    if (present(stat)) stat = KSTAGE_OK
    if (.not. c_path(path, 'kstage_restart', stat)) return
    desc = kstage_adios2_restart_desc_init()
    if (present(manifest)) desc%manifest = int(manifest, c_int32_t)
    last = 0
    if (.not. bridge_ok(kstage_adios2_restart_ex(stage, trim(path) // c_null_char, desc, last), &
                        'kstage_restart', stat)) return
    if (present(ordinal)) ordinal = last
  end subroutine

  ! A checkpoint made the latest, durably (kstage_adios2_checkpoint_latest; docs/adios2.md, "A
  ! checkpoint that survives a crash"): written to `<pointer>.0` or `<pointer>.1`, the one
  ! `pointer` does not name, flushed and sealed, then `pointer` replaced atomically to name it.
  subroutine kstage_checkpoint_latest(stage, pointer, stat)
    integer(int64), intent(in) :: stage
    character(len=*), intent(in) :: pointer
    integer, intent(out), optional :: stat
    if (present(stat)) stat = KSTAGE_OK
    if (.not. c_path(pointer, 'kstage_checkpoint_latest', stat)) return
    if (.not. bridge_ok(kstage_adios2_checkpoint_latest(stage, trim(pointer) // c_null_char), &
                        'kstage_checkpoint_latest', stat)) return
  end subroutine

  ! A restart from the checkpoint `pointer` names (kstage_adios2_restart_latest), its manifest
  ! required. `ordinal`: the checkpoint's.
  subroutine kstage_restart_latest(stage, pointer, ordinal, stat)
    integer(int64), intent(in) :: stage
    character(len=*), intent(in) :: pointer
    integer(int64), intent(out), optional :: ordinal
    integer, intent(out), optional :: stat
    integer(c_int64_t) :: last
    if (present(stat)) stat = KSTAGE_OK
    if (.not. c_path(pointer, 'kstage_restart_latest', stat)) return
    last = 0
    if (.not. bridge_ok(kstage_adios2_restart_latest(stage, trim(pointer) // c_null_char, last), &
                        'kstage_restart_latest', stat)) return
    if (present(ordinal)) ordinal = last
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
    call fortran_set_error(message, int(len(message), c_size_t))
    if (present(stat)) then
      stat = int(KSTAGE_INVALID_ARGUMENT)
    else
      error stop 'kstage: KSTAGE_INVALID_ARGUMENT: ' // message
    end if
  end function

end module kstage_adios2
