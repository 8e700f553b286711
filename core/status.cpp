// SPDX-License-Identifier: Apache-2.0
#include "core/status.hpp"

#include <cstdarg>
#include <cstdio>

namespace kstage {
namespace {

KSTAGE_PRINTF(1, 0) std::string vformat(const char* fmt, va_list args) {
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, args);
  std::string s;
  if (n > 0) {
    s.resize(size_t(n));
    std::vsnprintf(s.data(), s.size() + 1, fmt, again);
  } else if (n < 0) {
    s = fmt;  // an encoding error: the unformatted text still says where
  }
  va_end(again);
  return s;
}

}  // namespace

std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string s = vformat(fmt, args);
  va_end(args);
  return s;
}

Status Status::out_of_memory() noexcept {
  // A short message (no allocation for the string), in static storage (none for the state).
  static const State state{KSTAGE_OUT_OF_MEMORY, "out of memory"};
  Status st;
  st.state_ = std::shared_ptr<const State>(std::shared_ptr<const State>(), &state);
  return st;
}

Status out_of_memory(const char* fmt, ...) noexcept {
  va_list args;
  va_start(args, fmt);
  Status st;
  try {
    st = Status(KSTAGE_OUT_OF_MEMORY, vformat(fmt, args));
  } catch (...) {
    st = Status::out_of_memory();
  }
  va_end(args);
  return st;
}

Status error(kstage_status_t code, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string s = vformat(fmt, args);
  va_end(args);
  return Status(code, std::move(s));
}

}  // namespace kstage
