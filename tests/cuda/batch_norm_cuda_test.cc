// GPU-vs-CPU tests of batch_norm: the launchers (statistics, running-stat update, apply,
// backward in training and eval) on NaN-poisoned outputs against kernels/cpu/batch_norm.cc,
// then the op through autograd on CUDA against the CPU op. NCHW, NHWC, (N, C) inputs, batch
// 1, odd channel counts (not a multiple of the 32-channel NHWC block), every float dtype.
// The same for the fused tails (batch_norm_relu, batch_norm_add_relu), their vectorised and
// scalar paths.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "engine/stream.h"
#include "kernels/cpu/batch_norm.h"
#include "kernels/cuda/batch_norm.h"
#include "tests/cuda/batch_norm_cuda_util.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

TEST_CASE("batch_norm launchers reject bad arguments on the host (runs without a GPU)") {
  const cuda::BatchNormGeom one{1, 4, 1, true};
  float dummy[8];
  CHECK_THROWS_WITH_AS(cuda::batch_norm_stats(one, DType::f32, dummy, 1e-5, dummy, dummy, DType::f32, nullptr, nullptr,
                                              0.1, dummy, nullptr),
                       doctest::Contains("more than one value per channel"), Error);
  const cuda::BatchNormGeom g{2, 4, 1, true};
  CHECK_THROWS_WITH_AS(cuda::batch_norm_apply(g, DType::i64, dummy, dummy, dummy, nullptr, nullptr, dummy, nullptr),
                       doctest::Contains("CUDA backend computes in f32, f64, bf16 or f16"), Error);
  CHECK_THROWS_WITH_AS(cuda::batch_norm_backward(g, DType::f32, dummy, dummy, dummy, dummy, nullptr, true, dummy,
                                                 nullptr, nullptr, nullptr, nullptr),
                       doctest::Contains("null pointer"), Error);
  CHECK_THROWS_WITH_AS(cuda::batch_norm_stats(g, DType::f32, dummy, 1e-5, dummy, dummy, DType::f32, nullptr, nullptr,
                                              0.1, nullptr, nullptr),
                       doctest::Contains("null pointer"), Error);
  // The workspace grows with the row blocks: one channel of 2^20 rows needs many partials.
  CHECK(cuda::batch_norm_stats_workspace_bytes({1024, 1, 1024, false}, DType::f32) >
        cuda::batch_norm_stats_workspace_bytes({2, 1, 4, false}, DType::f32));
  CHECK(cuda::batch_norm_backward_workspace_bytes({2, 5, 4, true}, DType::f64) >= 3 * 5 * sizeof(double));
  CHECK(cuda::batch_norm_stat_dtype(DType::bf16) == DType::f32);
  CHECK(cuda::batch_norm_stat_dtype(DType::f64) == DType::f64);
}

// By hand: launchers on raw buffers and running statistics updated in place, below the autograd op.
TEST_CASE("batch_norm launchers match the CPU kernels") {
  if (!have_gpu("batch_norm launchers match the CPU kernels")) return;
  uint64_t seed = 1;
  const double eps = 1e-5, momentum = 0.1;
  for (DType t : kFloatTypes) {
    const DType rd = ref_dtype(t), st = cuda::batch_norm_stat_dtype(t);
    // Statistics are computed in float (double for f64) from the same rounded inputs on
    // both sides, so they meet the f32 (f64) tolerance whatever the storage type.
    const Tol stat_tol = gpu_tol_for(rd);
    for (const Geom& ge : kGeoms) {
      const cuda::BatchNormGeom g{ge.N, ge.C, ge.S, ge.nhwc};
      const cpu::BatchNormGeom cg{ge.N, ge.C, ge.S, ge.nhwc};
      const int64_t n = ge.N * ge.C * ge.S, M = ge.N * ge.S;
      // Flat buffers in the kernel's own layout; an offset mean so the two passes matter.
      const Tensor x64 = add(rnd({n}, ++seed), 3.0), dy64 = rnd({n}, ++seed);
      const Tensor gamma64 = rnd({ge.C}, ++seed), beta64 = rnd({ge.C}, ++seed);
      const Tensor rm64 = rnd({ge.C}, ++seed), rv64 = add(square(rnd({ge.C}, ++seed)), 0.5);
      const Tensor x = to_gpu(x64, t), dy = to_gpu(dy64, t);
      const Tensor xr = to_ref(x64, t), dyr = to_ref(dy64, t), gammar = to_ref(gamma64, t), betar = to_ref(beta64, t);
      // gamma and beta as the kernels take them, in the statistics dtype, holding the values
      // the CPU reference uses: Note [Batch norm parameters in the statistics dtype].
      const Tensor gamma = gammar.to(st).to(gpu()), beta = betar.to(st).to(gpu());

      // CPU reference statistics (double) and running-stat update.
      std::vector<double> mean(size_t(ge.C)), var(size_t(ge.C)), invstd(size_t(ge.C));
      std::vector<double> rm = rm64.to_vector<double>(), rv = rv64.to_vector<double>();
      if (rd == DType::f64) cpu::batch_norm_stats<double>(cg, xr.data<double>(), mean.data(), var.data());
      else cpu::batch_norm_stats<float>(cg, xr.data<float>(), mean.data(), var.data());
      for (int64_t c = 0; c < ge.C; ++c) {
        invstd[size_t(c)] = 1.0 / std::sqrt(var[size_t(c)] + eps);
        rm[size_t(c)] = (1 - momentum) * rm[size_t(c)] + momentum * mean[size_t(c)];
        rv[size_t(c)] = (1 - momentum) * rv[size_t(c)] + momentum * var[size_t(c)] * double(M) / double(M - 1);
      }

      // Statistics + running update on the GPU (running stats kept in f32).
      Tensor gm = poisoned({ge.C}, st), gi = poisoned({ge.C}, st);
      Tensor grm = rm64.to(DType::f32).to(gpu()), grv = rv64.to(DType::f32).to(gpu());
      const Tensor sws = workspace(cuda::batch_norm_stats_workspace_bytes(g, t));
      cuda::batch_norm_stats(g, t, x.raw_data(), eps, gm.raw_data(), gi.raw_data(), DType::f32, grm.raw_data(),
                             grv.raw_data(), momentum, sws.raw_data(), stream());
      check_close(gm.to_vector<double>(), mean, stat_tol, glabel("mean", t, ge));
      check_close(gi.to_vector<double>(), invstd, stat_tol, glabel("invstd", t, ge));
      check_close(grm.to_vector<double>(), rm, kGpuTolF32, glabel("running_mean", t, ge));
      check_close(grv.to_vector<double>(), rv, kGpuTolF32, glabel("running_var", t, ge));

      // Eval statistics from running stats.
      Tensor em = poisoned({ge.C}, st), ei = poisoned({ge.C}, st);
      const Tensor erm = rm64.to(gpu()), erv = rv64.to(gpu());  // f64 running stats
      cuda::batch_norm_eval_stats(ge.C, DType::f64, erm.raw_data(), erv.raw_data(), eps, st, em.raw_data(),
                                  ei.raw_data(), stream());
      std::vector<double> einv(size_t(ge.C));
      const std::vector<double> rv0 = rv64.to_vector<double>();
      for (int64_t c = 0; c < ge.C; ++c) einv[size_t(c)] = 1.0 / std::sqrt(rv0[size_t(c)] + eps);
      check_close(em.to_vector<double>(), rm64.to_vector<double>(), stat_tol, glabel("eval mean", t, ge));
      check_close(ei.to_vector<double>(), einv, stat_tol, glabel("eval invstd", t, ge));

      for (bool affine : {true, false}) {
        // Apply, with the GPU's own statistics against the CPU's.
        Tensor y = poisoned({n}, t);
        cuda::batch_norm_apply(g, t, x.raw_data(), gm.raw_data(), gi.raw_data(), affine ? gamma.raw_data() : nullptr,
                               affine ? beta.raw_data() : nullptr, y.raw_data(), stream());
        Tensor yr = Tensor::empty({n}, rd);
        if (rd == DType::f64)
          cpu::batch_norm_apply<double>(cg, xr.data<double>(), mean.data(), invstd.data(),
                                        affine ? gammar.data<double>() : nullptr,
                                        affine ? betar.data<double>() : nullptr, yr.data<double>());
        else
          cpu::batch_norm_apply<float>(cg, xr.data<float>(), mean.data(), invstd.data(),
                                       affine ? gammar.data<float>() : nullptr, affine ? betar.data<float>() : nullptr,
                                       yr.data<float>());
        check_on_gpu(y, yr, gpu_tol_for(t), glabel(affine ? "apply affine" : "apply", t, ge));

        for (bool training : {true, false}) {
          const std::string tag = std::string(training ? " training" : " eval") + (affine ? " affine" : "");
          Tensor dx = poisoned({n}, t), dg = poisoned({ge.C}, st), db = poisoned({ge.C}, st);
          Tensor ws = workspace(cuda::batch_norm_backward_workspace_bytes(g, t));
          cuda::batch_norm_backward(g, t, x.raw_data(), dy.raw_data(), gm.raw_data(), gi.raw_data(),
                                    affine ? gamma.raw_data() : nullptr, training, dx.raw_data(), dg.raw_data(),
                                    db.raw_data(), ws.raw_data(), stream());
          Tensor dxr = Tensor::empty({n}, rd), dgr = Tensor::empty({ge.C}, rd), dbr = Tensor::empty({ge.C}, rd);
          if (rd == DType::f64)
            cpu::batch_norm_backward<double>(cg, xr.data<double>(), dyr.data<double>(), mean.data(), invstd.data(),
                                             affine ? gammar.data<double>() : nullptr, training, dxr.data<double>(),
                                             dgr.data<double>(), dbr.data<double>());
          else
            cpu::batch_norm_backward<float>(cg, xr.data<float>(), dyr.data<float>(), mean.data(), invstd.data(),
                                            affine ? gammar.data<float>() : nullptr, training, dxr.data<float>(),
                                            dgr.data<float>(), dbr.data<float>());
          const double sq = std::sqrt(double(M));
          check_on_gpu(dx, dxr, gpu_tol_for(t), glabel("dx", t, ge) + tag);
          // dgamma and dbeta in the statistics dtype: f32's tolerance for every storage type.
          check_on_gpu(dg, dgr, gpu_tol_for(rd), glabel("dgamma", t, ge) + tag, sq);
          check_on_gpu(db, dbr, gpu_tol_for(rd), glabel("dbeta", t, ge) + tag, sq);
          // dx only (parameter gradients not wanted): the null outputs are skipped.
          Tensor dx2 = poisoned({n}, t);
          cuda::batch_norm_backward(g, t, x.raw_data(), dy.raw_data(), gm.raw_data(), gi.raw_data(),
                                    affine ? gamma.raw_data() : nullptr, training, dx2.raw_data(), nullptr, nullptr,
                                    ws.raw_data(), stream());
          check_on_gpu(dx2, dxr, gpu_tol_for(t), glabel("dx alone", t, ge) + tag);
        }
      }
    }
  }
}

// Every (x, running statistics) pair of float dtypes (Note [Running statistics of any dtype] in
// tests/cuda/batch_norm_cuda_util.h): the training statistics with their running update, then
// the eval statistics read from running statistics of that dtype. Two small geometries, one per
// layout; the launchers above run every geometry with f32 (and f64 eval) running statistics.
// By hand: launchers, and running statistics of another dtype than x, updated in place.
TEST_CASE("batch_norm statistics launchers with running statistics of every float dtype match the CPU") {
  if (!have_gpu("batch_norm statistics launchers with running statistics of every float dtype")) return;
  uint64_t seed = 2000;
  const double eps = 1e-5, momentum = 0.1;
  for (DType t : kFloatTypes)
    for (DType r : kFloatTypes)
      for (const Geom& ge : {Geom{4, 5, 49, false}, Geom{8, 37, 1, true}}) {
        const cuda::BatchNormGeom g{ge.N, ge.C, ge.S, ge.nhwc};
        const cpu::BatchNormGeom cg{ge.N, ge.C, ge.S, ge.nhwc};
        const DType st = cuda::batch_norm_stat_dtype(t);
        const int64_t n = ge.N * ge.C * ge.S;
        const std::string tag = std::string(" running ") + dtype_name(r);
        const Tensor x64 = add(rnd({n}, ++seed), 3.0);
        // The running statistics as stored in r: the values both sides start from.
        const Tensor rm_r = rnd({ge.C}, ++seed).to(r), rv_r = add(square(rnd({ge.C}, ++seed)), 0.5).to(r);
        const std::vector<double> rm0 = rm_r.to_vector<double>(), rv0 = rv_r.to_vector<double>();

        std::vector<double> mean(size_t(ge.C)), var(size_t(ge.C)), invstd(size_t(ge.C));
        const Tensor xr = to_ref(x64, t);
        with_ref_type(t, [&](auto z) {
          using R = decltype(z);
          cpu::batch_norm_stats<R>(cg, xr.data<R>(), mean.data(), var.data());
        });
        for (size_t c = 0; c < size_t(ge.C); ++c) invstd[c] = 1.0 / std::sqrt(var[c] + eps);
        std::vector<double> rm = rm0, rv = rv0;
        update_running(rm, rv, mean, var, double(ge.N * ge.S), momentum);

        const Tensor x = to_gpu(x64, t);
        Tensor gm = poisoned({ge.C}, st), gi = poisoned({ge.C}, st);
        Tensor grm = rm_r.to(gpu()), grv = rv_r.to(gpu());
        const Tensor sws = workspace(cuda::batch_norm_stats_workspace_bytes(g, t));
        cuda::batch_norm_stats(g, t, x.raw_data(), eps, gm.raw_data(), gi.raw_data(), r, grm.raw_data(),
                               grv.raw_data(), momentum, sws.raw_data(), stream());
        const Tol stat_tol = gpu_tol_for(ref_dtype(t));
        check_close(gm.to_vector<double>(), mean, stat_tol, glabel("mean", t, ge) + tag);
        check_close(gi.to_vector<double>(), invstd, stat_tol, glabel("invstd", t, ge) + tag);
        check_close(grm.to_vector<double>(), rm, running_tol(t, r), glabel("running_mean", t, ge) + tag);
        check_close(grv.to_vector<double>(), rv, running_tol(t, r), glabel("running_var", t, ge) + tag);

        // Eval: mean = running_mean, invstd = 1/sqrt(running_var + eps), from the stored values.
        Tensor em = poisoned({ge.C}, st), ei = poisoned({ge.C}, st);
        const Tensor erm = rm_r.to(gpu()), erv = rv_r.to(gpu());
        cuda::batch_norm_eval_stats(ge.C, r, erm.raw_data(), erv.raw_data(), eps, st, em.raw_data(), ei.raw_data(),
                                    stream());
        std::vector<double> einv(size_t(ge.C));
        for (size_t c = 0; c < size_t(ge.C); ++c) einv[c] = 1.0 / std::sqrt(rv0[c] + eps);
        check_close(em.to_vector<double>(), rm0, gpu_tol_for(st), glabel("eval mean", t, ge) + tag);
        check_close(ei.to_vector<double>(), einv, gpu_tol_for(st), glabel("eval invstd", t, ge) + tag);
      }
}

// ---- the op through autograd ------------------------------------------------------------

// Running statistics in f32 on both sides (a model's buffers, whatever x's dtype), drawn per
// case: mean N(0, 1), variance N(0, 1)^2 + 0.5.
std::vector<Tensor> running_stats(const std::vector<Tensor>& in, Generator& g) {
  const int64_t C = in[0].size(1);
  const Tensor rm = randn({C}, g, DType::f64, Device::cpu()), rv = randn({C}, g, DType::f64, Device::cpu());
  return {rm.to(DType::f32), add(square(rv), 0.5).to(DType::f32)};
}

// Inputs 2 N(0, 1) - 1 (x of mean -1: the statistics' two passes matter; weight and bias
// alike), the running statistics updated in place and compared after the forward.
TEST_CASE("batch_norm op forward, backward and running stats on CUDA match the CPU") {
  uint64_t seed = 500;
  for (const OpShape& os : kOpShapes)
    for (bool training : {true, false})
      for (bool affine : {true, false}) {
        const int64_t C = os.shape[1];
        std::vector<Shape> shapes = {os.shape};
        if (affine) shapes.insert(shapes.end(), {{C}, {C}});
        const size_t stats = shapes.size();  // the running statistics follow the inputs
        check_matches_cpu(
            std::string("batch_norm") + (training ? " train" : " eval") + (affine ? " affine" : ""),
            [training, affine, stats](const std::vector<Tensor>& in) {
              return batch_norm(in[0], affine ? in[1] : Tensor(), affine ? in[2] : Tensor(), in[stats], in[stats + 1],
                                training, 0.1, 1e-5);
            },
            shapes, {DType::f32, DType::f64, DType::bf16, DType::f16},
            MatchOptions()
                .with_formats({os.fmt})
                .scaled_inputs(2)
                .shifted_inputs(-1)
                .updating(running_stats)
                .with_seed(++seed));
      }
}

TEST_CASE("batch_norm on CUDA rejects what the CPU rejects") {
  if (!have_gpu("batch_norm on CUDA rejects what the CPU rejects")) return;
  const Tensor x = Tensor::full({1, 4}, 1.0, DType::f32, gpu());
  CHECK_THROWS_WITH_AS(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true),
                       doctest::Contains("more than one value per channel"), Error);
  CHECK_THROWS_WITH_AS(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false),
                       doctest::Contains("eval mode needs running_mean"), Error);
  const Tensor xi = Tensor::full({2, 4}, 1.0, DType::i32, gpu());
  CHECK_THROWS_WITH_AS(batch_norm(xi, Tensor(), Tensor(), Tensor(), Tensor(), true),
                       doctest::Contains("must be f32, f64, bf16 or f16"), Error);
}

// ---- the fused tails: batch_norm_apply_relu / batch_norm_backward_relu, and the ops -------

TEST_CASE("fused batch_norm launchers reject bad arguments on the host (runs without a GPU)") {
  const cuda::BatchNormGeom g{2, 4, 1, true};
  float dummy[8];
  uint8_t bits[2];
  CHECK_THROWS_WITH_AS(cuda::batch_norm_apply_relu(g, DType::i64, dummy, nullptr, dummy, dummy, nullptr, nullptr, dummy,
                                                   bits, nullptr),
                       doctest::Contains("CUDA backend computes in f32, f64, bf16 or f16"), Error);
  CHECK_THROWS_WITH_AS(cuda::batch_norm_apply_relu(g, DType::f32, dummy, dummy, dummy, dummy, nullptr, nullptr, nullptr,
                                                   bits, nullptr),
                       doctest::Contains("null pointer"), Error);
  CHECK_THROWS_WITH_AS(cuda::batch_norm_backward_relu(g, DType::f32, dummy, nullptr, dummy, dummy, dummy, nullptr, true,
                                                      dummy, nullptr, nullptr, nullptr, dummy, nullptr),
                       doctest::Contains("null pointer (the forward's relu mask)"), Error);
  const cuda::BatchNormGeom bad{2, 0, 1, true};
  CHECK_THROWS_WITH_AS(cuda::batch_norm_backward_relu(bad, DType::f32, dummy, bits, dummy, dummy, dummy, nullptr, true,
                                                      dummy, nullptr, nullptr, nullptr, dummy, nullptr),
                       doctest::Contains("bad geometry"), Error);
  CHECK_THROWS_WITH_AS(cuda::batch_norm_relu_mask_bytes(g, DType::i64),
                       doctest::Contains("CUDA backend computes in f32, f64, bf16 or f16"), Error);
}

// By hand: launchers on raw buffers (masked backward, unaligned pointers), below the autograd op.
TEST_CASE("fused batch_norm launchers (relu, residual, masked backward) match the CPU kernels") {
  if (!have_gpu("fused batch_norm launchers (relu, residual, masked backward) match the CPU kernels")) return;
  uint64_t seed = 3000;
  const double eps = 1e-5;
  for (DType t : kFloatTypes) {
    const DType rd = ref_dtype(t), st = cuda::batch_norm_stat_dtype(t);
    for (const Geom& ge : kGeoms) {
      const cuda::BatchNormGeom g{ge.N, ge.C, ge.S, ge.nhwc};
      const cpu::BatchNormGeom cg{ge.N, ge.C, ge.S, ge.nhwc};
      const int64_t n = ge.N * ge.C * ge.S, M = ge.N * ge.S;
      const Tensor x64 = add(rnd({n}, ++seed), 3.0), r64 = rnd({n}, ++seed), dy64 = rnd({n}, ++seed);
      const Tensor gamma64 = rnd({ge.C}, ++seed), beta64 = rnd({ge.C}, ++seed);
      // The backward's mask: any output of a relu will do (about half exact zeros). The same
      // values on both sides, so the mask is the same.
      const Tensor ymask64 = relu(rnd({n}, ++seed));
      const Tensor x = to_gpu(x64, t), r = to_gpu(r64, t), dy = to_gpu(dy64, t);
      const std::vector<uint8_t> ybits = mask_bits(to_gpu(ymask64, t), t);
      const Tensor ym = mask_on_gpu(ybits);
      REQUIRE(size_t(ym.numel()) == cuda::batch_norm_relu_mask_bytes(g, t));

      const Tensor xr = to_ref(x64, t), rr = to_ref(r64, t), dyr = to_ref(dy64, t), ymr = to_ref(ymask64, t);
      const Tensor gammar = to_ref(gamma64, t), betar = to_ref(beta64, t);
      const Tensor gamma = gammar.to(st).to(gpu()), beta = betar.to(st).to(gpu());  // the statistics dtype

      std::vector<double> mean(size_t(ge.C)), var(size_t(ge.C)), invstd(size_t(ge.C));
      with_ref_type(t, [&](auto z) {
        using R = decltype(z);
        cpu::batch_norm_stats<R>(cg, xr.data<R>(), mean.data(), var.data());
      });
      for (int64_t c = 0; c < ge.C; ++c) invstd[size_t(c)] = 1.0 / std::sqrt(var[size_t(c)] + eps);
      Tensor gm = poisoned({ge.C}, st), gi = poisoned({ge.C}, st);
      const Tensor sws = workspace(cuda::batch_norm_stats_workspace_bytes(g, t));
      cuda::batch_norm_stats(g, t, x.raw_data(), eps, gm.raw_data(), gi.raw_data(), st, nullptr, nullptr, 0.1,
                             sws.raw_data(), stream());

      for (bool affine : {true, false})
        for (bool res : {true, false}) {
          const std::string tag = std::string(affine ? " affine" : "") + (res ? " residual" : "");
          // Forward: y = relu(bn(x) [+ r]), and its bits: those of y's values.
          Tensor y = poisoned({n}, t);
          Tensor bits = mask_on_gpu(std::vector<uint8_t>(ybits.size(), 0xA5));  // poisoned
          cuda::batch_norm_apply_relu(g, t, x.raw_data(), res ? r.raw_data() : nullptr, gm.raw_data(), gi.raw_data(),
                                      affine ? gamma.raw_data() : nullptr, affine ? beta.raw_data() : nullptr,
                                      y.raw_data(), bits.data<uint8_t>(), stream());
          CHECK_MESSAGE(bits_of(bits) == mask_bits(y, t), glabel("apply_relu bits", t, ge), tag);
          Tensor yr = Tensor::empty({n}, rd);
          with_ref_type(t, [&](auto z) {
            using R = decltype(z);
            cpu::batch_norm_apply_relu<R>(cg, xr.data<R>(), ptr_or_null<R>(rr, res), mean.data(), invstd.data(),
                                          ptr_or_null<R>(gammar, affine), ptr_or_null<R>(betar, affine), yr.data<R>());
          });
          check_on_gpu(y, yr, gpu_tol_for(t), glabel("apply_relu", t, ge) + tag);

          // The same through the scalar path: pointers one element off 16-byte alignment.
          const Shifted xs = shifted(x64, t), rs = shifted(r64, t);
          Shifted ys = shifted(Tensor::full({n}, std::numeric_limits<double>::quiet_NaN(), DType::f64), t);
          Tensor bits_s = mask_on_gpu(std::vector<uint8_t>(ybits.size(), 0xA5));
          cuda::batch_norm_apply_relu(g, t, xs.ptr, res ? rs.ptr : nullptr, gm.raw_data(), gi.raw_data(),
                                      affine ? gamma.raw_data() : nullptr, affine ? beta.raw_data() : nullptr, ys.ptr,
                                      bits_s.data<uint8_t>(), stream());
          check_close(unshift(ys), yr.to_vector<double>(), gpu_tol_for(t), glabel("apply_relu unaligned", t, ge) + tag);
          CHECK_MESSAGE(bits_of(bits_s) == mask_bits(Tensor::from_vector(unshift(ys), {n}), t),
                        glabel("apply_relu unaligned bits", t, ge), tag);

          for (bool training : {true, false}) {
            const std::string btag = tag + (training ? " training" : " eval");
            Tensor dx = poisoned({n}, t), dg = poisoned({ge.C}, st), db = poisoned({ge.C}, st), dr = poisoned({n}, t);
            Tensor ws = workspace(cuda::batch_norm_backward_workspace_bytes(g, t));
            cuda::batch_norm_backward_relu(g, t, x.raw_data(), ym.data<uint8_t>(), dy.raw_data(), gm.raw_data(),
                                           gi.raw_data(), affine ? gamma.raw_data() : nullptr, training, dx.raw_data(),
                                           dg.raw_data(), db.raw_data(), res ? dr.raw_data() : nullptr, ws.raw_data(),
                                           stream());
            Tensor dxr = Tensor::empty({n}, rd), dgr = Tensor::empty({ge.C}, rd), dbr = Tensor::empty({ge.C}, rd);
            Tensor drr = Tensor::empty({n}, rd);
            with_ref_type(t, [&](auto z) {
              using R = decltype(z);
              cpu::batch_norm_backward_relu<R>(cg, xr.data<R>(), ymr.data<R>(), dyr.data<R>(), mean.data(),
                                               invstd.data(), ptr_or_null<R>(gammar, affine), training, dxr.data<R>(),
                                               dgr.data<R>(), dbr.data<R>(), drr.data<R>());
            });
            const double sq = std::sqrt(double(M));
            check_on_gpu(dx, dxr, gpu_tol_for(t), glabel("masked dx", t, ge) + btag);
            check_on_gpu(dg, dgr, gpu_tol_for(rd), glabel("masked dgamma", t, ge) + btag, sq);
            check_on_gpu(db, dbr, gpu_tol_for(rd), glabel("masked dbeta", t, ge) + btag, sq);
            if (res) check_on_gpu(dr, drr, gpu_tol_for(t), glabel("dresidual", t, ge) + btag);
            else CHECK_MESSAGE(std::isnan(dr.to_vector<double>()[0]), glabel("dresidual written", t, ge), btag);

            // The residual's gradient alone (dx, dgamma, dbeta not wanted).
            Tensor dr2 = poisoned({n}, t);
            cuda::batch_norm_backward_relu(g, t, x.raw_data(), ym.data<uint8_t>(), dy.raw_data(), gm.raw_data(),
                                           gi.raw_data(), affine ? gamma.raw_data() : nullptr, training, nullptr,
                                           nullptr, nullptr, dr2.raw_data(), ws.raw_data(), stream());
            check_on_gpu(dr2, drr, gpu_tol_for(t), glabel("dresidual alone", t, ge) + btag);

            // Scalar path for the backward too.
            const Shifted dys = shifted(dy64, t);
            Shifted dxs = shifted(Tensor::full({n}, std::numeric_limits<double>::quiet_NaN(), DType::f64), t);
            cuda::batch_norm_backward_relu(g, t, xs.ptr, ym.data<uint8_t>(), dys.ptr, gm.raw_data(), gi.raw_data(),
                                           affine ? gamma.raw_data() : nullptr, training, dxs.ptr, nullptr, nullptr,
                                           nullptr, ws.raw_data(), stream());
            check_close(unshift(dxs), dxr.to_vector<double>(), gpu_tol_for(t),
                        glabel("masked dx unaligned", t, ge) + btag);
          }
        }
    }
  }
}

// By hand: the reference's relu mask is the GPU output's (an element within rounding of 0 may fall on either
// side, and the harness's CPU backward would use its own), and f32 masters beside a 16-bit x (two dtypes).
TEST_CASE("batch_norm_relu and batch_norm_add_relu on CUDA match the CPU") {
  if (!have_gpu("batch_norm_relu and batch_norm_add_relu on CUDA match the CPU")) return;
  uint64_t seed = 5000;
  for (DType t : kFloatTypes) {
    for (const OpShape& os : kOpShapes) {
      const int64_t C = os.shape[1];
      const int64_t M = shape_numel(os.shape) / C;
      const bool four_d = os.shape.size() == 4;
      const MemoryFormat other_fmt =
          os.fmt == MemoryFormat::contiguous ? MemoryFormat::channels_last : MemoryFormat::contiguous;
      // master: weight and bias in f32 with a 16-bit input, as mixed precision passes its
      // masters (Note [Batch norm parameters in the statistics dtype]); their gradients come
      // back in f32, computed without a 16-bit rounding.
      const bool sixteen = t == DType::bf16 || t == DType::f16;
      for (bool training : {true, false})
        for (int affine : {0, 1, 2})  // none; in x's dtype; f32 masters (16-bit x only)
          for (int res : {0, 1, 2}) {  // none; in x's format; in the other format (4-D only)
            if ((res == 2 && !four_d) || (affine == 2 && (!sixteen || res == 2))) continue;
            const MemoryFormat rfmt = res == 2 ? other_fmt : os.fmt;
            const std::string what =
                label(std::string(res ? "batch_norm_add_relu" : "batch_norm_relu") + (training ? " train" : " eval") +
                          (affine == 1 ? " affine" : affine == 2 ? " affine f32 masters" : "") +
                          (res == 2 ? " residual other format" : ""),
                      t, os.shape, os.fmt);
            const Tensor x64 = add(mul(rnd(os.shape, ++seed), 2.0), -1.0), w64 = rnd({C}, ++seed);
            const Tensor b64 = rnd({C}, ++seed), r64 = rnd(os.shape, ++seed);
            const Tensor rm64 = rnd({C}, ++seed), rv64 = add(square(rnd({C}, ++seed)), 0.5);
            Tensor xd = to_gpu(x64, t, os.fmt).set_requires_grad(true);
            Tensor xr = to_ref(x64, t, os.fmt);
            Tensor wd, wr, bd, br, rd, rr;
            if (affine) {
              wr = to_ref(w64, t), br = to_ref(b64, t);
              // f32 masters: the 16-bit values in f32, so that y is the same as with 16-bit parameters.
              wd = (affine == 2 ? wr.to(DType::f32).to(gpu()) : to_gpu(w64, t)).set_requires_grad(true);
              bd = (affine == 2 ? br.to(DType::f32).to(gpu()) : to_gpu(b64, t)).set_requires_grad(true);
            }
            if (res) rd = to_gpu(r64, t, rfmt).set_requires_grad(true), rr = to_ref(r64, t, rfmt);
            Tensor rmd = rm64.to(DType::f32).to(gpu()), rvd = rv64.to(DType::f32).to(gpu());
            Tensor rmr = rm64.to(DType::f32), rvr = rv64.to(DType::f32);
            const Tensor rm_before = rmr.clone(), rv_before = rvr.clone();
            poison_allocator(shape_numel(os.shape));
            const Tensor yd = res ? batch_norm_add_relu(xd, rd, wd, bd, rmd, rvd, training, 0.1, 1e-5)
                                  : batch_norm_relu(xd, wd, bd, rmd, rvd, training, 0.1, 1e-5);
            const Tensor yr = res ? batch_norm_add_relu(xr, rr, wr, br, rmr, rvr, training, 0.1, 1e-5)
                                  : batch_norm_relu(xr, wr, br, rmr, rvr, training, 0.1, 1e-5);
            CHECK(yd.format() == os.fmt);
            CHECK(yd.dtype() == t);
            check_on_gpu(yd, yr, gpu_tol_for(t), what + " y");
            check_on_gpu(rmd, rmr, kGpuTolF32, what + " running_mean");
            check_on_gpu(rvd, rvr, kGpuTolF32, what + " running_var");

            // The incoming gradient in the other format for 4-D inputs (converted on the way in).
            const Tensor seed64 = rnd(os.shape, ++seed);
            const MemoryFormat gfmt = four_d ? other_fmt : os.fmt;
            poison_allocator(shape_numel(os.shape));
            yd.backward(to_gpu(seed64, t, gfmt));
            const RefGrads ref = reference_grads(xr, wr, br, rm_before, rv_before, training, yd, to_ref(seed64, t, gfmt));
            check_on_gpu(xd.grad(), ref.dx, gpu_tol_for(t), what + " dx");
            if (affine) {
              // In f32 with f32 masters: summed in f32 and never rounded to 16 bits.
              const Tol pt = gpu_tol_for(affine == 2 ? DType::f32 : t);
              CHECK(wd.grad().dtype() == wd.dtype());
              CHECK(bd.grad().dtype() == bd.dtype());
              check_on_gpu(wd.grad(), ref.dw, pt, what + " dweight", std::sqrt(double(M)));
              check_on_gpu(bd.grad(), ref.db, pt, what + " dbias", std::sqrt(double(M)));
            }
            if (res) check_on_gpu(rd.grad(), ref.dz, gpu_tol_for(t), what + " dresidual");
          }
    }
  }
}

TEST_CASE("batch_norm_add_relu on CUDA rejects what the CPU rejects") {
  if (!have_gpu("batch_norm_add_relu on CUDA rejects what the CPU rejects")) return;
  const Tensor x = Tensor::full({2, 4}, 1.0, DType::f32, gpu());
  CHECK_THROWS_WITH_AS(batch_norm_add_relu(x, Tensor::full({2, 4}, 1.0, DType::f32), Tensor(), Tensor(), Tensor(),
                                           Tensor(), true),
                       doctest::Contains("batch_norm_add_relu"), Error);
  CHECK_THROWS_WITH_AS(batch_norm_add_relu(x, Tensor::full({2, 4}, 1.0, DType::bf16, gpu()), Tensor(), Tensor(),
                                           Tensor(), Tensor(), true),
                       doctest::Contains("different dtypes"), Error);
  CHECK_THROWS_WITH_AS(batch_norm_relu(Tensor::full({1, 4}, 1.0, DType::f32, gpu()), Tensor(), Tensor(), Tensor(),
                                       Tensor(), true),
                       doctest::Contains("more than one value per channel"), Error);
}

}  // namespace
}  // namespace rt
