// SPDX-License-Identifier: Apache-2.0
// The processes a stream's steps are written and read by: this process alone, or the ranks of
// an MPI communicator (kstage_adios2_open_mpi, adios2/mpi_api.cpp). A step of several ranks is
// one block per rank of each global array; the step writer and reader ask this for the few
// collective facts that needs -- where each rank's block starts, the ranks' largest values,
// every rank's schema -- and to agree on failure, so that a failure on one rank fails the step
// on every rank instead of leaving the others waiting in a collective. Alone, each is the
// identity.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kstage::adios2_bridge {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const { return 0; }
  virtual int size() const { return 1; }
  // For each entry of `local`: its sum over the ranks before this one (`before`) and over all
  // of them (`total`).
  virtual void exscan(const std::vector<uint64_t>& local, std::vector<uint64_t>& before,
                      std::vector<uint64_t>& total) {
    before.assign(local.size(), 0);
    total = local;
  }
  // Each entry's largest value over the ranks, in place.
  virtual void max(std::vector<uint64_t>& values) { (void)values; }
  // Every rank's bytes, in rank order.
  virtual std::vector<std::string> allgather(const std::string& mine) { return {mine}; }
};

// Runs `local`, this rank's part of a collective call, and agrees with the other ranks on how
// it went: when it fails on any rank it fails on every rank -- the failing ones with their own
// failure, the others with the first failing rank's status and message (`what` says where).
// Alone, `local`'s failure is thrown as it is.
void agree(Collective& ranks, const char* what, const std::function<void()>& local);

}  // namespace kstage::adios2_bridge
