// The tape: shared inputs, reuse, accumulation, no-grad, gradient-ready hooks, errors.
#include "engine/autograd.h"
#include "engine/ops.h"
#include "tests/test_util.h"

namespace rt {
namespace {

Tensor vec(std::vector<double> v) { return test::leaf(Tensor::from_vector(v, {int64_t(v.size())})); }

TEST_CASE("a tensor used twice receives the sum of both gradients") {
  Tensor x = vec({1, 2, 3});
  sum(mul(x, x)).backward();  // d/dx sum(x^2) = 2x
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 4, 6});
}

TEST_CASE("shared intermediate values and diamonds") {
  Tensor x = vec({1, -2, 3});
  Tensor w = vec({0.5, 0.5, 2});
  Tensor h = mul(x, w);              // shared by both branches
  Tensor y = add(relu(h), mul(h, 3.0));
  sum(y).backward();
  // dy/dh = (h > 0) + 3, dh/dx = w, dh/dw = x
  test::check_close(x.grad(), {0.5 * 4, 0.5 * 3, 2 * 4}, test::kTolF64, "dx");
  test::check_close(w.grad(), {1 * 4, -2 * 3, 3 * 4}, test::kTolF64, "dw");
}

TEST_CASE("gradients accumulate across backward calls until zero_grad") {
  Tensor x = vec({1, 2});
  sum(mul(x, 2.0)).backward();
  sum(mul(x, 3.0)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{5, 5});
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
  sum(x).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 1});
}

TEST_CASE("a leaf's gradient does not alias gradients flowing elsewhere") {
  Tensor a = vec({1, 1}), b = vec({2, 2});
  Tensor s = add(a, b);  // add's backward hands the same gradient to a and b
  sum(mul(s, 2.0)).backward();
  add_(a.grad(), Tensor::full({2}, 10.0, DType::f64));
  CHECK(b.grad().to_vector<double>() == std::vector<double>{2, 2});
}

// As Note [Leaf gradients adopted] says: a gradient nobody else holds is kept as it is; one
// that may be seen elsewhere is copied.
TEST_CASE("a leaf keeps its own fresh gradient, and copies a seed, a pass-through or a view") {
  // The seed a caller passes to a leaf's backward stays the caller's.
  Tensor x = vec({1, 2});
  Tensor seed = Tensor::from_vector<double>({3, 4}, {2});
  x.backward(seed);
  add_(seed, Tensor::full({2}, 100.0, DType::f64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 4});
  // A gradient an op passes through (reshape's backward is a view of the incoming one).
  Tensor m = test::leaf(Tensor::from_vector<double>({1, 2, 3, 4}, {2, 2}));
  Tensor r = reshape(m, {4});
  r.backward(Tensor::from_vector<double>({1, 1, 1, 1}, {4}));
  CHECK(m.grad().to_vector<double>() == std::vector<double>{1, 1, 1, 1});
  // Fresh gradients of two parameters: their own storage, not shared.
  Tensor w = vec({1, 2}), v = vec({3, 4});
  sum(add(mul(w, 2.0), mul(v, 3.0))).backward();
  CHECK(w.grad().raw_data() != v.grad().raw_data());
  add_(w.grad(), Tensor::full({2}, 1.0, DType::f64));
  CHECK(w.grad().to_vector<double>() == std::vector<double>{3, 3});
  CHECK(v.grad().to_vector<double>() == std::vector<double>{3, 3});
  // A second backward adds to the adopted gradient.
  sum(mul(w, 2.0)).backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{5, 5});
}

TEST_CASE("a gradient buffer receives the gradient in place (Note [Gradient buffers])") {
  // Two parameters in one flat buffer, the second channels_last: views at their offsets.
  Tensor flat = Tensor::full({3 + 2 * 2 * 1 * 2}, -7.0, DType::f64);
  Tensor a = vec({1, 2, 3});
  Tensor w = test::leaf(Tensor::full({2, 2, 1, 2}, 1.0, DType::f64).to(MemoryFormat::channels_last));
  a.set_grad_buffer(flat.subview(0, {3}));
  w.set_grad_buffer(flat.subview(3, {2, 2, 1, 2}, MemoryFormat::channels_last));
  CHECK_FALSE(a.grad().defined());  // a buffer is not a gradient until backward writes it
  sum(mul(a, a)).backward();
  sum(mul(w, 3.0)).backward();
  CHECK(a.grad().impl_ptr() == a.grad_buffer().impl_ptr());
  CHECK(flat.to_vector<double>() == std::vector<double>{2, 4, 6, 3, 3, 3, 3, 3, 3, 3, 3});
  sum(mul(a, a)).backward();  // accumulates in place
  CHECK(flat.to_vector<double>()[1] == 8);
  a.zero_grad();  // forgets, does not clear: the next backward overwrites the stale values
  CHECK_FALSE(a.grad().defined());
  sum(a).backward();
  CHECK(flat.to_vector<double>()[0] == 1);
  // set_grad copies into the buffer; an undefined buffer moves the gradient out.
  a.set_grad(Tensor::from_vector(std::vector<double>{5, 6, 7}, {3}));
  CHECK(flat.to_vector<double>()[2] == 7);
  a.set_grad_buffer(Tensor());
  flat.fill_(0.0);
  CHECK(a.grad().to_vector<double>() == std::vector<double>{5, 6, 7});
  CHECK_THROWS_WITH_AS(w.set_grad_buffer(flat.subview(0, {2, 2, 1, 2})), doctest::Contains("does not match"), Error);
  CHECK_THROWS_WITH_AS(flat.subview(5, {2, 2, 1, 2}), doctest::Contains("are not within the 11"), Error);
}

TEST_CASE("no-grad records nothing") {
  Tensor x = vec({1, 2});
  {
    NoGradGuard ng;
    CHECK_FALSE(grad_enabled());
    Tensor y = mul(x, 2.0);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_leaf());
  }
  CHECK(grad_enabled());
  CHECK(mul(x, 2.0).requires_grad());
}

TEST_CASE("gradient-ready hooks fire once per backward, as soon as each gradient is final") {
  // h1 = w1 * x; h2 = w2 * h1; loss = sum(h2) + sum(w1 * 0): w1 is used twice, by the first
  // op and the last, so its gradient is final only at the very end; w2's is final earlier.
  Tensor x = vec({1, 2});
  Tensor w1 = vec({3, 4}), w2 = vec({5, 6});
  std::vector<std::string> order;
  std::vector<std::vector<double>> seen;
  w1.register_grad_ready_hook([&](const Tensor& p) {
    order.push_back("w1");
    seen.push_back(p.grad().to_vector<double>());
  });
  w2.register_grad_ready_hook([&](const Tensor& p) {
    order.push_back("w2");
    seen.push_back(p.grad().to_vector<double>());
  });
  Tensor h1 = mul(w1, x);
  Tensor h2 = mul(w2, h1);
  Tensor loss = add(sum(h2), sum(mul(w1, 0.0)));
  loss.backward();
  REQUIRE(order == std::vector<std::string>{"w2", "w1"});
  CHECK(seen[0] == std::vector<double>{3, 8});    // d/dw2 = h1
  CHECK(seen[1] == std::vector<double>{5, 12});   // d/dw1 = w2 * x (+ 0): complete when the hook ran
}

TEST_CASE("hooks fire in the order gradients become ready, across many parameters") {
  // A chain y = w_k * (... (w_1 * x)): gradients become ready from w_k down to w_1.
  Tensor x = vec({1.5});
  std::vector<Tensor> ws;
  std::vector<int> order;
  for (int i = 0; i < 6; ++i) {
    ws.push_back(vec({1.0 + i}));
    ws.back().register_grad_ready_hook([&order, i](const Tensor&) { order.push_back(i); });
  }
  Tensor h = x;
  for (auto& w : ws) h = mul(w, h);
  sum(h).backward();
  CHECK(order == std::vector<int>{5, 4, 3, 2, 1, 0});
}

TEST_CASE("clear errors: second backward, non-scalar root, no grad") {
  Tensor x = vec({1, 2});
  Tensor y = sum(mul(x, x));
  y.backward();
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("backward through the graph a second time"), Error);

  Tensor z = sum(mul(x, x));
  z.backward(Tensor(), /*retain_graph=*/true);
  z.backward();  // allowed once more after retain_graph
  Tensor m = mul(x, 2.0);
  CHECK_THROWS_WITH_AS(m.backward(), doctest::Contains("is not a scalar; pass a seed gradient"), Error);
  m.backward(Tensor::full({2}, 1.0, DType::f64));
  CHECK_THROWS_WITH_AS(Tensor::full({2}, 1.0).backward(), doctest::Contains("does not require grad"), Error);
  CHECK_THROWS_WITH_AS(Tensor::from_vector(std::vector<int64_t>{1}, {1}).set_requires_grad(true),
                       doctest::Contains("only floating-point"), Error);
  CHECK_THROWS_WITH_AS(m.set_requires_grad(false), doctest::Contains("only leaves"), Error);
}

TEST_CASE("backward frees what the tape saved") {
  Allocator& a = allocator_for(Device::cpu());
  Tensor w = test::leaf(test::rnd({64, 64}, 1));
  const int64_t base = a.stats().current_bytes;
  {
    Tensor x = test::rnd({256, 64}, 2);
    Tensor loss = sum(relu(linear(x, w, Tensor())));
    CHECK(a.stats().current_bytes > base);
    loss.backward();
  }
  // Only w's gradient remains.
  CHECK(a.stats().current_bytes == base + 64 * 64 * 8);
}

// An op y = k * x whose backward adds k * g into x's earlier gradient when autograd offers
// it (Note [Gradients accumulated in place]); `offered` counts the offers.
Tensor scale_acc(const Tensor& x, double k, int* offered) {
  Tensor y;
  {
    NoGradGuard ng;
    y = mul(x, k);
  }
  record("scale_acc", y, {x}, [k, offered](const Tensor& g, const std::vector<bool>&) {
    Tensor into = accumulated_grad(0);
    if (!into.defined()) return std::vector<Tensor>{mul(g, k)};
    ++*offered;
    add_(into, mul(g, k));
    return std::vector<Tensor>{into};
  });
  return y;
}

TEST_CASE("a backward adds into an earlier gradient nobody else holds (Note [Gradients accumulated in place])") {
  // h feeds scale_acc (recorded first, so its backward runs last) and mul(h, 3) (runs first).
  auto run = [](bool in_place, int* offered) {
    set_accumulate_in_place(in_place);
    Tensor x = vec({1, -2, 3});
    Tensor h = mul(x, 2.0);
    Tensor a = scale_acc(h, 5.0, offered);
    Tensor b = mul(h, 3.0);
    sum(mul(add(a, b), vec({1, 2, 3}).detach())).backward();
    set_accumulate_in_place(true);
    return x.grad().to_vector<double>();
  };
  int offered = 0;
  const std::vector<double> g = run(true, &offered);
  CHECK(offered == 1);
  CHECK(g == std::vector<double>{16, 32, 48});  // 2 * (5 + 3) * {1, 2, 3}
  offered = 0;
  CHECK(run(false, &offered) == g);  // switched off: the out-of-place sum, the same values
  CHECK(offered == 0);
  CHECK(accumulate_in_place());

  // Nothing to add into: h's first gradient (none yet when scale_acc runs first).
  offered = 0;
  Tensor x = vec({1, 2});
  Tensor h = mul(x, 2.0);
  Tensor b = mul(h, 3.0);
  Tensor a = scale_acc(h, 5.0, &offered);  // recorded last: its backward runs first
  sum(add(b, a)).backward();
  CHECK(offered == 0);
  CHECK(x.grad().to_vector<double>() == std::vector<double>{16, 16});
  // Not while no backward runs.
  CHECK_FALSE(accumulated_grad(0).defined());
}

TEST_CASE("an earlier gradient someone else holds is not offered for adding in place") {
  // add's backward hands one tensor to both of its inputs: h's first gradient is also the
  // gradient m's backward is still to read, so adding into it would change m's.
  int offered = 0;
  Tensor x = vec({1, 2}), c = vec({4, 4});
  Tensor h = mul(x, 2.0);
  Tensor m = mul(c, 1.0);
  Tensor a = scale_acc(h, 5.0, &offered);
  Tensor s = add(h, m);  // recorded after scale_acc: its backward runs first
  sum(add(a, s)).backward();
  CHECK(offered == 0);
  CHECK(x.grad().to_vector<double>() == std::vector<double>{12, 12});
  CHECK(c.grad().to_vector<double>() == std::vector<double>{1, 1});
}

TEST_CASE("gradcheck catches a wrong backward") {
  // A deliberately wrong op: forward 2x, backward claims 3x.
  auto bad = [](const std::vector<Tensor>& in) {
    Tensor y;
    {
      NoGradGuard ng;
      y = mul(in[0], 2.0);
    }
    record("bad", y, {in[0]}, [](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{mul(g, 3.0)}; });
    return y;
  };
  const GradcheckResult r = gradcheck(bad, {vec({1, 2, 3})});
  CHECK_FALSE(r.ok);
  CHECK(r.message.find("analytic") != std::string::npos);
}

}  // namespace
}  // namespace rt
