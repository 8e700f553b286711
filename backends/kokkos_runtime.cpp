// SPDX-License-Identifier: Apache-2.0
// The Kokkos runtime (in backends/: the engine in core/ names Kokkos only in
// its kernel templates). Kokkos lifetime for a library without main(): initialise only if the
// application has not (Kokkos 4+ aborts on double initialisation, and a
// ScopeGuard would do that), and finalise at exit only what we initialised,
// after `before_finalize` has released every buffer we own.
#include "core/backend.hpp"
#include "core/profiling_region.hpp"

#include <Kokkos_Core.hpp>

#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>

namespace kstage::core {

ProfilingRegion::ProfilingRegion(const char* name) noexcept : pushed_(false) {
  // Kokkos::Profiling::pushRegion takes a std::string: build it only for a tool.
  if (!Kokkos::Profiling::profileLibraryLoaded()) return;
  try {
    Kokkos::Profiling::pushRegion(name);
    pushed_ = true;
  } catch (...) {  // no memory for the name: the profile misses this region, the call goes on
  }
}

ProfilingRegion::~ProfilingRegion() {
  if (!pushed_) return;
  try {
    Kokkos::Profiling::popRegion();
  } catch (...) {  // a destructor, and the C API never throws
  }
}

namespace {
bool g_we_initialized = false;
void (*g_before_finalize)() = nullptr;
}  // namespace

Status ensure_kokkos_initialized(void (*before_finalize)(), DLDevice residency) {
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  if (Kokkos::is_initialized()) return Status::OK();
  if (g_we_initialized)
    return error(KSTAGE_INTERNAL, "Kokkos was already finalized; it cannot be initialized again");
  // Kokkos runs one GPU per process: the first stage's residency picks it
  // (an MPI rank's device, say). Otherwise Kokkos' own choice (its
  // --kokkos-device-id and environment, else device 0).
  const bool on_gpu = residency.device_type == kDLCUDA || residency.device_type == kDLCUDAManaged ||
                      residency.device_type == kDLROCM;
  try {
    if (on_gpu && residency.device_id >= 0) {
#if KOKKOS_VERSION >= 30700
      Kokkos::initialize(Kokkos::InitializationSettings().set_device_id(residency.device_id));
#else
      Kokkos::InitArguments args;
      args.device_id = residency.device_id;
      Kokkos::initialize(args);
#endif
    } else {
      Kokkos::initialize();
    }
  } catch (const std::exception& e) {
    return error(KSTAGE_DEVICE_ERROR, "Kokkos::initialize failed: %s", e.what());
  }
  g_we_initialized = true;
  g_before_finalize = before_finalize;
  std::atexit([] {
    if (g_before_finalize) g_before_finalize();
    if (Kokkos::is_initialized()) Kokkos::finalize();
  });
  return Status::OK();
}

bool kokkos_is_running() { return Kokkos::is_initialized(); }

KokkosInfo kokkos_info() {
  KokkosInfo info;
  info.built = std::to_string(KOKKOS_VERSION / 10000) + "." +
               std::to_string(KOKKOS_VERSION / 100 % 100) + "." +
               std::to_string(KOKKOS_VERSION % 100);
  info.host_parallel = Kokkos::DefaultHostExecutionSpace::name();
  if (!kokkos_is_running()) return info;
  info.initialized = true;
  info.threads = Kokkos::DefaultHostExecutionSpace().concurrency();
  // The loaded library's own version: the line its configuration report starts with (the
  // header's KOKKOS_VERSION is what kstage was compiled against, which a newer shared Kokkos
  // need not be). Read once: the loaded library does not change, and the report is long.
  static const std::string running = [] {
    std::ostringstream config;
    Kokkos::print_configuration(config);
    const std::string text = config.str();
    const std::string key = "Kokkos Version: ";
    const size_t at = text.find(key);
    if (at == std::string::npos) return std::string();
    const size_t from = at + key.size();
    return text.substr(from, text.find_first_of("\r\n", from) - from);
  }();
  info.running = running;
  return info;
}

}  // namespace kstage::core
