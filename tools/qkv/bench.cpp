// qkv bench: times the fused CPU attention kernel over a suite of shapes and prints, per row,
// the median time, GFLOP/s (GB/s for decode) and, with --peak, the fraction of this machine's
// measured ceilings. The measurement code is bench/qkv_bench (shared with bench_attention).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "qkv/bench_training.hpp"
#include "qkv/block_mask.hpp"
#include "qkv/checks.hpp"
#include "qkv/commands.hpp"
#include "qkv/error.hpp"
#include "qkv/files.hpp"
#include "qkv/linear_attention.hpp"
#include "qkv/system.hpp"
#include "qkv/version.hpp"
#include "qkv/viz/line_plot.hpp"
#include "qkv_bench/measure.hpp"
#include "qkv_bench/scaling.hpp"

namespace qkv::cli {
namespace {

struct BenchOptions {
  bool peak = false;
  bool quick = false;
  bool no_decode = false;
  bool decode_only = false;
  std::string json_path;
  std::string plot_path;
  int threads = 0;  // 0: num_threads()
  int reps = 0;     // 0: bench::reps_for picks
  std::vector<std::int64_t> ts;
  std::vector<std::int64_t> linear_ts;
  std::vector<std::int64_t> ds;
  std::vector<std::int64_t> decode_tks;
  std::int64_t decode_group = 1;
  std::int64_t decode_tq = 1;
  std::vector<std::string> passes;
  std::string dtype = "f32";
  bool variants = false;
  std::string layout = "bthd";
  bool training = false;
  TrainingBenchOptions train;
};

// The SIMD and matrix-unit flags of /proc/cpuinfo that decide the kernels' paths (those the
// first "flags" line lists, in its order), so that a figure carries what the CPU could run.
std::vector<std::string> cpu_flags() {
  static const std::set<std::string> kWanted = {
      "sse4_2",      "avx",      "avx2",     "fma",         "f16c",
      "avx512f",     "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
      "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8",    "amx_fp16"};
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  std::vector<std::string> flags;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string flag; words >> flag;) {
      if (kWanted.count(flag) != 0) flags.push_back(flag);
    }
    break;
  }
  return flags;
}

// The 1-minute load average, or -1 where /proc/loadavg cannot be read. Other work on the
// machine steals cores from the kernel, so the run records it at its start and end.
double load_average() {
  std::ifstream loadavg("/proc/loadavg");
  double one_minute = -1.0;
  if (!(loadavg >> one_minute)) return -1.0;
  return one_minute;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// Rounded for the file: more digits than the timing noise only make diffs of results noisy.
double rounded(double value, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(value * scale) / scale;
}

nlohmann::ordered_json row_json(const bench::RowResult& r, bool have_peak) {
  const bench::Shape& s = r.shape;
  nlohmann::ordered_json row = {
      {"kernel", "cpu"},
      {"pass", bench::pass_name(s.pass)},
      {"B", s.B},
      {"H", s.H},
      {"Hq", s.H * s.group},
      {"Tq", s.Tq},
      {"Tk", s.Tk},
      {"D", s.D},
      {"causal", s.causal},
      {"dtype", dtype_name(s.dtype)},
      {"layout", s.heads_first ? "bhtd" : "bthd"},
      {"threads", r.threads},
      {"reps", r.reps},
      {"ms", rounded(r.ms, 4)},
      {"ms_min", rounded(r.ms_min, 4)},
      {"ms_max", rounded(r.ms_max, 4)},
      {"gflops", rounded(r.gflops, 3)},
  };
  if (s.is_decode()) row["gbps"] = rounded(r.gbps, 3);
  row["peak_fraction"] = have_peak ? nlohmann::ordered_json(rounded(r.peak_fraction, 4)) : nullptr;
  row["peak_of"] = s.is_decode()            ? "stream_gbps"
                   : s.dtype == DType::f64  ? "peak_gflops_f64"
                   : s.dtype == DType::bf16 ? "peak_gflops_bf16"
                                            : "peak_gflops";
  row["ceiling_during_row"] =
      have_peak ? nlohmann::ordered_json(rounded(r.ceiling_during, 2)) : nullptr;
  row["fraction_during_row"] =
      have_peak ? nlohmann::ordered_json(rounded(r.fraction_during, 4)) : nullptr;
  if (s.is_decode()) {
    row["read_during_row"] =
        have_peak ? nlohmann::ordered_json(rounded(r.read_during, 2)) : nullptr;
    row["fraction_of_read_during_row"] =
        have_peak ? nlohmann::ordered_json(rounded(r.fraction_of_read, 4)) : nullptr;
  }
  row["peak_rss_mb"] = rounded(r.peak_rss_mb, 2);
  row["peak_rss_is_row"] = r.peak_rss_is_row;
  return row;
}

void print_header(bool have_peak) {
  std::printf("%-6s %-4s %2s %5s %6s %6s %4s %-6s %-5s %-6s %7s %4s %10s %8s %7s", "kernel", "pass",
              "B", "H", "Tq", "Tk", "D", "causal", "dtype", "layout", "threads", "reps", "ms",
              "GFLOP/s", "GB/s");
  if (have_peak) std::printf(" %6s %8s %6s %6s", "%fma", "%stream", "%now", "%read");
  std::printf(" %8s\n", "RSS_MB");
}

void print_row(const bench::RowResult& r, bool have_peak) {
  const bench::Shape& s = r.shape;
  // H, or Hq/Hk for GQA rows.
  const std::string heads =
      s.group > 1 ? std::to_string(s.H * s.group) + "/" + std::to_string(s.H) : std::to_string(s.H);
  std::printf("%-6s %-4s %2lld %5s %6lld %6lld %4lld %-6s %-5s %-6s %7d %4d %10.3f %8.1f", "cpu",
              std::string(bench::pass_name(s.pass)).c_str(), static_cast<long long>(s.B),
              heads.c_str(), static_cast<long long>(s.Tq), static_cast<long long>(s.Tk),
              static_cast<long long>(s.D), s.causal ? "yes" : "no",
              std::string(dtype_name(s.dtype)).c_str(), s.heads_first ? "bhtd" : "bthd", r.threads,
              r.reps, r.ms, r.gflops);
  if (s.is_decode()) {
    std::printf(" %7.1f", r.gbps);
  } else {
    std::printf(" %7s", "-");
  }
  if (have_peak) {
    const double percent = 100.0 * r.peak_fraction;
    if (s.is_decode()) {
      std::printf(" %6s %7.1f%%", "-", percent);
    } else {
      std::printf(" %5.1f%% %8s", percent, "-");
    }
    std::printf(" %5.1f%%", 100.0 * r.fraction_during);
    if (s.is_decode()) {
      std::printf(" %5.1f%%", 100.0 * r.fraction_of_read);
    } else {
      std::printf(" %6s", "-");
    }
  }
  std::printf(" %8.1f\n", r.peak_rss_mb);
  std::fflush(stdout);
}

// FILE.png -> FILE-fwd.png: the file of one pass's plot.
std::filesystem::path plot_file(const std::filesystem::path& path, bench::Pass pass) {
  return path.parent_path() / (path.stem().string() + "-" + std::string(bench::pass_name(pass)) +
                               path.extension().string());
}

// A gray line through full's first point, proportional to T^power, as far as full's last T.
viz::Series reference(const char* name, double power, const viz::Series& full,
                      viz::LineStyle style) {
  const double t0 = full.x.front(), t1 = full.x.back(), ms0 = full.y.front();
  viz::Series line{name, {t0, t1}, {ms0, ms0 * std::pow(t1 / t0, power)}};
  line.marker = viz::Marker::none;
  line.line = style;
  line.color = viz::kPalette.back();
  return line;
}

// --variants --plot: median ms against T on log-log axes, one line per variant, one file per pass,
// and gray lines proportional to T and T^2 through full's first point to read the slopes by.
void plot_variants(const std::vector<bench::RowResult>& rows,
                   const std::vector<bench::Pass>& passes, int threads,
                   const std::filesystem::path& path) {
  constexpr viz::Marker kMarkers[] = {viz::Marker::circle, viz::Marker::square,
                                      viz::Marker::triangle, viz::Marker::diamond};
  for (const bench::Pass pass : passes) {
    std::vector<viz::Series> series;
    for (std::size_t v = 0; v < bench::kVariants.size(); ++v) {
      std::vector<std::pair<double, double>> points;  // (T, ms)
      for (const bench::RowResult& r : rows) {
        if (r.shape.pass == pass && r.shape.variant == bench::kVariants[v]) {
          points.emplace_back(static_cast<double>(r.shape.Tq), r.ms);
        }
      }
      std::sort(points.begin(), points.end());
      viz::Series line{bench::kVariants[v], {}, {}, kMarkers[v % std::size(kMarkers)]};
      for (const auto& [t, ms] : points) {
        line.x.push_back(t);
        line.y.push_back(ms);
      }
      series.push_back(std::move(line));
    }
    // Linear attention's rows dashed, in the first colors again, with their own marker.
    for (std::size_t v = 0; v < bench::kLinearVariants.size(); ++v) {
      viz::Series line{"linear " + bench::kLinearVariants[v], {}, {}, viz::Marker::diamond};
      line.line = viz::LineStyle::dashed;
      line.color = viz::kPalette[v];
      std::vector<std::pair<double, double>> points;
      for (const bench::RowResult& r : rows) {
        if (r.shape.pass == pass && r.shape.variant == bench::kLinearVariants[v]) {
          points.emplace_back(static_cast<double>(r.shape.Tq), r.ms);
        }
      }
      std::sort(points.begin(), points.end());
      for (const auto& [t, ms] : points) {
        line.x.push_back(t);
        line.y.push_back(ms);
      }
      if (!line.x.empty()) series.push_back(std::move(line));
    }
    const viz::Series full = series.front();  // kVariants[0]; a copy, as series grows below
    if (full.x.size() >= 2 && full.x.back() > full.x.front()) {
      series.push_back(reference("~ T", 1, full, viz::LineStyle::dotted));
      series.push_back(reference("~ T^2", 2, full, viz::LineStyle::dashed));
    }
    viz::LinePlotOptions options;
    options.title = "qkv bench --variants, " + std::string(bench::pass_name(pass)) +
                    ": B=1 H=8 D=64 f32, " + std::to_string(threads) + " threads; dashed: linear";
    options.x_label = "T (Tq = Tk)";
    options.y_label = "median ms";
    options.log_x = options.log_y = true;
    const std::filesystem::path file = plot_file(path, pass);
    viz::write_line_plot(series, options, file);
    std::printf("plot: %s\n", file.string().c_str());
  }
}

// The median over `reps` of variant time / (full time x tiles) (or of any two shapes' times), the
// two run alternately, one call each per rep, after one warm-up call each: on this shared host the
// time of one row drifts by 1.5x from one minute to the next (T = 8192 window fwd, AMD EPYC Zen 3
// VM: 65 to 108 ms), and alternating puts both sides of the ratio under the same load. The order
// flips from rep to rep (ABBA), so that neither side always runs in the caches the other left.
double paired_vs_tiles(const bench::Shape& full, const bench::Shape& variant, int threads, int reps,
                       double tiles) {
  set_num_threads(threads);
  bench::Workload a(full), b(variant);
  a.run();
  b.run();
  std::vector<double> ratios;
  const auto seconds = [](bench::Workload& w) {
    const auto t0 = std::chrono::steady_clock::now();
    w.run();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int rep = 0; rep < reps; ++rep) {
    double ta = 0, tb = 0;
    if (rep % 2 == 0) {
      ta = seconds(a);
      tb = seconds(b);
    } else {
      tb = seconds(b);
      ta = seconds(a);
    }
    ratios.push_back(tb / (ta * tiles));
  }
  std::sort(ratios.begin(), ratios.end());
  const std::size_t n = ratios.size();
  return n % 2 == 1 ? ratios[n / 2] : 0.5 * (ratios[n / 2 - 1] + ratios[n / 2]);
}

// --variants: the seeds' sparse patterns through flex_attention (B = 1, H = 8, D = 64), each row
// beside the full row of its T and pass: GFLOP/s over the kept scores only, and the ratio of its
// time to (full time x the share of tiles the block mask keeps), which is 1 for a kernel whose
// cost is its tiles: vs_tiles from the rows' medians, and vs_paired from calls of the variant and
// of full alternated (paired_vs_tiles), the figure the targets are read from.
// The fields every --variants row has in the JSON: what ran (B = 1, H = 8, D = 64) and its times.
nlohmann::ordered_json variant_row(const char* kind, const bench::RowResult& r) {
  return {{"variant", r.shape.variant},
          {"kind", kind},
          {"pass", bench::pass_name(r.shape.pass)},
          {"layout", r.shape.heads_first ? "bhtd" : "bthd"},
          {"B", 1},
          {"H", 8},
          {"T", r.shape.Tq},
          {"D", 64},
          {"threads", r.threads},
          {"reps", r.reps},
          {"ms", rounded(r.ms, 4)},
          {"ms_min", rounded(r.ms_min, 4)},
          {"ms_max", rounded(r.ms_max, 4)}};
}

// --variants: how each linear row and the fused softmax rows (full, causal) grow with T (the
// log-log slope from T = 4096 on, or over all Ts where fewer than two reach it) and where each
// linear row crosses below its softmax row (full, or causal for _causal); printed and returned.
nlohmann::ordered_json linear_summary(const std::vector<bench::RowResult>& results,
                                      const std::vector<bench::Pass>& passes) {
  constexpr double kSlopeFrom = 4096;
  const auto curve = [&](const std::string& variant, bench::Pass pass) {
    bench::Curve c;
    for (const bench::RowResult& r : results) {
      if (r.shape.variant == variant && r.shape.pass == pass) {
        c.emplace_back(static_cast<double>(r.shape.Tq), r.ms);
      }
    }
    return c;
  };
  const auto slope = [&](const bench::Curve& c) {
    const double tail = bench::loglog_slope(c, kSlopeFrom);
    return std::isnan(tail) ? bench::loglog_slope(c) : tail;
  };
  const auto number = [](double x) {
    return std::isfinite(x) ? nlohmann::ordered_json(rounded(x, 3)) : nullptr;
  };
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  std::printf("\n%-16s %-4s %7s %-8s %s\n", "variant", "pass", "slope", "vs", "crossover T");
  for (const bench::Pass pass : passes) {
    for (const std::string& variant : {std::string("full"), std::string("causal")}) {
      const double s = slope(curve(variant, pass));
      if (std::isnan(s)) continue;
      std::printf("%-16s %-4s %7.2f\n", variant.c_str(),
                  std::string(bench::pass_name(pass)).c_str(), s);
      out.push_back({{"variant", variant}, {"pass", bench::pass_name(pass)}, {"slope", number(s)}});
    }
    for (const std::string& variant : bench::kLinearVariants) {
      const bench::Curve c = curve(variant, pass);
      if (c.empty()) continue;
      const std::string baseline =
          bench::linear_variant_options(variant).causal == Causal::none ? "full" : "causal";
      const bench::Crossover x = bench::crossover(c, curve(baseline, pass));
      const double s = slope(c);
      std::string where = "-";
      if (x.kind == bench::Crossover::Kind::interpolated) {
        where = "T = " + std::to_string(std::llround(x.t));
      } else if (x.kind == bench::Crossover::Kind::below) {
        where = "below " + std::to_string(std::llround(x.t)) + " (faster at every shared T)";
      } else if (x.kind == bench::Crossover::Kind::above) {
        where = "above " + std::to_string(std::llround(x.t)) + " (slower at every shared T)";
      }
      std::printf("%-16s %-4s %7.2f %-8s %s\n", variant.c_str(),
                  std::string(bench::pass_name(pass)).c_str(), s, baseline.c_str(), where.c_str());
      out.push_back({{"variant", variant},
                     {"pass", bench::pass_name(pass)},
                     {"slope", number(s)},
                     {"vs", baseline},
                     {"crossover", bench::kind_name(x.kind)},
                     {"crossover_T", x.kind == bench::Crossover::Kind::none
                                         ? nlohmann::ordered_json(nullptr)
                                         : nlohmann::ordered_json(rounded(x.t, 1))}});
    }
  }
  std::printf(
      "slope: log-log least squares of median ms against T from T = %.0f on (all Ts "
      "where fewer than two reach it)\n",
      kSlopeFrom);
  return out;
}

void run_variants(const BenchOptions& opt, std::ofstream& json_file) {
  const int threads = opt.threads > 0 ? opt.threads : num_threads();
  std::vector<std::int64_t> ts = opt.quick ? std::vector<std::int64_t>{256, 512}
                                           : std::vector<std::int64_t>{256, 1024, 4096, 16384};
  std::vector<std::int64_t> linear_ts =
      opt.quick ? ts : std::vector<std::int64_t>{256, 1024, 4096, 16384, 65536, 262144};
  if (!opt.ts.empty()) ts = linear_ts = opt.ts;
  if (!opt.linear_ts.empty()) linear_ts = opt.linear_ts;
  std::set<std::int64_t> all_ts(ts.begin(), ts.end());
  all_ts.insert(linear_ts.begin(), linear_ts.end());
  const auto has = [](const std::vector<std::int64_t>& list, std::int64_t T) {
    return std::find(list.begin(), list.end(), T) != list.end();
  };
  std::vector<bench::Pass> passes = {bench::Pass::fwd, bench::Pass::bwd};
  if (!opt.passes.empty()) {
    passes.clear();
    for (const std::string& pass : opt.passes) passes.push_back(bench::parse_pass(pass));
  }
  std::printf("qkv %s, %s, %d threads, flex_attention variants (B=1, H=8, D=64, f32)\n",
              std::string(version()).c_str(), cpu_model().c_str(), threads);
  std::printf(
      "kept: share of tiles the block mask keeps / of scores the mask keeps; GFLOP/s over the kept "
      "scores; vs_tiles: ms / (full ms x kept tiles); vs_paired: the same, full and the variant "
      "alternated call by call; linear rows (linear_attention): vs_softmax = ms / the fused "
      "softmax row's ms (full, or causal for _causal) at the same T\n\n");
  std::printf("%-16s %-4s %-4s %6s %4s %10s %7s %7s %8s %8s %9s %8s %9s\n", "variant", "pass",
              "lay", "T", "reps", "ms", "tiles", "scores", "GFLOP/s", "vs_tiles", "vs_paired",
              "RSS_MB", "mask_ms");
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::vector<bench::RowResult> results;
  std::vector<bool> layouts;  // heads first or not, in the order run
  if (opt.layout != "bhtd") layouts.push_back(false);
  if (opt.layout != "bthd") layouts.push_back(true);
  for (const std::int64_t T : all_ts) {
    for (const bench::Pass pass : passes) {
      std::map<std::string, double> softmax_ms;  // full and causal at this T and pass
      for (const bool heads_first : layouts) {
        double full_ms = 0;
        bench::Shape full_shape, window_shape;
        bool window_seen = false;
        for (const std::string& variant : bench::kVariants) {
          if (!has(ts, T)) break;
          bench::Shape shape;
          shape.pass = pass;
          shape.Tq = shape.Tk = T;
          shape.variant = variant;
          shape.heads_first = heads_first;
          const auto start = std::chrono::steady_clock::now();
          const BlockMask mask = bench::variant_mask(variant, T);
          const double mask_ms =
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                  .count();
          const double tiles = mask.kept_fraction();
          const double pairs = bench::kept_pairs(mask);
          const bench::RowResult r = bench::run_row(shape, threads, opt.reps, bench::Peaks{});
          if (variant == "full") {
            full_ms = r.ms;
            full_shape = shape;
          }
          if (variant == "window") {
            window_shape = shape;
            window_seen = true;
          }
          const double vs_paired =
              variant == "full" ? 1.0 : paired_vs_tiles(full_shape, shape, threads, r.reps, tiles);
          // The lambda against the built-in window, alternated the same way (tiles 1: the ratio of
          // the times).
          const bool lambda = variant == "window_lambda" && window_seen;
          const double vs_builtin =
              lambda ? paired_vs_tiles(window_shape, shape, threads, r.reps, 1.0) : 0.0;
          const double flop = 4.0 * 8 * pairs * 64 * (pass == bench::Pass::fwd ? 1.0 : 2.5);
          const double gflops = flop / (r.ms * 1e6);
          const double vs_tiles = r.ms / (full_ms * tiles);
          const double scores = pairs / (static_cast<double>(T) * static_cast<double>(T));
          std::printf(
              "%-16s %-4s %-4s %6lld %4d %10.3f %7.4f %7.4f %8.1f %8.2f %9.2f %8.1f %9.2f\n",
              variant.c_str(), std::string(bench::pass_name(pass)).c_str(),
              heads_first ? "bhtd" : "bthd", static_cast<long long>(T), r.reps, r.ms, tiles, scores,
              gflops, vs_tiles, vs_paired, r.peak_rss_mb, mask_ms);
          if (lambda)
            std::printf("%-16s %-4s %-4s %6lld  vs window, paired: %.2f\n", "", "", "",
                        static_cast<long long>(T), vs_builtin);
          std::fflush(stdout);
          results.push_back(r);
          if (heads_first == layouts.front()) softmax_ms[variant] = r.ms;
          nlohmann::ordered_json row = variant_row("softmax", r);
          row.update(nlohmann::ordered_json{
              {"kept_tiles", rounded(tiles, 5)},
              {"kept_scores", rounded(scores, 5)},
              {"gflops_kept", rounded(gflops, 3)},
              {"vs_tiles", rounded(vs_tiles, 4)},
              {"vs_tiles_paired", rounded(vs_paired, 4)},
              {"vs_builtin_paired",
               lambda ? nlohmann::ordered_json(rounded(vs_builtin, 4)) : nullptr},
              {"peak_rss_mb", rounded(r.peak_rss_mb, 2)},
              {"block_mask_ms", rounded(mask_ms, 3)}});
          rows.push_back(std::move(row));
        }
      }
      for (const std::string& variant : bench::kLinearVariants) {
        if (!has(linear_ts, T)) break;
        bench::Shape shape;
        shape.pass = pass;
        shape.Tq = shape.Tk = T;
        shape.variant = variant;
        shape.heads_first = layouts.front();
        const LinearOptions o = bench::linear_variant_options(variant);
        const bench::RowResult r = bench::run_row(shape, threads, opt.reps, bench::Peaks{});
        const std::string baseline = o.causal == Causal::none ? "full" : "causal";
        const auto soft = softmax_ms.find(baseline);
        const double vs_softmax = soft == softmax_ms.end() ? 0.0 : r.ms / soft->second;
        std::printf("%-16s %-4s %-4s %6lld %4d %10.3f %7s %7s %8s %8s %9s %8.1f %9s",
                    variant.c_str(), std::string(bench::pass_name(pass)).c_str(),
                    layouts.front() ? "bhtd" : "bthd", static_cast<long long>(T), r.reps, r.ms, "-",
                    "-", "-", "-", "-", r.peak_rss_mb, "-");
        if (vs_softmax > 0) std::printf("  vs_softmax %.3f", vs_softmax);
        std::printf("\n");
        std::fflush(stdout);
        results.push_back(r);
        nlohmann::ordered_json row = variant_row("linear", r);
        row.update(nlohmann::ordered_json{
            {"feature_map", o.feature_map == FeatureMap::elu ? "elu" : "favor"},
            {"num_features", linear_feature_count(o, 64)},
            {"causal", o.causal != Causal::none},
            {"vs_softmax",
             vs_softmax > 0 ? nlohmann::ordered_json(rounded(vs_softmax, 4)) : nullptr},
            {"peak_rss_mb", rounded(r.peak_rss_mb, 2)}});
        rows.push_back(std::move(row));
      }
    }
  }
  const nlohmann::ordered_json summary = linear_summary(results, passes);
  if (json_file.is_open()) {
    nlohmann::ordered_json doc;
    doc["machine"] = {{"cpu", cpu_model()},
                      {"cpu_flags", cpu_flags()},
                      {"threads", threads},
                      {"simd_targets", simd_targets()},
                      {"matrix_paths", matrix_paths()},
                      {"qkv_version", std::string(version())},
                      {"date", utc_now()}};
    doc["rows"] = rows;
    doc["scaling"] = summary;
    json_file << doc.dump(2) << '\n';
    if (!json_file) throw Error("--json", "a writable file", opt.json_path);
  }
  if (!opt.plot_path.empty()) {
    // The first layout run (bthd with --layout both): one line per variant.
    std::vector<bench::RowResult> plotted;
    for (const bench::RowResult& r : results) {
      if (r.shape.heads_first == layouts.front()) plotted.push_back(r);
    }
    plot_variants(plotted, passes, threads, opt.plot_path);
  }
}

void run_bench(const BenchOptions& opt) {
  const int threads = opt.threads > 0 ? opt.threads : num_threads();
  if (opt.training) {
    set_num_threads(threads);
    TrainingBenchOptions train = opt.train;
    train.json_path = opt.json_path;
    run_training_bench(train);
    return;
  }
  const DType dtype = opt.dtype == "f64"    ? DType::f64
                      : opt.dtype == "bf16" ? DType::bf16
                      : opt.dtype == "f16"  ? DType::f16
                                            : DType::f32;
  std::vector<std::int64_t> ts =
      opt.quick ? std::vector<std::int64_t>{256, 512} : bench::kDefaultTs;
  std::vector<std::int64_t> ds = opt.quick ? std::vector<std::int64_t>{64} : bench::kDefaultDs;
  std::vector<std::int64_t> decode_tks =
      opt.quick ? std::vector<std::int64_t>{4096} : bench::kDefaultDecodeTks;
  if (!opt.ts.empty()) ts = opt.ts;
  if (!opt.ds.empty()) ds = opt.ds;
  if (!opt.decode_tks.empty()) decode_tks = opt.decode_tks;
  if (opt.no_decode) decode_tks.clear();
  if (opt.decode_only) ts.clear();
  std::vector<bench::Shape> shapes;
  for (const bench::Shape& shape : bench::suite(ts, ds, decode_tks, dtype, opt.decode_group, opt.decode_tq)) {
    bool wanted = opt.passes.empty();
    for (const std::string& pass : opt.passes) wanted |= bench::parse_pass(pass) == shape.pass;
    if (!wanted) continue;
    // --layout both: each row twice in a row, contiguous then heads first, so that the pair
    // shares the machine's state of the moment.
    for (const bool heads_first : {false, true}) {
      if (opt.layout != "both" && heads_first != (opt.layout == "bhtd")) continue;
      bench::Shape laid = shape;
      laid.heads_first = heads_first;
      shapes.push_back(laid);
    }
  }

  // Opened before the run so a bad path fails in a second, not after the whole suite.
  std::ofstream json_file;
  if (!opt.json_path.empty()) {
    json_file.open(opt.json_path);
    if (!json_file) throw Error("--json", "a writable file", opt.json_path);
  }
  if (!opt.plot_path.empty()) expect_output_folder("--plot", opt.plot_path);

  if (opt.variants) {
    run_variants(opt, json_file);
    return;
  }
  std::printf("qkv %s, %s, %d threads\n", std::string(version()).c_str(), cpu_model().c_str(),
              threads);
  const double load_start = load_average();
  if (load_start > 0.5) {
    std::printf("note: load average %.2f, other work may slow the rows down\n", load_start);
  }
  bench::Peaks peaks;
  if (opt.peak) {
    peaks = bench::measure_peaks(threads);
    std::printf(
        "peak: %.1f GFLOP/s f32 FMA, %.1f GFLOP/s f64 FMA, %.1f GFLOP/s bf16 (%s), %.1f GB/s "
        "STREAM triad, %.1f GB/s read sweep (best of 10, %d threads)\n",
        peaks.gflops_f32, peaks.gflops_f64, peaks.gflops_bf16, peaks.bf16_path.c_str(),
        peaks.stream_gbps, peaks.read_gbps, threads);
  }
  std::printf(
      "GFLOP/s counts 4*B*H*Tq*Tk*D per forward (halved when causal), 2.5x for the "
      "backward; ms is the median of reps\n\n");
  print_header(opt.peak);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const bench::Shape& shape : shapes) {
    const bench::RowResult result = bench::run_row(shape, threads, opt.reps, peaks);
    print_row(result, opt.peak);
    rows.push_back(row_json(result, opt.peak));
  }

  if (json_file.is_open()) {
    nlohmann::ordered_json doc;
    doc["peak_gflops"] = opt.peak ? nlohmann::ordered_json(rounded(peaks.gflops_f32, 2)) : nullptr;
    doc["peak_gflops_f64"] =
        opt.peak ? nlohmann::ordered_json(rounded(peaks.gflops_f64, 2)) : nullptr;
    doc["peak_gflops_bf16"] =
        opt.peak ? nlohmann::ordered_json(rounded(peaks.gflops_bf16, 2)) : nullptr;
    doc["peak_bf16_path"] = opt.peak ? nlohmann::ordered_json(peaks.bf16_path) : nullptr;
    doc["stream_gbps"] = opt.peak ? nlohmann::ordered_json(rounded(peaks.stream_gbps, 2)) : nullptr;
    doc["read_gbps"] = opt.peak ? nlohmann::ordered_json(rounded(peaks.read_gbps, 2)) : nullptr;
    doc["machine"] = {{"cpu", cpu_model()},
                      {"cpu_flags", cpu_flags()},
                      {"threads", threads},
                      {"simd_targets", simd_targets()},
                      {"matrix_paths", matrix_paths()},
                      {"qkv_version", std::string(version())},
                      {"date", utc_now()},
                      {"load_average_start", load_start},
                      {"load_average_end", load_average()}};
    doc["rows"] = rows;
    json_file << doc.dump(2) << '\n';
    if (!json_file) throw Error("--json", "a writable file", opt.json_path);
  }
}

}  // namespace

void add_bench(CLI::App& app) {
  auto opt = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Time the fused CPU attention kernel: B=1, H=8, T in {512..8192}, D in {64, 128}, causal "
      "and not, fwd and bwd, plus decode rows (Tq=1, Tk in {4096, 16384, 65536}, D=128)");
  cmd->add_flag("--peak", opt->peak,
                "First measure the FMA peak and STREAM bandwidth and show each row's fraction of "
                "them (without it the fraction columns are left out and JSON has null)");
  cmd->add_option("--json", opt->json_path, "Also write the results to this JSON file");
  cmd->add_option("--threads", opt->threads,
                  "qkv::set_num_threads (default: OMP_NUM_THREADS or all)")
      ->transform(integer<int>(1, 4096));
  cmd->add_option("--reps", opt->reps,
                  "Timed repetitions per row (default: enough for ~10 s a row, 3 to 10)")
      ->transform(integer<int>(1, 1000000));
  cmd->add_flag("--quick", opt->quick,
                "A tiny suite for smoke tests: T in {256, 512}, D 64, one decode row (Tk 4096)");
  cmd->add_option("--T", opt->ts, "Sequence lengths (Tq = Tk), replacing the default list")
      ->transform(integer<std::int64_t>(1))
      ->delimiter(',');
  cmd->add_option("--D", opt->ds, "Head dims, replacing the default list")
      ->transform(integer<std::int64_t>(1))
      ->delimiter(',');
  cmd->add_option("--decode-tk", opt->decode_tks, "Decode rows' key lengths, replacing the default")
      ->transform(integer<std::int64_t>(1))
      ->delimiter(',');
  cmd->add_option("--decode-group", opt->decode_group,
                  "Decode rows' query heads per k/v head (GQA): Hq = G * 8 over 8 k/v heads")
      ->transform(integer<std::int64_t>(1));
  cmd->add_option("--decode-tq", opt->decode_tq,
                  "Decode rows' queries a head (a speculative draft or a chunk of a prompt against "
                  "the cache); judged against memory bandwidth like one query")
      ->transform(integer<std::int64_t>(1));
  cmd->add_flag("--no-decode", opt->no_decode, "Leave out the decode rows");
  cmd->add_flag("--decode-only", opt->decode_only, "Only the decode rows")->excludes("--no-decode");
  CLI::Option* variants =
      cmd->add_flag("--variants", opt->variants,
                    "The sparse patterns through flex_attention instead (full, causal, window 256, "
                    "Longformer, BigBird, 8 documents, strided, the window as a lambda; B=1, H=8, "
                    "D=64, T in {256, 1024, 4096, 16384} or --T), and linear attention (elu + 1, "
                    "FAVOR+ with 64 and 256 features, each full and causal; T from 256 to 262144, "
                    "or --linear-T), with log-log slopes and the T where linear overtakes softmax");
  cmd->add_option("--linear-T", opt->linear_ts,
                  "With --variants: the linear rows' lengths, replacing the default (or --T)")
      ->transform(integer<std::int64_t>(1))
      ->delimiter(',')
      ->needs(variants);
  cmd->add_option("--plot", opt->plot_path,
                  "With --variants: draw median ms against T on log-log axes, one line per "
                  "variant, one file per pass (FILE.png -> FILE-fwd.png, FILE-bwd.png; or .svg), "
                  "with gray lines ~ T (dotted) and ~ T^2 (dashed) through full's first point")
      ->check(image_file())
      ->needs(variants);
  cmd->add_option("--pass", opt->passes, "Only these passes (fwd, bwd)")
      ->check(CLI::IsMember({"fwd", "bwd"}))
      ->delimiter(',');
  cmd->add_option(
         "--dtype", opt->dtype,
         "Storage type of q, k, v, out (and dout, grads), accumulated in f32: bf16 "
         "forward rows from 1024 keys use bf16 products where the CPU has them (qkv "
         "info), other forward rows read K and V as stored; bf16 backward rows take bf16 products "
         "where their forward does, other backward rows convert first")
      ->check(CLI::IsMember({"f32", "f64", "bf16", "f16"}));
  cmd->add_option("--layout", opt->layout,
                  "Where q, k, v, out, dout and the gradients lie: bthd ([B, T, H, D], "
                  "contiguous), bhtd ([B, H, T, D] memory passed as permuted views, read and "
                  "written in place), both (each row in both layouts, side by side; with "
                  "--variants, the whole table in each, linear rows and --plot in bthd)")
      ->check(CLI::IsMember({"bthd", "bhtd", "both"}));
  CLI::Option* training = cmd->add_flag(
      "--training", opt->training,
      "qkv demo's translator instead: training steps on its corpus and batches of 32, timed one "
      "by one after --warmup-steps untimed ones, then greedy decoding of --decode-sentences "
      "sentences with the KV cache (bench/compare_training.py runs PyTorch's twin beside it)");
  training->excludes(variants);
  cmd->add_option("--train-steps", opt->train.steps, "With --training: timed steps")
      ->transform(integer<std::int64_t>(1))
      ->needs(training);
  cmd->add_option("--warmup-steps", opt->train.warmup, "With --training: untimed steps first")
      ->transform(integer<std::int64_t>(0))
      ->needs(training);
  cmd->add_option("--decode-sentences", opt->train.decode_sentences,
                  "With --training: sentences decoded")
      ->transform(integer<std::int64_t>(1))
      ->needs(training);
  cmd->add_option("--batches-json", opt->train.batches_path,
                  "With --training: also write the batches trained on and the sentences decoded "
                  "(token ids) to this JSON file, for bench/compare_training.py")
      ->needs(training);
  cmd->callback([opt] { run_bench(*opt); });
}

}  // namespace qkv::cli
