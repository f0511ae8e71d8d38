// The process's peak resident set (qkv/system.hpp).
#include <sys/resource.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstdio>
#include <fstream>
#include <string>

#include "qkv/system.hpp"

namespace qkv {

bool reset_peak_rss() noexcept {
  release_cached_memory();  // the kernels' pooled scratch of earlier rows
#if defined(__GLIBC__)
  // glibc keeps freed memory of earlier rows in its heap (its mmap threshold grows after big
  // frees), which would count as this row's RSS; hand it back first.
  malloc_trim(0);
#endif
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

double peak_rss_mb(bool* from_procfs) noexcept {
  if (from_procfs != nullptr) *from_procfs = false;
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      try {
        const double kib = std::stod(line.substr(6));
        if (from_procfs != nullptr) *from_procfs = true;
        return kib / 1024.0;
      } catch (...) {
        break;
      }
    }
  }
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0.0;
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // kB on Linux
}

}  // namespace qkv
