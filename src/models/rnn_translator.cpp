// The recurrent translators of the bottleneck experiment: RNNencdec and RNNsearch
// (qkv/models/rnn_translator.hpp). decode() and step() share advance(), one decoder step, so the
// teacher-forced logits and the incremental ones are the same computation.
#include "qkv/models/rnn_translator.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "qkv/error.hpp"
#include "qkv/ops.hpp"

namespace qkv::models {

namespace ag = autograd;

namespace {

std::string str(std::int64_t n) { return std::to_string(n); }

RnnTranslatorConfig checked(const RnnTranslatorConfig& c) {
  if (c.source_vocab <= 4)
    throw Error("source_vocab", "> 4 (the special tokens)", str(c.source_vocab));
  if (c.target_vocab <= 4)
    throw Error("target_vocab", "> 4 (the special tokens)", str(c.target_vocab));
  for (const auto& [name, value] : {std::pair{"embedding", c.embedding},
                                    {"hidden", c.hidden},
                                    {"alignment", c.alignment},
                                    {"output", c.output}}) {
    if (value < 1) throw Error(name, ">= 1", str(value));
  }
  if (c.max_length < 2) throw Error("max_length", ">= 2", str(c.max_length));
  return c;
}

// [N, S] boolean, true at positions j >= lengths[n], as [N, 1, S].
Tensor padding_mask(const std::vector<std::int64_t>& lengths, std::int64_t S) {
  const auto N = static_cast<std::int64_t>(lengths.size());
  std::vector<double> pad(static_cast<std::size_t>(N * S));
  for (std::int64_t n = 0; n < N; ++n) {
    for (std::int64_t j = 0; j < S; ++j) pad[n * S + j] = j >= lengths[n] ? 1.0 : 0.0;
  }
  return Tensor::from_values({N, 1, S}, pad, DType::boolean);
}

// t [N, ...] -> [rows, ...], row i a copy of t's row rows[i].
Tensor take_rows(const Tensor& t, const std::vector<std::int64_t>& rows) {
  Shape shape = t.shape();
  shape[0] = static_cast<std::int64_t>(rows.size());
  Tensor out = Tensor::empty(shape, t.dtype());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto r = static_cast<std::int64_t>(i);
    Tensor row = out.slice(0, r, r + 1);
    row.copy_from(t.slice(0, rows[i], rows[i] + 1));
  }
  return out;
}

}  // namespace

RnnTranslator::RnnTranslator(const RnnTranslatorConfig& config)
    : config_(checked(config)),
      generator_(config.seed),
      source_embedding_(config.source_vocab, config.embedding, generator_),
      target_embedding_(config.target_vocab, config.embedding, generator_),
      encoder_(config.embedding, config.hidden, generator_, /*bidirectional=*/true),
      init_(2 * config.hidden, config.hidden, generator_),
      deep_(3 * config.hidden + config.embedding, config.output, generator_),
      output_(config.output, config.target_vocab, generator_) {
  const std::int64_t H = config_.hidden, I = config_.embedding + 2 * H;
  register_module("source_embedding", source_embedding_);
  register_module("target_embedding", target_embedding_);
  register_module("encoder", encoder_);
  register_module("init", init_);
  if (config_.attention) {
    query_ = std::make_unique<nn::Linear>(H, config_.alignment, generator_, /*bias=*/false);
    key_ = std::make_unique<nn::Linear>(2 * H, config_.alignment, generator_);
    score_ = nn::uniform_parameter({config_.alignment, 1},
                                   1.0 / std::sqrt(static_cast<double>(config_.alignment)),
                                   generator_, DType::f32);
    register_module("attention.query", *query_);
    register_module("attention.key", *key_);
    register_parameter("attention.score", score_);
  }
  // PyTorch's GRUCell initialization, uniform in [-1/sqrt(H), 1/sqrt(H)).
  const double bound = 1.0 / std::sqrt(static_cast<double>(H));
  weight_ih_ = nn::uniform_parameter({3 * H, I}, bound, generator_, DType::f32);
  weight_hh_ = nn::uniform_parameter({3 * H, H}, bound, generator_, DType::f32);
  bias_ih_ = nn::uniform_parameter({3 * H}, bound, generator_, DType::f32);
  bias_hh_ = nn::uniform_parameter({3 * H}, bound, generator_, DType::f32);
  register_parameter("decoder.weight_ih", weight_ih_);
  register_parameter("decoder.weight_hh", weight_hh_);
  register_parameter("decoder.bias_ih", bias_ih_);
  register_parameter("decoder.bias_hh", bias_hh_);
  register_module("deep_output", deep_);
  register_module("output", output_);
}

std::int64_t RnnTranslator::parameter_count(const RnnTranslatorConfig& c) {
  const std::int64_t E = c.embedding, H = c.hidden, A = c.alignment, O = c.output;
  const auto cell = [](std::int64_t in, std::int64_t h) { return 3 * h * (in + h) + 6 * h; };
  std::int64_t n = (c.source_vocab + c.target_vocab) * E;  // the two embeddings
  n += 2 * cell(E, H);                                     // the bidirectional encoder
  n += 2 * H * H + H;                                      // W_s
  if (c.attention) n += H * A + 2 * H * A + A + A;         // W_a, U_a and its bias, v
  n += cell(E + 2 * H, H);                                 // the decoder's cell
  n += (3 * H + E) * O + O;                                // W_o
  n += O * c.target_vocab + c.target_vocab;                // W_y
  return n;
}

// source ids [B, S] -> memory [B, S + 1, 2H]
Var RnnTranslator::encode(const Batch& source) {
  const Var x = source_embedding_.forward(source.ids, {source.batch, source.length});
  const nn::GRU::Output read = encoder_.forward(x, {}, source.lengths);
  // final [2, B, H] -> the summary [B, 1, 2H]: the forward state at the last word, the backward
  // one at the first.
  const Var forward_last = ag::reshape(ag::slice(read.final, 0, 0, 1), {source.batch, 1, -1});
  const Var backward_first = ag::reshape(ag::slice(read.final, 0, 1, 2), {source.batch, 1, -1});
  return ag::concat({read.outputs, ag::concat({forward_last, backward_first}, 2)}, 1);
}

// memory [N, S + 1, 2H] -> annotations, keys, padding, summary
RnnTranslator::Source RnnTranslator::source_of(const Var& memory,
                                               const std::vector<std::int64_t>& lengths) const {
  const std::int64_t N = memory.size(0), S = memory.size(1) - 1;
  if (memory.dim() != 3 || memory.size(2) != 2 * config_.hidden ||
      static_cast<std::int64_t>(lengths.size()) != N) {
    throw Error("memory",
                "[" + str(static_cast<std::int64_t>(lengths.size())) + ", S + 1, " +
                    str(2 * config_.hidden) + "] from encode()",
                shape_string(memory.shape()));
  }
  for (const std::int64_t n : lengths) {
    if (n < 1 || n > S) throw Error("source lengths", "in [1, " + str(S) + "]", str(n));
  }
  Source s;
  s.annotations = ag::slice(memory, 1, 0, S);
  s.summary = ag::reshape(ag::slice(memory, 1, S, S + 1), {N, -1});
  if (config_.attention) {
    s.keys = key_->forward(s.annotations);
    s.padding = padding_mask(lengths, S);
  }
  return s;
}

// s_{i-1} [N, H], E(y_{i-1}) [N, E] -> s_i, the deep output, a_i
RnnTranslator::Step RnnTranslator::advance(const Source& source, const Var& state,
                                           const Var& word) const {
  const std::int64_t N = state.size(0);
  Step out;
  Var context = source.summary;  // RNNencdec: the same vector at every step
  if (config_.attention) {
    // e_ij = v^T tanh(W_a s_{i-1} + U_a h_j) [N, S, 1] -> a_i [N, 1, S] over the source words
    const Var query = ag::reshape(query_->forward(state), {N, 1, -1});
    const Var energy = ag::matmul(ag::tanh(source.keys + query), score_);
    const Var scores = ag::masked_fill(ag::transpose(energy, 1, 2), source.padding,
                                       -std::numeric_limits<double>::infinity());
    out.weights = ag::softmax(scores, -1);
    context = ag::reshape(ag::matmul(out.weights, source.annotations), {N, -1});
  }
  out.state = ag::gru_cell(ag::concat({word, context}, 1), state, weight_ih_, weight_hh_, bias_ih_,
                           bias_hh_);
  out.output = ag::tanh(deep_.forward(ag::concat({out.state, context, word}, 1)));
  return out;
}

// memory [B, S + 1, 2H], target_in [B, T] -> logits [B, T, V]
Var RnnTranslator::decode(const Var& memory, const Batch& source, const Batch& target_in,
                          Tensor* cross_weights) {
  if (target_in.batch != source.batch) {
    throw Error("target_in.batch", str(source.batch) + " (the source's)", str(target_in.batch));
  }
  if (target_in.length > config_.max_length) {
    throw Error("target_in.length", "at most max_length " + str(config_.max_length),
                str(target_in.length));
  }
  const Source src = source_of(memory, source.lengths);
  const std::int64_t B = target_in.batch, T = target_in.length;
  const Var words = target_embedding_.forward(target_in.ids, {B, T});
  Var state = ag::tanh(init_.forward(src.summary));
  std::vector<Var> outputs, weights;
  for (std::int64_t t = 0; t < T; ++t) {
    const Step step = advance(src, state, ag::reshape(ag::slice(words, 1, t, t + 1), {B, -1}));
    state = step.state;
    outputs.push_back(ag::reshape(step.output, {B, 1, -1}));
    if (config_.attention) weights.push_back(ag::reshape(step.weights, {B, 1, 1, -1}));
  }
  if (cross_weights != nullptr) {
    if (!config_.attention) {
      throw Error("cross_weights", "null for a model without attention", "a tensor to fill");
    }
    std::vector<Tensor> values;  // the weights as seen, no node of the graph
    for (const Var& w : weights) values.push_back(w.value());
    *cross_weights = ops::concat(values, 2);
  }
  return output_.forward(ag::concat(outputs, 1));
}

namespace {

// The decoder's state between steps: s and what each row reads of its source.
class RnnState final : public DecoderState {
 public:
  std::int64_t rows() const override { return state.size(0); }
  void select(const std::vector<std::int64_t>& rows) override {
    const std::int64_t n = this->rows();
    for (const std::int64_t r : rows) {
      if (r < 0 || r >= n) throw Error("rows", "indices in [0, " + str(n) + ")", str(r));
    }
    state = take_rows(state, rows);
    memory = take_rows(memory, rows);
    std::vector<std::int64_t> lengths;
    for (const std::int64_t r : rows) lengths.push_back(source_lengths[static_cast<size_t>(r)]);
    source_lengths = std::move(lengths);
  }
  Tensor state;   // s [N, H]
  Tensor memory;  // [N, S + 1, 2H]
  std::vector<std::int64_t> source_lengths;
};

}  // namespace

std::unique_ptr<DecoderState> RnnTranslator::begin_decoding(
    const Var& memory, const std::vector<std::int64_t>& source_lengths, std::int64_t max_length) {
  if (max_length < 1 || max_length > config_.max_length) {
    throw Error("max_length", "in [1, " + str(config_.max_length) + "]", str(max_length));
  }
  ag::NoGrad no_grad;
  const Source src = source_of(memory, source_lengths);
  auto s = std::make_unique<RnnState>();
  s->state = ag::tanh(init_.forward(src.summary)).value();
  s->memory = memory.value();
  s->source_lengths = source_lengths;
  return s;
}

// tokens [N] -> logits [N, V]
Tensor RnnTranslator::step(DecoderState& state, const std::vector<std::int64_t>& tokens,
                           Tensor* cross_weights) {
  auto* s = dynamic_cast<RnnState*>(&state);
  if (s == nullptr) throw Error("state", "one begun by this RnnTranslator", "another model's");
  const std::int64_t N = s->rows();
  if (static_cast<std::int64_t>(tokens.size()) != N) {
    throw Error("tokens", str(N) + " (one per row)", str(static_cast<std::int64_t>(tokens.size())));
  }
  if (cross_weights != nullptr && !config_.attention) {
    throw Error("cross_weights", "null for a model without attention", "a tensor to fill");
  }
  ag::NoGrad no_grad;
  // U_a h_j is recomputed each step (rows change under beam search): [N, S, 2H] x [2H, A], small
  // beside the steps' GRU and output products at the demo's lengths.
  const Source src = source_of(Var(s->memory), s->source_lengths);
  const Step step = advance(src, Var(s->state), target_embedding_.forward(tokens, {N}));
  s->state = step.state.value();
  if (cross_weights != nullptr) *cross_weights = step.weights.value();
  return output_.forward(step.output).value();
}

}  // namespace qkv::models
