#pragma once

// What this CPU and its operating system let the kernels run, read once from CPUID and XGETBV:
// the instruction sets a matrix path needs are usable only when the CPU has them and the OS saves
// their registers (AVX-512's in XCR0; AMX's tile data only after Linux grants this process the
// permission, arch_prctl(ARCH_REQ_XCOMP_PERM), asked for once here).

#include <string>
#include <vector>

namespace qkv::kernels::cpu {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512cd = false;
  bool avx512_bf16 = false, avx512_fp16 = false;
  bool amx_tile = false, amx_bf16 = false, amx_fp16 = false;
  // AMX's tile data: the CPU has it, XCR0 enables it and Linux granted the permission.
  bool amx_usable = false;
  // The vendor and the family CPUID reports (base plus extended family, as /proc/cpuinfo's "cpu
  // family": 25 for AMD Zen 3 and 4, 26 for Zen 5).
  bool amd = false, intel = false;
  unsigned family = 0;
  // The processor's brand string (CPUID 0x80000002-4, as /proc/cpuinfo's "model name"), or "".
  std::string brand;
  // One core's L2 cache in bytes, as the C library reads it (sysconf(_SC_LEVEL2_CACHE_SIZE));
  // 1 MiB where it tells nothing.
  long l2_bytes = 1L << 20;
  // The names (as /proc/cpuinfo spells them) of the features above that are usable.
  std::vector<std::string> names() const;
};

// This machine's, computed on the first call (thread-safe).
const CpuFeatures& cpu_features();

}  // namespace qkv::kernels::cpu
