// SPDX-License-Identifier: Apache-2.0
// Decoding one DLTensor handed in by a writer: validate it, fold trailing axes
// into the tuple width (the convenience layouts), and classify its memory
// layout so the staging copy reads it correctly whatever its strides.
#pragma once

#include "core/kernels/copy_ops.hpp"
#include "core/status.hpp"

#include <string>

namespace kstage::core {

struct SourceTensor {
  enum class Layout {
    Compact,     // rows back to back: row r at base + r*row_bytes
    RowStrided,  // each row contiguous, rows row_stride_bytes apart (may be 0 or negative)
    Strided      // rows not internally contiguous: element-wise copy via `strided`
  };

  const std::byte* base = nullptr;  // data + byte_offset
  DLDevice device{};
  DLDataType dtype{};    // folded: lanes = tuple width
  uint64_t rows = 0;     // leading extent
  size_t row_bytes = 0;  // bytes of one folded tuple
  Layout layout = Layout::Compact;
  int64_t row_stride_bytes = 0;
  const DLTensor* tensor = nullptr;  // what it was decoded from (Layout::Strided reads its axes)
};

// An element-wise copy of a non-compact source (Strided: every axis; RowStrided: rows as one
// strided axis), dst left empty. Built on demand: a SourceTensor stays small, because a ragged
// write decodes one per row.
kernels::StridedCopy strided_copy_of(const SourceTensor& s);

// Decodes `t` into `out` (left unspecified on failure). Messages name the tensor `kind[index]`
// ("tensors[0]", "managed_tensors[2]").
Status decode_source_tensor(const DLTensor* t, const char* kind, size_t index, SourceTensor& out);

// The common row tensor of a ragged write, checked inline (a write of 1e6 rows checks 1e6 of
// them): 1-D, compact, non-empty, with the `dtype` and `device` of the write's first tensor.
// Sets `base` and `rows` and returns true for such a tensor; returns false for any other, which
// decode_source_tensor then decodes in full (and names what is wrong with it).
inline bool decode_compact_row(const DLTensor* t, DLDataType dtype, DLDevice device,
                               size_t elem_bytes, const std::byte*& base, uint64_t& rows) {
  if (t->ndim != 1 || t->shape == nullptr || t->data == nullptr) return false;
  if (t->dtype.code != dtype.code || t->dtype.bits != dtype.bits || t->dtype.lanes != dtype.lanes ||
      t->device.device_type != device.device_type || t->device.device_id != device.device_id)
    return false;
  const int64_t n = t->shape[0];
  // (strides first: almost always NULL, so no branch on the row's length, which varies.)
  if (n <= 0 || (t->strides != nullptr && t->strides[0] != 1 && n > 1)) return false;
  // The bytes read, [data + byte_offset, + n * elem_bytes), are addresses: no wrap. An element
  // is at most 255 lanes of 16 bytes (< 2^12), so below 2^50 rows n * elem_bytes < 2^62 (no
  // division per row); larger rows take the full decoding.
  const uintptr_t data = reinterpret_cast<uintptr_t>(t->data);
  if (uint64_t(n) >= (uint64_t(1) << 50) || t->byte_offset > UINTPTR_MAX - data ||
      uint64_t(n) * elem_bytes > UINTPTR_MAX - (data + uintptr_t(t->byte_offset)))
    return false;
  base = static_cast<const std::byte*>(t->data) + t->byte_offset;
  rows = uint64_t(n);
  return true;
}

}  // namespace kstage::core
