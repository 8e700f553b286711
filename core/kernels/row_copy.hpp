// SPDX-License-Identifier: Apache-2.0
// Row gather / scatter kernels (internal; not installed).
//
// Rows are moved as arrays of machine words. The functors are specialised on
// the word type and the number of words per row, so the common tuple widths
// (float, float3, double3, float4x4, ...) compile to straight-line loads and
// stores; other widths use the runtime-width functor. Dispatch is on byte
// width and alignment, never on dtype: float3 and int32x3 share one kernel.
#pragma once

#include "core/kernels/copy_ops.hpp"

#include <Kokkos_Core.hpp>

#include <cstring>
#include <type_traits>

namespace kstage::core::kernels {
namespace impl {

// One row of `Words` words (Words == 0: `row_words`, known only at run time).
template <class Word, int Words>
KOKKOS_FORCEINLINE_FUNCTION void copy_row(std::byte* dst, const std::byte* src, size_t row_words) {
  Word* out = reinterpret_cast<Word*>(dst);
  const Word* in = reinterpret_cast<const Word*>(src);
  if constexpr (Words > 0) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    for (int w = 0; w < Words; ++w) out[w] = in[w];
#else
    // On the host, a copy of a constant size: the widest moves (a 12-byte row is 8 + 4 bytes,
    // not three 4-byte words; a random gather keeps more rows in flight).
    std::memcpy(out, in, Words * sizeof(Word));
#endif
  } else {
    for (size_t w = 0; w < row_words; ++w) out[w] = in[w];
  }
}

// The widest word (<= 8 bytes) dividing the row width and every address and
// stride OR-ed into `bits`.
inline size_t row_word(size_t row_bytes, uint64_t bits) {
  return widest_word(uint64_t(row_bytes) | bits | 8u);
}

// Calls f(Word{}, std::integral_constant<int, Words>{}) for rows of
// `row_bytes` moved in words of `word` bytes: the tuple sizes attribute data
// actually has get their own instantiation, the rest Words == 0.
template <class F>
void dispatch_row_width(size_t word, size_t row_bytes, F&& f) {
  using std::integral_constant;
  if (word == 8) {
    switch (row_bytes) {
      case 8: return f(uint64_t{}, integral_constant<int, 1>{});
      case 16: return f(uint64_t{}, integral_constant<int, 2>{});
      case 24: return f(uint64_t{}, integral_constant<int, 3>{});
      case 32: return f(uint64_t{}, integral_constant<int, 4>{});
      case 48: return f(uint64_t{}, integral_constant<int, 6>{});
      case 64: return f(uint64_t{}, integral_constant<int, 8>{});
      case 72: return f(uint64_t{}, integral_constant<int, 9>{});
      case 128: return f(uint64_t{}, integral_constant<int, 16>{});
      default: return f(uint64_t{}, integral_constant<int, 0>{});
    }
  }
  if (word == 4) {
    switch (row_bytes) {
      case 4: return f(uint32_t{}, integral_constant<int, 1>{});
      case 12: return f(uint32_t{}, integral_constant<int, 3>{});
      case 36: return f(uint32_t{}, integral_constant<int, 9>{});
      default: return f(uint32_t{}, integral_constant<int, 0>{});
    }
  }
  if (word == 2) {
    if (row_bytes == 2) return f(uint16_t{}, integral_constant<int, 1>{});
    return f(uint16_t{}, integral_constant<int, 0>{});
  }
  if (row_bytes == 1) return f(uint8_t{}, integral_constant<int, 1>{});
  return f(uint8_t{}, integral_constant<int, 0>{});
}

// Work item k moves rows [k * chunk, (k + 1) * chunk): one row per work item
// on a GPU (chunk 1), a chunk of rows on host execution (rows_per_item). The
// side that is not indexed is walked with a running pointer: two multiplies
// per row halved a strided scatter's speed on the host.
template <class Word, int Words, bool DstIndexed, bool SrcIndexed>
struct RowCopyFunctor {
  std::byte* dst;
  int64_t dst_stride;
  const uint32_t* dst_index;
  const std::byte* src;
  int64_t src_stride;
  const uint32_t* src_index;
  size_t row_words;
  size_t n, chunk;

  // The functor of `c`, `chunk` rows per work item.
  static RowCopyFunctor of(const RowCopy& c, size_t chunk) {
    return {c.dst,
            c.dst_stride,
            c.dst_index,
            c.src,
            c.src_stride,
            c.src_index,
            c.row_bytes / sizeof(Word),
            c.n,
            chunk};
  }

  KOKKOS_INLINE_FUNCTION void operator()(const size_t k) const {
    const size_t begin = k * chunk, end = begin + chunk < n ? begin + chunk : n;
    std::byte* const d0 = dst;
    const std::byte* const s0 = src;
    const uint32_t* const di = dst_index;
    const uint32_t* const si = src_index;
    const int64_t ds = dst_stride, ss = src_stride;
    const size_t words = row_words;
    // A side that is not indexed walks a running pointer: no multiply per row
    // (advanced between rows only, so never past the last row's address).
    if (begin >= end) return;
    std::byte* dp = d0 + (DstIndexed ? 0 : int64_t(begin) * ds);
    const std::byte* sp = s0 + (SrcIndexed ? 0 : int64_t(begin) * ss);
    if constexpr (SrcIndexed && !DstIndexed && Words > 0) {
      // A gather from compact rows: their stride is the row width, a constant (a multiply by a
      // register per row lengthens each row's address chain and slows a random gather).
      constexpr int64_t kRow = int64_t(Words * sizeof(Word));
      if (ss == kRow) {
        for (size_t i = begin;;) {
          copy_row<Word, Words>(dp, s0 + int64_t(si[i]) * kRow, words);
          if (++i == end) break;
          dp += ds;
        }
        return;
      }
    }
    for (size_t i = begin;;) {
      std::byte* const out = DstIndexed ? d0 + int64_t(di[i]) * ds : dp;
      const std::byte* const in = SrcIndexed ? s0 + int64_t(si[i]) * ss : sp;
      copy_row<Word, Words>(out, in, words);
      if (++i == end) break;
      if (!DstIndexed) dp += ds;
      if (!SrcIndexed) sp += ss;
    }
  }
};

// Rows per work item: one on a device; on host execution up to 1024, and at
// most an eighth of each thread's share (a few thousand rows still spread
// over every core).
template <class Exec>
size_t rows_per_item(const Exec& exec, size_t n) {
  if constexpr (!std::is_same_v<typename Exec::memory_space, Kokkos::HostSpace>) {
    return 1;
  } else {
    const size_t share = n / (8 * size_t(exec.concurrency() > 0 ? exec.concurrency() : 1));
    return share < 1 ? 1 : share > 1024 ? 1024 : share;
  }
}

template <class Word, int Words, bool D, bool S, class Exec>
void launch_row_copy(const Exec& exec, const RowCopy& c) {
  const size_t chunk = rows_per_item(exec, c.n);
  Kokkos::parallel_for(
      "kstage::row_copy",
      Kokkos::RangePolicy<Exec, Kokkos::IndexType<size_t>>(exec, 0, (c.n + chunk - 1) / chunk),
      RowCopyFunctor<Word, Words, D, S>::of(c, chunk));
}

// A gather from a periodic source (RowCopy::src_period): row i reads source row i % period,
// the destination walked or indexed as in RowCopyFunctor. A work item keeps the source row
// in a counter (no division per row). On the host, compact rows on both sides move as runs:
// source rows j .. period - 1 are one block of bytes, copied at once (a clone of a 20-prim
// environment moves 20 rows per copy, not one).
template <class Word, int Words, bool DstIndexed>
struct PeriodicGatherFunctor {
  std::byte* dst;
  int64_t dst_stride;
  const uint32_t* dst_index;
  const std::byte* src;
  int64_t src_stride;
  size_t period;
  size_t row_words;
  size_t n, chunk;

  // The functor of `c` (src_period set), `chunk` rows per work item.
  static PeriodicGatherFunctor of(const RowCopy& c, size_t chunk) {
    return {c.dst,
            c.dst_stride,
            c.dst_index,
            c.src,
            c.src_stride,
            c.src_period,
            c.row_bytes / sizeof(Word),
            c.n,
            chunk};
  }

  KOKKOS_INLINE_FUNCTION void operator()(const size_t k) const {
    const size_t begin = k * chunk, end = begin + chunk < n ? begin + chunk : n;
    if (begin >= end) return;
    std::byte* const d0 = dst;
    const std::byte* const s0 = src;
    const uint32_t* const di = dst_index;
    const int64_t ds = dst_stride, ss = src_stride;
    const size_t words = row_words, p = period;
    size_t j = begin % p;  // the source row of row `begin`
#if !defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
    if constexpr (!DstIndexed) {
      const int64_t rb = int64_t(words * sizeof(Word));
      // (Blocks of a few rows gain nothing from a call per run: rows one by one below.)
      if (ds == rb && ss == rb && p * size_t(rb) >= kMinRunBytes) {
        std::byte* out = d0 + int64_t(begin) * rb;
        for (size_t i = begin; i < end;) {
          const size_t m = p - j < end - i ? p - j : end - i;
          std::memcpy(out, s0 + int64_t(j) * rb, m * size_t(rb));
          out += int64_t(m) * rb;
          i += m;
          j = 0;
        }
        return;
      }
    }
#endif
    std::byte* dp = d0 + (DstIndexed ? 0 : int64_t(begin) * ds);
    for (size_t i = begin;;) {
      copy_row<Word, Words>(DstIndexed ? d0 + int64_t(di[i]) * ds : dp, s0 + int64_t(j) * ss,
                            words);
      if (++i == end) break;
      if (++j == p) j = 0;
      if (!DstIndexed) dp += ds;
    }
  }
  static constexpr size_t kMinRunBytes = 256;
};

template <class Word, int Words, bool D, class Exec>
void launch_periodic_gather(const Exec& exec, const RowCopy& c) {
  const size_t chunk = rows_per_item(exec, c.n);
  Kokkos::parallel_for(
      "kstage::periodic_gather",
      Kokkos::RangePolicy<Exec, Kokkos::IndexType<size_t>>(exec, 0, (c.n + chunk - 1) / chunk),
      PeriodicGatherFunctor<Word, Words, D>::of(c, chunk));
}

template <class Word, int Words, class Exec>
void launch_indexed(const Exec& exec, const RowCopy& c) {
  if (c.src_period != 0 && !c.src_index) {
    if (c.dst_index) launch_periodic_gather<Word, Words, true>(exec, c);
    else launch_periodic_gather<Word, Words, false>(exec, c);
    return;
  }
  const bool d = c.dst_index != nullptr, s = c.src_index != nullptr;
  if (d && s) launch_row_copy<Word, Words, true, true>(exec, c);
  else if (d) launch_row_copy<Word, Words, true, false>(exec, c);
  else if (s) launch_row_copy<Word, Words, false, true>(exec, c);
  else launch_row_copy<Word, Words, false, false>(exec, c);
}

// Gather that validates its index as it goes: rows whose src_index is out of
// range are skipped, and the reduction's result is (i << 32) | src_index[i]
// for the lowest such i (UINT64_MAX: none; n < 2^32), so that a device check
// reports the bad value without reading the index again. An int64 index
// (`Index`, a device index_map64) packs i << 32 only: its value does not fit,
// and is fetched after (IndexValue). A work item is a chunk of rows so that
// the reduction costs once per chunk and the row loop keeps its running
// minimum in a register.
template <class Word, int Words, class Index = uint32_t>
struct CheckedGatherFunctor {
  std::byte* dst;
  int64_t dst_stride;
  const std::byte* src;
  int64_t src_stride;
  const Index* src_index;
  uint64_t src_rows;
  size_t row_words;
  size_t n, chunk;

  KOKKOS_INLINE_FUNCTION void operator()(const size_t k, uint64_t& first_bad) const {
    const size_t begin = k * chunk, end = begin + chunk < n ? begin + chunk : n;
    if constexpr (Words > 0) {
      // Compact rows on both sides (the staging of a write always is): constant strides, as
      // in the row copy's gather.
      constexpr int64_t kRow = int64_t(Words * sizeof(Word));
      if (src_stride == kRow && dst_stride == kRow) {
        first_bad = gather<kRow>(begin, end, first_bad);
        return;
      }
    }
    first_bad = gather<0>(begin, end, first_bad);
  }

  // Rows [begin, end); returns the lowest packed bad entry seen (`bad` if none). `Stride`:
  // both strides, known at compile time; 0: the functor's.
  template <int64_t Stride>
  KOKKOS_FORCEINLINE_FUNCTION uint64_t gather(size_t begin, size_t end, uint64_t bad) const {
    // Locals, not members: the row stores could alias the functor as far as
    // the compiler knows, and reloading every member per row costs the loop
    // its memory-level parallelism.
    std::byte* const d = dst;
    const std::byte* const s0 = src;
    const Index* const index = src_index;
    const int64_t ds = Stride != 0 ? Stride : dst_stride, ss = Stride != 0 ? Stride : src_stride;
    const uint64_t rows = src_rows;
    const size_t words = row_words;
    int64_t out = int64_t(begin) * ds;  // a running offset: no multiply per row
    for (size_t i = begin; i < end; ++i, out += ds) {
      // (A negative int64 entry is above 2^63 as unsigned: out of range.)
      const uint64_t s = uint64_t(index[i]);
      if (s >= rows) {
        const uint64_t packed =
            (uint64_t(i) << 32) | (std::is_same_v<Index, uint32_t> ? s : uint64_t(0));
        if (packed < bad) bad = packed;
        continue;
      }
      copy_row<Word, Words>(d + out, s0 + int64_t(s) * ss, words);
    }
    return bad;
  }
};

template <class Word, int Words, class Index, class Exec, class Reducer>
void launch_checked_gather(const Exec& exec, const RowCopy& c, const Index* index,
                           uint64_t src_rows, const Reducer& into) {
  const size_t chunk = rows_per_item(exec, c.n);
  CheckedGatherFunctor<Word, Words, Index> f{
      c.dst, c.dst_stride, c.src, c.src_stride, index, src_rows, c.row_bytes / sizeof(Word),
      c.n,   chunk};
  Kokkos::parallel_reduce(
      "kstage::checked_gather",
      Kokkos::RangePolicy<Exec, Kokkos::IndexType<size_t>>(exec, 0, (c.n + chunk - 1) / chunk), f,
      into);
}

// After a checked gather through an int64 index: report[1] = index[i] for the bad i that
// report[0] names (i << 32), so that the host reads the value with the report.
struct IndexValue {
  const int64_t* index;
  uint64_t* report;
  KOKKOS_INLINE_FUNCTION void operator()(const int) const {
    if (report[0] != UINT64_MAX) report[1] = uint64_t(index[report[0] >> 32]);
  }
};

inline uint64_t address_bits(const RowCopy& c) {
  return reinterpret_cast<uintptr_t>(c.dst) | reinterpret_cast<uintptr_t>(c.src) |
         uint64_t(c.dst_stride) | uint64_t(c.src_stride);
}

}  // namespace impl

// Runs `c` on `exec`. Returns when the work is enqueued (host spaces: done).
template <class Exec>
void row_copy(const Exec& exec, const RowCopy& c) {
  if (c.n == 0 || c.row_bytes == 0) return;
  using namespace impl;
  dispatch_row_width(row_word(c.row_bytes, address_bits(c)), c.row_bytes,
                     [&](auto word, auto words) {
                       launch_indexed<decltype(word), decltype(words)::value>(exec, c);
                     });
}

// The gather of `c` (src_index set, dst_index unused) with every index
// checked against `src_rows` in the same pass. Returns the lowest i whose
// src_index[i] >= src_rows, or c.n when all are in range; rows with a bad
// index are not copied. Waits for completion (the result is needed). Each
// work item checks and copies rows_per_item() consecutive rows.
template <class Exec>
size_t checked_gather(const Exec& exec, const RowCopy& c, uint64_t src_rows) {
  if (c.n == 0) return 0;
  using namespace impl;
  uint64_t first_bad = UINT64_MAX;
  dispatch_row_width(row_word(c.row_bytes, address_bits(c)), c.row_bytes,
                     [&](auto word, auto words) {
                       launch_checked_gather<decltype(word), decltype(words)::value>(
                           exec, c, c.src_index, src_rows, Kokkos::Min<uint64_t>(first_bad));
                     });
  return first_bad == UINT64_MAX ? c.n : size_t(first_bad >> 32);
}

// The same gather with its index in `exec`'s memory (a device index map: src_index, or
// src_index64), enqueued: the reduction's result -- UINT64_MAX, or (i << 32) | src_index[i]
// for the lowest bad i -- goes to report[0], in `exec`'s memory, when the kernel runs (a
// reduction into device memory does not wait for it). Through src_index64, report[0] is
// i << 32 and report[1] the entry (two words: the value does not fit beside i).
// c.n > 0 and < 2^32.
template <class Exec>
void checked_gather_report(const Exec& exec, const RowCopy& c, uint64_t src_rows,
                           uint64_t* report) {
  using namespace impl;
  using Result = Kokkos::View<uint64_t, typename Exec::memory_space>;
  const Kokkos::Min<uint64_t, typename Exec::memory_space> into{Result(report)};
  dispatch_row_width(
      row_word(c.row_bytes, address_bits(c)), c.row_bytes, [&](auto word, auto words) {
        using Word = decltype(word);
        constexpr int kWords = decltype(words)::value;
        if (c.src_index64)
          launch_checked_gather<Word, kWords>(exec, c, c.src_index64, src_rows, into);
        else launch_checked_gather<Word, kWords>(exec, c, c.src_index, src_rows, into);
      });
  if (c.src_index64)
    Kokkos::parallel_for("kstage::index_value", Kokkos::RangePolicy<Exec>(exec, 0, 1),
                         IndexValue{c.src_index64, report});
}

}  // namespace kstage::core::kernels
