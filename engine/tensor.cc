#include "engine/tensor.h"

#include <cstring>
#include <sstream>

#include "engine/autograd.h"
#include "engine/profiler.h"
#include "engine/stream.h"
#include "kernels/cuda/cast.h"
#include "kernels/cuda/relayout.h"
#include "kernels/cuda/runtime.h"

namespace rt {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;  // of the non-zero dims
  bool zero = false;
  for (int64_t d : s) {
    if (d == 0) zero = true;
    else if (__builtin_mul_overflow(n, d, &n))
      RT_FAIL("shape ", shape_str(s), " is too large: its element count does not fit in int64");
  }
  return zero ? 0 : n;
}

int64_t shape_nbytes(const Shape& s, DType t) {
  const int64_t n = shape_numel(s);
  int64_t bytes = 0;
  if (__builtin_mul_overflow(n, int64_t(dtype_size(t)), &bytes))
    RT_FAIL("shape ", shape_str(s), " of ", dtype_name(t), " is too large: ", n, " elements of ", dtype_size(t),
            " bytes do not fit in int64");
  return bytes;
}

const char* format_name(MemoryFormat f) { return f == MemoryFormat::contiguous ? "contiguous" : "channels_last"; }

std::vector<int64_t> strides_of(const Shape& shape, MemoryFormat format) {
  std::vector<int64_t> st(shape.size());
  if (format == MemoryFormat::channels_last) {  // N, H, W, C in memory
    const int64_t C = shape[1], H = shape[2], W = shape[3];
    st = {H * W * C, 1, W * C, C};
    return st;
  }
  int64_t s = 1;
  for (int i = int(shape.size()) - 1; i >= 0; --i) {
    st[i] = s;
    s *= shape[i];
  }
  return st;
}

Storage::Storage(size_t nbytes, Device dev) : bytes(nbytes), device(dev), allocator(&allocator_for(dev)) {
  data = allocator->allocate(nbytes);
}
Storage::Storage(size_t nbytes, Allocator& a) : bytes(nbytes), device(a.device()), allocator(&a) {
  data = allocator->allocate(nbytes);
}
Storage::~Storage() {
  if (data) allocator->deallocate(data, bytes);
}

// ---- creation -----------------------------------------------------------------------

Tensor Tensor::empty_pinned(const Shape& shape, DType dtype) {
  for (int64_t d : shape) RT_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  const int64_t bytes = shape_nbytes(shape, dtype);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(size_t(bytes), pinned_host_allocator());
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(impl);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, MemoryFormat format) {
  for (int64_t d : shape) RT_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  RT_CHECK(format == MemoryFormat::contiguous || shape.size() == 4, "channels_last needs a 4-D shape, got ",
           shape_str(shape));
  const int64_t bytes = shape_nbytes(shape, dtype);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(size_t(bytes), device);
  impl->shape = shape;
  impl->dtype = dtype;
  impl->format = format;
  return Tensor(std::move(impl));
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device, MemoryFormat format) {
  Tensor t = empty(shape, dtype, device, format);
  t.fill_(value);
  return t;
}

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  RT_CHECK(int64_t(values.size()) == shape_numel(shape), "from_vector: ", values.size(),
           " values do not fill shape ", shape_str(shape), " (", shape_numel(shape), " elements)");
  Tensor t = empty(shape, dtype_of<T>::value);
  // An empty vector's data() may be null, which memcpy may not take even for 0 bytes (UBSan).
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t.to(device);
}
template Tensor Tensor::from_vector(const std::vector<float>&, const Shape&, Device);
template Tensor Tensor::from_vector(const std::vector<double>&, const Shape&, Device);
template Tensor Tensor::from_vector(const std::vector<int32_t>&, const Shape&, Device);
template Tensor Tensor::from_vector(const std::vector<int64_t>&, const Shape&, Device);
template Tensor Tensor::from_vector(const std::vector<uint8_t>&, const Shape&, Device);

// ---- properties ---------------------------------------------------------------------

int64_t Tensor::size(int dim) const {
  const int n = ndim();
  const int d = dim < 0 ? dim + n : dim;
  RT_CHECK(d >= 0 && d < n, "dimension ", dim, " out of range for a ", n, "-D tensor ", shape_str(shape()));
  return shape()[d];
}

std::string Tensor::str() const {
  if (!defined()) return "undefined";
  return detail::cat(dtype_name(dtype()), shape_str(shape()), format() == MemoryFormat::channels_last ? " channels_last " : " ",
                     device().str());
}

void* Tensor::raw_data() const {
  const TensorImpl& t = impl();
  return static_cast<char*>(t.storage->data) + t.offset * int64_t(dtype_size(t.dtype));
}

// ---- host-side conversion -------------------------------------------------------------

namespace {

double load_f(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::i32: return static_cast<const int32_t*>(p)[i];
    case DType::i64: return double(static_cast<const int64_t*>(p)[i]);
    case DType::u8: return static_cast<const uint8_t*>(p)[i];
  }
  return 0;
}

void store_f(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = float(v); break;
    case DType::f64: static_cast<double*>(p)[i] = v; break;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(float(v)); break;
    case DType::f16: static_cast<uint16_t*>(p)[i] = f32_to_f16(float(v)); break;
    case DType::i32: static_cast<int32_t*>(p)[i] = int32_t(v); break;
    case DType::i64: static_cast<int64_t*>(p)[i] = int64_t(v); break;
    case DType::u8: static_cast<uint8_t*>(p)[i] = uint8_t(v); break;
  }
}

int64_t load_i(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::i32: return static_cast<const int32_t*>(p)[i];
    case DType::i64: return static_cast<const int64_t*>(p)[i];
    case DType::u8: return static_cast<const uint8_t*>(p)[i];
    default: return int64_t(load_f(p, t, i));
  }
}

void store_i(void* p, DType t, int64_t i, int64_t v) {
  switch (t) {
    case DType::i32: static_cast<int32_t*>(p)[i] = int32_t(v); break;
    case DType::i64: static_cast<int64_t*>(p)[i] = v; break;
    case DType::u8: static_cast<uint8_t*>(p)[i] = uint8_t(v); break;
    default: store_f(p, t, i, double(v));
  }
}

// Element i of dst (dst order) <- element map(i) of src, converting the dtype.
template <typename Map>
void convert_elements(const void* src, DType st, void* dst, DType dt, int64_t n, Map map) {
  if (st == dt) {
    const size_t es = dtype_size(st);
    auto s = static_cast<const char*>(src);
    auto d = static_cast<char*>(dst);
#pragma omp parallel for schedule(static) if (n > 1 << 16)
    for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * es, s + map(i) * es, es);
  } else if (!is_floating(st) && !is_floating(dt)) {
    for (int64_t i = 0; i < n; ++i) store_i(dst, dt, i, load_i(src, st, map(i)));
  } else {
#pragma omp parallel for schedule(static) if (n > 1 << 16)
    for (int64_t i = 0; i < n; ++i) store_f(dst, dt, i, load_f(src, st, map(i)));
  }
}

// Host copy with dtype and format conversion; both tensors on the CPU, same shape.
void host_copy(const Tensor& src, Tensor& dst) {
  const int64_t n = src.numel();
  if (src.format() == dst.format()) {
    if (src.dtype() == dst.dtype()) {
      std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
      return;
    }
    convert_elements(src.raw_data(), src.dtype(), dst.raw_data(), dst.dtype(), n, [](int64_t i) { return i; });
    return;
  }
  // Relayout of a 4-D tensor: for each destination offset, the source offset.
  const Shape& s = src.shape();
  const int64_t C = s[1], H = s[2], W = s[3];
  if (dst.format() == MemoryFormat::channels_last) {  // NCHW -> NHWC; dst index ((n*H+h)*W+w)*C+c
    convert_elements(src.raw_data(), src.dtype(), dst.raw_data(), dst.dtype(), n, [=](int64_t i) {
      const int64_t c = i % C, w = (i / C) % W, h = (i / (C * W)) % H, b = i / (C * W * H);
      return ((b * C + c) * H + h) * W + w;
    });
  } else {  // NHWC -> NCHW; dst index ((n*C+c)*H+h)*W+w
    convert_elements(src.raw_data(), src.dtype(), dst.raw_data(), dst.dtype(), n, [=](int64_t i) {
      const int64_t w = i % W, h = (i / W) % H, c = (i / (W * H)) % C, b = i / (W * H * C);
      return ((b * H + h) * W + w) * C + c;
    });
  }
}

// Same bytes, new storage on another device (dtype and format kept).
Tensor transfer(const Tensor& src, Device d) {
  // A host <-> device copy shows as its own op (Note [Profiler scopes] in engine/profiler.h).
  prof::OpScope scope(src.device().is_cpu() && d.is_cpu() ? "copy" : d.is_cpu() ? "copy_d2h" : "copy_h2d");
  if (scope.active()) scope.describe({&src}, {{0, 2.0 * double(src.nbytes())}, {}});
  Tensor out = Tensor::empty(src.shape(), src.dtype(), d, src.format());
  const Device sd = src.device();
  if (sd.is_cpu() && d.is_cpu()) {
    std::memcpy(out.raw_data(), src.raw_data(), src.nbytes());
  } else if (sd.is_cpu()) {
    cuda::memcpy(out.raw_data(), src.raw_data(), src.nbytes(), cuda::CopyKind::h2d, d.index, Stream::current(d).handle());
  } else if (d.is_cpu()) {
    cuda::memcpy(out.raw_data(), src.raw_data(), src.nbytes(), cuda::CopyKind::d2h, sd.index, Stream::current(sd).handle());
  } else {
    RT_CHECK(sd == d, "copy between two GPUs (", sd.str(), " -> ", d.str(), ") is not supported; go through the CPU");
    cuda::memcpy(out.raw_data(), src.raw_data(), src.nbytes(), cuda::CopyKind::d2d, d.index, Stream::current(d).handle());
  }
  return out;
}

}  // namespace

void Tensor::copy_(const Tensor& src) {
  RT_CHECK(src.shape() == shape(), "copy_: source shape ", shape_str(src.shape()), " differs from destination shape ",
           shape_str(shape()));
  // A copy, cast or relayout (to(dtype), to(format), clone) shows as its own op.
  prof::OpScope scope(src.format() != format() ? "relayout" : src.dtype() != dtype() ? "convert" : "copy");
  if (scope.active()) scope.describe({&src}, {{0, double(src.nbytes()) + double(nbytes())}, {}});
  if (src.device() == device() && src.dtype() == dtype() && src.format() == format()) {
    if (device().is_cpu()) {
      std::memcpy(raw_data(), src.raw_data(), nbytes());
    } else {
      cuda::memcpy(raw_data(), src.raw_data(), nbytes(), cuda::CopyKind::d2d, device().index,
                   Stream::current(device()).handle());
    }
    return;
  }
  // Within one GPU: the cast kernel for a dtype change, the transpose kernel for a format
  // change (both, through a temporary, when both change); no host round trip.
  if (src.device() == device() && device().is_cuda() &&
      (src.dtype() == dtype() || cuda::cast_supported(src.dtype(), dtype()))) {
    const auto stream = static_cast<cudaStream_t>(Stream::current(device()).handle());
    if (src.format() == format()) {
      cuda::cast(src.dtype(), dtype(), numel(), src.raw_data(), raw_data(), stream);
      return;
    }
    Tensor same_type = src.dtype() == dtype() ? src : src.to(dtype());
    const Shape& s = shape();
    const int64_t C = s[1], HW = s[2] * s[3];
    const bool to_nhwc = format() == MemoryFormat::channels_last;
    cuda::transpose_batched(dtype_size(dtype()), s[0], to_nhwc ? C : HW, to_nhwc ? HW : C, same_type.raw_data(),
                            raw_data(), stream);
    return;
  }
  // Otherwise convert on the host.
  Tensor s = src.device().is_cpu() ? src : transfer(src, Device::cpu());
  if (device().is_cpu()) {
    Tensor self = *this;
    host_copy(s, self);
    return;
  }
  Tensor staged = Tensor::empty(shape(), dtype(), Device::cpu(), format());
  host_copy(s, staged);
  cuda::memcpy(raw_data(), staged.raw_data(), nbytes(), cuda::CopyKind::h2d, device().index,
               Stream::current(device()).handle());
}

void Tensor::fill_(double value) {
  if (device().is_cuda()) {
    cuda::fill(raw_data(), dtype(), numel(), value, device().index, Stream::current(device()).handle());
    return;
  }
  const int64_t n = numel();
  void* p = raw_data();
  switch (dtype()) {
    case DType::f32: std::fill_n(static_cast<float*>(p), n, float(value)); break;
    case DType::f64: std::fill_n(static_cast<double*>(p), n, value); break;
    default:
      for (int64_t i = 0; i < n; ++i) store_f(p, dtype(), i, value);
  }
}

Tensor Tensor::to(Device d) const {
  if (device() == d) return *this;
  return transfer(*this, d);
}

Tensor Tensor::to(DType t) const {
  if (dtype() == t) return *this;
  Tensor out = empty(shape(), t, device(), format());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(MemoryFormat f) const {
  if (format() == f) return *this;
  RT_CHECK(ndim() == 4, "memory format ", format_name(f), " needs a 4-D tensor, got ", str());
  Tensor out = empty(shape(), dtype(), device(), f);
  out.copy_(*this);
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device(), format());
  out.copy_(*this);
  return out;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor h = to(Device::cpu()).to(MemoryFormat::contiguous).to(dtype_of<T>::value);
  const T* p = h.data<T>();
  return std::vector<T>(p, p + h.numel());
}
template std::vector<float> Tensor::to_vector() const;
template std::vector<double> Tensor::to_vector() const;
template std::vector<int32_t> Tensor::to_vector() const;
template std::vector<int64_t> Tensor::to_vector() const;
template std::vector<uint8_t> Tensor::to_vector() const;

double Tensor::item() const {
  RT_CHECK(numel() == 1, "item() needs a one-element tensor, got ", str());
  Tensor h = to(Device::cpu());
  return load_f(h.raw_data(), h.dtype(), 0);
}

// ---- views --------------------------------------------------------------------------

Tensor Tensor::view(const Shape& new_shape) const {
  Shape s = new_shape;
  int infer = -1;
  int64_t known = 1;  // of the given non-zero dims
  bool zero = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      RT_CHECK(infer < 0, "view: at most one dimension may be -1, got ", shape_str(new_shape));
      infer = int(i);
    } else {
      RT_CHECK(s[i] >= 0, "view: invalid dimension ", s[i], " in ", shape_str(new_shape));
      if (s[i] == 0) zero = true;
      else if (__builtin_mul_overflow(known, s[i], &known))
        RT_FAIL("view: shape ", shape_str(new_shape), " is too large: its element count does not fit in int64");
    }
  }
  if (zero) known = 0;
  if (infer >= 0) {
    RT_CHECK(known > 0 && numel() % known == 0, "view: cannot infer -1 in ", shape_str(new_shape), " for ",
             numel(), " elements");
    s[infer] = numel() / known;
  }
  RT_CHECK(shape_numel(s) == numel(), "view: shape ", shape_str(new_shape), " does not match ", numel(),
           " elements of ", str());
  const bool cl_pointwise = format() == MemoryFormat::channels_last && size(2) == 1 && size(3) == 1;
  RT_CHECK(format() == MemoryFormat::contiguous || cl_pointwise, "view of a channels_last tensor ", str(),
           " would reorder elements; call .contiguous() first");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->offset = impl_->offset;
  impl->shape = s;
  impl->dtype = dtype();
  impl->format = MemoryFormat::contiguous;
  return Tensor(std::move(impl));
}

Tensor Tensor::slice_batch(int64_t begin, int64_t end) const {
  RT_CHECK(ndim() >= 1, "slice_batch on a 0-D tensor");
  RT_CHECK(0 <= begin && begin <= end && end <= size(0), "slice_batch: [", begin, ", ", end,
           ") is not within dim 0 of size ", size(0));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->shape = shape();
  impl->shape[0] = end - begin;
  impl->offset = impl_->offset + begin * (numel() / std::max<int64_t>(size(0), 1));
  impl->dtype = dtype();
  impl->format = format();
  return Tensor(std::move(impl));
}

Tensor Tensor::subview(int64_t offset, const Shape& shape, MemoryFormat format) const {
  RT_CHECK(this->format() == MemoryFormat::contiguous, "subview of ", str(), ": needs a contiguous tensor");
  RT_CHECK(format == MemoryFormat::contiguous || shape.size() == 4, "subview: ", format_name(format),
           " needs a 4-D shape, got ", shape_str(shape));
  const int64_t n = shape_numel(shape);
  RT_CHECK(offset >= 0 && offset <= numel() && n <= numel() - offset, "subview: elements [", offset, ", ",
           offset + n, ") are not within the ", numel(), " of ", str());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->offset = impl_->offset + offset;
  impl->shape = shape;
  impl->dtype = dtype();
  impl->format = format;
  return Tensor(std::move(impl));
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->offset = impl_->offset;
  impl->shape = shape();
  impl->dtype = dtype();
  impl->format = format();
  return Tensor(std::move(impl));
}

// ---- argument checks ------------------------------------------------------------------

void check_defined(const Tensor& t, const char* op, const char* arg) {
  RT_CHECK(t.defined(), op, ": argument '", arg, "' is an undefined tensor");
}
void check_dtype(const Tensor& t, DType want, const char* op, const char* arg) {
  check_defined(t, op, arg);
  RT_CHECK(t.dtype() == want, op, ": argument '", arg, "' must be ", dtype_name(want), ", got ", t.str());
}
void check_float(const Tensor& t, const char* op, const char* arg) {
  check_defined(t, op, arg);
  RT_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64, op, ": argument '", arg,
           "' must be f32 or f64, got ", t.str());
}
void check_ndim(const Tensor& t, int want, const char* op, const char* arg) {
  check_defined(t, op, arg);
  RT_CHECK(t.ndim() == want, op, ": argument '", arg, "' must be ", want, "-D, got ", t.str());
}
void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  RT_CHECK(a.device() == b.device(), op, ": tensors on different devices: ", a.str(), " and ", b.str());
}
void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  RT_CHECK(a.dtype() == b.dtype(), op, ": tensors of different dtypes: ", a.str(), " and ", b.str());
}
void check_cpu_only(const Tensor& t, const char* op) {
  RT_CHECK(t.device().is_cpu(), op, " has no CUDA kernel yet (tensor ", t.str(),
           "); run it on the CPU");
}

void copy_async(const Tensor& dst, const Tensor& src, const Stream& s) {
  RT_CHECK(src.device().is_cpu() && src.is_pinned() && dst.device().is_cuda() && s.device() == dst.device(),
           "copy_async: expected a pinned CPU source and a CUDA destination on the stream's device, got ", src.str(),
           " -> ", dst.str(), " on ", s.device().str());
  RT_CHECK(src.shape() == dst.shape() && src.dtype() == dst.dtype() && src.format() == dst.format(),
           "copy_async: source ", src.str(), " and destination ", dst.str(), " differ in shape, dtype or format");
  cuda::memcpy_h2d_async(dst.raw_data(), src.raw_data(), src.nbytes(), dst.device().index, s.handle());
}

}  // namespace rt
