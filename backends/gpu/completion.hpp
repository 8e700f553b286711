// SPDX-License-Identifier: Apache-2.0
// What the GPU backend hands the engine to learn that device work is done, and how it went
// (backends/gpu/gpu_backend.hpp): an op's completion on an event, and the results a kernel
// leaves on the device for the host to read once -- a device index map's check report, a
// device mask's words.
#pragma once

#include "backends/gpu/lanes.hpp"
#include "backends/gpu/launch.hpp"
#include "backends/gpu/shared.hpp"
#include "core/backend.hpp"
#include "core/buffer.hpp"
#include "core/log.hpp"
#include "core/status.hpp"
#include "core/transfer_counts.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kstage::backends::gpu {

template <class RT>
class GpuCompletion final : public core::Completion {
 public:
  GpuCompletion(std::shared_ptr<GpuShared<RT>> shared, typename RT::Event event)
      : shared_(std::move(shared)), event_(event) {}
  ~GpuCompletion() override { (void)RT::event_destroy(event_); }
  // An event that reports an error is done, and failed: a device fault.
  bool done() const override {
    const DeviceGuard<RT> on_device(shared_->device);
    const typename RT::Error e = RT::event_query(event_);
    if (e == RT::not_ready) return false;
    note(e);
    return true;
  }
  bool wait(uint64_t timeout_ns) const override {
    if (timeout_ns == KSTAGE_TIMEOUT_INFINITE) {
      const DeviceGuard<RT> on_device(shared_->device);
      note(RT::event_synchronize(event_));
      return true;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout_ns);
    for (int polls = 0; !done(); ++polls) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      if (polls < 64) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(50));  // no core spent on a wait
    }
    return true;
  }
  Status status() const override {
    const int failed = failed_.load();
    if (failed == 0) return Status::OK();
    return error(KSTAGE_DEVICE_ERROR, "%s device %d: the op's device work failed: %s", RT::kName,
                 int(shared_->device), RT::error_string(typename RT::Error(failed)));
  }
  kstage_device_sync_t sync() const override {
    return {to_handle(shared_->stream), to_handle(event_)};
  }

 private:
  void note(typename RT::Error e) const {
    if (e == RT::success) return;
    (void)RT::take_error();
    int none = 0;
    // Said once per failed op, when it is first seen: also when nobody waits for the op.
    if (failed_.compare_exchange_strong(none, int(e)))
      KSTAGE_LOG_AT(Device, KSTAGE_LOG_ERROR,
                    "%s device %d: device work failed: %s (its op fails with "
                    "KSTAGE_DEVICE_ERROR, and so does every later call that needs the device)",
                    RT::kName, int(shared_->device), RT::error_string(e));
  }
  std::shared_ptr<GpuShared<RT>> shared_;
  typename RT::Event event_;
  mutable std::atomic<int> failed_{0};
};

// A few bytes of device memory that a kernel or copy writes, read on the host once: an event
// recorded after that work, and a copy on the lane's side stream after it (the stage's stream
// may hold later work). A device index map's check report, a device mask's words.
template <class RT>
class GpuReadBack {
 public:
  GpuReadBack(std::shared_ptr<GpuShared<RT>> shared, core::BufferPtr buffer,
              typename RT::Event event)
      : shared_(std::move(shared)), buffer_(std::move(buffer)), event_(event) {}
  ~GpuReadBack() { (void)RT::event_destroy(event_); }
  GpuReadBack(const GpuReadBack&) = delete;
  GpuReadBack& operator=(const GpuReadBack&) = delete;

  // The buffer's first `bytes`, read once and kept.
  Result<const std::vector<std::byte>*> bytes(size_t bytes, const char* what) const {
    std::lock_guard lock(mutex_);
    if (!read_) {
      const DeviceGuard<RT> on_device(shared_->device);
      KSTAGE_RETURN_NOT_OK(device_status(RT::event_synchronize(event_), what));
      Result<typename RT::Stream> side = shared_->side_stream();
      if (!side.ok()) return side.status();
      std::vector<std::byte> host(bytes);
      // To pageable memory: the copy has completed when the call returns.
      KSTAGE_RETURN_NOT_OK(device_status(
          RT::memcpy_async(host.data(), buffer_->data(), bytes, RT::kDeviceToHost, side.value()),
          what));
      KSTAGE_RETURN_NOT_OK(device_status(RT::stream_synchronize(side.value()), what));
      ++core::transfer_counts().device_to_host;
      RT::count(shared_->device, Transfer::DeviceToHost);
      value_ = std::move(host);
      read_ = true;
    }
    return &value_;
  }

 private:
  Status device_status(typename RT::Error e, const char* what) const {
    if (e == RT::success) return Status::OK();
    (void)RT::take_error();
    return core::log::reported(
        core::log::Channel::Device, KSTAGE_DEVICE_ERROR,
        error(KSTAGE_DEVICE_ERROR, "%s device %d: reading back the %s failed: %s", RT::kName,
              int(shared_->device), what, RT::error_string(e)));
  }
  std::shared_ptr<GpuShared<RT>> shared_;
  core::BufferPtr buffer_;
  typename RT::Event event_;
  mutable std::mutex mutex_;
  mutable bool read_ = false;
  mutable std::vector<std::byte> value_;
};

// A device index map's check (core::IndexCheck): the reduction's word.
template <class RT>
class GpuIndexCheck final : public core::IndexCheck {
 public:
  // `wide`: the check of an int64 index (checked_gather_report's two words), else one word.
  GpuIndexCheck(std::shared_ptr<GpuShared<RT>> shared, core::BufferPtr report,
                typename RT::Event event, bool wide)
      : wide_(wide), report_(std::move(shared), std::move(report), event) {}
  Result<Bad> first_bad() const override {
    const std::vector<std::byte>* b = nullptr;
    uint64_t words[2] = {0, 0};
    KSTAGE_ASSIGN_OR_RETURN(b,
                            report_.bytes((wide_ ? 2 : 1) * sizeof(uint64_t), "index map check"));
    std::memcpy(words, b->data(), b->size());
    if (words[0] == kNone) return Bad{};
    return Bad{words[0] >> 32, wide_ ? int64_t(words[1]) : int64_t(words[0] & 0xffffffffu)};
  }

 private:
  bool wide_;
  GpuReadBack<RT> report_;
};

// A device mask's words (core::MaskSelection), copied on the device when the write was staged.
template <class RT>
class GpuMaskSelection final : public core::MaskSelection {
 public:
  GpuMaskSelection(std::shared_ptr<GpuShared<RT>> shared, core::BufferPtr copy, size_t words,
                   typename RT::Event event)
      : words_(words), copy_(std::move(shared), std::move(copy), event) {}
  Result<std::vector<uint64_t>> words() const override {
    const std::vector<std::byte>* b = nullptr;
    KSTAGE_ASSIGN_OR_RETURN(b, copy_.bytes(words_ * sizeof(uint64_t), "mask"));
    std::vector<uint64_t> out(words_);
    std::memcpy(out.data(), b->data(), words_ * sizeof(uint64_t));
    return out;
  }

 private:
  size_t words_;
  GpuReadBack<RT> copy_;
};

}  // namespace kstage::backends::gpu
