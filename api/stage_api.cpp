// SPDX-License-Identifier: Apache-2.0
// Status strings, the thread's last error, and stage lifecycle.
#include "api/descriptors.hpp"
#include "api/guard.hpp"
#include "api/handles.hpp"
#include "core/backend.hpp"
#include "core/dtype.hpp"
#include "core/log.hpp"
#include "core/transfer_counts.hpp"

namespace kstage::capi {

void destroy_all_stages_at_exit();

namespace {
thread_local std::string t_last_error;
thread_local std::string t_build_info;
}  // namespace

kstage_status_t fail(kstage_status_t code, const char* message, const char* detail) noexcept {
  try {
    t_last_error.assign(message);
    t_last_error.append(detail);
  } catch (...) {
    t_last_error.clear();
  }
  return code;
}

}  // namespace kstage::capi

using namespace kstage;
using namespace kstage::capi;

extern "C" {

const char* kstage_status_string(kstage_status_t status) {
  switch (status) {
    case KSTAGE_OK: return "KSTAGE_OK";
    case KSTAGE_INVALID_ARGUMENT: return "KSTAGE_INVALID_ARGUMENT";
    case KSTAGE_INVALID_HANDLE: return "KSTAGE_INVALID_HANDLE";
    case KSTAGE_NOT_FOUND: return "KSTAGE_NOT_FOUND";
    case KSTAGE_ALREADY_EXISTS: return "KSTAGE_ALREADY_EXISTS";
    case KSTAGE_WRITE_FLOOR_VIOLATION: return "KSTAGE_WRITE_FLOOR_VIOLATION";
    case KSTAGE_NOT_SUPPORTED: return "KSTAGE_NOT_SUPPORTED";
    case KSTAGE_END_OF_ITERATION: return "KSTAGE_END_OF_ITERATION";
    case KSTAGE_TIMEOUT: return "KSTAGE_TIMEOUT";
    case KSTAGE_OUT_OF_MEMORY: return "KSTAGE_OUT_OF_MEMORY";
    case KSTAGE_OUT_OF_RANGE: return "KSTAGE_OUT_OF_RANGE";
    case KSTAGE_OP_FAILED: return "KSTAGE_OP_FAILED";
    case KSTAGE_DEVICE_ERROR: return "KSTAGE_DEVICE_ERROR";
    case KSTAGE_INTERNAL: return "KSTAGE_INTERNAL";
    default: return "KSTAGE_UNKNOWN_STATUS";
  }
}

const char* kstage_last_error(void) { return t_last_error.c_str(); }

uint32_t kstage_version(void) {
  return KSTAGE_VERSION_MAJOR * 10000u + KSTAGE_VERSION_MINOR * 100u + KSTAGE_VERSION_PATCH;
}

kstage_status_t kstage_transfer_counts(uint64_t* host_to_device, uint64_t* device_to_host,
                                       uint64_t* index_uploads) {
  const core::TransferCounts& c = core::transfer_counts();
  if (host_to_device) *host_to_device = c.host_to_device.load(std::memory_order_relaxed);
  if (device_to_host) *device_to_host = c.device_to_host.load(std::memory_order_relaxed);
  if (index_uploads) *index_uploads = c.index_uploads.load(std::memory_order_relaxed);
  return KSTAGE_OK;
}

kstage_status_t kstage_device_check(kstage_stage_t stage, DLDevice device) {
  return with_stage("kstage::device_check", stage,
                    [&](StageEntry& s) -> Status { return s.engine->check_device(device); });
}

kstage_status_t kstage_build_info(const char** text) {
  return guard([&]() -> Status {
    KSTAGE_RETURN_NOT_OK(need(text, "text"));
    const core::KokkosInfo kokkos = core::kokkos_info();
    std::string out = format("kstage: %d.%d.%d\n", KSTAGE_VERSION_MAJOR, KSTAGE_VERSION_MINOR,
                             KSTAGE_VERSION_PATCH);
    out += "kokkos_built: " + kokkos.built + "\n";
    out += "kokkos_running: " + (kokkos.initialized ? kokkos.running : "not initialized") + "\n";
#if defined(KSTAGE_DEFAULT_HOST_EXECUTION_SERIAL)
    out += "host_execution: Serial\n";
#else
    out += "host_execution: " + kokkos.host_parallel + "\n";
#endif
    out += "host_threads: " +
           (kokkos.initialized ? std::to_string(kokkos.threads) : "not initialized") + "\n";
    std::string backends, devices;
    for (const core::BackendFactory* f : core::registered_backends()) {
      backends += (backends.empty() ? "" : " ") + std::string(f->name);
      devices += (devices.empty() ? "" : " ") + std::string(f->name) + ":" +
                 std::to_string(f->device_count());
    }
    out += "backends: " + backends + "\n";
    out += "devices: " + devices + "\n";
    t_build_info = std::move(out);
    *text = t_build_info.c_str();
    return Status::OK();
  });
}

kstage_status_t kstage_create(const kstage_config_t* config, kstage_stage_t* stage) {
  core::log::init_once();  // KSTAGE_LOG is read here at the latest: a bad value is said early
  return guard("kstage::create", [&]() -> Status {
    KSTAGE_RETURN_NOT_OK(need(stage, "stage"));
    kstage_config_t c = kstage_config_init();  // NULL: the defaults
    if (config) {
      KSTAGE_ASSIGN_OR_RETURN(c, read_descriptor(config, "config"));
    }
    // A residency that does not exist is the caller's mistake, reported before Kokkos would be
    // initialised on it (Kokkos aborts on a GPU id it does not have).
    KSTAGE_RETURN_NOT_OK(core::check_device_exists(c.residency));
    KSTAGE_RETURN_NOT_OK(core::ensure_kokkos_initialized(&destroy_all_stages_at_exit, c.residency));
    auto entry = std::make_shared<StageEntry>();
    KSTAGE_ASSIGN_OR_RETURN(entry->engine, core::Stage::create(c));
    *stage = register_stage(std::move(entry));
    static const char* const kExec[] = {"default", "serial", "parallel"};
    if (core::log::enabled(core::log::Channel::Stage, KSTAGE_LOG_DEBUG)) {
      const std::string residency =
          c.residency.device_type == 0
              ? std::string("where the data lives")
              : format("%s:%d", core::device_type_name(c.residency.device_type),
                       int(c.residency.device_id));
      core::log::emit(
          core::log::Channel::Stage, KSTAGE_LOG_DEBUG,
          "stage %llu created: residency %s, host execution %s", (unsigned long long)*stage,
          residency.c_str(),
          c.host_execution >= 0 && c.host_execution <= 2 ? kExec[c.host_execution] : "?");
    }
    return Status::OK();
  });
}

kstage_status_t kstage_destroy(kstage_stage_t stage) {
  return guard("kstage::destroy", [&]() -> Status {
    if (!unregister_stage(stage))
      return error(KSTAGE_INVALID_HANDLE,
                   "stage handle %llu is not a live stage (already destroyed?)",
                   (unsigned long long)stage);
    KSTAGE_LOG_AT(Stage, KSTAGE_LOG_DEBUG, "stage %llu destroyed", (unsigned long long)stage);
    return Status::OK();
  });
}

}  // extern "C"
