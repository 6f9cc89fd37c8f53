// Tensor: a typed, shaped view of reference-counted device storage, plus the autograd
// state of the value it holds.
//
// Shapes are always logical (N, C, H, W for images, like PyTorch); the memory format says
// how a 4-D tensor is laid out: contiguous (NCHW) or channels_last (NHWC). Views (reshape
// of a contiguous tensor, a batch slice) share storage and cost nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/device.h"
#include "base/dtype.h"
#include "base/error.h"

namespace rt {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);
// The element count of a shape. Shapes come from files and flags, so the product is
// checked: an rt::Error naming the shape when the product of its non-zero dims does not
// fit in int64 (checked whatever the order of the dims, zero or not: [0, 2^62, 2^62] is
// refused like [2^62, 2^62]).
int64_t shape_numel(const Shape& s);
// shape_numel(s) * dtype_size(t), the bytes of a tensor of that shape, or an rt::Error
// naming the shape when they do not fit in int64.
int64_t shape_nbytes(const Shape& s, DType t);

enum class MemoryFormat : uint8_t { contiguous, channels_last };
const char* format_name(MemoryFormat f);

struct Storage {
  Storage(size_t bytes, Device device);
  Storage(size_t bytes, Allocator& allocator);  // memory from a given allocator (pinned host)
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data = nullptr;
  size_t bytes = 0;
  Device device;
  Allocator* allocator = nullptr;
};

class Tensor;
struct Node;
using GradReadyHook = std::function<void(const Tensor& param)>;

struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<struct TensorImpl> grad;  // accumulated gradient of a leaf
  // Where a leaf's gradient is written (Note [Gradient buffers] in engine/autograd.h); null:
  // a fresh tensor per backward.
  std::shared_ptr<struct TensorImpl> grad_buffer;
  std::shared_ptr<Node> grad_fn;             // the op that produced this value (null for leaves)
  std::vector<GradReadyHook> ready_hooks;    // fired when this leaf's gradient is final
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  DType dtype = DType::f32;
  MemoryFormat format = MemoryFormat::contiguous;
  AutogradMeta autograd;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- creation -------------------------------------------------------------------
  // Throws rt::Error for a negative dim, a shape whose bytes overflow int64 (naming the
  // shape) and when the device is out of memory (rt::OutOfMemory).
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu(),
                      MemoryFormat format = MemoryFormat::contiguous);
  // A CPU tensor in page-locked memory (pinned_host_allocator()): the source of
  // asynchronous copies to a GPU. Throws without a CUDA device.
  static Tensor empty_pinned(const Shape& shape, DType dtype = DType::f32);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::cpu(),
                     MemoryFormat format = MemoryFormat::contiguous);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu(),
                      MemoryFormat format = MemoryFormat::contiguous) {
    return full(shape, 0.0, dtype, device, format);
  }
  // Copies `values` (given in logical, row-major NCHW order) into a new tensor.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = Device::cpu());
  static Tensor scalar(double v, DType dtype = DType::f32, Device device = Device::cpu()) {
    return full({}, v, dtype, device);
  }

  // ---- properties -----------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  int ndim() const { return int(impl().shape.size()); }
  int64_t size(int dim) const;  // negative dims count from the end
  int64_t numel() const { return shape_numel(impl().shape); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device; }
  MemoryFormat format() const { return impl().format; }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype()); }
  bool is_pinned() const { return impl().storage->allocator->pinned(); }
  std::string str() const;  // "f32[8, 3, 224, 224] channels_last cpu"

  // Pointer to the first element. Typed access checks the dtype.
  void* raw_data() const;
  template <typename T>
  T* data() const {
    RT_CHECK(dtype_of<T>::value == dtype(), "tensor holds ", dtype_name(dtype()), ", accessed as ",
             dtype_name(dtype_of<T>::value));
    return static_cast<T*>(raw_data());
  }

  // ---- host access (copies from the device when needed) --------------------------------
  // Values in logical (NCHW, row-major) order, converted to T.
  template <typename T>
  std::vector<T> to_vector() const;
  double item() const;  // a one-element tensor's value

  // ---- copies and views -----------------------------------------------------------
  Tensor to(Device d) const;            // same tensor if already there
  Tensor to(DType t) const;             // value conversion (round-to-nearest for bf16/f16)
  Tensor to(MemoryFormat f) const;      // relayout (4-D only); same tensor if already so
  Tensor clone() const;                 // deep copy, same format
  Tensor contiguous() const { return to(MemoryFormat::contiguous); }
  void copy_(const Tensor& src);        // this <- src (same shape; any dtype/device/format)
  void fill_(double value);

  // A view with a new shape (one dim may be -1). Needs a contiguous tensor (or a
  // channels_last one whose reshape keeps N and flattens C,H,W of a 1x1 image).
  // Not differentiable: use rt::reshape in models.
  Tensor view(const Shape& shape) const;
  Tensor slice_batch(int64_t begin, int64_t end) const;  // rows [begin, end) of dim 0; a view
  // A view of numel(shape) elements of this contiguous tensor's memory, from its element
  // `offset` (in memory order), laid out as `shape` in `format`: a parameter's slot in a
  // flat buffer. Not differentiable.
  Tensor subview(int64_t offset, const Shape& shape, MemoryFormat format = MemoryFormat::contiguous) const;

  // ---- autograd -------------------------------------------------------------------
  bool requires_grad() const { return impl().autograd.requires_grad; }
  Tensor& set_requires_grad(bool r);  // leaves only
  bool is_leaf() const { return impl().autograd.grad_fn == nullptr; }
  Tensor grad() const;                // undefined until a backward reached this leaf
  void set_grad(const Tensor& g);        // with a gradient buffer: copied into it
  void zero_grad() const;                 // drops the gradient (next backward writes it anew)
  // Gives this leaf a preallocated gradient buffer (same shape, dtype, device and format):
  // from now on backward writes the gradient there (Note [Gradient buffers]). A gradient
  // already held is copied in. An undefined `buffer` goes back to fresh tensors.
  void set_grad_buffer(const Tensor& buffer);
  Tensor grad_buffer() const;
  // Reverse-mode from this tensor. A non-scalar needs `seed` (the gradient of some scalar
  // with respect to this tensor). retain_graph keeps saved tensors for another backward.
  void backward(const Tensor& seed = Tensor(), bool retain_graph = false) const;
  // `hook(param)` runs once per backward, the moment this leaf's gradient is final.
  void register_grad_ready_hook(GradReadyHook hook);
  Tensor detach() const;              // same storage, no autograd history

  TensorImpl& impl() const {
    RT_CHECK(impl_, "use of an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Strides in elements of a tensor's logical dims for its memory format.
std::vector<int64_t> strides_of(const Shape& shape, MemoryFormat format);

// Argument checks with messages that name the op and the argument.
void check_defined(const Tensor& t, const char* op, const char* arg);
void check_dtype(const Tensor& t, DType want, const char* op, const char* arg);
void check_float(const Tensor& t, const char* op, const char* arg);  // f32 or f64
void check_ndim(const Tensor& t, int want, const char* op, const char* arg);
void check_same_device(const Tensor& a, const Tensor& b, const char* op);
void check_same_dtype(const Tensor& a, const Tensor& b, const char* op);
void check_cpu_only(const Tensor& t, const char* op);

class Stream;
// dst (CUDA) <- src (CPU, page-locked: Tensor::empty_pinned), same shape, dtype and format,
// queued on `s` without waiting. src must stay alive and unchanged until `s` has passed
// this point (record an Event after it); dst must not be used on another stream before
// that stream waits for such an event.
void copy_async(const Tensor& dst, const Tensor& src, const Stream& s);

}  // namespace rt
