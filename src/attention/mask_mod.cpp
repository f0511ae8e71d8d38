// MaskMod: the predefined mask mods as an immutable tree. Leaves answer through the templates of
// qkv/masks.hpp and qkv/block_mask.hpp instantiated for their type (the rules and closed forms
// written once there), and nodes combine their children as masks::And and masks::Or do: so the
// tile kinds and the dropped keys are the compile-time mods', with one virtual call per node per
// row where the compile-time mods inline.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "qkv/error.hpp"
#include "qkv/mod_values.hpp"

namespace qkv {

// One node of the tree.
class MaskMod::Node {
 public:
  // closed_form: classify_row does not walk the elements of every tile (masks::HasKeys or
  // masks::HasClassifyRow for a leaf), which decides which part of an and is classified first.
  explicit Node(bool closed_form) : closed_form(closed_form) {}
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  virtual bool keep(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const = 0;
  virtual void classify_row(std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t i1,
                            std::int64_t Tk, std::int64_t bk, const TileKind* only,
                            TileKind* kinds) const = 0;
  virtual void drop_row(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
                        std::int64_t cols, float value, float* x) const = 0;
  virtual void drop_row(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
                        std::int64_t cols, double value, double* x) const = 0;
  // The node with its per_shape leaves made for (Tq, Tk); null where it holds none.
  virtual std::shared_ptr<const Node> for_shape(std::int64_t Tq, std::int64_t Tk) const = 0;

  const bool closed_form;

 protected:
  static const std::shared_ptr<const Node>& node_of(const MaskMod& mod) { return mod.node_; }
};

namespace {

using Node = MaskMod::Node;
using NodePtr = std::shared_ptr<const Node>;

// A node seen as a mask mod by the templates of qkv/masks.hpp.
struct Ref {
  const Node* node;
  bool operator()(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return node->keep(b, h, i, j);
  }
  void classify_row(std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t i1,
                    std::int64_t Tk, std::int64_t bk, const TileKind* only, TileKind* kinds) const {
    node->classify_row(b, h, i0, i1, Tk, bk, only, kinds);
  }
};

// A leaf without exact key intervals: its own rule, tile classifier and row of drops.
template <class M>
class Leaf final : public Node {
 public:
  explicit Leaf(M mod) : Node(masks::HasClassifyRow<M>), mod_(std::move(mod)) {}
  bool keep(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const override {
    return mod_(b, h, i, j);
  }
  void classify_row(std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t i1,
                    std::int64_t Tk, std::int64_t bk, const TileKind* only,
                    TileKind* kinds) const override {
    masks::classify_row(mod_, b, h, i0, i1, Tk, bk, only, kinds);
  }
  void drop_row(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0, std::int64_t cols,
                float value, float* x) const override {
    detail::drop_row<M, float>(&mod_, b, h, i, j0, cols, value, x);
  }
  void drop_row(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0, std::int64_t cols,
                double value, double* x) const override {
    detail::drop_row<M, double>(&mod_, b, h, i, j0, cols, value, x);
  }
  NodePtr for_shape(std::int64_t, std::int64_t) const override { return nullptr; }

 private:
  M mod_;
};

// A node that keeps exactly one interval of keys per row (masks::HasKeys): tiles and drops from
// the intervals alone, by the closed forms masks::classify_row and detail::drop_row have for such
// mods. A keyed leaf or an and of keyed nodes (as masks::And::keys).
class KeyedNode : public Node {
 public:
  KeyedNode() : Node(true) {}
  virtual KeyRange keys(std::int64_t b, std::int64_t h, std::int64_t i) const = 0;

  void classify_row(std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t i1,
                    std::int64_t Tk, std::int64_t bk, const TileKind* only,
                    TileKind* kinds) const override {
    masks::classify_row(Keys{this}, b, h, i0, i1, Tk, bk, only, kinds);
  }
  void drop_row(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0, std::int64_t cols,
                float value, float* x) const override {
    const Keys keys{this};
    detail::drop_row<Keys, float>(&keys, b, h, i, j0, cols, value, x);
  }
  void drop_row(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0, std::int64_t cols,
                double value, double* x) const override {
    const Keys keys{this};
    detail::drop_row<Keys, double>(&keys, b, h, i, j0, cols, value, x);
  }
  // Keyed nodes are made of leaves that need no shape.
  NodePtr for_shape(std::int64_t, std::int64_t) const override { return nullptr; }

 private:
  struct Keys {
    const KeyedNode* node;
    KeyRange keys(std::int64_t b, std::int64_t h, std::int64_t i) const {
      return node->keys(b, h, i);
    }
  };
};

template <class M>
class KeyedLeaf final : public KeyedNode {
 public:
  explicit KeyedLeaf(M mod) : mod_(std::move(mod)) {}
  bool keep(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const override {
    return mod_(b, h, i, j);
  }
  KeyRange keys(std::int64_t b, std::int64_t h, std::int64_t i) const override {
    return mod_.keys(b, h, i);
  }

 private:
  M mod_;
};

class KeyedAnd final : public KeyedNode {
 public:
  KeyedAnd(std::shared_ptr<const KeyedNode> first, std::shared_ptr<const KeyedNode> second)
      : first_(std::move(first)), second_(std::move(second)) {}
  bool keep(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const override {
    return first_->keep(b, h, i, j) && second_->keep(b, h, i, j);
  }
  KeyRange keys(std::int64_t b, std::int64_t h, std::int64_t i) const override {
    return intersect(first_->keys(b, h, i), second_->keys(b, h, i));
  }

 private:
  std::shared_ptr<const KeyedNode> first_, second_;
};

// An and (conjunction) or an or of two nodes, at least one of them without key intervals.
class Branch final : public Node {
 public:
  Branch(bool conjunction, NodePtr first, NodePtr second)
      : Node(true),
        conjunction_(conjunction),
        first_(std::move(first)),
        second_(std::move(second)),
        keyed_first_(dynamic_cast<const KeyedNode*>(first_.get())),
        keyed_second_(dynamic_cast<const KeyedNode*>(second_.get())) {}
  bool keep(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const override {
    return conjunction_ ? first_->keep(b, h, i, j) && second_->keep(b, h, i, j)
                        : first_->keep(b, h, i, j) || second_->keep(b, h, i, j);
  }
  void classify_row(std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t i1,
                    std::int64_t Tk, std::int64_t bk, const TileKind* only,
                    TileKind* kinds) const override {
    const Ref whole{this}, first{first_.get()}, second{second_.get()};
    // As masks::And: the part with a closed form first, the element walk only where it left
    // tiles.
    if (conjunction_ && !first_->closed_form && second_->closed_form) {
      masks::classify_parts(whole, second, first, true, b, h, i0, i1, Tk, bk, only, kinds);
    } else {
      masks::classify_parts(whole, first, second, conjunction_, b, h, i0, i1, Tk, bk, only, kinds);
    }
  }
  void drop_row(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0, std::int64_t cols,
                float value, float* x) const override {
    drop<float>(b, h, i, j0, cols, value, x);
  }
  void drop_row(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0, std::int64_t cols,
                double value, double* x) const override {
    drop<double>(b, h, i, j0, cols, value, x);
  }
  NodePtr for_shape(std::int64_t Tq, std::int64_t Tk) const override {
    NodePtr first = first_->for_shape(Tq, Tk), second = second_->for_shape(Tq, Tk);
    if (first == nullptr && second == nullptr) return nullptr;
    return std::make_shared<const Branch>(conjunction_, first ? std::move(first) : first_,
                                          second ? std::move(second) : second_);
  }

 private:
  // And: each part drops its keys. Or: x dropped where neither keeps; as masks::Or, outside a
  // keyed part's interval by the other part alone (masks::drop_beside), else by merging the two
  // drops (masks::drop_unless_either).
  template <class T>
  void drop(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0, std::int64_t cols,
            T value, T* x) const {
    if (conjunction_) {
      first_->drop_row(b, h, i, j0, cols, value, x);
      second_->drop_row(b, h, i, j0, cols, value, x);
      return;
    }
    if (keyed_first_ != nullptr || keyed_second_ != nullptr) {
      const KeyedNode* keyed = keyed_first_ != nullptr ? keyed_first_ : keyed_second_;
      const Node* other = keyed_first_ != nullptr ? second_.get() : first_.get();
      masks::drop_beside(keyed->keys(b, h, i), j0, cols, x,
                         [&](std::int64_t j, std::int64_t len, T* at) {
                           other->drop_row(b, h, i, j, len, value, at);
                         });
      return;
    }
    masks::drop_unless_either(
        j0, cols, value, x,
        [&](std::int64_t j, std::int64_t len, T* kept) {
          first_->drop_row(b, h, i, j, len, T(0), kept);
        },
        [&](std::int64_t j, std::int64_t len, T* kept) {
          second_->drop_row(b, h, i, j, len, T(0), kept);
        });
  }

  bool conjunction_;
  NodePtr first_, second_;
  const KeyedNode* keyed_first_;  // first_ as a keyed node, or null
  const KeyedNode* keyed_second_;
};

// A leaf made for each shape.
class PerShape final : public Node {
 public:
  using Make = std::function<MaskMod(std::int64_t Tq, std::int64_t Tk)>;
  explicit PerShape(Make make) : Node(true), make_(std::move(make)) {}
  bool keep(std::int64_t, std::int64_t, std::int64_t, std::int64_t) const override { unmade(); }
  void classify_row(std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                    std::int64_t, const TileKind*, TileKind*) const override {
    unmade();
  }
  void drop_row(std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, float,
                float*) const override {
    unmade();
  }
  void drop_row(std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, double,
                double*) const override {
    unmade();
  }
  NodePtr for_shape(std::int64_t Tq, std::int64_t Tk) const override;

 private:
  [[noreturn]] static void unmade() {
    throw Error("mask_mod",
                "a mask made for its shape (create_block_mask or MaskMod::for_shape make "
                "per_shape leaves)",
                "a per_shape leaf not made yet");
  }
  Make make_;
};

template <class M>
NodePtr leaf(M mod) {
  if constexpr (masks::HasKeys<M>) {
    return std::make_shared<const KeyedLeaf<M>>(std::move(mod));
  } else {
    return std::make_shared<const Leaf<M>>(std::move(mod));
  }
}

}  // namespace

MaskMod::MaskMod() : MaskMod(masks::Full{}) {}
MaskMod::MaskMod(masks::Full mod) : node_(leaf(mod)) {}
MaskMod::MaskMod(masks::Causal mod) : node_(leaf(mod)) {}
MaskMod::MaskMod(masks::SlidingWindow mod) : node_(leaf(mod)) {}
MaskMod::MaskMod(masks::KeyLengths mod) : node_(leaf(std::move(mod))) {}
MaskMod::MaskMod(masks::PrefixLM mod) : node_(leaf(std::move(mod))) {}
MaskMod::MaskMod(masks::Document mod) : node_(leaf(std::move(mod))) {}
MaskMod::MaskMod(masks::GlobalTokens mod) : node_(leaf(std::move(mod))) {}
MaskMod::MaskMod(masks::BlockLayout mod) : node_(leaf(std::move(mod))) {}
MaskMod::MaskMod(masks::Strided mod) : node_(leaf(mod)) {}
MaskMod::MaskMod(masks::Fixed mod) : node_(leaf(mod)) {}
MaskMod::MaskMod(std::shared_ptr<const Node> node) : node_(std::move(node)) {}

MaskMod MaskMod::per_shape(std::function<MaskMod(std::int64_t Tq, std::int64_t Tk)> make) {
  if (!make) throw Error("make", "a function of (Tq, Tk)", "an empty std::function");
  return MaskMod(std::make_shared<const PerShape>(std::move(make)));
}

NodePtr PerShape::for_shape(std::int64_t Tq, std::int64_t Tk) const {
  // The made mod may hold per_shape leaves of its own.
  return node_of(make_(Tq, Tk).for_shape(Tq, Tk));
}

MaskMod MaskMod::for_shape(std::int64_t Tq, std::int64_t Tk) const {
  NodePtr made = node_->for_shape(Tq, Tk);
  return made == nullptr ? *this : MaskMod(std::move(made));
}

MaskMod operator&(const MaskMod& a, const MaskMod& b) {
  auto first = std::dynamic_pointer_cast<const KeyedNode>(a.node_);
  auto second = std::dynamic_pointer_cast<const KeyedNode>(b.node_);
  if (first != nullptr && second != nullptr) {
    return MaskMod(std::make_shared<const KeyedAnd>(std::move(first), std::move(second)));
  }
  return MaskMod(std::make_shared<const Branch>(true, a.node_, b.node_));
}

MaskMod operator|(const MaskMod& a, const MaskMod& b) {
  return MaskMod(std::make_shared<const Branch>(false, a.node_, b.node_));
}

bool MaskMod::operator()(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
  return node_->keep(b, h, i, j);
}

void MaskMod::classify_row(std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t i1,
                           std::int64_t Tk, std::int64_t bk, const TileKind* only,
                           TileKind* kinds) const {
  node_->classify_row(b, h, i0, i1, Tk, bk, only, kinds);
}

void MaskMod::drop_row(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
                       std::int64_t cols, float value, float* x) const {
  node_->drop_row(b, h, i, j0, cols, value, x);
}

void MaskMod::drop_row(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
                       std::int64_t cols, double value, double* x) const {
  node_->drop_row(b, h, i, j0, cols, value, x);
}

BlockMask create_block_mask(const MaskMod& mask_mod, std::int64_t B, std::int64_t H,
                            std::int64_t Tq, std::int64_t Tk) {
  return BlockMask(
      detail::build_block_mask(detail::erase_mask(mask_mod.for_shape(Tq, Tk)), B, H, Tq, Tk));
}

}  // namespace qkv
