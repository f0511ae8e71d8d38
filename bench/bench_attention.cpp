// Google Benchmark view of the fused CPU kernel: the same shapes, FLOP and byte counts as
// `qkv bench` (bench/qkv_bench), registered at run time so the shape list lives in one place.
// Counters are rates over real time, so they print as GFLOP=x/s (FlashAttention's count) and, for
// decode rows, GB=x/s of K and V read. Threads follow OMP_NUM_THREADS.
#include <benchmark/benchmark.h>

#include <string>

#include "qkv/system.hpp"
#include "qkv_bench/measure.hpp"

namespace {

namespace qb = qkv::bench;

// Big rows take seconds per iteration; Google Benchmark then runs them once or twice, which is
// enough to see them without making the whole run take an hour.
void attention_case(benchmark::State& state, const qb::Shape& shape) {
  qb::Workload work(shape);
  work.run();  // warm-up: scratch and output pages faulted in before timing
  for (auto _ : state) work.run();
  // kIsIterationInvariantRate: the value is per iteration, divided by the (real) time.
  state.counters["GFLOP"] = benchmark::Counter(qb::flop_count(shape) * 1e-9,
                                               benchmark::Counter::kIsIterationInvariantRate);
  if (shape.is_decode()) {
    state.counters["GB"] = benchmark::Counter(qb::kv_bytes(shape) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  }
  state.counters["threads"] = qkv::num_threads();
}

std::string case_name(const qb::Shape& s) {
  return "attention_cpu/" + std::string(qb::pass_name(s.pass)) + "/B:" + std::to_string(s.B) +
         "/H:" + std::to_string(s.H) + "/Tq:" + std::to_string(s.Tq) +
         "/Tk:" + std::to_string(s.Tk) + "/D:" + std::to_string(s.D) +
         (s.causal ? "/causal" : "/full");
}

}  // namespace

int main(int argc, char** argv) {
  for (const qb::Shape& shape : qb::suite(qb::kDefaultTs, qb::kDefaultDs, qb::kDefaultDecodeTks)) {
    benchmark::RegisterBenchmark(case_name(shape).c_str(), attention_case, shape)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
