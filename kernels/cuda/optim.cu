// Fused SGD, AdamW and LARS over a list of parameters.
//
// Note [Bit-exact updates on the GPU]
// optim/update_cpu.cc rounds exactly where PyTorch does
// (Note [Matching PyTorch's rounding]): explicit std::fma where ATen fuses, nothing else
// fused (-ffp-contract=off). nvcc contracts a*b+c into an FMA by default, so these kernels
// spell every operation with a round-to-nearest intrinsic (__fmul_rn, __fadd_rn, __fdiv_rn,
// __fsqrt_rn and the double twins), which nvcc never contracts, and call fma() exactly where
// the CPU calls std::fma. The per-tensor scalars are computed on the host in double, like
// the CPU rule, and rounded to the parameter's type once. So f32 and f64 results equal the
// CPU's bit for bit.
//
// Launch shape: the multi-tensor apply (Note [Multi-tensor apply] in
// kernels/cuda/multi_tensor_plan.h), one launch for the whole list.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/grad_norm.h"
#include "kernels/cuda/multi_tensor_apply.cuh"
#include "kernels/cuda/optim.h"

namespace rt::cuda {
namespace {

// ---- rounding-explicit arithmetic --------------------------------------------------------
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double sqrt_rn(double a) { return __dsqrt_rn(a); }
__device__ __forceinline__ float fma_rn(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ __forceinline__ double fma_rn(double a, double b, double c) { return __fma_rn(a, b, c); }

// ---- ops: one launch for the list (Note [Multi-tensor apply]) ---------------------------

// Per-tensor scalars: the host's keys (equal keys share a scalar set) and what a launch carries.
struct SgdKey {
  double wd;
  int first;
  bool operator==(const SgdKey& o) const { return wd == o.wd && first == o.first; }
};
struct AdamWKey {
  double decay, bc2_sqrt, neg_step_size;
  bool operator==(const AdamWKey& o) const {
    return decay == o.decay && bc2_sqrt == o.bc2_sqrt && neg_step_size == o.neg_step_size;
  }
};
struct LarsKey {
  double wd;
  int adapt;
  bool operator==(const LarsKey& o) const { return wd == o.wd && adapt == o.adapt; }
};

// Operands: ptr[0] p, ptr[1] g, ptr[2] momentum buffer, ptr[3] bf16 copy of p (or null).
template <typename T>
struct SgdOp {
  SgdKey g[kMtaMaxGroups];
  double mom, one_minus_damp, neg_lr;
  const double* lr_on_device;  // null: neg_lr (SgdHyper::lr_on_device)
  const float* skip_if_set;    // SgdHyper::skip_if_set
  int momentum, nesterov;
  __device__ void operator()(const MtaRow& r, int64_t, int64_t begin, int64_t end) const {
    if (skip_if_set != nullptr && *skip_if_set != 0.0f) return;
    T* p = static_cast<T*>(r.ptr[0]);
    const T* gr = static_cast<const T*>(r.ptr[1]);
    T* buf = static_cast<T*>(r.ptr[2]);
    auto* p_bf16 = static_cast<__nv_bfloat16*>(r.ptr[3]);
    const SgdKey& k = g[r.group];
    const bool decay = k.wd != 0.0;
    const T wd = T(k.wd), m = T(mom), omd = T(one_minus_damp), nlr = T(lr_on_device ? -*lr_on_device : neg_lr);
    RT_MTA_FOR(i, begin, end) {
      const T pi = p[i];
      T d = decay ? fma_rn(pi, wd, gr[i]) : gr[i];
      if (momentum) {
        const T bb = k.first ? d : fma_rn(d, omd, mul_rn(buf[i], m));
        buf[i] = bb;
        d = nesterov ? fma_rn(bb, m, d) : bb;
      }
      const T np = fma_rn(d, nlr, pi);
      p[i] = np;
      if (p_bf16 != nullptr) p_bf16[i] = __float2bfloat16(float(np));
    }
  }
};

// Operands: p, g, exp_avg, exp_avg_sq, bf16 copy of p (or null).
template <typename T>
struct AdamWOp {
  AdamWKey g[kMtaMaxGroups];
  int set_of[kMtaMaxGroups];  // the list's distinct set each group is (AdamWHyper::scalars_on_device)
  const double* sets;         // null: g
  const int64_t* candidate;   // null: candidate 0 (AdamWHyper::candidate_on_device)
  const float* skip_if_set;   // AdamWHyper::skip_if_set
  int sets_per_candidate;
  double b1, one_minus_b1, b2, one_minus_b2, eps;
  __device__ void operator()(const MtaRow& r, int64_t, int64_t begin, int64_t end) const {
    if (skip_if_set != nullptr && *skip_if_set != 0.0f) return;
    T* p = static_cast<T*>(r.ptr[0]);
    const T* gr = static_cast<const T*>(r.ptr[1]);
    T* ea = static_cast<T*>(r.ptr[2]);
    T* eas = static_cast<T*>(r.ptr[3]);
    auto* p_bf16 = static_cast<__nv_bfloat16*>(r.ptr[4]);
    AdamWKey k = g[r.group];
    if (sets) {
      const int64_t c = candidate ? *candidate : 0;
      const double* d = sets + 3 * (c * sets_per_candidate + set_of[r.group]);
      k = AdamWKey{d[0], d[1], d[2]};
    }
    const T decay = T(k.decay), bc2_sqrt = T(k.bc2_sqrt), neg_step_size = T(k.neg_step_size);
    const T tb1 = T(b1), omb1 = T(one_minus_b1), tb2 = T(b2), omb2 = T(one_minus_b2), teps = T(eps);
    RT_MTA_FOR(i, begin, end) {
      const T gi = gr[i];
      const T pi = mul_rn(p[i], decay);                                  // param.mul_(1 - lr*wd)
      const T m = fma_rn(gi, omb1, mul_rn(ea[i], tb1));                  // exp_avg.mul_(b1).add_(g, 1-b1)
      const T v = fma_rn(mul_rn(omb2, gi), gi, mul_rn(eas[i], tb2));     // exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2)
      const T denom = add_rn(div_rn(sqrt_rn(v), bc2_sqrt), teps);        // sqrt(v) / bc2_sqrt + eps
      ea[i] = m;
      eas[i] = v;
      const T np = add_rn(pi, div_rn(mul_rn(neg_step_size, m), denom));  // addcdiv_(m, denom, -step_size)
      p[i] = np;
      if (p_bf16 != nullptr) p_bf16[i] = __float2bfloat16(float(np));
    }
  }
};

// LARS: every thread adds its tensor's chunk partials in index order (the same sums in
// every thread and block: Note [Deterministic norms] in grad_norm.cu), computes the trust
// ratio in double like optim/update_cpu.cc's lars_trust_ratio, then the fused update.
// Operands: p, g, momentum buffer; `norms`: the table of the norms' list (w0, g0, w1, g1, ...).
template <typename T>
struct LarsOp {
  LarsKey g[kMtaMaxGroups];
  double lr, mom, eta, eps;
  const double* lr_on_device;  // null: lr (LarsHyper::lr_on_device)
  const float* skip_if_set;    // LarsHyper::skip_if_set
  int nesterov;
  MtaView norms;
  const T* partials;  // [norms.chunks]
  __device__ double chunk_sum(int64_t row) const {
    const MtaRow& nr = norms.rows[row];
    double s = 0.0;
    for (int64_t c = nr.first_chunk, e = c + (nr.n + kMtaChunk - 1) / kMtaChunk; c < e; ++c) s += double(partials[c]);
    return s;
  }
  __device__ void operator()(const MtaRow& r, int64_t, int64_t begin, int64_t end) const {
    if (skip_if_set != nullptr && *skip_if_set != 0.0f) return;
    const LarsKey& k = g[r.group];
    const double base_lr = lr_on_device ? *lr_on_device : lr;
    double scaled_lr = base_lr;
    if (k.adapt) {
      const double w_norm = sqrt(chunk_sum(2 * int64_t(r.index))), g_norm = sqrt(chunk_sum(2 * int64_t(r.index) + 1));
      const double trust = w_norm > 0.0 && g_norm > 0.0 ? eta * w_norm / (g_norm + k.wd * w_norm + eps) : 1.0;
      scaled_lr = base_lr * trust;
    }
    T* p = static_cast<T*>(r.ptr[0]);
    const T* gr = static_cast<const T*>(r.ptr[1]);
    T* v = static_cast<T*>(r.ptr[2]);
    const bool decay = k.wd != 0.0;
    const T wd = T(k.wd), tlr = T(scaled_lr), m = T(mom);
    RT_MTA_FOR(i, begin, end) {
      const T pi = p[i];
      const T d = decay ? fma_rn(wd, pi, gr[i]) : gr[i];  // g + weight_decay * w
      const T step = mul_rn(tlr, d);                      // scaled_lr * (...)
      const T vi = fma_rn(m, v[i], step);                 // v = momentum * v + scaled_lr * (...)
      v[i] = vi;
      p[i] = add_rn(pi, -(nesterov ? fma_rn(m, vi, step) : vi));
    }
  }
};

// ---- launchers -------------------------------------------------------------------------

void check_master_dtype(DType t, const char* op) {
  RT_CHECK(t == DType::f32 || t == DType::f64, op, ": master weights must be f32 or f64, got ", dtype_name(t));
}

// Sets `table` to the list (operands per entry from `operands`, per-tensor keys from `key`)
// and fills a launch's scalar sets from the distinct keys.
template <typename Key, typename Entry, typename Operands, typename KeyOf>
std::vector<Key> set_table(MultiTensorTable& table, const std::vector<Entry>& list, Operands&& operands, KeyOf&& key,
                           cudaStream_t s) {
  std::vector<MtaRow> rows(list.size(), MtaRow{});
  std::vector<Key> keys;
  keys.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    operands(list[i], rows[i]);
    keys.push_back(key(list[i]));
  }
  std::vector<Key> distinct;
  const std::vector<int> ids = mta_set_ids(keys, distinct);
  table.set(std::move(rows), ids, s);
  return distinct;
}

template <typename Key>
auto fill_groups(const std::vector<Key>& distinct) {
  return [&distinct](auto& op, const std::vector<int>& groups) {
    for (size_t k = 0; k < groups.size(); ++k) op.g[k] = distinct[size_t(groups[k])];
  };
}

// AdamW's per-tensor scalars: Python-side values in double, as in optim/update_cpu.cc.
AdamWKey adamw_key(const AdamWTensor& e, const AdamWHyper& h) {
  const double step = double(e.step);
  const double bc1 = 1.0 - std::pow(h.beta1, step);
  const double bc2 = 1.0 - std::pow(h.beta2, step);
  // volatile: the host compiler must not fuse 1 - lr*wd into an FMA (the CPU rule is
  // compiled with -ffp-contract=off).
  const volatile double lr_wd = h.lr * e.weight_decay;
  return AdamWKey{1.0 - lr_wd, std::sqrt(bc2), -(h.lr / bc1)};
}

// adamw_write_scalars' values, by value in the launch's parameters.
struct ScalarSets {
  double v[3 * kAdamWDeviceSets];
  int n;
};
__global__ void write_scalars_kernel(ScalarSets sets, double* dst) {
  for (int i = int(threadIdx.x); i < sets.n; i += int(blockDim.x)) dst[i] = sets.v[i];
}

__global__ void count_if_set_kernel(const float* flag, int64_t* count) {
  if (*flag != 0.0f) *count += 1;
}
__global__ void take_count_kernel(int64_t* count, int64_t take) { *count -= take; }

}  // namespace

void sgd_update(DType t, const std::vector<SgdTensor>& list, const SgdHyper& h, MultiTensorTable& table,
                cudaStream_t s) {
  check_master_dtype(t, "sgd_update");
  for (const SgdTensor& e : list) {
    RT_CHECK(e.n >= 0, "sgd_update: negative element count ", e.n);
    RT_CHECK(e.n == 0 || (e.p && e.g && (h.momentum == 0.0 || e.buf)), "sgd_update: null pointer");
  }
  const std::vector<SgdKey> keys = set_table<SgdKey>(
      table, list,
      [](const SgdTensor& e, MtaRow& r) {
        r.ptr[0] = e.p;
        r.ptr[1] = const_cast<void*>(e.g);
        r.ptr[2] = e.buf;
        r.ptr[3] = e.p_bf16;
        r.n = e.n;
      },
      [](const SgdTensor& e) { return SgdKey{e.weight_decay, int(e.first_step)}; }, s);
  detail::dispatch_f32_f64(t, [&](auto z) {
    using T = decltype(z);
    SgdOp<T> op{};
    op.mom = h.momentum;
    op.one_minus_damp = 1.0 - h.dampening;
    op.neg_lr = -h.lr;
    op.lr_on_device = h.lr_on_device;
    op.skip_if_set = h.skip_if_set;
    op.momentum = h.momentum != 0.0;
    op.nesterov = h.nesterov;
    multi_tensor_apply(table, op, fill_groups(keys), 6.0, t == DType::f64, s);  // decay, momentum, step: 3 FMAs
  });
}

void adamw_update(DType t, const std::vector<AdamWTensor>& list, const AdamWHyper& h, MultiTensorTable& table,
                  cudaStream_t s) {
  check_master_dtype(t, "adamw_update");
  for (const AdamWTensor& e : list) {
    RT_CHECK(e.n >= 0, "adamw_update: negative element count ", e.n);
    RT_CHECK(e.n == 0 || (e.p && e.g && e.exp_avg && e.exp_avg_sq), "adamw_update: null pointer");
    RT_CHECK(e.step >= 1, "adamw_update: step must be >= 1, got ", e.step);
  }
  const std::vector<AdamWKey> keys = set_table<AdamWKey>(
      table, list,
      [](const AdamWTensor& e, MtaRow& r) {
        r.ptr[0] = e.p;
        r.ptr[1] = const_cast<void*>(e.g);
        r.ptr[2] = e.exp_avg;
        r.ptr[3] = e.exp_avg_sq;
        r.ptr[4] = e.p_bf16;
        r.n = e.n;
      },
      [&](const AdamWTensor& e) { return adamw_key(e, h); }, s);
  RT_CHECK(!h.scalars_on_device || keys.size() <= size_t(kAdamWDeviceSets), "adamw_update: ", keys.size(),
           " distinct scalar sets (weight decays x step counts), more than the ", kAdamWDeviceSets,
           " device memory holds");
  RT_CHECK(!h.candidate_on_device || h.scalars_on_device, "adamw_update: candidate_on_device needs scalars_on_device");
  detail::dispatch_f32_f64(t, [&](auto z) {
    using T = decltype(z);
    AdamWOp<T> op{};
    op.sets = h.scalars_on_device;
    op.candidate = h.candidate_on_device;
    op.skip_if_set = h.skip_if_set;
    op.sets_per_candidate = int(keys.size());
    op.b1 = h.beta1;
    op.one_minus_b1 = 1.0 - h.beta1;
    op.b2 = h.beta2;
    op.one_minus_b2 = 1.0 - h.beta2;
    op.eps = h.eps;
    const auto groups = [&keys](AdamWOp<T>& o, const std::vector<int>& ids) {
      fill_groups(keys)(o, ids);
      for (size_t k = 0; k < ids.size(); ++k) o.set_of[k] = ids[k];
    };
    // two moments, a square root, a division, the decay
    multi_tensor_apply(table, op, groups, 14.0, t == DType::f64, s);
  });
}

std::vector<double> adamw_scalar_sets(const std::vector<AdamWTensor>& list, const AdamWHyper& h, int candidates) {
  RT_CHECK(candidates >= 1, "adamw_scalar_sets: candidates must be >= 1, got ", candidates);
  std::vector<AdamWKey> keys, distinct;
  for (const AdamWTensor& e : list) keys.push_back(adamw_key(e, h));
  const std::vector<int> ids = mta_set_ids(keys, distinct);
  // The first tensor of each distinct set: candidate c's set is its key at step count - c.
  std::vector<size_t> first(distinct.size(), list.size());
  for (size_t i = 0; i < list.size(); ++i)
    if (first[size_t(ids[i])] == list.size()) first[size_t(ids[i])] = i;
  std::vector<double> out;
  for (int c = 0; c < candidates; ++c) {
    for (size_t d = 0; d < distinct.size(); ++d) {
      AdamWTensor e = list[first[d]];
      e.step = std::max<int64_t>(1, e.step - c);  // below 1: a candidate never taken (the count is at most c)
      const AdamWKey k = c == 0 ? distinct[d] : adamw_key(e, h);
      out.insert(out.end(), {k.decay, k.bc2_sqrt, k.neg_step_size});
    }
  }
  return out;
}

void adamw_write_scalars(const std::vector<double>& sets, double* dst, cudaStream_t s) {
  RT_CHECK(sets.size() % 3 == 0 && sets.size() <= size_t(3 * kAdamWDeviceSets), "adamw_write_scalars: ",
           sets.size() / 3, " scalar sets, at most ", kAdamWDeviceSets, " fit");
  RT_CHECK(dst, "adamw_write_scalars: null pointer");
  if (sets.empty()) return;
  ScalarSets v{};
  v.n = int(sets.size());
  std::copy(sets.begin(), sets.end(), v.v);
  RT_LAUNCH(1, 64, 0, s, write_scalars_kernel)(v, dst);
  CUDA_CHECK_LAUNCH();
}

void count_if_set(const float* flag, int64_t* count, cudaStream_t s) {
  RT_CHECK(flag && count, "count_if_set: null pointer");
  RT_LAUNCH(1, 1, 0, s, count_if_set_kernel)(flag, count);
  CUDA_CHECK_LAUNCH();
}

void take_count(int64_t* count, int64_t take, cudaStream_t s) {
  RT_CHECK(count, "take_count: null pointer");
  RT_LAUNCH(1, 1, 0, s, take_count_kernel)(count, take);
  CUDA_CHECK_LAUNCH();
}

int64_t lars_partials(const std::vector<LarsTensor>& list) {
  int64_t chunks = 0;
  for (const LarsTensor& e : list) chunks += e.adapt ? 2 * mta_chunks(e.n) : 0;
  return chunks;
}

void lars_update(DType t, const std::vector<LarsTensor>& list, const LarsHyper& h, LarsTables& tables, void* partials,
                 cudaStream_t s) {
  check_master_dtype(t, "lars_update");
  if (list.empty()) return;
  std::vector<const void*> x;  // [2 * count]: w0, g0, w1, g1, ...
  std::vector<int64_t> n;
  for (const LarsTensor& e : list) {
    RT_CHECK(e.n >= 0, "lars_update: negative element count ", e.n);
    RT_CHECK(e.n == 0 || (e.p && e.g && e.v), "lars_update: null pointer");
    // A tensor without the trust ratio needs no norms: its rows are empty (no chunks).
    x.push_back(e.p);
    x.push_back(e.g);
    n.push_back(e.adapt ? e.n : 0);
    n.push_back(e.adapt ? e.n : 0);
  }
  RT_CHECK(partials != nullptr || multi_tensor_chunks(n) == 0, "lars_update: null partials");
  sum_squares_partials(t, x, n, tables.norms, partials, s);
  const std::vector<LarsKey> keys = set_table<LarsKey>(
      tables.update, list,
      [](const LarsTensor& e, MtaRow& r) {
        r.ptr[0] = e.p;
        r.ptr[1] = const_cast<void*>(e.g);
        r.ptr[2] = e.v;
        r.n = e.n;
      },
      [](const LarsTensor& e) { return LarsKey{e.weight_decay, int(e.adapt)}; }, s);
  detail::dispatch_f32_f64(t, [&](auto z) {
    using T = decltype(z);
    LarsOp<T> op{};
    op.lr = h.lr;
    op.lr_on_device = h.lr_on_device;
    op.skip_if_set = h.skip_if_set;
    op.mom = h.momentum;
    op.eta = h.eta;
    op.eps = h.epsilon;
    op.nesterov = h.nesterov;
    op.norms = tables.norms.view();
    op.partials = static_cast<const T*>(partials);
    multi_tensor_apply(tables.update, op, fill_groups(keys), 6.0, t == DType::f64, s);
  });
  tables.norms.used_on(s);  // the update read its rows
}

}  // namespace rt::cuda
