// qkv called from many threads at once (qkv/system.hpp, "Threads"): attention_forward and
// attention_backward, and the autograd attention (the primitive, and the composed ops), on
// different inputs at once give bitwise the results of the same calls made one after the other,
// from std::threads and from inside a caller's OpenMP parallel region; a call inside such a
// region runs on its calling thread; no call runs more threads than the budget, and the calls
// running at once never hold more than the budget between them. Built with ThreadSanitizer too
// (the tsan preset), where any data race among these calls is an error.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <qkv/qkv.hpp>
#include <string>
#include <thread>
#include <vector>

#include "concurrency/team_probe.hpp"
#include "kernels/cpu/fused_case.hpp"

namespace qkv::testing {
namespace {

namespace ag = qkv::autograd;

constexpr int kThreads = 8;

// How a work item reaches the kernels.
enum class Path {
  functional,  // attention_forward, then attention_backward
  primitive,   // autograd::attention, then backward(dout)
  composed,    // autograd::attention_decomposed (BLIS matmuls, the engine's ops), then backward
};

struct Work {
  FusedCase c;
  DType dtype = DType::f32;
  Path path = Path::functional;

  std::string name() const {
    const char* paths[] = {"functional", "primitive", "composed"};
    return c.name() + "_" + std::string(dtype_name(dtype)) + "_" + paths[static_cast<int>(path)];
  }
};

// Every output and gradient of one work item, as doubles (exact for f32 and f64).
using Results = std::vector<std::vector<double>>;

// out [B, Tq, Hq, Dv], lse [B, Hq, Tq] (functional only), and the gradients of sum(out * dout)
// with respect to q, k, v and the bias.
Results run(const Work& w) {
  const FusedInputs in = make_inputs(w.c, w.dtype);
  if (w.path == Path::functional) {
    const AttentionOutput f = attention_forward(in.q, in.k, in.v, in.options);
    const AttentionGrads g =
        attention_backward(in.dout, in.q, in.k, in.v, f.out, f.lse, in.options);
    Results r = {f.out.to_vector(), f.lse.to_vector(), g.dq.to_vector(), g.dk.to_vector(),
                 g.dv.to_vector()};
    if (g.dbias.defined()) r.push_back(g.dbias.to_vector());
    return r;
  }
  AttentionOptions options = in.options;
  const ag::Var q(in.q, true), k(in.k, true), v(in.v, true);
  ag::Var bias;
  if (options.bias.defined()) {
    bias = ag::Var(options.bias, true);
    options.bias = Tensor();
  }
  const ag::Var out = w.path == Path::primitive ? ag::attention(q, k, v, options, bias)
                                                : ag::attention_decomposed(q, k, v, options, bias);
  out.backward(in.dout);
  Results r = {out.value().to_vector(), q.grad().to_vector(), k.grad().to_vector(),
               v.grad().to_vector()};
  if (bias.defined()) r.push_back(bias.grad().to_vector());
  return r;
}

// Small problems that between them take every option: causal both ways, a window, lengths, a
// keep-mask, a broadcast bias, ALiBi, soft-capping, dropout, GQA and MQA, Tq != Tk, strided
// inputs, and the split-keys (decode) path.
std::vector<Work> works() {
  FusedCase plain;
  plain.Tq = plain.Tk = 70;
  plain.causal = Causal::top_left;
  FusedCase masked;
  masked.B = 2;
  masked.Tq = 40;
  masked.Tk = 90;
  masked.Hq = 4;
  masked.causal = Causal::bottom_right;
  masked.window = {20, 5};
  masked.padding = masked.mask = masked.strided = true;
  masked.seed = 2;
  FusedCase scored;
  scored.B = 2;
  scored.Tq = scored.Tk = 65;
  scored.Dv = 24;
  scored.bias = scored.alibi = true;
  scored.softcap = 3.0;
  scored.dropout = 0.2;
  scored.seed = 3;
  FusedCase decode;  // 3 key splits of the split-keys path, one k/v head for 4 query heads
  decode.B = 2;
  decode.Tq = 3;
  decode.Tk = 2100;
  decode.Hq = 4;
  decode.Hk = 1;
  decode.padding = true;
  decode.dropout = 0.1;
  decode.seed = 4;
  std::vector<Work> all;
  for (const FusedCase& c : {plain, masked, scored, decode}) {
    for (const DType dtype : {DType::f32, DType::f64}) {
      for (const Path path : {Path::functional, Path::primitive}) all.push_back({c, dtype, path});
    }
  }
  all.push_back({plain, DType::f64, Path::composed});
  all.push_back({scored, DType::f32, Path::composed});
  return all;
}

// Sets qkv's budget and restores it after.
class Budget {
 public:
  explicit Budget(int n) : saved_(num_threads()) { set_num_threads(n); }
  ~Budget() { set_num_threads(saved_); }
  Budget(const Budget&) = delete;
  Budget& operator=(const Budget&) = delete;

 private:
  int saved_;
};

// The work items and their results computed one after the other, once for the whole program,
// each call alone on 4 threads: under ThreadSanitizer, the calls made here are where a race
// between the threads of one call's parallel regions shows.
struct Sequential {
  std::vector<Work> works = testing::works();
  std::vector<Results> expected;

  Sequential() {
    const Budget budget(4);
    for (const Work& w : works) expected.push_back(run(w));
  }
};

const Sequential& sequential() {
  static const Sequential s;
  return s;
}

// kThreads std::threads each run the first n work items, each starting at another item, so
// that different items run at once. Thread t first sets its own OpenMP thread count to
// `caller_omp_threads`, which qkv must neither follow nor disturb. Returns the items whose
// results differed from the sequential ones, as "thread t: name".
std::vector<std::string> run_on_threads(int caller_omp_threads, std::size_t n) {
  const Sequential& s = sequential();
  std::vector<std::vector<std::string>> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      omp_set_num_threads(caller_omp_threads);
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t item = (static_cast<std::size_t>(t) * n / kThreads + i) % n;
        if (!bitwise_equal(run(s.works[item]), s.expected[item])) {
          failures[t].push_back("thread " + std::to_string(t) + ": " + s.works[item].name());
        }
        if (omp_get_max_threads() != caller_omp_threads) {
          failures[t].push_back("thread " + std::to_string(t) + ": its OpenMP thread count " +
                                std::to_string(omp_get_max_threads()) + " after " +
                                s.works[item].name());
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::vector<std::string> all;
  for (const auto& f : failures) all.insert(all.end(), f.begin(), f.end());
  return all;
}

TEST(Concurrency, ManyThreadsGiveTheSequentialResultsBitwise) {
  const Budget budget(2);
  EXPECT_EQ(run_on_threads(2, sequential().works.size()), std::vector<std::string>{});
}

// Var::grad() after zero_grad makes the zeros it owes when first read (engine.cpp). Threads that
// read one leaf's gradient at once all see one tensor of zeros; under ThreadSanitizer, making the
// zeros without the lock is a data race.
TEST(Concurrency, ThreadsReadingAZeroedGradientSeeOneTensorOfZeros) {
  Generator gen(11);
  for (int round = 0; round < 20; ++round) {
    ag::Var w(Tensor::randn({32, 32}, gen), true);
    ag::sum(w).backward();
    w.zero_grad();
    std::atomic<int> arrived{0};
    std::vector<const void*> seen(kThreads, nullptr);
    std::vector<double> total(kThreads, -1.0);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        arrived.fetch_add(1);
        while (arrived.load() < kThreads) std::this_thread::yield();
        const Tensor& g = w.grad();
        seen[static_cast<std::size_t>(t)] = g.data();
        double sum = 0;
        for (const double x : g.to_vector()) sum += x * x;
        total[static_cast<std::size_t>(t)] = sum;
      });
    }
    for (std::thread& t : threads) t.join();
    for (int t = 0; t < kThreads; ++t) {
      EXPECT_EQ(seen[static_cast<std::size_t>(t)], seen[0]) << "round " << round << " thread " << t;
      EXPECT_EQ(total[static_cast<std::size_t>(t)], 0.0) << "round " << round << " thread " << t;
    }
    EXPECT_NE(seen[0], nullptr);
  }
}

// The kernels' pooled scratch (qkv::release_cached_memory, qkv/system.hpp): calls whose packed K
// and V and dQ partials pass the pool's 2 MiB floor, running on several threads while another
// thread empties the pool again and again, give bitwise the results of the same calls made
// alone. Under ThreadSanitizer a race on the pool, and under AddressSanitizer a buffer freed
// while a call still uses it, would show here.
TEST(Concurrency, EmptyingThePoolWhileCallsRunChangesNoResult) {
  FusedCase pooled;  // K^T of one call: 2176 keys x 4 heads x 64 x 4 bytes, 2.1 MiB
  pooled.Tq = pooled.Tk = 2176;
  pooled.Hq = pooled.Hk = 4;
  pooled.D = pooled.Dv = 64;
  pooled.window = {24, 8};  // few tiles: the scratch is large, the work small
  pooled.seed = 5;
  std::vector<Work> items;
  for (const DType dtype : {DType::f32, DType::f64}) items.push_back({pooled, dtype});
  std::vector<Results> expected;
  for (const Work& w : items) expected.push_back(run(w));
  const Budget budget(2);
  std::atomic<bool> done{false};
  std::thread emptier([&] {
    while (!done.load()) release_cached_memory();
  });
  std::vector<std::vector<std::string>> failures(4);
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        const std::size_t item = static_cast<std::size_t>(t + round) % items.size();
        if (!bitwise_equal(run(items[item]), expected[item])) {
          failures[t].push_back("thread " + std::to_string(t) + ": " + items[item].name());
        }
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  done = true;
  emptier.join();
  std::vector<std::string> all;
  for (const auto& f : failures) all.insert(all.end(), f.begin(), f.end());
  EXPECT_EQ(all, std::vector<std::string>{});
}

// The budget is qkv's: a caller's own omp_set_num_threads(4) neither raises a call's threads
// above the budget nor is changed by the call.
TEST(Concurrency, NoCallRunsMoreThreadsThanTheBudget) {
  if (!team_probe_available()) GTEST_SKIP() << "no team probe on this OpenMP runtime";
  const Sequential& s = sequential();
  for (const int budget_threads : {1, 2, 3}) {
    SCOPED_TRACE("budget " + std::to_string(budget_threads));
    const Budget budget(budget_threads);
    reset_team_stats();
    EXPECT_EQ(run_on_threads(4, 4), std::vector<std::string>{});  // the team sizes: any items do
    const TeamStats stats = team_stats();
    EXPECT_GT(stats.regions, 0) << "the probe saw no region of qkv's kernels";
    EXPECT_LE(stats.max_team, budget_threads);
    EXPECT_LE(stats.max_helpers, budget_threads - 1);
    // A call alone takes the whole budget.
    reset_team_stats();
    EXPECT_TRUE(bitwise_equal(run(s.works.front()), s.expected.front()));
    EXPECT_EQ(team_stats().max_team, budget_threads);
  }
}

// A call that starts while another holds most of the budget gets what is left, not a fair half:
// the two together stay within the budget.
TEST(Concurrency, ACallStartingWhileAnotherRunsTakesWhatIsLeft) {
  if (!team_probe_available()) GTEST_SKIP() << "no team probe on this OpenMP runtime";
  const Sequential& s = sequential();
  const Budget budget(4);
  hold_next_region();
  Results first;
  std::thread holder([&] { first = run(s.works.front()); });
  while (!region_held()) std::this_thread::yield();
  reset_team_stats();
  for (std::size_t item = 1; item < 4; ++item) {
    EXPECT_TRUE(bitwise_equal(run(s.works[item]), s.expected[item])) << s.works[item].name();
  }
  const TeamStats stats = team_stats();
  release_held_region();
  holder.join();
  EXPECT_TRUE(bitwise_equal(first, s.expected.front()));
  EXPECT_GT(stats.regions, 0);
  EXPECT_EQ(stats.max_team, 1) << "the held call has 3 helpers, all the budget allows";
  EXPECT_EQ(stats.max_helpers, 3);
}

TEST(Concurrency, ACallRestoresTheCallersOpenMPThreadCount) {
  const Sequential& s = sequential();
  const Budget budget(2);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(5);
  run(s.works.front());
  EXPECT_EQ(omp_get_max_threads(), 5);
  omp_set_num_threads(saved);
}

// Every work item, shared out among the 4 threads of a caller's parallel region, each of
// which asks OpenMP for 3 threads of its own; with nested regions off (libgomp's default) and
// on. Each call must run on its calling thread: 4 x 3 threads would oversubscribe.
TEST(Concurrency, CallsInsideAParallelRegionRunOnTheirCallingThread) {
  const Sequential& s = sequential();
  const int n = static_cast<int>(s.works.size());
  const Budget budget(2);
  const int saved_levels = omp_get_max_active_levels();
  for (const int levels : {1, 2}) {
    SCOPED_TRACE("max active levels " + std::to_string(levels));
    omp_set_max_active_levels(levels);
    reset_team_stats();
    std::vector<int> equal(static_cast<std::size_t>(n), 0);
#pragma omp parallel num_threads(4)
    {
      omp_set_num_threads(3);
#pragma omp for schedule(dynamic, 1)
      for (int i = 0; i < n; ++i) {
        equal[static_cast<std::size_t>(i)] = bitwise_equal(run(s.works[i]), s.expected[i]);
      }
    }
    for (int i = 0; i < n; ++i) {
      EXPECT_TRUE(equal[static_cast<std::size_t>(i)]) << s.works[i].name();
    }
    if (team_probe_available()) {
      const TeamStats stats = team_stats();
      EXPECT_EQ(stats.regions, 1) << "the test's own region";
      EXPECT_GT(stats.nested_regions, 0) << "the probe saw no region of qkv's kernels";
      EXPECT_EQ(stats.max_nested_team, 1);
    }
  }
  omp_set_max_active_levels(saved_levels);
}

TEST(ThreadBudget, SetAndGet) {
  const Budget budget(3);
  EXPECT_EQ(num_threads(), 3);
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  try {
    set_num_threads(0);
    FAIL() << "expected qkv::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "n");
    EXPECT_STREQ(e.what(), "n: expected at least 1 thread, got 0");
  }
  EXPECT_EQ(num_threads(), 1);
}

}  // namespace
}  // namespace qkv::testing
