/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The C side of the Fortran layout check (test_fortran.f90): sizeof and offsetof of every struct
 * and field that module kstage_c mirrors, as the C compiler lays them out. The Fortran test looks
 * each one up; kstage_test_c_unchecked_fields() counts the entries it never asked for, so a
 * field listed here but missing from the Fortran test fails the test too.
 */
#include <kstage/kstage.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct DLManagedTensorVersioned DLManagedTensorVersioned;

#define FIELD(s, f) \
  { #s, #f, offsetof(s, f), 0 }
static struct {
  const char* type;
  const char* field;
  size_t offset;
  int seen;
} kFields[] = {
    FIELD(DLPackVersion, major),
    FIELD(DLPackVersion, minor),
    FIELD(DLDevice, device_type),
    FIELD(DLDevice, device_id),
    FIELD(DLDataType, code),
    FIELD(DLDataType, bits),
    FIELD(DLDataType, lanes),
    FIELD(DLTensor, data),
    FIELD(DLTensor, device),
    FIELD(DLTensor, ndim),
    FIELD(DLTensor, dtype),
    FIELD(DLTensor, shape),
    FIELD(DLTensor, strides),
    FIELD(DLTensor, byte_offset),
    FIELD(DLManagedTensor, dl_tensor),
    FIELD(DLManagedTensor, manager_ctx),
    FIELD(DLManagedTensor, deleter),
    FIELD(DLManagedTensorVersioned, version),
    FIELD(DLManagedTensorVersioned, manager_ctx),
    FIELD(DLManagedTensorVersioned, deleter),
    FIELD(DLManagedTensorVersioned, flags),
    FIELD(DLManagedTensorVersioned, dl_tensor),
    FIELD(kstage_device_sync_t, stream),
    FIELD(kstage_device_sync_t, event),
    FIELD(kstage_config_t, struct_size),
    FIELD(kstage_config_t, host_execution),
    FIELD(kstage_config_t, residency),
    FIELD(kstage_write_data_t, struct_size),
    FIELD(kstage_write_data_t, semantic),
    FIELD(kstage_write_data_t, tensors),
    FIELD(kstage_write_data_t, managed_tensors),
    FIELD(kstage_write_data_t, tensor_count),
    FIELD(kstage_write_data_t, count),
    FIELD(kstage_write_data_t, index_map),
    FIELD(kstage_write_data_t, mask),
    FIELD(kstage_write_data_t, device_sync),
    FIELD(kstage_write_data_t, is_array),
    FIELD(kstage_write_data_t, attribute_mode),
    FIELD(kstage_write_data_t, reserved),
    FIELD(kstage_write_data_t, legacy_managed_tensors),
    FIELD(kstage_write_data_t, residency),
    FIELD(kstage_write_data_t, selection_device),
    FIELD(kstage_write_data_t, index_map64),
    FIELD(kstage_data_t, tensors),
    FIELD(kstage_data_t, tensor_count),
    FIELD(kstage_data_t, count),
    FIELD(kstage_data_t, index_map),
    FIELD(kstage_data_t, mask),
    FIELD(kstage_data_t, device_sync),
    FIELD(kstage_filter_t, has_attributes),
    FIELD(kstage_filter_t, has_attribute_count),
    FIELD(kstage_filter_t, path_in),
    FIELD(kstage_filter_t, path_prefix),
    FIELD(kstage_read_desc_t, struct_size),
    FIELD(kstage_read_desc_t, change_range),
    FIELD(kstage_read_desc_t, compact),
    FIELD(kstage_read_desc_t, device_index_map),
    FIELD(kstage_read_desc_t, prims_as_progression),
    FIELD(kstage_read_desc_t, range_begin),
    FIELD(kstage_read_desc_t, range_end),
    FIELD(kstage_read_desc_t, target_device),
    FIELD(kstage_read_desc_t, device_sync),
    FIELD(kstage_read_desc_t, max_group_prims),
    FIELD(kstage_read_group_t, handle),
    FIELD(kstage_read_group_t, attribute),
    FIELD(kstage_read_group_t, prims),
    FIELD(kstage_read_group_t, prim_count),
    FIELD(kstage_read_group_t, ordinal),
    FIELD(kstage_read_group_t, data),
    FIELD(kstage_read_group_t, dtype),
    FIELD(kstage_read_group_t, is_delete),
    FIELD(kstage_read_group_t, is_array),
    FIELD(kstage_read_group_t, semantic),
    FIELD(kstage_map_desc_t, struct_size),
    FIELD(kstage_map_desc_t, semantic),
    FIELD(kstage_map_desc_t, attribute),
    FIELD(kstage_map_desc_t, dtype),
    FIELD(kstage_map_desc_t, prim_mode),
    FIELD(kstage_map_desc_t, residency),
    FIELD(kstage_map_desc_t, max_group_prims),
    FIELD(kstage_map_desc_t, is_array),
    FIELD(kstage_map_desc_t, attribute_mode),
    FIELD(kstage_map_desc_t, reserved),
    FIELD(kstage_map_group_info_t, handle),
    FIELD(kstage_map_group_info_t, attribute),
    FIELD(kstage_map_group_info_t, prims),
    FIELD(kstage_map_group_info_t, prim_count),
    FIELD(kstage_map_group_info_t, ordinal),
    FIELD(kstage_map_group_info_t, data),
    FIELD(kstage_map_group_info_t, dtype),
    FIELD(kstage_map_group_info_t, is_array),
    FIELD(kstage_map_group_info_t, semantic),
    FIELD(kstage_attribute_info_t, struct_size),
    FIELD(kstage_attribute_info_t, semantic),
    FIELD(kstage_attribute_info_t, attribute),
    FIELD(kstage_attribute_info_t, dtype),
    FIELD(kstage_attribute_info_t, is_array),
    FIELD(kstage_attribute_info_t, reserved),
    FIELD(kstage_attribute_info_t, residency),
    FIELD(kstage_attribute_info_t, write_floor),
    FIELD(kstage_attribute_info_t, prim_count),
    FIELD(kstage_attribute_info_t, schema_count),
    FIELD(kstage_path_span_t, first),
    FIELD(kstage_path_span_t, count),
    FIELD(kstage_hierarchy_item_t, status),
    FIELD(kstage_hierarchy_item_t, reserved),
    FIELD(kstage_hierarchy_item_t, span_offset),
    FIELD(kstage_hierarchy_item_t, span_count),
    FIELD(kstage_hierarchy_item_t, path_count),
    FIELD(kstage_predicate_t, op),
    FIELD(kstage_predicate_t, reserved),
    FIELD(kstage_predicate_t, attribute),
    FIELD(kstage_predicate_t, values),
    FIELD(kstage_predicate_t, value_count),
    FIELD(kstage_filter_ex_t, struct_size),
    FIELD(kstage_filter_ex_t, reserved),
    FIELD(kstage_filter_ex_t, predicates),
    FIELD(kstage_filter_ex_t, predicate_count),
    FIELD(kstage_transform_desc_t, struct_size),
    FIELD(kstage_transform_desc_t, mode),
    FIELD(kstage_transform_desc_t, local),
    FIELD(kstage_transform_desc_t, reset),
    FIELD(kstage_transform_desc_t, world),
};

#define SIZE(s) \
  { #s, sizeof(s) }
static const struct {
  const char* type;
  size_t size;
} kSizes[] = {
    SIZE(DLPackVersion),
    SIZE(DLDevice),
    SIZE(DLDataType),
    SIZE(DLTensor),
    SIZE(DLManagedTensor),
    SIZE(DLManagedTensorVersioned),
    SIZE(kstage_device_sync_t),
    SIZE(kstage_config_t),
    SIZE(kstage_write_data_t),
    SIZE(kstage_data_t),
    SIZE(kstage_filter_t),
    SIZE(kstage_read_desc_t),
    SIZE(kstage_read_group_t),
    SIZE(kstage_map_desc_t),
    SIZE(kstage_map_group_info_t),
    SIZE(kstage_attribute_info_t),
    SIZE(kstage_path_span_t),
    SIZE(kstage_hierarchy_item_t),
    SIZE(kstage_predicate_t),
    SIZE(kstage_filter_ex_t),
    SIZE(kstage_transform_desc_t),
};

static int same(const char* a, const char* b, size_t length) {
  return strlen(a) == length && memcmp(a, b, length) == 0;
}

/* offsetof(type, field), or -1 when C has no such field. */
int64_t kstage_test_c_offset(const char* type, size_t type_length, const char* field,
                             size_t field_length) {
  size_t i;
  for (i = 0; i < sizeof kFields / sizeof kFields[0]; ++i) {
    if (same(kFields[i].type, type, type_length) && same(kFields[i].field, field, field_length)) {
      kFields[i].seen = 1;
      return (int64_t)kFields[i].offset;
    }
  }
  return -1;
}

/* sizeof(type), or -1 when C has no such struct here. */
int64_t kstage_test_c_size(const char* type, size_t type_length) {
  size_t i;
  for (i = 0; i < sizeof kSizes / sizeof kSizes[0]; ++i) {
    if (same(kSizes[i].type, type, type_length)) return (int64_t)kSizes[i].size;
  }
  return -1;
}

/* The fields listed here that the Fortran test never looked up (each named on stderr). */
int64_t kstage_test_c_unchecked_fields(void) {
  int64_t n = 0;
  size_t i;
  for (i = 0; i < sizeof kFields / sizeof kFields[0]; ++i) {
    if (!kFields[i].seen) {
      fprintf(stderr, "layout: %s.%s was never checked from Fortran\n", kFields[i].type,
              kFields[i].field);
      ++n;
    }
  }
  return n;
}
