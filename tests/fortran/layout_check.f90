! SPDX-License-Identifier: Apache-2.0
! The Fortran side of the layout check: every type of module kstage_c, its size and the offset of
! each of its components, against C (c_layout.c).
module layout_check
  use, intrinsic :: iso_c_binding
  use kstage
  implicit none
  private
  public :: check_layout

  interface
    function c_offset(type, type_length, field, field_length) &
        bind(C, name="kstage_test_c_offset") result(offset)
      import :: c_char, c_size_t, c_int64_t
      character(kind=c_char), intent(in) :: type(*), field(*)
      integer(c_size_t), value :: type_length, field_length
      integer(c_int64_t) :: offset
    end function
    function c_size(type, type_length) bind(C, name="kstage_test_c_size") result(size)
      import :: c_char, c_size_t, c_int64_t
      character(kind=c_char), intent(in) :: type(*)
      integer(c_size_t), value :: type_length
      integer(c_int64_t) :: size
    end function
    function c_unchecked_fields() bind(C, name="kstage_test_c_unchecked_fields") result(n)
      import :: c_int64_t
      integer(c_int64_t) :: n
    end function
  end interface

contains

  integer(c_intptr_t) function address(p)
    type(c_ptr), intent(in) :: p
    address = transfer(p, address)
  end function

  subroutine field(failures, type, name, base, at)
    integer, intent(inout) :: failures
    character(len=*), intent(in) :: type, name
    type(c_ptr), intent(in) :: base, at
    integer(c_int64_t) :: expected, got
    expected = c_offset(type, int(len(type), c_size_t), name, int(len(name), c_size_t))
    got = int(address(at) - address(base), c_int64_t)
    if (expected /= got) then
      print '(5a, i0, a, i0)', 'layout: ', type, '%', name, ': offset ', got, ' in Fortran, C: ', expected
      failures = failures + 1
    end if
  end subroutine

  subroutine size_of(failures, type, fortran_size)
    integer, intent(inout) :: failures
    character(len=*), intent(in) :: type
    integer(c_size_t), intent(in) :: fortran_size
    integer(c_int64_t) :: expected
    expected = c_size(type, int(len(type), c_size_t))
    if (expected /= int(fortran_size, c_int64_t)) then
      print '(3a, i0, a, i0)', 'layout: sizeof ', type, ' is ', fortran_size, ' in Fortran, C: ', expected
      failures = failures + 1
    end if
  end subroutine

  ! Adds the number of mismatches to failures.
  subroutine check_layout(failures)
    integer, intent(inout) :: failures
    type(DLPackVersion), target :: v1
    type(DLDevice), target :: v2
    type(DLDataType), target :: v3
    type(DLTensor), target :: v4
    type(DLManagedTensor), target :: v5
    type(DLManagedTensorVersioned), target :: v6
    type(kstage_device_sync_t), target :: v7
    type(kstage_config_t), target :: v8
    type(kstage_write_data_t), target :: v9
    type(kstage_data_t), target :: v10
    type(kstage_filter_t), target :: v11
    type(kstage_read_desc_t), target :: v12
    type(kstage_read_group_t), target :: v13
    type(kstage_map_desc_t), target :: v14
    type(kstage_map_group_info_t), target :: v15
    type(kstage_attribute_info_t), target :: v16
    type(kstage_path_span_t), target :: v17
    type(kstage_hierarchy_item_t), target :: v18
    type(kstage_predicate_t), target :: v19
    type(kstage_filter_ex_t), target :: v20
    type(kstage_transform_desc_t), target :: v21
    call size_of(failures, "DLPackVersion", c_sizeof(v1))
    call field(failures, "DLPackVersion", "major", &
               c_loc(v1), c_loc(v1%major))
    call field(failures, "DLPackVersion", "minor", &
               c_loc(v1), c_loc(v1%minor))
    call size_of(failures, "DLDevice", c_sizeof(v2))
    call field(failures, "DLDevice", "device_type", &
               c_loc(v2), c_loc(v2%device_type))
    call field(failures, "DLDevice", "device_id", &
               c_loc(v2), c_loc(v2%device_id))
    call size_of(failures, "DLDataType", c_sizeof(v3))
    call field(failures, "DLDataType", "code", &
               c_loc(v3), c_loc(v3%code))
    call field(failures, "DLDataType", "bits", &
               c_loc(v3), c_loc(v3%bits))
    call field(failures, "DLDataType", "lanes", &
               c_loc(v3), c_loc(v3%lanes))
    call size_of(failures, "DLTensor", c_sizeof(v4))
    call field(failures, "DLTensor", "data", &
               c_loc(v4), c_loc(v4%data))
    call field(failures, "DLTensor", "device", &
               c_loc(v4), c_loc(v4%device))
    call field(failures, "DLTensor", "ndim", &
               c_loc(v4), c_loc(v4%ndim))
    call field(failures, "DLTensor", "dtype", &
               c_loc(v4), c_loc(v4%dtype))
    call field(failures, "DLTensor", "shape", &
               c_loc(v4), c_loc(v4%shape))
    call field(failures, "DLTensor", "strides", &
               c_loc(v4), c_loc(v4%strides))
    call field(failures, "DLTensor", "byte_offset", &
               c_loc(v4), c_loc(v4%byte_offset))
    call size_of(failures, "DLManagedTensor", c_sizeof(v5))
    call field(failures, "DLManagedTensor", "dl_tensor", &
               c_loc(v5), c_loc(v5%dl_tensor))
    call field(failures, "DLManagedTensor", "manager_ctx", &
               c_loc(v5), c_loc(v5%manager_ctx))
    call field(failures, "DLManagedTensor", "deleter", &
               c_loc(v5), c_loc(v5%deleter))
    call size_of(failures, "DLManagedTensorVersioned", c_sizeof(v6))
    call field(failures, "DLManagedTensorVersioned", "version", &
               c_loc(v6), c_loc(v6%version))
    call field(failures, "DLManagedTensorVersioned", "manager_ctx", &
               c_loc(v6), c_loc(v6%manager_ctx))
    call field(failures, "DLManagedTensorVersioned", "deleter", &
               c_loc(v6), c_loc(v6%deleter))
    call field(failures, "DLManagedTensorVersioned", "flags", &
               c_loc(v6), c_loc(v6%flags))
    call field(failures, "DLManagedTensorVersioned", "dl_tensor", &
               c_loc(v6), c_loc(v6%dl_tensor))
    call size_of(failures, "kstage_device_sync_t", c_sizeof(v7))
    call field(failures, "kstage_device_sync_t", "stream", &
               c_loc(v7), c_loc(v7%stream))
    call field(failures, "kstage_device_sync_t", "event", &
               c_loc(v7), c_loc(v7%event))
    call size_of(failures, "kstage_config_t", c_sizeof(v8))
    call field(failures, "kstage_config_t", "struct_size", &
               c_loc(v8), c_loc(v8%struct_size))
    call field(failures, "kstage_config_t", "host_execution", &
               c_loc(v8), c_loc(v8%host_execution))
    call field(failures, "kstage_config_t", "residency", &
               c_loc(v8), c_loc(v8%residency))
    call size_of(failures, "kstage_write_data_t", c_sizeof(v9))
    call field(failures, "kstage_write_data_t", "struct_size", &
               c_loc(v9), c_loc(v9%struct_size))
    call field(failures, "kstage_write_data_t", "semantic", &
               c_loc(v9), c_loc(v9%semantic))
    call field(failures, "kstage_write_data_t", "tensors", &
               c_loc(v9), c_loc(v9%tensors))
    call field(failures, "kstage_write_data_t", "managed_tensors", &
               c_loc(v9), c_loc(v9%managed_tensors))
    call field(failures, "kstage_write_data_t", "tensor_count", &
               c_loc(v9), c_loc(v9%tensor_count))
    call field(failures, "kstage_write_data_t", "count", &
               c_loc(v9), c_loc(v9%count))
    call field(failures, "kstage_write_data_t", "index_map", &
               c_loc(v9), c_loc(v9%index_map))
    call field(failures, "kstage_write_data_t", "mask", &
               c_loc(v9), c_loc(v9%mask))
    call field(failures, "kstage_write_data_t", "device_sync", &
               c_loc(v9), c_loc(v9%device_sync))
    call field(failures, "kstage_write_data_t", "is_array", &
               c_loc(v9), c_loc(v9%is_array))
    call field(failures, "kstage_write_data_t", "attribute_mode", &
               c_loc(v9), c_loc(v9%attribute_mode))
    call field(failures, "kstage_write_data_t", "reserved", &
               c_loc(v9), c_loc(v9%reserved))
    call field(failures, "kstage_write_data_t", "legacy_managed_tensors", &
               c_loc(v9), c_loc(v9%legacy_managed_tensors))
    call field(failures, "kstage_write_data_t", "residency", &
               c_loc(v9), c_loc(v9%residency))
    call field(failures, "kstage_write_data_t", "selection_device", &
               c_loc(v9), c_loc(v9%selection_device))
    call field(failures, "kstage_write_data_t", "index_map64", &
               c_loc(v9), c_loc(v9%index_map64))
    call size_of(failures, "kstage_data_t", c_sizeof(v10))
    call field(failures, "kstage_data_t", "tensors", &
               c_loc(v10), c_loc(v10%tensors))
    call field(failures, "kstage_data_t", "tensor_count", &
               c_loc(v10), c_loc(v10%tensor_count))
    call field(failures, "kstage_data_t", "count", &
               c_loc(v10), c_loc(v10%count))
    call field(failures, "kstage_data_t", "index_map", &
               c_loc(v10), c_loc(v10%index_map))
    call field(failures, "kstage_data_t", "mask", &
               c_loc(v10), c_loc(v10%mask))
    call field(failures, "kstage_data_t", "device_sync", &
               c_loc(v10), c_loc(v10%device_sync))
    call size_of(failures, "kstage_filter_t", c_sizeof(v11))
    call field(failures, "kstage_filter_t", "has_attributes", &
               c_loc(v11), c_loc(v11%has_attributes))
    call field(failures, "kstage_filter_t", "has_attribute_count", &
               c_loc(v11), c_loc(v11%has_attribute_count))
    call field(failures, "kstage_filter_t", "path_in", &
               c_loc(v11), c_loc(v11%path_in))
    call field(failures, "kstage_filter_t", "path_prefix", &
               c_loc(v11), c_loc(v11%path_prefix))
    call size_of(failures, "kstage_read_desc_t", c_sizeof(v12))
    call field(failures, "kstage_read_desc_t", "struct_size", &
               c_loc(v12), c_loc(v12%struct_size))
    call field(failures, "kstage_read_desc_t", "change_range", &
               c_loc(v12), c_loc(v12%change_range))
    call field(failures, "kstage_read_desc_t", "compact", &
               c_loc(v12), c_loc(v12%compact))
    call field(failures, "kstage_read_desc_t", "device_index_map", &
               c_loc(v12), c_loc(v12%device_index_map))
    call field(failures, "kstage_read_desc_t", "prims_as_progression", &
               c_loc(v12), c_loc(v12%prims_as_progression))
    call field(failures, "kstage_read_desc_t", "range_begin", &
               c_loc(v12), c_loc(v12%range_begin))
    call field(failures, "kstage_read_desc_t", "range_end", &
               c_loc(v12), c_loc(v12%range_end))
    call field(failures, "kstage_read_desc_t", "target_device", &
               c_loc(v12), c_loc(v12%target_device))
    call field(failures, "kstage_read_desc_t", "device_sync", &
               c_loc(v12), c_loc(v12%device_sync))
    call field(failures, "kstage_read_desc_t", "max_group_prims", &
               c_loc(v12), c_loc(v12%max_group_prims))
    call size_of(failures, "kstage_read_group_t", c_sizeof(v13))
    call field(failures, "kstage_read_group_t", "handle", &
               c_loc(v13), c_loc(v13%handle))
    call field(failures, "kstage_read_group_t", "attribute", &
               c_loc(v13), c_loc(v13%attribute))
    call field(failures, "kstage_read_group_t", "prims", &
               c_loc(v13), c_loc(v13%prims))
    call field(failures, "kstage_read_group_t", "prim_count", &
               c_loc(v13), c_loc(v13%prim_count))
    call field(failures, "kstage_read_group_t", "ordinal", &
               c_loc(v13), c_loc(v13%ordinal))
    call field(failures, "kstage_read_group_t", "data", &
               c_loc(v13), c_loc(v13%data))
    call field(failures, "kstage_read_group_t", "dtype", &
               c_loc(v13), c_loc(v13%dtype))
    call field(failures, "kstage_read_group_t", "is_delete", &
               c_loc(v13), c_loc(v13%is_delete))
    call field(failures, "kstage_read_group_t", "is_array", &
               c_loc(v13), c_loc(v13%is_array))
    call field(failures, "kstage_read_group_t", "semantic", &
               c_loc(v13), c_loc(v13%semantic))
    call size_of(failures, "kstage_map_desc_t", c_sizeof(v14))
    call field(failures, "kstage_map_desc_t", "struct_size", &
               c_loc(v14), c_loc(v14%struct_size))
    call field(failures, "kstage_map_desc_t", "semantic", &
               c_loc(v14), c_loc(v14%semantic))
    call field(failures, "kstage_map_desc_t", "attribute", &
               c_loc(v14), c_loc(v14%attribute))
    call field(failures, "kstage_map_desc_t", "dtype", &
               c_loc(v14), c_loc(v14%dtype))
    call field(failures, "kstage_map_desc_t", "prim_mode", &
               c_loc(v14), c_loc(v14%prim_mode))
    call field(failures, "kstage_map_desc_t", "residency", &
               c_loc(v14), c_loc(v14%residency))
    call field(failures, "kstage_map_desc_t", "max_group_prims", &
               c_loc(v14), c_loc(v14%max_group_prims))
    call field(failures, "kstage_map_desc_t", "is_array", &
               c_loc(v14), c_loc(v14%is_array))
    call field(failures, "kstage_map_desc_t", "attribute_mode", &
               c_loc(v14), c_loc(v14%attribute_mode))
    call field(failures, "kstage_map_desc_t", "reserved", &
               c_loc(v14), c_loc(v14%reserved))
    call size_of(failures, "kstage_map_group_info_t", c_sizeof(v15))
    call field(failures, "kstage_map_group_info_t", "handle", &
               c_loc(v15), c_loc(v15%handle))
    call field(failures, "kstage_map_group_info_t", "attribute", &
               c_loc(v15), c_loc(v15%attribute))
    call field(failures, "kstage_map_group_info_t", "prims", &
               c_loc(v15), c_loc(v15%prims))
    call field(failures, "kstage_map_group_info_t", "prim_count", &
               c_loc(v15), c_loc(v15%prim_count))
    call field(failures, "kstage_map_group_info_t", "ordinal", &
               c_loc(v15), c_loc(v15%ordinal))
    call field(failures, "kstage_map_group_info_t", "data", &
               c_loc(v15), c_loc(v15%data))
    call field(failures, "kstage_map_group_info_t", "dtype", &
               c_loc(v15), c_loc(v15%dtype))
    call field(failures, "kstage_map_group_info_t", "is_array", &
               c_loc(v15), c_loc(v15%is_array))
    call field(failures, "kstage_map_group_info_t", "semantic", &
               c_loc(v15), c_loc(v15%semantic))
    call size_of(failures, "kstage_attribute_info_t", c_sizeof(v16))
    call field(failures, "kstage_attribute_info_t", "struct_size", &
               c_loc(v16), c_loc(v16%struct_size))
    call field(failures, "kstage_attribute_info_t", "semantic", &
               c_loc(v16), c_loc(v16%semantic))
    call field(failures, "kstage_attribute_info_t", "attribute", &
               c_loc(v16), c_loc(v16%attribute))
    call field(failures, "kstage_attribute_info_t", "dtype", &
               c_loc(v16), c_loc(v16%dtype))
    call field(failures, "kstage_attribute_info_t", "is_array", &
               c_loc(v16), c_loc(v16%is_array))
    call field(failures, "kstage_attribute_info_t", "reserved", &
               c_loc(v16), c_loc(v16%reserved))
    call field(failures, "kstage_attribute_info_t", "residency", &
               c_loc(v16), c_loc(v16%residency))
    call field(failures, "kstage_attribute_info_t", "write_floor", &
               c_loc(v16), c_loc(v16%write_floor))
    call field(failures, "kstage_attribute_info_t", "prim_count", &
               c_loc(v16), c_loc(v16%prim_count))
    call field(failures, "kstage_attribute_info_t", "schema_count", &
               c_loc(v16), c_loc(v16%schema_count))
    call size_of(failures, "kstage_path_span_t", c_sizeof(v17))
    call field(failures, "kstage_path_span_t", "first", &
               c_loc(v17), c_loc(v17%first))
    call field(failures, "kstage_path_span_t", "count", &
               c_loc(v17), c_loc(v17%count))
    call size_of(failures, "kstage_hierarchy_item_t", c_sizeof(v18))
    call field(failures, "kstage_hierarchy_item_t", "status", &
               c_loc(v18), c_loc(v18%status))
    call field(failures, "kstage_hierarchy_item_t", "reserved", &
               c_loc(v18), c_loc(v18%reserved))
    call field(failures, "kstage_hierarchy_item_t", "span_offset", &
               c_loc(v18), c_loc(v18%span_offset))
    call field(failures, "kstage_hierarchy_item_t", "span_count", &
               c_loc(v18), c_loc(v18%span_count))
    call field(failures, "kstage_hierarchy_item_t", "path_count", &
               c_loc(v18), c_loc(v18%path_count))
    call size_of(failures, "kstage_predicate_t", c_sizeof(v19))
    call field(failures, "kstage_predicate_t", "op", &
               c_loc(v19), c_loc(v19%op))
    call field(failures, "kstage_predicate_t", "reserved", &
               c_loc(v19), c_loc(v19%reserved))
    call field(failures, "kstage_predicate_t", "attribute", &
               c_loc(v19), c_loc(v19%attribute))
    call field(failures, "kstage_predicate_t", "values", &
               c_loc(v19), c_loc(v19%values))
    call field(failures, "kstage_predicate_t", "value_count", &
               c_loc(v19), c_loc(v19%value_count))
    call size_of(failures, "kstage_filter_ex_t", c_sizeof(v20))
    call field(failures, "kstage_filter_ex_t", "struct_size", &
               c_loc(v20), c_loc(v20%struct_size))
    call field(failures, "kstage_filter_ex_t", "reserved", &
               c_loc(v20), c_loc(v20%reserved))
    call field(failures, "kstage_filter_ex_t", "predicates", &
               c_loc(v20), c_loc(v20%predicates))
    call field(failures, "kstage_filter_ex_t", "predicate_count", &
               c_loc(v20), c_loc(v20%predicate_count))
    call size_of(failures, "kstage_transform_desc_t", c_sizeof(v21))
    call field(failures, "kstage_transform_desc_t", "struct_size", &
               c_loc(v21), c_loc(v21%struct_size))
    call field(failures, "kstage_transform_desc_t", "mode", &
               c_loc(v21), c_loc(v21%mode))
    call field(failures, "kstage_transform_desc_t", "local", &
               c_loc(v21), c_loc(v21%local))
    call field(failures, "kstage_transform_desc_t", "reset", &
               c_loc(v21), c_loc(v21%reset))
    call field(failures, "kstage_transform_desc_t", "world", &
               c_loc(v21), c_loc(v21%world))
    if (c_unchecked_fields() /= 0) failures = failures + 1
  end subroutine
end module layout_check
