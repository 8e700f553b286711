// SPDX-License-Identifier: Apache-2.0
// The log's engine side (core/log.cpp, compiled into this program: its own process-wide log,
// not libkstage's): the parser of filters and KSTAGE_LOG values, and the deprecation notice, which
// no entry point uses yet (kstage has no deprecated function) -- said once per function, on the
// "api" channel, at WARNING.
#include "core/log.hpp"

#include <catch2/catch_test_macros.hpp>

#include <mutex>
#include <string>
#include <vector>

using kstage::core::log::Levels;
using kstage::core::log::parse;

namespace {

std::mutex g_mutex;
std::vector<std::string> g_seen;
void record(kstage_log_severity_t severity, const char* channel, const char* message, void*) {
  std::lock_guard lock(g_mutex);
  g_seen.push_back(std::to_string(severity) + " " + channel + ": " + message);
}

Levels all(int32_t l) { return Levels{{l, l, l, l}}; }

}  // namespace

TEST_CASE("a filter sets the channels it names, a KSTAGE_LOG value also the threshold", "[log]") {
  Levels l = all(KSTAGE_LOG_WARNING);
  REQUIRE(parse("device=debug, API = Error", false, l).ok());
  REQUIRE(l.level[0] == KSTAGE_LOG_WARNING);  // stage: the threshold
  REQUIRE(l.level[1] == KSTAGE_LOG_DEBUG);
  REQUIRE(l.level[2] == KSTAGE_LOG_WARNING);
  REQUIRE(l.level[3] == KSTAGE_LOG_ERROR);
  l = all(KSTAGE_LOG_OFF);
  REQUIRE(parse("adios2=warn,info", true, l).ok());  // the bare level in any position
  REQUIRE(l.level[0] == KSTAGE_LOG_INFO);
  REQUIRE(l.level[2] == KSTAGE_LOG_WARNING);
  l = all(KSTAGE_LOG_OFF);
  REQUIRE(parse("   ", true, l).ok());  // nothing named
  REQUIRE(l.level[1] == KSTAGE_LOG_OFF);
  const Levels before = all(KSTAGE_LOG_ERROR);
  for (const char* bad :
       {"info,warning", "loud", "device=", "=info", "device=info,", ",", "device:info"}) {
    Levels m = before;
    const kstage::Status st = parse(bad, true, m);
    INFO(bad << " -> " << st.message());
    REQUIRE(st.code() == KSTAGE_INVALID_ARGUMENT);
    REQUIRE(m.level[1] == KSTAGE_LOG_ERROR);  // unchanged
  }
  Levels m = before;
  REQUIRE(parse("info", false, m).message() == "entry 'info' is not <channel>=<level>");
  REQUIRE(parse("info,warning", true, m).message() == "entry 'warning' is a second level alone");
}

TEST_CASE("a deprecated call is one api WARNING per function and process", "[log]") {
  namespace log = kstage::core::log;
  REQUIRE(log::set_callback(record, nullptr, all(KSTAGE_LOG_WARNING)).ok());
  for (int i = 0; i < 3; ++i) {
    log::deprecated("kstage_old_read", "kstage_read_attributes");
    log::deprecated("kstage_old_write", "kstage_write_attribute");
  }
  REQUIRE(log::flush().ok());
  REQUIRE(g_seen ==
          std::vector<std::string>{"2 api: kstage_old_read is deprecated and will be removed: use "
                                   "kstage_read_attributes",
                                   "2 api: kstage_old_write is deprecated and will be removed: use "
                                   "kstage_write_attribute"});
  // Below the api channel's level it is neither formatted nor remembered.
  REQUIRE(log::set_callback(record, nullptr, all(KSTAGE_LOG_ERROR)).ok());
  log::deprecated("kstage_later", "kstage_now");
  REQUIRE(log::set_callback(record, nullptr, all(KSTAGE_LOG_WARNING)).ok());
  log::deprecated("kstage_later", "kstage_now");
  REQUIRE(log::flush().ok());
  REQUIRE(g_seen.size() == 3);
  REQUIRE(log::set_callback(nullptr, nullptr, all(KSTAGE_LOG_OFF)).ok());
}
