// SPDX-License-Identifier: Apache-2.0
// The GPU backend's lanes (backends/gpu/gpu_backend.hpp): the current device for a scope
// (DeviceGuard), the integers kstage_device_sync_t carries streams and events as, and a lane --
// a stream and the Kokkos instance on it -- with the per-device cache of the lanes no stage
// holds now (Lanes).
#pragma once

#include "core/log.hpp"
#include "core/status.hpp"

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

namespace kstage::backends::gpu {

// Makes `device` the calling thread's current device for a scope and puts
// the caller's back after: runtime calls act on the current device, kstage
// may be called from any thread, and the application's choice is its own.
template <class RT>
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (RT::get_device(&previous_) != RT::success) previous_ = -1;
    if (previous_ != device && RT::set_device(device) != RT::success) (void)RT::take_error();
  }
  ~DeviceGuard() {
    int now = -1;
    if (previous_ >= 0 && RT::get_device(&now) == RT::success && now != previous_)
      (void)RT::set_device(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// kstage_device_sync_t carries streams and events as integers.
template <class T>
T from_handle(uintptr_t v) {
  if constexpr (std::is_pointer_v<T>) return reinterpret_cast<T>(v);
  else return T(v);
}
template <class T>
uintptr_t to_handle(T v) {
  if constexpr (std::is_pointer_v<T>) return reinterpret_cast<uintptr_t>(v);
  else return uintptr_t(v);
}

// A stream and the Kokkos instance on it, and a second stream (made when first needed) for
// reading back a few bytes that finished work produced, without waiting for later work on the
// first (an index map's check report).
template <class RT>
struct Lane {
  typename RT::Stream stream{};
  typename RT::Exec exec;
  typename RT::Stream side{};
};

// The lanes of every device no stage holds now, kept for the next stage and
// destroyed when Kokkos finalises (an instance must not outlive it).
template <class RT>
class Lanes {
 public:
  static Result<std::unique_ptr<Lane<RT>>> take(int device) {
    {
      std::lock_guard lock(mutex());
      auto& idle = lanes()[device];
      if (!idle.empty()) {
        std::unique_ptr<Lane<RT>> lane = std::move(idle.back());
        idle.pop_back();
        return Result<std::unique_ptr<Lane<RT>>>(std::move(lane));  // explicit, for nvcc
      }
    }
    typename RT::Stream s{};
    if (typename RT::Error e = RT::stream_create(&s); e != RT::success) {
      (void)RT::take_error();
      return core::log::reported(
          core::log::Channel::Device, KSTAGE_DEVICE_ERROR,
          error(KSTAGE_DEVICE_ERROR, "%s device %d: stream creation failed: %s", RT::kName, device,
                RT::error_string(e)));
    }
    register_finalize_hook();
    return std::unique_ptr<Lane<RT>>(new Lane<RT>{s, RT::make_exec(s)});
  }
  // Given back by a stage; its work may still be running (the next stage orders after it).
  static void give(int device, std::unique_ptr<Lane<RT>> lane) noexcept {
    try {
      std::lock_guard lock(mutex());
      if (Kokkos::is_initialized()) {
        lanes()[device].push_back(std::move(lane));
        return;
      }
    } catch (...) {
    }
    destroy(std::move(lane));
  }

 private:
  static void destroy(std::unique_ptr<Lane<RT>> lane) noexcept {
    if (!lane) return;
    const typename RT::Stream s = lane->stream, side = lane->side;
    (void)RT::stream_synchronize(s);
    lane.reset();  // the instance first, then its stream
    (void)RT::stream_destroy(s);
    if (side) (void)RT::stream_destroy(side);
    (void)RT::take_error();
  }
  static void register_finalize_hook() {
    static std::once_flag once;
    std::call_once(once, [] {
      Kokkos::push_finalize_hook([] {
        std::map<int, std::vector<std::unique_ptr<Lane<RT>>>> all;
        {
          std::lock_guard lock(mutex());
          all.swap(lanes());
        }
        for (auto& [device, list] : all) {
          const DeviceGuard<RT> on_device(device);
          for (auto& lane : list) destroy(std::move(lane));
        }
      });
    });
  }
  static std::mutex& mutex() {
    static auto* m = new std::mutex;  // never destroyed: stages may outlive statics
    return *m;
  }
  static std::map<int, std::vector<std::unique_ptr<Lane<RT>>>>& lanes() {
    static auto* l = new std::map<int, std::vector<std::unique_ptr<Lane<RT>>>>;
    return *l;
  }
};

}  // namespace kstage::backends::gpu
