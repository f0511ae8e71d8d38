// The associative recall task and model of `qkv demo variants`: the sequences hold what the task
// says (distinct keys, facts far enough back, the question asks one of them, the answer is its
// value); the attentions are the same function where their masks keep everything (window wider
// than T, BigBird over fewer blocks than its window and globals, materialized scores); training
// follows the curriculum and learns the task; bad arguments are refused.
#include "qkv/models/recall.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "qkv/autograd/var.hpp"
#include "qkv/error.hpp"
#include "qkv/philox.hpp"

namespace qkv::models {
namespace {

TEST(Recall, SequencesHoldTheFactsTheTaskDescribes) {
  RecallTask task;
  task.length = 400;
  Generator g(3);
  const RecallBatch b = recall_batch(task, 50, g);
  ASSERT_EQ(b.tokens.size(), 50u * 400u);
  const std::int64_t facts = task.fillers + task.keys * task.values;
  std::set<std::int64_t> answers;
  for (std::int64_t s = 0; s < 50; ++s) {
    const std::int64_t* row = b.tokens.data() + s * task.length;
    std::set<std::int64_t> keys;
    std::int64_t asked_value = -1;
    const std::int64_t question = row[task.length - 1];
    ASSERT_GE(question, facts);
    ASSERT_LT(question, task.vocab());
    for (std::int64_t t = 0; t < task.length - 1; ++t) {
      ASSERT_GE(row[t], 0);
      ASSERT_LT(row[t], facts) << "a question before the end";
      if (row[t] < task.fillers) continue;
      EXPECT_LT(t, task.length - task.far) << "a fact within far of the question";
      const std::int64_t key = (row[t] - task.fillers) / task.values;
      EXPECT_TRUE(keys.insert(key).second) << "a key twice";
      if (key == question - facts) asked_value = (row[t] - task.fillers) % task.values;
    }
    EXPECT_EQ(static_cast<std::int64_t>(keys.size()), task.pairs);
    EXPECT_EQ(b.answers[static_cast<std::size_t>(s)], asked_value);
    answers.insert(asked_value);
  }
  EXPECT_GT(answers.size(), 8u);  // the answers vary
  RecallTask bad = task;
  bad.pairs = task.keys + 1;
  EXPECT_THROW(recall_batch(bad, 1, g), Error);
  bad = task;
  bad.length = task.far + task.pairs;
  EXPECT_THROW(recall_batch(bad, 1, g), Error);
  EXPECT_THROW(recall_batch(task, 0, g), Error);
}

RecallModelConfig small(RecallAttention attention) {
  RecallModelConfig c;
  c.d_model = 16;
  c.heads = 2;
  c.dim_feedforward = 32;
  c.attention = attention;
  c.seed = 7;
  return c;
}

// Logits [B, values] of a model with this attention on a fixed batch.
std::vector<double> logits(RecallModelConfig c, const RecallBatch& b) {
  RecallModel model(c);
  return model.forward(b.tokens, b.batch, b.length).value().to_vector();
}

TEST(Recall, AttentionsAgreeWhereTheirMasksKeepEverything) {
  RecallTask task;
  task.length = 96;
  task.far = 32;
  Generator g(4);
  const RecallBatch b = recall_batch(task, 3, g);
  const std::vector<double> full = logits(small(RecallAttention::full), b);
  ASSERT_EQ(full.size(), 3u * 16u);
  const auto close = [&](const std::vector<double>& x, double tol) {
    double worst = 0;
    for (std::size_t n = 0; n < x.size(); ++n) worst = std::max(worst, std::fabs(x[n] - full[n]));
    return worst < tol;
  };
  RecallModelConfig window = small(RecallAttention::window);
  window.window = 96;  // every key of 96 within reach
  EXPECT_TRUE(close(logits(window, b), 1e-5));
  RecallModelConfig bigbird = small(RecallAttention::bigbird);
  bigbird.block = 32;  // 3 blocks: all within the window of 3 blocks and the 2 global ones
  EXPECT_TRUE(close(logits(bigbird, b), 1e-5));
  EXPECT_TRUE(close(logits(small(RecallAttention::materialized), b), 1e-5));
  // A window that cannot reach from the end back to the facts gives something else.
  RecallModelConfig narrow = small(RecallAttention::window);
  narrow.window = 4;
  EXPECT_FALSE(close(logits(narrow, b), 1e-5));
  // The linear attentions run and give finite logits of the right shape.
  for (const RecallAttention a : {RecallAttention::elu, RecallAttention::favor}) {
    const std::vector<double> x = logits(small(a), b);
    ASSERT_EQ(x.size(), full.size());
    for (const double v : x) EXPECT_TRUE(std::isfinite(v));
  }
}

RecallTask curriculum_task() {
  RecallTask task;
  task.length = 200;  // not a multiple of the curriculum's 64
  task.far = 64;
  task.keys = task.values = 4;
  task.pairs = 2;
  return task;
}

RecallModelConfig curriculum_model() {
  RecallModelConfig c = small(RecallAttention::full);
  c.keys = c.values = 4;
  return c;
}

RecallTrainOptions curriculum_training(std::int64_t steps) {
  RecallTrainOptions o;
  o.steps = steps;
  o.batch_size = 16;
  o.lr = 3e-3;
  o.warmup_steps = 10;
  return o;
}

// The curriculum's lengths, from a short run: 64 first, the task's length from ramp * steps on,
// never shorter than the step before; a one-step run is all at the task's length.
TEST(Recall, TrainingFollowsTheCurriculum) {
  const RecallTask task = curriculum_task();
  RecallModel model(curriculum_model());
  const RecallTrainReport report = train_recall(model, task, curriculum_training(24));
  ASSERT_EQ(report.losses.size(), 24u);
  EXPECT_EQ(report.lengths.front(), 64);
  EXPECT_EQ(report.lengths.back(), 200);
  EXPECT_TRUE(std::is_sorted(report.lengths.begin(), report.lengths.end()));
  for (const double loss : report.losses) EXPECT_TRUE(std::isfinite(loss));
  EXPECT_EQ(train_recall(model, task, curriculum_training(1)).lengths,
            std::vector<std::int64_t>{200});
}

// The Learning suite trains to convergence: the release build runs it, the sanitizer builds skip
// it (the asan test preset's GTEST_FILTER), as the short runs cover the same code.
TEST(Learning, RecallWithTheCurriculum) {
  const RecallTask task = curriculum_task();
  RecallModel model(curriculum_model());
  const RecallTrainReport report = train_recall(model, task, curriculum_training(300));
  ASSERT_EQ(report.losses.size(), 300u);
  EXPECT_EQ(report.lengths.back(), 200);
  double first = 0, last = 0;
  for (int n = 0; n < 10; ++n) {
    first += report.losses[static_cast<std::size_t>(n)] / 10;
    last += report.losses[report.losses.size() - 1 - static_cast<std::size_t>(n)] / 10;
  }
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
  // Learned, not guessed (chance 25%), on sequences it has not seen.
  const double accuracy = recall_accuracy(model, task, 128, 99);
  EXPECT_GT(accuracy, 0.8) << accuracy;
}

TEST(Recall, RefusesBadArguments) {
  RecallModelConfig c = small(RecallAttention::full);
  c.values = 1;
  EXPECT_THROW(RecallModel{c}, Error);
  RecallModel model(small(RecallAttention::full));
  EXPECT_THROW(model.forward({0, 1, 2}, 2, 2), Error);        // 3 ids for 2 x 2
  EXPECT_THROW(model.forward({0, 1, 2, 9999}, 2, 2), Error);  // an id past the vocabulary
  EXPECT_THROW(parse_recall_attention("performer", "--attention"), Error);
  EXPECT_EQ(parse_recall_attention("favor", "--attention"), RecallAttention::favor);
}

}  // namespace
}  // namespace qkv::models
