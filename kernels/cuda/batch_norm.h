// batch_norm on CUDA: the twin of kernels/cpu/batch_norm.h, with the per-channel statistics
// kept on the device. mean/invstd hold the statistics type: f64 for f64 inputs,
// f32 otherwise (fp32 accumulation for f32/bf16/f16). Readable by the host compiler.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"
#include "kernels/cuda/stream.h"

namespace rt::cuda {

struct BatchNormGeom {
  int64_t N, C, S;  // S = spatial size (H*W; 1 for (N, C) inputs)
  bool nhwc;        // element (n, c, s) at (n*S + s)*C + c, else (n*C + c)*S + s
};

inline DType batch_norm_stat_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

// Note [Batch norm parameters in the statistics dtype]
// gamma and beta, and the gradients dgamma and dbeta, are in the statistics dtype above
// (f32, or f64 for f64 x), whatever x's: the kernels compute in it, so a bf16 or f16 x is
// normalised with the parameters as mixed precision keeps them (f32 masters, as PyTorch's
// batch norm takes an f32 weight with a bf16 input), and no cast launch is needed per layer
// either way (engine/ops/batch_norm.cc converts parameters of x's 16-bit dtype, C values).

// Device workspace (bytes) of batch_norm_stats and of batch_norm_backward(_relu) for this
// geometry and input dtype: the per-row-block partials of the two-stage reduction
// (Note [Two-stage channel reduction] in kernels/cuda/channel_reduce.cuh), and for the
// backward the 3*C dx coefficients. 16-byte aligned storage.
size_t batch_norm_stats_workspace_bytes(const BatchNormGeom& g, DType t);
size_t batch_norm_backward_workspace_bytes(const BatchNormGeom& g, DType t);

// Training statistics: mean[c] and invstd[c] = 1/sqrt(biased var + eps), in one pass over x
// (Welford states merged in a fixed order). When running_mean is non-null, also updates the
// running statistics in their own dtype `rt`: r = (1 - momentum) r + momentum v with the
// unbiased variance. Needs N*S > 1. `workspace`: batch_norm_stats_workspace_bytes.
void batch_norm_stats(const BatchNormGeom& g, DType t, const void* x, double eps, void* mean, void* invstd, DType rt,
                      void* running_mean, void* running_var, double momentum, void* workspace, cudaStream_t s);

// Training statistics from a convolution's per-channel sums
// (Note [Statistics from the convolution] in engine/ops/batch_norm.cc): sum[c] and sqsum[c]
// (f32, sum of y and of y^2 over the `count` values of channel c) give mean = sum / count and the biased variance
// max(sqsum / count - mean^2, 0), in double; then mean, invstd and the running statistics as
// batch_norm_stats writes them. Needs count > 1. No workspace: one thread per channel.
void batch_norm_stats_from_sums(int64_t C, DType t, int64_t count, const float* sum, const float* sqsum, double eps,
                                void* mean, void* invstd, DType rt, void* running_mean, void* running_var,
                                double momentum, cudaStream_t s);

// Eval statistics from the running ones: mean = running_mean, invstd = 1/sqrt(running_var + eps).
void batch_norm_eval_stats(int64_t C, DType rt, const void* running_mean, const void* running_var, double eps,
                           DType stat_t, void* mean, void* invstd, cudaStream_t s);

// y = (x - mean) * invstd * gamma + beta; gamma/beta may be null (1 and 0).
void batch_norm_apply(const BatchNormGeom& g, DType t, const void* x, const void* mean, const void* invstd,
                      const void* gamma, const void* beta, void* y, cudaStream_t s);

// Backward, the formulas of kernels/cpu/batch_norm.cc. dx, dgamma, dbeta may be null.
// `workspace`: batch_norm_backward_workspace_bytes.
void batch_norm_backward(const BatchNormGeom& g, DType t, const void* x, const void* dy, const void* mean,
                         const void* invstd, const void* gamma, bool training, void* dx, void* dgamma, void* dbeta,
                         void* workspace, cudaStream_t s);

// The fused tail of a ResNet block, as kernels/cpu/batch_norm.h
// (Note [Fused batch_norm + relu]): y = max(0, (x - mean) * invstd * gamma + beta + residual),
// residual may be null (0), in one pass (normalised in the statistics type, rounded once).
// mask (may be null: no backward to come) receives which outputs are positive
// (Note [Relu mask bits]), batch_norm_relu_mask_bytes(g, t) bytes.
void batch_norm_apply_relu(const BatchNormGeom& g, DType t, const void* x, const void* residual, const void* mean,
                           const void* invstd, const void* gamma, const void* beta, void* y, uint8_t* mask,
                           cudaStream_t s);

// Note [Relu mask bits]
// The backward of relu(bn(x) [+ residual]) needs only which outputs were positive. The
// forward writes that as bits, one byte per 16-byte pack of the output: byte p holds the
// W = 16 / sizeof(T) elements p*W .. p*W + W - 1, element p*W + k in bit k (the last byte
// covers the n % W elements left). The one thread that writes a pack (or, on the scalar
// path, the W elements of that pack) writes its byte, so no two threads share one. The
// backward reads 1/16 of the bytes it read when it took the mask from y (bf16 ResNet50: the
// two backward passes each read one bit instead of two bytes per element, kernel lab). A
// bit is set when the stored, rounded output is > 0, exactly the test it made on y: a
// value that rounds to zero in fp16 and a NaN are masked, as before.
size_t batch_norm_relu_mask_bytes(const BatchNormGeom& g, DType t);

// batch_norm_backward of dz = (bit set ? dy : 0), `mask` batch_norm_apply_relu's bits
// (Note [Relu mask bits]); dresidual (may be null) receives dz. dx, dgamma, dbeta may be
// null. `workspace`: batch_norm_backward_workspace_bytes.
void batch_norm_backward_relu(const BatchNormGeom& g, DType t, const void* x, const uint8_t* mask, const void* dy,
                              const void* mean, const void* invstd, const void* gamma, bool training, void* dx,
                              void* dgamma, void* dbeta, void* dresidual, void* workspace, cudaStream_t s);

// ---- two batch norms in one tail --------------------------------------------------------
// (Note [Two batch norms in one tail] in engine/ops/dual_batch_norm_add_relu.cc)

// One batch norm's per-channel arrays, in the statistics dtype: mean, invstd (as
// batch_norm_stats writes them), gamma and beta (may be null: 1 and 0).
struct BatchNormChannels {
  const void *mean, *invstd, *gamma, *beta;
};

// y = max(0, bn_a(x) + bn_b(r)) in one pass, bn_a(x) = (x - mean_a) * invstd_a * gamma_a +
// beta_a and bn_b(r) likewise, both in the statistics type, added unrounded, rounded once;
// x and r in one layout. mask (may be null) as batch_norm_apply_relu's.
void dual_batch_norm_apply_relu(const BatchNormGeom& g, DType t, const void* x, const BatchNormChannels& a,
                                const void* r, const BatchNormChannels& b, void* y, uint8_t* mask, cudaStream_t s);

// The backward of both from dz = (mask's bit set ? dy : 0), in two passes: one reduction of
// dz against x and r (sum(dz) shared), then dx and dr together. The sums and the
// coefficients are batch_norm_backward_relu's for each. dx, dr, the dgammas and dbetas may be
// null. `workspace`: dual_batch_norm_backward_workspace_bytes.
size_t dual_batch_norm_backward_workspace_bytes(const BatchNormGeom& g, DType t);
void dual_batch_norm_backward_relu(const BatchNormGeom& g, DType t, const uint8_t* mask, const void* dy,
                                   const void* x, const BatchNormChannels& a, const void* r,
                                   const BatchNormChannels& b, bool training, void* dx, void* dgamma_a,
                                   void* dbeta_a, void* dr, void* dgamma_b, void* dbeta_b, void* workspace,
                                   cudaStream_t s);

// ---- batch norm + relu as the next convolution's prologue ------------------------------
// (Note [Batch norm as the next convolution's prologue] in engine/ops/batch_norm_relu_conv2d.cc)

// scale = gamma * invstd, bias = beta - mean * scale per channel, f32, each operation
// rounded once (the twin of cpu::batch_norm_prologue_coefs): the convolution's prologue
// then computes relu(x * scale + bias). gamma, beta may be null (1 and 0).
void batch_norm_prologue_coefs(int64_t C, const float* mean, const float* invstd, const float* gamma,
                               const float* beta, float* scale, float* bias, cudaStream_t s);

// batch_norm_backward of dz = (x * scale + bias > 0 ? dy : 0), the test the prologue's relu
// made, recomputed from x in f32 with one rounding per operation (cpu::prologue_keeps): no
// mask is stored. x f32, bf16 or f16; dx, dgamma, dbeta may be null. `workspace`:
// batch_norm_backward_workspace_bytes.
void batch_norm_backward_relu_prologue(const BatchNormGeom& g, DType t, const void* x, const float* scale,
                                       const float* bias, const void* dy, const void* mean, const void* invstd,
                                       const void* gamma, bool training, void* dx, void* dgamma, void* dbeta,
                                       void* workspace, cudaStream_t s);

// ---- synchronised batch norm (Note [Synchronised batch norm] in engine/ops/batch_norm_sync.h) --
// The statistics and the backward's sums in three steps each; the middle one, an all-gather of
// a small f64 block across processes, is the caller's. Nothing is read on the host, so the
// steps queue on the stream with the collective between them.

// Forward, step 1: this process's block = count, mean[C], m2[C] (f64, 1 + 2C values; m2 =
// sum((x - mean)^2)), from the same one-pass reduction as batch_norm_stats. `workspace`:
// batch_norm_stats_workspace_bytes.
void batch_norm_local_moments(const BatchNormGeom& g, DType t, const void* x, double* block, void* workspace,
                              cudaStream_t s);

// Forward, step 3: k processes' blocks (k x (1 + 2C), process order) merged with Chan's
// formula in process order, so every process gets the same bits: mean and invstd in the
// statistics dtype of `t`, the global count in count[0] (f64, for the backward), and the
// running statistics as batch_norm_stats updates them (when running_mean is non-null).
void batch_norm_merge_moments(int64_t C, DType t, int k, const double* blocks, double eps, void* mean, void* invstd,
                              double* count, DType rt, void* running_mean, void* running_var, double momentum,
                              cudaStream_t s);

// Backward, step 1: this process's sums = sum_dz[C], sum_dz_xmu[C] (f64; mean is the global
// one), its own dgamma and dbeta, and dz in dresidual when mask is given (the fused op; see
// batch_norm_backward_relu). Any of mask, dgamma, dbeta, dresidual may be null. `workspace`:
// batch_norm_backward_workspace_bytes.
void batch_norm_backward_sums(const BatchNormGeom& g, DType t, const void* x, const uint8_t* mask, const void* dy,
                              const void* mean, const void* invstd, void* dgamma, void* dbeta, void* dresidual,
                              double* sums, void* workspace, cudaStream_t s);

// Backward, step 3: dx (training) from k processes' sums (k x 2C, added in process order)
// and the global count (count[0]). dz = dy, or dy where mask's bit is set and 0 elsewhere when
// mask is non-null. `workspace`: batch_norm_backward_workspace_bytes (the same one step 1 used
// may be reused).
void batch_norm_backward_dx_from_sums(const BatchNormGeom& g, DType t, const void* x, const uint8_t* mask,
                                      const void* dy, const void* mean, const void* invstd, const void* gamma, int k,
                                      const double* sums, const double* count, void* dx, void* workspace,
                                      cudaStream_t s);

}  // namespace rt::cuda
