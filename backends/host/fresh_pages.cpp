// SPDX-License-Identifier: Apache-2.0
#include "backends/host/fresh_pages.hpp"

#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace kstage::backends::host {

size_t populate_fresh_pages(std::byte* begin, std::byte* end) noexcept {
#if defined(__linux__)
  constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE (older headers lack the name)
  static const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + page - 1) & ~(page - 1);
  const uintptr_t last = reinterpret_cast<uintptr_t>(end) & ~(page - 1);
  if (last <= first) return 0;
  unsigned char resident = 1;
  if (mincore(reinterpret_cast<void*>(first), page, &resident) != 0 || (resident & 1) != 0)
    return 0;
  if (madvise(reinterpret_cast<void*>(first), last - first, kPopulateWrite) != 0) return 0;
  return size_t(last - first);
#else
  (void)begin;
  (void)end;
  return 0;
#endif
}

}  // namespace kstage::backends::host
