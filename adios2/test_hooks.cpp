// SPDX-License-Identifier: Apache-2.0
// The bridge's test hooks (test_hooks.hpp).
#include "adios2/test_hooks.hpp"

#include "adios2/bridge.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace kstage::adios2_bridge {

void test_hook_cut_before_read() {
  const char* hook = std::getenv("KSTAGE_ADIOS2_TEST_CUT_BEFORE_READ");
  if (hook == nullptr || *hook == '\0') return;
  char* end = nullptr;
  const unsigned long long bytes = std::strtoull(hook, &end, 10);
  if (end == hook || *end != ':')
    fail(KSTAGE_INVALID_ARGUMENT, "KSTAGE_ADIOS2_TEST_CUT_BEFORE_READ is '%s', not <bytes>:<file>",
         hook);
  if (::truncate(end + 1, off_t(bytes)) != 0)
    fail(KSTAGE_OP_FAILED, "KSTAGE_ADIOS2_TEST_CUT_BEFORE_READ: cannot cut '%s': %s", end + 1,
         std::strerror(errno));
}

void test_hook_fail_put(const std::string& attribute) {
  const char* hook = std::getenv("KSTAGE_ADIOS2_TEST_FAIL_PUT");
  if (hook != nullptr && attribute == hook)
    fail(KSTAGE_OP_FAILED,
         "kstage_adios2_write_step: the put of attribute '%s' failed "
         "(KSTAGE_ADIOS2_TEST_FAIL_PUT)",
         attribute.c_str());
}

}  // namespace kstage::adios2_bridge
