#pragma once

#include <cstdint>
#include <string>

namespace qkv::cli {

// qkv bench --training (bench_training.cpp): qkv demo's translator trained for warmup + steps
// steps on qkv demo's corpus and batches, the last `steps` timed one by one, then greedy
// decoding of decode_sentences sentences with the KV cache, timed.
struct TrainingBenchOptions {
  std::int64_t steps = 60;
  std::int64_t warmup = 10;
  std::int64_t batch = 32;
  std::int64_t sentences = 40000;  // the training corpus, as qkv demo's
  std::int64_t decode_sentences = 500;
  std::uint64_t seed = 1;
  std::string json_path;     // the timings
  std::string batches_path;  // the batches and decoded sentences, for PyTorch's twin
};

// Trains, decodes, prints the figures and writes the files asked for (set_num_threads first).
void run_training_bench(const TrainingBenchOptions& options);

}  // namespace qkv::cli
