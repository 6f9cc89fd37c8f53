#include "engine/profiler.h"

#include <nvtx3/nvToolsExt.h>

#include <mutex>
#include <unordered_map>

#include "engine/device.h"
#include "engine/tensor.h"

namespace rt::prof {
namespace detail {
std::atomic<bool> g_recording{false};
}

namespace {

struct Recorder {
  std::mutex mu;
  std::vector<Event> events;
  OpHooks* hooks = nullptr;
  std::atomic<int64_t> step{-1};
  std::atomic<uint64_t> next_id{1};
};
Recorder& recorder() {
  static Recorder* r = new Recorder;  // never destroyed: scopes may close during static teardown
  return *r;
}

struct Modules {
  std::mutex mu;
  std::unordered_map<const void*, std::unique_ptr<std::string>> paths;  // stable string addresses
};
Modules& modules() {
  static Modules* m = new Modules;
  return *m;
}

struct Threads {
  std::mutex mu;
  std::vector<std::string> names;
};
Threads& threads() {
  static Threads* t = new Threads;
  return *t;
}

thread_local OpScope* t_op = nullptr;                     // innermost active op scope
thread_local std::vector<const std::string*> t_paths;      // module paths, outermost first
thread_local std::string t_phase;                          // the innermost phase scope's name
thread_local std::unordered_map<const char*, std::string> t_backward_names;  // "conv2d" -> "conv2d backward"

const char* backward_name(const char* name) {
  auto it = t_backward_names.find(name);
  if (it == t_backward_names.end()) it = t_backward_names.emplace(name, std::string(name) + " backward").first;
  return it->second.c_str();
}

// Memory counters after a top-level op: every allocator in use, when its bytes changed.
void sample_memory(int64_t t) {
  struct Last {
    int64_t current = -1, reserved = -1;
  };
  static const int gpus = cuda_device_count();
  thread_local Last last[2];
  auto sample = [&](Device d, Last& l, const char* name) {
    const AllocatorStats s = allocator_for(d).stats();
    if (s.current_bytes == l.current && s.reserved_bytes == l.reserved) return;
    l = {s.current_bytes, s.reserved_bytes};
    Event e;
    e.kind = EventKind::counter;
    e.name = name;
    e.cost.bytes = double(s.current_bytes);
    e.cost.flops = double(s.reserved_bytes);  // counters: flops holds the reserved bytes
    e.begin_ns = e.end_ns = t;
    add_event(std::move(e));
  };
  sample(Device::cpu(), last[0], "memory cpu");
  if (gpus > 0) sample(Device::cuda(0), last[1], "memory cuda:0");
}

}  // namespace

const char* kind_name(EventKind k) {
  switch (k) {
    case EventKind::op: return "op";
    case EventKind::module: return "module";
    case EventKind::step: return "step";
    case EventKind::phase: return "phase";
    case EventKind::range: return "range";
    case EventKind::kernel: return "kernel";
    case EventKind::memcpy: return "memcpy";
    case EventKind::memset: return "memset";
    case EventKind::counter: return "counter";
  }
  return "?";
}

void start(OpHooks* hooks) {
  Recorder& r = recorder();
  {
    std::lock_guard<std::mutex> g(r.mu);
    r.events.clear();
    r.events.reserve(size_t(1) << 14);  // a few steps of a small model without regrowing
    r.hooks = hooks;
  }
  detail::g_recording.store(true, std::memory_order_release);
}

std::vector<Event> stop() {
  detail::g_recording.store(false, std::memory_order_release);
  Recorder& r = recorder();
  std::lock_guard<std::mutex> g(r.mu);
  r.hooks = nullptr;
  return std::move(r.events);
}

void add_event(Event e) {
  if (!recording()) return;
  Recorder& r = recorder();
  if (e.step < 0) e.step = r.step.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> g(r.mu);
  r.events.push_back(std::move(e));
}

void set_step(int64_t step) { recorder().step.store(step, std::memory_order_relaxed); }

uint32_t thread_id(const char* name) {
  thread_local int64_t id = -1;
  if (id >= 0 && !name) return uint32_t(id);
  Threads& t = threads();
  std::lock_guard<std::mutex> g(t.mu);
  if (id < 0) {
    id = int64_t(t.names.size());
    t.names.push_back(name ? name : "thread " + std::to_string(id));
  } else if (name) {
    t.names[size_t(id)] = name;
  }
  return uint32_t(id);
}

std::vector<std::string> thread_names() {
  Threads& t = threads();
  std::lock_guard<std::mutex> g(t.mu);
  return t.names;
}

void register_module(const void* module, const std::string& path) {
  Modules& m = modules();
  std::lock_guard<std::mutex> g(m.mu);
  m.paths[module] = std::make_unique<std::string>(path.empty() ? "model" : path);
}

void unregister_modules() {
  Modules& m = modules();
  std::lock_guard<std::mutex> g(m.mu);
  m.paths.clear();
}

std::string describe_tensor(const Tensor& t) {
  if (!t.defined()) return "-";
  std::string s = shape_str(t.shape()) + " " + dtype_name(t.dtype());
  if (t.ndim() == 4 && t.format() == MemoryFormat::channels_last) s += " NHWC";
  return s;
}

// ---- op scopes ----------------------------------------------------------------------------

OpScope::OpScope(const char* name) noexcept : name_(name) { open(name); }

OpScope::OpScope(const char* name, const BackwardInfo* info) noexcept : name_(name) {
  open(backward_name(name));
  if (!active_) return;
  ev_.backward = true;
  if (info) {
    ev_.path = info->path;
    ev_.detail = info->detail;
    ev_.cost = info->cost;
  }
}

void OpScope::open(const char* nvtx_name) noexcept {
  nvtxRangePushA(nvtx_name);
  nvtx_ = true;
  if (!recording()) return;
  active_ = true;
  parent_ = t_op;
  t_op = this;
  ev_.kind = EventKind::op;
  ev_.name = name_;
  if (!t_paths.empty()) ev_.path = *t_paths.back();
  else if (parent_) ev_.path = parent_->ev_.path;  // inside a backward: the outer op's layer
  ev_.backward = parent_ && parent_->ev_.backward;
  ev_.phase = t_phase;
  ev_.tid = thread_id();
  ev_.id = recorder().next_id.fetch_add(1, std::memory_order_relaxed);
  if (OpHooks* h = recorder().hooks) h->op_begin(ev_.id);
  ev_.begin_ns = now_ns();
}

void OpScope::describe(std::initializer_list<const Tensor*> inputs, const OpCost& cost) {
  if (!active_) return;
  for (const Tensor* t : inputs) {
    if (!ev_.detail.empty()) ev_.detail += ", ";
    ev_.detail += t ? describe_tensor(*t) : "-";
  }
  ev_.cost = cost.forward;
  backward_cost_ = cost.backward;
}

OpScope::~OpScope() {
  if (active_) {
    ev_.end_ns = now_ns();
    if (OpHooks* h = recorder().hooks) h->op_end(ev_.id);
    if (parent_) parent_->ev_.child_ns += ev_.end_ns - ev_.begin_ns;
    t_op = parent_;
    const bool top = parent_ == nullptr;
    const int64_t end = ev_.end_ns;
    add_event(std::move(ev_));
    if (top) sample_memory(end);
  }
  if (nvtx_) nvtxRangePop();
}

std::shared_ptr<const BackwardInfo> current_backward_info() {
  const OpScope* s = t_op;
  if (!s || !recording()) return nullptr;
  auto info = std::make_shared<BackwardInfo>();
  info->name = s->name_;
  info->path = s->ev_.path;
  info->detail = s->ev_.detail;
  info->cost = s->backward_cost_;
  return info;
}

// ---- module and range scopes --------------------------------------------------------------

ModuleScope::ModuleScope(const void* module) noexcept {
  {
    Modules& m = modules();
    std::lock_guard<std::mutex> g(m.mu);
    const auto it = m.paths.find(module);
    if (it != m.paths.end()) path_ = it->second.get();
  }
  if (!path_) return;  // a module outside every registered model: no range of its own
  nvtxRangePushA(path_->c_str());
  t_paths.push_back(path_);
  if (recording()) begin_ns_ = now_ns();
}

ModuleScope::~ModuleScope() {
  if (!path_) return;
  t_paths.pop_back();
  nvtxRangePop();
  if (begin_ns_ == 0 || !recording()) return;
  Event e;
  e.kind = EventKind::module;
  e.name = *path_;
  e.begin_ns = begin_ns_;
  e.end_ns = now_ns();
  e.tid = thread_id();
  add_event(std::move(e));
}

RangeScope::RangeScope(EventKind kind, std::string name) noexcept : kind_(kind), name_(std::move(name)) {
  nvtxRangePushA(name_.c_str());
  if (kind_ == EventKind::phase) {
    prev_phase_ = std::move(t_phase);
    t_phase = name_;
  }
  if (recording()) {
    active_ = true;
    begin_ns_ = now_ns();
  }
}

RangeScope::~RangeScope() {
  nvtxRangePop();
  if (kind_ == EventKind::phase) t_phase = std::move(prev_phase_);
  if (!active_ || !recording()) return;
  Event e;
  e.kind = kind_;
  e.name = std::move(name_);
  e.begin_ns = begin_ns_;
  e.end_ns = now_ns();
  e.tid = thread_id();
  add_event(std::move(e));
}

}  // namespace rt::prof
