// The profiler's recording side: scopes that ops, modules and the training loop open, and
// the events they leave while a profile is being recorded. Reports, traces and the GPU's
// kernel records are built from these events elsewhere (profile/).
//
// Note [Profiler scopes]
// Every op opens an OpScope (RT_PROFILE_OP in the op's file, with the op's FLOP and byte
// formula), every layer a ModuleScope, the training loop a RangeScope per step and per
// phase (forward, backward, optimizer, data). Each scope
//   - always pushes an NVTX range (nvtx3, header-only): without a tool attached that is an
//     indirect call to a no-op; under `nsys profile` the model's structure shows;
//   - only while recording() (one relaxed atomic load otherwise) times itself on the
//     steady clock and appends an Event when it closes.
// Op scopes nest (an op that calls another op): the inner one's time is subtracted from
// the outer one's self time, so self times add up without counting anything twice.
//
// Note [Backward attribution]
// The backward of an op runs long after its forward scope closed. While recording, record()
// (engine/autograd.h) keeps the op's name, module path, input description and backward cost
// on the tape node, and backward() opens a BackwardScope with them around the node's
// closure: the backward work is attributed to the layer and op that caused it
// (`layer3.1.conv2`, `conv2d` backward).
//
// Note [GPU correlation]
// A GPU tracer (profile/cupti_tracer.h) installs OpHooks; each op scope then pushes its
// event id as CUPTI's external correlation id, so the kernels the op launched (including
// cuDNN's and cuBLAS's own) are linked to it by id.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace rt {
class Tensor;
}

namespace rt::prof {

// Work of one op call: floating-point operations (a multiply-add is 2) and bytes moved to
// and from memory assuming each input and output is read or written once.
struct Cost {
  double flops = 0, bytes = 0;
};
struct OpCost {
  Cost forward, backward;
};

enum class EventKind : uint8_t {
  op,      // an op's forward, or its backward (backward = true)
  module,  // a layer's forward
  step,    // one training (or evaluation) step
  phase,   // forward, backward, optimizer, data, ... within a step
  range,   // any other host range (a loader thread's batch, a bucket's all-reduce)
  kernel,  // a GPU kernel (CUPTI)
  memcpy,  // a GPU copy (CUPTI)
  memset,  // a GPU memset (CUPTI)
  counter, // a memory counter sample (value in `cost.bytes`)
};
const char* kind_name(EventKind k);

struct Event {
  EventKind kind = EventKind::range;
  bool backward = false;  // ops: the backward of `name`
  std::string name;       // op ("conv2d"), module path, "step 12", "forward", kernel name
  std::string path;       // ops: the module path they ran in ("layer3.1.conv2"); "" outside
  std::string detail;     // ops: inputs "[8,64,56,56] f32 NHWC, [64,64,3,3] f32"; GPU: stream
  std::string phase;      // ops: the phase they ran in ("forward", "optimizer"; "" outside any)
  Cost cost;
  int64_t begin_ns = 0, end_ns = 0;  // steady clock (GPU events converted to it)
  int64_t child_ns = 0;              // ops: time inside nested op scopes
  uint64_t id = 0;                   // ops: unique; GPU events: the op id they belong to (0: none)
  int64_t step = -1;                 // the step the event fell in (-1: none)
  uint32_t tid = 0;                  // host events: thread (thread_names); GPU: device
  uint32_t stream = 0;               // GPU events: stream id (CUPTI's)
  int64_t self_ns() const { return end_ns - begin_ns - child_ns; }
};

// Hooks a GPU tracer installs (Note [GPU correlation]); called on the op's thread.
struct OpHooks {
  virtual ~OpHooks() = default;
  virtual void op_begin(uint64_t id) = 0;
  virtual void op_end(uint64_t id) = 0;
};

namespace detail {
extern std::atomic<bool> g_recording;
}

// Whether a profile is being recorded. The scopes' fast path.
inline bool recording() { return detail::g_recording.load(std::memory_order_relaxed); }

// Nanoseconds on the profiler's clock (std::chrono::steady_clock).
inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Starts recording (clears earlier events). `hooks` (may be null) see every op scope.
void start(OpHooks* hooks = nullptr);
// Stops recording and returns the events, in the order their scopes closed.
std::vector<Event> stop();
// Appends an event made elsewhere (GPU records, a bucket's all-reduce); only while recording.
void add_event(Event e);
// The step events fall in from now on (-1: between steps).
void set_step(int64_t step);

// Names the calling thread in traces ("main", "loader 0", "communication"); returns its id.
uint32_t thread_id(const char* name = nullptr);
// Every named thread: index = id.
std::vector<std::string> thread_names();

// Module paths (Note [Profiler scopes]): path of each module object, registered once
// (nn::name_modules_for_profiling registers a model's tree).
void register_module(const void* module, const std::string& path);
void unregister_modules();

struct BackwardInfo;
// The innermost active op scope's backward info, or null (not recording, no scope).
std::shared_ptr<const BackwardInfo> current_backward_info();

class OpScope {
 public:
  explicit OpScope(const char* name) noexcept;
  // The backward of an op (BackwardScope): NVTX "<name> backward"; `info` may be null.
  OpScope(const char* name, const BackwardInfo* info) noexcept;
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;
  bool active() const { return active_; }
  // While active: the inputs (shapes, dtypes, layouts) and the op's cost. The backward cost
  // goes to the tape node that record() makes inside this scope.
  void describe(std::initializer_list<const Tensor*> inputs, const OpCost& cost);

 private:
  friend std::shared_ptr<const BackwardInfo> current_backward_info();
  void open(const char* nvtx_name) noexcept;
  const char* name_;
  bool active_ = false;
  bool nvtx_ = false;
  OpScope* parent_ = nullptr;
  Event ev_;
  Cost backward_cost_;
};

// What a tape node keeps for its backward (Note [Backward attribution]).
struct BackwardInfo {
  std::string name, path, detail;
  Cost cost;
};
// Around a tape node's backward closure: BackwardScope s(node->name, info).
using BackwardScope = OpScope;  // OpScope(name, info)

// A layer's forward: the module path for the ops inside it.
class ModuleScope {
 public:
  explicit ModuleScope(const void* module) noexcept;
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

 private:
  const std::string* path_ = nullptr;
  int64_t begin_ns_ = 0;
};

// A step, a phase, or any named host range.
// A phase (kind phase) also names the phase of the ops inside it on this thread.
class RangeScope {
 public:
  RangeScope(EventKind kind, std::string name) noexcept;
  ~RangeScope();
  RangeScope(const RangeScope&) = delete;
  RangeScope& operator=(const RangeScope&) = delete;

 private:
  EventKind kind_;
  std::string name_;
  std::string prev_phase_;
  int64_t begin_ns_ = 0;
  bool active_ = false;
};

// "[8,64,56,56] f32 NHWC": a tensor as op descriptions show it ("-" for undefined).
std::string describe_tensor(const Tensor& t);

}  // namespace rt::prof

// Opens the op's scope (Note [Profiler scopes]) for the rest of the enclosing block:
// RT_PROFILE_OP("conv2d", conv2d_cost(...), &x, &weight). `cost` (an OpCost expression) and
// the inputs (Tensor pointers) are evaluated only while recording.
#define RT_PROFILE_OP(name, cost, ...)            \
  ::rt::prof::OpScope rt_prof_op_scope_(name);    \
  if (rt_prof_op_scope_.active()) rt_prof_op_scope_.describe({__VA_ARGS__}, cost)
