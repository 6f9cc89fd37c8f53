// Small RAII wrappers over cuDNN 9's backend (graph) API, for the .cu files only (the engine
// never includes this). Every status goes through CUDNN_CHECK: file:line, the call,
// cudnnGetErrorString and cuDNN's last error message.
//
//   Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
//   d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims);  // a std::vector or one value
//   d.finalize();
#pragma once

#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"

namespace rt::cuda::detail {

inline std::string cudnn_last_error() {
  char buf[512] = {0};
  cudnnGetLastErrorString(buf, sizeof(buf));
  return buf;
}

}  // namespace rt::cuda::detail

#define CUDNN_CHECK(call)                                                                           \
  do {                                                                                              \
    cudnnStatus_t rt_st_ = (call);                                                                  \
    if (rt_st_ != CUDNN_STATUS_SUCCESS)                                                             \
      RT_FAIL(__FILE__, ":", __LINE__, ": ", #call, " failed: ", cudnnGetErrorString(rt_st_), " (", \
              ::rt::cuda::detail::cudnn_last_error(), ")");                                         \
  } while (0)

// For destructors: report, never throw.
#define CUDNN_WARN(call)                                                                                 \
  do {                                                                                                   \
    cudnnStatus_t rt_st_ = (call);                                                                       \
    if (rt_st_ != CUDNN_STATUS_SUCCESS)                                                                  \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudnnGetErrorString(rt_st_)); \
  } while (0)

namespace rt::cuda::detail {

// One backend descriptor, owned. Move-only; the destructor never throws.
class Desc {
 public:
  Desc() = default;
  explicit Desc(cudnnBackendDescriptorType_t type) { CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_)); }
  ~Desc() { reset(); }
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc& operator=(Desc&& o) noexcept {
    if (this != &o) {
      reset();
      d_ = std::exchange(o.d_, nullptr);
    }
    return *this;
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  // The address cuDNN reads a descriptor-valued attribute from.
  const cudnnBackendDescriptor_t* ptr() const { return &d_; }

  template <typename V>
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const std::vector<V>& v) {
    CUDNN_CHECK(cudnnBackendSetAttribute(d_, name, type, int64_t(v.size()), v.data()));
    return *this;
  }
  template <typename V>
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const V& v) {
    CUDNN_CHECK(cudnnBackendSetAttribute(d_, name, type, 1, &v));
    return *this;
  }
  Desc& set(cudnnBackendAttributeName_t name, const Desc& other) {
    CUDNN_CHECK(cudnnBackendSetAttribute(d_, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, other.ptr()));
    return *this;
  }
  void finalize() { CUDNN_CHECK(cudnnBackendFinalize(d_)); }
  // For candidates that may legitimately be rejected (an engine config that does not fit).
  cudnnStatus_t try_finalize() { return cudnnBackendFinalize(d_); }

 private:
  void reset() noexcept {
    if (d_) CUDNN_WARN(cudnnBackendDestroyDescriptor(d_));
    d_ = nullptr;
  }
  cudnnBackendDescriptor_t d_ = nullptr;
};

// The values of the array attribute `name` of `d` (it holds at most `max`).
template <typename T>
std::vector<T> get_array(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                         cudnnBackendAttributeType_t type, int64_t max) {
  std::vector<T> v(static_cast<size_t>(max));
  int64_t n = 0;
  CUDNN_CHECK(cudnnBackendGetAttribute(d, name, type, max, &n, v.data()));
  v.resize(size_t(std::min(n, max)));
  return v;
}

}  // namespace rt::cuda::detail
