#pragma once
// What data-parallel training needs from a group of ranks (models::TrainOptions::sync), without
// naming MPI: qkv::dist::DataParallel (qkv/dist.hpp) is the MPI one.

#include <cstdint>

namespace qkv::dist {

// The ranks of a group each take their share of every global batch and sum what the update needs
// across the group. train() calls these only; every rank calls them in the same order.
class GradientSync {
 public:
  virtual ~GradientSync() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // x[n] <- the sum over the ranks of x[n], in place (the same bits on every rank).
  virtual void sum(float* x, std::int64_t n) const = 0;
  virtual void sum(double* x, std::int64_t n) const = 0;
  // Rank 0's x, on every rank.
  virtual double broadcast(double x) const = 0;
};

}  // namespace qkv::dist
