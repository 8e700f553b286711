// SPDX-License-Identifier: Apache-2.0
// What every device backend does on the host before its kernels run, since
// the kernel descriptors' index, mask and per-row arrays are host memory
// (core/backend.hpp): checked gathers are validated here and masks selected
// here, so neither needs a result back from the device; ragged copies pack
// their three per-row arrays for one upload. The emulated device and the GPU
// backends derive from this; each supplies row_copy and its uploads.
#pragma once

#include "core/backend.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kstage::backends {

class DeviceBackend : public core::Backend {
 public:
  size_t checked_gather(const core::kernels::RowCopy& c, uint64_t src_rows) final {
    for (size_t i = 0; i < c.n; ++i)
      if (c.src_index[i] >= src_rows) return i;
    row_copy(c);
    return c.n;
  }

  void masked_gather(const core::kernels::MaskedGather& c) final {
    const size_t k = core::kernels::select_mask_bits(c.mask, c.n, c.selected);
    if (!c.dst) return;
    core::kernels::RowCopy r;
    r.dst = c.dst;
    r.dst_stride = int64_t(c.row_bytes);
    r.src = c.src;
    r.src_stride = c.src_stride;
    r.src_index = c.selected;
    r.n = k;
    r.row_bytes = c.row_bytes;
    row_copy(r);
  }

 protected:
  // dst_offsets, src_rows (as integers) and bytes of `c`, back to back, into the 3 * c.n
  // words at `to` (any alignment: an upload's staging block).
  static void pack_ragged(const core::kernels::RaggedCopy& c, std::byte* to) {
    auto put = [to](size_t word, uint64_t v) {
      std::memcpy(to + word * sizeof(uint64_t), &v, sizeof v);
    };
    for (size_t i = 0; i < c.n; ++i) {
      put(i, c.dst_offsets[i]);
      put(c.n + i, reinterpret_cast<uintptr_t>(c.src_rows[i]));
      put(2 * c.n + i, c.bytes[i]);
    }
  }
  // `c` with its per-row arrays read from `packed` (pack_ragged's layout, uploaded).
  static core::kernels::RaggedCopy with_packed(const core::kernels::RaggedCopy& c,
                                               const uint64_t* packed) {
    return core::kernels::RaggedCopy{c.dst, packed,
                                     reinterpret_cast<const std::byte* const*>(packed + c.n),
                                     packed + 2 * c.n, c.n};
  }
};

}  // namespace kstage::backends
