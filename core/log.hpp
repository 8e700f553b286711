// SPDX-License-Identifier: Apache-2.0
// The process's log (kstage_set_log_callback, kstage_flush_log, KSTAGE_LOG; kstage.h states the
// contract). Engine code emits with KSTAGE_LOG_AT(channel, severity, fmt, ...): when the setting
// in force does not admit the channel and severity -- the default -- that is one relaxed atomic
// load and a compare, and nothing is formatted. An admitted message is formatted on the calling
// thread and queued; one dispatcher thread delivers the queue in order, to the callback or to
// stderr, holding none of kstage's locks (the logger's own mutex is released around each
// delivery), so emitting never waits for a callback and may happen under any lock. Nothing here
// throws: a message that cannot be formatted or queued (no memory) is dropped.
#pragma once

#include <kstage/kstage.h>

#include "core/status.hpp"  // KSTAGE_PRINTF

#include <atomic>
#include <cstdint>
#include <string>

namespace kstage::core::log {

// The channels of kstage.h's KSTAGE_LOG_CHANNELS, in that order.
enum class Channel : uint8_t { Stage = 0, Device = 1, Adios2 = 2, Api = 3 };
inline constexpr int kChannels = 4;
const char* channel_name(Channel c) noexcept;
// The channel called `name`; false when there is none.
bool channel_of(const char* name, Channel* out) noexcept;

// The lowest severity delivered per channel, under the setting in force (a callback's, or
// KSTAGE_LOG's); until KSTAGE_LOG has been read, DEBUG, so that the first check takes the slow
// path, which reads it.
extern std::atomic<int32_t> g_level[kChannels];

inline bool enabled(Channel c, kstage_log_severity_t severity) noexcept {
  return severity >= g_level[int(c)].load(std::memory_order_relaxed);
}

// Queues `message` when the setting in force admits it (reads KSTAGE_LOG first, once).
void emit_text(Channel c, kstage_log_severity_t severity, const char* message) noexcept;
// printf-style: formats only when admitted.
void emit(Channel c, kstage_log_severity_t severity, const char* fmt, ...) noexcept
    KSTAGE_PRINTF(3, 4);

// `st`, said as an ERROR on `c` when it is a failure with code `code` (a device fault found
// where it is turned into a status): the message is the status's own.
inline Status reported(Channel c, kstage_status_t code, Status st) noexcept {
  if (st.code() == code && enabled(c, KSTAGE_LOG_ERROR))
    emit_text(c, KSTAGE_LOG_ERROR, st.message().c_str());
  return st;
}

// A deprecated entry point was called: one "api" WARNING per `call` and process, naming
// `instead`. (kstage has no deprecated entry point today; this is how one will say so.)
void deprecated(const char* call, const char* instead) noexcept;

// Reads KSTAGE_LOG, once per process (a bad value: one line on stderr). Every entry below and
// the first emit call it; kstage_create calls it too, so a bad value is reported early.
void init_once() noexcept;

// A parsed setting: the level of each channel. `text` is a filter ("<channel>=<level>,..."),
// with one bare level allowed (the threshold) when `allow_threshold`. On error: the message
// names the bad entry, and `levels` is unchanged.
struct Levels {
  int32_t level[kChannels];
};
Status parse(const char* text, bool allow_threshold, Levels& levels);

// kstage_set_log_callback: `threshold` and `filter` already checked into `levels`.
Status set_callback(kstage_log_callback_t callback, void* user_data, const Levels& levels);
// kstage_flush_log.
Status flush();
// Whether the calling thread is the dispatcher (inside a callback).
bool on_dispatcher() noexcept;

}  // namespace kstage::core::log

// The way engine code logs: the arguments are evaluated only when the message is admitted.
#define KSTAGE_LOG_AT(channel, severity, ...)                                                  \
  do {                                                                                         \
    if (::kstage::core::log::enabled(::kstage::core::log::Channel::channel, severity))         \
      ::kstage::core::log::emit(::kstage::core::log::Channel::channel, severity, __VA_ARGS__); \
  } while (0)
