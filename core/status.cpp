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

Status error(kstage_status_t code, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string s = vformat(fmt, args);
  va_end(args);
  return Status(code, std::move(s));
}

}  // namespace kstage
