#pragma once

#include <string>
#include <vector>

namespace qkv {

// The SIMD instruction sets Highway finds usable on this CPU, best first ("AVX3", "AVX2", ...).
std::vector<std::string> simd_targets();

// The threads qkv's kernels use (OpenMP's maximum; set OMP_NUM_THREADS to change it).
int thread_count();

}  // namespace qkv
