// SPDX-License-Identifier: Apache-2.0
// A log callback for tests (kstage_set_log_callback): it records every message it is given,
// and how many of its calls ever ran at once. Installed for a scope by Recording.
#pragma once

#include <kstage/kstage.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kstage_test {

struct LogEntry {
  kstage_log_severity_t severity;
  std::string channel;
  std::string message;
};

class LogRecorder {
 public:
  static void callback(kstage_log_severity_t severity, const char* channel, const char* message,
                       void* user_data) {
    auto* self = static_cast<LogRecorder*>(user_data);
    const int now = ++self->running_;
    int seen = self->most_at_once_.load();
    while (now > seen && !self->most_at_once_.compare_exchange_weak(seen, now)) {
    }
    if (self->delay.count() > 0) std::this_thread::sleep_for(self->delay);
    {
      std::lock_guard lock(self->mutex_);
      self->entries_.push_back(LogEntry{severity, channel, message});
    }
    if (self->hook) self->hook(severity, channel, message);
    --self->running_;
  }
  std::vector<LogEntry> entries() const {
    std::lock_guard lock(mutex_);
    return entries_;
  }
  // The entries on `channel` whose message contains `needle`.
  std::vector<LogEntry> find(const std::string& channel, const std::string& needle = "") const {
    std::vector<LogEntry> out;
    for (const LogEntry& e : entries())
      if (e.channel == channel && e.message.find(needle) != std::string::npos) out.push_back(e);
    return out;
  }
  void clear() {
    std::lock_guard lock(mutex_);
    entries_.clear();
  }
  int running() const { return running_.load(); }
  int most_at_once() const { return most_at_once_.load(); }

  std::chrono::microseconds delay{0};  // each call sleeps this long
  // Called by each call after recording (on the dispatcher thread).
  std::function<void(kstage_log_severity_t, const char*, const char*)> hook;

 private:
  mutable std::mutex mutex_;
  std::vector<LogEntry> entries_;
  std::atomic<int> running_{0};
  std::atomic<int> most_at_once_{0};
};

// Installs `recorder` for the scope; removes it (back to KSTAGE_LOG) at the end.
struct Recording {
  Recording(LogRecorder& recorder, kstage_log_severity_t threshold, const char* filter = nullptr) {
    status = kstage_set_log_callback(&LogRecorder::callback, &recorder, threshold, filter);
  }
  ~Recording() { (void)kstage_set_log_callback(nullptr, nullptr, KSTAGE_LOG_OFF, nullptr); }
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;
  kstage_status_t status;
};

}  // namespace kstage_test
