// SPDX-License-Identifier: Apache-2.0
// Fresh host pages made resident in one call before a buffer is written whole.
//
// Memory the kernel has not given the process yet is faulted in one 4 KiB page at a time by its
// first touch: on a VM each such fault is a trap of its own (~1 us on the 2-vCPU VM), and a
// column's first seal of a few megabytes spends most of its time in them. Linux 5.14 and later
// make a range resident in one call (madvise MADV_POPULATE_WRITE), zero-filled as a fault would
// be: 4 MB written into fresh memory took 1.4 ms by first touch and 0.66 ms populated first.
#pragma once

#include <cstddef>

namespace kstage::backends::host {

// Makes the whole pages of [begin, end) resident and writable, when they are fresh: the first
// whole page is asked first (mincore), and memory the allocator hands back from its own free
// lists (resident already) is left alone, as walking resident pages costs ~0.1 us each. Returns
// the bytes it populated (0: none -- resident, no whole page, refused, or not Linux). Contents
// are unchanged; never fails.
size_t populate_fresh_pages(std::byte* begin, std::byte* end) noexcept;

}  // namespace kstage::backends::host
