// The cuDNN fake's descriptor registry and attribute values (cudnn_desc.h).
#include "cuda_emu/cudnn_desc.h"

#include <mutex>
#include <unordered_set>

namespace rt::emu::cudnn {
namespace {

struct Registry {
  std::mutex mu;
  std::unordered_set<Descriptor*> live;
};

Registry& registry() {
  static auto* r = new Registry();  // leaked: descriptors may be destroyed from static destructors
  return *r;
}

}  // namespace

std::vector<int64_t> Value::i64s() const {
  std::vector<int64_t> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[size_t(i)] = at<int64_t>(i);
  return v;
}

double Value::real() const { return type == CUDNN_TYPE_DOUBLE ? at<double>(0) : double(at<float>(0)); }

Value Value::of_descs(std::vector<NodePtr> v) {
  Value r;
  r.type = CUDNN_TYPE_BACKEND_DESCRIPTOR;
  r.count = int64_t(v.size());
  r.descs = std::move(v);
  return r;
}

Descriptor* new_descriptor(cudnnBackendDescriptorType_t type) {
  auto* d = new Descriptor{type, {}, nullptr};
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  r.live.insert(d);
  return d;
}

bool delete_descriptor(cudnnBackendDescriptor_t p) {
  auto* d = static_cast<Descriptor*>(p);
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> g(r.mu);
    if (!r.live.erase(d)) return false;
  }
  delete d;  // its Node lives on in whatever copied it (Note [Descriptors are copied])
  return true;
}

Descriptor* find_descriptor(cudnnBackendDescriptor_t p) {
  auto* d = static_cast<Descriptor*>(p);
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  return r.live.count(d) ? d : nullptr;
}

}  // namespace rt::emu::cudnn
