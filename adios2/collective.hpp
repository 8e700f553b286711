// SPDX-License-Identifier: Apache-2.0
// The processes a stream's steps are written and read by: this process alone, or the ranks of
// an MPI communicator (kstage_adios2_open_mpi, adios2/mpi_api.cpp). A step of several ranks is
// one block per rank of each global array; the step writer and reader ask this for the few
// collective facts that needs -- every rank's block sizes (where each block starts), floors and
// schemas -- and to agree on failure, so that a failure on one rank fails the step
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
  // Every rank's bytes, in rank order.
  virtual std::vector<std::string> allgather(const std::string& mine) { return {mine}; }
};

// Every rank's `mine` (the same length on every rank), in rank order: entry [r][i] is rank r's.
std::vector<std::vector<uint64_t>> allgather_values(Collective& ranks,
                                                    const std::vector<uint64_t>& mine);

// Runs `local`, this rank's part of a collective call, and agrees with the other ranks on how
// it went: when it fails on any rank it fails on every rank -- the failing ones with their own
// failure, the others with the first failing rank's status and message (`what` says where).
// Alone, `local`'s failure is thrown as it is.
void agree(Collective& ranks, const char* what, const std::function<void()>& local);

}  // namespace kstage::adios2_bridge
