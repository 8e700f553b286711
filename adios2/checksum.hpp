// SPDX-License-Identifier: Apache-2.0
// The bridge's checksum: XXH3-64 from xxHash (Debian's libxxhash-dev, scripts/setup/xxhash.sh),
// used header-only so that nothing more is linked or shipped. XXH3 runs at memory speed (over
// 10 GB/s a core), so a checkpoint's files are hashed for a small part of their write's cost.
#pragma once

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL  // static functions in this translation unit: no libxxhash to link
#endif
#include <xxhash.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace kstage::adios2_bridge {

inline uint64_t xxh3(const void* data, size_t bytes) { return XXH3_64bits(data, bytes); }

// A checksum as the manifest writes it: 16 lower-case hex digits.
inline std::string hex64(uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

}  // namespace kstage::adios2_bridge
