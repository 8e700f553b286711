// SPDX-License-Identifier: Apache-2.0
// Descriptors of the data-movement kernels, as plain structs the engine fills
// and a backend runs. Data pointers are in memory the backend's execution
// space can reach; index, offset and row-pointer arrays are host memory (a
// device backend uploads them before launching). Byte strides are signed so
// that DLPack tensors with negative strides are read correctly.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kstage::core::kernels {

// Row gather/scatter: for i in [0, n):
//   dst[d(i)] = src[s(i)],  d(i) = dst_index ? dst_index[i] : i,
//                            s(i) = src_index ? src_index[i] : src_period ? i % src_period : i,
// where row r of dst starts at dst + r*dst_stride and of src at src + r*src_stride.
// Gather: src_index set. Scatter: dst_index set. Both: fused gather-scatter. A periodic
// source (src_period, no src_index) repeats its src_period rows over the n rows: a clone's
// source rows copied target after target, with no index made, uploaded or read.
struct RowCopy {
  std::byte* dst = nullptr;
  int64_t dst_stride = 0;
  const uint32_t* dst_index = nullptr;
  const std::byte* src = nullptr;
  int64_t src_stride = 0;
  const uint32_t* src_index = nullptr;
  // A device index_map64 (checked_gather_report only): the source index as int64 entries,
  // instead of src_index.
  const int64_t* src_index64 = nullptr;
  size_t src_period = 0;  // without src_index: row i reads source row i % src_period; 0: i
  size_t n = 0;
  size_t row_bytes = 0;
  // dst_index and src_index are already in the backend's memory (a column's
  // cached row map, uploaded once); otherwise they are host memory.
  bool indices_resident = false;
};

// Mask compaction, optionally with a gather. For every set bit e of
// mask[0, n) (bit e % 64 of word e / 64), in increasing order of e, at output
// position j (the number of set bits before e):
//   selected[j] = e,  and, when dst is set, row j of dst = row e of src,
// with dst rows packed (row_bytes apart) and src row r at src + r*src_stride.
// Bits at and above n in the last word are ignored. The mask and `selected`
// are host memory (a device backend moves them); `selected` has room for
// mask_popcount(mask, n) entries, or is null when dst is set and nothing needs
// the positions (a device mask's gather: the host reads the mask itself).
struct MaskedGather {
  const uint64_t* mask = nullptr;
  size_t n = 0;  // bits
  uint32_t* selected = nullptr;
  std::byte* dst = nullptr;
  const std::byte* src = nullptr;
  int64_t src_stride = 0;
  size_t row_bytes = 0;
};

// Bits of word w of a mask of n bits that count (the tail of the last word does not).
inline uint64_t mask_word(const uint64_t* mask, size_t n, size_t w) {
  const uint64_t bits = mask[w];
  return (w == n / 64 && n % 64) ? bits & ((uint64_t(1) << (n % 64)) - 1) : bits;
}
// Set bits of a word without the POPCNT instruction, which portable builds
// (no -march) cannot assume: __builtin_popcountll would call into libgcc.
constexpr size_t popcount_word(uint64_t x) {
  x = x - ((x >> 1) & 0x5555555555555555ull);
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Full;
  return size_t((x * 0x0101010101010101ull) >> 56);
}
inline size_t mask_popcount(const uint64_t* mask, size_t n) {
  size_t k = 0;
  for (size_t w = 0, words = (n + 63) / 64; w < words; ++w)
    k += popcount_word(mask_word(mask, n, w));
  return k;
}

// The positions of the set bits of mask[0, n), in increasing order, into
// `selected` (host memory); returns how many. What a device backend does on
// the host before its gather, since the mask is host memory.
inline size_t select_mask_bits(const uint64_t* mask, size_t n, uint32_t* selected) {
  size_t k = 0;
  for (size_t w = 0, words = (n + 63) / 64; w < words; ++w)
    for (uint64_t bits = mask_word(mask, n, w); bits; bits &= bits - 1)
      selected[k++] = uint32_t(w * 64 + size_t(__builtin_ctzll(bits)));
  return k;
}

// Ragged pack/unpack: for each row i in [0, n), copy bytes[i] bytes from
// src_rows[i] to dst + dst_offsets[i]. Packing per-row tensors into one
// buffer and scattering a packed buffer into column storage are both this.
struct RaggedCopy {
  std::byte* dst = nullptr;
  const uint64_t* dst_offsets = nullptr;  // bytes
  const std::byte* const* src_rows = nullptr;
  const uint64_t* bytes = nullptr;
  size_t n = 0;
};

// Ragged rows start on 8-byte boundaries so every element type (complex128
// included) is naturally aligned for consumers; staging, column storage and
// compact reads all lay rows out this way.
constexpr uint64_t kRaggedRowAlign = 8;
inline uint64_t ragged_align_up(uint64_t bytes) {
  return (bytes + kRaggedRowAlign - 1) & ~(kRaggedRowAlign - 1);
}
// The widest word (<= 8 bytes) dividing every address, offset and length
// OR-ed into `bits` (start from kRaggedRowAlign): the `word` of ragged_copy.
inline size_t widest_word(uint64_t bits) { return size_t(bits & (~bits + 1)); }

// General strided tensor -> compact row-major copy, element by element.
// Only used for sources whose rows are not internally contiguous.
struct StridedCopy {
  static constexpr int kMaxDims = 8;
  std::byte* dst = nullptr;
  const std::byte* src = nullptr;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t byte_strides[kMaxDims] = {};
  size_t elem_bytes = 0;
};

}  // namespace kstage::core::kernels
