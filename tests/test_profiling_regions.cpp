// SPDX-License-Identifier: Apache-2.0
// Kokkos Tools regions (core/profiling_region.hpp): every public operation that does work
// pushes "kstage::<operation>" for its duration and pops it -- balanced, also when the call
// fails -- and the kernels it launches fall inside. The callbacks are Kokkos 3.4's in-process
// ones (Kokkos::Tools::Experimental::set_*_callback), set as a tool library would set them.
#include <Kokkos_Core.hpp>

#include <kstage/kstage_arrow.h>

#include "support.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

using namespace kstage_test;

namespace {

std::vector<std::string> g_stack;       // open regions
std::vector<std::string> g_pushed;      // every push, in order
int g_unbalanced = 0;                   // pops with no open region
std::vector<size_t> g_kernel_depths;    // open kstage:: regions at each kernel launch
std::vector<uint32_t> g_kernel_spaces;  // the execution space of each (a Kokkos DeviceType)

size_t kstage_depth() {
  return size_t(std::count_if(g_stack.begin(), g_stack.end(),
                              [](const std::string& n) { return n.rfind("kstage::", 0) == 0; }));
}
void on_push(const char* name) {
  g_stack.emplace_back(name);
  g_pushed.emplace_back(name);
}
void on_pop() {
  if (g_stack.empty()) ++g_unbalanced;
  else g_stack.pop_back();
}
void on_kernel(const char*, const uint32_t device, uint64_t* id) {
  g_kernel_depths.push_back(kstage_depth());
  g_kernel_spaces.push_back(device >> 24);  // (the top 8 bits, in Kokkos 3.4 as in 4.x)
  *id = 0;
}
void on_kernel_end(const uint64_t) {}

// The callbacks a tool would set, or none.
void install(bool on) {
  namespace T = Kokkos::Tools::Experimental;
  T::set_push_region_callback(on ? on_push : nullptr);
  T::set_pop_region_callback(on ? on_pop : nullptr);
  T::set_begin_parallel_for_callback(on ? on_kernel : nullptr);
  T::set_begin_parallel_reduce_callback(on ? on_kernel : nullptr);
  T::set_begin_parallel_scan_callback(on ? on_kernel : nullptr);
  T::set_end_parallel_for_callback(on ? on_kernel_end : nullptr);
  T::set_end_parallel_reduce_callback(on ? on_kernel_end : nullptr);
  T::set_end_parallel_scan_callback(on ? on_kernel_end : nullptr);
}

// Records regions and kernel launches while it lives.
struct Recording {
  Recording() {
    g_stack.clear();
    g_pushed.clear();
    g_unbalanced = 0;
    g_kernel_depths.clear();
    g_kernel_spaces.clear();
    install(true);
  }
  ~Recording() { install(false); }
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;
  // The regions pushed since the last call, and no region open.
  std::vector<std::string> take() {
    REQUIRE(g_stack.empty());
    REQUIRE(g_unbalanced == 0);
    std::vector<std::string> out;
    out.swap(g_pushed);
    return out;
  }
};

bool has(const std::vector<std::string>& v, const std::string& name) {
  return std::find(v.begin(), v.end(), name) != v.end();
}

}  // namespace

TEST_CASE("every operation pushes its kstage:: region and pops it, kernels inside", "[profiling]") {
  Stage s(host_execution());  // Kokkos is initialised before a tool's callbacks are set
  Recording rec;
  std::vector<std::string> all;
  auto expect = [&](const char* name) {
    std::vector<std::string> got = rec.take();
    INFO("expected " << name);
    REQUIRE(has(got, name));
    all.insert(all.end(), got.begin(), got.end());
  };

  const char* names[3] = {"/p/a", "/p/b", "/p/c"};
  kstage_path_t paths[3];
  KS_OK(kstage_intern_paths(s.stage, names, nullptr, 3, paths));
  expect("kstage::intern_paths");
  kstage_path_t first = 0;
  KS_OK(kstage_intern_path_range(s.stage, "/r", 2, "m", 1, 0, 4, &first));
  expect("kstage::intern_path_range");
  kstage_query_t q = 0;
  KS_OK(kstage_query_paths(s.stage, paths, 3, &q));
  expect("kstage::query_paths");
  kstage_query_t rq = 0;
  KS_OK(kstage_query_range(s.stage, first, 0, 4, 1, &rq));
  expect("kstage::query_range");
  kstage_path_list_t list = 0;
  KS_OK(kstage_query_get_paths(s.stage, q, &list));
  expect("kstage::query_get_paths");
  KS_OK(kstage_path_list_release(s.stage, list));
  KS_OK(kstage_path_list_create(s.stage, paths, 3, &list));
  expect("kstage::path_list_create");
  KS_OK(kstage_path_list_release(s.stage, list));

  const kstage_token_t a = s.token("a"), b = s.token("b");
  std::vector<float> v = {1, 2, 3};
  int64_t shape[1] = {3};
  DLTensor t = tensor(v.data(), f32(), 1, shape);
  kstage_write_data_t w = write_data(&t);
  const uint32_t reverse[3] = {2, 1, 0};
  w.index_map = reverse;  // a gather kernel at the call, a scatter at the seal
  w.count = 3;
  kstage_op_t op = 0;
  KS_OK(kstage_write_attribute(s.stage, q, a, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
  expect("kstage::write_attribute");
  KS_OK(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE));
  expect("kstage::wait");
  KS_OK(kstage_release_op(s.stage, op));
  const kstage_write_data_t both[2] = {write_data(&t), write_data(&t)};
  const kstage_token_t ab[2] = {a, b};
  KS_OK(kstage_write_attributes(s.stage, q, ab, both, 2, 2, KSTAGE_PRIM_MODE_UPSERT, &op));
  expect("kstage::write_attributes");
  KS_OK(kstage_release_op(s.stage, op));
  KS_OK(kstage_advance_write_floor(s.stage, 2, nullptr, 0));
  expect("kstage::advance_write_floor");

  kstage_read_desc_t d = kstage_read_desc_init();
  d.compact = true;
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, q, &a, 1, &d, &r));
  expect("kstage::read_attributes");
  kstage_read_group_t g{};
  KS_OK(kstage_fetch_read_next(s.stage, r, KSTAGE_TIMEOUT_INFINITE, &g));
  expect("kstage::fetch_read_next");
  DLManagedTensorVersioned* e = nullptr;
  KS_OK(kstage_group_export(s.stage, g.handle, 0, KSTAGE_EXPORT_READ_ONLY, &e));
  expect("kstage::group_export");
  e->deleter(e);
  DLManagedTensor* legacy = nullptr;
  KS_OK(kstage_group_export_legacy(s.stage, g.handle, 0, 0, &legacy));
  expect("kstage::group_export_legacy");
  legacy->deleter(legacy);
  KS_OK(kstage_group_export_on_stream(s.stage, g.handle, 0, KSTAGE_EXPORT_READ_ONLY, 0, &e));
  expect("kstage::group_export_on_stream");
  e->deleter(e);
  KS_OK(kstage_group_export_legacy_on_stream(s.stage, g.handle, 0, 0, 0, &legacy));
  expect("kstage::group_export_legacy_on_stream");
  legacy->deleter(legacy);
  KS_OK(kstage_group_sync(s.stage, g.handle, kstage_device_sync_t{0, 0}));
  expect("kstage::group_sync");
  ArrowSchema arrow_schema{};
  ArrowDeviceArray arrow_array{};
  KS_OK(kstage_group_export_arrow(s.stage, g.handle, KSTAGE_ARROW_PATH_IDS, &arrow_schema,
                                  &arrow_array));
  expect("kstage::group_export_arrow");
  arrow_array.array.release(&arrow_array.array);
  arrow_schema.release(&arrow_schema);
  KS_OK(kstage_read_export_arrow(s.stage, q, ab, 2, nullptr, 0, &arrow_schema, &arrow_array));
  expect("kstage::read_export_arrow");
  arrow_array.array.release(&arrow_array.array);
  arrow_schema.release(&arrow_schema);
  // (A compact group has no index map: refused, inside its region all the same.)
  KS_FAILS(kstage_group_export_index_map(s.stage, g.handle, 0, &e), KSTAGE_INVALID_ARGUMENT,
           "the group has no index_map");
  expect("kstage::group_export_index_map");
  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_OK(kstage_release_read(s.stage, r));

  kstage_map_desc_t m = kstage_map_desc_init();
  m.attribute = s.token("c");
  m.dtype = f32();
  m.max_group_prims = 2;  // two groups: one committed on its own, the other by the unmap
  kstage_map_t map = 0;
  KS_OK(kstage_map_attribute(s.stage, q, &m, 3, nullptr, 0, &map));
  expect("kstage::map_attribute");
  kstage_map_group_info_t mg{};
  KS_OK(kstage_fetch_map_next(s.stage, map, KSTAGE_TIMEOUT_INFINITE, &mg));
  expect("kstage::fetch_map_next");
  std::memset(mg.data.tensors[0].data, 0, size_t(mg.prim_count) * sizeof(float));
  KS_OK(kstage_unmap_group(s.stage, map, mg.handle, kstage_device_sync_t{0, 0}, &op));
  expect("kstage::unmap_group");
  KS_OK(kstage_release_op(s.stage, op));
  KS_OK(kstage_fetch_map_next(s.stage, map, KSTAGE_TIMEOUT_INFINITE, &mg));
  KS_OK(kstage_map_group_export(s.stage, map, mg.handle, 0, 0, &e));
  expect("kstage::map_group_export");
  e->deleter(e);
  std::memset(mg.data.tensors[0].data, 0, size_t(mg.prim_count) * sizeof(float));
  KS_OK(kstage_unmap_attribute(s.stage, map, kstage_device_sync_t{0, 0}, &op));
  expect("kstage::unmap_attribute");
  KS_OK(kstage_release_op(s.stage, op));  // the unmap ended the map

  KS_OK(kstage_delete_attributes(s.stage, q, &b, 1, 4, &op));
  expect("kstage::delete_attributes");
  KS_OK(kstage_release_op(s.stage, op));
  kstage_filter_t f{};
  f.has_attributes = &a;
  f.has_attribute_count = 1;
  kstage_query_t fq = 0;
  KS_OK(kstage_query_filter(s.stage, &f, &fq));
  expect("kstage::query_filter");
  kstage_filter_ex_t fx = kstage_filter_ex_init();
  kstage_query_t fxq = 0;
  KS_OK(kstage_query_filter_ex(s.stage, &fx, &fxq));
  expect("kstage::query_filter_ex");
  kstage_hierarchy_t h = 0;
  KS_OK(kstage_query_hierarchy(s.stage, fxq, KSTAGE_RELATION_CHILDREN, &h));
  expect("kstage::query_hierarchy");
  KS_OK(kstage_hierarchy_release(s.stage, h));
  KS_OK(kstage_query_release(s.stage, fxq));

  kstage_config_t c = kstage_config_init();
  kstage_stage_t other = 0;
  KS_OK(kstage_create(&c, &other));
  expect("kstage::create");
  KS_OK(kstage_destroy(other));
  expect("kstage::destroy");

  // Every region kstage pushed is one of its operations, and every kernel launched in these
  // calls ran inside one.
  for (const std::string& n : all) REQUIRE(n.rfind("kstage::", 0) == 0);
  REQUIRE(!g_kernel_depths.empty());
  for (size_t depth : g_kernel_depths) REQUIRE(depth >= 1);
}

#if defined(KOKKOS_ENABLE_OPENMP) && defined(KOKKOS_ENABLE_SERIAL)
// A parallel stage's small work (under 256 KiB) runs on the calling thread: on busy cores a
// parallel region waits a scheduler time slice to start, longer than such work takes. Larger
// work is the parallel space's.
TEST_CASE("a parallel stage runs small kernels on the calling thread, large ones in parallel",
          "[profiling]") {
  Stage s(KSTAGE_HOST_EXECUTION_PARALLEL);
  constexpr size_t kPrims = 100000;
  const kstage_query_t q = s.range_query(s.range("/k", "p", 0, kPrims));
  const kstage_token_t a = s.token("a");
  s.write_f32(q, a, 1, std::vector<float>(kPrims * 3, 1.f), 3);
  s.seal(1);
  using T = Kokkos::Tools::Experimental::DeviceType;
  // Rows of `a` rewritten through an index_map (a gather at the call, a scatter at the seal):
  // the spaces their kernels ran on.
  auto spaces_of_write = [&](size_t n, uint64_t ordinal) {
    std::vector<float> v(n * 3, 2.f);
    int64_t shape[2] = {int64_t(n), 3};
    DLTensor t = tensor(v.data(), f32(), 2, shape);
    std::vector<uint32_t> index(n);
    for (size_t i = 0; i < n; ++i) index[i] = uint32_t(n - 1 - i);
    kstage_write_data_t w = write_data(&t);
    w.index_map = index.data();
    w.count = n;
    Recording rec;
    kstage_op_t op = 0;
    KS_OK(kstage_write_attribute(s.stage, q, a, ordinal, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
    finish(s, op);
    s.seal(ordinal);
    return g_kernel_spaces;
  };
  const std::vector<uint32_t> small = spaces_of_write(1000, 2);  // 12 KB
  REQUIRE(!small.empty());
  for (uint32_t space : small) REQUIRE(space == uint32_t(T::Serial));
  const std::vector<uint32_t> large = spaces_of_write(kPrims, 3);  // 1.2 MB
  REQUIRE(std::count(large.begin(), large.end(), uint32_t(T::OpenMP)) > 0);
}
#endif

TEST_CASE("a failed call pushes and pops its region too", "[profiling][errors]") {
  Stage s(host_execution());
  Recording rec;
  kstage_op_t op = 0;
  kstage_write_data_t w = kstage_write_data_init();
  REQUIRE(kstage_write_attribute(0, 0, 0, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op) ==
          KSTAGE_INVALID_HANDLE);
  REQUIRE(rec.take() == std::vector<std::string>{"kstage::write_attribute"});
  w.struct_size = 0;  // rejected before any handle is looked at
  REQUIRE(kstage_write_attributes(s.stage, 0, nullptr, &w, 1, 1, KSTAGE_PRIM_MODE_UPSERT, &op) ==
          KSTAGE_INVALID_ARGUMENT);
  REQUIRE(rec.take() == std::vector<std::string>{"kstage::write_attributes"});
  REQUIRE(kstage_advance_write_floor(12345, 1, nullptr, 0) == KSTAGE_INVALID_HANDLE);
  REQUIRE(rec.take() == std::vector<std::string>{"kstage::advance_write_floor"});
  kstage_read_t r = 0;
  REQUIRE(kstage_read_attributes(s.stage, 12345, nullptr, 0, nullptr, &r) != KSTAGE_OK);
  REQUIRE(rec.take() == std::vector<std::string>{"kstage::read_attributes"});
  DLManagedTensorVersioned* e = nullptr;
  REQUIRE(kstage_group_export(s.stage, 999, 0, 0, &e) == KSTAGE_INVALID_HANDLE);
  REQUIRE(rec.take() == std::vector<std::string>{"kstage::group_export"});
  REQUIRE(kstage_wait(s.stage, 777, 0) == KSTAGE_INVALID_HANDLE);
  REQUIRE(rec.take() == std::vector<std::string>{"kstage::wait"});
  REQUIRE(kstage_destroy(0) == KSTAGE_INVALID_HANDLE);
  REQUIRE(rec.take() == std::vector<std::string>{"kstage::destroy"});
}
