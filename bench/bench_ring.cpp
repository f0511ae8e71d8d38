// Ring attention's time against the number of ranks, under mpirun:
//
//   mpirun -np N bench/bench_ring [--T 16384] [--B 1] [--H 8] [--D 64] [--mask causal|full]
//                                 [--sharding contiguous|zigzag] [--dtype f32|bf16|f16] [--reps 5]
//
// The sequence of T tokens (the whole, not a rank's) is sharded T / N rows a rank; each rep runs
// ring_attention and ring_attention_backward on every rank, between barriers. Rank 0 prints, for
// the forward and the backward, the median over reps of the slowest rank's time, the tokens per
// second of forward + backward, and from RingStats the slowest rank's kernel time and its waits
// on the ring (communication the kernels did not hide), with the bytes a rank sent per call, and
// the largest peak resident memory of a rank (getrusage) with what it held before making its
// shards (the program, its libraries and Open MPI), so that the bytes a token costs a rank, and
// the longest sequence a fixed memory per rank holds, follow from runs at two lengths.
#include <mpi.h>
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "qkv/dist.hpp"
#include "qkv/qkv.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::int64_t T = 16384, B = 1, H = 8, D = 64;
  std::string mask = "causal";
  bool zigzag = false;
  qkv::DType dtype = qkv::DType::f32;
  int reps = 5;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const char* value = argv[i + 1];
    if (key == "--T") {
      a.T = std::atoll(value);
    } else if (key == "--B") {
      a.B = std::atoll(value);
    } else if (key == "--H") {
      a.H = std::atoll(value);
    } else if (key == "--D") {
      a.D = std::atoll(value);
    } else if (key == "--mask") {
      a.mask = value;
    } else if (key == "--sharding") {
      if (std::string(value) != "zigzag" && std::string(value) != "contiguous") {
        throw qkv::Error("--sharding", "contiguous or zigzag", value);
      }
      a.zigzag = std::string(value) == "zigzag";
    } else if (key == "--dtype") {
      const std::string d = value;
      if (d != "f32" && d != "bf16" && d != "f16")
        throw qkv::Error("--dtype", "f32, bf16 or f16", d);
      a.dtype = d == "f32" ? qkv::DType::f32 : d == "bf16" ? qkv::DType::bf16 : qkv::DType::f16;
    } else if (key == "--reps") {
      a.reps = std::atoi(value);
    } else {
      throw qkv::Error(key, "--T, --B, --H, --D, --mask, --sharding, --dtype or --reps", key);
    }
  }
  if (a.mask != "causal" && a.mask != "full") throw qkv::Error("--mask", "causal or full", a.mask);
  if (a.reps < 1) throw qkv::Error("--reps", "at least 1", std::to_string(a.reps));
  return a;
}

double max_over_ranks(double x) {
  double out = 0.0;
  MPI_Allreduce(&x, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

// This process's peak resident memory so far, in MiB.
double peak_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux: KiB
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

template <class Mask>
int run(const Args& a, const Mask& mask) {
  const qkv::dist::Sharding sharding =
      a.zigzag ? qkv::dist::Sharding::zigzag : qkv::dist::Sharding::contiguous;
  const qkv::dist::Communicator world = qkv::dist::Communicator::world();
  const int n = world.size();
  if (a.T % n != 0) {
    throw qkv::Error("--T", "a multiple of the rank count " + std::to_string(n),
                     std::to_string(a.T));
  }
  const std::int64_t Tl = a.T / n;
  const double before_mib = max_over_ranks(peak_mib());
  qkv::Generator g(static_cast<std::uint64_t>(world.rank()) + 1);
  const qkv::Tensor q = qkv::Tensor::randn({a.B, Tl, a.H, a.D}, g).to(a.dtype);
  const qkv::Tensor k = qkv::Tensor::randn({a.B, Tl, a.H, a.D}, g).to(a.dtype);
  const qkv::Tensor v = qkv::Tensor::randn({a.B, Tl, a.H, a.D}, g).to(a.dtype);
  const qkv::Tensor dout = qkv::Tensor::randn({a.B, Tl, a.H, a.D}, g).to(a.dtype);
  const auto once = [&](qkv::dist::RingStats* fwd_stats, qkv::dist::RingStats* bwd_stats,
                        double* fwd_s, double* bwd_s) {
    MPI_Barrier(MPI_COMM_WORLD);
    const Clock::time_point t0 = Clock::now();
    qkv::dist::RingOptions options;
    options.sharding = sharding;
    options.stats = fwd_stats;
    const qkv::AttentionOutput o = qkv::dist::ring_attention(q, k, v, mask, world, options);
    options.stats = bwd_stats;
    const Clock::time_point t1 = Clock::now();
    const qkv::AttentionGrads grads =
        qkv::dist::ring_attention_backward(dout, q, k, v, o.out, o.lse, mask, world, options);
    const Clock::time_point t2 = Clock::now();
    *fwd_s = std::chrono::duration<double>(t1 - t0).count();
    *bwd_s = std::chrono::duration<double>(t2 - t1).count();
    return grads.dq.numel();
  };
  double fwd_s = 0, bwd_s = 0;
  once(nullptr, nullptr, &fwd_s, &bwd_s);  // warm-up
  std::vector<double> fwd, bwd;
  qkv::dist::RingStats fs, bs;
  for (int rep = 0; rep < a.reps; ++rep) {
    once(&fs, &bs, &fwd_s, &bwd_s);
    fwd.push_back(max_over_ranks(fwd_s));
    bwd.push_back(max_over_ranks(bwd_s));
  }
  const double reps = a.reps;
  const double fwd_kernel = max_over_ranks(fs.compute_seconds / reps);
  const double fwd_wait = max_over_ranks(fs.wait_seconds / reps);
  const double bwd_kernel = max_over_ranks(bs.compute_seconds / reps);
  const double bwd_wait = max_over_ranks(bs.wait_seconds / reps);
  const double peak = max_over_ranks(peak_mib());
  if (world.rank() == 0) {
    const double f = median(fwd), b = median(bwd);
    std::printf(
        "ranks %d threads/rank %d T %lld B %lld H %lld D %lld %s mask %s %s: forward %.1f ms "
        "(kernels "
        "%.1f, waits %.2f, %.1f MB sent), backward %.1f ms (kernels %.1f, waits %.2f, %.1f MB "
        "sent), forward + backward %.0f tokens/s, peak memory a rank %.1f MiB (%.1f before its "
        "shards); %s\n",
        n, omp_get_max_threads(), static_cast<long long>(a.T), static_cast<long long>(a.B),
        static_cast<long long>(a.H), static_cast<long long>(a.D),
        std::string(qkv::dtype_name(a.dtype)).c_str(), a.mask.c_str(),
        a.zigzag ? "zigzag" : "contiguous", f * 1e3, fwd_kernel * 1e3, fwd_wait * 1e3,
        static_cast<double>(fs.bytes_sent) / reps / 1e6, b * 1e3, bwd_kernel * 1e3, bwd_wait * 1e3,
        static_cast<double>(bs.bytes_sent) / reps / 1e6, static_cast<double>(a.B * a.T) / (f + b),
        peak, before_mib, qkv::cpu_model().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    return a.mask == "causal" ? run(a, qkv::masks::causal()) : run(a, qkv::masks::Full{});
  } catch (const qkv::Error& e) {
    std::fprintf(stderr, "bench_ring: %s\n", e.what());
    return 2;
  }
}
