// GPU tests of dual_batch_norm_add_relu, relu(bn_a(x) + bn_b(r)) in one op
// (Note [Two batch norms in one tail] in engine/ops/dual_batch_norm_add_relu.cc): the launchers
// on NaN-poisoned outputs against the CPU kernels composed (bn_b's apply, then the fused tail;
// the tail's masked backward, then bn_b's backward of its dz) on every geometry of
// batch_norm_cuda_test, vectorised and scalar paths, and the backward bit for bit against the
// two CUDA backwards it replaces; then the op through autograd against the CPU op, against the
// composition on CUDA, and f64 finite differences of the fused CUDA op itself.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/gradcheck.h"
#include "engine/ops.h"
#include "kernels/cpu/batch_norm.h"
#include "kernels/cuda/batch_norm.h"
#include "tests/cuda/batch_norm_cuda_util.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

TEST_CASE("dual batch norm launchers reject bad arguments on the host (runs without a GPU)") {
  const cuda::BatchNormGeom g{2, 4, 1, true};
  float d[8];
  uint8_t bits[2];
  const cuda::BatchNormChannels ch{d, d, nullptr, nullptr}, no_mean{nullptr, d, nullptr, nullptr};
  CHECK_THROWS_WITH_AS(cuda::dual_batch_norm_apply_relu(g, DType::i64, d, ch, d, ch, d, bits, nullptr),
                       doctest::Contains("CUDA backend computes in f32, f64, bf16 or f16"), Error);
  CHECK_THROWS_WITH_AS(cuda::dual_batch_norm_apply_relu(g, DType::f32, d, ch, nullptr, ch, d, bits, nullptr),
                       doctest::Contains("dual_batch_norm_apply_relu: null pointer"), Error);
  CHECK_THROWS_WITH_AS(cuda::dual_batch_norm_apply_relu(g, DType::f32, d, ch, d, no_mean, d, bits, nullptr),
                       doctest::Contains("null pointer"), Error);
  CHECK_THROWS_WITH_AS(cuda::dual_batch_norm_backward_relu(g, DType::f32, nullptr, d, d, ch, d, ch, true, d, nullptr,
                                                           nullptr, d, nullptr, nullptr, d, nullptr),
                       doctest::Contains("dual_batch_norm_backward_relu: null pointer"), Error);
  CHECK_THROWS_WITH_AS(cuda::dual_batch_norm_backward_relu({2, 0, 1, true}, DType::f32, bits, d, d, ch, d, ch, true, d,
                                                           nullptr, nullptr, d, nullptr, nullptr, d, nullptr),
                       doctest::Contains("bad geometry"), Error);
  // Two coefficient blocks and three sums per partial: more than the single backward's.
  CHECK(cuda::dual_batch_norm_backward_workspace_bytes({4, 24, 7, true}, DType::f32) >
        cuda::batch_norm_backward_workspace_bytes({4, 24, 7, true}, DType::f32));
}

// By hand: launchers on raw buffers, and two CUDA backwards bit for bit.
TEST_CASE("dual batch norm launchers match the CPU kernels composed, and the CUDA backwards bit for bit") {
  if (!have_gpu("dual batch norm launchers match the CPU kernels composed, and the CUDA backwards bit for bit"))
    return;
  uint64_t seed = 7000;
  const double eps = 1e-5;
  for (DType t : kFloatTypes) {
    const DType rd = ref_dtype(t), st = cuda::batch_norm_stat_dtype(t);
    for (const Geom& ge : kGeoms) {
      const cuda::BatchNormGeom g{ge.N, ge.C, ge.S, ge.nhwc};
      const cpu::BatchNormGeom cg{ge.N, ge.C, ge.S, ge.nhwc};
      const int64_t n = ge.N * ge.C * ge.S, M = ge.N * ge.S;
      // Offset means of both signs, so that each normalisation matters.
      const Tensor x64 = add(rnd({n}, ++seed), 3.0), r64 = add(rnd({n}, ++seed), -2.0), dy64 = rnd({n}, ++seed);
      const Tensor ga64 = rnd({ge.C}, ++seed), ba64 = rnd({ge.C}, ++seed);
      const Tensor gb64 = rnd({ge.C}, ++seed), bb64 = rnd({ge.C}, ++seed);
      const Tensor ymask64 = relu(rnd({n}, ++seed));  // the backward's mask: any relu output
      const Tensor x = to_gpu(x64, t), r = to_gpu(r64, t), dy = to_gpu(dy64, t);
      const std::vector<uint8_t> ybits = mask_bits(to_gpu(ymask64, t), t);
      const Tensor ym = mask_on_gpu(ybits);
      const Tensor xr = to_ref(x64, t), rr = to_ref(r64, t), dyr = to_ref(dy64, t), ymr = to_ref(ymask64, t);
      const Tensor gar = to_ref(ga64, t), bar = to_ref(ba64, t), gbr = to_ref(gb64, t), bbr = to_ref(bb64, t);
      const Tensor ga = gar.to(st).to(gpu()), ba = bar.to(st).to(gpu());  // the statistics dtype
      const Tensor gb = gbr.to(st).to(gpu()), bb = bbr.to(st).to(gpu());

      // Statistics of both on both devices (the CPU's in double).
      std::vector<double> mx(size_t(ge.C)), vx(size_t(ge.C)), ix(size_t(ge.C));
      std::vector<double> mr(size_t(ge.C)), vr(size_t(ge.C)), ir(size_t(ge.C));
      with_ref_type(t, [&](auto z) {
        using R = decltype(z);
        cpu::batch_norm_stats<R>(cg, xr.data<R>(), mx.data(), vx.data());
        cpu::batch_norm_stats<R>(cg, rr.data<R>(), mr.data(), vr.data());
      });
      for (size_t c = 0; c < size_t(ge.C); ++c)
        ix[c] = 1.0 / std::sqrt(vx[c] + eps), ir[c] = 1.0 / std::sqrt(vr[c] + eps);
      Tensor gmx = poisoned({ge.C}, st), gix = poisoned({ge.C}, st);
      Tensor gmr = poisoned({ge.C}, st), gir = poisoned({ge.C}, st);
      const Tensor sws = workspace(cuda::batch_norm_stats_workspace_bytes(g, t));
      cuda::batch_norm_stats(g, t, x.raw_data(), eps, gmx.raw_data(), gix.raw_data(), st, nullptr, nullptr, 0.1,
                             sws.raw_data(), stream());
      cuda::batch_norm_stats(g, t, r.raw_data(), eps, gmr.raw_data(), gir.raw_data(), st, nullptr, nullptr, 0.1,
                             sws.raw_data(), stream());

      for (bool affine : {true, false}) {
        const std::string tag = affine ? " affine" : "";
        const cuda::BatchNormChannels ca{gmx.raw_data(), gix.raw_data(), affine ? ga.raw_data() : nullptr,
                                         affine ? ba.raw_data() : nullptr};
        const cuda::BatchNormChannels cb{gmr.raw_data(), gir.raw_data(), affine ? gb.raw_data() : nullptr,
                                         affine ? bb.raw_data() : nullptr};
        // Forward: y = relu(bn_a(x) + bn_b(r)), its bits those of y's values; the CPU composes
        // bn_b's apply and the fused tail.
        Tensor y = poisoned({n}, t);
        Tensor bits = mask_on_gpu(std::vector<uint8_t>(ybits.size(), 0xA5));  // poisoned
        cuda::dual_batch_norm_apply_relu(g, t, x.raw_data(), ca, r.raw_data(), cb, y.raw_data(), bits.data<uint8_t>(),
                                         stream());
        CHECK_MESSAGE(bits_of(bits) == mask_bits(y, t), glabel("dual apply bits", t, ge), tag);
        Tensor yr = Tensor::empty({n}, rd), rnr = Tensor::empty({n}, rd);
        with_ref_type(t, [&](auto z) {
          using R = decltype(z);
          cpu::batch_norm_apply<R>(cg, rr.data<R>(), mr.data(), ir.data(), ptr_or_null<R>(gbr, affine),
                                   ptr_or_null<R>(bbr, affine), rnr.data<R>());
          cpu::batch_norm_apply_relu<R>(cg, xr.data<R>(), rnr.data<R>(), mx.data(), ix.data(),
                                        ptr_or_null<R>(gar, affine), ptr_or_null<R>(bar, affine), yr.data<R>());
        });
        check_on_gpu(y, yr, gpu_tol_for(t), glabel("dual apply", t, ge) + tag);

        // The scalar path: pointers one element off 16-byte alignment.
        const Shifted xs = shifted(x64, t), rs = shifted(r64, t);
        Shifted ys = shifted(Tensor::full({n}, std::numeric_limits<double>::quiet_NaN(), DType::f64), t);
        Tensor bits_s = mask_on_gpu(std::vector<uint8_t>(ybits.size(), 0xA5));
        cuda::dual_batch_norm_apply_relu(g, t, xs.ptr, ca, rs.ptr, cb, ys.ptr, bits_s.data<uint8_t>(), stream());
        CHECK_MESSAGE(unshift(ys) == y.to_vector<double>(), glabel("dual apply unaligned = aligned", t, ge), tag);
        CHECK_MESSAGE(bits_of(bits_s) == bits_of(bits), glabel("dual apply unaligned bits", t, ge), tag);

        for (bool training : {true, false}) {
          const std::string btag = tag + (training ? " training" : " eval");
          Tensor dx = poisoned({n}, t), dr = poisoned({n}, t);
          Tensor dga = poisoned({ge.C}, st), dba = poisoned({ge.C}, st), dgb = poisoned({ge.C}, st),
                 dbb = poisoned({ge.C}, st);
          Tensor ws = workspace(cuda::dual_batch_norm_backward_workspace_bytes(g, t));
          cuda::dual_batch_norm_backward_relu(g, t, ym.data<uint8_t>(), dy.raw_data(), x.raw_data(), ca, r.raw_data(),
                                              cb, training, dx.raw_data(), dga.raw_data(), dba.raw_data(),
                                              dr.raw_data(), dgb.raw_data(), dbb.raw_data(), ws.raw_data(), stream());
          // CPU: the tail's masked backward (dz into dzr), then bn_b's backward of dz.
          Tensor dxr = Tensor::empty({n}, rd), dzr = Tensor::empty({n}, rd), drr = Tensor::empty({n}, rd);
          Tensor dgar = Tensor::empty({ge.C}, rd), dbar = Tensor::empty({ge.C}, rd);
          Tensor dgbr = Tensor::empty({ge.C}, rd), dbbr = Tensor::empty({ge.C}, rd);
          with_ref_type(t, [&](auto z) {
            using R = decltype(z);
            cpu::batch_norm_backward_relu<R>(cg, xr.data<R>(), ymr.data<R>(), dyr.data<R>(), mx.data(), ix.data(),
                                             ptr_or_null<R>(gar, affine), training, dxr.data<R>(), dgar.data<R>(),
                                             dbar.data<R>(), dzr.data<R>());
            cpu::batch_norm_backward<R>(cg, rr.data<R>(), dzr.data<R>(), mr.data(), ir.data(),
                                        ptr_or_null<R>(gbr, affine), training, drr.data<R>(), dgbr.data<R>(),
                                        dbbr.data<R>());
          });
          const double sq = std::sqrt(double(M));
          check_on_gpu(dx, dxr, gpu_tol_for(t), glabel("dual dx", t, ge) + btag);
          check_on_gpu(dr, drr, gpu_tol_for(t), glabel("dual dr", t, ge) + btag);
          check_on_gpu(dga, dgar, gpu_tol_for(rd), glabel("dual dgamma_a", t, ge) + btag, sq);
          check_on_gpu(dba, dbar, gpu_tol_for(rd), glabel("dual dbeta_a", t, ge) + btag, sq);
          check_on_gpu(dgb, dgbr, gpu_tol_for(rd), glabel("dual dgamma_b", t, ge) + btag, sq);
          check_on_gpu(dbb, dbbr, gpu_tol_for(rd), glabel("dual dbeta_b", t, ge) + btag, sq);

          // The two CUDA backwards it replaces, bit for bit: the tail's (writing dz) and bn_b's of dz.
          Tensor dx2 = poisoned({n}, t), dz2 = poisoned({n}, t), dr2 = poisoned({n}, t);
          Tensor dga2 = poisoned({ge.C}, st), dba2 = poisoned({ge.C}, st), dgb2 = poisoned({ge.C}, st),
                 dbb2 = poisoned({ge.C}, st);
          Tensor ws1 = workspace(cuda::batch_norm_backward_workspace_bytes(g, t));
          cuda::batch_norm_backward_relu(g, t, x.raw_data(), ym.data<uint8_t>(), dy.raw_data(), gmx.raw_data(),
                                         gix.raw_data(), affine ? ga.raw_data() : nullptr, training, dx2.raw_data(),
                                         dga2.raw_data(), dba2.raw_data(), dz2.raw_data(), ws1.raw_data(), stream());
          cuda::batch_norm_backward(g, t, r.raw_data(), dz2.raw_data(), gmr.raw_data(), gir.raw_data(),
                                    affine ? gb.raw_data() : nullptr, training, dr2.raw_data(), dgb2.raw_data(),
                                    dbb2.raw_data(), ws1.raw_data(), stream());
          const std::string bit = " = the two CUDA backwards, bit for bit";
          CHECK_MESSAGE(dx.to_vector<double>() == dx2.to_vector<double>(), glabel("dual dx", t, ge), btag, bit);
          CHECK_MESSAGE(dr.to_vector<double>() == dr2.to_vector<double>(), glabel("dual dr", t, ge), btag, bit);
          CHECK_MESSAGE(dga.to_vector<double>() == dga2.to_vector<double>(), glabel("dual dgamma_a", t, ge), btag, bit);
          CHECK_MESSAGE(dba.to_vector<double>() == dba2.to_vector<double>(), glabel("dual dbeta_a", t, ge), btag, bit);
          CHECK_MESSAGE(dgb.to_vector<double>() == dgb2.to_vector<double>(), glabel("dual dgamma_b", t, ge), btag, bit);
          CHECK_MESSAGE(dbb.to_vector<double>() == dbb2.to_vector<double>(), glabel("dual dbeta_b", t, ge), btag, bit);

          // One input's gradient alone (the other, and the parameters', not wanted).
          Tensor dr_only = poisoned({n}, t), dx_only = poisoned({n}, t);
          cuda::dual_batch_norm_backward_relu(g, t, ym.data<uint8_t>(), dy.raw_data(), x.raw_data(), ca, r.raw_data(),
                                              cb, training, nullptr, nullptr, nullptr, dr_only.raw_data(), nullptr,
                                              nullptr, ws.raw_data(), stream());
          cuda::dual_batch_norm_backward_relu(g, t, ym.data<uint8_t>(), dy.raw_data(), x.raw_data(), ca, r.raw_data(),
                                              cb, training, dx_only.raw_data(), nullptr, nullptr, nullptr, nullptr,
                                              nullptr, ws.raw_data(), stream());
          CHECK_MESSAGE(dr_only.to_vector<double>() == dr.to_vector<double>(), glabel("dual dr alone", t, ge), btag);
          CHECK_MESSAGE(dx_only.to_vector<double>() == dx.to_vector<double>(), glabel("dual dx alone", t, ge), btag);

          // The scalar path for the backward: the same values as the vectorised one.
          const Shifted dys = shifted(dy64, t);
          Shifted dxs = shifted(Tensor::full({n}, std::numeric_limits<double>::quiet_NaN(), DType::f64), t);
          Shifted drs = shifted(Tensor::full({n}, std::numeric_limits<double>::quiet_NaN(), DType::f64), t);
          cuda::dual_batch_norm_backward_relu(g, t, ym.data<uint8_t>(), dys.ptr, xs.ptr, ca, rs.ptr, cb, training,
                                              dxs.ptr, nullptr, nullptr, drs.ptr, nullptr, nullptr, ws.raw_data(),
                                              stream());
          CHECK_MESSAGE(unshift(dxs) == dx.to_vector<double>(), glabel("dual dx unaligned", t, ge), btag);
          CHECK_MESSAGE(unshift(drs) == dr.to_vector<double>(), glabel("dual dr unaligned", t, ge), btag);
        }
      }
    }
  }
}

// One batch norm's leaves: weight and bias (or none), running statistics.
struct Bn {
  Tensor w, b, rm, rv;
};
Bn bn_on(const Tensor& w64, const Tensor& b64, const Tensor& rm64, const Tensor& rv64, DType t, int affine,
         bool on_gpu) {
  Bn r;
  if (affine) {
    const Tensor wr = to_ref(w64, t), br = to_ref(b64, t);
    if (!on_gpu) r.w = wr, r.b = br;
    // f32 masters (affine 2): the 16-bit values in f32, so that y is the same as with 16-bit parameters.
    else if (affine == 2) r.w = wr.to(DType::f32).to(gpu()), r.b = br.to(DType::f32).to(gpu());
    else r.w = to_gpu(w64, t), r.b = to_gpu(b64, t);
    r.w.set_requires_grad(true), r.b.set_requires_grad(true);
  }
  r.rm = rm64.to(DType::f32), r.rv = rv64.to(DType::f32);
  if (on_gpu) r.rm = r.rm.to(gpu()), r.rv = r.rv.to(gpu());
  return r;
}
BatchNormArgs args_of(const Bn& b) { return BatchNormArgs{b.w, b.b, b.rm, b.rv, 0.1, 1e-5, {}}; }

// By hand: two batch norms' running statistics in place, and the composition on CUDA.
TEST_CASE("dual_batch_norm_add_relu on CUDA matches the CPU op, and the composition on CUDA") {
  if (!have_gpu("dual_batch_norm_add_relu on CUDA matches the CPU op, and the composition on CUDA")) return;
  uint64_t seed = 9000;
  for (DType t : kFloatTypes) {
    for (const OpShape& os : kOpShapes) {
      const int64_t C = os.shape[1];
      const int64_t M = shape_numel(os.shape) / C;
      const bool four_d = os.shape.size() == 4, sixteen = t == DType::bf16 || t == DType::f16;
      const MemoryFormat other_fmt =
          os.fmt == MemoryFormat::contiguous ? MemoryFormat::channels_last : MemoryFormat::contiguous;
      for (bool training : {true, false})
        for (int affine : {0, 1, 2})  // none; in x's dtype; f32 masters (16-bit x only)
          for (bool r_other : {false, true}) {  // the residual in the other format (4-D only)
            if ((r_other && !four_d) || (affine == 2 && !sixteen)) continue;
            const std::string what =
                label(std::string("dual_batch_norm_add_relu") + (training ? " train" : " eval") +
                          (affine == 1 ? " affine" : affine == 2 ? " affine f32 masters" : "") +
                          (r_other ? " residual other format" : ""),
                      t, os.shape, os.fmt);
            const MemoryFormat rfmt = r_other ? other_fmt : os.fmt;
            const Tensor x64 = add(mul(rnd(os.shape, ++seed), 2.0), -1.0), r64 = add(rnd(os.shape, ++seed), 1.0);
            std::vector<Tensor> p64;  // weight, bias, running mean, running var of a, then of b
            for (int k = 0; k < 2; ++k)
              p64.insert(p64.end(), {rnd({C}, ++seed), rnd({C}, ++seed), rnd({C}, ++seed),
                                     add(square(rnd({C}, ++seed)), 0.5)});
            const Bn ad = bn_on(p64[0], p64[1], p64[2], p64[3], t, affine, true);
            const Bn bd = bn_on(p64[4], p64[5], p64[6], p64[7], t, affine, true);
            const Bn ar = bn_on(p64[0], p64[1], p64[2], p64[3], t, affine, false);
            const Bn br = bn_on(p64[4], p64[5], p64[6], p64[7], t, affine, false);
            const Tensor ra_before = ar.rm.clone(), va_before = ar.rv.clone();
            const Tensor rb_before = br.rm.clone(), vb_before = br.rv.clone();
            Tensor xd = to_gpu(x64, t, os.fmt).set_requires_grad(true), xr = to_ref(x64, t, os.fmt);
            Tensor rd = to_gpu(r64, t, rfmt).set_requires_grad(true), rr = to_ref(r64, t, rfmt);
            poison_allocator(shape_numel(os.shape));
            const Tensor yd = dual_batch_norm_add_relu(xd, args_of(ad), rd, args_of(bd), training);
            const Tensor yr = dual_batch_norm_add_relu(xr, args_of(ar), rr, args_of(br), training);
            CHECK(yd.format() == os.fmt);
            CHECK(yd.dtype() == t);
            check_on_gpu(yd, yr, gpu_tol_for(t), what + " y");
            check_on_gpu(ad.rm, ar.rm, kGpuTolF32, what + " running_mean a");
            check_on_gpu(ad.rv, ar.rv, kGpuTolF32, what + " running_var a");
            check_on_gpu(bd.rm, br.rm, kGpuTolF32, what + " running_mean b");
            check_on_gpu(bd.rv, br.rv, kGpuTolF32, what + " running_var b");

            // The incoming gradient in the other format for 4-D inputs (converted on the way in);
            // the reference's mask is the GPU's output's (reference_grads).
            const Tensor seed64 = rnd(os.shape, ++seed);
            const MemoryFormat gfmt = four_d ? other_fmt : os.fmt;
            poison_allocator(shape_numel(os.shape));
            yd.backward(to_gpu(seed64, t, gfmt));
            const RefGrads ga = reference_grads(xr, ar.w, ar.b, ra_before, va_before, training, yd,
                                                to_ref(seed64, t, gfmt));
            const RefGrads gb = batch_norm_grads(rr, br.w, br.b, rb_before, vb_before, training, in_fmt(ga.dz, rfmt));
            check_on_gpu(xd.grad(), ga.dx, gpu_tol_for(t), what + " dx");
            check_on_gpu(rd.grad(), gb.dx, gpu_tol_for(t), what + " dresidual");
            CHECK(rd.grad().format() == rfmt);
            if (affine) {
              // In f32 with f32 masters: summed in f32 and never rounded to 16 bits.
              const Tol pt = gpu_tol_for(affine == 2 ? DType::f32 : t);
              const double sq = std::sqrt(double(M));
              CHECK(ad.w.grad().dtype() == ad.w.dtype());
              CHECK(bd.b.grad().dtype() == bd.b.dtype());
              check_on_gpu(ad.w.grad(), ga.dw, pt, what + " dweight a", sq);
              check_on_gpu(ad.b.grad(), ga.db, pt, what + " dbias a", sq);
              check_on_gpu(bd.w.grad(), gb.dw, pt, what + " dweight b", sq);
              check_on_gpu(bd.b.grad(), gb.db, pt, what + " dbias b", sq);
            }

            // The composition on CUDA, from the same running statistics: the same statistics
            // (the same kernels), y within one rounding of bn_b's output.
            const Bn ac = bn_on(p64[0], p64[1], p64[2], p64[3], t, affine, true);
            const Bn bc = bn_on(p64[4], p64[5], p64[6], p64[7], t, affine, true);
            const Tensor rc = batch_norm(to_gpu(r64, t, rfmt), bc.w, bc.b, bc.rm, bc.rv, training);
            const Tensor yc = batch_norm_add_relu(to_gpu(x64, t, os.fmt), rc, ac.w, ac.b, ac.rm, ac.rv, training);
            // The composition rounds bn_b(r) to t before the add: one rounding at the scale of |rc|.
            {
              const std::vector<double> got = yd.to_vector<double>(), want = yc.to_vector<double>();
              const std::vector<double> rcv = rc.to_vector<double>();
              const Tol tol = gpu_tol_for(t);
              int bad = 0;
              for (size_t i = 0; i < got.size(); ++i)
                if (!(std::abs(got[i] - want[i]) <= tol.atol + tol.rtol * (std::abs(want[i]) + std::abs(rcv[i]))))
                  ++bad;
              CHECK_MESSAGE(bad == 0, what, " y vs composition: ", bad, " of ", got.size(), " differ");
              // In f32 and f64 that rounding is the identity: the same operations in the same order.
              if (!sixteen) CHECK_MESSAGE(got == want, what, " y = the composition's, bit for bit");
            }
            const std::pair<const Tensor*, const Tensor*> same[] = {
                {&ad.rm, &ac.rm}, {&ad.rv, &ac.rv}, {&bd.rm, &bc.rm}, {&bd.rv, &bc.rv}};
            for (const auto& [got, want] : same) {
              CHECK_MESSAGE(got->to_vector<double>() == want->to_vector<double>(), what,
                            " running statistics = the composition's");
            }
          }
    }
  }
}

// By hand: a gradcheck on the GPU, no CPU comparison.
TEST_CASE("dual_batch_norm_add_relu on CUDA passes f64 gradcheck in x, r and both batch norms' parameters") {
  if (!have_gpu("dual_batch_norm_add_relu on CUDA passes f64 gradcheck in x, r and both batch norms' parameters"))
    return;
  // f64 leaves on the GPU: the finite differences run the fused kernels themselves.
  const std::vector<std::pair<Shape, MemoryFormat>> cases = {
      {{2, 3, 3, 4}, MemoryFormat::channels_last}, {{1, 4, 3, 3}, MemoryFormat::contiguous},
      {{3, 8, 2, 1}, MemoryFormat::channels_last}, {{5, 3}, MemoryFormat::contiguous}};
  uint64_t seed = 11000;
  for (const auto& [s, f] : cases)
    for (bool training : {true, false}) {
      const int64_t C = s[1];
      auto on_gpu = [](const Tensor& t) { return test::leaf(t.to(gpu())); };
      const Tensor x = on_gpu(test::rnd(s, ++seed, DType::f64, f)), r = on_gpu(test::rnd(s, ++seed, DType::f64, f));
      const Tensor wa = on_gpu(add(test::rnd({C}, ++seed), 1.5)), ba = on_gpu(test::rnd({C}, ++seed));
      const Tensor wb = on_gpu(add(test::rnd({C}, ++seed), 1.5)), bb = on_gpu(test::rnd({C}, ++seed));
      const Tensor rm = test::rnd({C}, ++seed).to(gpu()), rv = add(square(test::rnd({C}, ++seed)), 0.5).to(gpu());
      test::check_gradcheck(
          [&](const std::vector<Tensor>& v) {
            // Fresh running statistics each call: eval normalises with these, training updates copies.
            const BatchNormArgs a{v[1], v[2], rm.clone(), rv.clone(), 0.1, 1e-5, {}};
            const BatchNormArgs b{v[4], v[5], rm.clone(), rv.clone(), 0.1, 1e-5, {}};
            const Tensor y = dual_batch_norm_add_relu(v[0], a, v[3], b, training);
            CHECK(y.device() == gpu());
            return y;
          },
          {x, wa, ba, r, wb, bb},
          detail::cat("dual_batch_norm_add_relu on CUDA, shape ", shape_str(s), " ", test::fmt_name(f),
                      training ? " training" : " eval"));
    }
}

}  // namespace
}  // namespace rt
