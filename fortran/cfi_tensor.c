/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fortran arrays as DLPack tensors: the C side of the Fortran layer (module kstage, kstage.f90).
 *
 * A Fortran array reaches these functions as a C descriptor (ISO_Fortran_binding.h: an
 * assumed-rank `type(*), dimension(..)` dummy of a BIND(C) interface), which states its address,
 * element type and size, and each axis's extent and stride in bytes. That is exactly what a
 * DLTensor says, axes reversed: Fortran's first axis varies fastest, so `pos(3, n)` is the C
 * array pos[n][3], n rows of 3 lanes, which is kstage's row layout. A section with strides
 * (`pos(:, 1:n:2)`, `pos(1:2, :)`, `pos(:, n:1:-1)`) keeps its strides in the tensor, which
 * kstage reads as they are: nothing is copied here, and nothing is misread. What DLPack cannot
 * state -- a stride that is not a whole number of elements (a component of an array of derived
 * type whose size is not a multiple of the component's), an element type it has no code for --
 * is refused with a message that names the array.
 *
 * The ISO_Fortran_binding.h here must be the one of the Fortran compiler that builds the module
 * (the descriptor's layout is the compiler's): CMake puts it on the include path.
 */
#include "layer_error.h"

#include <ISO_Fortran_binding.h>
#include <kstage/kstage.h>

#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The most axes a Fortran array may have here (kstage folds trailing axes into lanes). */
#define KSTAGE_FORTRAN_MAX_RANK 15

/* Axis d's extent (check_array refused an assumed-size array, whose last extent is -1). */
static CFI_index_t extent_of(const CFI_cdesc_t* a, int d) {
  return a->dim[d].extent < 0 ? 0 : a->dim[d].extent;
}

static int is_integer_type(CFI_type_t t) {
  return t == CFI_type_int8_t || t == CFI_type_int16_t || t == CFI_type_int32_t ||
         t == CFI_type_int64_t || t == CFI_type_signed_char || t == CFI_type_short ||
         t == CFI_type_int || t == CFI_type_long || t == CFI_type_long_long ||
         t == CFI_type_size_t || t == CFI_type_intptr_t || t == CFI_type_ptrdiff_t ||
         t == CFI_type_intmax_t;
}

/* The DLPack dtype (lanes 1) of the descriptor's element type, or a message. */
static kstage_status_t element_dtype(const CFI_cdesc_t* a, int unsigned_ints, const char* what,
                                     DLDataType* dtype) {
  const CFI_type_t t = a->type;
  const size_t bits = a->elem_len * 8;
  if (is_integer_type(t)) {
    dtype->code = (uint8_t)(unsigned_ints ? kDLUInt : kDLInt);
  } else if (t == CFI_type_float || t == CFI_type_double) {
    dtype->code = kDLFloat;
  } else if (t == CFI_type_float_Complex || t == CFI_type_double_Complex) {
    dtype->code = kDLComplex;
  } else if (t == CFI_type_Bool) {
    dtype->code = kDLBool;
  } else {
    return kstage_fortran_fail(KSTAGE_INVALID_ARGUMENT,
                               "%s: an array of element type %d (ISO_Fortran_binding.h's "
                               "CFI_type_t), %zu bytes long, has no DLPack dtype: pass "
                               "integer, real, complex or logical(c_bool) arrays",
                               what, (int)t, a->elem_len);
  }
  if (unsigned_ints && dtype->code != kDLUInt) {
    return kstage_fortran_fail(KSTAGE_INVALID_ARGUMENT,
                               "%s: unsigned = .true. is for integer arrays only", what);
  }
  if (bits == 0 || bits > 255) {
    return kstage_fortran_fail(KSTAGE_INVALID_ARGUMENT,
                               "%s: elements of %zu bytes have no DLPack dtype", what, a->elem_len);
  }
  dtype->bits = (uint8_t)bits;
  dtype->lanes = 1;
  return KSTAGE_OK;
}

/* Axis d's stride in elements (C order: axis d of the tensor is Fortran axis rank-1-d). */
static kstage_status_t element_stride(const CFI_cdesc_t* a, int fortran_axis, const char* what,
                                      int64_t* stride) {
  const CFI_index_t sm = a->dim[fortran_axis].sm;
  const CFI_index_t elem = (CFI_index_t)a->elem_len;
  if (a->dim[fortran_axis].extent <= 1) { /* a stride never stepped is never used */
    *stride = 1;
    return KSTAGE_OK;
  }
  if (sm % elem != 0) {
    return kstage_fortran_fail(KSTAGE_INVALID_ARGUMENT,
                               "%s: axis %d steps %lld bytes, not a whole number of its %lld-byte "
                               "elements (a component of an array of a derived type?): DLPack "
                               "cannot state that stride; copy the values into an array first",
                               what, fortran_axis + 1, (long long)sm, (long long)elem);
  }
  *stride = (int64_t)(sm / elem);
  return KSTAGE_OK;
}

static kstage_status_t check_array(const CFI_cdesc_t* a, const char* what) {
  if (a == NULL) {
    return kstage_fortran_fail(KSTAGE_INVALID_ARGUMENT, "%s: no array", what);
  }
  if (a->rank == 0) {
    return kstage_fortran_fail(KSTAGE_INVALID_ARGUMENT,
                               "%s: a scalar; pass an array (one row per element of its last axis)",
                               what);
  }
  if (a->rank > KSTAGE_FORTRAN_MAX_RANK) {
    return kstage_fortran_fail(KSTAGE_INVALID_ARGUMENT, "%s: rank %d is more than %d", what,
                               (int)a->rank, KSTAGE_FORTRAN_MAX_RANK);
  }
  if (a->dim[a->rank - 1].extent == -1) {
    return kstage_fortran_fail(KSTAGE_INVALID_ARGUMENT,
                               "%s: an assumed-size array (its last extent is unknown): pass a "
                               "section with that extent, a(..., :n)",
                               what);
  }
  if (a->base_addr == NULL) {
    for (int d = 0; d < a->rank; ++d) {
      if (extent_of(a, d) == 0) return KSTAGE_OK; /* an empty array may have no address */
    }
    return kstage_fortran_fail(KSTAGE_INVALID_ARGUMENT,
                               "%s: the array has no memory (not allocated or not associated)",
                               what);
  }
  return KSTAGE_OK;
}

/*
 * The tensor of array `a` (any rank from 1): shape and strides (KSTAGE_FORTRAN_MAX_RANK entries
 * each, the caller's) hold its axes in C order, with strides in elements. The tensor points into
 * the array's memory, on the host (kDLCPU).
 */
kstage_status_t kstage_fortran_tensor(const CFI_cdesc_t* a, int32_t unsigned_ints, const char* what,
                                      size_t what_length, DLTensor* tensor, int64_t* shape,
                                      int64_t* strides) {
  char name[128];
  kstage_fortran_name(name, sizeof name, what, what_length);
  kstage_status_t st = check_array(a, name);
  if (st != KSTAGE_OK) return st;
  DLDataType dtype;
  st = element_dtype(a, unsigned_ints, name, &dtype);
  if (st != KSTAGE_OK) return st;
  for (int d = 0; d < a->rank; ++d) {
    const int axis = a->rank - 1 - d;
    shape[d] = (int64_t)extent_of(a, axis);
    st = element_stride(a, axis, name, &strides[d]);
    if (st != KSTAGE_OK) return st;
  }
  memset(tensor, 0, sizeof *tensor);
  tensor->data = a->base_addr;
  tensor->device.device_type = kDLCPU;
  tensor->device.device_id = 0;
  tensor->ndim = a->rank;
  tensor->dtype = dtype;
  tensor->shape = shape;
  tensor->strides = strides;
  tensor->byte_offset = 0;
  return KSTAGE_OK;
}

/* Entry i of a rank-1 integer array, as int64. */
static int64_t integer_at(const CFI_cdesc_t* a, CFI_index_t i) {
  const char* p = (const char*)a->base_addr + i * a->dim[0].sm;
  switch (a->elem_len) {
    case 1: {
      int8_t v;
      memcpy(&v, p, 1);
      return v;
    }
    case 2: {
      int16_t v;
      memcpy(&v, p, 2);
      return v;
    }
    case 4: {
      int32_t v;
      memcpy(&v, p, 4);
      return v;
    }
    default: {
      int64_t v;
      memcpy(&v, p, 8);
      return v;
    }
  }
}

static kstage_status_t check_integer_vector(const CFI_cdesc_t* a, const char* what) {
  kstage_status_t st = check_array(a, what);
  if (st != KSTAGE_OK) return st;
  if (a->rank != 1) {
    return kstage_fortran_fail(KSTAGE_INVALID_ARGUMENT, "%s: rank %d; it must be a vector (rank 1)",
                               what, (int)a->rank);
  }
  if (!is_integer_type(a->type) ||
      (a->elem_len != 1 && a->elem_len != 2 && a->elem_len != 4 && a->elem_len != 8)) {
    return kstage_fortran_fail(KSTAGE_INVALID_ARGUMENT,
                               "%s: not an integer array (element type %d, %zu bytes)", what,
                               (int)a->type, a->elem_len);
  }
  return KSTAGE_OK;
}

/*
 * A Fortran index map (1-based source rows, integer of any kind) as kstage's (0-based uint32):
 * map(i) = j names source row j, 1 <= j <= rows; out[i - 1] = j - 1. `count` entries of `map`
 * (its size, checked by the caller) are read.
 */
kstage_status_t kstage_fortran_index_map(const CFI_cdesc_t* map, int64_t rows, uint32_t* out,
                                         const char* what, size_t what_length) {
  char name[128];
  kstage_fortran_name(name, sizeof name, what, what_length);
  kstage_status_t st = check_integer_vector(map, name);
  if (st != KSTAGE_OK) return st;
  const CFI_index_t n = extent_of(map, 0);
  for (CFI_index_t i = 0; i < n; ++i) {
    const int64_t row = integer_at(map, i);
    if (row < 1 || row > rows || row > (int64_t)UINT32_MAX + 1) {
      return kstage_fortran_fail(
          KSTAGE_INVALID_ARGUMENT,
          "%s(%lld) = %lld is not a source row: the array has %lld rows, numbered from 1 "
          "(the Fortran layer's index maps count from 1)",
          name, (long long)(i + 1), (long long)row, (long long)rows);
    }
    out[i] = (uint32_t)(row - 1);
  }
  return KSTAGE_OK;
}

/*
 * A packed ragged write: `values` (rank 1: the elements; rank 2: (lanes, elements)) holds the rows
 * one after the other, row i being the next counts(i) elements of its last axis. tensors, shapes
 * and strides (n, 2n and 2n entries, the caller's) receive one tensor per row, pointing into
 * `values`.
 */
kstage_status_t kstage_fortran_split_rows(const CFI_cdesc_t* values, const CFI_cdesc_t* counts,
                                          int32_t unsigned_ints, const char* what,
                                          size_t what_length, DLTensor* tensors, int64_t* shapes,
                                          int64_t* strides) {
  char name[128], counts_name[160];
  kstage_fortran_name(name, sizeof name, what, what_length);
  snprintf(counts_name, sizeof counts_name, "%s: row_counts", name);
  kstage_status_t st = check_array(values, name);
  if (st == KSTAGE_OK) st = check_integer_vector(counts, counts_name);
  if (st != KSTAGE_OK) return st;
  if (values->rank > 2) {
    return kstage_fortran_fail(KSTAGE_INVALID_ARGUMENT,
                               "%s: rank %d; packed rows are rank 1 (elements) or 2 (lanes, "
                               "elements)",
                               name, (int)values->rank);
  }
  DLDataType dtype;
  st = element_dtype(values, unsigned_ints, name, &dtype);
  if (st != KSTAGE_OK) return st;
  const int last = values->rank - 1;
  int64_t element_stride_last = 0, lane_stride = 0;
  st = element_stride(values, last, name, &element_stride_last);
  if (st == KSTAGE_OK && values->rank == 2) st = element_stride(values, 0, name, &lane_stride);
  if (st != KSTAGE_OK) return st;
  const int64_t elements = (int64_t)extent_of(values, last);
  const CFI_index_t n = extent_of(counts, 0);
  int64_t start = 0;
  for (CFI_index_t i = 0; i < n; ++i) {
    const int64_t c = integer_at(counts, i);
    if (c < 0) {
      return kstage_fortran_fail(KSTAGE_INVALID_ARGUMENT,
                                 "%s(%lld) = %lld: a row count cannot be negative", counts_name,
                                 (long long)(i + 1), (long long)c);
    }
    if (c > elements - start) {
      return kstage_fortran_fail(KSTAGE_INVALID_ARGUMENT,
                                 "%s(%lld) = %lld: rows 1 to %lld take %lld elements, more than "
                                 "the %lld that the values hold",
                                 counts_name, (long long)(i + 1), (long long)c, (long long)(i + 1),
                                 (long long)(start + c), (long long)elements);
    }
    DLTensor* t = &tensors[i];
    memset(t, 0, sizeof *t);
    t->data =
        values->base_addr == NULL ? NULL : (char*)values->base_addr + start * values->dim[last].sm;
    t->device.device_type = kDLCPU;
    t->ndim = values->rank;
    t->dtype = dtype;
    shapes[2 * i] = c;
    strides[2 * i] = element_stride_last;
    if (values->rank == 2) {
      shapes[2 * i + 1] = (int64_t)extent_of(values, 0);
      strides[2 * i + 1] = lane_stride;
    }
    t->shape = &shapes[2 * i];
    t->strides = &strides[2 * i];
    start += c;
  }
  if (start != elements) {
    return kstage_fortran_fail(KSTAGE_INVALID_ARGUMENT,
                               "%s: the %lld row counts sum to %lld elements, but the values "
                               "hold %lld",
                               counts_name, (long long)n, (long long)start, (long long)elements);
  }
  return KSTAGE_OK;
}

/* One row of a ragged write as Fortran's type(kstage_row) holds it (kstage.f90). */
typedef struct kstage_fortran_row_t {
  void* data;
  DLDataType dtype;
  int32_t ndim;
  int64_t shape[2];
  int64_t strides[2];
} kstage_fortran_row_t;

/* The row of `a` (rank 1: elements; rank 2: (lanes, elements)), pointing into it. */
kstage_status_t kstage_fortran_row(const CFI_cdesc_t* a, int32_t unsigned_ints, const char* what,
                                   size_t what_length, kstage_fortran_row_t* row) {
  char name[128];
  kstage_fortran_name(name, sizeof name, what, what_length);
  kstage_status_t st = check_array(a, name);
  if (st != KSTAGE_OK) return st;
  if (a->rank > 2) {
    return kstage_fortran_fail(KSTAGE_INVALID_ARGUMENT,
                               "%s: rank %d; a row is rank 1 (elements) or 2 (lanes, elements)",
                               name, (int)a->rank);
  }
  DLTensor t;
  int64_t shape[KSTAGE_FORTRAN_MAX_RANK], strides[KSTAGE_FORTRAN_MAX_RANK];
  st = kstage_fortran_tensor(a, unsigned_ints, what, what_length, &t, shape, strides);
  if (st != KSTAGE_OK) return st;
  memset(row, 0, sizeof *row);
  row->data = t.data;
  row->dtype = t.dtype;
  row->ndim = t.ndim;
  for (int d = 0; d < t.ndim; ++d) {
    row->shape[d] = shape[d];
    row->strides[d] = strides[d];
  }
  return KSTAGE_OK;
}

/* The tensors of `n` rows: tensors, shapes and strides (n, 2n, 2n entries) are the caller's. */
void kstage_fortran_row_tensors(const kstage_fortran_row_t* rows, int64_t n, DLTensor* tensors,
                                int64_t* shapes, int64_t* strides) {
  for (int64_t i = 0; i < n; ++i) {
    DLTensor* t = &tensors[i];
    memset(t, 0, sizeof *t);
    t->data = rows[i].data;
    t->device.device_type = kDLCPU;
    t->ndim = rows[i].ndim;
    t->dtype = rows[i].dtype;
    shapes[2 * i] = rows[i].shape[0];
    shapes[2 * i + 1] = rows[i].shape[1];
    strides[2 * i] = rows[i].strides[0];
    strides[2 * i + 1] = rows[i].strides[1];
    t->shape = &shapes[2 * i];
    t->strides = &strides[2 * i];
  }
}
