// qkv demo variants: the seeds' trade-off measured. The same small model learns associative
// recall over a long context (qkv/models/recall.hpp) with full, sliding-window, BigBird, elu + 1
// linear and FAVOR+ attention, at several lengths; each run reports its held-out accuracy, time
// per training step and peak memory. A second part finds, for each attention (and for full
// attention with its scores materialized, as textbook attention computes it), the longest T
// whose training step fits a memory budget. Written to variants.json and drawn in accuracy.png
// and step_time.png.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <vector>

#include "qkv/autograd/ops.hpp"
#include "qkv/checks.hpp"
#include "qkv/commands.hpp"
#include "qkv/error.hpp"
#include "qkv/files.hpp"
#include "qkv/models/recall.hpp"
#include "qkv/progress.hpp"
#include "qkv/system.hpp"
#include "qkv/version.hpp"
#include "qkv/viz/line_plot.hpp"

namespace qkv::cli {
namespace variants_demo {

namespace fs = std::filesystem;
using models::RecallAttention;

struct Options {
  std::string out = "qkv-variants";
  std::vector<std::int64_t> ts = {512, 1024, 2048};
  std::vector<std::string> attentions = {"full", "window", "bigbird", "elu", "favor"};
  // Steps and learning rate, from full attention at T 512 on the Zen 5 VM (2026-11-25): 300 steps
  // at lr 2e-3 reached 89.8% held-out accuracy (loss 0.72), at 3e-3 100% (loss 0.03); 400 steps
  // leave the variants that learn slower some room.
  std::int64_t steps = 400;
  std::int64_t batch = 16;
  double lr = 3e-3;
  std::int64_t eval_sequences = 512;
  std::uint64_t seed = 1;
  std::int64_t window = 64;
  std::int64_t num_features = 64;
  // The memory probe: one training step of one sequence at T = 1024, 2048, ... up to probe_max_t,
  // stopped where its peak RSS passes the budget or where the next step would take longer than
  // probe_seconds (its time extrapolated from the last two).
  bool probe = true;
  double memory_budget_mb = 1024;
  std::int64_t probe_max_t = 262144;
  double probe_seconds = 30;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double round_to(double value, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(value * scale) / scale;
}

models::RecallModelConfig model_config(const Options& opt, const models::RecallTask& task,
                                       RecallAttention attention) {
  models::RecallModelConfig c;
  c.keys = task.keys;
  c.values = task.values;
  c.fillers = task.fillers;
  c.attention = attention;
  c.window = opt.window;
  c.num_features = opt.num_features;
  c.seed = opt.seed;
  return c;
}

struct Run {
  RecallAttention attention;
  std::int64_t T = 0;
  double accuracy = 0;
  double final_loss = 0;  // mean of the last 10% of the steps
  double step_ms = 0;     // median over the steps at length T (after the curriculum's ramp)
  double peak_rss_mb = 0;
  double seconds = 0;
};

Run train_one(const Options& opt, RecallAttention attention, std::int64_t T) {
  models::RecallTask task;
  task.length = T;
  reset_peak_rss();
  const auto start = std::chrono::steady_clock::now();
  models::RecallModel model(model_config(opt, task, attention));
  models::RecallTrainOptions train;
  train.steps = opt.steps;
  train.batch_size = opt.batch;
  train.lr = opt.lr;
  train.seed = opt.seed;
  const std::string label =
      std::string(models::recall_attention_name(attention)) + " T " + std::to_string(T);
  ProgressBar bar(opt.steps);
  const models::RecallTrainReport report =
      models::train_recall(model, task, train, [&](std::int64_t step, double loss) {
        bar.update(step, label + "  loss " + format_fixed(loss, 3));
      });
  Run run{attention, T};
  run.peak_rss_mb = peak_rss_mb();
  run.accuracy = models::recall_accuracy(model, task, opt.eval_sequences, opt.seed + 1000003);
  const std::size_t tail = std::max<std::size_t>(1, report.losses.size() / 10);
  for (std::size_t n = report.losses.size() - tail; n < report.losses.size(); ++n) {
    run.final_loss += report.losses[n] / static_cast<double>(tail);
  }
  std::vector<double> at_length;
  for (std::size_t n = 0; n < report.step_seconds.size(); ++n) {
    if (report.lengths[n] == T) at_length.push_back(report.step_seconds[n]);
  }
  run.step_ms = 1e3 * median(at_length);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  bar.finish(label + "  accuracy " + format_fixed(100 * run.accuracy, 1) + "%  step " +
             format_fixed(run.step_ms, 1) + " ms  peak " + format_fixed(run.peak_rss_mb, 0) +
             " MB");
  return run;
}

struct ProbePoint {
  std::int64_t T = 0;
  double seconds = 0;
  double peak_rss_mb = 0;
};

struct Probe {
  RecallAttention attention;
  std::vector<ProbePoint> points;
  std::int64_t max_t = 0;  // the longest T measured within the budget (0: none)
  std::string stopped;     // why the doubling stopped
};

// One training step (forward, backward, AdamW) of one sequence of length T; its time and peak RSS.
ProbePoint probe_step(const Options& opt, RecallAttention attention, std::int64_t T) {
  models::RecallTask task;
  task.length = T;
  reset_peak_rss();
  models::RecallModel model(model_config(opt, task, attention));
  models::RecallTrainOptions train;
  train.steps = 1;  // at length T: a one-step run has no curriculum
  train.batch_size = 1;
  train.seed = opt.seed;
  const auto start = std::chrono::steady_clock::now();
  models::train_recall(model, task, train);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {T, seconds, peak_rss_mb()};
}

Probe probe(const Options& opt, RecallAttention attention) {
  Probe p{attention, {}, 0, ""};
  for (std::int64_t T = 1024; T <= opt.probe_max_t; T *= 2) {
    if (p.points.size() >= 2) {  // the next step's time, extrapolated on log-log axes
      const ProbePoint& a = p.points[p.points.size() - 2];
      const ProbePoint& b = p.points.back();
      const double power = std::log(b.seconds / a.seconds) / std::log(2.0);
      const double next = b.seconds * std::pow(2.0, std::max(power, 1.0));
      if (next > opt.probe_seconds) {
        p.stopped = "time: a step at T " + std::to_string(T) + " would take ~" +
                    format_fixed(next, 0) + " s";
        return p;
      }
    }
    const ProbePoint point = probe_step(opt, attention, T);
    p.points.push_back(point);
    std::printf("  %-13s T %7lld  step %8.2f s  peak %8.1f MB\n",
                std::string(models::recall_attention_name(attention)).c_str(),
                static_cast<long long>(T), point.seconds, point.peak_rss_mb);
    std::fflush(stdout);
    if (point.peak_rss_mb > opt.memory_budget_mb) {
      p.stopped =
          "memory: T " + std::to_string(T) + " needs " + format_fixed(point.peak_rss_mb, 0) + " MB";
      return p;
    }
    p.max_t = T;
  }
  p.stopped = "the probe's longest T";
  return p;
}

void plot(const std::vector<Run>& runs, const std::vector<RecallAttention>& attentions,
          bool accuracy, const std::string& title, const fs::path& file) {
  std::vector<viz::Series> series;
  for (const RecallAttention a : attentions) {
    viz::Series line{std::string(models::recall_attention_name(a)), {}, {}};
    for (const Run& r : runs) {
      if (r.attention != a) continue;
      line.x.push_back(static_cast<double>(r.T));
      line.y.push_back(accuracy ? 100 * r.accuracy : r.step_ms);
    }
    series.push_back(std::move(line));
  }
  if (accuracy && !runs.empty()) {  // a gray dotted line at chance, 1 / values
    const auto [low, high] = std::minmax_element(
        runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.T < b.T; });
    const double chance = 100.0 / static_cast<double>(models::RecallTask{}.values);
    viz::Series line{
        "chance", {static_cast<double>(low->T), static_cast<double>(high->T)}, {chance, chance}};
    line.marker = viz::Marker::none;
    line.line = viz::LineStyle::dotted;
    line.color = viz::kPalette.back();
    series.push_back(std::move(line));
  }
  viz::LinePlotOptions o;
  o.title = title;
  o.x_label = "T (sequence length)";
  o.y_label = accuracy ? "held-out accuracy, %" : "median ms per training step";
  o.log_x = true;
  o.log_y = !accuracy;
  if (accuracy) {
    o.y_min = 0;
    o.y_max = 105;
  }
  viz::write_line_plot(series, o, file);
}

void run(const Options& opt) {
  const fs::path out(opt.out);
  std::error_code error;
  fs::create_directories(out, error);
  if (error || !fs::is_directory(out)) {
    throw Error("--out", "a folder that can be created",
                opt.out + (error ? " (" + error.message() + ")" : ""));
  }
  std::vector<RecallAttention> attentions;
  for (const std::string& name : opt.attentions) {
    attentions.push_back(models::parse_recall_attention(name, "--attention"));
  }
  const models::RecallTask shown;
  const models::RecallModelConfig model;
  std::printf(
      "qkv %s, %s, %d threads. Associative recall: %lld facts (key, value) among filler tokens, "
      "each at least %lld tokens before the question at the end; chance %.1f%%. Model: d %lld, "
      "%lld heads, %lld layers, no positions; %lld steps of %lld sequences, lr %g.\n\n",
      std::string(version()).c_str(), cpu_model().c_str(), num_threads(),
      static_cast<long long>(shown.pairs), static_cast<long long>(shown.far),
      100.0 / static_cast<double>(shown.values), static_cast<long long>(model.d_model),
      static_cast<long long>(model.heads), static_cast<long long>(model.layers),
      static_cast<long long>(opt.steps), static_cast<long long>(opt.batch), opt.lr);
  std::vector<Run> runs;
  for (const std::int64_t T : opt.ts) {
    for (const RecallAttention a : attentions) runs.push_back(train_one(opt, a, T));
  }
  std::printf("\n%-9s %6s %9s %8s %9s %10s %9s\n", "attention", "T", "accuracy", "vs full", "loss",
              "step ms", "peak MB");
  nlohmann::ordered_json run_rows = nlohmann::ordered_json::array();
  for (const Run& r : runs) {
    double full = -1;
    for (const Run& f : runs) {
      if (f.T == r.T && f.attention == RecallAttention::full) full = f.accuracy;
    }
    const std::string name(models::recall_attention_name(r.attention));
    std::printf("%-9s %6lld %8.1f%% %8s %9.3f %10.1f %9.1f\n", name.c_str(),
                static_cast<long long>(r.T), 100 * r.accuracy,
                full < 0 ? "-" : (format_fixed(100 * (r.accuracy - full), 1) + " pt").c_str(),
                r.final_loss, r.step_ms, r.peak_rss_mb);
    run_rows.push_back(
        {{"attention", name},
         {"T", r.T},
         {"accuracy", round_to(r.accuracy, 4)},
         {"accuracy_minus_full", full < 0 ? nlohmann::ordered_json(nullptr)
                                          : nlohmann::ordered_json(round_to(r.accuracy - full, 4))},
         {"final_loss", round_to(r.final_loss, 4)},
         {"step_ms", round_to(r.step_ms, 2)},
         {"peak_rss_mb", round_to(r.peak_rss_mb, 1)},
         {"seconds", round_to(r.seconds, 1)}});
  }
  nlohmann::ordered_json probe_rows = nlohmann::ordered_json::array();
  if (opt.probe) {
    std::printf(
        "\nThe longest T a training step (one sequence) fits in %.0f MB, doubling from "
        "1024 (steps over %.0f s are not run):\n",
        opt.memory_budget_mb, opt.probe_seconds);
    std::vector<RecallAttention> probed = attentions;
    if (std::find(probed.begin(), probed.end(), RecallAttention::materialized) == probed.end()) {
      probed.insert(probed.begin(), RecallAttention::materialized);
    }
    for (const RecallAttention a : probed) {
      const Probe p = probe(opt, a);
      std::printf("  %-13s longest T in budget: %lld (stopped by %s)\n",
                  std::string(models::recall_attention_name(a)).c_str(),
                  static_cast<long long>(p.max_t), p.stopped.c_str());
      nlohmann::ordered_json points = nlohmann::ordered_json::array();
      for (const ProbePoint& q : p.points) {
        points.push_back({{"T", q.T},
                          {"step_seconds", round_to(q.seconds, 3)},
                          {"peak_rss_mb", round_to(q.peak_rss_mb, 1)}});
      }
      probe_rows.push_back({{"attention", std::string(models::recall_attention_name(a))},
                            {"max_T_in_budget", p.max_t},
                            {"stopped_by", p.stopped},
                            {"points", points}});
    }
  }
  nlohmann::ordered_json doc;
  models::RecallTask task;
  doc["machine"] = {{"cpu", cpu_model()},
                    {"threads", num_threads()},
                    {"simd_targets", simd_targets()},
                    {"qkv_version", std::string(version())}};
  doc["task"] = {{"facts", task.pairs},     {"keys", task.keys}, {"values", task.values},
                 {"fillers", task.fillers}, {"far", task.far},   {"chance", 1.0 / task.values}};
  doc["training"] = {{"steps", opt.steps},
                     {"batch", opt.batch},
                     {"lr", opt.lr},
                     {"eval_sequences", opt.eval_sequences},
                     {"seed", opt.seed},
                     {"window", opt.window},
                     {"num_features", opt.num_features}};
  doc["runs"] = run_rows;
  doc["memory_budget_mb"] = opt.memory_budget_mb;
  doc["probe"] = probe_rows;
  const fs::path json = out / "variants.json";
  std::ofstream file(json);
  file << doc.dump(2) << "\n";
  file.close();
  if (!file) throw Error("--out", "a folder variants.json can be written to", json.string());
  plot(runs, attentions, true, "Associative recall: held-out accuracy", out / "accuracy.png");
  plot(runs, attentions, false, "Associative recall: training step time", out / "step_time.png");
  std::printf("\nwritten to %s/: variants.json, accuracy.png, step_time.png\n",
              out.string().c_str());
}

}  // namespace variants_demo

CLI::App* add_demo_variants(CLI::App& demo) {
  auto opt = std::make_shared<variants_demo::Options>();
  CLI::App* cmd = demo.add_subcommand(
      "variants",
      "The seeds' trade-off measured: train one small model on associative recall over a long "
      "context with full, window, BigBird, elu and FAVOR+ attention; accuracy, time per step, "
      "memory, and the longest T each fits in a memory budget");
  cmd->add_option("--out", opt->out, "Output folder")->capture_default_str();
  cmd->add_option("--T", opt->ts, "Sequence lengths to train at")
      ->transform(integer<std::int64_t>(300))
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--attention", opt->attentions,
                  "Attentions to train: full, materialized, window, bigbird, elu, favor")
      ->check(CLI::IsMember({"full", "materialized", "window", "bigbird", "elu", "favor"}))
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--steps", opt->steps, "Training steps per run")
      ->transform(integer<std::int64_t>(1))
      ->capture_default_str();
  cmd->add_option("--batch", opt->batch, "Sequences per step")
      ->transform(integer<std::int64_t>(1))
      ->capture_default_str();
  cmd->add_option("--lr", opt->lr, "Peak learning rate")
      ->check(finite_number(/*allow_zero=*/false))
      ->capture_default_str();
  cmd->add_option("--eval", opt->eval_sequences, "Held-out sequences per run")
      ->transform(integer<std::int64_t>(1))
      ->capture_default_str();
  cmd->add_option("--seed", opt->seed, "Seed of the weights, the data and the random features")
      ->transform(integer<std::uint64_t>(0))
      ->capture_default_str();
  cmd->add_option("--window", opt->window, "Half-width of the window attention")
      ->transform(integer<std::int64_t>(1))
      ->capture_default_str();
  cmd->add_option("--features", opt->num_features, "FAVOR+ random features")
      ->transform(integer<std::int64_t>(1))
      ->capture_default_str();
  cmd->add_flag(
      "--no-probe", [opt](std::int64_t) { opt->probe = false; },
      "Skip the longest-T-in-budget probe");
  cmd->add_option("--memory-budget", opt->memory_budget_mb, "The probe's budget, MB of peak RSS")
      ->check(finite_number(/*allow_zero=*/false))
      ->capture_default_str();
  cmd->add_option("--probe-max-T", opt->probe_max_t, "The probe's longest T")
      ->transform(integer<std::int64_t>(1024))
      ->capture_default_str();
  cmd->add_option("--probe-seconds", opt->probe_seconds, "The probe's longest step, seconds")
      ->check(finite_number(/*allow_zero=*/false))
      ->capture_default_str();
  cmd->callback([opt] { variants_demo::run(*opt); });
  return cmd;
}

}  // namespace qkv::cli
