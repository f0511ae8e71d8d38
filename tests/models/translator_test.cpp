// The translator end to end on a copy task: training drives the loss down and makes the
// cross-attention diagonal; cached decoding gives exactly the tokens of uncached decoding and the
// same logits; beam search scores what it returns; a saved model loads back to the same function.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numbers>
#include <numeric>
#include <string>
#include <vector>

#include "models/copy_task.hpp"
#include "qkv/autograd/var.hpp"
#include "qkv/error.hpp"
#include "qkv/models/checkpoint.hpp"
#include "qkv/models/corpus.hpp"
#include "qkv/models/decode.hpp"
#include "qkv/models/metrics.hpp"
#include "qkv/models/train.hpp"
#include "qkv/philox.hpp"
#include "qkv/system.hpp"

namespace qkv::models {
namespace {

using test_support::copy_task;
using test_support::forced_log_probability;
using test_support::kSymbols;

TranslatorConfig small_config() { return test_support::small_translator(); }

// 400 steps of 32 copies at lr 3e-3.
TrainOptions copy_training() {
  TrainOptions o;
  o.steps = 400;
  o.batch_size = 32;
  o.lr = 3e-3;
  o.warmup_steps = 25;
  o.label_smoothing = 0.0;
  return o;
}

// Trained once for every test below: about 2 s (20 s under ASan).
class CopyTask : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new Translator(small_config());
    report_ = new TrainReport(train(*model_, copy_task(4000, 1), copy_training()));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete report_;
  }
  static Translator* model_;
  static TrainReport* report_;
};
Translator* CopyTask::model_ = nullptr;
TrainReport* CopyTask::report_ = nullptr;

TEST_F(CopyTask, LossFallsAndCrossAttentionBecomesDiagonal) {
  const std::vector<double>& losses = report_->losses;
  const double first = std::accumulate(losses.begin(), losses.begin() + 10, 0.0) / 10;
  const double last = std::accumulate(losses.end() - 10, losses.end(), 0.0) / 10;
  EXPECT_GT(first, 2.0);  // about log(16) at the start
  EXPECT_LT(last, 0.2 * first);
  // Teacher-forced on held-out sequences: target word t copies source word t.
  const std::vector<Example> test = copy_task(64, 99);
  std::vector<std::vector<std::int64_t>> sources, inputs;
  for (const Example& e : test) {
    sources.push_back(e.source);
    std::vector<std::int64_t> in = {Vocabulary::kBos};
    in.insert(in.end(), e.target.begin(), e.target.end());
    inputs.push_back(in);
  }
  const Batch source = make_batch(sources), target_in = make_batch(inputs);
  autograd::NoGrad no_grad;
  Tensor cross;
  model_->decode(model_->encode(source), source, target_in, &cross);  // [B, H, T + 1, S]
  AlignmentCount diagonal;
  for (std::int64_t b = 0; b < source.batch; ++b) {
    std::vector<std::vector<std::int64_t>> alignment;
    for (std::int64_t t = 0; t < source.lengths[b]; ++t) alignment.push_back({t});
    const Tensor w = cross.slice(0, b, b + 1).reshape({cross.size(1), cross.size(2), -1});
    const AlignmentCount c = alignment_hits(w, alignment);
    diagonal.hits += c.hits;
    diagonal.total += c.total;
  }
  EXPECT_GT(diagonal.accuracy(), 0.9);
  // And it copies.
  const std::vector<Translation> copies = greedy_decode(*model_, source);
  int exact = 0;
  for (std::size_t i = 0; i < test.size(); ++i) exact += copies[i].tokens == test[i].target;
  EXPECT_GE(exact, 58);  // of 64
}

TEST_F(CopyTask, CachedDecodingEqualsUncachedDecoding) {
  std::vector<std::vector<std::int64_t>> sources;
  for (const Example& e : copy_task(16, 7)) sources.push_back(e.source);
  const Batch source = make_batch(sources);
  DecodeOptions cached, uncached;
  cached.max_length = uncached.max_length = 12;
  cached.keep_weights = uncached.keep_weights = true;
  uncached.use_cache = false;
  const std::vector<Translation> a = greedy_decode(*model_, source, cached);
  const std::vector<Translation> b = greedy_decode(*model_, source, uncached);
  int copied = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "sentence " << i;
    copied += a[i].tokens == sources[i] ? 1 : 0;
    ASSERT_EQ(a[i].logits.shape(), b[i].logits.shape());
    const std::vector<double> la = a[i].logits.to_vector(), lb = b[i].logits.to_vector();
    for (std::size_t j = 0; j < la.size(); ++j) {
      // The same f32 math in another order (one query row instead of the whole prefix).
      EXPECT_NEAR(la[j], lb[j], 1e-4 * (1 + std::abs(lb[j]))) << "sentence " << i << " logit " << j;
    }
    ASSERT_EQ(a[i].cross_weights.shape(), b[i].cross_weights.shape());
    const std::vector<double> wa = a[i].cross_weights.to_vector();
    const std::vector<double> wb = b[i].cross_weights.to_vector();
    for (std::size_t j = 0; j < wa.size(); ++j) EXPECT_NEAR(wa[j], wb[j], 1e-5);
  }
  EXPECT_GE(copied, 14);  // the model learned the task
}

TEST_F(CopyTask, BeamSearchScoresWhatItReturns) {
  for (const Example& e : copy_task(6, 11)) {
    for (const std::int64_t beam : {1, 3, 5}) {
      BeamOptions o;
      o.beam = beam;
      o.decode.max_length = 12;
      o.decode.keep_weights = true;
      const Translation t = beam_search(*model_, e.source, o);
      EXPECT_NEAR(t.log_probability, forced_log_probability(*model_, e.source, t.tokens), 1e-3)
          << "beam " << beam;
      EXPECT_NEAR(t.score, t.log_probability / std::pow((5.0 + t.tokens.size() + 1) / 6.0, 0.6),
                  1e-9);
      EXPECT_EQ(t.cross_weights.shape(), (Shape{2, static_cast<std::int64_t>(t.tokens.size()) + 1,
                                                static_cast<std::int64_t>(e.source.size())}));
      if (beam == 1) {
        const std::vector<Translation> greedy = greedy_decode(*model_, make_batch({e.source}));
        EXPECT_EQ(t.tokens, greedy[0].tokens);
      }
    }
  }
  EXPECT_THROW(beam_search(*model_, {4, 5}, BeamOptions{0, 0.6, {}}), Error);
}

TEST_F(CopyTask, SavedModelLoadsBackToTheSameFunction) {
  std::vector<std::string> words;
  for (std::int64_t i = 0; i < kSymbols; ++i) words.push_back("w" + std::to_string(i));
  const Vocabulary v(words);
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / "qkv_translator_test.safetensors";
  save_translator(*model_, v, v, path);
  const TranslatorBundle loaded = load_translator(path);
  EXPECT_EQ(loaded.source_vocabulary.words(), v.words());
  EXPECT_EQ(loaded.target_vocabulary.words(), v.words());
  const Batch source = make_batch({{4, 9, 7, 5}});
  const std::vector<Translation> a = greedy_decode(*model_, source);
  const std::vector<Translation> b = greedy_decode(*loaded.model, source);
  EXPECT_EQ(a[0].tokens, b[0].tokens);
  EXPECT_EQ(a[0].logits.to_vector(), b[0].logits.to_vector());  // the same weights: bitwise
  EXPECT_THROW(save_translator(*model_, Vocabulary({"x"}), v, path), Error);
  save_safetensors(path, {{"x", Tensor::zeros({1})}});
  EXPECT_THROW(load_translator(path), Error);  // no config in the metadata
  std::filesystem::remove(path);
}

// Mixed precision: training in bf16 and in f16 (with dynamic loss scaling) under an Autocast keeps
// f32 master weights and finite losses, and decodes under the Autocast; f64 is refused.
TEST(Translator, MixedPrecisionTrainingKeepsF32MasterWeights) {
  for (const DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    Translator model(small_config());
    TrainOptions o = copy_training();
    o.steps = 8;
    o.batch_size = 8;
    o.warmup_steps = 2;
    o.dtype = dtype;
    const TrainReport report = train(model, copy_task(64, 1), o);
    for (const Var& p : model.parameters()) EXPECT_EQ(p.dtype(), DType::f32);
    ASSERT_EQ(report.losses.size(), 8u);
    for (const double loss : report.losses) EXPECT_TRUE(std::isfinite(loss));
    autograd::Autocast autocast(dtype);
    const std::vector<Translation> copies = greedy_decode(model, make_batch({{4, 5, 6}}));
    ASSERT_EQ(copies.size(), 1u);
  }
  TrainOptions f64;
  f64.dtype = DType::f64;
  Translator model(small_config());
  EXPECT_THROW(train(model, copy_task(10, 1), f64), Error);
}

// The same training in bf16 and in f16 learns the copy task as the f32 run does. In the Learning
// suite, which the sanitizer builds skip (recall_test.cpp).
TEST(Learning, MixedPrecisionTranslatorCopiesAsF32Does) {
  for (const DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    Translator model(small_config());
    TrainOptions o = copy_training();
    o.dtype = dtype;
    const TrainReport report = train(model, copy_task(4000, 1), o);
    EXPECT_LT(report.skipped_steps, 20);
    const double last = std::accumulate(report.losses.end() - 10, report.losses.end(), 0.0) / 10;
    EXPECT_LT(last, 0.4);
    const std::vector<Example> test = copy_task(64, 99);
    std::vector<std::vector<std::int64_t>> sources;
    for (const Example& e : test) sources.push_back(e.source);
    autograd::Autocast autocast(dtype);
    const std::vector<Translation> copies = greedy_decode(model, make_batch(sources));
    int exact = 0;
    for (std::size_t i = 0; i < test.size(); ++i) exact += copies[i].tokens == test[i].target;
    EXPECT_GE(exact, 58);  // of 64
  }
}

// With a time budget that the steps run out before, the cosine decay follows the steps: the last
// step trains at min_lr, not at the rate the elapsed time would give.
TEST(Translator, TimeBudgetDecayEndsWithTheLastStep) {
  Translator model(small_config());
  TrainOptions o;
  o.steps = 30;
  o.batch_size = 8;
  o.warmup_steps = 5;
  o.time_budget = 1e6;
  std::vector<double> rates;
  train(model, copy_task(100, 1), o, [&](const TrainProgress& p) { rates.push_back(p.lr); });
  ASSERT_EQ(rates.size(), 30u);
  EXPECT_NEAR(rates[5], o.lr, 1e-12);  // the peak, right after the warm-up
  EXPECT_NEAR(rates.back(),
              o.min_lr + (o.lr - o.min_lr) * (1 + std::cos(std::numbers::pi * 24 / 25)) / 2, 1e-12);
  for (std::size_t s = 6; s < rates.size(); ++s) EXPECT_LT(rates[s], rates[s - 1]);
}

TEST(Translator, RejectsBadArguments) {
  TranslatorConfig c = small_config();
  c.source_vocab = 3;
  EXPECT_THROW(Translator{c}, Error);
  Translator model(small_config());
  model.eval();
  const Batch source = make_batch({{4, 5, 6}});
  DecodeOptions too_long;
  too_long.max_length = 17;
  EXPECT_THROW(greedy_decode(model, source, too_long), Error);
  DecoderCache cache = model.start_decoding(model.encode(source), source.lengths, 2);
  EXPECT_THROW(model.step(cache, {99}), Error);    // not a token
  EXPECT_EQ(cache.length, 0);                      // and the cache is untouched
  EXPECT_THROW(model.step(cache, {1, 1}), Error);  // two tokens for one row
  model.step(cache, {Vocabulary::kBos});
  model.step(cache, {4});
  EXPECT_THROW(model.step(cache, {4}), Error);  // the cache is full
  EXPECT_THROW(cache.select({1}), Error);
  EXPECT_THROW(make_batch({{}}), Error);
}

// Without a backward to follow, encode computes the source words alone (packed): the memory's
// valid rows are bitwise those of the padded encoder, which runs where a backward follows, and
// its rows past each length are 0.
TEST(Translator, EncodingWithoutABackwardSkipsThePaddingWithTheSameBits) {
  Translator model(small_config());
  model.eval();
  std::vector<std::vector<std::int64_t>> sources;
  for (int b = 0; b < 9; ++b) {
    std::vector<std::int64_t> s;
    for (int t = 0; t < 2 + (b * 4) % 11; ++t) s.push_back(4 + (b * 3 + t * 5) % kSymbols);
    sources.push_back(s);
  }
  const Batch batch = make_batch(sources);
  const Tensor padded = model.encode(batch).value();  // recorded: the padded encoder
  Tensor packed;
  {
    autograd::NoGrad no_grad;
    packed = model.encode(batch).value();
  }
  ASSERT_EQ(packed.shape(), padded.shape());
  EXPECT_EQ(ops::pack_rows(packed, batch.lengths).to_vector(),
            ops::pack_rows(padded, batch.lengths).to_vector());
  for (std::int64_t b = 0; b < batch.batch; ++b) {
    const std::int64_t l = batch.lengths[static_cast<std::size_t>(b)];
    const std::vector<double> tail =
        packed.slice(0, b, b + 1).slice(1, l, batch.length).contiguous().to_vector();
    EXPECT_EQ(tail, std::vector<double>(tail.size(), 0.0)) << "sentence " << b;
  }
}

// A decoding step's rows go through the decoder in groups, one per thread: the logits and the
// cross-attention weights are bitwise those of the whole batch on one thread, for 1 to 4 threads
// and a row count no group count divides.
TEST(Translator, StepLogitsDoNotDependOnTheThreadCount) {
  TranslatorConfig c = small_config();
  Translator model(c);
  model.eval();
  const int saved = num_threads();
  std::vector<std::vector<std::int64_t>> sources;
  for (int b = 0; b < 37; ++b) {
    std::vector<std::int64_t> s;
    for (int t = 0; t < 3 + b % 9; ++t) s.push_back(4 + (b * 5 + t * 3) % kSymbols);
    sources.push_back(s);
  }
  const Batch batch = make_batch(sources);
  std::vector<std::vector<double>> first_logits, first_weights;
  for (const int threads : {1, 2, 3, 4}) {
    set_num_threads(threads);
    autograd::NoGrad no_grad;
    DecoderCache cache = model.start_decoding(model.encode(batch), batch.lengths, 6);
    std::vector<std::int64_t> tokens(sources.size(), Vocabulary::kBos);
    for (int step = 0; step < 6; ++step) {
      Tensor weights;
      const Tensor logits = model.step(cache, tokens, &weights);
      ASSERT_EQ(logits.shape(), (Shape{37, c.target_vocab}));
      ASSERT_EQ(weights.shape(), (Shape{37, c.heads, batch.length}));
      if (threads == 1) {
        first_logits.push_back(logits.to_vector());
        first_weights.push_back(weights.to_vector());
      } else {
        EXPECT_EQ(logits.to_vector(), first_logits[step]) << threads << " threads, step " << step;
        EXPECT_EQ(weights.to_vector(), first_weights[step]) << threads << " threads, step " << step;
      }
      for (std::size_t b = 0; b < tokens.size(); ++b) tokens[b] = 4 + (b + step) % kSymbols;
    }
  }
  set_num_threads(saved);
}

}  // namespace
}  // namespace qkv::models
