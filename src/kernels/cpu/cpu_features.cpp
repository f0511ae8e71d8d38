#include "kernels/cpu/cpu_features.hpp"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

namespace qkv::kernels::cpu {
namespace {

struct Registers {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};

Registers cpuid(unsigned leaf, unsigned subleaf) {
  Registers r;
  if (__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx) == 0) return {};
  return r;
}

bool bit(unsigned word, int b) { return ((word >> b) & 1U) != 0; }

// XCR0: which register states the OS saves and restores (valid only with OSXSAVE).
std::uint64_t xcr0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

// Linux (5.16+) keeps AMX's tile data off until a process asks: arch_prctl(ARCH_REQ_XCOMP_PERM,
// XFEATURE_XTILEDATA). True once granted (asking again is harmless).
bool request_amx_permission() {
  constexpr long kArchGetXcompPerm = 0x1022;
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr int kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned long granted = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &granted) != 0) return false;
  return ((granted >> kXfeatureXtiledata) & 1UL) != 0;
}

CpuFeatures detect() {
  CpuFeatures f;
  const Registers leaf1 = cpuid(1, 0);
  const Registers vendor = cpuid(0, 0);
  f.amd = vendor.ebx == 0x68747541 && vendor.edx == 0x69746e65 && vendor.ecx == 0x444d4163;
  f.intel = vendor.ebx == 0x756e6547 && vendor.edx == 0x49656e69 && vendor.ecx == 0x6c65746e;
  if (cpuid(0x80000000, 0).eax >= 0x80000004) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      const Registers r = cpuid(0x80000002 + i, 0);
      for (const auto& [at, value] :
           {std::pair{0u, r.eax}, {4u, r.ebx}, {8u, r.ecx}, {12u, r.edx}}) {
        std::memcpy(brand + 16 * i + at, &value, 4);
      }
    }
    f.brand = brand;
    const std::size_t first = f.brand.find_first_not_of(' ');
    f.brand = first == std::string::npos ? "" : f.brand.substr(first);
  }
  if (const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE); l2 > 0) f.l2_bytes = l2;
  const unsigned base_family = (leaf1.eax >> 8) & 0xf;
  f.family = base_family == 0xf ? base_family + ((leaf1.eax >> 20) & 0xff) : base_family;
  if (!bit(leaf1.ecx, 27)) return f;  // no OSXSAVE: no AVX state, nothing below is usable
  const std::uint64_t xcr = xcr0();
  const bool avx_state = (xcr & 0x6) == 0x6;                    // XMM, YMM
  const bool avx512_state = avx_state && (xcr & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
  const bool amx_state = (xcr & 0x60000) == 0x60000;            // XTILECFG, XTILEDATA
  const unsigned max_leaf = cpuid(0, 0).eax;
  const Registers leaf7 = max_leaf >= 7 ? cpuid(7, 0) : Registers{};
  const Registers leaf7_1 = leaf7.eax >= 1 ? cpuid(7, 1) : Registers{};
  f.fma = avx_state && bit(leaf1.ecx, 12);
  f.f16c = avx_state && bit(leaf1.ecx, 29);
  f.avx2 = avx_state && bit(leaf7.ebx, 5);
  f.avx512f = avx512_state && bit(leaf7.ebx, 16);
  f.avx512bw = f.avx512f && bit(leaf7.ebx, 30);
  f.avx512vl = f.avx512f && bit(leaf7.ebx, 31);
  f.avx512dq = f.avx512f && bit(leaf7.ebx, 17);
  f.avx512cd = f.avx512f && bit(leaf7.ebx, 28);
  f.avx512_bf16 = f.avx512f && bit(leaf7_1.eax, 5);
  f.avx512_fp16 = f.avx512f && bit(leaf7.edx, 23);
  f.amx_tile = bit(leaf7.edx, 24);
  f.amx_bf16 = f.amx_tile && bit(leaf7.edx, 22);
  f.amx_fp16 = f.amx_tile && bit(leaf7_1.eax, 21);
  f.amx_usable = f.amx_tile && amx_state && request_amx_permission();
  return f;
}

}  // namespace

std::vector<std::string> CpuFeatures::names() const {
  std::vector<std::string> out;
  const auto add = [&](bool has, const char* name) {
    if (has) out.emplace_back(name);
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512cd, "avx512cd");
  add(avx512dq, "avx512dq");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512_bf16, "avx512_bf16");
  add(avx512_fp16, "avx512_fp16");
  add(amx_usable && amx_tile, "amx_tile");
  add(amx_usable && amx_bf16, "amx_bf16");
  add(amx_usable && amx_fp16, "amx_fp16");
  return out;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace qkv::kernels::cpu
