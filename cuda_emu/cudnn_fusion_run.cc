// The fused graphs' computations around the convolution (cudnn_fusion.h): the prologue that
// makes the convolution's input and the statistics of its output, with the numerics that
// Note [Fused graphs the fake runs] in cudnn_finalize.cc sets down.
#include <cstring>

#include "cuda_emu/cudnn_fusion.h"
#include "cuda_emu/cudnn_numbers.h"

namespace rt::emu::cudnn {
namespace {

// Element i of a tensor of the types fused graphs take (f32, bf16, f16), as a float.
float load(const void* base, int64_t i, cudnnDataType_t t) {
  const char* p = static_cast<const char*>(base);
  if (t == CUDNN_DATA_FLOAT) {
    float v;
    std::memcpy(&v, p + i * 4, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, p + i * 2, 2);
  return t == CUDNN_DATA_HALF ? f16_to_float(h) : bf16_to_float(h);
}

void store(void* base, int64_t i, cudnnDataType_t t, float v) {
  char* p = static_cast<char*>(base);
  if (t == CUDNN_DATA_FLOAT) {
    std::memcpy(p + i * 4, &v, 4);
    return;
  }
  const uint16_t h = t == CUDNN_DATA_HALF ? float_to_f16(v) : float_to_bf16(v);
  std::memcpy(p + i * 2, &h, 2);
}

// One float operation, rounded once to float. The volatile store makes the result a value
// the compiler cannot see through: under -march=x86-64-v3 GCC contracts a multiply and the
// add after it into one FMA (one rounding instead of two) even across inlined calls, and
// even when written through double (it narrows float(double(a) * double(b)) to a float
// multiply first), and the prologue's relu would keep an element at the kink that the mask
// batch_norm_backward_relu_prologue recomputes drops (found when the CPU reference written
// the same way failed its kink case in tests/batch_norm_relu_conv2d_test).
float rounded(float v) {
  volatile float r = v;
  return r;
}
float mul_f(float a, float b) { return rounded(a * b); }
float add_f(float a, float b) { return rounded(a + b); }

}  // namespace

std::vector<uint8_t> run_prologue(const ConvProblem& p, const Fusion& f, const void* x, const void* scale,
                                  const void* bias) {
  const TensorInfo &X = f.x->as<TensorInfo>(), &S = f.scale->as<TensorInfo>(), &B = f.bias->as<TensorInfo>();
  const int64_t n = extent_elements(X.dims.data(), X.strides.data(), 4);
  std::vector<uint8_t> out(size_t(n) * dtype_size(p.dtype));
  for (int64_t c = 0; c < p.C; ++c) {
    const float s = load(scale, c * S.strides[1], S.dtype), b = load(bias, c * B.strides[1], B.dtype);
    for (int64_t in = 0; in < p.N; ++in)
      for (int64_t h = 0; h < p.H; ++h)
        for (int64_t w = 0; w < p.W; ++w) {
          const int64_t i = in * X.strides[0] + c * X.strides[1] + h * X.strides[2] + w * X.strides[3];
          float v = add_f(mul_f(load(x, i, X.dtype), s), b);
          if (f.relu) v = v > 0.0f ? v : 0.0f;  // max(v, 0); NaN gives 0 (Note [Pointwise descriptors the fake takes])
          store(out.data(), i, p.dtype, v);     // what the tensor cores read: the storage type
        }
  }
  return out;
}

void run_genstats(const ConvProblem& p, const Fusion& f, const void* y, void* sum, void* sqsum) {
  const TensorInfo &S = f.sum->as<TensorInfo>(), &Q = f.sqsum->as<TensorInfo>();
  for (int64_t o = 0; o < p.O; ++o) {
    double s = 0, q = 0;
    for (int64_t n = 0; n < p.N; ++n)
      for (int64_t h = 0; h < p.HO; ++h)
        for (int64_t w = 0; w < p.WO; ++w) {
          const double v = load(y, n * p.ys[0] + o * p.ys[1] + h * p.ys[2] + w * p.ys[3], p.dtype);
          s += v;
          q += v * v;
        }
    store(sum, o * S.strides[1], CUDNN_DATA_FLOAT, float(s));
    store(sqsum, o * Q.strides[1], CUDNN_DATA_FLOAT, float(q));
  }
}

}  // namespace rt::emu::cudnn
