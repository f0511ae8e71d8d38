// Data-parallel training against one process: every rank trains the same small translator on the
// same copy task, once alone on whole batches and once with DataParallel on its share of each.
// The losses step by step and the parameters at the end must agree to f32 rounding (the batch's
// gradient summed in another order), and the parameters must be bitwise equal on every rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "models/copy_task.hpp"
#include "qkv/dist.hpp"
#include "qkv/error.hpp"
#include "qkv/models/train.hpp"
#include "qkv/models/translator.hpp"

namespace qkv::testing {
namespace {

using dist::Communicator;
using models::test_support::copy_task;

models::TrainOptions training() {
  models::TrainOptions o;
  o.steps = 8;
  o.batch_size = 32;
  o.lr = 3e-3;
  o.warmup_steps = 2;
  return o;
}

std::vector<double> parameter_values(models::Translator& model) {
  std::vector<double> out;
  for (const autograd::Var& p : model.parameters()) {
    const std::vector<double> x = p.value().to_vector();
    out.insert(out.end(), x.begin(), x.end());
  }
  return out;
}

TEST(DataParallel, TrainsAsOneProcessOnTheWholeBatch) {
  const Communicator world = Communicator::world();
  SCOPED_TRACE("rank " + std::to_string(world.rank()) + " of " + std::to_string(world.size()));
  const std::vector<models::Example> data = copy_task(200, 1);
  models::Translator alone(models::test_support::small_translator());
  const models::TrainReport want = models::train(alone, data, training());

  const dist::DataParallel group(world);
  models::Translator shared(models::test_support::small_translator());
  models::TrainOptions options = training();
  options.sync = &group;
  const models::TrainReport got = models::train(shared, data, options);

  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (std::size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], 2e-5 * std::abs(want.losses[s])) << "step " << s;
  }
  EXPECT_EQ(got.target_tokens, want.target_tokens);
  const std::vector<double> a = parameter_values(shared), b = parameter_values(alone);
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t n = 0; n < a.size(); ++n) worst = std::max(worst, std::abs(a[n] - b[n]));
  if (world.size() == 1) {
    EXPECT_EQ(worst, 0.0);  // one rank: the same sums, bit for bit
  } else {
    // AdamW divides each update by the root of its second moment, so a gradient near zero moves
    // its parameter by up to lr whatever its rounding: 1.4e-4 (2 ranks) and 1.9e-4 (3) after 8
    // steps of lr 3e-3 where the losses agree within 2e-5.
    EXPECT_LE(worst, 1e-3);
    EXPECT_GT(worst, 0.0);  // the sums did run in another order: two paths were compared
  }
  // Every rank holds the same parameters, bit for bit: their sum, and its square, agree.
  double sums[2] = {0, 0};
  for (const double x : a) {
    sums[0] += x;
    sums[1] += x * x;
  }
  double low[2] = {sums[0], sums[1]};
  group.sum(low, 2);
  EXPECT_EQ(low[0], sums[0] * world.size());
  EXPECT_EQ(low[1], sums[1] * world.size());
}

TEST(DataParallel, RefusesABatchSmallerThanTheGroup) {
  const Communicator world = Communicator::world();
  const dist::DataParallel group(world);
  models::Translator model(models::test_support::small_translator());
  models::TrainOptions options = training();
  options.sync = &group;
  options.batch_size = world.size() - 1;
  if (options.batch_size >= 1) {
    EXPECT_THROW(models::train(model, copy_task(20, 1), options), Error);
  }
}

}  // namespace
}  // namespace qkv::testing
