// SPDX-License-Identifier: Apache-2.0
// kstage.h promises KSTAGE_BUFFER_ALIGNMENT (64-byte) buffers: column
// storage, compact read buffers and map buffers, for 1, 7 and 1e5 rows,
// fixed-size and array columns; an adopted producer buffer keeps its own
// alignment.
#include "support.hpp"

#include <cstdint>

using namespace kstage_test;

namespace {

bool aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % KSTAGE_BUFFER_ALIGNMENT == 0;
}

// The data pointer of tensor 0 of the first group of a read.
const void* first_tensor(Stage& s, kstage_query_t q, kstage_token_t a, bool compact,
                         uint64_t* rows = nullptr) {
  kstage_read_desc_t d = kstage_read_desc_init();
  d.compact = compact;
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, q, &a, 1, &d, &r));
  kstage_read_group_t g{};
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
  const void* p = static_cast<const char*>(g.data.tensors[0].data) + g.data.tensors[0].byte_offset;
  if (rows) *rows = g.prim_count;
  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_OK(kstage_release_read(s.stage, r));
  return p;
}

}  // namespace

TEST_CASE("column storage, compact reads and maps are 64-byte aligned", "[alignment]") {
  static_assert(KSTAGE_BUFFER_ALIGNMENT == 64);
  Stage s(host_execution());
  uint64_t ordinal = 0;
  for (size_t n : {size_t(1), size_t(7), size_t(100000)}) {
    INFO(n << " rows");
    auto prims = s.paths("/al" + std::to_string(n), n);
    kstage_query_t q = s.query(prims);
    std::vector<kstage_path_t> odd;  // every other prim, reversed: a gather
    for (size_t i = n; i-- > 0;)
      if (i % 2 == 0) odd.push_back(prims[i]);
    kstage_query_t some = s.query(odd);
    const std::string tag = std::to_string(n);

    // Fixed-size, 3-byte and 12-byte rows: written from a misaligned source
    // (the copy is kstage's, so it is aligned anyway).
    for (uint16_t lanes : {uint16_t(3), uint16_t(12)}) {
      kstage_token_t a = s.token(("u8x" + std::to_string(lanes) + "_" + tag).c_str());
      std::vector<uint8_t> bytes(n * lanes + 1, 7);
      int64_t shape[1] = {int64_t(n)};
      DLTensor t = tensor(bytes.data() + 1, u8(lanes), 1, shape);
      KS_OK(s.write(q, a, ++ordinal, write_data(&t)));
      s.seal(ordinal);
      REQUIRE(aligned(first_tensor(s, q, a, false)));    // zero-copy: the column's storage
      REQUIRE(aligned(first_tensor(s, q, a, true)));     // compact, every row
      REQUIRE(aligned(first_tensor(s, some, a, true)));  // compact, a gather

      // A sparse write into it (in place or copy-on-write) keeps it aligned.
      const uint32_t index_map[1] = {0};
      kstage_write_data_t w = write_data(&t);
      w.count = 1;
      w.index_map = index_map;
      KS_OK(s.write(q, a, ++ordinal, w));
      s.seal(ordinal);
      REQUIRE(aligned(first_tensor(s, q, a, false)));
    }

    // Array: row 0 of a compact read.
    {
      kstage_token_t a = s.token(("ragged_" + tag).c_str());
      std::vector<float> packed(n * 3 + 1, 1.f);
      int64_t shape[1] = {int64_t(n * 3)};
      DLTensor t = tensor(packed.data() + 1, f32(), 1, shape);
      KS_OK(s.write(q, a, ++ordinal, write_data(&t, 1, true)));
      s.seal(ordinal);
      REQUIRE(aligned(first_tensor(s, q, a, true)));
      REQUIRE(aligned(first_tensor(s, some, a, true)));
    }

    // Maps: fixed-size (in one group and in groups of 3) and array.
    for (uint64_t per_group : {uint64_t(0), uint64_t(3)}) {
      kstage_map_desc_t d = kstage_map_desc_init();
      d.attribute = s.token(("mapped_" + tag).c_str());
      d.dtype = f32(3);
      d.max_group_prims = per_group;
      kstage_map_t m = 0;
      KS_OK(kstage_map_attribute(s.stage, q, &d, ++ordinal, nullptr, 0, &m));
      kstage_map_group_info_t g{};
      while (kstage_fetch_map_next(s.stage, m, 0, &g) == KSTAGE_OK) {
        REQUIRE(aligned(g.data.tensors[0].data));
        const std::vector<char> zeros(size_t(g.data.tensors[0].shape[0]) * 12);
        host_write(g.data.tensors[0].data, zeros.data(), zeros.size(), g.data.tensors[0].device);
      }
      kstage_op_t op = 0;
      KS_OK(kstage_unmap_attribute(s.stage, m, kstage_device_sync_t{0, 0}, &op));
      KS_OK(kstage_release_op(s.stage, op));
      s.seal(ordinal);
      REQUIRE(aligned(first_tensor(s, q, d.attribute, false)));
    }
    {
      kstage_map_desc_t d = kstage_map_desc_init();
      d.attribute = s.token(("mapped_ragged_" + tag).c_str());
      d.dtype = f64();
      d.is_array = true;
      std::vector<uint64_t> counts(n, 5);
      kstage_map_t m = 0;
      KS_OK(kstage_map_attribute(s.stage, q, &d, ++ordinal, counts.data(), n, &m));
      kstage_map_group_info_t g{};
      KS_OK(kstage_fetch_map_next(s.stage, m, 0, &g));
      REQUIRE(aligned(g.data.tensors[0].data));
      KS_OK(kstage_release_map(s.stage, m));
    }
  }
}

TEST_CASE("an adopted producer buffer keeps the producer's alignment",
          "[host_adoption][alignment][managed]") {
  Stage s(host_execution());
  auto prims = s.paths("/adopt", 4);
  kstage_query_t q = s.query(prims);
  kstage_token_t a = s.token("a");
  // float32 rows 4 bytes past a 64-byte boundary: aligned for float, not to 64.
  alignas(64) static float storage[32];
  struct Owner {
    static void deleter(DLManagedTensorVersioned* self) { delete self; }
  };
  static int64_t shape[1] = {4};
  auto* m = new DLManagedTensorVersioned{};
  m->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  m->deleter = Owner::deleter;
  m->dl_tensor = tensor(storage + 1, f32(), 1, shape);
  DLManagedTensorVersioned* list[1] = {m};
  kstage_write_data_t w = kstage_write_data_init();
  w.managed_tensors = list;
  w.tensor_count = 1;
  KS_OK(s.write(q, a, 1, w));
  s.seal(1);
  const void* p = first_tensor(s, q, a, false);
  REQUIRE(p == storage + 1);  // adopted: the producer's memory, its alignment
  REQUIRE_FALSE(aligned(p));
  REQUIRE(aligned(first_tensor(s, q, a, true)));  // a compact read is kstage's buffer
}
