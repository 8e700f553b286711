// SPDX-License-Identifier: Apache-2.0
// fsync, atomic replacement, and the durability test hooks (durable.hpp).
#include "adios2/durable.hpp"

#include "adios2/bridge.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace kstage::adios2_bridge {
namespace {

void journal(const std::string& line) {
  const char* log = std::getenv("KSTAGE_ADIOS2_DURABILITY_LOG");
  if (log == nullptr || *log == '\0') return;
  static std::mutex mutex;  // concurrent flushes (sync_paths): one whole line each
  std::lock_guard lock(mutex);
  std::ofstream out(log, std::ios::app);
  out << line << '\n';
}

bool skip_fsync() {
  const char* skip = std::getenv("KSTAGE_ADIOS2_TEST_SKIP_FSYNC");
  return skip != nullptr && std::strcmp(skip, "1") == 0;
}

}  // namespace

std::string parent_folder(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

void sync_path(const std::string& path) {
  if (skip_fsync()) return;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    fail(KSTAGE_OP_FAILED, "cannot open '%s' to flush it to disk: %s", path.c_str(),
         std::strerror(errno));
  const int synced = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (synced != 0)
    fail(KSTAGE_OP_FAILED, "flushing '%s' to disk failed: %s", path.c_str(), std::strerror(error));
  journal("sync " + path);
}

void sync_paths(const std::vector<std::string>& paths) {
  if (paths.size() <= 1) {
    for (const std::string& p : paths) sync_path(p);
    return;
  }
  std::atomic<size_t> next{0};
  std::mutex mutex;
  std::optional<Failure> first;  // the first flush that failed, by its path's position
  size_t first_at = paths.size();
  auto work = [&]() noexcept {
    for (size_t i = next++; i < paths.size(); i = next++) {
      try {
        sync_path(paths[i]);
      } catch (const Failure& f) {
        std::lock_guard lock(mutex);
        if (i < first_at) first = f, first_at = i;
      } catch (...) {
        std::lock_guard lock(mutex);
        if (i < first_at)
          first = Failure{KSTAGE_OP_FAILED, "flushing '" + paths[i] + "' to disk failed"},
          first_at = i;
      }
    }
  };
  std::vector<std::thread> threads;
  const size_t n = std::min<size_t>(paths.size(), 8) - 1;  // and this thread
  for (size_t t = 0; t < n; ++t) {
    try {
      threads.emplace_back(work);
    } catch (...) {  // no thread to be had: the others (and this one) do its share
      break;
    }
  }
  work();
  for (std::thread& t : threads) t.join();
  if (first) throw *first;
}

void sync_folder_tree(const std::string& folder) {
  std::vector<std::string> paths;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec))
    if (entry.is_regular_file()) paths.push_back(entry.path().string());
  if (ec)
    fail(KSTAGE_OP_FAILED, "cannot list '%s' to flush it to disk: %s", folder.c_str(),
         ec.message().c_str());
  // The files' bytes and both folders' entries: the order among them does not matter, only that
  // all are on disk before the manifest names them.
  paths.push_back(folder);
  paths.push_back(parent_folder(folder));
  sync_paths(paths);
}

void replace_file_durably(const std::string& path, const std::string& content) {
  const std::string temporary = path + ".tmp" + std::to_string(::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    fail(KSTAGE_OP_FAILED, "cannot create '%s': %s", temporary.c_str(), std::strerror(errno));
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = errno;
      ::close(fd);
      ::unlink(temporary.c_str());
      fail(KSTAGE_OP_FAILED, "cannot write '%s': %s", temporary.c_str(), std::strerror(error));
    }
    done += size_t(n);
  }
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    fail(KSTAGE_OP_FAILED, "cannot write '%s': %s", temporary.c_str(), std::strerror(error));
  }
  try {
    sync_path(temporary);
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    fail(KSTAGE_OP_FAILED, "cannot rename '%s' to '%s': %s", temporary.c_str(), path.c_str(),
         std::strerror(error));
  }
  journal("rename " + temporary + " " + path);
  sync_path(parent_folder(path));
}

}  // namespace kstage::adios2_bridge
