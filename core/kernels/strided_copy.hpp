// SPDX-License-Identifier: Apache-2.0
// Strided tensor -> compact copy (internal; not installed). For sources whose
// rows are not internally contiguous (a column slice of a wider array,
// transposed views, broadcast strides of 0, negative strides).
#pragma once

#include "core/kernels/copy_ops.hpp"

#include <Kokkos_Core.hpp>

namespace kstage::core::kernels {
namespace impl {

template <class Word>
struct StridedCopyFunctor {
  StridedCopy c;
  size_t words;

  KOKKOS_INLINE_FUNCTION void operator()(const size_t linear) const {
    // Decompose the row-major linear index into a multi-index, innermost first.
    size_t rest = linear;
    int64_t offset = 0;
    for (int d = c.ndim - 1; d >= 0; --d) {
      const size_t extent = size_t(c.shape[d]);
      offset += int64_t(rest % extent) * c.byte_strides[d];
      rest /= extent;
    }
    Word* out = reinterpret_cast<Word*>(c.dst + linear * c.elem_bytes);
    const Word* in = reinterpret_cast<const Word*>(c.src + offset);
    for (size_t w = 0; w < words; ++w) out[w] = in[w];
  }
};

template <class Word, class Exec>
void launch_strided(const Exec& exec, const StridedCopy& c, size_t total) {
  StridedCopyFunctor<Word> f{c, c.elem_bytes / sizeof(Word)};
  Kokkos::parallel_for("kstage::strided_copy",
                       Kokkos::RangePolicy<Exec, Kokkos::IndexType<size_t>>(exec, 0, total), f);
}

}  // namespace impl

template <class Exec>
void strided_copy(const Exec& exec, const StridedCopy& c) {
  size_t total = 1;
  for (int d = 0; d < c.ndim; ++d) total *= size_t(c.shape[d]);
  if (total == 0 || c.elem_bytes == 0) return;
  uint64_t bits = uint64_t(c.elem_bytes) | reinterpret_cast<uintptr_t>(c.src) |
                  reinterpret_cast<uintptr_t>(c.dst) | 8u;
  for (int d = 0; d < c.ndim; ++d) bits |= uint64_t(c.byte_strides[d]);
  switch (widest_word(bits)) {
    case 8: return impl::launch_strided<uint64_t>(exec, c, total);
    case 4: return impl::launch_strided<uint32_t>(exec, c, total);
    case 2: return impl::launch_strided<uint16_t>(exec, c, total);
    default: return impl::launch_strided<uint8_t>(exec, c, total);
  }
}

}  // namespace kstage::core::kernels
