#pragma once
// The MPI side of qkv::dist::Communicator: the communicator itself and the point-to-point
// transfers the ring is made of.

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "qkv/dist.hpp"

namespace qkv::dist {

struct Communicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
};

namespace detail {

// A transfer in flight: bytes sent to one rank while as many arrive from another. wait() (or the
// destructor) completes it; a failed MPI call throws qkv::Error.
class Exchange {
 public:
  Exchange() = default;
  // Starts sending send[0, bytes) to rank `to` and receiving recv[0, bytes) from rank `from`,
  // under `tag`, in messages of at most 1 GiB (MPI counts are int).
  Exchange(const Communicator& comm, const void* send, void* recv, std::int64_t bytes, int to,
           int from, int tag);
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;
  Exchange(Exchange&& other) noexcept;
  Exchange& operator=(Exchange&& other) noexcept;
  ~Exchange();
  void wait();

 private:
  std::vector<MPI_Request> requests_;
};

// Whether x is the same on every rank of comm.
bool same_on_every_rank(const Communicator& comm, const std::vector<std::int64_t>& x);

}  // namespace detail
}  // namespace qkv::dist
