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
  DLDataType dtype{};     // folded: lanes = tuple width
  uint64_t rows = 0;      // leading extent
  size_t row_bytes = 0;   // bytes of one folded tuple
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

}  // namespace kstage::core
