// The direct convolution of the cuDNN fake (cudnn_conv.h). The operands are first gathered
// through their strides into dense accumulator-typed copies (NCHW, OIHW), so that every inner
// loop walks a row with unit stride on the side it writes; the result is scattered back
// through the output's strides with alpha/beta and one rounding to the storage type.
//
// Note [Summation order]
// Each output element is one sequential sum, in a fixed order (forward: over input channel,
// kh, kw; backward data: output channel, kh, kw; backward filter: batch and output row,
// output column), with the rounding functor applied after every addition. That is what makes
// storage-type accumulation mean "a rounding per addition" and keeps the engines
// deterministic (runs repeat bit for bit) unless Numerics::splits asks for partial sums
// combined in a rotating order.
#include "cuda_emu/cudnn_conv.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <vector>

#include "cuda_emu/cudnn_numbers.h"

namespace rt::emu::cudnn {
namespace {

struct NoRound {
  template <typename A>
  A operator()(A a) const {
    return a;
  }
};
struct RoundBF16 {
  float operator()(float a) const { return round_bf16(a); }
};
struct RoundF16 {
  float operator()(float a) const { return round_f16(a); }
};

// One stored element as a double, through the engine's input conversion.
double load(const void* base, int64_t i, cudnnDataType_t t, Numerics::Input in) {
  switch (t) {
    case CUDNN_DATA_FLOAT: {
      float v;
      std::memcpy(&v, static_cast<const char*>(base) + i * 4, 4);
      if (in == Numerics::Input::tf32) v = round_tf32(v);
      if (in == Numerics::Input::down_convert) v = round_f16(v);
      return v;
    }
    case CUDNN_DATA_DOUBLE: {
      double v;
      std::memcpy(&v, static_cast<const char*>(base) + i * 8, 8);
      return in == Numerics::Input::down_convert ? double(float(v)) : v;
    }
    case CUDNN_DATA_BFLOAT16:
    case CUDNN_DATA_HALF: {
      uint16_t h;
      std::memcpy(&h, static_cast<const char*>(base) + i * 2, 2);
      return t == CUDNN_DATA_HALF ? f16_to_float(h) : bf16_to_float(h);
    }
    default:
      return 0;  // run_conv is only called for the four types (engine support, Note [Fake engine support])
  }
}

void store(void* base, int64_t i, cudnnDataType_t t, double v) {
  char* p = static_cast<char*>(base);
  switch (t) {
    case CUDNN_DATA_FLOAT: {
      const float f = float(v);
      std::memcpy(p + i * 4, &f, 4);
      break;
    }
    case CUDNN_DATA_DOUBLE:
      std::memcpy(p + i * 8, &v, 8);
      break;
    case CUDNN_DATA_BFLOAT16:
    case CUDNN_DATA_HALF: {
      const uint16_t h = t == CUDNN_DATA_HALF ? float_to_f16(float(v)) : float_to_bf16(float(v));
      std::memcpy(p + i * 2, &h, 2);
      break;
    }
    default:
      break;
  }
}

// A dense (d0, d1, d2, d3) copy of the strided operand at `base`; `flip` reverses the last
// two dims (a CUDNN_CONVOLUTION filter).
template <typename Acc>
std::vector<Acc> gather(const void* base, cudnnDataType_t t, Numerics::Input in, std::array<int64_t, 4> d,
                        const std::array<int64_t, 4>& s, bool flip) {
  std::vector<Acc> out(size_t(d[0] * d[1] * d[2] * d[3]));
#pragma omp parallel for collapse(2) if (out.size() > 65536)
  for (int64_t i0 = 0; i0 < d[0]; ++i0)
    for (int64_t i1 = 0; i1 < d[1]; ++i1)
      for (int64_t i2 = 0; i2 < d[2]; ++i2) {
        Acc* row = out.data() + ((i0 * d[1] + i1) * d[2] + (flip ? d[2] - 1 - i2 : i2)) * d[3];
        const int64_t at = i0 * s[0] + i1 * s[1] + i2 * s[2];
        for (int64_t i3 = 0; i3 < d[3]; ++i3) row[flip ? d[3] - 1 - i3 : i3] = Acc(load(base, at + i3 * s[3], t, in));
      }
  return out;
}

template <typename Acc>
void scatter(void* base, cudnnDataType_t t, const std::vector<Acc>& v, std::array<int64_t, 4> d,
             const std::array<int64_t, 4>& s, bool flip, double alpha, double beta) {
#pragma omp parallel for collapse(2) if (v.size() > 65536)
  for (int64_t i0 = 0; i0 < d[0]; ++i0)
    for (int64_t i1 = 0; i1 < d[1]; ++i1)
      for (int64_t i2 = 0; i2 < d[2]; ++i2) {
        const Acc* row = v.data() + ((i0 * d[1] + i1) * d[2] + (flip ? d[2] - 1 - i2 : i2)) * d[3];
        const int64_t at = i0 * s[0] + i1 * s[1] + i2 * s[2];
        for (int64_t i3 = 0; i3 < d[3]; ++i3) {
          const int64_t j = at + i3 * s[3];
          double r = alpha * double(row[flip ? d[3] - 1 - i3 : i3]);
          if (beta != 0) r += beta * load(base, j, t, Numerics::Input::exact);  // beta == 0: never read
          store(base, j, t, r);
        }
      }
}

// For each kernel column kw, the output columns [lo, hi) whose input column
// ow * sw - pw + kw * dw lies inside [0, W).
struct ColumnRanges {
  std::vector<int64_t> lo, hi;
  explicit ColumnRanges(const ConvProblem& p) : lo(size_t(p.KW)), hi(size_t(p.KW)) {
    for (int64_t kw = 0; kw < p.KW; ++kw) {
      int64_t a = 0, b = p.WO;
      while (a < b && a * p.sw - p.pw + kw * p.dw < 0) ++a;
      while (b > a && (b - 1) * p.sw - p.pw + kw * p.dw >= p.W) --b;
      lo[size_t(kw)] = a, hi[size_t(kw)] = b;
    }
  }
};

// y[n, o] += over c in [c0, c1), kh, kw (Note [Summation order]).
template <typename Acc, typename R>
void forward(const ConvProblem& p, const Acc* x, const Acc* w, int64_t c0, int64_t c1, Acc* y, R round) {
  const ColumnRanges cols(p);
  const int64_t Cg = p.C / p.groups, Og = p.O / p.groups;
#pragma omp parallel for collapse(2)
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t o = 0; o < p.O; ++o) {
      Acc* yo = y + (n * p.O + o) * p.HO * p.WO;
      const int64_t g = o / Og;
      for (int64_t c = c0; c < c1; ++c) {
        const Acc* xc = x + (n * p.C + g * Cg + c) * p.H * p.W;
        const Acc* wk = w + (o * Cg + c) * p.KH * p.KW;
        for (int64_t kh = 0; kh < p.KH; ++kh)
          for (int64_t kw = 0; kw < p.KW; ++kw) {
            const Acc wv = wk[kh * p.KW + kw];
            const int64_t lo = cols.lo[size_t(kw)], hi = cols.hi[size_t(kw)], off = kw * p.dw - p.pw;
            for (int64_t oh = 0; oh < p.HO; ++oh) {
              const int64_t ih = oh * p.sh - p.ph + kh * p.dh;
              if (ih < 0 || ih >= p.H) continue;
              const Acc* xr = xc + ih * p.W;
              Acc* yr = yo + oh * p.WO;
              if (p.sw == 1)  // unit stride: vectorizable
                for (int64_t ow = lo; ow < hi; ++ow) yr[ow] = round(yr[ow] + wv * xr[ow + off]);
              else
                for (int64_t ow = lo; ow < hi; ++ow) yr[ow] = round(yr[ow] + wv * xr[ow * p.sw + off]);
            }
          }
      }
    }
}

// dx[n, c] += over o in the group's [o0, o1), kh, kw (Note [Summation order]).
template <typename Acc, typename R>
void backward_data(const ConvProblem& p, const Acc* dy, const Acc* w, int64_t o0, int64_t o1, Acc* dx, R round) {
  const ColumnRanges cols(p);
  const int64_t Cg = p.C / p.groups, Og = p.O / p.groups;
#pragma omp parallel for collapse(2)
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t c = 0; c < p.C; ++c) {
      Acc* xo = dx + (n * p.C + c) * p.H * p.W;
      const int64_t g = c / Cg, cg = c % Cg;
      for (int64_t oo = o0; oo < o1; ++oo) {
        const int64_t o = g * Og + oo;
        const Acc* dyo = dy + (n * p.O + o) * p.HO * p.WO;
        const Acc* wk = w + (o * Cg + cg) * p.KH * p.KW;
        for (int64_t kh = 0; kh < p.KH; ++kh)
          for (int64_t kw = 0; kw < p.KW; ++kw) {
            const Acc wv = wk[kh * p.KW + kw];
            const int64_t lo = cols.lo[size_t(kw)], hi = cols.hi[size_t(kw)], off = kw * p.dw - p.pw;
            for (int64_t oh = 0; oh < p.HO; ++oh) {
              const int64_t ih = oh * p.sh - p.ph + kh * p.dh;
              if (ih < 0 || ih >= p.H) continue;
              Acc* xr = xo + ih * p.W;
              const Acc* dr = dyo + oh * p.WO;
              if (p.sw == 1)  // unit stride: vectorizable
                for (int64_t ow = lo; ow < hi; ++ow) xr[ow + off] = round(xr[ow + off] + wv * dr[ow]);
              else
                for (int64_t ow = lo; ow < hi; ++ow) xr[ow * p.sw + off] = round(xr[ow * p.sw + off] + wv * dr[ow]);
            }
          }
      }
    }
}

// dw[o, c, kh, kw] = over the output rows r = n * HO + oh in [r0, r1), then ow
// (Note [Summation order]). The KW sums of one kernel row advance together (independent
// chains: the sums are latency-bound), each still in that order.
template <typename Acc, typename R>
void backward_filter(const ConvProblem& p, const Acc* x, const Acc* dy, int64_t r0, int64_t r1, Acc* dw, R round) {
  const ColumnRanges cols(p);
  const int64_t Cg = p.C / p.groups, Og = p.O / p.groups;
  // Output columns where every kw is inside the input: [all_lo, all_hi).
  int64_t all_lo = 0, all_hi = p.WO;
  for (int64_t kw = 0; kw < p.KW; ++kw)
    all_lo = std::max(all_lo, cols.lo[size_t(kw)]), all_hi = std::min(all_hi, cols.hi[size_t(kw)]);
  all_hi = std::max(all_hi, all_lo);
#pragma omp parallel for collapse(2)
  for (int64_t o = 0; o < p.O; ++o)
    for (int64_t cg = 0; cg < Cg; ++cg) {
      const int64_t c = o / Og * Cg + cg;
      std::vector<Acc> acc(size_t(p.KH * p.KW), Acc(0));
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t n = r / p.HO, oh = r % p.HO;
        const Acc* dr = dy + ((n * p.O + o) * p.HO + oh) * p.WO;
        for (int64_t kh = 0; kh < p.KH; ++kh) {
          const int64_t ih = oh * p.sh - p.ph + kh * p.dh;
          if (ih < 0 || ih >= p.H) continue;
          const int64_t xrow = ((n * p.C + c) * p.H + ih) * p.W - p.pw;  // + ow * sw + kw * dw: inside the row
          Acc* a = acc.data() + kh * p.KW;
          auto column = [&](int64_t ow, int64_t kw) { a[kw] = round(a[kw] + dr[ow] * x[xrow + ow * p.sw + kw * p.dw]); };
          for (int64_t ow = 0; ow < all_lo; ++ow)
            for (int64_t kw = 0; kw < p.KW; ++kw)
              if (ow >= cols.lo[size_t(kw)] && ow < cols.hi[size_t(kw)]) column(ow, kw);
          for (int64_t ow = all_lo; ow < all_hi; ++ow)
            for (int64_t kw = 0; kw < p.KW; ++kw) column(ow, kw);
          for (int64_t ow = all_hi; ow < p.WO; ++ow)
            for (int64_t kw = 0; kw < p.KW; ++kw)
              if (ow >= cols.lo[size_t(kw)] && ow < cols.hi[size_t(kw)]) column(ow, kw);
        }
      }
      std::copy(acc.begin(), acc.end(), dw + (o * Cg + cg) * p.KH * p.KW);
    }
}

template <typename Acc, typename R>
void run_typed(const ConvProblem& p, const Numerics& num, const void* x, const void* w, const void* y, double alpha,
               double beta, R round) {
  const int64_t Cg = p.C / p.groups, Og = p.O / p.groups;
  const std::array<int64_t, 4> xd{p.N, p.C, p.H, p.W}, wd{p.O, Cg, p.KH, p.KW}, yd{p.N, p.O, p.HO, p.WO};
  // The reduction each operation splits (Numerics::splits), and the size of its result.
  const int64_t red = p.op == ConvOp::forward ? Cg : p.op == ConvOp::backward_data ? Og : p.N * p.HO;
  const std::array<int64_t, 4>& od = p.op == ConvOp::forward ? yd : p.op == ConvOp::backward_data ? xd : wd;
  const size_t out_n = size_t(od[0] * od[1] * od[2] * od[3]);
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(num.splits, red));
  std::vector<std::vector<Acc>> partial(size_t(parts), std::vector<Acc>(out_n, Acc(0)));
  {
    // The inputs as dense copies (the filter flipped for CUDNN_CONVOLUTION, Note [Flipped filters]).
    std::vector<Acc> a, b;
    switch (p.op) {
      case ConvOp::forward:
        a = gather<Acc>(x, p.dtype, num.input, xd, p.xs, false);
        b = gather<Acc>(w, p.dtype, num.input, wd, p.ws, p.flip);
        break;
      case ConvOp::backward_data:
        a = gather<Acc>(y, p.dtype, num.input, yd, p.ys, false);
        b = gather<Acc>(w, p.dtype, num.input, wd, p.ws, p.flip);
        break;
      case ConvOp::backward_filter:
        a = gather<Acc>(x, p.dtype, num.input, xd, p.xs, false);
        b = gather<Acc>(y, p.dtype, num.input, yd, p.ys, false);
        break;
    }
    for (int64_t k = 0; k < parts; ++k) {
      const int64_t r0 = red * k / parts, r1 = red * (k + 1) / parts;
      Acc* out = partial[size_t(k)].data();
      switch (p.op) {
        case ConvOp::forward:
          forward(p, a.data(), b.data(), r0, r1, out, round);
          break;
        case ConvOp::backward_data:
          backward_data(p, a.data(), b.data(), r0, r1, out, round);
          break;
        case ConvOp::backward_filter:
          backward_filter(p, a.data(), b.data(), r0, r1, out, round);
          break;
      }
    }
  }
  // Partial sums added in the rotated order, as atomics arriving in another order would.
  std::vector<Acc>& sum = partial[size_t(num.rotation % uint64_t(parts))];
  for (int64_t j = 1; j < parts; ++j) {
    const std::vector<Acc>& add = partial[size_t((num.rotation + uint64_t(j)) % uint64_t(parts))];
    for (size_t i = 0; i < out_n; ++i) sum[i] = round(sum[i] + add[i]);
  }
  // dw is the gradient of the flipped filter the sums used (Note [Flipped filters]).
  switch (p.op) {
    case ConvOp::forward:
      scatter(const_cast<void*>(y), p.dtype, sum, yd, p.ys, false, alpha, beta);
      break;
    case ConvOp::backward_data:
      scatter(const_cast<void*>(x), p.dtype, sum, xd, p.xs, false, alpha, beta);
      break;
    case ConvOp::backward_filter:
      scatter(const_cast<void*>(w), p.dtype, sum, wd, p.ws, p.flip, alpha, beta);
      break;
  }
}

}  // namespace

const char* conv_op_name(ConvOp op) {
  switch (op) {
    case ConvOp::forward:
      return "forward";
    case ConvOp::backward_data:
      return "backward data";
    case ConvOp::backward_filter:
      return "backward filter";
  }
  return "?";
}

std::string ConvProblem::str() const {
  const char* t = dtype == CUDNN_DATA_FLOAT    ? "f32"
                  : dtype == CUDNN_DATA_DOUBLE ? "f64"
                  : dtype == CUDNN_DATA_HALF   ? "f16"
                  : dtype == CUDNN_DATA_BFLOAT16 ? "bf16"
                                                 : "?";
  std::ostringstream os;
  os << conv_op_name(op) << " " << t << " x(" << N << ", " << C << ", " << H << ", " << W << ") w(" << O << ", "
     << C / groups << ", " << KH << ", " << KW << ") y(" << N << ", " << O << ", " << HO << ", " << WO << ") stride ("
     << sh << ", " << sw << ") padding (" << ph << ", " << pw << ") dilation (" << dh << ", " << dw << ") groups "
     << groups << (flip ? " convolution mode" : "");
  return os.str();
}

size_t dtype_size(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_FLOAT:
      return 4;
    case CUDNN_DATA_DOUBLE:
      return 8;
    case CUDNN_DATA_HALF:
    case CUDNN_DATA_BFLOAT16:
      return 2;
    default:
      return 0;
  }
}

int64_t extent_elements(const int64_t* dims, const int64_t* strides, int n) {
  int64_t e = 1;
  for (int i = 0; i < n; ++i) e += (dims[i] - 1) * strides[i];
  return e;
}

// Note [Flipped filters]
// CUDNN_CONVOLUTION applies w[kh][kw] at the mirrored tap (KH-1-kh, KW-1-kw) of
// cross-correlation; the fake gathers the filter mirrored and runs the cross-correlation,
// and mirrors dw back when it scatters it.
void run_conv(const ConvProblem& p, const Numerics& num, const void* x, const void* w, const void* y, double alpha,
              double beta) {
  switch (p.dtype) {
    case CUDNN_DATA_DOUBLE:
      return run_typed<double>(p, num, x, w, y, alpha, beta, NoRound{});
    case CUDNN_DATA_FLOAT:
      if (num.storage_accumulation || num.splits > 1) return run_typed<float>(p, num, x, w, y, alpha, beta, NoRound{});
      return run_typed<double>(p, num, x, w, y, alpha, beta, NoRound{});
    case CUDNN_DATA_BFLOAT16:
      if (num.storage_accumulation) return run_typed<float>(p, num, x, w, y, alpha, beta, RoundBF16{});
      return run_typed<float>(p, num, x, w, y, alpha, beta, NoRound{});
    case CUDNN_DATA_HALF:
      if (num.storage_accumulation) return run_typed<float>(p, num, x, w, y, alpha, beta, RoundF16{});
      return run_typed<float>(p, num, x, w, y, alpha, beta, NoRound{});
    default:
      return;
  }
}

}  // namespace rt::emu::cudnn
