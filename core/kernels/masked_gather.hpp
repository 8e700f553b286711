// SPDX-License-Identifier: Apache-2.0
// Mask compaction with gather (internal; not installed): one pass over the
// mask's 64-bit words, each work item writing the positions of its set bits
// and, when asked, copying their rows. Output positions come from an
// exclusive scan of the words' popcounts, so the result is in element order
// whatever the number of threads.
#pragma once

#include "core/kernels/row_copy.hpp"

namespace kstage::core::kernels {
namespace impl {

// Bit counting in kernels: the device intrinsics when compiled for a GPU,
// else portable code (ctz compiles to one instruction everywhere).
KOKKOS_FORCEINLINE_FUNCTION size_t popcount64(uint64_t x) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return size_t(__popcll(x));
#else
  return popcount_word(x);
#endif
}
KOKKOS_FORCEINLINE_FUNCTION size_t ctz64(uint64_t x) {  // x != 0
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return size_t(__ffsll((long long)x) - 1);
#else
  return size_t(__builtin_ctzll(x));
#endif
}

// CopyRows == false: positions only (Word and Words unused).
template <class Word, int Words, bool CopyRows>
struct MaskedGatherFunctor {
  const uint64_t* mask;
  size_t n;
  uint32_t* selected;
  std::byte* dst;
  const std::byte* src;
  int64_t src_stride;
  size_t row_bytes;

  KOKKOS_INLINE_FUNCTION void operator()(const size_t w, size_t& offset, const bool final) const {
    uint64_t bits = mask[w];
    if (w == n / 64 && n % 64) bits &= (uint64_t(1) << (n % 64)) - 1;
    const size_t count = popcount64(bits);
    if (final) {
      // Locals, not members, in the row loop (see CheckedGatherFunctor).
      uint32_t* const out = selected;
      std::byte* const d = dst;
      const std::byte* const s = src;
      const int64_t stride = src_stride;
      const size_t rb = row_bytes;
      size_t j = offset;
      while (bits) {
        const size_t e = w * 64 + ctz64(bits);
        if (!CopyRows || out != nullptr) out[j] = uint32_t(e);
        if constexpr (CopyRows)
          copy_row<Word, Words>(d + j * rb, s + int64_t(e) * stride, rb / sizeof(Word));
        ++j;
        bits &= bits - 1;
      }
    }
    offset += count;
  }
};

template <class Word, int Words, bool CopyRows, class Exec>
void launch_masked(const Exec& exec, const MaskedGather& c) {
  MaskedGatherFunctor<Word, Words, CopyRows> f{c.mask, c.n,          c.selected, c.dst,
                                               c.src,  c.src_stride, c.row_bytes};
  Kokkos::parallel_scan(
      "kstage::masked_gather",
      Kokkos::RangePolicy<Exec, Kokkos::IndexType<size_t>>(exec, 0, (c.n + 63) / 64), f);
}

}  // namespace impl

// Runs `c` on `exec`. Returns when the work is enqueued (host spaces: done).
template <class Exec>
void masked_gather(const Exec& exec, const MaskedGather& c) {
  if (c.n == 0) return;
  using namespace impl;
  if (c.dst == nullptr || c.row_bytes == 0) return launch_masked<uint8_t, 0, false>(exec, c);
  const uint64_t bits = reinterpret_cast<uintptr_t>(c.dst) | reinterpret_cast<uintptr_t>(c.src) |
                        uint64_t(c.src_stride);
  dispatch_row_width(row_word(c.row_bytes, bits), c.row_bytes, [&](auto word, auto words) {
    launch_masked<decltype(word), decltype(words)::value, true>(exec, c);
  });
}

}  // namespace kstage::core::kernels
