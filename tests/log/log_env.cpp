// SPDX-License-Identifier: Apache-2.0
// KSTAGE_LOG, read once: the log_env_* tests (tests/CMakeLists.txt) run this program with the
// variable set and match what it writes to stderr.
//   log_env emit      one message per channel and severity ("<channel> <level>"), then a flush
//   log_env callback  as emit, with a callback (threshold ERROR) installed in between: stderr
//                     has nothing of the messages the callback took; exits 1 when the callback
//                     did not get exactly the ERROR ones
#include <kstage/kstage.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

const char* const kChannels[] = {"stage", "device", "adios2", "api"};
const char* const kLevels[] = {"debug", "info", "warning", "error"};

int emit(const char* tag) {
  for (const char* c : kChannels)
    for (int s = KSTAGE_LOG_DEBUG; s <= KSTAGE_LOG_ERROR; ++s) {
      const std::string m = std::string(tag) + c + " " + kLevels[s];
      if (kstage_log_message(s, c, m.c_str()) != KSTAGE_OK) {
        std::fprintf(stdout, "kstage_log_message: %s\n", kstage_last_error());
        return 1;
      }
    }
  return kstage_flush_log() == KSTAGE_OK ? 0 : 1;
}

int calls = 0;
void count(kstage_log_severity_t severity, const char*, const char* message, void*) {
  if (severity == KSTAGE_LOG_ERROR && std::strstr(message, "cb:") == message) ++calls;
  else calls = -1000;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "emit";
  if (mode == "emit") return emit("");
  if (mode == "callback") {
    if (kstage_set_log_callback(count, nullptr, KSTAGE_LOG_ERROR, nullptr) != KSTAGE_OK) return 1;
    if (emit("cb:") != 0) return 1;
    if (kstage_set_log_callback(nullptr, nullptr, KSTAGE_LOG_OFF, nullptr) != KSTAGE_OK) return 1;
    if (emit("after:") != 0) return 1;
    if (calls != 4) {
      std::fprintf(stdout, "the callback had %d ERROR messages, not 4\n", calls);
      return 1;
    }
    return 0;
  }
  return 2;
}
