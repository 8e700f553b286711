// SPDX-License-Identifier: Apache-2.0
//
// kstage DLPack bridge, by example (kstage/dlpack.hpp + the C group export).
//
// DLPack is the common in-memory tensor description that numpy, PyTorch,
// CuPy, JAX and many C/C++ libraries exchange without copying. Kokkos has no
// DLPack support of its own; kstage/dlpack.hpp adds it:
//
//   kstage::export_dlpack_versioned(view)   View -> DLManagedTensorVersioned*
//   kstage::export_dlpack_legacy(view)      View -> DLManagedTensor* (pre-1.0 consumers)
//   kstage::import_dlpack<DataType>(tensor) any DLPack tensor -> kstage::DLPackView
//
// and the C API exports read groups (kstage_group_export) and adopts managed
// tensors written into a stage (kstage_write_data_t::managed_tensors).
//
// Everything is zero-copy: an export describes the View's own memory and
// keeps a copy of the View (hence its allocation) alive until the consumer
// calls the tensor's deleter, exactly once. An import is an unmanaged View
// over the producer's memory; the producer's deleter runs when the last copy
// of the DLPackView dies. Nothing is ever copied behind your back: a tensor
// that cannot be viewed as asked for (wrong dtype, rank, layout, device,
// a READ_ONLY tensor into a non-const View, ...) is refused with a
// kstage::DLPackError that says why.
//
// This program walks through:
//   1. a View filled by a kernel, exported, and consumed by a plain C-style
//      consumer after the View itself is gone (the export kept it alive);
//   2. a strided subview (a column) exported with its real strides;
//   3. an export imported back as a DLPackView: the same pointer;
//   4. a stage round trip: the exported View becomes a column's storage
//      without a copy, is read back zero-copy, and is exported again by
//      kstage_group_export -- still the same memory;
//   5. a refusal: a read-only export cannot be imported as writable.
// It prints a short report and "dlpack_interop: OK", or exits 1 on any mismatch.
//
// Build (from an installed kstage): find_package(kstage REQUIRED), then
// target_link_libraries(app PRIVATE kstage::kstage); kstage::kstage brings
// Kokkos and DLPack along.
#include <kstage/dlpack.hpp>
#include <kstage/kstage.h>

#include <Kokkos_Core.hpp>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace {

int g_failures = 0;

// Reports a mismatch (and remembers it for the exit code).
void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "MISMATCH: %s\n", what.c_str());
    ++g_failures;
  }
}

// kstage C calls return a status; kstage_last_error() says why one failed.
bool ok(kstage_status_t st, const char* call) {
  if (st == KSTAGE_OK) return true;
  std::fprintf(stderr, "%s failed: %s: %s\n", call, kstage_status_string(st), kstage_last_error());
  ++g_failures;
  return false;
}
#define KS(call) ok((call), #call)

// ---------------------------------------------------------------------------
// A tiny DLPack consumer written the way a C library would: it knows nothing
// about Kokkos or kstage, only <dlpack/dlpack.h>. It takes ownership of the
// tensor, sums its float64 elements, and calls the deleter when done -- the
// one thing every DLPack consumer must do exactly once.
//
// It honours everything a producer may legally hand over: any rank, strides
// in elements (NULL meaning compact row-major, as pre-1.2 producers do),
// byte_offset, and a NULL data pointer for an empty tensor.
extern "C" int consume_sum_f64(DLManagedTensorVersioned* t, double* sum) {
  int status = 0;
  *sum = 0;
  // A consumer must check the major version before reading anything else
  // (only the deleter is guaranteed to be where it is).
  if (t->version.major != DLPACK_MAJOR_VERSION) {
    status = -1;
  } else {
    const DLTensor& dl = t->dl_tensor;
    if (dl.device.device_type != kDLCPU || dl.dtype.code != kDLFloat || dl.dtype.bits != 64 ||
        dl.dtype.lanes != 1 || dl.ndim > 8) {
      status = -2;  // not something this consumer can read
    } else {
      int64_t count = 1, index[8] = {0};
      for (int d = 0; d < dl.ndim; ++d) count *= dl.shape[d];
      const char* base = static_cast<const char*>(dl.data) + dl.byte_offset;
      for (int64_t n = 0; n < count; ++n) {
        // Offset of the current multi-index, in elements.
        int64_t offset = 0, compact = 1;
        for (int d = dl.ndim - 1; d >= 0; --d) {
          offset += index[d] * (dl.strides ? dl.strides[d] : compact);
          compact *= dl.shape[d];
        }
        *sum += reinterpret_cast<const double*>(base)[offset];
        // Next multi-index, row-major order.
        for (int d = dl.ndim - 1; d >= 0; --d) {
          if (++index[d] < dl.shape[d]) break;
          index[d] = 0;
        }
      }
    }
  }
  // Done with it: hand it back. (deleter may be NULL: "nothing to free".)
  if (t->deleter) t->deleter(t);
  return status;
}

// ---------------------------------------------------------------------------
// 1 + 2: export, consume after the View is gone, and a strided column.
void export_and_consume() {
  const int rows = 1000, cols = 3;
  DLManagedTensorVersioned* whole = nullptr;
  DLManagedTensorVersioned* column = nullptr;
  DLManagedTensor* legacy = nullptr;
  // A copy we keep only to watch the use count. std::optional, not a
  // default-constructed View: GCC 12 miscompiles those with Kokkos >= 4.7
  // (Kokkos issue #8187), so this program never makes one.
  std::optional<Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace>> watch;
  {
    // A View filled by a kernel (on the default host execution space).
    Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace> v("v", rows, cols);
    Kokkos::parallel_for(
        "fill", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, rows),
        KOKKOS_LAMBDA(int i) {
          for (int j = 0; j < cols; ++j) v(i, j) = i + 0.25 * j;
        });
    // Exports never block on their own; order the consumer after the kernel.
    // (ExportOptions::sync asks the bridge to do that for device Views; a
    // host View fences its execution space.)
    Kokkos::fence();

    // The versioned struct (DLPack >= 1.0): version, flags (READ_ONLY for a
    // View of const data), shape and strides always filled, byte_offset 0.
    whole = kstage::export_dlpack_versioned(v);
    std::printf(
        "export: data %p, ndim %d, shape (%lld, %lld), strides (%lld, %lld), "
        "version %u.%u, flags %llu\n",
        whole->dl_tensor.data, whole->dl_tensor.ndim, (long long)whole->dl_tensor.shape[0],
        (long long)whole->dl_tensor.shape[1], (long long)whole->dl_tensor.strides[0],
        (long long)whole->dl_tensor.strides[1], unsigned(whole->version.major),
        unsigned(whole->version.minor), (unsigned long long)whole->flags);
    expect(whole->dl_tensor.data == v.data(), "the export describes the View's own memory");

    {
      // A column of a row-major View is strided: stride 3, in elements. The
      // subview shares v's allocation, and so does its export.
      auto col = Kokkos::subview(v, Kokkos::ALL, 2);
      column = kstage::export_dlpack_versioned(col);
      expect(column->dl_tensor.strides[0] == cols, "a column exports stride 3");
      expect(column->dl_tensor.data == &v(0, 2), "a column starts at v(0, 2)");
    }

    // The legacy struct, for consumers older than DLPack 1.0 (it cannot say
    // read-only, so a View of const data is refused there).
    legacy = kstage::export_dlpack_legacy(v);

    watch.emplace(v);
    std::printf("export: View use count with three exports and our copy: %d\n", watch->use_count());
    expect(watch->use_count() == 5, "v, watch and three export contexts hold the allocation");
  }               // `v` is gone here: only the exports (and `watch`) keep the allocation.
  watch.reset();  // now only the exports do

  // The consumer reads the memory of a View that no longer exists in this
  // program -- the export kept it alive -- and frees it via the deleter.
  double expected_all = 0, expected_col = 0;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      expected_all += i + 0.25 * j;
      if (j == 2) expected_col += i + 0.25 * j;
    }
  double sum = 0;
  expect(consume_sum_f64(whole, &sum) == 0, "the consumer accepts the export");
  std::printf(
      "consume: sum of all elements %.2f (expected %.2f), after the View went out of scope\n", sum,
      expected_all);
  expect(sum == expected_all, "sum of the whole export");
  expect(consume_sum_f64(column, &sum) == 0, "the consumer accepts the column");
  std::printf("consume: sum of column 2 via strides %.2f (expected %.2f)\n", sum, expected_col);
  expect(sum == expected_col, "sum of the strided column");
  // The last holder: its deleter frees the View's allocation.
  expect(static_cast<double*>(legacy->dl_tensor.data)[3 * 7 + 1] == 7.25, "legacy export values");
  legacy->deleter(legacy);
}

// ---------------------------------------------------------------------------
// 3 + 5: import an export back, and a refusal.
void import_back() {
  Kokkos::View<float*, Kokkos::HostSpace> v("src", 16);
  Kokkos::parallel_for(
      "iota", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, 16),
      KOKKOS_LAMBDA(int i) { v(i) = float(i); });
  Kokkos::fence();

  // Any DLPack tensor (ours, numpy's, PyTorch's, ...) becomes a DLPackView:
  // an unmanaged Kokkos View over the producer's memory plus shared
  // ownership of the producer. LayoutRight insists on compact data;
  // LayoutStride (the default) takes any non-negative strides.
  kstage::DLPackView<float*, Kokkos::HostSpace, Kokkos::LayoutRight> imported =
      kstage::import_dlpack<float*, Kokkos::HostSpace, Kokkos::LayoutRight>(
          kstage::export_dlpack_versioned(v));
  std::printf("import: View data %p, imported View data %p (%s)\n", static_cast<void*>(v.data()),
              static_cast<void*>(imported.view().data()),
              imported.view().data() == v.data() ? "same memory, no copy" : "DIFFERENT");
  expect(imported.view().data() == v.data(), "import of an export is zero-copy");

  // It is the same memory: a kernel writing through the import is seen by v.
  auto iv = imported.view();  // capture the unmanaged View in kernels
  Kokkos::parallel_for(
      "scale", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, 16),
      KOKKOS_LAMBDA(int i) { iv(i) *= 2.f; });
  Kokkos::fence();
  expect(v(5) == 10.f, "a write through the import is visible in the View");

  // Copies of a DLPackView share the producer; its deleter runs once, when
  // the last copy dies.
  {
    auto copy = imported;
    std::printf("import: %ld DLPackView copies share the producer\n", copy.use_count());
    expect(copy.use_count() == 2, "two DLPackViews share the producer");
  }

  // A read-only export (View of const data) imports only as const data.
  Kokkos::View<const float*, Kokkos::HostSpace> readonly = v;
  DLManagedTensorVersioned* ro = kstage::export_dlpack_versioned(readonly);
  expect(ro->flags == DLPACK_FLAG_BITMASK_READ_ONLY, "a const View exports READ_ONLY");
  try {
    // The import owns `ro` from the call on: on refusal it calls the deleter.
    auto refused = kstage::import_dlpack<float*>(ro);
    expect(false, "a READ_ONLY tensor must not import as a writable View");
  } catch (const kstage::DLPackError& e) {
    std::printf("import: refused as expected (%s): %s\n", kstage_status_string(e.status()),
                e.what());
  }
  auto fine = kstage::import_dlpack<const float*>(kstage::export_dlpack_versioned(readonly));
  expect(fine.read_only() && fine.view()(3) == 6.f, "the const import of a READ_ONLY export");
}  // every DLPackView dies here, before Kokkos::finalize

// ---------------------------------------------------------------------------
// 4: a View into a stage column without a copy, and back out.
void stage_round_trip() {
  const int n = 64;
  kstage_stage_t stage = 0;
  if (!KS(kstage_create(nullptr, &stage))) return;  // Kokkos is already up: kstage leaves it to us
  kstage_token_t points = 0;
  std::vector<kstage_path_t> paths(n);
  kstage_query_t query = 0;
  KS(kstage_intern_token(stage, "points", KSTAGE_NUL_TERMINATED, &points));
  for (int i = 0; i < n; ++i) {
    const std::string p = "/particles/p" + std::to_string(i);
    KS(kstage_intern_path(stage, p.c_str(), p.size(), &paths[size_t(i)]));
  }
  KS(kstage_query_paths(stage, paths.data(), n, &query));

  const float* view_data = nullptr;
  {
    // (n, 3) floats: a write folds the trailing axis into a float3 column.
    Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace> positions("positions", n, 3);
    Kokkos::parallel_for(
        "positions", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, n),
        KOKKOS_LAMBDA(int i) {
          for (int j = 0; j < 3; ++j) positions(i, j) = float(i) + 0.5f * float(j);
        });
    Kokkos::fence();
    view_data = positions.data();

    // Hand the export to the stage as a managed tensor: ownership passes
    // with the call. A compact, aligned tensor written densely (every prim,
    // no index_map or mask) is adopted as is: at seal it becomes the
    // column's storage, and the stage calls the deleter when it no longer
    // needs it (here: at kstage_destroy).
    DLManagedTensorVersioned* managed[1] = {kstage::export_dlpack_versioned(positions)};
    kstage_write_data_t data = kstage_write_data_init();
    data.managed_tensors = managed;
    data.tensor_count = 1;
    kstage_op_t op = 0;
    KS(kstage_write_attribute(stage, query, points, 1, &data, KSTAGE_PRIM_MODE_UPSERT, &op));
    KS(kstage_wait(stage, op, KSTAGE_TIMEOUT_INFINITE));
    KS(kstage_release_op(stage, op));
  }  // `positions` is gone; the column keeps its allocation alive
  KS(kstage_advance_write_floor(stage, 1, nullptr, 0));  // seal ordinal 1

  // A zero-copy read: the group's tensor is the column storage itself.
  kstage_read_t read = 0;
  kstage_read_group_t group{};
  KS(kstage_read_attributes(stage, query, &points, 1, nullptr, &read));
  if (KS(kstage_fetch_read_next(stage, read, 0, &group))) {
    const void* storage = group.data.tensors[0].data;
    std::printf("stage: View data %p, column storage %p (%s)\n",
                static_cast<const void*>(view_data), storage,
                storage == view_data ? "the View is the column, no copy" : "COPIED");
    expect(storage == view_data, "the exported View became the column's storage");

    // Export the group (READ_ONLY: it is the column's storage) and import it
    // as a const View: the same memory a third time.
    DLManagedTensorVersioned* out = nullptr;
    if (KS(kstage_group_export(stage, group.handle, 0, 0, &out))) {
      auto back = kstage::import_dlpack<const float**, Kokkos::HostSpace, Kokkos::LayoutRight>(out);
      std::printf("stage: group export shape (%zu, %zu), read-only %s, data %p\n",
                  size_t(back.view().extent(0)), size_t(back.view().extent(1)),
                  back.read_only() ? "yes" : "no", static_cast<const void*>(back.view().data()));
      expect(back.view().data() == view_data, "the group export is the same memory");
      expect(back.read_only(), "a zero-copy group exports READ_ONLY");
      expect(back.view()(10, 2) == 11.f, "values through the group export");
    }  // `back` dies: the export's deleter runs
    KS(kstage_release_group(stage, group.handle));
  }
  KS(kstage_release_read(stage, read));
  KS(kstage_query_release(stage, query));
  KS(kstage_destroy(stage));  // releases the column, and so the View export
}

}  // namespace

int main(int argc, char* argv[]) {
  // The application owns Kokkos here; kstage_create sees it initialised and
  // leaves initialisation and finalisation to us.
  Kokkos::initialize(argc, argv);
  try {
    export_and_consume();
    import_back();
    stage_round_trip();
  } catch (const kstage::DLPackError& e) {
    std::fprintf(stderr, "unexpected DLPackError (%s): %s\n", kstage_status_string(e.status()),
                 e.what());
    ++g_failures;
  }
  // Every View, export and stage is gone by now: Kokkos can finalize.
  Kokkos::finalize();
  if (g_failures != 0) {
    std::fprintf(stderr, "dlpack_interop: %d mismatch(es)\n", g_failures);
    return 1;
  }
  std::printf("dlpack_interop: OK\n");
  return 0;
}
