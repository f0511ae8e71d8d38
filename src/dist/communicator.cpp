#include "dist/communicator.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "qkv/error.hpp"

namespace qkv::dist {
namespace {

void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(call, "MPI_SUCCESS", std::string(text, static_cast<std::size_t>(length)));
}

// MPI initialized once per process: by the caller, or here (then finalized at exit).
void ensure_initialized() {
  static const bool ready = [] {
    int initialized = 0;
    check(MPI_Initialized(&initialized), "MPI_Initialized");
    if (initialized) return true;
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
    return true;
  }();
  (void)ready;
}

}  // namespace

Communicator Communicator::world() {
  ensure_initialized();
  auto impl = std::make_shared<Impl>();
  impl->comm = MPI_COMM_WORLD;
  return Communicator(std::move(impl));
}

Communicator Communicator::from_mpi(const void* mpi_comm) {
  if (mpi_comm == nullptr) throw Error("mpi_comm", "the address of an MPI_Comm", "null");
  ensure_initialized();
  auto impl = std::make_shared<Impl>();
  impl->comm = *static_cast<const MPI_Comm*>(mpi_comm);
  return Communicator(std::move(impl));
}

int Communicator::rank() const {
  int r = 0;
  check(MPI_Comm_rank(impl_->comm, &r), "MPI_Comm_rank");
  return r;
}

int Communicator::size() const {
  int n = 0;
  check(MPI_Comm_size(impl_->comm, &n), "MPI_Comm_size");
  return n;
}

namespace detail {

Exchange::Exchange(const Communicator& comm, const void* send, void* recv, std::int64_t bytes,
                   int to, int from, int tag) {
  constexpr std::int64_t kMessage = std::int64_t{1} << 30;
  const auto* out = static_cast<const char*>(send);
  auto* in = static_cast<char*>(recv);
  for (std::int64_t at = 0; at < bytes; at += kMessage) {
    const int count = static_cast<int>(std::min(kMessage, bytes - at));
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Irecv(in + at, count, MPI_BYTE, from, tag, comm.impl().comm, &r), "MPI_Irecv");
    requests_.push_back(r);
    check(MPI_Isend(out + at, count, MPI_BYTE, to, tag, comm.impl().comm, &r), "MPI_Isend");
    requests_.push_back(r);
  }
}

Exchange::Exchange(Exchange&& other) noexcept : requests_(std::move(other.requests_)) {
  other.requests_.clear();
}

Exchange& Exchange::operator=(Exchange&& other) noexcept {
  if (this != &other) {
    if (!requests_.empty())
      MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
    requests_ = std::move(other.requests_);
    other.requests_.clear();
  }
  return *this;
}

Exchange::~Exchange() {
  if (!requests_.empty()) {
    MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
  }
}

void Exchange::wait() {
  if (requests_.empty()) return;
  std::vector<MPI_Request> pending = std::move(requests_);
  requests_.clear();
  check(MPI_Waitall(static_cast<int>(pending.size()), pending.data(), MPI_STATUSES_IGNORE),
        "MPI_Waitall");
}

bool same_on_every_rank(const Communicator& comm, const std::vector<std::int64_t>& x) {
  std::vector<std::int64_t> low(x.size()), high(x.size());
  const int n = static_cast<int>(x.size());
  check(MPI_Allreduce(x.data(), low.data(), n, MPI_INT64_T, MPI_MIN, comm.impl().comm),
        "MPI_Allreduce");
  check(MPI_Allreduce(x.data(), high.data(), n, MPI_INT64_T, MPI_MAX, comm.impl().comm),
        "MPI_Allreduce");
  return low == high;
}

}  // namespace detail
}  // namespace qkv::dist
