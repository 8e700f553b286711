// SPDX-License-Identifier: Apache-2.0
// The backends of one stage: the host backend always; device backends (CUDA,
// HIP) when the Kokkos build enables them (their folders add themselves).
#include "backends/host/host_backend.hpp"
#include "core/dtype.hpp"

#include <Kokkos_Core.hpp>


namespace kstage::core {
namespace {

class HostOnlySet final : public BackendSet {
 public:
  explicit HostOnlySet(std::unique_ptr<Backend> host) : host_(std::move(host)) {}
  Backend& host() override { return *host_; }
  Result<Backend*> residency_for(DLDevice source) override {
    if (host_->can_access(source)) return host_.get();
    return unsupported(source);
  }
  Result<Backend*> for_device(DLDevice device) override {
    if (device.device_type == host_->device().device_type) return host_.get();
    return unsupported(device);
  }

 private:
  static Status unsupported(DLDevice d) {
    return error(KSTAGE_NOT_SUPPORTED,
                 "device type %s (%d), id %d: this kstage build has no backend for it "
                 "(Kokkos backends: host only)",
                 device_type_name(d.device_type), int(d.device_type), int(d.device_id));
  }
  std::unique_ptr<Backend> host_;
};

}  // namespace

Result<std::unique_ptr<BackendSet>> make_backend_set(const kstage_config_t& config) {
  bool parallel;
  switch (config.host_execution) {
    case KSTAGE_HOST_EXECUTION_DEFAULT:
#if defined(KSTAGE_DEFAULT_HOST_EXECUTION_SERIAL)
      parallel = false;
#else
      parallel = true;
#endif
      break;
    case KSTAGE_HOST_EXECUTION_SERIAL: parallel = false; break;
    case KSTAGE_HOST_EXECUTION_PARALLEL: parallel = true; break;
    default:
      return error(KSTAGE_INVALID_ARGUMENT, "config.host_execution %d is not a kstage_host_execution_t",
                   int(config.host_execution));
  }
  return std::unique_ptr<BackendSet>(
      std::make_unique<HostOnlySet>(backends::host::make_host_backend(parallel)));
}

}  // namespace kstage::core
