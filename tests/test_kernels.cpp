// SPDX-License-Identifier: Apache-2.0
// The data-movement functors of core/kernels, run on every enabled host
// execution space, for every specialised row width and the generic path.
#include "core/kernels/masked_gather.hpp"
#include "core/kernels/ragged_copy.hpp"
#include "core/kernels/row_copy.hpp"
#include "core/kernels/strided_copy.hpp"

#include <catch2/catch_session.hpp>
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <tuple>
#include <type_traits>
#include <vector>

using namespace kstage::core::kernels;

#if defined(KOKKOS_ENABLE_OPENMP)
using HostSpaces = std::tuple<Kokkos::Serial, Kokkos::OpenMP>;
#else
using HostSpaces = std::tuple<Kokkos::DefaultHostExecutionSpace>;
#endif

namespace {
std::vector<std::byte> pattern(size_t n) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::byte((i * 7 + 3) & 0xff);
  return v;
}
// Calls f(Word{}, Words) as row_copy() dispatches `c`.
template <class F>
void dispatch_row_width_of(const RowCopy& c, F&& f) {
  impl::dispatch_row_width(impl::row_word(c.row_bytes, impl::address_bits(c)), c.row_bytes, f);
}
}  // namespace

TEMPLATE_LIST_TEST_CASE("row_copy gathers and scatters every width", "[kernels][row_copy]",
                        HostSpaces) {
  const size_t width = GENERATE(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 36, 48, 64, 72, 128, 200);
  const size_t n = 257;
  auto src = pattern(n * width);
  std::vector<uint32_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0u);
  std::reverse(perm.begin(), perm.end());
  std::vector<std::byte> dst(n * width);
  RowCopy c;
  c.dst = dst.data();
  c.dst_stride = int64_t(width);
  c.src = src.data();
  c.src_stride = int64_t(width);
  c.n = n;
  c.row_bytes = width;
  SECTION("gather") {
    c.src_index = perm.data();
    row_copy(TestType(), c);
    TestType().fence();
    for (size_t i = 0; i < n; ++i)
      REQUIRE(std::memcmp(&dst[i * width], &src[perm[i] * width], width) == 0);
  }
  SECTION("scatter") {
    c.dst_index = perm.data();
    row_copy(TestType(), c);
    TestType().fence();
    for (size_t i = 0; i < n; ++i)
      REQUIRE(std::memcmp(&dst[perm[i] * width], &src[i * width], width) == 0);
  }
  SECTION("misaligned source falls back to narrower words") {
    std::vector<std::byte> shifted(n * width + 1);
    std::memcpy(shifted.data() + 1, src.data(), n * width);
    c.src = shifted.data() + 1;
    c.src_index = perm.data();
    row_copy(TestType(), c);
    TestType().fence();
    for (size_t i = 0; i < n; ++i)
      REQUIRE(std::memcmp(&dst[i * width], &src[perm[i] * width], width) == 0);
  }
  SECTION("negative source stride reads rows backwards") {
    c.src = src.data() + (n - 1) * width;
    c.src_stride = -int64_t(width);
    row_copy(TestType(), c);
    TestType().fence();
    for (size_t i = 0; i < n; ++i)
      REQUIRE(std::memcmp(&dst[i * width], &src[(n - 1 - i) * width], width) == 0);
  }
}

// Many work items (host chunks of up to 1024 rows, a last chunk cut short) into a strided
// destination, every indexing form, against a plain loop; and the device form of the same
// functor (one row per work item), run here on the host, which no CPU build launches itself.
TEMPLATE_LIST_TEST_CASE("row_copy over many chunks into strided rows, host and device forms",
                        "[kernels][row_copy]", HostSpaces) {
  const size_t width = GENERATE(4, 12, 8, 5);
  const size_t n = GENERATE(1, 1023, 1025, 5000);
  const int64_t gap = 3;  // destination rows `gap` row widths apart
  auto src = pattern(n * width);
  std::vector<uint32_t> perm(n);
  for (size_t i = 0; i < n; ++i) perm[i] = uint32_t((i * 7919) % n);  // a permutation (7919 prime)
  const bool dst_indexed = GENERATE(false, true), src_indexed = GENERATE(false, true);
  std::vector<std::byte> dst(n * width * size_t(gap), std::byte{0xEE});
  RowCopy c;
  c.dst = dst.data();
  c.dst_stride = gap * int64_t(width);
  c.src = src.data();
  c.src_stride = int64_t(width);
  c.dst_index = dst_indexed ? perm.data() : nullptr;
  c.src_index = src_indexed ? perm.data() : nullptr;
  c.n = n;
  c.row_bytes = width;
  const bool device_form = GENERATE(false, true);
  if (!device_form) {
    row_copy(TestType(), c);
  } else {  // what a GPU build launches: one row per work item
    dispatch_row_width_of(c, [&](auto word, auto words) {
      using Word = decltype(word);
      auto launch = [&](auto d, auto s) {
        using Functor = impl::RowCopyFunctor<Word, decltype(words)::value, decltype(d)::value,
                                             decltype(s)::value>;
        Kokkos::parallel_for(Kokkos::RangePolicy<TestType, Kokkos::IndexType<size_t>>(0, c.n),
                             Functor::of(c, 1));
      };
      using T = std::true_type;
      using F = std::false_type;
      if (dst_indexed && src_indexed) launch(T{}, T{});
      else if (dst_indexed) launch(T{}, F{});
      else if (src_indexed) launch(F{}, T{});
      else launch(F{}, F{});
    });
  }
  TestType().fence();
  std::vector<std::byte> want(dst.size(), std::byte{0xEE});
  for (size_t i = 0; i < n; ++i) {
    const size_t d = dst_indexed ? perm[i] : i, s = src_indexed ? perm[i] : i;
    std::memcpy(&want[d * width * size_t(gap)], &src[s * width], width);
  }
  REQUIRE(dst == want);  // every row in place, nothing written between them
}

TEMPLATE_LIST_TEST_CASE("row_copy with a periodic source repeats its rows, host and device forms",
                        "[kernels][row_copy]", HostSpaces) {
  // A clone's seal: row i of the destination is source row i % period. Widths with their own
  // kernel and the generic one (5, 200); periods of one row, a few, a block of whole runs; row
  // counts that end part way through a period and cross chunks.
  const size_t width = GENERATE(4, 5, 12, 128, 200);
  const size_t period = GENERATE(1, 3, 20, 1000);
  const size_t n = GENERATE(1, 999, 5000);
  const int dst_form = GENERATE(0, 1, 2);  // compact rows, rows 3 widths apart, a permutation
  const bool device_form = GENERATE(false, true);
  auto src = pattern(period * width);
  std::vector<uint32_t> perm(n);
  for (size_t i = 0; i < n; ++i) perm[i] = uint32_t((i * 7919) % n);
  const size_t gap = dst_form == 1 ? 3 : 1;
  std::vector<std::byte> dst(n * width * gap, std::byte{0xEE});
  RowCopy c;
  c.dst = dst.data();
  c.dst_stride = int64_t(gap * width);
  c.dst_index = dst_form == 2 ? perm.data() : nullptr;
  c.src = src.data();
  c.src_stride = int64_t(width);
  c.src_period = period;
  c.n = n;
  c.row_bytes = width;
  if (!device_form) {
    row_copy(TestType(), c);
  } else {  // what a GPU build launches: one row per work item
    dispatch_row_width_of(c, [&](auto word, auto words) {
      using Word = decltype(word);
      auto launch = [&](auto d) {
        using Functor =
            impl::PeriodicGatherFunctor<Word, decltype(words)::value, decltype(d)::value>;
        Kokkos::parallel_for(Kokkos::RangePolicy<TestType, Kokkos::IndexType<size_t>>(0, c.n),
                             Functor::of(c, 1));
      };
      if (c.dst_index) launch(std::true_type{});
      else launch(std::false_type{});
    });
  }
  TestType().fence();
  std::vector<std::byte> want(dst.size(), std::byte{0xEE});
  for (size_t i = 0; i < n; ++i) {
    const size_t d = dst_form == 2 ? perm[i] : i;
    std::memcpy(&want[d * width * gap], &src[(i % period) * width], width);
  }
  REQUIRE(dst == want);  // every row from its place in the period, nothing written between
}

TEMPLATE_LIST_TEST_CASE("checked_gather copies in-range rows and reports the first bad index",
                        "[kernels][row_copy]", HostSpaces) {
  const size_t width = GENERATE(4, 12, 24, 7);
  const size_t n = 1000, src_rows = 300;
  auto src = pattern(src_rows * width);
  std::vector<uint32_t> index(n);
  for (size_t i = 0; i < n; ++i) index[i] = uint32_t((i * 37) % src_rows);
  std::vector<std::byte> dst(n * width, std::byte{0xEE});
  RowCopy c;
  c.dst = dst.data();
  c.dst_stride = int64_t(width);
  c.src = src.data();
  c.src_stride = int64_t(width);
  c.src_index = index.data();
  c.n = n;
  c.row_bytes = width;
  SECTION("all in range: every row gathered, result n") {
    REQUIRE(checked_gather(TestType(), c, src_rows) == n);
    for (size_t i = 0; i < n; ++i)
      REQUIRE(std::memcmp(&dst[i * width], &src[index[i] * width], width) == 0);
  }
  SECTION("bad entries: the lowest is reported whatever the thread that meets it") {
    index[n - 1] = uint32_t(src_rows);  // seen first by the last thread
    index[611] = UINT32_MAX;
    index[612] = uint32_t(src_rows) + 5;
    REQUIRE(checked_gather(TestType(), c, src_rows) == 611);
    // Rows with a good index are still copied; bad ones are left alone.
    REQUIRE(std::memcmp(&dst[10 * width], &src[index[10] * width], width) == 0);
    for (size_t b = 0; b < width; ++b) REQUIRE(dst[611 * width + b] == std::byte{0xEE});
  }
  SECTION("no source rows: the first entry is bad") {
    REQUIRE(checked_gather(TestType(), c, 0) == 0);
  }
}

TEMPLATE_LIST_TEST_CASE("masked_gather compacts set bits in order", "[kernels][mask]", HostSpaces) {
  const size_t width = GENERATE(4, 12, 16, 72, 5);
  const size_t n = GENERATE(1, 63, 64, 65, 1000, 4099);
  // Density changes along the mask so that threads get unequal shares.
  std::vector<uint64_t> mask((n + 63) / 64 + 1, ~uint64_t(0));  // bits past n are set: ignored
  std::vector<uint32_t> want;
  for (size_t e = 0; e < n; ++e) {
    const bool on = e < n / 3 ? (e % 2 == 0) : e < 2 * n / 3 ? (e % 17 == 3) : (e % 5 != 0);
    if (!on) mask[e / 64] &= ~(uint64_t(1) << (e % 64));
    if (on) want.push_back(uint32_t(e));
  }
  REQUIRE(mask_popcount(mask.data(), n) == want.size());
  auto src = pattern(n * width);
  std::vector<uint32_t> selected(want.size() + 1, 0xFFFFFFFFu);
  std::vector<std::byte> dst(want.size() * width + 1);
  MaskedGather g;
  g.mask = mask.data();
  g.n = n;
  g.selected = selected.data();
  auto with_rows = [&] {
    g.dst = dst.data();
    g.src = src.data();
    g.src_stride = int64_t(width);
    g.row_bytes = width;
  };
  auto rows_gathered = [&] {
    for (size_t j = 0; j < want.size(); ++j)
      if (std::memcmp(&dst[j * width], &src[want[j] * width], width) != 0) return false;
    return true;
  };
  SECTION("positions and rows") {
    with_rows();
    masked_gather(TestType(), g);
    TestType().fence();
    REQUIRE(std::vector<uint32_t>(selected.begin(), selected.end() - 1) == want);
    REQUIRE(selected[want.size()] == 0xFFFFFFFFu);  // nothing written past the count
    REQUIRE(rows_gathered());
  }
  SECTION("rows only (a device mask's gather: no positions)") {
    with_rows();
    g.selected = nullptr;
    masked_gather(TestType(), g);
    TestType().fence();
    REQUIRE(rows_gathered());
    REQUIRE(selected == std::vector<uint32_t>(want.size() + 1, 0xFFFFFFFFu));  // untouched
  }
  SECTION("positions only") {
    masked_gather(TestType(), g);
    TestType().fence();
    REQUIRE(std::vector<uint32_t>(selected.begin(), selected.end() - 1) == want);
  }
}

TEMPLATE_LIST_TEST_CASE("ragged_copy packs variable-length rows", "[kernels][ragged]", HostSpaces) {
  const size_t word = GENERATE(1, 2, 4, 8);
  const size_t rows = 50;
  auto src = pattern(rows * 64 * word);
  std::vector<const std::byte*> from(rows);
  std::vector<uint64_t> bytes(rows), offsets(rows);
  uint64_t cursor = 0;
  for (size_t i = 0; i < rows; ++i) {
    from[i] = src.data() + (rows - 1 - i) * 64 * word;
    bytes[i] = (i % 7) * word * 3;
    offsets[i] = cursor;
    cursor += bytes[i];
  }
  std::vector<std::byte> dst(cursor + 1);
  RaggedCopy c{dst.data(), offsets.data(), from.data(), bytes.data(), rows};
  ragged_copy(TestType(), c, word);
  TestType().fence();
  for (size_t i = 0; i < rows; ++i) REQUIRE(std::memcmp(&dst[offsets[i]], from[i], bytes[i]) == 0);
}

// Every row length from 0 to 80 bytes (short rows are copied inline in overlapping blocks,
// longer ones by memcpy), at odd addresses, with a sentinel gap after each row: each row
// arrives whole and nothing outside it is written.
TEMPLATE_LIST_TEST_CASE("ragged_copy moves rows of every short length exactly", "[kernels][ragged]",
                        HostSpaces) {
  const size_t rows = 81, gap = 3;
  auto src = pattern(rows * 96);
  std::vector<const std::byte*> from(rows);
  std::vector<uint64_t> bytes(rows), offsets(rows);
  uint64_t cursor = 1;  // odd: no row is aligned
  for (size_t i = 0; i < rows; ++i) {
    from[i] = src.data() + 1 + (rows - 1 - i) * 95;
    bytes[i] = i;
    offsets[i] = cursor;
    cursor += bytes[i] + gap;
  }
  const std::byte sentinel{0xA5};
  std::vector<std::byte> dst(cursor, sentinel);
  RaggedCopy c{dst.data(), offsets.data(), from.data(), bytes.data(), rows};
  ragged_copy(TestType(), c, 1);
  TestType().fence();
  REQUIRE(dst[0] == sentinel);
  for (size_t i = 0; i < rows; ++i) {
    CAPTURE(i);
    REQUIRE(std::memcmp(&dst[offsets[i]], from[i], bytes[i]) == 0);
    for (size_t g = 0; g < gap; ++g) REQUIRE(dst[offsets[i] + bytes[i] + g] == sentinel);
  }
}

// The device form of the ragged copy (a word loop per row), run here on the host, which no CPU
// build launches itself (host execution copies with memcpy and the inline short copy).
TEMPLATE_LIST_TEST_CASE("ragged_copy's device form moves the same rows", "[kernels][ragged]",
                        HostSpaces) {
  const size_t rows = 70;
  auto src = pattern(rows * 64 * 8);
  std::vector<const std::byte*> from(rows);
  std::vector<uint64_t> bytes(rows), offsets(rows);
  uint64_t cursor = 0;
  for (size_t i = 0; i < rows; ++i) {
    from[i] = src.data() + (rows - 1 - i) * 64 * 8;
    bytes[i] = (i % 9) * 8;
    offsets[i] = cursor;
    cursor += bytes[i] + 8;
  }
  std::vector<std::byte> dst(cursor, std::byte{0xA5});
  impl::RaggedCopyFunctor<uint64_t> f{dst.data(), offsets.data(), from.data(), bytes.data()};
  Kokkos::parallel_for(Kokkos::RangePolicy<TestType, Kokkos::IndexType<size_t>>(0, rows), f);
  TestType().fence();
  for (size_t i = 0; i < rows; ++i) {
    CAPTURE(i);
    REQUIRE(std::memcmp(&dst[offsets[i]], from[i], bytes[i]) == 0);
    for (size_t g = 0; g < 8; ++g) REQUIRE(dst[offsets[i] + bytes[i] + g] == std::byte{0xA5});
  }
}

TEMPLATE_LIST_TEST_CASE("strided_copy compacts any strides", "[kernels][strided]", HostSpaces) {
  // A (5, 3) view into a (5, 8) float array: rows 8 apart, columns 2 apart.
  std::vector<float> base(5 * 8);
  std::iota(base.begin(), base.end(), 0.f);
  std::vector<float> out(15, -1.f);
  StridedCopy c;
  c.dst = reinterpret_cast<std::byte*>(out.data());
  c.src = reinterpret_cast<const std::byte*>(base.data());
  c.ndim = 2;
  c.shape[0] = 5;
  c.shape[1] = 3;
  c.byte_strides[0] = 8 * sizeof(float);
  c.byte_strides[1] = 2 * sizeof(float);
  c.elem_bytes = sizeof(float);
  strided_copy(TestType(), c);
  TestType().fence();
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) REQUIRE(out[i * 3 + j] == base[i * 8 + j * 2]);
}

int main(int argc, char* argv[]) {
  Kokkos::initialize(argc, argv);
  int result = Catch::Session().run(argc, argv);
  Kokkos::finalize();
  return result;
}
