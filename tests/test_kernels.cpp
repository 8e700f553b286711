// SPDX-License-Identifier: Apache-2.0
// The data-movement functors of core/kernels, run on every enabled host
// execution space, for every specialised row width and the generic path.
#include "core/kernels/ragged_copy.hpp"
#include "core/kernels/row_copy.hpp"
#include "core/kernels/strided_copy.hpp"

#include <catch2/catch_session.hpp>
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <Kokkos_Core.hpp>

#include <cstring>
#include <numeric>
#include <tuple>
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
}  // namespace

TEMPLATE_LIST_TEST_CASE("row_copy gathers and scatters every width", "[kernels][row_copy]", HostSpaces) {
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
  for (size_t i = 0; i < rows; ++i)
    REQUIRE(std::memcmp(&dst[offsets[i]], from[i], bytes[i]) == 0);
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
