! SPDX-License-Identifier: Apache-2.0
!
! module kstage_c: the kstage C API (include/kstage/kstage.h) as Fortran 2018 sees it.
!
! - Derived types with BIND(C) for every struct of kstage.h and the DLPack structs it uses, field
!   for field, with the C names (tests/fortran checks each size and field offset against C).
!   Unsigned C fields are the signed integers of the same size (their bits are the same);
!   `bool` is logical(c_bool). Every component defaults to zero, as C's `{0}` does.
! - The kstage_*_init() functions of kstage.h (static inline in C): a zeroed descriptor with
!   struct_size set.
! - An interface with BIND(C, name=...) for every function kstage.h exports, under its C name,
!   with the C documentation's meaning. Handles and ids are integer(c_int64_t). A pointer that C
!   lets be NULL is an OPTIONAL argument (absent = NULL); C strings are character(kind=c_char)
!   arrays with an explicit length (or KSTAGE_NUL_TERMINATED and a c_null_char at the end).
!   tests/fortran checks that no exported function lacks its interface.
!
! The constants (statuses, semantics, prim modes, DLPack device types and dtype codes, flags) are
! in module kstage_constants, generated from the headers. Module kstage (kstage.f90) re-exports
! all of this and adds the Fortran layer, which is what most programs use.
module kstage_c
  use, intrinsic :: iso_c_binding
  use kstage_constants
  implicit none

  ! ---- DLPack (dlpack.h) ----------------------------------------------------------------------
  type, bind(C) :: DLPackVersion
    integer(c_int32_t) :: major = 0   ! uint32_t
    integer(c_int32_t) :: minor = 0   ! uint32_t
  end type

  type, bind(C) :: DLDevice
    integer(c_int32_t) :: device_type = 0   ! DLDeviceType (kDLCPU, kDLCUDA, ...)
    integer(c_int32_t) :: device_id = 0
  end type

  type, bind(C) :: DLDataType
    integer(c_int8_t) :: code = 0    ! uint8_t: kDLInt, kDLUInt, kDLFloat, ...
    integer(c_int8_t) :: bits = 0    ! uint8_t
    integer(c_int16_t) :: lanes = 0  ! uint16_t
  end type

  type, bind(C) :: DLTensor
    type(c_ptr) :: data = c_null_ptr
    type(DLDevice) :: device
    integer(c_int32_t) :: ndim = 0
    type(DLDataType) :: dtype
    type(c_ptr) :: shape = c_null_ptr     ! int64_t[ndim]
    type(c_ptr) :: strides = c_null_ptr   ! int64_t[ndim], in elements; NULL: compact row-major
    integer(c_int64_t) :: byte_offset = 0 ! uint64_t
  end type

  type, bind(C) :: DLManagedTensor
    type(DLTensor) :: dl_tensor
    type(c_ptr) :: manager_ctx = c_null_ptr
    type(c_funptr) :: deleter = c_null_funptr   ! void (*)(DLManagedTensor*)
  end type

  type, bind(C) :: DLManagedTensorVersioned
    type(DLPackVersion) :: version
    type(c_ptr) :: manager_ctx = c_null_ptr
    type(c_funptr) :: deleter = c_null_funptr   ! void (*)(DLManagedTensorVersioned*)
    integer(c_int64_t) :: flags = 0             ! uint64_t: DLPACK_FLAG_BITMASK_*
    type(DLTensor) :: dl_tensor
  end type

  ! ---- kstage.h structs -------------------------------------------------------------------------
  type, bind(C) :: kstage_device_sync_t
    integer(c_intptr_t) :: stream = 0   ! uintptr_t
    integer(c_intptr_t) :: event = 0    ! uintptr_t
  end type

  type, bind(C) :: kstage_config_t
    integer(c_int32_t) :: struct_size = 0
    integer(c_int32_t) :: host_execution = 0
    type(DLDevice) :: residency
  end type

  type, bind(C) :: kstage_write_data_t
    integer(c_int32_t) :: struct_size = 0
    integer(c_int32_t) :: semantic = 0
    type(c_ptr) :: tensors = c_null_ptr                 ! const DLTensor*
    type(c_ptr) :: managed_tensors = c_null_ptr         ! DLManagedTensorVersioned* const*
    integer(c_int64_t) :: tensor_count = 0
    integer(c_int64_t) :: count = 0
    type(c_ptr) :: index_map = c_null_ptr               ! const uint32_t*
    type(c_ptr) :: mask = c_null_ptr                    ! const uint64_t*
    type(kstage_device_sync_t) :: device_sync
    logical(c_bool) :: is_array = .false.
    integer(c_int8_t) :: attribute_mode = 0             ! KSTAGE_ATTRIBUTE_MODE_*
    integer(c_int8_t) :: reserved(6) = 0
    type(c_ptr) :: legacy_managed_tensors = c_null_ptr  ! DLManagedTensor* const*
    type(DLDevice) :: residency
    type(DLDevice) :: selection_device
    type(c_ptr) :: index_map64 = c_null_ptr             ! const int64_t*
  end type

  type, bind(C) :: kstage_data_t
    type(c_ptr) :: tensors = c_null_ptr     ! const DLTensor*
    integer(c_int64_t) :: tensor_count = 0
    integer(c_int64_t) :: count = 0
    type(c_ptr) :: index_map = c_null_ptr   ! const uint32_t*
    type(c_ptr) :: mask = c_null_ptr        ! const uint64_t*
    type(kstage_device_sync_t) :: device_sync
  end type

  type, bind(C) :: kstage_filter_t
    type(c_ptr) :: has_attributes = c_null_ptr   ! const kstage_token_t*
    integer(c_int64_t) :: has_attribute_count = 0
    integer(c_int64_t) :: path_in = 0
    integer(c_int64_t) :: path_prefix = 0
  end type

  type, bind(C) :: kstage_read_desc_t
    integer(c_int32_t) :: struct_size = 0
    logical(c_bool) :: change_range = .false.
    logical(c_bool) :: compact = .false.
    logical(c_bool) :: device_index_map = .false.
    logical(c_bool) :: prims_as_progression = .false.
    integer(c_int64_t) :: range_begin = 0
    integer(c_int64_t) :: range_end = 0
    type(DLDevice) :: target_device
    type(kstage_device_sync_t) :: device_sync
    integer(c_int64_t) :: max_group_prims = 0
  end type

  type, bind(C) :: kstage_read_group_t
    integer(c_int64_t) :: handle = 0
    integer(c_int64_t) :: attribute = 0
    type(c_ptr) :: prims = c_null_ptr   ! const kstage_path_t*
    integer(c_int64_t) :: prim_count = 0
    integer(c_int64_t) :: ordinal = 0
    type(kstage_data_t) :: data
    type(DLDataType) :: dtype
    logical(c_bool) :: is_delete = .false.
    logical(c_bool) :: is_array = .false.
    integer(c_int32_t) :: semantic = 0
  end type

  type, bind(C) :: kstage_map_desc_t
    integer(c_int32_t) :: struct_size = 0
    integer(c_int32_t) :: semantic = 0
    integer(c_int64_t) :: attribute = 0
    type(DLDataType) :: dtype
    integer(c_int32_t) :: prim_mode = 0
    type(DLDevice) :: residency
    integer(c_int64_t) :: max_group_prims = 0
    logical(c_bool) :: is_array = .false.
    integer(c_int8_t) :: attribute_mode = 0             ! KSTAGE_ATTRIBUTE_MODE_*
    integer(c_int8_t) :: reserved(6) = 0
  end type

  type, bind(C) :: kstage_map_group_info_t
    integer(c_int64_t) :: handle = 0
    integer(c_int64_t) :: attribute = 0
    type(c_ptr) :: prims = c_null_ptr   ! const kstage_path_t*
    integer(c_int64_t) :: prim_count = 0
    integer(c_int64_t) :: ordinal = 0
    type(kstage_data_t) :: data
    type(DLDataType) :: dtype
    logical(c_bool) :: is_array = .false.
    integer(c_int32_t) :: semantic = 0
  end type

  type, bind(C) :: kstage_attribute_info_t
    integer(c_int32_t) :: struct_size = 0
    integer(c_int32_t) :: semantic = 0
    integer(c_int64_t) :: attribute = 0
    type(DLDataType) :: dtype
    logical(c_bool) :: is_array = .false.
    integer(c_int8_t) :: reserved(3) = 0
    type(DLDevice) :: residency
    integer(c_int64_t) :: write_floor = 0
    integer(c_int64_t) :: prim_count = 0
    integer(c_int64_t) :: schema_count = 0
  end type

  ! The scene (kstage.h, "Scene"; docs/scene.md)
  type, bind(C) :: kstage_path_span_t
    integer(c_int64_t) :: first = 0
    integer(c_int64_t) :: count = 0
  end type

  type, bind(C) :: kstage_hierarchy_item_t
    integer(c_int32_t) :: status = 0
    integer(c_int32_t) :: reserved = 0
    integer(c_int64_t) :: span_offset = 0
    integer(c_int64_t) :: span_count = 0
    integer(c_int64_t) :: path_count = 0
  end type

  type, bind(C) :: kstage_predicate_t
    integer(c_int32_t) :: op = 0
    integer(c_int32_t) :: reserved = 0
    integer(c_int64_t) :: attribute = 0
    type(c_ptr) :: values = c_null_ptr   ! const uint64_t*
    integer(c_int64_t) :: value_count = 0
  end type

  type, bind(C) :: kstage_filter_ex_t
    integer(c_int32_t) :: struct_size = 0
    integer(c_int32_t) :: reserved = 0
    type(c_ptr) :: predicates = c_null_ptr   ! const kstage_predicate_t*
    integer(c_int64_t) :: predicate_count = 0
  end type

  type, bind(C) :: kstage_transform_desc_t
    integer(c_int32_t) :: struct_size = 0
    integer(c_int32_t) :: mode = 0
    integer(c_int64_t) :: local = 0
    integer(c_int64_t) :: reset = 0
    integer(c_int64_t) :: world = 0
  end type

  ! ---- the functions of kstage.h ----------------------------------------------------------------
  interface
    ! Status codes
    function kstage_status_string(status) bind(C, name="kstage_status_string") result(str)
      import :: c_int32_t, c_ptr
      integer(c_int32_t), value :: status
      type(c_ptr) :: str
    end function
    function kstage_last_error() bind(C, name="kstage_last_error") result(str)
      import :: c_ptr
      type(c_ptr) :: str
    end function
    function kstage_version() bind(C, name="kstage_version") result(version)
      import :: c_int32_t
      integer(c_int32_t) :: version   ! uint32_t
    end function

    ! Lifecycle
    function kstage_create(config, stage) bind(C, name="kstage_create") result(status)
      import :: c_int32_t, c_int64_t, kstage_config_t
      type(kstage_config_t), intent(in), optional :: config
      integer(c_int64_t), intent(out) :: stage
      integer(c_int32_t) :: status
    end function
    function kstage_destroy(stage) bind(C, name="kstage_destroy") result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage
      integer(c_int32_t) :: status
    end function
    function kstage_build_info(text) bind(C, name="kstage_build_info") result(status)
      import :: c_int32_t, c_ptr
      type(c_ptr), intent(out) :: text
      integer(c_int32_t) :: status
    end function
    function kstage_transfer_counts(host_to_device, device_to_host, index_uploads) &
        bind(C, name="kstage_transfer_counts") result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), intent(out), optional :: host_to_device, device_to_host, index_uploads
      integer(c_int32_t) :: status
    end function
    function kstage_device_check(stage, device) bind(C, name="kstage_device_check") &
        result(status)
      import :: c_int32_t, c_int64_t, DLDevice
      integer(c_int64_t), value :: stage
      type(DLDevice), value :: device
      integer(c_int32_t) :: status
    end function

    ! Logging (kstage.h, "Logging"). The callback is a bind(C) subroutine taken with c_funloc:
    !   subroutine on_log(severity, channel, message, user_data) bind(C)
    !     integer(c_int32_t), value :: severity
    !     type(c_ptr), value :: channel, message, user_data   ! NUL-terminated: kstage_string()
    ! c_null_funptr removes the callback. Leave channel_filter absent for none; pass a string
    ! with c_null_char appended otherwise.
    function kstage_set_log_callback(callback, user_data, threshold, channel_filter) &
        bind(C, name="kstage_set_log_callback") result(status)
      import :: c_int32_t, c_funptr, c_ptr, c_char
      type(c_funptr), value :: callback
      type(c_ptr), value :: user_data
      integer(c_int32_t), value :: threshold
      character(kind=c_char), intent(in), optional :: channel_filter(*)
      integer(c_int32_t) :: status
    end function
    function kstage_flush_log() bind(C, name="kstage_flush_log") result(status)
      import :: c_int32_t
      integer(c_int32_t) :: status
    end function
    function kstage_log_message(severity, channel, message) bind(C, name="kstage_log_message") &
        result(status)
      import :: c_int32_t, c_char
      integer(c_int32_t), value :: severity
      character(kind=c_char), intent(in) :: channel(*), message(*)   ! NUL-terminated
      integer(c_int32_t) :: status
    end function

    ! Dictionary
    function kstage_intern_token(stage, str, length, token) bind(C, name="kstage_intern_token") &
        result(status)
      import :: c_int32_t, c_int64_t, c_char, c_size_t
      integer(c_int64_t), value :: stage
      character(kind=c_char), intent(in) :: str(*)
      integer(c_size_t), value :: length
      integer(c_int64_t), intent(out) :: token
      integer(c_int32_t) :: status
    end function
    function kstage_intern_path(stage, str, length, path) bind(C, name="kstage_intern_path") &
        result(status)
      import :: c_int32_t, c_int64_t, c_char, c_size_t
      integer(c_int64_t), value :: stage
      character(kind=c_char), intent(in) :: str(*)
      integer(c_size_t), value :: length
      integer(c_int64_t), intent(out) :: path
      integer(c_int32_t) :: status
    end function
    function kstage_intern_paths(stage, strings, lengths, count, paths) &
        bind(C, name="kstage_intern_paths") result(status)
      import :: c_int32_t, c_int64_t, c_ptr, c_size_t
      integer(c_int64_t), value :: stage
      type(c_ptr), intent(in) :: strings(*)                     ! const char* const*
      integer(c_size_t), intent(in), optional :: lengths(*)
      integer(c_int64_t), value :: count
      integer(c_int64_t), intent(out) :: paths(*)
      integer(c_int32_t) :: status
    end function
    function kstage_intern_path_range(stage, parent, parent_length, prefix, prefix_length, &
                                      begin, count, first) &
        bind(C, name="kstage_intern_path_range") result(status)
      import :: c_int32_t, c_int64_t, c_char, c_size_t
      integer(c_int64_t), value :: stage
      character(kind=c_char), intent(in) :: parent(*)
      integer(c_size_t), value :: parent_length
      character(kind=c_char), intent(in) :: prefix(*)
      integer(c_size_t), value :: prefix_length
      integer(c_int64_t), value :: begin, count
      integer(c_int64_t), intent(out) :: first
      integer(c_int32_t) :: status
    end function
    function kstage_path_range_info(stage, path, first, count, index) &
        bind(C, name="kstage_path_range_info") result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage, path
      integer(c_int64_t), intent(out), optional :: first, count, index
      integer(c_int32_t) :: status
    end function
    function kstage_path_range_definition(stage, first, parent, parent_length, prefix, &
                                          prefix_length, begin) &
        bind(C, name="kstage_path_range_definition") result(status)
      import :: c_int32_t, c_int64_t, c_ptr, c_size_t
      integer(c_int64_t), value :: stage, first
      type(c_ptr), intent(out), optional :: parent, prefix   ! const char*
      integer(c_size_t), intent(out), optional :: parent_length, prefix_length
      integer(c_int64_t), intent(out), optional :: begin
      integer(c_int32_t) :: status
    end function
    function kstage_path_range_member(stage, first, index, path) &
        bind(C, name="kstage_path_range_member") result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage, first, index
      integer(c_int64_t), intent(out) :: path
      integer(c_int32_t) :: status
    end function
    function kstage_token_string(stage, token, str, length) bind(C, name="kstage_token_string") &
        result(status)
      import :: c_int32_t, c_int64_t, c_ptr, c_size_t
      integer(c_int64_t), value :: stage, token
      type(c_ptr), intent(out) :: str
      integer(c_size_t), intent(out), optional :: length
      integer(c_int32_t) :: status
    end function
    function kstage_path_string(stage, path, str, length) bind(C, name="kstage_path_string") &
        result(status)
      import :: c_int32_t, c_int64_t, c_ptr, c_size_t
      integer(c_int64_t), value :: stage, path
      type(c_ptr), intent(out) :: str
      integer(c_size_t), intent(out), optional :: length
      integer(c_int32_t) :: status
    end function
    function kstage_path_list_create(stage, paths, count, list) &
        bind(C, name="kstage_path_list_create") result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage
      integer(c_int64_t), intent(in) :: paths(*)
      integer(c_int64_t), value :: count
      integer(c_int64_t), intent(out) :: list
      integer(c_int32_t) :: status
    end function
    function kstage_path_list_get(stage, list, paths, count) bind(C, name="kstage_path_list_get") &
        result(status)
      import :: c_int32_t, c_int64_t, c_ptr
      integer(c_int64_t), value :: stage, list
      type(c_ptr), intent(out) :: paths   ! const kstage_path_t*
      integer(c_int64_t), intent(out) :: count
      integer(c_int32_t) :: status
    end function
    function kstage_path_list_retain(stage, list) bind(C, name="kstage_path_list_retain") &
        result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage, list
      integer(c_int32_t) :: status
    end function
    function kstage_path_list_release(stage, list) bind(C, name="kstage_path_list_release") &
        result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage, list
      integer(c_int32_t) :: status
    end function

    ! Queries
    function kstage_query_paths(stage, paths, count, query) bind(C, name="kstage_query_paths") &
        result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage
      integer(c_int64_t), intent(in) :: paths(*)
      integer(c_int64_t), value :: count
      integer(c_int64_t), intent(out) :: query
      integer(c_int32_t) :: status
    end function
    function kstage_query_range(stage, first, start, count, stride, query) &
        bind(C, name="kstage_query_range") result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage, first, start, count, stride
      integer(c_int64_t), intent(out) :: query
      integer(c_int32_t) :: status
    end function
    function kstage_query_filter(stage, filter, query) bind(C, name="kstage_query_filter") &
        result(status)
      import :: c_int32_t, c_int64_t, kstage_filter_t
      integer(c_int64_t), value :: stage
      type(kstage_filter_t), intent(in) :: filter
      integer(c_int64_t), intent(out) :: query
      integer(c_int32_t) :: status
    end function
    function kstage_query_count(stage, query, count) bind(C, name="kstage_query_count") &
        result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage, query
      integer(c_int64_t), intent(out) :: count
      integer(c_int32_t) :: status
    end function
    function kstage_query_get_paths(stage, query, paths) bind(C, name="kstage_query_get_paths") &
        result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage, query
      integer(c_int64_t), intent(out) :: paths   ! a path list
      integer(c_int32_t) :: status
    end function
    function kstage_query_release(stage, query) bind(C, name="kstage_query_release") &
        result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage, query
      integer(c_int32_t) :: status
    end function

    ! Mutations
    function kstage_write_attribute(stage, query, attribute, ordinal, data, prim_mode, op) &
        bind(C, name="kstage_write_attribute") result(status)
      import :: c_int32_t, c_int64_t, kstage_write_data_t
      integer(c_int64_t), value :: stage, query, attribute, ordinal
      type(kstage_write_data_t), intent(in) :: data
      integer(c_int32_t), value :: prim_mode
      integer(c_int64_t), intent(out) :: op
      integer(c_int32_t) :: status
    end function
    function kstage_write_attributes(stage, query, attributes, data, n, ordinal, prim_mode, op) &
        bind(C, name="kstage_write_attributes") result(status)
      import :: c_int32_t, c_int64_t, kstage_write_data_t
      integer(c_int64_t), value :: stage, query
      integer(c_int64_t), intent(in) :: attributes(*)
      type(kstage_write_data_t), intent(in) :: data(*)
      integer(c_int64_t), value :: n, ordinal
      integer(c_int32_t), value :: prim_mode
      integer(c_int64_t), intent(out) :: op
      integer(c_int32_t) :: status
    end function
    function kstage_delete_attributes(stage, query, attributes, n, ordinal, op) &
        bind(C, name="kstage_delete_attributes") result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage, query
      integer(c_int64_t), intent(in), optional :: attributes(*)
      integer(c_int64_t), value :: n, ordinal
      integer(c_int64_t), intent(out) :: op
      integer(c_int32_t) :: status
    end function
    function kstage_advance_write_floor(stage, ordinal, attributes, n) &
        bind(C, name="kstage_advance_write_floor") result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage, ordinal
      integer(c_int64_t), intent(in), optional :: attributes(*)
      integer(c_int64_t), value :: n
      integer(c_int32_t) :: status
    end function
    function kstage_get_write_floor(stage, attribute, ordinal) &
        bind(C, name="kstage_get_write_floor") result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage, attribute
      integer(c_int64_t), intent(out) :: ordinal
      integer(c_int32_t) :: status
    end function

    ! Describing a stage
    function kstage_list_attributes(stage, attributes, capacity, count) &
        bind(C, name="kstage_list_attributes") result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage
      integer(c_int64_t), intent(out), optional :: attributes(*)
      integer(c_int64_t), value :: capacity
      integer(c_int64_t), intent(out) :: count
      integer(c_int32_t) :: status
    end function
    function kstage_attribute_info(stage, attribute, info) bind(C, name="kstage_attribute_info") &
        result(status)
      import :: c_int32_t, c_int64_t, kstage_attribute_info_t
      integer(c_int64_t), value :: stage, attribute
      type(kstage_attribute_info_t), intent(inout) :: info   ! struct_size set by the caller
      integer(c_int32_t) :: status
    end function
    function kstage_attribute_schema(stage, attribute, index, info) &
        bind(C, name="kstage_attribute_schema") result(status)
      import :: c_int32_t, c_int64_t, kstage_attribute_info_t
      integer(c_int64_t), value :: stage, attribute, index
      type(kstage_attribute_info_t), intent(inout) :: info   ! struct_size set by the caller
      integer(c_int32_t) :: status
    end function

    ! The scene
    function kstage_query_hierarchy(stage, query, relation, result) &
        bind(C, name="kstage_query_hierarchy") result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage, query
      integer(c_int32_t), value :: relation
      integer(c_int64_t), intent(out) :: result
      integer(c_int32_t) :: status
    end function
    function kstage_hierarchy_get(stage, result, items, item_count, spans, span_count) &
        bind(C, name="kstage_hierarchy_get") result(status)
      import :: c_int32_t, c_int64_t, c_ptr
      integer(c_int64_t), value :: stage, result
      type(c_ptr), intent(out), optional :: items   ! const kstage_hierarchy_item_t*
      integer(c_int64_t), intent(out), optional :: item_count
      type(c_ptr), intent(out), optional :: spans   ! const kstage_path_span_t*
      integer(c_int64_t), intent(out), optional :: span_count
      integer(c_int32_t) :: status
    end function
    function kstage_hierarchy_release(stage, result) bind(C, name="kstage_hierarchy_release") &
        result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage, result
      integer(c_int32_t) :: status
    end function
    function kstage_query_filter_ex(stage, filter, query) bind(C, name="kstage_query_filter_ex") &
        result(status)
      import :: c_int32_t, c_int64_t, kstage_filter_ex_t
      integer(c_int64_t), value :: stage
      type(kstage_filter_ex_t), intent(in) :: filter
      integer(c_int64_t), intent(out) :: query
      integer(c_int32_t) :: status
    end function

    ! Reads
    function kstage_read_attributes(stage, query, attributes, n, desc, read) &
        bind(C, name="kstage_read_attributes") result(status)
      import :: c_int32_t, c_int64_t, kstage_read_desc_t
      integer(c_int64_t), value :: stage, query
      integer(c_int64_t), intent(in) :: attributes(*)
      integer(c_int64_t), value :: n
      type(kstage_read_desc_t), intent(in), optional :: desc
      integer(c_int64_t), intent(out) :: read
      integer(c_int32_t) :: status
    end function
    function kstage_fetch_read_next(stage, read, timeout_ns, group) &
        bind(C, name="kstage_fetch_read_next") result(status)
      import :: c_int32_t, c_int64_t, kstage_read_group_t
      integer(c_int64_t), value :: stage, read, timeout_ns
      type(kstage_read_group_t), intent(inout) :: group   ! written only on success
      integer(c_int32_t) :: status
    end function
    function kstage_release_group(stage, group) bind(C, name="kstage_release_group") &
        result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage, group
      integer(c_int32_t) :: status
    end function
    function kstage_group_prim_progression(stage, group, first, stride) &
        bind(C, name="kstage_group_prim_progression") result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage, group
      integer(c_int64_t), intent(out) :: first, stride   ! written only on success
      integer(c_int32_t) :: status
    end function
    function kstage_release_read(stage, read) bind(C, name="kstage_release_read") result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage, read
      integer(c_int32_t) :: status
    end function

    ! DLPack export of read groups (tensor: a DLManagedTensorVersioned* / DLManagedTensor*)
    function kstage_group_export(stage, group, index, flags, tensor) &
        bind(C, name="kstage_group_export") result(status)
      import :: c_int32_t, c_int64_t, c_ptr
      integer(c_int64_t), value :: stage, group, index, flags
      type(c_ptr), intent(out) :: tensor
      integer(c_int32_t) :: status
    end function
    function kstage_group_export_legacy(stage, group, index, flags, tensor) &
        bind(C, name="kstage_group_export_legacy") result(status)
      import :: c_int32_t, c_int64_t, c_ptr
      integer(c_int64_t), value :: stage, group, index, flags
      type(c_ptr), intent(out) :: tensor
      integer(c_int32_t) :: status
    end function
    function kstage_group_export_on_stream(stage, group, index, flags, stream, tensor) &
        bind(C, name="kstage_group_export_on_stream") result(status)
      import :: c_int32_t, c_int64_t, c_intptr_t, c_ptr
      integer(c_int64_t), value :: stage, group, index, flags
      integer(c_intptr_t), value :: stream
      type(c_ptr), intent(out) :: tensor
      integer(c_int32_t) :: status
    end function
    function kstage_group_export_legacy_on_stream(stage, group, index, flags, stream, tensor) &
        bind(C, name="kstage_group_export_legacy_on_stream") result(status)
      import :: c_int32_t, c_int64_t, c_intptr_t, c_ptr
      integer(c_int64_t), value :: stage, group, index, flags
      integer(c_intptr_t), value :: stream
      type(c_ptr), intent(out) :: tensor
      integer(c_int32_t) :: status
    end function
    function kstage_group_export_index_map(stage, group, stream, tensor) &
        bind(C, name="kstage_group_export_index_map") result(status)
      import :: c_int32_t, c_int64_t, c_intptr_t, c_ptr
      integer(c_int64_t), value :: stage, group
      integer(c_intptr_t), value :: stream
      type(c_ptr), intent(out) :: tensor
      integer(c_int32_t) :: status
    end function
    function kstage_group_sync(stage, group, consumer) bind(C, name="kstage_group_sync") &
        result(status)
      import :: c_int32_t, c_int64_t, kstage_device_sync_t
      integer(c_int64_t), value :: stage, group
      type(kstage_device_sync_t), value :: consumer
      integer(c_int32_t) :: status
    end function

    ! Map / unmap
    function kstage_map_attribute(stage, query, desc, ordinal, element_counts, n, map) &
        bind(C, name="kstage_map_attribute") result(status)
      import :: c_int32_t, c_int64_t, kstage_map_desc_t
      integer(c_int64_t), value :: stage, query
      type(kstage_map_desc_t), intent(in) :: desc
      integer(c_int64_t), value :: ordinal
      integer(c_int64_t), intent(in), optional :: element_counts(*)
      integer(c_int64_t), value :: n
      integer(c_int64_t), intent(out) :: map
      integer(c_int32_t) :: status
    end function
    function kstage_fetch_map_next(stage, map, timeout_ns, group) &
        bind(C, name="kstage_fetch_map_next") result(status)
      import :: c_int32_t, c_int64_t, kstage_map_group_info_t
      integer(c_int64_t), value :: stage, map, timeout_ns
      type(kstage_map_group_info_t), intent(inout) :: group   ! written only on success
      integer(c_int32_t) :: status
    end function
    function kstage_unmap_group(stage, map, group, done_sync, op) &
        bind(C, name="kstage_unmap_group") result(status)
      import :: c_int32_t, c_int64_t, kstage_device_sync_t
      integer(c_int64_t), value :: stage, map, group
      type(kstage_device_sync_t), value :: done_sync
      integer(c_int64_t), intent(out) :: op
      integer(c_int32_t) :: status
    end function
    function kstage_unmap_attribute(stage, map, done_sync, op) &
        bind(C, name="kstage_unmap_attribute") result(status)
      import :: c_int32_t, c_int64_t, kstage_device_sync_t
      integer(c_int64_t), value :: stage, map
      type(kstage_device_sync_t), value :: done_sync
      integer(c_int64_t), intent(out) :: op
      integer(c_int32_t) :: status
    end function
    function kstage_release_map(stage, map) bind(C, name="kstage_release_map") result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage, map
      integer(c_int32_t) :: status
    end function
    function kstage_release_map_after(stage, map, producer) &
        bind(C, name="kstage_release_map_after") result(status)
      import :: c_int32_t, c_int64_t, kstage_device_sync_t
      integer(c_int64_t), value :: stage, map
      type(kstage_device_sync_t), value :: producer
      integer(c_int32_t) :: status
    end function
    function kstage_map_group_export(stage, map, group, index, flags, tensor) &
        bind(C, name="kstage_map_group_export") result(status)
      import :: c_int32_t, c_int64_t, c_ptr
      integer(c_int64_t), value :: stage, map, group, index, flags
      type(c_ptr), intent(out) :: tensor
      integer(c_int32_t) :: status
    end function

    ! World transforms
    function kstage_compute_world_transforms(stage, desc, ordinal, op) &
        bind(C, name="kstage_compute_world_transforms") result(status)
      import :: c_int32_t, c_int64_t, kstage_transform_desc_t
      integer(c_int64_t), value :: stage
      type(kstage_transform_desc_t), intent(in) :: desc
      integer(c_int64_t), value :: ordinal
      integer(c_int64_t), intent(out) :: op
      integer(c_int32_t) :: status
    end function

    ! Clone
    function kstage_clone(stage, source, targets, n, ordinal, op) bind(C, name="kstage_clone") &
        result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage, source
      integer(c_int64_t), intent(in) :: targets(*)
      integer(c_int64_t), value :: n, ordinal
      integer(c_int64_t), intent(out) :: op
      integer(c_int32_t) :: status
    end function
    function kstage_clone_range(stage, source, first, start, count, ordinal, op) &
        bind(C, name="kstage_clone_range") result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage, source, first, start, count, ordinal
      integer(c_int64_t), intent(out) :: op
      integer(c_int32_t) :: status
    end function

    ! Ops
    function kstage_wait(stage, op, timeout_ns) bind(C, name="kstage_wait") result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage, op, timeout_ns
      integer(c_int32_t) :: status
    end function
    function kstage_op_sync(stage, op, consumer) bind(C, name="kstage_op_sync") result(status)
      import :: c_int32_t, c_int64_t, kstage_device_sync_t
      integer(c_int64_t), value :: stage, op
      type(kstage_device_sync_t), value :: consumer
      integer(c_int32_t) :: status
    end function
    function kstage_op_error(stage, op, message) bind(C, name="kstage_op_error") result(status)
      import :: c_int32_t, c_int64_t, c_ptr
      integer(c_int64_t), value :: stage, op
      type(c_ptr), intent(out) :: message
      integer(c_int32_t) :: status
    end function
    function kstage_release_op(stage, op) bind(C, name="kstage_release_op") result(status)
      import :: c_int32_t, c_int64_t
      integer(c_int64_t), value :: stage, op
      integer(c_int32_t) :: status
    end function
  end interface

contains

  ! The descriptor initialisers of kstage.h: every field zero, struct_size set.
  function kstage_config_init() result(config)
    type(kstage_config_t) :: config
    config%struct_size = int(c_sizeof(config), c_int32_t)
  end function

  function kstage_write_data_init() result(data)
    type(kstage_write_data_t) :: data
    data%struct_size = int(c_sizeof(data), c_int32_t)
  end function

  function kstage_read_desc_init() result(desc)
    type(kstage_read_desc_t) :: desc
    desc%struct_size = int(c_sizeof(desc), c_int32_t)
  end function

  function kstage_attribute_info_init() result(info)
    type(kstage_attribute_info_t) :: info
    info%struct_size = int(c_sizeof(info), c_int32_t)
  end function

  function kstage_filter_ex_init() result(filter)
    type(kstage_filter_ex_t) :: filter
    filter%struct_size = int(c_sizeof(filter), c_int32_t)
  end function

  function kstage_map_desc_init() result(desc)
    type(kstage_map_desc_t) :: desc
    desc%struct_size = int(c_sizeof(desc), c_int32_t)
  end function

  function kstage_transform_desc_init() result(desc)
    type(kstage_transform_desc_t) :: desc
    desc%struct_size = int(c_sizeof(desc), c_int32_t)
  end function
end module kstage_c
