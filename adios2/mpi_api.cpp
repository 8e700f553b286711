// SPDX-License-Identifier: Apache-2.0
// The bridge on MPI ranks (include/kstage/kstage_adios2_mpi.h): a Collective over a
// communicator, and the C API that opens streams, checkpoints and restarts over one. Built
// where the ADIOS2 found has MPI (ADIOS2_HAVE_MPI).
#include <kstage/kstage_adios2_mpi.h>

#include "adios2/bridge.hpp"

#include <climits>

namespace kstage::adios2_bridge {
namespace {

// An MPI call's result: an error is this call's failure (the communicator returns errors
// instead of aborting the job).
void mpi_check(int result, const char* what) {
  if (result == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(result, text, &length);
  fail(KSTAGE_OP_FAILED, "%s: %s", what, text);
}

// The ranks of a duplicate of the caller's communicator (so that the bridge's collectives
// never match the application's messages).
class MpiCollective final : public Collective {
 public:
  explicit MpiCollective(MPI_Comm comm) {
    int initialised = 0, finalised = 0;
    MPI_Initialized(&initialised);
    MPI_Finalized(&finalised);
    if (!initialised || finalised)
      fail(KSTAGE_INVALID_ARGUMENT,
           "MPI is not initialised (or already finalised): call MPI_Init first");
    if (comm == MPI_COMM_NULL) fail(KSTAGE_INVALID_ARGUMENT, "comm is MPI_COMM_NULL");
    mpi_check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCollective() override {
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (!finalised) MPI_Comm_free(&comm_);
  }
  MpiCollective(const MpiCollective&) = delete;
  MpiCollective& operator=(const MpiCollective&) = delete;

  MPI_Comm comm() const { return comm_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::vector<std::string> allgather(const std::string& mine) override {
    const int length = count_of(mine.size());
    const size_t ranks = static_cast<size_t>(size_);
    std::vector<int> lengths(ranks), starts(ranks, 0);
    mpi_check(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_),
              "MPI_Allgather");
    long long bytes = 0;
    for (int r = 0; r < size_; ++r) {
      starts[size_t(r)] = int(bytes);
      bytes += lengths[size_t(r)];
    }
    if (bytes > INT_MAX) fail(KSTAGE_NOT_SUPPORTED, "the ranks' schemas and messages exceed 2 GiB");
    std::string all(size_t(bytes), '\0');
    std::string in = mine;
    mpi_check(MPI_Allgatherv(in.data(), length, MPI_BYTE, all.data(), lengths.data(), starts.data(),
                             MPI_BYTE, comm_),
              "MPI_Allgatherv");
    std::vector<std::string> out(ranks);
    for (int r = 0; r < size_; ++r)
      out[size_t(r)] = all.substr(size_t(starts[size_t(r)]), size_t(lengths[size_t(r)]));
    return out;
  }

 private:
  static int count_of(size_t n) {
    if (n > size_t(INT_MAX))
      fail(KSTAGE_NOT_SUPPORTED, "%zu entries are more than one MPI call sends", n);
    return int(n);
  }
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

// Opens a stream on `ranks` (collective): the arguments agreed on every rank before ADIOS2's
// collective calls.
kstage_status_t open_on(const std::shared_ptr<MpiCollective>& ranks, const char* name,
                        const kstage_adios2_open_desc_t* desc, kstage_adios2_stream_t* stream) {
  return guard([&] {
    agree(*ranks, "kstage_adios2_open_mpi", [&] {
      if (stream == nullptr) fail(KSTAGE_INVALID_ARGUMENT, "stream is NULL");
      if (name == nullptr || *name == '\0') fail(KSTAGE_INVALID_ARGUMENT, "name is NULL or empty");
      const kstage_adios2_open_desc_t d = read_open_desc(desc);
      if (d.inline_writer != 0)
        fail(KSTAGE_INVALID_ARGUMENT,
             "desc.inline_writer: an Inline reader is opened by one process (kstage_adios2_open)");
      if (is_inline_engine(d.engine) && ranks->size() > 1)
        fail(KSTAGE_INVALID_ARGUMENT,
             "engine Inline couples a writer and a reader in one process, not %d ranks",
             ranks->size());
    });
    // One stream: the same name on every rank (else each rank's ADIOS2 would open its own).
    const std::vector<std::string> names = ranks->allgather(name);
    for (size_t r = 0; r < names.size(); ++r)
      if (names[r] != names[0])
        fail(KSTAGE_INVALID_ARGUMENT,
             "kstage_adios2_open_mpi: rank %zu opens '%s', rank 0 '%s' (one name on every rank)", r,
             names[r].c_str(), names[0].c_str());
    const MPI_Comm c = ranks->comm();
    *stream = open_stream(
        name, desc, [c] { return std::make_shared<adios2::ADIOS>(c); }, ranks);
  });
}

}  // namespace
}  // namespace kstage::adios2_bridge

using namespace kstage::adios2_bridge;

extern "C" {

kstage_status_t kstage_adios2_open_mpi(const char* name, const kstage_adios2_open_desc_t* desc,
                                       MPI_Comm comm, kstage_adios2_stream_t* stream) {
  std::shared_ptr<MpiCollective> ranks;
  const kstage_status_t st = guard([&] { ranks = std::make_shared<MpiCollective>(comm); });
  return st == KSTAGE_OK ? open_on(ranks, name, desc, stream) : st;
}

kstage_status_t kstage_adios2_checkpoint_mpi(kstage_stage_t stage, const char* path,
                                             MPI_Comm comm) {
  return guard([&] {
    auto ranks = std::make_shared<MpiCollective>(comm);  // the checkpoint's, and its stream's
    checkpoint_with(
        stage, path, *ranks, "kstage_adios2_checkpoint_mpi",
        [ranks](const char* name, const kstage_adios2_open_desc_t* desc,
                kstage_adios2_stream_t* stream) { return open_on(ranks, name, desc, stream); });
  });
}

kstage_status_t kstage_adios2_restart_mpi(kstage_stage_t stage, const char* path, MPI_Comm comm,
                                          uint64_t* ordinal) {
  return guard([&] {
    auto ranks = std::make_shared<MpiCollective>(comm);
    restart_with(
        stage, path, ordinal, *ranks, "kstage_adios2_restart_mpi",
        [ranks](const char* name, const kstage_adios2_open_desc_t* desc,
                kstage_adios2_stream_t* stream) { return open_on(ranks, name, desc, stream); });
  });
}

kstage_status_t kstage_adios2_restart_ex_mpi(kstage_stage_t stage, const char* path,
                                             const kstage_adios2_restart_desc_t* desc,
                                             MPI_Comm comm, uint64_t* ordinal) {
  return guard([&] {
    auto ranks = std::make_shared<MpiCollective>(comm);
    kstage_adios2_restart_desc_t d = kstage_adios2_restart_desc_init();
    agree(*ranks, "kstage_adios2_restart_ex_mpi",
          [&] { copy_descriptor(desc, d, "kstage_adios2_restart_desc_init"); });
    restart_with(
        stage, path, ordinal, *ranks, "kstage_adios2_restart_ex_mpi",
        [ranks](const char* name, const kstage_adios2_open_desc_t* open_desc,
                kstage_adios2_stream_t* stream) { return open_on(ranks, name, open_desc, stream); },
        d.manifest);
  });
}

kstage_status_t kstage_adios2_checkpoint_latest_mpi(kstage_stage_t stage, const char* pointer,
                                                    MPI_Comm comm) {
  return guard([&] {
    auto ranks = std::make_shared<MpiCollective>(comm);
    checkpoint_latest_with(
        stage, pointer, *ranks, "kstage_adios2_checkpoint_latest_mpi",
        [ranks](const char* name, const kstage_adios2_open_desc_t* desc,
                kstage_adios2_stream_t* stream) { return open_on(ranks, name, desc, stream); });
  });
}

kstage_status_t kstage_adios2_restart_latest_mpi(kstage_stage_t stage, const char* pointer,
                                                 MPI_Comm comm, uint64_t* ordinal) {
  return guard([&] {
    auto ranks = std::make_shared<MpiCollective>(comm);
    restart_latest_with(
        stage, pointer, ordinal, *ranks, "kstage_adios2_restart_latest_mpi",
        [ranks](const char* name, const kstage_adios2_open_desc_t* desc,
                kstage_adios2_stream_t* stream) { return open_on(ranks, name, desc, stream); });
  });
}

}  // extern "C"
