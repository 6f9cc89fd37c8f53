// Batch augmentation: the ops (mix_with_rolled, mix_targets, erase_boxes_) against the
// torchvision formulas computed here in double on logical coordinates, on small random
// batches (N 1, 2 and odd; H, W odd and 1; C 3 and 1; both formats); the host draws
// (data/transforms/batch_augment.h): Beta statistics, cutmix and erase boxes within the image with the
// documented distribution, the same seed giving the same draws; cross_entropy_soft against a
// double reference, f64 finite differences, the hard-label cross_entropy on one-hot targets
// and its linearity in the target.
#include <algorithm>
#include <cmath>
#include <vector>

#include "data/transforms/batch_augment.h"
#include "engine/gradcheck.h"
#include "engine/ops.h"
#include "tests/test_util.h"

namespace rt {
namespace {

using data::MixDraw;
using data::MixKind;

constexpr MemoryFormat kFormats[] = {MemoryFormat::contiguous, MemoryFormat::channels_last};

struct Dims {
  int64_t N, C, H, W;
};
const std::vector<Dims> kDims = {{1, 3, 5, 7}, {2, 1, 1, 1}, {3, 3, 7, 5}, {5, 1, 4, 1}, {4, 3, 1, 6}, {7, 3, 9, 9}};

int64_t at(const Dims& d, int64_t n, int64_t c, int64_t h, int64_t w) { return ((n * d.C + c) * d.H + h) * d.W + w; }

// torchvision's mixup (box = image) and cutmix (lam = 0 in the box), in double.
std::vector<double> mix_reference(const std::vector<double>& x, const Dims& d, double lam, const ImageBox& b) {
  std::vector<double> y(x.size());
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t c = 0; c < d.C; ++c)
      for (int64_t h = 0; h < d.H; ++h)
        for (int64_t w = 0; w < d.W; ++w) {
          const double v = x[size_t(at(d, n, c, h, w))], r = x[size_t(at(d, (n + d.N - 1) % d.N, c, h, w))];
          const bool in = h >= b.y1 && h < b.y2 && w >= b.x1 && w < b.x2;
          y[size_t(at(d, n, c, h, w))] = in ? lam * v + (1 - lam) * r : v;
        }
  return y;
}

std::vector<double> erase_reference(std::vector<double> x, const Dims& d, const std::vector<ImageBox>& boxes,
                                    double value) {
  for (int64_t n = 0; n < d.N; ++n) {
    const ImageBox& b = boxes[size_t(n)];
    for (int64_t c = 0; c < d.C; ++c)
      for (int64_t h = std::max<int64_t>(b.y1, 0); h < std::min(b.y2, d.H); ++h)
        for (int64_t w = std::max<int64_t>(b.x1, 0); w < std::min(b.x2, d.W); ++w) x[size_t(at(d, n, c, h, w))] = value;
  }
  return x;
}

// The boxes one case checks: the whole image, a random one, an empty one, one past the edges.
std::vector<ImageBox> boxes_for(const Dims& d, Generator& g) {
  const int64_t y1 = g.randint(0, d.H), x1 = g.randint(0, d.W);
  return {{0, d.H, 0, d.W},
          {y1, g.randint(y1, d.H + 1), x1, g.randint(x1, d.W + 1)},
          {1, 1, 0, d.W},
          {-2, d.H + 3, d.W / 2, d.W + 1}};
}

TEST_CASE("mix_with_rolled: mixup and cutmix against the formula in double") {
  Generator g(7);
  for (size_t i = 0; i < kDims.size(); ++i) {
    const Dims& d = kDims[i];
    const Tensor x64 = test::rnd({d.N, d.C, d.H, d.W}, 100 + i);
    for (const ImageBox& b : boxes_for(d, g))
      for (double lam : {0.0, 1.0, g.uniform()})
        for (MemoryFormat f : kFormats)
          for (DType t : {DType::f64, DType::f32}) {
            const Tensor x = x64.to(t).to(f);
            const std::vector<double> want = mix_reference(x.to_vector<double>(), d, lam, b);
            const Tensor y = mix_with_rolled(x, lam, b);
            const std::string what = detail::cat("dims ", i, " box ", b.y1, ":", b.y2, ",", b.x1, ":", b.x2, " lam ",
                                                 lam, " ", test::fmt_name(f), " ", dtype_name(t));
            CHECK_MESSAGE(y.format() == f, what);
            CHECK_MESSAGE(y.dtype() == t, what);
            // lam 0 and 1 select one of the two images: the very values.
            test::check_close(y, want, lam == 0.0 || lam == 1.0 ? test::kExact : test::tol_for(t), what);
          }
  }
}

TEST_CASE("mix_targets: one-hot rows mixed with the previous row's, summing to 1") {
  for (int64_t N : {1, 2, 5})
    for (int64_t K : {1, 3, 10}) {
      Generator g(uint64_t(N * 100 + K));
      std::vector<int64_t> labels(static_cast<size_t>(N));
      for (auto& l : labels) l = g.randint(0, K);
      const Tensor lt = Tensor::from_vector(labels, {N});
      for (double lam : {0.0, 1.0, g.uniform()})
        for (DType t : {DType::f64, DType::f32}) {
          const Tensor y = mix_targets(lt, K, lam, t);
          REQUIRE(y.shape() == Shape{N, K});
          CHECK(y.dtype() == t);
          std::vector<double> want(size_t(N * K), 0.0);
          for (int64_t n = 0; n < N; ++n) {
            want[size_t(n * K + labels[size_t(n)])] += lam;
            want[size_t(n * K + labels[size_t((n + N - 1) % N)])] += 1 - lam;
          }
          const std::string what = detail::cat("N ", N, " K ", K, " lam ", lam, " ", dtype_name(t));
          test::check_close(y, want, test::tol_for(t), what);
          const std::vector<double> v = y.to_vector<double>();
          for (int64_t n = 0; n < N; ++n) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k) s += v[size_t(n * K + k)];
            CHECK_MESSAGE(std::abs(s - 1) <= test::tol_for(t).rtol, what, " row ", n, " sums to ", s);
          }
        }
    }
  CHECK_THROWS_WITH_AS(mix_targets(Tensor::from_vector(std::vector<int64_t>{0, 3}, {2}), 3, 0.5),
                       doctest::Contains("outside [0, 3)"), Error);
}

TEST_CASE("erase_boxes_: every channel of each image's box set, in place, the rest untouched") {
  Generator g(11);
  for (size_t i = 0; i < kDims.size(); ++i) {
    const Dims& d = kDims[i];
    const Tensor x64 = test::rnd({d.N, d.C, d.H, d.W}, 200 + i);
    // Drawn as the trainer draws them (p = 1), with an empty and a clipped box among them.
    std::vector<ImageBox> boxes;
    for (int64_t n = 0; n < d.N; ++n) boxes.push_back(data::draw_erase(1.0, d.H, d.W, g));
    boxes[0] = {0, d.H, 0, d.W};
    if (d.N > 1) boxes[1] = {};
    if (d.N > 2) boxes[2] = {-1, 2, d.W - 1, d.W + 5};
    for (double value : {0.0, -1.5})
      for (MemoryFormat f : kFormats)
        for (DType t : {DType::f64, DType::f32}) {
          const Tensor x = x64.to(t).to(f).clone();
          const void* before = x.raw_data();
          const std::vector<double> want = erase_reference(x.to_vector<double>(), d, boxes, value);
          erase_boxes_(x, boxes, value);
          CHECK(x.raw_data() == before);
          CHECK(x.format() == f);
          test::check_close(x, want, test::kExact,
                            detail::cat("dims ", i, " value ", value, " ", test::fmt_name(f), " ", dtype_name(t)));
        }
  }
  CHECK_THROWS_AS(erase_boxes_(Tensor::zeros({2, 1, 3, 3}), {ImageBox{}}), Error);
}

// ---- the draws ---------------------------------------------------------------------------

struct Moments {
  double mean = 0, var = 0;
};
template <typename F>
Moments moments(int n, F&& draw) {
  double s = 0, s2 = 0;
  for (int i = 0; i < n; ++i) {
    const double v = draw();
    s += v;
    s2 += v * v;
  }
  const double m = s / n;
  return {m, s2 / n - m * m};
}

TEST_CASE("beta_draw: the moments of Beta(a, b); Gamma's mean is its shape") {
  constexpr int kDraws = 40000;
  // Beta(a, b): mean a / (a + b), variance a b / ((a + b)^2 (a + b + 1)); the bounds are
  // 5 standard errors of the sample mean (and about as many of the variance).
  for (auto [a, b] : {std::pair{0.2, 0.2}, {1.0, 1.0}, {2.0, 5.0}, {0.5, 3.0}}) {
    Generator g(uint64_t(a * 1000 + b));
    bool in_range = true;
    const Moments m = moments(kDraws, [&] {
      const double v = data::beta_draw(a, b, g);
      in_range = in_range && v >= 0 && v <= 1;
      return v;
    });
    const double mean = a / (a + b), var = a * b / ((a + b) * (a + b) * (a + b + 1));
    CAPTURE(a);
    CAPTURE(b);
    CHECK(in_range);
    CHECK(std::abs(m.mean - mean) < 5 * std::sqrt(var / kDraws));
    CHECK(std::abs(m.var - var) < 0.05 * var);
  }
  for (double a : {0.2, 1.0, 3.5}) {
    Generator g(uint64_t(a * 10));
    const Moments m = moments(kDraws, [&] { return std::exp(data::gamma_log_draw(a, g)); });
    CAPTURE(a);
    CHECK(std::abs(m.mean - a) < 5 * std::sqrt(a / kDraws));  // Gamma(a): mean a, variance a
    CHECK(std::abs(m.var - a) < 0.1 * a);
  }
  // Beta(1, 1) is uniform: a quarter of the draws below 1/4.
  Generator g(3);
  int below = 0;
  for (int i = 0; i < kDraws; ++i) below += data::beta_draw(1.0, 1.0, g) < 0.25;
  CHECK(std::abs(double(below) / kDraws - 0.25) < 5 * std::sqrt(0.25 * 0.75 / kDraws));
}

TEST_CASE("draw_mix: the kind chosen evenly, cutmix boxes within the image with lam = 1 - their share") {
  constexpr int kDraws = 4000;
  for (auto [H, W] : {std::pair<int64_t, int64_t>{224, 224}, {7, 5}, {1, 1}, {1, 9}}) {
    int mixups = 0, nonempty = 0;
    for (int s = 0; s < kDraws; ++s) {
      Generator g = data::mix_generator(42, 3, s);
      const MixDraw m = data::draw_mix(0.2, 1.0, g, H, W);
      CAPTURE(s);
      REQUIRE(m.kind != MixKind::none);
      CHECK(m.lam >= 0);
      CHECK(m.lam <= 1);
      const ImageBox& b = m.box;
      CHECK((0 <= b.y1 && b.y1 <= b.y2 && b.y2 <= H && 0 <= b.x1 && b.x1 <= b.x2 && b.x2 <= W));
      if (m.kind == MixKind::mixup) {
        ++mixups;
        CHECK((b.y1 == 0 && b.y2 == H && b.x1 == 0 && b.x2 == W));
      } else {
        nonempty += !b.empty();
        CHECK(m.lam == doctest::Approx(1.0 - double(b.area()) / double(H * W)).epsilon(1e-15));
        // The box's half sizes are int(r W), int(r H) with r = sqrt(1 - lam_drawn) / 2 <= 1/2.
        CHECK(b.x2 - b.x1 <= W);
        CHECK(b.y2 - b.y1 <= H);
      }
      // The same coordinates give the same draw.
      Generator g2 = data::mix_generator(42, 3, s);
      const MixDraw m2 = data::draw_mix(0.2, 1.0, g2, H, W);
      CHECK((m2.kind == m.kind && m2.lam == m.lam && m2.box.y1 == b.y1 && m2.box.y2 == b.y2 && m2.box.x1 == b.x1 &&
             m2.box.x2 == b.x2));
    }
    CAPTURE(H);
    CAPTURE(W);
    CHECK(std::abs(double(mixups) / kDraws - 0.5) < 5 * std::sqrt(0.25 / kDraws));
    // int(r H) with r <= 1/2 is 0 for H = 1: a one-row image never gets a box.
    if (H > 1 && W > 1) CHECK(nonempty > kDraws / 4);
    if (H == 1 || W == 1) CHECK(nonempty == 0);
  }
  // Mixup alone: lam ~ Beta(0.2, 0.2), the box the image; cutmix alone; neither: nothing drawn.
  Generator g(5);
  for (int i = 0; i < 100; ++i) {
    CHECK(data::draw_mix(0.2, 0.0, g, 8, 8).kind == MixKind::mixup);
    CHECK(data::draw_mix(0.0, 1.0, g, 8, 8).kind == MixKind::cutmix);
  }
  const uint64_t state = g.state();
  const MixDraw none = data::draw_mix(0.0, 0.0, g, 8, 8);
  CHECK(none.kind == MixKind::none);
  CHECK(none.lam == 1.0);
  CHECK(g.state() == state);
  // Other steps and epochs draw otherwise.
  Generator a = data::mix_generator(42, 3, 0), b = data::mix_generator(42, 3, 1), c = data::mix_generator(42, 4, 0);
  CHECK(a.next_u64() != b.next_u64());
  CHECK(data::mix_generator(42, 3, 0).next_u64() != c.next_u64());
}

TEST_CASE("cutmix's adjusted lam: the mean share of the box for Beta(1, 1) on a large image") {
  // Unclipped, the box is (2 int(r W)) x (2 int(r H)) with r^2 = (1 - lam) / 4: a share of
  // about 1 - lam, E = 1/2. Clipping at the edges only shrinks it: the mean adjusted lam lies
  // above 1/2, and well below 1.
  double s = 0;
  constexpr int kDraws = 4000;
  for (int i = 0; i < kDraws; ++i) {
    Generator g = data::mix_generator(1, 0, i);
    s += data::draw_mix(0.0, 1.0, g, 512, 512).lam;
  }
  CHECK(s / kDraws > 0.5);
  CHECK(s / kDraws < 0.85);
}

TEST_CASE("draw_erase: p, boxes within the image, torchvision's scale and ratio, reproducible") {
  constexpr int kDraws = 20000;
  const int64_t H = 224, W = 224;
  int hits = 0;
  double share = 0, log_ratio = 0;
  for (int i = 0; i < kDraws; ++i) {
    Generator g = data::erase_generator(9, 2, i);
    const ImageBox b = data::draw_erase(1.0, H, W, g);
    Generator g2 = data::erase_generator(9, 2, i);
    const ImageBox b2 = data::draw_erase(1.0, H, W, g2);
    CHECK((b.y1 == b2.y1 && b.y2 == b2.y2 && b.x1 == b2.x1 && b.x2 == b2.x2));
    if (b.empty()) continue;
    ++hits;
    const int64_t h = b.y2 - b.y1, w = b.x2 - b.x1;
    CHECK((b.y1 >= 0 && b.x1 >= 0 && b.y2 <= H && b.x2 <= W && h < H && w < W));
    // h, w are sqrt(area * aspect), sqrt(area / aspect) rounded: h w within the rounding of
    // area in [0.02, 0.33] H W, and h / w within it of [0.3, 3.3].
    const double hw = double(h * w), lo = 0.02 * H * W, hi = 0.33 * H * W;
    const double slack = 0.5 * (double(h) + double(w)) + 0.25;
    CHECK(hw >= lo - slack);
    CHECK(hw <= hi + slack);
    // h / w >= (h0 - 1/2) / (w0 + 1/2) with h0 = 0.3 w0 (the narrowest) and w0 <= w + 1/2:
    // >= 0.3 - 0.65 / w; likewise w / h >= 1 / 3.3 - 0.65 / h.
    CHECK(double(h) / double(w) >= 0.3 - 0.65 / double(w));
    CHECK(double(w) / double(h) >= 1 / 3.3 - 0.65 / double(h));
    share += hw / double(H * W);
    log_ratio += std::log(double(h) / double(w));
  }
  // A square image rejects only the most elongated large boxes (h or w >= 224): almost every
  // draw hits; the share's mean is near (0.02 + 0.33) / 2 (rejection trims large ones a
  // little); the aspect's log is symmetric about 0 up to log(0.3 * 3.3) / 2 = -0.005.
  CHECK(hits > kDraws * 99 / 100);
  CHECK(share / hits > 0.16);
  CHECK(share / hits < 0.18);
  CHECK(std::abs(log_ratio / hits) < 0.03);

  // p: the share of images erased; p = 0 never.
  int erased = 0;
  for (int i = 0; i < kDraws; ++i) {
    Generator g = data::erase_generator(9, 3, i);
    erased += !data::draw_erase(0.1, H, W, g).empty();
    Generator g0 = data::erase_generator(9, 3, i);
    CHECK(data::draw_erase(0.0, H, W, g0).empty());
  }
  CHECK(std::abs(double(erased) / kDraws - 0.1) < 5 * std::sqrt(0.09 / kDraws));

  // Images of one row or column fit no box of height (width) 1 or more: empty or nothing.
  for (auto [h, w] : {std::pair<int64_t, int64_t>{1, 1}, {1, 17}, {17, 1}, {2, 3}}) {
    Generator g(uint64_t(h * 100 + w));
    for (int i = 0; i < 200; ++i) {
      const ImageBox b = data::draw_erase(1.0, h, w, g);
      CHECK((b.empty() || (b.y1 >= 0 && b.y2 < h + 1 && b.x1 >= 0 && b.x2 <= w && b.y2 - b.y1 < h &&
                           b.x2 - b.x1 < w)));
    }
  }
}

// ---- cross_entropy_soft -------------------------------------------------------------------

double soft_reference(const std::vector<double>& z, const std::vector<double>& t, int64_t N, int64_t K, double e) {
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    const double* row = z.data() + n * K;
    const double mx = *std::max_element(row, row + K);
    double se = 0;
    for (int64_t k = 0; k < K; ++k) se += std::exp(row[k] - mx);
    const double lse = mx + std::log(se);
    for (int64_t k = 0; k < K; ++k) total -= (t[size_t(n * K + k)] * (1 - e) + e / double(K)) * (row[k] - lse);
  }
  return total / double(N);
}

Tensor random_labels(int64_t N, int64_t K, uint64_t seed) {
  Generator g(seed);
  std::vector<int64_t> v(static_cast<size_t>(N));
  for (auto& l : v) l = g.randint(0, K);
  return Tensor::from_vector(v, {N});
}

const std::vector<std::pair<int64_t, int64_t>> kLossShapes = {{4, 5}, {1, 3}, {7, 10}, {3, 1}, {16, 100}};

TEST_CASE("cross_entropy_soft: forward against the formula, random probability targets") {
  for (size_t i = 0; i < kLossShapes.size(); ++i) {
    const auto [N, K] = kLossShapes[i];
    const Tensor z = test::rnd({N, K}, 300 + i);
    // Probability rows: softmax of random values.
    const Tensor t64 = softmax(test::rnd({N, K}, 400 + i), 1);
    for (DType dt : {DType::f64, DType::f32})
      for (double e : {0.0, 0.1, 1.0}) {
        const Tensor zt = z.to(dt), tt = t64.to(dt);
        const double want = soft_reference(zt.to_vector<double>(), tt.to_vector<double>(), N, K, e);
        const Tensor y = cross_entropy_soft(zt, tt, e);
        CHECK(y.ndim() == 0);
        CHECK(y.dtype() == dt);
        test::check_close(y, {want}, test::tol_for(dt), detail::cat("shape ", i, " ", dtype_name(dt), " e ", e));
      }
  }
}

TEST_CASE("cross_entropy_soft: f64 finite differences") {
  for (size_t i = 0; i < kLossShapes.size(); ++i) {
    const auto [N, K] = kLossShapes[i];
    const Tensor t = mix_targets(random_labels(N, K, 500 + i), K, 0.3, DType::f64);
    for (double e : {0.0, 0.1})
      test::check_gradcheck([&](const std::vector<Tensor>& x) { return cross_entropy_soft(x[0], t, e); },
                            {test::leaf(test::rnd({N, K}, 600 + i))}, detail::cat("shape ", i, " e ", e));
  }
}

TEST_CASE("cross_entropy_soft: equals the hard-label cross_entropy on one-hot targets, linear in the target") {
  for (size_t i = 0; i < kLossShapes.size(); ++i) {
    const auto [N, K] = kLossShapes[i];
    const Tensor labels = random_labels(N, K, 700 + i);
    const Tensor z64 = test::rnd({N, K}, 800 + i);
    for (DType dt : {DType::f64, DType::f32})
      for (double e : {0.0, 0.1}) {
        const std::string what = detail::cat("shape ", i, " ", dtype_name(dt), " e ", e);
        const Tensor zs = test::leaf(z64.to(dt)), zh = test::leaf(z64.to(dt));
        const Tensor soft = cross_entropy_soft(zs, mix_targets(labels, K, 1.0, dt), e);
        const Tensor hard = cross_entropy(zh, labels, e);
        test::check_close(soft, hard, test::tol_for(dt), what + " loss");
        soft.backward();
        hard.backward();
        test::check_close(zs.grad(), zh.grad(), test::tol_for(dt), what + " grad");
        // Mixed targets: lam loss(labels) + (1 - lam) loss(labels rolled by one).
        const double lam = 0.35;
        std::vector<int64_t> rolled = labels.to_vector<int64_t>();
        std::rotate(rolled.rbegin(), rolled.rbegin() + 1, rolled.rend());  // rolled[n] = labels[n - 1]
        const Tensor mixed = cross_entropy_soft(z64.to(dt), mix_targets(labels, K, lam, dt), e);
        const double want = lam * cross_entropy(z64.to(dt), labels, e).item() +
                            (1 - lam) * cross_entropy(z64.to(dt), Tensor::from_vector(rolled, {N}), e).item();
        test::check_close(mixed, {want}, test::tol_for(dt), what + " mixed");
      }
  }
  CHECK_THROWS_AS(cross_entropy_soft(Tensor::zeros({2, 3}), Tensor::zeros({2, 4})), Error);
  CHECK_THROWS_AS(cross_entropy_soft(Tensor::zeros({2, 3}), Tensor::zeros({2, 3}), 1.5), Error);
  CHECK_THROWS_AS(cross_entropy_soft(Tensor::zeros({2, 3}), Tensor::zeros({2, 3}, DType::i64)), Error);
}

}  // namespace
}  // namespace rt
