// SPDX-License-Identifier: Apache-2.0
// The log callback (kstage.h, "Logging"): thresholds and channel filters, refused filters that
// leave the setting as it was, removal, serial delivery from many threads, the flush barrier,
// callbacks that call kstage, and nothing delivered when logging is off. The device's messages
// are tested in tests/emulated/test_log_device.cpp, the ADIOS2 bridge's in
// tests/adios2/test_adios2.cpp, KSTAGE_LOG by the log_env_* tests (tests/log/log_env.cpp).
#include "log_support.hpp"
#include "support.hpp"
#include "thread_support.hpp"

#include <catch2/catch_test_macros.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

using namespace kstage_test;

namespace {

// One message per severity on `channel`, "<channel> <severity>", then a flush.
void emit_each(const char* channel) {
  static const char* const kNames[] = {"debug", "info", "warning", "error"};
  for (int s = KSTAGE_LOG_DEBUG; s <= KSTAGE_LOG_ERROR; ++s)
    KS_OK(kstage_log_message(s, channel, (std::string(channel) + " " + kNames[s]).c_str()));
  KS_OK(kstage_flush_log());
}

std::vector<std::string> messages(const LogRecorder& r) {
  std::vector<std::string> out;
  for (const LogEntry& e : r.entries()) out.push_back(e.message);
  return out;
}

}  // namespace

TEST_CASE("a threshold delivers its severity and the ones above", "[log]") {
  LogRecorder r;
  {
    Recording on(r, KSTAGE_LOG_WARNING);
    KS_OK(on.status);
    emit_each("api");
    emit_each("device");
  }
  REQUIRE(messages(r) ==
          std::vector<std::string>{"api warning", "api error", "device warning", "device error"});
  for (const LogEntry& e : r.entries())
    REQUIRE(e.severity ==
            (e.message.find("error") != std::string::npos ? KSTAGE_LOG_ERROR : KSTAGE_LOG_WARNING));
}

TEST_CASE("a stage's creation and destruction, on the stage channel at DEBUG", "[log]") {
  LogRecorder r;
  kstage_stage_t handle = 0;
  {
    Recording on(r, KSTAGE_LOG_DEBUG);
    KS_OK(on.status);
    {
      Stage s;
      handle = s.stage;
    }
    KS_OK(kstage_flush_log());
  }
  const std::string h = std::to_string(handle);
  REQUIRE(r.find("stage", "stage " + h + " created").size() == 1);
  REQUIRE(r.find("stage", "stage " + h + " destroyed").size() == 1);
  REQUIRE(r.find("stage", "stage " + h + " created")[0].severity == KSTAGE_LOG_DEBUG);
}

TEST_CASE("a channel filter overrides the threshold for the channels it names", "[log]") {
  LogRecorder r;
  SECTION("one channel on, the rest off") {
    Recording on(r, KSTAGE_LOG_OFF, "device=info");
    KS_OK(on.status);
    emit_each("api");
    emit_each("device");
    emit_each("stage");
    REQUIRE(messages(r) ==
            std::vector<std::string>{"device info", "device warning", "device error"});
  }
  SECTION("one channel off, another more verbose; names and levels in any case, spaces ignored") {
    Recording on(r, KSTAGE_LOG_ERROR, " Stage = OFF , adios2=Debug,api=warn ");
    KS_OK(on.status);
    emit_each("stage");
    emit_each("adios2");
    emit_each("api");
    emit_each("device");
    REQUIRE(messages(r) == std::vector<std::string>{"adios2 debug", "adios2 info", "adios2 warning",
                                                    "adios2 error", "api warning", "api error",
                                                    "device error"});
  }
  SECTION("a later entry for a channel replaces an earlier one; an empty filter names none") {
    {
      Recording on(r, KSTAGE_LOG_OFF, "api=debug,api=error");
      KS_OK(on.status);
      emit_each("api");
    }
    {
      Recording on(r, KSTAGE_LOG_ERROR, "");
      KS_OK(on.status);
      emit_each("stage");
    }
    REQUIRE(messages(r) == std::vector<std::string>{"api error", "stage error"});
  }
}

TEST_CASE("a malformed setting is refused naming the entry, and the previous one stays", "[log]") {
  LogRecorder first, second;
  Recording on(first, KSTAGE_LOG_INFO, "device=error");
  KS_OK(on.status);
  auto refused = [&](kstage_log_severity_t threshold, const char* filter, const char* needle) {
    KS_FAILS(kstage_set_log_callback(&LogRecorder::callback, &second, threshold, filter),
             KSTAGE_INVALID_ARGUMENT, needle);
  };
  refused(KSTAGE_LOG_DEBUG, "devcie=debug",
          "channel_filter: entry 'devcie=debug': unknown channel");
  refused(KSTAGE_LOG_DEBUG, "stage=debug,device=loud", "entry 'device=loud': unknown level 'loud'");
  refused(KSTAGE_LOG_DEBUG, "device", "entry 'device' is not <channel>=<level>");
  refused(KSTAGE_LOG_DEBUG, "debug", "entry 'debug' is not <channel>=<level>");
  refused(KSTAGE_LOG_DEBUG, "stage=debug,,api=info", "an empty entry");
  refused(KSTAGE_LOG_DEBUG, "=debug", "unknown channel ''");
  refused(KSTAGE_LOG_OFF + 1, nullptr, "threshold 5 is not a level");
  refused(-1, nullptr, "threshold -1 is not a level");
  // The first callback, its threshold and its filter are still in force.
  emit_each("api");
  emit_each("device");
  REQUIRE(second.entries().empty());
  REQUIRE(messages(first) ==
          std::vector<std::string>{"api info", "api warning", "api error", "device error"});
}

TEST_CASE("kstage_log_message checks its severity, channel and message", "[log]") {
  KS_FAILS(kstage_log_message(KSTAGE_LOG_OFF, "api", "x"), KSTAGE_INVALID_ARGUMENT,
           "severity 4 is not a level (KSTAGE_LOG_DEBUG 0 .. KSTAGE_LOG_ERROR 3)");
  KS_FAILS(kstage_log_message(KSTAGE_LOG_INFO, "usd", "x"), KSTAGE_INVALID_ARGUMENT,
           "channel 'usd' is not one of stage,device,adios2,api");
  KS_FAILS(kstage_log_message(KSTAGE_LOG_INFO, nullptr, "x"), KSTAGE_INVALID_ARGUMENT, "(NULL)");
  KS_FAILS(kstage_log_message(KSTAGE_LOG_INFO, "api", nullptr), KSTAGE_INVALID_ARGUMENT,
           "message is NULL");
}

TEST_CASE("a removed callback is never called again, and is not running when removal returns",
          "[log]") {
  LogRecorder r;
  r.delay = std::chrono::milliseconds(20);
  Recording on(r, KSTAGE_LOG_DEBUG);
  KS_OK(on.status);
  for (int i = 0; i < 5; ++i) KS_OK(kstage_log_message(KSTAGE_LOG_INFO, "api", "before"));
  KS_OK(kstage_set_log_callback(nullptr, nullptr, KSTAGE_LOG_OFF, nullptr));
  REQUIRE(r.running() == 0);
  // Messages emitted before the removal went to the callback.
  REQUIRE(r.entries().size() == 5);
  KS_OK(kstage_log_message(KSTAGE_LOG_ERROR, "api", "after"));
  KS_OK(kstage_flush_log());
  REQUIRE(r.entries().size() == 5);
  // The threshold and filter of a NULL callback are ignored, not checked.
  KS_OK(kstage_set_log_callback(nullptr, nullptr, 99, "not a filter"));
}

TEST_CASE("messages from many threads are delivered one at a time, each thread's in order",
          "[log][threads]") {
  LogRecorder r;
  r.delay = std::chrono::microseconds(20);
  Recording on(r, KSTAGE_LOG_DEBUG);
  KS_OK(on.status);
  constexpr int kThreads = 8, kEach = 400;
  Errors errors;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const std::string m = std::to_string(t) + ":" + std::to_string(i);
        errors.ok(kstage_log_message(KSTAGE_LOG_INFO, "api", m.c_str()), "kstage_log_message");
        if (i % 100 == 0) errors.ok(kstage_flush_log(), "kstage_flush_log");
      }
    });
  for (std::thread& t : threads) t.join();
  INFO(errors.report());
  REQUIRE(errors.count() == 0);
  KS_OK(kstage_flush_log());
  REQUIRE(r.most_at_once() == 1);
  const std::vector<LogEntry> all = r.entries();
  REQUIRE(all.size() == size_t(kThreads * kEach));
  std::vector<int> next(kThreads, 0);
  for (const LogEntry& e : all) {
    const size_t colon = e.message.find(':');
    const int t = std::stoi(e.message.substr(0, colon));
    const int i = std::stoi(e.message.substr(colon + 1));
    REQUIRE(i == next[t]);
    ++next[t];
  }
}

TEST_CASE("kstage_flush_log returns once every earlier message is delivered", "[log]") {
  LogRecorder r;
  r.delay = std::chrono::milliseconds(2);
  Recording on(r, KSTAGE_LOG_DEBUG);
  KS_OK(on.status);
  for (int round = 1; round <= 3; ++round) {
    for (int i = 0; i < 50; ++i) KS_OK(kstage_log_message(KSTAGE_LOG_DEBUG, "stage", "m"));
    KS_OK(kstage_flush_log());
    REQUIRE(r.entries().size() == size_t(50 * round));
    REQUIRE(r.running() == 0);
  }
  // With nothing queued it returns at once.
  KS_OK(kstage_flush_log());
}

TEST_CASE("a callback may call kstage, the log's own functions included", "[log]") {
  LogRecorder r;
  kstage_status_t flushed = KSTAGE_INTERNAL, created = KSTAGE_INTERNAL, set = KSTAGE_INTERNAL;
  r.hook = [&](kstage_log_severity_t, const char*, const char* message) {
    if (std::string(message) != "first") return;
    // A flush inside the callback cannot wait for the delivery it is part of: it returns at once.
    flushed = kstage_flush_log();
    (void)kstage_log_message(KSTAGE_LOG_INFO, "api", "from the callback");
    kstage_stage_t s = 0;
    created = kstage_create(nullptr, &s);  // emits "stage ... created", delivered later
    if (created == KSTAGE_OK) (void)kstage_destroy(s);
    // The setting changes from the next message: "from the callback" and the stage's messages
    // are filtered by it (INFO and above, so the stage's DEBUG messages are not delivered).
    set = kstage_set_log_callback(&LogRecorder::callback, &r, KSTAGE_LOG_INFO, nullptr);
  };
  Recording on(r, KSTAGE_LOG_DEBUG);
  KS_OK(on.status);
  KS_OK(kstage_log_message(KSTAGE_LOG_INFO, "api", "first"));
  KS_OK(kstage_flush_log());  // "first" delivered: the callback has returned
  // What the callback emitted may have been queued after that flush began: a second one waits.
  KS_OK(kstage_flush_log());
  REQUIRE(flushed == KSTAGE_OK);
  REQUIRE(created == KSTAGE_OK);
  REQUIRE(set == KSTAGE_OK);
  REQUIRE(messages(r) == std::vector<std::string>{"first", "from the callback"});
  REQUIRE(r.most_at_once() == 1);
}

TEST_CASE("with the threshold off and no filter nothing is delivered", "[log]") {
  LogRecorder r;
  {
    Recording on(r, KSTAGE_LOG_OFF);
    KS_OK(on.status);
    {
      Stage s;
      kstage_path_t p = s.path("/a");
      (void)p;
    }
    emit_each("stage");
    emit_each("device");
    emit_each("adios2");
    emit_each("api");
  }
  REQUIRE(r.entries().empty());
  // Without a callback and without KSTAGE_LOG (ctest sets none for this program) the same
  // messages go nowhere: nothing to observe but that the calls succeed.
  emit_each("api");
}

TEST_CASE("a forked child delivers its own messages (the parent's dispatcher is not there)",
          "[log]") {
#if defined(__SANITIZE_THREAD__)
  SKIP("ThreadSanitizer does not support starting threads after a multi-threaded fork");
#endif
  LogRecorder r;
  Recording on(r, KSTAGE_LOG_DEBUG);
  KS_OK(on.status);
  KS_OK(kstage_log_message(KSTAGE_LOG_INFO, "api", "parent"));
  KS_OK(kstage_flush_log());  // the dispatcher runs
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // In the child: only async-signal-safe exits, no Catch2.
    r.clear();
    const bool ok = kstage_log_message(KSTAGE_LOG_INFO, "api", "child") == KSTAGE_OK &&
                    kstage_flush_log() == KSTAGE_OK && r.entries().size() == 1 &&
                    r.entries()[0].message == "child";
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  KS_OK(kstage_log_message(KSTAGE_LOG_INFO, "api", "parent again"));
  KS_OK(kstage_flush_log());
  REQUIRE(messages(r) == std::vector<std::string>{"parent", "parent again"});
}
