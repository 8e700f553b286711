// SPDX-License-Identifier: Apache-2.0
// Row gather / scatter kernels (internal; not installed).
//
// Rows are moved as arrays of machine words. The functor is specialised on the
// word type and the number of words per row, so the common tuple widths
// (float, float3, double3, float4x4, ...) compile to straight-line loads and
// stores; other widths use the runtime-width functor. Dispatch is on byte
// width and alignment, never on dtype: float3 and int32x3 share one kernel.
#pragma once

#include "core/kernels/copy_ops.hpp"

#include <Kokkos_Core.hpp>

#include <cstring>

namespace kstage::core::kernels {
namespace impl {

// Words == 0: row width known only at run time (row_words).
template <class Word, int Words, bool DstIndexed, bool SrcIndexed>
struct RowCopyFunctor {
  std::byte* dst;
  int64_t dst_stride;
  const uint32_t* dst_index;
  const std::byte* src;
  int64_t src_stride;
  const uint32_t* src_index;
  size_t row_words;

  KOKKOS_INLINE_FUNCTION void operator()(const size_t i) const {
    const int64_t d = DstIndexed ? int64_t(dst_index[i]) : int64_t(i);
    const int64_t s = SrcIndexed ? int64_t(src_index[i]) : int64_t(i);
    Word* out = reinterpret_cast<Word*>(dst + d * dst_stride);
    const Word* in = reinterpret_cast<const Word*>(src + s * src_stride);
    if constexpr (Words > 0) {
      for (int w = 0; w < Words; ++w) out[w] = in[w];
    } else {
      for (size_t w = 0; w < row_words; ++w) out[w] = in[w];
    }
  }
};

template <class Word, int Words, bool D, bool S, class Exec>
void launch_row_copy(const Exec& exec, const RowCopy& c) {
  RowCopyFunctor<Word, Words, D, S> f{c.dst,        c.dst_stride, c.dst_index,
                                      c.src,        c.src_stride, c.src_index,
                                      c.row_bytes / sizeof(Word)};
  Kokkos::parallel_for("kstage::row_copy",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<size_t>>(exec, 0, c.n), f);
}

template <class Word, int Words, class Exec>
void launch_indexed(const Exec& exec, const RowCopy& c) {
  const bool d = c.dst_index != nullptr, s = c.src_index != nullptr;
  if (d && s) launch_row_copy<Word, Words, true, true>(exec, c);
  else if (d) launch_row_copy<Word, Words, true, false>(exec, c);
  else if (s) launch_row_copy<Word, Words, false, true>(exec, c);
  else launch_row_copy<Word, Words, false, false>(exec, c);
}

inline size_t word_alignment(const RowCopy& c) {
  // The widest word (<= 8 bytes) that divides the row width, both bases and both strides.
  uint64_t bits = uint64_t(c.row_bytes) | reinterpret_cast<uintptr_t>(c.dst) |
                  reinterpret_cast<uintptr_t>(c.src) | uint64_t(c.dst_stride) |
                  uint64_t(c.src_stride) | 8u;
  return widest_word(bits);
}

}  // namespace impl

// Runs `c` on `exec`. Returns when the work is enqueued (host spaces: done).
template <class Exec>
void row_copy(const Exec& exec, const RowCopy& c) {
  if (c.n == 0 || c.row_bytes == 0) return;
  using namespace impl;
  const size_t word = word_alignment(c);
  // Specialised widths: the tuple sizes attribute data actually has.
  if (word == 8) {
    switch (c.row_bytes) {
      case 8: return launch_indexed<uint64_t, 1>(exec, c);
      case 16: return launch_indexed<uint64_t, 2>(exec, c);
      case 24: return launch_indexed<uint64_t, 3>(exec, c);
      case 32: return launch_indexed<uint64_t, 4>(exec, c);
      case 48: return launch_indexed<uint64_t, 6>(exec, c);
      case 64: return launch_indexed<uint64_t, 8>(exec, c);
      case 72: return launch_indexed<uint64_t, 9>(exec, c);
      case 128: return launch_indexed<uint64_t, 16>(exec, c);
      default: return launch_indexed<uint64_t, 0>(exec, c);
    }
  }
  if (word == 4) {
    switch (c.row_bytes) {
      case 4: return launch_indexed<uint32_t, 1>(exec, c);
      case 12: return launch_indexed<uint32_t, 3>(exec, c);
      case 36: return launch_indexed<uint32_t, 9>(exec, c);
      default: return launch_indexed<uint32_t, 0>(exec, c);
    }
  }
  if (word == 2) {
    if (c.row_bytes == 2) return launch_indexed<uint16_t, 1>(exec, c);
    return launch_indexed<uint16_t, 0>(exec, c);
  }
  if (c.row_bytes == 1) return launch_indexed<uint8_t, 1>(exec, c);
  return launch_indexed<uint8_t, 0>(exec, c);
}

}  // namespace kstage::core::kernels
