#pragma once

#include <string>
#include <vector>

namespace qkv {

// The CPU's model name as /proc/cpuinfo gives it, with its family and model numbers where it has
// them ("AMD EPYC 7B13 (family 25, model 1)": a VM may name Zen 4 and Zen 5 both "AMD EPYC"),
// "unknown" where it cannot be read: what every measurement carries.
std::string cpu_model();

// The SIMD instruction sets Highway finds usable on this CPU, best first ("AVX3", "AVX2", ...).
std::vector<std::string> simd_targets();

// The CPU features the kernels check at run time that this machine and its OS let them use, as
// /proc/cpuinfo names them ("avx2", "f16c", "avx512_bf16", "amx_bf16", ...; AMX only once Linux
// granted the process its tile data).
std::vector<std::string> cpu_features();

// The paths of bf16 matrix products this CPU runs, best first: "amx-bf16" (AMX tiles),
// "avx512-bf16" (VDPBF16PS), then "f32-fma", which every CPU runs (bf16 converted to f32).
std::vector<std::string> matrix_paths();

// The kernels BLIS (the autodiff engine's and linear attention's matrix products) runs and who
// chose them: "skx (set by qkv: ...)" or "haswell (...)" where Debian's BLIS does not know this
// CPU (AMD families past Zen 4, where it would run portable C at a fifth of the speed), else
// BLIS's name for its choice ("haswell (BLIS's choice)") or for a BLIS_ARCH_TYPE the user set.
std::string blas_kernels();

// Threads. qkv's fused attention kernels (attention_forward, attention_backward, and through them
// autograd::attention and the nn modules) run on OpenMP threads drawn from one process-wide
// budget of num_threads() threads:
// - a call takes its share when it starts and gives it back when it returns: at most
//   max(1, num_threads() / calls in flight), and no more than the budget has free, so the calls
//   in flight together never run more than num_threads() - 1 threads besides their callers' own;
//   a call that finds nothing free runs on its calling thread alone (it never waits);
// - a call made from inside an active OpenMP parallel region (the caller's `#pragma omp
//   parallel`, nested or not) runs on its calling thread alone and takes nothing;
// - the calling thread's OpenMP settings (omp_set_num_threads) are restored on return, and do
//   not change qkv's share.
// Results never depend on the share: the kernels give bitwise the same outputs and gradients on
// any number of threads, so concurrent calls from many threads give bitwise the results of the
// same calls made one after the other. Every entry point is safe to call from many threads at
// once on different outputs.
//
// The budget: omp_get_max_threads() of the thread that first needs it (OMP_NUM_THREADS, else the
// CPUs), until set_num_threads(n) (n >= 1; qkv::Error otherwise) replaces it for the whole
// process. The autodiff engine's matrix products run in BLIS, whose own thread count (see the
// README) is not part of this budget.
void set_num_threads(int n);
int num_threads();

// Memory. The fused kernels keep their large scratch buffers (packed K and V, dQ partials, inputs
// converted to the compute dtype: from 2 MiB each) after a call, up to 256 MiB in all or as much
// as the last call held at once where that was more, for the next call to reuse without faulting
// in fresh pages. This frees every buffer kept; later calls start filling the pool again. Safe to
// call at any time from any thread (a buffer in use by a call is not in the pool).
void release_cached_memory();

// The process's peak resident set, for measuring what a piece of work needs. reset_peak_rss()
// releases the kernels' cached scratch (release_cached_memory), returns free heap memory to the
// system (glibc's malloc_trim) and lowers the high-water mark to the current RSS (writes "5" to
// /proc/self/clear_refs); peak_rss_mb() reads VmHWM from /proc/self/status. Where either fails
// (no procfs, an old kernel) the peak falls back to getrusage's ru_maxrss, which cannot be reset
// and so is the peak of the whole process; *from_procfs (when given) says whether VmHWM was read.
// MB means 2^20 bytes.
bool reset_peak_rss() noexcept;
double peak_rss_mb(bool* from_procfs = nullptr) noexcept;

}  // namespace qkv
