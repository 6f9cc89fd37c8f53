#include "engine/autograd.h"

#include "engine/profiler.h"

#include <algorithm>
#include <atomic>
#include <unordered_map>

#include "engine/ops.h"

namespace rt {
namespace {
thread_local bool t_grad_enabled = true;
std::atomic<uint64_t> g_next_seq{0};
std::atomic<bool> g_accumulate_in_place{true};
thread_local Node* t_running = nullptr;  // the node whose backward runs (accumulated_grad)

// Out-of-place sum of two gradients (either may be undefined).
Tensor sum_grads(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return add(a, b);
}

void check_grad_matches(const Tensor& g, const Shape& want, const char* what) {
  RT_CHECK(g.shape() == want, "autograd: ", what, " produced a gradient of shape ", shape_str(g.shape()),
           " for a value of shape ", shape_str(want), " (a bug in that op's backward)");
}

}  // namespace

bool grad_enabled() { return t_grad_enabled; }
NoGradGuard::NoGradGuard() : prev_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = prev_; }

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(const char* name, Tensor& out, const std::vector<Tensor>& inputs, BackwardFn backward) {
  if (!any_requires_grad(inputs)) return;
  auto node = std::make_shared<Node>();
  node->seq = g_next_seq++;
  node->name = name;
  node->out_shape = out.shape();
  node->backward = std::move(backward);
  node->profile = prof::current_backward_info();  // null unless profiling (Note [Backward attribution])
  node->inputs.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    Edge e;
    if (t.defined() && t.requires_grad()) {
      if (t.is_leaf()) e.leaf = t.impl_ptr();
      else e.node = t.impl().autograd.grad_fn;
    }
    node->inputs.push_back(std::move(e));
  }
  out.impl().autograd.requires_grad = true;
  out.impl().autograd.grad_fn = std::move(node);
}

void set_accumulate_in_place(bool on) { g_accumulate_in_place = on; }
bool accumulate_in_place() { return g_accumulate_in_place; }

Tensor accumulated_grad(size_t input) {
  if (!t_running || !g_accumulate_in_place || input >= t_running->inputs.size()) return Tensor();
  const Edge& e = t_running->inputs[input];
  if (!e.node || !e.node->grad.defined()) return Tensor();
  const Tensor& g = e.node->grad;
  const TensorImpl& gi = g.impl();
  if (g.impl_ptr().use_count() != 1 || gi.storage.use_count() != 1 || gi.offset != 0) return Tensor();
  return g;
}

// ---- Tensor's autograd methods ------------------------------------------------------

Tensor& Tensor::set_requires_grad(bool r) {
  RT_CHECK(is_leaf(), "set_requires_grad: ", str(), " is the result of an op; only leaves can be marked");
  RT_CHECK(!r || is_floating(dtype()), "set_requires_grad: only floating-point tensors can require grad, got ", str());
  impl().autograd.requires_grad = r;
  return *this;
}

Tensor Tensor::grad() const {
  const auto& g = impl().autograd.grad;
  return g ? Tensor(g) : Tensor();
}

void Tensor::set_grad(const Tensor& g) {
  if (g.defined()) check_grad_matches(g, shape(), "set_grad");
  auto& meta = impl().autograd;
  if (g.defined() && meta.grad_buffer) {
    if (g.impl_ptr() != meta.grad_buffer) Tensor(meta.grad_buffer).copy_(g);
    meta.grad = meta.grad_buffer;
    return;
  }
  meta.grad = g.defined() ? g.impl_ptr() : nullptr;
}

void Tensor::set_grad_buffer(const Tensor& buffer) {
  auto& meta = impl().autograd;
  if (!buffer.defined()) {
    if (meta.grad && meta.grad == meta.grad_buffer) meta.grad = Tensor(meta.grad_buffer).clone().impl_ptr();
    meta.grad_buffer = nullptr;
    return;
  }
  RT_CHECK(is_leaf() && requires_grad(), "set_grad_buffer: ", str(), " is not a leaf that requires grad");
  RT_CHECK(buffer.shape() == shape() && buffer.dtype() == dtype() && buffer.device() == device() &&
               buffer.format() == format(),
           "set_grad_buffer: buffer ", buffer.str(), " does not match the parameter ", str());
  if (meta.grad && meta.grad != buffer.impl_ptr()) Tensor(buffer).copy_(Tensor(meta.grad));
  meta.grad_buffer = buffer.impl_ptr();
  if (meta.grad) meta.grad = meta.grad_buffer;
}

Tensor Tensor::grad_buffer() const {
  const auto& b = impl().autograd.grad_buffer;
  return b ? Tensor(b) : Tensor();
}

void Tensor::zero_grad() const { impl().autograd.grad = nullptr; }

void Tensor::register_grad_ready_hook(GradReadyHook hook) {
  RT_CHECK(is_leaf() && requires_grad(), "register_grad_ready_hook: ", str(),
           " is not a leaf that requires grad (hooks belong on parameters)");
  impl().autograd.ready_hooks.push_back(std::move(hook));
}

namespace {

// Whether `g`, the first gradient of `leaf` in this backward, can become the leaf's gradient
// as it is (Note [Leaf gradients adopted]).
bool adoptable(const Tensor& g, const TensorImpl& leaf) {
  const TensorImpl& gi = g.impl();
  return g.impl_ptr().use_count() == 1 && gi.storage.use_count() == 1 && gi.offset == 0 &&
         gi.autograd.grad_fn == nullptr && !gi.autograd.requires_grad && gi.dtype == leaf.dtype &&
         gi.format == leaf.format && g.device() == leaf.storage->device;
}

// leaf.grad += g, then its hooks (Note [Gradient-ready hooks]).
//
// Note [Leaf gradients adopted]
// A leaf's first gradient of a backward is usually a tensor its op's backward just made and
// nobody else holds (a convolution's weight gradient, batch norm's dgamma): it becomes the
// leaf's gradient as it is, without a copy (ResNet50: 161 device copies a step fewer). It is
// copied into a tensor of the leaf's own when it may be seen elsewhere: another reference to
// it (add's backward hands one tensor to both inputs; the seed a caller passed; the
// gradient an op passes through), storage shared with another tensor (a view), another
// layout or dtype, or a gradient buffer to fill (Note [Gradient buffers]). The caller hands
// `g` over (moved), so its references are the only ones counted.
void finish_leaf(const std::shared_ptr<TensorImpl>& leaf, Tensor g) {
  Tensor param(leaf);
  if (g.defined()) {
    check_grad_matches(g, leaf->shape, "backward");
    if (leaf->autograd.grad) {
      add_(Tensor(leaf->autograd.grad), g);
    } else if (!leaf->autograd.grad_buffer && adoptable(g, *leaf)) {
      leaf->autograd.grad = g.impl_ptr();
    } else {
      // A copy in the leaf's own layout (its buffer, or a fresh tensor): `g` may alias a
      // gradient that flows on elsewhere (add's backward hands the same tensor to both inputs).
      Tensor own = leaf->autograd.grad_buffer
                       ? Tensor(leaf->autograd.grad_buffer)
                       : Tensor::empty(leaf->shape, leaf->dtype, leaf->storage->device, leaf->format);
      own.copy_(g);
      leaf->autograd.grad = own.impl_ptr();
    }
  }
  for (auto& hook : leaf->autograd.ready_hooks) hook(param);
}

}  // namespace

void Tensor::backward(const Tensor& seed_in, bool retain_graph) const {
  RT_CHECK(requires_grad(), "backward: ", str(), " does not require grad (no input of the ops that produced it "
           "requires grad, or it was computed under NoGradGuard)");
  Tensor seed = seed_in;
  if (!seed.defined()) {
    RT_CHECK(numel() == 1, "backward: ", str(), " is not a scalar; pass a seed gradient of the same shape");
    seed = Tensor::full(shape(), 1.0, dtype(), device(), format());
  } else {
    RT_CHECK(seed.shape() == shape(), "backward: seed shape ", shape_str(seed.shape()), " differs from ", str());
    check_same_device(seed, *this, "backward");
    check_same_dtype(seed, *this, "backward");
  }
  NoGradGuard no_grad;  // backward formulas are not recorded
  if (is_leaf()) {
    finish_leaf(impl_ptr(), seed);
    return;
  }

  // Collect the reachable part of the tape and count each leaf's consumers.
  std::vector<std::shared_ptr<Node>> nodes;
  std::unordered_map<Node*, bool> seen;
  std::unordered_map<TensorImpl*, int> pending;   // leaf -> consumers still to run
  std::unordered_map<TensorImpl*, Tensor> leaf_grad;
  std::vector<Node*> stack{impl().autograd.grad_fn.get()};
  std::unordered_map<Node*, std::shared_ptr<Node>> owner{{stack[0], impl().autograd.grad_fn}};
  seen[stack[0]] = true;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    RT_CHECK(!n->released, "backward: trying to backward through the graph a second time (op '", n->name,
             "'): its saved tensors were freed by the first backward. Pass retain_graph=true to the first "
             "backward, or run the forward again.");
    nodes.push_back(owner[n]);
    for (Edge& e : n->inputs) {
      if (e.node && !seen[e.node.get()]) {
        seen[e.node.get()] = true;
        owner[e.node.get()] = e.node;
        stack.push_back(e.node.get());
      }
      if (e.leaf) pending[e.leaf.get()]++;
    }
  }
  std::sort(nodes.begin(), nodes.end(), [](const auto& a, const auto& b) { return a->seq > b->seq; });

  nodes.front()->grad = seed;
  for (auto& node : nodes) {
    Tensor g = std::move(node->grad);
    node->grad = Tensor();
    std::vector<Tensor> grads;
    if (g.defined()) {
      std::vector<bool> needs;
      for (const Edge& e : node->inputs) needs.push_back(e.node || e.leaf);
      {
        const prof::BackwardScope scope(node->name, node->profile.get());
        // What accumulated_grad() looks at (Note [Gradients accumulated in place]).
        struct Running {
          Node* prev;
          explicit Running(Node* n) : prev(t_running) { t_running = n; }
          ~Running() { t_running = prev; }
        } running(node.get());
        grads = node->backward(g, needs);
      }
      RT_CHECK(grads.size() == node->inputs.size(), "autograd: op '", node->name, "' returned ", grads.size(),
               " gradients for ", node->inputs.size(), " inputs");
    }
    if (!retain_graph) {
      node->backward = nullptr;  // frees everything the closure saved
      node->released = true;
    }
    for (size_t i = 0; i < node->inputs.size(); ++i) {
      Edge& e = node->inputs[i];
      // Moved out, so that a gradient no other input shares is held here only, as
      // Note [Leaf gradients adopted] needs.
      Tensor gi = i < grads.size() ? std::move(grads[i]) : Tensor();
      if (e.node) {
        if (gi.defined()) {
          check_grad_matches(gi, e.node->out_shape, node->name);
          // Already the sum when the backward added into it (Note [Gradients accumulated in place]).
          const bool summed = e.node->grad.defined() && gi.impl_ptr() == e.node->grad.impl_ptr();
          e.node->grad = summed ? gi : sum_grads(e.node->grad, gi);
        }
      } else if (e.leaf) {
        TensorImpl* key = e.leaf.get();
        leaf_grad[key] = sum_grads(leaf_grad[key], gi);
        gi = Tensor();
        if (--pending[key] == 0) {
          Tensor lg = std::move(leaf_grad[key]);
          leaf_grad.erase(key);
          finish_leaf(e.leaf, std::move(lg));
        }
      }
    }
  }
}

}  // namespace rt
