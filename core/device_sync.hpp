// SPDX-License-Identifier: Apache-2.0
// kstage_device_sync_t rules that do not depend on a backend (docs/design.md,
// "Synchronisation"): work that stays on the host has nothing to order, so
// its sync is {0, 0} both ways, and anything else is a caller's mistake (a
// CUDA event handed to a host write would otherwise be silently ignored).
#pragma once

#include "core/status.hpp"

namespace kstage::core {

inline bool is_set(const kstage_device_sync_t& s) { return s.stream != 0 || s.event != 0; }

// INVALID_ARGUMENT naming `field` unless `s` is {0, 0}; `why` says what is
// host-only.
inline Status check_host_sync(const kstage_device_sync_t& s, const char* field, const char* why) {
  if (!is_set(s)) return Status::OK();
  return error(KSTAGE_INVALID_ARGUMENT,
               "%s is {stream 0x%llx, event 0x%llx} but %s: host work takes {0, 0} (there is no "
               "device work to order)",
               field, (unsigned long long)s.stream, (unsigned long long)s.event, why);
}

}  // namespace kstage::core
