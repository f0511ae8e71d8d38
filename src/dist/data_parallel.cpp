// qkv::dist::DataParallel (qkv/dist.hpp): the sums and the broadcast of data-parallel training.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "dist/communicator.hpp"
#include "qkv/dist.hpp"
#include "qkv/error.hpp"

namespace qkv::dist {
namespace {

constexpr std::int64_t kBucket = std::int64_t{1} << 20;

void check(int code, const char* call) {
  if (code != MPI_SUCCESS) throw Error(call, "MPI_SUCCESS", "MPI error " + std::to_string(code));
}

// x summed over the ranks: every bucket reduced to rank 0 without blocking, then every bucket
// broadcast from it, so that each rank holds rank 0's bits.
template <class T>
void reduce_then_broadcast(const Communicator& comm, T* x, std::int64_t n, MPI_Datatype type) {
  const MPI_Comm c = comm.impl().comm;
  const bool root = comm.rank() == 0;
  std::vector<T> sums(root ? static_cast<std::size_t>(n) : 0);
  std::vector<MPI_Request> requests;
  for (std::int64_t at = 0; at < n; at += kBucket) {
    const int count = static_cast<int>(std::min(kBucket, n - at));
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Ireduce(x + at, root ? sums.data() + at : nullptr, count, type, MPI_SUM, 0, c, &r),
          "MPI_Ireduce");
    requests.push_back(r);
  }
  check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
        "MPI_Waitall");
  if (root) std::copy(sums.begin(), sums.end(), x);
  requests.clear();
  for (std::int64_t at = 0; at < n; at += kBucket) {
    const int count = static_cast<int>(std::min(kBucket, n - at));
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Ibcast(x + at, count, type, 0, c, &r), "MPI_Ibcast");
    requests.push_back(r);
  }
  check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
        "MPI_Waitall");
}

}  // namespace

void DataParallel::sum(float* x, std::int64_t n) const {
  reduce_then_broadcast(comm_, x, n, MPI_FLOAT);
}

void DataParallel::sum(double* x, std::int64_t n) const {
  reduce_then_broadcast(comm_, x, n, MPI_DOUBLE);
}

double DataParallel::broadcast(double x) const {
  check(MPI_Bcast(&x, 1, MPI_DOUBLE, 0, comm_.impl().comm), "MPI_Bcast");
  return x;
}

}  // namespace qkv::dist
