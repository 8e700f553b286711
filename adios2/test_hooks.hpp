// SPDX-License-Identifier: Apache-2.0
// Failures at instants a test cannot reach from outside a call: a file cut after a read step
// began (past every check made before it) and a write step whose puts fail half-way. Read from
// the environment at each call (tests/adios2 sets and unsets them within one process), never
// set in production; each costs a getenv where it is checked.
//   KSTAGE_ADIOS2_TEST_CUT_BEFORE_READ=<bytes>:<file>   kstage_adios2_read_step, once ADIOS2's
//                                                      step has begun and before any of it is
//                                                      read: <file> cut to <bytes>
//   KSTAGE_ADIOS2_TEST_FAIL_PUT=<attribute>            kstage_adios2_write_step: the put of
//                                                      <attribute>'s values fails (OP_FAILED),
//                                                      after the step's earlier puts
#pragma once

#include <string>

namespace kstage::adios2_bridge {

// KSTAGE_ADIOS2_TEST_CUT_BEFORE_READ: the file cut, where it is set.
void test_hook_cut_before_read();
// KSTAGE_ADIOS2_TEST_FAIL_PUT: OP_FAILED naming `attribute`, where it is set to it.
void test_hook_fail_put(const std::string& attribute);

}  // namespace kstage::adios2_bridge
