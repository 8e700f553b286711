// SPDX-License-Identifier: Apache-2.0
// Ragged pack / unpack kernel (internal; not installed): one variable-length
// row per work item, moved with the widest word every row allows.
#pragma once

#include "core/kernels/copy_ops.hpp"

#include <Kokkos_Core.hpp>

#include <cstring>
#include <type_traits>

namespace kstage::core::kernels {
namespace impl {

template <class Word>
struct RaggedCopyFunctor {
  std::byte* dst;
  const uint64_t* dst_offsets;
  const std::byte* const* src_rows;
  const uint64_t* bytes;

  KOKKOS_INLINE_FUNCTION void operator()(const size_t i) const {
    Word* out = reinterpret_cast<Word*>(dst + dst_offsets[i]);
    const Word* in = reinterpret_cast<const Word*>(src_rows[i]);
    const size_t words = bytes[i] / sizeof(Word);
    for (size_t w = 0; w < words; ++w) out[w] = in[w];
  }
};

// Host execution: short rows (up to 64 bytes, the common ragged row of a few elements) are
// copied inline, a row of 4 to 64 bytes as two copies of 4, 8, 16 or 32 bytes that overlap
// where the length is not twice that (shorter rows byte by byte); longer ones through the C
// library's memcpy. A memcpy call per short row costs more than the row's copy (measured:
// CHANGELOG.md, 0.3.0, Performance); a memcpy of a constant size is plain moves.
inline void copy_short_row(std::byte* d, const std::byte* s, size_t n) {
  if (n >= 32) {
    std::memcpy(d, s, 32);
    std::memcpy(d + n - 32, s + n - 32, 32);
  } else if (n >= 16) {
    std::memcpy(d, s, 16);
    std::memcpy(d + n - 16, s + n - 16, 16);
  } else if (n >= 8) {
    std::memcpy(d, s, 8);
    std::memcpy(d + n - 8, s + n - 8, 8);
  } else if (n >= 4) {
    std::memcpy(d, s, 4);
    std::memcpy(d + n - 4, s + n - 4, 4);
  } else if (n > 0) {
    d[0] = s[0];
    d[n / 2] = s[n / 2];
    d[n - 1] = s[n - 1];
  }
}

struct HostRaggedCopyFunctor {
  std::byte* dst;
  const uint64_t* dst_offsets;
  const std::byte* const* src_rows;
  const uint64_t* bytes;

  void operator()(const size_t i) const {
    const uint64_t n = bytes[i];
    if (n <= 64) copy_short_row(dst + dst_offsets[i], src_rows[i], size_t(n));
    else std::memcpy(dst + dst_offsets[i], src_rows[i], n);
  }
};

template <class Word, class Exec>
void launch_ragged(const Exec& exec, const RaggedCopy& c) {
  using Policy = Kokkos::RangePolicy<Exec, Kokkos::IndexType<size_t>>;
  // Host execution spaces only (not a device whose memory the host can also read, as UVM).
  if constexpr (std::is_same_v<typename Exec::memory_space, Kokkos::HostSpace>) {
    Kokkos::parallel_for("kstage::ragged_copy", Policy(exec, 0, c.n),
                         HostRaggedCopyFunctor{c.dst, c.dst_offsets, c.src_rows, c.bytes});
  } else {
    Kokkos::parallel_for("kstage::ragged_copy", Policy(exec, 0, c.n),
                         RaggedCopyFunctor<Word>{c.dst, c.dst_offsets, c.src_rows, c.bytes});
  }
}

}  // namespace impl

// `word` is the widest word size (1, 2, 4 or 8) dividing every row's length,
// source address and destination offset; the engine computes it once per
// batch while it builds the offsets.
template <class Exec>
void ragged_copy(const Exec& exec, const RaggedCopy& c, size_t word) {
  if (c.n == 0) return;
  switch (word) {
    case 8: return impl::launch_ragged<uint64_t>(exec, c);
    case 4: return impl::launch_ragged<uint32_t>(exec, c);
    case 2: return impl::launch_ragged<uint16_t>(exec, c);
    default: return impl::launch_ragged<uint8_t>(exec, c);
  }
}

}  // namespace kstage::core::kernels
