// The tape: Var, NoGrad and the backward walk.
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>

#include "autograd/node.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/error.hpp"

namespace qkv::autograd {
namespace detail {
namespace {

thread_local bool grad_mode = true;
thread_local std::optional<DType> autocast_mode;

const Node& node_of(const std::shared_ptr<Node>& node, const char* what) {
  if (!node) throw Error("Var", std::string("a defined Var for ") + what, "an undefined Var");
  return *node;
}

// The sum of the gradients received so far; a fresh tensor, so gradients that alias one another
// (a reshape passes on a view of its dout) are never written.
void accumulate(Tensor& into, const Tensor& g) { into = into.defined() ? ops::add(into, g) : g; }

// Every node `root` depends on that requires grad, each after the nodes that use it: the
// reverse of a depth-first post-order, computed with an explicit stack.
std::vector<Node*> reverse_topological(Node* root) {
  std::vector<Node*> post_order;
  std::unordered_set<Node*> seen{root};
  std::vector<std::pair<Node*, std::size_t>> stack{{root, 0}};
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->inputs.size()) {
      Node* input = node->inputs[next++].get();
      if (input->requires_grad && seen.insert(input).second) stack.emplace_back(input, 0);
    } else {
      post_order.push_back(node);
      stack.pop_back();
    }
  }
  return {post_order.rbegin(), post_order.rend()};
}

}  // namespace

Node::~Node() {
  std::vector<std::shared_ptr<Node>> stack = std::move(inputs);
  while (!stack.empty()) {
    std::shared_ptr<Node> node = std::move(stack.back());
    stack.pop_back();
    if (node.use_count() == 1) {
      for (auto& input : node->inputs) stack.push_back(std::move(input));
      node->inputs.clear();
    }
  }
}

Var record(Tensor value, const std::vector<Var>& inputs, BackwardFn backward) {
  auto node = std::make_shared<Node>();
  node->value = std::move(value);
  bool needed = false;
  for (const Var& v : inputs) needed = needed || (v.defined() && v.requires_grad());
  if (grad_mode && needed) {
    node->requires_grad = true;
    for (const Var& v : inputs) {
      // An undefined input (an optional bias left out) stands as a constant with no gradient.
      node->inputs.push_back(v.defined() ? v.node() : std::make_shared<Node>());
    }
    node->backward = std::move(backward);
  }
  return Var(std::move(node));
}

bool recording(std::initializer_list<const Var*> inputs) {
  if (!grad_mode) return false;
  for (const Var* v : inputs) {
    if (v->defined() && v->requires_grad()) return true;
  }
  return false;
}

Var record(Tensor value, std::initializer_list<const Var*> inputs, BackwardFn backward) {
  std::vector<Var> list;
  for (const Var* v : inputs) list.push_back(*v);
  return record(std::move(value), list, std::move(backward));
}

}  // namespace detail

Var::Var(Tensor value, bool requires_grad) : node_(std::make_shared<detail::Node>()) {
  ops::expect_any_floating(value, "value");
  node_->value = std::move(value);
  node_->requires_grad = requires_grad;
}

const Tensor& Var::value() const { return detail::node_of(node_, "value()").value; }
const Tensor& Var::grad() const {
  detail::node_of(node_, "grad()");
  // A const read, so several threads may read one leaf's gradient at once: the first to find the
  // zeros owed makes them under a lock, and the others see them made (release / acquire). Backward
  // and zero_grad write, and must not run beside readers, as for any tensor.
  if (node_->grad_zeroed.load(std::memory_order_acquire)) {
    static std::mutex making;
    const std::lock_guard<std::mutex> lock(making);
    if (node_->grad_zeroed.load(std::memory_order_relaxed)) {
      node_->grad = Tensor::zeros(node_->value.shape(), node_->value.dtype());
      node_->grad_zeroed.store(false, std::memory_order_release);
    }
  }
  return node_->grad;
}
bool Var::requires_grad() const { return detail::node_of(node_, "requires_grad()").requires_grad; }
bool Var::is_leaf() const { return !detail::node_of(node_, "is_leaf()").backward; }

void Var::zero_grad() {
  detail::node_of(node_, "zero_grad()");
  // The zeros are made when read (grad()): a training step's backward overwrites them first. Was
  // a fresh zero tensor, then the first gradient added to it in a new one: 1.6% of a training
  // step of qkv demo's translator on one thread while the other waited (perf, 2 threads of the
  // AMD EPYC Zen 5 VM, 2026-11-29).
  if (node_->grad.defined() || node_->grad_zeroed) {
    node_->grad = Tensor();
    node_->grad_zeroed = true;
  }
}

Var Var::detach() const { return Var(value(), false); }

void Var::backward() const {
  const Tensor& v = value();
  if (v.numel() != 1) {
    throw Error("backward()", "a one-element Var (else pass the seed: backward(grad))",
                v.describe());
  }
  backward(Tensor::full(v.shape(), 1.0, v.dtype()));
}

void Var::backward(const Tensor& seed) const {
  const Tensor& v = value();
  if (!requires_grad()) {
    throw Error("backward", "a Var that requires grad (made from inputs that require it)",
                "a Var that does not");
  }
  if (!seed.defined() || seed.shape() != v.shape() || seed.dtype() != v.dtype()) {
    throw Error("seed", "a tensor like the Var, " + v.describe(),
                seed.defined() ? seed.describe() : "an undefined tensor");
  }
  const std::vector<detail::Node*> order = detail::reverse_topological(node_.get());
  // A backward that throws must not leave partial sums behind for the next pass.
  struct ClearPending {
    const std::vector<detail::Node*>& nodes;
    ~ClearPending() {
      for (detail::Node* node : nodes) node->pending = Tensor();
    }
  } clear_pending{order};
  node_->pending = seed;
  for (detail::Node* node : order) {
    const Tensor g = std::move(node->pending);
    node->pending = Tensor();
    if (!g.defined()) continue;
    if (!node->backward) {
      // A leaf keeps its own copy: the caller may zero it in place.
      node->grad = node->grad.defined() ? ops::add(node->grad, g) : g.clone();
      node->grad_zeroed = false;
      continue;
    }
    const std::vector<Tensor> grads = node->backward(g);
    for (std::size_t i = 0; i < node->inputs.size(); ++i) {
      detail::Node* input = node->inputs[i].get();
      if (input->requires_grad && i < grads.size() && grads[i].defined()) {
        detail::accumulate(input->pending, grads[i]);
      }
    }
  }
}

NoGrad::NoGrad() noexcept : previous_(detail::grad_mode) { detail::grad_mode = false; }
NoGrad::~NoGrad() { detail::grad_mode = previous_; }
bool grad_enabled() noexcept { return detail::grad_mode; }

Autocast::Autocast(DType dtype) : previous_(detail::autocast_mode) {
  if (dtype != DType::bf16 && dtype != DType::f16) {
    throw Error("dtype", "bf16 or f16 (the dtype Autocast computes in)",
                std::string(dtype_name(dtype)));
  }
  detail::autocast_mode = dtype;
}
Autocast::~Autocast() { detail::autocast_mode = previous_; }
std::optional<DType> autocast_dtype() noexcept { return detail::autocast_mode; }

}  // namespace qkv::autograd
