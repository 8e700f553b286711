// SPDX-License-Identifier: Apache-2.0
// Support for tests that run kstage calls on several threads. Catch2
// assertions are not thread-safe, so worker threads record failures in an
// Errors list that the main thread checks after joining.
#pragma once

#include <kstage/kstage.h>

#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace kstage_test {

class Errors {
 public:
  void add(const std::string& e) {
    std::lock_guard lock(mutex_);
    if (list_.size() < 20) list_.push_back(e);
    ++count_;
  }
  // Records a failed call with its status and message; returns false then.
  bool ok(kstage_status_t st, const char* what) {
    if (st == KSTAGE_OK) return true;
    add(std::string(what) + " -> " + kstage_status_string(st) + ": " + kstage_last_error());
    return false;
  }
  size_t count() const {
    std::lock_guard lock(mutex_);
    return count_;
  }
  std::string report() const {
    std::lock_guard lock(mutex_);
    std::string s;
    for (const auto& e : list_) s += e + "\n";
    return s;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> list_;
  size_t count_ = 0;
};

#define CHECK_T(errors, cond, msg)               \
  do {                                           \
    if (!(cond)) {                               \
      std::ostringstream os_;                    \
      os_ << __LINE__ << ": " #cond ": " << msg; \
      (errors).add(os_.str());                   \
    }                                            \
  } while (0)

}  // namespace kstage_test
