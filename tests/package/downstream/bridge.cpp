// Downstream use of kstage::kokkos_bridge: a host View exported as DLPack, imported back without
// a copy, and the C++ API (kstage/kstage.hpp) running the README's C++ quick start.
#include <kstage/dlpack.hpp>
#include <kstage/kstage.h>
#include <kstage/kstage.hpp>

#include <cstdio>

int main() {
  int failures = 0;
  kstage_stage_t stage = 0;
  if (kstage_create(nullptr, &stage) != KSTAGE_OK) {  // initialises Kokkos
    std::fprintf(stderr, "FAIL: kstage_create: %s\n", kstage_last_error());
    return 1;
  }
  {
    Kokkos::View<float*, Kokkos::HostSpace> v("v", 4);
    for (int i = 0; i < 4; ++i) v(i) = float(i);
    auto back = kstage::import_dlpack<float*>(kstage::export_dlpack_versioned(v));
    if (back.view().data() != v.data()) {
      std::fprintf(stderr, "FAIL: the import does not alias the exported View\n");
      ++failures;
    }
  }
  kstage_destroy(stage);
  try {  // README.md, "C++ quick start"
    auto s = kstage::Stage::create();
    const kstage_token_t points = s.token("points");
    const kstage::Query query =
        s.query({s.path("/world/a"), s.path("/world/b"), s.path("/world/c")});
    Kokkos::View<float* [3], Kokkos::HostSpace> xyz("xyz", 3);
    for (int i = 0; i < 3; ++i)
      for (int c = 0; c < 3; ++c) xyz(i, c) = float(3 * i + c);
    kstage::WriteOptions o;
    o.semantic = KSTAGE_SEMANTIC_POINT;
    s.write(points, query, xyz, 1, o).wait();
    s.seal(1);
    float sum = 0;
    for (auto& g : s.read(query, {points})) {
      auto rows = g.view<const float* [3]>(0);
      for (size_t i = 0; i < g.prims().size(); ++i) {
        const size_t row = g.index_map().empty() ? i : g.index_map()[i];
        sum += rows(row, 0) + rows(row, 1) + rows(row, 2);
      }
    }
    if (sum != 36.f) {
      std::fprintf(stderr, "FAIL: the C++ API read back a sum of %g, not 36\n", double(sum));
      ++failures;
    }
  } catch (const kstage::Error& e) {
    std::fprintf(stderr, "FAIL: %s\n", e.what());
    ++failures;
  }
  std::printf("kstage downstream bridge: %s\n", failures ? "FAILED" : "OK");
  return failures ? 1 : 0;
}
