// SPDX-License-Identifier: Apache-2.0
// The backends of one stage, resolved in one place from the registry of the
// build (backends/CMakeLists.txt lists every backends/<name>/ folder that
// is enabled): the host backend always, a device backend the first time a
// column, a source tensor or a read names its device.
#include "core/backend.hpp"
#include "core/dtype.hpp"

#include <kstage/memory_space.hpp>

#include <map>
#include <mutex>

namespace kstage::core {
namespace {

// The factory for a device, checked: NOT_SUPPORTED when the build has no
// backend for its type, INVALID_ARGUMENT when the ordinal does not exist.
Result<const BackendFactory*> factory_for(DLDevice device) {
  const BackendFactory* factory = nullptr;
  for (const BackendFactory* f : registered_backends())
    if (f->device_type == int32_t(device.device_type)) factory = f;
  if (!factory) {
    std::string names;
    for (const BackendFactory* f : registered_backends())
      names += std::string(names.empty() ? "" : ", ") + f->name;
    return error(KSTAGE_NOT_SUPPORTED,
                 "device type %s (%d), id %d: this kstage build has no backend for it "
                 "(backends: %s)",
                 device_type_name(device.device_type), int(device.device_type),
                 int(device.device_id), names.c_str());
  }
  const int32_t count = factory->device_count();
  if (device.device_id < 0 || device.device_id >= count)
    return error(
        KSTAGE_INVALID_ARGUMENT, "device %s:%d does not exist: the process has %d %s device(s)",
        device_type_name(device.device_type), int(device.device_id), int(count), factory->name);
  return factory;
}

class StageBackends final : public BackendSet {
 public:
  StageBackends(const kstage_config_t& config, std::unique_ptr<Backend> host)
      : config_(config), host_(std::move(host)) {}

  Backend& host() override { return *host_; }

  Result<Backend*> residency_for(DLDevice source) override {
    if (host_->can_access(source) && is_host_memory(source.device_type)) return host_.get();
    // Memory both sides read (CUDA managed): the column lives on the device.
    for (const BackendFactory* f : registered_backends())
      if (f->managed_device_type != 0 && f->managed_device_type == int32_t(source.device_type))
        return for_device(DLDevice{DLDeviceType(f->device_type), source.device_id});
    return for_device(source);
  }

  Result<Backend*> for_device(DLDevice device) override {
    if (device.device_type == host_->device().device_type) {
      if (device.device_id != 0)
        return error(KSTAGE_INVALID_ARGUMENT, "device %s:%d: the host is device 0",
                     device_type_name(device.device_type), int(device.device_id));
      return host_.get();
    }
    std::lock_guard lock(mutex_);
    const auto key = std::pair{int32_t(device.device_type), device.device_id};
    if (auto it = devices_.find(key); it != devices_.end()) return it->second.get();
    const BackendFactory* factory = nullptr;
    KSTAGE_ASSIGN_OR_RETURN(factory, factory_for(device));
    std::unique_ptr<Backend> b;
    KSTAGE_ASSIGN_OR_RETURN(b, factory->make(device.device_id, config_));
    Backend* raw = b.get();
    devices_.emplace(key, std::move(b));
    return raw;
  }

  std::vector<Backend*> active() override {
    std::lock_guard lock(mutex_);
    std::vector<Backend*> out{host_.get()};
    for (auto& [key, b] : devices_) out.push_back(b.get());
    return out;
  }

 private:
  kstage_config_t config_;
  std::unique_ptr<Backend> host_;
  std::mutex mutex_;
  std::map<std::pair<int32_t, int32_t>, std::unique_ptr<Backend>> devices_;
};

}  // namespace

Result<std::unique_ptr<BackendSet>> make_backend_set(const kstage_config_t& config) {
  const BackendFactory* host = nullptr;
  for (const BackendFactory* f : registered_backends())
    if (f->device_type == kDLCPU) host = f;
  if (!host) return error(KSTAGE_INTERNAL, "this kstage build registered no host backend");
  std::unique_ptr<Backend> h;
  KSTAGE_ASSIGN_OR_RETURN(h, host->make(0, config));
  auto set = std::make_unique<StageBackends>(config, std::move(h));
  // A named residency must exist before the stage does (a bad one is the
  // caller's mistake, reported by kstage_create, not at the first write).
  if (config.residency.device_type != 0)
    KSTAGE_RETURN_NOT_OK(set->for_device(config.residency).status());
  return std::unique_ptr<BackendSet>(std::move(set));
}

Status check_device_exists(DLDevice device) {
  if (device.device_type == 0 || is_host_memory(device.device_type)) return Status::OK();
  return factory_for(device).status();
}

Status transfer(Backend& to, std::byte* dst, Backend& from, const std::byte* src, size_t bytes) {
  if (bytes == 0) return Status::OK();
  const bool to_host = is_host_memory(to.device().device_type);
  const bool from_host = is_host_memory(from.device().device_type);
  if (&to == &from) {
    to.copy_bytes(dst, src, bytes);
  } else if (from_host) {
    to.copy_from_host(dst, src, bytes);  // host work is complete when enqueued
  } else if (to_host) {
    from.copy_to_host(dst, src, bytes);
    KSTAGE_RETURN_NOT_OK(from.finish());  // the host side reads it next
  } else {
    // Two devices: through host memory that lives until the second copy is done.
    std::vector<std::byte> bounce(bytes);
    from.copy_to_host(bounce.data(), src, bytes);
    KSTAGE_RETURN_NOT_OK(from.finish());
    to.copy_from_host(dst, bounce.data(), bytes);
    KSTAGE_RETURN_NOT_OK(to.finish());
  }
  return Status::OK();
}

}  // namespace kstage::core
