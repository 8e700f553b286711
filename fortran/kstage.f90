! SPDX-License-Identifier: Apache-2.0
!
! module kstage: kstage for Fortran 2018 programs.
!
!   use kstage
!
! brings the whole C API (module kstage_c: BIND(C) interfaces under the C names, the structs as
! BIND(C) types; module kstage_constants: every constant of kstage.h and dlpack.h) and, on top of
! it, the Fortran layer below, with which a program never builds a DLTensor.
!
! Conventions of the layer
! - Handles and ids (stages, tokens, paths, queries, reads, maps) are integer(int64).
! - Every routine takes an optional `stat`. With `stat` present, nothing stops the program: stat
!   is KSTAGE_OK (0) on success, else the failure's status (KSTAGE_INVALID_ARGUMENT, ...), and
!   kstage_error_message() gives the message. Without it, a failure prints the message and
!   stops the program (ERROR STOP), as Fortran's own intrinsics do. A failed call changes
!   nothing: the stage is as it was before it.
! - Names and paths are Fortran strings; trailing blanks are not part of them.
! - Arrays are rows along their LAST axis: `pos(3, n)` is n rows of 3 lanes, exactly kstage's
!   row layout (Fortran is column-major, so pos(:, j) is row j's contiguous 3 values), and a
!   vector `mass(n)` is n rows of 1 lane. Any integer, real, complex or logical(c_bool) kind of
!   any rank from 1 is accepted (axes between the first and the last fold into lanes, as kstage
!   folds trailing axes of a tensor: `m(4, 4, n)` is n rows of 16 lanes in memory order; the
!   MATRIX semantic is row-major, so m(:, :, j) is the transpose of that matrix as Fortran
!   indexes it). An array section with strides (`pos(:, 1:n:2)`, `pos(1:2, :)`,
!   `pos(:, n:1:-1)`) is written as it is, through its strides, with no copy; a stride DLPack
!   cannot state (a component of an array of a derived type whose size is not a multiple of the
!   component's) is refused with a message.
! - Counting from 1. The layer's index maps name source rows from 1, as Fortran indexes the
!   array: index_map(i) = j writes row j (pos(:, j)) to the query's prim i, 1 <= j <= rows.
!   Read and map groups give the same: group%rows(i) is the row (1-based) of prim i, so prim
!   i's values are values(:, group%rows(i)). Prims are numbered from 1 as well (prim i of a
!   query is paths(i)), and so are a hierarchy's items: kstage_hierarchy's item_start(i) is
!   item i's first span. The C interfaces of module kstage_c keep C's 0-based rows.
! - Writes of the layer are complete when the routine returns: it waits for the write's op (a
!   host array is copied or adopted by then), so the array may change at once afterwards.
! - Read and map groups give Fortran pointers over kstage's own memory (c_f_pointer), with no
!   copy: a read group's pointers are valid until kstage_group_release, a map group's until
!   kstage_map_commit or kstage_map_discard. A zero-copy read group's memory is the column's
!   storage: never write through it (Fortran cannot mark a pointer read-only).
! The C side of the Fortran layer (cfi_tensor.c, layer_error.c), for module kstage only.
module kstage_layer_c
  use, intrinsic :: iso_c_binding
  use kstage_c, only: DLTensor, DLDataType
  implicit none

  ! One row of a ragged write (kstage_write_rows), made by kstage_row_of(array): it points into
  ! the array, which must have the TARGET attribute and outlive the write.
  type, bind(C) :: kstage_row
    type(c_ptr) :: data = c_null_ptr
    type(DLDataType) :: dtype
    integer(c_int32_t) :: ndim = 0
    integer(c_int64_t) :: shape(2) = 0     ! C order: (elements, lanes)
    integer(c_int64_t) :: strides(2) = 0   ! in elements
  end type

  ! ---- the C side of the layer (cfi_tensor.c, layer_error.c) ----------------------------------
  interface
    function fortran_tensor(array, unsigned_ints, what, what_length, tensor, shape, strides) &
        bind(C, name="kstage_fortran_tensor") result(status)
      import :: c_int32_t, c_int64_t, c_char, c_size_t, DLTensor
      type(*), dimension(..), intent(in), target :: array
      integer(c_int32_t), value :: unsigned_ints
      character(kind=c_char), intent(in) :: what(*)
      integer(c_size_t), value :: what_length
      type(DLTensor), intent(out) :: tensor
      integer(c_int64_t), intent(out), target :: shape(*), strides(*)   ! the tensor points here
      integer(c_int32_t) :: status
    end function
    function fortran_index_map(map, rows, out, what, what_length) &
        bind(C, name="kstage_fortran_index_map") result(status)
      import :: c_int32_t, c_int64_t, c_char, c_size_t
      type(*), dimension(..), intent(in) :: map
      integer(c_int64_t), value :: rows
      integer(c_int32_t), intent(out) :: out(*)
      character(kind=c_char), intent(in) :: what(*)
      integer(c_size_t), value :: what_length
      integer(c_int32_t) :: status
    end function
    function fortran_split_rows(values, counts, unsigned_ints, what, what_length, tensors, &
                                shapes, strides) &
        bind(C, name="kstage_fortran_split_rows") result(status)
      import :: c_int32_t, c_int64_t, c_char, c_size_t, DLTensor
      type(*), dimension(..), intent(in), target :: values
      type(*), dimension(..), intent(in) :: counts
      integer(c_int32_t), value :: unsigned_ints
      character(kind=c_char), intent(in) :: what(*)
      integer(c_size_t), value :: what_length
      type(DLTensor), intent(inout), target :: tensors(*)
      integer(c_int64_t), intent(out), target :: shapes(*), strides(*)  ! the tensors point here
      integer(c_int32_t) :: status
    end function
    function fortran_row(array, unsigned_ints, what, what_length, row) &
        bind(C, name="kstage_fortran_row") result(status)
      import :: c_int32_t, c_char, c_size_t, kstage_row
      type(*), dimension(..), intent(in), target :: array
      integer(c_int32_t), value :: unsigned_ints
      character(kind=c_char), intent(in) :: what(*)
      integer(c_size_t), value :: what_length
      type(kstage_row), intent(out) :: row
      integer(c_int32_t) :: status
    end function
    subroutine fortran_row_tensors(rows, n, tensors, shapes, strides) &
        bind(C, name="kstage_fortran_row_tensors")
      import :: c_int64_t, kstage_row, DLTensor
      type(kstage_row), intent(in) :: rows(*)
      integer(c_int64_t), value :: n
      type(DLTensor), intent(inout), target :: tensors(*)
      integer(c_int64_t), intent(out), target :: shapes(*), strides(*)  ! the tensors point here
    end subroutine
    subroutine fortran_set_error(str, length) bind(C, name="kstage_fortran_set_error")
      import :: c_char, c_size_t
      character(kind=c_char), intent(in) :: str(*)
      integer(c_size_t), value :: length
    end subroutine
    subroutine fortran_keep_last_error(context, length) &
        bind(C, name="kstage_fortran_keep_last_error")
      import :: c_char, c_size_t
      character(kind=c_char), intent(in) :: context(*)
      integer(c_size_t), value :: length
    end subroutine
    function fortran_error(length) bind(C, name="kstage_fortran_error") result(str)
      import :: c_ptr, c_size_t
      integer(c_size_t), intent(out) :: length
      type(c_ptr) :: str
    end function
    function c_strlen(str) bind(C, name="strlen") result(length)
      import :: c_ptr, c_size_t
      type(c_ptr), value :: str
      integer(c_size_t) :: length
    end function
  end interface

end module kstage_layer_c

module kstage
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: int8, int16, int32, int64, real32, real64
  use kstage_constants
  use kstage_c
  use kstage_layer_c
  implicit none
  private :: int8, int16, int32, int64, real32, real64

  ! A read group (kstage_read_next) or a map group (kstage_map_next).
  type :: kstage_group
    integer(c_int64_t) :: handle = 0      ! the read group or map group
    integer(c_int64_t) :: map = 0         ! the map, for a map group; 0 for a read group
    integer(c_int64_t) :: attribute = 0
    integer(c_int64_t) :: ordinal = 0     ! the write floor at the snapshot; a map's ordinal
    integer(c_int64_t) :: prim_count = 0
    integer(c_int64_t), pointer, contiguous :: prims(:) => null()   ! path ids, kstage's memory
    ! rows(i): the 1-based row of prim i -- of the group's values (fixed-size attributes), or
    ! the index of prim i's row (array attributes). Not allocated in a tombstone group.
    integer(c_int64_t), allocatable :: rows(:)
    type(DLDataType) :: dtype
    integer(c_int32_t) :: semantic = 0
    logical :: is_delete = .false.        ! a tombstone group: prims lost the attribute
    logical :: is_array = .false.         ! an array (ragged) attribute: one row per prim
    type(kstage_data_t) :: data           ! the C view (kstage_data_t), 0-based
  end type

  ! One criterion of kstage_query_where (kstage_predicate_t; docs/scene.md): op KSTAGE_FILTER_HAS,
  ! _IN, _CONTAINS or _PREFIX (the comparisons _LT, _LE, _GT, _GE are reserved: refused with
  ! KSTAGE_NOT_SUPPORTED), attribute a token, values path ids (for the hierarchy's names
  ! KSTAGE_PATH_ATTRIBUTE, KSTAGE_PARENT_ATTRIBUTE, KSTAGE_CHILDREN_ATTRIBUTE) or token ids (for
  ! KSTAGE_PRIM_TYPE, KSTAGE_APPLIED_SCHEMAS); HAS takes none. The structure constructor makes
  ! one: kstage_predicate(KSTAGE_FILTER_IN, parent, [world]), or kstage_predicate(
  ! KSTAGE_FILTER_HAS, mass) without values.
  type :: kstage_predicate
    integer :: op = KSTAGE_FILTER_HAS
    integer(int64) :: attribute = 0
    integer(int64), allocatable :: values(:)
  end type

  ! A valid address for Fortran pointers of zero size (c_f_pointer takes no NULL).
  integer(c_int64_t), target, save, private :: nowhere = 0

  interface kstage_values
    module procedure values_real32_1, values_real32_2, values_real64_1, values_real64_2, &
                     values_int32_1, values_int32_2, values_int64_1, values_int64_2
  end interface

  private :: fortran_tensor, fortran_index_map, fortran_split_rows, fortran_row, &
             fortran_row_tensors, fortran_set_error, fortran_keep_last_error, fortran_error, &
             c_strlen
  private :: ok, shim_ok, fail, copy_ids, failed, clen, flag, wait_op, submit_write, locate, group_from_c, &
             set_rows, dtype_name
  private :: values_real32_1, values_real32_2, values_real64_1, values_real64_2, &
             values_int32_1, values_int32_2, values_int64_1, values_int64_2

contains

  ! ==== errors ===================================================================================

  ! The message of this thread's last failed call of the layer ("" if none).
  function kstage_error_message() result(message)
    character(len=:), allocatable :: message
    integer(c_size_t) :: length
    type(c_ptr) :: str
    str = fortran_error(length)
    message = kstage_string(str)
  end function

  ! The name of a status ("KSTAGE_OK", ...), as kstage_status_string.
  function kstage_status_name(status) result(name)
    integer, intent(in) :: status
    character(len=:), allocatable :: name
    name = kstage_string(kstage_status_string(int(status, c_int32_t)))
  end function

  ! A NUL-terminated C string (kstage_last_error(), kstage_build_info, ...) as a Fortran string.
  function kstage_string(str) result(s)
    type(c_ptr), intent(in) :: str
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer(c_size_t) :: n, i
    if (.not. c_associated(str)) then
      s = ''
      return
    end if
    n = c_strlen(str)
    call c_f_pointer(str, chars, [n])
    allocate(character(len=n) :: s)
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function

  ! After a failure whose message is set: report it through stat, or stop.
  subroutine failed(status, stat)
    integer(c_int32_t), intent(in) :: status
    integer, intent(inout), optional :: stat
    if (present(stat)) then
      stat = int(status)
    else
      error stop 'kstage: ' // kstage_status_name(int(status)) // ': ' // kstage_error_message()
    end if
  end subroutine

  ! A failure of the layer's own, with its message.
  subroutine fail(status, message, stat)
    integer(c_int32_t), intent(in) :: status
    character(len=*), intent(in) :: message
    integer, intent(inout), optional :: stat
    call fortran_set_error(message, clen(message))
    call failed(status, stat)
  end subroutine

  ! true if the C call succeeded; otherwise keeps its message (after `context`) and fails.
  logical function ok(status, context, stat)
    integer(c_int32_t), intent(in) :: status
    character(len=*), intent(in) :: context
    integer, intent(inout), optional :: stat
    ok = status == KSTAGE_OK
    if (ok) return
    call fortran_keep_last_error(context, clen(context))
    call failed(status, stat)
  end function

  ! true if a call of the layer's C side (which sets its own message) succeeded; else fails.
  logical function shim_ok(status, stat)
    integer(c_int32_t), intent(in) :: status
    integer, intent(inout), optional :: stat
    shim_ok = status == KSTAGE_OK
    if (.not. shim_ok) call failed(status, stat)
  end function

  ! A contiguous copy of ids(:) for a C array argument, with one 0 entry when ids is empty (C
  ! takes no pointer to a zero-sized array from Fortran; the count passed with it is 0).
  subroutine copy_ids(ids, copy)
    integer(int64), intent(in) :: ids(:)
    integer(int64), allocatable, intent(out) :: copy(:)
    allocate(copy(max(1, size(ids))))
    copy(1) = 0
    copy(1:size(ids)) = ids
  end subroutine

  integer(c_size_t) function clen(s)
    character(len=*), intent(in) :: s
    clen = int(len_trim(s), c_size_t)
  end function

  integer(c_int32_t) function flag(value)
    logical, intent(in), optional :: value
    flag = 0
    if (present(value)) then
      if (value) flag = 1
    end if
  end function

  ! Waits for an op and releases it; its failure (kstage_op_error) becomes the layer's.
  subroutine wait_op(stage, op, context, stat)
    integer(int64), intent(in) :: stage, op
    character(len=*), intent(in) :: context
    integer, intent(inout), optional :: stat
    integer(c_int32_t) :: st, ignored
    type(c_ptr) :: message
    st = kstage_wait(stage, op, KSTAGE_TIMEOUT_INFINITE)
    if (st /= KSTAGE_OK) then
      call fortran_keep_last_error(context, clen(context))   ! kstage_wait's message, first
      if (kstage_op_error(stage, op, message) == KSTAGE_OK) then
        if (c_strlen(message) > 0) &
          call fortran_set_error(context // ': ' // kstage_string(message), &
                                 int(len(context) + 2, c_size_t) + c_strlen(message))
      end if
      ignored = kstage_release_op(stage, op)
      call failed(st, stat)
      return
    end if
    if (.not. ok(kstage_release_op(stage, op), context, stat)) return
  end subroutine

  ! ==== stages and names =========================================================================

  ! A new stage (kstage_create). serial = .true.: its host kernels run on Kokkos::Serial.
  subroutine kstage_open(stage, serial, stat)
    integer(int64), intent(out) :: stage
    logical, intent(in), optional :: serial
    integer, intent(out), optional :: stat
    type(kstage_config_t) :: config
    if (present(stat)) stat = KSTAGE_OK
    config = kstage_config_init()
    if (flag(serial) == 1) config%host_execution = KSTAGE_HOST_EXECUTION_SERIAL
    stage = 0
    if (.not. ok(kstage_create(config, stage), 'kstage_open', stat)) return
  end subroutine

  ! Destroys a stage and everything it holds (kstage_destroy).
  subroutine kstage_close(stage, stat)
    integer(int64), intent(in) :: stage
    integer, intent(out), optional :: stat
    if (present(stat)) stat = KSTAGE_OK
    if (.not. ok(kstage_destroy(stage), 'kstage_close', stat)) return
  end subroutine

  ! The token (attribute name) `name`, interned.
  subroutine kstage_token(stage, name, token, stat)
    integer(int64), intent(in) :: stage
    character(len=*), intent(in) :: name
    integer(int64), intent(out) :: token
    integer, intent(out), optional :: stat
    if (present(stat)) stat = KSTAGE_OK
    token = 0
    if (.not. ok(kstage_intern_token(stage, name, clen(name), token), &
                 'kstage_token("' // trim(name) // '")', stat)) return
  end subroutine

  ! The path id of `name` ("/a/b"), interned.
  subroutine kstage_path(stage, name, path, stat)
    integer(int64), intent(in) :: stage
    character(len=*), intent(in) :: name
    integer(int64), intent(out) :: path
    integer, intent(out), optional :: stat
    if (present(stat)) stat = KSTAGE_OK
    path = 0
    if (.not. ok(kstage_intern_path(stage, name, clen(name), path), &
                 'kstage_path("' // trim(name) // '")', stat)) return
  end subroutine

  ! The path ids of names(:), interned at once: all or none (kstage_intern_paths).
  subroutine kstage_paths(stage, names, paths, stat)
    integer(int64), intent(in) :: stage
    character(len=*), intent(in), target :: names(:)
    integer(int64), intent(out) :: paths(:)
    integer, intent(out), optional :: stat
    type(c_ptr), allocatable :: strings(:)
    integer(c_size_t), allocatable :: lengths(:)
    integer :: i
    if (present(stat)) stat = KSTAGE_OK
    if (size(paths) /= size(names)) then
      call fail(KSTAGE_INVALID_ARGUMENT, 'kstage_paths: paths has room for different number '// &
                'of ids than names has names', stat)
      return
    end if
    if (len(names) == 0 .and. size(names) > 0) then
      call fail(KSTAGE_INVALID_ARGUMENT, 'kstage_paths: the names are empty strings', stat)
      return
    end if
    allocate(strings(size(names)), lengths(size(names)))
    do i = 1, size(names)
      strings(i) = c_loc(names(i))
      lengths(i) = clen(names(i))
    end do
    if (size(names) == 0) return
    if (.not. ok(kstage_intern_paths(stage, strings, lengths, int(size(names), c_int64_t), &
                                     paths), 'kstage_paths', stat)) return
  end subroutine

  ! The path range "<parent>/<prefix><n>", n = begin .. begin + count - 1: first is the id of n =
  ! begin, and member n is first + (n - begin) (kstage_intern_path_range).
  subroutine kstage_path_range(stage, parent, prefix, begin, count, first, stat)
    integer(int64), intent(in) :: stage, begin, count
    character(len=*), intent(in) :: parent, prefix
    integer(int64), intent(out) :: first
    integer, intent(out), optional :: stat
    if (present(stat)) stat = KSTAGE_OK
    first = 0
    if (.not. ok(kstage_intern_path_range(stage, parent, clen(parent), prefix // c_null_char, &
                                          clen(prefix), begin, count, first), &
                 'kstage_path_range("' // trim(parent) // '", "' // trim(prefix) // '")', &
                 stat)) return
  end subroutine

  ! The name of a token.
  subroutine kstage_token_name(stage, token, name, stat)
    integer(int64), intent(in) :: stage, token
    character(len=:), allocatable, intent(out) :: name
    integer, intent(out), optional :: stat
    type(c_ptr) :: str
    if (present(stat)) stat = KSTAGE_OK
    name = ''
    if (.not. ok(kstage_token_string(stage, token, str), 'kstage_token_name', stat)) return
    name = kstage_string(str)
  end subroutine

  ! The string of a path id.
  subroutine kstage_path_name(stage, path, name, stat)
    integer(int64), intent(in) :: stage, path
    character(len=:), allocatable, intent(out) :: name
    integer, intent(out), optional :: stat
    type(c_ptr) :: str
    if (present(stat)) stat = KSTAGE_OK
    name = ''
    if (.not. ok(kstage_path_string(stage, path, str), 'kstage_path_name', stat)) return
    name = kstage_string(str)
  end subroutine

  ! ==== queries ==================================================================================

  ! A query over paths(:), in this order (prim i is paths(i)); they need not exist yet.
  subroutine kstage_query(stage, paths, query, stat)
    integer(int64), intent(in) :: stage
    integer(int64), intent(in) :: paths(:)
    integer(int64), intent(out) :: query
    integer, intent(out), optional :: stat
    integer(int64), allocatable :: copy(:)
    if (present(stat)) stat = KSTAGE_OK
    query = 0
    call copy_ids(paths, copy)
    if (.not. ok(kstage_query_paths(stage, copy, int(size(paths), c_int64_t), query), &
                 'kstage_query', stat)) return
  end subroutine

  ! A query over members start, start + stride, ... (count of them; 0: to the end) of the path
  ! range whose first id is `first`; start counts from 0 as the range's numbers do from begin
  ! (kstage_query_range). Defaults: start 0, count 0, stride 1.
  subroutine kstage_query_of_range(stage, first, query, start, count, stride, stat)
    integer(int64), intent(in) :: stage, first
    integer(int64), intent(out) :: query
    integer(int64), intent(in), optional :: start, count, stride
    integer, intent(out), optional :: stat
    integer(int64) :: s, c, t
    if (present(stat)) stat = KSTAGE_OK
    s = 0
    c = 0
    t = 1
    if (present(start)) s = start
    if (present(count)) c = count
    if (present(stride)) t = stride
    query = 0
    if (.not. ok(kstage_query_range(stage, first, s, c, t, query), 'kstage_query_of_range', &
                 stat)) return
  end subroutine

  ! A query over the existing prims (sealed state), in path-id order, that hold every attribute
  ! of `has` and lie at or below path `prefix` (kstage_query_filter).
  subroutine kstage_query_existing(stage, query, has, prefix, stat)
    integer(int64), intent(in) :: stage
    integer(int64), intent(out) :: query
    integer(int64), intent(in), optional, target :: has(:)
    integer(int64), intent(in), optional :: prefix
    integer, intent(out), optional :: stat
    type(kstage_filter_t) :: filter
    integer(int64), allocatable, target :: tokens(:)
    if (present(stat)) stat = KSTAGE_OK
    if (present(has)) then
      if (size(has) > 0) then
        call copy_ids(has, tokens)
        filter%has_attributes = c_loc(tokens)
        filter%has_attribute_count = size(has)
      end if
    end if
    if (present(prefix)) filter%path_prefix = prefix
    query = 0
    if (.not. ok(kstage_query_filter(stage, filter, query), 'kstage_query_existing', stat)) return
  end subroutine

  ! The number of prims of a query.
  subroutine kstage_query_size(stage, query, n, stat)
    integer(int64), intent(in) :: stage, query
    integer(int64), intent(out) :: n
    integer, intent(out), optional :: stat
    if (present(stat)) stat = KSTAGE_OK
    n = 0
    if (.not. ok(kstage_query_count(stage, query, n), 'kstage_query_size', stat)) return
  end subroutine

  ! The prims (path ids) of a query, in its order.
  subroutine kstage_query_prims(stage, query, paths, stat)
    integer(int64), intent(in) :: stage, query
    integer(int64), allocatable, intent(out) :: paths(:)
    integer, intent(out), optional :: stat
    integer(int64) :: list, n
    integer(c_int32_t) :: ignored
    type(c_ptr) :: ids
    integer(c_int64_t), pointer :: view(:)
    if (present(stat)) stat = KSTAGE_OK
    allocate(paths(0))
    if (.not. ok(kstage_query_get_paths(stage, query, list), 'kstage_query_prims', stat)) return
    if (.not. ok(kstage_path_list_get(stage, list, ids, n), 'kstage_query_prims', stat)) then
      ignored = kstage_path_list_release(stage, list)
      return
    end if
    if (n > 0) then
      call c_f_pointer(ids, view, [n])
      paths = view
    end if
    if (.not. ok(kstage_path_list_release(stage, list), 'kstage_query_prims', stat)) return
  end subroutine

  ! Releases a query.
  subroutine kstage_query_free(stage, query, stat)
    integer(int64), intent(in) :: stage, query
    integer, intent(out), optional :: stat
    if (present(stat)) stat = KSTAGE_OK
    if (.not. ok(kstage_query_release(stage, query), 'kstage_query_free', stat)) return
  end subroutine

  ! ==== writes ===================================================================================

  ! Writes `array` (rows along its last axis) as the values of `attribute` of the query's prims
  ! at `ordinal`, and waits for the write.
  !   index_map  integer vector (any kind): prim i takes row index_map(i), counted from 1; the
  !              write covers size(index_map) prims (the leading ones of the query)
  !   mask       logical vector: prim i is written when mask(i); row i belongs to prim i
  !   count      the leading `count` prims of the query (default: all, or the size of
  !              index_map or mask, which must then agree with count)
  !   mode       KSTAGE_PRIM_MODE_UPSERT (default), _INSERT or _UPDATE
  !   semantic   KSTAGE_SEMANTIC_* of the values (default NONE: an existing column's semantic)
  !   unsigned   .true.: integer arrays are written as unsigned (kDLUInt), e.g. TOKEN_ID columns
  !   attribute_mode  KSTAGE_ATTRIBUTE_MODE_REJECT (default) or _FORCE: a prim holding the
  !              attribute with another schema is refused, or takes the new one
  subroutine kstage_write(stage, query, attribute, ordinal, array, index_map, mask, count, mode, &
                          semantic, unsigned, stat, attribute_mode)
    integer(int64), intent(in) :: stage, query, attribute, ordinal
    type(*), dimension(..), intent(in), target :: array
    type(*), dimension(..), intent(in), optional :: index_map
    logical, intent(in), optional :: mask(:)
    integer(int64), intent(in), optional :: count
    integer, intent(in), optional :: mode, semantic
    logical, intent(in), optional :: unsigned
    integer, intent(out), optional :: stat
    integer, intent(in), optional :: attribute_mode
    character(len=*), parameter :: context = 'kstage_write'
    type(DLTensor), target :: tensor
    integer(c_int64_t), target :: shape(15), strides(15)
    type(kstage_write_data_t) :: data
    if (present(stat)) stat = KSTAGE_OK
    if (.not. shim_ok(fortran_tensor(array, flag(unsigned), context // ': array', &
                                clen(context // ': array'), tensor, shape, strides), &
                 stat)) return
    data = kstage_write_data_init()
    data%tensors = c_loc(tensor)
    data%tensor_count = 1
    call submit_write(stage, query, attribute, ordinal, data, shape(1), context, index_map, &
                      mask, count, mode, semantic, stat, attribute_mode)
  end subroutine

  ! A ragged (array) attribute from one array per prim: rows(i) = kstage_row_of(a_i). The
  ! options are kstage_write's; index_map entries name rows(j) from 1.
  subroutine kstage_write_rows(stage, query, attribute, ordinal, rows, index_map, mask, count, &
                               mode, semantic, stat, attribute_mode)
    integer(int64), intent(in) :: stage, query, attribute, ordinal
    type(kstage_row), intent(in) :: rows(:)
    type(*), dimension(..), intent(in), optional :: index_map
    logical, intent(in), optional :: mask(:)
    integer(int64), intent(in), optional :: count
    integer, intent(in), optional :: mode, semantic
    integer, intent(out), optional :: stat
    integer, intent(in), optional :: attribute_mode
    character(len=*), parameter :: context = 'kstage_write_rows'
    type(DLTensor), allocatable, target :: tensors(:)
    integer(c_int64_t), allocatable, target :: shapes(:), strides(:)
    type(kstage_write_data_t) :: data
    integer(c_int64_t) :: n
    if (present(stat)) stat = KSTAGE_OK
    n = size(rows)
    if (n == 0) then
      call fail(KSTAGE_INVALID_ARGUMENT, context // ': no rows', stat)
      return
    end if
    allocate(tensors(n), shapes(2 * n), strides(2 * n))
    call fortran_row_tensors(rows, n, tensors, shapes, strides)
    data = kstage_write_data_init()
    data%tensors = c_loc(tensors)
    data%tensor_count = n
    data%is_array = .true.
    call submit_write(stage, query, attribute, ordinal, data, n, context, index_map, mask, count, &
                      mode, semantic, stat, attribute_mode)
  end subroutine

  ! A ragged (array) attribute from packed values: row i is the next row_counts(i) elements of
  ! the last axis of `values` (rank 1: elements; rank 2: (lanes, elements)), rows in order. The
  ! options are kstage_write's; index_map entries name rows from 1.
  subroutine kstage_write_packed(stage, query, attribute, ordinal, values, row_counts, &
                                 index_map, mask, count, mode, semantic, unsigned, stat, &
                                 attribute_mode)
    integer(int64), intent(in) :: stage, query, attribute, ordinal
    type(*), dimension(..), intent(in), target :: values
    type(*), dimension(..), intent(in) :: row_counts
    type(*), dimension(..), intent(in), optional :: index_map
    logical, intent(in), optional :: mask(:)
    integer(int64), intent(in), optional :: count
    integer, intent(in), optional :: mode, semantic
    logical, intent(in), optional :: unsigned
    integer, intent(out), optional :: stat
    integer, intent(in), optional :: attribute_mode
    character(len=*), parameter :: context = 'kstage_write_packed'
    type(DLTensor), allocatable, target :: tensors(:)
    integer(c_int64_t), allocatable, target :: shapes(:), strides(:)
    type(kstage_write_data_t) :: data
    integer(c_int64_t) :: n
    if (present(stat)) stat = KSTAGE_OK
    n = max(0_int64, size(row_counts, kind=int64))   ! SIZE of an assumed-rank [integer ::]: -1 (gfortran 12)
    if (n == 0) then
      call fail(KSTAGE_INVALID_ARGUMENT, context // ': row_counts is empty', stat)
      return
    end if
    allocate(tensors(n), shapes(2 * n), strides(2 * n))
    if (.not. shim_ok(fortran_split_rows(values, row_counts, flag(unsigned), context // ': values', &
                                    clen(context // ': values'), tensors, shapes, strides), &
                 stat)) return
    data = kstage_write_data_init()
    data%tensors = c_loc(tensors)
    data%tensor_count = n
    data%is_array = .true.
    call submit_write(stage, query, attribute, ordinal, data, n, context, index_map, mask, count, &
                      mode, semantic, stat, attribute_mode)
  end subroutine

  ! A row of a ragged write, over `array` (rank 1: elements; rank 2: (lanes, elements)), which
  ! must have the TARGET attribute and outlive the write. unsigned: as kstage_write's.
  function kstage_row_of(array, unsigned, stat) result(row)
    type(*), dimension(..), intent(in), target :: array
    logical, intent(in), optional :: unsigned
    integer, intent(out), optional :: stat
    type(kstage_row) :: row
    if (present(stat)) stat = KSTAGE_OK
    if (.not. shim_ok(fortran_row(array, flag(unsigned), 'kstage_row_of: array', &
                             clen('kstage_row_of: array'), row), stat)) return
  end function

  ! The selection, the options and the call of every write; waits for its op.
  subroutine submit_write(stage, query, attribute, ordinal, data, rows, context, index_map, mask, &
                          count, mode, semantic, stat, attribute_mode)
    integer(int64), intent(in) :: stage, query, attribute, ordinal
    type(kstage_write_data_t), intent(inout) :: data
    integer(c_int64_t), intent(in) :: rows   ! source rows
    character(len=*), intent(in) :: context
    type(*), dimension(..), intent(in), optional :: index_map
    logical, intent(in), optional :: mask(:)
    integer(int64), intent(in), optional :: count
    integer, intent(in), optional :: mode, semantic
    integer, intent(inout), optional :: stat
    integer, intent(in), optional :: attribute_mode
    integer(c_int32_t), allocatable, target :: map0(:)
    integer(c_int64_t), allocatable, target :: words(:)
    integer(c_int32_t) :: prim_mode
    integer(int64) :: op, n, i
    character(len=160) :: text
    if (present(index_map) .and. present(mask)) then
      call fail(KSTAGE_INVALID_ARGUMENT, context // ': index_map and mask are exclusive', stat)
      return
    end if
    if (present(count)) then
      if (count < 0) then
        write(text, '(a, i0)') ': count is negative: ', count
        call fail(KSTAGE_INVALID_ARGUMENT, context // trim(text), stat)
        return
      end if
      data%count = count
    end if
    if (present(index_map)) then
      n = max(0_int64, size(index_map, kind=int64))   ! SIZE of an assumed-rank [integer ::]: -1 (gfortran 12)
      if (present(count)) then
        if (n /= count) then
          write(text, '(a, i0, a, i0)') ': count is ', count, ' but index_map has ', n
          call fail(KSTAGE_INVALID_ARGUMENT, context // trim(text) // ' entries', stat)
          return
        end if
      end if
      if (n == 0) then
        call fail(KSTAGE_INVALID_ARGUMENT, context // ': index_map is empty', stat)
        return
      end if
      allocate(map0(n))
      if (.not. shim_ok(fortran_index_map(index_map, rows, map0, context // ': index_map', &
                                     clen(context // ': index_map')), stat)) return
      data%index_map = c_loc(map0)
      data%count = n
    else if (present(mask)) then
      n = size(mask)
      if (present(count)) then
        if (n /= count) then
          write(text, '(a, i0, a, i0)') ': count is ', count, ' but mask has ', n
          call fail(KSTAGE_INVALID_ARGUMENT, context // trim(text) // ' entries', stat)
          return
        end if
      end if
      if (n == 0) then
        call fail(KSTAGE_INVALID_ARGUMENT, context // ': mask is empty', stat)
        return
      end if
      allocate(words((n + 63) / 64))
      words = 0
      do i = 1, n
        if (mask(i)) words((i - 1) / 64 + 1) = ibset(words((i - 1) / 64 + 1), int(mod(i - 1, 64_int64)))
      end do
      data%mask = c_loc(words)
      data%count = n
    end if
    if (present(semantic)) data%semantic = int(semantic, c_int32_t)
    if (present(attribute_mode)) data%attribute_mode = int(attribute_mode, c_int8_t)
    prim_mode = KSTAGE_PRIM_MODE_UPSERT
    if (present(mode)) prim_mode = int(mode, c_int32_t)
    op = 0
    if (.not. ok(kstage_write_attribute(stage, query, attribute, ordinal, data, prim_mode, op), &
                 context, stat)) return
    call wait_op(stage, op, context, stat)
  end subroutine

  ! Deletes `attributes` (not empty) of the query's prims at `ordinal`, and waits for the
  ! delete. A prim disappears with its last attribute; absent ones are ignored.
  subroutine kstage_delete(stage, query, ordinal, attributes, stat)
    integer(int64), intent(in) :: stage, query, ordinal
    integer(int64), intent(in) :: attributes(:)
    integer, intent(out), optional :: stat
    integer(int64) :: op
    integer(int64), allocatable :: tokens(:)
    if (present(stat)) stat = KSTAGE_OK
    if (size(attributes) <= 0) then
      call fail(KSTAGE_INVALID_ARGUMENT, 'kstage_delete: attributes is empty (kstage_delete_prims '// &
                'deletes the prims themselves)', stat)
      return
    end if
    call copy_ids(attributes, tokens)
    op = 0
    if (.not. ok(kstage_delete_attributes(stage, query, tokens, int(size(attributes), c_int64_t), &
                                          ordinal, op), 'kstage_delete', stat)) return
    call wait_op(stage, op, 'kstage_delete', stat)
  end subroutine

  ! Deletes the query's prims -- every attribute they hold -- at `ordinal`, and waits for it.
  ! (A routine of its own, not kstage_delete without attributes: gfortran passes an empty
  ! array constructor to an optional argument as absent.)
  subroutine kstage_delete_prims(stage, query, ordinal, stat)
    integer(int64), intent(in) :: stage, query, ordinal
    integer, intent(out), optional :: stat
    integer(int64) :: op
    if (present(stat)) stat = KSTAGE_OK
    op = 0
    if (.not. ok(kstage_delete_attributes(stage, query, n=0_c_int64_t, ordinal=ordinal, op=op), &
                 'kstage_delete_prims', stat)) return
    call wait_op(stage, op, 'kstage_delete_prims', stat)
  end subroutine

  ! Seals: advances the write floor of `attributes` (absent: every attribute; present, it may
  ! not be empty) to `ordinal` (kstage_advance_write_floor). gfortran 12 passes an empty array
  ! constructor (`[integer(int64) ::]`) as an absent argument: name a zero-sized variable to
  ! have an empty list refused.
  subroutine kstage_seal(stage, ordinal, attributes, stat)
    integer(int64), intent(in) :: stage, ordinal
    integer(int64), intent(in), optional :: attributes(:)
    integer, intent(out), optional :: stat
    integer(int64), allocatable :: tokens(:)
    if (present(stat)) stat = KSTAGE_OK
    if (present(attributes)) then
      if (size(attributes) == 0) then
        call fail(KSTAGE_INVALID_ARGUMENT, 'kstage_seal: attributes is empty; leave it out to '// &
                  'seal every attribute', stat)
        return
      end if
      call copy_ids(attributes, tokens)
      if (.not. ok(kstage_advance_write_floor(stage, ordinal, tokens, &
                                              int(size(attributes), c_int64_t)), &
                   'kstage_seal', stat)) return
    else
      if (.not. ok(kstage_advance_write_floor(stage, ordinal, n=0_c_int64_t), 'kstage_seal', &
                   stat)) return
    end if
  end subroutine

  ! Computes world matrices from local ones as one write of the world column at `ordinal`, and
  ! waits for it (kstage_compute_world_transforms; docs/scene.md): seal `ordinal` to see them.
  ! world = local . parent_world (USD's row vectors: m(1:3, 4, j) of a MATRIX array m(4, 4, n)
  ! holds prim j's translation). mode: KSTAGE_TRANSFORM_INCREMENTAL (the default) or
  ! KSTAGE_TRANSFORM_FULL; local, reset, world: tokens (absent: 'omni:xform',
  ! 'omni:resetXformStack', 'omni:fabric:worldMatrix').
  subroutine kstage_world_transforms(stage, ordinal, mode, local, reset, world, stat)
    integer(int64), intent(in) :: stage, ordinal
    integer, intent(in), optional :: mode
    integer(int64), intent(in), optional :: local, reset, world
    integer, intent(out), optional :: stat
    type(kstage_transform_desc_t) :: desc
    integer(int64) :: op
    if (present(stat)) stat = KSTAGE_OK
    desc = kstage_transform_desc_init()
    if (present(mode)) desc%mode = int(mode, c_int32_t)
    if (present(local)) desc%local = local
    if (present(reset)) desc%reset = reset
    if (present(world)) desc%world = world
    op = 0
    if (.not. ok(kstage_compute_world_transforms(stage, desc, ordinal, op), &
                 'kstage_world_transforms', stat)) return
    call wait_op(stage, op, 'kstage_world_transforms', stat)
  end subroutine

  ! Clones the prim `source` and every existing prim below it (the sealed state) to each path of
  ! targets(:) -- the copy of source/x is target/x, with every attribute source/x holds -- as one
  ! write at `ordinal`, and waits for it (kstage_clone; docs/fortran.md): seal `ordinal` to see
  ! the copies. PATH_ID values naming a path at or below `source` are rebased below the target.
  ! Create-only and all-or-nothing: a refusal (KSTAGE_NOT_FOUND: no source;
  ! KSTAGE_INVALID_ARGUMENT: a target that is `source`, lies below it, is listed twice or below
  ! another target, or no target; KSTAGE_ALREADY_EXISTS; KSTAGE_WRITE_FLOOR_VIOLATION;
  ! KSTAGE_NOT_SUPPORTED: range members in the subtree) leaves the stage unchanged.
  subroutine kstage_clone_to(stage, source, targets, ordinal, stat)
    integer(int64), intent(in) :: stage, source, ordinal
    integer(int64), intent(in) :: targets(:)
    integer, intent(out), optional :: stat
    integer(int64), allocatable :: copy(:)
    integer(int64) :: op
    if (present(stat)) stat = KSTAGE_OK
    call copy_ids(targets, copy)
    op = 0
    if (.not. ok(kstage_clone(stage, source, copy, int(size(targets), c_int64_t), ordinal, op), &
                 'kstage_clone_to', stat)) return
    call wait_op(stage, op, 'kstage_clone_to', stat)
  end subroutine

  ! kstage_clone_to the members start, start + 1, ... (count of them; 0: to the end) of the path
  ! range whose first id is `first`, and waits for it (kstage_clone_range); start counts from 0,
  ! as kstage_query_of_range's does. Defaults: start 0, count 0. KSTAGE_INVALID_ARGUMENT when
  ! `first` is no range's first id or start and count reach beyond the range.
  subroutine kstage_clone_to_range(stage, source, first, ordinal, start, count, stat)
    integer(int64), intent(in) :: stage, source, first, ordinal
    integer(int64), intent(in), optional :: start, count
    integer, intent(out), optional :: stat
    integer(int64) :: s, c, op
    if (present(stat)) stat = KSTAGE_OK
    s = 0
    c = 0
    if (present(start)) s = start
    if (present(count)) c = count
    op = 0
    if (.not. ok(kstage_clone_range(stage, source, first, s, c, ordinal, op), &
                 'kstage_clone_to_range', stat)) return
    call wait_op(stage, op, 'kstage_clone_to_range', stat)
  end subroutine

  ! ==== the scene: hierarchy and filters =========================================================

  ! The parent, children or siblings (relation KSTAGE_RELATION_PARENT, _CHILDREN or _SIBLINGS)
  ! of every prim of `query`, in one call, over the latest sealed state (kstage_query_hierarchy;
  ! docs/scene.md). One item per query prim, in query order: status(i) is item i's status --
  ! KSTAGE_OK, or KSTAGE_NOT_FOUND for a prim that does not exist, whose item alone fails and has
  ! no spans. Item i's paths are the spans item_start(i) .. item_start(i + 1) - 1 (item_start
  ! has n + 1 entries, counted from 1): span k is the span_count(k) path ids span_first(k),
  ! span_first(k) + 1, ..., in path-id order -- the members of a path range are one span, never
  ! an id each. kstage_span_paths(span_first(a:b), span_count(a:b)) makes the ids of spans.
  ! Siblings leave out the prim itself; the siblings of a root are the other roots.
  subroutine kstage_hierarchy(stage, query, relation, status, item_start, span_first, &
                              span_count, stat)
    integer(int64), intent(in) :: stage, query
    integer, intent(in) :: relation
    integer, allocatable, intent(out) :: status(:)
    integer(int64), allocatable, intent(out) :: item_start(:), span_first(:), span_count(:)
    integer, intent(out), optional :: stat
    integer(int64) :: h, n_items, n_spans, i
    integer(c_int32_t) :: ignored
    type(c_ptr) :: items_at, spans_at
    type(kstage_hierarchy_item_t), pointer :: items(:)
    type(kstage_path_span_t), pointer :: spans(:)
    if (present(stat)) stat = KSTAGE_OK
    allocate(status(0), item_start(1), span_first(0), span_count(0))
    item_start(1) = 1
    h = 0
    if (.not. ok(kstage_query_hierarchy(stage, query, int(relation, c_int32_t), h), &
                 'kstage_hierarchy', stat)) return
    n_items = 0
    n_spans = 0
    if (.not. ok(kstage_hierarchy_get(stage, h, items_at, n_items, spans_at, n_spans), &
                 'kstage_hierarchy', stat)) then
      ignored = kstage_hierarchy_release(stage, h)
      return
    end if
    deallocate(status, item_start, span_first, span_count)
    allocate(status(n_items), item_start(n_items + 1), span_first(n_spans), span_count(n_spans))
    if (n_items > 0) then
      call c_f_pointer(items_at, items, [n_items])
      do i = 1, n_items
        status(i) = int(items(i)%status)
        item_start(i) = items(i)%span_offset + 1
      end do
    end if
    item_start(n_items + 1) = n_spans + 1
    if (n_spans > 0) then
      call c_f_pointer(spans_at, spans, [n_spans])
      span_first = spans%first
      span_count = spans%count
    end if
    if (.not. ok(kstage_hierarchy_release(stage, h), 'kstage_hierarchy', stat)) return
  end subroutine

  ! The path ids of spans (kstage_hierarchy's span_first(a:b), span_count(a:b)): span k's
  ! count(k) ids first(k), first(k) + 1, ..., one span after another.
  pure function kstage_span_paths(first, count) result(paths)
    integer(int64), intent(in) :: first(:), count(:)
    integer(int64), allocatable :: paths(:)
    integer(int64) :: k, j, at, n
    n = min(size(first), size(count))
    allocate(paths(sum(count(1:n))))
    at = 0
    do k = 1, n
      do j = 0, count(k) - 1
        at = at + 1
        paths(at) = first(k) + j
      end do
    end do
  end function

  ! A query over the existing prims (latest sealed state) that meet every one of `predicates`
  ! (kstage_predicate: op, attribute, values), in path-id order (kstage_query_filter_ex); no
  ! predicate: every existing prim. Supported (docs/scene.md): HAS on any attribute;
  ! KSTAGE_PATH_ATTRIBUTE IN paths or PREFIX one path; KSTAGE_PARENT_ATTRIBUTE IN paths (their
  ! children); KSTAGE_CHILDREN_ATTRIBUTE CONTAINS paths (the parent of every one);
  ! KSTAGE_PRIM_TYPE IN tokens; KSTAGE_APPLIED_SCHEMAS CONTAINS tokens. Anything else fails with
  ! KSTAGE_NOT_SUPPORTED, a malformed predicate with KSTAGE_INVALID_ARGUMENT; the message names
  ! the C predicate, counted from 0 (predicates(i) is filter.predicates[i - 1]).
  subroutine kstage_query_where(stage, predicates, query, stat)
    integer(int64), intent(in) :: stage
    type(kstage_predicate), intent(in) :: predicates(:)
    integer(int64), intent(out) :: query
    integer, intent(out), optional :: stat
    type(kstage_predicate_t), allocatable, target :: c(:)
    integer(int64), allocatable, target :: values(:)   ! every predicate's, one after another
    type(kstage_filter_ex_t) :: filter
    integer(int64) :: total, at, m
    integer :: k
    if (present(stat)) stat = KSTAGE_OK
    query = 0
    total = 0
    do k = 1, size(predicates)
      if (allocated(predicates(k)%values)) total = total + size(predicates(k)%values)
    end do
    allocate(c(max(1, size(predicates))), values(max(1_int64, total)))
    at = 1
    do k = 1, size(predicates)
      c(k)%op = int(predicates(k)%op, c_int32_t)
      c(k)%attribute = predicates(k)%attribute
      if (.not. allocated(predicates(k)%values)) cycle
      m = size(predicates(k)%values)
      if (m == 0) cycle
      values(at:at + m - 1) = predicates(k)%values
      c(k)%values = c_loc(values(at))
      c(k)%value_count = m
      at = at + m
    end do
    filter = kstage_filter_ex_init()
    if (size(predicates) > 0) then
      filter%predicates = c_loc(c)
      filter%predicate_count = size(predicates)
    end if
    if (.not. ok(kstage_query_filter_ex(stage, filter, query), 'kstage_query_where', stat)) return
  end subroutine

  ! The write floor of `attribute` (absent: the global floor, the minimum).
  subroutine kstage_floor(stage, ordinal, attribute, stat)
    integer(int64), intent(in) :: stage
    integer(int64), intent(out) :: ordinal
    integer(int64), intent(in), optional :: attribute
    integer, intent(out), optional :: stat
    integer(int64) :: token
    if (present(stat)) stat = KSTAGE_OK
    token = 0
    if (present(attribute)) token = attribute
    ordinal = 0
    if (.not. ok(kstage_get_write_floor(stage, token, ordinal), 'kstage_floor', stat)) return
  end subroutine

  ! ==== reads ====================================================================================

  ! Opens a read of `attributes` of the query's prims (kstage_read_attributes).
  !   range            [first, last] ordinals: only prims changed in that change range, plus
  !                    tombstone groups (group%is_delete) for prims that lost the attribute
  !   compact          .true.: each group's rows gathered in prim order (group%rows(i) = i)
  !   host             .true.: the data on the host, wherever the column lives (implies compact
  !                    for a device column); Fortran pointers need host memory
  !   max_group_prims  at most this many prims per group (0: one group per attribute)
  subroutine kstage_read_open(stage, query, attributes, read, range, compact, host, &
                              max_group_prims, stat)
    integer(int64), intent(in) :: stage, query
    integer(int64), intent(in) :: attributes(:)
    integer(int64), intent(out) :: read
    integer(int64), intent(in), optional :: range(2)
    logical, intent(in), optional :: compact, host
    integer(int64), intent(in), optional :: max_group_prims
    integer, intent(out), optional :: stat
    type(kstage_read_desc_t) :: desc
    integer(int64), allocatable :: tokens(:)
    if (present(stat)) stat = KSTAGE_OK
    read = 0
    if (size(attributes) == 0) then
      call fail(KSTAGE_INVALID_ARGUMENT, 'kstage_read_open: no attributes', stat)
      return
    end if
    call copy_ids(attributes, tokens)
    desc = kstage_read_desc_init()
    if (present(range)) then
      desc%change_range = .true.
      desc%range_begin = range(1)
      desc%range_end = range(2)
    end if
    desc%compact = flag(compact) == 1
    if (flag(host) == 1) desc%target_device%device_type = kDLCPU
    if (present(max_group_prims)) desc%max_group_prims = max_group_prims
    if (.not. ok(kstage_read_attributes(stage, query, tokens, int(size(tokens), c_int64_t), &
                                        desc, read), 'kstage_read_open', stat)) return
  end subroutine

  ! The next group of a read: .true. with `group` set, or .false. at the end (or on failure,
  ! with stat set). Release each group with kstage_group_release before the next call: `group`
  ! is overwritten, and a group never released stays pinned until kstage_close.
  logical function kstage_read_next(stage, read, group, stat) result(more)
    integer(int64), intent(in) :: stage, read
    type(kstage_group), intent(inout) :: group
    integer, intent(out), optional :: stat
    type(kstage_read_group_t) :: c
    integer(c_int32_t) :: st
    if (present(stat)) stat = KSTAGE_OK
    more = .false.
    st = kstage_fetch_read_next(stage, read, KSTAGE_TIMEOUT_INFINITE, c)
    if (st == KSTAGE_END_OF_ITERATION) return
    if (.not. ok(st, 'kstage_read_next', stat)) return
    call group_from_c(group, c%handle, 0_int64, c%attribute, c%ordinal, c%prims, c%prim_count, &
                      c%data, c%dtype, c%semantic, logical(c%is_delete), logical(c%is_array))
    more = .true.
  end function

  ! Releases a read group: its pointers become invalid.
  subroutine kstage_group_release(stage, group, stat)
    integer(int64), intent(in) :: stage
    type(kstage_group), intent(inout) :: group
    integer, intent(out), optional :: stat
    if (present(stat)) stat = KSTAGE_OK
    if (group%map /= 0) then
      call fail(KSTAGE_INVALID_ARGUMENT, 'kstage_group_release: a map group; it ends with '// &
                'kstage_map_commit or kstage_map_discard', stat)
      return
    end if
    if (.not. ok(kstage_release_group(stage, group%handle), 'kstage_group_release', stat)) return
    group = kstage_group()
  end subroutine

  ! Releases a read (groups already fetched stay valid until released).
  subroutine kstage_read_close(stage, read, stat)
    integer(int64), intent(in) :: stage, read
    integer, intent(out), optional :: stat
    if (present(stat)) stat = KSTAGE_OK
    if (.not. ok(kstage_release_read(stage, read), 'kstage_read_close', stat)) return
  end subroutine

  subroutine group_from_c(group, handle, map, attribute, ordinal, prims, prim_count, data, &
                          dtype, semantic, is_delete, is_array)
    type(kstage_group), intent(inout) :: group
    integer(c_int64_t), intent(in) :: handle, map, attribute, ordinal, prim_count
    type(c_ptr), intent(in) :: prims
    type(kstage_data_t), intent(in) :: data
    type(DLDataType), intent(in) :: dtype
    integer(c_int32_t), intent(in) :: semantic
    logical, intent(in) :: is_delete, is_array
    group = kstage_group()
    group%handle = handle
    group%map = map
    group%attribute = attribute
    group%ordinal = ordinal
    group%prim_count = prim_count
    if (prim_count > 0) then
      call c_f_pointer(prims, group%prims, [prim_count])
    else
      call c_f_pointer(c_loc(nowhere), group%prims, [0])   ! size(group%prims) is 0
    end if
    group%data = data
    group%dtype = dtype
    group%semantic = semantic
    group%is_delete = is_delete
    group%is_array = is_array
    if (.not. is_delete) call set_rows(group)
  end subroutine

  ! group%rows from the C index map (0-based uint32) or, without one, 1 .. prim_count.
  subroutine set_rows(group)
    type(kstage_group), intent(inout) :: group
    integer(c_int32_t), pointer :: map(:)
    integer(int64) :: i
    allocate(group%rows(group%prim_count))
    if (c_associated(group%data%index_map) .and. group%prim_count > 0) then
      call c_f_pointer(group%data%index_map, map, [group%prim_count])
      do i = 1, group%prim_count
        ! uint32 entries: the bits of an int32, read as unsigned.
        group%rows(i) = iand(int(map(i), int64), int(z'FFFFFFFF', int64)) + 1
      end do
    else
      group%rows = [(i, i = 1, group%prim_count)]
    end if
  end subroutine

  ! ==== maps =====================================================================================

  ! Maps the query's prims for `attribute` at `ordinal`: writable buffers (kstage_map_attribute)
  ! that kstage_map_next hands out as groups, to fill through kstage_values, then commit.
  !   dtype           the column's dtype, kstage_dtype(kDLFloat, 32, 3) for float32 x 3;
  !                   kstage_dtype(0, 0, 0): the attribute's existing column's
  !   element_counts  an array (ragged) attribute: element_counts(i) elements for prim i
  !   semantic, mode, attribute_mode  as kstage_write's
  !   max_group_prims at most this many prims per group (0: one group)
  subroutine kstage_map_open(stage, query, attribute, ordinal, dtype, map, element_counts, &
                             semantic, mode, max_group_prims, stat, attribute_mode)
    integer(int64), intent(in) :: stage, query, attribute, ordinal
    type(DLDataType), intent(in) :: dtype
    integer(int64), intent(out) :: map
    integer(int64), intent(in), optional :: element_counts(:)
    integer, intent(in), optional :: semantic, mode
    integer(int64), intent(in), optional :: max_group_prims
    integer, intent(out), optional :: stat
    integer, intent(in), optional :: attribute_mode
    type(kstage_map_desc_t) :: desc
    integer(int64), allocatable :: counts(:)
    if (present(stat)) stat = KSTAGE_OK
    map = 0
    desc = kstage_map_desc_init()
    desc%attribute = attribute
    desc%dtype = dtype
    if (present(semantic)) desc%semantic = int(semantic, c_int32_t)
    if (present(mode)) desc%prim_mode = int(mode, c_int32_t)
    if (present(attribute_mode)) desc%attribute_mode = int(attribute_mode, c_int8_t)
    if (present(max_group_prims)) desc%max_group_prims = max_group_prims
    if (present(element_counts)) then
      desc%is_array = .true.
      call copy_ids(element_counts, counts)
      if (.not. ok(kstage_map_attribute(stage, query, desc, ordinal, counts, &
                                        int(size(element_counts), c_int64_t), map), &
                   'kstage_map_open', stat)) return
    else
      if (.not. ok(kstage_map_attribute(stage, query, desc, ordinal, n=0_c_int64_t, map=map), &
                   'kstage_map_open', stat)) return
    end if
  end subroutine

  ! The next group of a map: .true. with `group` set, or .false. at the end (or on failure).
  logical function kstage_map_next(stage, map, group, stat) result(more)
    integer(int64), intent(in) :: stage, map
    type(kstage_group), intent(inout) :: group
    integer, intent(out), optional :: stat
    type(kstage_map_group_info_t) :: c
    integer(c_int32_t) :: st
    if (present(stat)) stat = KSTAGE_OK
    more = .false.
    st = kstage_fetch_map_next(stage, map, KSTAGE_TIMEOUT_INFINITE, c)
    if (st == KSTAGE_END_OF_ITERATION) return
    if (.not. ok(st, 'kstage_map_next', stat)) return
    call group_from_c(group, c%handle, map, c%attribute, c%ordinal, c%prims, c%prim_count, &
                      c%data, c%dtype, c%semantic, .false., logical(c%is_array))
    more = .true.
  end function

  ! Commits every fetched group of the map at its ordinal and ends the map; waits for it.
  subroutine kstage_map_commit(stage, map, stat)
    integer(int64), intent(in) :: stage, map
    integer, intent(out), optional :: stat
    integer(int64) :: op
    type(kstage_device_sync_t) :: none
    if (present(stat)) stat = KSTAGE_OK
    op = 0
    if (.not. ok(kstage_unmap_attribute(stage, map, none, op), 'kstage_map_commit', stat)) return
    call wait_op(stage, op, 'kstage_map_commit', stat)
  end subroutine

  ! Abandons a map: nothing of it is written.
  subroutine kstage_map_discard(stage, map, stat)
    integer(int64), intent(in) :: stage, map
    integer, intent(out), optional :: stat
    if (present(stat)) stat = KSTAGE_OK
    if (.not. ok(kstage_release_map(stage, map), 'kstage_map_discard', stat)) return
  end subroutine

  ! A DLPack dtype: kstage_dtype(kDLFloat, 32, 3) is float32 x 3.
  function kstage_dtype(code, bits, lanes) result(dtype)
    integer, intent(in) :: code, bits
    integer, intent(in), optional :: lanes
    type(DLDataType) :: dtype
    ! uint8 and uint16 fields: their bits, as the signed integers of the same size hold them
    dtype%code = int(merge(code - 256, code, code > 127), c_int8_t)
    dtype%bits = int(merge(bits - 256, bits, bits > 127), c_int8_t)
    dtype%lanes = 1_c_int16_t
    if (present(lanes)) dtype%lanes = int(merge(lanes - 65536, lanes, lanes > 32767), c_int16_t)
  end function

  ! ==== values of groups =========================================================================

  ! "float32 x 3" for messages.
  function dtype_name(dtype) result(name)
    type(DLDataType), intent(in) :: dtype
    character(len=:), allocatable :: name
    character(len=64) :: text
    character(len=8) :: kind
    select case (int(dtype%code))
    case (kDLInt)
      kind = 'int'
    case (kDLUInt)
      kind = 'uint'
    case (kDLFloat)
      kind = 'float'
    case (kDLBool)
      kind = 'bool'
    case (kDLComplex)
      kind = 'complex'
    case default
      kind = 'code'
    end select
    write(text, '(a, i0, a, i0)') trim(kind), iand(int(dtype%bits), 255), ' x ', &
      iand(int(dtype%lanes), 65535)
    name = trim(text)
  end function

  ! The memory of a group's values for a pointer of dtype (code, bits) and `rank`: the whole
  ! tensor (prim absent; fixed-size attributes), or prim `prim`'s row. Sets p and shape(1:rank).
  logical function locate(group, prim, code, bits, rank, p, shape, stat) result(found)
    type(kstage_group), intent(in) :: group
    integer(int64), intent(in), optional :: prim
    integer, intent(in) :: code, bits, rank
    type(c_ptr), intent(out) :: p
    integer(int64), intent(out) :: shape(2)
    integer, intent(out), optional :: stat
    character(len=*), parameter :: context = 'kstage_values'
    type(DLTensor), pointer :: tensors(:)
    integer(c_int64_t), pointer :: tshape(:), tstrides(:)
    integer(int64) :: t, lanes, rows, expect, i, elem_bytes
    integer(c_intptr_t) :: address
    character(len=200) :: text
    integer :: d
    found = .false.
    p = c_null_ptr
    shape = 0
    if (present(stat)) stat = KSTAGE_OK
    if (group%handle == 0) then
      call fail(KSTAGE_INVALID_HANDLE, context // ': the group was released or never fetched', &
                stat)
      return
    end if
    if (group%is_delete) then
      call fail(KSTAGE_INVALID_ARGUMENT, context // ': a tombstone group has no values', stat)
      return
    end if
    if (int(group%dtype%code) /= code .or. iand(int(group%dtype%bits), 255) /= bits) then
      call fail(KSTAGE_INVALID_ARGUMENT, context // ': the group''s dtype is ' // &
                dtype_name(group%dtype) // ', the pointer''s ' // &
                dtype_name(kstage_dtype(code, bits)), stat)
      return
    end if
    lanes = iand(int(group%dtype%lanes, int64), 65535_int64)
    if (group%is_array .and. .not. present(prim)) then
      call fail(KSTAGE_INVALID_ARGUMENT, context // ': an array attribute has one row per '// &
                'prim: name it (prim = i)', stat)
      return
    end if
    if (present(prim)) then
      if (prim < 1 .or. prim > group%prim_count) then
        write(text, '(a, i0, a, i0, a)') ': prim = ', prim, ', but the group has ', &
          group%prim_count, ' prims (numbered from 1)'
        call fail(KSTAGE_INVALID_ARGUMENT, context // trim(text), stat)
        return
      end if
    end if
    t = 1
    if (group%is_array) t = group%rows(prim)
    call c_f_pointer(group%data%tensors, tensors, [group%data%tensor_count])
    associate (tensor => tensors(t))
      if (tensor%device%device_type /= kDLCPU .and. tensor%device%device_type /= kDLCUDAHost &
          .and. tensor%device%device_type /= kDLROCMHost) then
        write(text, '(a, i0, a)') ': the group''s data is in device memory (device_type ', &
          tensor%device%device_type, '); read it with host = .true. for a Fortran pointer'
        call fail(KSTAGE_NOT_SUPPORTED, context // trim(text), stat)
        return
      end if
      call c_f_pointer(tensor%shape, tshape, [tensor%ndim])
      rows = 1
      do d = 1, tensor%ndim
        rows = rows * tshape(d)
      end do
      if (c_associated(tensor%strides)) then   ! canonical tensors are compact: check it
        call c_f_pointer(tensor%strides, tstrides, [tensor%ndim])
        expect = 1
        do d = tensor%ndim, 1, -1
          if (tshape(d) > 1 .and. tstrides(d) /= expect) then
            call fail(KSTAGE_INTERNAL, context // ': the group''s tensor is not compact', stat)
            return
          end if
          expect = expect * tshape(d)
        end do
      end if
      elem_bytes = bits / 8
      address = transfer(tensor%data, address) + int(tensor%byte_offset, c_intptr_t)
      if (.not. group%is_array .and. present(prim)) then
        i = group%rows(prim)
        address = address + int((i - 1) * lanes * elem_bytes, c_intptr_t)
        rows = 1
      end if
    end associate
    if (rank == 1) then
      if (lanes /= 1 .and. .not. (present(prim) .and. .not. group%is_array)) then
        call fail(KSTAGE_INVALID_ARGUMENT, context // ': the group''s dtype is ' // &
                  dtype_name(group%dtype) // ': use a rank-2 pointer, (lanes, rows)', stat)
        return
      end if
      shape(1) = rows * lanes
    else
      shape(1) = lanes
      shape(2) = rows
    end if
    p = transfer(address, p)
    if (shape(1) * max(shape(2), 1_int64) == 0 .or. .not. c_associated(p)) p = c_loc(nowhere)
    found = .true.
  end function

  ! kstage_values(group, values, prim, stat): a Fortran pointer over a group's values, no copy.
  !   rank 2, prim absent   values(lanes, rows) of a fixed-size attribute: prim i's values
  !                         are values(:, group%rows(i))
  !   rank 1, prim absent   values(rows) of a fixed-size attribute of 1 lane
  !   prim = i              prim i's row: values(lanes) (rank 1) or values(lanes, 1) of a
  !                         fixed-size attribute; values(elements) (rank 1, 1 lane) or
  !                         values(lanes, elements) of an array attribute
  ! The pointer's type must be the group's dtype (real32: float 32, int64: int 64, ...). kDLUInt
  ! columns (TOKEN_ID, PATH_ID) are not given integer pointers: read their bits with the C view.

  subroutine values_real32_1(group, values, prim, stat)
    type(kstage_group), intent(in) :: group
    real(real32), pointer, intent(out) :: values(:)
    integer(int64), intent(in), optional :: prim
    integer, intent(out), optional :: stat
    type(c_ptr) :: p
    integer(int64) :: shape(2)
    values => null()
    if (.not. locate(group, prim, kDLFloat, 32, 1, p, shape, stat)) return
    call c_f_pointer(p, values, shape(1:1))
  end subroutine

  subroutine values_real32_2(group, values, prim, stat)
    type(kstage_group), intent(in) :: group
    real(real32), pointer, intent(out) :: values(:, :)
    integer(int64), intent(in), optional :: prim
    integer, intent(out), optional :: stat
    type(c_ptr) :: p
    integer(int64) :: shape(2)
    values => null()
    if (.not. locate(group, prim, kDLFloat, 32, 2, p, shape, stat)) return
    call c_f_pointer(p, values, shape)
  end subroutine

  subroutine values_real64_1(group, values, prim, stat)
    type(kstage_group), intent(in) :: group
    real(real64), pointer, intent(out) :: values(:)
    integer(int64), intent(in), optional :: prim
    integer, intent(out), optional :: stat
    type(c_ptr) :: p
    integer(int64) :: shape(2)
    values => null()
    if (.not. locate(group, prim, kDLFloat, 64, 1, p, shape, stat)) return
    call c_f_pointer(p, values, shape(1:1))
  end subroutine

  subroutine values_real64_2(group, values, prim, stat)
    type(kstage_group), intent(in) :: group
    real(real64), pointer, intent(out) :: values(:, :)
    integer(int64), intent(in), optional :: prim
    integer, intent(out), optional :: stat
    type(c_ptr) :: p
    integer(int64) :: shape(2)
    values => null()
    if (.not. locate(group, prim, kDLFloat, 64, 2, p, shape, stat)) return
    call c_f_pointer(p, values, shape)
  end subroutine

  subroutine values_int32_1(group, values, prim, stat)
    type(kstage_group), intent(in) :: group
    integer(int32), pointer, intent(out) :: values(:)
    integer(int64), intent(in), optional :: prim
    integer, intent(out), optional :: stat
    type(c_ptr) :: p
    integer(int64) :: shape(2)
    values => null()
    if (.not. locate(group, prim, kDLInt, 32, 1, p, shape, stat)) return
    call c_f_pointer(p, values, shape(1:1))
  end subroutine

  subroutine values_int32_2(group, values, prim, stat)
    type(kstage_group), intent(in) :: group
    integer(int32), pointer, intent(out) :: values(:, :)
    integer(int64), intent(in), optional :: prim
    integer, intent(out), optional :: stat
    type(c_ptr) :: p
    integer(int64) :: shape(2)
    values => null()
    if (.not. locate(group, prim, kDLInt, 32, 2, p, shape, stat)) return
    call c_f_pointer(p, values, shape)
  end subroutine

  subroutine values_int64_1(group, values, prim, stat)
    type(kstage_group), intent(in) :: group
    integer(int64), pointer, intent(out) :: values(:)
    integer(int64), intent(in), optional :: prim
    integer, intent(out), optional :: stat
    type(c_ptr) :: p
    integer(int64) :: shape(2)
    values => null()
    if (.not. locate(group, prim, kDLInt, 64, 1, p, shape, stat)) return
    call c_f_pointer(p, values, shape(1:1))
  end subroutine

  subroutine values_int64_2(group, values, prim, stat)
    type(kstage_group), intent(in) :: group
    integer(int64), pointer, intent(out) :: values(:, :)
    integer(int64), intent(in), optional :: prim
    integer, intent(out), optional :: stat
    type(c_ptr) :: p
    integer(int64) :: shape(2)
    values => null()
    if (.not. locate(group, prim, kDLInt, 64, 2, p, shape, stat)) return
    call c_f_pointer(p, values, shape)
  end subroutine
end module kstage
