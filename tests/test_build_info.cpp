// SPDX-License-Identifier: Apache-2.0
// kstage_build_info: what the library was built with and runs on, checked against what CMake
// knew when it configured this build (compile definitions from tests/CMakeLists.txt).
#include "build_info_expected.h"  // KSTAGE_TEST_BACKENDS, ..._KOKKOS_VERSION, ..._HOST_EXECUTION
#include "support.hpp"

#include <map>
#include <sstream>
#include <string>
#include <thread>

using namespace kstage_test;

namespace {

// The "key: value" lines, and the keys in their order.
std::map<std::string, std::string> parse(const char* text,
                                         std::vector<std::string>* order = nullptr) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(": ");
    REQUIRE(colon != std::string::npos);
    out[line.substr(0, colon)] = line.substr(colon + 2);
    if (order) order->push_back(line.substr(0, colon));
  }
  return out;
}

std::map<std::string, std::string> build_info() {
  const char* text = nullptr;
  KS_OK(kstage_build_info(&text));
  REQUIRE(text != nullptr);
  return parse(text);
}

}  // namespace

TEST_CASE("build info: the version, Kokkos, host execution, backends and devices", "[build_info]") {
  // The program's first case (ctest runs each alone): nothing has initialised Kokkos yet, and
  // what is not known before says so.
  {
    const auto before = build_info();
    REQUIRE(before.at("kokkos_built") == KSTAGE_TEST_KOKKOS_VERSION);
    REQUIRE(before.at("kokkos_running") == "not initialized");
    REQUIRE(before.at("host_threads") == "not initialized");
    REQUIRE(before.at("backends") == KSTAGE_TEST_BACKENDS);
  }
  Stage s(KSTAGE_HOST_EXECUTION_DEFAULT);  // Kokkos initialised, as in any program using a stage
  // (one run of this case: a GENERATE here would run it again with Kokkos initialised)
  const char* text = nullptr;
  KS_OK(kstage_build_info(&text));
  std::vector<std::string> order;
  const auto info = parse(text, &order);
  REQUIRE(order == std::vector<std::string>{"kstage", "kokkos_built", "kokkos_running",
                                            "host_execution", "host_threads", "backends",
                                            "devices"});
  REQUIRE(info.at("kstage") == std::to_string(KSTAGE_VERSION_MAJOR) + "." +
                                   std::to_string(KSTAGE_VERSION_MINOR) + "." +
                                   std::to_string(KSTAGE_VERSION_PATCH));
  REQUIRE(info.at("kokkos_built") == KSTAGE_TEST_KOKKOS_VERSION);
  // This build runs the Kokkos it was built against.
  REQUIRE(info.at("kokkos_running") == KSTAGE_TEST_KOKKOS_VERSION);
  REQUIRE(info.at("host_execution") == KSTAGE_TEST_HOST_EXECUTION);
  REQUIRE(std::stoi(info.at("host_threads")) >= 1);
  REQUIRE(info.at("backends") == KSTAGE_TEST_BACKENDS);
  // One "<backend>:<count>" per backend, in the backends' order: the host one, the emulated
  // device two ordinals, a GPU backend what the process sees.
  std::istringstream backends(info.at("backends")), devices(info.at("devices"));
  std::string backend, device;
  while (backends >> backend) {
    REQUIRE(devices >> device);
    INFO(device);
    REQUIRE(device.rfind(backend + ":", 0) == 0);
    const int count = std::stoi(device.substr(backend.size() + 1));
    if (backend == "host") REQUIRE(count == 1);
    else if (backend == "emulated") REQUIRE(count == 2);
    else REQUIRE(count >= 0);
  }
  REQUIRE(!(devices >> device));
}

TEST_CASE("build info: the text is the calling thread's, until its next call",
          "[build_info][errors]") {
  KS_FAILS(kstage_build_info(nullptr), KSTAGE_INVALID_ARGUMENT, "text is NULL");
  const char* mine = nullptr;
  KS_OK(kstage_build_info(&mine));
  const std::string before = mine;
  std::string theirs;
  std::thread([&] {
    const char* t = nullptr;
    if (kstage_build_info(&t) == KSTAGE_OK) theirs = t;
  }).join();
  REQUIRE(theirs == before);
  REQUIRE(std::string(mine) == before);  // another thread's call left this thread's text alone
}
