// SPDX-License-Identifier: Apache-2.0
// The process's log: the setting in force, the queue, and the dispatcher thread (core/log.hpp).
#include "core/log.hpp"

#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <pthread.h>  // pthread_atfork
#include <set>
#include <strings.h>  // strcasecmp
#include <thread>
#include <utility>

namespace kstage::core::log {

std::atomic<int32_t> g_level[kChannels] = {
    {KSTAGE_LOG_DEBUG}, {KSTAGE_LOG_DEBUG}, {KSTAGE_LOG_DEBUG}, {KSTAGE_LOG_DEBUG}};

namespace {

constexpr const char* kChannelNames[kChannels] = {"stage", "device", "adios2", "api"};
constexpr const char* kLevelNames[] = {"debug", "info", "warning", "error", "off"};
// Messages waiting beyond this are dropped (and counted): a callback that falls behind must not
// make the process's memory grow without bound.
constexpr size_t kMaxQueued = 65536;

struct Message {
  kstage_log_severity_t severity;
  Channel channel;
  std::string text;
};

// Where messages go: the callback, or stderr when there is none; the levels admit them.
struct Sink {
  kstage_log_callback_t callback = nullptr;
  void* user_data = nullptr;
  Levels levels{{KSTAGE_LOG_OFF, KSTAGE_LOG_OFF, KSTAGE_LOG_OFF, KSTAGE_LOG_OFF}};
};

struct State {
  std::mutex mutex;
  std::condition_variable work;  // the dispatcher: a message queued, a flush satisfied
  std::condition_variable done;  // flushes and setters: a delivery ended
  std::deque<Message> queue;
  uint64_t queued = 0;     // messages ever queued
  uint64_t delivered = 0;  // ... and delivered (their delivery has ended)
  uint64_t dropped = 0;    // dropped since the last notice
  bool delivering = false;
  uint64_t sink_generation = 0;        // bumped by every setting
  uint64_t delivering_generation = 0;  // the setting of the delivery in progress
  std::multiset<uint64_t> flushes;     // the targets of the flushes waiting
  bool dispatcher = false;             // started
  Sink sink;
  Levels env{{KSTAGE_LOG_OFF, KSTAGE_LOG_OFF, KSTAGE_LOG_OFF, KSTAGE_LOG_OFF}};
  std::set<std::string> deprecated;  // calls already reported
};

State* make_state();

// Never destroyed: a stage destroyed at exit, after static destructors have run, may still log.
State& state() {
  static State* s = make_state();
  return *s;
}

// fork(): the child has no dispatcher thread. The mutex is held across the fork (so no other
// thread holds it then), and the child starts a dispatcher of its own with its next message;
// what the parent had queued stays the parent's.
void before_fork() { state().mutex.lock(); }
void after_fork_parent() { state().mutex.unlock(); }
void after_fork_child() {
  State& s = state();
  // The parent's dispatcher was (or may have been) waiting on these: their copies count a
  // waiter the child does not have. New ones, over the old storage (never destroyed: a
  // destructor could wait for that waiter).
  new (&s.work) std::condition_variable();
  new (&s.done) std::condition_variable();
  s.dispatcher = false;
  s.delivering = false;
  s.flushes.clear();
  s.queue.clear();  // the parent's messages: its dispatcher delivers them, not the child's
  s.dropped = 0;
  s.delivered = s.queued;
  s.mutex.unlock();
}

State* make_state() {
  auto* s = new State();  // leaked on purpose
  (void)pthread_atfork(before_fork, after_fork_parent, after_fork_child);
  return s;
}

thread_local bool t_dispatcher = false;

void publish(const Levels& levels) noexcept {
  for (int c = 0; c < kChannels; ++c) g_level[c].store(levels.level[c], std::memory_order_relaxed);
}

bool level_of(const std::string& name, int32_t* out) {
  std::string lower = name;
  for (char& ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  if (lower == "warn") lower = "warning";
  for (int32_t l = KSTAGE_LOG_DEBUG; l <= KSTAGE_LOG_OFF; ++l)
    if (lower == kLevelNames[l]) {
      *out = l;
      return true;
    }
  return false;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

void write_stderr(const Message& m) noexcept {
  std::fprintf(stderr, "kstage [%s] %s: %s\n", kLevelNames[m.severity],
               kChannelNames[int(m.channel)], m.text.c_str());
  std::fflush(stderr);
}

void deliver(const Sink& sink, const Message& m) noexcept {
  if (m.severity < sink.levels.level[int(m.channel)]) return;  // the setting changed since
  if (sink.callback)
    sink.callback(m.severity, kChannelNames[int(m.channel)], m.text.c_str(), sink.user_data);
  else write_stderr(m);
}

// A flush whose messages are all delivered returns before the next delivery starts.
bool flush_satisfied(const State& s) {
  return !s.flushes.empty() && *s.flushes.begin() <= s.delivered;
}

void dispatch() noexcept {
  t_dispatcher = true;
  State& s = state();
  std::unique_lock lock(s.mutex);
  for (;;) {
    s.work.wait(lock, [&] { return !s.queue.empty() && !flush_satisfied(s); });
    Message m = std::move(s.queue.front());
    s.queue.pop_front();
    const uint64_t dropped = std::exchange(s.dropped, 0);
    const Sink sink = s.sink;
    s.delivering = true;
    s.delivering_generation = s.sink_generation;
    lock.unlock();
    if (dropped != 0) {
      try {
        char text[160];
        std::snprintf(text, sizeof text,
                      "%llu messages were dropped: the log callback fell behind (more than %zu "
                      "waiting)",
                      (unsigned long long)dropped, kMaxQueued);
        deliver(sink, Message{KSTAGE_LOG_WARNING, Channel::Api, text});
      } catch (...) {  // no memory for the notice
      }
    }
    deliver(sink, m);
    m = Message{};  // the text is freed outside the lock
    lock.lock();
    s.delivering = false;
    ++s.delivered;
    s.done.notify_all();
  }
}

// Waits until every message queued before the call is delivered and none is being delivered,
// or until `deadline` (false then).
bool flush_until(std::chrono::steady_clock::time_point deadline, bool bounded) {
  if (t_dispatcher) return true;  // the delivery this is part of cannot be waited for
  State& s = state();
  std::unique_lock lock(s.mutex);
  if (!s.dispatcher) return true;
  const uint64_t target = s.queued;
  const auto it = s.flushes.insert(target);
  auto ready = [&] { return s.delivered >= target && !s.delivering; };
  bool ok = true;
  if (bounded) ok = s.done.wait_until(lock, deadline, ready);
  else s.done.wait(lock, ready);
  s.flushes.erase(it);
  s.work.notify_all();
  return ok;
}

void at_exit() {
  try {
    (void)flush_until(std::chrono::steady_clock::now() + std::chrono::seconds(1), true);
  } catch (...) {
  }
}

// Under the lock: the dispatcher, started with the first message.
bool start_dispatcher(State& s) {
  if (s.dispatcher) return true;
  try {
    std::thread(dispatch).detach();
  } catch (...) {
    return false;
  }
  s.dispatcher = true;
  std::atexit(at_exit);
  return true;
}

void init() noexcept {
  const char* value = std::getenv("KSTAGE_LOG");
  State& s = state();
  Levels env = s.env;
  if (value != nullptr) {
    try {
      const Status st = parse(value, true, env);
      if (!st.ok()) {
        std::fprintf(stderr, "kstage: KSTAGE_LOG=%s ignored: %s\n", value, st.message().c_str());
        env = s.env;
      }
    } catch (...) {
      env = s.env;
    }
  }
  std::lock_guard lock(s.mutex);
  s.env = env;
  if (!s.sink.callback) s.sink.levels = env;
  publish(s.sink.levels);
}

}  // namespace

const char* channel_name(Channel c) noexcept { return kChannelNames[int(c)]; }

bool channel_of(const char* name, Channel* out) noexcept {
  if (name == nullptr) return false;
  for (int c = 0; c < kChannels; ++c)
    if (strcasecmp(name, kChannelNames[c]) == 0) {
      *out = Channel(c);
      return true;
    }
  return false;
}

void init_once() noexcept {
  static std::once_flag once;
  try {
    std::call_once(once, init);
  } catch (...) {  // call_once's own failure: logging stays as it is
  }
}

Status parse(const char* text, bool allow_threshold, Levels& levels) {
  if (text == nullptr) return Status::OK();
  int32_t threshold = levels.level[0];
  bool have_threshold = false;
  int32_t named[kChannels];
  bool is_named[kChannels] = {false, false, false, false};
  const std::string all(text);
  if (trim(all).empty()) return Status::OK();
  size_t start = 0;
  for (;;) {
    const size_t comma = all.find(',', start);
    const std::string raw = all.substr(start, comma == std::string::npos ? comma : comma - start);
    const std::string entry = trim(raw);
    if (entry.empty()) return error(KSTAGE_INVALID_ARGUMENT, "an empty entry in '%s'", text);
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) {
      int32_t l = 0;
      if (!allow_threshold)
        return error(KSTAGE_INVALID_ARGUMENT, "entry '%s' is not <channel>=<level>", entry.c_str());
      if (!level_of(entry, &l))
        return error(KSTAGE_INVALID_ARGUMENT,
                     "entry '%s' is neither a level (debug, info, warning, error, off) nor "
                     "<channel>=<level>",
                     entry.c_str());
      if (have_threshold)
        return error(KSTAGE_INVALID_ARGUMENT, "entry '%s' is a second level alone", entry.c_str());
      threshold = l;
      have_threshold = true;
    } else {
      const std::string channel = trim(entry.substr(0, eq));
      const std::string level = trim(entry.substr(eq + 1));
      Channel c{};
      if (!channel_of(channel.c_str(), &c))
        return error(KSTAGE_INVALID_ARGUMENT,
                     "entry '%s': unknown channel '%s' (the channels: " KSTAGE_LOG_CHANNELS ")",
                     entry.c_str(), channel.c_str());
      int32_t l = 0;
      if (!level_of(level, &l))
        return error(KSTAGE_INVALID_ARGUMENT,
                     "entry '%s': unknown level '%s' (the levels: debug, info, warning, error, "
                     "off)",
                     entry.c_str(), level.c_str());
      named[int(c)] = l;
      is_named[int(c)] = true;
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  for (int c = 0; c < kChannels; ++c) levels.level[c] = is_named[c] ? named[c] : threshold;
  return Status::OK();
}

void emit_text(Channel c, kstage_log_severity_t severity, const char* message) noexcept {
  init_once();
  if (!enabled(c, severity)) return;
  try {
    Message m{severity, c, message};
    State& s = state();
    std::lock_guard lock(s.mutex);
    if (s.queue.size() >= kMaxQueued || !start_dispatcher(s)) {
      ++s.dropped;
      return;
    }
    s.queue.push_back(std::move(m));
    ++s.queued;
    s.work.notify_one();
  } catch (...) {  // no memory for the message: dropped
  }
}

void emit(Channel c, kstage_log_severity_t severity, const char* fmt, ...) noexcept {
  init_once();
  if (!enabled(c, severity)) return;
  try {
    va_list args;
    va_start(args, fmt);
    va_list again;
    va_copy(again, args);
    const int n = std::vsnprintf(nullptr, 0, fmt, args);
    va_end(args);
    std::string text;
    if (n > 0) {
      text.resize(size_t(n));
      std::vsnprintf(text.data(), text.size() + 1, fmt, again);
    } else if (n < 0) {
      text = fmt;
    }
    va_end(again);
    emit_text(c, severity, text.c_str());
  } catch (...) {  // no memory for the text: dropped
  }
}

void deprecated(const char* call, const char* instead) noexcept {
  init_once();
  if (!enabled(Channel::Api, KSTAGE_LOG_WARNING)) return;
  try {
    State& s = state();
    {
      std::lock_guard lock(s.mutex);
      if (!s.deprecated.insert(call).second) return;
    }
    emit(Channel::Api, KSTAGE_LOG_WARNING, "%s is deprecated and will be removed: use %s", call,
         instead);
  } catch (...) {
  }
}

Status set_callback(kstage_log_callback_t callback, void* user_data, const Levels& levels) {
  init_once();
  const bool inside = t_dispatcher;
  if (!inside) (void)flush_until({}, false);
  State& s = state();
  std::unique_lock lock(s.mutex);
  s.sink.callback = callback;
  s.sink.user_data = callback ? user_data : nullptr;
  s.sink.levels = callback ? levels : s.env;
  const uint64_t generation = ++s.sink_generation;
  publish(s.sink.levels);
  // Once this returns the previous callback is not running, and is never called again.
  if (!inside)
    s.done.wait(lock, [&] { return !s.delivering || s.delivering_generation == generation; });
  return Status::OK();
}

Status flush() {
  init_once();
  (void)flush_until({}, false);
  return Status::OK();
}

bool on_dispatcher() noexcept { return t_dispatcher; }

}  // namespace kstage::core::log
