// SPDX-License-Identifier: Apache-2.0
// What the ADIOS2 bridge's Catch2 programs share (test_adios2.cpp, test_checkpoint_integrity.cpp):
// status checks that print kstage_adios2_last_error(), and a scratch folder per process.
#pragma once

#include <kstage/kstage_adios2.h>

#include <catch2/catch_test_macros.hpp>

#include <filesystem>
#include <string>
#include <system_error>

#include <unistd.h>

#define A2_OK(expr)                                    \
  do {                                                 \
    kstage_status_t st_ = (expr);                      \
    INFO(#expr << ": " << kstage_adios2_last_error()); \
    REQUIRE(st_ == KSTAGE_OK);                         \
  } while (0)
#define A2_FAILS(expr, code, needle)                                                    \
  do {                                                                                  \
    kstage_status_t st_ = (expr);                                                       \
    INFO(#expr << ": " << kstage_adios2_last_error());                                  \
    REQUIRE(st_ == (code));                                                             \
    REQUIRE(std::string(kstage_adios2_last_error()).find(needle) != std::string::npos); \
  } while (0)

namespace kstage_adios2_test {

// A folder per process (`prefix` and the process id), removed at exit: ctest runs a program's
// variants (the host, each emulated ordinal, the asan leg) side by side, and a checkpoint one
// rewrites while another restarts it fails the other's manifest check.
inline const std::filesystem::path& scratch_folder(const char* prefix) {
  static const struct Folder {
    std::filesystem::path path;
    ~Folder() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } folder{std::filesystem::temp_directory_path() /
           (std::string(prefix) + std::to_string(::getpid()))};
  return folder.path;
}

// `name` inside the program's scratch folder, removed if it is there.
inline std::string scratch_path(const char* prefix, const std::string& name) {
  const std::filesystem::path& dir = scratch_folder(prefix);
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::filesystem::remove_all(path);
  return path.string();
}

}  // namespace kstage_adios2_test
