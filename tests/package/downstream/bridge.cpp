// Downstream use of kstage::kokkos_bridge: a host View exported as DLPack, imported back without
// a copy, and written into a stage as a managed tensor (the C API through the same package).
#include <kstage/dlpack.hpp>
#include <kstage/kstage.h>

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
  std::printf("kstage downstream bridge: %s\n", failures ? "FAILED" : "OK");
  return failures ? 1 : 0;
}
